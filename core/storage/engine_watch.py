"""Who hears of a database engine as it is made: the watchers of the code that opens a store.

A database opens by running statements (its first look at the file, its journal mode, migrations on open)
inside ``Database.__init__``, before its caller holds the store. A caller that must see every one of them
(the Studio's View > SQL Log: "opening this file wrote nothing") opens inside ``engines_made(callback)``:
each engine made there is handed to ``callback`` before its first statement (a file that turns out frozen
gets a second engine: both are handed over). The watchers belong to the calling context (a ``ContextVar``),
so an engine another thread makes meanwhile is nobody's business here, and nothing is paid outside the block.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Callable, Iterator

if TYPE_CHECKING:
    import sqlalchemy as sa

_watchers: ContextVar[tuple[Callable[["sa.Engine"], None], ...]] = ContextVar("memory_studio_engine_watchers",
                                                                               default=())


@contextmanager
def engines_made(callback: Callable[["sa.Engine"], None]) -> Iterator[None]:
    """Hand each database engine made in this block (this context) to ``callback``, before it runs anything."""
    token = _watchers.set(_watchers.get() + (callback,))
    try:
        yield
    finally:
        _watchers.reset(token)


def made(engine: "sa.Engine") -> None:
    """A database made ``engine`` (called by ``Database`` and ``PgDatabase`` before its first statement)."""
    for callback in _watchers.get():
        callback(engine)
