"""Worker jobs for memory edits (no Qt): edit, delete and undo stored messages and observation lines,
delete a thread, forget a resource, vacuum, index a resource for recall. Each runs on a session worker, only after the user confirmed it.

Edits go through the ``Memory`` the thread's agent runs with (``agent_for_thread``, the rule the
inspector, Replay and the CLI use), so recall follows with that agent's index. When the embedding
model cannot be loaded, the edit is still made through a memory without recall and the result says
that the index catches up at its next write.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from core import Memory, MemoryOptions, Message, Store
from core.agent_configs import agent_for_thread
from core.edits.forget import ForgetReport, forget_resource
from core.edits.messages import MessageVersion
from studio.logic.edit_history import EditRecord, MessageGoneError
from studio.logic.short_ids import short_id

log = logging.getLogger(__name__)

MemoryFactory = Callable[[MemoryOptions, str], Memory]
RECALL_LATER = "the recall index catches up at its next write (the embedding model could not be loaded here)"


@dataclass
class MessageTarget:
    """A stored message and its versions, for the edit and history dialogs."""

    message: Message
    thread_id: str
    resource_id: str
    versions: list[MessageVersion] = field(default_factory=list)


@dataclass(frozen=True)
class EditOutcome:
    record: EditRecord | None  # what Undo reverts (None: nothing changed)
    message: Message | None
    note: str = ""


def memory_for_thread(store: Store, factory: MemoryFactory, thread_id: str | None) -> tuple[Memory, str]:
    """The thread's agent's memory, and a note when recall had to be left out."""
    choice = agent_for_thread(store, thread_id)
    options, name = choice.options(), choice.memory_name
    if not options.semantic_recall.enabled:
        return factory(options, name), ""
    try:
        return factory(options, name), ""
    except Exception as exc:  # noqa: BLE001 - a missing model must not block an edit
        log.warning("editing without recall (%s)", exc)
        return factory(options.merged({"semantic_recall": False}), name), RECALL_LATER


@dataclass(frozen=True)
class ThreadTarget:
    """A thread about to be deleted, as the confirmation names it."""

    thread_id: str
    resource_id: str
    title: str
    messages: int


def load_thread(store: Store, thread_id: str) -> ThreadTarget:
    thread = store.memory.get_thread(thread_id)
    if thread is None:
        from core import NotFoundError

        raise NotFoundError(f"Thread {thread_id} is no longer stored (another program deleted it); nothing to delete.")
    return ThreadTarget(thread.id, thread.resource_id, thread.title, store.memory.count_messages(thread_id))


def delete_thread(store: Store, factory: MemoryFactory, target: ThreadTarget) -> ThreadTarget:
    """Delete the thread, its messages and everything kept about them (``Memory.delete_thread``: versions, turn
    records, its own observation log, its vectors in every vector table, Mastra's included). Recall is left
    off: deleting needs no embedding model, and the vectors go all the same. Only the thread the user confirmed:
    one another program deleted meanwhile, or added messages to (or removed some from), is not deleted, and
    the error says so (``load_thread`` again shows what it holds now)."""
    now = load_thread(store, target.thread_id)  # (gone: "another program deleted it")
    if now.messages != target.messages:
        from core.edits.messages import EditConflictError

        raise EditConflictError(
            f"Thread {target.thread_id} now has {now.messages:,} messages, not the {target.messages:,} the "
            "confirmation named (another program changed it meanwhile). Nothing was deleted; choose Delete "
            "Thread… again to see what it holds now.")
    choice = agent_for_thread(store, target.thread_id)
    memory = factory(choice.options().merged({"semantic_recall": False}), choice.memory_name)
    memory.delete_thread(target.thread_id)
    return target


def load_message(store: Store, message_id: str) -> MessageTarget:
    found = store.memory.get_messages([message_id])
    if not found or not found[0].thread_id:
        raise MessageGoneError(f"Message {message_id} is not in the database any more: it was deleted since this view "
                               "was read. Nothing was changed.")
    msg = found[0]
    thread = store.memory.get_thread(msg.thread_id or "")
    resource = msg.resource_id or (thread.resource_id if thread else "")
    versions = Memory(store, MemoryOptions()).message_versions(msg.id, resource_id=resource) if resource else []
    return MessageTarget(msg, msg.thread_id or "", resource, versions)


def message_history(store: Store, message_id: str, thread_id: str, resource_id: str) -> list[MessageVersion]:
    return Memory(store, MemoryOptions()).message_versions(message_id, resource_id=resource_id)


def _as_shown(store: Store, target: MessageTarget, nothing: str, again: str) -> None:
    """Refuse when the message is no longer what the dialog showed: another program (or another window)
    edited or deleted it meanwhile, and saving over it or deleting it would drop that change unseen."""
    from core.edits.messages import EditConflictError

    found = store.memory.get_messages([target.message.id])
    if not found:
        from core import NotFoundError

        raise NotFoundError(f"Message {target.message.id} is no longer stored (another program deleted it); "
                            f"{nothing}.")
    if found[0].content != target.message.content or found[0].role != target.message.role:
        raise EditConflictError(
            f"Message {short_id(target.message.id)} changed since it was shown (another program edited it "
            f"meanwhile): {nothing}. {again}")


def edit_message(store: Store, factory: MemoryFactory, target: MessageTarget, *, text: str | None = None,
                 content: Any = None) -> EditOutcome:
    """Save the edit, unless the message changed since the dialog read it (``_as_shown``)."""
    _as_shown(store, target, "your edit was not saved",
              "Your text is still here: copy it, Cancel, and choose Edit Message… again to start from the message "
              "as it is now (History… shows the other change).")
    memory, note = memory_for_thread(store, factory, target.thread_id)
    before = len(memory.message_versions(target.message.id, resource_id=target.resource_id))
    # (checked again in the edit's own transaction: a change in the moment since ``_as_shown`` read it)
    message = memory.edit_message(target.message.id, resource_id=target.resource_id, text=text, content=content,
                                  author="studio", expected=target.message.content)
    changed = len(memory.message_versions(target.message.id, resource_id=target.resource_id)) > before
    record = EditRecord("message", target.message.id, target.resource_id, target.thread_id,
                        f"edit of message {short_id(target.message.id)}") if changed else None
    return EditOutcome(record, message, note)


def delete_message(store: Store, factory: MemoryFactory, target: MessageTarget) -> EditOutcome:
    """Delete the message the confirmation named, not what another program changed it to meanwhile."""
    _as_shown(store, target, "nothing was deleted",
              "Choose Delete Message… again to see it as it is now (History… shows the change).")
    memory, note = memory_for_thread(store, factory, target.thread_id)
    memory.delete_messages([target.message.id], resource_id=target.resource_id, author="studio",
                           expected={target.message.id: target.message.content})
    return EditOutcome(EditRecord("message", target.message.id, target.resource_id, target.thread_id,
                                  f"delete of message {short_id(target.message.id)}"), None, note)


def revert(store: Store, factory: MemoryFactory, record: EditRecord) -> str:
    """Undo (or redo: the same call) the newest change of the record's target; one line of what happened."""
    memory, note = memory_for_thread(store, factory, record.thread_id)
    if record.kind == "message":
        now = memory.undo_message_edit(record.target_id, resource_id=record.resource_id, author="studio")
        what = "deleted again" if now is None else "restored"
        return f"Message {short_id(record.target_id)} {what}" + (f"; {note}" if note else "")
    memory.undo_observation_edit(record.target_id, resource_id=record.resource_id, author="studio")
    return "Observation log restored"


def edit_observation(store: Store, factory: MemoryFactory, record_id: str, thread_id: str | None, resource_id: str,
                     old: str, new: str | None) -> EditOutcome:
    """Replace (``new``) or delete (``new`` None) one observation line of a generation's current log."""
    memory = factory(MemoryOptions(), "default")
    if new is None:
        memory.delete_observation(record_id, old, resource_id=resource_id, author="studio")
        label = "delete of an observation"
    else:
        memory.edit_observation(record_id, old, new, resource_id=resource_id, author="studio")
        label = "edit of an observation"
    return EditOutcome(EditRecord("observation", record_id, resource_id, thread_id, label), None)


def preview_forget(store: Store, resource_id: str) -> ForgetReport:
    return forget_resource(store, resource_id, dry_run=True)


def forget(store: Store, resource_id: str) -> ForgetReport:
    report = forget_resource(store, resource_id)
    for index in [v for k, v in store.extensions.items() if k.startswith("recall-index:")]:
        index.close()  # cached vectors of the forgotten resource go too
    return report


class IndexingStopped(Exception):
    """The Studio closed while a resource was being indexed: the batches written so far stay (``reindex``
    is resumable), the rest is left for the next run."""


def index_resource(store: Store, resource_id: str, progress: Callable[[int, int], None],
                   stopped: Callable[[], bool] = lambda: False) -> Any:
    """Edit > Index Recall for Resource…: ``memory-studio reindex --resource`` for one resource, with the model
    the database's vectors come from (``store_embedder``: the one the Studio searches with). Messages with a
    current vector are not embedded again; the keyword index catches up first. ``stopped``: asked between
    batches; true ends the run (``IndexingStopped``) with what was written kept. Returns the ``ReindexReport``."""
    from core.recall.models import store_embedder
    from core.recall.reindex import reindex

    def step(done: int, total: int) -> None:
        if stopped():
            raise IndexingStopped(f"indexing of resource {resource_id} stopped after {done:,} of {total:,} message(s)")
        progress(done, total)

    return reindex(store, store_embedder(store), resource_id=resource_id, progress=step)


def vacuum(store: Store) -> str:
    from core.edits.commands import vacuum_report

    return vacuum_report(store)


__all__ = [
    "EditOutcome", "IndexingStopped", "MessageTarget", "RECALL_LATER", "ThreadTarget", "delete_message", "delete_thread",
    "edit_message", "edit_observation", "forget", "index_resource", "load_message", "load_thread", "memory_for_thread", "message_history",
    "preview_forget", "revert", "vacuum",
]
