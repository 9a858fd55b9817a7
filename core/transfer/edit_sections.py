"""The history of explicit edits in an export: message versions and observation-log versions.

``core.edits`` keeps one row per edit, delete or undo of a stored message (``memory_studio_message_versions``,
the whole row before and after) and of an observation line (``memory_studio_om_versions``, the whole log
before and after). A turn that ran before such a change is rebuilt from them with what its model saw
(``core.replay.edited``), and Message History and undo read them. So an export carries them:

- ``messageVersions``: the rows of the exported threads (deleted messages' included);
- ``observationVersions``: the rows of the exported observation records.

Each list is a section of ``core.transfer.sections`` (registered below, with the rules its rows obey). A
version's rows before and after must be a message of the version's own thread and resource with the
version's message id, and a message id of the file must be in the version's thread: a version is read by
message id wherever the message is, so one naming another thread's message would change how that message
replays and what undo restores. On import, versions are matched by content (their integer ids are
database-wide) and keep their id when it is free; versions of threads left out, of a message that is in
another thread here, or of an observation record not imported are left out with a note.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping

import sqlalchemy as sa

from core.edits.schema import MESSAGE_VERSIONS, OBSERVATION_VERSIONS
from core.storage import catalog
from core.transfer import rows as R
from core.transfer import sections as S
from core.transfer.spool import Keep, RowSpool, sorted_rows

if TYPE_CHECKING:  # pragma: no cover
    from core.transfer.importer import _Importer

OPS = ("edit", "delete", "undo")


# -- export ------------------------------------------------------------------------------------------
def export_versions(conn: sa.Connection, mine: R.ThreadScope, observations: R.Where | None,
                    kept: Keep = lambda rows, _what: list(rows)) -> dict[str, Any]:
    """The version rows of these threads' messages and of the observation records ``observations`` picks (None:
    none), oldest first (by id: each list is one statement, read as it is kept by ``kept``)."""
    messages: Any = []
    if catalog.has_table(conn, MESSAGE_VERSIONS):
        of = mine.rows_of("thread_id")
        messages = kept(R.iter_rows(conn, MESSAGE_VERSIONS, of.sql, of.params, order="id", stream=True),
                        "message versions")
    logs: Any = []
    if observations is not None and catalog.has_table(conn, OBSERVATION_VERSIONS):
        logs = kept(R.iter_rows(conn, OBSERVATION_VERSIONS,
                                f"record_id IN (SELECT id FROM mastra_observational_memory WHERE {observations.sql})",
                                observations.params, order="id", stream=True), "observation-log versions")
    return {"messageVersions": messages, "observationVersions": logs}


# -- the sections and their rules ----------------------------------------------------------------------
def _common(row: S.Row) -> str | None:
    if row.get("op") not in OPS:
        return f"its op {row.get('op')!r} is not one of {', '.join(OPS)}"
    if not isinstance(row.get("author"), str):
        return "it needs a string author"
    return S.integer_id_problem(row, "id") or S.times_problem(row, ("createdAt",))


def _message_version_rule(row: S.Row, index: S.FileIndex) -> str | None:
    if (problem := _common(row)) is not None:
        return problem
    message_id, thread = row.get("message_id"), row.get("thread_id")
    if not isinstance(message_id, str) or not isinstance(thread, str):
        return "it needs a string message_id and thread_id"
    here = index.message_thread.get(message_id)
    if here is not None and here != thread:
        return f"its message {message_id!r} is in thread {here!r} of the file, not {thread!r}"
    owner = index.thread_owner.get(thread)
    for name in ("before_row", "after_row"):
        text = row.get(name)
        if text is None:
            continue
        try:
            stored = json.loads(text) if isinstance(text, str) else None
        except ValueError:
            stored = None
        if not isinstance(stored, dict):
            return f"its {name} is not a stored message row (JSON text of an object)"
        if stored.get("id") != message_id or stored.get("thread_id") != thread:
            return (f"its {name} is message {stored.get('id')!r} of thread {stored.get('thread_id')!r}, not the "
                    f"version's message {message_id!r} of thread {thread!r}")
        if stored.get("resourceId") not in (None, owner):
            return f"its {name} says resource {stored.get('resourceId')!r}, but its thread belongs to {owner!r}"
        if stored.get("role") == "system" or not isinstance(stored.get("content"), str):
            return f"its {name} is not a message as the API stores it (text content, no system role)"
    if row.get("before_row") is None and row.get("after_row") is None:
        return "it has neither a row before nor a row after"
    return None


def _observation_version_rule(row: S.Row, index: S.FileIndex) -> str | None:
    if (problem := _common(row)) is not None:
        return problem
    record_id = row.get("record_id")
    record = index.observations.get(record_id) if isinstance(record_id, str) else None
    if record is None:
        return f"it is a version of observation record {row.get('record_id')!r}, which is not in the file"
    for mine, theirs in (("lookup_key", "lookupKey"), ("thread_id", "threadId"), ("resource_id", "resourceId")):
        if row.get(mine) is not None and row.get(mine) != record.get(theirs):
            return f"its {mine} {row.get(mine)!r} is not {record.get(theirs)!r}, its record's"
    if row.get("lookup_key") is None:
        return "it needs its record's lookup_key"
    if not isinstance(row.get("before_text"), str) or not isinstance(row.get("after_text"), str):
        return "it needs the log before and after as text"
    return None


MESSAGE_VERSION_SECTION = S.register(S.Section(
    "messageVersions", MESSAGE_VERSIONS, "message version", id_fields=("message_id",), thread_field="thread_id",
    resource_field="resource_id", check=_message_version_rule))
OBSERVATION_VERSION_SECTION = S.register(S.Section(
    "observationVersions", OBSERVATION_VERSIONS, "observation-log version", id_fields=("record_id",),
    check=_observation_version_rule))


# -- import --------------------------------------------------------------------------------------------
def import_versions(imp: "_Importer") -> None:
    """Write the file's message and observation-log versions (inside the import's transaction, after the
    messages and observation records they belong to). The lists may be ``RowSpool``s (a file read from disk):
    they are then read in passes and sorted on disk (``spool.sorted_rows``), never all held."""
    data = imp.data
    _import_message_versions(imp, data.get("messageVersions") or [])
    _import_observation_versions(imp, data.get("observationVersions") or [])


def _import_message_versions(imp: "_Importer", rows: Iterable[Mapping[str, Any]]) -> None:
    def wanted() -> Iterator[Mapping[str, Any]]:
        return (r for r in rows if r["thread_id"] not in imp.blocked)

    count = sum(1 for _ in wanted())
    if not count:
        return
    table = S.writable(MESSAGE_VERSIONS)
    if not catalog.has_table(imp.conn, table):
        imp.report.notes.append(_no_table(count, "message version", table, imp.report.target))
        return
    # A message that is in another thread here: its versions would be read as that message's.
    ids = sorted({str(r["message_id"]) for r in wanted()})
    elsewhere: dict[str, str] = {}
    for start in range(0, len(ids), 500):
        clause, params = R.in_clause(ids[start:start + 500])
        for found in R.select_rows(imp.conn, "mastra_messages", f"id IN {clause}", params):
            elsewhere[str(found["id"])] = str(found["thread_id"])
    left = _write_in_order(imp, table, rows, wanted(), "messageVersions",
                           lambda row: elsewhere.get(str(row["message_id"]), row["thread_id"]) == row["thread_id"])
    if left:
        imp.report.notes.append(
            f"{left} message version{'s' if left != 1 else ''} not imported: {'its message is' if left == 1 else 'their messages are'} "
            f"in another thread in {imp.report.target}, and a version is read by message id (not even with overwrite).")


def _import_observation_versions(imp: "_Importer", rows: Iterable[Mapping[str, Any]]) -> None:
    def wanted() -> Iterator[Mapping[str, Any]]:
        return (r for r in rows if r.get("thread_id") not in imp.blocked)

    count = sum(1 for _ in wanted())
    if not count:
        return
    table = S.writable(OBSERVATION_VERSIONS)
    if not catalog.has_table(imp.conn, table):
        imp.report.notes.append(_no_table(count, "observation-log version", table, imp.report.target))
        return
    imported = imp.observation_records  # record id -> lookup key, of the records this import keeps
    left = _write_in_order(imp, table, rows, wanted(), "observationVersions",
                           lambda row: imported.get(str(row["record_id"])) == row["lookup_key"])
    if left:
        imp.report.notes.append(
            f"{left} observation-log version{'s' if left != 1 else ''} not imported: the observation record "
            f"{'it belongs' if left == 1 else 'they belong'} to was not imported (see above).")


def oldest_first(row: Mapping[str, Any]) -> tuple[str, int]:
    """The order a version history is written in (working-memory versions too): by createdAt, then id."""
    return str(row.get("createdAt")), int(row.get("id") or 0)


def _write_in_order(imp: "_Importer", table: str, source: Iterable[Mapping[str, Any]],
                    rows: Iterable[Mapping[str, Any]], kind: str, keep: Callable[[Mapping[str, Any]], bool]) -> int:
    """Write the ``rows`` that ``keep`` accepts, oldest version first (by createdAt, then id: a version whose id
    is taken here gets the next free one, so the copy's ids keep the order of the edits); returns how many it
    left out. ``rows`` come from ``source``: when that is a ``RowSpool``, they are sorted on disk."""
    ordered = sorted_rows(rows, oldest_first, kind) if isinstance(source, RowSpool) else sorted(rows, key=oldest_first)
    left = 0
    for row in ordered:
        if keep(row):
            _write(imp, table, row, kind)
        else:
            left += 1
    return left


def _write(imp: "_Importer", table: str, row: Mapping[str, Any], kind: str) -> None:
    cols = imp._check_columns(table, [row], kind)
    content = {k: v for k, v in row.items() if k != "id" and k in cols}
    if imp._find_by_content(table, content, "id") is not None:
        imp._same(kind)
        return
    imp._insert_keeping_id(table, "id", row.get("id"), content)
    imp._wrote(kind)


def _no_table(n: int, label: str, table: str, target: str) -> str:
    return (f"{n} {label}{'s' if n != 1 else ''} not imported: {target} has no {table} table. Run "
            "'memory-studio migrate' on it first to keep the edit history.")


__all__ = ["OBSERVATION_VERSION_SECTION", "MESSAGE_VERSION_SECTION", "export_versions", "import_versions",
           "oldest_first"]
