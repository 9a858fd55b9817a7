"""The command line as a developer uses it: wrong files, wrong flags, pipes, terminals, interruptions.

Each test is a defect a user could cause: a traceback, data written where only looking was asked
for, or an error that does not say what to do.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import select
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from core import Memory, Message, open_store
from core.cli import main as cli_main
from core.traces.store import DuckDBObservabilityStore

from .test_traces_postgres import PgSpanStore
from .test_traces_store import agent_trace

ROOT = Path(__file__).resolve().parents[2]


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli_main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def seed(path: Path, thread: str = "t1", resource: str = "ada") -> None:
    with open_store(path) as store:
        Memory(store).save_messages([Message.user("I am allergic to peanuts", thread_id=thread, resource_id=resource)])


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


# -- demo ----------------------------------------------------------------------------------------------

def test_demo_refuses_a_database_that_already_holds_conversations(tmp_path: Path) -> None:
    # A second `demo` (or one into a real database) added every demo turn again and mixed the demo's
    # users into real ones.
    db = tmp_path / "memory.db"
    seed(db, resource="ada")
    code, out, err = run("demo", "--db", str(db))
    assert code == 2 and out == ""
    assert "already holds 1 resource(s) and 1 thread(s)" in err and "a file that does not exist yet" in err
    with open_store(db, read_only=True) as store:
        assert [t.id for t in store.memory.list_threads()] == ["t1"]
        assert store.memory.thread_summaries()[0].message_count == 1


READ_ONLY_DEMO = """
import os, sys, io, json, tempfile
from core.cli import main
# Every module a demo loads is loaded now, by one into a scratch folder: 'nobody' cannot read them.
assert main(["demo", "--db", os.path.join(tempfile.mkdtemp(), "warm.db")], out=io.StringIO()) == 0
os.setgid(65534)
os.setuid(65534)
out, err = io.StringIO(), io.StringIO()
code = main(["demo", "--db", sys.argv[1]], out=out, err=err)
print(json.dumps({"code": code, "out": out.getvalue(), "err": err.getvalue()}))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="drops to 'nobody' in a child process: needs root")
def test_demo_into_a_read_only_file_says_so_and_writes_nothing() -> None:
    import json

    folder = Path(tempfile.mkdtemp(prefix="ms-cli-ro-"))  # outside pytest's private folder: 'nobody' reaches it
    try:
        folder.chmod(0o777)
        db = folder / "memory.db"
        open_store(db).close()  # an empty memory database
        db.chmod(0o444)
        before = digest(db)
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(READ_ONLY_DEMO), str(db)], capture_output=True,
                              text=True, cwd=folder, env=child_env(), timeout=300)
        assert done.stdout.strip(), done.stderr
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert result["code"] == 1 and "read-only" in result["err"] and "chmod" in result["err"], result
        assert "Traceback" not in done.stderr + result["err"]
        assert not (folder / "observability.duckdb").exists()
        assert digest(db) == before
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# -- a file that is not a memory database --------------------------------------------------------------

def foreign_db(path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    conn.execute("INSERT INTO invoices (total) VALUES (12.5)")
    conn.commit()
    conn.close()
    return path


@pytest.mark.parametrize("argv", [
    ("threads",), ("prompt", "--resource", "r", "--thread", "t", "hi"), ("vacuum",), ("demo",),
    ("forget", "--resource", "r", "--yes"), ("traces", "prune", "--keep-days", "1"), ("reindex",),
])
def test_a_sqlite_file_of_another_program_is_refused_and_left_as_it_was(tmp_path: Path, argv: tuple[str, ...]) -> None:
    # Read commands stopped at "no such table: mastra_threads"; `demo` added our tables and demo
    # users to the other program's file.
    db = foreign_db(tmp_path / "app.db")
    before = digest(db)
    code, out, err = run(*argv, "--db", str(db))
    assert code == 1 and out == ""
    assert "has no memory tables" in err and "not written by Memory Studio or Mastra" in err
    assert "memory-studio where" in err
    assert digest(db) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]


def test_checks_refuse_a_sqlite_file_of_another_program(tmp_path: Path) -> None:
    db = foreign_db(tmp_path / "app.db")
    checks = tmp_path / "checks.json"
    checks.write_text('[{"name": "n", "thread": "t", "turn": 1, "prompt_contains": "x"}]', encoding="utf-8")
    code, out, err = run("test", str(checks), "--db", str(db))
    assert code == 1 and "has no memory tables" in err


