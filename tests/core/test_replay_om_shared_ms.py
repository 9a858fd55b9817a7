"""Turns rebuilt without their records when their messages share a millisecond.

A fast scripted loop (or a coarse clock) runs several turns within one millisecond of the clock:
each stored message is then stamped 1 ms after the resource's newest, so the stamps run ahead of the
clock. Observational memory activates buffered chunks (and writes the thread's current task) in a
turn's input phase, and a rebuild without a record dates them into turns by those stamps. Here the
clock never moves (every reading is the same millisecond); the model is a loopback server reached
through the official ``openai`` client, and every turn rebuilt after the records are deleted is
compared with the request the server received.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from core import Agent, Memory, MemoryOptions, Message, open_store
from core.llm import LoopbackServer, OpenAICompatibleModel, ScriptedModel
from core.llm.wire import without_transport
from core.observational.buffer import MAX_HINT_CHARS, MAX_HINTS, chunks_at, hints_then, with_appended, with_hints
from core.observational.store import _merge_thread_om
from core.storage.memory_store import MessageQuery
from core.timeutil import FixedClock

pytestmark = pytest.mark.backends

RESOURCE, THREAD = "ada", "t-journal"
INSTRUCTIONS = "You keep a travel journal."
TEXTS = [f"Journal entry {n}: walked by the river, bought lemons, and planned the train to Porto."
         for n in range(1, 11)]
HINT_TAGS = ("<current-task>", "<suggested-response>")
OTHERS_HEADER = "Below are recent messages from this user's OTHER conversations"
OTHERS_UNKNOWN = ("the block of the user's other conversations' recent messages (resource scope sends, in one "
                  "system message, those its log does not cover yet): left out, because how far the log covered "
                  "each conversation then is not kept")


def _observer() -> Callable[[list[dict[str, Any]], Any], str]:
    """Numbered observations, each with its own current task and suggested response."""
    calls = itertools.count(1)

    def reply(messages: list[dict[str, Any]], tools: Any) -> str:
        n = next(calls)
        return (f"<observations>\nDate: Mar 2, 2026\n* 🔴 (09:{n:02d}) Journal batch {n}: the river, lemons and "
                f"the train.\n</observations>\n<current-task>\nWriting journal batch {n}.\n</current-task>\n"
                f"<suggested-response>\nAsk about batch {n + 1}.\n</suggested-response>")

    return reply


def _hints(messages: list[dict[str, Any]]) -> list[str]:
    """The thread's hints as the model was shown them (the current task, the suggested response)."""
    return [str(m["content"]) for m in messages if m["role"] == "system" and str(m["content"]).startswith(HINT_TAGS)]


def _conversation(store: Any, step_ms: int, *, threads: tuple[str, ...] = (THREAD,),
                  scope: str = "thread") -> tuple[Memory, list[list[dict[str, Any]]]]:
    """The turns (``TEXTS``, alternating between ``threads``), waiting for the observer before each;
    returns the memory and the messages the server received per turn, in order."""
    clock = FixedClock(datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc), step_ms=step_ms)
    with LoopbackServer(lambda messages, tools: f"Noted entry {len(messages)}.") as server:
        journal = Memory(store, MemoryOptions(observational_memory={"enabled": True, "message_tokens": 60,
                                                                    "block_after": 10.0, "scope": scope}),
                         clock=clock, observer_model=ScriptedModel(_observer(), name="observer"), name="journal")
        model = OpenAICompatibleModel("loopback-chat", base_url=server.base_url, api_key="sk-test", api_key_env=None,
                                      keyring_service=None)
        agent = Agent("journal", instructions=INSTRUCTIONS, model=model, memory=journal)
        for n, text in enumerate(TEXTS):
            assert journal.wait_idle(30)
            agent.generate(text, memory={"resource": RESOURCE, "thread": threads[n % len(threads)]})
        assert journal.wait_idle(30)
        model.close()
        sent = [without_transport(body)["messages"] for body in server.chat_requests()]
    return journal, sent


def _rebuilt(journal: Memory) -> list[Any]:
    return [journal.assemble(as_of=turn.input_message_id, instructions=INSTRUCTIONS) for turn in journal.turns(THREAD)]


