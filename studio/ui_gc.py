"""Python's cycle collector, run on the UI thread only while the Studio runs.

A Qt object caught in a reference cycle is freed when the cycle collector runs, and Python runs it
on whichever thread happens to allocate past the collector's threshold: often a worker of the pool.
Freeing a QObject there takes Qt's signal-slot lock and then waits for the GIL, while the UI thread
holds the GIL and waits for that lock (to connect a signal, say): the Studio hangs for good. (Seen in
the Studio tests on 2026-12-04: a worker reading a table collected a previous test's pane while the
UI thread connected a timer.) So while ``UiThreadCollector`` lives, the automatic collector is off and
a timer on the UI thread runs it, with Python's own thresholds and generations. Objects without
cycles are still freed at once by reference counting, on any thread, as before.
"""

from __future__ import annotations

import gc
import time

from PySide6.QtCore import QObject, QTimer

INTERVAL_MS = 200
FULL_EVERY_S = 30.0


class UiThreadCollector(QObject):
    """Turns Python's automatic cycle collection off and runs it from a timer on the thread that made
    this object (the UI thread). ``stop`` gives the automatic collector back."""

    def __init__(self, parent: QObject | None = None, interval_ms: int = INTERVAL_MS) -> None:
        super().__init__(parent)
        self._thresholds = gc.get_threshold()
        self._was_enabled = gc.isenabled()
        self._last_full = time.monotonic()
        gc.disable()
        self._timer = QTimer(self)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self.collect_due)
        self._timer.start()

    def collect_due(self) -> int:
        """Collect the oldest generation whose count passed its threshold, as the automatic collector
        would have (a whole-heap collection at most every ``FULL_EVERY_S``: the automatic one skips most
        of them too, by a ratio of old objects this module cannot read); returns the generation
        collected, or -1 when none was due."""
        counts, limits = gc.get_count(), self._thresholds
        if counts[0] <= limits[0]:
            return -1
        generation = next(i for i in (2, 1, 0) if counts[i] > limits[i])
        if generation == 2:
            now = time.monotonic()
            if now - self._last_full < FULL_EVERY_S:
                generation = 1
            else:
                self._last_full = now
        gc.collect(generation)
        return generation

    def stop(self) -> None:
        self._timer.stop()
        if self._was_enabled:
            gc.enable()
