"""Driver adaptation so the engine's SQL and values mean the same on Postgres as on libSQL.

- Statements written for the driver (``exec_driver_sql``) use ``?`` placeholders, SQLite's style;
  psycopg wants ``%s``. ``qmark_to_format`` rewrites them once, at the cursor.
- Mastra's PgStore keeps times in ``TIMESTAMP`` columns and documents in ``JSONB``; the engine reads
  both as text everywhere (ISO-8601 ms with ``Z``; JSON text), as libSQL returns them. So timestamps
  load as that ISO text and JSON loads as its text: every reader stays one code path.
- Strings are sent untyped, so Postgres reads them as the column's type (an ISO string into a
  ``TIMESTAMP``, JSON text into ``JSONB``), the way SQLite's dynamic typing took them.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import psycopg
from psycopg.adapt import Loader

# Sessions run in UTC with ISO dates, so ``timestamptz`` text is "YYYY-MM-DD HH:MM:SS[.ffffff]+00".
SESSION_OPTIONS = "-c TimeZone=UTC -c DateStyle=ISO,YMD -c client_encoding=UTF8"
# pgvector's HNSW search settings, set once per connection instead of by a statement in every search
# (``core.recall.pg_vectors`` sets ``hnsw.ef_search`` in the search's transaction only when it needs
# another value): a filtered scan keeps going until it has enough rows of the scope (pgvector 0.8),
# and 100 candidates = twice the hybrid list depth of the default fusion. Custom settings: a server
# without pgvector keeps them as inert placeholders.
HNSW_SESSION = {"hnsw.iterative_scan": "relaxed_order", "hnsw.ef_search": "100"}
CONNECT_OPTIONS = SESSION_OPTIONS + "".join(f" -c {name}={value}" for name, value in HNSW_SESSION.items())


def qmark_to_format(sql: str) -> str:
    """``?`` → ``%s`` outside quotes and comments; every ``%`` doubled (psycopg reads ``%`` anywhere).
    Each distinct statement text is rewritten once (a search's statements repeat, and the rewrite is a
    Python loop over every character)."""
    if "?" not in sql and "%" not in sql:
        return sql
    return _qmark_to_format(sql)


@lru_cache(maxsize=1024)
def _qmark_to_format(sql: str) -> str:
    out: list[str] = []
    quote: str | None = None
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch == "%":
            out.append("%%")
        elif quote is not None:
            out.append(ch)
            if ch == quote:
                quote = None
        elif ch in ("'", '"'):
            quote = ch
            out.append(ch)
        elif ch == "?":
            out.append("%s")
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def iso_from_pg(text: str) -> str:
    """``2025-01-02 03:04:05.1+00`` (or without the offset) → ``2025-01-02T03:04:05.100Z``."""
    if text.endswith("+00"):
        text = text[:-3]
    date, _, clock = text.partition(" ")
    if not clock:
        return text  # 'infinity' and other specials pass through unchanged
    whole, _, frac = clock.partition(".")
    return f"{date}T{whole}.{(frac + '000')[:3]}Z"


class IsoTimestampLoader(Loader):
    def load(self, data: Any) -> str:
        return iso_from_pg(bytes(data).decode("ascii"))


class JsonTextLoader(Loader):
    def load(self, data: Any) -> str:
        return bytes(data).decode("utf-8")


class UnknownStrDumper(psycopg.types.string.StrDumperUnknown):
    """Strings go untyped in the text format, so the server casts them to the column's type."""


def configure(conn: psycopg.Connection[Any]) -> None:
    """Loaders for one new connection (before any pool hands it out)."""
    adapters = conn.adapters
    for name in ("timestamp", "timestamptz"):
        adapters.register_loader(name, IsoTimestampLoader)
    for name in ("json", "jsonb"):
        adapters.register_loader(name, JsonTextLoader)
    adapters.register_dumper(str, UnknownStrDumper)
