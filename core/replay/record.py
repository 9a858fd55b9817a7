"""The turn record: what one live agent turn sent the model, compactly, so it can be rebuilt exactly.

A record names stored rows rather than copying them (history and recall by message id, working
memory by version id, observational memory by generation row and how much of its log existed), plus
what no stored row holds: the options in force, the model, the agent's instructions and the
observer's hints of the time. Long texts are stored once per thread and named by hash (``texts``
column), so a typical record stays well under a kilobyte.

``messages_hash`` is the sha256 of the canonical JSON of the exact messages of the turn's first
model call; a rebuild is exact when its messages hash the same.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Mapping, Sequence

from core.options import MemoryOptions, options_merge

RECORD_VERSION = 1
TOKEN_SECTIONS = ("system", "working_memory", "observations", "history", "recall", "input", "tools", "total")
SCORE_DIGITS = 4  # scores are shown, never part of the prompt: four decimals keep records small


@dataclass(frozen=True)
class RecallHitRecord:
    """One recall hit as the live turn used it: scores, rank (1 = best) and the window around it."""

    message_id: str
    thread_id: str
    vector: float | None
    keyword: float | None
    fused: float
    rank: int
    window_ids: tuple[str, ...]


@dataclass(frozen=True)
class TurnRecord:
    """One live turn (see the module docstring). The first fifteen fields are the replay API's; the
    rest are what an exact rebuild needs besides stored rows."""

    input_message_id: str
    thread_id: str
    resource_id: str | None
    response_ids: tuple[str, ...]
    created_at: datetime  # the turn's clock when its prompt was assembled
    options: dict[str, Any]  # MemoryOptions.to_dict() in force
    model: str | None
    history_ids: tuple[str, ...]  # stored messages in the history window, in prompt order
    recall: tuple[RecallHitRecord, ...]
    wm_version_id: int | None  # memory_studio_wm_versions.id in force (None: none, or not versioned)
    om_generation: str | None  # mastra_observational_memory row id
    om_cursor: str | None  # "<createdAt> <message id>" of the thread's last observed message
    tools: tuple[str, ...]
    tokens: dict[str, int]
    messages_hash: str
    input_ids: tuple[str, ...] = ()  # every input message of the turn (the last one is input_message_id)
    instructions: tuple[str, ...] = ()  # the agent's instruction texts (untagged system messages)
    context: tuple[dict[str, Any], ...] = ()  # call-time context messages (never stored elsewhere)
    wm_text: str | None = None  # working memory shown, when no version row held it
    om_chunks: int | None = None  # how many chunks of the generation's log existed
    om_hints: dict[str, str] = field(default_factory=dict)  # currentTask / suggestedResponse then
    om_others: tuple[str, ...] = ()  # resource scope: other threads' unobserved messages shown
    unresolved: tuple[str, ...] = ()  # texts named by hash that could not be found (an import, a manual delete)

    def memory_options(self, overrides: Mapping[str, Any] | None = None) -> MemoryOptions:
        """The options in force at this turn, with ``overrides`` deep-merged over them (a what-if)."""
        return options_with(self.options, overrides)


def canonical_json(messages: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps(list(messages), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def messages_hash(messages: Sequence[Mapping[str, Any]]) -> str:
    """sha256 of the canonical JSON (sorted keys, no spaces, UTF-8) of chat messages."""
    return hashlib.sha256(canonical_json(messages).encode("utf-8")).hexdigest()


def text_key(text: str) -> str:
    """The name a long text is stored under: 16 hex digits of its sha256."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


_DEFAULTS: dict[str, Any] | None = None


def _defaults() -> dict[str, Any]:
    global _DEFAULTS
    if _DEFAULTS is None:
        _DEFAULTS = MemoryOptions().to_dict()
    return _DEFAULTS


