"""Writing buffered observational memory: chunks made in the background, their activation, a
reflection made in the background and its swap-in, back-off after failures, the Studio's events.

Every write runs in one transaction under the record's lock and checks, before writing, that the
row is still what the writer saw (a background job can finish while a turn activates, another
process can observe). A write that lost such a race returns None and changes nothing; the model
call it carried is wasted, never a lost or doubled observation. The rule that keeps one cursor per
thread enough: the chunk list continues right after the thread's cursor (``tail_cursor``), so a
chunk is appended only when it starts where the list (or the cursor) ends.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import sqlalchemy as sa

from core.observational.buffer import Backoff, backoff_of, kept_error, with_appended, with_event, with_hints
from core.observational.records import STUDIO_KEY, BufferedChunk, OMRecord, merge_observed_ids, parse_chunks
from core.observational.store import OM, Cursor, ThreadHints, _merge_thread_om, _new_row, _select_key, thread_hints
from core.observational.store import metadata_with as _metadata_with
from core.observational.store import row_studio as _studio
from core.storage import locks
from core.storage import schema as t
from core.storage.memory_store import json_col, load_json
from core.stored_text import json_text

if TYPE_CHECKING:  # pragma: no cover
    from core.storage import Store


def _head(conn: sa.Connection, key: str) -> dict[str, Any] | None:
    row = conn.execute(_select_key(key).limit(1)).mappings().first()
    return dict(row) if row is not None else None


def _thread_cursor(conn: sa.Connection, thread_id: str) -> Cursor | None:
    row = conn.execute(sa.select(json_col(t.threads.c.metadata).label("m")).where(t.threads.c.id == thread_id)).first()
    return thread_hints(load_json(row.m) if row is not None else None).cursor


def _fresh(conn: sa.Connection, record_id: str) -> OMRecord | None:
    row = conn.execute(sa.select(OM).where(OM.c.id == record_id)).mappings().first()
    return OMRecord.from_row(dict(row)) if row else None


def tail_cursor(chunks: Sequence[BufferedChunk], thread_cursor: Cursor | None) -> tuple[str, str] | None:
    """Where the next chunk must start: after the last chunk, else after the thread's cursor."""
    if chunks:
        return chunks[-1].cursor
    return (thread_cursor.created_at, thread_cursor.id) if thread_cursor is not None else None


# -- chunks ---------------------------------------------------------------------------------------
def set_buffering(store: "Store", key: str, *, observation: bool | None = None,
                  reflection: bool | None = None) -> None:
    """The durable "a background observer (reflector) runs" hints Mastra keeps (hints, not locks)."""
    values: dict[str, Any] = {}
    if observation is not None:
        values["isBufferingObservation"] = int(observation)
    if reflection is not None:
        values["isBufferingReflection"] = int(reflection)
    if not values:
        return
    with store.db.write() as conn:
        store.db.lock(conn, locks.om_key(key))
        head = _head(conn, key)
        if head is not None:
            conn.execute(OM.update().where(OM.c.id == head["id"]).values(**values))


def commit_chunk(
    store: "Store", *, key: str, scope: str, thread_id: str, resource_id: str | None, config: Mapping[str, Any],
    chunk: BufferedChunk, after: tuple[str, str] | None, now: str,
) -> OMRecord | None:
    """Append a chunk made in the background to the head record's buffer. None when the buffer no
    longer ends where the chunk starts (``after``): activation or another writer moved on; or when the
    thread is gone (deleted, its resource forgotten): nothing about it is written again."""
    with store.db.write() as conn:
        store.db.lock(conn, locks.om_key(key), locks.thread_key(thread_id))
        if store.memory.thread_owner(thread_id, conn) is None:
            return None  # the thread was deleted (or its resource forgotten) while the observer ran
        head = _head(conn, key)
        if head is None:
            row = _new_row(key, scope, thread_id, resource_id, config, now)
            conn.execute(OM.insert().values(**row))
            head = row
        chunks = parse_chunks(head.get("bufferedObservationChunks"))
        if tail_cursor(chunks, _thread_cursor(conn, thread_id)) != after:
            return None
        chunks.append(chunk)
        studio = with_event(_studio(head), {
            "kind": "buffered", "at": now, "chunk": chunk.id, "messages": len(chunk.message_ids),
            "messageTokens": chunk.message_tokens, "tokens": chunk.token_count})
        studio.pop("observerBackoff", None)
        conn.execute(OM.update().where(OM.c.id == head["id"]).values(
            bufferedObservationChunks=json_text([c.to_json() for c in chunks], ensure_ascii=False),
            bufferedObservationTokens=sum(c.token_count for c in chunks),
            bufferedMessageIds=json_text([i for c in chunks for i in c.message_ids]),
            lastBufferedAtTokens=sum(c.message_tokens for c in chunks), lastBufferedAtTime=chunk.last_observed_at,
            isBufferingObservation=0, metadata=_metadata_with(head, studio), updatedAt=now,
        ))
        return _fresh(conn, head["id"])


