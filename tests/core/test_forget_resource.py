"""Forgetting a resource (issue 21 item 2): afterwards no row of any table, in the database or in the
trace store, holds its ids or its text; another resource's data is untouched.

The resource gets every kind of row there is: messages in two threads (recall-indexed: vectors,
keyword docs, passages), working memory with versions, a delegation to a sub-agent (its own resource
``<resource>-researcher``), observational memory written by an observer, turn records, edited and
deleted messages (their versions), an edited observation, and traces. The scan after the forget is
this test's own: every table and every column of the database (libSQL through the standard
``sqlite3`` module, Postgres through ``psycopg``) and of the DuckDB trace file, cast to text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core import Agent, Memory, MemoryOptions, open_store
from core.embedding import HashingEmbedder
from core.llm import ScriptedModel, ScriptedReply, tool_call
from core.scopes import delegation_resource

pytestmark = pytest.mark.backends

GONE = "ada-forget-7f3"
KEPT = "bob-keep-91"
SECRET = "ZEBRA-SECRET-7781"
KEPT_TEXT = "PELICAN-KEEP-4410"
TEMPLATE = "# User\n- Name:\n- Secret:\n"


def observer(text: str) -> Any:
    def reply(messages: list[dict[str, Any]], tools: Any) -> str:
        return (f"<observations>\nDate: Mar 2, 2026\n* 🔴 (09:10) The user said the code word is {text}.\n"
                "* 🟡 (09:11) The user plans a trip.\n</observations>\n<current-task>\nRemember "
                f"{text}.\n</current-task>")

    return reply


def _conversation(store: Any, resource: str, text: str) -> None:
    embedder = HashingEmbedder()
    tracer = store.tracer()
    memory = Memory(store, MemoryOptions(last_messages=6, semantic_recall={"top_k": 2, "scope": "resource"},
                                         working_memory={"enabled": True, "template": TEMPLATE}),
                    embedder=embedder, name="main")
    researcher = Agent("researcher", instructions="Research.", model=ScriptedModel([f"Found {text} in the notes."]),
                       tracer=tracer)
    model = ScriptedModel([
        ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": f"# User\n- Name: X\n- Secret: {text}\n"}),)),
        f"Noted: {text}.",
        ScriptedReply(tool_calls=(tool_call("agent-researcher", {"prompt": f"Look up {text}"}),)),
        f"The researcher found {text}.",
        f"Yes, {text} again.",
    ])
    agent = Agent("main", instructions="Be brief.", model=model, memory=memory, agents=[researcher], tracer=tracer)
    agent.generate(f"My code word is {text}.", memory={"resource": resource, "thread": f"{resource}-t1"})
    agent.generate(f"Ask the researcher about {text}.", memory={"resource": resource, "thread": f"{resource}-t1"})
    agent.generate(f"Still {text}?", memory={"resource": resource, "thread": f"{resource}-t2"})
    # Observed in the turn (buffer_tokens=False): the scripted observer gives every batch the same lines, and
    # the edit below needs its line to be unique (buffering makes one batch per few tokens: issue 19).
    om = Memory(store, MemoryOptions(observational_memory={"enabled": True, "message_tokens": 20,
                                                           "buffer_tokens": False}), name="om",
                observer_model=ScriptedModel(observer(text), name="observer"))
    om_agent = Agent("journal", instructions="Keep notes.", model=ScriptedModel([f"Ok {text}.", "Fine."]), memory=om,
                     tracer=tracer)
    om_agent.generate(f"A long note: the code word is {text}, and we plan a trip to the coast in May.",
                      memory={"resource": resource, "thread": f"{resource}-om"})
    om_agent.generate("Another note about the trip.", memory={"resource": resource, "thread": f"{resource}-om"})
    tracer.flush(10.0)
    # Edits and deletes leave versions behind (which hold the old text).
    first = memory.recall(thread_id=f"{resource}-t1", resource_id=resource, per_page=False).messages
    memory.edit_message(first[0].id, resource_id=resource, text=f"My code word was {text}, edited.")
    memory.delete_messages([first[1].id], resource_id=resource)
    from core.observational import load_current

    current = load_current(store, thread_id=f"{resource}-om")
    assert current is not None and text in current.active_observations
    line = next(x for x in current.active_observations.splitlines() if "plans a trip" in x)
    om.edit_observation(current.id, line, f"* 🟡 (09:11) The user plans a trip ({text}).", resource_id=resource)


# -- the test's own scan: every table, every column, as text ---------------------------------------------
def _scan_sqlite(path: Path, needles: list[str]) -> dict[str, list[str]]:
    import sqlite3

    found: dict[str, list[str]] = {}
    con = sqlite3.connect(path)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            try:
                columns = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
            except sqlite3.DatabaseError:
                continue
            for column in columns:
                for needle in needles:
                    try:
                        n = con.execute(f'SELECT count(*) FROM "{table}" WHERE instr(CAST("{column}" AS BLOB), '
                                        "CAST(? AS BLOB)) > 0", (needle,)).fetchone()[0]
                    except sqlite3.OperationalError as exc:  # e.g. a virtual table's module missing here
                        pytest.fail(f"could not scan {table}.{column}: {exc}")
                    if n:
                        found.setdefault(needle, []).append(f"{table}.{column} ({n})")
    finally:
        con.close()
    return found


def _scan_postgres(url: str, needles: list[str]) -> dict[str, list[str]]:
    import psycopg

    found: dict[str, list[str]] = {}
    with psycopg.connect(url) as con:
        columns = con.execute("SELECT table_name, column_name FROM information_schema.columns "
                              "WHERE table_schema = current_schema()").fetchall()
        for table, column in columns:
            for needle in needles:
                n = con.execute(f'SELECT count(*) FROM "{table}" WHERE strpos(CAST("{column}" AS TEXT), %s) > 0',
                                (needle,)).fetchone()[0]
                if n:
                    found.setdefault(needle, []).append(f"{table}.{column} ({n})")
    return found


def _scan_duckdb(path: Path, needles: list[str]) -> dict[str, list[str]]:
    import duckdb

    found: dict[str, list[str]] = {}
    if not path.exists():
        return found
    con = duckdb.connect(str(path), read_only=True)
    try:
        columns = con.execute("SELECT table_name, column_name FROM information_schema.columns").fetchall()
        for table, column in columns:
            for needle in needles:
                n = con.execute(f'SELECT count(*) FROM "{table}" WHERE strpos(CAST("{column}" AS VARCHAR), ?) > 0',
                                [needle]).fetchone()[0]
                if n:
                    found.setdefault(needle, []).append(f"{table}.{column} ({n})")
    finally:
        con.close()
    return found


_SCAN_ELSEWHERE = (
    "import json, sys; from pathlib import Path; sys.path.insert(0, sys.argv[3]); "
    "from tests.core.test_forget_resource import _scan_sqlite; "
    "print(json.dumps(_scan_sqlite(Path(sys.argv[1]), json.loads(sys.argv[2]))))"
)


def _scan_sqlite_elsewhere(path: Path, needles: list[str]) -> dict[str, list[str]]:
    """``_scan_sqlite`` in another process, as any other tool reads the file. In this process Python's
    own SQLite (a second copy of SQLite beside the driver's) would break the engine's open connections:
    POSIX locks are per process, so closing it releases their locks and deletes the WAL they still use
    (SQLite's "multiple copies of SQLite in one application" caveat)."""
    import json
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", _SCAN_ELSEWHERE, str(path), json.dumps(needles), str(root)],
                          capture_output=True, text=True, timeout=300, check=True)
    found: dict[str, list[str]] = json.loads(done.stdout)
    return found


def scan(db_path: Any, needles: list[str]) -> dict[str, list[str]]:
    if isinstance(db_path, str) and db_path.startswith("postgresql"):
        return _scan_postgres(db_path, needles)
    found = _scan_sqlite_elsewhere(Path(db_path), needles)
    for needle, where in _scan_duckdb(Path(db_path).with_name("observability.duckdb"), needles).items():
        found.setdefault(needle, []).extend(f"observability.duckdb:{w}" for w in where)
    return found


def _threads(resource: str) -> list[str]:
    return [f"{resource}-t1", f"{resource}-t2", f"{resource}-om"]


def test_forget_leaves_no_row_naming_the_resource_anywhere(db_path: Any) -> None:
    store = open_store(db_path)
    try:
        _conversation(store, GONE, SECRET)
        _conversation(store, KEPT, KEPT_TEXT)
        needles = [GONE, SECRET, *_threads(GONE)]
        before = scan(db_path, needles)
        # Every kind of place holds it before (so the scan after means something).
        places = " ".join(w for where in before.values() for w in where)
        # (the keyword docs: their own table on Postgres, their FTS5 rows on libSQL, ``0031_recall_keyword_rows``)
        keyword = "memory_studio_message_fts" if store.capabilities.full_text == "fts5" else "memory_studio_fts_docs"
        for table in ("mastra_messages", "mastra_threads", "mastra_resources", "memory_studio_wm_versions",
                      "mastra_observational_memory", "memory_studio_turns", "memory_studio_message_versions",
                      "memory_studio_om_versions", keyword, "memory_messages_", "mastra_ai_spans"):
            assert table in places, f"the conversation left nothing in {table}: {sorted(before)}"
        kept_before = scan(db_path, [KEPT, KEPT_TEXT])

        preview = Memory(store).forget_resource(GONE, dry_run=True)
        assert preview.dry_run and preview.removed["messages"] > 0
        assert scan(db_path, needles) == before, "a dry run deletes nothing"
        assert delegation_resource(GONE, "researcher") in preview.resources, \
            "the sub-agent's rows are the resource's too"

        report = Memory(store).forget_resource(GONE)
        store.tracer().flush(5.0)
    finally:
        store.close()
    assert report.complete and report.leftovers == {}
    assert report.removed["messages"] >= 10 and report.removed["threads"] == 4  # 3 threads + the sub-agent's
    assert scan(db_path, needles) == {}
    assert scan(db_path, [KEPT, KEPT_TEXT]) == kept_before, "another resource's rows are untouched"
    with open_store(db_path) as again:
        memory = Memory(again)
        assert memory.list_threads(resource_id=GONE).total == 0
        assert len(memory.recall(thread_id=f"{KEPT}-t1", resource_id=KEPT, per_page=False)) > 0


def test_forget_summary_counts_each_place_and_nothing_is_found_twice(db_path: Any) -> None:
    with open_store(db_path) as store:
        _conversation(store, GONE, SECRET)
        report = Memory(store).forget_resource(GONE)
        lines = "\n".join(report.summary_lines())
        for place in ("messages", "threads", "turn records", "working-memory versions", "message versions",
                      "observations", "observation versions", "keyword index"):  # (one name on both backends)
            assert f"  {place}: " in lines
        assert "vacuum" in lines
        again = Memory(store).forget_resource(GONE)
        assert again.total == 0 and not again.found


def test_the_preview_counts_what_the_forget_then_removes(db_path: Any) -> None:
    # On Postgres the preview said 142 rows (21 of the recall change log) and the forget "removed 144" (23): its own
    # deletes logged two more rows naming the resource, counted as if they had been the resource's.
    with open_store(db_path) as store:
        _conversation(store, GONE, SECRET)
        _conversation(store, KEPT, KEPT_TEXT)
        preview = Memory(store).forget_resource(GONE, dry_run=True)
        report = Memory(store).forget_resource(GONE)
    assert report.complete and report.removed["messages"] > 0
    assert report.total == preview.total and report.removed == preview.removed


def test_forget_cli_asks_then_deletes_and_can_vacuum(tmp_path: Path, backend: str, db_path: Any) -> None:
    if backend != "libsql":
        pytest.skip("the CLI's vacuum gives bytes back on a file")
    import io

    from core.cli import main

    with open_store(db_path) as store:
        _conversation(store, GONE, SECRET)
    out, err = io.StringIO(), io.StringIO()
    assert main(["forget", "--db", str(db_path), "--resource", GONE], out=out, err=err) == 1
    assert "--yes" in err.getvalue() and "would remove" in out.getvalue()
    assert scan(db_path, [SECRET]), "without confirmation nothing is deleted"
    out = io.StringIO()
    assert main(["forget", "--db", str(db_path), "--resource", GONE, "--yes", "--vacuum"], out=out, err=err) == 0
    text = out.getvalue()
    assert "removed" in text and "vacuumed:" in text
    assert scan(db_path, [SECRET, GONE]) == {}
    out = io.StringIO()
    assert main(["forget", "--db", str(db_path), "--resource", GONE, "--yes"], out=out, err=err) == 0
    assert "nothing is stored" in out.getvalue()


def test_forget_refuses_a_read_only_database_and_a_bad_id(db_path: Any) -> None:
    from core import InvalidArgumentError, ReadOnlyError

    with open_store(db_path) as store:
        Memory(store).create_thread(resource_id="u", thread_id="t")
    with open_store(db_path, read_only=True) as ro:
        with pytest.raises(ReadOnlyError, match="Allow writes"):
            Memory(ro).forget_resource("u")
        assert Memory(ro).forget_resource("u", dry_run=True).removed["threads"] == 1
    with open_store(db_path) as store:
        with pytest.raises(InvalidArgumentError):
            Memory(store).forget_resource("")
        with pytest.raises(InvalidArgumentError):
            Memory(store).forget_resource("u\x00evil")
        assert Memory(store).get_thread("t") is not None


def test_forget_of_a_resource_with_hundreds_of_threads_checks_every_table_and_counts_a_row_once(db_path: Any) -> None:
    """The check after a forget looked for every thread id in one statement per table, which SQLite refuses
    past an expression depth of 1,000 ("Expression tree is too large"): the rows were deleted and then the
    command failed without its report. Found forgetting a resource of 3,000 threads."""
    from core import Message

    threads = [f"{GONE}-many-{k:03d}" for k in range(300)]
    with open_store(db_path) as store:
        memory = Memory(store)
        for thread in threads:
            memory.create_thread(resource_id=GONE, thread_id=thread)
        memory.save_messages([Message.user(f"hello {k}", thread_id=t, resource_id=GONE) for k, t in enumerate(threads)])
        memory.create_thread(resource_id=KEPT, thread_id=f"{KEPT}-t1")
        with store.db.write() as conn:  # another program's table, naming threads in a column forget does not know
            conn.exec_driver_sql("CREATE TABLE app_notes (id INTEGER PRIMARY KEY, body TEXT)")
            for i, body in enumerate([f'{{"thread": "{threads[-1]}"}}', f'{{"a": "{threads[0]}", "b": "{threads[-1]}"}}',
                                      f'{{"thread": "{KEPT}-t1"}}']):
                conn.exec_driver_sql("INSERT INTO app_notes (id, body) VALUES (?, ?)", (i + 1, body))
        report = Memory(store).forget_resource(GONE)
        assert report.removed["threads"] == 300 and report.removed["messages"] == 300
        assert report.leftovers == {"app_notes": 2}, "each row still naming a thread, counted once"
        assert "STILL NAMING IT: app_notes (2)" in "\n".join(report.summary_lines())
        assert Memory(store).list_threads(resource_id=KEPT).total == 1


@pytest.mark.libsql_only
def test_forget_clears_set_aside_span_files_and_names_broken_trace_files(tmp_path: Path) -> None:
    """Beside the trace file: spans a busy file spilled, spans the store could never take (``.poison-*.jsonl``)
    and trace files set aside as broken. The resource's spans go from the first two (the poison file was
    left untouched before); a broken file cannot be opened, so the report names it as not searched."""
    import json

    db = tmp_path / "memory.db"
    with open_store(db) as store:
        _conversation(store, GONE, SECRET)
        trace_file = store.observability.path
        span = {"traceId": "t-gone", "spanId": "s1", "threadId": f"{GONE}-t1", "resourceId": GONE,
                "input": SECRET}
        kept = {"traceId": "t-kept", "spanId": "s2", "threadId": f"{KEPT}-t1", "resourceId": KEPT,
                "input": KEPT_TEXT}
        poison = trace_file.with_name(f"{trace_file.name}.poison-4242.jsonl")
        poison.write_text(json.dumps(span) + "\n" + json.dumps(kept) + "\n", encoding="utf-8")
        broken = trace_file.with_name(f"{trace_file.name}.broken-20261204T120000Z")
        broken.write_bytes(b"not a duckdb file " + SECRET.encode())
        report = Memory(store).forget_resource(GONE)
    assert SECRET not in poison.read_text(encoding="utf-8") and KEPT_TEXT in poison.read_text(encoding="utf-8")
    assert report.removed["pending span files"] == 1
    assert not report.complete
    assert any(str(broken) in note and "delete" in note for note in report.notes)
