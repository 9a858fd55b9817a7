"""Which embedding models a database's vectors come from, and replacing one model's vectors by another's.

A database keeps the vectors of the model that indexed it: ``stored_model`` names it (the model with
the most vectors), so a ``Memory`` without an explicit embedder keeps searching and indexing with that
model whatever the default is (``core.memory``). ``memory-studio reindex --model NAME`` embeds every
message with the named model and, when the run is complete, drops the other models' vectors
(``drop_other_models``): from then on the database is the new model's.

Vectors written by Mastra carry no model id; they are counted under None and never dropped.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import TYPE_CHECKING

import sqlalchemy as sa

from core.recall.schema import quoted
from core.recall.tables import IVF_PACKS, IVF_ROWS, IVF_TABLE, STATE_TABLE
from core.recall.vector_table import triggered_counters
from core.storage.capabilities import capabilities_of
from core.storage.catalog import has_table, table_columns, table_names

if TYPE_CHECKING:  # pragma: no cover
    from core.embedding import CachedEmbedder
    from core.storage import Store

VECTOR_TABLE_PREFIX = "memory_messages"


def _vector_tables(conn: sa.Connection) -> list[tuple[str, bool]]:
    """(table, has a model_id column) of every vector table."""
    out = []
    for table in table_names(conn, VECTOR_TABLE_PREFIX):
        cols = {c[0] for c in table_columns(conn, table)}
        if "embedding" in cols and "vector_id" in cols:
            out.append((table, "model_id" in cols))
    return out


def model_counts(conn: sa.Connection) -> Counter[str | None]:
    """Vectors per model id over every vector table (None: written without a model id, e.g. by Mastra)."""
    counts: Counter[str | None] = Counter()
    for table, has_model in _vector_tables(conn):
        counts.update(_table_counts(conn, table, has_model))
    return counts


def _table_counts(conn: sa.Connection, table: str, has_model: bool) -> Counter[str | None]:
    """Vectors per model id in one vector table (a table without a model id column: all under None)."""
    found: Counter[str | None] = Counter()
    if has_model:
        for model_id, n in conn.exec_driver_sql(f"SELECT model_id, count(*) FROM {quoted(table)} GROUP BY model_id"):
            found[model_id] += int(n)
    else:
        found[None] += int(conn.exec_driver_sql(f"SELECT count(*) FROM {quoted(table)}").scalar() or 0)
    return found


def _marker(conn: sa.Connection, table: str) -> tuple[int, int] | None:
    """What changes whenever a vector table's rows do: its largest id (a new row takes a larger one) and
    its rewrite counter (``<table>:rewrites``, bumped by triggers on every update and delete). None where
    the database keeps no counter (Postgres, a Mastra database without our migrations): count each time."""
    if not capabilities_of(conn).implicit_rowid or not has_table(conn, STATE_TABLE):
        return None
    newest, rewrites = triggered_counters(conn, table)
    return None if rewrites is None else (newest, rewrites)


def stored_models(store: "Store") -> Counter[str | None]:
    """``model_counts`` of the store's database, each vector table counted again only when its rows have
    changed since (``_marker``): the count reads the whole table (its vectors too), ~0.15 s at 100,000
    vectors, and libSQL's driver holds the GIL meanwhile, so the Studio's UI thread froze on every
    Recall Playground search that asked it."""
    with _counts_lock:
        cache: dict[str, tuple[tuple[int, int], Counter[str | None]]] = store.extensions.setdefault("model_counts", {})
    counts: Counter[str | None] = Counter()
    with store.db.read() as conn:
        for table, has_model in _vector_tables(conn):
            marker = _marker(conn, table) if has_model else None  # (a table without model ids: counted each time)
            with _counts_lock:
                held = cache.get(table)
            if marker is not None and held is not None and held[0] == marker:
                counts.update(held[1])
                continue
            found = _table_counts(conn, table, has_model)
            if marker is not None:
                with _counts_lock:
                    cache[table] = (marker, found)
            counts.update(found)
    return counts


_counts_lock = threading.Lock()


def stored_piece_counts(store: "Store") -> Counter[str]:
    """Messages with piece vectors (``core.recall.pieces``) per model id over every pieces table, each
    table counted again only when its write counter moved since (libSQL; Postgres: counted each time)."""
    from core.recall import piece_table

    with _counts_lock:
        cache: dict[str, tuple[int, Counter[str]]] = store.extensions.setdefault("piece_counts", {})
    counts: Counter[str] = Counter()
    with store.db.read() as conn:
        kept = capabilities_of(conn).implicit_rowid and has_table(conn, STATE_TABLE)
        for table in piece_table.every_table(conn):
            marker = piece_table.writes(conn, table) if kept else None
            with _counts_lock:
                held = cache.get(table)
            if marker is not None and held is not None and held[0] == marker:
                counts.update(held[1])
                continue
            found = Counter(piece_table.counts(conn, table))
            if marker is not None:
                with _counts_lock:
                    cache[table] = (marker, found)
            counts.update(found)
    return counts


def stored_model(store: "Store") -> str | None:
    """The model id the database's vectors come from (None: no vectors with a model id).

    Cheap in the usual case of one model: the first row of each vector table. Only when two tables
    hold vectors of different models (a ``reindex --model`` cut short) are the vectors counted, and
    the model with the most wins, so an interrupted switch keeps the old model until it completes.
    """
    with store.db.read() as conn:
        found: set[str] = set()
        for table, has_model in _vector_tables(conn):
            if has_model:
                row = conn.exec_driver_sql(
                    f"SELECT model_id FROM {quoted(table)} WHERE model_id IS NOT NULL LIMIT 1").first()
                if row is not None:
                    found.add(row[0])
        if len(found) <= 1:
            return next(iter(found), None)
        counts = model_counts(conn)
    return max((n, model_id) for model_id, n in counts.items() if model_id is not None)[1]


def drop_other_models(store: "Store", keep: str) -> Counter[str]:
    """Delete every vector whose model id is neither ``keep`` nor unknown; returns what was dropped, by model."""
    dropped: Counter[str] = Counter()
    with store.db.write() as conn:
        for table, has_model in _vector_tables(conn):
            if not has_model:
                continue
            for model_id, n in conn.exec_driver_sql(
                f"SELECT model_id, count(*) FROM {quoted(table)} WHERE model_id IS NOT NULL AND model_id <> ? "
                "GROUP BY model_id", (keep,),
            ).all():
                dropped[model_id] += int(n)
            if dropped:
                conn.exec_driver_sql(
                    f"DELETE FROM {quoted(table)} WHERE model_id IS NOT NULL AND model_id <> ?", (keep,)
                )
        from core.recall import piece_table

        for table in piece_table.every_table(conn):  # (the other models' piece vectors go with their rows)
            piece_table.delete_models_but(conn, table, keep)
        if has_table(conn, IVF_TABLE):  # libSQL: the other models' persisted partitions (their rows may
            # have been overwritten by the new model's, same message, same table: nothing counted above)
            ids = [r[0] for r in conn.exec_driver_sql(f"SELECT ivf_id FROM {IVF_TABLE} WHERE model_id <> ?", (keep,))]
            for ivf_id in ids:
                conn.exec_driver_sql(f"DELETE FROM {IVF_ROWS} WHERE ivf_id = ?", (ivf_id,))
                if has_table(conn, IVF_PACKS):  # (migration 0021_recall_ivf_packs)
                    conn.exec_driver_sql(f"DELETE FROM {IVF_PACKS} WHERE ivf_id = ?", (ivf_id,))
                conn.exec_driver_sql(f"DELETE FROM {IVF_TABLE} WHERE ivf_id = ?", (ivf_id,))
    return dropped


def store_model_name(store: "Store") -> str:
    """The local model (name) to embed with for this database: the one its vectors come from, else the
    configured default (``$MEMORY_STUDIO_EMBEDDER``, else ``use``). Vectors of another embedder
    (OpenAI, hashing) do not choose a local model here; ``store_embedder`` rebuilds a hashing one."""
    from core.embedding.models import configured_model, local_model_of

    indexed_by = local_model_of(stored_model(store))
    return indexed_by.name if indexed_by is not None else configured_model().name


_hashing_shared: dict[str, "CachedEmbedder"] = {}
_hashing_lock = threading.Lock()


def store_embedder(store: "Store", *, shared: bool = True) -> "CachedEmbedder":
    """The embedder for this database: the hashing embedder when its vectors are hashing vectors (the
    demo built without the model; rebuilt from the id, nothing to install), else the local model of
    ``store_model_name``. ``shared``: the process-wide one (its session and cache shared), else a
    fresh one. Raises ``ModelNotInstalledError`` saying how to install a missing local model."""
    from core.embedding import CachedEmbedder, HashingEmbedder, default_embedder, shared_default_embedder

    indexed_by = stored_model(store)
    hashing = HashingEmbedder.for_model_id(indexed_by)
    if hashing is not None and indexed_by is not None:
        if not shared:
            return CachedEmbedder(hashing)
        with _hashing_lock:
            found = _hashing_shared.get(indexed_by)
            if found is None:
                found = _hashing_shared[indexed_by] = CachedEmbedder(hashing)
            return found
    name = store_model_name(store)
    return shared_default_embedder(name) if shared else default_embedder(name)
