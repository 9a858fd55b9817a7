"""Two turns of one conversation at once (a client's retry while the first still runs, two gateway
workers on one thread), and a message sent again by id: each turn's prompt ends with its own input,
the stored conversation keeps every message where it was asked, and the turn record is what the
model received."""

from __future__ import annotations

import threading
from typing import Any, Callable

import pytest

from core import Agent, Memory, MemoryOptions
from core.assembly import LATER_TURNS_ID
from core.llm import ScriptedModel
from core.messages import Message
from core.processors.message_history import MessageHistory
from core.processors.observational import ObservationalMemory

pytestmark = pytest.mark.backends

R, T = "user-1", "thread-1"


def echo(messages: list[dict[str, Any]], tools: Any) -> str:
    return f"reply to {messages[-1]['content']}"


class _ReadHook:
    """A built-in processor with a hook run before it reads (a slow read, a busy database...)."""

    def __init__(self) -> None:
        super().__init__()
        self.before_read: Callable[[Any], None] = lambda ctx: None

    def process_input(self, ctx: Any) -> None:
        self.before_read(ctx)
        super().process_input(ctx)  # type: ignore[misc]


class HistoryWithAHook(_ReadHook, MessageHistory):
    """The built-in history, with the hook."""


class ObservationsWithAHook(_ReadHook, ObservationalMemory):
    """The built-in observational memory (its unobserved messages are the history), with the hook."""


def transcript(mem: Memory) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in mem.recall(thread_id=T, resource_id=R, last_messages=50)]


def one_turn_inside_another(mem: Memory, earlier: tuple[str, ...], a_text: str, b_text: str, b_thread: str, *,
                            reply: str = "reply to ") -> tuple[ScriptedModel, ScriptedModel]:
    """Turns ``earlier`` on thread T, then turn A (``a_text``), during whose model call turn B (``b_text``, on
    ``b_thread``) runs to its end on another worker: another client's request. A's model replies ``reply`` +
    its input, B's echoes. Returns (A's model, B's model)."""

    def answer(messages: list[dict[str, Any]], tools: Any) -> str:
        asked = messages[-1]["content"]
        if asked == a_text:
            other = threading.Thread(target=worker.generate, args=(b_text,),
                                     kwargs={"memory": {"resource": R, "thread": b_thread}})
            other.start()
            other.join()
        return f"{reply}{asked}"

    model, worker_model = ScriptedModel(answer), ScriptedModel(echo)
    agent = Agent("a", instructions="be brief", model=model, memory=mem, tracer=False)
    worker = Agent("a", instructions="be brief", model=worker_model, memory=mem, tracer=False)
    for text in (*earlier, a_text):
        agent.generate(text, memory={"resource": R, "thread": T})
    return model, worker_model


@pytest.mark.parametrize("kind", ["history", "observational"])
def test_a_turn_that_saves_while_another_builds_its_prompt_is_not_in_that_prompt(store: Any, kind: str) -> None:
    # Regression: turn A's history was read after turn B (started later, finished sooner) had saved,
    # so A's prompt ended with B's question and B's reply, after A's own input, and the model
    # answered B's reply ("reply to reply to B").
    history: HistoryWithAHook | ObservationsWithAHook
    if kind == "history":
        history = HistoryWithAHook()
        options = MemoryOptions(last_messages=10)
    else:  # observational memory loads the thread's unobserved messages instead of history
        history = ObservationsWithAHook()
        options = MemoryOptions(observational_memory={"enabled": True, "message_tokens": 30_000})
    mem = Memory(store, options, processors=[history])
    model = ScriptedModel(echo)
    agent = Agent("a", instructions="be brief", model=model, memory=mem, tracer=False)
    agent.generate("first", memory={"resource": R, "thread": T})

    def run_b_meanwhile(ctx: Any) -> None:
        if ctx.messages.messages("input")[0].text != "A":
            return
        history.before_read = lambda ctx: None
        other = threading.Thread(target=agent.generate, args=("B",), kwargs={"memory": {"resource": R, "thread": T}})
        other.start()
        other.join()

    history.before_read = run_b_meanwhile
    result = agent.generate("A", memory={"resource": R, "thread": T})

    sent = [(m["role"], m["content"]) for m in model.requests[-1].messages]
    assert sent == [("system", "be brief"), ("user", "first"), ("assistant", "reply to first"), ("user", "A")]
    assert result.text == "reply to A"
    prompt = result.prompts[0]
    assert [(m["role"], m["content"]) for m in prompt.messages] == sent
    if kind == "history":  # its read stops at the turn's input
        assert LATER_TURNS_ID not in prompt.notes
    else:  # what was read past the input is left out, and the record says so
        b_ids = [m.id for m in mem.recall(thread_id=T, resource_id=R, last_messages=50)
                 if m.text in ("B", "reply to B")]
        assert prompt.notes[LATER_TURNS_ID]["leftOut"] == b_ids
    # Each reply follows its own question in the stored conversation. How the two turns interleave
    # depends on the clock: a new turn sorts 1 ms after the newest stored message, so B's stamps can run
    # ahead of A's reply (stamped by the clock) or even tie with A's input (then the ids decide).
    stored = transcript(mem)
    assert stored[:2] == [("user", "first"), ("assistant", "reply to first")]
    assert sorted(stored[2:]) == [("assistant", "reply to A"), ("assistant", "reply to B"), ("user", "A"), ("user", "B")]
    assert stored.index(("assistant", "reply to A")) > stored.index(("user", "A"))
    assert stored.index(("assistant", "reply to B")) > stored.index(("user", "B"))
    # The record rebuilds exactly what was sent, and so does a rebuild without it (history before the input).
    rebuilt = mem.assemble(as_of=result.messages[0].id, resource_id=R)
    assert rebuilt.replay is not None and rebuilt.replay.kind == "recorded" and rebuilt.replay.matches
    assert [(m["role"], m["content"]) for m in rebuilt.messages] == sent
    now = mem.assemble(as_of=result.messages[0].id, resource_id=R, rebuild="now")
    assert [(m["role"], m["content"]) for m in now.messages] == sent


