"""Fault runs: kill -9 during writes, and several processes at once. Prints the figures.

1. Kills: ``--kills`` child processes (default 100), round-robin over three workloads, each killed
   with SIGKILL at a random moment while it writes:
   - message saves (batches of 10 through ``Memory.save_messages``),
   - agent turns (``Agent.generate`` with a ``ScriptedModel``, history + working memory, traced),
   - working-memory writes (``Memory.update_working_memory``).
   A child appends a line to an acknowledgement file after each call returns (an O_APPEND write,
   which survives SIGKILL). After each kill the parent checks the file: acknowledged messages that
   are missing (lost), ``PRAGMA integrity_check`` (corrupt), batches stored in part (torn), turns
   whose input is stored without its reply or the reverse (half turns), acknowledged working-memory
   versions that are missing or newer than what is stored (lost updates).
2. Concurrency: three processes for ``--duration`` seconds (default 180) on one file: an agent
   running turns, a working-memory editor, and a reader assembling prompts and listing threads.
   All three also increment one shared working-memory counter with compare-and-set writes
   (``expected=``, the Studio editor's guard), retrying on ``ConcurrentUpdateError``. Lost updates
   = increments acknowledged minus the final counter; errors = any other exception.
3. Attacks (``bench/attacks.py``): issue 17's defects attempted as an attacker or a careless user
   would (hostile import files, gateway requests, poisoned spans, a Postgres restart, credentials in
   a model URL, a database deleted under the Studio), printed as attempts and failures per item.

4. Fleet (``--fleet libsql`` / ``--fleet postgres``, only that section): three ``memory-studio serve``
   processes (``tests/fleet_worker.py:agents``: a scripted model, working memory merged by its tool,
   semantic recall with the hashing embedder, observational memory) on one database, started at once;
   five users with a token each (a tokens file), three threads each, driven by the ``openai`` client
   from 15 threads (plain, streamed, and streams the client leaves after three chunks), each also
   trying another user's thread; one gateway killed with SIGKILL once a third of the turns are answered
   and started again; beside them an embedded agent process (turns of its own user, each followed by a
   compare-and-set working-memory edit as the Studio's editor writes it), the Studio offscreen reading
   each user's threads (messages, working memory, observations), and ``reindex``, ``vacuum``,
   ``export``/``import`` of one user, ``forget`` of another and the delete of one thread. Then, from the
   database alone: every answered turn stored once, in its thread, followed by its reply; no user's
   mark in another user's messages, answers, working memory or observations; working-memory versions
   one chain with every acknowledged field; nothing left of the forgotten user and the deleted thread
   (threads, observations, recall hits); every stored message with its vector and found by keyword.
   Every user message carries ``<<u:NAME>>`` and the model answers with the marks its prompt held.
   ``--fleet-retries N``: the clients retry lost answers as the ``openai`` client does (``max_retries=N``),
   each turn with an ``Idempotency-Key``; "stored once" then also says no retry stored a turn twice.

    .venv/bin/python bench/faults.py [--kills 100] [--duration 180] [--seed 1]
    .venv/bin/python bench/faults.py --attacks-only
    .venv/bin/python bench/faults.py --fleet libsql --fleet postgres [--fleet-turns 12] [--seed 1] [--fleet-retries 2]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core import Memory, MemoryOptions, Message, open_store  # noqa: E402
from core.agent import Agent  # noqa: E402
from core.llm import ScriptedModel  # noqa: E402
from core.working_memory import DEFAULT_KEPT_VERSIONS, ConcurrentUpdateError  # noqa: E402

KINDS = ("saves", "turns", "wm")
BATCH = 10
WM_OPTIONS = MemoryOptions(last_messages=6, working_memory={"enabled": True, "template": "# Notes\n- count: 0\n"})


def _reply(messages: list[dict[str, Any]], _tools: Any) -> str:
    last = next((m for m in reversed(messages) if m.get("role") == "user"), {})
    return f"reply to {last.get('content')}"


# -- children -------------------------------------------------------------------------------------

class Acks:
    """One line per completed call; os.write on an O_APPEND descriptor reaches the kernel at once."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def __call__(self, **record: Any) -> None:
        os.write(self.fd, (json.dumps(record) + "\n").encode())


def child_kill_run(kind: str, db: Path, acks_path: Path, run: int) -> None:
    acks = Acks(acks_path)
    with open_store(db) as store:
        if kind == "saves":
            memory = Memory(store)
            thread = f"saves-{run}"
            n = 0
            while True:
                ids = [f"{run}-{n}-{j}" for j in range(BATCH)]
                memory.save_messages([Message.user(f"message {i}", id=i, thread_id=thread, resource_id="r")
                                      for i in ids])
                acks(batch=ids)
                n += 1
                if n == 1:
                    print("ready", flush=True)
        elif kind == "turns":
            memory = Memory(store, WM_OPTIONS)
            agent = Agent("faults", instructions="Answer briefly.", model=ScriptedModel(_reply), memory=memory)
            thread = f"turns-{run}"
            n = 0
            while True:
                agent.generate(f"question {run}-{n}", memory={"resource": "r", "thread": thread})
                acks(turn=n, thread=thread)
                agent.model.requests.clear()
                n += 1
                if n == 1:
                    print("ready", flush=True)
        else:
            memory = Memory(store, WM_OPTIONS)
            n = 0
            while True:
                memory.update_working_memory(resource_id="r", working_memory=f"# Notes\n- run {run} write {n}\n")
                acks(run=run, write=n)
                n += 1
                if n == 1:
                    print("ready", flush=True)