@pytest.mark.parametrize("step_ms", [0, 1, 1000], ids=["clock-stopped", "clock-1ms-a-reading", "clock-1s-a-reading"])
def test_turns_sharing_a_millisecond_rebuild_as_the_model_received_them(store: Any, step_ms: int) -> None:
    """Every turn rebuilt without its record is byte for byte the request the server received: the
    observations its own activation brought (not the next turn's), and the current task and suggested
    response it was shown, though later activations overwrote them on the thread."""
    journal, sent = _conversation(store, step_ms)
    turns = journal.turns(THREAD)
    assert [t.input_text for t in turns] == TEXTS and len(sent) == len(TEXTS)
    # The scene: the log and the hints change from turn to turn, and (clock stopped) the stamps ran ahead.
    assert len({tuple(_hints(m)) for m in sent}) > 3 and len({len(m) for m in sent}) > 3
    stamps = [m.created_at for m in store.memory.list_messages(MessageQuery(thread_id=THREAD))]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    if step_ms == 0:
        assert stamps[-1] - stamps[0] >= timedelta(milliseconds=2 * len(TEXTS) - 1)
    for turn, messages in zip(turns, sent):  # with records, exact
        assert journal.assemble(as_of=turn.input_message_id).messages == messages, turn.input_text
    with store.db.write() as conn:
        conn.exec_driver_sql("DELETE FROM memory_studio_turns")
    for turn, messages, prompt in zip(turns, sent, _rebuilt(journal)):
        assert prompt.replay is not None and prompt.replay.kind == "reconstructed"
        assert not any("current task" in u or "observation" in u for u in prompt.replay.unknowns), prompt.replay.unknowns
        assert prompt.messages == messages, turn.input_text


def test_resource_scoped_turns_of_two_threads_sharing_a_millisecond_rebuild_as_received(store: Any) -> None:
    """Two threads of one resource share the log, with the clock stopped. Each turn is stamped after the
    newest message of the resource, so the stamps keep the order of the turns across the threads and
    every turn is rebuilt with the observations, hints and history it was sent (stamped after its own
    thread's newest only, thread b's turn sorted before thread a's reply, and thread a's rebuild got
    b's later activation with nothing in ``unknowns``). The other conversations' unobserved messages
    each thread was shown are not rebuilt without a record: the rebuild leaves that block out and says so."""
    journal, sent = _conversation(store, 0, threads=("t-a", "t-b"), scope="resource")
    with store.db.write() as conn:
        conn.exec_driver_sql("DELETE FROM memory_studio_turns")
    by_input = dict(zip(TEXTS, sent))
    turns = [t for thread in ("t-a", "t-b") for t in journal.turns(thread)]
    assert sorted(t.input_text for t in turns) == sorted(TEXTS)
    shown_others = 0
    for turn in turns:
        prompt = journal.assemble(as_of=turn.input_message_id, instructions=INSTRUCTIONS)
        assert prompt.replay is not None and prompt.replay.kind == "reconstructed"
        assert not any("current task" in u or "observation" in u for u in prompt.replay.unknowns), turn.input_text
        received = by_input[turn.input_text]
        others = [m for m in received if m["role"] == "system" and str(m["content"]).startswith(OTHERS_HEADER)]
        if others:
            shown_others += 1
            assert OTHERS_UNKNOWN in prompt.replay.unknowns, turn.input_text
        assert prompt.messages == [m for m in received if m not in others], turn.input_text
    assert shown_others  # the case the rebuild cannot know did come up


def test_turns_of_two_writers_in_one_resource_keep_their_order_in_one_millisecond(db_path: Any) -> None:
    """Two writers (two stores on one database, as two processes have), each running turns and saving
    unstamped messages in its own thread of one resource, with clocks stopped at the same millisecond:
    every message sorts after the ones the other writer stored before it."""
    clock = FixedClock(datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc), step_ms=0)
    stores = [open_store(db_path), open_store(db_path)]
    try:
        agents = [Agent(f"writer-{n}", instructions=INSTRUCTIONS,
                        model=ScriptedModel(lambda messages, tools: "Noted.", name="scripted"),
                        memory=Memory(s, clock=clock, name=f"writer-{n}")) for n, s in enumerate(stores)]
        written: list[str] = []
        for n, text in enumerate(TEXTS[:6]):
            agent, thread = agents[n % 2], ("t-a", "t-b")[n % 2]
            reply = agent.generate(text, memory={"resource": RESOURCE, "thread": thread})
            written += [text, reply.text]
            # Saved by this writer into the other writer's thread, without a time (stamped by the save).
            note = Message.user(f"note {n}", thread_id=("t-b", "t-a")[n % 2], resource_id=RESOURCE)
            note = note.copy(created_at=clock.now(), created_at_given=False)
            agent.memory.save_messages([note])
            written.append(f"note {n}")
        stored = sorted((m for thread in ("t-a", "t-b")
                         for m in stores[0].memory.list_messages(MessageQuery(thread_id=thread))),
                        key=lambda m: (m.created_at, m.id))
        assert [m.text for m in stored] == written
        assert len({m.created_at for m in stored}) == len(stored)
    finally:
        for s in stores:
            s.close()