@pytest.mark.parametrize("text", ["[]", '{"checks": []}', "[]\n"])
def test_a_checks_file_with_no_checks_fails_instead_of_passing(tmp_path: Path, text: str) -> None:
    # A CI job over a checks file emptied by mistake went green (exit 0, "nothing to run") without checking
    # anything; like a misspelt key it is now an unusable file (exit 2), as pytest fails a run of no tests.
    from core.checks.cli import EXIT_BAD_FILE

    checks = tmp_path / "checks.json"
    checks.write_text(text, encoding="utf-8")
    junit = tmp_path / "report.xml"
    code, out, err = run("test", str(checks), "--db", str(tmp_path / "none.db"), "--junit", str(junit))
    assert code == EXIT_BAD_FILE and out == ""
    assert f"{checks} holds no checks, so nothing was checked" in err and "Add checks" in err
    assert not junit.exists() and not (tmp_path / "none.db").exists()


def test_an_empty_file_says_it_holds_nothing_instead_of_a_missing_table(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    db.touch()
    for argv in (("threads",), ("prompt", "--resource", "r", "--thread", "t", "hi")):
        code, out, err = run(*argv, "--db", str(db))
        assert code == 1 and "no tables yet (an empty database)" in err and "no such table" not in err
    assert db.stat().st_size == 0
    code, out, err = run("threads", "--db", ":memory:")
    assert code == 1 and "in-memory database, new and empty for each command" in err
    assert "Give --db a database file" in err


def test_a_mastra_database_is_still_read_as_it_is(tmp_path: Path) -> None:
    from .test_storage_layout import make_mastra_db

    db = tmp_path / "mastra.db"
    make_mastra_db(db)
    before = digest(db)
    code, out, _ = run("threads", "--db", str(db))
    assert code == 0 and "From Mastra" in out
    code, out, _ = run("prompt", "--db", str(db), "--resource", "user-1", "--thread", "mt1", "hi")
    assert code == 0 and "My name is Ada" in out
    assert digest(db) == before


# -- smaller ones --------------------------------------------------------------------------------------

def test_prompt_for_a_missing_thread_says_how_to_list_them(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    seed(db)
    code, _, err = run("prompt", "--db", str(db), "--resource", "ada", "--thread", "nope", "hi")
    assert code == 1 and "Thread 'nope' not found in" in err and "memory-studio threads" in err


def test_threads_for_an_empty_resource_id_does_not_claim_the_database_is_empty(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    seed(db)
    code, out, _ = run("threads", "--db", str(db), "--resource", "")
    assert code == 0 and out.startswith("no threads for resource")


def test_where_on_a_folder_says_it_is_a_folder(tmp_path: Path) -> None:
    code, out, _ = run("where", "--db", str(tmp_path))
    assert code == 0 and "exists: a folder, not a database file" in out and "bytes" not in out


def test_traces_prune_with_a_huge_age_limit_deletes_nothing(tmp_path: Path) -> None:
    # `--keep-days 1e308` (or 1e6) reached back before the year 1: OverflowError with a traceback.
    db = tmp_path / "m.db"
    seed(db)
    spans = DuckDBObservabilityStore(tmp_path / "observability.duckdb")
    spans.write_spans(agent_trace("old", base=datetime(2001, 1, 1, tzinfo=timezone.utc)))
    for days in ("1e308", "1000000"):
        code, out, err = run("traces", "prune", "--db", str(db), "--keep-days", days)
        assert code == 0, err
        assert "deleted 0 traces" in out
    assert spans.count_traces() == 1
    assert spans.prune(keep_days=1e308).traces_deleted == 0


def test_postgres_prune_with_a_huge_age_limit_deletes_nothing(pg_url: str) -> None:
    with open_store(pg_url) as store:
        obs = store.observability
        assert isinstance(obs, PgSpanStore)
        obs.write_spans(agent_trace("old", base=datetime(2001, 1, 1, tzinfo=timezone.utc)))
        assert obs.prune(keep_days=1e308).traces_deleted == 0
        assert obs.count_traces() == 1


# -- memory-studio test --------------------------------------------------------------------------------

@pytest.fixture
def checks_file(tmp_path: Path) -> Path:
    path = tmp_path / "checks.json"
    path.write_text('[{"name": "allergy", "thread": "t1", "turn": 1, "prompt_contains": "peanuts"}]',
                    encoding="utf-8")
    return path


def test_test_with_both_db_and_export_is_refused(tmp_path: Path, checks_file: Path) -> None:
    # --db was silently ignored: the checks ran over the export, and the output named a temporary file.
    db = tmp_path / "m.db"
    seed(db)
    export = tmp_path / "e.json"
    assert run("export", "--db", str(db), "--thread", "t1", "-o", str(export))[0] == 0
    code, out, err = run("test", str(checks_file), "--db", str(db), "--export", str(export))
    assert code == 2 and out == "" and "give --db or --export, not both" in err


def test_test_over_an_export_names_the_export_not_its_temporary_database(tmp_path: Path, checks_file: Path) -> None:
    # A check on a thread the export lacks said "thread 'gone' is not in /tmp/memory-checks-…/fixture.db",
    # a file deleted when the command ends.
    db = tmp_path / "m.db"
    seed(db)
    export = tmp_path / "e.json"
    assert run("export", "--db", str(db), "--thread", "t1", "-o", str(export))[0] == 0
    checks_file.write_text('[{"name": "gone", "thread": "gone", "turn": 1, "prompt_contains": "x"}]', encoding="utf-8")
    code, out, _ = run("test", str(checks_file), "--export", str(export))
    assert code == 1
    assert f"thread 'gone' is not in {export} (imported)" in out and "fixture.db" not in out


@pytest.mark.parametrize("target", ["folder", "missing-parent-file"])
def test_test_junit_that_cannot_be_written_is_an_error_not_a_traceback(tmp_path: Path, checks_file: Path,
                                                                       target: str) -> None:
    db = tmp_path / "m.db"
    seed(db)
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, so nothing can be made inside it", encoding="utf-8")
    junit = tmp_path / "reports" if target == "folder" else blocker / "r.xml"
    junit.mkdir() if target == "folder" else None
    code, out, err = run("test", str(checks_file), "--db", str(db), "--junit", str(junit))
    assert code == 2, err
    assert "1 passed" in out  # the checks ran; only the report is missing
    assert f"--junit {junit}: cannot be written" in err
    assert not list(tmp_path.glob("*.tmp"))


# -- forget at a terminal ------------------------------------------------------------------------------

def test_forget_answered_with_end_of_input_deletes_nothing(tmp_path: Path) -> None:
    # Ctrl-D at "Delete all of this…? [y/N]" raised EOFError with a traceback.
    db = tmp_path / "m.db"
    seed(db)
    master, slave = os.openpty()  # a real terminal on all three streams, as in a shell
    proc = subprocess.Popen([sys.executable, "-m", "core.cli", "forget", "--db", str(db), "--resource", "ada"],
                            stdin=slave, stdout=slave, stderr=slave, cwd=ROOT, env=child_env())
    os.close(slave)
    seen = b""

    def read_until(done: bytes) -> None:
        nonlocal seen
        deadline = time.monotonic() + 120
        while done not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # the child closed the terminal
                    return
                if not chunk:
                    return
                seen += chunk

    try:
        read_until(b"[y/N]")
        assert b"[y/N]" in seen, seen
        os.write(master, b"\x04")  # Ctrl-D: end of input
        read_until(b"nothing was deleted")
        proc.wait(timeout=120)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    assert b"Traceback" not in seen and b"EOFError" not in seen, seen
    assert b"nothing was deleted" in seen and proc.returncode == 1
    with open_store(db, read_only=True) as store:
        assert store.memory.get_thread("t1") is not None


# -- pipes ---------------------------------------------------------------------------------------------

def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path: Path) -> None:
    # `memory-studio threads | head -1`: the rest of the output met a closed pipe, with a traceback.
    db = tmp_path / "m.db"
    for i in range(3):
        seed(db, thread=f"t{i}")
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line is written
    done = subprocess.run([sys.executable, "-m", "core.cli", "threads", "--db", str(db)], stdout=write_end,
                          stderr=subprocess.PIPE, cwd=ROOT, env=child_env(), timeout=120)
    os.close(write_end)
    assert done.returncode == 141, done.stderr
    assert done.stderr == b""



# -- a database another process is writing ------------------------------------------------------------

HOLD_WRITE_LOCK = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("held", flush=True)
sys.stdin.readline()  # until the test says so
conn.execute("ROLLBACK")
"""


def test_a_write_that_waits_out_another_writers_lock_says_the_database_is_busy(tmp_path: Path) -> None:
    # It ended with a bare "error: database is locked": nothing about which file, why, or what to do.
    db = tmp_path / "m.db"
    seed(db)
    holder = subprocess.Popen([sys.executable, "-c", HOLD_WRITE_LOCK, str(db)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        code, out, err = run("forget", "--db", str(db), "--resource", "ada", "--yes")
    finally:
        holder.communicate("done\n", timeout=60)
    assert code == 1
    assert f"{db} is busy: another writer" in err and "nothing was written" in err and "Try again" in err
    with open_store(db, read_only=True) as store:
        assert store.memory.get_thread("t1") is not None


def test_threads_for_a_resource_id_that_is_not_utf8_names_the_id_not_a_failed_write(tmp_path: Path) -> None:
    # `threads --resource $'\xff'` (argv bytes that are not UTF-8 arrive as a lone surrogate) said
    # "A value could not be stored ... Nothing was written" for a command that only reads.
    db = tmp_path / "m.db"
    seed(db)
    code, out, err = run("threads", "--db", str(db), "--resource", "\udcff")
    assert code == 1 and out == ""
    assert "The resource id '\\udcff' cannot be used: it contains a lone surrogate (U+DCFF)" in err
    assert "could not be stored" not in err


# -- a broken trace file beside the database -----------------------------------------------------------

def test_a_broken_trace_file_is_reported_by_prune_and_forget_not_a_traceback(tmp_path: Path) -> None:
    # Both ended in DuckDB's IOException with a traceback ("not a valid DuckDB database file").
    db = tmp_path / "m.db"
    seed(db)
    broken = tmp_path / "observability.duckdb"
    broken.write_bytes(os.urandom(20_000))
    before = digest(broken)
    code, out, err = run("traces", "prune", "--db", str(db), "--keep-days", "1")
    assert code == 1 and "Traceback" not in err
    assert f"{broken} is not a readable trace file" in err and "nothing was pruned" in err and "delete it" in err
    assert digest(broken) == before
    code, out, err = run("forget", "--db", str(db), "--resource", "ada", "--yes")
    assert code == 1, err  # a place could not be reached
    assert f"the trace file {broken} is broken" in out and "could not be searched" in out
    assert "removed 3 row(s), 1 thread(s)" in out
    with open_store(db, read_only=True) as store:
        assert store.memory.get_thread("t1") is None
    seed(db, thread="t2")
    code, out, err = run("forget", "--db", str(db), "--resource", "ada", "--yes", "--vacuum")
    assert code == 1 and "Traceback" not in err, err
    assert f"MB from the database; the trace file {broken} is broken (not a DuckDB file) and was not compacted" in out


# -- a registered agent whose stored options this version cannot use --------------------------------

def test_prompt_with_an_agents_unusable_registered_options_names_the_agent_and_what_to_do(tmp_path: Path) -> None:
    # It said only "error: last_messages must be a non-negative integer or False, got 'lots'.": no word
    # of which agent or where that value lives.
    import json

    from core import MemoryOptions

    db = tmp_path / "m.db"
    with open_store(db) as store:
        memory = Memory(store, MemoryOptions(last_messages=4), name="travel")
        memory.register("travel")
        memory.save_messages([Message.user("Lisbon?", thread_id="t1", resource_id="li"),
                              Message.assistant("Yes.", thread_id="t1", resource_id="li",
                                                metadata={"agent": "travel"})])
    conn = sqlite3.connect(db)
    config = json.loads(conn.execute("SELECT config FROM memory_studio_agents WHERE name = 'travel'").fetchone()[0])
    config["options"]["last_messages"] = "lots"
    conn.execute("UPDATE memory_studio_agents SET config = ? WHERE name = 'travel'", (json.dumps(config),))
    conn.commit()
    conn.close()
    code, out, err = run("prompt", "--db", str(db), "--resource", "li", "--thread", "t1", "hi")
    assert code == 1 and out == ""
    assert "Agent 'travel' registered memory options that cannot be used (last_messages must be" in err
    assert "Run the agent again" in err


# -- stored text is shown, never obeyed by the terminal ------------------------------------------------

def test_control_characters_in_stored_text_are_shown_as_escapes_in_tables_and_prompts(tmp_path: Path) -> None:
    # A title with a newline broke `threads` into a bogus second row, and an escape sequence in a
    # title or message (text from users and models) was printed raw: it drove the terminal.
    import json

    db = tmp_path / "m.db"
    with open_store(db) as store:
        memory = Memory(store)
        memory.create_thread(resource_id="r\x1b]0;pwned\x07", thread_id="t1", title="Line one\nline two\x1b[2J")
        memory.save_messages([Message.user("hi \x1b[31mRED\x1b[0m", thread_id="t1", resource_id="r\x1b]0;pwned\x07")])
    code, out, _ = run("threads", "--db", str(db))
    assert code == 0
    rows = out.splitlines()
    assert len(rows) == 2 and "\x1b" not in out
    assert rows[1].startswith("t1 ") and rows[1].endswith("Line one\\nline two\\x1b[2J")
    assert "r\\x1b]0;pwned\\x07" in rows[1]
    code, out, _ = run("prompt", "--db", str(db), "--resource", "r\x1b]0;pwned\x07", "--thread", "t1", "next")
    assert code == 0 and "\x1b" not in out and "\x07" not in out
    assert "   hi \\x1b[31mRED\\x1b[0m" in out
    checks = tmp_path / "checks.json"
    checks.write_text('[{"name": "n", "thread": "t1", "turn": 1, "prompt_contains": "zzz"}]', encoding="utf-8")
    code, out, _ = run("test", str(checks), "--db", str(db))
    assert code == 1 and "hi \\x1b[31mRED" in out and "\x1b" not in out  # the failure's excerpt
    code, out, _ = run("threads", "--db", str(db), "--json")
    assert json.loads(out)[0]["title"] == "Line one\nline two\x1b[2J"  # machine output keeps the text as stored



def test_threads_keeps_its_columns_when_an_id_is_longer_than_the_column(tmp_path: Path) -> None:
    # A delegation's thread (`helper-<uuid>`, 43 characters) on resource `delegation:alice:helper` pushed the
    # count, the date and the title of its row right of everyone else's: the table no longer read as one.
    from core.terminal_text import display_width

    db = tmp_path / "m.db"
    long_thread = "helper-01a24570-9882-7d62-9820-3a0f9ce7fc04"
    with open_store(db) as store:
        memory = Memory(store)
        memory.save_messages([Message.user("hi", thread_id="trip", resource_id="alice")])
        memory.save_messages([Message.user("weather?", thread_id=long_thread, resource_id="delegation:alice:helper")])
        memory.save_messages([Message.user("旅行", thread_id="上海出差的长长的线程名字很长很长很长", resource_id="李")])
    code, out, _ = run("threads", "--db", str(db))
    assert code == 0
    header, *rows = out.splitlines()
    assert len(rows) == 3 and any(long_thread in r for r in rows)

    def column_of(line: str, text: str) -> int:  # the terminal column where ``text`` ends in ``line``
        return display_width(line[:line.index(text) + len(text)])

    msgs_end = column_of(header, "MSGS")
    activity = column_of(header, "LAST ACTIVITY") - len("LAST ACTIVITY")
    for row in rows:
        count = row.split()[2]
        assert column_of(row, " " + count + "  ") - 2 == msgs_end, row
        date = re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d", row)
        assert date is not None and display_width(row[:date.start()]) == activity, row  # under its heading


UNWRITABLE_TRACES = """
import io, json, os, shutil, sys, tempfile
from pathlib import Path
from core.cli import main
# Load every module both commands use, on a scratch copy, before privileges are dropped.
scratch = Path(tempfile.mkdtemp())
for name in ("m.db", "observability.duckdb"):
    shutil.copy(Path(sys.argv[1]).with_name(name), scratch / name)
COMMANDS = (["traces", "prune", "--keep-days", "1"], ["forget", "--resource", "ada", "--yes", "--vacuum"])
for argv in COMMANDS:
    assert main([*argv, "--db", str(scratch / "m.db")], out=io.StringIO(), err=io.StringIO()) in (0, 1)
os.setgid(65534)
os.setuid(65534)
results = []
for argv in COMMANDS:
    out, err = io.StringIO(), io.StringIO()
    code = main([*argv, "--db", sys.argv[1]], out=out, err=err)
    results.append({"code": code, "out": out.getvalue(), "err": err.getvalue()})
print(json.dumps(results))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="drops to 'nobody' in a child process: needs root")
def test_a_trace_file_this_user_cannot_write_is_reported_by_prune_and_forget() -> None:
    # Both ended in DuckDB's IOException traceback ("Cannot open file ...: Permission denied"); forget
    # had already deleted the rows, so its report was lost.
    import json

    folder = Path(tempfile.mkdtemp(prefix="ms-cli-traces-"))
    try:
        folder.chmod(0o777)
        db = folder / "m.db"
        seed(db)
        spans = DuckDBObservabilityStore(folder / "observability.duckdb")
        spans.write_spans(agent_trace("old", base=datetime(2001, 1, 1, tzinfo=timezone.utc), resource="ada"))
        db.chmod(0o666)
        (folder / "observability.duckdb").chmod(0o644)  # root's; 'nobody' may read it, not write it
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(UNWRITABLE_TRACES), str(db)],
                              capture_output=True, text=True, cwd=folder, env=child_env(), timeout=300)
        assert done.stdout.strip(), done.stderr
        prune, forget = json.loads(done.stdout.strip().splitlines()[-1])
        assert "Traceback" not in done.stderr
        assert prune["code"] == 1 and "could not be opened for writing" in prune["err"], prune
        assert "nothing was pruned" in prune["err"] and "permissions" in prune["err"]
        assert forget["code"] == 1, forget
        assert "could not be opened" in forget["out"] and "run forget again" in forget["out"]
        assert "removed 3 row(s), 1 thread(s)" in forget["out"]
        assert "MB from the database; the trace file" in forget["out"] and "was not compacted" in forget["out"]
        assert spans.count_traces() == 1
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_migrate_on_a_database_of_a_newer_version_says_so(tmp_path: Path) -> None:
    # "nothing pending" alone read as "up to date", while every write to the file is refused.
    db = tmp_path / "m.db"
    seed(db)
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO memory_studio_migrations (name, \"appliedAt\") VALUES ('9999_future', '2030-01-01')")
    conn.commit()
    conn.close()
    before = digest(db)
    for argv in (("migrate", "--list"), ("migrate",)):
        code, out, _ = run(*argv, "--db", str(db))
        assert code == 0 and out.startswith("nothing pending\n")
        assert "written by a newer Memory Studio (migrations 9999_future)" in out and "upgrade Memory Studio" in out
    assert digest(db) == before


