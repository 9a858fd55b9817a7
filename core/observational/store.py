"""Reading and writing observational memory: generation rows, per-thread hints, unobserved messages.

Writes are optimistic: an observation or reflection is committed only if the row still holds what
the observer was shown. If another process got there first, the result is dropped (a wasted model
call, never a lost or doubled observation) and the next turn starts from the newer state. The row
and the thread's ``mastra.om`` hints change in one transaction, so the cursor that decides which
messages are "unobserved" can never run ahead of the observations that cover them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Mapping

import sqlalchemy as sa

from core.messages import Message
from core.observational.buffer import with_appended, with_event, with_hints
from core.observational.records import STUDIO_KEY, OMRecord, lookup_key, merge_observed_ids
from core.storage import locks
from core.storage import schema as t
from core.storage.memory_store import MessageQuery, ParsedRows, dump_json, json_col, load_json
from core.timeutil import iso_now, parse_iso, to_iso
from core.stored_text import json_text

if TYPE_CHECKING:  # pragma: no cover
    from core.storage import Store

OM = t.observational_memory


@dataclass(frozen=True)
class Cursor:
    """The newest observed message of a thread: everything at or before it is observed."""

    created_at: str
    id: str

    def to_dict(self) -> dict[str, str]:
        return {"createdAt": self.created_at, "id": self.id}


@dataclass(frozen=True)
class ThreadHints:
    """``thread.metadata.mastra.om``: continuity hints the observer left for this thread."""

    current_task: str | None = None
    suggested_response: str | None = None
    thread_title: str | None = None
    last_observed_at: str | None = None
    cursor: Cursor | None = None


def thread_hints(metadata: Mapping[str, Any] | None) -> ThreadHints:
    om = ((metadata or {}).get("mastra") or {})
    om = om.get("om") if isinstance(om, Mapping) else None
    if not isinstance(om, Mapping):
        return ThreadHints()
    raw_cursor = om.get("lastObservedMessageCursor")
    cursor = None
    if isinstance(raw_cursor, Mapping) and raw_cursor.get("createdAt") and raw_cursor.get("id"):
        cursor = Cursor(str(raw_cursor["createdAt"]), str(raw_cursor["id"]))

    def text(key: str) -> str | None:
        value = om.get(key)
        return value if isinstance(value, str) and value.strip() else None

    # The newest observed message's time is the cursor's: Mastra 1.71 keeps no ``lastObservedAt`` (and leaves ours as
    # it was when it observes after us); ours writes the two equal.
    last_observed = cursor.created_at if cursor is not None else text("lastObservedAt")
    return ThreadHints(text("currentTask"), text("suggestedResponse"), text("threadTitle"), last_observed, cursor)


# -- reading --------------------------------------------------------------------------------------
def _select_key(key: str) -> sa.Select[Any]:
    return sa.select(OM).where(OM.c.lookupKey == key).order_by(OM.c.generationCount.desc(), OM.c.createdAt.desc())


def current_record(store: "Store", key: str) -> OMRecord | None:
    """The newest generation of ``key`` (highest ``generationCount``), or None."""
    with store.db.read() as conn:
        row = conn.execute(_select_key(key).limit(1)).mappings().first()
    return OMRecord.from_row(dict(row)) if row else None


def load_history(
    store: "Store", thread_id: str | None = None, resource_id: str | None = None, scope: str = "thread"
) -> list[OMRecord]:
    """Every generation for a thread (or resource), newest first. Empty when OM never ran there
    or the database predates the table."""
    key = lookup_key(scope, thread_id=thread_id, resource_id=resource_id)
    if not store.db.has_table(OM.name):
        return []
    with store.db.read() as conn:
        rows = conn.execute(_select_key(key)).mappings().all()
    return [OMRecord.from_row(dict(r)) for r in rows]


def load_current(
    store: "Store", thread_id: str | None = None, resource_id: str | None = None, scope: str = "thread"
) -> OMRecord | None:
    """The current generation for a thread (or resource), for the Studio."""
    if not store.db.has_table(OM.name):
        return None
    return current_record(store, lookup_key(scope, thread_id=thread_id, resource_id=resource_id))


def unobserved_messages(
    store: "Store", *, thread_id: str, resource_id: str | None, record: OMRecord | None,
    hints: ThreadHints, before: tuple[datetime, str] | None = None, parsed: ParsedRows | None = None,
) -> list[Message]:
    """Stored messages of the thread that no observation covers yet, oldest first.

    The thread's cursor decides; a thread without one (an old row, or a Mastra database) falls back
    to the row's ``lastObservedAt`` when the row belongs to this thread alone. ``parsed``: rows read
    before, not parsed again (``MemoryStore.list_messages``).
    """
    since: str | None = None
    after: tuple[str, str] | None = None
    if hints.cursor is not None:
        since, after = hints.cursor.created_at, (hints.cursor.created_at, hints.cursor.id)
    elif record is not None and record.scope == "thread" and record.last_observed_at:
        since, after = record.last_observed_at, (record.last_observed_at, "\uffff")
    rows = store.memory.list_messages(MessageQuery(
        thread_id=thread_id, resource_id=resource_id, since=parse_iso(since) if since else None,
        before=before, exclude_system=True,
    ), parsed=parsed)
    observed = set(record.observed_message_ids) if record is not None else set()
    # A message a millisecond or more after a cursor written as ``to_iso`` writes is after it without formatting
    # its time (``to_iso`` for each message cost as much as the rest of this loop, for every row of a long backlog).
    clearly_after = _ms_after(after[0]) if after is not None else None
    out: list[Message] = []
    for msg in rows:
        if msg.id in observed:
            continue
        if after is not None and not (clearly_after is not None and msg.created_at >= clearly_after) \
                and (to_iso(msg.created_at), msg.id) <= after:
            continue
        out.append(msg)
    return out


def _ms_after(stamp: str) -> datetime | None:
    """A millisecond after ``stamp`` when ``to_iso`` writes it so (every time from it on formats after it), else None."""
    try:
        at = parse_iso(stamp)
    except (ValueError, OverflowError):
        return None
    if to_iso(at) != stamp:
        return None
    try:
        return at + timedelta(milliseconds=1)
    except OverflowError:
        return None


# -- writing --------------------------------------------------------------------------------------
def _new_row(key: str, scope: str, thread_id: str | None, resource_id: str | None,
             config: Mapping[str, Any], now: str) -> dict[str, Any]:
    return {
        "id": str(uuid.uuid4()), "lookupKey": key, "scope": scope, "resourceId": resource_id,
        "threadId": thread_id if scope == "thread" else None, "activeObservations": "",
        "activeObservationsPendingUpdate": None, "originType": "initial", "config": json_text(dict(config)),
        "generationCount": 0, "lastObservedAt": None, "lastReflectionAt": None, "pendingMessageTokens": 0,
        "totalTokensObserved": 0, "observationTokenCount": 0, "isObserving": 0, "isReflecting": 0,
        "observedMessageIds": None, "observedTimezone": "UTC", "bufferedObservations": None,
        "bufferedObservationTokens": None, "bufferedMessageIds": None, "bufferedReflection": None,
        "bufferedReflectionTokens": None, "bufferedReflectionInputTokens": None,
        "reflectedObservationLineCount": None, "bufferedObservationChunks": None, "isBufferingObservation": 0,
        "isBufferingReflection": 0, "lastBufferedAtTokens": 0, "lastBufferedAtTime": None, "metadata": None,
        "createdAt": now, "updatedAt": now,
    }


@dataclass(frozen=True)
class Observation:
    """What one successful observer call adds."""

    active_observations: str  # the whole new log (old chunks + boundary + new chunk)
    observation_tokens: int  # tokens of the whole new log
    observed_ids: list[str]
    tokens_observed: int  # message tokens this call covered
    pending_after: int  # unobserved message tokens left once it is committed
    cursor: Cursor
    current_task: str | None = None
    suggested_response: str | None = None
    thread_title: str | None = None


def row_studio(row: Mapping[str, Any]) -> dict[str, Any]:
    """Memory Studio's bookkeeping in a row's ``metadata`` (``OMRecord.studio`` for a raw row)."""
    meta = load_json(row.get("metadata")) if row.get("metadata") not in (None, "") else None
    studio = meta.get(STUDIO_KEY) if isinstance(meta, Mapping) else None
    return dict(studio) if isinstance(studio, Mapping) else {}


def metadata_with(row: Mapping[str, Any], studio: Mapping[str, Any]) -> str:
    """A row's ``metadata`` JSON with Memory Studio's key replaced (every other key kept)."""
    meta = load_json(row.get("metadata")) if row.get("metadata") not in (None, "") else None
    meta = dict(meta) if isinstance(meta, Mapping) else {}
    meta[STUDIO_KEY] = dict(studio)
    return json_text(meta, ensure_ascii=False)


def commit_observation(
    store: "Store", *, record: OMRecord | None, key: str, scope: str, thread_id: str,
    resource_id: str | None, config: Mapping[str, Any], obs: Observation, now: str | None = None,
    event: Mapping[str, Any] | None = None,
) -> OMRecord | None:
    """Store an observation and the thread's hints atomically. None when the row moved meanwhile.
    ``now``: the writer's clock (ISO text; default the system clock), so rows date like its messages.
    ``event``: noted in the row's event list for the Studio (with when the log gained the chunk)."""
    now = now or iso_now()
    with store.db.write() as conn:
        store.db.lock(conn, locks.om_key(key), locks.thread_key(thread_id))
        latest = conn.execute(_select_key(key).limit(1)).mappings().first()
        if record is None:
            if latest is not None:
                return None
            if store.memory.thread_owner(thread_id, conn) is None:
                return None  # the thread was deleted (or its resource forgotten) while the observer ran
            row = _new_row(key, scope, thread_id, resource_id, config, now)
            conn.execute(OM.insert().values(**row))
            record_id, old_ids, total = row["id"], [], 0
        else:
            if latest is None or latest["id"] != record.id or (latest["activeObservations"] or "") != record.active_observations:
                return None
            record_id, old_ids, total = record.id, record.observed_message_ids, record.total_tokens_observed
            row = dict(latest)
        hints: dict[str, Any] = {"lastObservedAt": obs.cursor.created_at,
                                 "lastObservedMessageCursor": obs.cursor.to_dict()}
        # A section the observer left out keeps its previous value rather than being wiped.
        for name, value in (("currentTask", obs.current_task), ("suggestedResponse", obs.suggested_response),
                            ("threadTitle", obs.thread_title)):
            if value:
                hints[name] = value
        merged = _merge_thread_om(conn, thread_id, hints, now)
        studio = with_appended(row_studio(row), obs.active_observations, now, obs.cursor.created_at)
        if merged is not None:
            studio = with_hints(studio, now, thread_id, *merged)
        studio.pop("observerBackoff", None)
        if event is not None:
            studio = with_event(studio, event)
        conn.execute(OM.update().where(OM.c.id == record_id).values(
            activeObservations=obs.active_observations, observationTokenCount=obs.observation_tokens,
            lastObservedAt=obs.cursor.created_at, pendingMessageTokens=obs.pending_after,
            totalTokensObserved=total + obs.tokens_observed,
            observedMessageIds=json_text(merge_observed_ids(old_ids, obs.observed_ids)),
            metadata=metadata_with(row, studio), updatedAt=now,
        ))
        fresh = conn.execute(sa.select(OM).where(OM.c.id == record_id)).mappings().first()
    return OMRecord.from_row(dict(fresh)) if fresh else None


