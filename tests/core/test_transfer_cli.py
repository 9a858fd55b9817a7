"""``memory-studio export`` / ``import`` end to end, and exporting a Mastra database without touching it."""

from __future__ import annotations

import io
import json
import os
import sqlite3
from pathlib import Path
from typing import Callable

import pytest

from core import Memory, MemoryOptions, Message, open_store
from core.cli import main
from core.transfer import export_thread, import_data, to_markdown

from .transfer_data import is_postgres, make_mastra_db, run_sql, seed_source, snapshot, table_rows

# Engine behaviour: the tests here run on libSQL and on Postgres (those about files on libSQL only).
pytestmark = pytest.mark.backends

NewDb = Callable[[str], "Path | str"]


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def folder_state(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_export_import_end_to_end(tmp_path: Path, new_db: NewDb) -> None:
    source, target = new_db("source.db"), new_db("target.db")
    seed_source(source)
    dump = tmp_path / "ada.json"
    code, out, err = run("export", "--db", str(source), "--resource", "ada", "-o", str(dump))
    assert code == 0 and out == "", err
    assert err.startswith("exported 2 threads, 5 messages, 2 working-memory versions, 1 observation row, 1 turn record")
    assert json.loads(dump.read_text())["scope"] == {"kind": "resource", "id": "ada"}

    # A target without the turn-record table (migrated before issue 10) keeps the rest and says so.
    older = tmp_path / "older.db"
    open_store(older).close()
    with sqlite3.connect(older) as con:
        con.execute("DROP TABLE memory_studio_turns")
    code, out, err = run("import", "--db", str(older), str(dump))
    assert code == 0, err
    assert "wrote 1 resource, 2 threads, 5 messages, 2 working-memory versions, 1 observation row" in out
    assert "1 turn record not imported" in err and "has no memory_studio_turns table" in err

    code, out, err = run("import", "--db", str(target), str(dump), "--dry-run")
    assert code == 0 and "would write 1 resource, 2 threads, 5 messages" in out
    code, out, err = run("import", "--db", str(target), str(dump))
    assert code == 0, err
    assert "wrote 1 resource, 2 threads, 5 messages, 2 working-memory versions, 1 observation row, 1 turn record" in out
    assert "turn record" not in err  # a current target keeps turn records (migration 0006_turn_records)
    assert "'memory-studio reindex' embeds the 5 imported messages" in out  # recall is not used there
    assert table_rows(target, "mastra_messages") == table_rows(source, "mastra_messages", "WHERE thread_id != 't-bob'")

    before = snapshot(target)
    code, out, _err = run("import", "--db", str(target), str(dump))
    assert code == 0 and "wrote nothing; 12 rows already there, unchanged" in out
    assert snapshot(target) == before


def test_export_to_stdout_as_json_and_markdown(new_db: NewDb) -> None:
    source = new_db("source.db")
    seed_source(source)
    code, out, _ = run("export", "--db", str(source), "--thread", "t-bob")
    assert code == 0 and json.loads(out)["threads"][0]["id"] == "t-bob"
    code, out, _ = run("export", "--db", str(source), "--thread", "t-bob", "--format", "markdown")
    assert code == 0 and out.startswith("# Bob's notes\n") and "Remember: standup moved to 10am" in out


def test_a_markdown_transcript_on_the_terminal_shows_escape_sequences_instead_of_obeying_them(
        tmp_path: Path, new_db: NewDb) -> None:
    source = new_db("source.db")
    with open_store(source) as store:
        memory = Memory(store, MemoryOptions())
        memory.create_thread(resource_id="eve", thread_id="t-esc", title="Notes \x1b]0;pwned\x07")
        memory.save_messages([Message.user("hi \x1b[2J\x1b[31mred", thread_id="t-esc", resource_id="eve")])
    code, out, _ = run("export", "--db", str(source), "--thread", "t-esc", "--format", "markdown")
    assert code == 0 and "\x1b" not in out and "\x07" not in out
    assert "Notes \\x1b]0;pwned\\x07" in out and "hi \\x1b[2J\\x1b[31mred" in out
    # A file keeps the text exactly as stored.
    code, _, _ = run("export", "--db", str(source), "--thread", "t-esc", "--format", "markdown",
                     "-o", str(tmp_path / "t.md"))
    assert code == 0 and "hi \x1b[2J\x1b[31mred" in (tmp_path / "t.md").read_text()


def test_export_of_a_file_without_memory_tables_says_what_it_is(tmp_path: Path) -> None:
    # Export said only "error: near \",\": syntax error" for another program's SQLite file or an empty one.
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as con:
        con.execute("CREATE TABLE notes (body TEXT)")
    before = other.read_bytes()
    code, out, err = run("export", "--db", str(other), "--thread", "t")
    assert code == 1 and out == "" and "has no memory tables" in err and "Check --db" in err
    assert other.read_bytes() == before
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    code, _, err = run("export", "--db", str(empty), "--thread", "t")
    assert code == 1 and "has no tables yet" in err and empty.read_bytes() == b""


def test_cli_errors_are_one_clear_line(tmp_path: Path, new_db: NewDb) -> None:
    source = new_db("source.db")
    seed_source(source)
    code, _, err = run("export", "--db", str(source))
    assert code == 2 and "one of the arguments --thread --resource is required" in err
    code, _, err = run("export", "--db", str(source), "--thread", "nope")
    assert code == 1 and err.startswith("error: Thread 'nope' not found")
    bad = tmp_path / "notes.md"
    bad.write_text("# not an export\n")
    code, _, err = run("import", "--db", str(tmp_path / "t.db"), str(bad))
    assert code == 1 and "is not JSON" in err and "Markdown transcript cannot be imported" in err
    assert not (tmp_path / "t.db").exists()  # a bad file is refused before any database is created
    code, _, err = run("import", "--db", str(tmp_path / "t.db"), str(tmp_path / "missing.json"))
    assert code == 1 and "does not exist" in err
    code, _, err = run("export", "--db", str(source), "--thread", "t-bob", "-o", str(tmp_path / "no" / "x.json"))
    assert code == 1 and "does not exist; create it" in err


@pytest.mark.libsql_only  # about a file's bytes
def test_mastra_database_exports_read_only_and_stays_byte_identical(tmp_path: Path) -> None:
    folder = tmp_path / "mastra"
    path = folder / "mastra.db"
    make_mastra_db(path)
    before = folder_state(folder)
    out_file = tmp_path / "mastra.json"
    code, _out, err = run("export", "--db", str(path), "--thread", "mt1", "-o", str(out_file))
    assert code == 0, err
    code, md, err = run("export", "--db", str(path), "--resource", "user-1", "--format", "markdown")
    assert code == 0, err
    assert folder_state(folder) == before  # same files, same bytes: no migration, no journal left behind

    data = json.loads(out_file.read_text())
    assert data["source"]["kind"] == "mastra"
    assert data["threads"][0]["metadata"] == {"workingMemory": "# Notes\n- a", "custom": True}  # JSONB read
    assert data["resources"][0]["metadata"] == {"plan": "pro"}
    assert json.loads(data["observations"][0]["config"]) == {"scope": "thread"}
    assert [m["id"] for m in data["messages"]] == ["m1", "m2", "m3"]
    assert "# Notes\n- a" in md and "plain legacy text" in md and "My name is Ada" in md

    target = tmp_path / "ours.db"
    code, out, err = run("import", "--db", str(target), str(out_file))
    assert code == 0, err
    src = {r[0]: r for r in table_rows(path, "mastra_messages")}
    dst = {r[0]: r for r in table_rows(target, "mastra_messages")}
    assert dst == src  # content byte-equal, legacy row included
    with open_store(target) as store:
        thread = store.memory.get_thread("mt1")
        assert thread is not None and thread.metadata == {"workingMemory": "# Notes\n- a", "custom": True}


@pytest.mark.libsql_only  # about a file's bytes
def test_a_dry_run_never_creates_migrates_or_writes_the_target(tmp_path: Path) -> None:
    """``import --dry-run`` only reports. It opened the target for writing: a path that did not exist became
    a new database file and an empty file was given every table of ours, by a command that writes nothing."""
    source = tmp_path / "source.db"
    seed_source(source)
    dump = tmp_path / "ada.json"
    assert run("export", "--db", str(source), "--resource", "ada", "-o", str(dump))[0] == 0
    folder = tmp_path / "targets"
    folder.mkdir()
    (folder / "empty.db").write_bytes(b"")
    make_mastra_db(folder / "mastra.db")
    before = folder_state(folder)
    for name in ("new.db", "empty.db"):  # what an import would write into a new database: every row of the file
        code, out, err = run("import", "--db", str(folder / name), str(dump), "--dry-run")
        assert code == 0, err
        assert out.startswith(f"{folder / name}: would write 1 resource, 2 threads, 5 messages, 2 working-memory "
                              "versions, 1 observation row, 1 turn record"), out
        assert f"{folder / name} {'does not exist yet' if name == 'new.db' else 'is empty'}: the import would " \
               "make it a memory database" in err, err
    code, out, err = run("import", "--db", str(folder / "mastra.db"), str(dump), "--dry-run")
    assert code == 0 and "would write 1 resource, 2 threads, 5 messages" in out, err
    assert folder_state(folder) == before  # no new file, the empty one still empty, Mastra's not migrated


@pytest.mark.libsql_only  # about a file's bytes
def test_a_dry_run_on_a_newer_database_says_what_the_import_would(tmp_path: Path) -> None:
    """The import refuses a database a newer Memory Studio wrote; its dry run said "would write …"."""
    source = tmp_path / "source.db"
    seed_source(source)
    dump = tmp_path / "ada.json"
    assert run("export", "--db", str(source), "--resource", "ada", "-o", str(dump))[0] == 0
    newer = tmp_path / "newer" / "memory.db"
    newer.parent.mkdir()
    open_store(newer).close()
    run_sql(newer, ("INSERT INTO memory_studio_migrations VALUES ('9999_from_the_future', ?)",
                    ("2030-01-01T00:00:00.000Z",)))
    before = folder_state(newer.parent)
    for extra in ((), ("--dry-run",)):
        code, out, err = run("import", "--db", str(newer), str(dump), *extra)
        assert code == 1 and out == "", out
        assert f"{newer} was written by a newer Memory Studio (migrations 9999_from_the_future). Upgrade Memory " \
               "Studio before" in err, err
    assert folder_state(newer.parent) == before


def test_import_into_a_mastra_database_keeps_what_it_can_and_says_what_it_skipped(new_db: NewDb) -> None:
    source, mastra = new_db("source.db"), new_db("mastra.db")
    seed_source(source)
    if is_postgres(mastra):  # the tables as Mastra's PgStore creates them, nothing of ours
        from core.storage.pg.ddl import MASTRA_MEMORY_DDL, OBSERVATIONAL_MEMORY_DDL

        run_sql(mastra, *((ddl, ()) for ddl in (*MASTRA_MEMORY_DDL, *OBSERVATIONAL_MEMORY_DDL)))
    else:
        make_mastra_db(mastra)  # type: ignore[arg-type]
    with open_store(source, read_only=True) as store:
        data = export_thread(store, "t-bob")
    with open_store(mastra) as store:  # writes allowed, never migrated
        report = import_data(store, data)
    assert report.written["threads"] == 1 and report.written["messages"] == 1
    assert any("working-memory version not imported" in n and "memory-studio migrate" in n for n in report.notes)
    assert table_rows(mastra, "memory_studio_migrations") == []  # still Mastra's file, not migrated
    assert "Bob's notes" in to_markdown(data)


def test_export_writes_the_file_whole_or_not_at_all(tmp_path: Path, new_db: NewDb) -> None:
    source = new_db("source.db")
    seed_source(source)
    target = tmp_path / "out.json"
    target.write_text("previous export\n")
    code, _, _ = run("export", "--db", str(source), "--thread", "nope", "-o", str(target))
    assert code == 1 and target.read_text() == "previous export\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.json")] == []
    assert os.access(target, os.R_OK)