def test_a_message_sent_again_by_id_keeps_its_place_and_is_answered_again(store: Any) -> None:
    # Regression: a client that retried with the same message (same id) after the first turn had
    # answered got the message restamped as new: its save moved it after its own first answer
    # ("reply to C", then "C"), and the prompt held that first answer before the message. Now the
    # message keeps its stored place, and what followed it is left out of the retry's prompt: the
    # prompt ends with the message, as a regenerate of it.
    mem = Memory(store, MemoryOptions(last_messages=10))
    model = ScriptedModel(echo)
    agent = Agent("a", instructions="be brief", model=model, memory=mem, tracer=False)
    agent.generate("first", memory={"resource": R, "thread": T})
    message = Message.user("C")
    agent.generate(message, memory={"resource": R, "thread": T})
    retry = agent.generate(message, memory={"resource": R, "thread": T})

    sent = [(m["role"], m["content"]) for m in model.requests[-1].messages]
    assert sent == [("system", "be brief"), ("user", "first"), ("assistant", "reply to first"), ("user", "C")]
    first_answer = [m.id for m in mem.recall(thread_id=T, resource_id=R, last_messages=50)
                    if m.text == "reply to C"][0]
    note = retry.prompts[0].notes[LATER_TURNS_ID]
    assert note["leftOut"] == [first_answer] and "sent again unchanged" in note["reason"]
    assert transcript(mem) == [("user", "first"), ("assistant", "reply to first"), ("user", "C"),
                               ("assistant", "reply to C"), ("assistant", "reply to C")]
    rebuilt = mem.assemble(as_of=message.id, resource_id=R)
    assert rebuilt.replay is not None and rebuilt.replay.matches
    assert [(m["role"], m["content"]) for m in rebuilt.messages] == sent


def test_a_message_sent_again_with_new_content_keeps_mastras_order(store: Any) -> None:
    # Mastra (spec, message history item 3): the stored copy's place, the new content, later messages after it.
    mem = Memory(store, MemoryOptions(last_messages=10))
    agent = Agent("a", instructions="be brief", model=ScriptedModel(echo), memory=mem, tracer=False)
    message = Message.user("C")
    agent.generate(message, memory={"resource": R, "thread": T})
    edited = message.copy(content={**message.content, "parts": [{"type": "text", "text": "C, edited"}],
                                   "content": "C, edited"})
    prompt = mem.assemble(thread_id=T, resource_id=R, input=[edited], instructions="be brief")
    assert [(m["role"], m["content"]) for m in prompt.messages] == [
        ("system", "be brief"), ("user", "C, edited"), ("assistant", "reply to C")]
    assert LATER_TURNS_ID not in prompt.notes


