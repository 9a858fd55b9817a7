"""A list of an export file kept on disk while import reads it, so its rows are never all held at once (and a
working-memory history an export reads before it writes it).

An export's messages are nearly all of it (a 1.0 GB file: 62,000 messages of ~16 KB). ``load`` hands them to a
``RowSpool`` as the file is parsed (``stream_json``), and every reader after that, the checks of ``validate``
and the importer's writes, goes through them again from the spool, a batch at a time: what is held is a batch
and the few small facts the checks keep per row (ids, their threads). Rows are stored with ``marshal``, which
gives back exactly the values ``json`` made (dicts, lists, strings, numbers, booleans, None) and runs no code.

A list nested in the rows of a list (a working-memory entry's ``versions``) is kept the same way: the rows of all
such lists go to one spool shared by the outer list, and each row holds a ``SpoolPart`` where its list was, the
records of that spool its list's rows were written to.

The version histories (working-memory, message and observation-log versions) are written oldest first, so the
importer reads them through ``sorted_rows``: an external merge sort whose runs are spools too, so that sort holds a
bounded part of them as well.

A spool is written once: after ``close`` its rows never change. Each record's length and SHA-256 are kept in memory
as it is written, and every read checks the bytes it reads against them (``SpoolError`` if they differ), so every
reader gets exactly the rows the file held. That is what lets ``validate`` remember that a document's rows passed
(``checked``) instead of reading them all again for the same checks.

The spool is a file in a folder of its own under the system's temporary folder (``TMPDIR``), readable by its
owner only, and deleted when the ``RowSpool`` is (``discard``, or when it is garbage collected). A spool that
cannot be written (the temporary folder full or not writable) is ``SpoolError``, saying so.
"""

from __future__ import annotations

import hashlib
import heapq
import marshal
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from core.transfer.errors import TransferError

BATCH = 256  # rows per record of the spool: what a reader holds at a time
#: ``append(row, size)``: a record ends once the sizes given add up to this many bytes (an export's messages may be
#: up to a megabyte each: 256 of them would be held while their record is written and again while it is read).
RECORD_BYTES = 4 << 20
#: ``sorted_rows``: about how many bytes of rows (their marshal form) it sorts in memory at a time, and about how
#: big one record of a sorted run may be (what the merge holds per run).
SORT_BYTES = 32 << 20
RUN_RECORD_BYTES = 1 << 20


#: How an export keeps a list that grows with the history (``export._Kept``), given its rows and what they are in
#: words: a list, or a ``RowSpool`` filled as the rows are read.
Keep = Callable[[Iterable[dict[str, Any]], str], "list[dict[str, Any]] | RowSpool"]


class SpoolError(TransferError):
    """The rows could not be kept in a temporary file (its folder full or not writable)."""


