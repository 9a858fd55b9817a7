"""Observational memory as it stood at a past turn: from a record (exact) or by time (reconstructed).

A generation's log only grows between reflections (``append_chunk`` appends after a boundary line
that names the cursor of the batch it covers), so the log a turn saw is a prefix of its row's log:
a record keeps the generation row and how many chunks existed. Without a record, each chunk is
dated by its boundary: a batch observed at a later turn always covers that turn's input, so its
boundary is at or after the input, and a boundary before the input means the chunk already existed.
The first chunk of the first generation has no boundary; when nothing else dates it, it is left out
and said so. Buffered chunks join the log turns after the messages they cover (a turn activates them):
rows written since buffering date each by its ``appended`` mark, and the thread's hints (current
task, suggested response) by the mark of the activation or observation that wrote them; a buffered
row without marks (Mastra's) dates neither, and says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING

import sqlalchemy as sa

from core.messages import Message
from core.observational.buffer import chunks_at, hints_then, hints_written_at
from core.observational.records import OMRecord
from core.observational.store import OM, ThreadHints, thread_hints
from core.storage.memory_store import MessageQuery
from core.timeutil import parse_iso, to_iso

if TYPE_CHECKING:  # pragma: no cover
    from core.storage import Store

_BOUNDARY_RE = re.compile(r"\n*--- message boundary \(([^)\n]*)\) ---\n*")


@dataclass
class ObservationState:
    """What the observational-memory processor works from at a past turn."""

    record: OMRecord | None
    hints: ThreadHints
    unobserved: list[Message]
    unknowns: list[str] = field(default_factory=list)
    others: dict[str, list[Message]] = field(default_factory=dict)  # resource scope: other threads' raw


#: A rebuild without a record cannot show resource scope's "other conversations" block: each thread's cursor
#: (how far its messages were observed) is kept only as it is now, in the thread's metadata.
OTHERS_NOT_SHOWN = ("the block of the user's other conversations' recent messages (resource scope sends, in one "
                    "system message, those its log does not cover yet): left out, because how far the log covered "
                    "each conversation then is not kept")


def _pieces(active: str) -> list[tuple[str | None, int, int]]:
    """(boundary time, start, end) of each non-empty chunk of a log, in order."""
    out: list[tuple[str | None, int, int]] = []
    start, boundary = 0, None
    for match in _BOUNDARY_RE.finditer(active):
        if active[start:match.start()].strip():
            out.append((boundary, start, match.start()))
        boundary, start = match.group(1), match.end()
    if active[start:].strip():
        out.append((boundary, start, len(active)))
    return out


def log_prefix(active: str, chunks: int) -> str:
    """The log as it was when it held its first ``chunks`` chunks."""
    pieces = _pieces(active)
    if chunks >= len(pieces):
        return active
    if chunks <= 0:
        return ""
    return active[: pieces[chunks - 1][2]]


def chunk_count(active: str) -> int:
    return len(_pieces(active))


def with_log(record: OMRecord, active: str) -> OMRecord:
    return replace(record, active_observations=active)


def generation(store: "Store", row_id: str) -> OMRecord | None:
    """One generation row by id (None when it is gone or the table is missing)."""
    if not store.db.has_table(OM.name):
        return None
    with store.db.read() as conn:
        row = conn.execute(sa.select(OM).where(OM.c.id == row_id)).mappings().first()
    return OMRecord.from_row(dict(row)) if row else None


def _generations(store: "Store", key: str) -> list[OMRecord]:
    if not store.db.has_table(OM.name):
        return []
    with store.db.read() as conn:
        rows = conn.execute(sa.select(OM).where(OM.c.lookupKey == key)
                            .order_by(OM.c.generationCount.asc(), OM.c.createdAt.asc())).mappings().all()
    return [OMRecord.from_row(dict(r)) for r in rows]


def as_of(
    store: "Store", *, key: str, thread_id: str, resource_id: str | None, before: tuple[datetime, str],
    turn_input: tuple[datetime, str] | None = None, not_memory: frozenset[str] = frozenset(),
) -> ObservationState:
    """The generation, log, hints and unobserved messages in force just before ``before`` (reconstructed):
    the unobserved messages are those that sort before it. ``turn_input``: the (createdAt, id) of the
    turn's input, whose next stored message ends the turn (default ``before``). ``not_memory``: messages
    that sort before it but were not stored yet then (``RequestContext.not_memory``)."""
    cutoff = to_iso(before[0])
    unknowns: list[str] = []
    rows = _generations(store, key)
    # A reflection started a new generation when its row was written; later ones did not exist yet. A
    # turn reflects (or swaps a buffered reflection in) in its own input phase, after its input was
    # stamped and before its reply, so a generation written by the turn's end is the one it was shown.
    shared_end = resource_id if rows and rows[-1].scope == "resource" else None
    end = _turn_end(store, thread_id, shared_end, turn_input or before) or "\uffff"
    usable = [r for i, r in enumerate(rows) if i == 0 or r.created_at <= end]
    record = usable[-1] if usable else None
    previous = usable[-2] if len(usable) > 1 else None
    cursor: str | None = None
    marked = None
    if record is not None:
        # Rows written since buffering say when each chunk joined the log: an activated chunk's
        # boundary is older than the turn that activated it, so boundaries alone would date it too early.
        # A turn activates (or observes) in its own input phase, after its input was stamped and
        # before its reply: the marks of its own time are those before the next stored message (of
        # the resource, when its threads share the log: another thread's later turn marks it too).
        shared = resource_id if record.scope == "resource" else None
        marked = chunks_at(record.studio, _turn_end(store, thread_id, shared, turn_input or before) or "\uffff")
    if record is not None and marked is not None:
        kept, cursor = marked
        record = with_log(record, log_prefix(record.active_observations, kept))
    elif record is not None:
        pieces = _pieces(record.active_observations)
        kept = 0
        for i, (boundary, _s, _e) in enumerate(pieces):
            if i == 0:
                continue
            if boundary is not None and boundary < cutoff:
                kept, cursor = i + 1, boundary
            else:
                break
        if kept == 0 and pieces:
            if record.origin_type == "reflection":
                kept, cursor = 1, previous.last_observed_at if previous is not None else record.last_observed_at
            elif len(pieces) == 1 and record.last_observed_at and record.last_observed_at < cutoff:
                kept, cursor = 1, record.last_observed_at
            else:
                unknowns.append("when the first observations were written (left out: they may be later)")
        if kept and _buffered(record):
            # A buffered chunk joins the log at a turn after the messages it covers: its boundary
            # can be older than turns that did not see it yet, and nothing else dates it here.
            unknowns.append(f"whether this turn saw the newest of the {kept} observation chunk(s) shown: they were "
                            "buffered, and with no record of when each was activated they are dated by the "
                            "messages they cover, so the newest may have joined the log after this turn")
        record = with_log(record, log_prefix(record.active_observations, kept))
    if record is not None and record.scope == "resource":
        unknowns.append(OTHERS_NOT_SHOWN)
        cursor = _thread_cursor(record, thread_id, cursor)
    thread = store.memory.get_thread(thread_id)
    # Hints are shown only beside observations: with none at the time, which hints those were does not matter.
    shown = record is not None and bool(record.active_observations.strip())
    hints = _hints_then(thread_hints(thread.metadata if thread is not None else None), thread_id, rows, cutoff, end,
                        unknowns if shown else [])
    observed = set(record.observed_message_ids) if record is not None else set()
    rows_before = store.memory.list_messages(MessageQuery(
        thread_id=thread_id, resource_id=resource_id, since=parse_iso(cursor) if cursor else None,
        before=before, exclude_system=True))
    unobserved = [m for m in rows_before if m.id not in not_memory and (
                  cursor is None or to_iso(m.created_at) > cursor or
                  (to_iso(m.created_at) == cursor and m.id not in observed))]
    return ObservationState(record, hints, unobserved, unknowns)


def _thread_cursor(record: OMRecord, thread_id: str, shared: str | None) -> str | None:
    """The time of ``thread_id``'s cursor in a resource's shared log as shown (``record``, its log cut to the turn's
    time): the cursor of its newest chunk (its boundary line, or the first chunk's ``appended`` mark). Each observer
    call takes one thread's oldest messages and appends a chunk naming that thread, so a thread's cursor is its own
    newest chunk's, not the log's: a turn observes its own input (synchronous observation) while an older reply of
    another thread stays unobserved, and the log's cursor is then past it. ``shared`` (the log's cursor) when a chunk
    names no thread (a reflection, a Mastra row) or the first chunk's cursor is not recorded."""
    from core.observational.resource_scope import chunk_thread

    chunks = record.chunks
    if any(chunk_thread(c.text) is None for c in chunks):
        return shared
    mine = [k for k, c in enumerate(chunks) if chunk_thread(c.text) == thread_id]
    if not mine:
        return None
    last = mine[-1]
    if last:
        return chunks[last].boundary
    first = [m[2] for m in record.studio.get("appended") or () if isinstance(m, list) and len(m) == 3 and m[0] == 1]
    return first[0] if first and isinstance(first[0], str) else shared