def test_an_echo_of_stored_messages_before_a_new_question_is_not_a_retry(store: Any) -> None:
    # With retain_full_input, a client echoes the conversation (stored messages, by id) before its new
    # question: the echo keeps its stored places and a stored message the client never saw (another
    # device's) stays in the prompt, as Mastra orders them; only a re-sent LAST message is a retry.
    mem = Memory(store, MemoryOptions(last_messages=10))
    model = ScriptedModel(echo)
    agent = Agent("a", instructions="be brief", model=model, memory=mem, tracer=False)
    first = Message.user("first")
    agent.generate(first, memory={"resource": R, "thread": T})
    agent.generate("from another device", memory={"resource": R, "thread": T})
    result = agent.generate([first, Message.user("new question")], memory={"resource": R, "thread": T},
                            options={"retain_full_input": True})
    assert [(m["role"], m["content"]) for m in model.requests[-1].messages] == [
        ("system", "be brief"), ("user", "first"), ("assistant", "reply to first"), ("user", "from another device"),
        ("assistant", "reply to from another device"), ("user", "new question")]
    assert LATER_TURNS_ID not in result.prompts[0].notes


def test_a_message_saved_again_keeps_its_stored_time_as_mastra_does(store: Any) -> None:
    # A retry by id whose turn read history before the first attempt saved stamps the message anew; its
    # save used to take that newer createdAt and move the message after its own first answer. Mastra's
    # saveMessages upsert sets every column but createdAt; so does ours now.
    from datetime import datetime, timedelta, timezone

    mem = Memory(store, MemoryOptions(last_messages=10))
    mem.create_thread(resource_id=R, thread_id=T)
    t0 = datetime(2026, 5, 1, 9, 0, tzinfo=timezone.utc)
    asked = Message.user("C", thread_id=T, resource_id=R, created_at=t0)
    answer = Message.assistant("reply to C", thread_id=T, resource_id=R, created_at=t0 + timedelta(seconds=1))
    mem.save_messages([asked, answer])
    mem.save_messages([asked.copy(created_at=t0 + timedelta(seconds=5))])  # the retry's restamped copy
    assert transcript(mem) == [("user", "C"), ("assistant", "reply to C")]
    stored = {m.id: m.created_at for m in mem.recall(thread_id=T, resource_id=R, last_messages=10)}
    assert stored[asked.id] == t0


@pytest.mark.parametrize("kind", ["history", "observational"])
@pytest.mark.parametrize("b_first", [False, True])
def test_a_turn_rebuilt_now_in_a_millisecond_tie(store: Any, kind: str, b_first: bool) -> None:
    """A stopped clock stamps B's input (run while A builds its prompt) in A's millisecond. A's prompt
    leaves B out, its record rebuilds exactly that, and so does a rebuild from the data as it is now,
    whichever id sorts first (regression: when B's sorted first, the reconstruction took B into history
    and ended A's prompt with B's question). The reconstruction says it left B out, and why."""
    from datetime import datetime, timezone

    from core.timeutil import FixedClock

    if kind == "history":
        hook: Any = HistoryWithAHook()
        options = MemoryOptions(last_messages=10)
    else:
        hook = ObservationsWithAHook()
        options = MemoryOptions(observational_memory={"enabled": True, "message_tokens": 30_000})
    mem = Memory(store, options, processors=[hook], clock=FixedClock(datetime(2026, 5, 1, tzinfo=timezone.utc), step_ms=0))
    model = ScriptedModel(echo)
    agent = Agent("a", instructions="be brief", model=model, memory=mem, tracer=False)
    agent.generate("first", memory={"resource": R, "thread": T})
    a_id, b_id = ("m-z", "m-b") if b_first else ("m-a", "m-y")

    def run_b_meanwhile(ctx: Any) -> None:
        if ctx.messages.messages("input")[0].text != "A":
            return
        hook.before_read = lambda ctx: None
        agent.generate(Message.user("B", id=b_id), memory={"resource": R, "thread": T})

    hook.before_read = run_b_meanwhile
    agent.generate(Message.user("A", id=a_id), memory={"resource": R, "thread": T})
    stored = {m.id: m for m in mem.recall(thread_id=T, resource_id=R, last_messages=50)}
    assert stored[a_id].created_at == stored[b_id].created_at  # the tie
    sent = [(m["role"], m["content"]) for m in model.requests[-1].messages]
    assert sent == [("system", "be brief"), ("user", "first"), ("assistant", "reply to first"), ("user", "A")]
    rebuilt = mem.assemble(as_of=a_id, resource_id=R)
    assert rebuilt.replay is not None and rebuilt.replay.matches
    assert [(m["role"], m["content"]) for m in rebuilt.messages] == sent
    now = mem.assemble(as_of=a_id, resource_id=R, rebuild="now")
    assert [(m["role"], m["content"]) for m in now.messages] == sent
    assert now.replay is not None and now.replay.kind == "reconstructed"
    tied = [u for u in now.replay.unknowns if "same millisecond" in u]
    assert len(tied) == 1 and f"1 message(s) stamped in the same millisecond as the turn's input ({b_id})" in tied[0]
    # B's turn, rebuilt the same way, leaves A out (A was saved after it) and says so too.
    b_now = mem.assemble(as_of=b_id, resource_id=R, rebuild="now")
    assert [(m["role"], m["content"]) for m in b_now.messages] == [
        ("system", "be brief"), ("user", "first"), ("assistant", "reply to first"), ("user", "B")]
    assert b_now.replay is not None
    assert [u for u in b_now.replay.unknowns if f"same millisecond as the turn's input ({a_id})" in u]
    # The first turn had no other message in its millisecond: nothing to say.
    first = mem.recall(thread_id=T, resource_id=R, last_messages=50)[0]
    assert first.text == "first"
    first_now = mem.assemble(as_of=first.id, resource_id=R, rebuild="now")
    assert first_now.replay is not None and not [u for u in first_now.replay.unknowns if "same millisecond" in u]


