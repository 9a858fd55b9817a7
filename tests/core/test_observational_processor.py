"""Observational memory driven end to end: Memory + scripted observer + a real libSQL file."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

import pytest
import sqlalchemy as sa

from core import Memory, MemoryOptions, Message
from core.llm import ModelError, ScriptedModel
from core.observational import CONTINUATION_TEXT, TAG, load_current, load_history, messages_tokens
from core.observational.context import CONTEXT_PROMPT
from core.observational.tokens import count_text
from core.observational.observer import OBSERVER_SYSTEM_PROMPT
from core.observational.reflector import COMPRESSION_GUIDANCE, REFLECTOR_SYSTEM_PROMPT
from core.storage import Store, open_store
from core.storage import schema as t
from core.timeutil import FixedClock
from core.tokens import EstimatingTokenizer
from core.traces.tracer import InMemorySpanExporter, Tracer

# Engine behaviour: every test here runs on libSQL and on Postgres.
pytestmark = pytest.mark.backends

START = datetime(2025, 1, 2, 9, 0, tzinfo=timezone.utc)
TOKENIZER = EstimatingTokenizer()

OBSERVED = """<observations>
Date: Jan 2, 2025
* 🔴 (09:00) User is planning a garden with raised beds [garden].
* 🟡 (09:01) Assistant suggested cedar planks for the beds.
* 🟢 (09:02) User likes the smell of cedar.
</observations>

<current-task>
Primary: choosing materials for raised beds.
</current-task>

