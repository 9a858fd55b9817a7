"""Porting from Mastra: its memory options object (TypeScript, camelCase) ↔ ``MemoryOptions``.

``MemoryOptions.from_mastra({...})`` (which calls ``from_mastra`` here; this module does not import
``core.options``, so the two never import each other) reads what a Mastra project writes in ``new Memory({ options })``::

    {"lastMessages": 20, "semanticRecall": {"topK": 3, "messageRange": 2, "scope": "resource"},
     "workingMemory": {"enabled": True, "template": "# User\\n- Name:\\n"},
     "observationalMemory": {"model": "openai/gpt-4o-mini", "observation": {"messageTokens": 20000}},
     "generateTitle": True, "messageHistory": {"maxTokens": 8000}}

``to_mastra()`` writes it back. A key neither Mastra nor this engine knows is refused with the nearest
known name; a Mastra key this engine has no equivalent for is refused with what to do instead (it
would otherwise change nothing, silently). Options only this engine has are written under camelCase
names of their own (``semanticRecall.mode``, ``contextWindow``...), which ``from_mastra`` also reads.
"""

from __future__ import annotations

import difflib
from typing import Any, Mapping

from core.errors import OptionsError

# Mastra keys this engine does not implement, and what to do instead.
UNSUPPORTED = {
    "semanticRecall.indexConfig": "vector index tuning has no effect here (recall keeps exact vectors in the process "
                                  "and builds its own IVF index above 100k messages); remove it",
    "semanticRecall.indexName": "the vector table is always memory_messages_<dimension>, as Mastra's Memory uses; "
                                "remove it",
    "observationalMemory.shareTokenBudget": "history never borrows the observation budget here; remove it",
    "threads": "Mastra removed threads.generateTitle; use generateTitle at the top level",
    "workingMemory.use": "Mastra removed workingMemory.use; remove it",
}

_TOP = {"lastMessages": "last_messages", "readOnly": "read_only", "retainFullInput": "retain_full_input",
        "contextWindow": "context_window", "maxMessageBytes": "max_message_bytes",
        "maxWorkingMemoryBytes": "max_working_memory_bytes", "maxWorkingMemoryVersions": "max_working_memory_versions"}
_NESTED = ("semanticRecall", "workingMemory", "observationalMemory", "generateTitle", "messageHistory")
_RECALL = {"enabled": "enabled", "topK": "top_k", "messageRange": "message_range", "scope": "scope",
           "threshold": "threshold", "mode": "mode"}
_WORKING = {"enabled": "enabled", "scope": "scope", "template": "template", "schema": "schema", "version": "version",
            "agentManaged": "agent_managed", "useStateSignals": "use_state_signals"}
_HISTORY = {"maxTokens": "max_tokens", "atMaxRemoveTokens": "at_max_remove_tokens"}
_TITLE = {"enabled": "enabled", "model": "model", "instructions": "instructions"}
_OM_TOP = {"enabled", "model", "scope", "observation", "reflection"}
_OBSERVATION = {"model": "observer_model", "messageTokens": "message_tokens", "bufferTokens": "buffer_tokens",
                "bufferActivation": "buffer_activation", "blockAfter": "block_after",
                "previousObserverTokens": "previous_observer_tokens", "instruction": "instruction",
                "modelSettings": None, "timeout": "timeout", "maxTokensPerBatch": "max_tokens_per_batch"}
_REFLECTION = {"model": "reflector_model", "observationTokens": "observation_tokens",
               "bufferActivation": "reflection_buffer_activation", "blockAfter": "reflection_block_after",
               "instruction": "reflection_guidance", "modelSettings": None,
               "maxCompressionLevel": "max_compression_level"}
_MODEL_SETTINGS = {"temperature", "maxOutputTokens", "maxTokens"}


