"""The per-message size limit: a message over ``MemoryOptions.max_message_bytes`` is refused whole.

A 10 MB message (a pasted log, a runaway tool result) used to be stored and then assembled into every
prompt of its thread. The size counted is what is stored: the message's content as UTF-8 JSON.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Sequence

from core.messages import Message, MessageFormatError

DEFAULT_MAX_MESSAGE_BYTES = 1_000_000

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


class MessageTooLargeError(MessageFormatError):
    """A message's stored content is over the configured size limit."""

    def __init__(self, message_id: str, size: int, limit: int) -> None:
        super().__init__(
            f"Message {message_id} is {size:,} bytes (its content as stored, UTF-8 JSON), over the limit of "
            f"{limit:,} bytes. Nothing was written. Shorten it (store large data elsewhere and keep a "
            "reference), or raise the limit with MemoryOptions(max_message_bytes=...)."
        )
        self.message_id = message_id
        self.size = size
        self.limit = limit


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", errors="surrogatepass"))


def check_messages(messages: Iterable[Message], limit: int | None) -> None:
    """Refuse the first message over ``limit`` bytes (None: no limit)."""
    if limit is None:
        return
    for message in messages:
        text = _dumps(message.content)
        if len(text) * 4 > limit and _utf8_len(text) > limit:  # a character is at most 4 bytes
            raise MessageTooLargeError(message.id, _utf8_len(text), limit)


def check_rows(rows: Sequence[tuple[Any, ...]], limit: int | None, *, content_at: int = 2) -> None:
    """The same check over rows whose content is already JSON text (the save path)."""
    if limit is None:
        return
    for row in rows:
        text = row[content_at]
        if isinstance(text, str) and len(text) * 4 > limit and _utf8_len(text) > limit:
            raise MessageTooLargeError(str(row[0]), _utf8_len(text), limit)