def _merge_thread_om(conn: sa.Connection, thread_id: str, om: Mapping[str, Any],
                     now: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """Deep-merge into ``metadata.mastra.om``; every other key (``workingMemory``...) is kept.
    Returns the thread's ``mastra.om`` before and after; None when the thread is gone."""
    row = conn.execute(
        sa.select(json_col(t.threads.c.metadata).label("metadata")).where(t.threads.c.id == thread_id)
    ).first()
    if row is None:
        return None  # the thread was deleted meanwhile; its messages went with it
    meta = load_json(row.metadata)
    meta = dict(meta) if isinstance(meta, dict) else {}
    mastra = dict(meta.get("mastra") or {}) if isinstance(meta.get("mastra"), dict) else {}
    before = dict(mastra.get("om") or {}) if isinstance(mastra.get("om"), dict) else {}
    current = {**before, **om}
    mastra["om"] = current
    meta["mastra"] = mastra
    conn.execute(t.threads.update().where(t.threads.c.id == thread_id).values(metadata=dump_json(meta), updatedAt=now))
    return before, current


def commit_reflection(store: "Store", *, record: OMRecord, reflection: str, tokens: int,
                      now: str | None = None) -> OMRecord | None:
    """Start generation ``n+1`` with the reflected log. None when the row moved meanwhile."""
    now = now or iso_now()
    with store.db.write() as conn:
        store.db.lock(conn, locks.om_key(record.lookup_key))
        latest = conn.execute(_select_key(record.lookup_key).limit(1)).mappings().first()
        if latest is None or latest["id"] != record.id or (latest["activeObservations"] or "") != record.active_observations:
            return None
        row = _new_row(record.lookup_key, record.scope, record.thread_id, record.resource_id, record.config, now)
        row.update(
            originType="reflection", generationCount=record.generation_count + 1, activeObservations=reflection,
            observationTokenCount=tokens, lastObservedAt=record.last_observed_at, lastReflectionAt=now,
            totalTokensObserved=record.total_tokens_observed, pendingMessageTokens=0,
            observedMessageIds=json_text(record.observed_message_ids),
            observedTimezone=record.observed_timezone or "UTC",
        )
        conn.execute(OM.insert().values(**row))
        fresh = conn.execute(sa.select(OM).where(OM.c.id == row["id"])).mappings().first()
    return OMRecord.from_row(dict(fresh)) if fresh else None


def update_pending(
    store: "Store", *, record_id: str | None, key: str, scope: str, thread_id: str,
    resource_id: str | None, config: Mapping[str, Any], pending: int, now: str | None = None,
) -> None:
    """Keep ``pendingMessageTokens`` current so the Studio's progress bar is true between turns.
    Creates the ``initial`` row on first use, as Mastra does, while the thread exists (a turn that ends
    after its thread was deleted writes no log for it)."""
    now = now or iso_now()
    with store.db.write() as conn:
        store.db.lock(conn, locks.om_key(key), locks.thread_key(thread_id))
        if record_id is None:
            if conn.execute(sa.select(OM.c.id).where(OM.c.lookupKey == key).limit(1)).first() is None:
                if store.memory.thread_owner(thread_id, conn) is None:
                    return
                row = _new_row(key, scope, thread_id, resource_id, config, now)
                row["pendingMessageTokens"] = pending
                conn.execute(OM.insert().values(**row))
            return
        conn.execute(OM.update().where(OM.c.id == record_id).values(pendingMessageTokens=pending))


def thread_metadata(store: "Store", thread_id: str) -> dict[str, Any]:
    thread = store.memory.get_thread(thread_id)
    return dict(thread.metadata or {}) if thread is not None else {}


def clone_record(
    conn: sa.Connection, store: "Store", *, source_thread_id: str, source_resource_id: str, thread_id: str,
    resource_id: str, id_map: Mapping[str, str], now: str,
) -> None:
    """A cloned thread's observational memory, as Mastra 1.71's ``cloneObservationalMemory`` makes it for a
    thread-scoped record: the source thread's current generation copied as a new row, the copied messages' ids in
    place of the originals' (the others dropped), nothing in progress, its ``<thread id>`` tags renamed. A
    resource's record is never copied (Mastra copies it onto another resource; ``core.thread_clone`` says why not):
    within the resource the clone shares it already. Our Studio marks are not copied (they date the source's
    chunks, not the clone's)."""
    if not store.db.has_table(OM.name):
        return
    row = conn.execute(_select_key(lookup_key("thread", thread_id=source_thread_id, resource_id=None)).limit(1)
                       ).mappings().first()
    moved = resource_id != source_resource_id
    if row is None:
        return
    new = dict(row)

    def remap(raw: Any) -> list[str] | None:
        ids = load_json(raw) if isinstance(raw, str) else raw
        return [id_map[i] for i in ids if i in id_map] if isinstance(ids, list) else None

    def retag(text: Any) -> Any:
        if not moved or not isinstance(text, str):
            return text
        return text.replace(f'<thread id="{source_thread_id}">', f'<thread id="{thread_id}">')

    chunks = load_json(row["bufferedObservationChunks"]) if row["bufferedObservationChunks"] else None
    if isinstance(chunks, list):
        chunks = [{**c, "messageIds": remap(c.get("messageIds")) or [],
                   "observations": retag(c.get("observations"))} for c in chunks if isinstance(c, dict)]
    observed = remap(row["observedMessageIds"])
    meta = load_json(row["metadata"]) if row["metadata"] else None
    if isinstance(meta, dict):
        meta = {k: v for k, v in meta.items() if k != STUDIO_KEY} or None
    new.update(  # (a thread's record: its lookup key is the thread's)
        id=str(uuid.uuid4()), threadId=thread_id, resourceId=resource_id,
        lookupKey=lookup_key("thread", thread_id=thread_id, resource_id=resource_id),
        activeObservations=retag(row["activeObservations"]) or "", activeObservationsPendingUpdate=None,
        lastReflectionAt=None, observedMessageIds=json_text(observed) if observed is not None else None,
        bufferedObservations=None, bufferedObservationTokens=None, bufferedMessageIds=None,
        bufferedObservationChunks=json_text(chunks) if isinstance(chunks, list) else None,
        bufferedReflection=retag(row["bufferedReflection"]), isObserving=0, isReflecting=0,
        isBufferingObservation=0, isBufferingReflection=0, metadata=json_text(meta) if meta else None,
        createdAt=now, updatedAt=now,
    )
    conn.execute(OM.insert().values(**new))


__all__ = [
    "Cursor",
    "Observation",
    "ThreadHints",
    "clone_record",
    "commit_observation",
    "commit_reflection",
    "current_record",
    "metadata_with",
    "row_studio",
    "load_current",
    "load_history",
    "thread_hints",
    "thread_metadata",
    "unobserved_messages",
    "update_pending",
]
