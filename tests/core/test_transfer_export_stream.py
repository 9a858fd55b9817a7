"""An export holds a page of the history, not the history: every list that grows with it (messages, observations,
turn records, the edit history, working-memory versions) is read in the snapshot a page at a time (a server-side
cursor on Postgres, sorts that spill to disk on libSQL) into temporary files and written from there, and the file is
the one the lists make. A failed or interrupted export leaves no temporary file and the previous export in place."""

from __future__ import annotations

import io
import json
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

import pytest
import sqlalchemy as sa

from core import Memory, Message, open_store
from core.agent_configs import register_agent
from core.cli import main
from core.timeutil import FixedClock
from core.transfer import export_data, import_data, render
from core.transfer.format import load, render_chunks, write_atomically
from core.transfer.spool import RowSpool
from tests.core.transfer_data import run_sql, seed_source, snapshot

pytestmark = pytest.mark.backends

GROWING = ("messages", "observations", "turns", "messageVersions", "observationVersions")


def _history(db: Path | str) -> None:
    """``seed_source``'s memory, with messages of ada's two threads interleaved in time, an edited message and
    observation line, and two registered agents of which one answered in a thread."""
    seed_source(db)
    with open_store(db) as store:
        memory = Memory(store)
        memory.save_messages([Message.user(f"note {i} " + "z" * 300, id=f"n{i:03d}",
                                           thread_id=("t-party", "t-groceries")[i % 2], resource_id="ada")
                              for i in range(40)])
        memory.save_messages([Message.create("assistant", [{"type": "text", "text": "Done."}], id="a1",
                                             thread_id="t-party", resource_id="ada",
                                             metadata={"agent": "helper"})])
        memory.edit_message("n001", resource_id="ada", text="note 1, edited")
        from core.observational.records import lookup_key
        from core.observational.store import current_record

        record = current_record(store, lookup_key("thread", thread_id="t-groceries", resource_id="ada"))
        assert record is not None
        memory.edit_observation(record.id, "* 🔴 (09:00) Ada is allergic to peanuts",
                                "* 🔴 (09:00) Ada is allergic to peanuts and cashews", resource_id="ada")
        register_agent(store, "helper", {"name": "helper"})
        register_agent(store, "stranger", {"name": "stranger"})


def _ids(db: Path | str, sql: str) -> list[Any]:
    with open_store(db, read_only=True) as store, store.db.read() as conn:
        return [r[0] for r in conn.exec_driver_sql(sql)]


def test_a_streamed_export_keeps_the_growing_lists_on_disk_and_writes_the_file_the_lists_make(db_path, new_db,
                                                                                              tmp_path):
    _history(db_path)
    with open_store(db_path, read_only=True) as store:
        whole = export_data(store, resource_id="ada", clock=FixedClock(datetime(2026, 1, 1, tzinfo=timezone.utc), step_ms=0))
        text = render(whole, "json")
        streamed = export_data(store, resource_id="ada", streamed=True, clock=FixedClock(datetime(2026, 1, 1, tzinfo=timezone.utc), step_ms=0))
        assert all(isinstance(streamed[k], RowSpool) for k in GROWING), {k: type(streamed[k]) for k in GROWING}
        assert streamed["counts"] == whole["counts"]
        write_atomically(tmp_path / "ada.json", render_chunks(streamed, "json"))
    assert (tmp_path / "ada.json").read_text(encoding="utf-8") == text
    # The lists are what the tables hold, in the order the file has always had: messages by time across threads.
    assert [m["id"] for m in whole["messages"]] == _ids(db_path, (
        "SELECT id FROM mastra_messages WHERE thread_id IN ('t-groceries', 't-party') ORDER BY \"createdAt\", id"))
    assert [v["id"] for v in whole["messageVersions"]] == _ids(db_path, (
        "SELECT id FROM memory_studio_message_versions WHERE thread_id IN ('t-groceries', 't-party') ORDER BY id"))
    assert len(whole["observationVersions"]) == 1 and len(whole["turns"]) == 1
    assert [a["name"] for a in whole["agents"]] == ["helper"]  # the agent that answered, read as the messages passed
    # and the file imports to the same rows.
    target = new_db("target.db")
    with open_store(target) as store:
        import_data(store, load(tmp_path / "ada.json"))
    source, copied = snapshot(db_path), snapshot(target)
    for table in ("mastra_messages", "memory_studio_message_versions", "memory_studio_om_versions",
                  "mastra_observational_memory"):
        mine = [r for r in source[table] if "bob" not in repr(r)]
        assert copied[table] == mine, table


