"""An in-process cache of what ``piece_table.read`` answers, per message (libSQL's ``MatrixVectors``):
a vector-only search re-scores its best ``pieces.RESCORED`` messages by their pieces, and reading those
rows' blobs again every search was its cost (about 1.6 MB at LoCoMo length).

Exact by its generation: the vector table's change counters and the pieces table's write counter
(``<pieces table>:writes``) as a connection's ``scope`` read them, in one statement. Every write of
either table moves one of them (the triggers, ``piece_table._bump``), so an entry is answered only to a
connection that saw the generation it was read under, in the same ``Database.read()``; a new
generation empties the cache; a connection that saw another one (an older read transaction) reads the
table and fills nothing. With no generation (the counters not kept: no recall state table, a Mastra
table without triggers) or outside a ``Database.read()`` (a write) nothing is cached.

Each entry holds a message's ``MessagePieces`` (its passage vector and text as stored with the pieces)
or that it has none usable (so the next search asks nothing of it); least recently used messages go
first once the held vectors pass ``MAX_BYTES``.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Callable, Hashable, Sequence

import sqlalchemy as sa

from core.recall.types import MessagePieces
from core.storage.database import read_token

MAX_BYTES = 128 * 1024 * 1024  # (a 10,000-message LoCoMo-length scope holds 71 MB: bench/recall_pieces.py)


def _size(entry: MessagePieces | None) -> int:
    return 0 if entry is None else int(entry.passage.nbytes + entry.vectors.nbytes) + 64 * (len(entry.spans) + 1)


class PieceCache:
    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, MessagePieces | None] = OrderedDict()
        self._bytes = 0
        self._generation: Hashable | None = None
        # connection -> (its ``Database.read()``, the generation its ``scope`` read there)
        self._seen: weakref.WeakKeyDictionary[sa.Connection, tuple[int, Hashable]] = weakref.WeakKeyDictionary()

    def saw(self, conn: sa.Connection, generation: Hashable | None) -> None:
        """``conn`` read these counters (``MatrixVectors.scope``); None: they are not kept. Outside a
        ``Database.read()`` (a write, which may change what it read) the cache is not used."""
        token = read_token(conn)
        with self._lock:
            if generation is None or token is None:
                self._seen.pop(conn, None)
                return
            self._seen[conn] = (token, generation)
            if generation != self._generation:
                self._entries.clear()
                self._bytes = 0
                self._generation = generation

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0
            self._generation = None
            self._seen.clear()

    @property
    def held_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def read(self, conn: sa.Connection, message_ids: Sequence[str],
             reader: Callable[[Sequence[str]], dict[str, MessagePieces]]) -> dict[str, MessagePieces]:
        """``reader``'s answer for ``message_ids``: kept entries as they are, the others read (one call)
        and kept when ``conn`` saw the cache's generation."""
        ids = list(dict.fromkeys(message_ids))
        with self._lock:
            seen = self._seen.get(conn)
            generation = seen[1] if seen is not None else None
            usable = (seen is not None and seen[0] == read_token(conn) and generation is not None
                      and generation == self._generation)
            out: dict[str, MessagePieces] = {}
            missing: list[str] = []
            if usable:
                for mid in ids:
                    if mid in self._entries:
                        self._entries.move_to_end(mid)
                        entry = self._entries[mid]
                        if entry is not None:
                            out[mid] = entry
                    else:
                        missing.append(mid)
            else:
                missing = ids
        if not missing:
            return out
        got = reader(missing)
        out.update(got)
        if usable:
            with self._lock:
                if self._generation == generation:  # (no newer generation came meanwhile)
                    for mid in missing:
                        entry = got.get(mid)
                        old = self._entries.pop(mid, None)
                        self._bytes -= _size(old)
                        self._entries[mid] = entry
                        self._bytes += _size(entry)
                    while self._bytes > self.max_bytes and self._entries:
                        _, dropped = self._entries.popitem(last=False)
                        self._bytes -= _size(dropped)
        return out
