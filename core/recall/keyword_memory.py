"""Keyword search of a libSQL store answered in process: FTS5's BM25, computed from its own postings.

The FTS5 statement of ``keyword.search`` cost about one microsecond per *matching* row (FTS5 reads
each row's size and computes ``bm25()`` before it can sort), as much as the whole vector search at
10k messages. This answers the same query from arrays kept in memory, like the vector matrix:

- the postings of each query token (FTS5 row, column, offset), read once from the index itself
  through the ``fts5vocab`` table (``VOCAB_TABLE``, migration ``0023_recall_keyword_memory``) and kept;
- each row's size in tokens (FTS5's ``docsize`` table) and its doc (message, thread, resource);
- the table's row count and token total, read from FTS5's own averages record on every search.

From these it computes what FTS5's ``bm25()`` computes (``fts5_aux.c``: ``idf = ln((N - n + 0.5) /
(n + 0.5))``, at least 1e-6; each phrase's frequency summed over its instances with the column
weights; ``k1 = 1.2``, ``b = 0.75``, the row's size over the mean) in the same order of floating-point
operations, so scores are equal to the bit, and sorts as the statement does (score, then message id).
Query terms are cut into tokens by FTS5's own tokenizer, run on a private in-memory table created
with the same tokenizer arguments (``core.storage.scratch``): stemming and Unicode folding can never
disagree with the index.

FTS5 stays the stored truth. Every search first reads, in one statement, what changes with any write
of the index: FTS5's structure record (a new segment for every transaction that wrote), its averages
record and the rows' rewrite counter (bumped on every delete of a keyword row: by the delete trigger on the
messages and by the writers, ``schema._delete_rowids``). Rows
appended since are read and tokenized, and the counts checked against the averages record; a rewrite,
a mismatch or anything unexpected drops what was kept, and a search this module cannot answer exactly
(``until``, a term with no token, a column weight that is not a small binary fraction, a very large
table) returns None: the caller runs the FTS5 statement. Writers of any process are seen this way,
without polling and without hooks in the write path.
"""

from __future__ import annotations

import math
import sys
import re
import threading
import weakref
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable, ContextManager, NamedTuple, Sequence, TypeVar

import numpy as np
import sqlalchemy as sa

from core.background import BackgroundLoads, CancelToken
from core.errors import MemoryStudioError
from core.recall.types import Ranked, ranked_of
from core.recall.tables import FTS_TABLE, STATE_TABLE, VOCAB_TABLE
from core.storage import driver_sql
from core.storage.catalog import has_table, virtual_table_sql
from core.storage.database import read_token
from core.storage.scratch import scratch_connection

if TYPE_CHECKING:  # pragma: no cover
    from core.recall.order_rows import Rows

FTS_REWRITES = "fts:rewrites"  # state key: updates and deletes of keyword docs (migration 0023)
MAX_ROWS = 500_000  # above this many keyword rows the FTS5 statement answers (memory stays bounded)
MAX_TOKENS_KEPT = 4_000_000  # postings kept (8 bytes each), least recently used dropped first
# From this many rows a table is loaded in the background (``KeywordMemory.attach``): ~0.2 s of load at
# 20,000 messages, ~1 s at 100,000, which the search that needed it used to wait for.
BACKGROUND_ROWS = 20_000
_T = TypeVar("_T")
NO_ROW = -1  # ``search_rows``: the hit's message has no single row in the vector set (a candidate by id)
_UNKNOWN_ROW = -2
_OFFSET_BITS = 23  # key of one instance: rowid << 24 | column << 23 | offset
_K1, _B = 1.2, 0.75  # FTS5's bm25() constants
_STRUCTURE_ID, _AVERAGES_ID = 10, 1  # FTS5's structure and averages records in its %_data table
_TOKENIZE = re.compile(r"tokenize\s*=\s*'((?:[^']|'')*)'", re.IGNORECASE)

_STATE_SQL = (
    f"SELECT (SELECT block FROM {FTS_TABLE}_data WHERE id = {_STRUCTURE_ID}), "
    f"(SELECT block FROM {FTS_TABLE}_data WHERE id = {_AVERAGES_ID}), "
    f"(SELECT value FROM {STATE_TABLE} WHERE key = '{FTS_REWRITES}')"
)

# Each keyword row's (rowid, message, thread, resource) above a rowid: its message's, found by the row's
# rowid (migration ``0031_recall_keyword_rows``).
_DOCS_SQL = (
    f'SELECT s.id, m.id, m.thread_id, coalesce(m."resourceId", t."resourceId") FROM {FTS_TABLE}_docsize s '
    "JOIN mastra_messages m ON m.rowid = s.id LEFT JOIN mastra_threads t ON t.id = m.thread_id WHERE s.id > ?"
)

# A phrase's (rows it is in, ascending; its instances in the body; in the context; the rows' places in
# ``KeywordMemory._rowids``, None when a row has no size; its BM25 parts as last computed, with the
# (rows, tokens, column weight) they were computed for: ``KeywordMemory._parts_of``).
Phrase = tuple[np.ndarray, np.ndarray, np.ndarray, "np.ndarray | None", "list[Any]"]