def child_concurrent(role: str, db: Path, acks_path: Path, seconds: float) -> None:
    acks = Acks(acks_path)
    errors: Counter[str] = Counter()
    first: dict[str, str] = {}
    stop = time.monotonic() + seconds
    with open_store(db) as store:
        memory = Memory(store, WM_OPTIONS)
        opts = memory.effective_options().working_memory
        service = memory.working_memory_service
        agent = Agent("faults", instructions="Answer briefly.", model=ScriptedModel(_reply), memory=memory)
        n = 0
        while time.monotonic() < stop:
            try:
                if role == "agent":
                    thread = f"agent-{n // 50}"
                    agent.generate(f"question {n}", memory={"resource": "users", "thread": thread})
                    agent.model.requests.clear()
                    acks(turn=n, thread=thread)
                elif role == "reader":
                    threads = memory.list_threads(resource_id="users", per_page=5).threads
                    for t in threads[:2]:
                        memory.recall(thread_id=t.id, resource_id="users")
                        memory.assemble(thread_id=t.id, resource_id="users", input=[Message.user("preview")])
                    store.memory.thread_summaries("users")
                else:  # editor: what the Studio's working-memory pane does, plus its version history
                    service.versions("resource", "counter")
                _increment(service, opts, acks, role)
            except Exception as exc:  # noqa: BLE001 - counted and reported, the run goes on
                key = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
                errors[key] += 1
                first.setdefault(key, key)
            n += 1
    acks(role=role, done=n, errors=dict(errors))


def _increment(service: Any, opts: Any, acks: Acks, role: str) -> None:
    """Add one to the shared counter: read, then write guarded by ``expected`` (retried on conflict)."""
    while True:
        current = service.get(opts, thread_id=None, resource_id="counter").text
        value = int(current.rsplit(" ", 1)[1]) if current and current.startswith("count ") else 0
        try:
            service.write(opts, thread_id=None, resource_id="counter", value=f"count {value + 1}",
                          author=role, expected=current)
        except ConcurrentUpdateError:
            continue
        acks(role=role, increment=value + 1)
        return


# -- parent ---------------------------------------------------------------------------------------

