"""Storage speed on one 10,000-message thread.

Prints: save throughput in batches of 100 and in one call of 10,000; saving with semantic recall on
(hashing embedder, so the model costs almost nothing) against recall off; reading the last 10;
assembling a prompt with history and working memory. Mastra's figures are read from its own bench's
output when given (``--mastra``), so both are measured in the same hour:

    .venv/bin/python bench/storage.py [--messages 10000] [--mastra /tmp/mastra/out.json]
    .venv/bin/python bench/storage.py --save-only [--runs 3]   # just the batches-of-100 save path
    .venv/bin/python bench/storage.py --save-only --no-keyword-index   # ... into a Mastra file not migrated
    .venv/bin/python bench/storage.py --where                  # where a save's time and bytes go, recall on / off
    .venv/bin/python bench/storage.py --layouts [--runs 11] [--only "as stored,doc in"]  # recall-on save, layout candidates

``--save-only`` does what Mastra's ``benchSave('storage-only', 10_000, 100, runs)`` does (a fresh
database per run, only the save loop timed), for a side-by-side run of the two commands. Mastra's
bench lives in ../shared/bench/mastra (copy it out, ``npm install``; its README says how). Rates are
printed by the clock and per second of CPU time (the loop's ``process_time``; a Mastra run that reports
``cpu_msgs_per_s`` — its loop timed with ``process.cpuUsage()`` — is compared on both).

The Mastra side of ``--save-only``: in the copy, a ``save100cpu.mjs`` made of ``bench.mjs`` up to its
save benchmarks (data, helpers, ``setup``, ``benchSave``) with ``const c0 = process.cpuUsage()`` before
the timed loop, ``cpu_ms`` / ``cpu_msgs_per_s`` from ``process.cpuUsage(c0)`` added to its row, then
``await benchSave('storage-only', 10_000, 100, RUNS_10K)`` and the results file written; run as
``RUNS_10K=1 node_modules/.bin/node save100cpu.mjs out.json`` (Node 22 comes with the copy's
``npm install``), alternated with ``.venv/bin/python bench/storage.py --save-only --runs 1``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core import Memory, MemoryOptions, Message, open_store  # noqa: E402
from core.recall.schema import vector_table_name  # noqa: E402
from core.recall.tables import DOCS_TABLE, FTS_TABLE, VOCAB_TABLE  # noqa: E402
from core.storage import bulk, driver_sql  # noqa: E402
from core.storage.memory_store import MessageQuery  # noqa: E402

# Mastra's figures when none are given: batches of 100 measured on 2026-12-03 beside ours on the same host (median of three)
# (load ~1; ARCHITECTURE Figures), the others on 2026-11-29. --mastra reads fresh ones from the same hour.
MASTRA = {"batch100": 11_815, "one_call": 1_360, "last10_ms": 0.30}


def mastra_figures(path: Path) -> dict[str, float]:
    """Mastra's save and read figures from its bench's JSON output (bench.mjs / a save-only run)."""
    import json

    rows = json.loads(path.read_text(encoding="utf-8"))["rows"]
    out: dict[str, float] = {}
    for r in rows:
        if r.get("op") == "save/storage-only" and r.get("n") == 10_000:
            out["batch100" if r.get("batch") == 100 else "one_call"] = float(r["msgs_per_s"])
            if r.get("batch") == 100 and "cpu_msgs_per_s" in r:  # a run that also timed its loop's CPU
                out["batch100_cpu"] = float(r["cpu_msgs_per_s"])
        if r.get("op") == "save/semantic" and r.get("batch") == 100:
            out["semantic_batch100"] = float(r["msgs_per_s"])
    return out


def save_batches(n: int, recall: bool, runs: int = 1) -> float:
    """Median msgs/s saving n messages in batches of 100 into a fresh database (recall: hashing embedder)."""
    return save_rates(n, recall, runs)[0]


def save_rates(n: int, recall: bool, runs: int = 1, keyword_index: bool = True) -> tuple[float, float]:
    """``save_batches``'s (wall, CPU) medians: msgs/s by the clock and per second of this process's CPU
    time. On a shared machine the wall rate says how busy it was; the CPU rate does not depend on it.
    ``keyword_index=False``: into a Mastra file not migrated (no keyword index, so a save keys no docs)."""
    walls, cpus = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            store, memory = save_bench_memory(Path(tmp), recall, keyword_index)
            msgs = make_messages(n, "t")
            start, cpu = time.perf_counter(), time.process_time()
            for i in range(0, n, 100):
                memory.save_messages(msgs[i:i + 100])
            walls.append(n / (time.perf_counter() - start))
            cpus.append(n / max(time.process_time() - cpu, 1e-9))
            store.close()
    return statistics.median(walls), statistics.median(cpus)


def save_bench_memory(folder: Path, recall: bool, keyword_index: bool = True) -> tuple[Any, Memory]:
    """A fresh database in ``folder`` with thread "t" of resource "bench", and a memory saving into it with
    semantic recall on (the hashing embedder, so the model costs almost nothing) or off. ``keyword_index=False``:
    the file has Mastra's tables only and is not migrated (a Mastra file Memory Studio writes to)."""
    from core.embedding import HashingEmbedder

    if not keyword_index:
        import libsql_experimental as libsql

        from core.storage.schema import MASTRA_MEMORY_DDL

        raw = libsql.connect(str(folder / "bench.db"))
        for ddl in MASTRA_MEMORY_DDL:
            raw.execute(ddl)
        raw.commit()
        raw.close()
    store = open_store(folder / "bench.db")
    memory = Memory(store, MemoryOptions(last_messages=10, semantic_recall=recall),
                    embedder=HashingEmbedder(64) if recall else None)
    memory.create_thread(resource_id="bench", thread_id="t")
    return store, memory