def test_hints_another_program_wrote_since_are_not_shown_as_the_turns(store: Any) -> None:
    """The thread's hints changed by a writer that keeps no hint entries (Mastra, an older version):
    the newest entry no longer says what the thread holds, and when the change came is unknown, so
    the turns the entries would date show no hints and list them."""
    journal, sent = _conversation(store, 1000)
    with store.db.write() as conn:
        _merge_thread_om(conn, THREAD, {"currentTask": "Planning the trip to Porto."}, "2026-03-02T10:00:00.000Z")
        conn.exec_driver_sql("DELETE FROM memory_studio_turns")
    last = _rebuilt(journal)[-1]
    assert last.replay is not None and any(u.startswith("the current task and suggested response at the time (the "
                                                        "thread's were written since") for u in last.replay.unknowns)
    assert _hints(last.messages) == [] and _hints(sent[-1]) != []
    assert last.messages == [m for m in sent[-1] if str(m["content"]) not in _hints(sent[-1])]


def test_a_rows_hint_entries_are_bounded_and_a_turn_older_than_the_kept_ones_is_still_known() -> None:
    studio: dict[str, Any] = {}
    before: dict[str, Any] = {"currentTask": "Imported task."}
    for n in range(MAX_HINTS + 15):
        after = {"currentTask": f"Task {n}. " + "x" * 600, "suggestedResponse": f"Reply {n}.", "lastObservedAt": "z"}
        other = {"currentTask": f"Other {n}."}
        studio = with_hints(studio, f"2026-03-02T09:00:{n:02d}.000Z", THREAD, before, after)
        studio = with_hints(studio, f"2026-03-02T09:00:{n:02d}.500Z", "t-other", None if n else {}, other)
        before = after
    entries = studio["hints"]
    assert 1 < len(entries) <= MAX_HINTS and sum(len(json.dumps(e)) for e in entries) < MAX_HINT_CHARS + 4_000
    kept = [e["at"] for e in entries if e["thread"] == THREAD]
    assert kept[0] > "2026-03-02T09:00:05.000Z", "the scene: the oldest writes were dropped"
    # At every time, the hints then: the newest written by then, or the imported ones before any.
    for n in range(-1, MAX_HINTS + 15):
        then = hints_then([studio], THREAD, f"2026-03-02T09:00:{n:02d}.100Z" if n >= 0 else "2026-03-02T08:00:00.000Z")
        assert then is not None
        if n < int(kept[0][17:19]) - 1:
            continue  # dropped, and not the one right before the first kept: not asked for
        expected = {"currentTask": "Imported task."} if n < 0 else {"currentTask": f"Task {n}. " + "x" * 600,
                                                                   "suggestedResponse": f"Reply {n}."}
        assert then.values == expected, n
    assert hints_then([studio], "t-unknown", "2026-03-02T09:00:30.000Z") is None


def test_a_write_in_the_millisecond_of_the_turns_reply_is_the_turns_own() -> None:
    """A turn dates its writes no earlier than its input and no later than its reply (stamped after
    them, from the same clock, or 1 ms after the input): a mark or hint entry at the very millisecond
    of the turn's next stored message was written by the turn, before its prompt was built."""
    reply = "2026-03-02T09:00:00.007Z"
    studio = with_appended({}, "--- message boundary (2026-03-02T09:00:00.003Z) ---\n* one", reply,
                           "2026-03-02T09:00:00.003Z")
    studio = with_hints(studio, reply, THREAD, {}, {"currentTask": "Writing batch 1."})
    assert chunks_at(studio, reply) == (1, "2026-03-02T09:00:00.003Z")
    assert chunks_at(studio, "2026-03-02T09:00:00.006Z") == (0, None)
    then = hints_then([studio], THREAD, reply)
    assert then is not None and then.values == {"currentTask": "Writing batch 1."}
    earlier = hints_then([studio], THREAD, "2026-03-02T09:00:00.006Z")
    assert earlier is not None and earlier.values == {}


@pytest.mark.libsql_only
def test_a_turns_stamp_reads_the_resources_threads_by_index_not_every_thread(store: Any) -> None:
    """Every turn runs this statement: on libSQL (migration ``0030_threads_by_resource``) it finds the
    resource's threads by the index Postgres always had, and each thread's newest by its messages
    index, never scanning every thread or message row."""
    from core.storage.memory_store import _NEWEST_IN_RESOURCE

    Memory(store).save_messages([Message.user("hello", thread_id="t-a", resource_id=RESOURCE)])
    with store.db.read() as conn:
        plan = [str(row[-1]) for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {_NEWEST_IN_RESOURCE}",
                                                             ("t-a", RESOURCE, "t-a"))]
        assert store.memory.newest_in_resource("t-b", RESOURCE, conn) is not None  # another thread of the resource
        assert store.memory.newest_in_resource("t-b", "someone-else", conn) is None
    assert any("mastra_threads_resourceid_createdat_idx" in step for step in plan), plan
    assert not any(step.startswith("SCAN") for step in plan), plan