@dataclass(frozen=True)
class Activation:
    """What activating a prefix of the buffer writes: the log with the chunks appended and its size."""

    chunks: tuple[BufferedChunk, ...]
    active_observations: str
    observation_tokens: int
    pending_after: int
    blocked: bool = False


def commit_activation(store: "Store", *, record: OMRecord, thread_id: str, activation: Activation,
                      now: str) -> OMRecord | None:
    """Move ``activation.chunks`` (a prefix of the buffer) into the log, and the thread's cursor past
    the messages they cover, in one transaction. None when the row changed since ``record`` was read."""
    ids = [c.id for c in activation.chunks]
    last = activation.chunks[-1]
    with store.db.write() as conn:
        store.db.lock(conn, locks.om_key(record.lookup_key), locks.thread_key(thread_id))
        head = _head(conn, record.lookup_key)
        if head is None or head["id"] != record.id or (head["activeObservations"] or "") != record.active_observations:
            return None
        chunks = parse_chunks(head.get("bufferedObservationChunks"))
        if [c.id for c in chunks[:len(ids)]] != ids:
            return None
        left = chunks[len(ids):]
        observed = [i for c in activation.chunks for i in c.message_ids]
        studio = with_event(_studio(head), {
            "kind": "activated", "at": now, "chunks": len(ids), "blocked": activation.blocked,
            "messageTokens": sum(c.message_tokens for c in activation.chunks), "left": len(left)})
        studio = with_appended(studio, activation.active_observations, now, last.last_observed_at)
        merged = _merge_thread_om(conn, thread_id, _activation_hints(last), now)
        if merged is not None:
            studio = with_hints(studio, now, thread_id, *merged)
        conn.execute(OM.update().where(OM.c.id == record.id).values(
            activeObservations=activation.active_observations, observationTokenCount=activation.observation_tokens,
            lastObservedAt=last.last_observed_at, pendingMessageTokens=activation.pending_after,
            totalTokensObserved=int(head.get("totalTokensObserved") or 0)
            + sum(c.message_tokens for c in activation.chunks),
            observedMessageIds=json_text(merge_observed_ids(record.observed_message_ids, observed)),
            bufferedObservationChunks=json_text([c.to_json() for c in left], ensure_ascii=False) if left else None,
            bufferedObservationTokens=sum(c.token_count for c in left) or None,
            bufferedMessageIds=json_text([i for c in left for i in c.message_ids]) if left else None,
            lastBufferedAtTokens=sum(c.message_tokens for c in left),
            metadata=_metadata_with(head, studio), updatedAt=now,
        ))
        return _fresh(conn, record.id)


def _activation_hints(last: BufferedChunk) -> dict[str, Any]:
    """What an activation writes over the thread's ``mastra.om``: the hints of the newest activated chunk
    replace the thread's (stale ones are cleared)."""
    hints: dict[str, Any] = {"lastObservedAt": last.last_observed_at, "lastObservedMessageCursor": {
        "createdAt": last.last_observed_at, "id": last.last_observed_message_id or ""},
        "currentTask": last.current_task, "suggestedResponse": last.suggested_response}
    if last.thread_title:
        hints["threadTitle"] = last.thread_title
    return hints


