"""Memory configuration: defaults as in Mastra (spec §2.1), validated on construction.

Nested options accept dicts (``working_memory={"enabled": True, ...}``) as well as dataclasses, and a
per-call override dict is deep-merged over them (``MemoryOptions.merged``).
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal, Mapping

DEFAULT_TEMPLATE = (
    "\n# User Information\n- **First Name**: \n- **Last Name**: \n- **Location**: \n- **Occupation**: \n"
    "- **Interests**: \n- **Goals**: \n- **Events**: \n- **Facts**: \n- **Projects**: \n"
)

Scope = Literal["resource", "thread"]


class OptionsError(ValueError):
    """A memory option has an invalid value; the message says which and what is allowed."""


def _check_scope(name: str, value: Any) -> Scope:
    if value not in ("resource", "thread"):
        raise OptionsError(f"{name} must be 'resource' or 'thread', got {value!r}.")
    return value  # type: ignore[no-any-return]


@dataclass(frozen=True)
class WorkingMemoryOptions:
    enabled: bool = False
    scope: Scope = "resource"
    template: str | None = None  # Markdown template (replace semantics)
    schema: Mapping[str, Any] | None = None  # JSON Schema (merge semantics); never both
    version: Literal["default", "vnext"] = "default"
    agent_managed: bool = True  # False: shown to the model, updated only by code (no tool offered)

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

    @property
    def mode(self) -> Literal["markdown", "json"]:
        return "json" if self.schema is not None else "markdown"

    @property
    def effective_template(self) -> str:
        return (self.template if self.template is not None else DEFAULT_TEMPLATE).strip()


@dataclass(frozen=True)
class MessageRange:
    before: int = 1
    after: int = 1


@dataclass(frozen=True)
class SemanticRecallOptions:
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
    enabled: bool = False
    scope: Scope = "thread"
    message_tokens: int = 30_000
    observation_tokens: int = 40_000
    observer_model: str | None = None
    reflector_model: str | None = None
    previous_observer_tokens: int | None = 2000  # tail of the log shown to the observer; 0 none, None all
    instruction: str | None = None  # extra guidance appended to the observer's instructions
    reflection_guidance: str | None = None
    max_output_tokens: int | None = None
    timeout: float | None = None

    def __post_init__(self) -> None:
        _check_scope("observational_memory.scope", self.scope)
        for name in ("message_tokens", "observation_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise OptionsError(f"observational_memory.{name} must be a positive integer, got {value!r}.")


@dataclass(frozen=True)
class MemoryOptions:
    last_messages: int | Literal[False] = 10
    semantic_recall: Any = False  # bool | dict | SemanticRecallOptions
    working_memory: Any = None  # dict | WorkingMemoryOptions
    observational_memory: Any = False  # bool | dict | ObservationalMemoryOptions
    read_only: bool = False
    context_window: int = 128_000  # tokens; only used to draw the context bar
    # Largest message accepted, in bytes of stored content (UTF-8 JSON); None for no limit.
    max_message_bytes: int | None = 1_000_000

    def __post_init__(self) -> None:
        lm = self.last_messages
        if lm is True or (not isinstance(lm, int) and lm is not False) or (isinstance(lm, int) and not isinstance(lm, bool) and lm < 0):
            raise OptionsError(
                f"last_messages must be a non-negative integer or False, got {lm!r}."
            )
        object.__setattr__(self, "semantic_recall", _semantic(self.semantic_recall))
        object.__setattr__(self, "working_memory", _working(self.working_memory))
        object.__setattr__(self, "observational_memory", _observational(self.observational_memory))
        if not isinstance(self.read_only, bool):
            raise OptionsError("read_only must be True or False.")
        mb = self.max_message_bytes
        if mb is not None and (not isinstance(mb, int) or isinstance(mb, bool) or mb < 1):
            raise OptionsError(f"max_message_bytes must be a positive integer (bytes) or None, got {mb!r}.")

    @property
    def history_enabled(self) -> bool:
        return self.last_messages is not False and self.last_messages > 0

    def merged(self, overrides: Mapping[str, Any] | None) -> "MemoryOptions":
        """Deep-merge a per-call override dict. A per-call schema replaces the instance schema."""
        if not overrides:
            return self
        unknown = set(overrides) - {f.name for f in fields(self)}
        if unknown:
            raise OptionsError(f"Unknown memory option(s): {', '.join(sorted(unknown))}.")
        base = self.to_dict()
        merged = options_merge(base, dict(overrides))
        wm_over = overrides.get("working_memory")
        if isinstance(wm_over, Mapping) and "schema" in wm_over:
            merged["working_memory"]["schema"] = wm_over["schema"]
            if wm_over["schema"] is not None:
                merged["working_memory"]["template"] = None
        if isinstance(wm_over, Mapping) and wm_over.get("template") is not None and "schema" not in wm_over:
            merged["working_memory"]["schema"] = None
        return MemoryOptions(**merged)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy (cached: options are frozen, and this runs on every turn)."""
        cached = self.__dict__.get("_dict_cache")
        if cached is None:
            cached = json.dumps(asdict(self), default=str)
            object.__setattr__(self, "_dict_cache", cached)
        return json.loads(cached)  # type: ignore[no-any-return]

    def with_(self, **changes: Any) -> "MemoryOptions":
        return replace(self, **changes)


def options_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Option dicts ``base`` + ``over``: objects merge, any other value replaces (``None`` included).

    ``semantic_recall: True`` / ``observational_memory: False`` over a settings object switch it on or
    off and keep its other settings. Not the working-memory merge (``working_memory_merge``), where
    ``null`` deletes. Inputs are never mutated.
    """
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = options_merge(out[key], value)
        elif isinstance(value, bool) and key in ("semantic_recall", "observational_memory") and isinstance(out.get(key), dict):
            out[key] = {**out[key], "enabled": value}
        else:
            out[key] = copy.deepcopy(value)
    return out


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
        elif isinstance(rng, Mapping):
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


def _observational(value: Any) -> ObservationalMemoryOptions:
    if isinstance(value, ObservationalMemoryOptions):
        return value
    if value is None or value is False:
        return ObservationalMemoryOptions(enabled=False)
    if value is True:
        return ObservationalMemoryOptions(enabled=True)
    if isinstance(value, Mapping):
        data = dict(value)
        data.setdefault("enabled", True)
        return ObservationalMemoryOptions(**_known(ObservationalMemoryOptions, data, "observational_memory"))
    raise OptionsError("observational_memory must be True, False or a dict of options.")


def _known(cls: type, data: dict[str, Any], prefix: str) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise OptionsError(f"Unknown {prefix} option(s): {', '.join(sorted(unknown))}.")
    return data
