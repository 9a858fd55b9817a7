"""In-process vectors of one scope (a resource, or a thread), answering exact top-k by dot product.

libSQL is the store of record; this is a cache of it: loaded lazily, extended with rows newer than the
last load, dropped when rows were updated or deleted (see ``RecallIndex``). Vectors are unit length
(another program's rows are scaled to it on load, ``vector_table.unit_rows``), so cosine similarity is a
dot product. A resource of ``IVF_MIN_ROWS`` rows or more gets an IVF partition stored with its rows
(``ivf_store``), searched list by list; a set this large held here is scanned whole.
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import numpy as np

from core.recall import ivf
from core.recall.hybrid import Ranked
from core.recall.order_rows import OrderRows
from core.recall.types import ranked_of
from core.recall.vector_table import UNIT_TOLERANCE, RawRow, unit_rows

IVF_MIN_ROWS = 100_000  # a resource this large is partitioned on disk; below it an exact scan is within ~2 ms
# From this many rows an unfiltered search scans a dimension-major copy of the matrix first (``_scan``):
# below it the one product is cheaper than the scan's selection and re-score steps.
SCAN_MIN_ROWS = 2_048
_GROUP = 4  # rows OpenBLAS's row-major sgemv computes together (``_groups_reproduce``)
IVF_REBUILD_TAIL = 0.25  # rebuild once rows added after the build exceed this share
# 1M synthetic clustered 512-d vectors, 1000 lists: 32 probes gave recall@10 .998 vs exact, p50 8.9 ms.
DEFAULT_NPROBE_SHARE = 1 / 32

try:  # OpenBLAS threads fight over 2 busy cores: one thread is 3-6x faster for a matrix-vector product
    from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

    _CONTROLLER: Any = ThreadpoolController()
    _BLAS: list[Any] = [lib for lib in _CONTROLLER.lib_controllers if lib.user_api == "blas"]
except Exception:  # pragma: no cover - optional dependency
    _CONTROLLER = None
    _BLAS = []


class _SingleBlasThread:
    """``ThreadpoolController.limit(limits=1, user_api="blas")`` as every search enters it, by the BLAS
    libraries' own get and set (about 1 µs, against 8 µs for ``limit``'s bookkeeping): each library
    using more than one thread is set to one, and set back on leaving."""

    __slots__ = ("_restore",)

    def __enter__(self) -> None:
        restore = []
        for lib in _BLAS:
            threads = lib.get_num_threads()
            if threads is not None and threads != 1:
                lib.set_num_threads(1)
                restore.append((lib, threads))
        self._restore = restore

    def __exit__(self, *exc: object) -> None:
        for lib, threads in self._restore:
            lib.set_num_threads(threads)


def single_blas_thread() -> contextlib.AbstractContextManager[None]:
    return _SingleBlasThread()


@dataclass
class SkipCounts:
    wrong_dim: int = 0
    corrupt: int = 0
    other_model: Counter[str] = field(default_factory=Counter)
    unknown_model: int = 0  # written without a model id (Mastra): used, but flagged

    def reasons(self) -> list[str]:
        out = []
        if self.wrong_dim:
            out.append(f"{self.wrong_dim} vector row(s) skipped: wrong dimension")
        if self.corrupt:
            out.append(f"{self.corrupt} vector row(s) skipped: corrupt (not a float32 vector)")
        for model, n in sorted(self.other_model.items()):
            out.append(
                f"{n} vector(s) from model {model} ignored: stored model differs from the current embedder; "
                "run `memory-studio reindex` to re-embed"
            )
        if self.unknown_model:
            out.append(f"{self.unknown_model} vector(s) have no model id (written by Mastra); used as-is")
        return out


class ScopeVectors(Protocol):
    """What a search reads of one scope's vectors: an in-process ``VectorSet`` (libSQL) or a view
    that asks the server (``core.recall.pg_vectors.PgVectorSet``)."""

    skips: SkipCounts

    @property
    def n(self) -> int: ...

    def ranked(self, qvec: np.ndarray, depth: int, thread_id: str | None, until: str | None = None,
               exclude_thread: str | None = None) -> list[Ranked]:
        """The best ``depth`` messages; ``thread_id``: of that thread only; ``until``: created before it (ISO
        text); ``exclude_thread``: none of that thread (its rows are never candidates)."""
        ...

    def cosines(self, qvec: np.ndarray, message_ids: list[str]) -> dict[str, float]: ...


class VectorSet:
    def __init__(self, dim: int, model_id: str) -> None:
        self.dim = dim
        self.model_id = model_id
        self._matrix = np.empty((0, dim), dtype=np.float32)
        self.n = 0
        self.message_ids: list[str] = []
        self.thread_ids: list[str | None] = []
        self.resource_ids: list[str | None] = []
        self.created_at: list[str | None] = []  # ISO text per row (None: unknown, never "before" anything)
        self._created: np.ndarray | None = None  # the same as an array, built on the first "as of" search
        self._thread_codes = np.empty(0, dtype=np.int32)
        self._thread_index: dict[str | None, int] = {}
        self.max_rowid = 0
        self.skips = SkipCounts()
        self.partition: ivf.IvfPartition | None = None
        # message id -> its row, or its rows when it has several (Mastra's chunks), built on demand: an int
        # where it can be, as a search looks up about fifty ids with cold caches (a list is two more misses)
        self._positions: dict[str, int | list[int]] | None = None
        # ``_scan``: the matrix dimension-major (dim x capacity), built on the first unfiltered search of
        # a set of SCAN_MIN_ROWS rows or more and kept up to date by appends; ``_max_norm``: the largest
        # row norm (bounds the two products' difference).
        self._scan_t: np.ndarray | None = None
        self._max_norm = 0.0
        # ``message_ids``, ``thread_ids`` and ``resource_ids`` as object arrays (capacity like the matrix),
        # filled up to ``_columns_n`` rows on the first search that needs them (``_id_columns``)
        self._columns: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._columns_n = 0
        # Each row's thread-order answer (next message, day, speaker), filled by searches and kept right
        # under writes by the order cache's change log (``order_rows``); rows reordered: made again.
        self.order_rows = OrderRows()
        self.layout = 0  # bumped when rows move (``build_partition``): arrays kept by row elsewhere start over

    def row_of(self, message_id: str) -> int | None:
        """The row of a message with exactly one row here (None: none, or several)."""
        self.positions_of("")  # (builds the map once)
        found = self._positions.get(message_id) if self._positions is not None else None
        return found if type(found) is int else None

    def positions_of(self, message_id: str) -> list[int]:
        if self._positions is None:
            positions: dict[str, int | list[int]] = {}
            for p, mid in enumerate(self.message_ids[: self.n]):  # (the rows in the matrix: appends add theirs)
                _add_position(positions, mid, p)
            self._positions = positions
        found = self._positions.get(message_id)
        return [] if found is None else [found] if type(found) is int else list(found)  # type: ignore[arg-type]

    @property
    def matrix(self) -> np.ndarray:
        return self._matrix[: self.n]

    def nbytes(self) -> int:
        return (int(self._matrix.nbytes) + (int(self._scan_t.nbytes) if self._scan_t is not None else 0)
                + (sum(int(c.nbytes) for c in self._columns) if self._columns is not None else 0))  # (pointers)

    def reserve(self, rows: int) -> None:
        """Room for ``rows`` rows in all (a load that knows its size: the matrix is allocated once, not
        doubled and copied as it grows)."""
        if rows > self._matrix.shape[0]:
            grown = np.empty((rows, self.dim), dtype=np.float32)
            grown[: self.n] = self._matrix[: self.n]
            self._matrix = grown
            self._scan_t = None  # (made again, at the new size, by the next scan that needs it)

    def extend(self, rows: list[RawRow]) -> None:
        """Append the usable rows (this model's or no model's, a finite vector of this size, a message
        id), counting the others in ``skips``. The vectors are checked and decoded together (one
        ``frombuffer`` for the batch): a row at a time cost more than the SQL that read it."""
        if not rows:
            return
        self.max_rowid = max(self.max_rowid, max(row.rowid for row in rows))
        size = self.dim * 4
        sized: list[RawRow] = []
        for row in rows:
            if row.model_id is not None and row.model_id != self.model_id:
                self.skips.other_model[row.model_id] += 1
                continue
            blob = row.blob
            if not isinstance(blob, (bytes, bytearray, memoryview)):
                self.skips.corrupt += 1
            elif len(blob) != size:
                if len(blob) % 4 == 0:
                    self.skips.wrong_dim += 1
                else:
                    self.skips.corrupt += 1
            else:
                sized.append(row)
        if not sized:
            return
        vecs = np.frombuffer(b"".join(row.blob for row in sized), dtype="<f4").reshape(len(sized), self.dim)
        ok = np.isfinite(vecs).all(axis=1) & np.fromiter((bool(row.message_id) for row in sized), bool, len(sized))
        kept = [row for row, good in zip(sized, ok.tolist()) if good]
        self.skips.corrupt += len(sized) - len(kept)  # not finite, or no message id
        if not kept:
            return
        self.skips.unknown_model += sum(1 for row in kept if row.model_id is None)
        start = len(self.thread_ids)
        for row in kept:  # (ids interned: the keyword index and the order cache hold the same objects, so a
            # search's dict lookups compare them by identity instead of reading a second, cold, string)
            self.message_ids.append(sys.intern(row.message_id) if type(row.message_id) is str else row.message_id)  # type: ignore[arg-type]  # checked above
            self.thread_ids.append(row.thread_id)
            self.resource_ids.append(row.resource_id)
            self.created_at.append(row.created_at)
        # Another program's rows may not be of unit length: scaled to it, so a dot product is their cosine.
        self.append_vectors(unit_rows(vecs if len(kept) == len(sized) else vecs[ok]), self.thread_ids[start:])

    @classmethod
    def of_rows(cls, dim: int, model_id: str, vectors: np.ndarray, message_ids: list[str], thread_ids: list[str | None],
                resource_ids: list[str | None], created_at: list[str | None]) -> "VectorSet":
        """A set over rows checked already (an IVF list's packed copy, ``ivf_packs``): the vectors are
        used as they are, not copied (a later append copies them into a matrix of its own)."""
        vset = cls(dim, model_id)
        vset._matrix = vectors
        vset.n = len(vectors)
        vset.message_ids, vset.thread_ids, vset.resource_ids, vset.created_at = message_ids, thread_ids, resource_ids, created_at
        index = vset._thread_index
        vset._thread_codes = np.array([index.setdefault(t, len(index)) for t in thread_ids], dtype=np.int32)
        vset._max_norm = _max_norm(vectors)
        if vset._max_norm > 1 + UNIT_TOLERANCE:  # a pack written before rows were scaled on load (``unit_rows``)
            vset._matrix = unit_rows(vectors)
            vset._max_norm = _max_norm(vset._matrix)
        return vset

    def append_vectors(self, vecs: np.ndarray, thread_ids: list[str | None]) -> None:
        """Grow the matrix (capacity doubles, so appends stay amortised O(1))."""
        positions = self._positions
        if positions is not None:  # kept up to date (the rows' message ids are appended already)
            if len(self.message_ids) >= self.n + len(vecs):
                for p in range(self.n, self.n + len(vecs)):
                    _add_position(positions, self.message_ids[p], p)
            else:
                self._positions = None
        self._created = None
        if len(self.created_at) < len(self.message_ids):  # rows appended without times: unknown
            self.created_at.extend([None] * (len(self.message_ids) - len(self.created_at)))
        need = self.n + len(vecs)
        if need > self._matrix.shape[0]:
            grown = np.empty((max(need, 2 * self._matrix.shape[0], 256), self.dim), dtype=np.float32)
            grown[: self.n] = self._matrix[: self.n]
            self._matrix = grown
        self._matrix[self.n : need] = vecs
        self._max_norm = max(self._max_norm, _max_norm(vecs))
        if self._scan_t is not None:
            if need > self._scan_t.shape[1]:
                grown = np.empty((self.dim, self._matrix.shape[0]), dtype=np.float32)
                grown[:, : self.n] = self._scan_t[:, : self.n]
                self._scan_t = grown
            self._scan_t[:, self.n : need] = vecs.T
        codes = np.fromiter((self._thread_index.setdefault(t, len(self._thread_index)) for t in thread_ids), np.int32, len(thread_ids))
        self._thread_codes = np.concatenate([self._thread_codes, codes])
        self.n = need

    # -- search --------------------------------------------------------------------------------
    def ranked(self, qvec: np.ndarray, depth: int, thread_id: str | None, until: str | None = None,
               exclude_thread: str | None = None) -> list[Ranked]:
        """The best ``depth`` messages (Mastra's saveMessages may store several chunk vectors per
        message: ask for more, keep each message's best). ``until``: only messages created before it;
        ``exclude_thread``: none of that thread's."""
        # (one row a message: nothing to merge)
        if exclude_thread is None and self._depth_suffices(qvec, depth, thread_id, until):
            pos, scores = self.search(qvec, depth)
            # The rows' fields gathered by numpy, not looked up one by one: after the scan they are out of
            # the CPU's caches, and numpy's loop waits for many of them at once (half the time at depth 50).
            mids, threads, resources = self._id_columns()
            return list(map(ranked_of, zip(mids[pos].tolist(), threads[pos].tolist(), resources[pos].tolist(),
                                           scores.tolist())))
        pos, scores = self.search(qvec, depth * 2, thread_id=thread_id, until=until, exclude_thread=exclude_thread)
        out: list[Ranked] = []
        seen: set[str] = set()
        for p, s in zip(pos.tolist(), scores.tolist()):
            mid = self.message_ids[p]
            if mid in seen:
                continue
            seen.add(mid)
            out.append(Ranked(mid, self.thread_ids[p], self.resource_ids[p], float(s)))
            if len(out) == depth:
                break
        return out

    def _id_columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``message_ids``, ``thread_ids`` and ``resource_ids`` of the matrix's rows as object arrays (the same
        objects), extended by the rows appended since the last call."""
        n = self.n
        cols = self._columns
        if cols is None or len(cols[0]) < n:
            size = max(n, self._matrix.shape[0])
            grown = (np.empty(size, dtype=object), np.empty(size, dtype=object), np.empty(size, dtype=object))
            have = self._columns_n if cols is not None else 0
            if cols is not None:
                for new, old in zip(grown, cols):
                    new[:have] = old[:have]
            self._columns = cols = grown
            self._columns_n = have
        have = self._columns_n
        if have < n:
            sources: tuple[list[Any], ...] = (self.message_ids, self.thread_ids, self.resource_ids)
            for col, values in zip(cols, sources):
                col[have:n] = values[have:n]
            self._columns_n = n
        return cols

    def depth_suffices(self, qvec: np.ndarray, depth: int, thread_id: str | None) -> bool:
        """Whether ``ranked(qvec, depth, thread_id)`` is ``search(qvec, depth)``'s rows as they come, each a
        different message (``_depth_suffices``): then a hybrid search is fed those rows (``search._RowLists``)."""
        return self._depth_suffices(qvec, depth, thread_id, None)

    def _depth_suffices(self, qvec: np.ndarray, depth: int, thread_id: str | None, until: str | None) -> bool:
        """Whether ``search(qvec, depth)`` gives exactly the first ``depth`` rows of ``search(qvec, 2 * depth)``
        and those are ``depth`` different messages: every message has one row here (known once
        ``positions_of`` has mapped them), and both searches take the scan (``_search_scan``), whose order
        is total (score, then position) while ``_top`` breaks ties at its cut as ``argpartition`` left them."""
        positions = self._positions
        return (positions is not None and len(positions) == self.n and thread_id is None and until is None
                and SCAN_MIN_ROWS <= self.n < IVF_MIN_ROWS and self.n > 2 * depth
                and _groups_reproduce(self.dim) and bool(np.isfinite(qvec).all()))

    def cosines(self, qvec: np.ndarray, message_ids: list[str]) -> dict[str, float]:
        """Exact cosine of each message that has a vector (its best chunk's, if it has several)."""
        rows: list[int] = []
        owners: list[str] = []
        self.positions_of("")  # (builds the map once)
        positions = self._positions
        assert positions is not None
        found_rows = list(map(positions.get, message_ids))
        if found_rows and None not in found_rows and set(map(type, found_rows)) == {int}:
            rows, owners = cast(list[int], found_rows), message_ids  # (the common case: each message found, with one row)
            message_ids = []
        for mid in message_ids:
            found = positions.get(mid)
            if found is None:
                continue
            if type(found) is int:
                rows.append(found)
                owners.append(mid)
            else:
                rows.extend(found)  # type: ignore[arg-type]
                owners.extend([mid] * len(found))  # type: ignore[arg-type]
        if not rows:
            return {}
        # (``take`` with an index array: the same rows, in the same order, as ``self.matrix[rows]``, so the same
        # product to the bit, without converting a list of ints first)
        scores = (np.take(self._matrix, np.array(rows, dtype=np.intp), axis=0) @ qvec).tolist()
        best = dict(zip(owners, scores))
        if len(best) == len(owners):
            return best  # (one row each, each message asked once: nothing to choose between)
        best = {}
        for mid, sc in zip(owners, scores):
            if mid not in best or sc > best[mid]:
                best[mid] = sc
        return best

    def before(self, until: str) -> np.ndarray:
        """Which rows were created strictly before ``until`` (ISO text; text order is time order)."""
        if self._created is None or len(self._created) != self.n:
            self._created = np.array([c if c is not None else "\uffff" for c in self.created_at[: self.n]], dtype=str)
        return np.asarray(self._created < until)

    def search(self, query: np.ndarray, k: int, *, thread_id: str | None = None, nprobe: int | None = None,
               until: str | None = None, exclude_thread: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Positions and scores of the best rows, best first (at most ``k``). ``until``: only rows of
        messages created strictly before it are candidates (a past turn's view); ``exclude_thread``: no
        row of that thread is (an SDK session's own thread, which the model receives anyway)."""
        if self.n == 0 or k <= 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        with single_blas_thread():
            left_out = self._thread_index.get(exclude_thread) if exclude_thread is not None else None
            if thread_id is not None or until is not None or left_out is not None:
                keep = np.ones(self.n, dtype=bool)
                if thread_id is not None:
                    code = self._thread_index.get(thread_id)
                    if code is None:
                        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
                    keep &= self._thread_codes[: self.n] == code
                if left_out is not None:
                    keep &= self._thread_codes[: self.n] != left_out
                if until is not None:
                    keep &= self.before(until)
                pos = np.flatnonzero(keep)
                if 2 * len(pos) > self.n and left_out is not None:
                    # Most rows kept (a short thread left out): one product of the whole matrix, the kept
                    # rows' scores taken from it, costs less than copying those rows first.
                    return _top(pos, (self.matrix @ q)[pos], k)
                if len(pos) < self.n:
                    return _top(pos, self.matrix[pos] @ q, k)
                # Every row kept (a thread's own set narrowed to that thread): no copy of the matrix.
            if self.n >= IVF_MIN_ROWS:
                if self.partition is not None:  # partitioned by hand (``build_partition``): approximate
                    return self._search_ivf(q, k, nprobe)
                # A large set held in memory (a thread's, or a resource whose partition is not stored: a
                # read-only file) is scanned exactly by one product: clustering it here made its first
                # search wait for a k-means (3.6 s at 100,000 x 512) and the scan's dimension-major copy
                # would double its memory; the product is ~0.25 µs a row (24 ms at 100,000 x 512).
                return _top(None, self.matrix @ q, k)
            if self.n >= SCAN_MIN_ROWS and self.n > k and _groups_reproduce(self.dim) and np.isfinite(q).all():
                return self._search_scan(q, k)
            return _top(None, self.matrix @ q, k)

    def _search_scan(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``_top(None, self.matrix @ q, k)``, exactly, with ties at the cut broken by position, reading the
        matrix once through its dimension-major copy (OpenBLAS's column-major sgemv streams it at about
        three times the speed of the row-major one here: 0.63 ms against 1.73 at 10k x 512).

        The two products sum each row's terms in different orders, so their scores may differ in the last
        bits, never by more than ``2 * dim * eps * |q| * max |row|`` (each is within half that of the
        true dot product). Every row whose exact score can reach the k-th best is within twice that of
        the k-th best scan score, so those rows (about k of them) are scored again by the row-major
        product, in the same aligned groups of rows the whole product computes together: their scores
        are the whole product's, to the bit (``_groups_reproduce``)."""
        n = self.n
        if self._scan_t is None:
            self._scan_t = np.empty((self.dim, self._matrix.shape[0]), dtype=np.float32)
            self._scan_t[:, :n] = self._matrix[:n].T
        approx = q @ self._scan_t[:, :n]
        kth = np.partition(approx, n - k)[n - k]
        u = np.finfo(np.float32).eps / 2
        gamma = self.dim * u / (1 - self.dim * u)
        margin = 4.0 * gamma * float(np.linalg.norm(q.astype(np.float64))) * self._max_norm * 1.01 + 1e-30
        rows = np.flatnonzero(approx >= kth - margin)
        exact = _rescore(self._matrix, n, rows, q)
        best = np.lexsort((rows, -exact))[:k]
        return rows[best], exact[best]

    def _search_ivf(self, q: np.ndarray, k: int, nprobe: int | None) -> tuple[np.ndarray, np.ndarray]:
        part = self.partition
        if part is None or self.n - part.size > IVF_REBUILD_TAIL * part.size:
            part = self.build_partition()
        nlist = len(part.centroids)
        ranges = part.probe(q, nprobe or max(8, int(nlist * DEFAULT_NPROBE_SHARE)))
        if self.n > part.size:
            ranges.append((part.size, self.n))  # rows added since the build: scanned exactly
        pos = np.concatenate([np.arange(a, b) for a, b in ranges])
        scores = np.concatenate([self._matrix[a:b] @ q for a, b in ranges])
        return _top(pos, scores, k)

    def build_partition(self, nlist: int | None = None) -> ivf.IvfPartition:
        """Cluster the rows and reorder them so each list is a contiguous block."""
        part = ivf.build(self.matrix, nlist=nlist)
        order = part.order
        self._matrix[: self.n] = self._matrix[: self.n][order]
        self._thread_codes = self._thread_codes[order]
        self.message_ids = [self.message_ids[i] for i in order]
        self.thread_ids = [self.thread_ids[i] for i in order]
        self.resource_ids = [self.resource_ids[i] for i in order]
        self.created_at = [self.created_at[i] for i in order]
        self._created = None
        self._scan_t = None
        self._columns, self._columns_n = None, 0
        self.partition = part
        self._positions = None
        self.order_rows = OrderRows()  # (its rows moved)
        self.layout += 1
        return part


def _add_position(positions: dict[str, int | list[int]], mid: str, p: int) -> None:
    known = positions.get(mid)
    if known is None:
        positions[mid] = p
    elif type(known) is int:
        positions[mid] = [known, p]
    else:
        known.append(p)  # type: ignore[union-attr]


def _max_norm(vecs: np.ndarray) -> float:
    return float(np.sqrt(np.max(np.einsum("ij,ij->i", vecs, vecs, dtype=np.float64)))) if len(vecs) else 0.0


def _rescore(matrix: np.ndarray, n: int, rows: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``(matrix[:n] @ q)[rows]`` to the bit. OpenBLAS's row-major sgemv computes the rows in groups of
    ``_GROUP`` with one kernel, each row's score depending on nothing else, then the last ``n % _GROUP``
    rows with another (the same bits as a product of those rows with one whole group before them). So
    ``rows`` (ascending) are gathered into one matrix padded to whole groups, and those of the last
    partial group are taken from a product of the matrix's last rows."""
    whole = n // _GROUP * _GROUP
    body = int(np.searchsorted(rows, whole))
    scores = np.empty(len(rows), dtype=np.float32)
    if body:
        gathered = np.empty(((body + _GROUP - 1) // _GROUP * _GROUP, matrix.shape[1]), dtype=np.float32)
        gathered[body:] = 0.0  # (the padding only: the rows are written by ``take``)
        np.take(matrix, rows[:body], axis=0, out=gathered[:body])
        scores[:body] = (gathered @ q)[:body]
    if body < len(rows):
        start = max(whole - _GROUP, 0)
        scores[body:] = (matrix[start:n] @ q)[rows[body:] - start]
    return scores


_REPRODUCES: dict[int, bool] = {}


def _groups_reproduce(dim: int) -> bool:
    """Whether this BLAS computes a row-major matrix-vector product as ``_rescore`` expects, so that it
    gives the whole product's bits: checked once per dimension, on random rows of every size modulo
    ``_GROUP``, every row; where it does not hold, the scan is not used."""
    known = _REPRODUCES.get(dim)
    if known is None:
        rng = np.random.default_rng(dim)
        known = True
        with single_blas_thread():
            for n in (*range(1, 3 * _GROUP), 63 * _GROUP + 1, 257 * _GROUP + 2, 259 * _GROUP + 3, 256 * _GROUP):
                m = rng.random((n, dim), dtype=np.float32) - 0.5
                q = rng.standard_normal(dim).astype(np.float32)
                rows = np.arange(n)
                full = m @ q
                if not (np.array_equal(_rescore(m, n, rows, q), full)
                        and np.array_equal(_rescore(m, n, rows[n // 3 :: 3], q), full[n // 3 :: 3])):
                    known = False
                    break
        _REPRODUCES[dim] = known
    return known


def _top(pos: np.ndarray | None, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    k = min(k, len(scores))
    if k == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
    best = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
    best = best[np.argsort(-scores[best], kind="stable")]
    return (best if pos is None else pos[best]), scores[best]
