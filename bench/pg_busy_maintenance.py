"""``forget`` and ``vacuum`` on a busy database: where their time goes, and what the writers feel.

A database (Postgres from the test suite's ``pgserver`` wheel, or a libSQL file) gets ``--prefill`` other
users' messages (300 each, with their vectors and keyword docs), then writer processes run agent turns
with the fleet's memory (``tests/fleet_worker.py``: history, resource working memory merged by the
model's tool, semantic recall, observational memory), one user each, three threads each. While they
keep writing, the bench runs, in turn, ``forget`` of one written user (``bob``) and ``vacuum``, in
process, timed step by step (the functions of ``core.edits.forget`` wrapped), with a sampler that reads
``pg_stat_activity`` and ``pg_blocking_pids`` every 20 ms (Postgres): what the command's backends were
doing (running, waiting for a lock and behind whom) and which other backends waited behind them. On
Postgres, as each vacuum starts, a reader keeps a transaction open on ``mastra_messages`` for ``--hold``
seconds (a report, an export, a slow client). Each writer notes every turn's start and end: the turns
that overlapped a command give the writers' latency during it, the others the latency outside it. It
also times a new process importing the command line (``core.cli``), which a ``memory-studio forget``
pays before its first query. Before/after: run it on a ``git archive`` of the older commit (copy this
file into it) and on this one.

    PYTHONPATH=. .venv/bin/python bench/pg_busy_maintenance.py [--backend postgres|libsql] [--writers 4]
        [--fill 20] [--rounds 2] [--prefill 30] [--hold 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

USERS = ("ann", "bob", "cyd", "dee", "eve", "fay")


# -- a writer process -------------------------------------------------------------------------------
def writer(url: str, user: str, out: str, stop: str) -> None:
    """Turns of ``user`` on three threads until ``stop`` exists; one JSON line per turn (wall times)."""
    from fleet_worker import MARK, fleet_memory, fleet_reply

    from core.agent import Agent
    from core.llm import ScriptedModel

    memory: Any = fleet_memory(url)
    agent = Agent("fleet", instructions="Answer.", model=ScriptedModel(fleet_reply, name="fleet"), memory=memory,
                  tracer=False)
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    n = 0
    while not os.path.exists(stop):
        thread = f"{user}-t{n % 3}"
        began = time.time()
        error = None
        try:
            agent.generate(f"{MARK.format(user)} {thread} q{n} k{os.getpid()}x{n}",
                           memory={"resource": user, "thread": thread})
        except Exception as exc:  # noqa: BLE001 - counted
            error = f"{type(exc).__name__}: {str(exc)[:200]}"
        agent.model.requests.clear()  # type: ignore[attr-defined]
        os.write(fd, (json.dumps({"user": user, "began": began, "ended": time.time(), "error": error}) + "\n").encode())
        n += 1
    memory.store.close()


# -- sampling the server -----------------------------------------------------------------------------
SAMPLE = """
SELECT a.pid, a.state, a.wait_event_type, a.wait_event, left(regexp_replace(a.query, '\\s+', ' ', 'g'), 70),
       pg_blocking_pids(a.pid), a.application_name,
       extract(epoch FROM now() - a.xact_start)
  FROM pg_stat_activity a
 WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.backend_type = 'client backend'
"""


class Sampler:
    """Every ``every`` s: each backend's state and wait, and whom it waits for."""

    def __init__(self, url: str, every: float = 0.02) -> None:
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True)
        self.every = every
        self.samples: list[tuple[float, list[tuple[Any, ...]]]] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.time(), self.conn.execute(SAMPLE).fetchall()))
            time.sleep(self.every)

    def __enter__(self) -> "Sampler":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.thread.join()
        self.conn.close()

    def report(self, command_pids: set[int]) -> list[str]:
        """What the command's backends were doing, and which other backends waited behind them."""
        own: Counter[str] = Counter()
        behind: Counter[str] = Counter()
        for _t, rows in self.samples:
            by_pid = {r[0]: r for r in rows}
            for pid, state, wtype, wevent, query, blockers, _app, _age in rows:
                if pid in command_pids and state == "active":
                    what = f"{wtype}:{wevent}" if wtype else "running"
                    if blockers:
                        who = ", ".join(sorted({(by_pid[b][4] or "?")[:40] + f" ({by_pid[b][1]})"
                                                for b in blockers if b in by_pid}))
                        what += f" behind [{who}]"
                    own[f"{what} | {query[:50]}"] += 1
                elif pid not in command_pids and blockers and set(blockers) & command_pids:
                    behind[f"{wtype}:{wevent} | {query[:50]}"] += 1
        lines = [f"    command {n * self.every:6.2f} s  {k}" for k, n in own.most_common(8)]
        lines += [f"    writer waited behind it {n * self.every:6.2f} s  {k}" for k, n in behind.most_common(5)]
        return lines


