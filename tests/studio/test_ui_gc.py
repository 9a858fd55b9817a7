"""Python's cycle collector runs on the UI thread while the Studio runs (``studio/ui_gc.py``): a worker
never frees a Qt object, which could hang the app (Qt's signal lock against the GIL)."""

from __future__ import annotations

import gc
import threading
from typing import Any

from PySide6.QtCore import QObject

from studio.ui_gc import UiThreadCollector


def test_cycles_are_freed_on_the_ui_thread_not_on_the_worker_that_allocates(qtbot: Any, qapp: Any) -> None:
    # (The Studio tests run with the app's collector on: see conftest. This test makes its own, to be sure.)
    freed_on: list[str] = []

    class Cyclic(QObject):
        def __init__(self) -> None:
            super().__init__()
            self.me = self  # only the cycle collector can free it

        def __del__(self) -> None:
            freed_on.append(threading.current_thread().name)

    collector = UiThreadCollector(qapp, interval_ms=20)
    kept: list[Any] = []
    try:
        Cyclic()

        def allocate() -> None:  # a busy worker: past every threshold of the automatic collector
            kept.append([[] for _ in range(50_000)])

        worker = threading.Thread(target=allocate, name="worker")
        worker.start()
        worker.join()
        assert freed_on == []  # the worker did not collect
        qtbot.waitUntil(lambda: bool(freed_on), timeout=5_000)
        assert freed_on == [threading.main_thread().name]
    finally:
        collector.stop()
        kept.clear()
    assert gc.isenabled() == collector._was_enabled


def test_the_collector_keeps_pythons_thresholds_and_generations(qapp: Any) -> None:
    collector = UiThreadCollector(qapp, interval_ms=60_000)
    try:
        assert not gc.isenabled()
        gc.collect()
        assert collector.collect_due() == -1  # nothing allocated since: nothing due
        kept = [[] for _ in range(gc.get_threshold()[0] + 100)]
        assert collector.collect_due() == 0  # the youngest generation, as the automatic collector would
        assert gc.get_count()[0] < gc.get_threshold()[0]
        del kept
    finally:
        collector.stop()
