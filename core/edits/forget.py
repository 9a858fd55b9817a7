"""Forgetting a resource, as a data-subject request needs: every row about it, in every place.

``forget_resource(store, resource_id)`` first works out *what* belongs to the resource (``Targets``):
the resource itself and the resources of its delegations (a sub-agent a turn delegated to runs on resource
``delegation:<resource>:<agent>``, before that namespace ``<resource>-<agent>``; the delegation's tool
result names it, and ``_targets`` says when one is taken), their threads, every message id those
threads hold or once held (message versions keep deleted ones), observation records and their lookup
keys, keyword-index rows, and the traces that name a thread or resource. Then it deletes, place by
place, in one write transaction of the database, and afterwards in the trace store beside it (the
DuckDB file and its pending spill files; on Postgres the span table is in the database itself).

``PLACES`` is the explicit list, in order (a trigger on messages queues their ids for the keyword
index, so the queue comes after the messages). Each place names a table (or, for vector tables, a
name prefix) and the columns that point at the targets. A table this list does not know but that has
a thread or resource column (another feature's table, a Mastra table) is swept by the same rule and
reported under its own name. On Postgres the recall change log goes last (every delete before it logged
the ids it touched), and every process's kept recall reads are told to start over. Afterwards every
table is scanned for the resource's ids (``forget_check``): anything left is reported, never silently kept;
rows the resource's agents wrote after the commit (still running) are reported apart, as no failure.

Deleted rows leave their bytes in free pages until ``vacuum`` rewrites the file; the report says so
and the CLI and the Studio offer it.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import sqlalchemy as sa

from core.delegation_results import delegations_in
from core.edits.forget_check import AtCommit, CheckResult, at_commit, check_after_forget, mentions
from core.edits.schema import MESSAGE_VERSIONS, OBSERVATION_VERSIONS
from core.ids import check_id
from core.scopes import delegation_resource, is_delegation_resource
from core.storage import catalog, dialect, locks
from core.storage.capabilities import capabilities_of
from core.storage.memory_store import InvalidArgumentError
from core.storage.schema import IDEMPOTENCY_TABLE

if TYPE_CHECKING:  # pragma: no cover
    from core.storage import Store

log = logging.getLogger(__name__)

SPANS = "mastra_ai_spans"
_FTS = "memory_studio_message_fts"
_DOCS = "memory_studio_fts_docs"
_QUEUE = "memory_studio_recall_queue"
_LOG = "memory_studio_recall_log"  # Postgres: the recall change log (``core.recall.pg_changes``)
_STATE = "memory_studio_recall_state"
_LOG_PRUNED = (_STATE, "log:pruned_below")  # where readers learn rows may be gone
_VECTORS = "memory_messages"
_CHUNK = 400


@dataclass(frozen=True)
class Place:
    """One place where a resource's rows live: a table (``prefix``: every table named ``table`` or
    ``table_*``) and the conditions, each ``(column SQL, target kind)``, that pick its rows."""

    name: str
    table: str
    conditions: tuple[tuple[str, str], ...]
    prefix: bool = False
    needs: str | None = None  # a capability flag value the place needs ("fts5")


# The explicit list, in the order the rows are deleted. Extend it when a table keeps a resource's
# rows (its thread, resource or message ids, or their text).
PLACES: list[Place] = [
    Place("message versions", MESSAGE_VERSIONS,
          (("message_id", "messages"), ("thread_id", "threads"), ("resource_id", "resources"))),
    Place("observation versions", OBSERVATION_VERSIONS,
          (("record_id", "om_records"), ("lookup_key", "om_keys"), ("thread_id", "threads"),
           ("resource_id", "resources"))),
    Place("working-memory versions", "memory_studio_wm_versions",
          (("scope = 'resource' AND owner_id", "resources"), ("scope = 'thread' AND owner_id", "threads"))),
    Place("turn records", "memory_studio_turns", (("thread_id", "threads"), ("resource_id", "resources"))),
    Place("idempotency keys", IDEMPOTENCY_TABLE, (("thread_id", "threads"), ("resource_id", "resources"))),
    Place("observations", "mastra_observational_memory",
          (('"lookupKey"', "om_keys"), ('"resourceId"', "resources"), ('"threadId"', "threads"))),
    Place("keyword index", _FTS, (("rowid", "fts_rows"),), needs="fts5"),
    # (libSQL keeps each doc in its FTS5 row since ``0031_recall_keyword_rows``; ``_DOCS`` is a view there.
    # Postgres's docs table is named as libSQL's FTS5 rows: the same place to a user.)
    Place("keyword index", _DOCS, (("message_id", "messages"), ("thread_id", "threads"), ("resource_id", "resources")),
          needs="tsvector"),
    Place("vectors", _VECTORS,
          (("{json:message_id}", "messages"), ("vector_id", "messages"), ("{json:thread_id}", "threads"),
           ("{json:resource_id}", "resources")), prefix=True),
    Place("piece vectors", "memory_studio_recall_pieces",
          (("message_id", "messages"), ("thread_id", "threads"), ("resource_id", "resources")), prefix=True),
    Place("messages", "mastra_messages", (("thread_id", "threads"), ('"resourceId"', "resources"))),
    Place("recall queue", _QUEUE, (("message_id", "messages"),)),
    Place("threads", "mastra_threads", (("id", "threads"), ('"resourceId"', "resources"))),
    Place("resource", "mastra_resources", (("id", "resources"),)),
    Place("spans in the database", SPANS, (('"traceId"', "traces"),)),
]

# Columns by which an unknown table points at a thread or a resource (Mastra's and our spellings).
_THREAD_COLUMNS = ("threadId", "thread_id")
_RESOURCE_COLUMNS = ("resourceId", "resource_id")


@dataclass
class Targets:
    resources: list[str]
    threads: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    om_records: list[str] = field(default_factory=list)
    om_keys: list[str] = field(default_factory=list)
    fts_rows: list[int] = field(default_factory=list)
    traces: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def of(self, kind: str) -> Sequence[Any]:
        return list(getattr(self, kind))


@dataclass
class ForgetReport:
    """What forgetting a resource removed (or, with ``dry_run``, would remove), place by place."""

    resource_id: str
    resources: list[str]
    threads: list[str]
    removed: dict[str, int] = field(default_factory=dict)  # place -> rows
    dry_run: bool = False
    leftovers: dict[str, int] = field(default_factory=dict)  # table -> rows it left that still name the resource
    # table -> rows naming it that others wrote after the forget committed (its agents still running): no failure
    written_since: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    complete: bool = True  # False: a place could not be reached (a busy trace file); run it again

    @property
    def total(self) -> int:
        return sum(self.removed.values())

    @property
    def found(self) -> bool:
        return bool(self.total or self.threads)

    def since_note(self) -> str:
        """What the rows written since are, and what to do about them (the command line and the Studio say it)."""
        n = sum(self.written_since.values())
        return (f"{n:,} row{'s' if n != 1 else ''} written since by running agents — not a failure; stop them and run "
                "forget again to remove those too")

    def summary_lines(self) -> list[str]:
        verb = "would remove" if self.dry_run else "removed"
        head = f"Forget resource {self.resource_id!r}: {verb} {self.total:,} row(s)"
        if len(self.resources) > 1:
            head += f" (with the resources of its delegations to sub-agents {', '.join(self.resources[1:])})"
        lines = [head + f", {len(self.threads)} thread(s)"]
        lines += [f"  {name}: {count:,}" for name, count in self.removed.items() if count]
        if self.leftovers:
            lines.append("  STILL NAMING IT: " + ", ".join(f"{t} ({n})" for t, n in self.leftovers.items()))
        if self.written_since:
            lines.append("  written since the forget committed: "
                         + ", ".join(f"{t} ({n})" for t, n in self.written_since.items()))
        lines += [f"  note: {n}" for n in self.notes]
        if self.written_since:
            lines.append(f"  note: {self.since_note()}")
        return lines


# -- working out what belongs to the resource ------------------------------------------------------
def _ids(conn: sa.Connection, sql: str, values: Sequence[Any]) -> list[Any]:
    out: list[Any] = []
    for start in range(0, len(values), _CHUNK):
        chunk = list(values[start:start + _CHUNK])
        marks = ",".join("?" * len(chunk))
        out.extend(r[0] for r in conn.exec_driver_sql(sql.replace("{in}", f"({marks})"), tuple(chunk)))
    return list(dict.fromkeys(out))


def _pairs(conn: sa.Connection, sql: str, values: Sequence[Any]) -> list[tuple[Any, Any]]:
    out: list[tuple[Any, Any]] = []
    for start in range(0, len(values), _CHUNK):
        chunk = list(values[start:start + _CHUNK])
        marks = ",".join("?" * len(chunk))
        out.extend((r[0], r[1]) for r in conn.exec_driver_sql(sql.replace("{in}", f"({marks})"), tuple(chunk)))
    return out


def _delegations(conn: sa.Connection, threads: Sequence[str]) -> list[tuple[str, str, str | None]]:
    """The delegations these threads' turns made: (the thread, the resource the sub-agent ran on, its thread)."""
    return [(thread, resource, child) for thread, _agent, resource, child in delegations_in(conn, threads)]