<suggested-response>
Offer a shopping list for three beds.
</suggested-response>"""


def long_text(word: str, chars: int = 200) -> str:
    return (word + " ") * (chars // (len(word) + 1))


class Harness:
    def __init__(self, db_path: Path | str, script: Any, *, tracer: Any = None, **om: Any) -> None:
        self.store: Store = open_store(db_path)
        self.observer = ScriptedModel(script if callable(script) else list(script), name="observer")
        # Synchronous observation (the mode before background buffering): tests of buffering are in
        # test_observational_buffering.py.
        settings = {"enabled": True, "message_tokens": 200, "observation_tokens": 300, "buffer_tokens": False, **om}
        self.clock = FixedClock(START, step_ms=60_000)
        self.memory = Memory(self.store, MemoryOptions(last_messages=10, observational_memory=settings),
                             observer_model=self.observer, tokenizer=TOKENIZER, clock=self.clock, tracer=tracer)

    def turn(self, text: str, reply: str | None = "ok", *, live: bool = True, thread: str = "t1") -> Any:
        req = self.memory.request_context(thread_id=thread, resource_id="u1")
        ctx = self.memory.new_context(req)
        ctx.live = live
        self.memory.prepare_input(ctx, input=text, instructions="You are a gardening helper.")
        prompt = self.memory.run_input(ctx)
        if live and reply is not None:
            ctx.messages.add(Message.assistant(reply, created_at=self.clock.now()), "response")
            ctx.finish_reason = "stop"
            self.memory.run_output(ctx)
        return prompt, ctx

    def rows(self) -> list[dict[str, Any]]:
        with self.store.db.read() as conn:
            return [dict(r) for r in conn.execute(sa.select(t.observational_memory)).mappings().all()]

    def stored(self, thread: str = "t1") -> list[Message]:
        return self.memory.recall(thread_id=thread, per_page=False).messages

    def metadata(self, thread: str = "t1") -> dict[str, Any]:
        thread_obj = self.memory.get_thread(thread)
        assert thread_obj is not None
        return thread_obj.metadata or {}


def prompt_ids(prompt: Any) -> list[str]:
    return [f.detail.get("messageId") for f in prompt.fragments if f.detail.get("messageId")]


@pytest.fixture
def harness(db_path: Path | str) -> Harness:
    return Harness(db_path, [OBSERVED])


def test_threshold_crossed_only_when_unobserved_tokens_reach_it(harness: Harness) -> None:
    harness.turn(long_text("alpha"), long_text("beta"))  # ~53 + ~53 tokens stored
    assert harness.observer.requests == []
    prompt, _ = harness.turn(long_text("gamma"), long_text("delta"))
    pending_turn2 = prompt.notes["observational-memory"]["unobservedTokens"]
    assert pending_turn2 < 200  # 2 stored + input: under the threshold, so no observer call
    assert harness.observer.requests == []
    stored = harness.stored()
    assert harness.rows()[0]["pendingMessageTokens"] == messages_tokens(TOKENIZER, stored)

    prompt, _ = harness.turn(long_text("epsilon"))
    assert messages_tokens(TOKENIZER, stored) + 53 >= 200
    assert len(harness.observer.requests) == 1
    # The four observed messages left the raw context; the current input stayed.
    ids = prompt_ids(prompt)
    assert not set(ids) & {m.id for m in stored}
    assert prompt.messages[-1] == {"role": "user", "content": long_text("epsilon")}


def test_actor_prompt_order_after_observation(harness: Harness) -> None:
    harness.turn(long_text("alpha"), long_text("beta"))
    harness.turn(long_text("gamma"), long_text("delta"))
    prompt, _ = harness.turn("What wood should I buy?")
    msgs = prompt.messages
    assert [m["role"] for m in msgs] == ["system"] * 6 + ["user", "user"]
    assert msgs[0]["content"] == "You are a gardening helper."
    assert msgs[1]["content"].startswith(CONTEXT_PROMPT)
    assert msgs[2]["content"] == "<observations>"
    chunk = msgs[3]["content"]
    assert chunk.startswith("Date: Jan 2, 2025 (today)")
    assert "🔴 (09:00) User is planning a garden with raised beds." in chunk
    assert "🟡" not in chunk and "🟢" not in chunk and "[garden]" not in chunk
    assert msgs[4]["content"] == "<current-task>\nPrimary: choosing materials for raised beds.\n</current-task>"
    assert msgs[5]["content"] == "<suggested-response>\nOffer a shopping list for three beds.\n</suggested-response>"
    assert msgs[6]["content"] == CONTINUATION_TEXT
    assert msgs[7]["content"] == "What wood should I buy?"
    om_fragments = [f for f in prompt.fragments if f.source == "observational-memory"]
    assert all(f.tag == TAG for f in om_fragments if f.role == "system")
    assert om_fragments[-1].detail["part"] == "continuation"

    # Next turn (under the threshold): the observing turn's input was observed with it (as Mastra 1.71 does), so
    # only its reply stays raw after the reminder, then the new input.
    prompt, _ = harness.turn("And for the soil?")
    roles = [m["role"] for m in prompt.messages]
    assert roles == ["system"] * 6 + ["user", "assistant", "user"]
    assert prompt.messages[6]["content"] == CONTINUATION_TEXT
    assert prompt.messages[7]["content"] == "ok"
    assert prompt.messages[8]["content"] == "And for the soil?"
    assert len(harness.observer.requests) == 1


def test_observer_call_shape(db_path: Path | str) -> None:
    h = Harness(db_path, [OBSERVED, OBSERVED.replace("cedar planks", "larch planks")])
    h.turn(long_text("alpha"), long_text("beta"))
    h.turn(long_text("gamma"), long_text("delta"))
    h.turn("What wood should I buy?", long_text("answer", 600))
    first = h.observer.requests[0]
    assert [m["role"] for m in first.messages] == ["system", "user", "user"]
    assert first.temperature == pytest.approx(0.3)
    assert first.messages[1]["content"].startswith("## Your Task")
    history = first.messages[2]["content"]
    assert history.startswith("## New Message History to Observe\n\nJan 2 2025:\nUser (9:00 AM): alpha")
    assert "\nAssistant (9:02 AM): beta" in history and "\nUser (9:03 AM): gamma" in history
    # The input that crossed the threshold is observed in its own turn (Mastra 1.71), after the stored messages.
    assert history.endswith("\nUser (9:06 AM): What wood should I buy?\n")

    h.turn(long_text("zeta"), "fine")  # crosses again: the stored answer + this input
    second = h.observer.requests[1].messages[1]["content"]
    order = [second.index("## Previous Observations"), second.index("## Prior Thread Metadata"),
             second.index("## Your Task")]
    assert order == sorted(order)
    assert "* 🔴 (09:00) User is planning a garden" in second
    assert "- prior current-task: Primary: choosing materials for raised beds." in second
    assert "- prior suggested-response: Offer a shopping list for three beds." in second
    second_history = h.observer.requests[1].messages[2]["content"]
    assert "What wood should I buy?" not in second_history  # observed once, in the turn that sent it
    assert "Assistant (9:08 AM): answer" in second_history and second_history.endswith("zeta\n")


def test_row_and_thread_metadata_after_observation(harness: Harness) -> None:
    harness.memory.create_thread(resource_id="u1", thread_id="t1",
                                 metadata={"workingMemory": "# Notes\n- likes cedar", "custom": True,
                                           "mastra": {"keep": 1}})
    harness.turn(long_text("alpha"), long_text("beta"))
    harness.turn(long_text("gamma"), long_text("delta"))
    before = harness.stored()
    _, ctx = harness.turn("What wood should I buy?", "Cedar.")
    # The input that crossed the threshold was observed in its turn, stored with that observation (Mastra 1.71).
    question = [m for m in harness.stored() if m.text == "What wood should I buy?"]
    assert len(question) == 1 and ctx.notes["observational-memory"]["inputStored"] == [question[0].id]
    observed = [*before, *question]
    rows = harness.rows()
    assert len(rows) == 1
    row = rows[0]
    assert row["lookupKey"] == "thread:t1" and row["scope"] == "thread" and row["threadId"] == "t1"
    assert row["originType"] == "initial" and row["generationCount"] == 0
    assert json.loads(row["observedMessageIds"]) == [m.id for m in observed]
    last = observed[-1]
    assert row["lastObservedAt"] == last.to_dict()["createdAt"]
    assert row["totalTokensObserved"] == messages_tokens(TOKENIZER, observed)
    assert row["observationTokenCount"] == count_text(TOKENIZER, row["activeObservations"])
    assert "(09:00) User is planning a garden with raised beds [garden]." in row["activeObservations"]  # raw kept
    # After saving the turn, only the answer is pending.
    new = [m for m in harness.stored() if m.id not in {o.id for o in observed}]
    assert [m.text for m in new] == ["Cedar."]
    assert row["pendingMessageTokens"] == messages_tokens(TOKENIZER, new)

    meta = harness.metadata()
    assert meta["workingMemory"] == "# Notes\n- likes cedar" and meta["custom"] is True
    assert meta["mastra"]["keep"] == 1
    om = meta["mastra"]["om"]
    assert om["currentTask"] == "Primary: choosing materials for raised beds."
    assert om["suggestedResponse"] == "Offer a shopping list for three beds."
    assert om["lastObservedMessageCursor"] == {"createdAt": row["lastObservedAt"], "id": last.id}
    current = load_current(harness.store, thread_id="t1")
    assert current is not None and current.id == row["id"]


def test_reflection_compresses_into_a_new_generation(db_path: Path | str) -> None:
    big_lines = "\n".join(f"* 🟡 (09:{i:02d}) User described garden bed number {i} in detail, with soil notes."
                          for i in range(40))
    big = f"<observations>\nDate: Jan 2, 2025\n{big_lines}\n</observations>"
    not_smaller = big  # the first rewrite fails to shrink: a stronger level is asked for
    small = ("<observations>\nDate: Jan 2, 2025\n* 🔴 (09:00) User is building 40 garden beds; "
             "soil notes recorded per bed.\n</observations>")
    h = Harness(db_path, [big, not_smaller, small])
    h.turn(long_text("alpha"), long_text("beta"))
    h.turn(long_text("gamma"), long_text("delta"))
    prompt, _ = h.turn("Summarise my beds.", "Done.")
    assert len(h.observer.requests) == 3  # observer, reflector level 0, reflector level 1
    level0, level1 = h.observer.requests[1], h.observer.requests[2]
    assert level0.messages[0]["content"] == REFLECTOR_SYSTEM_PROMPT
    assert level0.temperature == 0.0
    assert level0.messages[1]["content"].startswith("## OBSERVATIONS TO REFLECT ON")
    assert COMPRESSION_GUIDANCE[1] in level1.messages[1]["content"]

    history = load_history(h.store, thread_id="t1")
    assert [r.generation_count for r in history] == [1, 0]
    newest, first = history
    assert newest.origin_type == "reflection" and first.origin_type == "initial"
    assert newest.active_observations.startswith("Date: Jan 2, 2025\n* 🔴 (09:00) User is building 40")
    assert newest.observation_token_count < first.observation_token_count
    assert newest.observation_token_count < 300
    assert newest.observed_message_ids == first.observed_message_ids
    assert newest.last_reflection_at is not None
    chunk = [m["content"] for m in prompt.messages if m["content"].startswith("Date:")]
    assert chunk == ["Date: Jan 2, 2025 (today)\n* 🔴 (09:00) User is building 40 garden beds; soil notes recorded per bed."]


@pytest.mark.parametrize("failure", [ModelError("provider down", model_id="scripted/observer", status=503),
                                     "I'm sorry, I can't summarise this conversation.",
                                     "",
                                     "* 🔴 (09:00) loop\n" * 60,
                                     # a small model's reply of marks alone: it says nothing about the
                                     # messages it would replace, so they must stay raw
                                     "<observations>\n* 🟡\n</observations>",
                                     "Date: Jan 2, 2025\n* 🔴 (09:00)"])
def test_failed_observer_call_loses_nothing_and_retries(db_path: Path | str, failure: Any) -> None:
    exporter = InMemorySpanExporter()
    h = Harness(db_path, [failure, OBSERVED], tracer=Tracer(exporter))
    h.turn(long_text("alpha"), long_text("beta"))
    h.turn(long_text("gamma"), long_text("delta"))
    before_rows, before_meta, stored = h.rows(), h.metadata(), h.stored()

    prompt, ctx = h.turn("What wood should I buy?", reply=None)  # input phase only
    assert len(h.observer.requests) == 1
    # The observer call held the input too, but a failed call stores nothing: not the input either.
    assert "What wood should I buy?" in h.observer.requests[0].messages[2]["content"]
    assert [m.id for m in h.stored()] == [m.id for m in stored] and "inputStored" not in ctx.notes["observational-memory"]
    # Nothing observed; the only change is the back-off the failure left on the row (issue 19: a
    # failed observer is not asked again on every turn).
    after = h.rows()
    backoff = json.loads(after[0]["metadata"])["memoryStudio"]["observerBackoff"]
    assert backoff["failures"] == 1 and backoff["retryAt"] and backoff["error"]
    assert [{**r, "metadata": None} for r in after] == [{**r, "metadata": None} for r in before_rows]
    assert h.metadata() == before_meta
    assert {m.id for m in stored} <= set(prompt_ids(prompt))  # all still raw in the prompt
    assert CONTINUATION_TEXT not in [m["content"] for m in prompt.messages]
    assert "tried again after" in prompt.notes["observational-memory"]["observationError"]
    span = exporter.by_name("memory: observe")[-1]
    assert span.error is not None

    prompt, _ = h.turn("What wood should I buy?", "Cedar.")  # the retry succeeds
    assert len(h.observer.requests) == 2
    row = load_current(h.store, thread_id="t1")
    questions = [m for m in h.stored() if m.text == "What wood should I buy?"]
    assert len(questions) == 1  # stored once, with the observation that covers it
    assert row is not None and set(row.observed_message_ids) == {m.id for m in stored} | {questions[0].id}
    assert prompt.messages[6]["content"] == CONTINUATION_TEXT


def test_a_failures_whole_words_and_its_fix_are_kept_in_the_back_off_and_its_event(db_path: Path | str) -> None:
    """Regression (walked with SmolLM2-135M behind `memory-studio serve`): the back-off kept a failure's first 500
    characters and its event the first 300, so a timeout's hint, whose fix comes last, was shown in the Studio's
    Observations pane (and a backing-off turn's notice) as "... cap the reply (model_settings=...; memory-studio serve
    --model: --max-t": the words that say what to do for the observer were cut away. They are kept whole now (up
    to ``MAX_ERROR_CHARS``, and a longer one is marked as cut)."""
    from core.observational.buffer import MAX_ERROR_CHARS, kept_error

    hint = ("raise the timeout (the model's timeout=...; memory-studio serve --model takes --model-timeout): a local "
            "server may still be loading the model; or check that the server is responding; the request set no "
            "max_tokens, and a small local model may write until its context is full: cap the reply "
            "(model_settings={'max_tokens': 512}; memory-studio serve --model: --max-tokens)")
    failure = ModelError("POST http://127.0.0.1:18934/v1/chat/completions failed: no response within 60s",
                         model_id="llamacpp/smollm2-135m", hint=hint)
    h = Harness(db_path, [failure, OBSERVED])
    h.turn(long_text("alpha"), long_text("beta"))
    h.turn(long_text("gamma"), long_text("delta"))
    prompt, _ = h.turn("What wood should I buy?", reply=None)
    studio = json.loads(h.rows()[0]["metadata"])["memoryStudio"]
    fix = "observational_memory={'max_output_tokens': 2000} (memory-studio serve: --om-max-output-tokens 2000)"
    assert len(studio["observerBackoff"]["error"]) > 500 and studio["observerBackoff"]["error"].endswith(fix)
    assert studio["events"][-1]["error"].endswith(fix)
    assert fix in prompt.notes["observational-memory"]["observationError"]
    long = "x" * (MAX_ERROR_CHARS + 10)
    assert kept_error(long) == "x" * (MAX_ERROR_CHARS - 1) + "…" and kept_error("short") == "short"


_LINES = "<observations>\nDate: Jan 2, 2025\n* 🔴 (09:00) User is building 40 garden beds.\n* 🟡 (09:01) User"


@pytest.mark.parametrize("role, text, usage, cap, window, said, todo", [
    # a usable reply at the cap: raise the cap
    ("observer", _LINES, (700, 300), 300, 4096, "at observational_memory max_output_tokens (300)",
     "raise observational_memory={'max_output_tokens': ...} (memory-studio serve: --om-max-output-tokens N)"),
    # usable, no cap, the server's usage fills the model's window: a larger context or shorter requests
    ("observer", _LINES, (1500, 548), None, 2048, "at the end of the model's 2,048-token context (a request of 1,500 "
     "tokens, 548 written)", "give the server a larger context (llama.cpp --ctx-size, vLLM --max-model-len, Ollama "
     "num_ctx), or a smaller observational_memory max_tokens_per_batch for shorter requests"),
    # the reflector has no batches to shrink
    ("reflector (level 1)", _LINES, (1500, 548), None, 2048, "the reflector (level 1) reply was cut off at the end",
     "(llama.cpp --ctx-size, vLLM --max-model-len, Ollama num_ctx)"),
    # no cap, no window: the server's own limit, whichever it was
    ("observer", _LINES, None, None, None, "at the server's own limit (its reply limit or the end of its context: no "
     "max_output_tokens was set)", "give the server a larger reply limit or context (llama.cpp --n-predict and "
     "--ctx-size, Ollama num_predict and num_ctx), or a model that writes less"),
    # unusable before the cut: another model, whatever the limit
    ("reflector (level 0)", "🟡\n\n" * 40, (700, 300), 300, 4096, "at observational_memory max_output_tokens (300)",
     "not usable either (the reply repeats itself (degenerate output); it was discarded): the model did not write "
     "the reflector's format and end it, so a larger limit may not help; give the reflector a model that does: "
     "observational_memory={'reflector_model': ...} (memory-studio serve: --om-model PROVIDER/MODEL)"),
])
def test_a_cut_off_reply_names_the_limit_it_hit_and_what_helps(role: str, text: str, usage: Any, cap: Any,
                                                               window: Any, said: str, todo: str) -> None:
    from core.llm.base import Usage
    from core.observational.jobs import cut_off_reply

    counted = Usage(usage[0], usage[1], usage[0] + usage[1]) if usage else None
    reason = cut_off_reply(role, text, counted, cap, window)
    assert said in reason and reason.endswith(todo), reason


def test_reflection_of_marks_alone_keeps_the_log(db_path: Path | str) -> None:
    """A reflector reply with no text ("🔴") is smaller than any log; taken, it would replace the
    whole memory with nothing. It is refused at every level and the generation stays."""
    big_lines = "\n".join(f"* 🟡 (09:{i:02d}) User described garden bed number {i} in detail, with soil notes."
                          for i in range(40))
    big = f"<observations>\nDate: Jan 2, 2025\n{big_lines}\n</observations>"
    empty = "<observations>\n* 🔴\n</observations>"
    h = Harness(db_path, [big, empty, empty], max_compression_level=1)
    h.turn(long_text("alpha"), long_text("beta"))
    h.turn(long_text("gamma"), long_text("delta"))
    prompt, _ = h.turn("Summarise my beds.", "Done.")
    assert len(h.observer.requests) == 3  # observer, reflector levels 0 and 1
    history = load_history(h.store, thread_id="t1")
    assert [r.generation_count for r in history] == [0]
    assert "garden bed number 39" in history[0].active_observations
    assert "garden bed number 39" in "\n".join(m["content"] for m in prompt.messages if m["role"] == "system")


def test_preview_never_writes_or_calls_the_model(harness: Harness) -> None:
    harness.turn(long_text("alpha"), long_text("beta"))
    harness.turn(long_text("gamma"), long_text("delta"))
    rows, meta, count = harness.rows(), harness.metadata(), len(harness.stored())
    prompt = harness.memory.assemble(thread_id="t1", resource_id="u1", input=long_text("epsilon"))
    assert harness.observer.requests == []
    assert harness.rows() == rows and harness.metadata() == meta and len(harness.stored()) == count
    note = prompt.notes["observational-memory"]["observation"]
    assert note.startswith("preview: an observation would run now:") and "≥ 200" in note
    assert len(prompt_ids(prompt)) == 5  # four raw stored messages and the input


def test_read_only_turn_defers_observation(harness: Harness) -> None:
    harness.turn(long_text("alpha"), long_text("beta"))
    harness.turn(long_text("gamma"), long_text("delta"))
    req = harness.memory.request_context(thread_id="t1", resource_id="u1", options={"read_only": True})
    ctx = harness.memory.new_context(req)
    ctx.live = True
    harness.memory.prepare_input(ctx, input=long_text("epsilon"))
    prompt = harness.memory.run_input(ctx)
    assert harness.observer.requests == []
    assert prompt.notes["observational-memory"]["observation"].startswith("read-only turn:")


def test_resource_scope_uses_resource_key(db_path: Path | str) -> None:
    h = Harness(db_path, [OBSERVED], scope="resource")
    h.turn(long_text("alpha"), long_text("beta"))
    h.turn(long_text("gamma"), long_text("delta"))
    h.turn("Next?", "Sure.")
    (row,) = h.rows()
    assert row["lookupKey"] == "resource:u1" and row["threadId"] is None and row["resourceId"] == "u1"
    # A second thread of the same user sees the observations, and none of t1's raw messages.
    prompt, _ = h.turn("Hello from another thread", thread="t2")
    assert any(m["content"] == "<observations>" for m in prompt.messages)
    assert prompt_ids(prompt)[-1] and len(prompt_ids(prompt)) == 2  # reminder + input


def test_a_small_context_window_drops_observations_with_what_frames_them(db_path: Path | str) -> None:
    # Regression: fitting a prompt into a small window dropped the continuation reminder first (as
    # "the oldest history message") and then the header that says what the notes are, and sent the
    # observation chunks bare. Now the log's chunks go oldest first, and the last one takes the header,
    # the hints and the reminder with it: observations never arrive without their framing.
    from core.agent import Agent
    from core.context_window import PromptBudget

    h = Harness(db_path, [OBSERVED, OBSERVED.replace("garden", "orchard").replace("cedar", "oak")])
    for i in range(6):
        h.turn(long_text(f"w{i}"), long_text(f"r{i}"))
    assert len(h.observer.requests) == 2

    def preview(limit: int | None) -> Any:
        budget = None if limit is None else PromptBudget(limit + 10, 10, "m")
        return h.memory.assemble(thread_id="t1", resource_id="u1", input="Next?",
                                 instructions="You are a gardening helper.", budget=budget)

    def parts(prompt: Any) -> list[str]:
        return [f.detail.get("part") or "raw" for f in prompt.fragments if f.source == "observational-memory"]

    full = preview(None)
    # (Each observing turn observed its own input too: what is left raw is the fifth reply and the last turn.)
    assert parts(full) == ["instructions", "open", "chunk", "chunk", "current-task", "suggested-response",
                           "continuation", "raw", "raw", "raw"]
    raw = sum(f.tokens for f in full.fragments if f.source == "observational-memory" and "part" not in f.detail)
    oldest_chunk = next(f for f in full.fragments if f.detail.get("part") == "chunk").tokens
    # Room for everything but the raw messages and half the oldest chunk: the raw messages go (history,
    # oldest first), then the oldest chunk; the header, the newest chunk, the hints and the reminder stay.
    fitted = preview(full.total_tokens - raw - oldest_chunk // 2)
    assert parts(fitted) == ["instructions", "open", "chunk", "current-task", "suggested-response", "continuation"]
    assert fitted.messages[-2]["content"] == CONTINUATION_TEXT and fitted.messages[-1]["content"] == "Next?"
    assert "observational memory: the oldest 1 chunk of observations" in fitted.skipped["context-window"]
    # One token less than the framing and the newest chunk need: no observation is sent, nor the framing.
    bare = preview(full.total_tokens - raw - oldest_chunk - 1)
    assert parts(bare) == []
    assert "every observation (2 chunks) with the header, task hints and reminder" in bare.skipped["context-window"]
    assert [m["content"] for m in bare.messages] == ["You are a gardening helper.", "Next?"]

    # A live turn with such a window sends exactly what its record shows, and the record rebuilds it.
    actor = ScriptedModel(["Oak."], name="actor", context_window=2_000)
    agent = Agent("gardener", instructions="You are a gardening helper.", model=actor, memory=h.memory, tracer=False)
    window = 600
    while PromptBudget.for_model(window, max_tokens=None, model_id="m").prompt_limit < \
            full.total_tokens - raw - oldest_chunk // 2:
        window += 1
    actor.context_window = window
    result = agent.generate("Next?", memory={"resource": "u1", "thread": "t1"})
    sent = actor.requests[-1].messages
    assert sent == result.prompts[0].messages
    om = [f.detail.get("part") for f in result.prompts[0].fragments
          if f.source == "observational-memory" and f.role == "system"]
    assert om and om[0] == "instructions" and "chunk" in om
    assert CONTINUATION_TEXT in [m["content"] for m in sent]
    rebuilt = h.memory.assemble(as_of=result.messages[0].id, resource_id="u1")
    assert rebuilt.replay is not None and rebuilt.replay.matches and rebuilt.messages == sent


def test_a_turn_fitted_before_observations_were_framed_units_rebuilds_as_it_was_sent(
        db_path: Path | str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A turn recorded by the engine before this rule (its record has no ``od``) was fitted message by
    # message: the continuation reminder went first, as the oldest history message. Its rebuild must
    # fit it the same way, or an exact turn would show as changed.
    import core.assembly
    from core.agent import Agent
    from core.context_window import PromptBudget, fit_prompt
    from core.observational.context import LEGACY_DATES
    from core.processors import observational as om_processor

    h = Harness(db_path, [OBSERVED, OBSERVED.replace("garden", "orchard").replace("cedar", "oak")])
    for i in range(6):
        h.turn(long_text(f"w{i}"), long_text(f"r{i}"))
    full = h.memory.assemble(thread_id="t1", resource_id="u1", input="Next?", instructions="You are a gardening helper.")
    raw = sum(f.tokens for f in full.fragments if f.source == "observational-memory" and "part" not in f.detail)
    oldest_chunk = next(f for f in full.fragments if f.detail.get("part") == "chunk").tokens
    window = 600
    while PromptBudget.for_model(window, max_tokens=None, model_id="m").prompt_limit < \
            full.total_tokens - raw - oldest_chunk // 2:
        window += 1

    def as_before(*args: Any, **kwargs: Any) -> Any:
        kwargs["observations_whole"] = False
        return fit_prompt(*args, **kwargs)

    monkeypatch.setattr(core.assembly, "fit_prompt", as_before)
    monkeypatch.setattr(om_processor, "DATE_STYLE", LEGACY_DATES)
    actor = ScriptedModel(["Oak."], name="actor", context_window=window)
    agent = Agent("gardener", instructions="You are a gardening helper.", model=actor, memory=h.memory, tracer=False)
    result = agent.generate("Next?", memory={"resource": "u1", "thread": "t1"})
    monkeypatch.undo()
    sent = actor.requests[-1].messages
    assert CONTINUATION_TEXT not in [m["content"] for m in sent], "the old fit dropped the reminder first"
    with h.store.db.write() as conn:
        raw_record = conn.exec_driver_sql("SELECT record FROM memory_studio_turns WHERE input_message_id = ?",
                                          (result.messages[0].id,)).scalar()
        data = json.loads(raw_record)
        del data["od"]
        conn.exec_driver_sql("UPDATE memory_studio_turns SET record = ? WHERE input_message_id = ?",
                             (json.dumps(data), result.messages[0].id))
    rebuilt = h.memory.assemble(as_of=result.messages[0].id, resource_id="u1")
    assert "om-continuation" in data["hd"], "the old fit named the reminder among the dropped history"
    assert rebuilt.replay is not None and rebuilt.replay.matches and rebuilt.messages == sent
    assert rebuilt.replay.unknowns == (), "the reminder is made again, not a stored message gone missing"


def test_an_uncapped_observer_that_times_out_is_told_where_its_cap_is(db_path: Path | str) -> None:
    # Regression (seen with SmolLM2 on llama.cpp): the observer's call set no reply length and timed
    # out; the error said to cap the reply with model_settings={'max_tokens': ...}, which only reaches
    # the agent's own calls. It now names observational memory's own setting too.
    from core.llm import LoopbackServer, OpenAICompatibleModel, RetryPolicy

    with LoopbackServer(ScriptedModel([OBSERVED])) as server:
        observer = OpenAICompatibleModel("observer", base_url=server.base_url, environ={}, keyring_service=None,
                                         retry=RetryPolicy(max_retries=0))
        h = Harness(db_path, [])
        h.memory = Memory(h.store, MemoryOptions(observational_memory={
            "enabled": True, "message_tokens": 200, "buffer_tokens": False, "timeout": 0.2}),
            observer_model=observer, tokenizer=TOKENIZER, clock=h.clock)
        h.turn(long_text("alpha"), long_text("beta"))
        h.turn(long_text("gamma"), long_text("delta"))
        server.stall_next()
        try:
            prompt, _ = h.turn(long_text("epsilon"))
        finally:
            server.release()
    error = prompt.notes["observational-memory"]["observationError"]
    assert "no response within 0.2s" in error and "model_settings={'max_tokens': 512}" in error
    assert "observational_memory={'max_output_tokens': 2000}" in error
    assert [m.id for m in h.stored()[:4]] == prompt_ids(prompt)[:4]  # the messages stay raw


def _over_the_servers_context(db_path: Path | str, context_window: int | None) -> tuple[str, Harness, Any]:
    """A turn whose observer call a server refuses as over its 1,024-token context: the error noted, and the turn."""
    from core.llm import LoopbackServer, OpenAICompatibleModel, RetryPolicy

    with LoopbackServer(ScriptedModel([OBSERVED])) as server:
        observer = OpenAICompatibleModel("observer", base_url=server.base_url, environ={}, keyring_service=None,
                                         retry=RetryPolicy(max_retries=0), context_window=context_window)
        h = Harness(db_path, [])
        h.memory = Memory(h.store, MemoryOptions(observational_memory={
            "enabled": True, "message_tokens": 200, "buffer_tokens": False}),
            observer_model=observer, tokenizer=TOKENIZER, clock=h.clock)
        h.turn(long_text("alpha"), long_text("beta"))
        h.turn(long_text("gamma"), long_text("delta"))
        server.fail_next(1, 400, message="request (1791 tokens) exceeds the available context size (1024 tokens), "
                                         "try increasing it")
        prompt, _ = h.turn(long_text("epsilon"))
    return prompt.notes["observational-memory"]["observationError"], h, prompt


def test_an_observer_request_over_the_servers_context_says_what_fits_it(db_path: Path | str) -> None:
    # Regression (seen with SmolLM2 on llama.cpp, --ctx-size 1024, the model given context_window=1024): the
    # observer's request of 1,791 tokens was refused, and the error said the server counts more tokens than the
    # engine's estimate, "give a smaller context_window (now 1,024, e.g. 870)". The observer's request was not
    # fitted to context_window at all then (its instructions, the observations so far and every message it observed
    # went whole), so a smaller one only cut more of each turn's memory, and the observer failed the same way.
    error, h, prompt = _over_the_servers_context(db_path, 1024)
    assert "exceeds the available context size (1024 tokens)" in error  # the server's own words stay
    assert "smaller context_window" not in error and "e.g. 870" not in error
    # Since observer calls are cut to the window (max_tokens_per_batch), the hint says what is over it here: the
    # observer's instructions alone (723 tokens of system prompt) do not leave room in 1,024 minus the reply.
    assert "the observer's calls are cut to fit openai-compatible/observer's 1,024-token context window" in error
    assert "666 tokens for the request" in error and "its instructions with the observations' tail and hints alone" \
        in error and "--ctx-size" in error
    assert "observational_memory's observer_model to a model with a larger one" in error
    assert "the messages stay raw" in error
    assert [m.id for m in h.stored()[:4]] == prompt_ids(prompt)[:4]  # nothing lost: the messages stay raw


def test_an_observer_without_a_window_over_the_servers_context_is_told_to_give_one(db_path: Path | str) -> None:
    # The observer's model says no context_window: its calls are cut by max_tokens_per_batch only, so the hint asks
    # for the window (which makes the engine cut each call to fit) or a larger context.
    error, h, prompt = _over_the_servers_context(db_path, None)
    assert "exceeds the available context size (1024 tokens)" in error
    assert "smaller context_window" not in error
    assert "the observer's request is not fitted to a context window, as its model says none" in error
    assert "give the observer model its context_window" in error and "--ctx-size" in error
    assert [m.id for m in h.stored()[:4]] == prompt_ids(prompt)[:4]


def test_a_reply_cut_off_at_the_length_cap_is_not_used(db_path: Path | str) -> None:
    # Regression (seen with SmolLM2 as reflector, max_output_tokens 300): the reflector's rewrite ended
    # at the length cap, mid-line, and was taken as the new log: the observations after the cut (and the
    # date header) were gone. A cut-off observer reply would likewise let its messages leave the context
    # half described. Such a reply is now refused; the reflector tries its next, shorter level.
    from core.llm import ScriptedReply

    big_lines = "\n".join(f"* 🟡 (09:{i:02d}) User described garden bed number {i} in detail, with soil notes."
                          for i in range(40))
    big = f"<observations>\nDate: Jan 2, 2025\n{big_lines}\n</observations>"
    cut = ScriptedReply("<observations>\nDate: Jan 2, 2025\n* 🟡 (09:00) User described garden bed number 0 in",
                        finish_reason="length")
    small = ("<observations>\nDate: Jan 2, 2025\n* 🔴 (09:00) User is building 40 garden beds; "
             "soil notes recorded per bed.\n</observations>")
    h = Harness(db_path, [cut, big, cut, small], max_output_tokens=300)
    h.turn(long_text("alpha"), long_text("beta"))
    h.turn(long_text("gamma"), long_text("delta"))
    prompt, _ = h.turn("Which beds?", "Some.")  # the threshold is reached: the observer's reply is cut off
    error = prompt.notes["observational-memory"]["observationError"]
    assert "the observer reply was cut off at observational_memory max_output_tokens (300)" in error
    assert set(prompt_ids(prompt)) >= {m.id for m in h.stored()[:4]}  # nothing observed: the messages stay raw
    prompt, _ = h.turn("Summarise my beds.", "Done.")  # past the back-off: observed, then reflected
    attempts = prompt.notes["observational-memory"]["reflected"]["attempts"]
    assert "the reflector (level 0) reply was cut off" in attempts[0]["problem"] and attempts[1]["problem"] is None
    current = load_current(h.store, thread_id="t1")
    assert current is not None
    assert current.active_observations.startswith("Date: Jan 2, 2025\n* 🔴 (09:00) User is building 40 garden beds")


# What a small model may write as observer (SmolLM2-135M on llama.cpp copies its request back): its
# instructions' example copied into the tags, with the example's placeholder task and response.
_EXAMPLE = OBSERVER_SYSTEM_PROMPT[OBSERVER_SYSTEM_PROMPT.index("<observations>\nDate: Mar 3"):]
EXAMPLE_ECHO = "\n".join(  # its first two observations, the example's placeholder task and response
    line for line in _EXAMPLE[: _EXAMPLE.index("</suggested-response>") + len("</suggested-response>")].splitlines()
    if not line.lstrip().startswith(("* 🟢", "* ✅", "* ->")))


def test_an_observer_reply_that_copies_its_instructions_example_is_not_used(db_path: Path | str) -> None:
    """Regression: the example of the observer's instructions, copied back by a small model, was taken
    as the observations of the garden conversation: the messages left the context and the agent
    "remembered" a talk on tide pools, with the example's placeholder as the thread's current task."""
    h = Harness(db_path, [EXAMPLE_ECHO, OBSERVED])
    h.turn(long_text("alpha"), long_text("beta"))
    h.turn(long_text("gamma"), long_text("delta"))
    stored = h.stored()
    prompt, _ = h.turn("What wood should I buy?", "Cedar.")
    assert len(h.observer.requests) == 1
    error = prompt.notes["observational-memory"]["observationError"]
    assert "copies lines of its instructions or of the messages it was given" in error
    system = "\n".join(m["content"] for m in prompt.messages if m["role"] == "system")
    assert "tide pools" not in system
    assert {m.id for m in stored} <= set(prompt_ids(prompt))  # nothing observed: the messages stay raw
    assert "currentTask" not in h.metadata().get("mastra", {}).get("om", {})
    row = load_current(h.store, thread_id="t1")
    assert row is None or not row.active_observations

    prompt, _ = h.turn("And the screws?", "Brass.")  # past the back-off: a real observation is taken
    row = load_current(h.store, thread_id="t1")
    assert row is not None and "raised beds" in row.active_observations


def test_an_observer_reply_that_repeats_the_log_adds_only_its_new_lines(db_path: Path | str) -> None:
    """Regression: a small model given "## Previous Observations" wrote them back with one new line;
    the log gained a second copy of every earlier line each time it observed (and reached the
    reflector twice as fast). Copied lines are left out; a reply of copies alone is not used."""
    again = OBSERVED.replace("</observations>",
                             "* 🟡 (09:10) User asked about brass screws for the beds.\n</observations>")
    only_copies = OBSERVED.replace("<observations>", "<observations>\n## Previous Observations\n")
    h = Harness(db_path, [OBSERVED, only_copies, again], observation_tokens=5000)
    for i in range(3):
        h.turn(long_text(f"alpha{i}"), long_text(f"beta{i}"))
    row = load_current(h.store, thread_id="t1")
    assert row is not None and row.active_observations.count("raised beds") == 1
    first = row.active_observations
    for i in range(2):
        prompt, _ = h.turn(long_text(f"gamma{i}"), long_text(f"delta{i}"))
    assert len(h.observer.requests) == 2
    assert "copies lines of its instructions or of the messages it was given" in \
        prompt.notes["observational-memory"]["observationError"]
    row = load_current(h.store, thread_id="t1")
    assert row is not None and row.active_observations == first
    for i in range(2):
        h.turn(long_text(f"eps{i}"), long_text(f"zeta{i}"))
    row = load_current(h.store, thread_id="t1")
    assert row is not None and len(h.observer.requests) == 3
    log = row.active_observations
    assert log.count("User is planning a garden with raised beds") == 1
    assert log.count("brass screws") == 1 and "Previous Observations" not in log


def test_a_preview_while_the_observer_backs_off_says_so_and_promises_no_observation(db_path: Path | str) -> None:
    """Regression (the Prompt Inspector over a thread whose small-model observer had just failed): the
    preview of the next turn said "preview: an observation would run now", but the turn, backing off,
    observes nothing; the back-off and its cause were not among the preview's notes at all."""
    h = Harness(db_path, ["not observations at all", OBSERVED])
    h.turn(long_text("alpha"), long_text("beta"))
    h.turn(long_text("gamma"), long_text("delta"))
    h.clock._step_ms = 1000  # from here the clock moves a second a reading: the preview is inside the back-off
    h.turn("What wood should I buy?", "Cedar.")  # the observer's reply is refused: a 30 s back-off
    assert len(h.observer.requests) == 1
    prompt = h.memory.assemble(thread_id="t1", resource_id="u1", input=long_text("epsilon"))
    notes = prompt.notes["observational-memory"]
    assert "observation" not in notes
    assert "backing off until" in notes["observationError"] and "observer reply unusable" in notes["observationError"]
    assert len(h.observer.requests) == 1