def where_time_goes(n: int) -> None:
    """A batches-of-100 save of ``n`` messages with recall off, then on (hashing embedder), each statement's
    time per message (the driver's execute, which for COMMIT includes writing the WAL and FTS5's segment),
    the rest (Python: contexts, the embedder, rows) and the database's bytes per message by table."""
    from core.storage import driver_sql

    timed_sql: dict[str, float] = {}
    counts: dict[str, int] = {}
    plain = driver_sql._cursor

    def cursor(conn: Any, sql: str, params: Any) -> Any:
        start = time.perf_counter()
        try:
            return plain(conn, sql, params)
        finally:
            key = " ".join(sql.split())[:72]
            timed_sql[key] = timed_sql.get(key, 0.0) + time.perf_counter() - start
            counts[key] = counts.get(key, 0) + 1

    driver_sql._cursor = cursor
    try:
        for recall in (False, True):
            timed_sql.clear()
            counts.clear()
            with tempfile.TemporaryDirectory() as tmp:
                store, memory = save_bench_memory(Path(tmp), recall)
                memory.create_thread(resource_id="bench", thread_id="warm")
                memory.save_messages(make_messages(100, "warm"))  # (warm: imports, the feature table)
                msgs = make_messages(n, "t")
                timed_sql.clear()
                counts.clear()
                start, cpu = time.perf_counter(), time.process_time()
                for i in range(0, n, 100):
                    memory.save_messages(msgs[i:i + 100])
                wall, cpu = time.perf_counter() - start, time.process_time() - cpu
                with store.db.write() as conn:
                    conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
                with store.db.read() as conn:
                    sizes = conn.exec_driver_sql("SELECT name, sum(pgsize) FROM dbstat GROUP BY name "
                                                 "HAVING sum(pgsize) > 8192 ORDER BY 2 DESC").all()
                store.close()
            sql = sum(timed_sql.values())
            print(f"\nrecall {'on' if recall else 'off'}: {wall * 1e6 / n:.1f} µs per message "
                  f"({cpu * 1e6 / n:.1f} CPU), of which statements {sql * 1e6 / n:.1f} and the rest {(wall - sql) * 1e6 / n:.1f}")
            for key, spent in sorted(timed_sql.items(), key=lambda kv: -kv[1])[:12]:
                print(f"  {spent * 1e6 / n:6.2f} µs  {counts[key]:6,}×  {key}")
            print("  bytes per message, by table and index: "
                  + ", ".join(f"{name} {size / n:,.0f}" for name, size in sizes))
    finally:
        driver_sql._cursor = plain


