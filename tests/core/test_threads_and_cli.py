"""Threads (spec §4 items 48–53), the command line, and the public API list."""

from __future__ import annotations

import io
import json
from datetime import datetime, timedelta, timezone

import pytest

import core
from core import AlreadyExistsError, ConfigurationError, InvalidArgumentError, Memory, MemoryOptions, Message, NotFoundError
from core.cli import main as cli_main

# Engine behaviour: every test here runs on libSQL and on Postgres.
pytestmark = pytest.mark.backends

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)


def test_create_thread_defaults_and_listing_order(store):
    m = Memory(store)
    a = m.create_thread(resource_id="u1", thread_id="a")
    b = m.create_thread(resource_id="u1", thread_id="b", title="Second", metadata={"custom": True})
    m.create_thread(resource_id="u2", thread_id="c")
    assert a.title == "" and a.metadata is None and b.metadata == {"custom": True}
    page = m.list_threads(resource_id="u1")
    assert [t.id for t in page] == ["b", "a"] and page.per_page == 100 and page.total == 2 and not page.has_more
    with pytest.raises(AlreadyExistsError):
        m.create_thread(resource_id="u1", thread_id="a")


def test_creating_a_thread_that_exists_says_how_to_go_on(store):
    # A script run twice on the file it wrote (the README's sample before it checked) met a bare
    # "already exists"; the refusal now says to read the thread instead, or to pick another id.
    m = Memory(store)
    m.create_thread(resource_id="ada", thread_id="groceries", title="Groceries")
    with pytest.raises(AlreadyExistsError) as refused:
        m.create_thread(resource_id="ada", thread_id="groceries", title="Groceries")
    assert str(refused.value).startswith("Thread with id groceries already exists")
    assert "memory.get_thread('groceries')" in str(refused.value) and "another thread_id" in str(refused.value)
    assert [t.title for t in m.list_threads(resource_id="ada")] == ["Groceries"]


def test_list_threads_metadata_filter(store):
    m = Memory(store)
    m.create_thread(resource_id="u", thread_id="x", metadata={"custom": True, "team": "a"})
    m.create_thread(resource_id="u", thread_id="y", metadata={"custom": True, "team": "b"})
    m.create_thread(resource_id="u", thread_id="z")
    assert [t.id for t in m.list_threads(metadata={"custom": True})] == ["y", "x"]
    assert [t.id for t in m.list_threads(metadata={"custom": True, "team": "a"})] == ["x"]
    with pytest.raises(InvalidArgumentError):
        m.list_threads(metadata={"team": {"nested": 1}})


def test_paging(store):
    m = Memory(store)
    for i in range(5):
        m.create_thread(resource_id="u", thread_id=f"t{i}")
    p0 = m.list_threads(resource_id="u", page=0, per_page=2)
    p2 = m.list_threads(resource_id="u", page=2, per_page=2)
    assert len(p0) == 2 and p0.has_more and len(p2) == 1 and not p2.has_more


def test_update_thread_merges_metadata_and_keeps_title(store):
    m = Memory(store)
    m.create_thread(resource_id="u", thread_id="t", title="Keep", metadata={"a": 1})
    updated = m.update_thread("t", metadata={"b": 2})
    assert updated.metadata == {"a": 1, "b": 2} and updated.title == "Keep"
    assert m.update_thread("t", title="Food").title == "Food"
    with pytest.raises(NotFoundError, match="Thread nope not found"):
        m.update_thread("nope", title="x")


def test_clone_thread(store):
    m = Memory(store)
    m.create_thread(resource_id="u", thread_id="src", title="Trip", metadata={"k": 1})
    msgs = [Message.user(f"m{i}", thread_id="src", resource_id="u", created_at=T0 + timedelta(minutes=i))
            for i in range(4)]
    m.save_messages(msgs)
    thread, copies = m.clone_thread("src")
    assert thread.id != "src" and thread.resource_id == "u" and thread.title == "Clone of Trip"
    # Mastra 1.71's shape: the source's own metadata is not carried; the clone names its newest copied message.
    assert thread.metadata == {"clone": {"sourceThreadId": "src", "clonedAt": thread.metadata["clone"]["clonedAt"],
                                         "lastMessageId": msgs[-1].id}}
    assert [c.text for c in copies] == ["m0", "m1", "m2", "m3"] and not {c.id for c in copies} & {x.id for x in msgs}
    _, last2 = m.clone_thread("src", message_limit=2)
    assert [c.text for c in last2] == ["m2", "m3"]
    _, dated = m.clone_thread("src", since=T0 + timedelta(minutes=1), until=T0 + timedelta(minutes=2))
    assert [c.text for c in dated] == ["m1", "m2"]
    _, picked = m.clone_thread("src", message_ids=[msgs[0].id])
    assert [c.text for c in picked] == ["m0"]
    with pytest.raises(NotFoundError, match="Source thread with id nope not found"):
        m.clone_thread("nope")
    with pytest.raises(AlreadyExistsError, match="Thread with id src already exists"):
        m.clone_thread("src", new_thread_id="src")
    assert store.memory.count_messages("src") == 4