def _hints_then(hints: ThreadHints, thread_id: str, rows: list[OMRecord], cutoff: str, end: str,
                unknowns: list[str]) -> ThreadHints:
    """The hints the turn was shown (``end``: the turn's next stored message, as the chunks are
    dated), else none (and said so in ``unknowns``). Rows written since the ``hints`` entries keep
    what each activation or observation left the thread (and what the first replaced): the entry in
    force at ``end`` is exact, unless the thread's hints now differ from the newest entry (another
    program wrote them; when is unknown). Otherwise the thread keeps only the hints of the last
    activation or observation, which overwrote the turn's if it came after the turn's prompt was
    built: its ``appended`` mark says when that was. Without a mark, the hints' cursor dates them:
    an observation made in a turn covers the messages stored before it, so its cursor is older than
    that turn's input but not older than an earlier turn's. That does not hold for buffered
    observations (a chunk covering old messages can be activated turns later): then nothing dates them."""
    studios = [r.studio for r in rows]
    then = hints_then(studios, thread_id, end)
    now_values = {k: v for k, v in (("currentTask", hints.current_task),
                                    ("suggestedResponse", hints.suggested_response)) if v}
    if then is not None and not (then.last and then.newest != now_values):
        if then.values == now_values:
            return hints
        return ThreadHints(current_task=then.values.get("currentTask"),
                           suggested_response=then.values.get("suggestedResponse"))
    if then is not None:
        # The newest entry is in force, but the thread now holds other hints: another program
        # wrote them, before or after this turn.
        if hints.current_task or hints.suggested_response or then.values:
            unknowns.append("the current task and suggested response at the time (the thread's were written "
                            "since by a program that does not date them)")
        return ThreadHints()
    latest = hints.cursor.created_at if hints.cursor is not None else hints.last_observed_at
    written = hints_written_at(studios, latest) if latest is not None else None
    if written is not None:
        kept = written <= end
    elif latest is not None and any(_buffered(r) for r in rows):
        if hints.current_task or hints.suggested_response:
            unknowns.append("the current task and suggested response at the time (observations were buffered and "
                            "activated later than the messages they cover, and nothing dates when these were written)")
        return ThreadHints()
    else:
        kept = latest is not None and latest < cutoff
    if not kept and (hints.current_task or hints.suggested_response):
        unknowns.append("the current task and suggested response at the time")
    return hints if kept else ThreadHints()


