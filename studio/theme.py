"""Light and dark themes: a QPalette plus a small style sheet from ``resources/themes``."""

from __future__ import annotations

from PySide6.QtGui import QColor, QFont, QPalette
from PySide6.QtWidgets import QApplication

from studio.assets import resources_dir

THEMES_DIR = resources_dir() / "themes"
THEMES = ("dark", "light")

_PALETTES = {
    "dark": {
        "Window": "#1e2127", "WindowText": "#d7dae0", "Base": "#181a1f", "AlternateBase": "#23272e",
        "Text": "#d7dae0", "Button": "#2b3038", "ButtonText": "#d7dae0", "Highlight": "#2f4a6e",
        "HighlightedText": "#ffffff", "ToolTipBase": "#2b3038", "ToolTipText": "#d7dae0",
        "PlaceholderText": "#7d8590", "Link": "#6cb6ff", "Mid": "#3a3f4b", "Dark": "#121417",
    },
    "light": {
        "Window": "#f5f6f8", "WindowText": "#1f2328", "Base": "#ffffff", "AlternateBase": "#f0f3f6",
        "Text": "#1f2328", "Button": "#eceff3", "ButtonText": "#1f2328", "Highlight": "#cfe2ff",
        "HighlightedText": "#0b1f3a", "ToolTipBase": "#ffffff", "ToolTipText": "#1f2328",
        "PlaceholderText": "#6e7781", "Link": "#0969da", "Mid": "#d0d7de", "Dark": "#afb8c1",
    },
}


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
