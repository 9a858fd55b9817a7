"""The app's identity on the desktop: name, icon, desktop-file name and version, and Help > About."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QSize
from PySide6.QtWidgets import QApplication, QMessageBox

from core.version import __version__
from studio.app import app_icon, make_app
from studio.assets import APP_ID, ICON_SIZES, icon_files, resources_dir


def test_application_carries_name_icon_desktop_file_and_version(qapp: QApplication) -> None:
    app = make_app()
    assert app is qapp
    assert app.applicationName() == "Memory Studio"
    assert app.applicationDisplayName() == "Memory Studio"
    assert app.desktopFileName() == APP_ID  # Wayland app id: the task bar finds memory-studio.desktop by it
    assert app.applicationVersion() == __version__
    icon = app.windowIcon()
    assert not icon.isNull()
    assert {s.width() for s in icon.availableSizes()} == set(ICON_SIZES)


def test_icon_renders_at_task_bar_size(qapp: QApplication) -> None:
    image = app_icon().pixmap(QSize(48, 48)).toImage()
    assert (image.width(), image.height()) == (48, 48)
    centre = image.pixelColor(24, 24)
    assert centre.alpha() == 255  # the drawing, not a transparent placeholder
    assert len(icon_files()) == len(ICON_SIZES)
    assert (resources_dir() / "themes" / "dark.qss").is_file()


def test_about_names_the_version(qtbot: Any, make_window: Any) -> None:
    window = make_window()
    window.commands.run("help.about")
    qtbot.waitUntil(lambda: bool(window.presenter.open), timeout=5_000)
    box = window.presenter.open[-1]
    assert isinstance(box, QMessageBox)
    assert f"Memory Studio {__version__}" in box.text()
    box.close()
