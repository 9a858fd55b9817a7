"""Claims of the Mastra memory spec and seeds that no other test pinned (found by the session-31 audit).

Each test names the claim it checks: defaults, the storage layout column for column, processor assembly with
observational memory, working-memory scope and tool edges, thread-metadata filters and the recall order of
messages stamped at the same instant.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
import sqlalchemy as sa

from core import InvalidArgumentError, Memory, MemoryOptions, Message
from core.embedding import HashingEmbedder
from core.message_list import MessageList, Provenance
from core.options import DEFAULT_TEMPLATE
from core.processors.base import ProcessorContext, RequestContext
from core.processors.semantic_recall import SemanticRecall
from core.recall import RecallIndex

# Engine behaviour: every test here runs on libSQL and on Postgres.
pytestmark = pytest.mark.backends

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"},
    "prefs": {"type": "object", "properties": {"food": {"type": "string"}, "color": {"type": "string"}}},
    "tags": {"type": "array", "items": {"type": "string"}},
}}


# -- defaults (spec §2.1; seed 000 §5.3; seed 001 "token 三档") ------------------------------------------
def test_defaults_are_mastras():
    opts = MemoryOptions()
    assert opts.last_messages == 10 and opts.message_history.limit == 10
    recall = opts.semantic_recall
    assert not recall.enabled and recall.top_k == 4 and recall.scope == "resource" and recall.threshold is None
    assert (recall.message_range.before, recall.message_range.after) == (1, 1)
    wm = opts.working_memory
    assert not wm.enabled and wm.scope == "resource" and wm.template is None and wm.schema is None
    assert not opts.generate_title.enabled and not opts.observational_memory.enabled and not opts.read_only
    on = MemoryOptions(semantic_recall=True).semantic_recall
    assert on.enabled and on.scope == "resource" and on.top_k == 4  # `semanticRecall: true` is resource scope
    assert MemoryOptions(working_memory={"enabled": True}).working_memory.scope == "resource"
    assert MemoryOptions(semantic_recall={"message_range": 2}).semantic_recall.message_range.before == 2


def test_the_default_template_is_mastras_and_the_prompt_shows_it_trimmed(store):
    assert DEFAULT_TEMPLATE == (
        "\n# User Information\n- **First Name**: \n- **Last Name**: \n- **Location**: \n- **Occupation**: \n"
        "- **Interests**: \n- **Goals**: \n- **Events**: \n- **Facts**: \n- **Projects**: \n")
    mem = Memory(store, MemoryOptions(working_memory={"enabled": True}))
    text = mem.assemble(thread_id="t", resource_id="u", input="hi").fragments_from("working-memory")[0].text
    assert "<working_memory_template>\n# User Information\n- **First Name**: \n" in text
    assert "- **Projects**:\n</working_memory_template>" in text  # Mastra's template.trim()
    assert "<working_memory_data>\nnull\n</working_memory_data>" in text


# -- storage layout (spec §1.2: the DDL LibSQLStore.init() creates) ------------------------------------
MASTRA_COLUMNS = {
    "mastra_threads": [("id", "TEXT", True), ("resourceId", "TEXT", True), ("title", "TEXT", True),
                       ("metadata", "TEXT", False), ("createdAt", "TEXT", True), ("updatedAt", "TEXT", True)],
    "mastra_messages": [("id", "TEXT", True), ("thread_id", "TEXT", True), ("content", "TEXT", True),
                        ("role", "TEXT", True), ("type", "TEXT", True), ("createdAt", "TEXT", True),
                        ("resourceId", "TEXT", False)],
    "mastra_resources": [("id", "TEXT", True), ("workingMemory", "TEXT", False), ("metadata", "TEXT", False),
                         ("createdAt", "TEXT", True), ("updatedAt", "TEXT", True)],
    "mastra_observational_memory": [
        ("id", "TEXT", True), ("lookupKey", "TEXT", True), ("scope", "TEXT", True), ("resourceId", "TEXT", False),
        ("threadId", "TEXT", False), ("activeObservations", "TEXT", True),
        ("activeObservationsPendingUpdate", "TEXT", False), ("originType", "TEXT", True), ("config", "TEXT", True),
        ("generationCount", "INTEGER", True), ("lastObservedAt", "TEXT", False), ("lastReflectionAt", "TEXT", False),
        ("pendingMessageTokens", "INTEGER", True), ("totalTokensObserved", "INTEGER", True),
        ("observationTokenCount", "INTEGER", True), ("isObserving", "INTEGER", True),
        ("isReflecting", "INTEGER", True), ("observedMessageIds", "TEXT", False), ("observedTimezone", "TEXT", False),
        ("bufferedObservations", "TEXT", False), ("bufferedObservationTokens", "INTEGER", False),
        ("bufferedMessageIds", "TEXT", False), ("bufferedReflection", "TEXT", False),
        ("bufferedReflectionTokens", "INTEGER", False), ("bufferedReflectionInputTokens", "INTEGER", False),
        ("reflectedObservationLineCount", "INTEGER", False), ("bufferedObservationChunks", "TEXT", False),
        ("isBufferingObservation", "INTEGER", True), ("isBufferingReflection", "INTEGER", True),
        ("lastBufferedAtTokens", "INTEGER", True), ("lastBufferedAtTime", "TEXT", False), ("metadata", "TEXT", False),
        ("createdAt", "TEXT", True), ("updatedAt", "TEXT", True)],
}
MASTRA_INDEXES = {
    "mastra_messages": {"idx_messages_thread_created_at": ["thread_id", "createdAt"],
                        "idx_messages_thread_resource_created_at": ["thread_id", "resourceId", "createdAt"]},
    "mastra_observational_memory": {"idx_om_lookup_key": ["lookupKey"]},
}


def _not_null_and_indexes(conn: sa.Connection, table: str, postgres: bool) -> tuple[list[tuple[str, bool]],
                                                                                     dict[str, list[str]]]:
    """(name, NOT NULL) per column in table order, and each named index's columns, from the catalog."""
    if postgres:
        cols = conn.exec_driver_sql(
            "SELECT attname, attnotnull FROM pg_catalog.pg_attribute WHERE attrelid = to_regclass(quote_ident(?)) "
            "AND attnum > 0 AND NOT attisdropped ORDER BY attnum", (table,)).all()
        idx = conn.exec_driver_sql(
            "SELECT i.relname, a.attname FROM pg_catalog.pg_index x JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid "
            "CROSS JOIN LATERAL unnest(x.indkey) WITH ORDINALITY AS k(attnum, ord) JOIN pg_catalog.pg_attribute a "
            "ON a.attrelid = x.indrelid AND a.attnum = k.attnum WHERE x.indrelid = to_regclass(quote_ident(?)) "
            "ORDER BY i.relname, k.ord", (table,)).all()
        indexes: dict[str, list[str]] = {}
        for name, col in idx:
            indexes.setdefault(str(name), []).append(str(col))
        return [(str(n), bool(nn)) for n, nn in cols], indexes
    cols = [(str(r[1]), bool(r[3])) for r in conn.exec_driver_sql(f"PRAGMA table_info({table})")]
    indexes = {str(r[1]): [str(c[2]) for c in conn.exec_driver_sql(f'PRAGMA index_info("{r[1]}")')]
               for r in conn.exec_driver_sql(f"PRAGMA index_list({table})")}
    return cols, indexes


