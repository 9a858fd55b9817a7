"""Forking a thread at a turn: a new thread holding exactly the messages before it.

The copies keep their times and content (with ``metadata.forkedFrom`` naming the original), the new
thread's metadata names its source, and thread-scoped working memory is carried as it was at that
turn (from the turn's record when there is one, else the version then in force) or as it is now.
The copied turns keep their records: each is copied with the ids of the copied messages in place of
the originals' (recall hits in other threads, working-memory versions, observation generations and
tool definitions stay referenced), so they replay exactly in the fork.
Everything is written in one transaction; the source thread is only read.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Literal, Mapping

from core.messages import new_id
from core.replay import store as records
from core.replay.frozen import working_memory_text
from core.replay.record import RecallHitRecord, TurnRecord
from core.storage.memory_store import AlreadyExistsError, InvalidArgumentError, MessageQuery, NotFoundError, Thread
from core.timeutil import iso_now

if TYPE_CHECKING:  # pragma: no cover
    from core.memory import Memory

WorkingMemoryChoice = Literal["as_of", "current"]
# Keys of a thread's metadata that describe its own state, not what the fork inherits: its working
# memory (carried explicitly below) and observational memory's per-thread cursor and hints.
_OWN_STATE = ("workingMemory", "mastra", "clone", "fork")


def fork_thread(
    memory: "Memory", thread_id: str, *, at: str, new_thread_id: str | None = None, title: str | None = None,
    working_memory: WorkingMemoryChoice = "as_of", resource_id: str | None = None,
) -> Thread:
    """A new thread of the same resource with copies of the messages before message ``at``."""
    if working_memory not in ("as_of", "current"):
        raise InvalidArgumentError(f"working_memory must be 'as_of' or 'current', got {working_memory!r}.")
    store = memory.store
    source = memory._owned_thread(thread_id, resource_id)
    found = store.memory.get_messages([at])
    if not found or found[0].thread_id != thread_id:
        raise NotFoundError(f"Message {at} is not in thread {thread_id}; fork at one of its messages.")
    turn = found[0]
    new_id_ = new_thread_id or new_id()
    if store.memory.get_thread(new_id_) is not None:
        raise AlreadyExistsError(f"Thread with id {new_id_} already exists; choose another id for the fork.")
    before = store.memory.list_messages(MessageQuery(thread_id=thread_id, before=(turn.created_at, turn.id),
                                                     exclude_system=False))
    wm_opts = memory.effective_options().working_memory
    carried = None
    if wm_opts.enabled and wm_opts.scope == "thread":
        carried = _working_memory(memory, thread_id, source.resource_id, turn.id, turn.created_at, working_memory)
    meta = {k: v for k, v in (source.metadata or {}).items() if k not in _OWN_STATE}
    meta["fork"] = {"sourceThreadId": thread_id, "atMessageId": at, "forkedAt": iso_now(memory.clock),
                    "workingMemory": working_memory}
    if carried is not None:
        meta["workingMemory"] = carried
    copies = [m.copy(id=new_id(), thread_id=new_id_, resource_id=source.resource_id,
                     content={**m.content, "metadata": {**m.metadata, "forkedFrom": m.id}}) for m in before]
    copied = {m.id: c.id for m, c in zip(before, copies)}
    turn_records = [r for r in (copy_record(rec, copied, thread_id, new_id_)
                                for rec in records.for_thread(store, thread_id).values()) if r is not None]
    with store.db.write() as conn:
        store.memory.create_thread(thread_id=new_id_, resource_id=source.resource_id,
                                   title=title if title is not None else f"Fork of {source.title or thread_id}",
                                   metadata=meta, conn=conn)
        saved = store.memory.save_messages(copies, conn=conn)
        # The copies' keyword docs (no model needed; their vectors come from `memory-studio reindex`).
        from core.recall.own_docs import key_saved

        key_saved(store, conn, saved)
        for record in turn_records:
            records.write(conn, store, record)
        if carried is not None:
            memory.working_memory_service.record_version(
                conn, "thread", new_id_, carried, wm_opts.mode, author="fork",
                note=f"working memory of {thread_id} {'at message ' + at if working_memory == 'as_of' else 'now'}")
    thread = store.memory.get_thread(new_id_)
    assert thread is not None
    return thread


def copy_record(record: TurnRecord, copied: Mapping[str, str], source_thread: str,
                new_thread: str) -> TurnRecord | None:
    """``record`` for the copies of its messages in ``new_thread`` (None when the turn was not copied,
    or the record lost texts it names: a copy must not be less exact than its original claims)."""
    if record.input_message_id not in copied or not all(i in copied for i in record.input_ids) or record.unresolved:
        return None

    def moved(mid: str) -> str:
        return copied.get(mid, mid)

    recall = tuple(RecallHitRecord(moved(h.message_id), new_thread if h.thread_id == source_thread else h.thread_id,
                                   h.vector, h.keyword, h.fused, h.rank, tuple(moved(w) for w in h.window_ids))
                   for h in record.recall)
    return replace(record, input_message_id=moved(record.input_message_id), thread_id=new_thread,
                   response_ids=tuple(moved(r) for r in record.response_ids if r in copied),
                   history_ids=tuple(moved(h) for h in record.history_ids), recall=recall,
                   window_dropped=tuple(moved(h) for h in record.window_dropped),
                   input_ids=tuple(moved(i) for i in record.input_ids))


def _working_memory(memory: "Memory", thread_id: str, resource_id: str, at: str, when: object,
                    choice: WorkingMemoryChoice) -> str | None:
    service = memory.working_memory_service
    opts = memory.effective_options().working_memory
    if choice == "current":
        return service.get(opts, thread_id=thread_id, resource_id=resource_id).text
    record = records.read(memory.store, at)
    if record is not None:
        known, text = working_memory_text(memory.store, record)
        if known:
            return text
    historic = service.value_as_of(opts, thread_id=thread_id, resource_id=resource_id, when=when)
    if historic is not None:
        return historic.text
    return service.get(opts, thread_id=thread_id, resource_id=resource_id).text  # no history kept: current


__all__ = ["WorkingMemoryChoice", "copy_record", "fork_thread"]
