"""The Replay pane's pure logic (no Qt): fragment rows with changes, comparisons, facts, what-if options
and rows, the re-run comparison and the fork's source — over prompts the engine rebuilt from a real file."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace
from pathlib import Path
from typing import Iterator

import pytest

from core import Memory, MemoryOptions, open_store
from core.replay import prompt_diff
from studio.logic.replay_layout import (
    WhatIfOptions,
    change_summary,
    clamp_step,
    compare,
    fit_columns,
    fork_source,
    prompt_text,
    recall_rows,
    rerun_comparison,
    step_label,
    step_rows,
    token_rows,
    turn_index_for,
    what_if_rows,
    what_if_summary,
)
from studio.replay_jobs import ReplayThread

from .replay_data import THREAD, TURNS, build_replay_db


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplayThread]:
    path = tmp_path_factory.mktemp("replay-logic") / "replay.db"
    build_replay_db(path)
    store = open_store(path)
    yield ReplayThread.open(store, lambda o, n: Memory(store, o, name=n), THREAD)
    store.close()


def test_pure_logic_imports_no_qt() -> None:
    code = ("import sys, studio.logic.replay_layout, studio.replay_jobs; "
            "sys.exit(1 if any(m.startswith('PySide6') for m in sys.modules) else 0)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_stepping_helpers(source: ReplayThread) -> None:
    turns = source.turns
    assert clamp_step(-3, 8) == 0 and clamp_step(99, 8) == 7 and clamp_step(5, 0) == 0
    assert step_label(0, turns).startswith("Turn 1 of 8 · 2026-05-01")
    assert step_label(0, []) == "No turns"
    assert turn_index_for(turns, turns[3].input_message_id) == 3
    assert turn_index_for(turns, turns[3].response_ids[0]) == 3
    assert turn_index_for(turns, "unknown", turns[5].created_at) == 5
    assert turn_index_for(turns, None) == 7 and source.start == 7


def test_rows_mark_what_entered_left_and_changed_in_prompt_order(source: ReplayThread) -> None:
    prev, cur = source.prompt(4), source.prompt(5)
    changes = prompt_diff(prev, cur)
    rows = step_rows(cur, changes)
    assert [r.index for r in rows if r.index is not None] == [f.index for f in cur.fragments]
    left = [r for r in rows if r.change == "left"]
    assert [r.text for r in left] == [c.text_before for c in changes if c.kind == "left"]
    # What left sits where it was: before the first history fragment that stayed.
    first_left = rows.index(left[0])
    assert rows[first_left + len(left)].source == "message-history"
    assert sum(r.change == "entered" for r in rows) == sum(c.kind == "entered" for c in changes)
    assert all(r.mark == "+ entered" and r.why == "new message" for r in rows if r.change == "entered")
    # Each count with its own reasons: "−2 left (outside the history window ×2, new message ×2)" read as four
    # reasons for two fragments that left (found 2026-12-06 walking Replay on a 20,000-message thread).
    assert change_summary(changes) == "+2 entered (new message ×2) · −2 left (outside the history window ×2)"
    assert change_summary([]) == "no change in the context"
    assert step_rows(cur) and all(r.change is None for r in step_rows(cur))


def test_comparison_texts(source: ReplayThread) -> None:
    received = source.prompt(3)
    same = compare(received, source.prompt(3, "now"))
    assert same.same and same.level is None and same.text.startswith("Rebuilt now: identical")
    other = source.memory.assemble(thread_id=THREAD, as_of=source.turns[3].input_message_id,
                                   options={"last_messages": 1}, rebuild="now")
    differs = compare(received, other, prompt_diff(received, other))
    assert not differs.same and differs.level == "warning"
    assert "rebuilds this turn differently now: −" in differs.text and "outside the history window" in differs.text
    text = prompt_text(received)
    assert text.startswith("── 1 · system ──\nYou plan trips. Be brief.") and TURNS[3] in text
    assert "── tools ──\nupdateWorkingMemory" in text


def test_tokens_facts_and_recall(source: ReplayThread) -> None:
    received = source.prompt(6)
    rows = {r.section: r for r in token_rows(received, source.prompt(6, "now"))}
    assert rows["total"].at_turn == received.replay.record.tokens["total"] == rows["total"].now
    assert sum(r.at_turn for k, r in rows.items() if k != "total") == rows["total"].at_turn
    assert token_rows(received)[0].now is None
    assert recall_rows(received, THREAD) == []  # recall was off for this agent
    hit = SimpleNamespace(replay=SimpleNamespace(record=SimpleNamespace(recall=(
        SimpleNamespace(rank=1, message_id="m9", thread_id="t-other", vector=0.8123, keyword=None, fused=0.61,
                        window_ids=("m8", "m9", "m10")),))), notes={})
    (row,) = recall_rows(hit, THREAD)  # type: ignore[arg-type]
    assert row.other_thread and row.window == 3 and row.score(row.keyword) == "—" and row.score(row.vector) == "0.812"


def test_what_if_options_become_engine_overrides() -> None:
    assert WhatIfOptions().overrides() == {}
    assert WhatIfOptions().describe() == "no change"
    full = WhatIfOptions(last_messages=0, recall=True, top_k=2, threshold=0.5, message_range=0, scope="thread",
                         working_memory="agent-may-not-write", om_message_tokens=500, om_observation_tokens=900)
    assert full.overrides() == {
        "last_messages": False,
        "semantic_recall": {"enabled": True, "top_k": 2, "threshold": 0.5, "message_range": 0, "scope": "thread"},
        "working_memory": {"enabled": True, "agent_managed": False},
        "observational_memory": {"message_tokens": 500, "observation_tokens": 900},
    }
    assert WhatIfOptions(working_memory="off").overrides() == {"working_memory": {"enabled": False}}
    assert WhatIfOptions(token_budget=800).overrides() == {"message_history": {"max_tokens": 800}}
    MemoryOptions().merged(full.overrides())  # the engine accepts every key


def test_what_if_rows_and_summary(source: ReplayThread) -> None:
    outcome = source.what_if(WhatIfOptions(last_messages=2).overrides())
    rows = what_if_rows(outcome.rows, source.turns)
    assert [r.number for r in rows] == list(range(1, 9))
    assert rows[0].delta == 0 and rows[0].delta_label == "0"
    assert rows[6].left == 2 and rows[6].delta < 0 and rows[6].delta_label.startswith("-")
    assert "outside the history window" in rows[6].reasons
    summary = what_if_summary(rows, 8, False)
    assert summary.startswith("8 turns. ") and "would differ" in summary
    assert what_if_summary(rows[:3], 8, True).startswith("Cancelled after 3 of 8 turns.")
    assert what_if_summary([], 8, True) == "Cancelled before the first turn."


def test_rerun_comparison_figures() -> None:
    """Every token count says whose it is: the server's, or our o200k estimate (issue 16)."""
    result = SimpleNamespace(text="one\nthree", tokens_in=120, tokens_out=4, latency_ms=37.2, model="scripted/x",
                             usage_estimated=True, usage=None, estimated_tokens=118,
                             original_usage={"prompt_tokens": 130, "completion_tokens": 3, "total_tokens": 133},
                             differences=(("temperature", "0.3", "0.0"),))
    cmp = rerun_comparison("one\ntwo", 118, result)
    assert [(d.kind, d.text) for d in cmp.diff] == [("equal", "one"), ("delete", "two"), ("insert", "three")]
    figures = {f[0]: f for f in cmp.figures}
    assert figures["Prompt tokens, server-reported"] == ("Prompt tokens, server-reported", "130",
                                                         "120 (no usage reported: estimated)")
    assert figures["Prompt tokens, our o200k estimate"] == ("Prompt tokens, our o200k estimate", "118", "118")
    assert figures["Reply tokens, server-reported"][1] == "3"
    assert figures["Latency"] == ("Latency", "—", "37 ms")
    assert cmp.differences == [("temperature", "0.3", "0.0")]


