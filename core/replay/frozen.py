"""A turn's inputs taken from its record instead of from queries: the processors' "frozen source".

When a request carries a ``FrozenTurn`` (``RequestContext.frozen``), each built-in processor takes
what it would have queried from here, and runs its own formatting code on it, so a rebuilt prompt
and a live one cannot drift apart: history gets exactly the recorded message ids, recall exactly the
recorded hits and windows, working memory the recorded version's text, observational memory the
recorded generation's log as it then was (and the hints of the time).

A part is frozen only while the options it depends on are those of the record: a what-if that
changes the history window re-queries the history (as of the turn's time) and keeps the recorded
recall hits, working memory and observations. ``ReplaySource`` caches the rows a rebuild reads, so
stepping through a thread or a what-if over it reads each row once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

import sqlalchemy as sa

from core.messages import Message
from core.observational.context import CONTINUATION_ID
from core.options import MemoryOptions
from core.replay import observations
from core.replay import store as records
from core.replay.record import TurnRecord
from core.storage import schema as t
from core.storage.memory_store import MessageQuery

if TYPE_CHECKING:  # pragma: no cover
    from core.observational.records import OMRecord
    from core.recall import SearchHit
    from core.storage import Store
    from core.storage.memory_store import Thread

PARTS = ("history", "recall", "working-memory", "observational-memory")


class ReplaySource:
    """The stored rows rebuilds read, cached: records, messages, working-memory versions and
    observation generations. ``preload(thread_id)`` reads a whole thread's messages and records at
    once (a what-if or a replay pane steps through all of them)."""

    def __init__(self, store: "Store") -> None:
        self.store = store
        self._messages: dict[str, Message] = {}
        self._records: dict[str, TurnRecord] | None = None
        self._damaged: dict[str, str] = {}
        self._versions: dict[int, tuple[bool, str | None]] = {}
        self._generations: dict[str, "OMRecord | None"] = {}
        self.thread_messages: list[Message] = []
        self.preloaded: str | None = None  # the thread ``preload`` read (``thread_messages``' thread)
        self._threads: dict[str, "Thread | None"] = {}
        self._thread_records: dict[str, dict[str, TurnRecord]] = {}
        self._other_records: dict[tuple[str, str], dict[str, TurnRecord]] = {}

    def preload(self, thread_id: str) -> "ReplaySource":
        self.thread_messages = self.store.memory.list_messages(MessageQuery(thread_id=thread_id, exclude_system=False))
        for m in self.thread_messages:
            self._messages[m.id] = m
        self._records, self._damaged = records.thread_state(self.store, thread_id)
        self._thread_records[thread_id] = self._records
        self.preloaded = thread_id
        return self

    def thread_records(self, thread_id: str) -> dict[str, TurnRecord]:
        """Every readable record of a thread by input message id, read once (a replay pane or a
        what-if rebuilds each turn of a thread, and each reconstruction asks for the others')."""
        if thread_id not in self._thread_records:
            self._thread_records[thread_id] = records.for_thread(self.store, thread_id)
        return self._thread_records[thread_id]

    def other_threads_records(self, resource_id: str, thread_id: str) -> dict[str, TurnRecord]:
        """Every readable record of the resource's threads but ``thread_id``, read once."""
        key = (resource_id, thread_id)
        if key not in self._other_records:
            self._other_records[key] = records.for_other_threads(self.store, resource_id, thread_id)
        return self._other_records[key]

    @property
    def records(self) -> dict[str, TurnRecord]:
        """The preloaded thread's records by input message id."""
        return dict(self._records or {})

    def thread(self, thread_id: str) -> "Thread | None":
        if thread_id not in self._threads:
            self._threads[thread_id] = self.store.memory.get_thread(thread_id)
        return self._threads[thread_id]

    @property
    def damaged(self) -> dict[str, str]:
        """Why each unreadable record of the preloaded thread is damaged, by input message id."""
        return dict(self._damaged)

    def record(self, input_message_id: str) -> TurnRecord | None:
        return self.record_state(input_message_id)[0]

    def record_state(self, input_message_id: str) -> tuple[TurnRecord | None, str | None]:
        """(record, None), (None, why it is damaged) or (None, None): no record."""
        if self._records is not None and input_message_id in self._messages:
            return self._records.get(input_message_id), self._damaged.get(input_message_id)
        return records.read_state(self.store, input_message_id)

    def messages(self, ids: Iterable[str]) -> dict[str, Message]:
        wanted = list(dict.fromkeys(ids))
        missing = [i for i in wanted if i not in self._messages]
        if missing:
            for m in self.store.memory.get_messages(missing):
                self._messages[m.id] = m
        return {i: self._messages[i] for i in wanted if i in self._messages}

    def version_text(self, version_id: int) -> tuple[bool, str | None]:
        if version_id not in self._versions:
            self._versions[version_id] = _version_text(self.store, version_id)
        return self._versions[version_id]

    def generation(self, row_id: str) -> "OMRecord | None":
        if row_id not in self._generations:
            self._generations[row_id] = observations.generation(self.store, row_id)
        return self._generations[row_id]


@dataclass
class FrozenTurn:
    """What a recorded turn's processors read; a part left as None is queried as of the turn's time.
    ``missing``: stored rows the record names that are gone."""

    record: TurnRecord
    history: list[Message] | None = None
    hits: list["SearchHit"] | None = None
    windows: dict[str, list[Message]] = field(default_factory=dict)
    wm_frozen: bool = False
    wm_text: str | None = None
    om: observations.ObservationState | None = None
    missing: list[str] = field(default_factory=list)
    tools: list[dict[str, Any]] | None = None  # the definitions the first call offered, when recorded and kept

    @property
    def parts(self) -> tuple[str, ...]:
        frozen = (self.history is not None, self.hits is not None, self.wm_frozen, self.om is not None)
        return tuple(p for p, on in zip(PARTS, frozen) if on)

    def window(self, hit_id: str) -> list[Message]:
        return list(self.windows.get(hit_id, ()))


def _version_text(store: "Store", version_id: int) -> tuple[bool, str | None]:
    if not store.db.has_table(t.wm_versions.name):
        return False, None
    with store.db.read() as conn:
        row = conn.execute(sa.select(t.wm_versions.c.working_memory).where(t.wm_versions.c.id == version_id)).first()
    return (True, row[0]) if row is not None else (False, None)


def working_memory_text(store: "Store", record: TurnRecord, source: ReplaySource | None = None) -> tuple[bool, str | None]:
    """(known, text) of the working memory a recorded turn showed."""
    if record.wm_version_id is not None:
        return (source.version_text(record.wm_version_id) if source is not None
                else _version_text(store, record.wm_version_id))
    return True, record.wm_text


def _sub(options: dict[str, Any], key: str) -> Any:
    value = options.get(key)
    return value if isinstance(value, dict) else {}


def parts_unchanged(record: TurnRecord, effective: MemoryOptions) -> set[str]:
    """The parts of the prompt whose options are the record's, so their recorded inputs still hold."""
    was, now = record.options, effective.to_dict()
    same: set[str] = set()
    om_was, om_now = _sub(was, "observational_memory"), _sub(now, "observational_memory")
    om_same = om_was.get("enabled") == om_now.get("enabled") and om_was.get("scope") == om_now.get("scope")
    history_keys = [k for k in ("last_messages", "message_history") if k in was or k in now]
    if om_same and all(was.get(k) == now.get(k) for k in history_keys):
        same.add("history")
    if _sub(was, "semantic_recall") == _sub(now, "semantic_recall"):
        same.add("recall")
    wm_was, wm_now = _sub(was, "working_memory"), _sub(now, "working_memory")
    if wm_was.get("enabled") == wm_now.get("enabled") and wm_was.get("scope") == wm_now.get("scope"):
        same.add("working-memory")
    if om_same:
        same.add("observational-memory")
    return same


def load(source: ReplaySource, record: TurnRecord, parts: Iterable[str] = PARTS) -> FrozenTurn:
    """Load the stored rows a record names for the given parts. A message the record names that is
    in another thread (history) or another resource (recall) is never handed on: it is listed."""
    wanted_parts = set(parts)
    frozen = FrozenTurn(record)
    # Observational memory's continuation reminder is no stored message: the processor makes it again. A
    # window that fitted it as history (records before ``od``) named it among the dropped messages.
    dropped = tuple(mid for mid in record.window_dropped if mid != CONTINUATION_ID)
    ids = list(dropped) + list(record.history_ids) + list(record.om_others)
    for hit in record.recall:
        ids.extend(hit.window_ids)
        ids.append(hit.message_id)
    found = source.messages(ids) if ("history" in wanted_parts or "recall" in wanted_parts
                                     or "observational-memory" in wanted_parts) else {}
    foreign = _foreign(source, record, found)
    for mid in foreign:
        found.pop(mid, None)
    # The history the processors read: what the context window dropped, then what was sent.
    history = [found[mid] for mid in (*dropped, *record.history_ids) if mid in found]
    gone = sorted({mid for mid in ids if mid not in found and mid not in foreign}) if found or ids else []
    if "history" in wanted_parts:
        frozen.history = history
    if "recall" in wanted_parts:
        frozen.hits = _hits(record)
        frozen.windows = {hit.message_id: sorted((found[w] for w in hit.window_ids if w in found),
                                                 key=lambda m: (m.created_at, m.id)) for hit in record.recall}
    if "working-memory" in wanted_parts:
        # No version and no text: working memory was empty (or off) at that turn.
        known, frozen.wm_text = working_memory_text(source.store, record, source)
        frozen.wm_frozen = known
        if not known:
            frozen.missing.append(f"working-memory version {record.wm_version_id}")
    if "observational-memory" in wanted_parts:
        frozen.om = observations.recorded(
            source.generation(record.om_generation) if record.om_generation else None,
            generation_id=record.om_generation, chunks=record.om_chunks, hints=record.om_hints, unobserved=history,
            others=[found[mid] for mid in record.om_others if mid in found])
        frozen.missing.extend(frozen.om.unknowns)
    frozen.missing.extend(f"message {mid} (no longer stored)" for mid in gone)
    frozen.missing.extend(f"message {mid} (named by the record but stored in {foreign[mid]}: not shown)"
                          for mid in sorted(foreign))
    frozen.missing.extend(f"text {key} named by the record (no longer stored)" for key in record.unresolved
                          if not key.startswith("tools:"))
    frozen.missing.extend(f"the tool definitions {key[6:]} named by the record (no longer stored)"
                          for key in record.unresolved if key.startswith("tools:"))
    return frozen


def _foreign(source: ReplaySource, record: TurnRecord, found: dict[str, Message]) -> dict[str, str]:
    """Messages a record names that it may not show, with where they are: history from another
    thread, recall from another resource (a record is only data: it could name anything)."""
    own = source.thread(record.thread_id)
    resource = own.resource_id if own is not None else record.resource_id
    out: dict[str, str] = {}
    for mid in (*record.window_dropped, *record.history_ids):
        m = found.get(mid)
        if m is not None and m.thread_id != record.thread_id:
            out[mid] = f"thread {m.thread_id}"
    for hit in record.recall:
        for mid in (hit.message_id, *hit.window_ids):
            m = found.get(mid)
            if m is None or mid in out:
                continue
            thread = source.thread(m.thread_id or "")
            if thread is None or thread.resource_id != resource:
                out[mid] = f"resource {thread.resource_id if thread is not None else m.resource_id}"
    return out


def _hits(record: TurnRecord) -> list[Any]:
    if not record.recall:
        return []
    from core.recall import SearchHit

    out = []
    for h in record.recall:
        source = "hybrid" if h.vector is not None and h.keyword is not None else "keyword" if h.vector is None else "vector"
        out.append(SearchHit(h.message_id, h.thread_id or None, record.resource_id, h.fused, source,  # type: ignore[arg-type]
                             h.vector, h.keyword))
    return out


__all__ = ["FrozenTurn", "PARTS", "ReplaySource", "load", "parts_unchanged", "working_memory_text"]
