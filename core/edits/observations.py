"""Editing, deleting and undoing observation lines, each kept as a version of the generation's log.

An *observation* is one line of a generation's ``activeObservations`` log (``* 🔴 (12:44) Sam …``);
dates and message-boundary lines are structure, not observations, and cannot be edited here. Only a
key's current generation may change: older generations are history that no turn reads any more, and
a reflection has already rewritten them. The next turn reads the changed log (the processor loads the
current row every turn); a turn that ran before the change rebuilds with the log of its time
(``core.replay.edited``). The observer's own commit compares the log it was shown with the stored
one, so a user edit made while an observer call runs makes that observation retry on the next turn,
never overwrite the edit. Buffered chunks (issue 19) are not lines of the log and stay as they are; a
reflection prepared in the background from lines an edit changed is dropped (``after_log_edit``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from core.edits.messages import NoVersionHistoryError
from core.edits.schema import OBSERVATION_VERSIONS, observation_versions
from core.observational.buffer_store import after_log_edit
from core.observational.records import OMRecord
from core.observational.store import OM
from core.scopes import ThreadOwnershipError, check_thread_owner
from core.storage import catalog, locks
from core.storage.memory_store import InvalidArgumentError, NotFoundError, check_text
from core.timeutil import Clock, iso_now, parse_iso

if TYPE_CHECKING:  # pragma: no cover
    from core.storage import Store
    from core.tokens import Tokenizer

# A tag line may carry attributes: a resource-scoped log's ``<thread id="…">`` (``observational.resource_scope``)
# is structure, not an observation the user can edit or delete.
_STRUCTURE = re.compile(r'^\s*(--- message boundary \(.*\) ---|Date:.*|</?[a-z-]+(\s+[a-z-]+="[^"]*")*\s*>)\s*$')


class ObservationConflictError(InvalidArgumentError):
    """The log changed since the version being undone (or the line being edited) was read."""


@dataclass(frozen=True)
class ObservationVersion:
    id: int
    record_id: str
    lookup_key: str
    op: str  # "edit" | "delete" | "undo"
    author: str
    line_before: str | None
    line_after: str | None
    before: str
    after: str
    note: str | None
    created_at: datetime


def is_observation_line(line: str) -> bool:
    """Whether a log line is an observation (not blank, not a date, boundary or tag line)."""
    return bool(line.strip()) and not _STRUCTURE.match(line)


def _require_resource(resource_id: Any) -> str:
    if not isinstance(resource_id, str) or not resource_id:
        raise InvalidArgumentError("Say which resource owns the observations (resource_id=...); one resource can "
                                   "never change another's memory.")
    return resource_id


def _check_owner(conn: sa.Connection, row: Any, resource_id: str) -> None:
    owner = row["resourceId"]
    if row["threadId"]:
        found = conn.exec_driver_sql('SELECT "resourceId" FROM mastra_threads WHERE id = ?', (row["threadId"],)).first()
        check_thread_owner(str(row["threadId"]), str(found[0]) if found else owner, resource_id)
    check_thread_owner(str(row["threadId"] or row["lookupKey"]), str(owner) if owner else None, resource_id)


def _current_row(conn: sa.Connection, record_id: str) -> Any:
    row = conn.execute(sa.select(OM).where(OM.c.id == record_id)).mappings().first()
    if row is None:
        raise NotFoundError(f"Observation generation {record_id} not found; refresh and try again.")
    newest = conn.execute(sa.select(OM.c.id).where(OM.c.lookupKey == row["lookupKey"])
                          .order_by(OM.c.generationCount.desc(), OM.c.createdAt.desc()).limit(1)).scalar()
    if newest != record_id:
        raise InvalidArgumentError(
            f"Generation {row['generationCount']} of {row['lookupKey']} is history (a reflection replaced it); only "
            "the current generation's observations can be changed. Nothing was changed.")
    return row


def _find_line(log: str, line: str) -> int:
    target = line.strip()
    lines = log.split("\n")
    at = [i for i, text in enumerate(lines) if text.strip() == target]
    if not at:
        part_of = [text.strip() for text in lines if target and target in text and is_observation_line(text)]
        hint = (f" It is part of the line {part_of[0]!r}: give the whole line, as stored (with its priority and "
                "time), as the old text." if len(part_of) == 1 else "")
        raise ObservationConflictError(
            f"The observation {target[:80]!r} is not in the current log any more (the observer or another edit "
            f"changed it). Refresh and try again. Nothing was changed.{hint}")
    if len(at) > 1:
        raise InvalidArgumentError(f"The observation {target[:80]!r} appears {len(at)} times in the log; edit the "
                                   "log so each line is unique first. Nothing was changed.")
    if not is_observation_line(lines[at[0]]):
        raise InvalidArgumentError(f"{target[:80]!r} is a date, boundary or tag line, not an observation; it cannot "
                                   "be edited. Nothing was changed.")
    return at[0]


def _write(store: "Store", conn: sa.Connection, row: Any, new_log: str, *, op: str, author: str,
           line_before: str | None, line_after: str | None, tokenizer: "Tokenizer | None", clock: Clock | None,
           note: str | None = None) -> None:
    from core.observational.tokens import count_text

    now = iso_now(clock)
    values: dict[str, Any] = {"activeObservations": new_log, "updatedAt": now, **after_log_edit(row, new_log, now)}
    if tokenizer is not None:
        values["observationTokenCount"] = count_text(tokenizer, new_log)
    conn.execute(OM.update().where(OM.c.id == row["id"]).values(**values))
    conn.execute(observation_versions.insert().values(
        record_id=row["id"], lookup_key=row["lookupKey"], thread_id=row["threadId"], resource_id=row["resourceId"],
        op=op, author=author, line_before=line_before, line_after=line_after,
        before_text=row["activeObservations"] or "", after_text=new_log, note=note, createdAt=now))


def _begin(store: "Store", conn: sa.Connection, record_id: str, resource_id: str) -> Any:
    if not catalog.has_table(conn, OBSERVATION_VERSIONS):
        raise NoVersionHistoryError(
            f"{store.location.display} keeps no observation versions, so an edit could not be undone. Run "
            "`memory-studio migrate` on it (Studio: File > Migrate Database…) first. Nothing was changed.")
    first = conn.execute(sa.select(OM.c.lookupKey).where(OM.c.id == record_id)).scalar()
    if first is None:
        raise NotFoundError(f"Observation generation {record_id} not found; refresh and try again.")
    store.db.lock(conn, locks.om_key(str(first)))
    row = _current_row(conn, record_id)
    _check_owner(conn, row, resource_id)
    return row


def _load(store: "Store", record_id: str) -> OMRecord:
    with store.db.read() as conn:
        row = conn.execute(sa.select(OM).where(OM.c.id == record_id)).mappings().first()
    assert row is not None
    return OMRecord.from_row(dict(row))


def edit(store: "Store", record_id: str, old: str, new: str, *, resource_id: str, author: str = "api",
         tokenizer: "Tokenizer | None" = None, clock: Clock | None = None) -> OMRecord:
    """Replace the observation line ``old`` (matched without surrounding spaces) with ``new``."""
    resource_id = _require_resource(resource_id)
    if not isinstance(new, str) or not new.strip():
        raise InvalidArgumentError("The new observation is empty; to remove it, delete it instead. Nothing was changed.")
    if "\n" in new.strip() or not is_observation_line(new):
        raise InvalidArgumentError("An observation is one line of text (not a date, boundary or tag line). "
                                   "Nothing was changed.")
    check_text(new, "The new observation")
    with store.db.write() as conn:
        row = _begin(store, conn, record_id, resource_id)
        log = row["activeObservations"] or ""
        lines = log.split("\n")
        at = _find_line(log, old)
        indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
        replaced = indent + new.strip()
        if replaced == lines[at]:
            return OMRecord.from_row(dict(row))
        line_before, lines[at] = lines[at], replaced
        _write(store, conn, row, "\n".join(lines), op="edit", author=author, line_before=line_before.strip(),
               line_after=new.strip(), tokenizer=tokenizer, clock=clock)
    return _load(store, record_id)


def delete(store: "Store", record_id: str, line: str, *, resource_id: str, author: str = "api",
           tokenizer: "Tokenizer | None" = None, clock: Clock | None = None) -> OMRecord:
    """Remove the observation line ``line`` from the current log."""
    resource_id = _require_resource(resource_id)
    with store.db.write() as conn:
        row = _begin(store, conn, record_id, resource_id)
        log = row["activeObservations"] or ""
        lines = log.split("\n")
        at = _find_line(log, line)
        gone = lines.pop(at)
        _write(store, conn, row, "\n".join(lines), op="delete", author=author, line_before=gone.strip(),
               line_after=None, tokenizer=tokenizer, clock=clock)
    return _load(store, record_id)


def undo(store: "Store", record_id: str, *, resource_id: str, author: str = "api",
         tokenizer: "Tokenizer | None" = None, clock: Clock | None = None) -> OMRecord:
    """Revert the newest change of a generation's log (undoing twice redoes)."""
    resource_id = _require_resource(resource_id)
    with store.db.write() as conn:
        row = _begin(store, conn, record_id, resource_id)
        last = conn.execute(sa.select(observation_versions).where(observation_versions.c.record_id == record_id)
                            .order_by(observation_versions.c.id.desc()).limit(1)).mappings().first()
        if last is None:
            raise NotFoundError(f"Observation generation {record_id} has no change to undo.")
        if (row["activeObservations"] or "") != last["after_text"]:
            raise ObservationConflictError(
                f"The observation log changed after version {last['id']} (the observer added observations, or "
                "another edit); undo would lose that. Edit the line by hand instead. Nothing was changed.")
        _write(store, conn, row, str(last["before_text"]), op="undo", author=author, line_before=last["line_after"],
               line_after=last["line_before"], tokenizer=tokenizer, clock=clock,
               note=f"undid version {last['id']} ({last['op']})")
    return _load(store, record_id)


