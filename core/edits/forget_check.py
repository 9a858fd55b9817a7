"""The check after a forget: which rows still name the forgotten ids, and whether each was there when the forget
committed (a real failure) or was written since by agents of that user still running (not a failure).

Without telling them apart, every run of ``memory-studio forget`` while the user's agents kept writing ended in
"STILL NAMING IT" and exit 1 (their new turn records, keyword docs, working-memory versions of a new thread),
though nothing of what was forgotten was left. What "there at commit" means is taken inside the forget's write
transaction (``at_commit``), after its deletes:

- SQLite (libSQL): the largest rowid of every table. The forget holds the file's only write lock from its first
  read to its commit, so nothing else was written in between, and a row there at commit keeps its rowid when it
  is updated afterwards; a row inserted afterwards gets a larger one, unless someone deleted the table's last
  row first (SQLite then reuses numbers): such a new row is counted as left, never the other way round. The
  keyword index's vocabulary (an ``fts5vocab`` instance table, whose rowid is only a row's place in the listing)
  goes by its rows' documents' rowids; any other table without rowids counts every row found as left.
- Postgres: the scan itself, run inside the transaction (its statements see every row committed before them, the
  forget's deletes included), keeping each row's key (its primary key, else its ``ctid``). The scan after the
  commit counts as written since only rows whose key the scan inside did not find, and reads only rows whose
  ``xmin`` (the transaction that wrote them) is not older than the scan inside: every older row was visible to
  it. A row left at commit is counted as left even when an agent has updated it since. Concurrent writers run
  on Postgres, so a row an agent commits between the scan inside and the forget's commit is counted as written
  since: the forget never saw it.
- The trace file beside a libSQL database (DuckDB): its spans naming the ids, taken while its own forget still
  holds the file (``AtCommit.spans``); a span found afterwards under another (traceId, spanId) is new.

Each test matches a column equal to an id, or JSON holding it as a string (``"id"``).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import sqlalchemy as sa

from core.storage import catalog
from core.storage.capabilities import capabilities_of

if TYPE_CHECKING:  # pragma: no cover
    from core.storage import Store

log = logging.getLogger(__name__)

_MENTION_TESTS = 200  # column-value tests in one statement of the check
_NO_TEXT_TYPES = ("VECTOR", "SMALLINT", "INTEGER", "BIGINT", "REAL", "DOUBLE PRECISION", "NUMERIC", "BOOLEAN",
                  "DATE", "TIMESTAMP", "TIME", "INTERVAL", "OID")
_XID_SPAN = 1 << 32


@dataclass
class AtCommit:
    """What the database held when a forget committed, taken in its transaction (``at_commit``)."""

    tables: set[str] = field(default_factory=set)  # the tables there were
    rowids: dict[str, int] = field(default_factory=dict)  # SQLite: table -> its largest rowid (0: empty)
    found: dict[str, set[tuple[Any, ...]]] | None = None  # Postgres: table -> keys of rows naming the ids
    xmin: int | None = None  # Postgres: the oldest transaction still running when the scan inside began
    # the trace file beside the database (DuckDB): (traceId, spanId) of its spans naming the ids when its forget
    # still held it (None: not checked: no such file, or its forget did not get to it)
    spans: set[tuple[str, str]] | None = None


@dataclass
class CheckResult:
    """Rows naming the forgotten ids after a forget, by table: ``left`` were there when it committed (it failed to
    remove them), ``since`` were written after it by others (agents of the user still running)."""

    left: dict[str, int] = field(default_factory=dict)
    since: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _has_rowid(conn: sa.Connection, quoted: str) -> bool:
    """SQLite: whether the table has a rowid (not a WITHOUT ROWID table, nor a virtual table without one)."""
    try:
        conn.exec_driver_sql(f"SELECT rowid FROM {quoted} LIMIT 0").fetchall()
        return True
    except (ValueError, sa.exc.DBAPIError):
        return False


def _holds_no_text(kind: str) -> bool:
    """A Postgres column type no id can be written in (vectors, numbers, times). The check skips them:
    each test cast every value of such a column to text, and a vector's text is long (at 9,000
    vectors of 64 dimensions the vector table's scan was the check's longest statement)."""
    return kind.split("(")[0].strip().rstrip("[]") in _NO_TEXT_TYPES or kind.startswith(("TIMESTAMP", "TIME "))


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


_VOCAB = re.compile(r"USING\s+fts5vocab\s*\(\s*['\"]?(\w+)['\"]?\s*,\s*['\"]?instance['\"]?\s*\)", re.I)


def _instances_of(conn: sa.Connection, table: str) -> str | None:
    """SQLite: the full-text table an ``fts5vocab`` table of type ``instance`` lists (one row per term in a
    document, ``doc`` being the document's rowid there; the keyword index's ``memory_studio_fts_vocab``)."""
    m = _VOCAB.search(catalog.virtual_table_sql(conn, table) or "")
    return m.group(1) if m else None


def _key_sql(conn: sa.Connection, pg: bool, table: str, columns: Iterable[tuple[str, str, bool]]) -> str:
    """What tells a table's rows apart: SQLite's rowid (an ``fts5vocab`` instance table: its document's rowid
    first, then the rest of the row; a whole row where there is neither); on Postgres the primary key (it
    survives an update, a ``ctid`` does not), else the ``ctid``."""
    if not pg:
        if _instances_of(conn, table):  # (its rowid is only a row's place in the listing: it moves)
            return 'doc, term, col, "offset"'
        return "rowid" if _has_rowid(conn, _quoted(table)) else "*"
    pk = [f"CAST({_quoted(name)} AS TEXT)" for name, _kind, is_pk in columns if is_pk]
    return ", ".join(pk) if pk else "CAST(ctid AS TEXT)"


def _scan(conn: sa.Connection, values: Sequence[str], since_xmin: int | None = None) -> dict[str, set[tuple[Any, ...]]]:
    """Table -> keys (``_key_sql``) of its rows naming one of ``values``. The tests go in statements of at most
    ``_MENTION_TESTS`` (SQLite refuses an expression deeper than 1,000: a resource of 3,000 threads made one
    statement of ~50,000 tests), and a row is counted once however many statements find it. ``since_xmin``
    (Postgres): only rows written by that transaction or a later one."""
    found: dict[str, set[tuple[Any, ...]]] = {}
    pg = not capabilities_of(conn).implicit_rowid
    newer = ""
    if since_xmin is not None:
        # ``xmin`` is the 32-bit id, so "not before ``since_xmin``" is a distance modulo 2**32: every transaction
        # that began since is less than 2**31 after it, so no new row is left out. This only saves time: a frozen
        # row keeps its old id, which may wrap into the range and be read, and what tells a new row from a left
        # one is the scan inside (``found``), not this. (1 and 2 are the bootstrap and frozen ids.)
        low = since_xmin % _XID_SPAN
        newer = (f"CAST(CAST(xmin AS TEXT) AS BIGINT) > 2 AND "
                 f"(CAST(CAST(xmin AS TEXT) AS BIGINT) - {low} + {_XID_SPAN}) % {_XID_SPAN} < {_XID_SPAN // 2} AND ")
    for table in catalog.all_tables(conn):
        described = catalog.table_columns(conn, table)
        columns = [name for name, kind, _pk in described if not (pg and _holds_no_text(kind))]
        if not columns:
            continue
        quoted = _quoted(table)
        per = max(1, _MENTION_TESTS // len(columns))
        key = _key_sql(conn, pg, table, described)
        rows: set[tuple[Any, ...]] = set()
        if pg:  # a table that cannot be read must not end the forget's transaction (the check runs inside it)
            conn.exec_driver_sql("SAVEPOINT forget_check")
        try:
            for start in range(0, len(values), per):
                tests, params = [], []
                for column in columns:
                    text = f'CAST("{column}" AS TEXT)' if pg else f'CAST("{column}" AS BLOB)'
                    for value in values[start:start + per]:
                        if pg:
                            tests.append(f"({text} = ? OR strpos({text}, ?) > 0)")
                        else:
                            tests.append(f"({text} = CAST(? AS BLOB) OR instr({text}, CAST(? AS BLOB)) > 0)")
                        params += [value, json.dumps(value, ensure_ascii=False)]
                rows.update(tuple(r) for r in conn.exec_driver_sql(
                    f"SELECT {key} FROM {quoted} WHERE {newer}({' OR '.join(tests)})", tuple(params)))
        except sa.exc.DBAPIError as exc:  # a virtual table that cannot be scanned this way, a table we may not read
            log.warning("forget check could not scan %s: %s", table, exc)
            if pg:
                conn.exec_driver_sql("ROLLBACK TO SAVEPOINT forget_check")
            continue
        if pg:
            conn.exec_driver_sql("RELEASE SAVEPOINT forget_check")
        if rows:
            found[table] = rows
    return found


def mentions(store: "Store", values: Sequence[str]) -> dict[str, int]:
    """Rows of every table that still name one of ``values`` (reads only), by table."""
    if not values:
        return {}
    with store.db.read() as conn:
        return {table: len(keys) for table, keys in _scan(conn, values).items()}


def at_commit(conn: sa.Connection, values: Sequence[str]) -> AtCommit:
    """In the forget's write transaction, after its deletes: what the check afterwards compares with."""
    if capabilities_of(conn).implicit_rowid:
        rowids: dict[str, int] = {}
        tables = set(catalog.all_tables(conn))
        vocabularies = {}
        for table in sorted(tables):
            quoted = _quoted(table)
            documents = _instances_of(conn, table)
            if documents is not None:
                vocabularies[table] = documents
            elif _has_rowid(conn, quoted):
                rowids[table] = int(conn.exec_driver_sql(f"SELECT coalesce(max(rowid), 0) FROM {quoted}").scalar() or 0)
        for table, documents in vocabularies.items():  # a vocabulary's rows are its documents': their rowids then
            if documents in rowids:
                rowids[table] = rowids[documents]
        return AtCommit(tables, rowids=rowids)
    xmin = int(conn.exec_driver_sql("SELECT CAST(CAST(pg_snapshot_xmin(pg_current_snapshot()) AS TEXT) AS BIGINT)")
               .scalar() or 0)
    return AtCommit(set(catalog.all_tables(conn)), found=_scan(conn, values) if values else {}, xmin=xmin)