def test_a_rewrite_that_copies_the_reflectors_request_keeps_only_the_notes(db_path: Path | str) -> None:
    """Regression (SmolLM2-135M as reflector on llama.cpp, read on the wire): its rewrite ended with the
    request's own sentence, "Rewrite these notes into a shorter, better organised version. …", which a
    rewrite small enough to be taken carried into the new generation, the agent's whole memory."""
    big_lines = "\n".join(f"* 🟡 (09:{i:02d}) User described garden bed number {i} in detail, with soil notes."
                          for i in range(40))
    big = f"<observations>\nDate: Jan 2, 2025\n{big_lines}\n</observations>"
    echo = ("Date: Jan 2, 2025\n* 🔴 (09:00) User is building 40 garden beds; soil notes recorded per bed.\n\n"
            "Rewrite these notes into a shorter, better organised version. It will become the assistant's "
            "entire memory from now on.\n\n## COMPRESSION NEEDED")
    h = Harness(db_path, [big, echo])
    h.turn(long_text("alpha"), long_text("beta"))
    h.turn(long_text("gamma"), long_text("delta"))
    prompt, _ = h.turn("Summarise my beds.", "Done.")
    assert prompt.notes["observational-memory"]["reflected"]
    current = load_current(h.store, thread_id="t1")
    assert current is not None and current.generation_count == 1
    assert "User is building 40 garden beds" in current.active_observations
    assert "Rewrite these notes" not in current.active_observations
    assert "COMPRESSION" not in current.active_observations