def versions(store: "Store", record_id: str, *, resource_id: str) -> list[ObservationVersion]:
    """Every change of a generation's log, oldest first."""
    resource_id = _require_resource(resource_id)
    with store.db.read() as conn:
        if not catalog.has_table(conn, OBSERVATION_VERSIONS):
            return []
        row = conn.execute(sa.select(OM).where(OM.c.id == record_id)).mappings().first()
        if row is not None:
            _check_owner(conn, row, resource_id)
        rows = conn.execute(sa.select(observation_versions).where(observation_versions.c.record_id == record_id)
                            .order_by(observation_versions.c.id)).mappings().all()
    if row is None and rows and rows[-1]["resource_id"] not in (None, resource_id):
        raise ThreadOwnershipError(str(rows[-1]["thread_id"] or rows[-1]["lookup_key"]), str(rows[-1]["resource_id"]),
                                   resource_id)
    return [ObservationVersion(int(r["id"]), str(r["record_id"]), str(r["lookup_key"]), str(r["op"]), str(r["author"]),
                               r["line_before"], r["line_after"], str(r["before_text"]), str(r["after_text"]),
                               r["note"], parse_iso(r["createdAt"])) for r in rows]


def newest_change(store: "Store") -> str | None:
    """When the newest observation edit was made (ISO text), or None: none ever was."""
    if not store.extensions.get("observation_versions_table"):
        with store.db.read() as conn:
            store.extensions["observation_versions_table"] = catalog.has_table(conn, OBSERVATION_VERSIONS)
    if not store.extensions["observation_versions_table"]:
        return None
    with store.db.read() as conn:
        value = conn.exec_driver_sql(f'SELECT max("createdAt") FROM {OBSERVATION_VERSIONS}').scalar()
    return str(value) if value else None


def log_versions(store: "Store", record_id: str) -> list[tuple[str, str]]:
    """A generation's log changes, oldest first, as (when, the whole log before that change)."""
    with store.db.read() as conn:
        if not catalog.has_table(conn, OBSERVATION_VERSIONS):
            return []
        rows = conn.exec_driver_sql(
            f'SELECT "createdAt", before_text FROM {OBSERVATION_VERSIONS} WHERE record_id = ? ORDER BY id',
            (record_id,)).all()
    return [(str(when), str(before)) for when, before in rows]


__all__ = [
    "ObservationConflictError", "ObservationVersion", "delete", "edit", "is_observation_line", "log_versions",
    "newest_change", "undo", "versions",
]