def options_delta(options: Mapping[str, Any], base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What differs from the defaults, nested (so a record holds only the options someone set)."""
    base = _defaults() if base is None else base
    out: dict[str, Any] = {}
    for key, value in options.items():
        if key not in base:
            out[key] = value
        elif isinstance(value, Mapping) and isinstance(base[key], Mapping):
            sub = options_delta(value, base[key])
            if sub:
                out[key] = sub
        elif value != base[key]:
            out[key] = value
    return out


@functools.lru_cache(maxsize=64)
def _delta_of(options_json: str) -> str:
    return json.dumps(options_delta(json.loads(options_json)), separators=(",", ":"))


def stored_options(options: Mapping[str, Any]) -> Any:
    """``options_delta``, memoised: a memory's options rarely change between its turns."""
    return json.loads(_delta_of(_canonical(options)))


def _canonical(value: Any) -> str:
    # A memo key that is also parsed back: keys keep their order, because some option values are
    # shown to the model as written (a working-memory JSON schema's properties, in their order).
    return json.dumps(value, default=str)


@functools.lru_cache(maxsize=128)
def _options(options_json: str, overrides_json: str | None) -> MemoryOptions:
    base = MemoryOptions(**json.loads(options_json))
    return base.merged(json.loads(overrides_json)) if overrides_json else base


def options_with(options: Mapping[str, Any], overrides: Mapping[str, Any] | None = None) -> MemoryOptions:
    """``MemoryOptions`` from a record's options dict (and a what-if's overrides), memoised: stepping
    through a thread rebuilds many turns with the same options. Options are frozen, so sharing is safe."""
    return _options(_canonical(options), _canonical(overrides) if overrides else None)


def expand_options(delta: Mapping[str, Any]) -> dict[str, Any]:
    return options_merge(_defaults(), delta)


def _score(value: float | None) -> float | None:
    return None if value is None else round(float(value), SCORE_DIGITS)


@functools.lru_cache(maxsize=8192)  # a history window repeats most ids of the turn before
def pack_id(value: str) -> str:
    """A message id as stored in a record: a canonical UUID becomes ``~`` + its 16 bytes in base64url
    (23 characters instead of 36); any other id is kept, with a leading ``~`` doubled. Exact both ways."""
    if len(value) == 36:
        try:
            parsed = uuid.UUID(value)
        except ValueError:
            parsed = None
        if parsed is not None and str(parsed) == value:
            return "~" + base64.urlsafe_b64encode(parsed.bytes).decode("ascii").rstrip("=")
    return "~" + value if value.startswith("~") else value


@functools.lru_cache(maxsize=8192)
def unpack_id(value: str) -> str:
    if value.startswith("~~"):
        return value[1:]
    if value.startswith("~"):
        return str(uuid.UUID(bytes=base64.urlsafe_b64decode(value[1:] + "==")))
    return value


def encode(record: TurnRecord, text_keys: Mapping[str, str]) -> str:
    """The compact JSON stored in the ``record`` column; ``text_keys`` maps each long text to its key."""
    history_at = {mid: i for i, mid in enumerate(record.history_ids)}
    data: dict[str, Any] = {"v": RECORD_VERSION, "r": [pack_id(i) for i in record.response_ids],
                            "o": stored_options(record.options)}
    if record.model:
        data["m"] = record.model
    if len(record.input_ids) > 1:
        data["in"] = [pack_id(i) for i in record.input_ids]
    data["h"] = [pack_id(i) for i in record.history_ids]
    if record.recall:
        # Hits in rank order. A window neighbour already in the history is named by its place there;
        # the hit itself by its place in the window; "" is the record's own thread.
        data["rc"] = [
            [pack_id(h.message_id), "" if h.thread_id == record.thread_id else h.thread_id, _score(h.vector),
             _score(h.keyword), _score(h.fused),
             [history_at.get(w, pack_id(w)) for w in h.window_ids if w != h.message_id],
             h.window_ids.index(h.message_id) if h.message_id in h.window_ids else -1]
            for h in sorted(record.recall, key=lambda h: h.rank)
        ]
    # The working-memory version id lives in its own column only (an import may renumber versions).
    if record.wm_text is not None:
        data["wt"] = text_keys[record.wm_text]
    if record.om_generation is not None:
        data["om"] = [pack_id(record.om_generation), record.om_cursor, record.om_chunks,
                      {k: text_keys[v] for k, v in record.om_hints.items()}]
        if record.om_others:
            data["om"].append([pack_id(i) for i in record.om_others])
    if record.tools:
        data["t"] = list(record.tools)
    data["tk"] = [int(record.tokens.get(k, 0)) for k in TOKEN_SECTIONS]
    if record.instructions:
        data["i"] = [text_keys[t] for t in record.instructions]
    if record.context:
        data["c"] = list(record.context)
    data["x"] = record.messages_hash
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def long_texts(record: TurnRecord) -> list[str]:
    """The texts a record names by key rather than holding."""
    out = list(record.instructions)
    if record.wm_text is not None:
        out.append(record.wm_text)
    out.extend(record.om_hints.values())
    return out


def decode(
    row: Mapping[str, Any], texts: Mapping[str, str], parse_time: Any
) -> TurnRecord:
    """A stored row back into a ``TurnRecord``; ``texts`` resolves keys (missing ones are listed)."""
    data = json.loads(row["record"])
    if not isinstance(data, dict) or data.get("v") != RECORD_VERSION or not data.get("x"):
        raise ValueError(f"not a version-{RECORD_VERSION} turn record")
    missing: list[str] = []

    def text(key: str) -> str:
        found = texts.get(key)
        if found is None:
            missing.append(key)
            return ""
        return found

    history = tuple(unpack_id(str(x)) for x in data.get("h", ()))
    recall: list[RecallHitRecord] = []
    for rank, item in enumerate(data.get("rc", ()), start=1):
        packed, tid, vec, kw, fused, window, at = item
        mid = unpack_id(str(packed))
        ids = [history[w] if isinstance(w, int) else unpack_id(str(w)) for w in window]
        if isinstance(at, int) and at >= 0:
            ids.insert(at, mid)
        recall.append(RecallHitRecord(mid, str(tid) or str(row["thread_id"]), vec, kw, float(fused), rank,
                                      tuple(ids)))
    om = data.get("om")
    tokens = dict(zip(TOKEN_SECTIONS, (int(x) for x in data.get("tk", ()))))
    inputs = tuple(unpack_id(str(x)) for x in data.get("in", ())) or (str(row["input_message_id"]),)
    record = TurnRecord(
        input_message_id=str(row["input_message_id"]),
        thread_id=str(row["thread_id"]),
        resource_id=row.get("resource_id"),
        response_ids=tuple(unpack_id(str(x)) for x in data.get("r", ())),
        created_at=parse_time(row["createdAt"]),
        options=expand_options(data.get("o") or {}),
        model=data.get("m"),
        history_ids=history,
        recall=tuple(recall),
        wm_version_id=int(row["wm_version_id"]) if row.get("wm_version_id") is not None else None,
        om_generation=unpack_id(str(om[0])) if om else None,
        om_cursor=om[1] if om else None,
        tools=tuple(str(x) for x in data.get("t", ())),
        tokens=tokens,
        messages_hash=str(data.get("x", "")),
        input_ids=inputs,
        instructions=tuple(text(k) for k in data.get("i", ())),
        context=tuple(data.get("c", ())),
        wm_text=text(data["wt"]) if "wt" in data else None,
        om_chunks=om[2] if om else None,
        om_hints={k: text(v) for k, v in (om[3] if om else {}).items()},
        om_others=tuple(unpack_id(str(x)) for x in om[4]) if om and len(om) > 4 else (),
    )
    if missing:
        record = _with_unresolved(record, tuple(missing))
    return record


def _with_unresolved(record: TurnRecord, missing: tuple[str, ...]) -> TurnRecord:
    from dataclasses import replace

    return replace(record, unresolved=missing)


Kind = Literal["recorded", "reconstructed"]


@dataclass(frozen=True)
class ReplayInfo:
    """How a rebuilt prompt came about. ``matches``: its messages hash as the record's (None
    without a record). ``unknowns``: what a reconstruction could not know."""

    kind: Kind
    matches: bool | None
    record: TurnRecord | None
    unknowns: tuple[str, ...] = ()
    what_if: bool = False
    # Stored messages the rebuild took from their version history (``core.replay.edited``): message id
    # -> "edited since" / "deleted since". The rebuilt prompt shows what the model saw then.
    changed_since: Mapping[str, str] = field(default_factory=dict)


__all__ = [
    "RecallHitRecord",
    "ReplayInfo",
    "TOKEN_SECTIONS",
    "TurnRecord",
    "canonical_json",
    "decode",
    "encode",
    "expand_options",
    "long_texts",
    "messages_hash",
    "options_delta",
    "text_key",
]