# Stored-layout candidates for the recall tables (issue 20 item 3b), applied to a scratch database after its
# first batch; none is the stored layout: each either changes what a search answers or slows a read (ARCHITECTURE,
# Known problems). (name, statements). Measured before and gone with the layout they changed: a contentless
# and an external-content FTS5 table, the keyword-doc table's indexes and row, and the doc moved into the FTS5
# row (the stored layout since ``0031_recall_keyword_rows``; Figures, the s31-w3b and s32-w3c rows).
_FTS, _VOCAB, _VEC = FTS_TABLE, VOCAB_TABLE, vector_table_name(64)  # (the hashing embedder's)


def _fts_as(options: str, columns: str = "body, context") -> tuple[str, ...]:
    """The FTS5 table made again with other columns or options (the vocabulary view with it; the docs'
    view of older versions dropped, it reads the table)."""
    return (
        f"DROP VIEW {DOCS_TABLE}", f"DROP TABLE {_VOCAB}", f"DROP TABLE {_FTS}",
        f"CREATE VIRTUAL TABLE {_FTS} USING fts5({columns}, content_hash UNINDEXED, {options}"
        "tokenize = 'porter unicode61 remove_diacritics 2')",
        f"CREATE VIRTUAL TABLE {_VOCAB} USING fts5vocab({_FTS}, instance)",
    )


_NO_VECTOR_SCOPE_INDEXES = (f"DROP INDEX {_VEC}_thread_id", f"DROP INDEX {_VEC}_resource_id")
LAYOUTS: dict[str, tuple[str, ...]] = {
    "as stored": (),
    "no vector message_id index": (f"DROP INDEX {_VEC}_message_id",),
    "no vector thread/resource indexes": _NO_VECTOR_SCOPE_INDEXES,
    "no vector JSON indexes": _NO_VECTOR_SCOPE_INDEXES + (f"DROP INDEX {_VEC}_message_id",),
    # FTS5 options (2026-12-06): postings without offsets (the in-process keyword memory needs them for
    # phrases and term counts), without columns either, the previous message's text stored but not indexed
    # (what indexing it costs). (No per-row sizes, ``columnsize=0``, no longer applies: the keyword writers
    # find a message's row in its ``_docsize`` table.)
    "FTS5 detail=column": _fts_as("detail=column, "),
    "FTS5 detail=none": _fts_as("detail=none, "),
    "FTS5 context UNINDEXED": _fts_as("", "body, context UNINDEXED"),
}


def layout_rate(n: int, statements: tuple[str, ...], recall: bool = True) -> tuple[float, float]:
    """(µs of CPU per message, bytes per message of the whole file) saving ``n`` messages in batches of 100
    with ``statements`` run on the database after a first batch of another thread (which made the tables)."""
    with tempfile.TemporaryDirectory() as tmp:
        store, memory = save_bench_memory(Path(tmp), recall)
        memory.create_thread(resource_id="bench", thread_id="warm")
        memory.save_messages(make_messages(100, "warm"))
        with store.db.write() as conn:
            before = int(conn.exec_driver_sql("SELECT sum(pgsize) FROM dbstat").scalar() or 0)
            for statement in statements:
                conn.exec_driver_sql(statement)
            docs_before = int(conn.exec_driver_sql(f"SELECT count(*) FROM {FTS_TABLE}").scalar() or 0) if recall else 0
        msgs = make_messages(n, "t")
        cpu = time.process_time()
        for i in range(0, n, 100):
            memory.save_messages(msgs[i:i + 100])
        cpu = time.process_time() - cpu
        with store.db.write() as conn:
            if recall:  # (a failed recall write is logged, not raised: the rows must be there)
                written = int(conn.exec_driver_sql(f"SELECT count(*) FROM {FTS_TABLE}").scalar() or 0) - docs_before
                if written != n:
                    raise RuntimeError(f"{n} messages saved with this layout, {written} keyword docs written")
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            after = int(conn.exec_driver_sql("SELECT sum(pgsize) FROM dbstat").scalar() or 0)
        store.close()
    return cpu * 1e6 / n, (after - before) / n