def _targets(conn: sa.Connection, resource_id: str) -> Targets:
    """What belongs to ``resource_id``: its threads, and its delegations' resources and threads.

    A delegation's resource is the resource's only when it is the one its delegations are named
    (``delegation:<resource>:<agent>``). One named as before that namespace (``<resource>-<agent>``,
    Mastra's naming) may also be a user's own resource whose id reads so (``alice-helper``): it is
    taken whole only when it holds nothing but the delegations' threads; otherwise only those threads
    are, and a note says its resource-wide rows (working memory, observations) were kept. A delegation
    result naming any other resource is not followed."""
    resources = [resource_id]
    seen = {resource_id}
    threads: list[str] = []
    seen_threads: set[str] = set()
    notes: list[str] = []
    frontier = [resource_id]  # resources to take whole
    extra: list[tuple[str, str]] = []  # (thread, owner): threads of an old-named resource that is a user's too
    while frontier or extra:  # a sub-agent may delegate again
        found = _pairs(conn, 'SELECT id, "resourceId" FROM mastra_threads WHERE "resourceId" IN {in}', frontier)
        new = [(t, r) for t, r in [*found, *extra] if t not in seen_threads]
        threads += [t for t, _ in new]
        seen_threads.update(t for t, _ in new)
        owner = dict(new)
        frontier, extra = [], []
        legacy: dict[str, set[str]] = {}
        for at, resource, child in _delegations(conn, [t for t, _ in new]):
            parent = owner.get(at) or ""
            if resource in seen or not parent:
                continue
            if resource.startswith(delegation_resource(parent, "")):
                frontier.append(resource)
                seen.add(resource)
            elif not is_delegation_resource(resource) and resource.startswith(parent + "-"):
                legacy.setdefault(resource, set()).update([child] if child else [])
        for resource, named in sorted(legacy.items()):
            own = set(_ids(conn, 'SELECT id FROM mastra_threads WHERE "resourceId" IN {in}', [resource]))
            if own <= named:  # nothing but these delegations: the sub-agent's resource
                frontier.append(resource)
                seen.add(resource)
            else:
                extra += [(t, resource) for t in sorted(own & named)]
                notes.append(f"resource {resource!r} holds this resource's delegations and threads of its own (its "
                             "id reads like a delegation's): only the delegations' threads were taken, its working "
                             "memory and observations were kept")
        resources += frontier
    t = Targets(resources, threads, notes=notes)
    t.messages = _ids(conn, "SELECT id FROM mastra_messages WHERE thread_id IN {in}", threads)
    t.messages += _ids(conn, 'SELECT id FROM mastra_messages WHERE "resourceId" IN {in}', resources)
    if catalog.has_table(conn, MESSAGE_VERSIONS):  # deleted messages too: their recall rows may linger
        for sql, values in (("SELECT message_id FROM " + MESSAGE_VERSIONS + " WHERE thread_id IN {in}", threads),
                            ("SELECT message_id FROM " + MESSAGE_VERSIONS + " WHERE resource_id IN {in}", resources)):
            t.messages += _ids(conn, sql, values)
    t.messages = list(dict.fromkeys(t.messages))
    t.om_keys = [f"resource:{r}" for r in resources] + [f"thread:{x}" for x in threads]
    if catalog.has_table(conn, "mastra_observational_memory"):
        om = set()
        for sql, values in (('SELECT id FROM mastra_observational_memory WHERE "lookupKey" IN {in}', t.om_keys),
                            ('SELECT id FROM mastra_observational_memory WHERE "resourceId" IN {in}', resources),
                            ('SELECT id FROM mastra_observational_memory WHERE "threadId" IN {in}', threads)):
            om.update(_ids(conn, sql, values))
        t.om_records = sorted(om)
    if capabilities_of(conn).full_text == "fts5" and catalog.has_table(conn, _FTS):
        # A keyword row's rowid is its message's (``0031_recall_keyword_rows``); the messages' delete
        # trigger removes it too, this names it for the dry run's count and for a row the trigger missed.
        rows: set[int] = set()
        for col, values in (("id", t.messages), ("thread_id", threads), ('"resourceId"', resources)):
            rows.update(int(x) for x in _ids(
                conn, f"SELECT m.rowid FROM mastra_messages m JOIN {_FTS}_docsize s ON s.id = m.rowid "
                f"WHERE m.{col} IN {{in}}", values))
        t.fts_rows = sorted(rows)
    if catalog.has_table(conn, SPANS):
        traces = set(_ids(conn, f'SELECT DISTINCT "traceId" FROM {SPANS} WHERE "threadId" IN {{in}}', threads))
        traces.update(_ids(conn, f'SELECT DISTINCT "traceId" FROM {SPANS} WHERE "resourceId" IN {{in}}', resources))
        t.traces = sorted(traces)
    return t