class _Cancelled(MemoryStudioError):
    """A background load told to stop (its store is closing); never leaves the load."""


def varints(blob: bytes) -> list[int]:
    """SQLite's variable-length integers, as FTS5 writes its size and averages records."""
    if all(b < 0x80 for b in blob):
        return list(blob)
    out: list[int] = []
    i = 0
    while i < len(blob):
        value = 0
        for j in range(9):
            byte = blob[i]
            i += 1
            if j == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if byte < 0x80:
                break
        out.append(value)
    return out


def _ints(listed: str) -> np.ndarray:
    """The integers of a ``group_concat`` list (``"1,2,3"``), parsed by numpy's C loop: a common word's list
    holds every row it is in, and splitting it into Python strings first took seven times as long."""
    keys = np.fromstring(listed, dtype=np.int64, sep=",")
    if len(keys) != listed.count(",") + 1:  # (never: the list is SQLite's own text of integers)
        keys = np.array(listed.split(","), dtype=np.int64)
    return keys


def _lists(listed: list[str]) -> list[np.ndarray]:
    """``_ints`` of each list, sorted, parsed as one text: a load reads one list per token of the index
    (100,000 at 100,000 messages), and numpy's calls per list were most of its time. Each result is a
    view of one array. A list already ascending (``fts5vocab`` gives a token's instances in row, column
    and offset order, so every list) is not sorted again."""
    if not listed:
        return []
    counts = np.fromiter(map(_commas, listed), np.int64, len(listed))
    every = np.fromstring(",".join(listed), dtype=np.int64, sep=",")
    if len(every) != int(counts.sum()):  # (never: SQLite's own text of integers)
        return [np.sort(_ints(one)) for one in listed]
    ends = np.cumsum(counts)
    starts = ends - counts
    rising = np.diff(every) > 0
    rising[ends[:-1] - 1] = True  # (a list's first key after another's last)
    out = list(map(every.__getitem__, map(slice, starts.tolist(), ends.tolist())))
    if not rising.all():
        for at in np.unique(np.searchsorted(ends, np.flatnonzero(~rising), side="right")).tolist():
            out[at] = np.sort(out[at])
    return out


def _token_counts(records: list[Any]) -> np.ndarray:
    """Each row's tokens (its ``docsize`` record's varints summed), as float64. Every record of a
    table of fewer than 128 tokens a column is one byte a column: those are summed by numpy at once."""
    blobs = [bytes(r) for r in records]
    joined = b"".join(blobs)
    lengths = np.fromiter(map(len, blobs), np.int64, len(blobs))
    if joined.isascii() and (lengths > 0).all():  # (all bytes below 0x80: each byte a varint)
        return np.add.reduceat(np.frombuffer(joined, np.uint8).astype(np.int64), np.cumsum(lengths) - lengths).astype(np.float64)
    return np.fromiter((sum(varints(b)) for b in blobs), np.float64, len(blobs))


def _commas(listed: str) -> int:
    return listed.count(",") + 1


def _inner(term: str) -> str:
    """The text of a quoted FTS5 term (``text.keyword_terms``)."""
    return term[1:-1].replace('""', '"') if len(term) >= 2 and term[0] == term[-1] == '"' else term


def _idf(rows: int, hits: int) -> float:
    """FTS5's inverse document frequency of a phrase in ``hits`` of ``rows`` rows."""
    idf = math.log((rows - hits + 0.5) / (hits + 0.5))
    return idf if idf > 0.0 else 1e-6


class Tokenizer:
    """FTS5's tokenizer of the store's keyword table, run on a private in-memory table. Thread-safe."""

    def __init__(self, tokenize: str) -> None:
        self._lock = threading.Lock()
        self._conn = scratch_connection()
        arg = "'" + tokenize.replace("'", "''") + "'"
        self._conn.execute(f"CREATE VIRTUAL TABLE tok USING fts5(body, context, tokenize = {arg})")
        self._conn.execute("CREATE VIRTUAL TABLE tok_v USING fts5vocab(tok, instance)")
        self._memo: OrderedDict[str, tuple[str, ...]] = OrderedDict()

    def instances(self, rows: list[tuple[int, str, str]]) -> list[tuple[str, int, int, int]]:
        """(token, rowid, column, offset) of every token of these (rowid, body, context) rows."""
        if not rows:
            return []
        with self._lock:
            try:
                self._conn.executemany("INSERT INTO tok (rowid, body, context) VALUES (?, ?, ?)", rows)
                found = self._conn.execute(
                    "SELECT term, doc, col = 'context', \"offset\" FROM tok_v").fetchall()
            finally:
                self._conn.execute("DELETE FROM tok")
        return [(str(t), int(d), int(c), int(o)) for t, d, c, o in found]

    def tokens(self, texts: list[str]) -> list[tuple[str, ...]]:
        """The tokens of each text, in order (what a quoted FTS5 phrase of it matches)."""
        out: dict[str, tuple[str, ...]] = {}
        with self._lock:
            for text in texts:
                known = self._memo.get(text)
                if known is not None:
                    self._memo.move_to_end(text)
                    out[text] = known
        todo = [t for t in dict.fromkeys(texts) if t not in out]
        if todo:
            found: dict[int, list[tuple[int, str]]] = {}
            for token, row, _col, offset in self.instances([(i + 1, t, "") for i, t in enumerate(todo)]):
                found.setdefault(row, []).append((offset, token))
            with self._lock:
                for i, text in enumerate(todo):
                    out[text] = tuple(tok for _, tok in sorted(found.get(i + 1, [])))
                    self._memo[text] = out[text]
                while len(self._memo) > 50_000:
                    self._memo.popitem(last=False)
        return [out[t] for t in texts]


