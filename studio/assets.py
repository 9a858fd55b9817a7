"""Where the Studio's resources (themes, icons, the desktop entry) are, however it was installed.

- a source checkout or editable install: ``<checkout>/resources``;
- a wheel: ``studio/resources`` (``setup.py`` copies the folder there at build time);
- the PyInstaller bundle: ``<bundle>/_internal/resources``, which is also ``studio/../resources``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

APP_ID = "memory-studio"  # desktop entry name, icon name, WM_CLASS / Wayland app id
ICON_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)

_HERE = Path(__file__).resolve().parent


@lru_cache(maxsize=1)
def resources_dir() -> Path:
    for candidate in (_HERE / "resources", _HERE.parent / "resources"):
        if (candidate / "themes").is_dir():
            return candidate
    # Not found: return the checkout location so the error names a real, expected path.
    return _HERE.parent / "resources"


def icon_files() -> list[Path]:
    """The app icon's PNG renderings, smallest first (PNG needs no Qt image-format plugin)."""
    folder = resources_dir() / "icons"
    return [p for p in (folder / f"{APP_ID}-{n}.png" for n in ICON_SIZES) if p.is_file()]