# -- the places ------------------------------------------------------------------------------------
def _tables(conn: sa.Connection, place: Place, existing: set[str]) -> list[str]:
    if place.needs is not None and capabilities_of(conn).full_text != place.needs:
        return []
    if place.prefix:
        # Only tables with the columns the conditions read: libSQL keeps a vector index's data in a table
        # named after it (``memory_messages_384_vector_idx_shadow``, in every Mastra database with
        # semantic recall), which shares the prefix and has none of them.
        needed = {"metadata" if column.startswith("{json:") else column.strip('"') for column, _ in place.conditions}
        return [n for n in sorted(existing) if (n == place.table or n.startswith(place.table + "_"))
                and needed <= {name for name, _type, _pk in catalog.table_columns(conn, n)}]
    return [place.table] if place.table in existing else []


def _column_sql(conn: sa.Connection, column: str, jsonb: bool = False) -> str:
    """``jsonb``: the table's ``metadata`` is a Postgres JSONB column, so a key is read as the vector
    table's indexes read it (``metadata->>'key'``, ``core.recall.pg_vectors``); the generic expression
    (valid JSON or not) matches no index, and each of its statements read and parsed every vector of
    every user inside the forget's write transaction (86 ms a statement at 9,000 vectors)."""
    if column.startswith("{json:"):
        key = column[6:-1]
        if jsonb:
            return "metadata->>'" + key.replace("'", "''") + "'"
        return dialect.json_path_sql(conn, "metadata", key)
    return column


