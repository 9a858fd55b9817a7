"""``pg_rank.TsIndex`` answers what ``pg_keywords.search_sql`` answers, on the real server.

Random docs (English with stop words and stemming, repeated words, hyphenated words, CJK text,
empty context, texts past 16383 positions and past the 255 positions kept of one lexeme) written by the
index's own writer, and random queries built the engine's way (1-6 terms, CJK bigrams, words the
parser cuts into phrases, terms that are all stop words): the same rows, the same ``real`` rank to
the bit (and the same Python float psycopg reads), the same order with ties by message id, for each
scope and limit. Hand-written ``tsquery`` trees (``!``, ``&``, ``|`` inside phrases, ``<N>``,
weights) and docs stored without positions check ``@@`` and both ``calc_rank`` paths beyond what
the engine sends. Puts, replacements and drops leave the index equal to the table after the same
``UPDATE`` / ``DELETE``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import numpy as np
import pytest

from core.embedding import HashingEmbedder
from core.recall import RecallIndex, pg_keywords, pg_rank
from core.recall.pg_keywords import search_sql, upsert_docs
from core.recall.pg_rank import LOAD_SQL, TsIndex, parse_tsquery, parse_tsvector, query_sql
from core.recall.pg_schema import KEYWORD_CONFIG
from core.recall.tables import DOCS_TABLE
from core.recall.text import keyword_terms
from core.storage import Store, open_store
from core.storage.pg import cursor

ENGLISH = ("the a of and to is it was what who running runs ran runner connection connected connecting "
           "garden gardens gardening cedar planks sister sisters Lisbon allergy allergies allergic peanuts "
           "concert Tuesday bicycle recipe recipes e-mail state-of-the-art don't it's O'Brien back\\slash "
           "2026 42 3.14 alpha beta gamma very very happy happily happiness go going gone").split()
CJK = "旅行东京会议天气你好日本語の会議今日は"
IDS = ["m", "M", "m_", "é", "Z", "a b", "z", "_", "日本", "0", "a", "ab", "aB", "Ab"]


def _text(rng: random.Random, words: int) -> str:
    out = []
    for _ in range(words):
        if rng.random() < 0.15:
            out.append("".join(rng.choice(CJK) for _ in range(rng.randint(1, 4))))
        else:
            out.append(rng.choice(ENGLISH))
    return " ".join(out)


def _docs(rng: random.Random, n: int) -> list[tuple[str, str, str, str, str]]:
    docs = []
    for i in range(n):
        mid = f"{rng.choice(IDS)}{i % 7}-{i}" if i % 3 else rng.choice(IDS) + str(i)
        text = _text(rng, rng.randint(1, 30))
        context = "" if rng.random() < 0.3 else _text(rng, rng.randint(1, 20))
        docs.append((mid, f"t{i % 4}", f"r{i % 2}", text, context))
    # past 16383 positions, and far past 256 positions of one lexeme, in the body and in the context
    docs.append(("long-1", "t0", "r0", "garden cedar " * 9000 + "concert", "sister " * 300))
    docs.append(("long-2", "t1", "r0", "peanuts " * 400, "garden cedar " * 9000 + "Lisbon 旅行"))
    docs.append(("long-3", "t1", "r1", _text(rng, 5), "bicycle " * 17000 + "recipe"))
    return docs


def _query_terms(rng: random.Random) -> list[str]:
    """Quoted terms as the engine selects them: ``keyword_terms`` of a random text, a random subset."""
    terms = keyword_terms(_text(rng, rng.randint(1, 6)))
    if rng.random() < 0.1:
        terms = keyword_terms(rng.choice(["what is it?", "the of and", "to be or not to be"]))
    rng.shuffle(terms)
    return terms[: rng.randint(1, 6)]


@pytest.fixture
def store(pg_url: str) -> Iterator[Store]:
    s = open_store(pg_url)
    RecallIndex.for_store(s, HashingEmbedder(8))  # the recall tables (migrations)
    try:
        yield s
    finally:
        s.close()


def _write(store: Store, docs: list[tuple[str, str, str, str, str]]) -> None:
    with store.db.write() as conn:
        upsert_docs(conn, docs)


def _loaded(store: Store) -> TsIndex:
    index = TsIndex()
    with store.db.read() as conn:
        assert index.load(conn) == conn.exec_driver_sql(f"SELECT count(*) FROM {DOCS_TABLE}").scalar()
    return index


def _bits(x: float) -> int:
    return int(np.float32(x).view(np.uint32))


def _same(sql_rows: list[tuple[object, ...]], ours: list[pg_rank.Row], what: object) -> None:
    assert [r[:3] for r in ours] == [tuple(r[:3]) for r in sql_rows], what
    assert [_bits(r[3]) for r in ours] == [_bits(float(r[3])) for r in sql_rows], what  # type: ignore[arg-type]
    assert [r[3] for r in ours] == [float(r[3]) for r in sql_rows], what  # type: ignore[arg-type]


def _compare_engine_queries(store: Store, index: TsIndex, rng: random.Random, queries: int,
                            context_weight: float | None = None) -> int:
    """Random engine queries, random scopes and limits; returns how many rows were compared."""
    compared = 0
    with store.db.read() as conn:
        for q in range(queries):
            terms = _query_terms(rng)
            if not terms:
                continue
            text = cursor.scalar(conn, *query_sql(terms))
            query = parse_tsquery(text)
            scope = rng.choice([("r0", None), ("r1", None), (None, "t1"), ("r0", "t2"), (None, None), ("nope", None)])
            limit = rng.choice([1, 3, 10, 50, 100_000])
            sql, params = search_sql(terms, resource_id=scope[0], thread_id=scope[1], limit=limit,
                                     context_weight=context_weight)
            rows = cursor.rows(conn, sql, params)
            ours = index.search(query, resource_id=scope[0], thread_id=scope[1], limit=limit)
            _same(rows, ours, (q, terms, text, scope, limit))
            compared += len(rows)
    return compared


def test_engine_queries_give_the_statements_rows(store: Store):
    rng = random.Random(7)
    _write(store, _docs(rng, 400))
    index = _loaded(store)
    assert _compare_engine_queries(store, index, rng, 300) > 2000
    # a context weight that is not a power of two: each float rounding of tsrank.c shows
    other = TsIndex(context_weight=0.3)
    with store.db.read() as conn:
        other.put(conn.exec_driver_sql(LOAD_SQL).all())
    assert _compare_engine_queries(store, other, rng, 150, context_weight=0.3) > 1000
    # the long docs were stored capped (16383; 256 positions a lexeme) and are found
    with store.db.read() as conn:
        (terms,) = conn.exec_driver_sql(f"SELECT terms::text FROM {DOCS_TABLE} WHERE message_id = 'long-2'").one()
    lexemes = dict(parse_tsvector(terms))
    assert len(lexemes["peanut"]) == 255 and max(p & 0x3FFF for p in lexemes["lisbon"]) == 16383
    hits = index.search(parse_tsquery("'lisbon' | '旅' <-> '行'"), limit=100_000)
    assert "long-2" in [h[0] for h in hits]


def test_ts_rank_is_the_servers_to_the_bit(store: Store):
    """``TsIndex.rank`` (every doc at once) and ``pg_rank.ts_rank`` (one doc) against the server's
    ``ts_rank`` for random docs (every weight class, up to 255 positions a lexeme, positions up to
    16383, lexemes sharing a position, lexemes without positions), weight arrays and queries of both
    ``calc_rank`` paths (a top ``&`` or phrase: pairs of positions; else: per lexeme)."""
    rng = random.Random(5)
    lexemes = ["a", "b", "c", "dd", "e"]
    docs = []
    for _ in range(150):
        parts = []
        for lex in rng.sample(lexemes, rng.randint(1, 5)):
            if rng.random() < 0.05:
                parts.append(f"'{lex}'")
                continue
            count = rng.choice([1, 1, 2, 3, 7, rng.randint(1, 255)])
            top = rng.choice([6, 20, 200, 16383])
            positions = sorted(rng.sample(range(1, top + 1), min(count, top)))
            parts.append(f"'{lex}':" + ",".join(f"{p}{rng.choice('ABCD')}" for p in positions))
        docs.append(" ".join(parts))
    queries = []
    for _ in range(30):
        ops = rng.sample(lexemes, rng.randint(1, 4))
        joiner = rng.choice([" | ", " & ", " <-> ", " <3> "])
        tail = rng.choice(["", " | 'a'", " & 'b'"]) if rng.random() < 0.3 else ""
        queries.append(joiner.join(f"'{o}'" for o in ops) + tail)
    weight_arrays = ["{0, 0, 0.5, 1}", "{0.1, 0.2, 0.4, 1}", "{0.05, 0.3, 0.7, 0.9}", "{1, 1, 1, 1}"]
    with store.db.read() as conn:
        vectors = [r[0] for r in cursor.rows(conn, "SELECT CAST(v AS tsvector)::text FROM unnest(CAST(? AS text[])) "
                                                   "WITH ORDINALITY AS x(v, i) ORDER BY i", [docs])]
        texts = [r[0] for r in cursor.rows(conn, "SELECT CAST(q AS tsquery)::text FROM unnest(CAST(? AS text[])) "
                                                 "WITH ORDINALITY AS x(q, i) ORDER BY i", [queries])]
        ranks = cursor.rows(conn, "SELECT w.i, q.i, d.i, ts_rank(CAST(w.w AS real[]), CAST(d.v AS tsvector), "
                                  "CAST(q.q AS tsquery)) FROM unnest(CAST(? AS text[])) WITH ORDINALITY AS w(w, i), "
                                  "unnest(CAST(? AS text[])) WITH ORDINALITY AS q(q, i), "
                                  "unnest(CAST(? AS text[])) WITH ORDINALITY AS d(v, i)",
                            [weight_arrays, queries, docs])
    expected = {(int(w), int(q), int(d)): float(r) for w, q, d, r in ranks}
    parsed = [dict(parse_tsvector(v)) for v in vectors]
    ids = [f"d{i}" for i in range(len(docs))]
    ands = 0
    for wi, array in enumerate(weight_arrays, 1):
        w = tuple(pg_rank.f32(float(x)) for x in array.strip("{}").split(","))
        index = TsIndex(weights=w)  # type: ignore[arg-type]
        for mid, vector in zip(ids, vectors):
            index.put([(mid, "t", "r", vector)])
        for qi, text in enumerate(texts, 1):
            query = parse_tsquery(text)
            ands += query.rank_and
            want = [_bits(expected[(wi, qi, di)]) for di in range(1, len(docs) + 1)]
            assert [_bits(x) for x in index.rank(query, ids).tolist()] == want, (array, text)
            for di in range(0, len(docs), 13):
                assert _bits(pg_rank.ts_rank(w, parsed[di], query)) == want[di], (array, text, vectors[di])
    assert ands > 30


def test_the_ties_are_ordered_by_code_point(store: Store):
    """Equal ranks (one occurrence in the body) in code point order: the statement's ``COLLATE "C"``
    (a database of another collation would otherwise order them its own way), and ``TsIndex``'s."""
    ids = ["b", "B", "é", "e", "Z", "_x", "日本", "a b", "ab", "aB"]
    _write(store, [(mid, "t", "r", "garden", "") for mid in ids])
    index = _loaded(store)
    with store.db.read() as conn:
        for limit in (1, 3, 10):
            rows = cursor.rows(conn, *search_sql(['"garden"'], resource_id="r", thread_id=None, limit=limit))
            assert [r[0] for r in rows] == sorted(ids)[:limit]
            _same(rows, index.search(parse_tsquery("'garden'"), resource_id="r", limit=limit), limit)