def test_rerun_model_figure_names_both_endpoints_alike() -> None:
    # The re-run side read "provider/model@http://host/v1", the original "provider/model": the same
    # server looked like another.
    result = SimpleNamespace(text="x", tokens_in=1, tokens_out=1, latency_ms=1.0, usage_estimated=False,
                             model="openai-compatible/m@http://127.0.0.1:8766/v1", usage=None, estimated_tokens=1,
                             original_usage=None, differences=(), original_endpoint="http://127.0.0.1:8766/v1")
    figures = {f[0]: f for f in rerun_comparison("x", 1, result, "openai-compatible/m").figures}
    assert figures["Model"][1] == figures["Model"][2] == "openai-compatible/m@http://127.0.0.1:8766/v1"
    in_process = SimpleNamespace(**{**vars(result), "model": "scripted/x", "original_endpoint": None})
    assert {f[0]: f for f in rerun_comparison("x", 1, in_process, "scripted/x").figures}["Model"][1] == "scripted/x"


def test_fork_source_text() -> None:
    assert fork_source({}) is None and fork_source(None) is None
    text = fork_source({"fork": {"sourceThreadId": "t1", "atMessageId": "m3", "forkedAt": "2026-05-01T10:00:00.000Z",
                                 "workingMemory": "as_of"}})
    assert text == ("Forked from thread t1 at message m3 on 2026-05-01 10:00:00; working memory as it was then")


