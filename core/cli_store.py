"""How the command line opens a database: ``open_store``, then a check that the file is a memory database.

A SQLite file some other program wrote (no ``mastra_threads`` table) would otherwise get as far as a
bare ``no such table`` from the first query, and a command that writes would add our tables to it; a
Postgres database of another program is refused the same way (opened to write, it is not migrated).
The Studio refuses such a file with the same sentence (``studio.session.open_studio_database``).
``memory-studio migrate`` does not use this check: adding the tables is what it is asked to do.
"""

from __future__ import annotations

from pathlib import Path

from core.storage import SchemaError, Store, open_store

WHERE_HINT = "Check --db (`memory-studio where` shows which file is used)."


def open_cli_store(db: str | Path | None, *, read_only: bool = False, create: bool = False) -> Store:
    """``open_store`` for a command: a file database without memory tables is refused, unchanged.

    A file with no tables at all (an empty file) opened read-only has nothing to show, which is
    said as such; opened for writing, it became a memory database when it was opened.
    """
    store = open_store(db, read_only=read_only, create=create)
    try:
        database = store.db
        if store.capabilities.server and not database.owned and not database.is_mastra:
            # Another application's database: opened to write, it is not migrated, so a command failed on
            # its first statement (`forget`: the driver's traceback) or did nothing (`vacuum`).
            raise SchemaError(
                f"{store.location.display} is a PostgreSQL database, but it has no memory tables (mastra_threads, "
                "mastra_messages): it was not written by Memory Studio or Mastra, and nothing was changed. Check --db "
                "or $MEMORY_STUDIO_DB (`memory-studio where` shows which database is used); to keep memory in this "
                "database beside its other tables, `memory-studio migrate --db URL` adds them."
            )
        if not store.capabilities.server and not database.is_mastra:  # a file, or `--db :memory:`
            display = store.location.display
            if not database.is_empty:
                raise SchemaError(
                    f"{display} is a SQLite database, but it has no memory tables (mastra_threads, "
                    f"mastra_messages). It was not written by Memory Studio or Mastra. {WHERE_HINT}"
                )
            if read_only and store.location.path is None:
                raise SchemaError(f"{display} is an in-memory database, new and empty for each command: nothing is "
                                  "stored in it. Give --db a database file.")
            if read_only:
                raise SchemaError(
                    f"{display} has no tables yet (an empty database): nothing is stored in it. {WHERE_HINT} "
                    "A command that writes (`memory-studio import`, `memory-studio demo`) makes it a memory database."
                )
    except BaseException:
        store.close()
        raise
    return store


__all__ = ["WHERE_HINT", "open_cli_store"]
