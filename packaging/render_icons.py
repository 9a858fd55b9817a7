"""Render the app icon's PNG sizes from its SVG with Qt, so every size comes from one drawing.

    QT_QPA_PLATFORM=offscreen .venv/bin/python packaging/render_icons.py

Writes ``resources/icons/memory-studio-<n>.png`` for each size in ``studio.assets.ICON_SIZES``; the
outputs are committed (the app and the bundle load PNGs, which need no Qt image-format plugin).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtGui import QGuiApplication, QImage, QPainter  # noqa: E402
from PySide6.QtSvg import QSvgRenderer  # noqa: E402

from studio.assets import APP_ID, ICON_SIZES  # noqa: E402

ICONS = ROOT / "resources" / "icons"


def render(svg: Path, size: int) -> QImage:
    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise SystemExit(f"{svg} is not a valid SVG")
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    renderer.render(painter)
    painter.end()
    return image


def main() -> int:
    _app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])
    svg = ICONS / f"{APP_ID}.svg"
    for size in ICON_SIZES:
        out = ICONS / f"{APP_ID}-{size}.png"
        if not render(svg, size).save(str(out), "PNG"):
            raise SystemExit(f"could not write {out}")
        print(out.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
