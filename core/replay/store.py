"""Reading and writing turn records (``memory_studio_turns``, migration ``0006_turn_records``).

A database without the table (Mastra's, or ours before the migration) simply has no records: reads
answer empty, and a live turn writes none (the agent's turn never fails for want of a record).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import sqlalchemy as sa

from core.storage import catalog, driver_sql

from core.replay import tools as tool_defs
from core.replay.record import DamagedRecordError, TurnRecord, decode, encode, long_texts, parse, text_key
from core.storage import schema as t
from core.timeutil import parse_iso, to_iso
from core.stored_text import json_text

if TYPE_CHECKING:  # pragma: no cover
    from core.storage import Store

log = logging.getLogger(__name__)

TABLE = t.turns.name
_HAS_TABLE = "turn_records_table"
_KNOWN_TEXTS = "turn_record_text_keys"  # thread id -> keys of the texts its records hold


def has_table(store: "Store", conn: sa.Connection | None = None) -> bool:
    """Whether this database keeps turn records (cached per store once it does)."""
    if store.extensions.get(_HAS_TABLE):
        return True
    if conn is not None:
        found = catalog.has_table(conn, TABLE)
    else:
        found = store.db.has_table(TABLE)
    if found:
        store.extensions[_HAS_TABLE] = True  # a table is never dropped while we run; absence is re-checked
    return found


def _known_keys(conn: sa.Connection, thread_id: str) -> set[str]:
    keys: set[str] = set()
    for (raw,) in conn.exec_driver_sql(
        f"SELECT texts FROM {TABLE} WHERE thread_id = ? AND texts IS NOT NULL", (thread_id,)
    ):
        data = _load(raw)
        keys.update(data)
    return keys


def _load(raw: Any) -> dict[str, str]:
    try:
        data = json.loads(raw) if raw else {}
    except (TypeError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _cached_keys(store: "Store") -> dict[str, set[str]]:
    cache = store.extensions.get(_KNOWN_TEXTS)
    if cache is None:
        cache = store.extensions[_KNOWN_TEXTS] = {}
    return cache


def write(conn: sa.Connection, store: "Store", record: TurnRecord, *, options_json: str | None = None,
          keep_texts: Mapping[str, str] | None = None) -> bool:
    """Insert (or replace) one record inside the caller's write transaction. False when the
    database has no turn-record table. ``options_json``: the canonical JSON of ``record.options``,
    when the caller has it (``record.options_json_of``). ``keep_texts``: texts the row held before
    (``rewrite``), kept in it."""
    if not has_table(store, conn):
        return False
    wanted = {text_key(x): x for x in long_texts(record)}
    keys = {x: k for k, x in wanted.items()}
    new: dict[str, str] = {}
    if wanted:
        # Texts are only ever added to a thread (and dropped with it), so keys seen stored stay stored:
        # most turns repeat the instructions and need no query.
        cache = _cached_keys(store)
        known = cache.get(record.thread_id, set())
        if not set(wanted) <= known:
            known = cache[record.thread_id] = _known_keys(conn, record.thread_id)
        new = {k: x for k, x in wanted.items() if k not in known}
        known.update(new)
    if keep_texts:
        new = {**keep_texts, **new}
    driver_sql.execute(  # every turn writes one: the driver's cursor
        conn,
        f'INSERT INTO {TABLE} (input_message_id, thread_id, resource_id, wm_version_id, record, texts, '
        '"createdAt") VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (input_message_id) DO UPDATE SET '
        'thread_id = excluded.thread_id, resource_id = excluded.resource_id, wm_version_id = excluded.wm_version_id, '
        'record = excluded.record, texts = excluded.texts, "createdAt" = excluded."createdAt"',
        (record.input_message_id, record.thread_id, record.resource_id, record.wm_version_id,
         encode(record, keys, options_json), json_text(new, ensure_ascii=False) if new else None, to_iso(record.created_at)),
    )
    return True


def rewrite(conn: sa.Connection, store: "Store", record: TurnRecord) -> bool:
    """``write`` for a record written before (an Agents SDK run's record grows with each save of the run):
    the texts its row held stay in it, as other records of the thread may name them."""
    if not has_table(store, conn):
        return False
    row = conn.exec_driver_sql(f"SELECT texts FROM {TABLE} WHERE input_message_id = ?",
                               (record.input_message_id,)).first()
    return write(conn, store, record, keep_texts=_load(row[0]) if row is not None else None)


def _texts(conn: sa.Connection, thread_ids: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for tid in set(thread_ids):
        for (raw,) in conn.exec_driver_sql(
            f"SELECT texts FROM {TABLE} WHERE thread_id = ? AND texts IS NOT NULL", (tid,)
        ):
            out.update(_load(raw))
    return out


_COLUMNS = 'input_message_id, thread_id, resource_id, wm_version_id, record, "createdAt"'
_FIELDS = ("input_message_id", "thread_id", "resource_id", "wm_version_id", "record", "createdAt")


def set_keys(data: Any) -> set[str]:
    """The tool-set keys a parsed record names."""
    if not isinstance(data, dict):
        return set()
    keys = {data.get("ts")}
    for entry in data.get("k") or ():
        if isinstance(entry, list) and len(entry) > 3 and isinstance(entry[3], dict):
            keys.add(entry[3].get("ts"))
    return {k for k in keys if isinstance(k, str)}


def _decode_rows(conn: sa.Connection, rows: Sequence[Any]) -> tuple[list[TurnRecord], dict[str, str]]:
    """The readable records, and why each unreadable one is damaged (by input message id)."""
    texts = _texts(conn, (r[1] for r in rows))
    parsed: list[Any] = []
    for r in rows:
        try:
            parsed.append(parse(r[4]))
        except DamagedRecordError as exc:
            parsed.append(exc)
    sets = tool_defs.read_sets(conn, {k for p in parsed for k in set_keys(p)})
    out: list[TurnRecord] = []
    damaged: dict[str, str] = {}
    for r, data in zip(rows, parsed):
        row: Mapping[str, Any] = dict(zip(_FIELDS, r))
        try:
            if isinstance(data, DamagedRecordError):
                raise data
            out.append(decode(row, texts, parse_iso, sets, parsed=data))
        except (DamagedRecordError, ValueError, TypeError, KeyError, IndexError) as exc:
            # A damaged row means that turn is reconstructed instead, saying why; the others stay exact.
            reason = str(exc) if isinstance(exc, DamagedRecordError) else f"wrong types ({type(exc).__name__}: {exc})"
            damaged[str(r[0])] = reason
            log.warning("turn record %s is unreadable (%s); that turn will be reconstructed", r[0], reason)
    return out, damaged


def read(store: "Store", input_message_id: str) -> TurnRecord | None:
    """The record of the turn whose (last) input is this message, or None."""
    return read_state(store, input_message_id)[0]


def read_state(store: "Store", input_message_id: str) -> tuple[TurnRecord | None, str | None]:
    """(record, None), (None, why it is damaged), or (None, None) when the turn has no record."""
    if not has_table(store):
        return None, None
    with store.db.read() as conn:
        rows = conn.exec_driver_sql(f"SELECT {_COLUMNS} FROM {TABLE} WHERE input_message_id = ?",
                                    (input_message_id,)).all()
        found, damaged = _decode_rows(conn, rows)
    return (found[0] if found else None), damaged.get(input_message_id)


def newest_windowed(store: "Store", thread_id: str) -> TurnRecord | None:
    """The thread's newest readable record of a turn whose prompts were fitted into a context window
    (what a preview of its next turn is fitted into). Rows are parsed newest first and only the one
    found is decoded: a preview asks on every change, and a long thread holds many records."""
    if not has_table(store):
        return None
    with store.db.read() as conn:
        rows = conn.exec_driver_sql(
            f'SELECT {_COLUMNS} FROM {TABLE} WHERE thread_id = ? ORDER BY "createdAt" DESC', (thread_id,)).all()
        for row in rows:
            try:
                data = parse(row[4])
            except DamagedRecordError:
                continue
            if isinstance(data, dict) and data.get("cw"):
                found, _damaged = _decode_rows(conn, [row])
                if found:
                    return found[0]
    return None


def for_thread(store: "Store", thread_id: str) -> dict[str, TurnRecord]:
    """Every readable record of a thread, by input message id."""
    return thread_state(store, thread_id)[0]


def thread_state(store: "Store", thread_id: str) -> tuple[dict[str, TurnRecord], dict[str, str]]:
    """Every readable record of a thread by input message id, and why each damaged one is unreadable."""
    if not has_table(store):
        return {}, {}
    with store.db.read() as conn:
        rows = conn.exec_driver_sql(
            f'SELECT {_COLUMNS} FROM {TABLE} WHERE thread_id = ? ORDER BY "createdAt"', (thread_id,)).all()
        found, damaged = _decode_rows(conn, rows)
    return {r.input_message_id: r for r in found}, damaged


def for_other_threads(store: "Store", resource_id: str, thread_id: str) -> dict[str, TurnRecord]:
    """Every readable record of the resource's other threads, by input message id (a turn rebuilt with
    resource-scoped recall asks which of them ran beside it)."""
    if not has_table(store):
        return {}
    with store.db.read() as conn:
        rows = conn.exec_driver_sql(
            f'SELECT {_COLUMNS} FROM {TABLE} WHERE resource_id = ? AND thread_id <> ? ORDER BY "createdAt"',
            (resource_id, thread_id)).all()
        found, _damaged = _decode_rows(conn, rows)
    return {r.input_message_id: r for r in found}


def delete_for_threads(conn: sa.Connection, thread_ids: Sequence[str], store: "Store | None" = None) -> None:
    if store is not None:
        for tid in thread_ids:
            _cached_keys(store).pop(tid, None)
    if thread_ids and catalog.has_table(conn, TABLE):
        conn.exec_driver_sql(f"DELETE FROM {TABLE} WHERE thread_id IN ({','.join('?' * len(thread_ids))})",
                             tuple(thread_ids))


__all__ = ["TABLE", "delete_for_threads", "for_other_threads", "for_thread", "has_table", "newest_windowed", "read",
           "read_state", "rewrite", "thread_state", "write"]
