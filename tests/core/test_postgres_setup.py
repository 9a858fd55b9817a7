"""Setting up a Postgres database the way a team does on a managed server: the errors of a first start
say what to do, never a driver traceback with SQL in it."""

from __future__ import annotations

import itertools
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from core import open_store
from core.storage import DatabaseOpenError, SchemaError

_ids = itertools.count(1)
#: What a role that writes the memory it does not own is given (the grants the permission message asks for).
WRITES = ("SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public", "USAGE ON ALL SEQUENCES IN SCHEMA public")


def _own_database(pg_server: Any, *, pgvector: bool, role_options: str = "") -> Iterator[str]:
    """A database owned by a role that is not a superuser; the URL signs in as that role."""
    n = next(_ids)
    role, name = f"agent{os.getpid()}_{n}", f"own{os.getpid()}_{n}"
    with pg_server.admin() as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN NOSUPERUSER {role_options}')
        conn.execute(f'CREATE DATABASE "{name}" OWNER "{role}"')
    import psycopg

    if not pgvector:  # the suite's template has it
        with psycopg.connect(pg_server.url(name), autocommit=True) as conn:
            conn.execute("DROP EXTENSION IF EXISTS vector")
    url = pg_server.url(name).replace("postgres:@", f"{role}:@", 1)
    assert role in url
    yield url
    with pg_server.admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'DROP ROLE IF EXISTS "{role}"')


@pytest.fixture
def unprivileged_url(pg_server: Any) -> Iterator[str]:
    """Without pgvector, as on a managed server where only the provider may create the extension."""
    yield from _own_database(pg_server, pgvector=False)


@pytest.fixture
def one_connection_url(pg_server: Any) -> Iterator[str]:
    """A role the server lets open one connection at a time (``CONNECTION LIMIT 1``)."""
    yield from _own_database(pg_server, pgvector=True, role_options="CONNECTION LIMIT 1")


def test_a_role_that_may_not_create_pgvector_is_told_what_to_ask_for(unprivileged_url: str) -> None:
    with pytest.raises(DatabaseOpenError) as caught:
        open_store(unprivileged_url)
    text = str(caught.value)
    assert "pgvector" in text and "CREATE EXTENSION vector;" in text and "superuser" in text
    assert "[SQL:" not in text and "Traceback" not in text
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def _cli(*argv: str) -> tuple[int, str, str]:
    import io

    from core.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_reading_an_empty_database_says_so_instead_of_a_missing_table(pg_url: str) -> None:
    for argv in (["threads"], ["prompt", "--resource", "ada", "--thread", "t", "hi"], ["export", "--resource", "ada"]):
        code, _out, err = _cli(*argv, "--db", pg_url)
        assert code == 1, (argv, err)
        assert "has no tables yet (an empty database): nothing is stored in it" in err, (argv, err)
        assert "[SQL:" not in err and "UndefinedTable" not in err and "Traceback" not in err
    # Listing what a first write would apply still works on it, and nothing above created a table.
    code, out, _err = _cli("migrate", "--list", "--db", pg_url)
    assert code == 0 and "0001" in out
    with open_store(pg_url, read_only=True) as store:
        assert store.db.is_empty


def test_reading_a_database_of_another_program_names_the_missing_memory_tables(pg_url: str) -> None:
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int)")
    with open_store(pg_url, read_only=True) as store:
        with pytest.raises(SchemaError) as caught:
            store.memory.thread_summaries(None)
    assert "has no memory tables (mastra_threads, mastra_messages)" in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_commands_that_write_refuse_a_database_of_another_program_without_a_traceback(pg_url: str) -> None:
    # `forget` printed the driver's traceback (relation "mastra_threads" does not exist, with its SQL and the
    # resource id as a parameter) and `vacuum` said "reclaimed 0.00 MB" of a database holding no memory.
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int)")
    for argv in (["forget", "--resource", "ada@example.com", "--yes"], ["vacuum"], ["reindex"]):
        code, out, err = _cli(*argv, "--db", pg_url)
        assert code == 1, (argv, out, err)
        assert "is a PostgreSQL database, but it has no memory tables" in err, (argv, err)
        assert "memory-studio migrate --db URL" in err
        assert "Traceback" not in err and "[SQL:" not in err and "ada@example.com" not in err
    with psycopg.connect(pg_url, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
    assert tables == ["orders"]  # nothing was added to it


def test_serve_refuses_a_database_of_another_program_before_it_starts(pg_url: str) -> None:
    # `serve --model --db URL` started and answered every request 500, its log holding the driver's traceback.
    import psycopg

    from core.gateway.cli import model_agent

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int)")
    with pytest.raises(SchemaError) as caught:
        model_agent("ollama/llama3.1", name="assistant", instructions="Be brief.", db=pg_url)
    assert "is a PostgreSQL database, but it has no memory tables" in str(caught.value)


