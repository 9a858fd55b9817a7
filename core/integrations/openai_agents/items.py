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

Media in a user-side message (``input_image``, ``input_file``, ``input_audio``, chat-style
``image_url``) become the message's ``file`` parts, so the Studio and our prompt builder see them;
their data is stored once, in the part: the kept item holds ``MOVED`` in its place, and the part's
``providerMetadata.openaiAgents`` says where it goes back (``content``: the index in the item's
content, ``field``: the field, ``dataUrl``: whether the part holds the base64 of a ``data:`` URL).
A file part removed from the message since (an edit) is left out of the item given back.
"""

from __future__ import annotations

import json
import mimetypes
import re
from collections.abc import Mapping, Sequence
from typing import Any

from core.messages import Message, data_part, text_part, tool_invocation_part
from core.prompt import to_openai
from core.stored_text import json_text
from core.working_memory import hide_working_memory

#: Where the SDK's own item is kept in a message's metadata.
METADATA_KEY = "openaiAgents"
_TEXT_TYPES = ("input_text", "output_text", "text", "refusal")
#: In a kept item, the place of a value stored once, in one of the message's file parts.
MOVED = "memory-studio:in-file-part"
#: Content part type → where its media is ((path, fallback media type), first found wins).
_MEDIA: dict[str, tuple[tuple[tuple[str, ...], str], ...]] = {
    "input_image": ((("image_url",), "image/*"),),
    "image_url": ((("image_url", "url"), "image/*"),),
    "input_file": ((("file_data",), "application/octet-stream"), (("file_url",), "application/octet-stream")),
    "input_audio": ((("input_audio", "data"), "audio/*"),),
}
_DATA_URL = re.compile(r"data:([\w.+-]+/[\w.+-]+);base64,(.*)", re.S)


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
        kept, files = _move_media(item)
        meta[METADATA_KEY]["item"] = kept
        text = content_text(item.get("content"))
        parts = [text_part(text)] if text or not files else []
        return _hidden(Message.create("user", [*parts, *files], thread_id=thread_id, resource_id=resource_id,
                                      metadata=meta))
    if kind in (None, "message") and role == "assistant":
        parts = [text_part(content_text(item.get("content")))]
        return _hidden(Message.create("assistant", parts, thread_id=thread_id, resource_id=resource_id,
                                      metadata=meta))
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


def _hidden(message: Message) -> Message:
    """The save path's hide rule (``<working_memory>`` tags are not stored) applied to the kept item
    too, so the hidden text does not stay in the message's metadata; the item keeps the text the
    message keeps (``get_items`` gave back that text already)."""
    hidden = hide_working_memory(message.content)
    if hidden is None or hidden is message.content:
        return message  # nothing hidden, or nothing left (the message is then not saved at all)
    meta = dict(hidden.get("metadata") or {})
    kept = meta[METADATA_KEY]
    meta[METADATA_KEY] = {**kept, "item": _as_edited(dict(kept["item"]), message.copy(content=hidden))}
    return message.copy(content={**hidden, "metadata": meta})


def _move_media(item: Mapping[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The item with its media moved out (``MOVED`` in their place), and those media as file parts."""
    content = item.get("content")
    if not isinstance(content, list):
        return dict(item), []
    kept: list[Any] = []
    files: list[dict[str, Any]] = []
    for index, element in enumerate(content):
        found = _media_of(element)
        if found is None:
            kept.append(element)
            continue
        path, value, fallback = found
        match = _DATA_URL.fullmatch(value)
        if match is not None:
            mime, data = match.group(1), match.group(2)
        else:
            mime, data = _guess_type(element, value, fallback), value
        part: dict[str, Any] = {"type": "file", "data": data, "mimeType": mime}
        if isinstance(element.get("filename"), str) and element["filename"]:
            part["filename"] = element["filename"]
        part["providerMetadata"] = {METADATA_KEY: {"content": index, "field": ".".join(path),
                                                   "dataUrl": match is not None}}
        files.append(part)
        kept.append(_with_value(element, path, MOVED))
    return {**item, "content": kept}, files