def _jsonb_metadata(conn: sa.Connection, table: str, conditions: Sequence[tuple[str, str]]) -> bool:
    if not any(column.startswith("{json:") for column, _ in conditions) or capabilities_of(conn).implicit_rowid:
        return False
    return any(name == "metadata" and kind == "JSONB" for name, kind, _pk in catalog.table_columns(conn, table))


def _row_key(conn: sa.Connection) -> str:
    return "rowid" if capabilities_of(conn).implicit_rowid else "CAST(ctid AS TEXT)"


def _apply(conn: sa.Connection, table: str, conditions: Sequence[tuple[str, str]], targets: Targets,
           dry_run: bool) -> int:
    quoted = '"' + table.replace('"', '""') + '"'
    seen: set[Any] = set()
    removed = 0
    jsonb = _jsonb_metadata(conn, table, conditions)
    for column, kind in conditions:
        values = targets.of(kind)
        col = _column_sql(conn, column, jsonb)
        for start in range(0, len(values), _CHUNK):
            chunk = tuple(values[start:start + _CHUNK])
            where = f"{col} IN ({','.join('?' * len(chunk))})"
            if dry_run:
                seen.update(r[0] for r in conn.exec_driver_sql(f"SELECT {_row_key(conn)} FROM {quoted} WHERE {where}",
                                                               chunk))
            else:
                removed += int(conn.exec_driver_sql(f"DELETE FROM {quoted} WHERE {where}", chunk).rowcount or 0)
    return len(seen) if dry_run else removed