def test_a_rewrite_that_copies_the_reflectors_separator_leaves_it_out_of_the_log(db_path: Path | str) -> None:
    """Regression (SmolLM2-135M as reflector on llama.cpp behind a recording proxy,
    ``bench/om_reflector_llm.py``): its rewrite ended with the "---" that separates the log from the
    request's instructions, and the new generation, the agent's whole memory, kept that line."""
    big_lines = "\n".join(f"* 🟡 (09:{i:02d}) User described garden bed number {i} in detail, with soil notes."
                          for i in range(40))
    big = f"<observations>\nDate: Jan 2, 2025\n{big_lines}\n</observations>"
    echo = "Date: Jan 2, 2025\n* 🔴 (09:00) User is building 40 garden beds; soil notes recorded per bed.\n\n---"
    h = Harness(db_path, [big, echo])
    h.turn(long_text("alpha"), long_text("beta"))
    h.turn(long_text("gamma"), long_text("delta"))
    prompt, _ = h.turn("Summarise my beds.", "Done.")
    assert prompt.notes["observational-memory"]["reflected"]
    sent = [str(r.messages[-1]["content"]) for r in h.observer.requests]
    assert "\n---\n" in sent[-1]  # the reflector's request: the separator its reply copied
    current = load_current(h.store, thread_id="t1")
    assert current is not None and current.generation_count == 1
    assert "User is building 40 garden beds" in current.active_observations
    assert "---" not in [ln.strip() for ln in current.active_observations.splitlines()]