def _buffered(record: OMRecord) -> bool:
    """Whether the row's configuration buffers observations (ours and Mastra's ``bufferTokens``)."""
    observation = record.config.get("observation")
    return isinstance(observation, dict) and observation.get("bufferTokens") not in (None, False, 0)


def _turn_end(store: "Store", thread_id: str, resource_id: str | None, before: tuple[datetime, str]) -> str | None:
    """When the turn whose input is ``before`` ended: the time of the next stored message of the
    thread, or of the whole resource when ``resource_id`` is given. None when nothing came after."""
    from core.storage import schema as t

    msg = t.messages.c
    where = msg.resourceId == resource_id if resource_id is not None else msg.thread_id == thread_id
    with store.db.read() as conn:
        row = conn.execute(sa.select(msg.createdAt).where(
            where, sa.tuple_(msg.createdAt, msg.id) > (to_iso(before[0]), before[1]))
            .order_by(msg.createdAt, msg.id).limit(1)).first()
    return str(row[0]) if row is not None else None


def recorded(
    record: OMRecord | None, *, generation_id: str | None, chunks: int | None, hints: dict[str, str],
    unobserved: list[Message], others: list[Message] | None = None,
) -> ObservationState:
    """The state a record names: that generation (``record``, as loaded) with its log as it was
    (its first ``chunks`` chunks), the hints of the time, the raw messages it showed and (resource
    scope) the other conversations' messages it showed."""
    unknowns: list[str] = []
    if generation_id and record is None:
        unknowns.append(f"observation generation {generation_id} (no longer stored)")
    if record is not None and chunks is not None:
        record = with_log(record, log_prefix(record.active_observations, chunks))
    state_hints = ThreadHints(current_task=hints.get("currentTask"), suggested_response=hints.get("suggestedResponse"))
    grouped: dict[str, list[Message]] = {}
    for msg in others or ():
        grouped.setdefault(msg.thread_id or "", []).append(msg)
    return ObservationState(record, state_hints, unobserved, unknowns, grouped)


__all__ = ["OTHERS_NOT_SHOWN", "ObservationState", "as_of", "chunk_count", "generation", "log_prefix", "recorded",
           "with_log"]
