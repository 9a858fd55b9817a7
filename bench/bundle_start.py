"""Start-up figures of the desktop bundle against the venv's ``memory-studio`` (``make run``'s).

    .venv/bin/python bench/bundle_start.py [--runs 3] [--bundle dist/memory-studio/memory-studio]

Each run is a fresh process of ``--self-check`` in an empty temp folder (so nothing is cached by the
program; the OS file cache is warm after the first run). Printed, median over the runs:
- ``ready``: process start → the first line (runtime loaded, our modules imported);
- ``window``: step 6 alone — importing Qt, creating the app, opening the database, first rendered frame;
- ``total``: the whole self-check (demo data and the embedding model included).
Also the bundle's size on disk (``du -sh``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEP = re.compile(r"^\[(\d)/\d\] .*ok \((\d+\.\d+) s\)")


def one_run(command: list[str]) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-start-") as cwd:
        env = {k: v for k, v in os.environ.items() if k not in ("MEMORY_STUDIO_DB", "PYTHONPATH")}
        started = time.perf_counter()
        proc = subprocess.Popen([*command, "--self-check"], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
        marks: dict[str, float] = {}
        assert proc.stdout is not None
        for line in proc.stdout:
            now = time.perf_counter() - started
            marks.setdefault("ready", now)
            step = STEP.match(line)
            if step and step.group(1) == "6":
                marks["window"] = float(step.group(2))
        if proc.wait() != 0:
            raise SystemExit(f"{command} --self-check failed")
        marks["total"] = time.perf_counter() - started
        return marks


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--bundle", type=Path, default=ROOT / "dist" / "memory-studio" / "memory-studio")
    args = parser.parse_args()
    targets = {"venv (make run)": [str(ROOT / ".venv" / "bin" / "memory-studio")], "bundle": [str(args.bundle)]}
    results = {}
    for name, command in targets.items():
        runs = [one_run(command) for _ in range(args.runs)]
        results[name] = {k: round(statistics.median(r[k] for r in runs), 2) for k in runs[0]}
        print(f"{name:16} " + "  ".join(f"{k} {v:.2f} s" for k, v in results[name].items()), flush=True)
    size = subprocess.run(["du", "-sh", str(args.bundle.parent)], capture_output=True, text=True).stdout.split()[0]
    print(f"bundle size: {size} ({args.bundle.parent})")
    print(json.dumps({"results": results, "bundle_size": size}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
