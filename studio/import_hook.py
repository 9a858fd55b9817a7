"""Run a function on a module right after it is first imported, without importing it now.

For what watches the app's start from outside (``bench/studio.py``, ``tests/studio/test_startup.py``):
they start the ``memory-studio`` command and need ``studio.app``'s ``launch`` in hand, but importing
``studio.app`` themselves would load Qt before the command's own order does (``studio.qt_boot``).
Imports nothing from the Studio and no Qt.
"""

from __future__ import annotations

import importlib.util
import sys
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any, Callable, Sequence


class _AfterImport:
    """A ``sys.meta_path`` finder for one module name, removed at its first use."""

    def __init__(self, name: str, then: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.then = then

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        run: Any = spec.loader.exec_module
        then = self.then

        def exec_module(module: ModuleType) -> None:
            run(module)
            then(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def after_import(name: str, then: Callable[[ModuleType], None]) -> None:
    """Call ``then(module)`` once module ``name`` has been imported (and run), the first time it is."""
    if name in sys.modules:
        then(sys.modules[name])
        return
    sys.meta_path.insert(0, _AfterImport(name, then))