def test_the_urls_own_options_choose_the_schema_and_the_engines_settings_still_apply(pg_url: str) -> None:
    # `?options=-c search_path=memory` (a team keeping the memory in a schema of its own) was replaced by the
    # engine's own `options`: the tables went to `public`, beside the application's, and so did every read.
    import psycopg

    from core import Memory, Message

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA memory")
    sep = "&" if "?" in pg_url else "?"
    url = f"{pg_url}{sep}options=-c%20search_path%3Dmemory,public&application_name=agent-7"
    with open_store(url) as store:
        Memory(store).save_messages([Message.user("hello", thread_id="t", resource_id="ada@example.com")])
        with store.db.read() as conn:
            settings = conn.exec_driver_sql(
                "SELECT current_schema(), current_setting('TimeZone'), current_setting('application_name')").first()
    assert tuple(settings or ()) == ("memory", "UTC", "agent-7")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        where = {r[0] for r in conn.execute("SELECT schemaname FROM pg_tables WHERE tablename = 'mastra_messages'")}
    assert where == {"memory"}


def test_a_schema_the_search_path_names_first_is_created_not_passed_over_for_public(pg_url: str) -> None:
    # The README's `?options=-c search_path=memory,public`, given before anyone ran CREATE SCHEMA memory: the
    # server skips a schema that does not exist, so every memory table went to `public`, beside the
    # application's, without a word (found 2026-12-05 following the README's Postgres section).
    import psycopg

    from core import Memory, Message

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int)")
    sep = "&" if "?" in pg_url else "?"
    url = f"{pg_url}{sep}options=-c%20search_path%3Dmemory,public"
    with open_store(url, read_only=True) as store:  # a reader (the Studio, `migrate --list`) sees an empty memory
        assert store.db.is_empty and "0001_mastra_memory_tables" in store.pending_migrations()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = 'memory'").fetchone() is None  # reading made nothing
    with open_store(url) as store:
        Memory(store).save_messages([Message.user("hello", thread_id="t", resource_id="ada")])
    with psycopg.connect(pg_url, autocommit=True) as conn:
        where = {r[0] for r in conn.execute("SELECT schemaname FROM pg_tables WHERE tablename LIKE 'mastra%'")}
        public = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    assert where == {"memory"} and public == {"orders"}


def test_first_schema_reads_a_search_path_as_the_server_does() -> None:
    from core.storage.pg.database import first_schema

    assert first_schema("memory, public") == "memory"
    assert first_schema("Memory,public") == "memory"  # unquoted names fold to lower case
    assert first_schema('"My, Memory" , public') == "My, Memory"
    assert first_schema('"$user", public') is None and first_schema("") is None


def test_mcp_refuses_a_database_of_another_program_with_what_it_is(pg_url: str) -> None:
    # It said the recall tables were missing and to migrate, "leaving Mastra's data as it is", of a database
    # holding no memory and no Mastra data.
    import subprocess
    import sys
    from pathlib import Path

    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int)")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", "core.cli", "mcp", "--resource", "ada", "--db", pg_url], cwd=root,
                          env={**os.environ, "PYTHONPATH": str(root)}, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "is a PostgreSQL database, but it has no memory tables" in done.stderr and "Traceback" not in done.stderr


def test_the_connect_dialogs_url_keeps_an_ipv6_host_apart_from_the_port() -> None:
    from urllib.parse import urlsplit

    from core.storage.pg.location import PgLocation, make_url

    for host in ("::1", "2001:db8::5", "[::1]"):
        url = make_url(host=host, port=6543, database="memory", user="agent")
        parts = urlsplit(url)
        assert (parts.hostname, parts.port, parts.username) == (host.strip("[]"), 6543, "agent"), url
        assert PgLocation.parse(url, "explicit").keyring_key() == f"agent@{host.strip('[]')}:6543/memory"
    assert make_url(host="db.internal", port=5432, database="memory", user="agent") == \
        "postgresql://agent@db.internal:5432/memory"


