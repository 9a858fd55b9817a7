"""Names a package exports without importing their modules until first use (PEP 562).

``core``, ``core.storage``, ``core.llm``, ``core.embedding`` and ``core.processors`` keep a table
``name -> module`` and install the two module hooks this returns::

    __getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())

A name is imported on first access and then stored in the package's namespace, so the next access is
a plain attribute. This keeps ``import core`` (and any ``import core.<module>``, which imports the
package first) cheap: the Studio's window paints before SQLAlchemy, numpy or DuckDB load.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Iterable, Mapping


def lazy_names(package: str, table: Mapping[str, str], namespace: dict[str, Any],
               listed: Iterable[str] = ()) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` for the names of ``table`` (and ``listed``)."""
    extra = set(listed)

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # the next access is a plain module attribute
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(table) | extra)

    return __getattr__, __dir__