def check_after_forget(store: "Store", values: Sequence[str], committed: AtCommit) -> CheckResult:
    """Rows naming ``values`` after a forget, told apart by ``committed`` (see the module docstring)."""
    result = CheckResult()
    if not values:
        return result
    _trace_file(store, values, committed, result)
    if committed.found is not None:  # Postgres: what the scan inside found is what was left
        result.left = {table: len(keys) for table, keys in committed.found.items()}
        with store.db.read() as conn:
            after = _scan(conn, values, since_xmin=committed.xmin)
        for table, keys in after.items():
            written = keys - committed.found.get(table, set())
            if written:
                result.since[table] = len(written)
        return result
    with store.db.read() as conn:
        after = _scan(conn, values)
    for table, keys in after.items():
        if table not in committed.tables:  # made since the forget: every row of it is new
            result.since[table] = len(keys)
            continue
        top = committed.rowids.get(table)  # (None: a table without rowids: every row counts as left)
        # (a key's first value is its rowid, or its document's in a vocabulary: ``_key_sql``)
        new = sum(1 for k in keys if top is not None and isinstance(k[0], int) and k[0] > top)
        if len(keys) - new:
            result.left[table] = len(keys) - new
        if new:
            result.since[table] = new
    return result


def _trace_file(store: "Store", values: Sequence[str], committed: AtCommit, result: CheckResult) -> None:
    """The trace file's spans naming ``values``: those there when its forget held the file are left, the others
    were written since (a span keeps its key, (traceId, spanId), when its writer finishes it)."""
    obs = store.observability
    naming = getattr(obs, "spans_naming", None)
    if committed.spans is None or obs is None or not callable(naming):
        return
    import duckdb

    from core.traces.locking import StoreBusy

    where = f"traces ({obs.path.name})"
    try:
        after: set[tuple[str, str]] = naming(values)
    except (StoreBusy, duckdb.Error) as exc:
        log.warning("forget check could not read the trace file %s: %s", obs.path, exc)
        result.notes.append(f"the check afterwards could not read the trace file {obs.path} ({str(exc).splitlines()[0]}); "
                            "its forget ran: run forget again to check it")
        return
    if committed.spans:
        result.left[where] = len(committed.spans)
    if after - committed.spans:
        result.since[where] = len(after - committed.spans)


__all__ = ["AtCommit", "CheckResult", "at_commit", "check_after_forget", "mentions"]
