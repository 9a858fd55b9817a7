"""The playgrounds' pure logic: transcript entries and memory lines (chat), list captions, the one way
forward and the why-not text (recall), and the turn runner on a real libSQL file (no Qt)."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timezone

import pytest

from core import Memory, MemoryOptions, Message, open_store
from core.embedding import HashingEmbedder
from core.llm import ModelError, ScriptedModel
from core.recall import RecallIndex
from core.recall.explain import Candidate, Inspection, explain_message, inspect_search
from studio import chat_runner
from studio.chat_runner import ChatRequest, TurnStopped
from studio.logic import chat_layout, recall_layout
from studio.logic.message_format import MessageRow
from studio.selection import Selection

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)


def row(id: str, role: str, text: str) -> MessageRow:
    return MessageRow(id, role, T0, text, ("text",), None)


def test_transcript_links_every_message_to_its_turn_and_streams_into_the_last_entry():
    entries = chat_layout.entries_from_rows([row("u1", "user", "hi <b>"), row("a1", "assistant", "hello"),
                                             row("s1", "system", "hidden"), row("u2", "user", "again")])
    assert [(e.id, e.turn_id) for e in entries] == [("u1", "u1"), ("a1", "u1"), ("u2", "u2")]
    html = chat_layout.transcript_html(entries)
    assert "prompt:u1" in html and "prompt:u2" in html and "hi &lt;b&gt;" in html
    streaming = [*entries, chat_layout.Entry("assistant", "", "u3", None, "streaming")]
    assert "waiting for the model" in chat_layout.transcript_html(streaming)
    grown = chat_layout.with_delta(chat_layout.with_delta(streaming, "Hel"), "lo")
    assert grown[-1].text == "Hello" and grown[:-1] == streaming[:-1]
    assert chat_layout.with_delta(entries, "x") == entries  # nothing streaming: nothing changes
    gone = chat_layout.failed(grown, "u3", "not saved")
    assert gone[-1].state == "failed" and "not saved" in chat_layout.transcript_html(gone)
    assert "prompt:u3" not in chat_layout.transcript_html(gone)  # a turn that was not saved has no prompt


def test_only_the_reply_coming_in_has_the_typing_mark_and_it_says_what_it_waits_for():
    """The user's message sent with the turn was drawn with the reply's typing mark ("What is left to do? ▍"), as
    if the user were still typing it; and what the reply waits for follows the turn (``chat_runner.waiting_for``)."""
    from studio.chat_runner import waiting_for

    sent = [chat_layout.Entry("user", "What is left to do?", "u1", "u1", "streaming"),
            chat_layout.Entry("assistant", "", "u1", None, "streaming")]
    html = chat_layout.transcript_html(sent)
    assert html.count("▍") == 1 and html.index("▍") > html.index("waiting for the model")
    observing = waiting_for("memory_operation", {"operationType": "observe", "messages": 4, "tokens": 1234})
    assert observing == ("observational memory is observing 4 unobserved messages (1,234 tokens) before the reply, "
                         "a model call of its own")
    assert observing in chat_layout.transcript_html(chat_layout.waiting(sent, observing))
    assert "1 unobserved message (" in str(waiting_for("memory_operation", {"operationType": "observe", "messages": 1,
                                                                               "tokens": 9}))
    assert "condensing its observations (40,000 tokens)" in str(
        waiting_for("memory_operation", {"operationType": "reflect", "tokens": 40_000}))
    # A backlog over max_tokens_per_batch is observed in several calls, one span each: the line says which.
    assert waiting_for("memory_operation", {"operationType": "observe", "messages": 12, "tokens": 9_800,
                                            "batch": 2, "batches": 3}) == (
        "observational memory is observing 12 unobserved messages (9,800 tokens) before the reply: batch 2 of 3, "
        "each a model call of its own")
    # With the observer's window known the count is a forecast (a call fits what the log stored before it leaves room
    # for): "about", until the last call, which is the last.
    forecast = {"operationType": "observe", "messages": 12, "tokens": 9_800, "batchesForecast": True}
    assert "batch 2 of about 37, each" in str(waiting_for("memory_operation", {**forecast, "batch": 2, "batches": 37}))
    assert "batch 37 of 37, each" in str(waiting_for("memory_operation", {**forecast, "batch": 37, "batches": 37}))
    from studio.logic.request_layout import observer_calls

    assert observer_calls({"batches": [3, 4], "calls": 9, "callsForecast": True}) == (9, "about ")
    assert observer_calls({"batches": [3, 4, 2], "calls": 3}) == (3, "")
    assert observer_calls({"batches": [3, 4]}) == (2, "")  # a note from before ``calls``: its planned batches
    waits = waiting_for("memory_operation", {"operationType": "wait", "waitsFor": "observer", "limitSeconds": 120.0})
    assert waits == ("waiting for observational memory's background observer to finish (past its block_after the "
                     "reply waits for it, at most 120 s)")
    assert "background reflector to finish" in str(
        waiting_for("memory_operation", {"operationType": "wait", "waitsFor": "reflector"}))
    assert waiting_for("model_generation", {"model": "m"}) == chat_layout.WAITING_FOR_MODEL  # the agent's call
    assert waiting_for("model_generation", {"model": "m", "role": "observer"}) is None  # memory's own call
    assert waiting_for("tool_call", {}) is None and waiting_for("memory_operation", {"operationType": "recall"}) is None
    stored = [chat_layout.Entry("user", "hi", "u0", "u0")]
    assert chat_layout.waiting(stored, observing) == stored  # nothing streaming: nothing changes


def test_memory_summary_says_what_each_turn_brings(tmp_path):
    assert chat_layout.memory_summary(MemoryOptions()) == "Memory: last 10 messages"
    line = chat_layout.memory_summary(MemoryOptions(
        last_messages=0, working_memory={"enabled": True, "scope": "thread"},
        semantic_recall={"enabled": True, "top_k": 3, "threshold": 0.4}))
    assert line == ("Memory: no history · working memory (thread) · recall hybrid top 3, range 1/1, resource, "
                    "threshold 0.4")
    # With observational memory the engine runs no message history (``TurnAssembler.input_processors``): the line
    # said "last 10 messages · observational memory (thread)", ten messages the prompt never held as history.
    om = MemoryOptions(observational_memory={"enabled": True})
    store = open_store(tmp_path / "m.db")
    ids = [p.id for p in Memory(store, om).input_processors()]
    assert "message-history" in [p.id for p in Memory(store, MemoryOptions()).input_processors()]
    store.close()
    assert om.last_messages == 10 and "observational-memory" in ids and "message-history" not in ids, ids
    assert chat_layout.memory_summary(om) == "Memory: observational memory (thread) in place of message history"


def test_memory_problem_says_the_first_failure_of_each_kind_in_plain_words():
    assert chat_layout.memory_problem([]) == ""
    assert chat_layout.memory_problem([{"observational-memory": {"observation": "ran"}}, {"other": {}}]) == ""
    notes = [{"observational-memory": {"reflectionError": "the reflector failed (timeout); backing off until "
                                       "2026-03-01T09:00:30.000Z (failure 2); the messages stay raw meanwhile",
                                       "reflectionRetryAt": "2026-03-01T09:00:30.000Z"}},
             {"observational-memory": {"reflectionError": "a later prompt's"}}]
    said = chat_layout.memory_problem(notes)
    from studio.logic.dates import format_datetime

    assert said.startswith("Observational memory could not condense its observations: the reflector failed (timeout); "
                           f"backing off until {format_datetime('2026-03-01T09:00:30.000Z')} (failure 2)")
    assert "a later prompt's" not in said and "2026-03-01T" not in said
    assert "The observations are kept as they are" in said and "observe this conversation" not in said
    both = chat_layout.memory_problem([{"observational-memory": {"observationError": "observer call failed: x"}},
                                       *notes])
    assert both.index("could not observe") < both.index("could not condense") < both.index("chosen model")


def test_run_turn_saves_the_turn_and_a_failure_saves_nothing(tmp_path):
    store = open_store(tmp_path / "m.db")
    pieces: list[str] = []
    req = ChatRequest("t-new", "ada", "Hello there", None, chat_runner.DEFAULT_INSTRUCTIONS, "u-1", new_thread=True)
    out = chat_runner.run_turn(store, req, ScriptedModel(["Hi Ada, how can I help?"]), embedder=lambda: None,
                               on_delta=pieces.append)
    assert out.saved_ids[0] == "u-1" and len(out.saved_ids) == 2 and len(pieces) >= 2
    assert store.memory.get_thread("t-new").title == "Hello there"
    from core.llm import ModelError

    bad = ChatRequest("t-other", "ada", "Again", None, "", "u-2", new_thread=True)
    with pytest.raises(ModelError):
        chat_runner.run_turn(store, bad, ScriptedModel([ModelError("down", model_id="x", endpoint="http://h/v1")]),
                             embedder=lambda: None, on_delta=pieces.append)
    assert store.memory.get_thread("t-other") is None
    what, todo = chat_runner.model_problem(ModelError("refused", model_id="m", endpoint="http://h/v1"))
    assert "http://h/v1" in what and "running" in todo and "Nothing of this turn was saved" in todo
    store.close()


def test_stopping_a_turn_abandons_it_and_saves_nothing(tmp_path):
    store = open_store(tmp_path / "m.db")
    stop = chat_runner.turn_stop()
    stop.stop(chat_runner.STOP_REASON)
    pieces: list[str] = []
    req = ChatRequest("t-stop", "ada", "Tell me a long story", None, "", "u-9", new_thread=True)
    with pytest.raises(TurnStopped):
        chat_runner.run_turn(store, req, ScriptedModel(["once upon a time there was a tale"]),
                             embedder=lambda: None, on_delta=pieces.append, stop=stop)
    assert pieces == [] and store.memory.get_thread("t-stop") is None
    store.close()


def test_a_stop_while_a_model_that_cannot_be_cut_answers_still_saves_nothing(tmp_path):
    """A scripted model has no connection to shut: Stop pressed during its call ends the turn before its save, and
    the turn is reported as stopped (not as the model failing)."""
    store = open_store(tmp_path / "m.db")
    stop = chat_runner.turn_stop()

    def answer(_messages, _tools):
        stop.stop(chat_runner.STOP_REASON)  # pressed while the model works
        return "a whole answer"

    req = ChatRequest("t-stop", "ada", "Tell me a long story", None, "", "u-9", new_thread=True)
    with pytest.raises(TurnStopped) as raised:
        chat_runner.run_turn(store, req, ScriptedModel(answer), embedder=lambda: None, on_delta=lambda _p: None,
                             stop=stop)
    assert chat_runner.model_problem(raised.value)[0] == "You stopped the reply."
    assert store.memory.get_thread("t-stop") is None
    store.close()


@pytest.fixture
def searched(tmp_path):
    store = open_store(tmp_path / "r.db")
    index = RecallIndex.for_store(store, HashingEmbedder(64))
    msgs = [Message.user("I am allergic to peanuts", id="a", thread_id="t", resource_id="ada", created_at=T0),
            Message.assistant("No peanuts, noted", id="b", thread_id="t", resource_id="ada", created_at=T0)]
    Memory(store).save_messages(msgs)
    index.index_messages(msgs)
    yield store, index
    store.close()


def test_list_captions_never_leave_an_empty_list_silent(searched):
    _store, index = searched
    ins = inspect_search(index, "allergic peanuts", resource_id="ada", top_k=1, threshold=0.999)
    caption = recall_layout.list_caption(ins, "hybrid")
    assert caption.startswith("0 hits · 2 results below the threshold 0.999")
    assert "lower it" in caption
    assert caption.count("below the threshold") == 1  # said once, not again in the reason
    assert caption.startswith("0 hits · 2 results below the threshold 0.999 (best similarity ")
    assert caption.endswith("): lower it to see them")
    ok = inspect_search(index, "allergic peanuts", resource_id="ada", top_k=1)
    assert recall_layout.list_caption(ok, "hybrid") == "1 hit · 1 outside the top 1"
    assert recall_layout.list_caption(None, "vector") == ""
    assert "resource ada" in recall_layout.search_summary(ok) and "2 vectors" in recall_layout.search_summary(ok)


def test_why_not_reads_as_a_verdict_with_a_row_per_list(searched):
    _store, index = searched
    ins = inspect_search(index, "allergic peanuts", resource_id="ada", top_k=1, before=0, after=0)
    second = ins.lists["hybrid"][1].message_id
    html = recall_layout.explanation_html(explain_message(index, second, ins), ins)
    assert "Excluded: outside the top-k" in html and html.count("<tr>") == 4
    first = ins.lists["hybrid"][0].message_id
    assert "What recall adds to the prompt" in recall_layout.explanation_html(explain_message(index, first, ins), ins)


def test_scope_and_index_problems_give_one_way_forward():
    assert recall_layout.scope_problem("thread", Selection("ada"), "ada").startswith("Pick a thread")
    assert recall_layout.scope_problem("resource", Selection(), None).startswith("Pick a resource")
    assert recall_layout.scope_problem("resource", Selection("ada"), "ada") is None
    text = recall_layout.index_problem(migrated=False, has_vectors=False, model_id="m", location="/x/mastra.db")
    assert "memory-studio migrate --db /x/mastra.db" in text and "memory-studio reindex --db /x/mastra.db" in text
    assert "Allow" not in text
    assert "reindex" in recall_layout.index_problem(migrated=True, has_vectors=False, model_id="m", location="")
    assert recall_layout.index_problem(migrated=True, has_vectors=True, model_id="m", location="") is None


def test_playground_logic_imports_no_qt():
    code = ("import sys, studio.logic.chat_layout, studio.logic.recall_layout, studio.chat_runner; "
            "sys.exit(1 if any(m.startswith('PySide6') for m in sys.modules) else 0)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_an_observer_call_in_the_turn_does_not_stream_into_the_reply(tmp_path):
    from core.agent_configs import AgentConfig

    store = open_store(tmp_path / "om.db")
    Memory(store).save_messages([
        Message.user("We ship the release on Friday.", thread_id="t", resource_id="sam", created_at=T0),
        Message.assistant("Noted, Friday it is.", thread_id="t", resource_id="sam", created_at=T0)])
    opts = MemoryOptions(observational_memory={"enabled": True, "message_tokens": 1, "observation_tokens": 100_000})
    agent = AgentConfig("notes", {"name": "notes", "options": opts.to_dict()}, None, None)
    model = ScriptedModel(["* 🔴 (09:00) Release ships on Friday.", "Friday, as planned."])
    pieces: list[str] = []
    out = chat_runner.run_turn(store, ChatRequest("t", "sam", "When do we ship?", agent, "", "u-9"), model,
                               embedder=lambda: None, on_delta=pieces.append)
    assert len(model.requests) == 2  # the observer ran inside the turn
    assert out.text == "Friday, as planned." and "".join(pieces) == out.text
    store.close()


def test_a_fused_score_says_what_its_thread_added():
    lifted = Candidate(3, "m", "t", "ada", 0.146, 0.207, None, 5, None, combined=0.146, own=0.030)
    assert recall_layout.fused_before_text(lifted) == (
        "0.146 (0.030 from its own lists, the rest its thread's share)")
    alone = Candidate(1, "m", "t", "ada", 0.652, 0.430, 2.24, 2, 1, combined=0.6521, own=0.6524)
    assert recall_layout.fused_before_text(alone) == "0.652"  # (the same at three decimals)
    assert recall_layout.fused_before_text(Candidate(1, "m", "t", "ada", 0.5, 0.5, None)) == "—"
    ins = Inspection("q", "ada", None, 4, None, 0, 0, "model")
    assert "fused 0.146 (0.030 from its own lists" in recall_layout.candidate_tooltip(ins, lifted)


def test_a_context_overflow_does_not_say_try_again(tmp_path):
    # llama.cpp's 400 for a prompt over its context: sending the same message again fails the same way,
    # and the engine's hint names code settings (context_window, model_settings) the playground lacks.
    from core.llm import LoopbackServer, OpenAICompatibleModel

    store = open_store(tmp_path / "m.db")
    detail = "request (5419 tokens) exceeds the available context size (4096 tokens), try increasing it"
    with LoopbackServer(["never sent"]) as server:
        server.fail_next(1, status=400, message=detail)
        model = OpenAICompatibleModel("loop", base_url=server.base_url, api_key="test-key", environ={},
                                      keyring_service=None)
        req = ChatRequest("t-big", "ada", "word " * 50, None, "", "u-big", new_thread=True)
        with pytest.raises(ModelError) as caught:
            chat_runner.run_turn(store, req, model, embedder=lambda: None, on_delta=lambda _p: None)
        model.close()
    what, todo = chat_runner.model_problem(caught.value)
    assert detail in what and "4,096 tokens" in what
    assert not todo.startswith("Try again") and "shorten the message" in todo and "larger context" in todo
    assert todo.endswith("Nothing of this turn was saved.")
    # Other 400s keep their advice.
    _what, other = chat_runner.model_problem(ModelError("bad tool schema", model_id="m", status=400,
                                                        endpoint="http://h/v1"))
    assert other.startswith("Try again")
    store.close()


def test_a_dropped_connection_leads_with_the_models_own_hint_not_a_server_that_is_down(tmp_path):
    """A server that took the turn's request and closed the connection before replying was introduced with "Check
    that the server … is running and reachable" (it was: it took the request), and the model's own, more precise
    hint ("took the request, then dropped it: check its logs") came after it (found 2026-12-07 by s33-walk6). The
    model's hint now leads, said once; an error with no hint of its own keeps the general advice."""
    import socketserver
    import threading

    from core.llm import OpenAICompatibleModel, RetryPolicy

    class TakeAndDrop(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            self.request.recv(65536)  # the request arrives; the connection closes with no reply

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), TakeAndDrop)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    store = open_store(tmp_path / "m.db")
    try:
        with OpenAICompatibleModel("m", base_url=url, environ={}, keyring_service=None,
                                   retry=RetryPolicy(max_retries=0, initial_delay=0.0)) as model:
            req = ChatRequest("t-drop", "ada", "Hello", None, "", "u-drop", new_thread=True)
            with pytest.raises(ModelError) as caught:
                chat_runner.run_turn(store, req, model, embedder=lambda: None, on_delta=lambda _p: None)
    finally:
        server.shutdown()
        server.server_close()
        store.close()
    what, todo = chat_runner.model_problem(caught.value)
    assert "closed the connection before its reply was complete" in what
    assert todo.startswith(f"The server at {url} took the request, then dropped it: check its logs"), todo
    assert "running and reachable" not in todo and "check its logs" not in what  # (said once, where to act)
    assert todo.endswith("Nothing of this turn was saved.")
    _what, general = chat_runner.model_problem(ModelError("refused", model_id="m", endpoint="http://h/v1"))
    assert general.startswith("Check that the server at http://h/v1 is running and reachable")