def _spawn(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _read_acks(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass  # a line cut by the kill: the call had not been acknowledged
    return out


def _integrity(db: Path) -> str:
    with open_store(db, read_only=True, create=False) as store, store.db.read() as conn:
        return str(conn.exec_driver_sql("PRAGMA integrity_check").scalar())


def check_kill_run(kind: str, db: Path, acks: list[dict[str, Any]], run: int) -> dict[str, int]:
    found = Counter[str]()
    with open_store(db, read_only=True, create=False) as store:
        if kind == "saves":
            stored = {m.id for m in Memory(store).recall(thread_id=f"saves-{run}", per_page=False).messages} \
                if store.memory.get_thread(f"saves-{run}") else set()
            for ack in acks:
                missing = [i for i in ack["batch"] if i not in stored]
                found["messages lost"] += len(missing)
            by_batch = Counter(i.rsplit("-", 1)[0] for i in stored)
            found["torn batches"] += sum(1 for n in by_batch.values() if n != BATCH)
        elif kind == "turns":
            thread = f"turns-{run}"
            msgs = Memory(store).recall(thread_id=thread, per_page=False).messages \
                if store.memory.get_thread(thread) else []
            texts = [m.text for m in msgs]
            for ack in acks:
                if f"question {run}-{ack['turn']}" not in texts:
                    found["messages lost"] += 2
            roles = [m.role for m in msgs]
            found["half turns"] += sum(1 for i in range(0, len(roles), 2) if roles[i:i + 2] != ["user", "assistant"])
        else:
            service = Memory(store, WM_OPTIONS).working_memory_service
            versions = {v.text for v in service.versions("resource", "r")}
            current = Memory(store, WM_OPTIONS).get_working_memory(resource_id="r") or ""
            # Only the newest DEFAULT_KEPT_VERSIONS versions are kept (older ones are pruned by design):
            # a child that wrote more than that before its kill has older acknowledged versions gone.
            for ack in acks[-DEFAULT_KEPT_VERSIONS:]:
                if f"# Notes\n- run {run} write {ack['write']}\n" not in versions:
                    found["wm updates lost"] += 1
            if acks and current != f"# Notes\n- run {run} write {acks[-1]['write']}\n" and \
                    current != f"# Notes\n- run {run} write {acks[-1]['write'] + 1}\n":
                found["wm updates lost"] += 1  # stored value older than the last acknowledged write
    found["files corrupt"] += int(_integrity(db) != "ok")
    return dict(found)


def run_kills(folder: Path, kills: int, rng: random.Random) -> dict[str, Any]:
    totals: Counter[str] = Counter({"messages lost": 0, "files corrupt": 0, "half turns": 0, "torn batches": 0,
                                    "wm updates lost": 0})
    acked: Counter[str] = Counter()
    start = time.monotonic()
    for run in range(kills):
        kind = KINDS[run % len(KINDS)]
        db = folder / f"{kind}.db"
        ack_path = folder / f"{kind}-{run}.acks"
        child = _spawn(["--child", kind, "--db", str(db), "--acks", str(ack_path), "--run", str(run)])
        assert child.stdout is not None
        line = child.stdout.readline()
        if line.strip() != "ready":
            raise SystemExit(f"child {kind} #{run} failed to start: {line}{child.communicate()[1]}")
        time.sleep(rng.uniform(0.0, 0.4))  # somewhere in the middle of the next calls
        child.send_signal(signal.SIGKILL)
        child.communicate()
        acks = _read_acks(ack_path)
        acked[kind] += len(acks)
        for key, value in check_kill_run(kind, db, acks, run).items():
            totals[key] += value
        print(f"\r  kill {run + 1}/{kills} ({kind}, {len(acks)} calls acknowledged)     ", end="", file=sys.stderr,
              flush=True)
    print(file=sys.stderr)
    # The agent turns were traced into the DuckDB file beside the databases; a kill must not leave it
    # unusable (a broken file is set aside and replaced by the next writer).
    from core.traces.store import DuckDBObservabilityStore

    try:
        traces = DuckDBObservabilityStore(folder / "observability.duckdb", read_only=True).count_traces()
        totals["trace file unusable"] = 0
    except Exception:  # noqa: BLE001 - the figure is whether it opens
        traces, totals["trace file unusable"] = 0, 1
    return {"totals": dict(totals), "acked": dict(acked), "seconds": time.monotonic() - start, "traces": traces}


def run_concurrent(folder: Path, seconds: float) -> dict[str, Any]:
    db = folder / "shared.db"
    with open_store(db) as store:  # created (and migrated) once, before the three start
        Memory(store, WM_OPTIONS).create_thread(resource_id="users", thread_id="agent-0")
    roles = ("agent", "editor", "reader")
    children = {role: _spawn(["--concurrent", role, "--db", str(db), "--acks", str(folder / f"{role}.acks"),
                              "--seconds", str(seconds)]) for role in roles}
    for role, child in children.items():
        _, err = child.communicate()
        if child.returncode != 0:
            raise SystemExit(f"{role} process failed: {err}")
    errors: Counter[str] = Counter()
    increments = turns = 0
    lost_turns = 0
    with open_store(db, read_only=True, create=False) as store:
        memory = Memory(store, WM_OPTIONS)
        stored_texts: dict[str, set[str]] = {}
        for role in roles:
            for ack in _read_acks(folder / f"{role}.acks"):
                if "increment" in ack:
                    increments += 1
                elif "turn" in ack:
                    turns += 1
                    thread = ack["thread"]
                    if thread not in stored_texts:
                        stored_texts[thread] = {m.text for m in memory.recall(thread_id=thread, per_page=False)}
                    lost_turns += f"question {ack['turn']}" not in stored_texts[thread]
                elif "errors" in ack:
                    errors.update(ack["errors"])
        counter = memory.working_memory_service.get(memory.effective_options().working_memory, thread_id=None,
                                                    resource_id="counter").text or "count 0"
    final = int(counter.rsplit(" ", 1)[1])
    return {"seconds": seconds, "turns": turns, "increments": increments, "final": final,
            "lost updates": increments - final, "turns lost": lost_turns, "errors": dict(errors),
            "corrupt": int(_integrity(db) != "ok")}


# -- 4. a fleet: three gateways, an embedded agent and maintenance commands on one database -------------

REPO = Path(__file__).resolve().parents[1]
FLEET_USERS = ("ann", "bob", "cyd", "dee", "zed")  # zed is forgotten while the others write
FORGOTTEN = "zed"
DELETED_THREAD = "bob-t2"  # deleted (by an embedded process) once its client is done


def _fleet_env(url: str) -> dict[str, str]:
    env = {**os.environ, "FLEET_URL": url, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}",
           "QT_QPA_PLATFORM": "offscreen"}
    for key in ("MEMORY_STUDIO_GATEWAY_TOKEN", "MEMORY_STUDIO_GATEWAY_TOKENS_FILE", "MEMORY_STUDIO_DB"):
        env.pop(key, None)
    return env


class Gateway:
    """One ``memory-studio serve --agents fleet_worker:agents`` process."""

    def __init__(self, url: str, tokens: Path, log: Path) -> None:
        self.db_url, self.tokens, self.log = url, tokens, log
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "studio.cli", "serve", "--agents", "fleet_worker:agents", "--port", "0",
             "--tokens-file", str(self.tokens), "--log-level", "warning"],
            cwd=REPO, env=_fleet_env(self.db_url), stdout=subprocess.PIPE, stderr=open(self.log, "a"), text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if " on http://" not in line:
            self.proc.wait(30)
            raise SystemExit(f"a gateway did not start: {line}\n{self.log.read_text()[-3000:]}")
        self.url = line.split(" on ", 1)[1].split(" ", 1)[0]

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(60)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:  # requests stuck in it: said in the report (its log)
                self.proc.kill()
                self.proc.wait(60)