def test_stray_tags_of_our_own_in_an_observer_reply_stay_out_of_the_log(db_path: Path | str) -> None:
    """Regression (a small model as observer, SmolLM2-135M, its replies tried on the parser): a stray
    closing tag the section reader did not consume (a misspelt ``</observation>``, another section's
    ``</current-task>``, one at a line's end) stayed in the observation log, the agent's memory, and
    in every later prompt. Our own tags at a line's edges are dropped; the lines, and a tag inside a
    line's text, stay."""
    reply = """<observations>
Date: Jan 2, 2025
* 🔴 (09:00) User is planning a garden with raised beds [garden].</observation>
</observation>
* 🟡 (09:01) User asked why their web page ends with </observation> in its source.
</current-task>
<observations>
* 🟢 (09:02) User likes the smell of cedar.
</observations >
<current-task>
Primary: choosing materials for raised beds.
</current-task></current-task>
</observations>"""
    h = Harness(db_path, [reply])
    h.turn(long_text("alpha"), long_text("beta"))
    h.turn(long_text("gamma"), long_text("delta"))
    prompt, _ = h.turn("What wood should I buy?", "Cedar.")
    assert len(h.observer.requests) == 1 and "observationError" not in prompt.notes["observational-memory"]
    row = load_current(h.store, thread_id="t1")
    assert row is not None
    assert row.active_observations == (
        "Date: Jan 2, 2025\n"
        "* 🔴 (09:00) User is planning a garden with raised beds [garden].\n"
        "* 🟡 (09:01) User asked why their web page ends with </observation> in its source.\n\n"
        "* 🟢 (09:02) User likes the smell of cedar.")
    assert h.metadata()["mastra"]["om"]["currentTask"] == "Primary: choosing materials for raised beds."
    system = "\n".join(m["content"] for m in prompt.messages if m["role"] == "system")
    assert "</current-task></current-task>" not in system and "raised beds [garden].</observation>" not in system


