"""Buffered span export into the DuckDB store (or a Postgres database's span table, through the same
write/prune API: ``core.traces.pg_store``), so tracing never slows or fails an agent run.

``export`` only appends to an in-memory queue. A background thread writes the queue in batches;
the end of an agent run (a root span arriving) wakes it at once, unless it wrote less than
``flush_interval_s`` ago: then the spans wait for the rest of that interval, so runs that follow
each other closely share one write (each write opens the file, about 60–85 ms of CPU on 2 busy cores,
which would otherwise compete with the runs themselves). Only a queue past its high-water mark (a
quarter of ``max_queue``, at least ``batch_size``) is written before the interval is over, and a
write takes up to that many spans at once, so a steady stream of turns opens the file about once a
second. When the file is busy (the Studio is reading it, or another agent process is writing) the
spans simply stay queued.

If the queue outgrows ``max_queue`` the oldest spans are spilled to a JSONL side file next to the
database rather than dropped: a trace is how a user finds out what the model actually received, so
losing one to a busy file is worse than a few extra kilobytes on disk, and appending a local file
needs no lock. Every flush, in any process, imports the spill files it finds (claimed by rename,
so two importers never take the same file; re-importing is harmless because a stored span is
never overwritten). Only a failure to write the spill file itself drops spans, and those are
counted in ``stats.dropped`` and logged.

A batch that fails for a reason retrying cannot cure (a span the store cannot convert, such as text
with a lone surrogate) would otherwise be retried forever, holding every later span in the queue.
Such a failure is split until the bad spans are found; the others are written, and each bad span is
set aside as a *poison pill*: logged, counted in ``stats.poisoned`` and kept in a ``.poison-*.jsonl``
file beside the store (escaped, so it can always be written), and the flusher goes on.

Runs in progress: a span that is still open ``running_after_s`` after it started is written as a
*running row* (``core.traces.live``: its values so far, no end time, and the mark of this process's
lease: a lock file beside a DuckDB file, an advisory lock in a Postgres database, made at the first
running row) by the next write, once; its end replaces the row. A span that ends sooner costs nothing but a
dict entry, so an ordinary turn writes what it wrote before. At shutdown every span still open is
written as a running row, and the lease ends: a reader then sees that run never finished.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import duckdb

from core.traces.store import DuckDBObservabilityStore, RetentionSettings
from core.traces.live import Lease, WriterLease, running_writer
from core.traces.locking import StoreBusy
from core.traces.spans import PruneResult, SpanRecord
from core.stored_text import json_text

if TYPE_CHECKING:  # pragma: no cover
    from core.traces.tracer import Span

log = logging.getLogger(__name__)

_SPILL_INFIX = ".spill-"
#: How often the writer, keeping the trace file open, looks whether someone waits for it.
LEASE_CHECK_S = 0.02
_CLAIM_INFIX = ".importing-"
_POISON_INFIX = ".poison-"
# Failures that say the data is wrong, not the store: retrying the same spans cannot help.
_DATA_ERRORS: tuple[type[BaseException], ...] = (
    UnicodeError, ValueError, OverflowError, RecursionError, duckdb.InvalidInputException,
    duckdb.ConversionException, duckdb.TypeMismatchException, duckdb.OutOfRangeException,
)


@dataclass
class ExporterStats:
    exported: int = 0  # handed to export()
    written: int = 0  # committed to DuckDB (including imported spill spans)
    spilled: int = 0  # moved from the queue to a side file because the queue was full
    imported: int = 0  # read back from side files and committed
    dropped: int = 0  # lost: the side file could not be written either
    busy: int = 0  # flush attempts that found the file locked
    failures: int = 0  # flush attempts that failed for another reason
    poisoned: int = 0  # set aside: spans the store can never take (kept in a .poison-*.jsonl file)
    last_error: str | None = None


class SpanSink(Protocol):
    """Where the exporter writes: ``DuckDBObservabilityStore`` or ``PgSpanStore``."""

    retention: RetentionSettings
    #: Whether a running row (``endedAt`` null, ``core.traces.live``) is later replaced by the finished
    #: span; only then are spans shown while they run (a sink without the attribute: not).
    running_rows: bool

    @property
    def path(self) -> Path:
        """Spill files go beside this path (for Postgres: a local folder standing for the database)."""

    def write_spans(self, spans: Sequence[SpanRecord], budget_s: float | None = None) -> int: ...

    def prune(self, keep_days: float | None = None, keep_mb: float | None = None, *, compact: bool = True,
              budget_s: float = 10.0) -> PruneResult: ...


class DuckDBSpanExporter:
    """A ``SpanExporter`` that batches spans into a ``DuckDBObservabilityStore`` (or another ``SpanSink``)."""

    def __init__(
        self,
        store: SpanSink | str | os.PathLike[str],
        *,
        max_queue: int = 10_000,
        batch_size: int = 500,
        flush_interval_s: float = 1.0,
        write_budget_s: float = 0.25,
        prune_interval_s: float | None = 3600.0,
        background: bool = True,
        running_after_s: float = 0.5,
        max_open: int = 10_000,
    ) -> None:
        self.store: SpanSink = DuckDBObservabilityStore(store) if isinstance(store, (str, os.PathLike)) else store
        self.max_queue = max_queue
        self.batch_size = batch_size
        self.flush_interval_s = flush_interval_s
        self.write_budget_s = write_budget_s
        self.prune_interval_s = prune_interval_s
        self.running_after_s = running_after_s
        self.max_open = max_open
        self.stats = ExporterStats()
        self._queue: deque[SpanRecord] = deque()
        self._cond = threading.Condition()
        self._flush_lock = threading.Lock()
        self._wake = False
        self._stopped = False
        self._next_prune = time.monotonic()
        self._last_write = -float("inf")  # monotonic time the flusher last wrote (paces root-span wakes)
        self._last_spans = -float("inf")  # monotonic time spans were last written (a kept connection's idle time)
        # Spans that end the pacing wait early: a quarter of the queue's room (so a steady stream of
        # turns is written about once per ``flush_interval_s``, long before anything would spill),
        # never less than one batch.
        self._high_water = max(batch_size, max_queue // 4)
        # The background writer keeps the trace file open between its writes while runs keep coming
        # (``keep``), and lets go within ``LEASE_CHECK_S`` of anyone waiting for it, or once nothing
        # was written for ``2 * flush_interval_s``. Without a background thread nothing would watch.
        # Only the DuckDB file is worth keeping open (a Postgres store's connections are pooled).
        self._kept: DuckDBObservabilityStore | None = \
            self.store if background and isinstance(self.store, DuckDBObservabilityStore) else None
        if self._kept is not None:
            self._kept.keep_connection = True
        # Spans started and not yet ended (with when they started), and those of them written as running
        # rows; only kept when the sink replaces running rows (one that does not say so: not), with this
        # process's lease as the proof of life their rows name (made at the first running row).
        self._live = bool(getattr(self.store, "running_rows", False))
        self._lease: Lease | None = None
        # Whether the sink has settled where this writer's spans go (``claim``: a DuckDB store opened for
        # a database claims the folder's shared trace file at its first span). Until then this writer
        # neither imports spill files nor prunes: a process with tracing off changes nothing there.
        self._claimed = not getattr(self.store, "claim_pending", False)
        self._open: dict[tuple[str, str], tuple[Span, float]] = {}
        self._placed: set[tuple[str, str]] = set()
        self._all_open = False  # shutting down: every open span becomes a running row
        self._release_orphan_claims()
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._run, name="span-flusher", daemon=True)
            self._thread.start()
        atexit.register(self._at_exit)

    # -- SpanExporter --------------------------------------------------------------------------

    def span_started(self, span: Span) -> None:
        """Note an open span (``LiveSpanExporter``): a dict entry, nothing more, on the run's thread."""
        if self._live:
            self._open[(span.trace_id, span.span_id)] = (span, time.monotonic())

    def export(self, spans: Sequence[SpanRecord]) -> None:
        overflow: list[SpanRecord] = []
        with self._cond:
            if self._open:
                for span in spans:
                    key = (span.trace_id, span.span_id)
                    self._open.pop(key, None)
                    self._placed.discard(key)
            self._queue.extend(spans)
            self.stats.exported += len(spans)
            if len(self._queue) > self.max_queue:
                # Spill a quarter more than needed so a steady overflow spills in chunks.
                n = len(self._queue) - self.max_queue + self.max_queue // 4
                overflow = [self._queue.popleft() for _ in range(min(n, len(self._queue)))]
            # A root span (the end of a run) wakes the flusher once: while ``_wake`` is still set it has
            # been notified already (it is waking, or pacing until the interval is over, a wait that
            # only the high-water mark or shutdown ends), so waking it again for every later run
            # would only cost both threads a switch of the GIL per turn.
            if len(self._queue) >= self._high_water or (
                    not self._wake and any(s.parent_span_id is None for s in spans)):
                self._wake = True
                self._cond.notify()
        if overflow:
            self._spill(overflow)

    def flush(self, timeout: float | None = None) -> bool:
        """Write everything queued or spilled; True when nothing is left.

        Bounded by ``timeout``; without one it is a best-effort attempt of ``write_budget_s``,
        because the agent runtime calls ``flush()`` at the end of every run and a busy trace file
        must not hold up the reply. Whatever is left is written by the background thread.
        The file is let go of afterwards (a kept connection is closed), so whoever asked for the
        flush can open it at once; the background writer keeps it only between its own writes.
        """
        try:
            return self._flush_all(timeout)
        finally:
            self._release(force=True)

    def _flush_all(self, timeout: float | None) -> bool:
        deadline = time.monotonic() + (timeout if timeout is not None else self.write_budget_s)
        delay = 0.005
        while True:
            remaining = deadline - time.monotonic()
            # Up to the high-water mark per write, as the flusher writes: one file open, not one a batch.
            if self._flush_once(min(self.write_budget_s, max(remaining, 0.0)), limit=self._high_water) \
                    and self._idle():
                return True
            if time.monotonic() >= deadline:
                return self._idle()
            if self._pending():
                time.sleep(min(delay, max(deadline - time.monotonic(), 0)))
                delay = min(delay * 2, 0.1)

    def shutdown(self, timeout: float | None = 2.0) -> None:
        """Stop the flusher, write what it can within ``timeout``, spill the rest to disk."""
        with self._cond:
            if self._stopped:
                return
            self._stopped = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout)
        self._all_open = True  # a run still open when the process ends is written as running, never lost
        self.flush(timeout)
        with self._cond:
            rest = list(self._queue)
            self._queue.clear()
        rest += self._running_rows()  # open spans the flush could not write (busy): spilled with the rest
        if rest:
            self._spill(rest)
        if self._kept is not None:
            self._kept.keep_connection = False
        self._release(force=True)
        if self._lease is not None:
            self._lease.close()  # from now on this process's running rows read as never finished
        atexit.unregister(self._at_exit)

    @property
    def queued(self) -> int:
        return len(self._queue)

    # -- internals -----------------------------------------------------------------------------

    def _at_exit(self) -> None:
        self.shutdown(1.0)

    def _wait(self, predicate: Callable[[], bool], timeout: float) -> None:
        """Wait on the condition for ``predicate`` or ``timeout``; while the store keeps a connection
        open, in slices of ``LEASE_CHECK_S``, letting it go between them when someone waits for the
        file or the writer has been idle (outside the condition's lock: closing takes milliseconds,
        and ``export`` must never wait for it)."""
        deadline = time.monotonic() + timeout
        while True:
            held = self._kept is not None and self._kept.holds_connection()
            remaining = deadline - time.monotonic()
            with self._cond:
                if self._cond.wait_for(predicate, timeout=max(min(remaining, LEASE_CHECK_S) if held else remaining, 0)):
                    return
            if time.monotonic() >= deadline:
                return
            if held:
                self._release(force=time.monotonic() - self._last_spans >= 2 * self.flush_interval_s)

    def _release(self, *, force: bool) -> None:
        if self._kept is None:
            return
        try:
            self._kept.release_connection(force=force)
        except Exception:  # noqa: BLE001 - closing a kept connection must not stop the flusher
            log.warning("closing the kept trace-store connection failed", exc_info=True)

    def _run(self) -> None:
        backoff = self.flush_interval_s
        while True:
            self._wait(lambda: self._wake or self._stopped, backoff)
            # Paced: a wake within flush_interval_s of the last write waits out the interval
            # (a queue past the high-water mark or shutdown does not), so a burst of runs is
            # written together.
            pace = self._last_write + self.flush_interval_s - time.monotonic()
            if pace > 0:
                self._wait(lambda: self._stopped or len(self._queue) >= self._high_water, pace)
            with self._cond:
                self._wake = False
                if self._stopped:
                    return
            self._last_write = time.monotonic()
            try:
                # Up to a high-water mark of spans in one write: each write opens the file (~60 ms of
                # CPU whatever its size, against ~0.1 ms a span), so batches of ``batch_size`` each
                # opening it again cost a steady stream of turns more than the turns themselves.
                ok = self._flush_once(self.write_budget_s, limit=self._high_water)
                while ok and len(self._queue) >= self._high_water and not self._stopped:
                    ok = self._flush_once(self.write_budget_s, limit=self._high_water)
                self._maybe_prune()
            except Exception:  # noqa: BLE001 - the flusher must outlive any single bad batch
                log.exception("span flusher iteration failed")
                ok = False
            # Back off while the file is busy so a long reader is not hammered; reset on success.
            backoff = self.flush_interval_s if ok else min(backoff * 2, 5.0)

    def _pending(self) -> bool:
        return bool(self._queue) or (self._claimed and bool(self._spill_files()))

    def _claim_store(self) -> None:
        """Before this writer's first span goes anywhere (the store, a spill file, a lease beside it):
        let the store settle its file (``DuckDBObservabilityStore.claim``), once."""
        if self._claimed:
            return
        self._claimed = True
        claim = getattr(self.store, "claim", None)
        if callable(claim):
            try:
                claim()
            except Exception:  # noqa: BLE001 - the spans are kept; the write that follows says what is wrong
                log.warning("could not settle where this database's traces go", exc_info=True)

    def _writer_lease(self) -> Lease:
        if self._lease is None:
            make = getattr(self.store, "writer_lease", None)
            self._lease = make() if callable(make) else WriterLease(self.store.path)
        return self._lease

    def _bound_open(self) -> None:
        """Keep at most ``max_open`` open spans in mind (under ``_cond``). A span that never ends (its run
        abandoned without closing it) would otherwise be kept, and looked at by every write, for the life
        of the process. Only spans already written as running rows (or ended) are let go, oldest first:
        nothing is lost, since a running row stays in the store and a span's end is written whenever
        it comes."""
        excess = len(self._open) - self.max_open
        if excess <= 0:
            return
        for key in [k for k, (span, _) in self._open.items() if k in self._placed or span.ended][:excess]:
            del self._open[key]
            self._placed.discard(key)

    def _due_running(self) -> list[tuple[tuple[str, str], Span]]:
        """Open spans to write as running rows now: open ``running_after_s`` (all at shutdown), not yet written."""
        if not self._open:
            return []
        now = time.monotonic()
        return [(key, span) for key, (span, began) in list(self._open.items())
                if key not in self._placed and not span.ended
                and (self._all_open or now - began >= self.running_after_s)]

    def _running_rows(self) -> list[SpanRecord]:
        """Snapshots of the spans ``_due_running`` names, marked with this process's lease."""
        due = self._due_running()
        if not due or not self._live:
            return []
        lease = self._writer_lease()
        if not lease.acquire():
            return []
        rows: list[SpanRecord] = []
        for _key, span in due:
            try:
                record = span.snapshot()
            except Exception:  # noqa: BLE001 - a value changing under the snapshot: taken again next time
                log.debug("a running span could not be read; tried again at the next write", exc_info=True)
                continue
            if span.ended:
                continue  # ended meanwhile: its finished record is on its way
            metadata = record.metadata if isinstance(record.metadata, dict) else (
                {} if record.metadata is None else {"value": record.metadata})
            rows.append(replace(record, ended_at=None, updated_at=None,
                                metadata={**metadata, **lease.mark}))
        return rows

    def _idle(self) -> bool:
        return not self._pending()

    def _flush_once(self, budget_s: float, limit: int | None = None) -> bool:
        """One write of at most ``limit`` queued spans (default ``batch_size``), plus any spill files;
        True unless the store was busy or failed."""
        with self._flush_lock:
            if not self._claimed:
                if not self._queue and not self._due_running():
                    return True  # nothing of this writer's own yet: leave the store (and its spill files) alone
                self._claim_store()
            if self._placed and self._lease is not None:
                self._lease.keep()  # running rows of this writer are open: its lease must still hold
            claimed: list[Path] = []
            spilled: list[SpanRecord] = []
            for path in self._claim_spill_files():
                try:
                    spilled.extend(_read_spill(path))
                except (OSError, ValueError, TypeError) as exc:
                    # Set aside, not deleted: a person may still want to look at it.
                    log.error("unreadable span spill file %s: %s", path.name, exc)
                    path.rename(path.with_name(path.name + ".corrupt"))
                    continue
                claimed.append(path)
            with self._cond:
                batch = [self._queue.popleft() for _ in range(min(limit or self.batch_size, len(self._queue)))]
            running = self._running_rows()  # after the batch: a span that ended by now is in it, not here
            if not batch and not spilled and not running:
                return True
            poisoned: set[tuple[str, str]] = set()
            try:
                self._write(spilled + batch + running, budget_s, poisoned)
            except StoreBusy:
                self.stats.busy += 1
                self._requeue(_without(batch, poisoned), claimed)
                return False
            except Exception as exc:  # noqa: BLE001 - keep the spans; report, never raise
                self.stats.failures += 1
                self.stats.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("span flush failed, will retry: %s", self.stats.last_error)
                self._requeue(_without(batch, poisoned), claimed)
                return False
            for path in claimed:
                path.unlink(missing_ok=True)
            if running:  # running rows are not queued: one that was not written is taken again next time
                with self._cond:
                    self._placed.update(k for k in map(_key, running) if k in self._open)
                    self._bound_open()
            self._last_spans = time.monotonic()
            self.stats.written += len(batch) + len(spilled)
            self.stats.imported += len(spilled)
            return True

    def _write(self, spans: list[SpanRecord], budget_s: float, poisoned: set[tuple[str, str]]) -> None:
        """Write ``spans``; when the store refuses them for a data reason, write the ones it takes and
        set the others aside (their keys go into ``poisoned``). Other failures propagate."""
        try:
            self.store.write_spans(spans, budget_s=budget_s)
        except StoreBusy:
            raise
        except _DATA_ERRORS as exc:
            if len(spans) == 1:
                if spans[0].ended_at is None and running_writer(spans[0].metadata):
                    # A running row the store cannot take: its finished span will be set aside if it fails too.
                    log.debug("running row of span %s not stored: %s", spans[0].span_id, exc)
                    poisoned.add(_key(spans[0]))
                    return
                self._set_aside(spans[0], exc)
                poisoned.add(_key(spans[0]))
                return
            middle = len(spans) // 2
            self._write(spans[:middle], budget_s, poisoned)
            self._write(spans[middle:], budget_s, poisoned)

    def _set_aside(self, span: SpanRecord, exc: BaseException) -> None:
        self.stats.poisoned += 1
        self.stats.last_error = f"{type(exc).__name__}: {exc}"
        db = self.store.path
        target = db.with_name(f"{db.name}{_POISON_INFIX}{os.getpid()}.jsonl")
        try:
            db.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "a", encoding="utf-8") as fh:
                fh.write(json_text(span.to_json_dict(), ensure_ascii=True, default=str) + "\n")
            kept = f"kept in {target.name}"
        except OSError as err:
            kept = f"not kept ({err})"
        log.error("span %s (%r) of trace %s can never be stored and was set aside (%s): %s", span.span_id,
                  span.name, span.trace_id, kept, self.stats.last_error)

    def _requeue(self, batch: list[SpanRecord], claimed: list[Path]) -> None:
        with self._cond:
            self._queue.extendleft(reversed(batch))
        for path in claimed:  # give the file back so any process may import it later
            path.rename(_unclaimed_name(path))

    def _maybe_prune(self) -> None:
        if not self._claimed:
            return  # (a writer that wrote nothing changes nothing)
        retention = self.store.retention
        if self.prune_interval_s is None or (retention.keep_days is None and retention.keep_mb is None):
            return
        if time.monotonic() < self._next_prune:
            return
        self._next_prune = time.monotonic() + self.prune_interval_s
        # Delete only: rewriting the file is a job for the CLI; freed blocks get reused anyway.
        self.store.prune(compact=False, budget_s=self.write_budget_s)

    # -- spill files ---------------------------------------------------------------------------

    def _spill_files(self) -> list[Path]:
        db = self.store.path
        if not db.parent.exists():
            return []
        return sorted(db.parent.glob(f"{db.name}{_SPILL_INFIX}*.jsonl"))

    def _spill(self, spans: list[SpanRecord]) -> None:
        self._claim_store()
        db = self.store.path
        final = db.with_name(f"{db.name}{_SPILL_INFIX}{os.getpid()}-{uuid.uuid4().hex}.jsonl")
        tmp = final.with_suffix(".tmp")
        try:
            db.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as fh:
                for span in spans:
                    fh.write(_spill_line(span))
            os.replace(tmp, final)  # importers only ever see complete files
        except OSError as exc:
            self.stats.dropped += len(spans)
            self.stats.last_error = f"spill failed: {exc}"
            log.error("dropped %d spans: trace store busy and spill file failed: %s", len(spans), exc)
            return
        self.stats.spilled += len(spans)
        log.warning("span queue full (trace store slow or busy): spilled %d spans to %s",
                    len(spans), final.name)

    def _claim_spill_files(self) -> list[Path]:
        claimed: list[Path] = []
        for path in self._spill_files():
            target = path.with_name(f"{path.name}{_CLAIM_INFIX}{os.getpid()}")
            try:
                path.rename(target)
            except OSError:
                continue  # another process claimed it first
            claimed.append(target)
        return claimed

    def _release_orphan_claims(self) -> None:
        """Give back files claimed by a process that died mid-import."""
        db = self.store.path
        if not db.parent.exists():
            return
        for path in db.parent.glob(f"{db.name}{_SPILL_INFIX}*.jsonl{_CLAIM_INFIX}*"):
            pid = path.name.rsplit(_CLAIM_INFIX, 1)[1]
            if pid.isdigit() and not _pid_alive(int(pid)):
                try:
                    path.rename(_unclaimed_name(path))
                except OSError:
                    pass


def _key(span: SpanRecord) -> tuple[str, str]:
    return span.trace_id, span.span_id


def _without(spans: list[SpanRecord], keys: set[tuple[str, str]]) -> list[SpanRecord]:
    return [s for s in spans if _key(s) not in keys] if keys else spans


def _spill_line(span: SpanRecord) -> str:
    """One span as a JSONL line; text that has no UTF-8 form (a lone surrogate) is escaped, so a
    spill never fails on a span (importing it back then sets it aside)."""
    data = span.to_json_dict()
    line = json_text(data, ensure_ascii=False, default=str) + "\n"
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        line = json_text(data, ensure_ascii=True, default=str) + "\n"
    return line


def _unclaimed_name(path: Path) -> Path:
    return path.with_name(path.name.rsplit(_CLAIM_INFIX, 1)[0])


def _read_spill(path: Path) -> list[SpanRecord]:
    spans: list[SpanRecord] = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                spans.append(SpanRecord.from_json_dict(json.loads(line)))
    return spans


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists but not ours
    return True