def test_memory_tables_and_indexes_are_mastras_column_for_column(store, backend):
    """Every column of the four memory tables in Mastra's order, with its NOT NULL, `id` alone the primary key, and
    the three indexes Mastra's libSQL memory domain makes. On libSQL the declared types are Mastra's too; Postgres has its
    own column types and a ``TIMESTAMPTZ`` mirror of each timestamp, as Mastra's Postgres store (names, order,
    nullability and keys are what a reader of either relies on)."""
    from core.storage import catalog

    Memory(store)
    with store.db.read() as conn:
        for table, expected in MASTRA_COLUMNS.items():
            declared = catalog.table_columns(conn, table)
            not_null, indexes = _not_null_and_indexes(conn, table, backend == "postgres")
            if backend == "postgres":
                # Mastra's Postgres layout mirrors each timestamp column ``x`` as ``"xZ" TIMESTAMPTZ`` (``pg/ddl.py``).
                names = {n for n, _ in not_null}
                assert "createdAtZ" in names, table
                not_null = [(n, nn) for n, nn in not_null if not (n.endswith("Z") and n[:-1] in names)]
            assert not_null == [(n, nn) for n, _, nn in expected], table
            assert [name for name, _, pk in declared if pk] == ["id"], table
            if backend == "libsql":
                assert [kind for _, kind, _ in declared] == [kind for _, kind, _ in expected], table
            if backend == "postgres":  # Mastra's Postgres store names its indexes its own way
                if table == "mastra_messages":
                    assert ["thread_id", "createdAt"] in indexes.values(), indexes
                continue
            for name, cols in MASTRA_INDEXES.get(table, {}).items():
                assert indexes.get(name) == cols, (table, name, indexes)


