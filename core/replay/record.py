"""The turn record: what one live agent turn sent the model, compactly, so it can be rebuilt exactly.

A record names stored rows rather than copying them (history and recall by message id, working
memory by version id, observational memory by generation row and how much of its log existed), plus
what no stored row holds: the options in force, the agent's instructions and the observer's hints of
the time, and for every model call of the turn what went with the messages (``CallRecord``: the
model's name, every setting, the tool choice, the set of tool definitions by hash) and what came back
about it (the usage the server reported, the finish reason). Long texts are stored once per thread
and named by hash (``texts`` column); tool definitions once per database (``core.replay.tools``), so
a typical record stays well under a kilobyte.

Each call's ``body_hash`` is the sha256 of the canonical JSON of the whole request body the server
received, ``stream`` / ``stream_options`` left out (the trace's ``model_generation`` span carries the
same hash as ``requestHash``); a rebuild is exact when every call's body hashes the same. A record
without calls keeps ``messages_hash`` instead, that of the exact messages of the first call.

A record also names how its model put each body on the wire (``wire``, key ``wf``) and keeps each
call's bytes hash (``CallRecord.wire_hash``, ``wb``): ``core.replay.wire`` gives the exact bytes the
server received when the rebuilt body makes them again. Records without ``wf`` came before.

What the body hashes do not cover, the endpoint, the model label and what the server reported about
each reply (usage, finish reason), has hashes of its own (``FACTS``, key ``fh``): Replay says which no
longer match (``with_facts_checked``). Records without ``fh`` came before; they are shown as before,
those facts unchecked. A record read back and written again (a fork's copy) keeps the ``fh`` it was read
with, none when it had none (``TurnRecord.read_back``).

Version 1 records (before issue 16) hold no calls: their tools and settings are unknown.

A turn whose prompts another framework built (an OpenAI Agents SDK run: ``TurnRecord.framework``)
cannot be rebuilt by our processors: its record (version 3) keeps what each call sent besides
(``CallRecord.sent``: the body's messages, or a Responses call's instructions and input, stored once
per thread like the other long texts), and Replay shows those (``core.replay.verbatim``). A call
taken from the framework's trace rather than from the wire (``CallRecord.partial``) knows its
messages only, and says so.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import uuid
import weakref
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence

from core.errors import MemoryStudioError
from core.options import MemoryOptions, options_merge
from core.timeutil import to_iso
from core.tokens import REPLY_PRIMER
from core.stored_text import json_text

if TYPE_CHECKING:  # pragma: no cover
    from core.context_window import PromptBudget

RECORD_VERSION = 2
VERBATIM_VERSION = 3  # a record that keeps what each call sent (``TurnRecord.framework``)
OM_DATE_STYLES = (1, 2)  # ``core.observational.context``'s LEGACY_DATES, MASTRA_DATES
OM_DATES = OM_DATE_STYLES[-1]  # what a new record's turn used
READABLE_VERSIONS = (1, 2, 3)
HASH_HEX = 32  # a record keeps 128 bits of each sha256: ample to tell a changed request from the one sent
TOKEN_SECTIONS = ("system", "working_memory", "observations", "history", "recall", "input", "tools", "total")
SCORE_DIGITS = 3  # scores are shown (to three decimals), never part of the prompt: keeps records small


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
class CallRecord:
    """One model call of a turn as the server received it, apart from its messages (which are rebuilt):
    ``wire_model`` (the body's ``model``), ``settings`` (every other key of the body: sampling settings,
    ``response_format``...), ``tool_choice``, the tool definitions offered (``tools``, stored once by
    hash: ``tools_key``), and the hash of the whole body. ``usage`` and ``finish_reason``: what the
    server reported about its reply. ``sent``: the body's conversation as sent (``messages``; for a
    Responses call ``instructions`` and ``input``), kept only when no processor of ours built it (a
    framework's turn); ``partial``: taken from the framework's trace, which holds the messages and
    model but not the tools or settings sent (those are then unknown, not empty)."""

    body_hash: str
    wire_model: str | None
    settings: dict[str, Any] = field(default_factory=dict)
    tool_choice: Any = None
    tools_key: str | None = None
    tools: tuple[dict[str, Any], ...] = ()
    usage: dict[str, int] | None = None
    finish_reason: str | None = None
    sent: dict[str, Any] | None = None
    partial: bool = False
    #: ``bytes_hash`` of the exact bytes the server received (the body with its ``stream`` keys, as the
    #: turn's wire form serialises it: ``TurnRecord.wire``); None: not known (a custom model, an older record).
    wire_hash: str | None = None

    def sent_body(self) -> dict[str, Any]:
        """The request body the server received, from what the call kept (``sent``); a partial call's
        holds what its trace knew (model and messages)."""
        body: dict[str, Any] = {"model": self.wire_model, **dict(self.sent or {})}
        if self.tools:
            body["tools"] = [dict(t) for t in self.tools]
        if self.tool_choice is not None:
            body["tool_choice"] = self.tool_choice
        body.update(self.settings)
        return body

    def body(self, messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The request body with these messages: what the server received when they are the call's."""
        body: dict[str, Any] = {"model": self.wire_model, "messages": [dict(m) for m in messages]}
        if self.tools:
            body["tools"] = [dict(t) for t in self.tools]
            if self.tool_choice is not None:
                body["tool_choice"] = self.tool_choice
        body.update(self.settings)
        return body


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
    messages_hash: str  # of the first call's messages; "" when the record has calls (their body hashes say more)
    input_ids: tuple[str, ...] = ()  # every input message of the turn (the last one is input_message_id)
    instructions: tuple[str, ...] = ()  # the agent's instruction texts (untagged system messages)
    context: tuple[dict[str, Any], ...] = ()  # call-time context messages (never stored elsewhere)
    wm_text: str | None = None  # working memory shown, when no version row held it
    om_chunks: int | None = None  # how many chunks of the generation's log existed
    om_hints: dict[str, str] = field(default_factory=dict)  # currentTask / suggestedResponse then
    om_others: tuple[str, ...] = ()  # resource scope: other threads' unobserved messages shown
    unresolved: tuple[str, ...] = ()  # texts named by hash that could not be found (an import, a manual delete)
    endpoint: str | None = None  # the base URL the model was reached at (no credentials, no query)
    calls: tuple[CallRecord, ...] = ()  # every model call, in order (empty in version-1 records)
    context_window: int | None = None  # the model's window the prompts were fitted into, when it had one
    # Parts of the turn's reply that the stored message does not hold (working-memory tool calls,
    # ``<working_memory>`` tags): ("+", index, part) inserted, ("~", index, part) in place of the stored one.
    hidden_parts: tuple[tuple[str, int, dict[str, Any]], ...] = ()
    # History messages the turn's processors read that the context window then dropped (the oldest,
    # in prompt order; ``history_ids`` holds those sent). A rebuild hands them to the processors again,
    # so recall leaves them out as the live turn did and the same fit drops them again.
    window_dropped: tuple[str, ...] = ()
    # The keys sent beside every call's request body, outside its hash: ``stream`` and ``stream_options``
    # as the model sent them ({}: the replies came whole). None: not recorded (records before this).
    transport: dict[str, Any] | None = None
    # How observational memory was shown in the prompt: 1, this engine's first rules (its own relative
    # dates; fitted into a context window message by message); 2, Mastra's dates (``core.observational.
    # context``) and fitted as framed units (``core.context_window``). A rebuild shows it the same way.
    # Records without the key were written before rules 2.
    om_dates: int = OM_DATES
    # The turn's clock when its prompt had been built (its memory read: ``began_at``) and when it stored
    # its messages (the save that wrote this record: ``stored_at``). A turn stores its input with its
    # reply, at its end, so a turn of the thread that began before then did not see them; their stamps
    # do not say when (a reply is stamped when its model call starts). None: not recorded (older records).
    began_at: datetime | None = None
    stored_at: datetime | None = None
    version: int = RECORD_VERSION
    # The agent framework that built the turn's prompts ("openai-agents"): our processors did not, so
    # each call keeps what it sent (``CallRecord.sent``) and Replay shows that. None: our own turn.
    framework: str | None = None
    # How the model put every call's body on the wire (``core.llm.wire.WIRE_FORMS``: our
    # ``OpenAICompatibleModel``, or the Agents SDK's OpenAI client when its bytes were checked): with each
    # call's ``wire_hash``, Replay gives the exact bytes the server received (a call without one: its
    # client's bytes as sent were not this form's). "": not knowable (a custom or scripted model); None:
    # a record from before records said (both: only the body as JSON).
    wire: str | None = None
    # The facts hashes the stored record was written with (``fh``: one per ``FACTS``, set by ``decode``),
    # checked by ``facts_changed``. None: a record written before records covered those facts, or one not
    # read back from the database (a live turn's). Not part of a record's equality: it says how it was stored.
    facts: tuple[str, ...] | None = field(default=None, compare=False)
    # Read back from the database (``decode``): written again (a fork's copy), it keeps the facts hashes it
    # was read with, none when it had none, so a copy never claims more than its original (``encode``).
    read_back: bool = field(default=False, compare=False)
    # The embedding model that scored the turn's recall hits (the recall index's ``model_id``), so Replay can
    # say whose scores they are after ``memory-studio reindex --model``. None: not recorded (a record from
    # before, or a turn without hits).
    recall_model: str | None = None

    def budget(self) -> "PromptBudget | None":
        """The context window this turn's prompts were fitted into, with its first call's ``max_tokens``
        kept for the reply (None: the model had no window, or the recorded one cannot hold a prompt)."""
        from core.context_window import ContextWindowError, PromptBudget

        if not self.context_window:
            return None
        cap = self.calls[0].settings.get("max_tokens") if self.calls else None
        try:
            return PromptBudget.for_model(self.context_window, model_id=self.model or "the model",
                                          max_tokens=cap if isinstance(cap, int) else None)
        except ContextWindowError:
            return None

    def memory_options(self, overrides: Mapping[str, Any] | None = None) -> MemoryOptions:
        """The options in force at this turn, with ``overrides`` deep-merged over them (a what-if)."""
        return options_with(self.options, overrides)

    def sent_messages(self, messages: Sequence[Mapping[str, Any]]) -> bool:
        """Whether these are exactly the messages of the turn's first model call (by hash)."""
        return bool(self.messages_hash) and messages_hash(messages).startswith(self.messages_hash)

    def facts_changed(self) -> tuple[str, ...] | None:
        """Which of ``FACTS`` no longer hash as when the record was written (a hand-edited or damaged
        record file); None when the record keeps no facts hashes (``facts``: written before them)."""
        if self.facts is None:
            return None
        kept = (*self.facts, *(None,) * (len(FACTS) - len(self.facts)))  # one cut off: changed too
        return tuple(name for name, was, now in zip(FACTS, kept, facts_hashes(self)) if was != now)


#: What a record keeps outside its calls' body hashes, covered since records keep ``fh`` (one hash of
#: each, ``facts_hashes``): the base URL the model was reached at, the model's label (``provider/model``),
#: and what the server reported about each reply (usage, finish reason). Records without ``fh`` came
#: before (versions 1 to 3 alike): they still read, and Replay says these are shown unchecked.
FACTS = ("endpoint", "model label", "usage", "finish reason")
FACT_HEX = 8  # each fact's hash: 32 bits tell a hand edit or a damaged byte from what was written


def facts_hashes(record: "TurnRecord") -> tuple[str, ...]:
    """The hash of each of ``FACTS`` as ``record`` holds it (an empty endpoint or label is none, as stored;
    usage and finish reason: every call's, in order; usage as stored, prompt and completion tokens)."""
    values = (record.endpoint or None, record.model or None, [_usage_pair(c.usage) for c in record.calls],
              [c.finish_reason for c in record.calls])
    return tuple(hashlib.sha256(json.dumps(v, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
                 .hexdigest()[:FACT_HEX] for v in values)


def _usage_pair(usage: Mapping[str, int] | None) -> list[int] | None:
    """A call's usage as a record stores it: ``[prompt tokens, completion tokens]``, or None (not reported)."""
    return [int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))] if usage else None


def facts_check(record: "TurnRecord") -> tuple[str | None, str | None]:
    """What Replay says of a record's ``FACTS``: (a difference, when some no longer match the hashes the
    record was written with; a note, when it has no such hashes and shows them unchecked)."""
    changed = record.facts_changed()
    if changed is None:
        return None, (f"This record's {_names(FACTS)} are not covered by its hashes (it was written before "
                      "records covered them): they are shown as stored, unchecked.")
    if not changed:
        return None, None
    return (f"the record's {_names(changed)} no longer {'matches' if len(changed) == 1 else 'match'} what it was "
            "written with (the record was edited or damaged since): what it shows of "
            f"{'it' if len(changed) == 1 else 'them'} is not what the turn had"), None


def _names(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def canonical_json(messages: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps(list(messages), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def messages_hash(messages: Sequence[Mapping[str, Any]]) -> str:
    """sha256 of the canonical JSON (sorted keys, no spaces, UTF-8) of chat messages."""
    return hashlib.sha256(canonical_json(messages).encode("utf-8")).hexdigest()


def request_hash(body: Mapping[str, Any]) -> str:
    """sha256 (``HASH_HEX`` hex digits) of a request body's canonical JSON, ``stream`` /
    ``stream_options`` left out."""
    wanted = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    return hashlib.sha256(json.dumps(wanted, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                                     default=str).encode("utf-8")).hexdigest()[:HASH_HEX]


def bytes_hash(data: bytes) -> str:
    """sha256 (``HASH_HEX`` hex digits) of the exact bytes of a request body as sent."""
    return hashlib.sha256(data).hexdigest()[:HASH_HEX]


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


def stored_options(options: Mapping[str, Any], options_json: str | None = None) -> Any:
    """``options_delta``, memoised: a memory's options rarely change between its turns.
    ``options_json``: ``_canonical(options)`` when the caller has it already (``options_json_of``)."""
    return json.loads(_delta_of(options_json if options_json is not None else _canonical(options)))


_OPTIONS_JSON: dict[int, tuple[Any, str]] = {}  # id(MemoryOptions) -> (a weak reference to it, its JSON)
_OPTIONS_JSON_ENTRIES = 64


def options_json_of(options: MemoryOptions, as_dict: Mapping[str, Any]) -> str:
    """``_canonical(as_dict)`` where ``as_dict`` is ``options.to_dict()``, remembered per options object:
    options are frozen (``to_dict`` caches its JSON for the same reason), and writing a turn's record
    dumped its options again on every turn (~20 µs of the record's ~40)."""
    entry = _OPTIONS_JSON.get(id(options))
    if entry is not None and entry[0]() is options:
        return entry[1]
    text = _canonical(as_dict)
    if len(_OPTIONS_JSON) >= _OPTIONS_JSON_ENTRIES:
        _OPTIONS_JSON.pop(next(iter(_OPTIONS_JSON)), None)
    _OPTIONS_JSON[id(options)] = (weakref.ref(options), text)
    return text


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


@functools.lru_cache(maxsize=64)
def _expanded(delta_json: str) -> str:
    return json.dumps(options_merge(_defaults(), json.loads(delta_json)))


def expand_options(delta: Mapping[str, Any]) -> dict[str, Any]:
    """A record's options delta over the defaults, memoised: a thread's records share a few deltas, and
    merging is far dearer than parsing (each record still gets a dict of its own)."""
    value: dict[str, Any] = json.loads(_expanded(_canonical(delta)))
    return value


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


def _call_entry(call: CallRecord, first: CallRecord | None, text_keys: Mapping[str, str]) -> list[Any]:
    """``[body hash, [prompt, completion tokens] | null, finish reason?, {what differs from call 1}?]``;
    a call that kept what it sent names that text (``sm``) there, and a partial one says so (``p``)."""
    usage = _usage_pair(call.usage)
    delta: dict[str, Any] = {}
    if first is not None:
        if call.wire_model != first.wire_model:
            delta["w"] = call.wire_model
        if call.settings != first.settings:
            delta["s"] = call.settings
        if call.tool_choice != first.tool_choice:
            delta["tc"] = call.tool_choice
        if call.tools_key != first.tools_key:
            delta["ts"] = call.tools_key
    if call.sent is not None:
        delta["sm"] = {k: [text_keys[t] for t in texts] if isinstance(texts, list) else text_keys[texts]
                       for k, texts in sent_texts(call.sent).items()}
    if call.partial:
        delta["p"] = 1
    if call.wire_hash:
        delta["wb"] = call.wire_hash
    entry: list[Any] = [call.body_hash, usage]
    if call.finish_reason != "stop" or delta:
        entry.append(call.finish_reason)  # "stop", the usual end, is left out
    if delta:
        entry.append(delta)
    return entry


def encode(record: TurnRecord, text_keys: Mapping[str, str], options_json: str | None = None) -> str:
    """The compact JSON stored in the ``record`` column; ``text_keys`` maps each long text to its key.
    ``options_json``: the canonical JSON of ``record.options`` when the caller has it (a live turn)."""
    history_at = {mid: i for i, mid in enumerate(record.history_ids)}
    data: dict[str, Any] = {"v": VERBATIM_VERSION if record.framework else RECORD_VERSION,
                            "r": [pack_id(i) for i in record.response_ids],
                            "o": stored_options(record.options, options_json)}
    if record.model:
        data["m"] = record.model
    if record.endpoint:
        data["e"] = record.endpoint
    if len(record.input_ids) > 1:
        data["in"] = [pack_id(i) for i in record.input_ids]
    data["h"] = [pack_id(i) for i in record.history_ids]
    if record.window_dropped:
        data["hd"] = [pack_id(i) for i in record.window_dropped]
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
        if record.recall_model:
            data["rm"] = record.recall_model
    # The working-memory version id lives in its own column only (an import may renumber versions).
    if record.wm_text is not None:
        data["wt"] = text_keys[record.wm_text]
    if record.om_generation is not None:
        data["om"] = [pack_id(record.om_generation), record.om_cursor, record.om_chunks,
                      {k: text_keys[v] for k, v in record.om_hints.items()}]
        if record.om_others:
            data["om"].append([pack_id(i) for i in record.om_others])
    if record.tools and not record.calls:
        data["t"] = list(record.tools)  # version 1 kept only names; the calls' tool sets hold them now
    # The total is the sections plus the reply primer (``AssembledPrompt.total_tokens``): not stored twice.
    data["tk"] = [int(record.tokens.get(k, 0)) for k in TOKEN_SECTIONS[:-1]]
    if record.instructions:
        data["i"] = [text_keys[t] for t in record.instructions]
    if record.context:
        data["c"] = list(record.context)
    if not record.calls:  # a record with calls has each call's whole body hash instead
        data["x"] = record.messages_hash[:HASH_HEX]
    if record.calls:
        first = record.calls[0]
        if first.wire_model != _short_model(record.model):
            data["w"] = first.wire_model
        settings = dict(first.settings)
        fmt = settings.pop("response_format", None)
        if settings:
            data["s"] = settings
        if fmt is not None:  # a JSON schema can be long: kept once per thread like the instructions
            data["rf"] = text_keys[_format_text(fmt)]
        if first.tool_choice is not None:
            data["tc"] = first.tool_choice
        if first.tools_key:
            data["ts"] = first.tools_key
        data["k"] = [_call_entry(c, None if i == 0 else first, text_keys) for i, c in enumerate(record.calls)]
    if record.context_window is not None:
        data["cw"] = record.context_window
    if record.hidden_parts:
        data["hp"] = [list(p) for p in record.hidden_parts]
    if record.transport is not None:
        data["st"] = record.transport
    if record.began_at is not None:
        data["ba"] = to_iso(record.began_at)
    if record.stored_at is not None:
        data["sa"] = to_iso(record.stored_at)
    if record.framework:
        data["b"] = record.framework
    if record.wire is not None:
        data["wf"] = record.wire  # "": the bytes are not knowable (a key absent: a record from before)
    data["od"] = record.om_dates  # every record: a record without it was written before these rules
    # A record without it was written before records covered ``FACTS``. One read back (a fork's copy) keeps the
    # hashes it was read with: made again from its values, an edited fact would be "recorded (exact)" in the copy.
    if record.facts is not None:
        data["fh"] = list(record.facts)
    elif not record.read_back:
        data["fh"] = list(facts_hashes(record))
    return json_text(data, separators=(",", ":"), ensure_ascii=False)


def _short_model(model: str | None) -> str | None:
    """``provider/name`` → ``name``: what a request body names unless the record says otherwise."""
    return model.split("/", 1)[1] if model and "/" in model else model


def _format_text(fmt: Any) -> str:
    return json_text(fmt, ensure_ascii=False, separators=(",", ":"))


def sent_texts(sent: Mapping[str, Any]) -> dict[str, str | list[str]]:
    """How a call's ``sent`` is stored: each field as compact JSON (keys in the order they were sent), a
    list field (the messages, the input items) element by element, so a thread's calls, which resend
    its conversation, store each message once (texts are kept once per thread by hash)."""
    return {k: [_compact(v) for v in value] if isinstance(value, list) else _compact(value)
            for k, value in sent.items()}


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def long_texts(record: TurnRecord) -> list[str]:
    """The texts a record names by key rather than holding."""
    out = list(record.instructions)
    if record.wm_text is not None:
        out.append(record.wm_text)
    out.extend(record.om_hints.values())
    if record.calls and record.calls[0].settings.get("response_format") is not None:
        out.append(_format_text(record.calls[0].settings["response_format"]))
    for call in record.calls:
        for texts in sent_texts(call.sent or {}).values():
            out.extend(texts if isinstance(texts, list) else [texts])
    return out


class DamagedRecordError(MemoryStudioError, ValueError):
    """A stored turn record that cannot be read; the message says why (not JSON, an unknown version,
    a field of the wrong type). The turn is then reconstructed, and says so."""


def _need(ok: bool, what: str) -> None:
    if not ok:
        raise DamagedRecordError(f"wrong types: {what}")


def _strs(value: Any, what: str) -> list[str]:
    _need(isinstance(value, list) and all(isinstance(x, str) for x in value), f"{what} must be a list of strings")
    return list(value)


def _number(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def _check(data: Any) -> dict[str, Any]:
    """The decoded JSON of a record, its version and the type of every field checked."""
    if not isinstance(data, dict):
        raise DamagedRecordError(f"not a turn record (a JSON {type(data).__name__}, not an object)")
    version = data.get("v")
    if version not in READABLE_VERSIONS:
        raise DamagedRecordError(f"unknown record version {version!r} (this Memory Studio reads "
                                 f"{', '.join(map(str, READABLE_VERSIONS))}; a newer one may have written it)")
    _need((isinstance(data.get("x"), str) and bool(data["x"])) or (data["v"] >= 2 and bool(data.get("k"))),
          "'x' (the messages hash) must be a string")
    for key in ("r", "h", "in", "hd"):
        if key in data:
            _strs(data[key], f"'{key}'")
    _need(isinstance(data.get("o", {}), dict), "'o' (the options) must be an object")
    for key in ("m", "e", "w", "wt", "rf", "ts", "b", "wf", "rm"):
        _need(data.get(key) is None or isinstance(data[key], str), f"'{key}' must be a string")
    _need(isinstance(data.get("rc", []), list), "'rc' (recall hits) must be a list")
    for item in data.get("rc", []):
        _need(isinstance(item, list) and len(item) == 7 and isinstance(item[0], str) and isinstance(item[1], str)
              and all(_number(x) for x in item[2:5]) and item[4] is not None and isinstance(item[5], list)
              and all(isinstance(w, (str, int)) and not isinstance(w, bool) for w in item[5])
              and isinstance(item[6], int), "'rc' entries must be [id, thread, vector, keyword, fused, window, at]")
    om = data.get("om")
    # (resource scope adds a fifth: the other conversations' messages the turn was shown)
    _need(om is None or (isinstance(om, list) and len(om) in (4, 5) and isinstance(om[0], str)
                         and (om[1] is None or isinstance(om[1], str)) and (om[2] is None or isinstance(om[2], int))
                         and isinstance(om[3], dict) and all(isinstance(v, str) for v in om[3].values())
                         and (len(om) == 4 or (isinstance(om[4], list) and all(isinstance(x, str) for x in om[4])))),
          "'om' must be [generation, cursor, chunks, {hint: text key}] or those and [other conversations' ids]")
    tk = data.get("tk", [])
    _need(isinstance(tk, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in tk),
          "'tk' (tokens) must be a list of integers")
    for key in ("i", "t"):
        if key in data:
            _strs(data[key], f"'{key}'")
    _need(isinstance(data.get("c", []), list) and all(isinstance(c, dict) for c in data.get("c", [])),
          "'c' (context) must be a list of objects")
    _need(isinstance(data.get("s", {}), dict), "'s' (settings) must be an object")
    calls = data.get("k", [])
    _need(isinstance(calls, list), "'k' (model calls) must be a list")
    for entry in calls:
        _need(isinstance(entry, list) and 2 <= len(entry) <= 4 and isinstance(entry[0], str)
              and (entry[1] is None or (isinstance(entry[1], list) and len(entry[1]) == 2
                                        and all(isinstance(x, int) for x in entry[1])))
              and (len(entry) < 3 or entry[2] is None or isinstance(entry[2], str))
              and (len(entry) < 4 or isinstance(entry[3], dict)),
              "'k' entries must be [body hash, [prompt, completion] | null, finish reason?, {changes}?]")
        delta = entry[3] if len(entry) > 3 else {}
        sent = delta.get("sm", {})
        _need(delta.get("wb") is None or isinstance(delta["wb"], str), "a call's 'wb' (bytes hash) must be a string")
        _need(isinstance(sent, dict) and all(isinstance(v, str) or (isinstance(v, list) and all(
            isinstance(x, str) for x in v)) for v in sent.values()),
              "a call's 'sm' (what it sent) must map each field to a text key or a list of them")
    _need(data.get("cw") is None or (isinstance(data["cw"], int) and not isinstance(data["cw"], bool)),
          "'cw' (context window) must be an integer")
    _need(data.get("st") is None or isinstance(data["st"], dict), "'st' (stream options) must be an object")
    _need(data.get("fh") is None or (isinstance(data["fh"], list) and all(isinstance(h, str) for h in data["fh"])),
          "'fh' (the facts hashes) must be a list of strings")
    _need(data.get("od") in (None, *OM_DATE_STYLES), f"'od' (observation dates) must be one of {OM_DATE_STYLES}")
    _need(isinstance(data.get("hp", []), list), "'hp' (hidden reply parts) must be a list")
    for part in data.get("hp", []):
        _need(isinstance(part, list) and len(part) == 3 and part[0] in ("+", "~") and isinstance(part[1], int)
              and isinstance(part[2], dict), "'hp' entries must be [\"+\" | \"~\", index, part]")
    return data


def parse(text: Any) -> Any:
    """A stored ``record`` column as JSON (``DamagedRecordError`` when it is not)."""
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        raise DamagedRecordError(f"not JSON ({exc})") from None


def decode(
    row: Mapping[str, Any], texts: Mapping[str, str], parse_time: Any,
    tool_sets: Mapping[str, Sequence[Mapping[str, Any]]] | None = None, parsed: Any = None,
) -> TurnRecord:
    """A stored row back into a ``TurnRecord``; ``texts`` resolves keys and ``tool_sets`` the calls'
    tool definitions (missing ones are listed in ``unresolved``); ``parsed``: the ``record`` column
    already parsed. A record that cannot be read raises ``DamagedRecordError`` saying why."""
    data = _check(parse(row["record"]) if parsed is None else parsed)
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
        _need(all(not isinstance(w, int) or 0 <= w < len(history) for w in window),
              "a recall window names a history place the record does not have")
        ids = [history[w] if isinstance(w, int) else unpack_id(str(w)) for w in window]
        if isinstance(at, int) and at >= 0:
            ids.insert(at, mid)
        recall.append(RecallHitRecord(mid, str(tid) or str(row["thread_id"]), vec, kw, float(fused), rank,
                                      tuple(ids)))
    om = data.get("om")
    tokens = dict(zip(TOKEN_SECTIONS, (int(x) for x in data.get("tk", ()))))
    if tokens and "total" not in tokens:
        tokens["total"] = sum(tokens.values()) + REPLY_PRIMER
    inputs = tuple(unpack_id(str(x)) for x in data.get("in", ())) or (str(row["input_message_id"]),)
    model, endpoint = data.get("m"), data.get("e")
    if data["v"] == 1 and model and "@" in model and endpoint is None:
        model, endpoint = model.split("@", 1)  # version 1 kept "provider/model@base URL" in one string
    calls = _calls(data, model, text, tool_sets or {}, missing)
    record = TurnRecord(
        input_message_id=str(row["input_message_id"]),
        thread_id=str(row["thread_id"]),
        resource_id=row.get("resource_id"),
        response_ids=tuple(unpack_id(str(x)) for x in data.get("r", ())),
        created_at=parse_time(row["createdAt"]),
        options=expand_options(data.get("o") or {}),
        model=model,
        history_ids=history,
        recall=tuple(recall),
        wm_version_id=int(row["wm_version_id"]) if row.get("wm_version_id") is not None else None,
        om_generation=unpack_id(str(om[0])) if om else None,
        om_cursor=om[1] if om else None,
        tools=tuple(str(x) for x in data.get("t", ())) or tuple(
            str((t.get("function") or {}).get("name", "?")) for t in (calls[0].tools if calls else ())),
        tokens=tokens,
        messages_hash=str(data.get("x", "")),
        input_ids=inputs,
        instructions=tuple(text(k) for k in data.get("i", ())),
        context=tuple(data.get("c", ())),
        wm_text=text(data["wt"]) if "wt" in data else None,
        om_chunks=om[2] if om else None,
        om_hints={k: text(v) for k, v in (om[3] if om else {}).items()},
        om_others=tuple(unpack_id(str(x)) for x in om[4]) if om and len(om) > 4 else (),
        endpoint=endpoint,
        calls=calls,
        context_window=data.get("cw"),
        hidden_parts=tuple((str(op), int(i), dict(p)) for op, i, p in data.get("hp", ())),
        window_dropped=tuple(unpack_id(str(x)) for x in data.get("hd", ())),
        transport=dict(data["st"]) if isinstance(data.get("st"), dict) else None,
        began_at=parse_time(data["ba"]) if isinstance(data.get("ba"), str) else None,
        stored_at=parse_time(data["sa"]) if isinstance(data.get("sa"), str) else None,
        om_dates=int(data.get("od", OM_DATE_STYLES[0])),
        version=int(data["v"]),
        framework=data.get("b"),
        wire=data.get("wf"),
        recall_model=data.get("rm") if recall else None,
        facts=tuple(data["fh"]) if "fh" in data else None,
        read_back=True,
    )
    if missing:
        record = _with_unresolved(record, tuple(missing))
    return record


def _calls(data: Mapping[str, Any], model: str | None, text: Any,
           tool_sets: Mapping[str, Sequence[Mapping[str, Any]]], missing: list[str]) -> tuple[CallRecord, ...]:
    entries = data.get("k") or []
    if not entries:
        return ()
    settings = dict(data.get("s") or {})
    if "rf" in data:
        fmt_text = text(data["rf"])
        try:
            settings["response_format"] = json.loads(fmt_text) if fmt_text else None
        except ValueError:
            raise DamagedRecordError("the response format it names is not JSON") from None
    first = CallRecord("", data.get("w", _short_model(model)), settings, data.get("tc"), data.get("ts"))

    def tools(key: str | None) -> tuple[dict[str, Any], ...]:
        if not key:
            return ()
        found = tool_sets.get(key)
        if found is None:
            missing.append(f"tools:{key}")
            return ()
        return tuple(dict(t) for t in found)

    out: list[CallRecord] = []
    for entry in entries:
        delta = entry[3] if len(entry) > 3 else {}
        _need(isinstance(delta.get("s", {}), dict), "a call's settings must be an object")
        key = delta.get("ts", first.tools_key)
        usage = {"prompt_tokens": entry[1][0], "completion_tokens": entry[1][1],
                 "total_tokens": entry[1][0] + entry[1][1]} if entry[1] else None
        finish = entry[2] if len(entry) > 2 else "stop"
        out.append(CallRecord(str(entry[0]), delta.get("w", first.wire_model), dict(delta.get("s", first.settings)),
                              delta.get("tc", first.tool_choice), key, tools(key), usage, finish,
                              _sent(delta["sm"], text) if "sm" in delta else None, bool(delta.get("p")),
                              delta.get("wb")))
    return tuple(out)


def _sent(keys: Mapping[str, Any], text: Any) -> dict[str, Any] | None:
    """A call's ``sent`` from its stored texts (None when one is gone: ``unresolved`` names it)."""
    gone = False

    def load(key: str) -> Any:
        nonlocal gone
        found = text(key)
        if not found:
            gone = True
            return None
        try:
            return json.loads(found)
        except ValueError:
            raise DamagedRecordError("what a model call sent (a text it names) is not JSON") from None

    out = {k: [load(x) for x in v] if isinstance(v, list) else load(v) for k, v in keys.items()}
    return None if gone else out


def _with_unresolved(record: TurnRecord, missing: tuple[str, ...]) -> TurnRecord:
    from dataclasses import replace

    return replace(record, unresolved=missing)


Kind = Literal["recorded", "reconstructed"]
RecordState = Literal["present", "missing", "damaged", "no-table"]


@dataclass(frozen=True)
class CallReplay:
    """One model call of a rebuilt turn: its prompt, the request body the server received (rebuilt:
    ``request``), whether that body hashes as the record's (``matches``; None when nothing was
    recorded to compare), what differs, and what the server reported about the reply."""

    index: int
    prompt: Any  # AssembledPrompt (the call's messages and fragments)
    request: dict[str, Any]
    matches: bool | None
    usage: dict[str, int] | None = None
    finish_reason: str | None = None
    differences: tuple[str, ...] = ()
    record: CallRecord | None = None

    @property
    def estimated_tokens(self) -> int:
        """Our o200k_base count of the call's prompt (messages and tool definitions)."""
        return int(self.prompt.total_tokens)


@dataclass(frozen=True)
class ReplayInfo:
    """How a rebuilt prompt came about.

    ``matches``: every model call's rebuilt request body hashes as the record's (for a version-1
    record, which kept no bodies: its messages do), and the record's ``FACTS`` hash as when it was
    written (``with_facts_checked``; a record written before they were covered: not checked, said in
    ``unchecked``); None without a record. ``unknowns``: what could
    not be known. ``calls``: every model call of the turn, in order (``CallReplay``). ``record_state``:
    ``present``, ``missing`` (never written, or a database without records), ``damaged``
    (``record_error`` says why: not JSON, an unknown version, wrong types, another thread) or
    ``no-table``. ``differences``: what differs from the record, by call.
    """

    kind: Kind
    matches: bool | None
    record: TurnRecord | None
    unknowns: tuple[str, ...] = ()
    what_if: bool = False
    calls: tuple[CallReplay, ...] = ()
    record_state: RecordState = "present"
    record_error: str | None = None
    differences: tuple[str, ...] = ()
    # Stored messages the rebuild took from their version history (``core.replay.edited``): message id
    # -> "edited since" / "deleted since". The rebuilt prompt shows what the model saw then.
    changed_since: Mapping[str, str] = field(default_factory=dict)
    # What the record shows that no hash of it covers (a record written before its ``FACTS`` were
    # covered: ``facts_check``): said beside it, unchecked; it changes nothing of how the record is labelled.
    unchecked: tuple[str, ...] = ()

    @property
    def exact(self) -> bool:
        """"Recorded (exact)": rebuilt from a full record, every call's whole body matching its hash, and
        nothing the record names left unknown."""
        return (self.kind == "recorded" and self.matches is True and not self.what_if and not self.unknowns
                and self.record is not None and bool(self.record.calls))

    @property
    def status(self) -> str:
        """How the Studio names it: ``recorded (exact)``, ``recorded, differs``, ``recorded (messages
        only)`` (a record from before calls were kept, or a framework's turn taken from its trace, which
        lacks the tools and settings sent), ``reconstructed``, ``reconstructed (damaged
        record)``, or ``what-if over the record`` / ``what-if over a reconstruction``."""
        if self.what_if:
            return "what-if over the record" if self.kind == "recorded" else "what-if over a reconstruction"
        if self.kind == "recorded":
            if self.record is not None and (not self.record.calls or any(c.partial for c in self.record.calls)):
                return "recorded (messages only)" if self.matches else "recorded, differs"
            return "recorded (exact)" if self.exact else "recorded, differs"
        return "reconstructed (damaged record)" if self.record_state == "damaged" else "reconstructed"


def with_facts_checked(info: ReplayInfo) -> ReplayInfo:
    """``info`` with its record's ``FACTS`` checked (``facts_check``): one that no longer matches what the
    record was written with is a difference (the turn is then no longer "recorded (exact)"), and a record
    without their hashes says they are unchecked."""
    if info.record is None:
        return info
    from dataclasses import replace

    changed, unchecked = facts_check(info.record)
    return replace(info, matches=False if changed and info.matches is not None else info.matches,
                   differences=(*info.differences, *((changed,) if changed else ())),
                   unchecked=(unchecked,) if unchecked else ())


__all__ = [
    "CallRecord",
    "CallReplay",
    "DamagedRecordError",
    "FACTS",
    "RecallHitRecord",
    "ReplayInfo",
    "TOKEN_SECTIONS",
    "VERBATIM_VERSION",
    "request_hash",
    "bytes_hash",
    "sent_texts",
    "TurnRecord",
    "canonical_json",
    "decode",
    "encode",
    "parse",
    "expand_options",
    "facts_check",
    "facts_hashes",
    "long_texts",
    "messages_hash",
    "options_delta",
    "text_key",
    "with_facts_checked",
]