def test_a_libpq_connection_string_is_refused_with_the_url_to_give(tmp_path: Any, monkeypatch: Any) -> None:
    """Taken for a file name, ``host=… password=…`` became a new SQLite file in the working folder,
    named after it (password included), and the import went there instead of to the server."""
    from core.storage.paths import resolve_db_path

    monkeypatch.chdir(tmp_path)
    conninfo = "host=db.internal port=6543 dbname=memory user=agent password=s3cret-in-dsn"
    code, _out, err = _cli("threads", "--db", conninfo)
    assert code == 1 and "libpq connection string" in err
    assert "postgresql://agent@db.internal:6543/memory" in err and "s3cret-in-dsn" not in err
    monkeypatch.setenv("MEMORY_STUDIO_DB", "dbname=memory host=/var/run/postgresql")
    with pytest.raises(ValueError, match="libpq connection string"):
        resolve_db_path(None)
    assert list(tmp_path.iterdir()) == []  # no file was made


def test_a_server_out_of_connections_says_how_to_use_fewer(one_connection_url: str, monkeypatch: Any) -> None:
    """'Try again once the server is back' does not help when the server is up and full: the error
    names the pool size setting and the server's limit instead."""
    import threading

    from core.storage import StorageUnavailableError

    monkeypatch.delenv("MEMORY_STUDIO_PG_POOL_SIZE", raising=False)
    with open_store(one_connection_url) as store:  # the pool keeps the one connection it opened
        holding, done = threading.Event(), threading.Event()

        def hold() -> None:
            with store.db.read() as conn:
                conn.exec_driver_sql("SELECT 1")
                holding.set()
                done.wait(30)

        holder = threading.Thread(target=hold)
        holder.start()
        try:
            assert holding.wait(30)
            with pytest.raises(StorageUnavailableError) as caught:
                store.memory.thread_summaries(None)  # needs a second connection
        finally:
            done.set()
            holder.join(30)
    text = str(caught.value)
    assert "too many connections" in text and "MEMORY_STUDIO_PG_POOL_SIZE (now 5)" in text
    assert "max_connections" in text and "Try again once the server is back" not in text


def test_no_statement_is_prepared_on_the_server(pg_url: str) -> None:
    """Behind a transaction-mode pooler (PgBouncer before 1.21) consecutive transactions of one client
    connection run on different server connections, so a statement psycopg prepared (it does after
    five runs) is missing or already taken on the next one: recall and span writes failed with
    'prepared statement "_pg3_0" already exists'. Nothing is prepared now."""
    with open_store(pg_url) as store:
        with store.db.read() as conn:
            for _ in range(8):
                conn.exec_driver_sql("SELECT count(*) FROM mastra_threads WHERE id = ?", ("x",)).all()
            assert conn.exec_driver_sql("SELECT count(*) FROM pg_prepared_statements").scalar() == 0


def test_a_pooler_that_refuses_the_startup_settings_is_named_with_the_setting_to_change() -> None:
    """PgBouncer answers the connect with 'unsupported startup parameter: options' (seen with 1.18);
    the error said only 'Cannot open …' with that line."""
    import psycopg

    from core.storage.pg.database import explain_connect_error

    refused = psycopg.OperationalError('connection failed: connection to server at "127.0.0.1", port 6432 '
                                       "failed: FATAL:  unsupported startup parameter: options")
    text = explain_connect_error("postgresql://agent@127.0.0.1:6432/memory", refused)
    assert text.startswith("Cannot open postgresql://agent@127.0.0.1:6432/memory: connection failed")
    assert "ignore_startup_parameters" in text and "PgBouncer" in text