def _forget_log(conn: sa.Connection, targets: Targets, dry_run: bool) -> int:
    """The change log's rows naming the targets' messages or threads, counted as they were before this forget:
    the deletes above logged some too (this transaction's ``xid``), which go as well but are not counted, so the
    report says what the preview (``dry_run``) said (it counted 21 rows, the forget then "removed" 23). Every
    process's readers are then told to start over, as after a prune (the log no longer says what changed): what
    they keep of the resource is dropped at their next read."""
    where = "message_ids && CAST(? AS text[]) OR thread_ids && CAST(? AS text[])"
    params = (list(targets.messages), list(targets.threads))
    if dry_run:
        return int(conn.exec_driver_sql(f"SELECT count(*) FROM {_LOG} WHERE {where}", params).scalar() or 0)
    removed = int(conn.exec_driver_sql(
        f"WITH gone AS (DELETE FROM {_LOG} WHERE {where} RETURNING xid) "
        "SELECT count(*) FILTER (WHERE xid <> pg_current_xact_id()) FROM gone", params).scalar() or 0)
    table, key = _LOG_PRUNED
    conn.exec_driver_sql(
        f"INSERT INTO {table} (key, value) VALUES (?, pg_current_xact_id()::text::bigint + 1) "
        f"ON CONFLICT (key) DO UPDATE SET value = greatest({table}.value, EXCLUDED.value)", (key,))
    return removed


def _unknown_tables(conn: sa.Connection, existing: set[str], known: set[str]) -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    out = []
    for table in sorted(existing - known):
        columns = {name for name, _type, _pk in catalog.table_columns(conn, table)}
        conditions = tuple((f'"{c}"', "threads") for c in _THREAD_COLUMNS if c in columns) + \
            tuple((f'"{c}"', "resources") for c in _RESOURCE_COLUMNS if c in columns)
        if conditions:
            out.append((table, conditions))
    return out


def _database(store: "Store", resource_id: str, dry_run: bool, report: ForgetReport,
              checked: bool = False) -> tuple[Targets, AtCommit | None]:
    """``checked``: also take, before the commit, what the check afterwards compares with (``forget_check``)."""
    def run(conn: sa.Connection) -> tuple[Targets, AtCommit | None]:
        targets = _targets(conn, resource_id)
        report.resources, report.threads = list(targets.resources), list(targets.threads)
        report.notes += targets.notes
        if not dry_run:
            store.db.lock(conn, *(locks.resource_key(r) for r in targets.resources),
                          *(locks.thread_key(t) for t in targets.threads))
        existing = set(catalog.all_tables(conn))
        known: set[str] = set()
        for place in PLACES:
            for table in _tables(conn, place, existing):
                known.add(table)
                name = place.name if not place.prefix else f"{place.name} ({table})"
                report.removed[name] = report.removed.get(name, 0) + _apply(conn, table, place.conditions, targets,
                                                                          dry_run)
        if dry_run and _QUEUE in existing and "messages" in report.removed:
            # Deleting the messages queues one row each (a trigger), which forget then deletes too.
            report.removed["recall queue"] = report.removed.get("recall queue", 0) + report.removed["messages"]
        known |= {t for t in existing if t.startswith(_FTS + "_")}  # FTS5's own shadow tables
        for table, conditions in _unknown_tables(conn, existing, known):
            report.removed[f"other: {table}"] = _apply(conn, table, conditions, targets, dry_run)
        if _LOG in existing:  # last: every delete above logged the ids it touched
            report.removed["recall change log"] = _forget_log(conn, targets, dry_run)
        if not dry_run and targets.fts_rows and capabilities_of(conn).full_text == "fts5" and _FTS in existing:
            # Merge the index's segments, so deleted terms leave the index itself, not only its doc list;
            # and tell the in-process keyword indexes their rows went (FTS5 has no triggers to do it).
            conn.exec_driver_sql(f"INSERT INTO {_FTS}({_FTS}) VALUES ('optimize')")
            conn.exec_driver_sql(f"UPDATE {_STATE} SET value = value + 1 WHERE key = 'fts:rewrites'")
        if checked and not dry_run:  # last, so it sees every delete above
            return targets, at_commit(conn, [*targets.resources, *targets.threads])
        return targets, None

    if dry_run:
        with store.db.read() as conn:
            return run(conn)
    with store.db.write() as conn:
        return run(conn)