def activation_in_memory(record: OMRecord, thread_metadata: Mapping[str, Any] | None,
                         activation: Activation) -> tuple[OMRecord, ThreadHints | None]:
    """What ``commit_activation`` would leave, without writing: the record with ``activation`` applied, and
    the thread's hints after it (None when the thread is gone: the commit would change no hints). A
    preview shows the prompt the next turn sends once it has activated. Only what a prompt is built from
    is applied; the row's bookkeeping (events, marks, dates) is not."""
    chunks = activation.chunks
    left = parse_chunks(record.buffered_observation_chunks)[len(chunks):]
    observed = [i for c in chunks for i in c.message_ids]
    after = replace(
        record, active_observations=activation.active_observations,
        observation_token_count=activation.observation_tokens, last_observed_at=chunks[-1].last_observed_at,
        pending_message_tokens=activation.pending_after,
        total_tokens_observed=record.total_tokens_observed + sum(c.message_tokens for c in chunks),
        observed_message_ids=merge_observed_ids(record.observed_message_ids, observed),
        buffered_observation_chunks=json_text([c.to_json() for c in left], ensure_ascii=False) if left else None)
    if thread_metadata is None:
        return after, None
    mastra = thread_metadata.get("mastra")
    om = mastra.get("om") if isinstance(mastra, Mapping) else None
    before = dict(om) if isinstance(om, Mapping) else {}
    return after, thread_hints({"mastra": {"om": {**before, **_activation_hints(chunks[-1])}}})


# -- reflection --------------------------------------------------------------------------------------
def commit_buffered_reflection(store: "Store", *, record: OMRecord, reflected: str, reflection: str, tokens: int,
                               input_tokens: int, now: str) -> OMRecord | None:
    """Keep a reflection made in the background, covering the first lines of the log (``reflected``,
    what the reflector read). None when the log no longer starts with it (another generation)."""
    with store.db.write() as conn:
        store.db.lock(conn, locks.om_key(record.lookup_key))
        head = _head(conn, record.lookup_key)
        if head is None or head["id"] != record.id or not (head["activeObservations"] or "").startswith(reflected):
            return None
        studio = with_event(_studio(head), {"kind": "reflection-buffered", "at": now, "from": input_tokens,
                                            "to": tokens})
        studio.pop("reflectorBackoff", None)
        conn.execute(OM.update().where(OM.c.id == record.id).values(
            bufferedReflection=reflection, bufferedReflectionTokens=tokens, bufferedReflectionInputTokens=input_tokens,
            reflectedObservationLineCount=len(reflected.splitlines()), isBufferingReflection=0,
            metadata=_metadata_with(head, studio), updatedAt=now,
        ))
        return _fresh(conn, record.id)


def after_log_edit(head: Mapping[str, Any], new_log: str, now: str) -> dict[str, Any]:
    """The other columns a user's edit of the log (``core.edits.observations``) changes: a reflection
    prepared in the background from lines the edit changed is dropped (swapped in, it would bring a
    deleted or corrected observation back); the next job prepares another. Buffered chunks stay:
    they cover messages, not the log's lines."""
    n = int(head.get("reflectedObservationLineCount") or 0)
    if not head.get("bufferedReflection") or n <= 0:
        return {}
    if new_log.splitlines()[:n] == (head.get("activeObservations") or "").splitlines()[:n]:
        return {}
    studio = with_event(_studio(head), {"kind": "reflection-dropped", "at": now})
    return {"bufferedReflection": None, "bufferedReflectionTokens": None, "bufferedReflectionInputTokens": None,
            "reflectedObservationLineCount": None, "metadata": _metadata_with(head, studio)}


def reflected_log(record: OMRecord) -> str:
    """The new generation's log: the buffered reflection, then every line the reflector did not see."""
    assert record.buffered_reflection is not None
    lines = record.active_observations.splitlines()
    tail = "\n".join(lines[record.reflected_line_count:]).strip("\n")
    head = record.buffered_reflection.rstrip()
    if not tail.strip():
        return head
    return head + ("\n\n" + tail if tail.startswith("---") else "\n" + tail)