def test_migrate_on_an_empty_file_says_what_it_applied(tmp_path: Path) -> None:
    # Opening an empty file to write makes it a memory database, so `migrate` found nothing left and said
    # "nothing pending" for a file it had just given every table.
    db = tmp_path / "empty.db"
    db.touch()
    code, out, _ = run("migrate", "--list", "--db", str(db))
    assert code == 0 and out.startswith("0001_") and db.stat().st_size == 0
    listed = out.split()
    code, out, _ = run("migrate", "--db", str(db))
    assert code == 0 and out == "applied: " + ", ".join(listed) + "\n", out
    code, out, _ = run("migrate", "--db", str(db))
    assert code == 0 and out == "nothing pending\n"


def test_export_to_a_path_through_a_file_names_the_users_path(tmp_path: Path) -> None:
    # `export -o` printed an OSError traceback naming a temporary file (found by the Studio's QA pass).
    db = tmp_path / "m.db"
    assert run("demo", "--db", str(db))[0] == 0
    (tmp_path / "notes").write_text("a file, not a folder", encoding="utf-8")
    for target, blocker in ((tmp_path / "notes" / "ada.json", tmp_path / "notes"),
                            (tmp_path / "notes" / "deeper" / "ada.json", tmp_path / "notes")):
        code, out, err = run("export", "--db", str(db), "--resource", "ada", "-o", str(target))
        assert code == 1 and "Traceback" not in err and ".tmp" not in err
        assert err == f"error: Cannot write {target}: {blocker} is a file, not a folder. Choose another folder.\n"
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]  # no half-written file left