def test_an_export_reads_the_history_through_a_server_side_cursor_on_postgres(pg_url):
    """psycopg's ordinary cursor takes a statement's whole result into memory before the first row is read; the
    export's statements over the growing tables go through a named (server-side) cursor, a page at a time."""
    db_path = pg_url
    _history(db_path)
    seen: dict[str, str] = {}

    def note(conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool) -> None:
        for table in ("mastra_messages", "mastra_observational_memory", "memory_studio_turns",
                      "memory_studio_message_versions", "memory_studio_om_versions", "memory_studio_wm_versions"):
            if f'FROM "{table}"' in statement:
                seen[table] = type(cursor).__name__

    with open_store(db_path, read_only=True) as store:
        sa.event.listen(store.db.engine, "before_cursor_execute", note)
        data = export_data(store, resource_id="ada", streamed=True)
    assert data["counts"]["messages"] == 46
    assert seen == dict.fromkeys(seen, "ServerCursor") and len(seen) == 6, seen


def test_the_export_snapshot_spills_its_sorts_to_disk_and_sets_the_connection_back(tmp_path):
    """libsql-experimental sorts in memory unless told otherwise: a resource's messages sorted by time across its
    threads were held whole by the statement (a 320 MB history: 661 MB). The snapshot tells the connection to sort
    in temporary files, and sets it back after, so no other read changes."""
    db = tmp_path / "memory.db"
    _history(db)
    with open_store(db, read_only=True) as store:
        with store.db.snapshot() as conn:
            assert conn.exec_driver_sql("PRAGMA temp_store").scalar() == 1  # FILE
        with store.db.read() as conn:
            assert conn.exec_driver_sql("PRAGMA temp_store").scalar() == 0  # the default again


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _history_and_temporary_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A libSQL file holding ``_history``, and the (empty) temporary folder the export's spools go to."""
    db = tmp_path / "memory.db"
    _history(db)
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    return db, temp


def test_an_export_failing_halfway_leaves_no_temporary_file_and_the_previous_export_as_it_was(tmp_path,
                                                                                              monkeypatch):
    """A row that cannot be read after the messages were spooled: the spools are deleted at once, and the file an
    earlier export wrote is left exactly as it was (no half file beside it either)."""
    db, temp = _history_and_temporary_folder(tmp_path, monkeypatch)
    out = tmp_path / "ada.json"
    assert main(["export", "--db", str(db), "--resource", "ada", "--output", str(out)],
                out=io.StringIO(), err=io.StringIO()) == 0
    before = out.read_bytes()
    assert _leftovers(temp) == []
    # A turn record whose text is not UTF-8: read after the messages (already in their spool).
    run_sql(db, ("UPDATE memory_studio_turns SET record = CAST(X'7B22FF7D' AS TEXT) WHERE input_message_id = 'g1'",
                 ()))
    err = io.StringIO()
    assert main(["export", "--db", str(db), "--resource", "ada", "--output", str(out)],
                out=io.StringIO(), err=err) == 1
    assert "memory_studio_turns" in err.getvalue() and "not valid UTF-8" in err.getvalue(), err.getvalue()
    assert out.read_bytes() == before
    assert _leftovers(temp) == []
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_an_export_interrupted_while_it_writes_leaves_the_previous_file_and_no_temporary_one(tmp_path,
                                                                                            monkeypatch):
    db, temp = _history_and_temporary_folder(tmp_path, monkeypatch)
    out = tmp_path / "ada.json"
    out.write_text("an earlier export\n", encoding="utf-8")

    def interrupted(pieces: Iterator[str]) -> Iterator[str]:
        for n, piece in enumerate(pieces):
            if n == 40:  # inside the messages, read back from their spool
                raise KeyboardInterrupt
            yield piece

    with open_store(db, read_only=True) as store:
        data = export_data(store, resource_id="ada", streamed=True)
        with pytest.raises(KeyboardInterrupt):
            write_atomically(out, interrupted(render_chunks(data, "json")))
        assert _leftovers(temp)  # the spools, until the document goes
        del data
    assert out.read_text(encoding="utf-8") == "an earlier export\n"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert _leftovers(temp) == []


_FULL_DISK = """
import resource, signal, sys
from pathlib import Path
from core import open_store
from core.transfer import export_data
from core.transfer.errors import ExportWriteError
from core.transfer.format import render_chunks, write_atomically
with open_store(sys.argv[2], read_only=True) as store:
    data = export_data(store, resource_id="ada", streamed=True)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as on a full disk
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
    try:
        write_atomically(Path(sys.argv[3]), render_chunks(data, "json"))
    except ExportWriteError as exc:
        sys.exit(str(exc))
"""