def test_step_data_for_a_turn(source: ReplayThread) -> None:
    step = source.step(3)
    assert step.previous_index == 2 and step.changes and step.now_changes == []
    assert [m.id for m in step.reply] == list(source.turns[3].response_ids)
    assert step.om_label == "off" and "version 1 of 1" in step.wm_label
    first = source.step(0)
    assert first.changes == [] and first.previous_index is None
    assert source.step(2).wm_label == "thread scope · empty"




def test_context_columns_share_the_panes_width_and_the_last_takes_the_rest() -> None:
    fixed = {"#": 30, "Change": 80, "Role": 70, "Stored": 90, "Tokens": 60}
    widths = fit_columns(600, fixed, {"Source": 0.45, "Why": 0.45}, {"Source": 60, "Why": 40}, "Text", rest=50)
    assert {k: widths[k] for k in fixed} == fixed
    assert widths["Source"] == widths["Why"] == int((600 - 330 - 50) * 0.45)
    assert sum(widths.values()) == 600 and widths["Text"] >= 50
    narrow = fit_columns(400, fixed, {"Source": 0.45, "Why": 0.45}, {"Source": 60, "Why": 40}, "Text", rest=50)
    assert (narrow["Source"], narrow["Why"], narrow["Text"]) == (60, 40, 50)  # minima: only then it scrolls


def test_a_roomy_optional_column_waits_for_the_last_columns_room_too() -> None:
    """Side by side at a 1,440 px window the role took 70 px while the fragment's text read "Hi! I'A…": a roomy
    optional column shows only where the last column has its room as well as the shared ones theirs."""
    def fit(total: int, room: dict[str, int]) -> dict[str, int]:
        return fit_columns(total, {"#": 30, "Role": 70}, {"Why": 1.0}, {"Why": 40}, "Text", rest=50,
                           optional=["Role"], room=room, roomy=["Role"])

    assert "Role" in fit(400, {"Why": 100})
    assert "Role" not in fit(400, {"Why": 100, "Text": 250})  # (the text would keep 50 px of its 250)
    assert "Role" in fit(460, {"Why": 100, "Text": 250})