# -- session 12: what forget --vacuum says, retention limits that are not numbers ----------------------

def test_forget_with_vacuum_does_not_say_the_bytes_stay_until_a_vacuum_it_then_runs(tmp_path: Path) -> None:
    # It printed "deleted rows keep their bytes ... until it is vacuumed (`memory-studio vacuum`)" and,
    # on the next line, "vacuumed: ...": the note read as if the user still had to run it.
    db = tmp_path / "m.db"
    seed(db)
    code, out, err = run("forget", "--db", str(db), "--resource", "ada", "--yes", "--vacuum")
    assert code == 0, err
    note = next(line for line in out.splitlines() if "until it is vacuumed" in line)
    assert note.endswith("until it is vacuumed (`memory-studio vacuum`); --vacuum was given, so it is vacuumed now")
    assert out.index(note) < out.index("vacuumed: ")
    seed(db, thread="t2")
    code, out, err = run("forget", "--db", str(db), "--resource", "ada", "--yes")
    assert code == 0, err
    assert "  note: deleted rows keep their bytes in the file's free pages until it is vacuumed " \
           "(`memory-studio vacuum`)\n" in out
    assert "run `memory-studio vacuum` to drop the freed pages" in out


@pytest.mark.parametrize("value", ["inf", "nan", "1e400", "-inf"])
def test_traces_prune_refuses_a_limit_that_is_not_a_finite_number_with_the_right_reason(
        tmp_path: Path, value: str) -> None:
    # "--keep-mb inf" was refused as "must not be negative ... got inf": inf is not negative.
    db = tmp_path / "m.db"
    seed(db)
    for flag in ("--keep-days", "--keep-mb"):
        code, out, err = run("traces", "prune", "--db", str(db), f"{flag}={value}")
        assert code == 2 and "negative" not in err, err
        assert f"argument {flag}: give a finite number (0 means no limit), not '{value}'" in err
    code, out, err = run("traces", "prune", "--db", str(db), "--keep-mb", "lots")
    assert code == 2 and "argument --keep-mb: invalid float value: 'lots'" in err


