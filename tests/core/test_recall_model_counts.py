"""Vectors per embedding model (``core.recall.models.stored_models``, the Recall Playground's "index:"
line): counted again only when a vector table's rows changed. The count reads every row of the table, its
vectors too (~0.15 s at 100,000 vectors, the UI thread frozen meanwhile by the driver holding the GIL),
and the playground asked it on every search."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from core import Message, open_store
from core.embedding import HashingEmbedder
from core.recall import RecallIndex
from core.recall.models import stored_models


def test_vectors_per_model_are_counted_again_only_after_the_vectors_change(tmp_path: Path) -> None:
    with open_store(tmp_path / "m.db") as store:
        store.memory.create_thread(thread_id="t", resource_id="r")
        index = RecallIndex.for_store(store, HashingEmbedder(64))
        index.index_messages([Message.user(f"note {i}", id=f"m{i}", thread_id="t", resource_id="r") for i in range(3)])
        model = index.model_id
        table = index.info.name if index.info is not None else ""
        counted: list[str] = []
        sa.event.listen(store.db.engine, "before_cursor_execute",
                        lambda conn, cur, sql, params, ctx, many: counted.append(sql) if "GROUP BY model_id" in sql else None)

        assert stored_models(store) == {model: 3}
        assert stored_models(store) == {model: 3} and len(counted) == 1, "nothing changed: not counted again"

        index.index_messages([Message.user(f"note {i}", id=f"m{i}", thread_id="t", resource_id="r") for i in (3, 4)])
        assert stored_models(store) == {model: 5} and len(counted) == 2, "new vectors"
        with store.db.write() as conn:
            conn.exec_driver_sql(f'UPDATE "{table}" SET model_id = ? WHERE vector_id = ?', ("other-model", "m0"))
        assert stored_models(store) == {model: 4, "other-model": 1} and len(counted) == 3, "a vector rewritten"
        with store.db.write() as conn:
            conn.exec_driver_sql(f'DELETE FROM "{table}" WHERE vector_id = ?', ("m4",))
        assert stored_models(store) == {model: 3, "other-model": 1} and len(counted) == 4, "a vector deleted"
        assert stored_models(store) == {model: 3, "other-model": 1} and len(counted) == 4
