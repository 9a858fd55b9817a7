"""A private in-memory database of the stores' own engine (libSQL, SQLite 3.45 inside).

For work that needs SQLite's own functions but none of a store's data, done where no store
connection may write (a read-only store's connections are ``query_only``): running an FTS5
tokenizer on text gives exactly the tokens the store's FTS5 table indexes
(``core.recall.keyword_memory``). Nothing is ever written to a file.
"""

from __future__ import annotations

from typing import Any

import libsql_experimental as libsql


def scratch_connection() -> Any:
    """A new DB-API connection to an empty in-memory database (one per caller; not thread-safe)."""
    return libsql.connect(":memory:")
