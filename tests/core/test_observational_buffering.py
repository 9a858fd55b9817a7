"""Observational memory in the background (issue 19, item 1): buffering, activation, blocking,
buffered reflection, back-off, the memory's background work, and exact turn records.

"The turn does not wait" is shown by the order of events: the scripted observer blocks on a gate the
test opens only after the turn returned (a turn that waited would never return before the gate
opens: its event would come after the observer's). No timed assertions.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from core import Agent, Memory, MemoryOptions, open_store
from core.llm import ModelError, ScriptedModel
from core.observational import load_current, load_history
from core.observational.context import TAG as OM_TAG
from core.storage import Store
from core.timeutil import FixedClock
from core.tokens import EstimatingTokenizer

pytestmark = pytest.mark.backends

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=timezone.utc)
TOKENIZER = EstimatingTokenizer()
WORDS = "word " * 30  # about 32 tokens with the question number


class Gate:
    """An observer that records when it starts and ends, and waits for the test to let it finish."""

    def __init__(self, events: list[str], *, hold: bool = True, fail: int = 0) -> None:
        self.events = events
        self.release = threading.Event()
        self.started = threading.Event()
        if not hold:
            self.release.set()
        self.calls = 0
        self.fail = fail
        self.lock = threading.Lock()

    def __call__(self, messages: list[dict[str, Any]], tools: Any) -> Any:
        with self.lock:
            self.calls += 1
            n = self.calls
        self.events.append(f"observer-start-{n}")
        self.started.set()
        self.release.wait(30)
        self.events.append(f"observer-end-{n}")
        if n <= self.fail:
            return ModelError("the observer is down", model_id="scripted/observer", status=503)
        if "OBSERVATIONS TO REFLECT ON" in str(messages[-1]["content"]):
            return "<observations>\nDate: Mar 3, 2025\n* 🔴 (09:00) Reflected summary.\n</observations>"
        return (f"<observations>\nDate: Mar 3, 2025\n* 🔴 (09:{n:02d}) Observation number {n}.\n</observations>\n"
                f"<current-task>\nTask {n}.\n</current-task>")


def make(db: Path | str, gate: Gate, *, clock: Any = None, **om: Any) -> tuple[Store, Memory, Agent, ScriptedModel]:
    store = open_store(db)
    settings = {"message_tokens": 200, "observation_tokens": 5000, **om}
    memory = Memory(store, MemoryOptions(observational_memory=settings), tokenizer=TOKENIZER,
                    observer_model=ScriptedModel(gate, name="observer"),
                    clock=clock or FixedClock(T0, step_ms=1000))
    actor = ScriptedModel(lambda m, t: "Reply " + "x " * 28, name="actor")
    agent = Agent("helper", instructions="Help.", model=actor, memory=memory, tracer=False)
    return store, memory, agent, actor


def turn(agent: Agent, i: int, events: list[str] | None = None, thread: str = "t") -> Any:
    result = agent.generate(f"Question {i}: {WORDS}", memory={"resource": "u", "thread": thread})
    if events is not None:
        events.append(f"turn-{i}")
    return result


def om_notes(result: Any) -> dict[str, Any]:
    return dict(result.prompts[0].notes["observational-memory"])


def test_defaults_are_mastras() -> None:
    om = MemoryOptions(observational_memory=True).observational_memory
    assert (om.buffer_tokens, om.buffer_activation, om.block_after) == (0.2, 0.8, None)
    assert (om.reflection_buffer_activation, om.reflection_block_after) == (0.5, None)
    assert om.buffer_interval == 6000 and om.block_after_tokens == 36_000 and om.retained_tokens == 6000
    assert om.reflection_buffer_at == 20_000 and om.reflection_block_after_tokens == 48_000
    absolute = MemoryOptions(observational_memory={"buffer_tokens": 500, "block_after": 45_000}).observational_memory
    assert absolute.buffer_interval == 500 and absolute.block_after_tokens == 45_000
    assert MemoryOptions(observational_memory={"buffer_tokens": False}).observational_memory.buffer_interval is None
    # Resource scope observes in the turn, as in Mastra.
    assert not MemoryOptions(observational_memory={"scope": "resource"}).observational_memory.buffering


@pytest.mark.parametrize("bad, says", [
    ({"buffer_tokens": True}, "buffer_tokens"), ({"buffer_tokens": 0}, "buffer_tokens"),
    ({"buffer_tokens": 40_000}, "below message_tokens"), ({"buffer_activation": 0}, "buffer_activation"),
    ({"buffer_activation": 1.5}, "buffer_activation"), ({"block_after": 0.5}, "block_after"),
    ({"block_after": 1000}, "must not be below"), ({"reflection_block_after": "x"}, "reflection_block_after"),
])
def test_bad_buffering_options_say_what_is_allowed(bad: dict[str, Any], says: str) -> None:
    from core.options import OptionsError

    with pytest.raises(OptionsError, match=says):
        MemoryOptions(observational_memory=bad)


def test_the_observer_runs_in_the_background_and_the_turn_does_not_wait(db_path: Path | str) -> None:
    events: list[str] = []
    gate = Gate(events)
    store, memory, agent, _ = make(db_path, gate)
    turn(agent, 0, events)  # ~66 tokens stored: past buffer_tokens (40), so the observer starts
    turn(agent, 1, events)  # the observer is still running: this turn did not wait for it
    assert events.index("turn-0") < events.index("turn-1")
    assert gate.started.wait(30) and "observer-end-1" not in events
    assert not load_current(store, thread_id="t").buffered  # nothing buffered yet, nothing shown
    gate.release.set()
    assert memory.wait_idle(30)
    assert events.index("turn-1") < events.index("observer-end-1")
    record = load_current(store, thread_id="t")
    assert record is not None and record.buffered and record.active_observations == ""
    # Buffered output is not in the context until activated.
    result = turn(agent, 2)
    assert not any(f.tag == OM_TAG and f.detail.get("part") == "chunk" for f in result.prompts[0].fragments)
    assert om_notes(result)["buffer"]["chunks"] >= 1
    store.close()


def test_at_the_threshold_buffered_observations_activate_at_once(db_path: Path | str) -> None:
    events: list[str] = []
    gate = Gate(events, hold=False)
    store, memory, agent, actor = make(db_path, gate)
    results = []
    for i in range(3):  # ~200 tokens stored; the background observer keeps up (the test waits for it)
        results.append(turn(agent, i, events))
        assert memory.wait_idle(30)
    calls_before = gate.calls
    result = turn(agent, 3, events)  # pending crosses 200: activation, no model call in the turn
    notes = om_notes(result)
    assert notes["activated"]["chunks"] >= 1 and notes["blocked"] is False
    assert gate.calls == calls_before  # the turn called no observer
    prompt = result.prompts[0]
    chunks = [f for f in prompt.fragments if f.tag == OM_TAG and f.detail.get("part") == "chunk"]
    assert chunks and "Observation number" in chunks[0].text
    # The observed messages left the context; about (1 - 0.8) × 200 tokens of raw messages stay.
    raw = [f for f in prompt.fragments if f.source == "observational-memory" and f.detail.get("unobserved")]
    stored_first = results[0].saved[0].id
    assert stored_first not in {i for f in raw for i in f.stored_ids}
    assert sum(f.tokens for f in raw) <= 200
    record = load_current(store, thread_id="t")
    assert record is not None and record.active_observations
    assert [e["kind"] for e in record.studio["events"]].count("activated") == 1
    store.close()


def test_a_turn_blocks_on_the_observer_only_above_block_after(db_path: Path | str) -> None:
    events: list[str] = []
    gate = Gate(events)
    store, memory, agent, _ = make(db_path, gate, block_after=1.2)  # 240 tokens
    for i in range(4):
        result = turn(agent, i, events)
        assert om_notes(result)["blocked"] is False  # below 240: nobody waits for the held observer
    assert "observer-end-1" not in events
    threading.Timer(0.2, gate.release.set).start()  # the gate opens while the next turn waits
    result = turn(agent, 4, events)  # 4 × ~63 stored + input > 240
    notes = om_notes(result)
    assert notes["blocked"] is True
    assert events.index("observer-end-1") < events.index("turn-4")  # this turn waited
    assert any(f.tag == OM_TAG and f.detail.get("part") == "chunk" for f in result.prompts[0].fragments)
    record = load_current(store, thread_id="t")
    assert any(e.get("blocked") for e in record.studio["events"])
    memory.wait_idle(30)
    store.close()


def test_a_failed_observer_backs_off_instead_of_retrying_every_turn(db_path: Path | str) -> None:
    events: list[str] = []
    gate = Gate(events, hold=False, fail=1)
    clock = FixedClock(T0, step_ms=10)  # the clock barely moves between turns
    store, memory, agent, _ = make(db_path, gate, clock=clock, buffer_tokens=False)
    for i in range(4):
        turn(agent, i)
    assert gate.calls == 1  # failed once at the threshold, then backed off for the following turns
    record = load_current(store, thread_id="t")
    assert record is not None and record.studio["observerBackoff"]["failures"] == 1
    assert "backing off until" in om_notes(turn(agent, 4))["observationError"]
    assert gate.calls == 1
    # Past the back-off the observer is asked again and the thread is observed.
    late = FixedClock(T0 + timedelta(minutes=5), step_ms=10)
    memory.clock = late
    memory.working_memory_service.clock = late
    result = turn(agent, 5)
    assert gate.calls == 2 and "observed" in om_notes(result)
    assert "observerBackoff" not in load_current(store, thread_id="t").studio
    store.close()


def test_a_turn_past_the_threshold_says_the_background_observer_is_backing_off(db_path: Path | str) -> None:
    """Between message_tokens and block_after the turn does not wait; when the background observer has
    failed and is backing off, its record says so instead of promising buffered observations."""
    gate = Gate([], hold=False, fail=100)
    clock = FixedClock(T0, step_ms=10)
    store, memory, agent, _ = make(db_path, gate, clock=clock, block_after=10)  # blocks only at 2,000
    for i in range(4):
        result = turn(agent, i)
        memory.wait_idle(30)
    assert gate.calls >= 1 and load_current(store, thread_id="t").studio["observerBackoff"]["failures"] >= 1
    notes = om_notes(result)
    assert notes["unobservedTokens"] >= 200 and notes["blocked"] is False
    assert "backing off until" in notes.get("observationError", "")
    assert "activated as it becomes ready" not in notes.get("observation", "")
    store.close()


def test_a_background_observers_failure_is_told_until_an_observation_succeeds(db_path: Path | str) -> None:
    """A background observer's failure was told only by a turn past message_tokens inside its 30 s back-off: below
    the threshold, or once the back-off had ended, a turn (and so a gateway client's notices) said nothing though
    the observer had failed and the messages stayed raw. Now every turn says so until an observation succeeds."""
    from core.gateway.notices import om_notices

    gate = Gate([], hold=False, fail=1)
    clock = FixedClock(T0, step_ms=10)
    store, memory, agent, _ = make(db_path, gate, clock=clock)  # buffers from 40 tokens, activates at 200
    turn(agent, 0)  # ~66 tokens stored: the background observer starts, and fails
    assert memory.wait_idle(30) and gate.calls == 1
    notes = om_notes(turn(agent, 1))
    assert notes["unobservedTokens"] < 200  # below the threshold: before, nothing was said
    assert "the observer is down" in notes["observationError"] and "backing off until" in notes["observationError"]
    (notice,) = om_notices([{"observational-memory": notes}])
    assert notice["code"] == "observation_failed" and notice["retry_at"] == notes["observationRetryAt"]
    assert memory.wait_idle(30) and gate.calls == 1  # backing off: not asked again
    # Past the back-off, before the observer is tried again: still said (before, nothing), without a retry time.
    late = FixedClock(T0 + timedelta(minutes=5), step_ms=10)
    memory.clock = late
    memory.working_memory_service.clock = late
    notes = om_notes(turn(agent, 2))
    assert "the observer is down" in notes["observationError"] and "no observation has succeeded since" in \
        notes["observationError"] and "observationRetryAt" not in notes
    (notice,) = om_notices([{"observational-memory": notes}])
    assert notice["code"] == "observation_failed" and "retry_at" not in notice
    # That turn started the background observer again; it succeeded: the next turn says nothing of a failure.
    assert memory.wait_idle(30) and gate.calls >= 2
    record = load_current(store, thread_id="t")
    assert record is not None and record.buffered and "observerBackoff" not in record.studio
    notes = om_notes(turn(agent, 3))
    assert "observationError" not in notes and om_notices([{"observational-memory": notes}]) == []
    memory.wait_idle(30)
    store.close()


def test_reflection_is_buffered_and_swapped_in_without_waiting(db_path: Path | str) -> None:
    events: list[str] = []
    gate = Gate(events, hold=False)
    store, memory, agent, _ = make(db_path, gate, observation_tokens=60)  # reflect from ~30 tokens
    for i in range(12):
        turn(agent, i)
        assert memory.wait_idle(30)
    history = load_history(store, thread_id="t")
    assert len(history) >= 2  # a new generation was started by a reflection
    kinds = [e["kind"] for r in history for e in r.studio.get("events", [])]
    assert "reflection-buffered" in kinds and "reflection-activated" in kinds
    assert "Reflected summary." in history[0].active_observations
    store.close()


def test_wait_idle_waits_for_every_kind_of_background_work(db_path: Path | str) -> None:
    store = open_store(db_path)
    memory = Memory(store)
    order: list[str] = []
    gate = threading.Event()

    def embed(token: Any) -> None:  # how recall's indexing is handed to the background (issue 20)
        gate.wait(30)
        order.append("embedded")

    job = memory.background.submit("embeddings", "recall:u", embed)
    assert memory.wait_idle(timeout=0.01) is False  # still running: the timeout says so
    order.append("waited-briefly")
    gate.set()
    assert memory.wait_idle() is True and job.state == "done"
    assert order == ["waited-briefly", "embedded"]
    store.close()


def test_store_close_finishes_queued_work_and_refuses_more(db_path: Path | str) -> None:
    store = open_store(db_path)
    memory = Memory(store)
    done: list[str] = []
    for i in range(3):
        memory.background.submit("title", f"title:{i}", lambda token, i=i: done.append(f"job-{i}"))
    store.close()  # finishes the queued jobs before the database closes
    assert sorted(done) == ["job-0", "job-1", "job-2"]
    from core.background import BackgroundClosedError

    with pytest.raises(BackgroundClosedError, match="closed"):
        memory.background.submit("title", "title:late", lambda token: None)


def test_close_cancels_what_cannot_finish_in_time(tmp_path: Path) -> None:
    from core.background import CANCELLED, BackgroundWork

    work = BackgroundWork("test", max_workers=1)
    started, release = threading.Event(), threading.Event()

    def slow(token: Any) -> Any:
        started.set()
        release.wait(30)
        return CANCELLED if token.cancelled else "written"

    running = work.submit("observation", "om:a", slow)
    queued = work.submit("observation", "om:b", lambda token: "never")
    started.wait(30)
    threading.Timer(0.2, release.set).start()
    assert work.close(timeout=0.05) is False
    assert queued.state == "cancelled" and queued.result is None
    assert running.wait(30) and running.state == "cancelled"  # it saw its token before writing


def test_rebuilt_turns_show_the_observations_active_then_never_ones_buffered_later(db_path: Path | str) -> None:
    events: list[str] = []
    gate = Gate(events, hold=False)
    store, memory, agent, actor = make(db_path, gate)
    inputs = []
    for i in range(10):
        result = turn(agent, i)
        inputs.append(next(m.id for m in result.messages if m.role == "user"))
        assert memory.wait_idle(30)
    record = load_current(store, thread_id="t")
    assert record is not None and record.active_observations and record.buffered  # both kinds exist now
    for i, input_id in enumerate(inputs):
        rebuilt = memory.assemble(thread_id="t", as_of=input_id)
        assert rebuilt.replay is not None and rebuilt.replay.matches, i
        assert rebuilt.messages == actor.requests[i].messages, i
    # A buffered chunk never shows in a rebuilt turn: its text is not in any prompt the actor received.
    for chunk in record.buffered:
        assert all(chunk.observations not in json.dumps(r.messages, ensure_ascii=False) for r in actor.requests)
    store.close()


def test_reconstructed_turns_show_the_observations_their_own_activation_brought(db_path: Path | str) -> None:
    """Without its record (``rebuild="now"``), a turn that activated buffered chunks still shows them:
    its activation is dated after its input was stamped, before its reply. Nothing buffered later enters."""
    gate = Gate([], hold=False)
    store, memory, agent, _ = make(db_path, gate)
    inputs, activated = [], []
    for i in range(10):
        result = turn(agent, i)
        inputs.append(next(m.id for m in result.messages if m.role == "user"))
        activated.append(bool(om_notes(result).get("activated")))
        assert memory.wait_idle(30)
    assert any(activated)
    for i, input_id in enumerate(inputs):
        exact = memory.assemble(thread_id="t", as_of=input_id)
        rebuilt = memory.assemble(thread_id="t", as_of=input_id, rebuild="now")
        assert rebuilt.replay is not None and rebuilt.replay.kind == "reconstructed", i
        chunks = [[f.text for f in p.fragments if f.tag == OM_TAG and f.detail.get("part") == "chunk"]
                  for p in (exact, rebuilt)]
        assert chunks[1] == chunks[0], (i, activated[i])
    store.close()


def test_editing_an_observation_keeps_the_buffer_and_the_next_activation_keeps_the_edit(db_path: Path | str) -> None:
    """Issue 21's observation edits on a buffering row: the buffered chunks stay, the next turn and
    every later activation show the edited line, a turn from before the edit rebuilds with the old one."""
    gate = Gate([], hold=False)
    store, memory, agent, actor = make(db_path, gate)
    inputs = []
    for i in range(30):
        result = turn(agent, i)
        inputs.append(next(m.id for m in result.messages if m.role == "user"))
        assert memory.wait_idle(30)
        record = load_current(store, thread_id="t")
        if record is not None and record.active_observations and record.buffered:
            break
    assert record is not None and record.active_observations and record.buffered
    before_edit = len(inputs)
    old = next(line for line in record.active_observations.splitlines() if "Observation number" in line)
    new = "* 🔴 (09:01) Corrected by the user: the beds are cedar."
    memory.edit_observation(record.id, old, new, resource_id="u")
    edited = load_current(store, thread_id="t")
    assert edited is not None and [c.id for c in edited.buffered] == [c.id for c in record.buffered]
    activations = 0
    for i in range(len(inputs), len(inputs) + 8):
        result = turn(agent, i)
        activations += bool(om_notes(result).get("activated"))
        sent = json.dumps(actor.requests[-1].messages, ensure_ascii=False)
        assert "Corrected by the user" in sent and old.strip() not in sent, i
        assert memory.wait_idle(30)
    assert activations >= 1  # the edited log was appended to, not replaced
    assert new in load_current(store, thread_id="t").active_observations
    rebuilt = memory.assemble(thread_id="t", as_of=inputs[before_edit - 1])
    assert rebuilt.replay is not None and rebuilt.replay.matches
    assert rebuilt.messages == actor.requests[before_edit - 1].messages
    store.close()


def test_an_edit_of_lines_a_prepared_reflection_covers_drops_it(db_path: Path | str) -> None:
    """Swapped in, a reflection prepared before a delete would bring the deleted observation back."""
    reflected_inputs: list[str] = []
    inner = Gate([], hold=False)

    def observer(messages: list[dict[str, Any]], tools: Any) -> Any:
        if "OBSERVATIONS TO REFLECT ON" in str(messages[-1]["content"]):
            reflected_inputs.append(str(messages[-1]["content"]))
        return inner(messages, tools)

    store, memory, agent, _ = make(db_path, inner, observation_tokens=60)
    memory.observer_model = ScriptedModel(observer, name="observer")
    record = None
    for i in range(20):
        turn(agent, i)
        assert memory.wait_idle(30)
        record = load_current(store, thread_id="t")
        if record is not None and record.buffered_reflection:
            break
    assert record is not None and record.buffered_reflection and record.reflected_line_count
    covered = record.active_observations.splitlines()[:record.reflected_line_count]
    gone = next(line for line in covered if "Observation number" in line)
    memory.delete_observation(record.id, gone, resource_id="u")
    after = load_current(store, thread_id="t")
    assert after is not None and after.buffered_reflection is None and after.reflected_line_count == 0
    assert after.studio["events"][-1]["kind"] == "reflection-dropped"
    seen = len(reflected_inputs)
    for i in range(20, 30):
        turn(agent, i)
        assert memory.wait_idle(30)
    assert all(gone.strip() not in text for text in reflected_inputs[seen:])
    store.close()


def test_an_edit_after_the_reflected_lines_keeps_the_prepared_reflection() -> None:
    from core.observational.buffer_store import after_log_edit

    log = "Date: Mar 3, 2025\n* one\n* two\n* three"
    head = {"activeObservations": log, "bufferedReflection": "* one and two", "reflectedObservationLineCount": 3,
            "metadata": None}
    assert after_log_edit(head, log.replace("* three", "* three, corrected"), "2025-03-03T09:00:00.000Z") == {}
    dropped = after_log_edit(head, log.replace("* two", "* 2"), "2025-03-03T09:00:00.000Z")
    assert dropped["bufferedReflection"] is None and dropped["reflectedObservationLineCount"] is None
    assert "reflection-dropped" in dropped["metadata"]


def test_a_forgotten_resource_is_not_written_again_by_a_running_observer(db_path: Path | str) -> None:
    events: list[str] = []
    gate = Gate(events)
    store, memory, agent, _ = make(db_path, gate)
    turn(agent, 0)  # past buffer_tokens: the observer starts in the background
    assert gate.started.wait(30)  # and is in its model call
    memory.forget_resource("u")
    gate.release.set()
    assert memory.wait_idle(30)
    assert "observer-end-1" in events
    assert load_current(store, thread_id="t") is None
    assert not memory.forget_resource("u", dry_run=True).total
    store.close()


def test_a_crash_loses_no_message(tmp_path: Path) -> None:
    """A process killed while the observer is buffering keeps every message of every finished turn."""
    import subprocess
    import sys
    import textwrap

    db = tmp_path / "crash.db"
    script = textwrap.dedent(f"""
        import sys, threading
        from core import Agent, Memory, MemoryOptions, open_store
        from core.llm import ScriptedModel
        from core.tokens import EstimatingTokenizer
        hang = threading.Event()
        def say(line):  # one write per line: print() writes the newline apart, and two threads interleave
            sys.stdout.write(line + "\\n")
            sys.stdout.flush()
        def observer(messages, tools):
            say("observer-running")
            hang.wait()  # never returns: the process is killed here
        # block_after far away: no turn waits for the observer that never answers.
        memory = Memory(open_store({str(db)!r}), MemoryOptions(observational_memory={{
                            "message_tokens": 200, "block_after": 100_000}}),
                        observer_model=ScriptedModel(observer, name="observer"), tokenizer=EstimatingTokenizer())
        agent = Agent("a", instructions="Help.", model=ScriptedModel(lambda m, t: "Reply " + "x " * 28),
                      memory=memory, tracer=False)
        for i in range(6):
            agent.generate(f"Question {{i}}: " + "word " * 30, memory={{"resource": "u", "thread": "t"}})
            say(f"turn-{{i}}")
        say("done")
        hang.wait()
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                             cwd=str(Path(__file__).resolve().parents[2]))
    assert child.stdout is not None
    watchdog = threading.Timer(120, child.kill)  # a hung child fails the test instead of hanging it
    watchdog.start()
    seen = []
    for line in child.stdout:
        seen.append(line.strip())
        if line.strip() == "done":
            break
    child.kill()
    child.wait(30)
    watchdog.cancel()
    assert "observer-running" in seen and "done" in seen
    store = open_store(db)
    memory = Memory(store)
    stored = memory.recall(thread_id="t", per_page=False).messages
    assert len(stored) == 12  # six turns, input and reply each
    record = load_current(store, thread_id="t")
    assert record is None or not record.active_observations  # only the unfinished buffer was lost
    store.close()