def _check(data: Mapping[str, Any], known: Any, where: str) -> None:
    if not isinstance(data, Mapping):
        raise OptionsError(f"{where or 'the options'} must be an object, got {type(data).__name__}.")
    names = sorted(known)
    for key in data:
        path = f"{where}.{key}" if where else str(key)
        if path in UNSUPPORTED:
            raise OptionsError(f"Mastra option {path!r} has no equivalent in Memory Studio: {UNSUPPORTED[path]}.")
        if key not in known:
            nested = _nested_home(str(key)) if not where else None
            near = [nested] if nested else difflib.get_close_matches(str(key), names, n=1, cutoff=0.5)
            hint = f" Did you mean {(where + '.' if where else '') + near[0]!r}?" if near else ""
            raise OptionsError(f"Unknown Mastra memory option {path!r}.{hint} Known here: {', '.join(names)}.")


def _nested_home(key: str) -> str | None:
    """The one nested option a top-level ``key`` names (``topk`` → ``semanticRecall.topK``), if exactly one."""
    sections = {"semanticRecall": _RECALL, "workingMemory": _WORKING, "messageHistory": _HISTORY,
                "generateTitle": _TITLE, "observationalMemory": _OM_TOP,
                "observationalMemory.observation": _OBSERVATION, "observationalMemory.reflection": _REFLECTION}
    homes = [f"{section}.{name}" for section, table in sections.items() for name in table
             if name.lower() == key.lower()]
    return homes[0] if len(homes) == 1 else None


def from_mastra(options: Mapping[str, Any]) -> dict[str, Any]:
    """``MemoryOptions`` keyword arguments from Mastra's options object (see the module doc)."""
    _check(options, {*_TOP, *_NESTED, *(k.split(".")[0] for k in UNSUPPORTED if "." not in k)}, "")
    out: dict[str, Any] = {ours: options[theirs] for theirs, ours in _TOP.items() if theirs in options}
    if "messageHistory" in options:
        history = options["messageHistory"]
        if history in (None, False):
            out["message_history"] = None
        else:
            _check(history, _HISTORY, "messageHistory")
            out["message_history"] = {_HISTORY[k]: v for k, v in history.items()}
    if "semanticRecall" in options:
        recall = options["semanticRecall"]
        if isinstance(recall, bool):
            out["semantic_recall"] = recall
        else:
            _check(recall, _RECALL, "semanticRecall")
            out["semantic_recall"] = {_RECALL[k]: v for k, v in recall.items()}
    if "workingMemory" in options:
        wm = options["workingMemory"]
        if isinstance(wm, bool):
            out["working_memory"] = {"enabled": wm}
        else:
            _check(wm, _WORKING, "workingMemory")
            out["working_memory"] = {_WORKING[k]: v for k, v in wm.items()}
    if "generateTitle" in options:
        title = options["generateTitle"]
        if isinstance(title, bool):
            out["generate_title"] = title
        else:
            _check(title, _TITLE, "generateTitle")
            out["generate_title"] = {_TITLE[k]: v for k, v in title.items()}
    if "observationalMemory" in options:
        out["observational_memory"] = _om_from(options["observationalMemory"])
    return out


def _om_from(om: Any) -> Any:
    if isinstance(om, bool):
        return om
    _check(om, _OM_TOP, "observationalMemory")
    out: dict[str, Any] = {"enabled": om.get("enabled", True)}
    if "scope" in om:
        out["scope"] = om["scope"]
    if om.get("model") is not None:  # one model for both, unless a section names its own
        out["observer_model"] = out["reflector_model"] = om["model"]
    for section, table, prefix in (("observation", _OBSERVATION, "observer"),
                                   ("reflection", _REFLECTION, "reflector")):
        data = om.get(section)
        if data is None:
            continue
        _check(data, table, f"observationalMemory.{section}")
        for key, value in data.items():
            if key == "modelSettings":
                _check(value, _MODEL_SETTINGS, f"observationalMemory.{section}.modelSettings")
                if "temperature" in value:
                    out[f"{prefix}_temperature"] = value["temperature"]
                limit = value.get("maxOutputTokens", value.get("maxTokens"))
                if limit is not None:
                    out["max_output_tokens"] = limit
            else:
                out[str(table[key])] = value
    return out