def test_an_export_the_disk_cannot_take_says_so_and_leaves_the_previous_file(tmp_path):
    """The file's write fails partway (the process may write no file past 1 MB once the history is read into its
    spools, as 'memory-studio export' reads it): the error names the file and what to do, the previous export stays
    as it was, and neither the half-written file nor a spool is left behind."""
    import subprocess
    import sys

    db = tmp_path / "memory.db"
    _history(db)
    with open_store(db) as store:
        Memory(store).save_messages([Message.user(f"{i} " + "q" * 20_000, thread_id="t-party", resource_id="ada")
                                     for i in range(60)])
    out = tmp_path / "ada.json"
    out.write_text("an earlier export\n", encoding="utf-8")
    temp = tmp_path / "tmp"
    temp.mkdir()
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", _FULL_DISK, str(1_000_000), str(db), str(out)], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(root), TMPDIR=str(temp)), cwd=root)
    assert done.returncode == 1, done.stderr
    assert f"Cannot write {out}: File too large. Choose another file name or folder." in done.stderr, done.stderr
    assert out.read_text(encoding="utf-8") == "an earlier export\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".ada.json")) == []
    assert _leftovers(temp) == []


def test_a_large_history_is_exported_holding_a_fraction_of_it(tmp_path):
    """Python's peak while a history of 24 MB of messages and as much edit history is exported to a file."""
    import tracemalloc

    db = tmp_path / "memory.db"
    _history(db)
    body = "w" * 20_000
    with open_store(db) as store:
        memory = Memory(store)
        memory.save_messages([Message.user(f"{i} {body}", id=f"big{i:04d}", thread_id=("t-party", "t-groceries")[i % 2],
                                           resource_id="ada") for i in range(1200)])
        for i in range(0, 1200, 2):
            memory.edit_message(f"big{i:04d}", resource_id="ada", text=f"{i} edited {body}")
    with open_store(db, read_only=True) as store:
        warm = export_data(store, resource_id="ada", streamed=True)  # (the modules an export loads)
        write_atomically(tmp_path / "warm.json", render_chunks(warm, "json"))
        del warm
        tracemalloc.start()
        try:
            data = export_data(store, resource_id="ada", streamed=True)
            write_atomically(tmp_path / "ada.json", render_chunks(data, "json"))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    size = (tmp_path / "ada.json").stat().st_size
    assert data["counts"]["messages"] == 1246 and data["counts"]["messageVersions"] == 601
    assert size > 60_000_000 and peak < size / 6, (size, peak)
    assert json.loads((tmp_path / "ada.json").read_text(encoding="utf-8"))["counts"] == data["counts"]


def test_observation_records_are_read_from_disk_and_import_as_from_a_list(db_path, new_db, tmp_path):
    """A long observational-memory history (each generation holds its whole log) is kept on disk while the file is
    read, like the messages; the rows written are those of the same file given as lists, a second import changes
    nothing, and an observation-log version that names another owner than its record's is still refused."""
    from core.transfer.errors import ExportFormatError

    _history(db_path)
    with open_store(db_path, read_only=True) as store:
        text = render(export_data(store, resource_id="ada"), "json")
    doc = json.loads(text)
    record = doc["observations"][0]
    doc["observations"] = [dict(record, id=f"om{i:04d}", generationCount=i, activeObservations=f"{i}\n" + "o" * 3000)
                           for i in range(300)] + doc["observations"]
    path = tmp_path / "ada.json"
    path.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    loaded = load(path)
    assert isinstance(loaded["observations"], RowSpool) and len(loaded["observations"]) == 301
    from_disk, from_lists = new_db("disk.db"), new_db("lists.db")
    with open_store(from_disk) as store:
        first = import_data(store, loaded)
        again = import_data(store, load(path))
    with open_store(from_lists) as store:
        import_data(store, json.loads(path.read_text(encoding="utf-8")))
    assert first.written["observations"] == 301 and first.written["observationVersions"] == 1
    assert again.unchanged["observations"] == 301 and not again.written.get("observations")
    assert snapshot(from_disk) == snapshot(from_lists)
    # The versions' rule still sees each record's owners.
    doc["observationVersions"][0]["thread_id"] = "t-party"
    path.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    with pytest.raises(ExportFormatError, match="its thread_id 't-party' is not 't-groceries', its record's"):
        with open_store(new_db("refused.db")) as store:
            import_data(store, load(path))


def test_a_spool_of_large_rows_holds_a_few_megabytes_of_them_not_a_batch(tmp_path, monkeypatch):
    """Rows given with their size end a record at ``spool.RECORD_BYTES``: messages of the largest size allowed are
    held a few at a time while written and read back, not 256 of them (256 MB)."""
    import tracemalloc

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    spool = RowSpool("messages", job="export")
    for i in range(24):
        spool.append({"id": f"m{i}", "content": f"{i}" + "c" * 1_000_000}, 1_000_001)
    spool.close()
    tracemalloc.start()
    try:
        ids = [row["id"] for row in spool]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert ids == [f"m{i}" for i in range(24)]
    assert peak < 12_000_000, peak  # a record of 4 rows (its bytes and its rows), not all 24 MB
    spool.discard()