def test_a_role_that_may_only_read_is_told_what_to_grant(pg_server: Any, pg_url: str) -> None:
    """A reporting role (SELECT only) running `forget` got the driver's error with the DELETE and the
    resource's message ids as its parameters; nothing was deleted, and still nothing is."""
    from core import Memory, Message
    from core.storage import StorageError

    with open_store(pg_url) as store:
        Memory(store).save_messages([Message.user("I am allergic to peanuts", thread_id="t1", resource_id="ada")])
    role = f"viewer{os.getpid()}_{next(_ids)}"
    with pg_server.role(pg_url, role, "SELECT ON ALL TABLES IN SCHEMA public") as viewer_url:
        code, _out, err = _cli("forget", "--resource", "ada", "--yes", "--db", viewer_url)
        assert code == 1, err
        assert f"the role '{role}' may not do this (permission denied for table" in err
        assert "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public" in err
        assert "[SQL:" not in err and "[parameters:" not in err and "Traceback" not in err
        with open_store(viewer_url) as store:
            with pytest.raises(StorageError) as caught:
                Memory(store).save_messages([Message.user("hi", thread_id="t1", resource_id="ada")])
            assert caught.value.__cause__ is None and caught.value.__suppress_context__
            assert [s.message_count for s in store.memory.thread_summaries("ada")] == [1]  # reading works


def _do_what_it_says(url: str, advice: str) -> list[str]:
    """Run, as the database's owner, every GRANT the advice asks for (as a DBA pastes them); returns them."""
    import psycopg

    statements = re.findall(r"GRANT [^;]+;", advice)
    assert statements, advice
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)
    return statements


@pytest.mark.parametrize("schema", ["public", "memory"])
def test_a_role_without_grants_is_told_the_grants_of_the_schema_in_use_and_they_are_enough(
        pg_server: Any, pg_url: str, schema: str) -> None:
    """The advice named `SCHEMA public` whatever schema held the memory (the README's `search_path=memory,public`),
    so the grants it gave did nothing; in a schema of its own the role (no USAGE on it) got the server's "no schema
    has been selected to create in" with the migration's SQL. Each advice, done as written, must let the command
    work."""
    from core import Memory, Message

    sep = "&" if "?" in pg_url else "?"
    url = pg_url if schema == "public" else f"{pg_url}{sep}options=-c%20search_path%3D{schema},public"
    with open_store(url) as store:
        memory = Memory(store)
        memory.save_messages([Message.user("I am allergic to peanuts", thread_id="t1", resource_id="ada")])
        memory.save_messages([Message.user("I like tea", thread_id="t2", resource_id="bob")])
    role = f"helper{os.getpid()}_{next(_ids)}"
    with pg_server.role(url, role) as role_url:
        code, _out, err = _cli("forget", "--resource", "ada", "--yes", "--db", role_url)
        assert code == 1, err
        assert f"IN SCHEMA {schema} " in err and (schema == "public" or "SCHEMA public" not in err), err
        assert "[SQL:" not in err and "Traceback" not in err, err
        assert f'GRANT USAGE ON SCHEMA {schema} TO "{role}";' in _do_what_it_says(pg_url, err)
        code, out, err = _cli("forget", "--resource", "ada", "--yes", "--db", role_url)
        assert code == 0, out + err
    with open_store(url, read_only=True) as store:
        assert store.memory.thread_summaries("ada") == [] and len(store.memory.thread_summaries("bob")) == 1


@pytest.mark.parametrize("route", ["the owner starts it", "create on the schema"])
@pytest.mark.parametrize("schema", ["public", "memory"])
def test_a_first_start_by_a_role_that_may_not_create_tables_says_how_either_way(
        pg_server: Any, pg_url: str, schema: str, route: str) -> None:
    """PostgreSQL 15+: only the database's owner may create in `public`. A first start as another role was told
    to grant it SELECT, INSERT… on the tables, which do not exist yet: done, the start failed the same way."""
    import psycopg

    sep = "&" if "?" in pg_url else "?"
    url = pg_url if schema == "public" else f"{pg_url}{sep}options=-c%20search_path%3D{schema},public"
    if schema != "public":  # made by the DBA, usable by every role, as `public` is
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
            conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO PUBLIC")
    role = f"starter{os.getpid()}_{next(_ids)}"
    with pg_server.role(url, role) as role_url:
        code, _out, err = _cli("migrate", "--db", role_url)
        assert code == 1 and f"may not create tables in the schema '{schema}'" in err, err
        assert "[SQL:" not in err and "Traceback" not in err and "SELECT, INSERT" in err, err
        if route == "the owner starts it":  # then grants this role the tables it made
            code, out, err2 = _cli("migrate", "--db", url)
            assert code == 0, out + err2
            _do_what_it_says(pg_url, err.split("(who then grants this role the tables: ", 1)[1].split(")", 1)[0])
        else:
            asked = _do_what_it_says(pg_url, err.rsplit("ask the owner to run: ", 1)[1])
            assert asked == [f'GRANT USAGE, CREATE ON SCHEMA {schema} TO "{role}";']
            code, out, err2 = _cli("migrate", "--db", role_url)
            assert code == 0 and "applied: 0001_mastra_memory_tables" in out, out + err2
        code, out, err2 = _cli("demo", "--db", role_url)
        assert code == 0, out + err2


