"""An in-process cache of what ``piece_table.read`` answers, per message (libSQL's ``MatrixVectors``):
a vector-only search re-scores its best ``pieces.RESCORED`` messages by their pieces, and reading those
rows' blobs again every search was its cost (about 1.6 MB at LoCoMo length).

An entry (a message's pieces with its passage vector and text, or that it has none usable) depends only
on that message's rows: its passage row in the vector table (``vector_id``) and its rows in the pieces
table. The rule, one ``Generation`` read by a connection's ``scope`` in one statement:

- ``stands``: both tables' rewrite counters, which triggers bump on every update and delete of a row
  (whoever runs it: another process, Mastra, a reindex, a forget). When either moves, the cache empties.
- ``newest``: both tables' ``max(rowid)``. While no row was deleted (the counters stand), an inserted row
  gets a rowid above every row present, so the rows above the cache's ``newest`` are exactly the ones
  inserted since; their messages' entries are dropped (``piece_table.added_since``, one statement) and
  every other entry stands. A save appends a turn's rows: the next search reads those few ids, not the
  pieces of the 200 messages it re-scores.

So a message's entry goes when its passage row is rewritten or deleted (an edit, a reindex, the message
after an inserted one re-embedded), when its pieces are replaced or deleted (an edit, ``--pieces off``,
forget, a thread delete, ``drop_stale_copies``: the delete moves the counter) and when it gains a row
(pieces given to an old message by ``reindex``, which a kept "none" would hide).

An entry is answered only to a connection whose ``scope`` read the cache's generation in the same
``Database.read()``; one that read an older one (an older read transaction) reads the table and fills
nothing. With no generation (the counters not kept: no recall state table, a Mastra table without
triggers) or outside a ``Database.read()`` (a write) nothing is cached. A pieces table made before its
rewrite triggers (``piece_table.has_rewrite_counter``; the next writer's ``ensure`` adds them) has every
counter in ``stands``, its write counter too: any write of ours empties the cache.

The least recently used messages go first once the held vectors pass ``MAX_BYTES``.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Hashable, Iterable, Sequence

import sqlalchemy as sa

from core.recall.types import MessagePieces
from core.storage.database import read_token

_ABSENT = object()  # (an id not held; None is held: "none usable")
MAX_BYTES = 128 * 1024 * 1024  # (a 10,000-message LoCoMo-length scope holds 71 MB: bench/recall_pieces.py)


def _size(entry: MessagePieces | None) -> int:
    if entry is None:
        return 0
    dots = entry.passage_dots.nbytes if entry.passage_dots is not None else 0
    return int(entry.passage.nbytes + entry.vectors.nbytes + dots) + 64 * (len(entry.spans) + 1)


@dataclass(frozen=True)
class Generation:
    """The counters a connection's ``scope`` read: ``stands`` must not move for an entry to stay;
    ``newest`` (the vector table's and the pieces table's ``max(rowid)``) only grows by inserts."""
    stands: Hashable
    newest: tuple[int, int]


class PieceCache:
    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, MessagePieces | None] = OrderedDict()
        self._bytes = 0
        self._generation: Generation | None = None
        # connection -> (its ``Database.read()``, the generation its ``scope`` read there)
        self._seen: weakref.WeakKeyDictionary[sa.Connection, tuple[int, Generation]] = weakref.WeakKeyDictionary()

    def saw(self, conn: sa.Connection, generation: Generation | None,
            added: Callable[[tuple[int, int]], Iterable[str]] | None = None) -> None:
        """``conn`` read these counters (``MatrixVectors.scope``); None: they are not kept. Outside a
        ``Database.read()`` (a write, which may change what it read) the cache is not used. ``added``:
        the messages of rows inserted above a ``newest`` (read on ``conn``, only when entries are held)."""
        token = read_token(conn)
        with self._lock:
            if generation is None or token is None:
                self._seen.pop(conn, None)
                return
            self._seen[conn] = (token, generation)
            held = self._generation
            if held == generation:
                return
            if held is not None and held.stands == generation.stands:
                pairs = list(zip(generation.newest, held.newest))
                if all(a >= b for a, b in pairs) and added is not None:  # only inserts since: their messages' entries go
                    if self._entries:
                        for mid in added(held.newest):
                            if mid in self._entries:
                                self._bytes -= _size(self._entries.pop(mid))
                    self._generation = generation
                    return
                if all(a <= b for a, b in pairs):
                    return  # an older read transaction: it reads the table, the entries stay
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
                entries = self._entries
                for mid in ids:
                    entry = entries.get(mid, _ABSENT)
                    if entry is _ABSENT:
                        missing.append(mid)
                        continue
                    entries.move_to_end(mid)
                    if entry is not None:
                        out[mid] = entry  # type: ignore[assignment]
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
