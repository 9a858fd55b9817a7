"""Background memory work: what a turn hands off so that it does not wait for it.

One ``BackgroundWork`` belongs to each ``Memory`` (``Memory.background``). Processors submit jobs
through ``MemoryServices.background``: observations and reflections buffered ahead of their
threshold, generated thread titles, embeddings. A job is a function of a ``CancelToken``; it reads
what it needs from storage when it starts (never a turn's snapshot) and checks the token before
it writes.

Rules:

- Jobs with the same *key* (``om:thread:<id>``, ``title:<thread>``...) run one at a time, in the
  order submitted; jobs with different keys run side by side on up to ``max_workers`` threads.
- A job submitted while an identical one (same key and kind) is still queued joins it instead of
  queueing again (the queued one will read the newer state anyway).
- A failing job is logged and kept on its ``BackgroundJob``; it never reaches the turn.
- ``wait_idle(timeout)`` returns True once nothing is queued or running; ``wait_key`` does the same
  for one key (a turn that must block on an observation waits for that key only); its ``give_up``
  ends the wait early (the turn was stopped: ``wake`` makes the waiter look), the jobs going on.
- ``close()`` (called by ``Store.close()`` for every memory of the store, and at interpreter exit)
  refuses new work, lets the queued work finish within ``timeout``, then cancels what has not
  started and tells running jobs to stop before their next write. Nothing a job does is part of a
  turn's own transaction, so the worst a crash loses is work that had not been written yet (a
  buffered observation that was not yet activated); messages are saved by the turn itself.

Threads are started when work arrives and end when none is left, so an idle memory holds none.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

from core.errors import MemoryStudioError

log = logging.getLogger(__name__)

#: The kinds of work a memory runs in the background (free text is allowed; these are ours).
KINDS = ("observation", "reflection", "title", "embeddings")

# How long interpreter exit waits for queued memory work (a title, a buffered observation).
EXIT_WAIT_SECONDS = 10.0


class BackgroundClosedError(MemoryStudioError, RuntimeError):
    """Work was submitted after the memory's background work was closed (its store was closed)."""


class CancelToken:
    """Handed to every job: ``cancelled`` becomes True when the work is being shut down."""

    def __init__(self) -> None:
        self._event = threading.Event()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        self._event.set()


@dataclass
class BackgroundJob:
    """One submitted piece of work and what became of it."""

    id: int
    kind: str
    key: str
    description: str
    fn: Callable[[CancelToken], Any] = field(repr=False)
    submitted_at: float = field(default_factory=time.monotonic)
    state: str = "queued"  # queued | running | done | failed | cancelled
    result: Any = None
    error: BaseException | None = None
    _done: threading.Event = field(default_factory=threading.Event, repr=False)

    def wait(self, timeout: float | None = None) -> bool:
        """True once the job finished (done, failed or cancelled) within ``timeout``."""
        return self._done.wait(timeout)

    @property
    def finished(self) -> bool:
        return self._done.is_set()


