"""Tool definitions offered to the model, stored once by content hash (migration ``0007_tool_definitions``).

A turn record does not copy the tool definitions its model calls offered: each definition (name,
description, JSON schema, exactly as sent) is a row of ``memory_studio_tool_defs`` keyed by the hash of
its JSON text, and the list one call offered is a row of ``memory_studio_tool_sets`` keyed by the hash
of its members' keys, in order. A record names the set by that one key, so a 30-tool agent's turns
add a few dozen bytes each once its definitions are stored.

Rows are only ever added (``INSERT ... ON CONFLICT DO NOTHING``) and never change: a key is its
content. A database without these tables (Mastra's, or ours before the migration) keeps records
whose tools are unknown.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import sqlalchemy as sa

from core.storage import catalog
from core.storage.schema import TOOL_DEFS_TABLE as DEFS_TABLE
from core.storage.schema import TOOL_SETS_TABLE as SETS_TABLE
from core.timeutil import iso_now
from core.stored_text import json_text

if TYPE_CHECKING:  # pragma: no cover
    from core.storage import Store

KEY_HEX = 16  # 64 bits of sha256: plenty to name a definition (a call's body hash would catch a mix-up anyway)
_KNOWN = "tool_definition_keys"  # store.extensions: keys known to be stored (rows never go away)
_HAS = "tool_definition_tables"


def definition_text(definition: Mapping[str, Any]) -> str:
    """A definition's stored text: compact JSON in the order it was sent (a schema's property order
    is part of what the model reads)."""
    return json_text(definition, ensure_ascii=False, separators=(",", ":"))


def key_of(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:KEY_HEX]


def set_key(definitions: Sequence[Mapping[str, Any]]) -> tuple[str, list[tuple[str, str]]]:
    """The key of a list of definitions and each member as (key, text), in order."""
    members = [(key_of(t), t) for t in (definition_text(d) for d in definitions)]
    return key_of(",".join(k for k, _ in members)), members


def has_tables(store: "Store", conn: sa.Connection | None = None) -> bool:
    if store.extensions.get(_HAS):
        return True
    found = catalog.has_table(conn, SETS_TABLE) if conn is not None else store.db.has_table(SETS_TABLE)
    if found:
        store.extensions[_HAS] = True
    return found


def write(conn: sa.Connection, store: "Store", definitions: Sequence[Mapping[str, Any]]) -> str | None:
    """Store a call's definitions (inside the caller's transaction) and return the set's key; None
    for no tools, or a database without the tables."""
    if not definitions or not has_tables(store, conn):
        return None
    key, members = set_key(definitions)
    known: set[str] = store.extensions.setdefault(_KNOWN, set())
    if key in known:
        return key
    write_rows(conn, {k: t for k, t in members if k not in known}, {key: [k for k, _ in members]})
    known.update(k for k, _ in members)
    known.add(key)
    return key


def write_rows(conn: sa.Connection, definitions: Mapping[str, str], sets: Mapping[str, Sequence[str]]) -> int:
    """Insert definition texts and sets by key, leaving rows that are there; returns the rows new here."""
    now = iso_now()
    written = 0
    for key, text in definitions.items():
        written += _insert(conn, DEFS_TABLE, "definition", key, text, now)
    for key, members in sets.items():
        written += _insert(conn, SETS_TABLE, "members", key, json_text(list(members)), now)
    return written


def _insert(conn: sa.Connection, table: str, column: str, key: str, value: str, now: str) -> int:
    result = conn.exec_driver_sql(
        f'INSERT INTO {table} (hash, {column}, "createdAt") VALUES (?, ?, ?) ON CONFLICT (hash) DO NOTHING',
        (key, value, now))
    return max(int(result.rowcount or 0), 0)


def read_sets(conn: sa.Connection, keys: Iterable[str]) -> dict[str, tuple[dict[str, Any], ...]]:
    """The definitions of each set key found (a set whose rows are missing is left out)."""
    wanted = sorted({k for k in keys if k})
    if not wanted or not catalog.has_table(conn, SETS_TABLE):
        return {}
    members = _rows(conn, SETS_TABLE, "members", wanted)
    lists = {k: m for k, v in members.items() if (m := _member_keys(v)) is not None}
    texts = _rows(conn, DEFS_TABLE, "definition", sorted({m for ms in lists.values() for m in ms}))
    out: dict[str, tuple[dict[str, Any], ...]] = {}
    for key, ms in lists.items():
        if not all(m in texts for m in ms):
            continue
        try:
            out[key] = tuple(json.loads(texts[m]) for m in ms)
        except ValueError:
            continue  # a damaged definition: the set reads as missing
    return out


def read_rows(conn: sa.Connection, set_keys: Iterable[str]) -> tuple[dict[str, str], dict[str, list[str]]]:
    """The stored rows behind these sets, as (definition texts by key, member keys by set key): what an
    export carries."""
    wanted = sorted({k for k in set_keys if k})
    if not wanted or not catalog.has_table(conn, SETS_TABLE):
        return {}, {}
    sets = {k: m for k, v in _rows(conn, SETS_TABLE, "members", wanted).items() if (m := _member_keys(v)) is not None}
    defs = _rows(conn, DEFS_TABLE, "definition", sorted({m for ms in sets.values() for m in ms}))
    return defs, sets


def _member_keys(raw: str) -> list[str] | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return [str(v) for v in value] if isinstance(value, list) else None


def _rows(conn: sa.Connection, table: str, column: str, keys: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for start in range(0, len(keys), 500):
        chunk = keys[start:start + 500]
        marks = ",".join("?" * len(chunk))
        for key, value in conn.exec_driver_sql(f"SELECT hash, {column} FROM {table} WHERE hash IN ({marks})",
                                               tuple(chunk)):
            out[str(key)] = value if isinstance(value, str) else bytes(value).decode("utf-8", "replace")
    return out


__all__ = ["DEFS_TABLE", "SETS_TABLE", "definition_text", "has_tables", "key_of", "read_rows", "read_sets",
           "set_key", "write", "write_rows"]
