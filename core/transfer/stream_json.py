"""An export file parsed a piece at a time, so its text is never held whole beside the rows parsed from it.

``json.loads`` of the whole text needs the text and the parsed document at once (with the file's bytes as
well, 3.07 GB of RSS for a 1.0 GB export). Here the file is decoded and parsed in pieces of about
``CHUNK`` bytes: the top-level object by hand, each of its values, and each row of a list value, by
the ``json`` module's own decoder (``raw_decode``), so every value is the one ``json.loads`` makes. What
is held is the parsed document and a piece of text; the lists named in ``spool`` are kept on disk as they are
parsed (``core.transfer.spool.RowSpool``), so of them only a batch of rows is held. So are the lists nested in the
rows of a list named in ``spool_within`` (a working-memory entry's ``versions``): such a row is parsed key by key,
its nested list kept in one spool shared by the outer list's rows (a ``SpoolPart`` of it in the row).

Anything this reader does not take (a file that is not a JSON object, bytes that are not UTF-8, a syntax
error, a constant that is not JSON, a cut-off file) gives ``None``: the caller then reads the file the
whole-text way, whose errors say exactly what is wrong, where. So this reader accepts only what
``json.loads`` accepts, and never has to word an error of its own.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Collection, Mapping
from typing import IO, Any, Callable

from core.errors import MemoryStudioError
from core.transfer.spool import RowSpool, SpoolError

CHUNK = 1 << 20  # bytes read and decoded at a time
_NUMBER_TAIL = 8  # a value ending this close to the piece's end is parsed again with more (a number's
# prefix parses: "1" of "1e+21"; what it leaves unread before the piece's end is at most "e+")
_SPACE = re.compile(r"[ \t\n\r]*")  # JSON's white space, no more (``str.isspace`` takes others)


class _NotTaken(MemoryStudioError):
    """The file needs the whole-text reader (which says what is wrong with it)."""


class HeldTooMuch(MemoryStudioError):
    """The lists held in memory (all but the spooled ones) passed ``held_limit``: ``held`` characters of text so far."""

    def __init__(self, held: int) -> None:
        super().__init__(f"{held} characters held")
        self.held = held


class _Pieces:
    def __init__(self, fh: IO[bytes], parse_constant: Callable[[str], Any], chunk: int,
                 parse_float: Callable[[str], Any] | None = None, parse_int: Callable[[str], Any] | None = None,
                 held_limit: int | None = None) -> None:
        self.fh = fh
        self.chunk = chunk
        self.decoder = codecs.getincrementaldecoder("utf-8-sig")()  # a byte-order mark is not content
        self.json = json.JSONDecoder(parse_constant=parse_constant, parse_float=parse_float, parse_int=parse_int)
        self.buf = ""
        self.pos = 0
        self.eof = False
        self.spools: list[RowSpool] = []  # made by ``document``: discarded if the file is not taken
        self.dropped = 0  # characters parsed and dropped from the buffer before ``buf``
        self.held = 0  # characters of the rows of lists held in memory (not spooled)
        self.spooled_chars = 0  # characters of the lists nested in rows (``spool_within``) kept on disk
        self.held_limit = held_limit

    def more(self, at_least: int = 0) -> bool:
        """Decode more of the file onto the buffer (dropping what was parsed); False at its end."""
        if self.eof:
            return False
        if self.pos:
            self.dropped += self.pos
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

    def array(self, out: Any = None, row: Callable[[], Any] | None = None) -> Any:
        """A list's values, appended to ``out`` (a new list unless given: a ``RowSpool``), each parsed by ``row``
        (``value`` unless given)."""
        self.take("[")
        out = [] if out is None else out
        row = self.value if row is None else row
        if self.peek() == "]":
            self.pos += 1
            return out
        counted = isinstance(out, list)
        while True:
            start, spooled = self.dropped + self.pos, self.spooled_chars
            out.append(row())
            if counted:
                self.held += self.dropped + self.pos - start - (self.spooled_chars - spooled)
                if self.held_limit is not None and self.held > self.held_limit:
                    raise HeldTooMuch(self.held)
            char = self.peek()
            self.pos += 1
            if char == "]":
                return out
            if char != ",":
                raise _NotTaken

    def spooled(self, key: str) -> RowSpool:
        spool = RowSpool(key)
        self.spools.append(spool)
        return self.array(spool).close()  # type: ignore[no-any-return]

    def spooling_within(self, key: str, inner: str) -> list[Any]:
        """A list whose rows that are objects have their ``inner`` list kept on disk (``row_spooling``)."""
        shared = RowSpool(f"{key} {inner}")
        self.spools.append(shared)
        rows = self.array(row=lambda: self.row_spooling(inner, shared))
        shared.close()
        return rows  # type: ignore[no-any-return]

    def row_spooling(self, inner: str, shared: RowSpool) -> Any:
        """A row as ``value`` parses it, but for an object's ``inner`` list: its rows are appended to ``shared``, and
        the row holds them as a ``SpoolPart``."""
        if self.peek() != "{":
            return self.value()

        def member(key: str) -> Any:
            if key != inner or self.peek() != "[":
                return self.value()
            start, mark = self.dropped + self.pos, shared.mark()
            self.array(shared)
            self.spooled_chars += self.dropped + self.pos - start
            return shared.part(mark)

        return self.members(member)

    def members(self, member: Callable[[str], Any]) -> dict[str, Any]:
        """An object, each of its values parsed by ``member(key)``; as ``json`` makes it (a key given twice: the last
        value, in the first one's place)."""
        self.take("{")
        out: dict[str, Any] = {}
        if self.peek() == "}":
            self.pos += 1
            return out
        while True:
            if self.peek() != '"':
                raise _NotTaken
            key = self.value()
            self.take(":")
            out[key] = member(key)
            char = self.peek()
            self.pos += 1
            if char == "}":
                return out
            if char != ",":
                raise _NotTaken

    def document(self, spool: Collection[str] = (), spool_within: Mapping[str, str] | None = None) -> dict[str, Any]:
        within = spool_within or {}

        def member(key: str) -> Any:
            if self.peek() != "[":
                return self.value()
            if key in spool:
                return self.spooled(key)
            if key in within:
                return self.spooling_within(key, within[key])
            return self.array()

        data = self.members(member)
        if self.peek() != "":
            raise _NotTaken  # more than one value
        return data


def load_pieces(fh: IO[bytes], parse_constant: Callable[[str], Any], chunk: int = CHUNK, *,
                parse_float: Callable[[str], Any] | None = None,
                parse_int: Callable[[str], Any] | None = None, spool: Collection[str] = (),
                spool_within: Mapping[str, str] | None = None,
                held_limit: int | None = None) -> dict[str, Any] | None:
    """The JSON object ``fh`` holds, as ``json.loads(text, parse_constant=..., parse_float=..., parse_int=...)``
    makes it, or None when the file is anything else or a ``parse_*`` raised (the whole-text reader then says
    why). ``chunk``: bytes read at a time. ``spool``: top-level keys whose list is kept on disk, a ``RowSpool``
    in the document instead of a list (its rows the same values); a spool that cannot be written is
    ``SpoolError``. ``spool_within``: top-level key -> the key of the list kept on disk in each of its rows that is
    an object (a ``SpoolPart`` in the row instead of a list). ``held_limit``: characters of the other lists' rows held
    at most (``HeldTooMuch`` past it)."""
    pieces = _Pieces(fh, parse_constant, chunk, parse_float, parse_int, held_limit)
    try:
        return pieces.document(spool, spool_within)
    except (MemoryError, SpoolError, HeldTooMuch):
        for made in pieces.spools:
            made.discard()
        raise
    except Exception:  # _NotTaken, bytes that are not UTF-8, a refused constant, nesting too deep
        for made in pieces.spools:
            made.discard()
        return None