# -- timing a command's steps --------------------------------------------------------------------------
class Steps:
    """Wall time spent in named functions while a command runs (patched in, for this bench only)."""

    def __init__(self) -> None:
        self.spent: Counter[str] = Counter()

    def wrap(self, owner: Any, name: str, label: str | None = None) -> None:
        original = getattr(owner, name)
        steps = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                steps.spent[label or name] += time.perf_counter() - start

        setattr(owner, name, timed)


def run_command(store: Any, name: str, steps: Steps) -> tuple[float, str]:
    from core.edits.forget import forget_resource

    started = time.perf_counter()
    if name == "forget":
        import core.edits.forget as forget_mod

        check = getattr(forget_mod, "check_after_forget", None) or forget_mod.mentions  # (the code before: mentions)
        report = forget_resource(store, "bob", check=check)
        said = (f"{report.total} rows, leftovers {report.leftovers or 'none'}, "
                f"written since {getattr(report, 'written_since', None) or 'none'}")
    else:
        said = f"{store.vacuum():,} bytes given back"
    return time.perf_counter() - started, said


def hold_reader(url: str, seconds: float) -> None:
    """A reader that leaves its transaction open (a report, an export, a Studio read held by a slow client)."""
    import psycopg

    with psycopg.connect(url, application_name="held-reader") as conn:
        conn.execute("SELECT count(*) FROM mastra_messages").fetchone()
        time.sleep(seconds)
        conn.rollback()


def latencies(path: Path, windows: list[tuple[float, float]]) -> tuple[list[float], list[float], list[str]]:
    during: list[float] = []
    outside: list[float] = []
    errors: list[str] = []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r["error"] is not None:
            errors.append(r["error"])
        took = r["ended"] - r["began"]
        (during if any(r["began"] < b and r["ended"] > a for a, b in windows) else outside).append(took)
    return during, outside, errors