def layouts(n: int, runs: int, only: str = "") -> None:
    """The recall-on save's CPU per message with each of ``LAYOUTS`` (those whose names hold one of
    ``only``'s comma-separated words, when given), and recall off for the ratio, run in turn (the order
    reversed every other round, so a drift of the machine's speed hits all alike)."""
    words = [w.strip().lower() for w in only.split(",") if w.strip()]
    unknown = [w for w in words if not any(w in name.lower() for name in LAYOUTS)]
    if unknown:
        raise SystemExit(f"--only: no candidate's name holds {', '.join(map(repr, unknown))}; the candidates: "
                         + "; ".join(LAYOUTS))
    names = ["recall off", *(name for name in LAYOUTS if not words or any(w in name.lower() for w in words))]
    cpu: dict[str, list[float]] = {name: [] for name in names}
    size: dict[str, float] = {}
    layout_rate(n, (), recall=False)  # (warm-up: imports, the embedder's feature table)
    layout_rate(n, (), recall=True)
    for r in range(runs):
        for name in names if r % 2 == 0 else names[::-1]:
            spent, size[name] = layout_rate(n, LAYOUTS.get(name, ()), recall=name != "recall off")
            cpu[name].append(spent)
    off = statistics.median(cpu["recall off"])
    print(f"{n:,} messages in batches of 100, median of {runs} (µs of CPU a message; bytes a message in the file):")
    for name in names:
        mid = statistics.median(cpu[name])
        print(f"  {name:46s} {mid:6.2f} µs  ({min(cpu[name]):.1f}–{max(cpu[name]):.1f})  x{off / mid:.3f} of off  "
              f"{size[name]:7,.0f} B")


def make_messages(n: int, thread: str) -> list[Message]:
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    return [
        Message.create("user" if i % 2 == 0 else "assistant",
                       [{"type": "text", "text": f"message number {i} about topic {i % 37} with some words"}],
                       thread_id=thread, resource_id="bench", created_at=t0 + timedelta(milliseconds=i))
        for i in range(n)
    ]


