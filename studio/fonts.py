"""Can this machine draw the text the Studio shows? Chinese, Japanese and Korean need fonts of their own.

A bare Linux (a Debian server image, a container) often has no CJK font at all: Qt then draws every such
character as an empty box, and a thread written in Chinese looks like damaged data. The Studio cannot
ship the fonts (tens of megabytes, and the system's own are better), so it says which package to
install as soon as it shows text that no installed font can draw. ``undrawable`` is pure given the
font lookup (``has_font``), so it is tested without depending on the fonts of the machine.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Callable, Iterable

from PySide6.QtGui import QFontDatabase

_WS = QFontDatabase.WritingSystem

# (script, its characters, the writing systems any of whose fonts draws them). Han characters are drawn
# by Chinese and Japanese fonts alike; kana only by Japanese ones; Hangul only by Korean ones.
SCRIPTS: tuple[tuple[str, re.Pattern[str], tuple[QFontDatabase.WritingSystem, ...]], ...] = (
    ("Chinese", re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]"),
     (_WS.SimplifiedChinese, _WS.TraditionalChinese, _WS.Japanese)),
    ("Japanese", re.compile("[\u3040-\u30ff]"), (_WS.Japanese,)),
    ("Korean", re.compile("[\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]"), (_WS.Korean,)),
)


SAMPLES = "上海 ひらがな 한국어"  # a character of each script, for ``machine_note``


@lru_cache(maxsize=None)
def installed_font_for(system: QFontDatabase.WritingSystem) -> bool:
    """Whether any installed font draws ``system`` (Qt's font database; needs a QGuiApplication)."""
    return bool(QFontDatabase.families(system))


def undrawable(texts: Iterable[str], has_font: Callable[[QFontDatabase.WritingSystem], bool] | None = None,
               ) -> list[str]:
    """The scripts (in ``SCRIPTS`` order) that occur in ``texts`` and that no installed font draws
    (``has_font``: default ``installed_font_for``)."""
    lookup = has_font or installed_font_for
    missing = [(name, pattern) for name, pattern, systems in SCRIPTS if not any(lookup(s) for s in systems)]
    if not missing:
        return []
    found: list[str] = []
    for text in texts:
        for name, pattern in missing:
            if name not in found and pattern.search(text):
                found.append(name)
        if len(found) == len(missing):
            break
    return [name for name, _p, _s in SCRIPTS if name in found]


def _names(scripts: list[str]) -> str:
    return ", ".join(scripts[:-1]) + (" and " if len(scripts) > 1 else "") + scripts[-1]


def machine_note(has_font: Callable[[QFontDatabase.WritingSystem], bool] | None = None) -> str:
    """For ``--self-check``: which of the scripts this machine has no font for, and what to install ("" if none)."""
    missing = undrawable([SAMPLES], has_font)
    if not missing:
        return ""
    return (f"no font here draws {_names(missing)} text (it would show as empty boxes; Debian/Ubuntu: "
            "sudo apt-get install fonts-noto-cjk)")


def notice(scripts: list[str]) -> str:
    """What the window says when it shows text of ``scripts`` that no installed font draws."""
    names = _names(scripts)
    return (f"No font on this machine can draw {names} text, so it shows as empty boxes (the data itself is "
            "fine). Install a CJK font and restart the Studio: Debian/Ubuntu: sudo apt-get install "
            "fonts-noto-cjk; Fedora: sudo dnf install google-noto-sans-cjk-fonts.")  # the banner shows plain text


__all__ = ["SAMPLES", "SCRIPTS", "installed_font_for", "machine_note", "notice", "undrawable"]
