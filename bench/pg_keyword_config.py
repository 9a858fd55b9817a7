"""What keeping stop words costs Postgres's keyword docs: ``english`` against the engine's configuration.

    .venv/bin/python bench/pg_keyword_config.py                   # 20,000 docs of LoCoMo's messages
    .venv/bin/python bench/pg_keyword_config.py --docs 100000 --runs 3

Migration ``0026_recall_keyword_config`` keys the docs with ``memory_studio_english`` (``english`` whose
snowball stemmer has no stop-word list) so that they keep every word, as FTS5 does. This keys the same
docs both ways, each a message (weight A) with the one before it (weight B), segmented as the engine
does (``text.segment``), into a table shaped as the docs table (a GIN index over ``terms``), written
in batches of 100 as a save's recall write does, and prints per configuration: µs of wall time a doc
(the statement and the GIN merge ``pg_keywords.merge_pending`` runs), the mean ``tsvector`` size and
the table's and index's sizes. The configurations alternate, ``--runs`` times.

Text: LoCoMo's public messages (``bench/recall_locomo.py --data``'s folder), cycled to ``--docs``.
Starts its own PostgreSQL (the test suite's helper, as ``bench/scale.py``), stopped at exit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from recall_locomo import default_data  # noqa: E402
from scale import _pg_server  # noqa: E402  (the one PostgreSQL of a bench run)

from core.recall.pg_schema import KEYWORD_CONFIG, LEGACY_CONFIG  # noqa: E402
from core.recall.text import segment  # noqa: E402
from core.storage import open_store  # noqa: E402

TABLE = "bench_keyword_docs"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=20_000)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--data", type=Path, default=default_data(), help="folder with locomo_public_messages.jsonl")
    args = ap.parse_args()

    lines = (args.data / "locomo_public_messages.jsonl").read_text(encoding="utf-8").splitlines()
    texts = [segment(json.loads(line)["text"]) for line in lines if line.strip()]
    pairs = [(texts[i % len(texts)], texts[(i - 1) % len(texts)]) for i in range(args.docs)]

    url, _drop = _pg_server().fresh_database()  # type: ignore[attr-defined]
    store = open_store(url)  # (the migrations make the engine's configuration)
    results: dict[str, list[tuple[float, float, int, int]]] = {LEGACY_CONFIG: [], KEYWORD_CONFIG: []}
    for _run in range(args.runs):
        for config in results:
            with store.db.transaction() as conn:
                conn.exec_driver_sql(f"DROP TABLE IF EXISTS {TABLE}")
                conn.exec_driver_sql(f"CREATE TABLE {TABLE} (doc_id BIGSERIAL PRIMARY KEY, terms tsvector NOT NULL)")
                conn.exec_driver_sql(f"CREATE INDEX {TABLE}_terms ON {TABLE} USING GIN (terms)")
            doc = f"setweight(to_tsvector('{config}', ?), 'A') || setweight(to_tsvector('{config}', ?), 'B')"
            start = time.perf_counter()
            for i in range(0, len(pairs), 100):
                with store.db.transaction() as conn:
                    conn.exec_driver_sql(f"INSERT INTO {TABLE} (terms) VALUES ({doc})", pairs[i:i + 100])
                    conn.exec_driver_sql("SELECT gin_clean_pending_list(?::regclass)", (f"{TABLE}_terms",))
            took = time.perf_counter() - start
            with store.db.read() as conn:
                mean, table, index = conn.exec_driver_sql(
                    f"SELECT avg(pg_column_size(terms)), pg_table_size(?::regclass), pg_relation_size(?::regclass) "
                    f"FROM {TABLE}", (TABLE, f"{TABLE}_terms")).one()
            results[config].append((took / len(pairs) * 1e6, float(mean), int(table), int(index)))
    for config, runs in results.items():
        print(f"{config:>22}: {statistics.median(r[0] for r in runs):7.1f} µs a doc "
              f"({', '.join(f'{r[0]:.1f}' for r in runs)}), tsvector {runs[0][1]:.0f} B, "
              f"table {runs[0][2] / 1e6:.1f} MB, GIN {runs[0][3] / 1e6:.1f} MB ({len(pairs):,} docs)")
    store.close()


if __name__ == "__main__":
    main()