def to_mastra(options: Any, defaults: Any) -> dict[str, Any]:
    """``options`` (a ``MemoryOptions``) as Mastra's options object; ``from_mastra`` of it gives
    ``options`` back. ``defaults``: ``MemoryOptions()``, for the settings written only when changed."""
    out: dict[str, Any] = {"lastMessages": options.last_messages}
    if options.read_only:
        out["readOnly"] = True
    if options.retain_full_input:
        out["retainFullInput"] = True
    if options.context_window != defaults.context_window:
        out["contextWindow"] = options.context_window
    for theirs, ours in _TOP.items():  # this engine's own limits, written only when changed
        if theirs.startswith("max") and getattr(options, ours) != getattr(defaults, ours):
            out[theirs] = getattr(options, ours)
    history = options.message_history
    if history.max_tokens is not None:
        out["messageHistory"] = {"maxTokens": history.max_tokens, **(
            {"atMaxRemoveTokens": history.at_max_remove_tokens} if history.at_max_remove_tokens is not None else {})}
    sr = options.semantic_recall
    out["semanticRecall"] = {"topK": sr.top_k, "messageRange": {"before": sr.message_range.before,
                                                                "after": sr.message_range.after},
                             "scope": sr.scope, "threshold": sr.threshold, "mode": sr.mode} if sr.enabled else False
    wm = options.working_memory
    wm_out: dict[str, Any] = {"enabled": wm.enabled, "scope": wm.scope}
    if wm.schema is not None:
        wm_out["schema"] = dict(wm.schema)
    elif wm.template is not None:
        wm_out["template"] = wm.template
    if wm.version != "default":
        wm_out["version"] = wm.version
    if not wm.agent_managed:
        wm_out["agentManaged"] = False
    if wm.use_state_signals:
        wm_out["useStateSignals"] = True
    out["workingMemory"] = wm_out
    title = options.generate_title
    out["generateTitle"] = ({k: v for k, v in (("model", title.model), ("instructions", title.instructions))
                             if v is not None} or True) if title.enabled else False
    out["observationalMemory"] = _om_to(options, defaults) if options.observational_memory.enabled else False
    return out


def _om_to(options: Any, defaults: Any) -> dict[str, Any]:
    om = options.observational_memory
    observation: dict[str, Any] = {
        "messageTokens": om.message_tokens, "bufferTokens": om.buffer_tokens, "bufferActivation": om.buffer_activation,
        "previousObserverTokens": om.previous_observer_tokens,
        "modelSettings": {"temperature": om.observer_temperature}}
    reflection: dict[str, Any] = {
        "observationTokens": om.observation_tokens, "bufferActivation": om.reflection_buffer_activation,
        "maxCompressionLevel": om.max_compression_level, "modelSettings": {"temperature": om.reflector_temperature}}
    for section, key, value in ((observation, "blockAfter", om.block_after), (reflection, "blockAfter",
                                                                             om.reflection_block_after),
                                (observation, "model", om.observer_model), (reflection, "model", om.reflector_model),
                                (observation, "instruction", om.instruction),
                                (reflection, "instruction", om.reflection_guidance),
                                (observation, "timeout", om.timeout)):
        if value is not None:
            section[key] = value
    if om.max_tokens_per_batch != defaults.observational_memory.max_tokens_per_batch:  # (only when changed)
        observation["maxTokensPerBatch"] = om.max_tokens_per_batch
    if om.max_output_tokens is not None:
        observation["modelSettings"]["maxOutputTokens"] = om.max_output_tokens
        reflection["modelSettings"]["maxOutputTokens"] = om.max_output_tokens
    return {"enabled": True, "scope": om.scope, "observation": observation, "reflection": reflection}


__all__ = ["UNSUPPORTED", "from_mastra", "to_mastra"]
