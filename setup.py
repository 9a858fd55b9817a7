"""Setuptools hook: wheels carry the top-level ``resources/`` folder as ``studio/resources``.

Everything else lives in ``pyproject.toml``. ``resources/`` stays at the top of the tree because the
desktop bundle, the desktop-entry installer and the docs use it too; the Studio finds it through
``studio.assets.resources_dir`` wherever it runs (checkout, wheel, bundle).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildPyWithResources(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads resources/ from the checkout itself
        shutil.copytree(HERE / "resources", Path(self.build_lib) / "studio" / "resources", dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildPyWithResources})