class RowSpool:
    """The rows of one list of an export file, on disk: ``append`` while the file is parsed, then ``close``; read
    again by every ``for row in spool``, in order. ``len`` is the number of rows. Used where the document's list
    was (``Mapping`` rows, read only by iterating). ``job``: ``"import"``, or ``"export"`` for the rows an export
    reads from the database before it writes them to the file (its errors say which)."""

    def __init__(self, what: str = "rows", batch: int = BATCH, *, job: str = "import") -> None:
        self.what = what
        self.job = job
        self._batch = max(1, batch)
        try:
            self._folder = tempfile.mkdtemp(prefix=f"memory-studio-{job}-")  # readable by its owner only
        except OSError as exc:
            raise self._failed(exc) from None
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._folder, True)
        self._path = os.path.join(self._folder, "rows")
        try:
            self._out: Any = open(self._path, "wb")  # noqa: SIM115 - closed by ``close``
        except OSError as exc:
            self._cleanup()
            raise self._failed(exc) from None
        self._pending: list[Any] = []
        self._pending_bytes = 0
        self._count = 0
        self._records: list[tuple[int, bytes]] = []  # each record's length and SHA-256, in the file's order
        self._starts: list[int] = []  # where each record starts in the file
        self._size = 0  # bytes written
        self.checked: Any = None  # what ``format.validate`` found the document holding this spool to pass with

    def _failed(self, exc: OSError) -> SpoolError:
        where = getattr(self, "_folder", None) or tempfile.gettempdir()
        if self.job == "export":
            return SpoolError(
                f"Export keeps the {self.what} in a temporary file between reading them and writing the file, and "
                f"{where} could not take them: {exc.strerror or exc}. Nothing was written. Free space there, or point "
                "TMPDIR at a folder with room (about the export's size), and export again.")
        return SpoolError(
            f"Import keeps the file's {self.what} in a temporary file while it reads them, and {where} could not take "
            f"them: {exc.strerror or exc}. Nothing was imported. Free space there, or point TMPDIR at a folder with "
            "room (about the file's size), and import again.")

    def append(self, row: Any, size: int = 0) -> None:
        """Keep ``row``; ``size``: about how many bytes it is (its text), so a record of large rows ends sooner."""
        if self._out is None:
            raise RuntimeError("a RowSpool is not appended to after close()")
        self._pending.append(row)
        self._pending_bytes += size
        self._count += 1
        if len(self._pending) >= self._batch or self._pending_bytes >= RECORD_BYTES:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        record = marshal.dumps(self._pending)
        try:
            self._out.write(record)
        except OSError as exc:
            raise self._failed(exc) from None
        self._records.append((len(record), hashlib.sha256(record).digest()))
        self._starts.append(self._size)
        self._size += len(record)
        self._pending = []
        self._pending_bytes = 0

    def mark(self) -> tuple[int, int]:
        """Where the rows appended from now on begin, for ``part``: a part starts a record of its own."""
        self._flush()
        return len(self._records), self._count

    def part(self, mark: tuple[int, int]) -> SpoolPart:
        """The rows appended since ``mark``, read as a list of their own (its records end here)."""
        self._flush()
        first, count = mark
        return SpoolPart(self, first, len(self._records), self._count - count)

    def close(self) -> RowSpool:
        """Done appending: the rows are on disk (a spool is read only once closed)."""
        if self._out is not None:
            self._flush()
            try:
                self._out.close()
            except OSError as exc:
                raise self._failed(exc) from None
            self._out = None
        return self

    def discard(self) -> None:
        """Delete the spool now (its rows can no longer be read)."""
        if self._out is not None:
            self._out.close()
            self._out = None
        self._cleanup()

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        return self._read(0, len(self._records))

    def _read(self, first: int, stop: int) -> Iterator[Mapping[str, Any]]:
        """The rows of records ``first`` to ``stop`` (not included), each record checked as it is read."""
        if self._out is not None:
            raise RuntimeError("a RowSpool is read only after close()")
        if first >= stop:
            return
        try:
            fh = open(self._path, "rb")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise self._changed(f"it cannot be opened: {exc.strerror or exc}") from None
        with fh:
            fh.seek(self._starts[first])
            for size, digest in self._records[first:stop]:
                record = fh.read(size)
                if len(record) != size or hashlib.sha256(record).digest() != digest:
                    raise self._changed(f"its bytes are not the ones {self.job} wrote")
                yield from marshal.loads(record)

    def _changed(self, what: str) -> SpoolError:
        if self.job == "export":
            return SpoolError(
                f"Export kept the {self.what} in {self._path} between reading them and writing the file, and that "
                f"file changed ({what}): another program wrote to or removed it. The export was not written. Export "
                "again, and leave the temporary folder alone while it runs.")
        return SpoolError(
            f"Import kept the file's {self.what} in {self._path} while it read them, and that file changed ({what}): "
            "another program wrote to or removed it. Nothing was imported. Import again, and leave the temporary "
            "folder alone while it runs.")

    def __repr__(self) -> str:
        return f"<RowSpool of {self._count} {self.what}>"


class SpoolPart:
    """A list nested in a row of the file, kept in a ``RowSpool`` shared with the other rows' lists (``RowSpool.part``):
    read again by every ``for row in part``, in order, each read checked as the spool's are. ``len``: its rows."""

    def __init__(self, spool: RowSpool, first: int, stop: int, count: int) -> None:
        self.spool = spool
        self._first, self._stop, self._count = first, stop, count

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        return self.spool._read(self._first, self._stop)

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __repr__(self) -> str:
        # Which spool and which records: ``format.validate``'s memory of a checked document tells parts apart by it.
        return f"<SpoolPart of {self._count} {self.spool.what}: records {self._first}-{self._stop} of {id(self.spool):#x}>"


def sorted_rows(rows: Iterable[Any], key: Callable[[Any], Any], what: str = "rows", *,
                held_bytes: int | None = None) -> Iterator[Any]:
    """``rows`` in the order ``sorted(rows, key=key)`` gives (stable: rows with equal keys keep their order),
    holding about ``held_bytes`` (default ``SORT_BYTES``) of rows at a time. Rows that fit are sorted in memory;
    otherwise each ``held_bytes`` of them is sorted and kept on disk as a run (a ``RowSpool``, checked on every read
    like the file's), and the runs are merged, holding one record of each (about ``RUN_RECORD_BYTES``).
    ``heapq.merge`` is stable across runs in the order they are given, so the result is exactly ``sorted``'s. The
    runs are deleted when the rows have all been given, or when the caller stops reading (an error)."""
    held_bytes = SORT_BYTES if held_bytes is None else held_bytes
    runs: list[RowSpool] = []
    chunk: list[Any] = []
    size = 0
    try:
        for row in rows:
            chunk.append(row)
            size += len(marshal.dumps(row))
            if size >= held_bytes:
                runs.append(_run(chunk, key, size, what))
                chunk, size = [], 0
        if not runs:
            yield from sorted(chunk, key=key)
            return
        if chunk:
            runs.append(_run(chunk, key, size, what))
        chunk = []
        yield from heapq.merge(*runs, key=key)
    finally:
        for run in runs:
            run.discard()


def _run(chunk: list[Any], key: Callable[[Any], Any], size: int, what: str) -> RowSpool:
    chunk.sort(key=key)
    run = RowSpool(what, batch=max(1, RUN_RECORD_BYTES * len(chunk) // max(size, 1)))
    try:
        for row in chunk:
            run.append(row)
        return run.close()
    except BaseException:
        run.discard()
        raise


__all__ = ["BATCH", "Keep", "RECORD_BYTES", "RUN_RECORD_BYTES", "SORT_BYTES", "RowSpool", "SpoolError", "SpoolPart", "sorted_rows"]
