"""An export file parsed a piece at a time, so its text is never held whole beside the rows parsed from it.

``json.loads`` of the whole text needs the text and the parsed document at once (with the file's bytes as
well, 3.07 GB of RSS for a 1.0 GB export). Here the file is decoded and parsed in pieces of about
``CHUNK`` bytes: the top-level object by hand, each of its values, and each row of a list value, by
the ``json`` module's own decoder (``raw_decode``), so every value is the one ``json.loads`` makes. What
is held is the parsed document and a piece of text.

Anything this reader does not take (a file that is not a JSON object, bytes that are not UTF-8, a syntax
error, a constant that is not JSON, a cut-off file) gives ``None``: the caller then reads the file the
whole-text way, whose errors say exactly what is wrong, where. So this reader accepts only what
``json.loads`` accepts, and never has to word an error of its own.
"""

from __future__ import annotations

import codecs
import json
import re
from typing import IO, Any, Callable

from core.errors import MemoryStudioError

CHUNK = 1 << 20  # bytes read and decoded at a time
_NUMBER_TAIL = 8  # a value ending this close to the piece's end is parsed again with more (a number's
# prefix parses: "1" of "1e+21"; what it leaves unread before the piece's end is at most "e+")
_SPACE = re.compile(r"[ \t\n\r]*")  # JSON's white space, no more (``str.isspace`` takes others)


class _NotTaken(MemoryStudioError):
    """The file needs the whole-text reader (which says what is wrong with it)."""


class _Pieces:
    def __init__(self, fh: IO[bytes], parse_constant: Callable[[str], Any], chunk: int,
                 parse_float: Callable[[str], Any] | None = None, parse_int: Callable[[str], Any] | None = None) -> None:
        self.fh = fh
        self.chunk = chunk
        self.decoder = codecs.getincrementaldecoder("utf-8-sig")()  # a byte-order mark is not content
        self.json = json.JSONDecoder(parse_constant=parse_constant, parse_float=parse_float, parse_int=parse_int)
        self.buf = ""
        self.pos = 0
        self.eof = False

    def more(self, at_least: int = 0) -> bool:
        """Decode more of the file onto the buffer (dropping what was parsed); False at its end."""
        if self.eof:
            return False
        if self.pos:
            self.buf, self.pos = self.buf[self.pos:], 0
        raw = self.fh.read(max(self.chunk, at_least))
        self.buf += self.decoder.decode(raw, final=not raw)
        self.eof = not raw
        return True

    def peek(self) -> str:
        """The next character that is not white space ("" at the end of the file)."""
        while True:
            self.pos = _SPACE.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.more():
                return ""

    def take(self, char: str) -> None:
        if self.peek() != char:
            raise _NotTaken
        self.pos += 1

    def value(self) -> Any:
        self.peek()
        while True:
            try:
                value, end = self.json.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError:
                # Perhaps only cut by the piece's end: read on (twice the rest, so a long value is parsed a
                # few times, not once a piece). A file that is wrong here is read to its end, then refused.
                if self.more(2 * (len(self.buf) - self.pos)):
                    continue
                raise _NotTaken from None
            if len(self.buf) - end < _NUMBER_TAIL and self.more(2 * (len(self.buf) - self.pos)):
                continue  # a number may go on in the next piece ("1" of "1e+21", "-0" of "-0.5")
            self.pos = end
            return value

    def array(self) -> list[Any]:
        self.take("[")
        out: list[Any] = []
        if self.peek() == "]":
            self.pos += 1
            return out
        while True:
            out.append(self.value())
            char = self.peek()
            self.pos += 1
            if char == "]":
                return out
            if char != ",":
                raise _NotTaken

    def document(self) -> dict[str, Any]:
        self.take("{")
        data: dict[str, Any] = {}
        if self.peek() == "}":
            self.pos += 1
        else:
            while True:
                if self.peek() != '"':
                    raise _NotTaken
                key = self.value()
                self.take(":")
                data[key] = self.array() if self.peek() == "[" else self.value()
                char = self.peek()
                self.pos += 1
                if char == "}":
                    break
                if char != ",":
                    raise _NotTaken
        if self.peek() != "":
            raise _NotTaken  # more than one value
        return data


def load_pieces(fh: IO[bytes], parse_constant: Callable[[str], Any], chunk: int = CHUNK, *,
                parse_float: Callable[[str], Any] | None = None,
                parse_int: Callable[[str], Any] | None = None) -> dict[str, Any] | None:
    """The JSON object ``fh`` holds, as ``json.loads(text, parse_constant=..., parse_float=..., parse_int=...)``
    makes it, or None when the file is anything else or a ``parse_*`` raised (the whole-text reader then says
    why). ``chunk``: bytes read at a time."""
    try:
        return _Pieces(fh, parse_constant, chunk, parse_float, parse_int).document()
    except MemoryError:
        raise
    except Exception:  # _NotTaken, bytes that are not UTF-8, a refused constant, nesting too deep
        return None
