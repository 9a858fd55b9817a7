"""Peak memory and time of `memory-studio export` and `import` over a large history (docs/ARCHITECTURE.md, Figures).

One resource, one thread holding MESSAGES messages of about KB kilobytes each, a long observational-memory history
(OBSERVATIONS generations of one record, each holding its whole log), turn records, message versions (each the
stored row before and after an edit) and observation-log versions, and working-memory versions. The rows are
copies of rows the engine wrote (a message saved, an observation committed, an edit, a working-memory update), put
in with SQL so a large history is quick to make. Each step runs in a child process (``core`` from ``--tree``, so
another checkout, e.g. a ``git archive`` of main, runs the same steps), and its peak RSS (``wait4``) and time are
printed with the SHA-256 of the export file, which must be the same for every tree given the same data:

    PYTHONPATH=$PWD .venv/bin/python bench/export_history.py --messages 20000 --kb 16
    PYTHONPATH=$PWD .venv/bin/python bench/export_history.py --tree /tmp/main-tree --tree $PWD --postgres

The export is ``bench/export_fixed_clock.py`` (a fixed clock, so files of two trees compare byte for byte); the
import is ``memory-studio import --no-index`` of that file into an empty database.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def seed(target: str, messages: int, kb: int, observations: int, turns: int, edits: int, wm: int) -> None:
    """Make the history in ``target`` (a file path or a Postgres URL)."""
    from core import Memory, Message, open_store
    from core.edits.schema import MESSAGE_VERSIONS, OBSERVATION_VERSIONS
    from core.observational.records import lookup_key
    from core.observational.store import Cursor, Observation, commit_observation
    from core.transfer import rows as R

    words = "a long message with many words to keep, " * (kb * 1000 // 40 + 1)
    body = words[: kb * 1000]
    with open_store(target) as store:
        memory = Memory(store, {"working_memory": {"enabled": True, "scope": "resource"}})
        memory.create_thread(thread_id="t1", resource_id="ada", title="A long history")
        memory.save_messages([Message.user("hello", id="m-template", thread_id="t1", resource_id="ada")])
        memory.update_working_memory(resource_id="ada", working_memory="# Ada\n- likes tea\n")
        key = lookup_key("thread", thread_id="t1", resource_id="ada")
        commit_observation(store, record=None, key=key, scope="thread", thread_id="t1", resource_id="ada",
                           config={"messageTokens": 100}, obs=Observation(
                               active_observations="* (09:00) Ada likes tea", observation_tokens=9,
                               observed_ids=["m-template"], tokens_observed=40, pending_after=0,
                               cursor=Cursor("2026-03-01T09:01:00.000Z", "m-template"), current_task="tea"))
        with store.db.write() as conn:
            R.forget_columns(conn)

            def one(table: str, where: str = "") -> dict[str, Any]:
                return R.select_rows(conn, table, where)[0]

            def put(table: str, rows: Callable[[int], dict[str, Any]], n: int) -> None:
                for start in range(0, n, 500):
                    batch = [rows(i) for i in range(start, min(n, start + 500))]
                    names = list(batch[0])
                    sql = (f"INSERT INTO {R.quote(table)} ({', '.join(R.quote(c) for c in names)}) "
                           f"VALUES ({', '.join('?' * len(names))})")
                    conn.exec_driver_sql(sql, [R.bind_values(conn, table, r) for r in batch])

            msg = one("mastra_messages")
            content = json.loads(msg["content"])

            def stamp(i: int) -> str:
                return f"2026-01-{1 + i // 86_400_000 % 28:02d}T{i // 3_600_000 % 24:02d}:{i // 60_000 % 60:02d}:" \
                       f"{i // 1000 % 60:02d}.{i % 1000:03d}Z"

            def message(i: int) -> dict[str, Any]:
                text = f"{i} {body}"
                return dict(msg, id=f"m{i:08d}", createdAt=stamp(i * 1000), content=json.dumps(
                    dict(content, parts=[{"type": "text", "text": text}], content=text), ensure_ascii=False))

            put("mastra_messages", message, messages)
            record = one("mastra_observational_memory")
            log = "* (09:00) Ada said something worth keeping about tea and her plans\n" * (kb * 1000 // 66 + 1)

            def generation(i: int) -> dict[str, Any]:
                return dict(record, id=f"om{i:06d}", generationCount=i + 1, activeObservations=f"{i}\n{log}",
                            createdAt=stamp(i * 1000 + 7), updatedAt=stamp(i * 1000 + 7))

            put("mastra_observational_memory", generation, observations)
            put("memory_studio_turns", lambda i: {
                "input_message_id": f"m{i:08d}", "thread_id": "t1", "resource_id": "ada", "wm_version_id": None,
                "record": json.dumps({"history": [{"id": f"m{i:08d}"}], "prompt": body}), "texts": None,
                "createdAt": stamp(i * 1000)}, min(turns, messages))

            def stored(i: int, text: str) -> str:
                return json.dumps(dict(message(i), thread_id="t1", resourceId="ada",
                                       content=json.dumps(dict(content, parts=[{"type": "text", "text": text}],
                                                               content=text))))

            put(MESSAGE_VERSIONS, lambda i: {
                "id": i + 1, "message_id": f"m{i % max(messages, 1):08d}", "thread_id": "t1", "resource_id": "ada",
                "op": "edit", "author": "bench", "before_row": stored(i % max(messages, 1), f"before {i} {body}"),
                "after_row": stored(i % max(messages, 1), f"after {i} {body}"), "note": None,
                "createdAt": stamp((edits - i) * 997)}, edits if messages else 0)
            put(OBSERVATION_VERSIONS, lambda i: {
                "id": i + 1, "record_id": f"om{i % max(observations, 1):06d}", "lookup_key": key, "thread_id": "t1",
                "resource_id": "ada", "op": "edit", "author": "bench", "line_before": "a", "line_after": "b",
                "before_text": f"{i} {log}", "after_text": f"{i}\n{log}", "note": None,
                "createdAt": stamp((edits - i) * 991)}, edits if observations else 0)
            version = one("memory_studio_wm_versions")
            put("memory_studio_wm_versions", lambda i: dict(
                version, id=version["id"] + 1 + i, working_memory=f"# Ada {i}\n{body}",
                createdAt=stamp(i * 1000 + 3)), wm)


def child(tree: Path, args: list[str]) -> tuple[float, float, str]:
    """Run ``args`` with ``core`` from ``tree``: (peak RSS in MB, seconds, its standard error's last line)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    start = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, *args], env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=err)
        _pid, status, usage = os.wait4(proc.pid, 0)
        took = time.perf_counter() - start
        err.seek(0)
        said = err.read().decode(errors="replace").strip().splitlines()
    if status != 0:
        raise SystemExit(f"{args} failed in {tree}:\n" + "\n".join(said[-20:]))
    return usage.ru_maxrss / 1024, took, said[-1] if said else ""


def digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()[:16]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tree", action="append", type=Path, help="a checkout whose core runs the steps (repeatable)")
    p.add_argument("--messages", type=int, default=20_000)
    p.add_argument("--kb", type=int, default=16, help="about how many kB a message (and a log, a turn) holds")
    p.add_argument("--observations", type=int, default=2_000, help="generations of one observation record")
    p.add_argument("--turns", type=int, default=5_000)
    p.add_argument("--edits", type=int, default=5_000, help="message versions, and as many observation-log ones")
    p.add_argument("--wm", type=int, default=2_000, help="working-memory versions")
    p.add_argument("--postgres", action="store_true", help="the suite's PostgreSQL server instead of libSQL files")
    p.add_argument("--rounds", type=int, default=1, help="alternate the trees this many times")
    p.add_argument("--keep", type=Path, help="a folder to work in (kept); default a temporary one")
    a = p.parse_args()
    trees = a.tree or [ROOT]
    folder = a.keep or Path(tempfile.mkdtemp(prefix="export-history-"))
    folder.mkdir(parents=True, exist_ok=True)
    server = None
    if a.postgres:
        sys.path.insert(0, str(HERE))
        from scale import _pg_server

        server = _pg_server()

    def new_db(name: str) -> str:
        if server is not None:
            return str(server.fresh_database()[0])  # type: ignore[attr-defined]
        path = folder / name
        path.unlink(missing_ok=True)
        return str(path)

    source = new_db("source.db")
    started = time.perf_counter()
    seed(source, a.messages, a.kb, a.observations, a.turns, a.edits, a.wm)
    print(f"{'postgres' if server else 'libsql'}: {a.messages} messages of ~{a.kb} kB, {a.observations} observation "
          f"generations, {min(a.turns, a.messages)} turns, {a.edits} + {a.edits} edit versions, {a.wm} working-memory "
          f"versions; seeded in {time.perf_counter() - started:.0f} s; load {os.getloadavg()[0]:.1f}", flush=True)
    for _ in range(a.rounds):
        for tree in trees:
            out = folder / "export.json"
            out.unlink(missing_ok=True)
            rss, took, _said = child(tree, [str(HERE / "export_fixed_clock.py"), source, "ada", str(out)])
            size = out.stat().st_size
            line = f"  {str(tree):<40} export {rss:7.0f} MB {took:6.1f} s  {size / 1e6:7.1f} MB {digest(out)}"
            print(line, flush=True)
            target = new_db("target.db")
            rss, took, _said = child(tree, ["-m", "core.cli", "import", "--db", target, "--no-index", str(out)])
            print(f"  {'':<40} import {rss:7.0f} MB {took:6.1f} s  load {os.getloadavg()[0]:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