def timed(fn, repeat: int = 1) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--mastra", type=Path, default=None, help="Mastra bench output (JSON) from the same hour")
    parser.add_argument("--save-only", action="store_true", help="only the batches-of-100 save, fresh db per run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-keyword-index", action="store_true",
                        help="with --save-only: into a Mastra file not migrated (a save without recall keys no docs)")
    parser.add_argument("--where", action="store_true", help="where a save's time and bytes go, recall on / off")
    parser.add_argument("--layouts", action="store_true", help="the recall-on save with each stored-layout candidate")
    parser.add_argument("--only", default="", help="with --layouts: the candidates whose names hold these words (comma-separated)")
    args = parser.parse_args()
    n = args.messages
    if args.where:
        where_time_goes(n)
        return
    if args.layouts:
        layouts(n, args.runs, args.only)
        return
    if args.save_only:
        wall, cpu = save_rates(n, False, args.runs, keyword_index=not args.no_keyword_index)
        into = ", into a Mastra file without the keyword index" if args.no_keyword_index else ""
        print(f"save, batches of 100, {n:,} messages{into}, median of {args.runs}: {wall:,.0f} msgs/s "
              f"({cpu:,.0f} per CPU second)")
        if args.mastra is not None:
            theirs = mastra_figures(args.mastra)
            line = f"Mastra (same hour) {theirs['batch100']:,.0f} msgs/s: x{wall / theirs['batch100']:.2f}"
            if "batch100_cpu" in theirs:
                line += f"; per CPU second {theirs['batch100_cpu']:,.0f}: x{cpu / theirs['batch100_cpu']:.2f}"
            print(line)
        return
    mastra = dict(MASTRA)
    if args.mastra is not None:
        mastra.update(mastra_figures(args.mastra))
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp) / "bench.db")
        memory = Memory(store, MemoryOptions(last_messages=10, working_memory={"enabled": True}))
        memory.create_thread(resource_id="bench", thread_id="batched")
        msgs = make_messages(n, "batched")
        start = time.perf_counter()
        for i in range(0, n, 100):
            memory.save_messages(msgs[i:i + 100])
        batch_rate = n / (time.perf_counter() - start)

        memory.create_thread(resource_id="bench", thread_id="single")
        single = make_messages(n, "single")
        one_call = n / timed(lambda: memory.save_messages(single))

        # Larger single calls must not slow down per message (no quadratic dedupe).
        memory.create_thread(resource_id="bench", thread_id="double")
        double = make_messages(2 * n, "double")
        double_rate = 2 * n / timed(lambda: memory.save_messages(double))

        samples = []
        for _ in range(200):
            start = time.perf_counter()
            store.memory.list_messages(MessageQuery(thread_id="batched", last=10))
            samples.append((time.perf_counter() - start) * 1000)
        last10 = statistics.median(samples)

        memory.update_working_memory(resource_id="bench", working_memory="# User\n- Name: Bench\n")
        memory.assemble(thread_id="batched", resource_id="bench", input="warm-up")  # tokenizer load
        asm = []
        for i in range(50):
            start = time.perf_counter()
            memory.assemble(thread_id="batched", resource_id="bench", input=f"question {i}", instructions="Be brief.")
            asm.append((time.perf_counter() - start) * 1000)
        store.close()
    # Recall on and off, alternated so a drift of the machine's speed hits both alike.
    off_rates, on_rates = [], []
    for _ in range(args.runs):
        off_rates.append(save_rates(n, False))
        on_rates.append(save_rates(n, True))
    off, on = statistics.median(r[0] for r in off_rates), statistics.median(r[0] for r in on_rates)
    off_cpu, on_cpu = statistics.median(r[1] for r in off_rates), statistics.median(r[1] for r in on_rates)

    print(f"messages in thread            {n:,}")
    print(f"save, batches of 100          {batch_rate:10,.0f} msgs/s   (Mastra {mastra['batch100']:,.0f}; x{batch_rate / mastra['batch100']:.1f})")
    print(f"save, one call of {n:,}      {one_call:10,.0f} msgs/s   (Mastra {mastra['one_call']:,.0f}; x{one_call / mastra['one_call']:.1f})")
    semantic = f"; Mastra with recall {mastra['semantic_batch100']:,.0f}" if "semantic_batch100" in mastra else ""
    print(f"save, batches of 100, recall off / on (hashing embedder): {off:,.0f} / {on:,.0f} msgs/s = x{on / off:.2f}{semantic}")
    print(f"... per CPU second (load-independent): {off_cpu:,.0f} / {on_cpu:,.0f} msgs/s = x{on_cpu / off_cpu:.2f}")
    print(f"save, one call of {2 * n:,}      {double_rate:10,.0f} msgs/s   (ratio to {n:,}: {double_rate / one_call:.2f})")
    print(f"read last 10 (median)         {last10:10.3f} ms       (Mastra {mastra['last10_ms']} ms)")
    print(f"assemble history+WM (median)  {statistics.median(asm):10.3f} ms")


if __name__ == "__main__":
    main()