# -- message history (spec §2.3 persistMessages; §2.2 assembly) ----------------------------------------
def test_a_message_saved_without_a_resource_makes_a_thread_owned_by_its_own_id(store):
    """persistMessages auto-creates a missing thread: title '', metadata {}, resourceId = resourceId || threadId."""
    mem = Memory(store)
    mem.save_messages([Message.user("hi", thread_id="lonely")])
    mem.save_messages([Message.user("hi", thread_id="owned", resource_id="u")])
    lonely, owned = mem.get_thread("lonely"), mem.get_thread("owned")
    assert (lonely.resource_id, lonely.title, lonely.metadata) == ("lonely", "", {})
    assert (owned.resource_id, owned.title, owned.metadata) == ("u", "", {})


def test_with_observational_memory_on_message_history_is_not_added(store):
    """OM loads its own (unobserved) history and saves the turn itself: no message-history processor on either side
    (seed 000 §3, spec §2.2); with history off and no OM, nothing loads history, so no input filter either."""
    mem = Memory(store, MemoryOptions(observational_memory=True, working_memory={"enabled": True}))
    assert [p.id for p in mem.input_processors()] == ["memory-input-filter", "working-memory", "observational-memory"]
    assert [p.id for p in mem.output_processors()] == ["observational-memory"]
    assert [p.id for p in Memory(store, MemoryOptions(last_messages=False)).input_processors()] == []
    budget = {"max_tokens": 1000}  # the token limiter trims history, which OM loads itself: not added with OM on
    assert [p.id for p in Memory(store, MemoryOptions(message_history=budget, observational_memory=True))
            .input_processors()] == ["memory-input-filter", "observational-memory"]


def test_a_per_call_schema_replaces_the_memorys_schema_and_a_per_call_template_drops_it(store):
    """Spec §2.1: per-call options deep-merge over the memory's, except ``working_memory.schema``, which replaces."""
    wide = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
            "required": ["name"]}
    narrow = {"type": "object", "properties": {"city": {"type": "string"}}}
    mem = Memory(store, MemoryOptions(working_memory={"enabled": True, "schema": wide}))
    prompt = mem.assemble(thread_id="t", resource_id="u", input="hi",
                          options={"working_memory": {"schema": narrow}})
    text = prompt.fragments_from("working-memory")[0].text
    assert '{"city":""}' in text and '"age"' not in text and '"name"' not in text
    assert prompt.tools[0]["function"]["parameters"]["properties"]["memory"] == narrow
    templated = mem.assemble(thread_id="t", resource_id="u", input="hi",
                             options={"working_memory": {"template": "# Trip\n- Destination:"}})
    text = templated.fragments_from("working-memory")[0].text
    assert "<working_memory_template>\n# Trip\n- Destination:\n</working_memory_template>" in text
    with pytest.raises(ValueError, match="working_memory.use was removed"):
        mem.assemble(thread_id="t", resource_id="u", input="hi", options={"working_memory": {"use": "tool-call"}})


# -- working memory (spec §2.5, §4 items 37-45; seed 004) ----------------------------------------------
def test_a_schema_tool_call_without_memory_changes_nothing_and_says_so(store):
    mem = Memory(store, MemoryOptions(working_memory={"enabled": True, "schema": SCHEMA}))
    mem.update_working_memory(resource_id="u", working_memory={"name": "A"})
    result = mem.apply_working_memory_tool(thread_id=None, resource_id="u", args={"memory": None})
    assert result.success and "unchanged" in result.message
    assert mem.get_working_memory(resource_id="u") == {"name": "A"}
    text = mem.apply_working_memory_tool(thread_id=None, resource_id="u", args={"memory": '{"tags": ["x"]}'})
    assert text.success and mem.get_working_memory(resource_id="u") == {"name": "A", "tags": ["x"]}


