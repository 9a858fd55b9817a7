"""Import an export file into a database: ids kept, identical rows skipped, conflicts reported.

Every row is matched by its id. A row that is not there is inserted; an identical one is left alone
(so a second import writes nothing); one that differs is a *conflict*: reported and kept as it is,
unless ``overwrite=True`` replaces it. A thread that belongs to another resource in the target is
never moved (a thread's resource never changes), overwrite or not; its messages and records are
left out and reported.

Which table a list of the file goes to is decided by ``core.transfer.sections``, never by the file,
and every row is checked there before anything is written (a bad row refuses the whole file). A
message whose id is already in another thread here is never moved (a message never changes thread),
nor is the turn record of such a message imported (a record is read by its input message id), and an
observation or turn record whose key is taken by another thread's row is never replaced,
overwrite or not: such rows are left out and reported, like threads of another resource.

A thread, resource or message the import would create takes its id only when the id follows the rule
for new ids from outside (``core.ids.new_id_problem``: printable, at most 256 characters; the gateway
and the MCP server hold their clients to it): an escape sequence or a bidirectional override in a new
id refuses the file, naming the row. Rows already in the target with such ids (another tool wrote them)
are matched and imported as before.

Working-memory versions have database-wide integer ids, so they are matched by content; an imported
version keeps its id when that id is free in the target, and turn records that point at a version
follow it when it gets a new one. Tables only Memory Studio has (versions, turn records) may be
missing from a target Mastra wrote: their rows are then skipped with a note saying how to keep them.
The tool definitions turn records name, agent configurations and traces are written by
``core.transfer.replay_sections`` into the tables of the sections it registered.

The whole import is one write transaction: if anything fails, nothing is written.
"""

from __future__ import annotations

import collections
import itertools
import json
import logging
from typing import Any, Iterable, Iterator, Mapping

import sqlalchemy as sa

from core.ids import new_id_problem
from core.storage import SchemaError, Store, catalog
from core.storage.capabilities import capabilities_of
from core.storage.locks import om_key, resource_key, thread_key
from core.storage.memory_store import dump_json, load_json
from core.message_size import DEFAULT_MAX_MESSAGE_BYTES
from core.working_memory import DEFAULT_MAX_WORKING_MEMORY_BYTES
from core.transfer import rows as R
from core.transfer import sections as S
from core.transfer.content_match import ContentIndex
from core.transfer.edit_sections import import_versions, oldest_first
from core.transfer.errors import ExportFormatError, TransferError
from core.transfer.format import check_one_resource, validate
from core.transfer.replay_sections import import_sections, import_traces
from core.transfer.report import Conflict, ImportReport
from core.transfer.spool import SpoolPart, sorted_rows
from core.terminal_text import printable

log = logging.getLogger(__name__)