@pytest.mark.parametrize("kind", ["history", "observational"])
def test_a_turn_begun_while_another_ran_is_rebuilt_now_without_the_other(store: Any, kind: str) -> None:
    """Turn B runs while turn A waits for its model: A stores its input with its reply, after B, so B's
    prompt has no A. Rebuilt now (from the data), A's input (and its reply, stamped when A's model call
    started) are older than B's input and would count as B's history; A's record says when A stored
    them (after B began), so they are left out and said so (regression: "rebuilt now" differed from what
    B's model received for every overlapping turn, seen with four clients on one thread of the gateway)."""
    # (Recall is left out: a rebuilt turn's recall is ranked over today's index, which the rebuild says.)
    from datetime import datetime, timezone

    from core.timeutil import FixedClock

    if kind == "history":
        options = MemoryOptions(last_messages=3)  # (a window the other turn's messages would move)
    else:
        options = MemoryOptions(observational_memory={"enabled": True, "message_tokens": 30_000})
    clock = FixedClock(datetime(2026, 5, 1, tzinfo=timezone.utc), step_ms=1)  # (each reading a millisecond on)
    mem = Memory(store, options, clock=clock)

    model, worker_model = one_turn_inside_another(mem, ("first, about apples", "second", "third"),
                                                  "A question about apples", "B question about apples", T)
    stored = {m.text: m for m in mem.recall(thread_id=T, resource_id=R, last_messages=50)}
    a, b = stored["A question about apples"], stored["B question about apples"]
    assert a.created_at < b.created_at  # (A's reply is stamped when its model call starts: before B's too)
    older = [m for m in (a, stored["reply to A question about apples"]) if m.created_at < b.created_at]
    from core.replay import store as records

    kept = records.for_thread(store, T)  # each record says when its turn stored its messages
    a_at, b_at = kept[a.id].stored_at, kept[b.id].stored_at
    assert a_at is not None and b_at is not None and b.created_at <= b_at < a_at
    assert kept[b.id].began_at is not None and kept[b.id].began_at < a_at  # A stored after B read its memory
    for turn in (b, a):
        sent = next([(m["role"], m["content"]) for m in r.messages] for r in model.requests + worker_model.requests
                    if r.messages[-1]["content"] == turn.text)
        assert ("user", "A question about apples") not in sent[:-1]
        recorded = mem.assemble(as_of=turn.id, resource_id=R)
        assert recorded.replay is not None and recorded.replay.matches
        now = mem.assemble(as_of=turn.id, resource_id=R, rebuild="now")
        assert [(m["role"], m["content"]) for m in now.messages] == sent, turn.text
        assert now.replay is not None
        said = [u for u in now.replay.unknowns if "the turns running beside this one" in u]
        assert len(said) == (1 if turn is b else 0)
        if turn is b:
            assert f"{len(older)} message(s) of 1 other turn(s)" in said[0]


