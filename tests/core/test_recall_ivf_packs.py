"""The list-ordered copy of a persisted IVF partition (core/recall/ivf_packs.py, migration
0021_recall_ivf_packs): lists are read from their packs, the copy stays in step when rows are added,
edited, deleted or reindexed (by us or by another program), and a database partitioned before the
migration is packed by it and answers exactly as before."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from core.recall import RecallIndex, ivf_packs, reindex
from core.recall.ivf_store import IvfScope
from core.recall.tables import IVF_PACKS, IVF_ROWS, IVF_TABLE
from core.storage import open_store
from tests.core.test_recall_ivf import DIM, N, Table, count, passage, seed


@pytest.fixture(autouse=True)
def small_partitions(monkeypatch: pytest.MonkeyPatch) -> None:
    from core.recall import matrix

    monkeypatch.setattr(matrix, "IVF_MIN_ROWS", 300)
    monkeypatch.setattr(ivf_packs, "DELTA_MIN", 10)  # pack every 10 rows assigned since


def answers(db_path, embedder: Table, *, unpacked: bool = False, until: str | None = None) -> list[list[tuple[str, float]]]:
    """Vector answers of a restarted process (ids and scores) for a spread of queries; ``unpacked``:
    with every list entry sent back to the vector table first, i.e. read as before the packs."""
    store = open_store(db_path)
    if unpacked:
        with store.db.write() as conn:
            conn.exec_driver_sql(f"UPDATE {IVF_ROWS} SET chunk = NULL")
    index = RecallIndex.for_store(store, embedder)
    with store.db.read() as conn:
        view = index.vector_set(conn, "u", None)
        assert isinstance(view, IvfScope)
        out = []
        for c in embedder.centers:
            q = c / np.linalg.norm(c)
            out.append([(r.message_id, round(r.score, 6)) for r in view.ranked(q, 15, None, until)])
        out.append([(r.message_id, round(r.score, 6)) for r in view.ranked(embedder.known[passage(5)], 5, "t2")])
    store.close()
    return out


def packed_state(db_path) -> tuple[int, int, int]:
    """(entries pointing at a pack, entries read from the table, packs)."""
    con = sqlite3.connect(db_path)
    try:
        return (con.execute(f"SELECT count(*) FROM {IVF_ROWS} WHERE chunk IS NOT NULL").fetchone()[0],
                con.execute(f"SELECT count(*) FROM {IVF_ROWS} WHERE chunk IS NULL").fetchone()[0],
                con.execute(f"SELECT count(*) FROM {IVF_PACKS}").fetchone()[0])
    finally:
        con.close()


def test_a_partition_is_packed_list_by_list_and_answers_as_the_table_does(db_path):
    embedder = Table()
    store = open_store(db_path)
    seed(store, embedder, N)
    nlist = count(store, f"SELECT nlist FROM {IVF_TABLE}")
    store.close()
    packed, loose, packs = packed_state(db_path)
    # Built on 300 rows, one chunk per list; the last 100 assigned since, packed as a second chunk.
    assert (packed, loose) == (N, 0) and 0 < packs <= 2 * nlist

    from_packs = answers(db_path, embedder)
    assert answers(db_path, embedder, unpacked=True) == from_packs  # same ids, same scores
    assert [m for m, _ in from_packs[0]]  # (not empty)


def test_the_copy_follows_inserts_edits_deletes_and_another_programs_writes(db_path):
    embedder = Table()
    store = open_store(db_path)
    seed(store, embedder, N)
    # Inserts: the writer assigns them (read from the table), then packs them once DELTA_MIN are due.
    index = seed(store, embedder, 25, start=N, thread="t2")
    assert packed_state(db_path)[:2] == (N + 25, 0)
    assert len(answers(db_path, embedder)[-1]) == 5  # the new thread's rows are found
    # An edit through the memory: the message's vector is rewritten (new passage), and its next one's.
    from tests.core.test_recall_refresh import edit

    (target,) = list(store.memory.get_messages(["m7"]))
    edit(store, target, "an edited note")
    assert index.refresh_messages(["m7"]).ok
    # Another program rewrites one vector and deletes another: the triggers send them back to the table.
    other = np.asarray(embedder.embed(["rewritten elsewhere"])[0], dtype="<f4")
    with store.db.write() as conn:
        conn.exec_driver_sql(f'UPDATE "memory_messages_{DIM}" SET embedding = ? WHERE vector_id = ?', (other.tobytes(), "m11"))
        conn.exec_driver_sql(f'DELETE FROM "memory_messages_{DIM}" WHERE vector_id = ?', ("m12",))
    store.memory.delete_messages(["m13"])
    assert index.refresh_messages(["m13"]).ok  # its vector row goes (and m14's passage is rebuilt)
    store.close()
    assert packed_state(db_path)[1] >= 2  # m11 and m12 read from the table until packed again

    got = answers(db_path, embedder)
    assert got == answers(db_path, embedder, unpacked=True)
    ids = {m for rows in got for m, _ in rows}
    assert "m12" not in ids and "m13" not in ids
    restarted = open_store(db_path)
    again = RecallIndex.for_store(restarted, embedder)
    top = again.search("rewritten elsewhere", resource_id="u", mode="vector", top_k=1).hits[0]
    assert top.message_id == "m11" and top.score == pytest.approx(1.0, abs=1e-5)
    top = again.search(passage(7).replace("note 7", "an edited note"), resource_id="u", mode="vector", top_k=1).hits[0]
    assert top.message_id == "m7" and top.score == pytest.approx(1.0, abs=1e-5)
    # The next upkeep packs what was sent back (and drops the deleted rows' entries).
    with restarted.db.write() as conn:
        ivf_id = int(conn.exec_driver_sql(f"SELECT ivf_id FROM {IVF_TABLE}").scalar_one())
        assert ivf_packs.pack_pending(conn, again.info, ivf_id, embedder.model_id, "u") >= 2
    restarted.close()
    assert packed_state(db_path)[1] == 0
    assert answers(db_path, embedder) == got


def test_merging_a_lists_chunks_keeps_its_rows(db_path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(ivf_packs, "MAX_CHUNKS", 2)
    embedder = Table()
    store = open_store(db_path)
    seed(store, embedder, N)
    for k in range(4):  # four more chunks for the lists these rows join: merged along the way
        seed(store, embedder, 12, start=N + 12 * k, thread=f"t{k + 2}")
    store.close()
    con = sqlite3.connect(db_path)
    most = con.execute(f"SELECT max(c) FROM (SELECT count(*) AS c FROM {IVF_PACKS} GROUP BY list)").fetchone()[0]
    con.close()
    assert most <= 2
    assert packed_state(db_path)[:2] == (N + 48, 0)
    assert answers(db_path, embedder) == answers(db_path, embedder, unpacked=True)


def test_until_and_thread_answers_from_packs_are_the_tables(db_path):
    embedder = Table()
    store = open_store(db_path)
    seed(store, embedder, N)
    store.close()
    until = "2026-03-01T09:03:00.000Z"  # the first 180 messages
    got = answers(db_path, embedder, until=until)
    assert got == answers(db_path, embedder, unpacked=True, until=until)
    assert all(int(m[1:]) < 180 for rows in got[:-1] for m, _ in rows)


def test_reindexing_with_another_model_drops_the_old_partitions_packs(db_path):
    embedder = Table()
    store = open_store(db_path)
    seed(store, embedder, N)
    assert count(store, f"SELECT count(*) FROM {IVF_PACKS}") > 0

    class Other(Table):
        model_id = "other@d32"

    reindex(store, Other(), replace=True)
    assert count(store, f"SELECT count(*) FROM {IVF_PACKS} p JOIN {IVF_TABLE} i USING (ivf_id) "
                        f"WHERE i.model_id = '{Table.model_id}'") == 0
    assert count(store, f"SELECT count(*) FROM {IVF_PACKS} WHERE ivf_id NOT IN (SELECT ivf_id FROM {IVF_TABLE})") == 0
    store.close()


def test_a_database_partitioned_before_0021_is_packed_by_it_and_answers_the_same(db_path):
    embedder = Table()
    store = open_store(db_path)
    seed(store, embedder, N)
    store.close()
    before = answers(db_path, embedder, unpacked=True)
    # Back to the shape 0017 left: no packs, no chunk/unpacked columns, no triggers, 0021 not applied.
    con = sqlite3.connect(db_path)
    for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE '%_ms_ivf_%'").fetchall():
        con.execute(f'DROP TRIGGER "{name}"')
    con.execute(f"DROP TABLE {IVF_PACKS}")
    con.execute(f"ALTER TABLE {IVF_ROWS} DROP COLUMN chunk")
    con.execute(f"ALTER TABLE {IVF_TABLE} DROP COLUMN unpacked")
    con.execute("DELETE FROM memory_studio_migrations WHERE name = '0021_recall_ivf_packs'")
    con.commit()
    con.close()

    assert answers(db_path, embedder) == before  # the upgrade ran on open: packed, same answers
    packed, loose, packs = packed_state(db_path)
    assert (packed, loose) == (N, 0) and packs > 0
    con = sqlite3.connect(db_path)
    triggers = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE '%_ms_ivf_%'")}
    con.close()
    assert triggers == {f"memory_messages_{DIM}_ms_ivf_au", f"memory_messages_{DIM}_ms_ivf_ad"}