def test_prompt_json_is_never_invalid_utf8_from_an_argument_that_is_not_utf8(tmp_path: Path) -> None:
    # A message argument with bytes that are not UTF-8 ("caf\xe9" from a Latin-1 terminal) reached
    # --json as a lone surrogate and was written back as the raw byte: the output was not UTF-8, so no
    # JSON reader could load it (exit 0), and no model could have been sent that message.
    db = tmp_path / "m.db"
    seed(db)
    env = {**child_env(), "PYTHONPATH": str(ROOT), "LC_ALL": "C.UTF-8"}
    argv = [sys.executable, "-m", "core.cli", "prompt", "--db", str(db), "--resource", "ada", "--thread", "t1",
            "--no-recall", "--json"]
    done = subprocess.run([*argv, b"caf\xe9 au lait"], env=env, capture_output=True, timeout=120)
    assert done.returncode == 2 and done.stdout == b"", done.stdout[:200]
    assert b"the message holds a lone surrogate (U+DCE9)" in done.stderr and b"Pass UTF-8 text." in done.stderr
    fine = subprocess.run([*argv, "café au lait"], env=env, capture_output=True, timeout=120)
    assert fine.returncode == 0, fine.stderr
    assert json.loads(fine.stdout.decode("utf-8"))["messages"][-1]["content"] == "café au lait"


