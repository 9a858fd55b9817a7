"""Light and dark themes: a QPalette plus a small style sheet from ``resources/themes``."""

from __future__ import annotations

import re

from PySide6.QtGui import QColor, QFont, QPalette
from PySide6.QtWidgets import QApplication, QWidget

from studio.assets import resources_dir

THEMES_DIR = resources_dir() / "themes"
THEMES = ("dark", "light")

_PALETTES = {
    "dark": {
        "Window": "#1e2127", "WindowText": "#d7dae0", "Base": "#181a1f", "AlternateBase": "#23272e",
        "Text": "#d7dae0", "Button": "#2b3038", "ButtonText": "#d7dae0", "Highlight": "#2f4a6e",
        "HighlightedText": "#ffffff", "ToolTipBase": "#2b3038", "ToolTipText": "#d7dae0",
        "PlaceholderText": "#9198a1", "Link": "#6cb6ff", "Mid": "#3a3f4b", "Dark": "#121417",
    },
    "light": {
        "Window": "#f5f6f8", "WindowText": "#1f2328", "Base": "#ffffff", "AlternateBase": "#f0f3f6",
        "Text": "#1f2328", "Button": "#eceff3", "ButtonText": "#1f2328", "Highlight": "#cfe2ff",
        "HighlightedText": "#0b1f3a", "ToolTipBase": "#ffffff", "ToolTipText": "#1f2328",
        "PlaceholderText": "#636c76", "Link": "#0969da", "Mid": "#d0d7de", "Dark": "#afb8c1",
    },
}


# Text that says something went wrong or needs care: ``set_tone`` marks a label, and each theme's style
# sheet colours it (``QLabel[tone="error"]``) with these, so the colour follows a change of theme. Each
# reaches WCAG AA (4.5:1) on the theme's window, base and alternate-base colours, as the text colours of
# ``_PALETTES`` do (a red and an amber for the dark theme only were 3.4:1 and 2.1:1 on the light one).
TONES = {
    "dark": {"error": "#f47067", "warning": "#d9a441"},
    "light": {"error": "#cf222e", "warning": "#8a5a00"},
}


def set_tone(widget: QWidget, tone: str | None) -> None:
    """Show ``widget``'s text as an error or a warning (None: as usual)."""
    widget.setProperty("tone", tone or "")
    widget.style().unpolish(widget)
    widget.style().polish(widget)


AA_BODY_TEXT = 4.5  # WCAG 2 AA, body text
AA_GRAPHICS = 3.0  # WCAG 2.1 AA, a graphical object that carries meaning (a priority mark)


def _luminance(colour: QColor) -> float:
    def channel(value: float) -> float:
        return value / 12.92 if value <= 0.03928 else ((value + 0.055) / 1.055) ** 2.4

    return 0.2126 * channel(colour.redF()) + 0.7152 * channel(colour.greenF()) + 0.0722 * channel(colour.blueF())


def contrast(a: QColor, b: QColor) -> float:
    """WCAG 2's contrast ratio of two opaque colours (1 to 21)."""
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def readable(colour: QColor, *backgrounds: QColor, ratio: float = AA_BODY_TEXT) -> QColor:
    """``colour``, or the nearest shade of it (towards black on a light background, white on a dark one)
    with at least ``ratio`` against each of ``backgrounds``: a table's state colours (a red, an amber)
    are chosen once for both themes, and the amber read at 2.2:1 on the light theme's white."""
    if not backgrounds or all(contrast(colour, bg) >= ratio for bg in backgrounds):
        return colour
    target = QColor("#000000") if sum(_luminance(bg) for bg in backgrounds) / len(backgrounds) > 0.18 \
        else QColor("#ffffff")
    shade = QColor(colour)
    for step in range(1, 21):
        mix = step / 20
        shade = QColor.fromRgbF(colour.redF() + (target.redF() - colour.redF()) * mix,
                                colour.greenF() + (target.greenF() - colour.greenF()) * mix,
                                colour.blueF() + (target.blueF() - colour.blueF()) * mix)
        if all(contrast(shade, bg) >= ratio for bg in backgrounds):
            break
    return shade


_HTML_COLOUR = re.compile(r"(?<![-\w])(color\s*:\s*)(#[0-9a-fA-F]{6})\b")  # (not background-color)


def readable_html(html: str, widget: QWidget) -> str:
    """``html`` with each ``color:#rrggbb`` it sets shaded to read at 4.5:1 on ``widget``'s background
    (``readable`` against its Base and Window colours): the logic modules write one colour for both
    themes (a red of 3.4:1 on the light theme's white), and the widget knows which theme it shows."""
    pal = widget.palette()
    backgrounds = (pal.color(QPalette.ColorRole.Base), pal.color(QPalette.ColorRole.Window))
    shades: dict[str, str] = {}

    def shade(found: re.Match[str]) -> str:
        hex_colour = found.group(2).lower()
        if hex_colour not in shades:
            shades[hex_colour] = readable(QColor(hex_colour), *backgrounds).name()
        return found.group(1) + shades[hex_colour]

    return _HTML_COLOUR.sub(shade, html)


def palette(name: str) -> QPalette:
    pal = QPalette()
    for role_name, colour in _PALETTES[name].items():
        role = getattr(QPalette.ColorRole, role_name)
        pal.setColor(role, QColor(colour))
        if role_name in ("Text", "WindowText", "ButtonText"):
            disabled = QColor(colour)
            disabled.setAlpha(110)
            pal.setColor(QPalette.ColorGroup.Disabled, role, disabled)
    return pal


def apply_theme(app: QApplication, name: str) -> str:
    name = name if name in THEMES else "dark"
    app.setStyle("Fusion")
    app.setPalette(palette(name))
    font = QFont(app.font())
    if font.pointSizeF() < 10:
        font.setPointSizeF(10)
    app.setFont(font)
    qss = THEMES_DIR / f"{name}.qss"
    app.setStyleSheet(qss.read_text(encoding="utf-8") if qss.exists() else "")
    app.setProperty("studioTheme", name)
    return name


def current_theme(app: QApplication) -> str:
    value = app.property("studioTheme")
    return value if value in THEMES else "dark"