def _fleet_tokens(folder: Path) -> tuple[Path, dict[str, str]]:
    from core.gateway.tokens import new_token, token_sha256

    tokens = {user: new_token() for user in FLEET_USERS}
    path = folder / "tokens.json"
    path.write_text(json.dumps({"tokens": [{"name": f"{u}-app", "sha256": token_sha256(t), "resources": [u]}
                                           for u, t in tokens.items()]}))
    path.chmod(0o600)
    return path, tokens


def _client_turns(gateways: list[Gateway], user: str, token: str, thread: str, turns: int, seed: int,
                  log: list[dict[str, Any]], retries: int = 0) -> None:
    """One user's thread: ``turns`` turns through the gateways in turn, streamed or not, some left mid-stream.
    ``retries``: the client's own retries (``max_retries``), each turn with an ``Idempotency-Key`` of its own."""
    import uuid

    import openai

    from fleet_worker import MARK

    rng = random.Random(seed)
    for n in range(turns):
        gateway = gateways[(seed + n) % len(gateways)]
        client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=token, max_retries=retries, timeout=120)
        content = f"{MARK.format(user)} {thread} q{n} k{rng.randrange(10**9)}"
        meta = {"thread_id": thread, **({"resource_id": user} if n % 2 else {})}
        how = rng.choice(("plain", "stream", "stream", "leave"))
        record: dict[str, Any] = {"user": user, "thread": thread, "content": content, "how": how, "n": n,
                                  "began": time.monotonic()}
        keyed = {"Idempotency-Key": f"{thread}-q{n}-{uuid.uuid4().hex}"} if retries else {}
        try:
            if how == "plain":
                raw = client.chat.completions.with_raw_response.create(
                    model="fleet", messages=[{"role": "user", "content": content}], metadata=meta, extra_headers=keyed)
                reply = raw.parse()
                record.update(status=200, reply=reply.choices[0].message.content,
                              replayed=raw.headers.get("idempotent-replayed") == "true")
            else:
                parts = []
                raw_stream = client.chat.completions.with_raw_response.create(
                    model="fleet", messages=[{"role": "user", "content": content}], metadata=meta, stream=True,
                    extra_headers=keyed)
                record["replayed"] = raw_stream.headers.get("idempotent-replayed") == "true"
                with raw_stream.parse() as stream:
                    for chunk in stream:
                        if chunk.choices and chunk.choices[0].delta.content:
                            parts.append(chunk.choices[0].delta.content)
                        if how == "leave" and len(parts) >= 3:
                            break  # the client goes away mid-stream: the turn is abandoned
                if how == "leave":
                    record.update(status="left")
                else:
                    record.update(status=200, reply="".join(parts))
        except openai.APIStatusError as exc:
            record.update(status=exc.status_code, error=str(exc)[:300])
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:
            record.update(status="connection", error=str(exc)[:300])
        except Exception as exc:  # noqa: BLE001 - a stream cut by the kill, for one: recorded, the run goes on
            record.update(status="broken", error=f"{type(exc).__name__}: {exc}"[:300])
        record["ended"] = time.monotonic()
        log.append(record)
    # Another user's thread, with this user's token: refused before anything is read or written.
    # (Not zed's: once zed is forgotten, its thread ids are free, and a turn with another token may start one.)
    others = [u for u in FLEET_USERS if u not in (user, FORGOTTEN)]
    other = others[FLEET_USERS.index(user) % len(others)]
    client = openai.OpenAI(base_url=f"{gateways[seed % len(gateways)].url}/v1", api_key=token, max_retries=0,
                           timeout=120)
    for meta in ({"thread_id": f"{other}-t0"}, {"thread_id": f"{other}-t0", "resource_id": other}):
        try:
            client.chat.completions.create(model="fleet", metadata=meta, messages=[
                {"role": "user", "content": f"{MARK.format(user)} {thread} q9999 crossing"}])
            log.append({"user": user, "crossing": meta, "status": 200})
        except openai.APIStatusError as exc:
            log.append({"user": user, "crossing": meta, "status": exc.status_code})
        except openai.APIConnectionError:
            pass


def _cli(url: str, *args: str) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", "studio.cli", *args, "--db", url], cwd=REPO, env=_fleet_env(url),
                          capture_output=True, text=True, timeout=600)
    return done.returncode, (done.stdout + done.stderr).strip()