def test_export_of_an_id_that_cannot_be_an_id_says_so_not_that_nothing_was_written(tmp_path: Path) -> None:
    # It said "A value could not be stored in m.db ... Nothing was written" for a read-only export.
    db = tmp_path / "m.db"
    seed(db)
    code, out, err = run("export", "--db", str(db), "--thread", "t\udcff")
    assert code == 1 and out == ""
    assert "The thread id 't\\udcff' cannot be used: it contains a lone surrogate (U+DCFF)" in err
    assert "stored" not in err
    code, out, err = run("export", "--db", str(db), "--resource", "a\x00b")
    assert code == 1 and "The resource id 'a\\x00b' cannot be used: it contains a NUL character" in err


def test_mcp_refuses_a_resource_id_that_cannot_be_an_id_before_serving(tmp_path: Path) -> None:
    # `mcp --resource $'\xff'` (bytes that are not UTF-8) started serving "resource '\udcff'" on stdio.
    db = tmp_path / "m.db"
    seed(db)
    done = subprocess.run([sys.executable, "-m", "core.cli", "mcp", "--db", str(db), "--resource", b"ada\xff"],
                          env={**child_env(), "LC_ALL": "C.UTF-8"}, stdin=subprocess.DEVNULL, capture_output=True,
                          timeout=120)
    assert done.returncode == 1, done.stderr
    assert b"The resource id 'ada\\udcff' cannot be used: it contains a lone surrogate" in done.stderr
    assert b"on stdio" not in done.stderr


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc, where no file can be created")
def test_a_database_that_cannot_be_created_where_asked_gets_advice() -> None:
    code, out, err = run("demo", "--db", "/proc/memory-studio-qa.db")
    assert code == 1 and not out
    assert "Cannot open /proc/memory-studio-qa.db" in err
    assert "check that its folder exists, is a folder on an ordinary disk and is writable by this user" in err