_CHUNK = 500
_MESSAGE_COLUMNS = ("id", "thread_id", "content", "role", "type", "createdAt", "resourceId")
_INSERT_MESSAGE = (
    'INSERT INTO mastra_messages ("id", "thread_id", "content", "role", "type", "createdAt", "resourceId") '
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_REPLACE_MESSAGE = _INSERT_MESSAGE + (
    " ON CONFLICT (id) DO UPDATE SET thread_id = excluded.thread_id, content = excluded.content, "
    'role = excluded.role, type = excluded.type, "createdAt" = excluded."createdAt", '
    '"resourceId" = excluded."resourceId"'
)


def preview_import(store: Store, data: Mapping[str, Any], *, overwrite: bool = False, with_configs: bool = False,
                   name: str = "the file", max_message_bytes: int | None = DEFAULT_MAX_MESSAGE_BYTES,
                   max_working_memory_bytes: int | None = DEFAULT_MAX_WORKING_MEMORY_BYTES) -> ImportReport:
    """What ``import_data`` would do, without writing (works on a read-only database). A database a newer
    Memory Studio wrote is refused as the import refuses it (``SchemaError``). ``name``: as ``import_data``'s."""
    validate(data, name=name, max_message_bytes=max_message_bytes, max_working_memory_bytes=max_working_memory_bytes)
    newer = store.db.unknown_migrations()
    if newer:
        raise SchemaError(f"{store.location.display} was written by a newer Memory Studio (migrations "
                          f"{', '.join(newer)}). Upgrade Memory Studio before importing into it.")
    with store.db.read() as conn:
        importer = _Importer(conn, data, overwrite, store.location.display, dry_run=True, with_configs=with_configs,
                             name=name)
        report = importer.run()
    import_traces(store, data, report, importer.blocked)
    return report


def import_data(store: Store, data: Mapping[str, Any], *, overwrite: bool = False, with_configs: bool = False,
                name: str = "the file", max_message_bytes: int | None = DEFAULT_MAX_MESSAGE_BYTES,
                max_working_memory_bytes: int | None = DEFAULT_MAX_WORKING_MEMORY_BYTES) -> ImportReport:
    """Import a checked export document in one transaction. Raises ``ReadOnlyError`` on a read-only
    store, ``ExportFormatError`` naming the row when a row breaks a rule (``sections``), and
    ``TransferError`` when the import failed (then nothing was written). ``max_message_bytes`` and
    ``max_working_memory_bytes``: the limits the file's messages and working memories are held to
    (the engine's defaults; None: none). ``with_configs``: also take the file's memory overrides (its
    ``configs``: working-memory templates and schemas, which change what every user of that memory is asked
    to keep); without it they are left out and the report says so. ``name``: the file as its errors name it,
    the path as the user gave it (``format.shown_path``), as ``load``'s errors did."""
    validate(data, name=name, max_message_bytes=max_message_bytes, max_working_memory_bytes=max_working_memory_bytes)
    try:
        with store.db.write() as conn:
            # Postgres runs writers side by side: hold what an agent's read-modify-write would hold.
            store.db.lock(conn, *_lock_keys(data))
            importer = _Importer(conn, data, overwrite, store.location.display, dry_run=False,
                                 with_configs=with_configs, name=name)
            report = importer.run()
    except (sa.exc.DBAPIError, ValueError) as exc:
        if isinstance(exc, TransferError):
            raise
        raise TransferError(
            f"Import into {store.location.display} failed and nothing was written: {_db_message(exc)}"
        ) from exc
    import_traces(store, data, report, importer.blocked)  # spans live beside the database, written after it
    log.info("import into %s: %s", store.location.display, report.summary())
    return report


def _lock_keys(data: Mapping[str, Any]) -> list[str]:
    keys = [resource_key(r["id"]) for r in data.get("resources", [])]
    keys += [thread_key(t["id"]) for t in data.get("threads", [])]
    keys += [om_key(o["lookupKey"]) for o in data.get("observations", []) if isinstance(o.get("lookupKey"), str)]
    return keys


def _db_message(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None)
    return str(orig or exc).strip()


class _Importer:
    def __init__(self, conn: sa.Connection, data: Mapping[str, Any], overwrite: bool, target: str,
                 *, dry_run: bool, with_configs: bool = False, name: str = "the file") -> None:
        self.conn = conn
        self.name = name  # the file, as its errors name it
        R.forget_columns(conn)
        self.data = data
        self.overwrite = overwrite
        self.with_configs = with_configs  # the file's memory overrides are taken only when asked
        self.report = ImportReport(target, dry_run=dry_run)
        self.blocked: set[str] = set()  # threads owned by another resource in the target
        self.elsewhere: dict[str, str] = {}  # message id -> its thread here, of the file's messages left out
        self.version_ids: dict[int, int] = {}  # exported version id -> id in the target
        self.observation_records: dict[str, str] = {}  # observation record id -> lookup key, of records kept
        self._message_counts: collections.Counter[str] | None = None  # thread id -> its messages in the file
        # (table, key) -> its rows by content; every row written to such a table goes through _insert_keeping_id
        self._content_indexes: dict[tuple[str, str], ContentIndex] = {}

    def run(self) -> ImportReport:
        for name in ("mastra_threads", "mastra_messages", "mastra_resources"):
            if not catalog.has_table(self.conn, name):
                raise TransferError(f"{self.report.target} has no {name} table; it is not a memory database. "
                                    "Import into a database written by Memory Studio or Mastra, or a new file.")
        for row in self.data.get("resources", []):
            self._resource(row)
        for row in self.data.get("threads", []):
            self._thread(row)
        check_one_resource(self.data, self.name)  # one resource's memory, never another user's (a bad file: nothing written)
        self._messages(self.data.get("messages", []))
        self._versions(self.data.get("workingMemory", []))
        self._observations(self.data.get("observations", []))
        self._turns(self.data.get("turns", []))
        import_versions(self)  # message and observation-log versions, after the rows they belong to
        import_sections(self)  # tool definitions, agent configurations (tables chosen there, never by the file)
        return self.report

    # -- bookkeeping ---------------------------------------------------------------------------
    def _wrote(self, kind: str, n: int = 1) -> None:
        self.report.written[kind] = self.report.written.get(kind, 0) + n

    def _same(self, kind: str, n: int = 1) -> None:
        self.report.unchanged[kind] = self.report.unchanged.get(kind, 0) + n

    def _conflict(self, kind: str, row_id: str, reason: str, *, may_overwrite: bool = True) -> bool:
        """Record a conflict; True when the caller should replace the row."""
        replace = self.overwrite and may_overwrite
        self.report.conflicts.append(Conflict(kind, row_id, reason, replace, may_overwrite))
        return replace

    def _check_new_id(self, kind: str, row_id: str, field: str, value: str) -> None:
        """Refuse the file when a row it would create here gets an id no gateway or MCP client could create
        (``new_id_problem``); rows already here are matched whatever their ids."""
        problem = new_id_problem(value)
        if problem is None:
            return
        shown = row_id if len(row_id) <= 80 else row_id[:60] + "…"
        raise ExportFormatError(printable(
            f"{self.name}: its {kind} {shown!r} would be new in {self.report.target}, and its {field} cannot be a new id: "
            f"{problem}. Nothing was imported; give it an id of printable text of at most 256 characters in the "
            "file (rows already in the database keep their ids and are imported as before)."))

    def _known_resource(self, resource_id: str) -> bool:
        """Whether the target has the resource: its row, or a thread of it."""
        return bool(R.select_rows(self.conn, "mastra_resources", "id = ?", [resource_id])) or \
            bool(self.conn.exec_driver_sql('SELECT 1 FROM mastra_threads WHERE "resourceId" = ? LIMIT 1',
                                           (resource_id,)).first())

    def _messages_of(self, thread_id: str) -> int:
        """How many of the file's messages are in ``thread_id`` (counted in one pass over them, when first asked)."""
        if self._message_counts is None:
            self._message_counts = collections.Counter(m["threadId"] for m in self.data.get("messages", []))
        return self._message_counts[thread_id]

    def _exec(self, sql: str, params: Any = ()) -> None:
        if not self.report.dry_run:
            self.conn.exec_driver_sql(sql, params)

    # -- resources and threads -----------------------------------------------------------------
    def _resource(self, row: Mapping[str, Any]) -> None:
        rid = row["id"]
        values = (row.get("workingMemory"), _meta_text(row.get("metadata")),
                  row.get("createdAt") or row.get("updatedAt"), row.get("updatedAt") or row.get("createdAt"))
        existing = R.select_rows(self.conn, "mastra_resources", "id = ?", [rid])
        if not existing:
            self._check_new_id("resource", rid, "id", rid)
            self._exec('INSERT INTO mastra_resources (id, "workingMemory", metadata, "createdAt", "updatedAt") '
                       "VALUES (?, ?, ?, ?, ?)", (rid, *values))
            self._wrote("resources")
            return
        old = existing[0]
        differs = [label for label, same in (
            ("working memory", old.get("workingMemory") == row.get("workingMemory")),
            ("metadata", load_json(old.get("metadata")) == row.get("metadata")),
        ) if not same]
        if not differs:
            self._same("resources")
        elif self._conflict("resources", rid, f"differs here ({', '.join(differs)})"):
            self._exec('UPDATE mastra_resources SET "workingMemory" = ?, metadata = ?, "createdAt" = ?, '
                       '"updatedAt" = ? WHERE id = ?', (*values, rid))
            self._wrote("resources")

    def _thread(self, row: Mapping[str, Any]) -> None:
        tid = row["id"]
        values = (row.get("title") or "", _meta_text(row.get("metadata")), row["createdAt"],
                  row.get("updatedAt") or row["createdAt"])
        existing = R.select_rows(self.conn, "mastra_threads", "id = ?", [tid])
        if not existing:
            self._check_new_id("thread", tid, "id", tid)
            owner = row["resourceId"]
            # (The owner's id is asked about only when it breaks the rule: most threads' owners pass at once.)
            if new_id_problem(owner) is not None and (not owner or not self._known_resource(owner)):
                self._check_new_id("thread", tid, "resourceId", owner)
            self._exec('INSERT INTO mastra_threads (id, "resourceId", title, metadata, "createdAt", "updatedAt") '
                       "VALUES (?, ?, ?, ?, ?, ?)", (tid, row["resourceId"], *values))
            self._wrote("threads")
            return
        old = existing[0]
        if old["resourceId"] != row["resourceId"]:
            self.blocked.add(tid)
            n = self._messages_of(tid)
            self._conflict(
                "threads", tid,
                f"belongs to resource {old['resourceId']} here but to {row['resourceId']} in the file; a thread "
                f"never changes resource, so it and its {n} message{'s' if n != 1 else ''} were not imported "
                "(not even with overwrite)", may_overwrite=False)
            return
        differs = [label for label, same in (
            ("title", (old.get("title") or "") == values[0]),
            ("metadata", load_json(old.get("metadata")) == row.get("metadata")),
            ("createdAt", old["createdAt"] == row["createdAt"]),
        ) if not same]
        if not differs:
            self._same("threads")
        elif self._conflict("threads", tid, f"differs here ({', '.join(differs)})"):
            self._exec('UPDATE mastra_threads SET title = ?, metadata = ?, "createdAt" = ?, "updatedAt" = ? '
                       "WHERE id = ?", (*values, tid))
            self._wrote("threads")

    # -- messages ------------------------------------------------------------------------------
    def _messages(self, messages: Iterable[Mapping[str, Any]]) -> None:
        """Match and write the file's messages a chunk at a time, in the import's transaction: a file's messages
        (a ``RowSpool``: read from disk) are never all held, nor their rows to write. A message refused later (a
        new id no client could create) rolls back the chunks written before it with the rest of the import."""
        wanted = (m for m in messages if m["threadId"] not in self.blocked)
        written = 0
        while chunk := list(itertools.islice(wanted, _CHUNK)):
            written += self._message_chunk(chunk)
        self._wrote("messages", written)

    def _message_chunk(self, chunk: list[Mapping[str, Any]]) -> int:
        inserts: list[tuple[Any, ...]] = []
        replaces: list[tuple[Any, ...]] = []
        clause, params = R.in_clause(m["id"] for m in chunk)
        existing = {r["id"]: r for r in R.select_rows(self.conn, "mastra_messages", f"id IN {clause}", params)}
        for m in chunk:
            values = (m["id"], m["threadId"], m["content"], m["role"], m["type"], m["createdAt"],
                      m.get("resourceId"))
            old = existing.get(m["id"])
            if old is None:
                self._check_new_id("message", m["id"], "id", m["id"])
                inserts.append(values)
                continue
            if old["thread_id"] != m["threadId"]:
                self.elsewhere[m["id"]] = old["thread_id"]
                self._conflict("messages", m["id"], f"is in thread {old['thread_id']} here, not "
                               f"{m['threadId']}; a message never moves to another thread, so it was not "
                               "imported (not even with overwrite)", may_overwrite=False)
                continue
            differs = _message_differences(old, m)
            if not differs:
                self._same("messages")
            elif self._conflict("messages", m["id"], f"differs here ({', '.join(differs)})"):
                replaces.append(values)
        if not self.report.dry_run:
            if inserts:
                self.conn.exec_driver_sql(_INSERT_MESSAGE, inserts)
            if replaces:
                self.conn.exec_driver_sql(_REPLACE_MESSAGE, replaces)
        self.report.message_ids.extend(v[0] for v in [*inserts, *replaces])
        return len(inserts) + len(replaces)

    # -- working-memory versions ---------------------------------------------------------------
    def _versions(self, entries: list[Mapping[str, Any]]) -> None:
        """The working-memory versions, oldest first. An entry's versions may be a ``SpoolPart`` (a file read from
        disk): they are then read in passes and sorted on disk (``spool.sorted_rows``), never all held."""
        def wanted() -> Iterator[Mapping[str, Any]]:
            return (v for e in entries if not (e["scope"] == "thread" and e["ownerId"] in self.blocked)
                    for v in e.get("versions", []))

        if next(wanted(), None) is None:
            return
        table = self._table(S.WM_VERSIONS)
        if not catalog.has_table(self.conn, table):
            n = sum(1 for _ in wanted())
            self.report.notes.append(
                f"{n} working-memory version{'s' if n != 1 else ''} not imported: "
                f"{self.report.target} has no {table} table (a database Mastra wrote). Run "
                "'memory-studio migrate' on it first to keep the history; the current values were imported.")
            return
        cols = self._check_columns(table, wanted(), "working-memory versions")
        on_disk = any(isinstance(e.get("versions"), SpoolPart) for e in entries)
        ordered = sorted_rows(wanted(), oldest_first, "working-memory versions") if on_disk \
            else sorted(wanted(), key=oldest_first)
        for row in ordered:
            src_id = row.get("id")
            content = {k: v for k, v in row.items() if k != "id" and k in cols}
            found = self._find_by_content(table, content, "id")
            if found is not None:
                self._map_version(src_id, found)
                self._same("workingMemoryVersions")
                continue
            new_id = self._insert_keeping_id(table, "id", src_id, content)
            self._map_version(src_id, new_id)
            self._wrote("workingMemoryVersions")

    def _map_version(self, src_id: Any, target_id: int | None) -> None:
        if isinstance(src_id, int) and target_id is not None:
            self.version_ids[src_id] = target_id

    def _find_by_content(self, table: str, content: Mapping[str, Any], key: str | None) -> int | None:
        """The ``key`` of the first row holding exactly ``content`` (1 when the table has no key), or None: the
        lowest key of the rows where each column of ``content`` ``IS`` its value (``content_match``: the table is
        read once per import, not scanned per row)."""
        if key is None:  # a Postgres table without a key: any row holding it
            where = " AND ".join(R.same_value_sql(self.conn, k) for k in content)
            row = self.conn.exec_driver_sql(f"SELECT 1 FROM {R.quote(table)} WHERE {where} LIMIT 1",
                                            R.bind_values(self.conn, table, content)).first()
            return 1 if row else None
        return self._content_index(table, key).find(content)

    def _content_index(self, table: str, key: str) -> ContentIndex:
        found = self._content_indexes.get((table, key))
        if found is None:
            found = self._content_indexes[(table, key)] = ContentIndex(self.conn, table, key)
        return found

    def _insert_keeping_id(self, table: str, key: str | None, src_id: Any, content: Mapping[str, Any]) -> int | None:
        """Insert with the exported integer id when the target has it free, else with a new one."""
        S.writable(table)
        if key is None:  # a Postgres table without a key: rows have no id to keep
            if not self.report.dry_run:
                R.insert_row(self.conn, table, content)
            return None
        free = isinstance(src_id, int) and self.conn.exec_driver_sql(
            f"SELECT 1 FROM {R.quote(table)} WHERE {R.quote(key)} = ?", (src_id,)).first() is None
        if self.report.dry_run:
            return src_id if free else None
        if free or capabilities_of(self.conn).implicit_rowid:  # SQLite gives a row without an id the next rowid
            new_id = R.insert_row(self.conn, table, {key: src_id, **content} if free else dict(content),
                                  returning=key)
        else:  # Postgres: the next id after the largest
            new_id = R.next_free_id(self.conn, table, key)
            R.insert_row(self.conn, table, {key: new_id, **content})
        R.after_explicit_ids(self.conn, table, key)
        if (table, key) in self._content_indexes:
            self._content_indexes[(table, key)].added(int(new_id or 0), content)
        return int(new_id or 0)

    # -- observations and turn records ---------------------------------------------------------
    def _observations(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """The observation records (a ``RowSpool`` for a file read from disk: read in passes, never all held)."""
        def wanted() -> Iterator[Mapping[str, Any]]:
            return (r for r in rows if r.get("threadId") not in self.blocked)

        count = sum(1 for _ in wanted())
        if not count:
            return
        table = self._table(S.OBSERVATIONS)
        if not catalog.has_table(self.conn, table):
            self.report.notes.append(
                f"{count} observational-memory row{'s' if count != 1 else ''} not imported: "
                f"{self.report.target} has no {table} table. Run 'memory-studio migrate' on it first.")
            return
        self._check_columns(table, wanted(), "observations")
        # The newest record of a key is the one its agent reads. When the target keeps records of its own for a
        # key (ids the file does not hold), a new record of the file would become current and hide them, or be
        # hidden: two lineages of one memory. Such rows are left out, overwrite or not; rows of a lineage the
        # target shares with the file (a record imported before) are matched by id as usual.
        file_ids = {r.get("id") for r in wanted()}
        own: dict[str, int] = {}
        for key in sorted({r["lookupKey"] for r in wanted() if isinstance(r.get("lookupKey"), str)}):
            theirs = [found for (found,) in self.conn.exec_driver_sql(  # (ids only: not every generation's log)
                f"SELECT id FROM {R.quote(table)} WHERE {R.quote('lookupKey')} = ?", (key,)) if found not in file_ids]
            if theirs:
                own[key] = len(theirs)
        left: dict[str, int] = {}
        owner_fields = S.OBSERVATION_OWNERS
        for row in wanted():
            key = row.get("lookupKey")
            found = R.select_rows(self.conn, table, "id = ?", [row["id"]])
            if isinstance(key, str) and key in own and not found:
                left[key] = left.get(key, 0) + 1
                continue
            self._upsert_by_key(table, ["id"], row, "observations", ignore=("updatedAt",), owner_fields=owner_fields)
            if not found or all(found[0].get(f) == row.get(f) for f in owner_fields if f in found[0]):
                self.observation_records[str(row["id"])] = str(key)
        for key, n in sorted(left.items()):
            self.report.notes.append(
                f"{n} observational-memory row{'s' if n != 1 else ''} of {key} not imported: {self.report.target} keeps "
                f"observations of its own for it ({own[key]} record{'s' if own[key] != 1 else ''}), and an imported "
                "record would take or lose the place of the one its agent reads (not even with overwrite); the "
                "target's observations are kept.")

    def _turns(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """The turn records (a ``RowSpool``: read from disk, a row at a time, in passes: never all held)."""
        def wanted() -> Iterator[Mapping[str, Any]]:
            return (r for r in rows if r.get(S.TURNS.thread_field or "") not in self.blocked)

        if next(wanted(), None) is None:
            return
        table = self._table(S.TURNS)
        if not catalog.has_table(self.conn, table):
            n = sum(1 for _ in wanted())
            self.report.notes.append(
                f"{n} turn record{'s' if n != 1 else ''} not imported: {self.report.target} "
                f"has no {table} table. Run 'memory-studio migrate' on it (or upgrade Memory Studio) first.")
            return
        cols = self._check_columns(table, wanted(), "turn records")
        pk = R.primary_key(self.conn, table)
        integer_key = len(pk) == 1 and "INT" in next(t for n, t, _p in R.columns(self.conn, table) if n == pk[0])
        dangling = 0
        for raw in wanted():
            row = dict(raw)
            input_id = str(row.get(S.TURNS.message_field or ""))
            if input_id in self.elsewhere:  # a record is read by its input message id: it would be that thread's turn's
                self._conflict("turns", input_id, f"its input message is in thread {self.elsewhere[input_id]} here, not "
                               f"{row.get(S.TURNS.thread_field or '')}; a record is read by its input message, so it "
                               "was not imported (not even with overwrite)", may_overwrite=False)
                continue
            if "wm_version_id" in row and row["wm_version_id"] is not None:
                mapped = self.version_ids.get(row["wm_version_id"])
                if mapped is None:
                    dangling += 1
                row["wm_version_id"] = mapped
            if integer_key or not pk:
                key = pk[0] if pk else ("rowid" if capabilities_of(self.conn).implicit_rowid else None)
                content = {k: v for k, v in row.items() if k != key and k in cols}
                if self._find_by_content(table, content, key) is not None:
                    self._same("turns")
                    continue
                self._insert_keeping_id(table, key, row.get(key) if key else None, content)
                self._wrote("turns")
            else:
                self._upsert_by_key(table, pk, row, "turns", owner_fields=(S.TURNS.thread_field or "thread_id",))
        if dangling:
            self.report.notes.append(
                f"{dangling} turn record{'s' if dangling != 1 else ''} named a working-memory version that is not "
                "in the file (exported without versions); that link was left empty.")

    def _table(self, section: S.Section) -> str:
        assert section.table is not None
        return S.writable(section.table)

    def _upsert_by_key(self, table: str, key: list[str], row: Mapping[str, Any], kind: str,
                       ignore: Iterable[str] = (), owner_fields: Iterable[str] = ()) -> None:
        """Insert by key; a row with the same key is unchanged, a conflict, or, when it belongs to
        another thread or resource here (``owner_fields`` differ), never replaced."""
        S.writable(table)
        where = " AND ".join(f"{R.quote(k)} = ?" for k in key)
        existing = R.select_rows(self.conn, table, where, [row.get(k) for k in key])
        row_id = "/".join(str(row.get(k)) for k in key)
        if not existing:
            if not self.report.dry_run:
                R.insert_row(self.conn, table, row)
            self._wrote(kind)
            return
        skip = set(ignore)
        old = existing[0]
        moved = [f for f in owner_fields if f in old and old.get(f) != row.get(f)]
        if moved:
            here = ", ".join(f"{f} {old.get(f)!r}" for f in moved)
            self._conflict(kind, row_id, f"belongs to another owner here ({here}); a row never moves to another "
                           "thread or resource, so it was not imported (not even with overwrite)", may_overwrite=False)
            return
        differs = [k for k in row if k not in skip and old.get(k) != row[k]]
        if not differs:
            self._same(kind)
        elif self._conflict(kind, row_id, f"differs here ({', '.join(differs[:4])}{'…' if len(differs) > 4 else ''})"):
            if not self.report.dry_run:
                R.insert_row(self.conn, table, row, replace_key=key)
            self._wrote(kind)

    def _check_columns(self, table: str, rows: Iterable[Mapping[str, Any]], what: str) -> set[str]:
        have = {c[0] for c in R.columns(self.conn, table)}
        unknown = sorted({k for r in rows for k in r} - have)
        if unknown:
            raise TransferError(
                f"{self.name}: its {what} have columns that {self.report.target}'s {table} table lacks "
                f"({', '.join(unknown)}): the file comes from a newer schema. Run 'memory-studio migrate' on the "
                "target or upgrade Memory Studio, then import again. Nothing was written.")
        return have


def _meta_text(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else dump_json(value)


def _message_differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    pairs = (("thread", old["thread_id"], new["threadId"]), ("role", old["role"], new["role"]),
             ("type", old["type"], new["type"]), ("createdAt", old["createdAt"], new["createdAt"]),
             ("resourceId", old.get("resourceId"), new.get("resourceId")))
    out = [label for label, a, b in pairs if a != b]
    if not _same_content(old["content"], new["content"]):
        out.append("content")
    return out


def _same_content(a: Any, b: Any) -> bool:
    if a == b:
        return True
    try:  # the same JSON written by another serializer (key order, spacing) is the same message
        return bool(json.loads(a) == json.loads(b))
    except (TypeError, ValueError):
        return False