def test_a_database_that_takes_no_writes_says_so(pg_url: str) -> None:
    """A read replica, or default_transaction_read_only set for the database: forget showed the
    driver's ReadOnlySqlTransaction with the DELETE and the resource's message ids."""
    import psycopg

    from core import Memory, Message
    from core.storage import ReadOnlyError

    with open_store(pg_url) as store:
        Memory(store).save_messages([Message.user("I am allergic to peanuts", thread_id="t1", resource_id="ada")])
    name = pg_url.split("?")[0].rsplit("/", 1)[1]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
    code, _out, err = _cli("forget", "--resource", "ada", "--yes", "--db", pg_url)
    assert code == 1 and "accepts no writes (cannot execute DELETE in a read-only transaction)" in err, err
    assert "read replica" in err and "[SQL:" not in err and "[parameters:" not in err
    with open_store(pg_url) as store:
        with pytest.raises(ReadOnlyError) as caught:
            Memory(store).save_messages([Message.user("hi", thread_id="t1", resource_id="ada")])
        assert caught.value.__cause__ is None


def test_a_statement_the_servers_timeout_cancels_names_the_setting(pg_url: str) -> None:
    from core.storage import StorageError
    from core.storage.pg.database import explain_connect_error

    with open_store(pg_url) as store:
        with pytest.raises(StorageError) as caught:
            with store.db.read() as conn:
                conn.exec_driver_sql("SET LOCAL statement_timeout = '20ms'")
                conn.exec_driver_sql("SELECT pg_sleep(5)")
    text = str(caught.value)
    assert "canceling statement due to statement timeout" in text and "ALTER ROLE" in text
    assert "[SQL:" not in text and caught.value.__cause__ is None
    import psycopg

    opening = psycopg.errors.QueryCanceled("canceling statement due to statement timeout")
    said = explain_connect_error("postgresql://agent@db/memory", opening)
    assert "statement_timeout" in said and "Cannot reach" not in said


