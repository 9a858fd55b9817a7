"""Where a database's traces live is said in one place (core.traces.home), for the engine, the CLI
and the Studio."""

from __future__ import annotations

import pytest

from core import open_store
from core.traces.home import trace_home
from core.traces.pg_store import PgSpanStore
from core.traces.store import DuckDBObservabilityStore

pytestmark = pytest.mark.backends


def test_the_home_of_each_kind_of_database(store, backend):
    home = trace_home(store.location, store.db)
    if backend == "postgres":
        assert home.kind == "postgres" and home.path is None and home.files == ()
        assert home.display == f"{store.location.display} (mastra_ai_spans)"
        assert isinstance(store.observability, PgSpanStore)
    else:
        duck = store.location.path.with_name("observability.duckdb")
        assert home.kind == "duckdb" and home.path == duck and home.display == str(duck)
        assert home.files == (duck, duck.with_name("observability.duckdb.wal"))
        assert isinstance(store.observability, DuckDBObservabilityStore) and store.observability.path == duck


@pytest.mark.libsql_only
def test_an_in_memory_database_has_no_trace_store():
    with open_store(":memory:") as store:
        assert trace_home(store.location).kind == "memory" and store.observability is None


@pytest.mark.libsql_only
def test_a_mastra_file_with_its_own_spans_table_is_read_there_until_a_trace_file_exists(tmp_path):
    db = tmp_path / "mastra.db"
    with open_store(db) as store:
        with store.db.write() as conn:
            conn.exec_driver_sql('CREATE TABLE mastra_ai_spans ("traceId" TEXT, "spanId" TEXT)')
        home = trace_home(store.location, store.db)
        assert home.kind == "libsql" and home.path == db and home.display == f"{db} (mastra_ai_spans)"
        assert db in home.files and db.with_name("mastra.db-wal") in home.files
        assert store.location.observability_path in home.files  # the file an agent of ours would start
        assert trace_home(store.location).kind == "duckdb"  # where spans are written: never Mastra's table
        store.location.observability_path.write_bytes(b"")
        assert trace_home(store.location, store.db).kind == "duckdb"