def test_delete_thread_removes_messages_and_vectors(store):
    from core.embedding import HashingEmbedder

    m = Memory(store, MemoryOptions(semantic_recall=True), embedder=HashingEmbedder())
    m.save_messages([Message.user("peanut allergy", thread_id="t", resource_id="u"),
                     Message.user("other", thread_id="keep", resource_id="u")])
    assert any(h.thread_id == "t" for h in m.search("peanut", resource_id="u", mode="vector"))
    m.delete_thread("t")
    assert m.get_thread("t") is None and store.memory.count_messages("t") == 0
    assert store.memory.count_messages("keep") == 1
    assert not any(h.thread_id == "t" for h in m.search("peanut allergy", resource_id="u", mode="hybrid"))


def test_caller_given_ids_are_kept(store):
    m = Memory(store)
    m.save_messages([Message.user("hello", id="D1:3", thread_id="t", resource_id="u")])
    assert m.recall(thread_id="t").messages[0].id == "D1:3"


# -- command line --------------------------------------------------------------------------------
def run_cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli_main(list(args), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def demo_db(db_path):
    with core.open_store(db_path) as s:
        m = Memory(s, MemoryOptions(working_memory={"enabled": True}), name="demo")
        m.register("demo")
        m.create_thread(resource_id="u1", thread_id="t1", title="Food")
        m.save_messages([Message.user("I am allergic to peanuts", thread_id="t1", resource_id="u1"),
                         Message.assistant("Noted.", thread_id="t1", resource_id="u1",
                                           metadata={"agent": "demo"})])
    return db_path


def test_cli_prompt_readable_and_json(demo_db):
    code, out, err = run_cli("prompt", "--db", str(demo_db), "--resource", "u1", "--thread", "t1", "What can I eat?")
    assert code == 0, err
    assert "What can I eat?" in out and "message-history" in out and "working-memory" in out
    code, out, _ = run_cli("prompt", "--db", str(demo_db), "--resource", "u1", "--thread", "t1", "--json", "Hi")
    data = json.loads(out)
    assert data["messages"][-1] == {"role": "user", "content": "Hi"} and data["tokenizer"]


def test_cli_threads(demo_db):
    code, out, _ = run_cli("threads", "--db", str(demo_db))
    assert code == 0 and "t1" in out and "Food" in out
    code, out, _ = run_cli("threads", "--db", str(demo_db), "--resource", "u1", "--json")
    assert json.loads(out)[0]["messageCount"] == 2


@pytest.mark.parametrize(
    "args, needle",
    [
        (["prompt", "--resource", "u1", "--thread", "missing", "x"], "not found"),
        (["prompt", "--resource", "u9", "--thread", "t1", "x"], "belongs to resource"),
        (["prompt", "--resource", "u1", "x"], "required"),
        (["prompt", "--resource", "u1", "--thread", "t1", "--last-messages", "-3", "x"], "last-messages"),
        (["nonsense"], "invalid choice"),
    ],
)
def test_cli_errors_are_one_line_and_nonzero(demo_db, args, needle):
    if args[0] == "prompt":
        args = [args[0], "--db", str(demo_db), *args[1:]]
    code, out, err = run_cli(*args)
    assert code != 0 and needle in err and len(err.strip().splitlines()) == 1


@pytest.mark.libsql_only
def test_cli_missing_database(tmp_path):
    code, _, err = run_cli("threads", "--db", str(tmp_path / "nope.db"))
    assert code == 1 and "does not exist" in err
    assert not (tmp_path / "nope.db").exists()


def test_public_api_is_honest():
    for name in core.__all__:
        assert hasattr(core, name), name
    public = {n for n in dir(core) if not n.startswith("_") and not isinstance(getattr(core, n), type(core))}
    missing = {n for n in public if n not in core.__all__} - {"annotations"}
    assert not missing, f"exported but not in __all__: {missing}"


def test_cli_reindex_embeds_what_recall_missed(db_path):
    with core.open_store(db_path) as s:
        Memory(s).save_messages([Message.user("I am allergic to peanuts", thread_id="t", resource_id="u"),
                                 Message.user("Remind me to call mom", thread_id="t2", resource_id="u")])
    code, out, err = run_cli("reindex", "--db", str(db_path))
    assert code == 0, err
    assert "2/2" in err  # the progress bar reached the end
    assert "\r" not in err and err.count("/2") == 1  # not a terminal: the finished bar only, once
    assert out.startswith("Embedded 2 of 2 message(s) with ")  # sentences, not the report's repr
    from core.embedding import default_embedder

    with core.open_store(db_path) as s:
        m = Memory(s, MemoryOptions(semantic_recall=True), embedder=default_embedder())
        hits = m.search("peanut allergy", resource_id="u", mode="vector", top_k=1)
        assert hits and hits[0].thread_id == "t"
    code, out, err = run_cli("reindex", "--db", str(db_path))  # nothing left to do, nothing twice
    assert code == 0, err
    assert out == f"Nothing new: 0 indexed, all 2 message(s) already have a current vector from {default_embedder().model_id}.\n"


def _queued(store) -> int:
    from core.recall.tables import QUEUE_TABLE

    with store.db.read() as conn:
        return int(conn.exec_driver_sql(f"SELECT count(*) FROM {QUEUE_TABLE}").scalar() or 0)


def test_the_demo_leaves_nothing_for_the_recall_index_to_do(db_path):
    # `memory-studio demo` left 14 messages (the notes agents', recall off) to the recall index's next writer: on
    # Postgres 14 rows in its queue, on libSQL rows past the watermark; every search of the new demo database then
    # said "some recent message changes are not keyword-indexed yet", and Sam's messages were not keyword-found.
    code, out, err = run_cli("demo", "--db", str(db_path))
    assert code == 0, err
    code, out, err = run_cli("prompt", "--db", str(db_path), "--resource", "ada", "--thread", "ada-groceries",
                             "--read-only", "--json", "peanuts")
    assert code == 0, err
    assert "not keyword-indexed" not in out and "semantic-recall" in out
    from core.recall.models import store_embedder
    from core.recall import RecallIndex

    with core.open_store(db_path, read_only=True) as s:
        index = RecallIndex.for_store(s, store_embedder(s))
        assert index.backlog() == (None, set(), set())
        assert _queued(s) == 0
        found = index.search("staging mail server", resource_id="sam", top_k=3, mode="keyword")
        assert found.reason is None and found.hits and all(h.thread_id == "sam-standup" for h in found.hits)


def test_turns_with_recall_and_saves_without_leave_no_queued_change(db_path):
    # On Postgres a trigger queues every message a save writes; a save with recall keys its own in the same
    # transaction and takes its queue rows out, so a fleet's turns leave nothing for searches to read around. A
    # save without recall keys its messages' keyword docs too (no model needed; s37-backlog9): before, it left
    # them to the next recall write, and every search meanwhile said they were not keyword-indexed yet.
    from core.agent import Agent
    from core.embedding import default_embedder
    from core.llm import ScriptedModel

    with core.open_store(db_path) as s:
        recalled = Memory(s, MemoryOptions(semantic_recall=True), embedder=default_embedder())
        agent = Agent("chef", instructions="Cook.", model=ScriptedModel(["Noted.", "Tea.", "No."]), memory=recalled)
        agent.generate("I am allergic to peanuts", memory={"resource": "ada", "thread": "t1"})
        agent.generate("I like tea", memory={"resource": "ada", "thread": "t1"})
        assert _queued(s) == 0 and recalled.recall_index.backlog() == (None, set(), set())
        Memory(s).save_messages([Message.user("Remind me about the dentist", thread_id="t2", resource_id="ada")])
        assert _queued(s) == 0 and recalled.recall_index.backlog() == (None, set(), set())
        hits = recalled.search("dentist", resource_id="ada", mode="keyword", top_k=1)
        assert hits and hits[0].thread_id == "t2"
        agent.generate("Anything else?", memory={"resource": "ada", "thread": "t1"})
        assert _queued(s) == 0 and recalled.recall_index.backlog() == (None, set(), set())
        hits = recalled.search("dentist", resource_id="ada", mode="keyword", top_k=1)
        assert hits and hits[0].thread_id == "t2"


def test_cli_models_status():
    from core.embedding.provision import USE_M3_Q

    code, out, err = run_cli("models", "status")
    assert code == 0, out + err
    assert out.startswith(f"{USE_M3_Q.model_id}: installed")  # the status line reached our stream


@pytest.mark.libsql_only  # the DuckDB trace file beside a database file
def test_cli_traces_prune(db_path):
    from core.agent import Agent
    from core.llm import ScriptedModel

    with core.open_store(db_path):
        pass
    code, out, _ = run_cli("traces", "--db", str(db_path), "prune", "--keep-days", "1")
    assert code == 0 and "nothing to prune" in out
    with core.open_store(db_path) as s:
        Agent("a", instructions="I", model=ScriptedModel(["x", "y"]), memory=Memory(s)).generate(
            "hi", memory={"resource": "u", "thread": "t"})
        assert s.tracer().flush(10.0)
    code, out, err = run_cli("traces", "--db", str(db_path), "prune", "--keep-days", "30")
    assert code == 0, err
    assert "deleted 0 traces" in out
    code, out, err = run_cli("traces", "--db", str(db_path), "prune", "--keep-mb", "0.01")
    assert code == 0 and "deleted 1 traces" in out


def test_semantic_recall_uses_the_local_model_by_default(store):
    m = Memory(store, MemoryOptions(semantic_recall=True))
    assert m.embedder is not None and m.embedder.model_id.startswith("use-multilingual-v3")
    m.save_messages([Message.user("I am allergic to peanuts", thread_id="t", resource_id="u")])
    assert m.search("what allergy?", resource_id="u")[0].thread_id == "t"


def test_missing_model_fails_at_construction_with_the_install_command(store, monkeypatch, tmp_path):
    import core.embedding as embedding

    monkeypatch.setenv("MEMORY_STUDIO_MODELS", str(tmp_path / "no-models-here"))
    monkeypatch.setattr(embedding, "_shared", None)
    with pytest.raises(Exception, match="memory-studio models install"):
        Memory(store, MemoryOptions(semantic_recall=True))


@pytest.mark.libsql_only  # the DuckDB trace file beside a database file
def test_cli_traces_prune_refuses_negative_and_zero_means_no_limit(db_path):
    """``--keep-days -5`` and ``--keep-days 0`` used to delete every trace (issue 9, item 17)."""
    from core.agent import Agent
    from core.llm import ScriptedModel

    with core.open_store(db_path) as s:
        Agent("a", instructions="I", model=ScriptedModel(["x"]), memory=Memory(s)).generate(
            "hi", memory={"resource": "u", "thread": "t"})
        assert s.tracer().flush(10.0)
        obs = s.observability
    assert obs.count_traces() == 1
    for bad in ("-5", "-0.5", "nan", "inf"):
        code, out, err = run_cli("traces", "--db", str(db_path), "prune", "--keep-days", bad)
        assert code == 2 and "--keep-days" in err and "0 means no limit" in err, (bad, err)
    code, _, err = run_cli("traces", "--db", str(db_path), "prune", "--keep-mb", "-1")
    assert code == 2 and "--keep-mb" in err
    code, out, err = run_cli("traces", "--db", str(db_path), "prune", "--keep-days", "0")
    assert code == 0 and "no limit" in out, err
    assert obs.count_traces() == 1
    code, out, err = run_cli("traces", "--db", str(db_path), "prune", "--keep-days", "0", "--keep-mb", "100")
    assert code == 0 and "deleted 0 traces" in out, err
    assert obs.count_traces() == 1


@pytest.mark.parametrize("observer", ["endpoint", "scripted"])
def test_cli_prompt_of_an_agent_whose_observer_is_a_model_object(db_path, observer):
    """A model object has no provider of ours to rebuild it from its registered name ("openai-compatible/<model>"
    for an endpoint such as a local llama.cpp server, "scripted/<name>"): a preview calls no model, so the
    name is a label there, not an error that stops every reader of the registration."""
    from core.llm import OpenAICompatibleModel, ScriptedModel

    model = (OpenAICompatibleModel("smollm2-135m", base_url="http://127.0.0.1:9/v1", api_key="x")
             if observer == "endpoint" else ScriptedModel([], name="observer"))
    with core.open_store(db_path) as s:
        m = Memory(s, MemoryOptions(observational_memory={"enabled": True, "observer_model": model}), name="om")
        m.register("om")
        m.create_thread(resource_id="u1", thread_id="t1")
        m.save_messages([Message.user("I am allergic to peanuts", thread_id="t1", resource_id="u1"),
                         Message.assistant("Noted.", thread_id="t1", resource_id="u1", metadata={"agent": "om"})])
    code, out, err = run_cli("prompt", "--db", str(db_path), "--resource", "u1", "--thread", "t1", "--agent", "om",
                             "What can I eat?")
    assert code == 0, err
    assert "What can I eat?" in out


def test_a_typo_in_a_provider_is_still_refused_at_once():
    with pytest.raises(ConfigurationError, match="openai"):
        Memory(core.open_store(":memory:"), MemoryOptions(
            observational_memory={"enabled": True, "observer_model": "opneai/gpt-4o-mini"}))
