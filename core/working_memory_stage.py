"""Working-memory updates staged during an agent turn and committed with the turn's messages.

Writing an update when the model's tool call ran let working memory reflect a turn that history
lacks (the turn failed, or the process died, before its messages were saved). Staged, the update is
validated at once (the model gets a true answer) and written in the transaction that saves the turn.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import sqlalchemy as sa

from core.options import WorkingMemoryOptions
from core.storage import locks
from core.working_memory_schema import WorkingMemoryError

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # pragma: no cover
    from core.working_memory import WorkingMemoryService


@dataclass(frozen=True)
class _StagedUpdate:
    opts: WorkingMemoryOptions
    scope: str
    owner: str
    thread_id: str | None
    resource_id: str | None
    kind: Literal["replace", "merge", "vnext"]
    value: Any  # the replacement text, the merge patch, or the vNext tool's arguments
    note: str | None = None  # kept with the version (the vNext tool's update reason)


class StagedWorkingMemory:
    """The model's working-memory updates during one turn, written together with the turn's messages.

    Each update is validated when the tool is called, against what is stored plus the updates staged
    before it; ``commit`` re-applies them in order inside the transaction that saves the turn, onto
    whatever is stored by then (so a merge keeps fields a concurrent editor changed meanwhile).
    """

    def __init__(self, service: WorkingMemoryService) -> None:
        self.service = service
        self.updates: list[_StagedUpdate] = []
        # Updates ``commit`` could not apply any more, with why (see ``commit``).
        self.dropped: list[str] = []

    def preview(self, scope: str, owner: str) -> str | None:
        """The stored value as this turn would leave it."""
        with self.service.store.db.read() as conn:
            text = self.service._read(conn, scope, owner)
        for update in self.updates:
            if (update.scope, update.owner) == (scope, owner):
                text = self._applied(update, text)
        return text

    def add(self, opts: WorkingMemoryOptions, thread_id: str | None, resource_id: str | None,
            kind: Literal["replace", "merge", "vnext"], value: Any, *, note: str | None = None) -> str:
        """Validate and record one update; returns the value it leaves (raises ``WorkingMemoryError``).
        ``note``: kept with the version it writes (why the model made the update)."""
        scope, owner = self.service.owner(opts, thread_id, resource_id)
        update = _StagedUpdate(opts, scope, owner, thread_id, resource_id, kind, value, note)
        text = self._applied(update, self.preview(scope, owner))
        self.updates.append(update)
        return text

    def commit(self, conn: sa.Connection) -> None:
        """Write the staged updates inside the caller's write transaction.

        An update that no longer applies to what is stored by now (a merge that another writer's change
        made invalid for the schema, or too large) is left out, logged and listed in ``dropped``: the
        other writer's value stands, and the turn's messages, saved in this same transaction, are not
        lost for it."""
        service = self.service
        for update in self.updates:
            # Postgres does not serialise writers as libSQL's BEGIN IMMEDIATE does: lock the owner so
            # a concurrent merge cannot read the same old value and drop this one's fields.
            service.store.db.lock(conn, locks.owner_key(update.scope, update.owner))
            try:
                current = service._read(conn, update.scope, update.owner)
                text = self._applied(update, current)
                note = self._vnext_note(update, current) if update.kind == "vnext" else update.note
            except WorkingMemoryError as exc:
                why = (f"{update.scope} working memory of {update.owner}: the model's update no longer applies "
                       f"to the value stored meanwhile, which stays: {exc}")
                self.dropped.append(why)
                log.warning("working-memory update not written: %s", why)
                continue
            service._store(conn, update.scope, update.owner, text, update.opts, update.thread_id, update.resource_id)
            service._version(conn, update.scope, update.owner, text, update.opts.mode, "agent", note)
        self.updates.clear()

    def _applied(self, update: _StagedUpdate, current: str | None) -> str:
        if update.kind == "merge":
            return self.service._merged(update.opts, current, update.value)
        if update.kind == "vnext":
            # Planned again on what is stored by then: an edit in place keeps a concurrent change
            # (a Studio edit during the turn), as the unstaged tool's re-read does.
            from core.working_memory_vnext import plan

            ok, why, text, _reason = plan(update.opts, current, update.value)
            if not ok or text is None:
                raise WorkingMemoryError(why)
            return self.service._serialize(update.opts, text)
        return self.service._serialize(update.opts, update.value)

    @staticmethod
    def _vnext_note(update: _StagedUpdate, current: str | None) -> str | None:
        from core.working_memory_vnext import note, plan

        _ok, why, _text, reason = plan(update.opts, current, update.value)
        return note(reason, why)


__all__ = ["StagedWorkingMemory"]
