"""Cloning a thread as Mastra 1.71's ``Memory.cloneThread`` / ``copyThread`` does, so a clone made by either
program looks the same in a database they share.

- The new thread's metadata is the caller's ``metadata`` plus ``clone: {sourceThreadId, clonedAt,
  lastMessageId}`` (the newest copied message's id, left out when none was copied); the source's own keys
  are not carried (its observational-memory cursor and hints name the source's messages).
- Its title is the one given, else "Clone of <source title>", else "" (an untitled source).
- Working memory with scope "thread" is carried into the clone's metadata; with scope "resource" it is the
  same resource's already, and nothing is copied.
- Observational memory: the source thread's current generation (thread scope) is copied for the clone with the
  copied messages' ids in place of the originals' (ids of messages not copied are dropped) and nothing in
  progress; a resource's record is the same resource's already.
- A clone given to another resource gets what is the thread's own (its messages, its thread-scope working memory
  and observations), never the source resource's memory: that covers the source user's other threads (another
  user would read them) and would replace, or outrank, what the destination resource has (its own memory gone
  from its prompts). Mastra 1.71 copies both onto the destination; we differ on purpose (ARCHITECTURE "Where we
  differ from Mastra on purpose").
- With semantic recall on, the copies are embedded (Mastra embeds them too), in the same transaction.

The copies keep their times and content, with ``metadata.clonedFrom`` naming the original (ours; Mastra
leaves the content as it was and reads the key as any other). One write transaction; the source is only
read. (``fork_thread`` is the Studio's other copy, at a turn, with the turns' records.)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from core.messages import new_id
from core.observational.store import clone_record
from core.storage.memory_store import AlreadyExistsError, InvalidArgumentError, MessageQuery, NotFoundError, Thread
from core.timeutil import iso_now

if TYPE_CHECKING:  # pragma: no cover
    from core.memory import Memory
    from core.messages import Message


@dataclass
class CloneResult:
    """The new thread and the copied messages. Unpacks as ``thread, messages``; attribute access
    falls through to the thread (``result.id``, ``result.title``)."""

    thread: Thread
    messages: list[Message]

    @property
    def cloned_messages(self) -> list[Message]:
        return self.messages

    def __iter__(self) -> Iterator[Any]:
        return iter((self.thread, self.messages))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.thread, name)


def clone_thread(
    memory: "Memory", source_thread_id: str, *, new_thread_id: str | None = None, title: str | None = None,
    resource_id: str | None = None, message_limit: int | None = None, message_ids: Sequence[str] | None = None,
    since: datetime | None = None, until: datetime | None = None, metadata: Mapping[str, Any] | None = None,
) -> CloneResult:
    store = memory.store
    source = memory.get_thread(source_thread_id)
    if source is None:
        raise NotFoundError(f"Source thread with id {source_thread_id} not found")
    if message_limit is not None and (not isinstance(message_limit, int) or message_limit < 0):
        raise InvalidArgumentError("message_limit must be a non-negative integer.")
    new_id_ = new_thread_id or new_id()
    if memory.get_thread(new_id_) is not None:
        raise AlreadyExistsError(f"Thread with id {new_id_} already exists")
    msgs = store.memory.list_messages(
        MessageQuery(thread_id=source_thread_id, since=since, until=until, ids=message_ids, last=message_limit)
    )
    owner = resource_id or source.resource_id
    clone: dict[str, Any] = {"sourceThreadId": source_thread_id, "clonedAt": iso_now(memory.clock)}
    if msgs:
        clone["lastMessageId"] = msgs[-1].id
    meta: dict[str, Any] = {**(metadata or {}), "clone": clone}
    copies = [
        m.copy(id=new_id(), thread_id=new_id_, resource_id=owner,
               content={**m.content, "metadata": {**m.metadata, "clonedFrom": m.id}})
        for m in msgs
    ]
    id_map = {m.id: c.id for m, c in zip(msgs, copies)}
    carried = _carried_working_memory(memory, source.id, source.resource_id)
    recall = memory.recall_index if not memory.options.read_only else None
    staged = recall.stage(copies) if recall is not None and copies else None
    with store.db.write() as conn:
        store.memory.create_thread(
            thread_id=new_id_, resource_id=owner,
            title=title or (f"Clone of {source.title}" if source.title else ""), metadata=meta, conn=conn)
        saved = store.memory.save_messages(copies, conn=conn) if copies else []
        if carried is not None:
            memory.working_memory_service.store_as_is(
                conn, memory.effective_options().working_memory, "thread", new_id_, carried, author="clone",
                note=f"working memory of {source_thread_id}, cloned")
        clone_record(conn, store, source_thread_id=source_thread_id, source_resource_id=source.resource_id,
                     thread_id=new_id_, resource_id=owner, id_map=id_map, now=iso_now(memory.clock))
        if staged is not None:
            staged.commit(conn, saved)
        else:  # (no recall here: the copies' keyword docs, no model needed)
            from core.recall.own_docs import key_saved

            key_saved(store, conn, saved)
    if staged is not None:
        staged.finish()
    thread = memory.get_thread(new_id_)
    assert thread is not None
    return CloneResult(thread, list(saved) if copies else [])


def _carried_working_memory(memory: "Memory", source_thread_id: str, source_resource_id: str) -> str | None:
    """The working memory the clone gets, or None: the source thread's own (scope "thread"); a resource's (scope
    "resource") is never copied, within the resource it is shared already, and onto another resource it would hand
    one user's memory to another and replace that one's own."""
    opts = memory.effective_options().working_memory
    if not opts.enabled or opts.scope == "resource":
        return None
    text = memory.working_memory_service.get(opts, thread_id=source_thread_id, resource_id=source_resource_id).text
    return text or None