def test_the_models_refusal_never_says_a_null_deletes_but_the_apis_does(store):
    """The model's update tool drops nulls (its description says a null never deletes); a refusal of its malformed
    JSON said "(a field set to null is deleted)", the oversold null-delete of Mastra #14424 again. The application's
    merge, where a null does delete, still says so."""
    mem = Memory(store, MemoryOptions(working_memory={"enabled": True, "schema": SCHEMA}))
    mem.update_working_memory(resource_id="u", working_memory={"name": "A", "prefs": {"food": "f", "color": "c"}})
    refused = mem.apply_working_memory_tool(thread_id=None, resource_id="u", args={"memory": "{bad"})
    assert not refused.success and "null" not in refused.message and "a field left out is kept" in refused.message
    kept = mem.apply_working_memory_tool(thread_id=None, resource_id="u", args={"memory": {"prefs": {"color": None}}})
    assert kept.success and mem.get_working_memory(resource_id="u")["prefs"] == {"food": "f", "color": "c"}
    with pytest.raises(ValueError, match=r"\(a field set to null is deleted\)"):
        mem.merge_working_memory(resource_id="u", patch="{bad")
    assert mem.merge_working_memory(resource_id="u", patch={"prefs": {"color": None}})["prefs"] == {"food": "f"}


def test_thread_scope_and_resource_scope_memories_are_apart(store):
    """Seed 004: after switching scope the agent does not see the other scope's memory."""
    resource = Memory(store, MemoryOptions(working_memory={"enabled": True}))
    thread = Memory(store, MemoryOptions(working_memory={"enabled": True, "scope": "thread"}))
    resource.create_thread(resource_id="u", thread_id="t")
    resource.update_working_memory(thread_id="t", resource_id="u", working_memory="# From resource scope")
    assert thread.get_working_memory(thread_id="t", resource_id="u") is None
    thread.update_working_memory(thread_id="t", resource_id="u", working_memory="# From thread scope")
    assert resource.get_working_memory(thread_id="t", resource_id="u") == "# From resource scope"
    prompt = thread.assemble(thread_id="t", resource_id="u", input="hi")
    text = prompt.fragments_from("working-memory")[0].text
    assert "# From thread scope" in text and "# From resource scope" not in text


def test_working_memory_set_through_update_thread_reaches_the_next_prompt(store):
    """Seed 004 "以编程方式更新": updateThread with metadata.workingMemory is what the agent sees next."""
    mem = Memory(store, MemoryOptions(working_memory={"enabled": True, "scope": "thread"}))
    thread = mem.create_thread(resource_id="u", thread_id="t", title="Consult",
                               metadata={"workingMemory": "# Patient\n- Allergies: Penicillin"})
    mem.update_thread("t", title=thread.title,
                      metadata={**thread.metadata, "workingMemory": "# Patient\n- Allergies: Penicillin, Ibuprofen"})
    text = mem.assemble(thread_id="t", resource_id="u", input="hi").fragments_from("working-memory")[0].text
    assert "- Allergies: Penicillin, Ibuprofen" in text


# -- threads and resources (spec §1.3 table behaviour; §4 item 50) ---------------------------------------
def test_update_resource_creates_the_row_merges_metadata_and_keeps_memory_not_given(store):
    store.memory.update_resource("r", metadata={"a": 1, "b": 1}, working_memory="# W")
    store.memory.update_resource("r", metadata={"b": 2, "c": 3})
    resource = store.memory.get_resource("r")
    assert resource.metadata == {"a": 1, "b": 2, "c": 3} and resource.working_memory == "# W"
    store.memory.update_resource("r", working_memory="# W2")
    resource = store.memory.get_resource("r")
    assert resource.metadata == {"a": 1, "b": 2, "c": 3} and resource.working_memory == "# W2"


@pytest.mark.parametrize("value", [[1, 2], {"nested": 1}])
def test_a_metadata_filter_value_that_is_an_array_or_object_is_refused(store, value):
    mem = Memory(store)
    mem.create_thread(resource_id="u", thread_id="x", metadata={"team": [1, 2]})
    with pytest.raises(InvalidArgumentError, match="must be plain JSON values .* 'team' is an (array|object)"):
        mem.list_threads(metadata={"team": value})