def fmt(values: list[float]) -> str:
    if not values:
        return "none"
    values = sorted(values)
    return (f"n {len(values)}, median {statistics.median(values) * 1000:.0f} ms, "
            f"p95 {values[min(len(values) - 1, int(len(values) * 0.95))] * 1000:.0f} ms, max {values[-1] * 1000:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=("postgres", "libsql"), default="postgres")
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--fill", type=float, default=20.0, help="seconds the writers write before the commands")
    parser.add_argument("--rounds", type=int, default=1, help="forget + vacuum pairs")
    parser.add_argument("--gap", type=float, default=3.0, help="seconds between commands")
    parser.add_argument("--prefill", type=int, default=30, help="other users of 300 messages each, saved first")
    parser.add_argument("--hold", type=float, default=5.0,
                        help="Postgres: seconds a reader keeps a transaction open on mastra_messages as the vacuum starts")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="busy-maint-"))
    server = None
    if args.backend == "postgres":
        spec = importlib.util.spec_from_file_location("suite_conftest", ROOT / "tests" / "conftest.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        server = mod.start_server(folder / "pgdata")
        url, _drop = server.fresh_database()
    else:
        url = str(folder / "busy.db")
    from fleet_worker import fleet_memory

    from core import Message

    filler: Any = fleet_memory(url)  # the tables, before the writers race to make them
    for u in range(args.prefill):
        for t in range(5):
            filler.save_messages([Message.user(f"user {u} thread {t} message {i} about k{u}x{t}x{i}",
                                               thread_id=f"old{u}-t{t}", resource_id=f"old{u}") for i in range(60)])
    filler.store.close()
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import core.cli"], env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    cli_start = time.perf_counter() - started
    stop = folder / "stop"
    outs = [folder / f"writer-{i}.jsonl" for i in range(args.writers)]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
    procs = [subprocess.Popen([sys.executable, __file__, "--writer", url, USERS[i % len(USERS)], str(outs[i]),
                               str(stop)], env=env) for i in range(args.writers)]
    try:
        time.sleep(args.fill)
        import core.edits.forget as forget_mod
        from core import open_store

        steps = Steps()
        for fn in ("_targets", "mentions", "_forget_log", "_unknown_tables"):
            if hasattr(forget_mod, fn):
                steps.wrap(forget_mod, fn)
        if hasattr(forget_mod, "at_commit"):  # the check: its part in the write transaction, and after the commit
            steps.wrap(forget_mod, "at_commit", "check at commit")
            steps.wrap(forget_mod, "check_after_forget", "check after")
        steps.wrap(forget_mod, "_apply", "deletes")
        store = open_store(url)
        steps.wrap(store.db, "lock", "advisory locks")
        steps.wrap(store.db, "_reclaim", "vacuum (whole)")
        pids: set[int] = set()  # the command's backends: every connection its store checks out
        if server is not None:
            import sqlalchemy as sa

            sa.event.listen(store.db.engine, "checkout", lambda dbapi, _rec, _proxy: pids.add(dbapi.info.backend_pid))
        windows: list[tuple[float, float]] = []
        results = []
        for _round in range(args.rounds):
            for name in ("forget", "vacuum"):
                time.sleep(args.gap)
                steps.spent.clear()
                sampler = Sampler(url) if server is not None else None
                holder = None
                if name == "vacuum" and server is not None and args.hold > 0:
                    holder = threading.Thread(target=hold_reader, args=(url, args.hold))
                    holder.start()
                    time.sleep(0.2)
                began = time.time()
                try:
                    if sampler is not None:
                        with sampler:
                            took, said = run_command(store, name, steps)
                    else:
                        took, said = run_command(store, name, steps)
                except Exception as exc:  # noqa: BLE001 - reported with the server's account of it
                    took, said = time.time() - began, f"FAILED {type(exc).__name__}: {str(exc)[:300]}"
                    log = folder / "pgdata" / "log"
                    if log.exists():
                        text = log.read_text(errors="replace").splitlines()
                        at = max((i for i, x in enumerate(text) if "deadlock" in x), default=None)
                        if at is not None:
                            said += "\n" + "\n".join(text[max(0, at - 3):at + 12])
                windows.append((began, time.time()))
                if holder is not None:
                    holder.join()
                results.append((name, took, said, dict(steps.spent), sampler.report(pids) if sampler else []))
        store.close()
    finally:
        stop.touch()
        for p in procs:
            p.wait(120)
    print(f"{args.backend}: {args.writers} writer processes (agent turns with the fleet's memory), "
          f"{args.prefill * 300:,} messages of other users saved first, then {args.fill:.0f} s of turns; "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"  a new process importing the command line (core.cli): {cli_start:.2f} s")
    if server is not None and args.hold > 0:
        print(f"  (as each vacuum starts, a reader keeps a transaction on mastra_messages open for {args.hold:.0f} s)")
    for name, took, said, spent, lines in results:
        parts = ", ".join(f"{k} {v:.2f}" for k, v in sorted(spent.items(), key=lambda kv: -kv[1]))
        print(f"  {name:<7} {took:6.2f} s  ({said}); steps (s): {parts}")
        for line in lines:
            print(line)
    during, outside, errors = [], [], []
    for out in outs:
        d, o, e = latencies(out, windows)
        during += d
        outside += o
        errors += e
    print(f"  writers' turns during the commands: {fmt(during)}")
    print(f"  writers' turns outside them:        {fmt(outside)}")
    refused = [e for e in errors if e.startswith("NotFoundError: Thread") and "forgotten" in e]
    print(f"  writers' failed turns: {len(errors) - len(refused)} (and {len(refused)} of the forgotten user refused "
          "because the forget came first: expected)")
    for key, n in Counter(e[:160] for e in errors if e not in refused).most_common(5):
        print(f"    {n} x {key}")
    if server is not None:
        server.stop()
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--writer":
        writer(*sys.argv[2:6])
    else:
        main()