def _connect_when_a_slot_is_free(psycopg: Any, url: str) -> Any:
    """A plain connection of a role limited to one, tried until the slot a closed connection held is free."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return psycopg.connect(url, autocommit=True)
        except psycopg.OperationalError as exc:
            if "too many connections" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_a_connection_waits_a_moment_for_a_slot_being_freed(one_connection_url: str, monkeypatch: Any) -> None:
    """A connection just closed holds its slot until its server process exits, a moment later; the open's
    own first connection, closed before the pool's, was refused for a role limited to one connection on a
    loaded machine ("too many connections for role"). A new connection now waits up to SLOT_WAIT_S for a
    slot: here another connection of the role holds the only one and lets go shortly after the call began."""
    import threading

    import psycopg

    from core.storage.pg.database import SLOT_WAIT_S

    monkeypatch.delenv("MEMORY_STUDIO_PG_POOL_SIZE", raising=False)
    with open_store(one_connection_url) as store:
        store.db.engine.dispose()  # the pool lets go of the role's one slot
        # (which, as the docstring says, is free only once the closed connection's server process has exited:
        # on a loaded machine this test's own connection met the same refusal, so it waits for the slot too)
        other = _connect_when_a_slot_is_free(psycopg, one_connection_url)
        releaser = threading.Timer(SLOT_WAIT_S / 5, other.close)
        releaser.start()
        try:
            conn = store.db.dedicated_connection()  # asked while the slot is taken
            assert conn.execute("SELECT 1").fetchone() == (1,)
            conn.close()
        finally:
            releaser.join(30)
            other.close()


def test_a_role_that_may_write_but_not_vacuum_is_told_so_instead_of_reclaiming_nothing(pg_server: Any,
                                                                                     pg_url: str) -> None:
    """A role given the grants the permission message asks for (it writes the memory, the tables are another
    role's) ran `vacuum` and `forget --vacuum`: Postgres skipped every table with a warning no one saw, and the
    command said "reclaimed 0.00 MB" (exit 0), the forget "vacuumed now": the forgotten text stayed in the
    server's files while the user was told it was gone."""
    from core import Memory, Message
    from core.agent import Agent
    from core.llm import ScriptedModel

    with open_store(pg_url) as store:
        memory = Memory(store)
        memory.save_messages([Message.user("I am allergic to peanuts", thread_id="t1", resource_id="ada")])
        Agent("chef", instructions="Cook.", memory=memory, model=ScriptedModel(["Tea it is."])).generate(
            "I like tea", memory={"resource": "bob", "thread": "t2"})
        assert store.tracer().flush(10)
    role = f"writer{os.getpid()}_{next(_ids)}"
    import psycopg

    with pg_server.role(pg_url, role, *WRITES) as writer_url:
        code, out, err = _cli("vacuum", "--db", writer_url)
        assert code == 1, out + err
        assert f"the role '{role}' may not vacuum" in err and "only their owner ('postgres')" in err, err
        assert "Nothing was rewritten" in err and f'GRANT MAINTAIN ON ALL TABLES IN SCHEMA public TO "{role}";' in err
        assert "reclaimed" not in out and "Traceback" not in err
        # `traces prune` deleted and then said "1.0 MB -> 1.0 MB", the compaction skipped the same way.
        code, out, err = _cli("traces", "prune", "--keep-mb", "0.001", "--db", writer_url)
        assert code == 0 and "deleted 1 traces" in out, out + err
        assert "MB (not compacted: " in out, out
        assert f"the role '{role}' may not vacuum 1 of the memory tables (mastra_ai_spans)" in out, out
        assert f'GRANT MAINTAIN ON TABLE public.mastra_ai_spans TO "{role}";' in out, out
        code, out, err = _cli("forget", "--resource", "ada", "--yes", "--vacuum", "--db", writer_url)
        assert code == 1 and f"the role '{role}' may not vacuum" in err, out + err
        with open_store(pg_url) as store:  # the forget itself stands; only the rewrite was refused
            assert store.memory.thread_summaries("ada") == [] and len(store.memory.thread_summaries("bob")) == 1
        with psycopg.connect(pg_url, autocommit=True) as conn:  # the grant the message names is enough
            conn.execute(f'GRANT MAINTAIN ON ALL TABLES IN SCHEMA public TO "{role}"')
        code, out, err = _cli("vacuum", "--db", writer_url)
        assert code == 0 and "reclaimed" in out, out + err


def test_reindex_by_a_role_that_may_only_read_says_why_without_sql_and_fails(pg_server: Any, pg_url: str) -> None:
    """`reindex` as a reporting role (SELECT only): every batch's write was refused, and the summary printed
    SQLAlchemy's text of the error per reason, the statement and its parameters (the messages' ids) with it,
    the log a traceback, and the command exited 0, so a scheduled reindex that indexed nothing passed."""
    from core import Memory, MemoryOptions, Message

    with open_store(pg_url) as store:  # a message saved without recall has no vector; the next save with recall
        # indexes its keywords (the queue is the whole database's), so only its vector waits for a reindex
        Memory(store).save_messages([Message.user("I am allergic to peanuts", thread_id="t1", resource_id="ada")])
        Memory(store, MemoryOptions(semantic_recall=True)).save_messages(
            [Message.user("I cook on Sundays", thread_id="t2", resource_id="bob")])
    role = f"viewer{os.getpid()}_{next(_ids)}"
    with pg_server.role(pg_url, role, "SELECT ON ALL TABLES IN SCHEMA public") as viewer_url:
        code, out, err = _cli("reindex", "--db", viewer_url)
        assert code == 1, out + err
        assert "Failed 1:" in out and "× write failed: permission denied for table" in out, out + err
        assert "[SQL:" not in out + err and "[parameters:" not in out + err and "Traceback" not in err, out + err


#: A role named to break out of a statement the advice writes: a quote, a semicolon, a statement, a line break.
HOSTILE_ROLE = 'ev"il; CREATE TABLE pwned (a int); --\n\'x'


@contextmanager
def _hostile_role(pg_server: Any, pg_url: str, *, by_query: bool) -> Iterator[str]:
    """A login role named ``HOSTILE_ROLE`` and no grants; yields ``pg_url`` signing in as it: by the URL's query
    (``?user=``, which libpq takes over the ``postgres@`` before the host), or before the ``@``."""
    from urllib.parse import quote

    import psycopg
    from psycopg import sql

    ident = sql.Identifier(HOSTILE_ROLE)
    with pg_server.admin() as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER").format(ident))
    try:
        if by_query:
            yield f"{pg_url}{'&' if '?' in pg_url else '?'}user={quote(HOSTILE_ROLE, safe='')}"
        else:
            url, n = re.subn(r"//postgres(:[^@/]*)?@", lambda m: f"//{quote(HOSTILE_ROLE, safe='')}{m[1] or ''}@",
                             pg_url, count=1)
            assert n == 1, pg_url
            yield url
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(ident))
        with pg_server.admin() as conn:
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(ident))