def test_a_reflectors_back_off_counts_from_when_its_calls_failed_not_from_the_turns_start(
        db_path: Path | str) -> None:
    """Regression (SmolLM2-135M as reflector on llama.cpp behind a recording proxy,
    ``bench/om_reflector_llm.py``): a reflection's two levels took 3.5 minutes and failed; the 30-second
    back-off was counted from the turn's start, so it had expired before it was written, and the next
    turn waited 3.5 minutes for the same failing calls again. It counts from the failure now."""
    from core.observational.buffer import BACKOFF_BASE
    from core.timeutil import parse_iso

    big_lines = "\n".join(f"* 🟡 (09:{i:02d}) User described garden bed number {i} in detail, with soil notes."
                          for i in range(40))
    big = f"<observations>\nDate: Jan 2, 2025\n{big_lines}\n</observations>"
    failed_at: list[Any] = []

    def model(messages: Any, _tools: Any) -> str:
        if "OBSERVATIONS TO REFLECT ON" not in str(messages[-1]["content"]):
            return big
        for _ in range(10):  # the reflector's call takes ten minutes of the turn's clock
            h.clock.now()
        failed_at.append(h.clock.now())
        return "no notes here"

    h = Harness(db_path, model, max_compression_level=0)
    h.turn(long_text("alpha"), long_text("beta"))
    h.turn(long_text("gamma"), long_text("delta"))
    prompt, _ = h.turn("Summarise my beds.", "Done.")
    assert "reflectionError" in prompt.notes["observational-memory"] and len(failed_at) == 1
    current = load_current(h.store, thread_id="t1")
    assert current is not None and current.generation_count == 0
    backoff = current.studio["reflectorBackoff"]
    assert parse_iso(backoff["retryAt"]) >= failed_at[0] + BACKOFF_BASE
    event = [e for e in current.studio["events"] if e["kind"] == "reflector-failed"][-1]
    assert parse_iso(event["at"]) >= failed_at[0]