def test_a_metadata_filter_names_any_key_and_matches_the_json_value_exactly_on_every_engine(store):
    """Item 50's metadata filter over keys a user may write: on libSQL a key with an apostrophe was pasted into the
    SQL's JSON path ("near "s": syntax error"), one with a double quote matched nothing, true matched 1 and a null
    matched nothing, while Postgres compared the JSON values exactly. Both now answer alike."""
    mem = Memory(store)
    mem.create_thread(resource_id="u", thread_id="a", metadata={
        "user's team": "blue", 'say "hi"': "x", "back\\slash": "b", "flag": True, "num": 1, "gone": None})
    mem.create_thread(resource_id="u", thread_id="b", metadata={"flag": 1, "num": 1.0, "gone": 0})
    mem.create_thread(resource_id="u", thread_id="c")

    def ids(filters):
        return sorted(t.id for t in mem.list_threads(metadata=filters))

    assert ids({"user's team": "blue"}) == ["a"]
    assert ids({'say "hi"': "x"}) == ["a"] and ids({"back\\slash": "b"}) == ["a"]
    assert ids({"flag": True}) == ["a"] and ids({"flag": 1}) == ["b"] and ids({"flag": False}) == []
    assert ids({"num": 1}) == ["a", "b"] and ids({"num": "1"}) == []
    assert ids({"gone": None}) == ["a"] and ids({"gone": 0}) == ["b"]
    assert ids({"user's team": "blue", "flag": True}) == ["a"] and ids({"user's team": "blue", "num": 2}) == []
    assert mem.list_threads(resource_id="u", metadata={"num": 1}).total == 2


# -- semantic recall order (seed 000 §5.2; spec §2.4 "How {result} is built") ------------------------------
class _Scores:
    """Queries map to e0; a stored text maps to a vector whose cosine with e0 is the given score."""

    model_id = "audit-scores@d4"
    dim = 4

    def __init__(self, scores: dict[str, float]) -> None:
        self.scores = scores

    def embed(self, texts, kind="passage"):
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            s = 1.0 if kind == "query" else self.scores.get(text.split("\n")[-1], 0.0)
            out[i, 0], out[i, 1] = s, np.sqrt(max(0.0, 1 - s * s))
        return out


def test_recalled_messages_of_the_same_instant_are_ordered_by_thread_then_role_then_id(store):
    """Vector order depends on scores; the recall block is ordered by createdAt, then threadId, then role (user
    before assistant), then id, so the prompt is the same on every run and machine."""
    emb = _Scores({"b-assistant": 0.99, "b-user": 0.97, "a-user": 0.95})
    index = RecallIndex.for_store(store, emb)
    rows = [Message.assistant("b-assistant", id="m1", thread_id="b", resource_id="u", created_at=T0),
            Message.user("b-user", id="m2", thread_id="b", resource_id="u", created_at=T0),
            Message.user("a-user", id="m3", thread_id="a", resource_id="u", created_at=T0)]
    for thread in ("a", "b", "now"):
        store.memory.create_thread(thread_id=thread, resource_id="u")
    store.memory.save_messages(rows)
    index.index_messages(rows)
    opts = MemoryOptions(semantic_recall={"top_k": 3, "message_range": 0, "mode": "vector"})
    ml = MessageList(thread_id="now", resource_id="u")
    ml.add(Message.user("q", created_at=T0 + timedelta(days=1)), "input", Provenance("input"))
    ctx = ProcessorContext(request=RequestContext(thread_id="now", resource_id="u", options=opts), messages=ml,
                           services=Memory(store).services())
    SemanticRecall(index).process_input(ctx)
    block = ctx.messages.system_entries()[0]
    assert block.provenance.stored_ids == ("m3", "m2", "m1")
    assert block.text.index("a-user") < block.text.index("b-user") < block.text.index("b-assistant")


def test_the_prompt_is_instructions_memory_recall_block_then_the_conversation_by_time(store):
    """Spec §2.2 [ran]: instructions, the working-memory system message, the other-thread recall block (both tagged
    memory), then recalled same-thread and history messages by createdAt, the new input last (docs: recalled history
    comes before recent history)."""
    mem = Memory(store, MemoryOptions(last_messages=2, working_memory={"enabled": True},
                                      semantic_recall={"top_k": 2, "message_range": 0, "mode": "vector"}),
                 embedder=HashingEmbedder())
    mem.save_messages([Message.user("I am allergic to peanuts", thread_id="old", resource_id="u", created_at=T0)])
    mem.save_messages([
        Message.user("peanuts are my allergy note in this thread", thread_id="t", resource_id="u",
                     created_at=T0 + timedelta(minutes=1)),
        Message.assistant("fine", thread_id="t", resource_id="u", created_at=T0 + timedelta(minutes=2)),
        Message.user("x1", thread_id="t", resource_id="u", created_at=T0 + timedelta(minutes=3)),
        Message.assistant("x2", thread_id="t", resource_id="u", created_at=T0 + timedelta(minutes=4))])
    prompt = mem.assemble(thread_id="t", resource_id="u", input="what about peanuts allergic?", instructions="I")
    order = [(f.role, f.source, f.tag) for f in prompt.fragments if f.role != "tools"]
    assert order == [
        ("system", "instructions", None), ("system", "working-memory", "memory"),
        ("system", "semantic-recall", "memory"), ("user", "semantic-recall", None),
        ("user", "message-history", None), ("assistant", "message-history", None), ("user", "input", None)]
    assert "I am allergic to peanuts" in prompt.fragments[2].text