def _media_of(element: Any) -> tuple[tuple[str, ...], str, str] | None:
    """(path, value, fallback media type) of the media an item's content part carries inline."""
    if not isinstance(element, Mapping):
        return None
    for path, fallback in _MEDIA.get(str(element.get("type")), ()):
        value: Any = element
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        if isinstance(value, str) and value:
            return path, value, fallback
    return None


def _guess_type(element: Mapping[str, Any], value: str, fallback: str) -> str:
    audio = element.get("input_audio")
    if isinstance(audio, Mapping) and isinstance(audio.get("format"), str):
        return "audio/mpeg" if audio["format"] == "mp3" else f"audio/{audio['format']}"
    for name in (element.get("filename"), value.split("?", 1)[0]):
        if isinstance(name, str) and name:
            guessed = mimetypes.guess_type(name, strict=False)[0]
            if guessed:
                return guessed
    return fallback


def _with_value(element: Mapping[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """A copy of ``element`` with ``value`` at ``path`` (keys keep their order)."""
    head, *rest = path
    inner = element.get(head)
    return {**element, head: _with_value(inner, tuple(rest), value) if rest and isinstance(inner, Mapping) else value}


def _restore_media(item: dict[str, Any], message: Message) -> dict[str, Any]:
    """The kept item with its media back from the message's file parts (a part removed since: that
    content part is left out)."""
    content = item.get("content")
    if not isinstance(content, list) or not any(_moved_path(e) for e in content):
        return item
    parts: dict[int, dict[str, Any]] = {}
    for part in message.parts:
        where = (part.get("providerMetadata") or {}).get(METADATA_KEY) if part.get("type") == "file" else None
        if isinstance(where, Mapping) and isinstance(where.get("content"), int):
            parts[where["content"]] = part
    restored: list[Any] = []
    for index, element in enumerate(content):
        path = _moved_path(element)
        if path is None:
            restored.append(element)
            continue
        found = parts.get(index)
        if found is None or not isinstance(found.get("data"), str):
            continue  # the file was taken out of the message since
        where = found["providerMetadata"][METADATA_KEY]
        value = f"data:{found.get('mimeType')};base64,{found['data']}" if where.get("dataUrl") else found["data"]
        restored.append(_with_value(element, path, value))
    return {**item, "content": restored}


def _moved_path(element: Any) -> tuple[str, ...] | None:
    if not isinstance(element, Mapping):
        return None
    for path, _fallback in _MEDIA.get(str(element.get("type")), ()):
        value: Any = element
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        if value == MOVED:
            return path
    return None


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
        return [_as_edited(_restore_media(dict(kept["item"]), message), message)]
    if message.role == "user":
        return [_user_item(message)]
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
                      "arguments": json_text(call.get("args") or {}, ensure_ascii=False)})
        if call.get("state") == "result":
            result = call.get("result")
            items.append({"type": "function_call_output", "call_id": call_id,
                          "output": result if isinstance(result, str) else json_text(result, ensure_ascii=False)})
    if text:
        items.append({"role": "assistant", "content": text})
    return items


def _user_item(message: Message) -> dict[str, Any]:
    """A user message someone else wrote, as an SDK item with what our prompt builder sends of it
    (its images too, not only its text)."""
    (sent,) = to_openai(message)
    content = sent.get("content")
    if not isinstance(content, list):
        return {"role": "user", "content": message.text}
    parts: list[dict[str, Any]] = []
    for part in content:
        if part.get("type") == "image_url":
            parts.append({"type": "input_image", "image_url": part["image_url"]["url"], "detail": "auto"})
        else:
            parts.append({"type": "input_text", "text": str(part.get("text") or "")})
    return {"role": "user", "content": parts}


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
