"""The longest UI-thread gap while the Traces pane re-reads a database Mastra wrote (rollback journal mode, its
spans in ``mastra_ai_spans``) whose EXCLUSIVE lock another process holds for about 3 s.

A 5 ms timer on the UI thread notes every gap between its ticks (as ``bench/studio_stalls.py`` does). Before the
spans reader waited GIL-free (``core.storage.reading``), a read waited in SQLite's busy handler with the GIL held
for its whole read budget (0.5 s), and the UI stood still that long. Also printed: how long the re-read took to
answer (busy, keeping the last list), its banner, and the runs read once the lock went. The Mastra database and the
lock-holding process are the tests' own (``tests/studio/test_traces_pane.py``,
``tests/core/test_storage_busy_reads.py``, of this checkout); ``core`` and ``studio`` come from ``--tree`` (default:
this checkout), so the same script measures another tree (a ``git archive`` of main):

    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/traces_lock_gap.py [--tree PATH]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", default=str(Path(__file__).resolve().parents[1]),
                        help="the checkout whose core, studio and test fixtures are measured (default: this one)")
    tree = Path(parser.parse_args().tree).resolve()
    sys.path.insert(0, str(tree))

    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    app = QApplication([])
    from studio.panes.traces import TracesPane
    from studio.session import StudioSession, open_for_studio, read_baseline
    # The fixtures from this checkout (an older tree may not have them); ``core`` and ``studio`` are the tree's
    # already, and their submodules come from their own packages' folders.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.core.test_storage_busy_reads import HOLD_EXCLUSIVE
    from tests.studio.test_traces_pane import LATE_RUN, _mastra_db_with_spans

    def spin(done: Callable[[], Any], limit: float = 30.0) -> None:
        end = time.monotonic() + limit
        while not done() and time.monotonic() < end:
            app.processEvents()
            time.sleep(0.001)

    tmp = Path(tempfile.mkdtemp())
    try:
        db = _mastra_db_with_spans(tmp)
        store = open_for_studio(db)
        session = StudioSession(store, baseline=read_baseline(store))
        pane = TracesPane(session)
        pane.resize(1200, 800)
        loaded: list[float] = []
        pane.traces_loaded.connect(lambda: loaded.append(time.monotonic()))
        pane.show()
        spin(lambda: loaded)
        # Where the traces live is found once, before the lock: the reader's own wait is what is measured.
        source = pane.source
        setattr(pane.resolver, "resolve", lambda: source)
        locker = subprocess.Popen([sys.executable, "-c", HOLD_EXCLUSIVE, str(db), LATE_RUN], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        assert locker.stdout is not None and locker.stdout.readline().strip() == "locked"
        last, gaps = [time.monotonic()], []

        def tick() -> None:
            now = time.monotonic()
            gaps.append(now - last[0])
            last[0] = now

        timer = QTimer()
        timer.setInterval(5)
        timer.timeout.connect(tick)
        timer.start()
        seen = len(loaded)
        started = time.monotonic()
        pane.refresh()
        spin(lambda: len(loaded) > seen)
        answered = time.monotonic() - started if len(loaded) > seen else None  # (None: it failed, no list)
        banner = pane.banner.text() if pane.banner.isVisible() else None
        spin(lambda: time.monotonic() - started > 3.0)
        locker.communicate("\n", timeout=90)
        seen = len(loaded)
        pane.refresh()
        spin(lambda: len(loaded) > seen)
        timer.stop()
        how = f"answered after {answered * 1000:.0f} ms" if answered is not None else "no list within 30 s"
        print(f"while locked: {how}, busy={pane.flags.get('busy')}, banner: {banner}")
        print(f"after the lock went: runs {[t.trace_id for t in pane.traces]}")
        print(f"longest UI gap {max(gaps) * 1000:.0f} ms ({len(gaps)} ticks)")
        pane.close()
        session.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
