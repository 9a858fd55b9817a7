"""The release version: the one place it is written.

``pyproject.toml`` reads it (``[tool.setuptools.dynamic]``, parsed without importing the engine), the
command line prints it (``memory-studio --version``) and the Studio shows it in Help > About. A
PyInstaller bundle carries no package metadata, so nothing reads it through ``importlib.metadata``.
"""

from __future__ import annotations

__version__ = "0.1.0"
