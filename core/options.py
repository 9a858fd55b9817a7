"""Memory configuration: defaults as in Mastra (spec §2.1), validated on construction.

Nested options accept dicts (``working_memory={"enabled": True, ...}``) as well as dataclasses, and a
per-call override dict is deep-merged over them (``MemoryOptions.merged``).

Each built-in processor has one options type here: ``InputFilterOptions`` (memory-input-filter),
``WorkingMemoryOptions`` (working-memory), ``MessageHistoryOptions`` (message-history),
``SemanticRecallOptions`` (semantic-recall) and ``ObservationalMemoryOptions``
(observational-memory). A processor built with its own options uses them instead of the turn's.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal, Mapping, TypeVar

from core.errors import OptionsError as OptionsError  # re-exported: its home was this module

DEFAULT_TEMPLATE = (
    "\n# User Information\n- **First Name**: \n- **Last Name**: \n- **Location**: \n- **Occupation**: \n"
    "- **Interests**: \n- **Goals**: \n- **Events**: \n- **Facts**: \n- **Projects**: \n"
)

Scope = Literal["resource", "thread"]


def _check_scope(name: str, value: Any) -> Scope:
    if value not in ("resource", "thread"):
        raise OptionsError(f"{name} must be 'resource' or 'thread', got {value!r}.")
    return value  # type: ignore[no-any-return]


@dataclass(frozen=True)
class InputFilterOptions:
    """Options of the memory-input-filter processor, which drops input messages already stored in
    the thread (a client that re-sends the whole conversation). It has no settings: it runs
    whenever history or observational memory is on, and never drops the newest input."""


@dataclass(frozen=True)
class MessageHistoryOptions:
    """Options of the message-history processor and of its token half, memory-token-limiter.

    ``last_messages``: how many of the thread's newest stored messages join the prompt
    (default 10; 0 or False loads none; None: no count cap, the token budget alone decides).
    ``MemoryOptions(last_messages=...)`` sets it per memory.
    ``max_tokens``: a token budget for the whole prompt except tool definitions: instructions,
    system messages, history, recall and the input (default None: no budget; 0 turns history off).
    Over it, the oldest memory messages are dropped, never the input, as Mastra's
    ``messageHistory.maxTokens`` does. ``at_max_remove_tokens``: once over the budget, trim until
    this many tokens are free below it (default None: a quarter of ``max_tokens``, at least 1).
    ``MemoryOptions(message_history={"max_tokens": ..., "at_max_remove_tokens": ...})`` sets both.
    """

    last_messages: int | Literal[False] | None = 10
    max_tokens: int | None = None
    at_max_remove_tokens: int | None = None

    def __post_init__(self) -> None:
        lm = self.last_messages
        if lm is True or (lm is not None and not isinstance(lm, int) and lm is not False) or (
            isinstance(lm, int) and not isinstance(lm, bool) and lm < 0
        ):
            raise OptionsError(
                f"last_messages must be a non-negative integer or False, got {lm!r}."
            )
        for name in ("max_tokens", "at_max_remove_tokens"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise OptionsError(f"message_history.{name} must be a non-negative integer, got {value!r}.")
        if self.at_max_remove_tokens is not None and self.max_tokens is None:
            raise OptionsError("message_history.at_max_remove_tokens needs max_tokens: give both, or neither.")
        if self.at_max_remove_tokens is not None and self.max_tokens is not None \
                and self.at_max_remove_tokens > self.max_tokens:
            raise OptionsError(
                f"message_history.at_max_remove_tokens ({self.at_max_remove_tokens}) must not exceed "
                f"max_tokens ({self.max_tokens})."
            )

    @property
    def limit(self) -> int | None:
        """How many messages to load (0: none; None: no count cap, only the token budget)."""
        if self.last_messages is None:
            return None if self.max_tokens is not None else 10
        return 0 if self.last_messages is False else int(self.last_messages)

    @property
    def enabled(self) -> bool:
        return self.limit != 0 and self.max_tokens != 0

    @property
    def remove_tokens(self) -> int:
        """Tokens trimmed below ``max_tokens`` once it is exceeded (Mastra: 25%, at least 1)."""
        if self.at_max_remove_tokens is not None:
            return self.at_max_remove_tokens
        return max(1, (self.max_tokens or 0) // 4)


@dataclass(frozen=True)
class WorkingMemoryOptions:
    """Options of the working-memory processor and tool.

    ``enabled`` (default False). ``scope``: "resource" (default, shared by the user's threads) or
    "thread". ``template``: Markdown template, replace semantics (default None: the built-in
    template). ``schema``: JSON Schema, merge semantics (default None); never both.
    ``version``: "default" or "vnext" (default "default"; Markdown only): the vNext update tool
    takes ``newMemory``, ``searchString`` and ``updateReason`` and edits the stored text in place
    instead of replacing it. ``agent_managed`` (default True): False shows the memory to the model
    but offers no update tool (code updates it). ``use_state_signals`` (default False; Mastra's
    experimental ``useStateSignals``): the memory reaches the model as a state message, sent again
    only when it changed, instead of inside the system prompt, and the tool is named
    ``setWorkingMemory``; its calls stay in the saved conversation as an audit record.
    """

    enabled: bool = False
    scope: Scope = "resource"
    template: str | None = None
    schema: Mapping[str, Any] | None = None
    version: Literal["default", "vnext"] = "default"
    agent_managed: bool = True
    use_state_signals: bool = False

    def __post_init__(self) -> None:
        _check_scope("working_memory.scope", self.scope)
        if self.template is not None and self.schema is not None:
            raise OptionsError("working_memory takes a template or a schema, not both. Remove one of them.")
        if self.template is not None and not isinstance(self.template, str):
            raise OptionsError("working_memory.template must be a Markdown string.")
        if self.schema is not None:
            from core.working_memory_schema import check_schema

            check_schema(self.schema)
        if self.version not in ("default", "vnext"):
            raise OptionsError("working_memory.version must be 'default' or 'vnext'.")
        if self.version == "vnext" and self.schema is not None:
            raise OptionsError("working_memory.version 'vnext' edits a Markdown template; a schema already merges "
                               "fields. Remove version, or use a template instead of the schema.")
        if not isinstance(self.use_state_signals, bool):
            raise OptionsError("working_memory.use_state_signals must be True or False.")
        if self.use_state_signals and self.version == "vnext":
            raise OptionsError("working_memory.use_state_signals does not work with version 'vnext' (as in "
                               "Mastra): choose one of them.")

    @property
    def mode(self) -> Literal["markdown", "json"]:
        return "json" if self.schema is not None else "markdown"

    @property
    def effective_template(self) -> str:
        return (self.template if self.template is not None else DEFAULT_TEMPLATE).strip()


@dataclass(frozen=True)
class MessageRange:
    """Neighbours recalled around each hit: ``before`` and ``after`` messages (default 1 each)."""

    before: int = 1
    after: int = 1


@dataclass(frozen=True)
class SemanticRecallOptions:
    """Options of the semantic-recall processor.

    ``enabled`` (default False). ``top_k``: hits per query (default 4). ``message_range``:
    neighbours of each hit (default 1 before, 1 after). ``scope``: "resource" (default: all the
    user's threads) or "thread". ``threshold``: minimum score (default None: no minimum).
    ``mode``: "vector", "keyword" or "hybrid" (default "hybrid").
    """

    enabled: bool = False
    top_k: int = 4
    message_range: MessageRange = field(default_factory=MessageRange)
    scope: Scope = "resource"
    threshold: float | None = None
    mode: Literal["vector", "keyword", "hybrid"] = "hybrid"

    def __post_init__(self) -> None:
        _check_scope("semantic_recall.scope", self.scope)
        if not isinstance(self.top_k, int) or isinstance(self.top_k, bool) or self.top_k < 1:
            raise OptionsError(f"semantic_recall.top_k must be a positive integer, got {self.top_k!r}.")
        if self.mode not in ("vector", "keyword", "hybrid"):
            raise OptionsError("semantic_recall.mode must be 'vector', 'keyword' or 'hybrid'.")
        if self.threshold is not None and not isinstance(self.threshold, (int, float)):
            raise OptionsError("semantic_recall.threshold must be a number.")


@dataclass(frozen=True)
class ObservationalMemoryOptions:
    """Options of the observational-memory processor.

    ``enabled`` (default False). ``scope``: "thread" (default) or "resource".
    ``message_tokens``: unobserved tokens that trigger an observation (default 30,000).
    ``observation_tokens``: log size that triggers a reflection (default 40,000).
    ``observer_model`` / ``reflector_model``: the models that observe and reflect: a chat model or a
    ``provider/model`` name such as ``"openai/gpt-4o-mini"`` (default None: the agent's own model,
    as in Mastra; ``Memory(observer_model=...)`` takes precedence). A bare name without a provider
    only labels the model for the Studio. ``previous_observer_tokens``: tail of the log shown
    to the observer (default 2,000; 0 none, None all). ``instruction``: extra text for the observer
    (default None). ``reflection_guidance``: extra text for the reflector (default None).
    ``max_output_tokens`` / ``timeout``: per observer or reflector call (default None: the model's
    own). ``observer_temperature`` (default 0.3) and ``reflector_temperature`` (default 0.0), as
    Mastra uses. ``max_compression_level``: the reflector retries with stronger guidance up to this
    level, 0-4 (default 4).

    Background buffering (Mastra's async buffering, its default):
    ``buffer_tokens``: each time this many unobserved tokens accumulate, the observer runs in the
    background and its output is *buffered* (not yet shown). A fraction of ``message_tokens`` (below
    1) or a token count; default 0.2; ``False`` observes synchronously in the turn, as before.
    ``buffer_activation`` (default 0.8): when ``message_tokens`` is reached, buffered observations
    are *activated* at once and the messages they cover leave the context, keeping about
    ``1 - buffer_activation`` of the threshold as recent raw messages; the turn does not wait.
    ``block_after`` (default None: 1.2 × ``message_tokens``): only above this does a turn wait for
    the observer. Below 100 it multiplies the threshold; from 100 on it is a token count.
    ``reflection_buffer_activation`` (default 0.5): a background reflection starts when the log
    reaches this fraction of ``observation_tokens`` and is swapped in at the threshold;
    ``reflection_block_after`` (default None: 1.2 × ``observation_tokens``): above it a turn reflects
    synchronously. Resource scope observes synchronously (buffering is off there, as in Mastra).
    A failed observer or reflector call is retried after a back-off (30 s, doubling up to 30 min),
    not on every turn.
    ``yield_to_turns`` (default "auto"): a background observer or reflector call gives way when a
    turn's own call goes to the same server (the same base URL): it is cancelled, which frees a
    one-slot server (llama.cpp ``n_parallel=1``, one Ollama model) for the turn, and made again once
    the turn's call has finished; nothing is lost. "auto" does so for a server on this machine or a
    private network (where one-slot servers run), not for a hosted API (a cancelled call's tokens
    are paid for); True or False for every server. While a turn past ``block_after`` (or
    ``reflection_block_after``) waits for the background work, the calls on that server stop giving
    way, so steady traffic cannot put the observation off for ever.

    ``max_tokens_per_batch`` (default 10,000, Mastra's ``observation.maxTokensPerBatch``): the most
    unobserved message tokens one observer call takes. A larger backlog (a turn that observes
    synchronously: no buffering, resource scope, past ``block_after``) is observed in several calls of
    whole messages, oldest first; each call's observations and cursor are stored before the next, so a
    failure keeps what was observed and the retry starts after it. A single message larger than the
    batch goes alone. The background observer's batches (about two ``buffer_tokens``) are capped the
    same way. When the observer model says its context window (``context_window``, the provider's
    ``<PROVIDER>_CONTEXT_WINDOW``, ``serve --context-window``), each batch is also fitted to it: the
    instructions, the tail of the observations so far (at most half of what they leave) and the messages
    must fit with the reply kept free (``max_output_tokens``, else ``core.context_window``'s reserve).
    """

    enabled: bool = False
    scope: Scope = "thread"
    message_tokens: int = 30_000
    observation_tokens: int = 40_000
    observer_model: str | None = None
    reflector_model: str | None = None
    previous_observer_tokens: int | None = 2000
    instruction: str | None = None
    reflection_guidance: str | None = None
    max_output_tokens: int | None = None
    timeout: float | None = None
    observer_temperature: float = 0.3
    reflector_temperature: float = 0.0
    max_compression_level: int = 4
    buffer_tokens: float | int | Literal[False] = 0.2
    buffer_activation: float = 0.8
    block_after: float | int | None = None
    reflection_buffer_activation: float = 0.5
    reflection_block_after: float | int | None = None
    yield_to_turns: bool | Literal["auto"] = "auto"
    max_tokens_per_batch: int = 10_000

    def __post_init__(self) -> None:
        _check_scope("observational_memory.scope", self.scope)
        _check_yield_to_turns(self.yield_to_turns, "observational_memory.yield_to_turns")
        for name in ("message_tokens", "observation_tokens", "max_tokens_per_batch"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise OptionsError(f"observational_memory.{name} must be a positive integer, got {value!r}.")
        for name in ("observer_model", "reflector_model"):
            _keep_model(self, name, f"observational_memory.{name}")
        bt = self.buffer_tokens
        if bt is not False and (isinstance(bt, bool) or not isinstance(bt, (int, float)) or not bt > 0
                                or not math.isfinite(bt)):
            raise OptionsError("observational_memory.buffer_tokens must be a fraction of message_tokens (0.2), a "
                               f"token count, or False to observe synchronously; got {bt!r}.")
        if bt is not False and bt >= 1 and bt >= self.message_tokens:
            raise OptionsError(f"observational_memory.buffer_tokens ({bt}) must be below message_tokens "
                               f"({self.message_tokens}): buffering runs ahead of the threshold.")
        for name in ("buffer_activation", "reflection_buffer_activation"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise OptionsError(f"observational_memory.{name} must be a number above 0 and at most 1, "
                                   f"got {value!r}.")
        for name, threshold in (("block_after", self.message_tokens),
                                ("reflection_block_after", self.observation_tokens)):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 1 \
                    or not math.isfinite(value):  # NaN and infinity passed, then int() of them raised in a turn
                raise OptionsError(f"observational_memory.{name} must be a multiplier of the threshold (1.2) or a "
                                   f"token count of at least 100, got {value!r}.")
            if value >= 100 and value < threshold:
                raise OptionsError(f"observational_memory.{name} ({value:,} tokens) must not be below its threshold "
                                   f"({threshold:,}).")
        from core.observational.reflector import COMPRESSION_GUIDANCE

        top = len(COMPRESSION_GUIDANCE) - 1
        level = self.max_compression_level
        if not isinstance(level, int) or isinstance(level, bool) or not 0 <= level <= top:
            raise OptionsError(f"observational_memory.max_compression_level must be 0-{top}, got {level!r}.")

    @property
    def buffering(self) -> bool:
        """Whether observations (and reflections) are buffered in the background."""
        return self.buffer_tokens is not False and self.scope == "thread"

    @property
    def buffer_interval(self) -> int | None:
        """Tokens of unobserved messages between two background observer runs (None: no buffering)."""
        if not self.buffering:
            return None
        bt = float(self.buffer_tokens)
        return max(1, int(bt * self.message_tokens) if bt < 1 else int(bt))

    @staticmethod
    def _limit(value: float | int | None, threshold: int) -> int:
        if value is None:
            value = 1.2
        return int(value) if value >= 100 else max(threshold, int(threshold * float(value)))

    @property
    def block_after_tokens(self) -> int:
        """Unobserved tokens above which a turn waits for the observer."""
        return self._limit(self.block_after, self.message_tokens)

    @property
    def reflection_block_after_tokens(self) -> int:
        """Log tokens above which a turn reflects synchronously."""
        return self._limit(self.reflection_block_after, self.observation_tokens)

    @property
    def reflection_buffer_at(self) -> int | None:
        """Log tokens at which a background reflection starts (None: no buffering)."""
        if not self.buffering:
            return None
        return max(1, int(self.observation_tokens * self.reflection_buffer_activation))

    @property
    def retained_tokens(self) -> int:
        """Raw message tokens an activation keeps in the context (``1 - buffer_activation`` of the threshold)."""
        return round(self.message_tokens * (1 - self.buffer_activation))


@dataclass(frozen=True)
class TitleOptions:
    """Generated thread titles (Mastra's ``generateTitle``).

    ``enabled`` (default False). ``model``: a chat model or a ``provider/model`` name (default
    None: the agent's own model). ``instructions``: how to write the title (default None: a short
    title of a few words in the conversation's language). After a thread's first exchange the title
    is written in the background, once, and only when the thread has none. ``yield_to_turns``
    (default "auto"), as observational memory's: the title call gives way when a turn's own call goes
    to the same server, and is made again once that call has finished.
    """

    enabled: bool = False
    model: Any = None  # the name; a model object given here is kept beside it (``model_object``)
    instructions: str | None = None
    yield_to_turns: bool | Literal["auto"] = "auto"

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise OptionsError("generate_title.enabled must be True or False.")
        _check_yield_to_turns(self.yield_to_turns, "generate_title.yield_to_turns")
        if self.instructions is not None and not isinstance(self.instructions, str):
            raise OptionsError("generate_title.instructions must be a string.")
        _keep_model(self, "model", "generate_title.model")

    @property
    def model_object(self) -> Any:
        return _model_object(self, "model")


def _check_yield_to_turns(value: Any, label: str) -> None:
    if value not in (True, False, "auto") or value in (0, 1) and not isinstance(value, bool):
        raise OptionsError(f"{label} must be True, False or 'auto', got {value!r}.")


def _keep_model(options: Any, name: str, label: str) -> None:
    """A model setting holds a name (``provider/model``, or a given model's id); a model object given
    in its place is kept beside the options (not a field: options are copied and compared as data)."""
    value = getattr(options, name)
    if value is None or isinstance(value, str):
        return
    if not callable(getattr(value, "generate", None)):
        raise OptionsError(f"{label} must be a chat model or a provider/model name such as 'openai/gpt-4o-mini', "
                           f"got {type(value).__name__}.")
    object.__setattr__(options, name, str(getattr(value, "model_id", None) or type(value).__name__))
    options.__dict__.setdefault("_models", {})[name] = value


def _model_object(options: Any, name: str) -> Any:
    return options.__dict__.get("_models", {}).get(name)


def carry_models(old: Any, new: Any) -> Any:
    """``new`` (options rebuilt from a dict) with the model objects of ``old`` wherever it still names
    the same model; returns ``new``."""
    for sub in ("observational_memory", "generate_title"):
        was, now = getattr(old, sub, None), getattr(new, sub, None)
        if was is None or now is None:
            continue
        for name, model in was.__dict__.get("_models", {}).items():
            if getattr(now, name, None) == getattr(was, name, None) and _model_object(now, name) is None:
                now.__dict__.setdefault("_models", {})[name] = model
    return new


@dataclass(frozen=True)
class MemoryOptions:
    """Everything a memory runs with; nested options accept dicts (see each options type).

    ``last_messages``: history length (default 10, or no count cap when ``message_history`` sets a
    token budget, as in Mastra; see ``MessageHistoryOptions``). ``message_history``: a token budget,
    ``{"max_tokens": N, "at_max_remove_tokens": M}`` (default None: none).
    ``semantic_recall`` (default off), ``working_memory`` (default off), ``observational_memory``
    (default off; replaces message history when on). ``read_only`` (default False): turns read
    memory but save nothing. ``context_window``: tokens, used to draw the context bar when no
    model says its own (default 128,000). ``generate_title`` (default False): name untitled threads
    after their first exchange, in the background (see ``TitleOptions``). ``retain_full_input``
    (default False): keep every message a caller passes as input; by default a client that re-sends
    the whole conversation has the echoed history trimmed (what follows its last assistant message
    is new), as Mastra's memory-input-filter does.
    """

    last_messages: int | Literal[False] | None = None
    semantic_recall: Any = False  # bool | dict | SemanticRecallOptions
    working_memory: Any = None  # dict | WorkingMemoryOptions
    observational_memory: Any = False  # bool | dict | ObservationalMemoryOptions
    read_only: bool = False
    context_window: int = 128_000  # tokens; only used to draw the context bar
    # Largest message accepted, in bytes of stored content (UTF-8 JSON); None for no limit.
    max_message_bytes: int | None = 1_000_000
    message_history: Any = None  # dict | MessageHistoryOptions (its token budget)
    # Largest working-memory value accepted, in bytes of stored text (UTF-8); None for no limit.
    max_working_memory_bytes: int | None = 256_000
    # Working-memory versions kept per scope (resource or thread), newest first; None keeps them all.
    max_working_memory_versions: int | None = 100
    generate_title: Any = False  # bool | dict | TitleOptions
    retain_full_input: bool = False

    def __post_init__(self) -> None:
        history = _history(self.message_history, self.last_messages)
        object.__setattr__(self, "last_messages", history.last_messages)
        object.__setattr__(self, "message_history", history)
        object.__setattr__(self, "semantic_recall", _semantic(self.semantic_recall))
        object.__setattr__(self, "working_memory", _working(self.working_memory))
        object.__setattr__(self, "observational_memory", _observational(self.observational_memory))
        object.__setattr__(self, "generate_title", _title(self.generate_title))
        if not isinstance(self.read_only, bool):
            raise OptionsError("read_only must be True or False.")
        if not isinstance(self.retain_full_input, bool):
            raise OptionsError("retain_full_input must be True or False.")
        for name, unit in (("max_message_bytes", "bytes"), ("max_working_memory_bytes", "bytes"),
                           ("max_working_memory_versions", "versions")):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise OptionsError(f"{name} must be a positive integer ({unit}) or None, got {value!r}.")

    @property
    def history_enabled(self) -> bool:
        return bool(self.message_history.enabled)

    def merged(self, overrides: Mapping[str, Any] | None) -> "MemoryOptions":
        """Deep-merge a per-call override dict. A per-call schema replaces the instance schema."""
        if not overrides:
            return self
        unknown = set(overrides) - {f.name for f in fields(self)}
        if unknown:
            raise OptionsError(f"Unknown memory option(s): {', '.join(sorted(unknown))}.{_nearest(unknown, self)}")
        base = self.to_dict()
        merged = options_merge(base, dict(overrides))
        wm_over = overrides.get("working_memory")
        if isinstance(wm_over, Mapping) and "schema" in wm_over:
            merged["working_memory"]["schema"] = wm_over["schema"]
            if wm_over["schema"] is not None:
                merged["working_memory"]["template"] = None
        if isinstance(wm_over, Mapping) and wm_over.get("template") is not None and "schema" not in wm_over:
            merged["working_memory"]["schema"] = None
        return self.rebuilt(merged)

    def rebuilt(self, data: Mapping[str, Any]) -> "MemoryOptions":
        """``MemoryOptions(**data)`` keeping this one's model objects where ``data`` names the same models."""
        return carry_models(self, MemoryOptions(**data))  # type: ignore[no-any-return]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy (cached: options are frozen, and this runs on every turn)."""
        cached = self.__dict__.get("_dict_cache")
        if cached is None:
            data = asdict(self)
            # ``last_messages`` lives at the top; the nested form is the token budget alone.
            history = self.message_history
            data["message_history"] = None if history.max_tokens is None else {
                "max_tokens": history.max_tokens, "at_max_remove_tokens": history.at_max_remove_tokens}
            cached = json.dumps(data, default=str)
            object.__setattr__(self, "_dict_cache", cached)
        return json.loads(cached)  # type: ignore[no-any-return]

    def with_(self, **changes: Any) -> "MemoryOptions":
        return carry_models(self, replace(self, **changes))  # type: ignore[no-any-return]

    @classmethod
    def from_mastra(cls, options: Mapping[str, Any]) -> "MemoryOptions":
        """Mastra's memory options object as written in TypeScript (camelCase, nested
        ``semanticRecall``, ``workingMemory``, ``observationalMemory``, ``generateTitle``,
        ``messageHistory``...). Unknown keys are refused with the nearest known name."""
        from core.mastra_options import from_mastra

        return MemoryOptions(**from_mastra(options))

    def to_mastra(self) -> dict[str, Any]:
        """These options as Mastra's memory options object (camelCase; what ``from_mastra`` reads)."""
        from core.mastra_options import to_mastra

        return to_mastra(self, MemoryOptions())


def options_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Option dicts ``base`` + ``over``: objects merge, any other value replaces (``None`` included).

    ``semantic_recall: True`` / ``observational_memory: False`` over a settings object switch it on or
    off and keep its other settings. Not the working-memory merge (``working_memory_merge``), where
    ``null`` deletes. Inputs are never mutated: plain data is copied, a chat model given as a setting
    is kept as it is (on either side).
    """
    out = {key: _copy_data(value) for key, value in base.items()}
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = options_merge(out[key], value)
        elif isinstance(value, bool) and key in ("semantic_recall", "observational_memory", "generate_title") \
                and isinstance(out.get(key), dict):
            out[key] = {**out[key], "enabled": value}
        else:
            out[key] = _copy_data(value)
    return out


def _copy_data(value: Any) -> Any:
    """A deep copy of plain data; other objects (a chat model given as a setting) are kept as they are."""
    if isinstance(value, Mapping):
        return {k: _copy_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_copy_data(v) for v in value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return value if callable(getattr(value, "generate", None)) else copy.deepcopy(value)


def _nearest(unknown: set[str], options: Any) -> str:
    import difflib

    names = [f.name for f in fields(options)]
    hints = []
    for key in sorted(unknown):
        near = difflib.get_close_matches(key, names, n=1) or difflib.get_close_matches(
            key.lower().replace("_", ""), [n.replace("_", "") for n in names], n=1)
        if near:
            target = next((n for n in names if n.replace("_", "") == near[0]), near[0])
            hints.append(f"{key!r} → did you mean {target!r}?")
    return (" " + " ".join(hints)) if hints else ""


_HISTORY_KEYS = {"max_tokens": "max_tokens", "maxTokens": "max_tokens",
                 "at_max_remove_tokens": "at_max_remove_tokens", "atMaxRemoveTokens": "at_max_remove_tokens"}


def _history(value: Any, last_messages: Any) -> MessageHistoryOptions:
    """The history options from ``last_messages`` and the ``message_history`` token budget.

    Unset ``last_messages`` means 10, or no count cap when a token budget is given (Mastra's rule).
    """
    if isinstance(value, MessageHistoryOptions):
        lm = value.last_messages if last_messages is None else last_messages
        return replace(value, last_messages=_default_last(lm, value.max_tokens))
    if value is None or value is False:
        return MessageHistoryOptions(last_messages=_default_last(last_messages, None))
    if not isinstance(value, Mapping):
        raise OptionsError('message_history must be a dict such as {"max_tokens": 4000, "at_max_remove_tokens": 1000}.')
    data: dict[str, Any] = {}
    for key, item in value.items():
        if key not in _HISTORY_KEYS:
            hint = " Set last_messages on the memory options instead." if key in ("last_messages", "lastMessages") else ""
            raise OptionsError(f"Unknown message_history option {key!r}: use max_tokens and at_max_remove_tokens.{hint}")
        data[_HISTORY_KEYS[key]] = item
    lm = _default_last(last_messages, data.get("max_tokens"))
    return MessageHistoryOptions(last_messages=lm, **data)


def _default_last(last_messages: Any, max_tokens: Any) -> Any:
    if last_messages is None:
        return None if max_tokens is not None else 10
    return last_messages


def _semantic(value: Any) -> SemanticRecallOptions:
    if isinstance(value, SemanticRecallOptions):
        return value
    if value is None or value is False:
        return SemanticRecallOptions(enabled=False)
    if value is True:
        return SemanticRecallOptions(enabled=True)
    if isinstance(value, Mapping):
        data = dict(value)
        data.setdefault("enabled", True)
        rng = data.get("message_range", 1)
        if isinstance(rng, MessageRange):
            pass
        elif isinstance(rng, int) and not isinstance(rng, bool) and rng >= 0:
            data["message_range"] = MessageRange(rng, rng)
        elif isinstance(rng, Mapping) and min(int(rng.get("before", 1)), int(rng.get("after", 1))) >= 0:
            data["message_range"] = MessageRange(int(rng.get("before", 1)), int(rng.get("after", 1)))
        else:
            raise OptionsError("semantic_recall.message_range must be a non-negative integer or {before, after}.")
        return SemanticRecallOptions(**_known(SemanticRecallOptions, data, "semantic_recall"))
    raise OptionsError("semantic_recall must be True, False or a dict of options.")


def _working(value: Any) -> WorkingMemoryOptions:
    if isinstance(value, WorkingMemoryOptions):
        return value
    if value is None or value is False:
        return WorkingMemoryOptions(enabled=False)
    if value is True:
        return WorkingMemoryOptions(enabled=True)
    if isinstance(value, Mapping):
        data = dict(value)
        for removed in ("use",):
            if removed in data:
                raise OptionsError(f"working_memory.{removed} was removed; drop it from the configuration.")
        return WorkingMemoryOptions(**_known(WorkingMemoryOptions, data, "working_memory"))
    raise OptionsError("working_memory must be a dict of options.")


_T = TypeVar("_T")


def _switchable(cls: type[_T], value: Any, prefix: str, shape: str) -> _T:
    """Options that may be given as True / False (on / off with the defaults) or a dict (on)."""
    if isinstance(value, cls):
        return value
    if value is None or value is False:
        return cls(enabled=False)  # type: ignore[call-arg]
    if value is True:
        return cls(enabled=True)  # type: ignore[call-arg]
    if isinstance(value, Mapping):
        data = dict(value)
        data.setdefault("enabled", True)
        return cls(**_known(cls, data, prefix))
    raise OptionsError(f"{prefix} must be True, False or {shape}.")


def _observational(value: Any) -> ObservationalMemoryOptions:
    return _switchable(ObservationalMemoryOptions, value, "observational_memory", "a dict of options")


def _title(value: Any) -> TitleOptions:
    return _switchable(TitleOptions, value, "generate_title", 'a dict such as {"model": ..., "instructions": ...}')


def _known(cls: type, data: dict[str, Any], prefix: str) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    unknown = set(data) - names
    if unknown:
        import difflib

        hints = [f"{k!r} → did you mean {near[0]!r}?" for k in sorted(unknown)
                 if (near := difflib.get_close_matches(k, sorted(names), n=1))]
        raise OptionsError(f"Unknown {prefix} option(s): {', '.join(sorted(unknown))}."
                           + (" " + " ".join(hints) if hints else ""))
    return data