def test_a_roomy_column_shown_keeps_the_room_it_waited_for() -> None:
    """In the themed app at a 1,440 px window Replay's stored ids showed because the reason's and the text's room
    fitted, and then the shares gave Source and Why their caps first: the text kept 237 px of the 256 it waited
    for. Where a roomy column shows, the shared columns keep their room and the last column its room."""
    widths = fit_columns(500, {"#": 30, "Stored": 90}, {"Source": 0.5, "Why": 0.5}, {"Source": 60, "Why": 60},
                         "Text", rest=40, maximum={"Source": 150, "Why": 150}, optional=["Stored"],
                         room={"Why": 120, "Text": 150}, roomy=["Stored"])
    assert "Stored" in widths  # (30 + 90 + 60 + 120 + 150 = 450 of 500)
    assert widths["Text"] >= 150 and widths["Why"] >= 120, widths
    assert sum(widths.values()) == 500


def test_a_roomy_column_stays_where_leaving_it_out_would_not_make_the_room() -> None:
    """Stacked at a 1,100 px window, Replay's stored ids waited for a room the reason and the text could not have even
    without them: hiding them lost the ids and gained nothing the user could read whole. Where leaving a roomy column
    out makes the room, it goes (at 1,440 px in the themed app); where it would not, it stays at the minima's rule."""
    def fit(total: int) -> dict[str, int]:
        return fit_columns(total, {"#": 30, "Stored": 90}, {"Why": 1.0}, {"Why": 40}, "Text", rest=40,
                           optional=["Stored"], room={"Why": 200, "Text": 200}, roomy=["Stored"])

    assert "Stored" in fit(520)  # (30 + 90 + 200 + 200: the room, with the ids)
    assert "Stored" not in fit(480)  # (30 + 200 + 200 without them: leaving them out makes it)
    assert "Stored" in fit(300)  # (not even without them; their minima fit: 30 + 90 + 40 + 40)
    assert "Stored" not in fit(180)  # (the minima do not fit either)


def test_a_message_that_came_another_way_names_both_ways() -> None:
    """Replay's row of a message that moved between observational memory's unobserved messages and semantic
    recall says why in words and keeps the way it came before, which the fragment pane names beside "now"."""
    from tests.core.test_replay_diff_source_moves import prompt

    before = prompt(("m1", "observational-memory", "I live in Porto."))
    after = prompt(("m1", "semantic-recall", "I live in Porto."))
    changes = prompt_diff(before, after)
    (row,) = [r for r in step_rows(after, changes) if r.change == "changed"]
    assert row.source == "semantic-recall" and row.source_before == "observational-memory"
    assert row.why == "the same message, reached the prompt another way"
    assert change_summary(changes) == "~1 changed (the same message, reached the prompt another way)"


