"""``memory-studio export --resource … --with-traces`` at scale: wall time and peak memory of the export.

    .venv/bin/python bench/export_traces.py [--traces 20000] [--spans 7] [--threads 3000] [--code PATH] [--stdout]

Builds a scratch libSQL database and the DuckDB trace store beside it in /tmp: one resource whose
``--threads`` threads ran ``--traces`` traces of ``--spans`` spans each (a root, a model call with
token usage, tool calls, one span in ten with an error), then runs the export command in a child
process and prints its wall time, its peak RSS (the child's own ``VmHWM``: Linux), and the file's
size, span count and digest (without its ``exportedAt`` and the scratch path: equal digests from two
checkouts are equal files). The scratch files are removed at the end.

``--code PATH`` runs the export with another checkout's code (``PYTHONPATH=PATH``), e.g.
``--code /work/main`` for the figure before a change; the data is built by this checkout's code.
``--stdout`` exports to standard output (no ``-o``), which the bench sends to the file it checks.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.storage import open_store  # noqa: E402
from core.traces.spans import SpanRecord  # noqa: E402

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
RESOURCE = "bench-user"


def trace_spans(t: int, n_threads: int, per_trace: int) -> list[SpanRecord]:
    thread = f"th{t % n_threads:05d}"
    base = T0 + timedelta(seconds=t)
    root = f"r{t:06d}"
    spans = []
    for i in range(per_trace):
        kind = "agent_run" if i == 0 else "model_generation" if i == 1 else "tool_call"
        spans.append(SpanRecord(
            trace_id=f"{t:08d}" + "ab" * 12, span_id=root if i == 0 else f"s{t:06d}-{i}",
            parent_span_id=None if i == 0 else root, name=f"{kind}: bench {i}", span_type=kind,
            started_at=base + timedelta(milliseconds=i), ended_at=base + timedelta(milliseconds=40 + i),
            created_at=base + timedelta(milliseconds=40 + i),  # not the time of the build: the same file every run
            thread_id=thread, resource_id=RESOURCE, entity_name="bench-agent",
            input={"messages": [{"role": "user", "content": f"question {t} " + "words " * 20}]},
            output={"text": f"answer {t}.{i}"},
            attributes={"usage": {"inputTokens": 120, "outputTokens": 30}, "model": "m"} if i == 1
            else {"tool": f"tool{i}", "args": {"q": t}},
            metadata={"events": [{"name": "retry", "at": i}]} if i == 2 else None,
            error={"message": f"tool failed in trace {t}", "id": "TOOL_ERROR"} if i == 3 and t % 10 == 0 else None,
        ))
    return spans


def build(db: Path, n_traces: int, per_trace: int, n_threads: int) -> None:
    with open_store(db) as store:
        with store.db.write() as conn:
            for n in range(n_threads):
                store.memory.create_thread(thread_id=f"th{n:05d}", resource_id=RESOURCE, title=f"thread {n}",
                                           created_at=T0 + timedelta(seconds=n), conn=conn)
        assert store.observability is not None
        batch: list[SpanRecord] = []
        for t in range(n_traces):
            batch.extend(trace_spans(t, n_threads, per_trace))
            if len(batch) >= 20_000:
                store.observability.write_spans(batch, budget_s=60)
                batch = []
        if batch:
            store.observability.write_spans(batch, budget_s=60)


# The child reports its own peak (VmHWM): its ru_maxrss would also count the parent it was forked from,
# which holds the data it just built.
CHILD = """import sys
from core.cli import main
code = main({argv!r})
peak = next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print("peak-kb", peak, file=sys.stderr)
sys.exit(code)
"""


def export(db: Path, out: Path, code: Path, stdout: bool = False) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of ``memory-studio export --resource … --with-traces -o out`` (with
    ``stdout``: without ``-o``, its standard output sent to ``out``)."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    argv = ["export", "--db", str(db), "--resource", RESOURCE, "--with-traces", *([] if stdout else ["-o", str(out)])]
    began = time.perf_counter()
    with open(out, "wb") if stdout else open(os.devnull, "wb") as sink:
        done = subprocess.run([sys.executable, "-c", CHILD.format(argv=argv)], env=env, cwd=code, check=True,
                              stdout=sink, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - began
    peak_kb = int(done.stderr.split("peak-kb")[-1].split()[0])
    return wall, peak_kb / 1024


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--traces", type=int, default=20_000)
    p.add_argument("--spans", type=int, default=7, help="spans per trace")
    p.add_argument("--threads", type=int, default=3_000)
    p.add_argument("--code", type=Path, default=ROOT, help="the checkout whose code runs the export")
    p.add_argument("--stdout", action="store_true", help="export to standard output instead of a file (-o)")
    args = p.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="memory-studio-export-bench-"))
    try:
        db = scratch / "memory.db"
        began = time.perf_counter()
        build(db, args.traces, args.spans, args.threads)
        print(f"built {args.traces:,} traces ({args.traces * args.spans:,} spans) across {args.threads:,} threads "
              f"in {time.perf_counter() - began:.1f} s")
        out = scratch / "export.json"
        wall, peak_mb = export(db, out, args.code.resolve(), args.stdout)
        text = out.read_text(encoding="utf-8")
        spans = len(json.loads(text)["traces"])
        # The file but for its time of export and the scratch path: the same digest from two checkouts
        # means the same file.
        kept = re.sub(r'\n  "exportedAt": "[^"]*",|\n    "database": "[^"]*",', "", text, count=2)
        digest = hashlib.sha256(kept.encode()).hexdigest()
        where = "to standard output" if args.stdout else "-o FILE"
        print(f"export --resource --with-traces {where} ({args.code.resolve()}): {wall:.1f} s wall, peak RSS {peak_mb:,.0f} MB, "
              f"file {out.stat().st_size / 1e6:,.1f} MB with {spans:,} spans, sha256 without time and path {digest[:16]}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