def test_a_turn_rebuilt_now_leaves_out_what_another_conversation_of_the_user_stored_after_it_began(
        store: Any) -> None:
    """Turn B (thread 2) runs while turn A (thread 1, same user) waits for its model; B's recall reads the
    user's other conversations (resource scope) and could not find A's question, stored with A's reply
    at A's end. Rebuilt now, A's question is older than B's input and recall would find it: A's record
    says it was stored after B began, so it is left out and said so (regression, seen in a QA pass: the
    gateway on a local model, two threads of one user at once; "rebuilt now" showed another recalled
    message and blamed an edit that never happened)."""
    from datetime import datetime, timezone

    from core.embedding import HashingEmbedder
    from core.timeutil import FixedClock

    clock = FixedClock(datetime(2026, 5, 1, tzinfo=timezone.utc), step_ms=1)
    recall = {"scope": "resource", "top_k": 2, "message_range": 0}
    mem = Memory(store, MemoryOptions(last_messages=2, semantic_recall=recall), embedder=HashingEmbedder(),
                 clock=clock)
    T2 = "thread-2"

    _model, worker_model = one_turn_inside_another(  # B: the user's other tab, served by another worker
        mem, ("I like pears", "The weather is grey", "Plums are in season"), "Which apples make the best apple pie?",
        "Apple pie for dessert: which apples?", T2, reply="noted: ")
    b = next(m for m in mem.recall(thread_id=T2, resource_id=R, last_messages=10)
             if m.text == "Apple pie for dessert: which apples?")
    a = next(m for m in mem.recall(thread_id=T, resource_id=R, last_messages=50)
             if m.text == "Which apples make the best apple pie?")
    assert a.created_at < b.created_at  # A's question is older than B's input, but was stored after B ran
    sent = [(m["role"], m["content"]) for m in worker_model.requests[0].messages]
    assert not any("best apple pie" in str(c) for _r, c in sent)  # B's recall could not find it
    recorded = mem.assemble(as_of=b.id, resource_id=R)
    assert recorded.replay is not None and recorded.replay.matches
    now = mem.assemble(as_of=b.id, resource_id=R, rebuild="now")
    assert [(m["role"], m["content"]) for m in now.messages] == sent
    assert now.replay is not None and now.replay.matches
    said = [u for u in now.replay.unknowns if "the turns running beside this one" in u]
    assert len(said) == 1 and "the user's other conversations" in said[0]
    assert not [u for u in now.replay.unknowns if "recall's ranking" in u]  # the hits are the record's
    # Hits that are not the record's (today's index ranks otherwise) are said to be, not left unexplained.
    from dataclasses import replace

    from core.replay.rebuild import _recall_moved

    record = now.replay.record
    assert record is not None and len(record.recall) == 2
    assert _recall_moved(now, record) == []
    moved = _recall_moved(now, replace(record, recall=record.recall[:1]))
    assert len(moved) == 1 and "1 hit(s) not in the record, 0 of the record's missing" in moved[0]
    assert "in another order" in _recall_moved(now, replace(record, recall=record.recall[::-1]))[0]
    # Rebuilt now by an engine configured otherwise (a shorter history): the difference is put down to
    # the reconstruction, not to an edit that never happened.
    shorter = Memory(store, MemoryOptions(last_messages=1, semantic_recall=recall), embedder=HashingEmbedder())
    other = shorter.assemble(as_of=a.id, resource_id=R, rebuild="now")
    assert other.replay is not None and other.replay.matches is False
    assert other.replay.differences == (
        "model call 1: the messages differ from those sent (rebuilt from today's data and engine, not from the "
        "record: see what the reconstruction could not know)",)


def test_turns_given_older_times_leave_none_of_the_turns_before_them_out(store: Any) -> None:
    """Inputs stamped by the caller with times long past (a conversation replayed into memory): every turn
    stored its messages long after its input's stamp, but before the next turn began, so a rebuild from
    the data leaves none of them out as "running beside" (what the turns stored is compared with when
    the rebuilt turn read its memory, not with its input's stamp)."""
    from datetime import datetime, timedelta, timezone

    mem = Memory(store, MemoryOptions(last_messages=10))
    agent = Agent("a", instructions="be brief", model=ScriptedModel(echo), memory=mem, tracer=False)
    long_ago = datetime(2023, 5, 1, 9, tzinfo=timezone.utc)
    for i, text in enumerate(("first", "second", "third")):
        agent.generate(Message.user(text, created_at=long_ago + timedelta(hours=i)), memory={"resource": R, "thread": T})
    third = next(m for m in mem.recall(thread_id=T, resource_id=R, last_messages=50) if m.text == "third")
    now = mem.assemble(as_of=third.id, resource_id=R, rebuild="now")
    assert [(m["role"], m["content"]) for m in now.messages][:3] == [
        ("system", "be brief"), ("user", "first"), ("user", "second")]
    assert now.replay is not None and not [u for u in now.replay.unknowns if "running beside" in u]
