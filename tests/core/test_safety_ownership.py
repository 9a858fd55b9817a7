"""Ownership is checked per message, ids round-trip exactly, and working memory reads are owned too
(issue 9, items 1-3)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core import InvalidArgumentError, Memory, MemoryOptions, Message, MessageFormatError, ThreadOwnershipError
from core.embedding import HashingEmbedder
from core.ids import id_problem

TEMPLATE = "# User\n- Name:\n"


# -- 1. a batch that mixes resources ---------------------------------------------------------------

def test_mixed_resource_batch_is_refused_whole(store):
    mem = Memory(store)
    batch = [
        Message.user("r1 writes here", id="m1", thread_id="t1", resource_id="r1"),
        Message.user("r2 sneaks in", id="m2", thread_id="t1", resource_id="r2"),
        Message.user("an innocent row", id="m3", thread_id="t9", resource_id="r2"),
    ]
    with pytest.raises(ThreadOwnershipError) as info:
        mem.save_messages(batch)
    assert "r2" in str(info.value) and "t1" in str(info.value)
    # Nothing of the batch was written: no message, and not even the thread it would have created.
    assert store.memory.get_messages(["m1", "m2", "m3"]) == []
    assert mem.get_thread("t1") is None and mem.get_thread("t9") is None


def test_mixed_batch_against_an_existing_thread_writes_nothing(store):
    mem = Memory(store)
    mem.save_messages([Message.user("mine", id="a", thread_id="t1", resource_id="r1")])
    with pytest.raises(ThreadOwnershipError):
        mem.save_messages([
            Message.user("still mine", id="b", thread_id="t1", resource_id="r1"),
            Message.user("not mine", id="c", thread_id="t1", resource_id="r2"),
        ])
    assert [m.id for m in mem.recall(thread_id="t1").messages] == ["a"]


def test_resource_scope_recall_of_r2_never_sees_r1(store):
    mem = Memory(store, MemoryOptions(semantic_recall={"enabled": True, "scope": "resource", "top_k": 10}),
                 embedder=HashingEmbedder())
    mem.save_messages([Message.user("my secret diagnosis is gout", id="s1", thread_id="t1", resource_id="r1")])
    with pytest.raises(ThreadOwnershipError):
        mem.save_messages([
            Message.user("r1 private note", id="x1", thread_id="t1", resource_id="r1"),
            Message.user("what is my diagnosis gout", id="x2", thread_id="t1", resource_id="r2"),
        ])
    mem.save_messages([Message.user("hello", id="y1", thread_id="t2", resource_id="r2")])
    prompt = mem.assemble(thread_id="t2", resource_id="r2", input="tell me about my diagnosis gout")
    sent = " ".join(str(m["content"]) for m in prompt.messages)
    assert "secret diagnosis" not in sent and "r1 private note" not in sent
    assert all(h.message_id != "s1" for h in mem.search("diagnosis gout", resource_id="r2"))


# -- 2. ids that cannot round-trip ------------------------------------------------------------------

HOSTILE = ["r1\x00evil", "\x00", "a\ud800b", "\udfff"]


def _changed(msg: Message, **fields: str) -> Message:
    """A message whose fields were set after construction (a dataclass a caller may mutate)."""
    for name, value in fields.items():
        setattr(msg, name, value)
    return msg


@pytest.mark.parametrize("bad", HOSTILE)
def test_unstorable_ids_are_refused_everywhere(store, bad):
    mem = Memory(store, MemoryOptions(working_memory={"enabled": True, "template": TEMPLATE}))
    mem.create_thread(resource_id="r1", thread_id="t1")
    calls = {
        "create_thread resource": lambda: mem.create_thread(resource_id=bad, thread_id="t2"),
        "create_thread thread": lambda: mem.create_thread(resource_id="r1", thread_id=bad),
        "get_thread": lambda: mem.get_thread(bad),
        "save thread": lambda: mem.save_messages([_changed(Message.user("x", resource_id="r1"), thread_id=bad)]),
        "save resource": lambda: mem.save_messages([_changed(Message.user("x", thread_id="t3"), resource_id=bad)]),
        "recall": lambda: mem.recall(thread_id=bad),
        "recall resource": lambda: mem.recall(thread_id="t1", resource_id=bad),
        "get wm": lambda: mem.get_working_memory(resource_id=bad),
        "update wm": lambda: mem.update_working_memory(resource_id=bad, working_memory="# User\n- Name: Eve\n"),
        "assemble resource": lambda: mem.assemble(thread_id="t1", resource_id=bad, input="hi"),
        "assemble thread": lambda: mem.assemble(thread_id=bad, resource_id="r1", input="hi"),
    }
    for name, call in calls.items():
        with pytest.raises(InvalidArgumentError) as info:
            call()
        assert "id" in str(info.value), name
    for field in ("id", "thread_id", "resource_id"):  # a Message is refused when it is built
        with pytest.raises(MessageFormatError):
            Message.user("x", **{field: bad})
    # Nothing leaked into r1's records.
    assert mem.get_working_memory(resource_id="r1") is None
    assert [t.id for t in mem.list_threads(resource_id="r1")] == ["t1"]


def test_search_refuses_unstorable_ids(store):
    mem = Memory(store, MemoryOptions(semantic_recall={"enabled": True}), embedder=HashingEmbedder())
    mem.save_messages([Message.user("the launch code is 1234", thread_id="t1", resource_id="r1")])
    with pytest.raises(InvalidArgumentError):
        mem.search("launch code", resource_id="r1\x00evil")
    with pytest.raises(InvalidArgumentError):
        mem.search("launch code", resource_id=None, thread_id="t1\x00")


def test_a_message_id_with_nul_never_overwrites_another(store):
    mem = Memory(store)
    mem.save_messages([Message.user("original", id="m1", thread_id="t1", resource_id="r1")])
    hostile = _changed(Message.user("replacement", thread_id="t1", resource_id="r1"), id="m1\x00x")
    with pytest.raises(InvalidArgumentError):
        mem.save_messages([hostile])
    assert [m.text for m in mem.recall(thread_id="t1").messages] == ["original"]


# Every code point, surrogates and control characters included (st.text leaves surrogates out).
ANY_TEXT = st.text(st.characters(exclude_categories=()), min_size=1, max_size=12)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=ANY_TEXT)
def test_every_accepted_id_round_trips(store, raw):
    mem = Memory(store)
    thread_id, resource_id = f"t:{raw}", f"r:{raw}"
    if id_problem(raw) is not None:
        with pytest.raises(InvalidArgumentError):
            mem.create_thread(resource_id=resource_id, thread_id=thread_id)
        return
    if mem.get_thread(thread_id) is None:
        mem.create_thread(resource_id=resource_id, thread_id=thread_id)
    mem.save_messages([Message.user("hi", id=f"m:{raw}", thread_id=thread_id, resource_id=resource_id)])
    thread = mem.get_thread(thread_id)
    assert thread is not None and thread.id == thread_id and thread.resource_id == resource_id
    stored = store.memory.get_messages([f"m:{raw}"])
    assert [(m.id, m.thread_id, m.resource_id) for m in stored] == [(f"m:{raw}", thread_id, resource_id)]
    assert [t.id for t in mem.list_threads(resource_id=resource_id)] == [thread_id]


def test_id_rule_names_the_problem():
    assert id_problem("plain-id_1") is None
    assert "NUL" in (id_problem("a\x00b") or "")
    assert "surrogate" in (id_problem("a\ud800") or "")


# -- 3. thread-scoped working memory read by another resource ---------------------------------------

def test_thread_scope_working_memory_read_by_another_resource_is_refused(store):
    mem = Memory(store, MemoryOptions(working_memory={"enabled": True, "scope": "thread", "template": TEMPLATE}))
    mem.create_thread(resource_id="r1", thread_id="t1")
    mem.update_working_memory(thread_id="t1", resource_id="r1", working_memory="# User\n- Name: Ada\n")
    with pytest.raises(ThreadOwnershipError):
        mem.get_working_memory(thread_id="t1", resource_id="r2")
    assert mem.get_working_memory(thread_id="t1", resource_id="r1") == "# User\n- Name: Ada\n"
    assert mem.get_working_memory(thread_id="t1") == "# User\n- Name: Ada\n"


def test_resource_scope_working_memory_with_a_foreign_thread_is_refused(store):
    mem = Memory(store, MemoryOptions(working_memory={"enabled": True, "template": TEMPLATE}))
    mem.create_thread(resource_id="r1", thread_id="t1")
    mem.update_working_memory(resource_id="r2", working_memory="# User\n- Name: Bo\n")
    with pytest.raises(ThreadOwnershipError):
        mem.get_working_memory(thread_id="t1", resource_id="r2")