def test_a_reflection_that_fails_at_every_level_says_each_reason_once_with_its_levels(db_path: Path | str) -> None:
    """Regression (SmolLM2-135M as reflector on llama.cpp): every compression level's rewrite ended at
    the cap, and the reflection error repeated the same cut-off sentence once per level (~1,900
    characters in the turn's notes, the row's events and the trace). Each reason is said once, with
    the levels it stopped."""
    from core.llm import ScriptedReply

    big_lines = "\n".join(f"* 🟡 (09:{i:02d}) User described garden bed number {i} in detail, with soil notes."
                          for i in range(40))
    big = f"<observations>\nDate: Jan 2, 2025\n{big_lines}\n</observations>"
    cut = ScriptedReply("<observations>\nDate: Jan 2, 2025\n* 🟡 (09:00) User described garden bed number 0 in",
                        finish_reason="length")
    h = Harness(db_path, [big, cut, cut, "no notes here", cut, big], max_output_tokens=300)
    h.turn(long_text("alpha"), long_text("beta"))
    h.turn(long_text("gamma"), long_text("delta"))
    prompt, _ = h.turn("Summarise my beds.", "Done.")
    assert len(h.observer.requests) == 6  # the observer, then the reflector's levels 0-4
    error = prompt.notes["observational-memory"]["reflectionError"]
    cut_off = ("the reflector reply was cut off at observational_memory max_output_tokens (300) (finish reason "
               "'length'), so its last lines are missing and none of it was used; raise "
               "observational_memory={'max_output_tokens': ...} (memory-studio serve: --om-max-output-tokens N)")
    assert error.startswith(
        f"no usable rewrite (levels 0, 1, 3: {cut_off}; level 2: the reply has no <observations> section and no "
        "observation lines; level 4: ")
    assert error.count("was cut off") == 1 and "not smaller" in error, error
    attempts = prompt.notes["observational-memory"]["reflectionAttempts"]  # each level's own reason stays
    assert [a["level"] for a in attempts] == [0, 1, 2, 3, 4]
    assert "the reflector (level 3) reply was cut off" in attempts[3]["problem"] and attempts[4]["tokens"]
    assert load_current(h.store, thread_id="t1").generation_count == 0  # type: ignore[union-attr]