def commit_generation(store: "Store", *, record: OMRecord, active: str, tokens: int, now: str,
                      buffered: bool, blocked: bool = False) -> OMRecord | None:
    """Start generation ``n+1`` with ``active`` as its log: a reflection (``buffered``: swapped in
    from the buffer). The buffered chunks move with it: they still continue right after the cursor.
    None when the row moved meanwhile."""
    with store.db.write() as conn:
        store.db.lock(conn, locks.om_key(record.lookup_key))
        head = _head(conn, record.lookup_key)
        if head is None or head["id"] != record.id or (head["activeObservations"] or "") != record.active_observations:
            return None
        row = _new_row(record.lookup_key, record.scope, record.thread_id, record.resource_id, record.config, now)
        studio = {k: v for k, v in _studio(head).items() if k in ("events", "observerBackoff")}
        studio = with_event(studio, {"kind": "reflection-activated" if buffered else "reflected", "at": now,
                                     "generation": record.generation_count + 1, "blocked": blocked,
                                     "from": record.observation_token_count, "to": tokens})
        studio = with_appended(studio, active, now, record.last_observed_at)
        row.update(
            originType="reflection", generationCount=record.generation_count + 1, activeObservations=active,
            observationTokenCount=tokens, lastObservedAt=record.last_observed_at, lastReflectionAt=now,
            totalTokensObserved=record.total_tokens_observed, pendingMessageTokens=record.pending_message_tokens,
            observedMessageIds=json_text(record.observed_message_ids),
            observedTimezone=record.observed_timezone or "UTC",
            bufferedObservationChunks=head.get("bufferedObservationChunks"),
            bufferedObservationTokens=head.get("bufferedObservationTokens"),
            bufferedMessageIds=head.get("bufferedMessageIds"),
            lastBufferedAtTokens=int(head.get("lastBufferedAtTokens") or 0),
            lastBufferedAtTime=head.get("lastBufferedAtTime"),
            metadata=json_text({STUDIO_KEY: studio}, ensure_ascii=False),
        )
        conn.execute(OM.insert().values(**row))
        return _fresh(conn, row["id"])


# -- failures and events -----------------------------------------------------------------------------
def record_failure(store: "Store", *, key: str, scope: str, thread_id: str, resource_id: str | None,
                   config: Mapping[str, Any], which: str, error: str, now: str, retry: "Backoff") -> None:
    """Remember a failed observer / reflector call and when to try again (creating the row if needed, unless
    the thread is gone: a background call that failed after its thread was deleted writes nothing, or the
    thread's log would come back, holding the back-off, for a new thread given the same id)."""
    with store.db.write() as conn:
        store.db.lock(conn, locks.om_key(key), locks.thread_key(thread_id))
        head = _head(conn, key)
        if head is None:
            if store.memory.thread_owner(thread_id, conn) is None:
                return
            head = _new_row(key, scope, thread_id, resource_id, config, now)
            conn.execute(OM.insert().values(**head))
        studio = _studio(head)
        studio[f"{which}Backoff"] = {"failures": retry.failures, "retryAt": retry.retry_at, "error": retry.error}
        studio = with_event(studio, {"kind": f"{which}-failed", "at": now, "error": kept_error(error),
                                     "retryAt": retry.retry_at})
        flag = "isBufferingObservation" if which == "observer" else "isBufferingReflection"
        conn.execute(OM.update().where(OM.c.id == head["id"]).values(
            metadata=_metadata_with(head, studio), **{flag: 0}))


def add_event(store: "Store", *, record_id: str, event: Mapping[str, Any], clear_backoff: str | None = None) -> None:
    """Note an event on a row (a turn that waited for the observer, a synchronous observation)."""
    with store.db.write() as conn:
        found = conn.execute(sa.select(OM.c.id, OM.c.metadata, OM.c.lookupKey)
                             .where(OM.c.id == record_id)).mappings().first()
        if found is None:
            return
        row = dict(found)
        store.db.lock(conn, locks.om_key(row["lookupKey"]))
        studio = with_event(_studio(row), event)
        if clear_backoff:
            studio.pop(f"{clear_backoff}Backoff", None)
        conn.execute(OM.update().where(OM.c.id == record_id).values(metadata=_metadata_with(row, studio)))


def current_backoff(record: OMRecord | None, which: str) -> Backoff | None:
    return backoff_of(record.studio, which) if record is not None else None


__all__ = [
    "Activation",
    "activation_in_memory",
    "add_event",
    "after_log_edit",
    "commit_activation",
    "commit_buffered_reflection",
    "commit_chunk",
    "commit_generation",
    "current_backoff",
    "record_failure",
    "reflected_log",
    "set_buffering",
    "tail_cursor",
]