def _studio_reader(url: str, stop: Any, log: list[dict[str, Any]]) -> None:
    """The Studio, offscreen, in its own process: its thread list, a thread's messages, working memory."""
    proc = subprocess.Popen([sys.executable, str(REPO / "bench" / "faults.py"), "--studio-reader", "--db", url],
                            cwd=REPO, env=_fleet_env(url), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    stop.wait()
    out, err = proc.communicate("stop\n", timeout=300)
    log.append({"studio": out.strip().splitlines()[-1:] if out.strip() else [], "stderr": err[-2000:],
                "rc": proc.returncode})


def child_studio_reader(url: str) -> None:
    """The Studio offscreen on the fleet's database, until told to stop on standard input: it selects each
    user's threads in turn and shows their messages, working memory and observations. Counted as errors:
    warnings and errors it logs, exceptions no one caught (UI thread or workers), message boxes it opens.
    Prints one JSON line."""
    import logging
    import threading

    os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="fleet-studio-config-")
    from PySide6.QtCore import QEventLoop, QSettings, QTimer
    from PySide6.QtWidgets import QMessageBox

    from core import open_store
    from studio.app import launch, make_app, start
    from studio.main_window import MESSAGES, OBSERVATIONS, WORKING_MEMORY, MainWindow
    from studio.selection import Selection

    errors: list[str] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            errors.append(f"log {record.levelname}: {record.getMessage()[:300]}")

    logging.getLogger().addHandler(Catch(logging.WARNING))
    sys.excepthook = lambda kind, exc, tb: errors.append(f"uncaught {kind.__name__}: {exc}")
    threading.excepthook = lambda a: errors.append(f"uncaught in a thread {a.exc_type.__name__}: {a.exc_value}")
    for name in ("critical", "warning", "information"):
        setattr(QMessageBox, name, staticmethod(lambda *a, name=name, **k: errors.append(f"box {name}: {a[2:3]}")))
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    app = make_app()
    window = MainWindow(QSettings(), finish_later=True)
    window.resize(1400, 900)

    def wait(seconds: float) -> None:
        loop = QEventLoop()
        QTimer.singleShot(int(seconds * 1000), loop.quit)
        loop.exec()

    launch(window, lambda: start(window, url))
    wait(3)
    shown = 0
    store = open_store(url, read_only=True, create=False)
    while not stop.is_set():
        for user in FLEET_USERS:
            for summary in store.memory.thread_summaries(user)[:3]:
                window.select_thread(Selection(user, summary.thread.id))
                for spec in (MESSAGES, WORKING_MEMORY, OBSERVATIONS):
                    window.show_tab(spec)
                    wait(0.3)
                    shown += 1
            if stop.is_set():
                break
    store.close()
    window.close()
    app.processEvents()
    print(json.dumps({"shown": shown, "errors": errors[:20], "error_count": len(errors)}), flush=True)