def test_a_turn_that_fails_after_its_message_was_observed_and_stored_says_it_was_kept(tmp_path):
    """Synchronous observational memory stores the message it observes before the model is asked; the model then
    fails. ``run_turn`` raised the model's error, read as "Nothing of this turn was saved", and left the new thread
    it started (holding the message) untitled (found by s37-trust8): now ``InputKept``, said as such."""
    from core.agent_configs import AgentConfig

    store = open_store(tmp_path / "om.db")
    opts = MemoryOptions(observational_memory={"enabled": True, "message_tokens": 1, "buffer_tokens": False,
                                               "observation_tokens": 100_000})
    agent = AgentConfig("notes", {"name": "notes", "options": opts.to_dict()}, None, None)
    model = ScriptedModel(["* 🔴 (09:00) User asked when the release ships.",
                           ModelError("down", model_id="x", endpoint="http://h/v1")])
    req = ChatRequest("t-new", "sam", "When do we ship?", agent, "", "u-9", new_thread=True)
    with pytest.raises(chat_runner.InputKept) as kept:
        chat_runner.run_turn(store, req, model, embedder=lambda: None, on_delta=lambda _p: None)
    assert isinstance(kept.value.error, ModelError) and len(model.requests) == 2
    assert [m.id for m in store.memory.get_messages(["u-9"])] == ["u-9"]
    assert store.memory.get_thread("t-new").title == "When do we ship?"
    what, todo = chat_runner.model_problem(kept.value)
    assert "http://h/v1" in what and "Nothing of this turn was saved" not in todo
    assert todo.endswith(chat_runner.KEPT)
    store.close()
    # The transcript: the stored message is not marked "not saved"; the reply is.
    sent = [chat_layout.Entry("user", "When do we ship?", "u-9", "u-9", "streaming"),
            chat_layout.Entry("assistant", "", "u-9", None, "streaming")]
    assert [e.state for e in chat_layout.failed(sent, "u-9", "not saved", stored="u-9")] == ["streaming", "failed"]
    assert [e.state for e in chat_layout.failed(sent, "u-9", "not saved")] == ["failed", "failed"]
