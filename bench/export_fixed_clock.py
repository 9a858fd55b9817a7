"""Export a resource (or one of its threads) as ``memory-studio export --output`` does (streamed JSON, written
atomically), with a fixed clock, so two trees' files can be compared byte for byte and each run's peak memory
measured. ``core`` comes from ``PYTHONPATH``, so the same script runs another tree (a ``git archive`` of main):

    PYTHONPATH=$PWD .venv/bin/python bench/import_wm_versions.py /tmp/wm.json 8000 20   # a working-memory history
    .venv/bin/memory-studio import --db /tmp/wm.db --no-index /tmp/wm.json
    PYTHONPATH=$PWD /usr/bin/time -v .venv/bin/python bench/export_fixed_clock.py /tmp/wm.db ada /tmp/out.json
    sha256sum /tmp/out.json
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path

from core import open_store
from core.timeutil import FixedClock
from core.transfer.export import export_data
from core.transfer.format import render_chunks, write_atomically


def main() -> int:
    if len(sys.argv) not in (4, 5):
        raise SystemExit(__doc__)
    db, resource, out = sys.argv[1:4]
    thread = sys.argv[4] if len(sys.argv) == 5 else None
    with open_store(db, read_only=True) as store:
        data = export_data(store, resource_id=resource, thread_id=thread,
                           clock=FixedClock(datetime(2026, 1, 1, tzinfo=timezone.utc)), streamed=True)
        write_atomically(Path(out), render_chunks(data, "json"))
    print(data["counts"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
