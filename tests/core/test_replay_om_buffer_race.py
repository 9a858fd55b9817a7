"""A turn reconstructed without its record, when a background observer finished during its model call.

Observational memory buffers observations in the background: a chunk made after turn 4 covers turn
4's messages, and is activated (joins the log, and its current task becomes the thread's) only by a
later turn. Here the observer is held until turn 5's model call is running, finishes then, and turn 6
activates its chunk. Turn 5's prompt was built before the chunk existed. With the records deleted,
every turn is rebuilt as of its time and compared with the request the loopback server received
through the official ``openai`` client: each equals it, or lists what it cannot know. The thread's
current task was written by turn 6's activation; its cursor (turn 4's reply) is older than turn 5's
input, which is how the reconstruction used to date it, so turn 5 was rebuilt with turn 6's task and
nothing said so.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone
from typing import Any

import pytest
import sqlalchemy as sa

from core import Agent, Memory, MemoryOptions
from core.llm import LoopbackServer, OpenAICompatibleModel, ScriptedModel
from core.llm.wire import without_transport
from core.observational.context import TAG as OM_TAG
from core.observational.records import STUDIO_KEY
from core.observational.store import OM
from core.timeutil import FixedClock

pytestmark = pytest.mark.backends

RESOURCE, THREAD = "ada", "t-journal"
INSTRUCTIONS = "You keep a travel journal."
TEXTS = [f"Journal entry {n}: walked by the river, bought lemons, and planned the train to Porto."
         for n in range(1, 7)]
HELD_AFTER, RACED = 4, 5  # the observer started after turn 4 finishes while turn 5's model call runs
CURRENT_TASK = "<current-task>"


class Observer:
    """Numbered observations and current tasks; each call waits until the gate is open."""

    def __init__(self, gate: threading.Event) -> None:
        self.gate, self.calls = gate, 0

    def __call__(self, messages: list[dict[str, Any]], tools: Any) -> str:
        if not self.gate.wait(30):
            raise RuntimeError("the test never opened the observer's gate")
        self.calls += 1
        return (f"<observations>\nDate: Mar 2, 2026\n* 🔴 (09:{self.calls:02d}) Journal batch {self.calls}: the "
                f"river, lemons and the train.\n</observations>\n<current-task>\nWriting journal batch "
                f"{self.calls}.\n</current-task>")


def _entry(messages: list[dict[str, Any]]) -> int:
    user = [m for m in messages if m["role"] == "user" and str(m["content"]).startswith("Journal entry")][-1]
    return int(str(user["content"]).split()[2].rstrip(":"))


def _hint_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The current-task system messages (the thread's hints as shown)."""
    return [m for m in messages if m["role"] == "system" and str(m["content"]).startswith(CURRENT_TASK)]


def _hints(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m["content"]) for m in _hint_messages(messages)]


def _conversation(store: Any) -> tuple[Memory, list[list[dict[str, Any]]]]:
    """The six turns; the observer started after turn 4 is held until turn 5's model call runs, turn
    5's own observer until the end. Returns the memory and the messages the server received per turn."""
    gate = threading.Event()
    gate.set()
    finished_during: list[bool] = []
    memory: dict[str, Memory] = {}

    def responder(messages: list[dict[str, Any]], tools: Any) -> str:
        entry = _entry(messages)
        if entry == RACED:  # the turn's prompt is built and sent: now the held observer finishes
            gate.set()
            finished_during.append(memory["journal"].wait_idle(30))
            gate.clear()  # turn 5's own observer waits: turn 6 activates only the chunk made meanwhile
        return f"Noted entry {entry}."

    clock = FixedClock(datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc), step_ms=1000)
    observer = Observer(gate)
    with LoopbackServer(responder) as server:
        journal = memory["journal"] = Memory(
            store, MemoryOptions(observational_memory={"enabled": True, "message_tokens": 60, "block_after": 10.0}),
            clock=clock, observer_model=ScriptedModel(observer, name="observer"), name="journal")
        model = OpenAICompatibleModel("loopback-chat", base_url=server.base_url, api_key="sk-test", api_key_env=None,
                                      keyring_service=None)
        agent = Agent("journal", instructions=INSTRUCTIONS, model=model, memory=journal)
        for n, text in enumerate(TEXTS, 1):
            if n not in (RACED, RACED + 1):  # (turns 5 and 6 start with an observer held)
                assert journal.wait_idle(30)
            if n == HELD_AFTER:
                gate.clear()
            agent.generate(text, memory={"resource": RESOURCE, "thread": THREAD})
        gate.set()
        assert journal.wait_idle(30)
        model.close()
        sent = [without_transport(body)["messages"] for body in server.chat_requests()]
    assert finished_during == [True], "the observer finished while turn 5's model call was running"
    return journal, sent