def test_the_observations_fact_names_the_observed_time_as_every_date_is(
        tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Replay's facts line said "observed up to 2026-09-14T18:20:00.000Z" (the stored cursor's raw ISO text) beside
    dates written "2026-09-14 18:20:00" everywhere else (the Observations pane's "Last observed", the same time)."""
    from datetime import timezone

    from studio.logic import dates

    from .conftest import seeded_demo_folder

    monkeypatch.setattr(dates, "DISPLAY_TZ", timezone.utc)
    store = open_store(seeded_demo_folder(tmp_path_factory, "replay-om-label") / "memory.db")
    try:
        thread = ReplayThread.open(store, lambda o, n: Memory(store, o, name=n), "sam-standup")
        label = thread.step(len(thread.turns) - 1).om_label
    finally:
        store.close()
    assert "observed up to 2026-09-14 18:20:00 ·" in label, label
    assert "T18:20" not in label


def _words_in_order(short: str, whole: str) -> bool:
    """Every word of ``short`` is a word of ``whole``, in the same order (nothing added, nothing reworded)."""
    words = iter(whole.replace("(", " ").replace(")", " ").replace(",", " ").split())
    return all(any(w == x for x in words) for w in short.split())


def test_each_reasons_short_forms_are_its_own_words_shorter_each_time() -> None:
    """Replay's narrow context table draws a reason in its longest short form that fits (at a 900 px window it read
    "observed by ob…"): each form is the whole label's own words in its order, shorter than the form before it,
    and a reason with no short form is drawn whole (or cut) as before."""
    from studio.logic.replay_layout import REASON_LABELS, REASON_SHORT, reason_forms

    assert set(REASON_SHORT) <= set(REASON_LABELS)
    for reason, label in REASON_LABELS.items():
        forms = reason_forms(reason)
        widths = [len(label), *(len(f) for f in forms)]
        assert widths == sorted(widths, reverse=True) and len(set(widths)) == len(widths), (reason, forms)
        for form in forms:
            assert form and _words_in_order(form, label), (reason, form, label)
    assert reason_forms("observed") == ("observed",) and reason_forms("new-message") == ("new",)
    assert reason_forms("something-newer") == ()
    assert not _words_in_order("working memory edited", "working memory changed")  # (the check can fail)


def test_a_stored_records_short_label_is_its_ids_tail_whole() -> None:
    """The Stored column is as wide as one short id: an observation's "record …303fa4c0" read "record …303f…",
    the part that tells records apart cut. Its short form is the id's tail, whole; a message's label has none."""
    from dataclasses import replace

    from studio.logic.replay_layout import StepRow

    record = "01a25000-5c93-7069-8e38-174eac303fa4c0"[:36]
    row = StepRow(1, "system", "observational-memory", (), 7, "<observations>", "<observations>", None, "entered",
                  "observed", None, "#C65D7B", observation_record=record)
    assert row.stored_label == f"record …{record[-8:]}" and row.stored_forms == (f"…{record[-8:]}",)
    assert row.why == "observed by observational memory" and row.why_forms == ("observed",)
    message = replace(row, observation_record=None, stored_ids=(record, "m-2"), reason=None)
    assert message.stored_label == f"…{record[-8:]} +1" and message.stored_forms == () and message.why_forms == ()


def test_a_turn_beside_another_names_the_stored_message_of_the_input_that_left(tmp_path: Path) -> None:
    """Two turns on one thread at once (found by s35-llm5 with `memory-studio serve` on a real llama.cpp: two
    clients sent to thread e2 together): neither prompt holds the other's input, so Replay's second turn lists
    the first turn's input as left. It is a stored message; the row read "Not from a stored message" with no
    Stored id, since the engine's input fragments carry no ids (the turn's record names them)."""
    import threading

    from core import Agent
    from core.llm.scripted import ScriptedModel

    store = open_store(tmp_path / "together.db")
    memory = Memory(store, MemoryOptions(last_messages=10), name="pair")
    both_asked = threading.Barrier(2, timeout=30)

    def answer(messages: list[dict[str, object]], _tools: object) -> str:
        both_asked.wait()  # each call is made after both prompts were assembled, as the server saw them
        return f"Answer to {messages[-1]['content']}"

    # (a model each: a scripted model answers one call at a time, a server with two slots does not)
    agents = [Agent("pair", instructions="Be brief.", model=ScriptedModel(answer, name="pair"), memory=memory)
              for _ in range(2)]
    where = {"resource": "erin", "thread": "e2"}
    runs = [threading.Thread(target=agent.generate, args=(text,), kwargs={"memory": where})
            for agent, text in zip(agents, ("Parallel one: say A.", "Parallel two: say B."))]
    for run in runs:
        run.start()
    for run in runs:
        run.join(60)
    source = ReplayThread.open(store, lambda o, n: Memory(store, o, name=n), "e2")
    try:
        assert len(source.turns) == 2
        first, second = source.turns
        step = source.step(1)
        (left,) = [c for c in step.changes if c.kind == "left"]
        assert left.source == "input" and left.stored_ids == (first.input_message_id,)
        assert left.text_before == first.input_text
        rows = step_rows(step.received, step.changes, (second.input_message_id,))
        assert [r.stored_ids for r in rows if r.change == "left"] == [(first.input_message_id,)]
        assert [r.stored_ids for r in rows if r.source == "input" and r.change != "left"] == \
            [(second.input_message_id,)]
        assert step.call_changes[0] == step.changes  # (the call picker's first call shows the same)
    finally:
        store.close()
