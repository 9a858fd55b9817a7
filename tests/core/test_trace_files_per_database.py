"""Two databases in one folder keep their traces apart: ``observability.duckdb`` belongs to one database (the
first that wrote traces there, named in ``observability.duckdb.owner``), any other has its own
``<file name>.observability.duckdb``. Before, both wrote and read the one file: each Studio listed the
other's runs, and `forget` on one deleted the other's matching traces."""

from __future__ import annotations

import threading
from pathlib import Path

from core import Agent, open_store
from core.cli import main as cli_main
from core.llm import ScriptedModel
from core.storage.location import OBSERVABILITY_FILE, claim_trace_file, trace_file_for
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
        got[db] = claim_trace_file(db)

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