# -- the trace store beside the database -----------------------------------------------------------
def _trace_store(store: "Store", targets: Targets, dry_run: bool, report: ForgetReport,
                 committed: AtCommit | None = None) -> None:
    """``committed``: the check afterwards wants to know what the trace file held when its forget did (its spans
    naming the targets, taken while the forget still holds the file: ``AtCommit.spans``)."""
    if store.capabilities.traces_in_database:
        return  # the span table is one of the database's places
    obs = store.observability
    if obs is None:
        return
    path = Path(getattr(obs, "path", "") or "")
    if path.name and path.exists():
        forget = getattr(obs, "forget", None)
        import duckdb

        from core.traces.locking import StoreBusy
        from core.traces.recovery import is_broken_file_error

        naming = getattr(obs, "spans_naming", None)
        values = [*targets.resources, *targets.threads]
        taken: list[set[tuple[str, str]] | None] = []
        then = None
        if committed is not None and callable(naming):
            def then(con: Any) -> None:
                try:
                    taken.append(naming(values, con))
                except duckdb.Error as exc:  # the forget itself is done: only its check will not read the file
                    log.warning("forget could not take what the trace file %s held: %s", path, exc)
                    taken.append(None)
        try:
            traces, spans = forget(targets.threads, targets.resources, dry_run=dry_run, then=then) if forget else (0, 0)
            if then is not None and committed is not None:
                committed.spans = taken[0] if taken else set()  # (not called: no spans table, nothing was there)
        except StoreBusy:
            report.complete = False
            report.notes.append(f"the trace file {path} stayed busy (an agent is writing); run forget again")
            traces, spans = 0, 0
        except duckdb.IOException as exc:  # a file that cannot be opened is a place not reached
            report.complete = False
            why = str(exc).splitlines()[0]
            if is_broken_file_error(exc):
                report.notes.append(
                    f"the trace file {path} is broken ({why}), so it could not be searched; it holds traces only "
                    "(no conversation): delete it to be sure nothing of this resource stays there")
            else:
                report.notes.append(
                    f"the trace file {path} could not be opened ({why}), so this resource's traces in it were not "
                    "removed; fix its permissions and run forget again")
            traces, spans = 0, 0
        report.removed[f"traces ({path.name})"] = spans
    if path.name:
        report.removed["pending span files"] = _spill_files(path, targets, dry_run, report)
        _broken_copies(path, report)