def test_two_turns_of_one_resource_running_at_once_say_their_shared_millisecond_when_rebuilt_without_records(
        store: Any) -> None:
    """Two threads of one resource, recall across them (resource scope), the clock stopped. A turn on t-a
    waits for its model while a turn on t-b runs to its end: neither saw the other, and, as each is stamped
    after the resource's newest stored message when it begins, both inputs share one millisecond. A rebuild
    without records leaves a message of that millisecond out (memory is what is older than the input's
    millisecond), which is what each turn saw here; but the data cannot say whether the other turn's message
    was stored first, and the reconstruction says so, naming it, for the other thread too."""
    import threading

    from core.embedding import HashingEmbedder

    clock = FixedClock(datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc), step_ms=0)
    with LoopbackServer(lambda messages, tools: f"Noted {len(messages)}.") as server:
        memory = Memory(store, MemoryOptions(last_messages=4, semantic_recall={"top_k": 3, "message_range": 0,
                                                                               "scope": "resource"}),
                        clock=clock, embedder=HashingEmbedder(), name="journal")
        model = OpenAICompatibleModel("loopback-chat", base_url=server.base_url, api_key="sk-test", api_key_env=None,
                                      keyring_service=None)
        agent = Agent("journal", instructions=INSTRUCTIONS, model=model, memory=memory, tracer=False)
        for n, text in enumerate(TEXTS[:4]):
            agent.generate(text, memory={"resource": RESOURCE, "thread": ("t-a", "t-b")[n % 2]})
        server.stall_next(1, matching=lambda body: "Alpha" in str(body["messages"][-1]["content"]))
        first = threading.Thread(target=agent.generate, args=("Alpha: the lemons by the river again.",),
                                 kwargs={"memory": {"resource": RESOURCE, "thread": "t-a"}})
        first.start()
        while not any("Alpha" in str(b["messages"][-1]["content"]) for b in server.chat_requests()):
            first.join(0.01)  # until the server holds t-a's call (a condition, not a guessed wait)
        agent.generate("Beta: the train to Porto and the lemons.", memory={"resource": RESOURCE, "thread": "t-b"})
        server.release()
        first.join(60)
        assert not first.is_alive()
        model.close()
        sent = [without_transport(body)["messages"] for body in server.chat_requests()]
    alpha, beta = memory.turns("t-a")[-1], memory.turns("t-b")[-1]
    stamps = {m.id: m.created_at for t in ("t-a", "t-b") for m in store.memory.list_messages(MessageQuery(thread_id=t))}
    assert stamps[alpha.input_message_id] == stamps[beta.input_message_id]  # the scene: one millisecond
    with store.db.write() as conn:
        conn.exec_driver_sql("DELETE FROM memory_studio_turns")
    for turn, other, messages in ((alpha, beta, sent[-2]), (beta, alpha, sent[-1])):
        prompt = memory.assemble(as_of=turn.input_message_id, instructions=INSTRUCTIONS)
        assert prompt.replay is not None and prompt.replay.kind == "reconstructed"
        assert prompt.messages == messages, turn.input_text
        said = [u for u in prompt.replay.unknowns if "same millisecond" in u]
        assert said and other.input_message_id in said[0] and "other conversations" in said[0], prompt.replay.unknowns


def test_with_their_records_resource_scoped_turns_show_the_other_conversations_block_as_sent(store: Any) -> None:
    """What a rebuild without a record leaves out (``OTHERS_UNKNOWN``), a turn's record gives: every turn of two
    threads of one resource, the other conversations' block included, is the request the server received."""
    journal, sent = _conversation(store, 0, threads=("t-a", "t-b"), scope="resource")
    by_input = dict(zip(TEXTS, sent))
    blocks = 0
    for turn in [t for thread in ("t-a", "t-b") for t in journal.turns(thread)]:
        prompt = journal.assemble(as_of=turn.input_message_id)
        assert prompt.replay is not None and prompt.replay.exact and OTHERS_UNKNOWN not in prompt.replay.unknowns
        received = by_input[turn.input_text]
        assert prompt.messages == received, turn.input_text
        blocks += any(m["role"] == "system" and str(m["content"]).startswith(OTHERS_HEADER) for m in received)
    assert blocks
