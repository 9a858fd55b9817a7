"""The keyword index keeps its own copy of each row's text, because the one FTS5 layout without it that
can still delete rows by rowid (``contentless_delete = 1``) ranks otherwise once a row is deleted.

Issue 20 item 3b measured a contentless keyword table as one way to write less per saved message
(``bench/storage.py --layouts``). With the driver's SQLite (3.45), a ``DELETE`` from such a table leaves
FTS5's row count and token totals as they were, so ``bm25()`` scores every later search with another
row count and mean row length than the table that keeps its text: search answers change after any edit
or delete (ARCHITECTURE, Known problems). The first test fails, saying so, when a newer SQLite keeps the
totals: then the contentless layout can be measured again.
"""

from __future__ import annotations

import re
from pathlib import Path

from core.embedding import HashingEmbedder
from core.recall import RecallIndex
from core.recall.keyword_memory import varints
from core.recall.tables import FTS_TABLE
from core.storage import open_store
from core.storage.catalog import virtual_table_sql

ROWS = [(1, "hello world", "x y"), (2, "foo bar baz qux", "hello"), (5, "a hello", "")]


def _averages(conn, table: str) -> list[int]:
    return varints(bytes(conn.exec_driver_sql(f"SELECT block FROM {table}_data WHERE id = 1").scalar()))


def test_a_contentless_delete_table_ranks_otherwise_after_a_delete(tmp_path: Path) -> None:
    store = open_store(tmp_path / "m.db")
    try:
        RecallIndex.for_store(store, HashingEmbedder(16)).ensure_tables()
        with store.db.write() as conn:
            ddl = virtual_table_sql(conn, FTS_TABLE)
            assert ddl is not None and not re.search(r"content\s*=", ddl)  # the stored layout keeps its text
            tokenize = re.search(r"tokenize\s*=\s*'[^']*'", ddl).group(0)  # type: ignore[union-attr]
            for name, options in (("kept", ""), ("contentless", "content = '', contentless_delete = 1, ")):
                conn.exec_driver_sql(f"CREATE VIRTUAL TABLE {name} USING fts5(body, context, {options}{tokenize})")
                conn.exec_driver_sql(f"INSERT INTO {name} (rowid, body, context) VALUES (?, ?, ?), (?, ?, ?), (?, ?, ?)",
                                     tuple(v for row in ROWS for v in row))
        with store.db.write() as conn:
            for name in ("kept", "contentless"):
                conn.exec_driver_sql(f"DELETE FROM {name} WHERE rowid = 2")
        with store.db.read() as conn:
            version = conn.exec_driver_sql("SELECT sqlite_version()").scalar()
            assert _averages(conn, "kept") == [2, 4, 2]  # rows, then tokens per column, of the rows left
            scores = {name: conn.exec_driver_sql(f"SELECT rowid, bm25({name}) FROM {name} WHERE {name} MATCH 'hello' "
                                                 "ORDER BY rowid").all() for name in ("kept", "contentless")}
            assert [r[0] for r in scores["kept"]] == [r[0] for r in scores["contentless"]] == [1, 5]
            assert _averages(conn, "contentless") == [3, 8, 3], (
                f"SQLite {version} now keeps a contentless_delete table's totals on delete: a contentless keyword "
                "table may rank as the stored one (measure it again: bench/storage.py --layouts)")
            assert scores["kept"] != scores["contentless"]  # the deleted row still counts in N and avgdl
    finally:
        store.close()


def test_the_stored_table_ranks_as_if_the_deleted_row_was_never_written(tmp_path: Path) -> None:
    """The reference the first test compares with: deleting a row from the stored layout gives the totals
    and scores of a table where it was never inserted."""
    store = open_store(tmp_path / "m.db")
    try:
        RecallIndex.for_store(store, HashingEmbedder(16)).ensure_tables()
        with store.db.write() as conn:
            ddl = str(virtual_table_sql(conn, FTS_TABLE))
            for name, rows in (("deleted", ROWS), ("never", [r for r in ROWS if r[0] != 2])):
                conn.exec_driver_sql(ddl.replace(FTS_TABLE, name, 1))
                for row in rows:
                    conn.exec_driver_sql(f"INSERT INTO {name} (rowid, body, context) VALUES (?, ?, ?)", row)
            conn.exec_driver_sql("DELETE FROM deleted WHERE rowid = 2")
        with store.db.read() as conn:
            assert _averages(conn, "deleted") == _averages(conn, "never")
            deleted, never = (conn.exec_driver_sql(f"SELECT rowid, bm25({n}) FROM {n} WHERE {n} MATCH 'hello' "
                                                   "ORDER BY rowid").all() for n in ("deleted", "never"))
            assert [r[0] for r in deleted] == [1, 5] and deleted == never  # the same scores, to the bit
    finally:
        store.close()


def test_every_layout_candidate_of_the_bench_applies_and_takes_every_doc() -> None:
    """``bench/storage.py --layouts`` measures each candidate on a scratch database made by the stored
    code; a candidate whose statements no longer apply (a table renamed) or that no longer takes every doc
    (a failed recall write is logged, not raised: ``layout_rate`` counts them) would time something else."""
    from bench import storage as bench

    for name, statements in bench.LAYOUTS.items():
        spent, size = bench.layout_rate(100, statements)
        assert spent > 0 and size > 0, name