def test_where_for_a_folder_names_no_trace_file_outside_it(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    code, out, _err = run("where", "--db", str(folder))
    assert code == 0 and "a folder, not a database file" in out
    assert "traces:" not in out and str(tmp_path / "observability.duckdb") not in out


def test_threads_aligns_its_columns_by_terminal_width_with_cjk_and_emoji(tmp_path: Path) -> None:
    """A CJK character or an emoji takes two terminal columns: padded by characters, every column after
    such an id started further right than in the other rows."""
    db = tmp_path / "m.db"
    with open_store(db) as store:
        memory = Memory(store)
        for thread, resource, title in (("t-plain", "ada", "Plain"), ("スレッド-1", "ユーザー", "日本語のタイトル"),
                                        ("t-❤️", "sam😀", "Party 🎉"), ("会議", "ada", "")):
            store.memory.create_thread(thread_id=thread, resource_id=resource, title=title)
            memory.save_messages([Message.user("hello", thread_id=thread, resource_id=resource)])
    code, out, err = run("threads", "--db", str(db))
    assert code == 0, err
    rows = {line.split(" ")[0]: line for line in out.splitlines()[1:]}
    # (thread id, its columns, resource id, its columns): each padded to 28 and 20 columns.
    for thread, thread_cols, resource, resource_cols in (("t-plain", 7, "ada", 3), ("スレッド-1", 10, "ユーザー", 8),
                                                           ("t-❤️", 4, "sam😀", 5), ("会議", 4, "ada", 3)):
        expected = thread + " " * (28 - thread_cols) + " " + resource + " " * (20 - resource_cols) + " " + f"{1:>6}"
        assert rows[thread].startswith(expected), (rows[thread], expected)


def test_display_width_counts_terminal_columns() -> None:
    from core.terminal_text import display_width, pad

    assert [display_width(t) for t in ("abc", "日本語", "ada😀", "❤️", "e\u0301", "ｱﾚﾙｷﾞｰ", "👍🏽", "")] == [3, 6, 5, 2, 1, 6, 2, 0]
    assert pad("会議", 6) == "会議  " and pad("7", 3, right=True) == "  7" and pad("toolong", 3) == "toolong"


def test_a_misspelt_flag_names_the_command_and_the_flag_it_meant() -> None:
    # argparse alone said "memory-studio: unrecognized arguments: --resourse ada": no command, no hint.
    code, out, err = run("threads", "--resourse", "ada")
    assert code == 2 and out == ""
    assert err.strip() == ("memory-studio threads: unrecognized arguments: --resourse ada (did you mean --resource?). "
                           "`memory-studio threads --help` lists what it takes.")
    code, _out, err = run("reindex", "--modle=e5")
    assert code == 2 and "memory-studio reindex:" in err and "did you mean --model?" in err
    # A missing action names the choices, never an internal name (`tokens_action`).
    for argv, choices in ((("tokens",), "{new,hash,check}"), (("models",), "{install,status}"),
                          (("traces",), "{prune}")):
        code, _out, err = run(*argv)
        assert code == 2 and err.strip().endswith(f"the following arguments are required: {choices}"), err


def test_a_missing_database_says_what_makes_one_not_that_a_writing_command_would(tmp_path: Path) -> None:
    # `where` said "created by the first command that writes" and the refusal "only commands that write create
    # a new database", yet reindex, vacuum, migrate and forget write and refuse it: a new user ran one after another.
    missing = tmp_path / "memory.db"
    for argv in (("threads",), ("reindex",), ("vacuum",), ("forget", "--resource", "ada", "--yes")):
        code, _out, err = run(*argv, "--db", str(missing))
        assert code == 1 and "does not exist" in err and "command that writes" not in err and "commands that write" not in err
        assert "`memory-studio where`" in err and "`memory-studio demo`" in err and "first turn" in err
    code, out, _err = run("where", "--db", str(missing))
    assert code == 0 and "exists: no (made by an agent's first turn, or by `memory-studio demo`)" in out
    assert not missing.exists()


def test_an_empty_resource_or_thread_id_is_refused_not_read_as_no_owner(tmp_path: Path) -> None:
    # `prompt --resource ''` showed ada's thread without its owner check (and without her working memory and
    # recall); `reindex --resource ''` said "Nothing new ... all 0 message(s)" as if the index were complete.
    db = tmp_path / "m.db"
    seed(db)
    code, out, err = run("prompt", "--db", str(db), "--resource", "", "--thread", "t1", "hi")
    assert code == 2 and out == "" and "--resource is empty" in err and "memory-studio threads" in err
    code, out, err = run("prompt", "--db", str(db), "--resource", "ada", "--thread", "", "hi")
    assert code == 2 and out == "" and "--thread is empty" in err
    code, out, err = run("reindex", "--db", str(db), "--resource", "")
    assert code == 2 and out == "" and "--resource is empty" in err


def test_a_remote_url_that_is_not_postgres_is_refused_without_its_secrets_and_names_what_works() -> None:
    # `--db libsql://…turso.io?authToken=…` (Mastra's remote libSQL) printed the whole URL, token included, and
    # said to give "a local file path" only, though a postgresql:// URL works too.
    for url, secret in (("libsql://mydb-org.turso.io?authToken=eyJ-secret-token", "eyJ-secret-token"),
                        ("mysql://root:hunter2@db.internal/app", "hunter2")):
        code, out, err = run("threads", "--db", url)
        assert code == 1 and out == "" and secret not in err and "root" not in err
        assert "not supported" in err and "postgresql://" in err and "local file path" in err