def _general_sql(text: str, limit: int) -> tuple[str, list[object]]:
    """``search_sql``'s statement for any ``tsquery`` text."""
    sql, params = search_sql(['"x"'], resource_id=None, thread_id=None, limit=limit)
    sql = sql.replace(f"phraseto_tsquery('{pg_keywords.CONFIG}', ?)", "CAST(? AS tsquery)")
    return sql, [text, limit]


def _random_tree(rng: random.Random, lexemes: list[str], depth: int = 0) -> str:
    if depth >= 3 or rng.random() < 0.3:
        lex = "'" + rng.choice(lexemes).replace("'", "''").replace("\\", "\\\\") + "'"
        if rng.random() < 0.1:
            lex += ":" + "".join(rng.sample("AB", rng.randint(1, 2)))
        return lex
    op = rng.choice(["|", "&", "<->", "<2>", "<0>", "!", "<->", "<->"])
    if op == "!":
        return "!(" + _random_tree(rng, lexemes, depth + 1) + ")"
    return f"({_random_tree(rng, lexemes, depth + 1)} {op} {_random_tree(rng, lexemes, depth + 1)})"


def test_any_tsquery_matches_and_ranks_as_the_server(store: Store):
    """Operators the engine does not send (``!``, ``&``, ``|`` within a phrase), weights, and docs
    whose lexemes carry no positions, written as ``tsvector`` text."""
    rng = random.Random(11)
    _write(store, _docs(rng, 150))
    with store.db.write() as conn:
        conn.exec_driver_sql(f"INSERT INTO {DOCS_TABLE} (message_id, thread_id, resource_id, terms, keyed_with) "
                             f"SELECT *, '{KEYWORD_CONFIG}' FROM (VALUES "
                             "('nopos-1', 't', 'r0', $$'garden' 'cedar':2A 'sister':3B,4B$$::tsvector), "
                             "('nopos-2', 't', 'r0', $$'garden' 'cedar'$$), "
                             "('nopos-3', 't', 'r0', $$'cedar':1 'garden':2C 'lisbon':3$$), "
                             "('pos-1', 't', 'r0', $$'garden':1A,9 'cedar':5,10C 'sister':7,11B$$), "
                             "('pos-2', 't', 'r0', $$'garden':3D 'cedar':4B 'sister':5 'lisbon':4$$)) v")
    index = _loaded(store)
    lexemes = ["garden", "cedar", "sister", "lisbon", "concert", "旅", "行", "run", "e-mail", "mail", "happi", "very"]
    fixed = ["!('garden' <-> 'cedar') <-> 'sister'", "('garden' | 'cedar') <-> 'sister'", "!'garden' <-> !'cedar'",
             "('garden' <-> 'cedar' | 'lisbon') <-> 'sister'", "'cedar' & !('garden' <2> 'sister')",
             "('very' <-> 'very') <-> 'happi'", "'garden':C | 'cedar':A <-> 'garden'", "!!'garden' <-> 'cedar'",
             "('garden' & 'cedar') <-> 'sister'", "'sister' <0> 'sister'", "!('run' | 'garden')",
             "'cedar' & 'lisbon'", "'lisbon' & 'garden' & 'cedar'"]
    with store.db.read() as conn:
        for q in range(400):
            text = fixed[q] if q < len(fixed) else _random_tree(rng, lexemes)
            canonical = cursor.scalar(conn, "SELECT CAST(? AS tsquery)::text", [text])
            query = parse_tsquery(canonical)
            limit = rng.choice([5, 100_000])
            rows = cursor.rows(conn, *_general_sql(canonical, limit))
            _same(rows, index.search(query, limit=limit), (q, text, canonical))


