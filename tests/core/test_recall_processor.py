"""The SemanticRecall processor (spec §2.4, §4 items 13–27, adapted to our API)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from core.embedding import HashingEmbedder
from core.memory import Memory
from core.message_list import MessageList, Provenance
from core.storage.catalog import has_table
from core.messages import Message, text_part
from core.options import MemoryOptions
from core.processors.base import ProcessorContext, RequestContext
from core.processors.semantic_recall import BLOCK_CLOSE, BLOCK_OPEN, SemanticRecall, format_other_threads
from core.recall import RecallError, RecallIndex, vector_table_name

# Engine behaviour: every test here runs on libSQL and on Postgres.
pytestmark = pytest.mark.backends

T0 = datetime(2026, 11, 29, 17, 38, tzinfo=timezone.utc)
DIM = 8


class ScoreEmbedder:
    """Queries map to e0; a stored text maps to a vector whose cosine with e0 is the given score."""

    model_id = "score-table@d8"
    dim = DIM

    def __init__(self, scores: dict[str, float]) -> None:
        self.scores = scores
        self.queries: list[str] = []

    def embed(self, texts, kind="passage"):
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for i, text in enumerate(texts):
            if kind == "query":
                self.queries.append(text)
                out[i, 0] = 1.0
                continue
            s = self.scores.get(text.split("\n")[-1])  # the passage ends with the message itself
            if s is None:
                out[i, DIM - 1] = 1.0
            else:
                out[i, 0], out[i, 1] = s, math.sqrt(max(0.0, 1 - s * s))
        return out


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def setup(store, emb, threads: dict[str, list[str]], resource: str = "resource-1") -> RecallIndex:
    index = RecallIndex.for_store(store, emb)
    clock = 0
    for thread, texts in threads.items():
        store.memory.create_thread(thread_id=thread, resource_id=resource)
        msgs = []
        for i, text in enumerate(texts):
            make = Message.user if i % 2 == 0 else Message.assistant
            msgs.append(make(text, id=f"{thread}:{i}", thread_id=thread, resource_id=resource, created_at=at(clock)))
            clock += 60
        store.memory.save_messages(msgs)
        index.index_messages(msgs)
    return index


def make_ctx(store, *, thread="thread-1", resource="resource-1", recall=None, inputs=("q",)) -> ProcessorContext:
    opts = MemoryOptions(semantic_recall={"enabled": True, **(recall or {})})
    req = RequestContext(thread_id=thread, resource_id=resource, options=opts)
    ml = MessageList(thread_id=thread, resource_id=resource)
    for i, m in enumerate(inputs):
        msg = m if isinstance(m, Message) else Message.user(m, created_at=at(100_000 + i))
        ml.add(msg, "input", Provenance("input"))
    return ProcessorContext(request=req, messages=ml, services=Memory(store).services())


def run_output(ctx: ProcessorContext, processor: SemanticRecall) -> None:
    """The output phase as ``Memory.run_output`` runs it: the processor, then the work it left for
    after the save (recall indexes what was saved, never an input a failed turn did not store)."""
    ctx.after_output.clear()
    processor.process_output(ctx)
    for hook in ctx.after_output:
        hook()


def memory_ids(ctx: ProcessorContext) -> list[str]:
    return [m.id for m in ctx.messages.messages("memory")]


def test_top_k_and_default_range_bring_hits_with_neighbours(store):
    texts = [f"m{i}" for i in range(10)]
    emb = ScoreEmbedder({"m2": 0.9, "m6": 0.8, "m8": 0.7, "m0": 0.1})
    index = setup(store, emb, {"thread-1": texts})
    ctx = make_ctx(store, recall={"top_k": 2, "mode": "vector"})
    SemanticRecall(index).process_input(ctx)
    assert memory_ids(ctx) == ["thread-1:1", "thread-1:2", "thread-1:3", "thread-1:5", "thread-1:6", "thread-1:7"]
    entry = ctx.messages.entry("thread-1:2")
    assert entry.provenance.processor_id == "semantic-recall" and entry.provenance.score == pytest.approx(0.9, abs=1e-5)
    assert ctx.messages.entry("thread-1:1").provenance.detail["context_of"] == "thread-1:2"


def test_threshold_filters_low_scores(store):
    emb = ScoreEmbedder({"msg-1": 0.95, "msg-2": 0.85, "msg-3": 0.92})
    index = setup(store, emb, {"a": ["msg-1"], "b": ["msg-2"], "thread-1": ["msg-3"]})
    ctx = make_ctx(store, recall={"threshold": 0.9, "mode": "vector", "message_range": {"before": 0, "after": 0}})
    SemanticRecall(index).process_input(ctx)
    block = ctx.messages.system_entries()[0]
    assert set(block.provenance.stored_ids) == {"a:0"} and memory_ids(ctx) == ["thread-1:0"]


def test_thread_scope_searches_only_the_thread_and_never_adds_a_block(store):
    emb = ScoreEmbedder({"other": 0.99, "mine": 0.5})
    index = setup(store, emb, {"other-thread": ["other"], "thread-1": ["mine"]})
    ctx = make_ctx(store, recall={"scope": "thread", "mode": "vector"})
    SemanticRecall(index).process_input(ctx)
    assert memory_ids(ctx) == ["thread-1:0"] and ctx.messages.system_entries() == []
    ctx = make_ctx(store, recall={"scope": "resource", "mode": "vector"})
    SemanticRecall(index).process_input(ctx)
    assert [e.provenance.stored_ids for e in ctx.messages.system_entries()] == [("other-thread:0",)]


def test_no_hits_leaves_the_list_unchanged_and_says_why(store):
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    store.memory.create_thread(thread_id="thread-1", resource_id="resource-1")
    ctx = make_ctx(store)
    before = ctx.messages.ids()
    SemanticRecall(index).process_input(ctx)
    assert ctx.messages.ids() == before
    assert "no messages indexed for resource resource-1" in ctx.skipped["semantic-recall"]


def test_a_failing_vector_store_does_not_fail_the_turn(store):
    class Exploding:
        def search(self, *a, **k):
            raise RuntimeError("disk on fire")

    ctx = make_ctx(store)
    SemanticRecall(Exploding()).process_input(ctx)  # type: ignore[arg-type]
    assert [m.text for m in ctx.messages.messages()] == ["q"]
    assert "disk on fire" in ctx.skipped["semantic-recall"]


def test_no_user_message_means_no_embedding(store):
    emb = ScoreEmbedder({})
    index = setup(store, emb, {"thread-1": ["x"]})
    ctx = make_ctx(store, inputs=[Message.assistant("only me", created_at=at(9999))])
    SemanticRecall(index).process_input(ctx)
    assert emb.queries == [] and "no user message" in ctx.skipped["semantic-recall"]


def test_multi_part_user_message_is_joined_with_spaces(store):
    emb = ScoreEmbedder({})
    index = setup(store, emb, {"thread-1": ["x"]})
    msg = Message.create("user", [text_part("Part 1"), text_part("Part 2")], created_at=at(9999))
    msg.content.pop("content")
    SemanticRecall(index).process_input(make_ctx(store, inputs=[msg]))
    assert emb.queries == ["Part 1 Part 2"]


def test_recalled_message_already_in_input_is_not_duplicated(store):
    emb = ScoreEmbedder({"dup": 0.9})
    index = setup(store, emb, {"thread-1": ["dup"]})
    stored = store.memory.get_messages(["thread-1:0"])[0]
    ctx = make_ctx(store, inputs=[stored, Message.user("q", created_at=at(9999))])
    SemanticRecall(index).process_input(ctx)
    assert [e.message.id for e in ctx.messages.conversation()].count("thread-1:0") == 1
    assert "already in the context" in ctx.skipped["semantic-recall"]


def test_custom_message_range(store):
    texts = [f"m{i}" for i in range(12)]
    index = setup(store, ScoreEmbedder({"m6": 0.9}), {"thread-1": texts})
    ctx = make_ctx(store, recall={"top_k": 1, "mode": "vector", "message_range": {"before": 5, "after": 3}})
    SemanticRecall(index).process_input(ctx)
    assert memory_ids(ctx) == [f"thread-1:{i}" for i in range(1, 10)]


def test_cross_thread_hits_become_one_tagged_system_message(store):
    emb = ScoreEmbedder({"My name is Ada": 0.95, "ok": 0.9, "same thread fact": 0.85})
    index = setup(store, emb, {"other-thread-1": ["My name is Ada", "ok"], "thread-1": ["same thread fact"]})
    ctx = make_ctx(store, recall={"mode": "vector"})
    SemanticRecall(index).process_input(ctx)
    systems = ctx.messages.system_entries()
    assert len(systems) == 1 and systems[0].tag == "memory"
    text = systems[0].text
    assert BLOCK_OPEN in text and text.rstrip().endswith(BLOCK_CLOSE)
    assert "[5:38 PM] User: My name is Ada" in text and "[5:39 PM] Assistant: ok" in text
    prov = systems[0].provenance
    assert prov.stored_ids == ("other-thread-1:0", "other-thread-1:1")
    assert prov.detail["scores"]["other-thread-1:0"] == pytest.approx(0.95, abs=1e-5)
    assert memory_ids(ctx) == ["thread-1:0"]


def test_block_says_which_message_is_the_hit_and_which_are_neighbours(store):
    emb = ScoreEmbedder({"My name is Ada": 0.95})
    index = setup(store, emb, {"other-thread-1": ["hello", "My name is Ada", "ok"], "thread-1": ["q0"]})
    ctx = make_ctx(store, recall={"mode": "vector", "top_k": 1})
    SemanticRecall(index).process_input(ctx)
    recalled = {r["message_id"]: r for r in ctx.messages.system_entries()[0].provenance.detail["recalled"]}
    assert list(recalled) == ["other-thread-1:0", "other-thread-1:1", "other-thread-1:2"]
    hit = recalled["other-thread-1:1"]
    assert hit["hit"] and hit["vector_score"] == pytest.approx(0.95, abs=1e-5) and hit["score"] is not None
    for nid in ("other-thread-1:0", "other-thread-1:2"):
        neighbour = recalled[nid]
        assert not neighbour["hit"] and neighbour["hit_id"] == "other-thread-1:1"
        assert neighbour["score"] is None and neighbour["vector_score"] is None  # no score of its own
        assert neighbour["hit_score"] == hit["score"] and neighbour["thread_id"] == "other-thread-1"


def test_block_has_a_date_header_whenever_the_day_changes():
    msgs = [
        Message.user("first", id="a", thread_id="x", created_at=T0),
        Message.assistant("second", id="b", thread_id="x", created_at=T0 + timedelta(minutes=1)),
        Message.user("next day", id="c", thread_id="x", created_at=T0 + timedelta(days=1)),
    ]
    lines = format_other_threads(msgs).splitlines()
    assert lines[1] == BLOCK_OPEN and lines[-1] == BLOCK_CLOSE
    assert lines[2:] == [
        "-- Sun 29 Nov 2026 (UTC) --", "[5:38 PM] User: first", "[5:39 PM] Assistant: second",
        "-- Mon 30 Nov 2026 (UTC) --", "[5:38 PM] User: next day", BLOCK_CLOSE,
    ]


def test_output_indexes_new_user_and_assistant_messages_once(store):
    store.memory.create_thread(thread_id="thread-1", resource_id="resource-1")
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    ctx = make_ctx(store, inputs=["I love Lyon"])
    ctx.messages.add(Message.assistant("Lyon is lovely", created_at=at(200_000)), "response", Provenance("model"))
    ctx.messages.add_system("instructions", None, Provenance("instructions"))
    ctx.live = True
    ctx.saved = store.memory.save_messages(ctx.messages.new_messages())  # what the saver stored
    run_output(ctx, SemanticRecall(index))
    run_output(ctx, SemanticRecall(index))  # a second run finds them indexed: no duplicate work
    with store.db.read() as conn:
        rows = conn.exec_driver_sql(f"SELECT metadata FROM {vector_table_name(64)}").all()
    import json

    metas = [json.loads(r[0]) for r in rows]
    assert sorted(m["role"] for m in metas) == ["assistant", "user"]
    assert all(set(m) >= {"message_id", "thread_id", "resource_id", "role", "content", "created_at"} for m in metas)
    assert {m["resource_id"] for m in metas} == {"resource-1"}
    assert ctx.notes["semantic-recall"]["indexed"] == 0  # the second run


def test_output_in_read_only_mode_writes_nothing(store):
    store.memory.create_thread(thread_id="thread-1", resource_id="resource-1")
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    ctx = make_ctx(store, inputs=["remember this"])
    ctx.request.options = ctx.request.options.with_(read_only=True)
    ctx.live = True
    ctx.saved = ctx.messages.new_messages()
    run_output(ctx, SemanticRecall(index))
    with store.db.read() as conn:  # not a row, not even the table (made by the first write that needs it)
        assert not has_table(conn, vector_table_name(64))


def test_missing_embedder_fails_at_construction(store):
    with pytest.raises(RecallError, match="embedder"):
        SemanticRecall(store=store)


def test_a_thread_the_model_receives_whole_is_left_out_by_the_search(store):
    # An SDK session sends its thread itself: recall leaves that thread out by the search's filter, so
    # its top k is other threads' best however many of the thread's own messages rank above them, and
    # none of them is ranked (``passed_over`` is empty; ``excluded_thread`` names the thread).
    mine = [f"mine{i}" for i in range(8)]
    emb = ScoreEmbedder({**{t: 0.99 - i * 0.001 for i, t in enumerate(mine)}, "a0": 0.6, "b0": 0.7, "b1": 0.5})
    index = setup(store, emb, {"thread-1": mine, "a": ["a0"], "b": ["b0", "b1"]})
    for mode in ("vector", "hybrid"):
        ctx = make_ctx(store, recall={"top_k": 2, "mode": mode, "message_range": 0})
        ctx.request.recall_exclude_thread = "thread-1"
        SemanticRecall(index).process_input(ctx)
        notes = ctx.notes["semantic-recall"]
        hits = [h["message_id"] for h in notes["hits"]]
        # (hybrid: b:1 gains a share of its thread's best candidate, b:0, and passes a:0)
        assert hits == (["b:0", "a:0"] if mode == "vector" else ["b:0", "b:1"]), mode
        assert notes["excluded_thread"] == "thread-1" and notes["passed_over"] == [] and "excluded" not in notes
        assert [sorted(e.provenance.stored_ids) for e in ctx.messages.system_entries()] == [sorted(hits)]
        assert memory_ids(ctx) == []
    # Single messages the model receives are still passed over after the search (other callers').
    ctx = make_ctx(store, recall={"top_k": 1, "mode": "vector", "message_range": 0})
    ctx.request.recall_exclude_thread = "thread-1"
    ctx.request.recall_exclude = frozenset({"b:0"})
    SemanticRecall(index).process_input(ctx)
    notes = ctx.notes["semantic-recall"]
    assert [h["message_id"] for h in notes["hits"]] == ["a:0"] and notes["passed_over"] == ["b:0"]
    assert notes["excluded"] == 1
    # Recall scoped to the thread itself finds nothing the model does not receive, and says what to change.
    ctx = make_ctx(store, recall={"scope": "thread", "mode": "vector"})
    ctx.request.recall_exclude_thread = "thread-1"
    SemanticRecall(index).process_input(ctx)
    assert 'scope to "resource"' in ctx.skipped["semantic-recall"] and memory_ids(ctx) == []
