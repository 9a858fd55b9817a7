"""Postgres's keyword list in process (``core.recall.pg_rank``): load time and time per search at 10k.

    PYTHONPATH=. .venv/bin/python bench/pg_rank_speed.py                 # 10,000 messages
    PYTHONPATH=. .venv/bin/python bench/pg_rank_speed.py --sizes 2000 10000 --queries 200
    PYTHONPATH=. .venv/bin/python bench/pg_rank_speed.py --single      # each of scale.py's words alone

The messages are bench/scale.py's (``_bench_messages``), saved and indexed through the real path on
the test suite's PostgreSQL server; the queries are scale.py's (``"{word} topic {q}"``), their terms
selected as a hybrid search selects them (``TermStats`` drops very common ones), the list as deep as
a hybrid search of the top 10 asks. Printed: the docs' load (``LOAD_SQL`` read and parsed), the
query text's read and parse (a caller caches it per term list), and per search the p50 and p90 of
``TsIndex.search`` next to the statement it replaces (``pg_keywords.search_sql``, run on the server,
round trip included), with how many docs each query matched and whether every row was the same.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.scale import WORDS, _bench_messages, _pg_server  # noqa: E402
from core import Memory, MemoryOptions, open_store  # noqa: E402
from core.embedding import HashingEmbedder  # noqa: E402
from core.recall import RecallIndex, hybrid  # noqa: E402
from core.recall.pg_keywords import search_sql  # noqa: E402
from core.recall.pg_rank import TsIndex, parse_tsquery, query_sql  # noqa: E402
from core.storage.pg import cursor  # noqa: E402


def _ms(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=10)[int(q * 10) - 1] if len(values) > 1 else values[0]


def run(url: str, n: int, queries: int, single: bool) -> None:
    store = open_store(url)
    memory = Memory(store, MemoryOptions())
    msgs = _bench_messages(n)
    for i in range(0, n, 500):
        memory.save_messages(msgs[i:i + 500])  # type: ignore[arg-type]
    index = RecallIndex.for_store(store, HashingEmbedder(dim=64))
    for i in range(0, n, 1000):
        index.index_messages(msgs[i:i + 1000])  # type: ignore[arg-type]
    depth = max(10, hybrid.fusion_for(index.model_id).candidates)
    ts = TsIndex()
    with store.db.read() as conn:
        loads = []
        for _ in range(3):
            t = time.perf_counter()
            docs = ts.load(conn)
            loads.append((time.perf_counter() - t) * 1000)
        prepared = []
        parse_ms = []
        for q in range(queries):
            text = f"{WORDS[q % len(WORDS)]} topic {q}" if not single else WORDS[q % len(WORDS)]
            terms = index.keywords.terms(conn, text)[0]
            if not terms:
                continue
            t = time.perf_counter()
            query_text = cursor.scalar(conn, *query_sql(terms))
            query = parse_tsquery(query_text)
            parse_ms.append((time.perf_counter() - t) * 1000)
            prepared.append((terms, query))
        ours, sql_ms, matched, same = [], [], [], 0
        for _round in range(3):  # best of three rounds per query: the code, not the machine's load
            for i, (terms, query) in enumerate(prepared):
                t = time.perf_counter()
                rows = ts.search(query, resource_id="bench", limit=depth)
                took = (time.perf_counter() - t) * 1000
                t = time.perf_counter()
                expected = cursor.rows(conn, *search_sql(terms, resource_id="bench", thread_id=None, limit=depth))
                took_sql = (time.perf_counter() - t) * 1000
                if _round == 0:
                    ours.append(took)
                    sql_ms.append(took_sql)
                    matched.append(len(ts.search(query, resource_id="bench", limit=10**9)))
                    same += rows == [(r[0], r[1], r[2], float(r[3])) for r in expected]
                else:
                    ours[i] = min(ours[i], took)
                    sql_ms[i] = min(sql_ms[i], took_sql)
    store.close()
    print(f"  {n:>7,} messages: {docs:,} docs loaded in {min(loads):.0f} ms (best of 3); query text read and "
          f"parsed p50 {statistics.median(parse_ms):.2f} ms")
    print(f"  {'':>17} {len(prepared)} queries, list depth {depth}, matched docs p50 {statistics.median(matched):,.0f} "
          f"(max {max(matched):,}); rows equal to the statement's: {same}/{len(prepared)}")
    print(f"  {'':>17} TsIndex.search p50 {statistics.median(ours):.3f} ms, p90 {_ms(ours, 0.9):.3f} ms; "
          f"search_sql on the server p50 {statistics.median(sql_ms):.3f} ms, p90 {_ms(sql_ms, 0.9):.3f} ms", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000])
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--single", action="store_true",
                        help="one word a query (a CJK word alone is one phrase: ts_rank's calc_rank_and path)")
    args = parser.parse_args(argv)
    server = _pg_server()
    print("pg_rank: Postgres's keyword list answered in process (bench/scale.py's messages and queries"
          + (", one word each" if args.single else "") + ")")
    for n in args.sizes:
        url, drop = server.fresh_database()  # type: ignore[attr-defined]
        try:
            run(url, n, args.queries, args.single)
        finally:
            drop()


if __name__ == "__main__":
    main()
