"""What the engine writes into a prompt never depends on the process's locale.

``strftime`` / ``strptime`` read month, weekday and AM/PM names from ``LC_TIME``, and Qt sets the locale
from the environment when the Studio starts (``setlocale(LC_ALL, "")`` on Unix). A German desktop's Studio
then previewed "Sa 05 Dez 2026" in a recall block where the agent process had sent "Sat 05 Dec 2026", could
not read back "Date: Dec 5, 2026" in an observation log, and Replay's rebuild of such a turn differed from
what was recorded (Mastra's own recall block has the locale's month: the quirk not to copy). ``core/`` uses
``core.timeutil``'s English names instead; numeric directives stay allowed.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOCALE_DIRECTIVES = re.compile(r"%[aAbBpcxXh]")


def _calls(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("strftime",
                                                                                                   "strptime"):
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and LOCALE_DIRECTIVES.search(arg.value):
                    found.append((node.lineno, arg.value))
    return found


def test_the_engine_formats_and_reads_dates_without_the_locale():
    offenders = [f"{path.relative_to(ROOT)}:{line}: {fmt!r}" for path in sorted((ROOT / "core").rglob("*.py"))
                 for line, fmt in _calls(path)]
    assert offenders == [], "locale-dependent date directives (use core.timeutil's month/weekday names):\n" + \
        "\n".join(offenders)