def _paste_into_psql(url: str, statements: str) -> None:
    """Run ``statements`` as a DBA pastes them into psql (which goes on after a statement that fails)."""
    import subprocess
    from pathlib import Path

    import pgserver

    psql = Path(pgserver.__file__).parent / "pginstall" / "bin" / "psql"
    done = subprocess.run([str(psql), "-X", "-d", url], input=statements, text=True, capture_output=True, timeout=60)
    assert done.returncode == 0 and "ERROR" not in done.stderr, (statements, done.stdout, done.stderr)


def _pwned(pg_url: str) -> bool:
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        row = conn.execute("SELECT to_regclass('pwned') IS NOT NULL").fetchone()
        return bool(row and row[0])


def test_the_grants_advice_names_the_role_signed_in_and_a_hostile_name_stays_one_name(
        pg_server: Any, pg_url: str) -> None:
    """The advice named the role before the URL's @ (postgres here) where libpq signed in as the ``?user=`` one:
    pasted, its grants went to another role and the command failed as before. The role's name, whatever it holds,
    is one quoted name in each statement: pasted into psql, they grant it the memory and do nothing else."""
    from core import Memory, Message

    with open_store(pg_url) as store:
        Memory(store).save_messages([Message.user("I am allergic to peanuts", thread_id="t1", resource_id="ada")])
    with _hostile_role(pg_server, pg_url, by_query=True) as url:
        code, _out, err = _cli("forget", "--resource", "ada", "--yes", "--db", url)
        assert code == 1, err
        assert f"the role {HOSTILE_ROLE!r} may not do this" in err, err
        advice = err.split("ask the database's owner to grant them: ", 1)[1]
        _paste_into_psql(pg_url, advice)
        assert not _pwned(pg_url)
        code, out, err = _cli("forget", "--resource", "ada", "--yes", "--db", url)
        assert code == 0, out + err


def test_the_timeout_advice_quotes_a_hostile_role_name(pg_server: Any, pg_url: str) -> None:
    """``ALTER ROLE "<name>"`` put the name between quotes as it was: a name with a quote ended the statement there
    and the rest of the name ran as statements of its own (here a CREATE TABLE) when pasted."""
    from psycopg import sql

    from core.storage import StorageError

    open_store(pg_url).close()  # (the owner makes the tables; the role only reads)
    with _hostile_role(pg_server, pg_url, by_query=False) as url:
        with open_store(url, read_only=True) as store:
            with pytest.raises(StorageError) as caught:
                with store.db.read() as conn:
                    conn.exec_driver_sql("SET LOCAL statement_timeout = '20ms'")
                    conn.exec_driver_sql("SELECT pg_sleep(5)")
        text = str(caught.value)
        statement = text.split("Raise it (", 1)[1].split("), then try again", 1)[0]
        assert statement.startswith("ALTER ROLE ") and statement.endswith(" SET statement_timeout = '60s'"), text
        _paste_into_psql(pg_server.admin_url, statement + ";")
        assert not _pwned(pg_url) and not _pwned(pg_server.admin_url)
        with pg_server.admin() as conn:
            row = conn.execute(sql.SQL("SELECT rolconfig FROM pg_roles WHERE rolname = {}").format(
                sql.Literal(HOSTILE_ROLE))).fetchone()
        assert row is not None and row[0] == ["statement_timeout=60s"], row
