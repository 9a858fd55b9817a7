"""Run database, embedding and model work off the UI thread.

``WorkerPool.submit(fn, on_result=..., on_error=..., key=...)`` runs ``fn`` on a pool thread and
delivers the outcome on the UI thread through a queued signal. A ``key`` makes requests supersede each
other: when a newer request with the same key was submitted, an older result is dropped, so a slow
query can never overwrite a fresher view (the request-token idea of DB4S's RowLoader).
"""

from __future__ import annotations

import itertools
import threading
import traceback
from typing import Any, Callable

import shiboken6

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal, Slot



def traceback_text(exc: BaseException) -> str:
    """The traceback a worker recorded for ``exc`` when its job failed ("" for one raised elsewhere)."""
    text = getattr(exc, "__traceback_text__", "")
    return text if isinstance(text, str) else ""

class _Signals(QObject):
    done = Signal(object, object, object)  # (job id, result, error)
    progress = Signal(object, int, int)  # (job id, done, total)


class _Job(QRunnable):
    def __init__(self, job_id: int, fn: Callable[..., Any], signals: _Signals, with_progress: bool) -> None:
        super().__init__()
        self.job_id = job_id
        self.fn = fn
        self.signals = signals
        self.with_progress = with_progress
        self.setAutoDelete(True)

    def run(self) -> None:  # runs on a pool thread
        try:
            if self.with_progress:
                result = self.fn(lambda done, total: self.signals.progress.emit(self.job_id, done, total))
            else:
                result = self.fn()
        except BaseException as exc:  # noqa: BLE001 - every failure must reach the UI as a message
            exc.__traceback_text__ = traceback.format_exc()  # type: ignore[attr-defined]
            self._tell(None, exc)
            return
        self._tell(result, None)

    def _tell(self, result: Any, error: BaseException | None) -> None:
        try:
            self.signals.done.emit(self.job_id, result, error)
        except RuntimeError:  # the pool went with its window while this ran (the app closing): nobody to tell
            if shiboken6.isValid(self.signals):
                raise


class WorkerPool(QObject):
    """A small pool bound to the UI thread's event loop. Create it on the UI thread."""

    busy_changed = Signal(int)  # number of jobs running

    def __init__(self, parent: QObject | None = None, max_threads: int = 3) -> None:
        super().__init__(parent)
        self._pool = QThreadPool()
        self._pool.setMaxThreadCount(max_threads)
        self._signals = _Signals()
        self._signals.done.connect(self._on_done)
        self._signals.progress.connect(self._on_progress)
        self._ids = itertools.count(1)
        self._callbacks: dict[int, tuple[Any, Any, Any, str | None]] = {}
        self._latest: dict[str, int] = {}
        self._lock = threading.Lock()
        self._shut = False  # shut down: no new job runs (its session is closing, its panes are going)

    def submit(
        self,
        fn: Callable[..., Any],
        *,
        on_result: Callable[[Any], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
        on_progress: Callable[[int, int], None] | None = None,
        key: str | None = None,
    ) -> int:
        job_id = next(self._ids)
        if self._shut:
            # A late request of a closed session's pane (a model's paging timer firing while the window
            # installs another database): it would run on a store being closed and answer a widget that is
            # gone by then. Dropped: nothing runs, no callback comes.
            return job_id
        with self._lock:
            self._callbacks[job_id] = (on_result, on_error, on_progress, key)
            if key is not None:
                self._latest[key] = job_id
        self._pool.start(_Job(job_id, fn, self._signals, on_progress is not None))
        self.busy_changed.emit(len(self._callbacks))
        return job_id

    @Slot(object, object, object)
    def _on_done(self, job_id: int, result: Any, error: BaseException | None) -> None:
        with self._lock:
            on_result, on_error, _progress, key = self._callbacks.pop(job_id, (None, None, None, None))
            stale = key is not None and self._latest.get(key) != job_id
        self.busy_changed.emit(len(self._callbacks))
        if stale:
            return
        if error is not None:
            if on_error is not None:
                on_error(error)
            return
        if on_result is not None:
            on_result(result)

    @Slot(object, int, int)
    def _on_progress(self, job_id: int, done: int, total: int) -> None:
        with self._lock:
            entry = self._callbacks.get(job_id)
            # A job a newer one of its key replaced reports to nobody, as its result is dropped: its
            # "4 of 4" would overwrite the newer job's status on screen.
            stale = entry is not None and entry[3] is not None and self._latest.get(entry[3]) != job_id
        if entry and entry[2] is not None and not stale:
            entry[2](done, total)

    def shutdown(self) -> None:
        """Forget every pending callback: results that arrive after this are dropped, so a closed
        session's late answers never reach panes that are gone; jobs submitted after this never run."""
        self._shut = True
        with self._lock:
            self._callbacks.clear()
            self._latest.clear()
        self.busy_changed.emit(0)

    @property
    def closed(self) -> bool:
        """Shut down (its session is closing): a long job asks this between its steps and ends early."""
        return self._shut

    @property
    def running(self) -> int:
        return len(self._callbacks)

    def wait(self, msecs: int = 30_000) -> bool:
        """Block until idle (tests and shutdown only; never from a UI event handler)."""
        return bool(self._pool.waitForDone(msecs))