def test_the_query_text_parses_back(store: Store):
    with store.db.read() as conn:
        for text in ["'a' <-> ( 'b' <-> 'c' ) | !'d' & 'e':AB", "'it''s' | 'back\\\\slash'", "!( 'a' | 'b' ) <3> 'c'",
                     "'a' & ( 'b' | 'c' ) <-> 'd'"]:
            canonical = cursor.scalar(conn, "SELECT CAST(? AS tsquery)::text", [text])
            assert _render(parse_tsquery(canonical).root) == _render(parse_tsquery(
                cursor.scalar(conn, "SELECT CAST(? AS tsquery)::text", [canonical])).root)
    q = parse_tsquery("'a' <-> ( 'b' <-> 'c' ) | !'d' & 'e':*AB | 'it''s'")
    assert _render(q.root) == "((('a' <1> ('b' <1> 'c')) | (!'d' & 'e':*AB)) | 'it's')"
    assert q.operands == ("a", "b", "c", "d", "e", "it's") and q.has_prefix
    assert parse_tsquery("").root is None
    with pytest.raises(pg_rank.Unsupported):
        TsIndex().search(q, limit=3)


def _render(node: pg_rank.Node | None) -> str:
    if node is None:
        return ""
    if isinstance(node, pg_rank.Operand):
        flags = ("*" if node.prefix else "") + "".join(c for c, b in zip("ABCD", (8, 4, 2, 1)) if node.weight & b)
        return f"'{node.lexeme}'" + (":" + flags if flags else "")
    if node.kind == "!":
        return "!" + _render(node.left)
    op = f"<{node.distance}>" if node.kind == "<>" else node.kind
    return f"({_render(node.left)} {op} {_render(node.right)})"


