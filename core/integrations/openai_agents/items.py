"""The Agents SDK's conversation items ↔ our format-2 messages (pure; no SDK import).

One item becomes one stored message, readable by everything else (the Studio, recall, our own
``Agent`` on the same thread): a user or assistant message keeps its text as text parts, a
``function_call`` / ``function_call_output`` becomes a ``tool-invocation`` part (state ``call`` /
``result``), and any other item (reasoning, hosted tool calls) a ``data-openai-agents-item`` part.
The item itself is kept, exactly as the SDK gave it, under ``metadata.openaiAgents.item``: the SDK
gets back byte-for-byte what it stored (it compares digests of stored items when it resumes a run),
except that a message item edited since (Studio, API) comes back with the message's new text.
A message written by someone else (our ``Agent``, the gateway, MCP ``remember``) has no such item
and is turned into the equivalent SDK items instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from core.messages import Message, data_part, text_part, tool_invocation_part

#: Where the SDK's own item is kept in a message's metadata.
METADATA_KEY = "openaiAgents"
_TEXT_TYPES = ("input_text", "output_text", "text", "refusal")


def as_item(item: Any) -> dict[str, Any]:
    """A plain JSON dict of an item (the SDK passes dicts, some callers pydantic models)."""
    if isinstance(item, Mapping):
        plain: Any = item
    elif callable(getattr(item, "model_dump", None)):
        plain = item.model_dump(exclude_unset=True, mode="json")
    else:
        raise TypeError(f"An Agents SDK item must be a dict, got {type(item).__name__}.")
    copied: dict[str, Any] = json.loads(json.dumps(plain, default=_jsonable))  # detached and JSON-safe
    return copied


def _jsonable(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    return dump(mode="json") if callable(dump) else str(value)


def content_text(content: Any) -> str:
    """The text of an item's ``content``: a string, or the text of its text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        texts = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") in _TEXT_TYPES:
                value = part.get("text", part.get("refusal"))
                if isinstance(value, str):
                    texts.append(value)
        return "\n".join(texts)
    return ""


def item_to_message(item: Mapping[str, Any], *, thread_id: str, resource_id: str,
                    tool_names: Mapping[str, str] | None = None,
                    tool_args: Mapping[str, Mapping[str, Any]] | None = None) -> Message:
    """One SDK item as one of our messages (unstamped: saving keeps the order they come in).
    ``tool_names`` / ``tool_args``: call id → the tool's name / arguments, for a ``function_call_output``
    (which carries neither): its result part then names the call it answers, with its arguments."""
    kind = item.get("type")
    role = item.get("role")
    meta: dict[str, Any] = {METADATA_KEY: {"item": dict(item)}}
    if kind in (None, "message") and role in ("user", "system", "developer"):
        # System and developer items are not our system messages (those are never stored); they are
        # kept as what the SDK sent them as, a user-side message, with their role in the item.
        parts = [text_part(content_text(item.get("content")))]
        return Message.create("user", parts, thread_id=thread_id, resource_id=resource_id, metadata=meta)
    if kind in (None, "message") and role == "assistant":
        parts = [text_part(content_text(item.get("content")))]
        return Message.create("assistant", parts, thread_id=thread_id, resource_id=resource_id, metadata=meta)
    if kind == "function_call":
        call_id = str(item.get("call_id") or item.get("id") or "")
        part = tool_invocation_part(call_id, str(item.get("name") or ""), _arguments(item.get("arguments")),
                                    state="call")
        return Message.create("assistant", [part], thread_id=thread_id, resource_id=resource_id, metadata=meta)
    if kind == "function_call_output":
        call_id = str(item.get("call_id") or "")
        name = (tool_names or {}).get(call_id, "")
        args = dict((tool_args or {}).get(call_id) or {})
        output = item.get("output")
        part = tool_invocation_part(call_id, name, args, output if output is not None else "", state="result")
        return Message.create("assistant", [part], thread_id=thread_id, resource_id=resource_id, metadata=meta)
    return Message.create("assistant", [data_part("openai-agents-item", {"type": kind})],
                          thread_id=thread_id, resource_id=resource_id, metadata=meta)


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, Mapping):
        return dict(raw)
    if isinstance(raw, str) and raw.strip():
        try:
            parsed = json.loads(raw)
        except ValueError:
            return {"raw": raw}
        return parsed if isinstance(parsed, dict) else {"value": parsed}
    return {}


def messages_to_items(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The SDK items of stored messages, in order: the kept item where there is one."""
    items: list[dict[str, Any]] = []
    for message in messages:
        items.extend(message_to_items(message))
    return items


def message_to_items(message: Message) -> list[dict[str, Any]]:
    kept = message.metadata.get(METADATA_KEY)
    if isinstance(kept, Mapping) and isinstance(kept.get("item"), Mapping):
        return [_as_edited(dict(kept["item"]), message)]
    if message.role == "user":
        return [{"role": "user", "content": message.text}]
    if message.role != "assistant":
        return []
    items: list[dict[str, Any]] = []
    text = message.text
    for part in message.parts:
        if part.get("type") != "tool-invocation":
            continue
        call = part.get("toolInvocation") or {}
        call_id = str(call.get("toolCallId") or "")
        items.append({"type": "function_call", "call_id": call_id, "name": str(call.get("toolName") or ""),
                      "arguments": json.dumps(call.get("args") or {}, ensure_ascii=False)})
        if call.get("state") == "result":
            result = call.get("result")
            items.append({"type": "function_call_output", "call_id": call_id,
                          "output": result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)})
    if text:
        items.append({"role": "assistant", "content": text})
    return items


def _as_edited(item: dict[str, Any], message: Message) -> dict[str, Any]:
    """The kept item of a message item, with the message's text when the message was edited since
    (Studio, API or an undo): the SDK must send what the thread now says, not the words before the
    edit. An unedited message has exactly the item's text, and its item comes back unchanged."""
    if item.get("type") not in (None, "message") or item.get("role") not in ("user", "system", "developer",
                                                                             "assistant"):
        return item
    text = message.text
    content = item.get("content")
    if content_text(content) == text:
        return item
    if not isinstance(content, list):
        return {**item, "content": text}
    parts: list[Any] = []
    placed = False
    for part in content:
        if isinstance(part, Mapping) and part.get("type") in _TEXT_TYPES:
            if not placed:
                key = "refusal" if part.get("type") == "refusal" else "text"
                parts.append({**part, key: text, **({"annotations": []} if "annotations" in part else {})})
                placed = True
            continue
        parts.append(part)
    if not placed:
        parts.insert(0, {"type": "output_text", "text": text, "annotations": []} if item.get("role") == "assistant"
                     else {"type": "input_text", "text": text})
    return {**item, "content": parts}


def call_names(items: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """call id → tool name for the function calls among ``items``."""
    return {str(i.get("call_id")): str(i.get("name") or "") for i in items if i.get("type") == "function_call"}


def call_arguments(items: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """call id → the parsed arguments of the function calls among ``items``."""
    return {str(i.get("call_id")): _arguments(i.get("arguments")) for i in items if i.get("type") == "function_call"}


def latest_user_text(items: Sequence[Any]) -> str:
    """The text of the newest user item: what recall searches with."""
    for item in reversed(items):
        if isinstance(item, Mapping) and item.get("role") == "user" and item.get("type") in (None, "message"):
            text = content_text(item.get("content"))
            if text:
                return text
    return ""