def test_with_traces_carries_the_runs_and_the_summary_says_what_was_left_out(tmp_path: Path, new_db: NewDb) -> None:
    """Issue 16: ``--with-traces`` carries every span of the threads' runs; without it the import says so."""
    from core import Agent, Memory, MemoryOptions
    from core.llm import ScriptedModel
    from core.traces.spans import TraceFilters

    # Each database in a folder of its own: a libSQL file keeps its traces in the folder beside it.
    source, target, other = new_db("src/source.db"), new_db("dst/target.db"), new_db("other/other.db")
    for path in (source, target, other):
        if isinstance(path, Path):
            path.parent.mkdir()
    with open_store(source) as store:
        memory = Memory(store, MemoryOptions(last_messages=4))
        agent = Agent("a", instructions="Be brief.", model=ScriptedModel(["One.", "Two."]), memory=memory,
                      model_settings={"temperature": 0.3})
        for text in ("hello", "again"):
            agent.generate(text, memory={"resource": "r", "thread": "t"})
        assert store.tracer().flush(10.0)
    with_traces, without = tmp_path / "with.json", tmp_path / "without.json"
    code, _out, err = run("export", "--db", str(source), "--thread", "t", "--with-traces", "-o", str(with_traces))
    assert code == 0, err
    data = json.loads(with_traces.read_text())
    assert data["includes"]["traces"] is True and data["counts"]["traces"] > 0 and "1 agent configuration" in err
    code, out, err = run("import", "--db", str(target), str(with_traces))
    assert code == 0 and f"{data['counts']['traces']} spans" in out and "left out: traces" not in out + err
    with open_store(target) as store:
        turns = Memory(store).turns("t")
        assert len(turns) == 2 and all(Memory(store).assemble(as_of=t.input_message_id).replay.exact for t in turns)
        assert store.observability is not None
        assert len(store.observability.list_traces(filters=TraceFilters(thread_id="t"))) == 2
    code, _out, err = run("export", "--db", str(source), "--thread", "t", "-o", str(without))
    assert code == 0, err
    code, out, err = run("import", "--db", str(other), str(without))
    assert code == 0 and "left out: traces" in out and "--with-traces" in err
    # A transcript holds no spans: none are read for it, and the summary claims none.
    md_with, md_without = tmp_path / "with.md", tmp_path / "without.md"
    code, _out, err = run("export", "--db", str(source), "--thread", "t", "--format", "markdown", "--with-traces",
                          "-o", str(md_with))
    assert code == 0 and "note: a Markdown transcript holds no spans; --with-traces applies to --format json" in err
    assert " 0 spans to " in err, err
    code, _out, err = run("export", "--db", str(source), "--thread", "t", "--format", "markdown", "-o", str(md_without))
    assert code == 0 and "note:" not in err
    # (the same transcript: the header's "Exported:" line says when each was written, to the second)
    def transcript(path: Path) -> list[str]:
        return [line for line in path.read_text(encoding="utf-8").splitlines() if not line.startswith("- Exported: ")]

    assert transcript(md_with) == transcript(md_without)
    assert sum(line.startswith("- Exported: ") for line in md_with.read_text(encoding="utf-8").splitlines()) == 1


def test_import_says_each_left_out_reason_once(tmp_path: Path, new_db: NewDb) -> None:
    """The summary line names what was left out; the reason is said once, on its own line."""
    source, target = new_db("source.db"), new_db("target.db")
    with open_store(source) as store:
        Memory(store).save_messages([Message.user("hello", thread_id="t", resource_id="r")])
    dump = tmp_path / "t.json"
    code, _out, err = run("export", "--db", str(source), "--thread", "t", "-o", str(dump))
    assert code == 0, err
    data = json.loads(dump.read_text())
    del data["agents"]  # as an older Memory Studio wrote it: a second reason
    dump.write_text(json.dumps(data))
    for extra in (("--dry-run",), ()):
        code, out, err = run("import", "--db", str(target), str(dump), *extra)
        assert code == 0, err
        both = out + err
        assert "left out: traces" in out and "--with-traces" in err
        assert both.count("--with-traces") == 1, both
        assert both.count("the Studio previews these threads with this database's agents") == 1, both
        assert "left out: traces; the agents' registered configurations and the Studio's overrides" in out
