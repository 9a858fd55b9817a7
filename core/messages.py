"""Messages in Mastra's "format 2": a role, an id, a time, and content made of typed parts.

Part types: ``text``, ``reasoning``, ``file``, ``source``/``source-url``/``source-document``,
``step-start``, ``tool-invocation`` (call and result in one part), ``error`` and ``data-*``.
Content is kept as the plain dict that goes to disk, so rows written by Mastra round-trip untouched.
"""

from __future__ import annotations

import copy
import json
import os
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Iterable, Literal, Mapping

from core.stored_text import decode_stored_text, is_invalid_utf8, stored_json
from core.errors import MemoryStudioError
from core.ids import check_ids
from core.timeutil import SystemClock, parse_iso, range_problem, to_iso, to_ms

if TYPE_CHECKING:  # pragma: no cover
    from sqlalchemy import RowMapping

Role = Literal["user", "assistant", "system", "signal"]
ROLES = ("user", "assistant", "system", "signal")


class MessageFormatError(MemoryStudioError, ValueError):
    """A message (or a stored row) does not have a shape we can read."""


def new_id() -> str:
    """A new message / thread id: a UUID version 7 (RFC 9562), i.e. 48 bits of Unix milliseconds then
    74 random bits, as text like any UUID. Ids made later sort later, so a batch's new rows land at the
    right edge of every index keyed by message id (``mastra_messages``' primary key, the recall docs,
    the vector rows) instead of on a random page each: a recall-on save of 100 messages touched about a
    hundred pages per such index with version 4 ids. Mastra takes any string id."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    rand_a, rand_b = rand >> 68, rand & ((1 << 62) - 1)  # 12 and 62 random bits
    value = ((ms & ((1 << 48) - 1)) << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b
    return str(uuid.UUID(int=value))


def text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def tool_invocation_part(
    tool_call_id: str,
    tool_name: str,
    args: Mapping[str, Any] | None = None,
    result: Any = None,
    *,
    state: str | None = None,
) -> dict[str, Any]:
    invocation: dict[str, Any] = {
        "state": state or ("result" if result is not None else "call"),
        "toolCallId": tool_call_id,
        "toolName": tool_name,
        "args": dict(args or {}),
    }
    if result is not None:
        invocation["result"] = result
    return {"type": "tool-invocation", "toolInvocation": invocation}


def reasoning_part(text: str) -> dict[str, Any]:
    return {"type": "reasoning", "reasoning": text, "details": [{"type": "text", "text": text}]}


def file_part(data: str, media_type: str, filename: str | None = None) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "file", "data": data, "mimeType": media_type}
    if filename:
        part["filename"] = filename
    return part


def data_part(name: str, data: Any) -> dict[str, Any]:
    return {"type": f"data-{name}", "data": data}


@dataclass
class Message:
    id: str
    role: Role
    content: dict[str, Any]
    created_at: datetime
    thread_id: str | None = None
    resource_id: str | None = None
    type: str = "v2"
    # True when the caller did not give a time; MessageList may then adjust it to keep order.
    created_at_given: bool = field(default=True, compare=False, repr=False)
    # True when the stored content held bytes that are not valid UTF-8 (shown as U+FFFD).
    invalid_utf8: bool = field(default=False, compare=False, repr=False)

    # -- construction --------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        role: Role,
        parts: Iterable[Mapping[str, Any]],
        *,
        id: str | None = None,
        thread_id: str | None = None,
        resource_id: str | None = None,
        created_at: datetime | str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> "Message":
        if role not in ROLES:
            raise MessageFormatError(f"Unknown message role {role!r}; expected one of {', '.join(ROLES)}.")
        check_ids(((id, "message id"), (thread_id, "thread id"), (resource_id, "resource id")), MessageFormatError)
        part_list = [dict(p) for p in parts]
        for p in part_list:
            if not isinstance(p.get("type"), str):
                raise MessageFormatError(f"Every message part needs a string 'type'; got {p!r}.")
            if _bad_tool_call(p):
                raise MessageFormatError(f"A tool-invocation part needs a 'toolInvocation' object; got {p!r}.")
        content: dict[str, Any] = {"format": 2, "parts": part_list}
        text = " ".join(p["text"] for p in part_list if p["type"] == "text" and isinstance(p.get("text"), str))
        if text:
            content["content"] = text
        if metadata:
            content["metadata"] = dict(metadata)
        given = created_at is not None
        when = to_ms(parse_iso(created_at) if created_at is not None else SystemClock().now())
        return cls(
            id=id or new_id(),
            role=role,
            content=content,
            created_at=when,
            thread_id=thread_id,
            resource_id=resource_id,
            created_at_given=given,
        )

    @classmethod
    def user(cls, text: str, **kw: Any) -> "Message":
        _require_text(text)
        return cls.create("user", [text_part(text)], **kw)

    @classmethod
    def assistant(cls, text: str = "", *, parts: Iterable[Mapping[str, Any]] = (), **kw: Any) -> "Message":
        all_parts = [*parts]
        if text:
            all_parts.append(text_part(text))
        return cls.create("assistant", all_parts, **kw)

    @classmethod
    def system(cls, text: str, **kw: Any) -> "Message":
        _require_text(text)
        return cls.create("system", [text_part(text)], **kw)

    # -- reading -------------------------------------------------------------------------------
    @property
    def parts(self) -> list[dict[str, Any]]:
        parts = self.content.get("parts")
        return parts if isinstance(parts, list) else []

    @property
    def text(self) -> str:
        """What the chat model reads and people see: text parts joined by a space, else ``content``.

        Recall uses another rule (``core.recall.text.recall_text``: ``content`` first, Mastra's query
        rule), and the observer another again (``core.observational.tokens.observer_text``: tool
        calls and files too); they agree only when ``content`` repeats the text parts.
        """
        texts = [p["text"] for p in self.parts if p.get("type") == "text" and isinstance(p.get("text"), str)]
        if texts:
            return " ".join(texts)
        fallback = self.content.get("content")
        return fallback if isinstance(fallback, str) else ""

    @property
    def metadata(self) -> dict[str, Any]:
        meta = self.content.get("metadata")
        return meta if isinstance(meta, dict) else {}

    def tool_invocations(self) -> list[dict[str, Any]]:
        return [p["toolInvocation"] for p in self.parts if p.get("type") == "tool-invocation" and isinstance(p.get("toolInvocation"), dict)]

    def content_key(self) -> str:
        """What "same content" means for dedupe: the parts, without volatile per-part timestamps."""
        stripped = [{k: v for k, v in p.items() if k not in ("createdAt", "providerMetadata")} for p in self.parts]
        return json.dumps(stripped, sort_keys=True, ensure_ascii=False, default=str)

    def copy(self, **changes: Any) -> "Message":
        data: dict[str, Any] = {
            "id": self.id,
            "role": self.role,
            # Deep-copying content is the expensive part of a copy; skip it when it is replaced anyway.
            "content": changes["content"] if "content" in changes else copy.deepcopy(self.content),
            "created_at": self.created_at,
            "thread_id": self.thread_id,
            "resource_id": self.resource_id,
            "type": self.type,
            "created_at_given": self.created_at_given,
        }
        data.update(changes)
        return Message(**data)

    # -- disk form -----------------------------------------------------------------------------
    def to_row_tuple(self) -> tuple[Any, ...]:
        """The row in ``mastra_messages`` column order (the save path's hot loop uses this)."""
        if not self.thread_id:
            raise MessageFormatError(f"Message {self.id} has no thread_id; it cannot be stored.")
        if self.created_at.year in (1, 9999):  # (one attribute read on the hot path; the bounds only there)
            self._check_time()
        return (
            self.id, self.thread_id, _dumps(self.content), self.role, self.type or "v2",
            to_iso(self.created_at), self.resource_id,
        )

    def _check_time(self) -> None:
        """A time at the very ends of Python's range cannot be stored: the next turn of its thread is stamped
        a millisecond after its newest message, and a rebuilt turn looks a millisecond before its input."""
        problem = range_problem(self.created_at)
        if problem is not None:
            raise MessageFormatError(f"Message {self.id} dated {self.created_at.isoformat()} {problem}; give it a "
                                     "created_at inside them. Nothing was saved.")

    def to_row(self) -> dict[str, Any]:
        if not self.thread_id:
            raise MessageFormatError(f"Message {self.id} has no thread_id; it cannot be stored.")
        if self.created_at.year in (1, 9999):
            self._check_time()
        return {
            "id": self.id,
            "thread_id": self.thread_id,
            "content": stored_json(self.content),
            "role": self.role,
            "type": self.type or "v2",
            "createdAt": to_iso(self.created_at),
            "resourceId": self.resource_id,
        }

    @classmethod
    def from_row(cls, row: "Mapping[str, Any] | RowMapping") -> "Message":
        raw = decode_stored_text(row["content"])
        content = normalize_content(raw, message_id=row["id"])
        role = row["role"] if row["role"] in ROLES else "assistant" if row["role"] == "tool" else "user"
        return cls(
            id=row["id"],
            role=role,  # type: ignore[arg-type]
            content=content,
            created_at=parse_iso(row["createdAt"]),
            thread_id=row["thread_id"],
            resource_id=row.get("resourceId"),
            type=row.get("type") or "v2",
            invalid_utf8=is_invalid_utf8(raw),
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view (used by the CLI and the Studio's copy-as-JSON)."""
        out: dict[str, Any] = {
            "id": self.id,
            "role": self.role,
            "createdAt": to_iso(self.created_at),
            "threadId": self.thread_id,
            "resourceId": self.resource_id,
            "content": self.content,
        }
        if self.invalid_utf8:
            out["invalidUtf8"] = True
        return out


_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def _dumps(content: Any) -> str:
    """The content column's text on the save path (one encoder made once); a content holding a float that is
    not finite goes through ``stored_json``, which writes it ``null`` (NaN is not JSON)."""
    try:
        return _encode(content)
    except ValueError:
        return stored_json(content)


def _require_text(text: str) -> None:
    if not isinstance(text, str):
        raise MessageFormatError(f"Message text must be a string, got {type(text).__name__}.")


def normalize_content(raw: Any, *, message_id: str = "?") -> dict[str, Any]:
    """Turn whatever a row holds into format-2 content.

    Plain strings (legacy rows) become one text part, like Mastra's reader. Text that looks like JSON
    but does not parse is reported, not guessed at: a silently mangled message is worse than an error.
    """
    if isinstance(raw, (bytes, bytearray)):
        raw = raw.decode("utf-8", errors="replace")
    value: Any = raw
    if isinstance(raw, str):
        stripped = raw.lstrip()
        if stripped.startswith("{") or stripped.startswith("["):
            try:
                value = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise MessageFormatError(
                    f"Stored message {message_id} has malformed content JSON ({exc.msg} at position {exc.pos})."
                ) from exc
            except RecursionError:  # Python's parser gives up about a thousand levels down (another tool wrote it)
                raise MessageFormatError(
                    f"Stored message {message_id} has content JSON that nests lists or objects too deeply to be read."
                ) from None
        else:
            return {"format": 2, "parts": [text_part(raw)], "content": raw}
    if isinstance(value, str):
        return {"format": 2, "parts": [text_part(value)], "content": value}
    if isinstance(value, list):
        return {"format": 2, "parts": [_v1_part(p) for p in value if isinstance(p, dict)]}
    if isinstance(value, dict):
        if value.get("format") == 2:
            if not isinstance(value.get("parts"), list):
                raise MessageFormatError(f"Stored message {message_id} has format-2 content without a parts list.")
            _check_parts(value["parts"], message_id)
            return value
        if "parts" in value and isinstance(value["parts"], list):
            _check_parts(value["parts"], message_id)
            return {**value, "format": 2}
        if isinstance(value.get("content"), str):
            return {"format": 2, "parts": [text_part(value["content"])], "content": value["content"]}
    raise MessageFormatError(f"Stored message {message_id} has content of an unknown shape.")


def _check_parts(parts: list[Any], message_id: str) -> None:
    """Refuse parts the prompt cannot be built from: a part that is not an object, or a tool call whose
    ``toolInvocation`` is not one. Such a row (another tool wrote it) is then unreadable like any other
    malformed row: a turn leaves it out and says so in its record, instead of failing every turn of the
    thread when the prompt is built."""
    for part in parts:
        if not isinstance(part, dict):
            raise MessageFormatError(f"Stored message {message_id} has a part that is not an object.")
        if _bad_tool_call(part):
            raise MessageFormatError(
                f"Stored message {message_id} has a tool-invocation part whose toolInvocation is not an object.")


def _bad_tool_call(part: Mapping[str, Any]) -> bool:
    """A tool-invocation part without its ``toolInvocation`` object: no request can be built from it
    (refused when a message is made, unreadable when a stored row holds one)."""
    return part.get("type") == "tool-invocation" and not isinstance(part.get("toolInvocation"), Mapping)


def _v1_part(part: dict[str, Any]) -> dict[str, Any]:
    """AI SDK v4 "core" parts (tool-call / tool-result) as format-2 parts."""
    kind = part.get("type")
    if kind == "tool-call":
        return tool_invocation_part(str(part.get("toolCallId")), str(part.get("toolName")), part.get("args") or {})
    if kind == "tool-result":
        return tool_invocation_part(
            str(part.get("toolCallId")), str(part.get("toolName")), {}, part.get("result"), state="result"
        )
    return part
