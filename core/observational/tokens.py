"""Offline token estimates for observational memory: what a message costs, what the log costs.

Counts come from the memory's own tokenizer (``ctx.tokenizer``), so thresholds, the prompt record
and the Studio's progress bars all agree. Counts are cached by text because the same unobserved
messages are measured again on every turn until they are observed.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any, Iterable

from core.stored_text import json_text
from core.tokens import CACHE_TEXT_CHARS, MESSAGE_OVERHEAD

if TYPE_CHECKING:  # pragma: no cover
    from core.messages import Message
    from core.tokens import Tokenizer

# Tool payloads can be huge (a fetched web page); the observer sees them truncated, and counting
# them in full would make one tool call look like a whole conversation.
TOOL_PAYLOAD_CHARS = 2000


def _clip(text: str, limit: int = TOOL_PAYLOAD_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + f"… [{len(text) - limit} more characters]"


def _dump(value: Any) -> str:
    return value if isinstance(value, str) else json_text(value, ensure_ascii=False, default=str)


def observer_lines(msg: "Message") -> list[str]:
    """A message as the observer reads it: text, tool calls and results (clipped), file placeholders.

    Not ``Message.text`` (text parts only, what the chat model reads) nor ``recall_text`` (what
    recall embeds): the observer must also see what tools did, and its token counts follow from this.
    """
    lines: list[str] = []
    images = 0
    for part in msg.parts:
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("text"), str) and part["text"].strip():
            lines.append(part["text"].strip())
        elif kind == "tool-invocation":
            inv = part.get("toolInvocation") or {}
            name = inv.get("toolName") or "tool"
            lines.append(f"[called {name} with {_clip(_dump(inv.get('args') or {}))}]")
            if inv.get("state") == "result":
                lines.append(f"[{name} returned {_clip(_dump(inv.get('result')))}]")
        elif kind == "file":
            mime = str(part.get("mimeType") or part.get("mediaType") or "")
            label = part.get("filename") or mime or "file"
            if mime.startswith("image/"):
                images += 1
                lines.append(f"[Image #{images}: {label}]")
            else:
                lines.append(f"[File: {label}]")
    if not lines:
        fallback = msg.content.get("content")
        if isinstance(fallback, str) and fallback.strip():
            lines.append(fallback.strip())
    return lines


def observer_text(msg: "Message") -> str:
    """``observer_lines`` as one text: what a message costs toward the observation threshold."""
    return "\n".join(observer_lines(msg))


@lru_cache(maxsize=8192)
def _count(tokenizer: Any, text: str) -> int:  # Any: the Tokenizer protocol does not promise hashing
    return int(tokenizer.count(text))


def count_text(tokenizer: "Tokenizer", text: str) -> int:
    if not text:
        return 0
    if len(text) > CACHE_TEXT_CHARS:  # not kept by this cache (the tokenizer's keeps a digest of it)
        return int(tokenizer.count(text))
    try:
        return _count(tokenizer, text)  # type: ignore[arg-type]
    except TypeError:  # an unhashable tokenizer: count without the cache
        return tokenizer.count(text)


def message_tokens(tokenizer: "Tokenizer", msg: "Message") -> int:
    """Tokens one message adds to the unobserved pile (text plus chat framing)."""
    return count_text(tokenizer, observer_text(msg)) + MESSAGE_OVERHEAD


def messages_tokens(tokenizer: "Tokenizer", messages: Iterable["Message"]) -> int:
    return sum(message_tokens(tokenizer, m) for m in messages)


__all__ = ["count_text", "message_tokens", "messages_tokens", "observer_lines", "observer_text"]