class BackgroundWork:
    """The background jobs of one memory (see the module doc)."""

    def __init__(self, name: str = "memory", *, max_workers: int = 2) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1.")
        self.name = name
        self.max_workers = max_workers
        self._cond = threading.Condition()
        self._queue: list[BackgroundJob] = []
        self._running: dict[str, BackgroundJob] = {}  # key -> job
        self._workers = 0
        self._closed = False
        self._token = CancelToken()
        self._ids = itertools.count(1)
        self.completed = 0
        self.failed = 0
        _LIVE.add(self)

    # -- submitting ----------------------------------------------------------------------------------
    def submit(self, kind: str, key: str, fn: Callable[[CancelToken], Any], *, description: str = "") -> BackgroundJob:
        """Queue ``fn(token)``; returns its job (or the identical queued job it joined)."""
        with self._cond:
            if self._closed:
                raise BackgroundClosedError(
                    f"The background work of memory {self.name!r} is closed (its store was closed); "
                    "open the store again to run more turns.")
            for job in self._queue:
                if job.key == key and job.kind == kind:
                    return job
            job = BackgroundJob(next(self._ids), kind, key, description or kind, fn)
            self._queue.append(job)
            self._spawn_locked()
            return job

    def _spawn_locked(self) -> None:
        runnable = len({j.key for j in self._queue if j.key not in self._running})
        missing = min(self.max_workers, len(self._running) + runnable) - self._workers
        for _ in range(max(0, missing)):
            self._workers += 1
            threading.Thread(target=self._work, name=f"memory-background-{self.name}", daemon=True).start()

    def _next_locked(self) -> BackgroundJob | None:
        for i, job in enumerate(self._queue):
            if job.key not in self._running:
                return self._queue.pop(i)
        return None

    def _work(self) -> None:
        while True:
            with self._cond:
                job = self._next_locked()
                if job is None:
                    self._workers -= 1
                    self._cond.notify_all()
                    return
                job.state = "running"
                self._running[job.key] = job
            try:
                job.result = job.fn(self._token)
                job.state = "cancelled" if job.result is _CANCELLED else "done"
            except BaseException as exc:  # noqa: BLE001 - a failing job must never reach a turn
                job.state, job.error = "failed", exc
                log.warning("background %s job %r of memory %r failed: %s: %s", job.kind, job.key, self.name,
                            type(exc).__name__, exc, exc_info=not isinstance(exc, Exception))
            with self._cond:
                self._running.pop(job.key, None)
                if job.state == "failed":
                    self.failed += 1
                else:
                    self.completed += 1
                job._done.set()
                self._spawn_locked()
                self._cond.notify_all()

    # -- looking -------------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    def jobs(self) -> list[BackgroundJob]:
        """Running jobs, then queued ones (a snapshot)."""
        with self._cond:
            return [*self._running.values(), *self._queue]

    def busy(self, key: str | None = None) -> bool:
        with self._cond:
            if key is None:
                return bool(self._queue or self._running)
            return key in self._running or any(j.key == key for j in self._queue)

    # -- waiting -------------------------------------------------------------------------------------
    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until no job is queued or running; False if ``timeout`` seconds passed first."""
        return self._wait(lambda: not self._queue and not self._running, timeout)

    def wait_key(self, key: str, timeout: float | None = None, *, give_up: Callable[[], bool] | None = None) -> bool:
        """Block until no job of ``key`` is queued or running. ``give_up``: checked at each wake-up (``wake``);
        once true, the wait ends at once, False (the jobs go on)."""
        return self._wait(lambda: key not in self._running and all(j.key != key for j in self._queue), timeout,
                          give_up)

    def wake(self) -> None:
        """Wake every waiter to look again (another thread's ``give_up`` became true)."""
        with self._cond:
            self._cond.notify_all()

    def _wait(self, done: Callable[[], bool], timeout: float | None,
              give_up: Callable[[], bool] | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not done():
                if give_up is not None and give_up():
                    return False
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    # -- closing -------------------------------------------------------------------------------------
    def close(self, timeout: float | None = 30.0) -> bool:
        """Refuse new work, let queued work finish within ``timeout``, then cancel the rest.

        Returns True when everything finished; False when jobs were cancelled or a running job had
        to be abandoned (it stops before its next write: its token is cancelled)."""
        with self._cond:
            if self._closed and not self._queue and not self._running:
                return True
            self._closed = True
        finished = self.wait_idle(timeout)
        if finished:
            return True
        self._token.cancel()
        with self._cond:
            dropped, self._queue = self._queue, []
            for job in dropped:
                job.state = "cancelled"
                job._done.set()
            self._cond.notify_all()
            running = list(self._running.values())
        if dropped or running:
            log.warning("memory %r closed with background work unfinished: %d cancelled before starting, "
                        "%d told to stop (%s)", self.name, len(dropped), len(running),
                        ", ".join(f"{j.kind} {j.key}" for j in [*running, *dropped]))
        # A running job sees the cancelled token before its next write; give it a moment to return.
        self.wait_idle(2.0)
        return False


class BackgroundLoads:
    """Caches filled on threads of their own while their users answer without them (recall's keyword
    memory and thread order: a search answers by statements until they are loaded).

    ``start(key, fn)`` runs ``fn(token)`` on a new thread unless a load of that key is running or this
    is closed; True when started. A load checks its token between its reads and returns early once it
    is cancelled. ``close()`` (``Store.close`` calls it before the database closes, and interpreter exit
    does) refuses new loads, cancels the running ones and waits for them to return: none is left
    reading a closed database or running in SQLite while the interpreter goes. A failing load is
    logged; its cache stays unloaded, and a later search may start it again.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._running: dict[str, threading.Thread] = {}
        self._token = CancelToken()
        self._closed = False
        self._pid = os.getpid()
        _LIVE_LOADS.add(self)

    def start(self, key: str, fn: Callable[[CancelToken], Any]) -> bool:
        with self._lock:
            if os.getpid() != self._pid:  # a forked child: its parent's threads are not its own
                self._running.clear()
                self._pid = os.getpid()
            if self._closed or key in self._running:
                return False
            thread = threading.Thread(target=self._run, args=(key, fn), name=f"{self.name}-load-{key}", daemon=True)
            self._running[key] = thread
        thread.start()
        return True

    def _run(self, key: str, fn: Callable[[CancelToken], Any]) -> None:
        try:
            fn(self._token)
        except BaseException as exc:  # noqa: BLE001 - a load that fails leaves its cache unloaded
            if not self._token.cancelled:
                log.warning("loading %s of %r in the background failed: %s: %s", key, self.name,
                            type(exc).__name__, exc, exc_info=not isinstance(exc, Exception))
        finally:
            with self._lock:
                self._running.pop(key, None)

    def busy(self, key: str | None = None) -> bool:
        with self._lock:
            return bool(self._running) if key is None else key in self._running

    def wait(self, timeout: float | None = None) -> bool:
        """Block until no load runs; False if ``timeout`` seconds passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                threads = list(self._running.values())
            if not threads:
                return True
            for thread in threads:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                thread.join(remaining)

    def close(self, timeout: float | None = 10.0) -> bool:
        """Refuse new loads, cancel the running ones and wait for them (True once none runs)."""
        with self._lock:
            self._closed = True
        self._token.cancel()
        done = self.wait(timeout)
        if not done:
            log.warning("background loads of %r still running after %s s at close", self.name, timeout)
        return done

    @property
    def closed(self) -> bool:
        return self._closed


class InlineWork:
    """The null object for ``MemoryServices.background`` when no memory owns the services (a test
    building services by hand): jobs run at once, on the caller's thread."""

    name = "inline"
    closed = False

    def submit(self, kind: str, key: str, fn: Callable[[CancelToken], Any], *, description: str = "") -> BackgroundJob:
        job = BackgroundJob(0, kind, key, description or kind, fn, state="running")
        try:
            job.result = fn(CancelToken())
            job.state = "done"
        except Exception as exc:  # noqa: BLE001 - as in the background: logged, never raised
            job.state, job.error = "failed", exc
            log.warning("inline %s job %r failed: %s: %s", kind, key, type(exc).__name__, exc)
        job._done.set()
        return job

    def jobs(self) -> list[BackgroundJob]:
        return []

    def busy(self, key: str | None = None) -> bool:
        return False

    def wait_idle(self, timeout: float | None = None) -> bool:
        return True

    def wait_key(self, key: str, timeout: float | None = None, *, give_up: Callable[[], bool] | None = None) -> bool:
        return True

    def wake(self) -> None:
        pass  # nobody waits: jobs ran on the caller's thread


INLINE_WORK = InlineWork()

# A job may return this after seeing its token cancelled, so the job says "cancelled", not "done".
_CANCELLED = object()
CANCELLED = _CANCELLED

_LIVE: "weakref.WeakSet[BackgroundWork]" = weakref.WeakSet()
_LIVE_LOADS: "weakref.WeakSet[BackgroundLoads]" = weakref.WeakSet()


@atexit.register
def _finish_at_exit() -> None:
    """Give queued memory work (a title, a buffered observation) a bounded chance to finish."""
    for work in list(_LIVE):
        try:
            work.close(timeout=EXIT_WAIT_SECONDS)
        except Exception:  # noqa: BLE001 - exiting anyway
            log.debug("closing background work at exit failed", exc_info=True)
    for loads in list(_LIVE_LOADS):  # (cancelled, not finished: a cache nobody will read)
        try:
            loads.close(timeout=EXIT_WAIT_SECONDS)
        except Exception:  # noqa: BLE001 - exiting anyway
            log.debug("closing background loads at exit failed", exc_info=True)


__all__ = ["CANCELLED", "INLINE_WORK", "KINDS", "InlineWork", "BackgroundClosedError", "BackgroundLoads", "BackgroundJob", "BackgroundWork", "CancelToken"]