def run_fleet(folder: Path, backend: str, threads_per_user: int, turns: int, seed: int,
              retries: int = 0) -> dict[str, Any]:
    """Three gateways, an embedded agent, the Studio and the maintenance commands on one database; one
    gateway killed mid-turn and restarted. Returns the client log, what the side processes said, and the
    invariants checked from the database alone (``check_fleet``)."""
    import threading

    if backend == "postgres":
        sys.path.insert(0, str(REPO / "tests"))
        from conftest import start_server

        server = start_server(folder / "pgdata")
        url, _drop = server.fresh_database()
    else:
        server, url = None, str(folder / "fleet.db")
    sys.path.insert(0, str(REPO / "tests"))
    tokens_path, tokens = _fleet_tokens(folder)
    gateways = [Gateway(url, tokens_path, folder / f"gateway-{i}.log") for i in range(3)]
    starters = [threading.Thread(target=g.start) for g in gateways]  # all three at once, as a deploy does
    for t in starters:
        t.start()
    for t in starters:
        t.join()
    log: list[dict[str, Any]] = []
    side: dict[str, Any] = {"cli": []}
    stop_studio = threading.Event()
    studio_log: list[dict[str, Any]] = []
    studio = threading.Thread(target=_studio_reader, args=(url, stop_studio, studio_log))
    studio.start()
    embedded_acks = folder / "embedded.acks"
    embedded = subprocess.Popen([sys.executable, str(REPO / "tests" / "fleet_worker.py"), "embedded", url, "dee",
                                 str(turns), str(embedded_acks)], cwd=REPO, env=_fleet_env(url),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    clients = {}
    for u, user in enumerate(FLEET_USERS):
        for k in range(threads_per_user):
            thread = f"{user}-t{k}"
            clients[thread] = threading.Thread(target=_client_turns, args=(
                gateways, user, tokens[user], thread, turns, seed * 1000 + u * 10 + k, log, retries))
    for t in clients.values():
        t.start()

    # Maintenance while they write, on a thread of its own: reindex, vacuum, an export and its import back,
    # the forget of zed once zed's clients are done, the delete of one thread once its client is done.
    # Each command's start and end are noted against the kill (the vectors must be complete after the kill
    # without a reindex that ran after it).
    t0 = time.monotonic()

    def maintenance() -> None:
        exported = folder / "ann.json"
        for args in (("reindex",), ("vacuum",), ("export", "--resource", "ann", "-o", str(exported)),
                     ("import", str(exported))):
            began = time.monotonic() - t0
            side["cli"].append((args[0], *_cli(url, *args), began, time.monotonic() - t0))
        clients[DELETED_THREAD].join()
        began = time.monotonic() - t0
        deleted = subprocess.run([sys.executable, "-c", "import os, sys; from fleet_worker import fleet_memory; "
                                  f"fleet_memory(os.environ['FLEET_URL']).delete_thread({DELETED_THREAD!r})"],
                                 cwd=REPO, env=_fleet_env(url), capture_output=True, text=True)
        side["cli"].append(("delete thread", deleted.returncode, deleted.stderr[-1000:], began, time.monotonic() - t0))

    def forgetting() -> None:
        # zed is forgotten while zed's clients still write (a user's erasure request does not wait for their
        # app to go quiet): once half of zed's turns are answered.
        while sum(1 for r in log if r.get("user") == FORGOTTEN and "n" in r) < threads_per_user * turns // 2 and \
                any(clients[f"{FORGOTTEN}-t{k}"].is_alive() for k in range(threads_per_user)):
            time.sleep(0.05)
        began = time.monotonic() - t0
        side["forget"] = (time.monotonic(), 0.0)
        side["cli"].append(("forget", *_cli(url, "forget", "--resource", FORGOTTEN, "--yes"), began,
                            time.monotonic() - t0))
        side["forget"] = (side["forget"][0], time.monotonic())

    keeper = threading.Thread(target=maintenance)
    keeper.start()
    forgetter = threading.Thread(target=forgetting)
    forgetter.start()
    # The kill: once a third of the turns are answered, gateway 0 dies (turns are in flight on it: 15
    # clients at once over three processes) and is started again on a new port.
    total = len(clients) * turns
    while sum(1 for r in log if r.get("status") == 200) < total // 3 and any(t.is_alive() for t in clients.values()):
        time.sleep(0.05)
    gateways[0].kill()
    side["killed at"] = sum(1 for r in log if "n" in r)
    side["killed after"] = time.monotonic() - t0
    gateways[0].start()
    keeper.join()
    forgetter.join()
    for t in clients.values():
        t.join()
    out, err = embedded.communicate()
    side["embedded"] = (embedded.returncode, err[-2000:])
    stop_studio.set()
    studio.join()
    side["studio"] = studio_log
    for g in gateways:
        g.stop()
    side["gateway logs"] = {g.log.name: g.log.read_text()[-3000:] for g in gateways}
    (folder / "clients.json").write_text(json.dumps(log))  # (for check_fleet again: --fleet-check)
    found = check_fleet(url, log, _read_acks(embedded_acks), side["forget"])
    if server is not None:
        server.stop()
    return {"log": log, "side": side, "found": found, "url": url}


def check_fleet(url: str, log: list[dict[str, Any]], embedded: list[dict[str, Any]],
                forget: tuple[float, float]) -> dict[str, Any]:
    """The invariants, from the database alone (through the engine's reads). ``forget``: when the forget of
    zed began and ended (zed's requests answered before it must be gone; those begun after it, kept)."""
    from fleet_worker import fleet_memory, marks, wm_field

    found: Counter[str] = Counter()
    examples: dict[str, str] = {}

    def bad(key: str, example: str) -> None:
        found[key] += 1
        examples.setdefault(key, example[:400])

    memory: Any = fleet_memory(url)
    store = memory.store
    answered = [r for r in log if r.get("status") == 200 and "content" in r] + \
        [{**r, "status": 200} for r in embedded if "content" in r]
    for r in log:
        if "crossing" in r and r["status"] == 200:
            bad("another user's thread answered", json.dumps(r))
        if "reply" in r and not marks(r["reply"]) <= {r["user"]}:
            bad("another user's memory in an answer (client side)", r["reply"][:200])
    by_thread: dict[str, list[Any]] = {}
    owners: dict[str, str] = {}
    for user in FLEET_USERS:
        for summary in store.memory.thread_summaries(user):
            owners[summary.thread.id] = user
            by_thread[summary.thread.id] = memory.recall(thread_id=summary.thread.id, resource_id=user, per_page=False).messages
    for thread, msgs in by_thread.items():
        owner = owners[thread]
        for m in msgs:
            if not marks(m.text) <= {owner}:
                bad("another user's mark in a stored message", f"{thread}: {m.text[:200]}")
    where: dict[str, list[tuple[str, int]]] = {}
    for thread, msgs in by_thread.items():
        for i, m in enumerate(msgs):
            if m.role == "user":
                where.setdefault(m.text, []).append((thread, i))
    # zed's requests that ended before the forget began are gone; those that began after it ended are kept.
    before = [r for r in log if r.get("user") == FORGOTTEN and "n" in r and r["ended"] < forget[0]]
    after = [r for r in answered if r["user"] != FORGOTTEN or r.get("began", 0) > forget[1]]
    for r in before:
        if r["content"] in where:
            bad("a forgotten user's message kept", r["content"])
        label = " ".join(r["content"].split()[:3])
        for thread in (t for t, owner in owners.items() if owner == FORGOTTEN):
            for hit in memory.search(r["content"].split()[-1], resource_id=FORGOTTEN, thread_id=thread,
                                     mode="keyword", top_k=5):
                if hit.message_id not in {m.id for m in by_thread[thread]}:
                    bad("recall finds a forgotten user's message", f"{label}: {hit.message_id}")
        r["label"] = label
    for r in after:
        user, thread = r["user"], r["thread"]
        if thread == DELETED_THREAD:
            continue
        places = where.get(r["content"], [])
        if len(places) != 1:
            bad(f"answered turn stored {len(places)} times", json.dumps(r)[:300])
            continue
        t, i = places[0]
        if t != thread or owners.get(t) != user:
            bad("answered turn in the wrong thread", f"{r['content']} in {t}")
            continue
        msgs = by_thread[t]
        nxt = next((j for j in range(i + 1, len(msgs)) if msgs[j].role == "user"), len(msgs))
        if not any(m.role == "assistant" and r["reply"].strip() and r["reply"].strip() in m.text
                   for m in msgs[i + 1:nxt]):
            bad("answered turn without its reply after it", f"{r['content']} -> {[m.text[:60] for m in msgs[i + 1:nxt]]}")
    # Working memory: one chain per user (each version keeps every field of the one before), every field of an
    # answered turn and every acknowledged edit present, and only the user's own fields.
    opts = memory.effective_options().working_memory
    service = memory.working_memory_service
    gone = {wm_field(r["content"]) for r in before} - {None}
    for version in service.versions("resource", FORGOTTEN):
        kept = gone & set(json.loads(version.text or "{}"))
        if kept:
            bad("a forgotten user's working memory kept", f"v{version.id}: {sorted(kept)[:5]}")
    for user in FLEET_USERS:
        current = service.get(opts, thread_id=None, resource_id=user).data or {}
        for key in current:
            if not (key.startswith(f"{user}-") or key.startswith("edit_")):
                bad("another user's field in working memory", f"{user}: {key}")
        wanted = {wm_field(r["content"]) for r in after if r["user"] == user} - {None}
        wanted |= {r["edit"] for r in embedded if r.get("user") == user and "edit" in r}
        for key in sorted(wanted - set(current)):
            bad("working-memory update lost", f"{user}: {key}")
        previous: set[str] = set()
        for version in sorted(service.versions("resource", user), key=lambda v: v.id):
            keys = set(json.loads(version.text or "{}"))
            if not previous <= keys:
                bad("working-memory versions not one chain", f"{user} v{version.id} dropped {sorted(previous - keys)}")
            previous = keys
    # Observations: only the thread owner's marks; none left for the forgotten user or the deleted thread.
    with store.db.read() as conn:
        rows = conn.exec_driver_sql('SELECT "resourceId", "threadId", "activeObservations" FROM '
                                    'mastra_observational_memory').fetchall()
    for resource, thread, text in rows:
        if thread == DELETED_THREAD:
            bad("observations of the deleted thread kept", f"{resource} {thread}")
        elif not marks(text or "") <= {resource}:
            bad("another user's mark in observations", f"{resource}/{thread}: {(text or '')[:200]}")
        for r in before:
            if resource == FORGOTTEN and r["label"] + "." in (text or ""):
                bad("observations of a forgotten user's message kept", f"{thread}: {r['label']}")
    if store.memory.get_thread(DELETED_THREAD) is not None:
        bad("the deleted thread kept", DELETED_THREAD)
    for mode in ("keyword", "vector"):
        for hit in memory.search(f"bob {DELETED_THREAD} q1 q2", resource_id="bob", mode=mode, top_k=50):
            if hit.thread_id == DELETED_THREAD:
                bad("recall finds a deleted thread's message", f"{mode}: {hit.message_id}")
    # Recall: every stored message has its vector (no reindex ran after the kill), and every user message is
    # found by its own keyword (the k... word no other message holds).
    index = memory.recall_index
    for thread, msgs in by_thread.items():
        for m in index.unindexed([m for m in msgs if m.text.strip()]):
            bad("stored message without its vector", f"{thread}: {m.role} {m.text[:120]}")
        for m in msgs:
            if m.role != "user":
                continue
            hits = memory.search(m.text.split()[-1], resource_id=owners[thread], thread_id=thread, mode="keyword",
                                 top_k=5)
            if m.id not in {h.message_id for h in hits}:
                bad("stored message not found by keyword recall", f"{thread}: {m.text[:120]}")
    store.close()
    return {"found": dict(found), "examples": examples, "threads": len(by_thread),
            "messages": sum(len(v) for v in by_thread.values()), "answered": len(answered)}


def print_fleet(backend: str, result: dict[str, Any]) -> None:
    log, side, found = result["log"], result["side"], result["found"]
    statuses = Counter(str(r["status"]) for r in log if "n" in r)
    print(f"fleet on {backend}: 3 gateways (one killed with SIGKILL after {side['killed at']} requests and restarted), "
          f"an embedded agent, the Studio, {len(FLEET_USERS)} users")
    print(f"  requests by outcome     {dict(statuses)}")
    if any("replayed" in r for r in log):
        print(f"  answered from a kept outcome (Idempotent-Replayed) {sum(1 for r in log if r.get('replayed'))}")
    print(f"  threads / messages      {found['threads']} / {found['messages']} ({found['answered']} turns answered)")
    print(f"  the kill                {side['killed after']:.1f} s after the start")
    for name, rc, said, began, ended in side["cli"]:
        print(f"  {name:<22}  {began:5.1f}-{ended:5.1f} s  exit {rc}{'' if rc == 0 else ': ' + said[-300:]}")
    print(f"  embedded agent          exit {side['embedded'][0]}{'' if side['embedded'][0] == 0 else side['embedded'][1]}")
    for s in side["studio"]:
        print(f"  studio                  exit {s['rc']} {s['studio']} {s['stderr'][-500:] if s['rc'] else ''}")
    errors = [r for r in log if r.get("status") not in (200, "left", "connection") and "n" in r]
    for r in errors[:5]:
        print(f"    {r['status']}: {r.get('error', '')[:200]}")
    print(f"  invariants broken       {sum(found['found'].values())}")
    for key, n in found["found"].items():
        print(f"    {n} x {key}: {found['examples'][key]}")
    for name, text in side["gateway logs"].items():
        if "Traceback" in text or "ERROR" in text:
            print(f"  {name}: {text[-1500:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--duration", type=float, default=180.0, help="seconds for the three-process run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the databases (path printed)")
    parser.add_argument("--attacks-only", action="store_true", help="only the attack section (issue 17)")
    parser.add_argument("--fleet", choices=("libsql", "postgres"), action="append",
                        help="only the fleet section, on this backend (repeat for both)")
    parser.add_argument("--fleet-turns", type=int, default=12, help="turns per client thread in the fleet section")
    parser.add_argument("--fleet-retries", type=int, default=0, metavar="N",
                        help="fleet clients retry lost answers N times (the openai client's max_retries), each turn "
                             "with an Idempotency-Key, so a retry must not store a turn twice (default 0: no retries)")
    parser.add_argument("--studio-reader", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--concurrent", choices=("agent", "editor", "reader"), help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--acks", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--run", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.studio_reader:
        child_studio_reader(args.db)
        return
    if args.fleet:
        for backend in args.fleet:
            folder = Path(tempfile.mkdtemp(prefix=f"fleet-{backend}-"))
            print_fleet(backend, run_fleet(folder, backend, 3, args.fleet_turns, args.seed, args.fleet_retries))
            print(f"  (files in {folder})")
        return
    if args.child:
        child_kill_run(args.child, Path(args.db), args.acks, args.run)
        return
    if args.concurrent:
        child_concurrent(args.concurrent, Path(args.db), args.acks, args.seconds)
        return
    from attacks import print_attacks, run_attacks

    if args.attacks_only:
        print_attacks(*run_attacks())
        return
    rng = random.Random(args.seed)
    folder = Path(tempfile.mkdtemp(prefix="faults-"))
    print(f"kill -9 x{args.kills} across message saves, agent turns and working-memory writes…", file=sys.stderr)
    kills = run_kills(folder, args.kills, rng)
    print(f"3 processes for {args.duration:.0f} s (agent turns, working-memory editor, reader)…", file=sys.stderr)
    conc = run_concurrent(folder, args.duration)
    t = kills["totals"]
    print(f"kill -9 x{args.kills} ({', '.join(f'{v} {k} calls acknowledged' for k, v in kills['acked'].items())})")
    for key in ("messages lost", "files corrupt", "half turns", "torn batches", "wm updates lost",
                "trace file unusable"):
        print(f"  {key:<22} {t.get(key, 0)}")
    print(f"  ({kills['traces']} traces kept: spans still queued in a killed process's memory are lost, "
          f"by design; {kills['seconds']:.0f} s)")
    print(f"3 processes x {conc['seconds']:.0f} s: {conc['turns']} agent turns, {conc['increments']} counter increments")
    print(f"  {'errors':<22} {sum(conc['errors'].values())}")
    for err, n in sorted(conc["errors"].items(), key=lambda kv: -kv[1])[:5]:
        print(f"    {n} x {err}")
    print(f"  {'lost updates':<22} {conc['lost updates']} (counter {conc['final']} after {conc['increments']} increments)")
    print(f"  {'turns lost':<22} {conc['turns lost']}")
    print(f"  {'files corrupt':<22} {conc['corrupt']}")
    print("attacks…", file=sys.stderr)
    print_attacks(*run_attacks())
    if args.keep:
        print(f"databases kept in {folder}")
    else:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
