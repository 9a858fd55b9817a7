"""Two databases in one folder keep their traces apart: ``observability.duckdb`` belongs to one database (the
first that wrote traces there, named in ``observability.duckdb.owner``), any other has its own
``<file name>.observability.duckdb``. Before, both wrote and read the one file: each Studio listed the
other's runs, and `forget` on one deleted the other's matching traces."""

from __future__ import annotations

import threading
from datetime import datetime
from pathlib import Path

from core import Agent, open_store
from core.cli import main as cli_main
from core.llm import ScriptedModel
from core.storage.location import OBSERVABILITY_FILE, trace_file_for, try_claim_trace_file
from core.traces.home import trace_home


def _turn(db: Path, resource: str, text: str) -> None:
    with open_store(db) as store:
        tracer = store.tracer()
        agent = Agent("main", instructions="Be brief.", model=ScriptedModel([f"Noted {text}."]), tracer=tracer)
        agent.generate(f"Remember {text}.", memory={"resource": resource, "thread": f"{resource}-t"})
        tracer.flush(10.0)


def _traced_texts(db: Path) -> set[str]:
    with open_store(db, read_only=True) as store:
        reader = store.observability
        assert reader is not None
        found = set()
        for summary in reader.list_traces(limit=100):
            for span in reader.get_trace(summary.trace_id):
                found.add(str(span.input) + str(span.output))
        return found


def test_two_databases_in_one_folder_never_share_traces(tmp_path: Path, capsys) -> None:
    first, second = tmp_path / "support.db", tmp_path / "sales.db"
    _turn(first, "ada", "PELICAN-1")
    _turn(second, "ada", "ZEBRA-2")  # the same resource id in both: forget must still tell them apart
    assert (tmp_path / f"{OBSERVABILITY_FILE}.owner").read_text(encoding="utf-8") == "support.db\n"
    assert trace_file_for(first) == tmp_path / OBSERVABILITY_FILE
    assert trace_file_for(second) == tmp_path / f"sales.db.{OBSERVABILITY_FILE}"
    with open_store(second, read_only=True) as store:
        home = trace_home(store.location, store.db)
        assert home.path == tmp_path / f"sales.db.{OBSERVABILITY_FILE}"
    one, two = _traced_texts(first), _traced_texts(second)
    assert any("PELICAN-1" in t for t in one) and not any("ZEBRA-2" in t for t in one)
    assert any("ZEBRA-2" in t for t in two) and not any("PELICAN-1" in t for t in two)
    # Forgetting the resource in one database leaves the other database's traces of it.
    assert cli_main(["forget", "--db", str(second), "--resource", "ada", "--yes"]) == 0
    assert any("PELICAN-1" in t for t in _traced_texts(first))
    assert not any("ZEBRA-2" in t for t in _traced_texts(second))


def test_an_unowned_trace_file_is_claimed_by_the_first_writer_and_a_looker_claims_nothing(tmp_path: Path) -> None:
    """A folder's ``observability.duckdb`` from before the owner file (or Mastra's dev server's) is the traces
    of the first database that writes traces there; opening a database read-only (the Studio looking)
    writes no claim."""
    mine, other = tmp_path / "memory.db", tmp_path / "other.db"
    for db in (mine, other):
        open_store(db).close()
    (tmp_path / OBSERVABILITY_FILE).write_bytes(b"")  # (an older file: no owner)
    with open_store(other, read_only=True) as store:
        assert store.observability is not None and store.observability.path == tmp_path / OBSERVABILITY_FILE
    assert not (tmp_path / f"{OBSERVABILITY_FILE}.owner").exists()
    (tmp_path / OBSERVABILITY_FILE).unlink()
    _turn(mine, "u", "FIRST")
    _turn(other, "u", "SECOND")
    assert trace_file_for(mine) == tmp_path / OBSERVABILITY_FILE
    assert trace_file_for(other) == tmp_path / f"other.db.{OBSERVABILITY_FILE}"