def test_a_padded_null_inside_an_array_item_is_dropped_like_any_optional_null(store):
    """Mastra's stripNullsFromOptional maps over arrays with the items' schema: a strict-mode provider pads an item's
    optional fields with null too (Mastra #20992). Ours stopped at arrays, so a list of people with a padded nickname
    failed validation and the model's whole update was refused. A required field's null inside an item is kept (and
    refused by validation, as at the top)."""
    schema = {"type": "object", "properties": {
        "people": {"type": "array", "items": {"$ref": "#/$defs/Person"}},
        "pairs": {"type": "array", "items": [{"type": "string"}, {"type": "object", "properties": {
            "note": {"type": "string"}}}]}},
        "$defs": {"Person": {"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string"}, "nickname": {"type": "string"}}}}}
    mem = Memory(store, MemoryOptions(working_memory={"enabled": True, "schema": schema}))
    padded = {"people": [{"name": "Ada", "nickname": None}, {"name": "Bo", "nickname": "B"}],
              "pairs": ["x", {"note": None}]}
    result = mem.apply_working_memory_tool(thread_id=None, resource_id="u", args={"memory": padded})
    assert result.success, result.message
    assert mem.get_working_memory(resource_id="u") == {
        "people": [{"name": "Ada"}, {"name": "Bo", "nickname": "B"}], "pairs": ["x", {}]}
    refused = mem.apply_working_memory_tool(thread_id=None, resource_id="u",
                                            args={"memory": {"people": [{"name": None}]}})
    assert not refused.success and "people" in refused.message
    assert mem.get_working_memory(resource_id="u")["people"][0] == {"name": "Ada"}


def test_working_memory_given_to_update_thread_is_the_resources_from_then_on(store):
    """Seed 004 "以编程方式更新 Working Memory": updateThread with metadata.workingMemory, in the default resource
    scope, is what the agent sees next (Mastra writes it to the resource, as createThread does). Ours stored it in
    the thread's metadata only, so the agent kept seeing the old value. Spreading the thread's old metadata back (its
    workingMemory unchanged) leaves the memory the model has written since alone; a value the schema refuses leaves
    the thread as it was."""
    mem = Memory(store, MemoryOptions(working_memory={"enabled": True}))
    thread = mem.create_thread(resource_id="u", thread_id="t", title="Medical Consultation",
                               metadata={"workingMemory": "# Patient\n- Allergies: Penicillin"})
    mem.update_thread("t", title=thread.title,
                      metadata={**thread.metadata, "workingMemory": "# Patient\n- Allergies: Penicillin, Ibuprofen"})
    assert mem.get_working_memory(thread_id="t", resource_id="u") == "# Patient\n- Allergies: Penicillin, Ibuprofen"
    text = mem.assemble(thread_id="t", resource_id="u", input="hi").fragments_from("working-memory")[0].text
    assert "- Allergies: Penicillin, Ibuprofen" in text
    mem.update_working_memory(thread_id="t", resource_id="u", working_memory="# Patient\n- Blood type: O+")
    mem.update_thread("t", metadata={**mem.get_thread("t").metadata, "tag": "x"})  # the same workingMemory back
    assert mem.get_working_memory(thread_id="t", resource_id="u") == "# Patient\n- Blood type: O+"

    schema_mem = Memory(store, MemoryOptions(working_memory={"enabled": True, "schema": SCHEMA}))
    schema_mem.create_thread(resource_id="v", thread_id="s", title="Before")
    with pytest.raises(ValueError, match="schema"):
        schema_mem.update_thread("s", title="After", metadata={"workingMemory": {"name": 5}})
    assert schema_mem.get_thread("s").title == "Before" and schema_mem.get_working_memory(resource_id="v") is None
