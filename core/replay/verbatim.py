"""Replay of a turn whose prompts another framework built (an OpenAI Agents SDK run), from its record.

Our processors did not build these prompts, so they are not run again: each call's prompt is what its
record kept of it (``CallRecord.sent``: the messages, or a Responses call's instructions and input),
its request body the record's model, tool definitions and settings around them, and that body's hash
is checked against the one taken when the call was sent (a stored text changed since, by hand or by
an import, shows as "differs"). A call taken from the framework's trace (``CallRecord.partial``)
knows its model and messages only: Replay lists its tools and settings as unknown, never as empty.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from core.prompt import AssembledPrompt, Fragment, shown_with_notes
from core.replay.record import CallRecord, CallReplay, ReplayInfo, TurnRecord, request_hash, with_facts_checked
from core.tokens import count_message_tokens

if TYPE_CHECKING:  # pragma: no cover
    from core.tokens import Tokenizer


def sent_messages(sent: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A call's conversation as chat messages: its ``messages``, or a Responses call's instructions (a
    system message) and input items."""
    if "messages" in sent:
        return [dict(m) for m in sent.get("messages") or () if isinstance(m, Mapping)]
    out: list[dict[str, Any]] = []
    if isinstance(sent.get("instructions"), str):
        out.append({"role": "system", "content": sent["instructions"]})
    given = sent.get("input")
    if isinstance(given, str):
        out.append({"role": "user", "content": given})
    else:
        out.extend(dict(i) for i in given or () if isinstance(i, Mapping))
    return out


def _text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        text = " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping) and "text" in p)
    else:
        text = ""
    extra = message.get("tool_calls") or ([message] if message.get("type") in ("function_call",
                                                                                "function_call_output") else None)
    if extra:
        dumped = json.dumps(extra, ensure_ascii=False)
        text = f"{text}\n{dumped}" if text else dumped
    return text


def _tool_name(definition: Mapping[str, Any]) -> str:
    function = definition.get("function")
    return str(function.get("name") if isinstance(function, Mapping) else definition.get("name") or "?")


def call_prompt(record: TurnRecord, call: CallRecord, tokenizer: "Tokenizer") -> AssembledPrompt:
    """One call's prompt as sent: a fragment per message (from the framework: ``source`` names it), and
    the tool definitions offered."""
    messages = sent_messages(call.sent or {})
    source = record.framework or "recorded"
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    fragments: list[Fragment] = []
    for i, message in enumerate(messages):
        role = str(message.get("role") or ("tool" if message.get("type") == "function_call_output" else "assistant"))
        said = _text(message)
        text, notes = shown_with_notes(message, said)  # (its images and files named; its tokens those of its text)
        kind = "system" if role in ("system", "developer") else "input" if i == last_user else "context"
        fragments.append(Fragment(index=len(fragments), role=role, text=text, source=source, kind=kind,
                                  tokens=count_message_tokens(tokenizer, said), message_indexes=(i,),
                                  part_notes=notes))
    tools = [dict(t) for t in call.tools]
    if tools:
        text = json.dumps(tools, ensure_ascii=False)
        fragments.append(Fragment(index=len(fragments), role="tools", text=text, source="tools", kind="tools",
                                  tokens=tokenizer.count(text), detail={"names": [_tool_name(t) for t in tools]}))
    prompt = AssembledPrompt(messages=messages, fragments=fragments, skipped={}, tools=tools,
                             tokenizer=tokenizer.name, thread_id=record.thread_id, resource_id=record.resource_id,
                             options=dict(record.options), processors=[], context_window=record.context_window or 0)
    prompt.request = call.sent_body()
    return prompt


def replay(record: TurnRecord, tokenizer: "Tokenizer") -> AssembledPrompt:
    """The first call's prompt of a framework's recorded turn, with every call in ``prompt.replay.calls``."""
    unknowns: list[str] = []
    calls: list[CallReplay] = []
    framework = record.framework or "the framework"
    for k, call in enumerate(record.calls):
        label = f"model call {k + 1}"
        prompt = call_prompt(record, call, tokenizer)
        body = prompt.request or {}
        matches = request_hash(body) == call.body_hash
        differences: Sequence[str] = ()
        if call.sent is None:
            unknowns.append(f"{label}: what it sent (the text its record names is no longer stored)")
            matches = False
        elif not matches:
            differences = (f"{label}: what its record keeps no longer hashes as the body sent (a stored text of "
                           "the record was changed since)",)
        if call.partial:
            unknowns.append(f"{label}: the tool definitions and settings it sent (taken from the {framework} trace, "
                            "which holds its model and messages only)")
        elif call.tools_key and not call.tools:
            unknowns.append(f"{label}: the tool definitions {call.tools_key} it offered (no longer stored)")
            matches = False
        calls.append(CallReplay(k, prompt, body, matches, call.usage, call.finish_reason, tuple(differences), call))
    unknowns.extend(f"text {key} named by the record (no longer stored)" for key in record.unresolved
                    if not key.startswith("tools:"))
    if not calls:
        empty = AssembledPrompt(messages=[], fragments=[], skipped={}, tools=[], tokenizer=tokenizer.name,
                                thread_id=record.thread_id, resource_id=record.resource_id,
                                options=dict(record.options), processors=[], context_window=0)
        calls.append(CallReplay(0, empty, {}, None))
        unknowns.append(f"what the turn's model calls sent ({framework} made none that was recorded)")
    first: AssembledPrompt = calls[0].prompt
    first.replay = with_facts_checked(ReplayInfo(
        kind="recorded", matches=all(c.matches for c in calls) if record.calls else None, record=record,
        unknowns=tuple(dict.fromkeys(unknowns)), calls=tuple(calls), record_state="present",
        differences=tuple(d for c in calls for d in c.differences)))
    return first


__all__ = ["call_prompt", "replay", "sent_messages"]