def _spill_files(db: Path, targets: Targets, dry_run: bool, report: ForgetReport) -> int:
    """Spans a busy trace file made an exporter spill to ``<file>.spill-*.jsonl`` (the next flush would
    import them) and spans the store could never take, set aside in ``<file>.poison-*.jsonl``: the
    resource's traces are dropped from both. A line that is not a span's JSON cannot be told apart: it
    is kept, and the report says where."""
    if not db.parent.exists():
        return 0
    threads, resources = set(targets.threads), set(targets.resources)
    dropped = 0
    files = sorted({*db.parent.glob(f"{db.name}.spill-*"), *db.parent.glob(f"{db.name}.poison-*.jsonl")})
    for path in files:
        try:
            lines = [x for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("span file %s not readable for forget: %s", path, exc)
            report.complete = False
            report.notes.append(f"the span file {path} could not be read ({exc}), so it was not searched; it holds "
                                "traces only (no conversation): delete it to be sure nothing of this resource stays")
            continue
        spans: list[dict[str, Any] | None] = []
        for line in lines:
            try:
                span = json.loads(line)
            except ValueError:
                span = None
            spans.append(span if isinstance(span, dict) else None)
        if any(s is None for s in spans):
            report.complete = False
            report.notes.append(f"the span file {path} has lines that are not spans; they were kept: delete the file to "
                                "be sure nothing of this resource stays there (it holds traces only)")
        doomed = {s.get("traceId") for s in spans
                  if s is not None and (s.get("threadId") in threads or s.get("resourceId") in resources)}
        keep = [line for line, s in zip(lines, spans) if s is None or s.get("traceId") not in doomed]
        dropped += len(lines) - len(keep)
        if dry_run or len(keep) == len(lines):
            continue
        tmp = path.with_name(path.name + ".forget")
        tmp.write_text("".join(x + "\n" for x in keep), encoding="utf-8")
        os.replace(tmp, path)
    return dropped


def _broken_copies(db: Path, report: ForgetReport) -> None:
    """Trace files set aside as broken (``<file>.broken-<time>``, ``core.traces.recovery``) cannot be opened,
    so they cannot be searched: the report names them and says they are safe to delete."""
    found = sorted(db.parent.glob(f"{db.name}.broken-*")) if db.parent.exists() else []
    if found:
        report.complete = False
        names = ", ".join(str(p) for p in found)
        report.notes.append(f"{len(found)} trace file{'s' if len(found) != 1 else ''} set aside as broken could not be "
                            f"searched ({names}); they hold traces only (no conversation): delete them to be sure "
                            "nothing of this resource stays there")


#: The note a forget that deleted rows ends with (``memory-studio forget --vacuum`` says it vacuums next).
VACUUM_NOTE = "deleted rows keep their bytes in the file's free pages until it is vacuumed (`memory-studio vacuum`)"
#: The same on a server database, whose tables keep deleted rows' bytes in their pages (``PgDatabase._reclaim``).
VACUUM_NOTE_SERVER = ("deleted rows keep their bytes in the tables' pages on the server until they are vacuumed "
                      "(`memory-studio vacuum` rewrites the memory tables)")


def vacuum_note(store: "Store") -> str:
    """The note for this store's kind of database."""
    return VACUUM_NOTE_SERVER if store.capabilities.server else VACUUM_NOTE


def forget_resource(store: "Store", resource_id: str, *, dry_run: bool = False,
                    check: Callable[["Store", Sequence[str], AtCommit], CheckResult] | None = check_after_forget,
                    ) -> ForgetReport:
    """Delete (``dry_run``: count) every row about ``resource_id``; see the module docstring. ``check``: what
    looks for rows still naming it afterwards (``forget_check``; None: no check)."""
    if not isinstance(resource_id, str) or not resource_id.strip():
        raise InvalidArgumentError("Say which resource to forget (a non-empty resource id).")
    check_id(resource_id, "resource id", InvalidArgumentError)
    if not dry_run and store.read_only:
        from core.storage import ReadOnlyError

        raise ReadOnlyError(f"{store.location.display} is open read-only; nothing was forgotten. Allow writes first.")
    report = ForgetReport(resource_id, [resource_id], [], dry_run=dry_run)
    targets, committed = _database(store, resource_id, dry_run, report, checked=check is not None)
    _trace_store(store, targets, dry_run, report, committed)
    if not dry_run:
        if check is not None and committed is not None:
            found = check(store, [*targets.resources, *targets.threads], committed)
            report.leftovers, report.written_since = dict(found.left), dict(found.since)
            report.notes += found.notes
        if report.total:
            report.notes.append(vacuum_note(store))
    return report


__all__ = ["VACUUM_NOTE", "VACUUM_NOTE_SERVER", "ForgetReport", "PLACES", "Place", "Targets", "forget_resource", "mentions",
           "vacuum_note"]