def test_a_chunk_the_observer_finished_during_a_turns_model_call_is_not_rebuilt_into_that_turn(store: Any) -> None:
    journal, sent = _conversation(store)

    turns = journal.turns(THREAD)
    assert [t.input_text for t in turns] == TEXTS and len(sent) == len(TEXTS)
    records = [t.record for t in turns]
    assert all(r is not None for r in records)
    # What the scene needs: turn 5 was shown observations and a current task, turn 6 more of both.
    assert records[RACED - 1].om_chunks and records[RACED].om_chunks > records[RACED - 1].om_chunks
    assert _hints(sent[RACED - 1]) and _hints(sent[RACED]) and _hints(sent[RACED - 1]) != _hints(sent[RACED])
    for turn, messages in zip(turns, sent):  # with records, every turn is exact
        prompt = journal.assemble(as_of=turn.input_message_id)
        assert prompt.messages == messages and prompt.replay is not None and prompt.replay.exact, turn.input_text

    with store.db.write() as conn:
        conn.exec_driver_sql("DELETE FROM memory_studio_turns")
    assert not any(_rebuilds_as_received(journal, sent)), "every turn's hints are known from the rows' hint entries"
    raced = journal.assemble(as_of=turns[RACED - 1].input_message_id, instructions=INSTRUCTIONS)
    observations = {f.text for f in raced.fragments if f.role == "system" and f.tag == OM_TAG}
    assert not any("batch" in text and text not in {m["content"] for m in sent[RACED - 1]} for text in observations)
    assert not set(_hints(sent[RACED])) & set(_hints(raced.messages)), "turn 6's current task rebuilt into turn 5"
    # Each activation's row keeps the hints it left the thread: turn 5's task, overwritten by turn 6, is known.
    assert _hints(raced.messages) == _hints(sent[RACED - 1])
    assert raced.replay is not None and not any("current task" in u for u in raced.replay.unknowns)


def _rebuilds_as_received(journal: Memory, sent: list[list[dict[str, Any]]]) -> list[bool]:
    """Rebuild every turn (no records): each is what the server received, but for hints it lists as
    unknown (left out). Returns, per turn, whether its hints were unknown."""
    unknown: list[bool] = []
    for turn, messages in zip(journal.turns(THREAD), sent):
        assert turn.record is None
        prompt = journal.assemble(as_of=turn.input_message_id, instructions=INSTRUCTIONS)
        info = prompt.replay
        assert info is not None and info.kind == "reconstructed" and not info.exact
        rebuilt = prompt.messages
        hints_unknown = any("current task" in u for u in info.unknowns)
        # Every hint shown is the one the model received; one not known is left out and listed.
        assert _hints(rebuilt) == _hints(messages) or (_hints(rebuilt) == [] and hints_unknown), turn.input_text
        # Everything else is exactly what the server received.
        told = [m for m in messages if not (hints_unknown and m in _hint_messages(messages))]
        assert rebuilt == told, turn.input_text
        unknown.append(hints_unknown)
    return unknown


def _strip_studio(store: Any, *keys: str) -> None:
    """Remove ``keys`` from every row's own metadata (rows written before them, or by Mastra)."""
    with store.db.write() as conn:
        rows = conn.execute(sa.select(OM.c.id, OM.c.metadata)).all()
        for row_id, metadata in rows:
            meta = json.loads(metadata) if isinstance(metadata, str) else dict(metadata)
            for key in keys:
                assert meta[STUDIO_KEY].pop(key), key
            conn.execute(OM.update().where(OM.c.id == row_id).values(metadata=json.dumps(meta)))
        conn.exec_driver_sql("DELETE FROM memory_studio_turns")


def test_rows_without_hint_entries_date_the_hints_by_their_marks_and_list_what_was_overwritten(store: Any) -> None:
    """Rows written before the hint entries: the thread keeps only the newest hints, dated by the
    mark of the activation that wrote them; turn 5's were overwritten by turn 6, so turn 5 shows
    none and lists them."""
    journal, sent = _conversation(store)
    _strip_studio(store, "hints")
    unknown = _rebuilds_as_received(journal, sent)
    assert unknown[RACED - 1] and not unknown[-1]


@pytest.mark.libsql_only
def test_a_buffered_log_without_activation_marks_says_what_it_cannot_date(store: Any) -> None:
    """Mastra's rows (and ours before the marks) do not say when a buffered chunk joined the log:
    the chunk finished during turn 5's call is dated by the messages it covers, which are older than
    turn 5's input, so it may be shown; the rebuild says so, and shows no current task it cannot date."""
    journal, sent = _conversation(store)
    _strip_studio(store, "appended", "hints")
    raced = journal.turns(THREAD)[RACED - 1]
    prompt = journal.assemble(as_of=raced.input_message_id, instructions=INSTRUCTIONS)
    assert prompt.replay is not None
    unknowns = prompt.replay.unknowns
    assert any("observations were buffered" in u and "current task" in u for u in unknowns)
    assert _hints(prompt.messages) == []
    shown = [m["content"] for m in prompt.messages if m["role"] == "system" and "Journal batch" in str(m["content"])]
    received = {m["content"] for m in sent[RACED - 1]}
    # The chunks finished during turn 5's call cover turn 4, so by their messages they date before turn 5:
    # they are shown, and the rebuild says that the newest shown may have joined the log after the turn.
    assert [text for text in shown if text not in received], "the scene: a chunk turn 5 did not see is shown"
    assert any("may have joined the log after this turn" in u for u in unknowns), unknowns