def test_put_replace_and_drop_follow_the_table(store: Store):
    rng = random.Random(3)
    docs = _docs(rng, 200)
    _write(store, docs)
    index = _loaded(store)
    ids = [d[0] for d in docs]
    for step in range(4):
        # replace some docs (new text, some moved to another thread), delete others, add new ones
        changed = [(mid, rng.choice(["t0", "t3"]), "r0", _text(rng, rng.randint(1, 20)), _text(rng, 3))
                   for mid in rng.sample(ids, 30)]
        gone = rng.sample([m for m in ids if m not in {c[0] for c in changed}], 25)
        added = [(f"new{step}-{i}", "t2", "r1", _text(rng, 8), "") for i in range(20)]
        _write(store, changed + added)
        with store.db.write() as conn:
            pg_keywords.delete_docs(conn, gone)
            rows = conn.exec_driver_sql(LOAD_SQL + " WHERE message_id = ANY(CAST(? AS text[]))",
                                        ([d[0] for d in changed + added],)).all()
        index.put(rows)
        index.drop(gone)
        ids = [m for m in ids if m not in gone] + [a[0] for a in added]
        assert len(index) == len(ids)
        _compare_engine_queries(store, index, rng, 40)
    # dropping most docs compacts the index; it still answers as the table
    most = ids[: len(ids) - 20]
    with store.db.write() as conn:
        pg_keywords.delete_docs(conn, most)
    index.drop(most)
    assert len(index) == 20
    assert len(index._mids) == 20  # the dropped and replaced docs' slots are gone, not only hidden
    _compare_engine_queries(store, index, rng, 40)