class KeywordMemory:
    """The keyword index of one database, as far as searches have needed it. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._tokenizer: Tokenizer | None = None
        self._usable: bool | None = None  # None: not looked at yet
        self._local = threading.local()  # per thread: the read last synced in (``read_token``), and the answer
        # Loading in the background (``attach``): how to open one read transaction, and the loads' threads.
        self._background: tuple[Callable[[], ContextManager[sa.Connection]], BackgroundLoads] | None = None
        self.background_rows = BACKGROUND_ROWS
        self._failed: tuple[Any, ...] | None = None  # the stored state a background load could not load
        self._cancel: CancelToken | None = None  # (of a copy loading in the background)
        self._reset()

    def attach(self, snapshot: Callable[[], ContextManager[sa.Connection]], loads: BackgroundLoads) -> None:
        """Load a table of ``background_rows`` rows or more on a thread of ``loads``, reading in one
        ``snapshot()``, instead of inside the search that needs it: that search, and those that come
        while the load runs, are answered by the FTS5 statement (the same hits)."""
        self._background = (snapshot, loads)

    def _reset(self) -> None:
        self._state: tuple[Any, ...] | None = None
        self._loaded = False
        self._rowids = np.empty(0, dtype=np.int64)  # FTS5 rows with a size, ascending
        self._sizes = np.empty(0, dtype=np.float64)  # tokens per row (both columns)
        self._resources = np.empty(0, dtype=np.int64)  # code of the row's doc's resource (-1: no doc)
        self._threads = np.empty(0, dtype=np.int64)
        self._mids: list[str | None] = []
        # ``_mids`` as a numpy text array (None as ""), to break ties by message id in numpy; None when
        # not built, or when an id is not text or ends in NUL (numpy drops trailing NULs: not the same order)
        self._mid_keys: np.ndarray | None = None
        self._mid_keys_unusable = False
        # ``_mids`` as an object array (None as "", as a hit gives it), and ``_names`` with two Nones after
        # them (codes -2 and -1: no doc, no thread or resource): a search gathers its hits' fields by numpy
        self._mid_objs: np.ndarray | None = None
        self._name_objs: np.ndarray | None = None
        self._codes: dict[str | None, int] = {}
        self._names: list[str | None] = []  # code -> thread or resource id
        self._max_doc = 0
        self._rows = 0  # FTS5 rows counted (with or without tokens)
        self._tokens = 0
        self._postings: OrderedDict[str, np.ndarray] = OrderedDict()  # token -> sorted instance keys
        # tokens of a phrase -> (rows it is in, ascending; its instances in the body; in the context; the
        # rows' places in ``_rowids``, which appends never move: a new row's id is above every other's)
        self._phrases_seen: dict[tuple[str, ...], Phrase] = {}
        # quoted term -> its phrase of ``_phrases_seen``, while every posting is kept (``_complete``): a search
        # then skips cutting its terms into tokens and the lookups of their postings; emptied whenever
        # ``_phrases_seen`` drops an entry
        self._by_term: dict[str, Phrase] = {}
        self._kept = 0
        self._complete = False  # every token's postings are kept (else read per token on first use)
        self._avg: tuple[int, int] = (0, 0)
        # Per vector set (``search_rows``): [its ``layout``, its ``n`` when last looked at, each doc's row there
        # (by place; ``NO_ROW``: none single, ``_UNKNOWN_ROW``: not looked up)]; dropped with the docs' places.
        self._doc_rows: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()

    # -- staying equal to the stored index ----------------------------------------------------------
    def _usable_on(self, conn: sa.Connection) -> bool:
        if self._usable is None:
            ddl = virtual_table_sql(conn, FTS_TABLE) if has_table(conn, VOCAB_TABLE) else None
            found = _TOKENIZE.search(ddl or "")
            try:
                self._tokenizer = Tokenizer(found.group(1).replace("''", "'")) if found else None
            except Exception:  # a tokenizer this SQLite lacks: the statement answers
                self._tokenizer = None
            self._usable = self._tokenizer is not None
        return self._usable

    def sync(self, conn: sa.Connection) -> bool:
        """Bring what is kept up to date with the stored index (one statement when nothing changed);
        False when searches must use the FTS5 statement. Once per read (``Database.read()``) and thread:
        the steps of one search (its terms, then its ranking) see the index as of the same moment.
        Keyed by the read, not by the connection: one kept connection serves every read of an agent's
        turns (``Database.reads()``), and an answer kept for the connection missed every doc written
        after its first search. A connection outside ``read()`` syncs on every call."""
        token = read_token(conn)
        if token is not None and getattr(self._local, "token", None) == token:
            return self._local.ready  # type: ignore[no-any-return]
        ready = self._sync(conn)
        self._local.token, self._local.ready = token, ready
        return ready

    def _sync(self, conn: sa.Connection) -> bool:
        if not self._usable_on(conn):
            return False
        # The driver's own cursor: this runs before every keyword search, and SQLAlchemy's result
        # machinery costs three times the statement.
        structure, averages, rewrites = conn.connection.driver_connection.execute(_STATE_SQL).fetchone()  # type: ignore[union-attr]
        if rewrites is None:
            return False
        state = (bytes(structure or b""), bytes(averages or b""), int(rewrites))
        with self._lock:
            if state == self._state:
                return True
            counts = varints(state[1]) or [0]  # (no record yet: an empty table)
            rows, tokens = counts[0], sum(counts[1:])
            if rows > MAX_ROWS:
                self._reset()
                return False
            if self._state is None or self._state[2] != state[2] or not self._loaded:
                self._reset()
                if self._later(rows, state):
                    return False
                self._load(conn)
            else:
                self._append(conn)
            if not self._loaded or (self._rows, self._tokens) != (rows, tokens):  # written meanwhile, or
                self._reset()  # not as expected: load again
                if self._later(rows, state):
                    return False
                self._load(conn)
                if (self._rows, self._tokens) != (rows, tokens):
                    self._reset()
                    return False
            self._avg = (rows, tokens)
            self._state = state
            return True

    def _later(self, rows: int, state: tuple[Any, ...]) -> bool:
        """Whether the table is loaded in the background (started now, or already loading): True when
        attached and the table has ``background_rows`` rows, unless a background load of this very
        stored state failed (then the search loads it, as without a background)."""
        if self._background is None or rows < self.background_rows or state == self._failed:
            return False
        snapshot, loads = self._background

        def load(token: CancelToken) -> None:
            fresh = KeywordMemory()  # (loaded apart, then taken over whole: searches never wait for it)
            fresh._tokenizer, fresh._usable, fresh._cancel = self._tokenizer, self._usable, token
            with snapshot() as conn:  # (one read transaction: the counts check cannot meet a write)
                ready = fresh._sync(conn)
            if token.cancelled:
                return
            with self._lock:
                if not ready:
                    self._failed = state
                elif self._state is None:  # (nobody loaded it meanwhile)
                    for name in _LOADED:
                        setattr(self, name, getattr(fresh, name))

        loads.start("keywords", load)
        return True

    def _cancelled(self) -> None:
        """Stop a background load whose store is closing (raises ``_Cancelled``, which ends the load)."""
        if self._cancel is not None and self._cancel.cancelled:
            raise _Cancelled

    def _code(self, value: str | None) -> int:
        if value is None:
            return -2  # matches no scope
        code = self._codes.get(value)
        if code is None:
            code = self._codes[value] = len(self._names)
            self._names.append(value)
        return code

    def _load(self, conn: sa.Connection) -> None:
        # (the driver's cursor: SQLAlchemy's rows cost more than the statements, at 100,000 rows ~0.2 s)
        sizes = driver_sql.rows(conn, f"SELECT id, sz FROM {FTS_TABLE}_docsize ORDER BY id")
        self._cancelled()
        rowids = np.fromiter((r[0] for r in sizes), np.int64, len(sizes))
        self._rowids = rowids
        self._sizes = _token_counts([r[1] for r in sizes])
        self._rows, self._tokens = len(sizes), int(self._sizes.sum())
        self._resources = np.full(len(sizes), -1, dtype=np.int64)
        self._threads = np.full(len(sizes), -1, dtype=np.int64)
        self._mids = [None] * len(sizes)
        self._add_docs(driver_sql.rows(conn, _DOCS_SQL, (0,)))
        self._cancelled()
        if self._tokens <= MAX_TOKENS_KEPT:  # every posting, read in one pass (like the vector matrix)
            every = self._read_postings(conn, "", ())
            if every is not None:
                self._postings = OrderedDict(every)
                self._kept = sum(len(k) for k in every.values())
                self._complete = True
        self._loaded = True

    def _add_docs(self, docs: Sequence[Any]) -> None:
        """Each (doc_id, message, thread, resource) whose FTS5 row is kept: its message and scope codes
        (a doc whose row is not kept yet comes with a later sync). In bulk: a load adds every doc."""
        if not docs:
            return
        ids = np.fromiter((d[0] for d in docs), np.int64, len(docs))
        at = np.searchsorted(self._rowids, ids)
        ok = at < len(self._rowids)
        ok[ok] = self._rowids[at[ok]] == ids[ok]
        chosen = list(docs) if ok.all() else [docs[i] for i in np.flatnonzero(ok).tolist()]
        if not chosen:
            return
        places = at[ok]
        self._max_doc = max(self._max_doc, int(ids[ok].max()))
        intern = sys.intern
        found = [intern(mid) if type(mid) is str else mid for _, mid, _, _ in chosen]  # (as ``VectorSet`` keeps them)
        mids = self._mids
        for p, mid in zip(places.tolist(), found):
            mids[p] = mid
        self._threads[places] = self._codes_of([d[2] for d in chosen])
        self._resources[places] = self._codes_of([d[3] for d in chosen])
        keys = self._mid_keys
        if keys is not None:
            for p, mid in zip(places.tolist(), found):
                if p < len(keys) and _plain(mid) and len(mid or "") <= keys.dtype.itemsize // 4:
                    keys[p] = mid or ""
                else:
                    self._mid_keys = None  # built again when needed
                    break
        if self._mid_objs is not None:
            if len(places) and int(places.max()) < len(self._mid_objs):
                self._mid_objs[places] = [m or "" for m in found]
            else:
                self._mid_objs = None

    def _codes_of(self, values: list[Any]) -> np.ndarray:
        """``_code`` of each value."""
        for value in dict.fromkeys(values):
            self._code(value)
        codes = self._codes
        return np.fromiter((codes[v] if v is not None else -2 for v in values), np.int64, len(values))

    def _append(self, conn: sa.Connection) -> None:
        """Rows added since (no doc was rewritten: the rewrite counter did not move)."""
        assert self._tokenizer is not None
        top = int(self._rowids[-1]) if len(self._rowids) else 0
        fresh = [(int(r[0]), r[1] or "", r[2] or "") for r in conn.exec_driver_sql(
            f"SELECT rowid, body, context FROM {FTS_TABLE} WHERE rowid > ? ORDER BY rowid", (top,))]
        if fresh:
            found = self._tokenizer.instances(fresh)
            sizes: dict[int, int] = {}
            by_token: dict[str, list[int]] = {}  # token -> instance keys
            for token, row, col, offset in found:
                sizes[row] = sizes.get(row, 0) + 1
                if offset >= 1 << _OFFSET_BITS:
                    self._loaded = False  # cannot be keyed: the next sync loads (and gives up) again
                by_token.setdefault(token, []).append((row << (_OFFSET_BITS + 1)) | (col << _OFFSET_BITS) | offset)
            stored: dict[int, bytes] = dict(conn.exec_driver_sql(
                f"SELECT id, sz FROM {FTS_TABLE}_docsize WHERE id > ? ORDER BY id", (top,)).all())
            counted = [sum(varints(bytes(stored[r]))) if r in stored else -1 for r, _, _ in fresh]
            if counted != [sizes.get(r, 0) for r, _, _ in fresh] or len(stored) != len(fresh):
                self._loaded = False  # tokenized otherwise than stored (or written meanwhile): load again
                return
            new_ids = np.array([r for r, _, _ in fresh], dtype=np.int64)
            self._rowids = np.concatenate([self._rowids, new_ids])
            self._sizes = np.concatenate([self._sizes, np.array(counted, np.float64)])
            self._resources = np.concatenate([self._resources, np.full(len(fresh), -1, np.int64)])
            self._threads = np.concatenate([self._threads, np.full(len(fresh), -1, np.int64)])
            self._mids.extend([None] * len(fresh))
            if self._mid_keys is not None:
                self._mid_keys = np.concatenate([self._mid_keys, np.full(len(fresh), "", self._mid_keys.dtype)])
            if self._mid_objs is not None:
                self._mid_objs = np.concatenate([self._mid_objs, np.full(len(fresh), "", dtype=object)])
            self._rows += len(fresh)
            self._tokens += sum(sizes.values())
            touched = by_token.keys()
            self._phrases_seen = {k: v for k, v in self._phrases_seen.items() if touched.isdisjoint(k)}
            self._by_term = {}
            for token, keys in by_token.items():
                kept = self._postings.get(token)
                if kept is None and self._complete:
                    kept = self._postings[token] = np.empty(0, np.int64)
                if kept is not None:
                    self._postings[token] = np.concatenate([kept, np.sort(np.array(keys, dtype=np.int64))])
                    self._kept += len(keys)
        self._add_docs(driver_sql.rows(conn, _DOCS_SQL, (self._max_doc,)))

    def _read_postings(self, conn: sa.Connection, where: str, params: tuple[Any, ...]) -> dict[str, np.ndarray] | None:
        """Instance keys per token from the ``fts5vocab`` table, of rows up to the last one loaded (a row
        written since is appended by the next ``sync``, once); None if an offset is too large to key."""
        top = int(self._rowids[-1]) if len(self._rowids) else 0
        out: dict[str, np.ndarray] = {}
        for found in driver_sql.chunks(
            conn, f"SELECT term, group_concat((doc << {_OFFSET_BITS + 1}) | ((col = 'context') << {_OFFSET_BITS}) "
            f"| \"offset\"), max(\"offset\") FROM {VOCAB_TABLE} WHERE {where}doc <= ? GROUP BY term", (*params, top)):
            if any(last >= 1 << _OFFSET_BITS for _, _, last in found):
                return None
            out.update(zip([term for term, _, _ in found], _lists([listed for _, listed, _ in found])))
            self._cancelled()
        return out

    def _keys(self, conn: sa.Connection, tokens: set[str]) -> dict[str, np.ndarray] | None:
        """The instance keys of these tokens (read from the index once, then kept)."""
        out: dict[str, np.ndarray] = {}
        for token in tokens:
            keys = self._postings.get(token)
            if keys is not None:
                self._postings.move_to_end(token)
                out[token] = keys
        todo = sorted(tokens - out.keys())
        if self._complete:  # every token of the index is kept: one not kept is in no row
            for token in todo:
                out[token] = self._postings[token] = np.empty(0, np.int64)
            return out
        for start in range(0, len(todo), 200):
            chunk = todo[start : start + 200]
            read = self._read_postings(conn, f"term IN ({','.join('?' * len(chunk))}) AND ", tuple(chunk))
            if read is None:
                return None
            for token in chunk:
                keys = read.get(token, np.empty(0, np.int64))
                out[token] = self._postings[token] = keys
                self._kept += len(keys)
        while self._kept > MAX_TOKENS_KEPT and len(self._postings) > len(tokens):
            gone, dropped = self._postings.popitem(last=False)
            self._kept -= len(dropped)
            self._phrases_seen = {k: v for k, v in self._phrases_seen.items() if gone not in k}
            self._by_term = {}
        return out

    # -- answering ---------------------------------------------------------------------------------
    def _phrases(self, conn: sa.Connection, terms: list[str]) -> list[Phrase] | None:
        """Per quoted term: (rows it is in, ascending; its instances in the body; in the context; the
        rows' places in ``_rowids``, or None when a row has no size: not as loaded)."""
        assert self._tokenizer is not None
        complete = self._complete
        if complete:
            by_term = self._by_term
            cached = [by_term.get(t) for t in terms]
            if all(p is not None for p in cached):
                return cached  # type: ignore[return-value]
        cut = self._tokenizer.tokens([_inner(t) for t in terms])
        if any(not tokens for tokens in cut):
            return None  # a term FTS5 cuts into nothing: let FTS5 say what it matches
        keys = self._keys(conn, {tok for tokens in cut for tok in tokens})
        if keys is None:
            return None
        out = []
        for tokens in cut:
            known = self._phrases_seen.get(tokens)
            if known is None:
                found = keys[tokens[0]]
                for shift, tok in enumerate(tokens[1:], start=1):  # a phrase: each next token one offset on
                    found = np.intersect1d(found, keys[tok] - shift, assume_unique=True)
                # Keys are sorted, so each row's instances are one run: counted per run, no sort.
                rows = found >> (_OFFSET_BITS + 1)
                starts = np.flatnonzero(np.diff(rows, prepend=-1))
                uniq = rows[starts]
                context = np.add.reduceat((found >> _OFFSET_BITS) & 1, starts).astype(np.float64) if len(starts) else np.empty(0)
                body = np.diff(np.append(starts, len(rows))).astype(np.float64) - context
                at = np.searchsorted(self._rowids, uniq)
                if len(at) and (at[-1] >= len(self._rowids) or (self._rowids[at] != uniq).any()):
                    known = (uniq, body, context, None, [])  # (not kept: a later sync may bring the sizes)
                else:
                    known = self._phrases_seen[tokens] = (uniq, body, context, at, [])
                    while len(self._phrases_seen) > 20_000:
                        self._phrases_seen.pop(next(iter(self._phrases_seen)))
                        self._by_term = {}
            out.append(known)
        if complete and self._complete:  # (those kept in ``_phrases_seen``)
            if len(self._by_term) > 20_000:
                self._by_term = {}
            seen = self._phrases_seen
            self._by_term.update((t, p) for t, tokens, p in zip(terms, cut, out) if seen.get(tokens) is p)
        return out

    def prefetch(self, conn: sa.Connection, terms: list[str]) -> None:
        """Cut these quoted terms into tokens, and read the postings of tokens not kept yet, each in one pass."""
        with self._lock:
            if self._state is None or self._tokenizer is None:
                return
            if self._complete and all(t in self._by_term for t in terms):
                return  # (their phrases are known: nothing to cut or read)
            cut = self._tokenizer.tokens([_inner(t) for t in terms])  # new words: one tokenizer pass for all
            if not self._complete:
                self._keys(conn, {tok for tokens in cut for tok in tokens})

    def frequency(self, conn: sa.Connection, term: str) -> int | None:
        """Rows matching one quoted term (what FTS5's ``count(*) ... MATCH term`` gives) as of the last
        ``sync``, or None when it could not be brought up to date."""
        with self._lock:
            if self._state is None:
                return None
            phrases = self._phrases(conn, [term])
        return None if phrases is None else len(phrases[0][0])

    def _parts_of(self, phrase: Phrase, weight: float) -> np.ndarray:
        """A phrase's contribution to the score of each row it is in (``phrase[3]``'s rows, in order), as
        bm25() computes it: ``idf * (freq * (k1 + 1)) / (freq + k1 * (1 - b + b * size / avgdl))``.
        Kept in the phrase while the table's row and token counts stay the same: a common word's
        postings are long, and its parts the same every search (elementwise, so the same bits as when
        the phrases of a query are computed together)."""
        n_rows, n_tokens = self._avg
        key = (n_rows, n_tokens, weight)
        uniq, body, context, at, kept = phrase
        if kept and kept[0] == key:
            return kept[1]  # type: ignore[no-any-return]
        freq = body + context * weight  # exact: weight is a binary fraction
        avgdl = float(n_tokens) / float(n_rows)
        parts = _idf(n_rows, len(uniq)) * ((freq * (_K1 + 1.0)) / (freq + _K1 * ((1 - _B) + (_B * self._sizes[at]) / avgdl)))
        kept[:] = (key, parts)
        return parts

    def search(self, conn: sa.Connection, terms: list[str], *, resource_id: str | None, thread_id: str | None,
               limit: int, weight: float, exclude_thread: str | None = None) -> list[Ranked] | None:
        """(message, thread, resource, -bm25) of the best ``limit`` docs of the scope matching any term,
        as ``keyword.search``'s statement ranks them; None when that statement must answer.
        ``exclude_thread``: no doc of that thread."""

        def records(places: np.ndarray, score: np.ndarray) -> list[Ranked]:
            # (the fields gathered by numpy: the hits' ids are out of the CPU's caches, evicted by the last
            # vector scan, and numpy's loop waits for many of them at once)
            mid_objs, name_objs = self._objects()
            return list(map(ranked_of, zip(mid_objs[places].tolist(), name_objs[self._threads[places]].tolist(),
                                           name_objs[self._resources[places]].tolist(), score.tolist())))

        return self._ranked(conn, terms, resource_id, thread_id, limit, weight, exclude_thread, records)

    def search_rows(self, conn: sa.Connection, terms: list[str], vset: "Rows", *, resource_id: str | None,
                    thread_id: str | None, limit: int, weight: float, exclude_thread: str | None = None,
                    ) -> "RowHits | None":
        """``search``'s hits as rows of ``vset`` (a ``matrix.VectorSet``), best first (``RowHits``); None when
        the statement must answer. The rows come from an array by doc kept for ``vset`` (``_doc_rows``),
        filled for the docs a search finds and kept as docs are added (forgotten when the docs are loaded again:
        ``_reset``)."""

        def rows(places: np.ndarray, score: np.ndarray) -> RowHits:
            mid_objs, name_objs = self._objects()
            return RowHits(self._rows_of(vset, places), score, mid_objs[places].tolist(),
                           name_objs[self._threads[places]], name_objs[self._resources[places]])

        return self._ranked(conn, terms, resource_id, thread_id, limit, weight, exclude_thread, rows)

    def _ranked(self, conn: sa.Connection, terms: list[str], resource_id: str | None, thread_id: str | None, limit: int,
                weight: float, exclude_thread: str | None, answer: Callable[[np.ndarray, np.ndarray], _T]) -> _T | None:
        """``answer(places, scores)`` of the best docs (``_best``), under ``_lock``; None: the statement answers."""
        if not self._answers(conn, terms, weight):
            return None
        with self._lock:
            best = self._best(conn, terms, resource_id, thread_id, limit, weight, exclude_thread)
            return answer(*best) if best is not None else None

    def _rows_of(self, vset: "Rows", places: np.ndarray) -> np.ndarray:
        """The rows of ``vset`` of these docs (under ``_lock``): from ``_doc_rows``, filled where unknown. A
        doc without a single row is looked up again once ``vset`` has grown (its message may have one now);
        a set whose rows moved (``VectorSet.layout``) starts over."""
        kept = self._doc_rows.get(vset)
        docs = len(self._mids)
        if kept is None or kept[0] != vset.layout:
            kept = [vset.layout, vset.n, np.full(docs, _UNKNOWN_ROW, dtype=np.int64)]
            self._doc_rows[vset] = kept
        seen: int = kept[1]
        rows: np.ndarray = kept[2]
        if len(rows) < docs:
            rows = kept[2] = np.concatenate([rows, np.full(docs - len(rows), _UNKNOWN_ROW, dtype=np.int64)])
        if seen != vset.n:
            # (a message given another row makes its doc's row wrong: looked up again, every doc, in that rare case)
            if any(len(vset.positions_of(m)) > 1 for m in vset.message_ids[seen : vset.n]):
                rows[:] = _UNKNOWN_ROW
            else:
                rows[rows == NO_ROW] = _UNKNOWN_ROW
            kept[1] = vset.n
        got: np.ndarray = rows[places]
        unknown = np.flatnonzero(got == _UNKNOWN_ROW)
        if len(unknown):
            mids, row_of = self._mids, vset.row_of
            for i, place in zip(unknown.tolist(), places[unknown].tolist()):
                mid = mids[place]
                row = row_of(mid) if mid is not None else None
                got[i] = NO_ROW if row is None else row
                if mid is not None:  # (a doc not added yet is looked up again)
                    rows[place] = got[i]
        return got

    def _answers(self, conn: sa.Connection, terms: list[str], weight: float) -> bool:
        """Whether these terms and column weight can be answered here, synced first (False: the statement answers)."""
        return bool(terms) and weight >= 0 and float(weight).as_integer_ratio()[1] <= 1024 and self.sync(conn)

    def _best(self, conn: sa.Connection, terms: list[str], resource_id: str | None, thread_id: str | None,
              limit: int, weight: float, exclude_thread: str | None) -> tuple[np.ndarray, np.ndarray] | None:
        """The best ``limit`` docs' places and scores, best first (under ``_lock``, after ``_answers``); None: the
        statement answers."""
        phrases = self._phrases(conn, terms)
        if phrases is None:
            return None
        if not any(len(p[0]) for p in phrases):
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
        if any(p[3] is None for p in phrases):
            return None  # a row without a size: not as loaded
        # Each phrase's contribution to each row it is in, phrase after phrase; ``bincount`` adds them
        # up per row in that order, as bm25() does (a phrase absent from a row adds 0 there).
        at = np.concatenate([p[3] for p in phrases])
        parts = np.concatenate([self._parts_of(p, weight) for p in phrases])
        # Summed per row over the whole table (a row's parts in the same order as one sum per matching
        # row): cheaper than sorting the matches.
        dense = np.bincount(at, weights=parts, minlength=len(self._rowids))
        found = np.zeros(len(self._rowids), dtype=bool)  # (a mask of 1 byte a row: read faster than the sums)
        found[at] = True
        places = np.flatnonzero(found)
        # One comparison per scope (a row without a doc, code -1, is never returned: the statement's
        # join; an unknown scope's code, -3, matches no row).
        if resource_id is not None:
            keep = self._resources[places] == self._codes.get(resource_id, -3)
            if thread_id is not None:
                keep &= self._threads[places] == self._codes.get(thread_id, -3)
        elif thread_id is not None:
            keep = self._threads[places] == self._codes.get(thread_id, -3)  # (a row without a doc has -1)
        else:
            keep = self._resources[places] != -1
        if exclude_thread is not None:
            keep &= self._threads[places] != self._codes.get(exclude_thread, -3)
        places = places[keep]
        score = dense[places]
        if len(score) > limit:
            cut = np.partition(score, len(score) - limit)[len(score) - limit]
            best = np.flatnonzero(score >= cut)  # every tie at the cut: broken by message id below
            places, score = places[best], score[best]
        keys = self._keys_of_mids()
        if keys is not None:  # sorted by (-score, message id, place) as below, in numpy
            order = np.lexsort((places, keys[places], -score))[:limit]
            return places[order], score[order]
        mids = self._mids
        picked = sorted(zip((-score).tolist(), [mids[p] or "" for p in places.tolist()], places.tolist()))[:limit]
        return (np.array([p for _, _, p in picked], dtype=np.int64),
                np.array([-neg for neg, _, _ in picked], dtype=np.float64))

    def _objects(self) -> tuple[np.ndarray, np.ndarray]:
        """``_mid_objs`` and ``_name_objs``, built when missing or out of date."""
        if self._mid_objs is None or len(self._mid_objs) != len(self._mids):
            objs = self._mid_objs = np.empty(len(self._mids), dtype=object)
            objs[:] = [m or "" for m in self._mids]
        if self._name_objs is None or len(self._name_objs) != len(self._names) + 2:
            names = self._name_objs = np.empty(len(self._names) + 2, dtype=object)
            names[: len(self._names)] = self._names  # (the last two stay None: codes -2 and -1)
        return self._mid_objs, self._name_objs

    def _keys_of_mids(self) -> np.ndarray | None:
        """``_mids`` as a numpy text array (None as ""), kept up to date by appends; None when an id
        would not sort there as in Python (not text, or ending in NUL)."""
        keys = self._mid_keys
        if self._mid_keys_unusable:
            return None
        if keys is None or len(keys) != len(self._mids):
            if not all(_plain(m) for m in self._mids):
                self._mid_keys, self._mid_keys_unusable = None, True  # (until loaded again)
                return None
            keys = self._mid_keys = np.array([m or "" for m in self._mids], dtype=str)
        return keys


class RowHits(NamedTuple):
    """``KeywordMemory.search_rows``'s hits, best first: each hit's row (``NO_ROW``: its message has no
    single row in the set), score, message id, thread and resource (the same objects as ``search``'s
    records; the last two as object arrays)."""

    rows: np.ndarray
    score: np.ndarray
    mids: list[str]
    threads: np.ndarray
    resources: np.ndarray

    def records(self) -> list[Ranked]:
        """``search``'s records of these hits."""
        return list(map(ranked_of, zip(self.mids, self.threads.tolist(), self.resources.tolist(), self.score.tolist())))


def _plain(mid: object) -> bool:
    """An id numpy's text array sorts as Python does: None (as ""), or text not ending in NUL."""
    return mid is None or (isinstance(mid, str) and not mid.endswith("\x00"))


def _loaded_names() -> tuple[str, ...]:
    """What ``KeywordMemory._reset`` sets: the loaded index, which a background load hands over whole."""
    probe = KeywordMemory.__new__(KeywordMemory)
    KeywordMemory._reset(probe)
    return tuple(vars(probe))


_LOADED = _loaded_names()
