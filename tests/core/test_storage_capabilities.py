"""Each backend declares what it can do once; callers read the flags (conventions §20)."""

from __future__ import annotations

import pytest

from core.storage.capabilities import LIBSQL, POSTGRES, capabilities_of

pytestmark = pytest.mark.backends


def test_a_store_declares_its_backends_capabilities(store, backend):
    expected = POSTGRES if backend == "postgres" else LIBSQL
    assert store.capabilities is expected and store.db.capabilities is expected
    with store.db.read() as conn:
        assert capabilities_of(conn) is expected
    assert capabilities_of(store.db.engine) is expected


def test_the_flags_say_what_each_backend_does():
    assert LIBSQL.full_text == "fts5" and LIBSQL.vectors == "blob-matrix"
    assert LIBSQL.serialized_writers and not LIBSQL.advisory_locks and not LIBSQL.traces_in_database
    assert POSTGRES.full_text == "tsvector" and POSTGRES.vectors == "pgvector"
    assert POSTGRES.advisory_locks and not POSTGRES.serialized_writers
    assert POSTGRES.traces_in_database and POSTGRES.native_boolean and not POSTGRES.implicit_rowid


def test_an_unknown_dialect_is_refused_by_name():
    class Fake:
        class dialect:
            name = "oracle"

    with pytest.raises(ValueError, match="oracle"):
        capabilities_of(Fake())  # type: ignore[arg-type]