def test_two_databases_claiming_at_once_get_one_file_each(tmp_path: Path) -> None:
    names = [tmp_path / f"db{i}.db" for i in range(8)]
    got: dict[Path, Path] = {}
    start = threading.Barrier(len(names))

    def claim(db: Path) -> None:
        start.wait()
        got[db] = try_claim_trace_file(db)[0]

    threads = [threading.Thread(target=claim, args=(db,)) for db in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    shared = [db for db, path in got.items() if path == tmp_path / OBSERVABILITY_FILE]
    assert len(shared) == 1
    owner = (tmp_path / f"{OBSERVABILITY_FILE}.owner").read_text(encoding="utf-8")
    assert owner == f"{shared[0].name}\n"
    for db, path in got.items():
        assert path == trace_file_for(db)
        if db != shared[0]:
            assert path == tmp_path / f"{db.name}.{OBSERVABILITY_FILE}"
    assert not list(tmp_path.glob("*.tmp"))  # no draft left behind


def test_a_process_with_tracing_off_claims_the_shared_trace_file_only_when_it_writes_spans(
        tmp_path: Path, monkeypatch, caplog) -> None:
    """Tracing off, a process opening a database to write (an agent with the store's tracer, a forget) wrote no
    span yet claimed ``observability.duckdb``, so the folder's next database got a file of its own. Now the claim
    waits for the first span (an import with traces): and when another database claimed the shared file
    meanwhile, the spans go to this database's own file and the import says so."""
    from core.traces.spans import SpanRecord
    from core.traces.store import DuckDBObservabilityStore
    from core.transfer import ExportOptions, export_thread, import_data

    source = tmp_path / "elsewhere" / "source.db"
    source.parent.mkdir()
    with open_store(source) as store:
        store.memory.create_thread(thread_id="t9", resource_id="ada", title="old run")
        assert store.observability is not None
        store.observability.write_spans([SpanRecord("a" * 32, "root", "agent run: old", "agent_run",
                                                     started_at=datetime(2026, 12, 1, 9),
                                                     ended_at=datetime(2026, 12, 1, 9, 1),
                                                     thread_id="t9", resource_id="ada")])
        exported = export_thread(store, "t9", ExportOptions(traces=True))
    assert len(exported["traces"]) == 1

    folder = tmp_path / "shared"
    folder.mkdir()
    first, second = folder / "support.db", folder / "sales.db"
    shared = folder / OBSERVABILITY_FILE
    monkeypatch.setenv("MEMORY_STUDIO_TRACING", "off")
    with open_store(first) as store:
        tracer = store.tracer()  # what a server or a script holds, tracing on or off
        Agent("main", instructions="Be brief.", model=ScriptedModel(["Noted."]), tracer=tracer).generate(
            "Remember PELICAN-1.", memory={"resource": "ada", "thread": "ada-t"})
        assert tracer.flush(10)
        obs = store.observability  # (what a forget opens)
        assert isinstance(obs, DuckDBObservabilityStore) and obs.list_traces().missing
        assert not shared.with_name(shared.name + ".owner").exists()  # nothing claimed: nothing written
    assert not shared.exists()
    monkeypatch.delenv("MEMORY_STUDIO_TRACING")

    with open_store(first) as looking:  # opened to write before the other database claims the file
        obs = looking.observability
        assert isinstance(obs, DuckDBObservabilityStore) and obs.path == shared  # (unowned: would be its)
        _turn(second, "bob", "ZEBRA-2")  # the folder's other database traces: the shared file is its
        assert trace_file_for(second) == shared and trace_file_for(first) != shared
        with caplog.at_level("WARNING", logger="core.traces.store"):
            report = import_data(looking, exported)  # an import with traces: this database's first spans
        own = folder / f"{first.name}.{OBSERVABILITY_FILE}"
        assert obs.path == own
        assert any(own.name in note and "claimed by another database" in note for note in report.notes)
        assert any(own.name in r.getMessage() for r in caplog.records)
    assert {s.thread_id for s in DuckDBObservabilityStore(own, read_only=True).get_trace("a" * 32)} == {"t9"}
    assert not DuckDBObservabilityStore(shared, read_only=True).get_trace("a" * 32)  # sales' file untouched
    assert any("ZEBRA-2" in t for t in _traced_texts(second))


def test_a_claim_the_folder_refuses_says_so_and_the_spans_are_still_written(tmp_path: Path) -> None:
    """The owner file cannot be written (a read-only folder; here, since the tests may run as root, a directory
    standing in the name of this thread's draft of it): the spans go to the shared file unclaimed, as before
    claims existed, and the store says what happened and what to do."""
    import os
    from core.traces.spans import SpanRecord
    from core.traces.store import DuckDBObservabilityStore

    db = tmp_path / "support.db"
    shared = tmp_path / OBSERVABILITY_FILE
    (tmp_path / f"{OBSERVABILITY_FILE}.owner.{os.getpid()}.{threading.get_ident()}.tmp").mkdir()
    with open_store(db) as store:
        obs = store.observability
        assert isinstance(obs, DuckDBObservabilityStore) and obs.path == shared
        when = datetime(2026, 12, 1, 9)
        note = obs.claim()
        assert note is not None and "could not claim observability.duckdb for support.db" in note
        assert "Make the folder writable" in note
        obs.write_spans([SpanRecord("b" * 32, "root", "agent run", "agent_run", started_at=when, ended_at=when)])
        assert obs.path == shared and [t.trace_id for t in obs.list_traces()] == ["b" * 32]
        assert obs.claim() is None  # said once
    assert not (tmp_path / f"{OBSERVABILITY_FILE}.owner").exists()
