"""Observational memory building blocks: parsing, context view, chunks, prompts, reflection loop, store."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from core.messages import Message, tool_invocation_part
from core.observational import (
    append_chunk,
    format_history,
    optimize_chunk,
    parse_observer_output,
    reflect,
    split_chunks,
)
from core.observational import store as om_store
from core.observational.context import LEGACY_DATES, context_blocks, relative_label
from core.observational.records import OMRecord
from core.observational.store import ThreadHints
from core.observational.observer import build_task_prompt
from core.observational.reflector import COMPRESSION_GUIDANCE
from core.storage import open_store
from core.tokens import EstimatingTokenizer

TOK = EstimatingTokenizer()
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
LINES = "Date: Jan 2, 2025\n* 🔴 (09:00) User owns a bakery.\n* 🟡 (09:05) User asked about ovens."


# -- parsing ---------------------------------------------------------------------------------------
def test_parses_all_sections() -> None:
    out = parse_observer_output(
        f"<observations>\n{LINES}\n</observations>\n<current-task>\nPick an oven.\n</current-task>\n"
        "<suggested-response>\nCompare two models.\n</suggested-response>\n<thread-title>Ovens</thread-title>"
    )
    assert out.ok and out.observations == LINES
    assert (out.current_task, out.suggested_response, out.thread_title) == ("Pick an oven.", "Compare two models.", "Ovens")


def test_tolerates_fences_unclosed_tags_and_several_blocks() -> None:
    fenced = parse_observer_output(f"```xml\n<observations>\n{LINES}\n</observations>\n```")
    assert fenced.ok and fenced.observations == LINES
    unclosed = parse_observer_output(f"<observations>\n{LINES}\n<current-task>Pick an oven.")
    assert unclosed.observations == LINES and unclosed.current_task == "Pick an oven."
    two = parse_observer_output("<observations>* 🔴 (09:00) A</observations> text <observations>* 🟢 (09:01) B</observations>")
    assert two.observations == "* 🔴 (09:00) A\n\n* 🟢 (09:01) B"


def test_missing_tags_accepted_only_when_text_reads_as_observations() -> None:
    assert parse_observer_output(LINES).observations == LINES
    refused = parse_observer_output("Sure! The user talked about ovens and bread.")
    assert not refused.ok and "no <observations>" in (refused.problem or "")
    empty = parse_observer_output("<observations>\n</observations><current-task>x</current-task>")
    assert not empty.ok and empty.current_task == "x"
    assert not parse_observer_output("   ").ok
    for marks_only in ("🟡", "<observations>\n* 🔴\n* -> \n</observations>",
                       "Date: Jan 2, 2025\n* 🟢 (09:00) [tag]",
                       '<observations><thread id="t1">\n* ✅ (9:05 AM)\n</thread></observations>'):
        refused = parse_observer_output(marks_only)
        assert not refused.ok and "no text" in (refused.problem or ""), marks_only
    assert parse_observer_output("* ✅ (09:00) 42").ok and parse_observer_output("* 🔴 用户喜欢茶").ok


def test_degenerate_repetition_is_refused_and_duplicates_dropped() -> None:
    looped = parse_observer_output("<observations>\n" + "* 🟡 (09:00) User likes bread.\n" * 40 + "</observations>")
    assert not looped.ok and "degenerate" in (looped.problem or "")
    rambling = parse_observer_output("<observations>* 🔴 (09:00) " + "and then the user said that " * 120 + "</observations>")
    assert not rambling.ok
    dupes = parse_observer_output("* 🔴 (09:00) A\n* 🔴 (09:00) A\nDate: Jan 3, 2025\n* 🟢 (10:00) B")
    assert dupes.observations == "* 🔴 (09:00) A\nDate: Jan 3, 2025\n* 🟢 (10:00) B"



def test_one_line_repeated_with_a_new_time_each_time_is_degenerate() -> None:
    """Regression (SmolLM2-135M as observer on llama.cpp, read on the wire): "🟡 (09:40 AM) I'm Bo, I
    live in Porto." then the same at 09:41, 09:42, …: each line differs by its time only, so the loop
    check, which compared whole lines, took a reply that ended within its cap as 25 observations."""
    lines = "\n\n".join(f"🟡 (09:{40 + i:02d} AM) I'm Bo, I live in Porto." for i in range(25))
    looped = parse_observer_output(f"<observations>\n{lines}\n</observations>")
    assert not looped.ok and "degenerate" in (looped.problem or "")
    # Lines that differ by more than their time stay: a long, real log of one day is no loop.
    real = "\n".join(f"* 🟡 (09:{i:02d}) User described garden bed number {i}." for i in range(40))
    assert parse_observer_output(f"<observations>\n{real}\n</observations>").ok


# -- actor view --------------------------------------------------------------------------------------
def test_context_view_trims_priorities_tags_arrows_and_adds_relative_dates() -> None:
    raw = ("Date: Jan 2, 2025\n* 🔴 (09:00) User [bio] owns a  bakery.\n* 🟡 (09:05) Asked -> ovens\n"
           "* ✅ (09:10) Oven chosen.\n  * -> searched catalogue\n\n\n\nDate: Feb 20, 2026\n* 🟢 (08:00) Hi.")
    # Mastra 1.71's rules (a new turn): "1 week ago" from 7 days, a gap line between headers far apart.
    view = optimize_chunk(raw, NOW)
    assert view == ("Date: Jan 2, 2025 (1 year ago)\n* 🔴 (09:00) User owns a bakery.\n* (09:05) Asked ovens\n"
                    "* ✅ (09:10) Oven chosen.\n  * searched catalogue\n\n\n[13 months later]\n\n"
                    "Date: Feb 20, 2026 (1 week ago)\n* (08:00) Hi.")
    # This engine's first rules, which turns recorded before Mastra's rebuild with.
    legacy = optimize_chunk(raw, NOW, style=LEGACY_DATES)
    assert legacy == ("Date: Jan 2, 2025 (1 year ago)\n* 🔴 (09:00) User owns a bakery.\n* (09:05) Asked ovens\n"
                      "* ✅ (09:10) Oven chosen.\n  * searched catalogue\n\nDate: Feb 20, 2026 (9 days ago)\n* (08:00) Hi.")


@pytest.mark.parametrize(("days", "label"), [
    (0, "today"), (1, "yesterday"), (6, "6 days ago"), (7, "1 week ago"), (13, "1 week ago"), (14, "2 weeks ago"),
    (29, "4 weeks ago"), (30, "1 month ago"), (59, "1 month ago"), (60, "2 months ago"), (364, "12 months ago"),
    (365, "1 year ago"), (730, "2 years ago"), (-1, "tomorrow"), (-6, "in 6 days"), (-7, "in 1 week"),
    (-20, "in 2 weeks"), (-45, "in 1 month"), (-90, "in 3 months"), (-400, "in 1 year"), (-800, "in 2 years"),
])
def test_relative_dates_follow_mastra(days: int, label: str) -> None:
    assert relative_label(NOW - timedelta(days=days), NOW) == label


def test_gap_lines_run_across_chunks_and_inline_estimates_say_when() -> None:
    log = append_chunk("", "Date: Feb 1, 2026\n* 🔴 (09:00) User plans to visit Porto (meaning Feb 10, 2026).\n"
                           "* 🔴 (09:01) User will fly home (estimated late March 2026).",
                       "2026-02-01T09:00:00.000Z")
    log = append_chunk(log, "Date: Feb 2, 2026\n* 🔴 (10:00) Same week.", "2026-02-02T10:00:00.000Z")
    log = append_chunk(log, "Date: Feb 20, 2026\n* 🔴 (10:00) Later.", "2026-02-20T10:00:00.000Z")
    record = OMRecord.from_row({"id": "om-1", "lookupKey": "thread:t", "scope": "thread", "threadId": "t",
                                "resourceId": "r", "activeObservations": log, "createdAt": "2026-02-01T09:00:00.000Z",
                                "updatedAt": "2026-02-20T10:00:00.000Z"})
    chunks = [b.text for b in context_blocks(record, ThreadHints(), NOW) if b.part == "chunk"]
    assert chunks == [
        "Date: Feb 1, 2026 (4 weeks ago)\n* 🔴 (09:00) User plans to visit Porto (meaning Feb 10, 2026 - 2 weeks ago, "
        "likely already happened).\n* 🔴 (09:01) User will fly home (estimated late March 2026 - in 3 weeks).",
        "Date: Feb 2, 2026 (3 weeks ago)\n* 🔴 (10:00) Same week.",
        "[2 weeks later]\n\nDate: Feb 20, 2026 (1 week ago)\n* 🔴 (10:00) Later.",
    ]
    legacy = [b.text for b in context_blocks(record, ThreadHints(), NOW, style=LEGACY_DATES) if b.part == "chunk"]
    assert legacy[2] == "Date: Feb 20, 2026 (9 days ago)\n* 🔴 (10:00) Later." and "meaning Feb 10, 2026)" in legacy[0]


def test_chunks_round_trip_through_the_boundary_delimiter() -> None:
    log = append_chunk("", "first", "2025-01-02T09:00:00.000Z")
    assert log == "first"
    log = append_chunk(log, "second", "2025-01-02T10:00:00.000Z")
    assert log == "first\n\n--- message boundary (2025-01-02T10:00:00.000Z) ---\n\nsecond"
    chunks = split_chunks(log)
    assert [c.text for c in chunks] == ["first", "second"]
    assert chunks[1].boundary == "2025-01-02T10:00:00.000Z"


# -- observer prompts --------------------------------------------------------------------------------
def test_history_groups_by_day_and_labels_time_only_when_it_changes() -> None:
    def at(h: int, m: int, day: int = 2) -> datetime:
        return datetime(2025, 1, day, h, m, tzinfo=timezone.utc)

    msgs = [
        Message.user("Hi", created_at=at(9, 0)),
        Message.assistant("Hello", created_at=at(9, 0)),
        Message.assistant(parts=[tool_invocation_part("c1", "search", {"q": "oven"}, {"hits": 3})], created_at=at(13, 5)),
        Message.user("Thanks\nbye", created_at=at(8, 0, day=3)),
    ]
    assert format_history(msgs) == (
        "## New Message History to Observe\n\nJan 2 2025:\nUser (9:00 AM): Hi\nAssistant: Hello\n"
        'Assistant (1:05 PM): [called search with {"q": "oven"}]\n  [search returned {"hits": 3}]\n\n'
        "Jan 3 2025:\nUser (8:00 AM): Thanks\n  bye\n"
    )


def test_task_prompt_sends_only_the_tail_of_previous_observations() -> None:
    log = "\n".join(f"* 🟡 (09:{i:02d}) observation number {i}" for i in range(60))
    prompt = build_task_prompt(log, current_task=None, suggested_response=None, tokenizer=TOK, previous_tokens=50)
    assert prompt.startswith("## Previous Observations") and "number 59" in prompt and "number 0\n" not in prompt
    assert "## Prior Thread Metadata" not in prompt
    none = build_task_prompt(log, current_task="t", suggested_response=None, tokenizer=TOK, previous_tokens=0)
    assert none.startswith("## Prior Thread Metadata\n\n- prior current-task: t")
    everything = build_task_prompt(log, current_task=None, suggested_response=None, tokenizer=TOK, previous_tokens=None)
    assert "number 0\n" in everything


# -- reflection loop --------------------------------------------------------------------------------
def _obs(n: int) -> str:
    return "<observations>\n" + "\n".join(f"* 🟡 (09:{i:02d}) fact {i} about the bakery" for i in range(n)) + "\n</observations>"


def test_reflect_escalates_compression_until_under_threshold() -> None:
    original = parse_observer_output(_obs(30)).observations
    replies = iter([_obs(30), "no idea", _obs(3)])
    seen: list[tuple[int, str]] = []

    def generate(messages: list[dict[str, Any]], level: int) -> str:
        seen.append((level, messages[1]["content"]))
        return next(replies)

    result = reflect(original, generate=generate, tokenizer=TOK, threshold=100)
    assert result.under_threshold and result.observations is not None and "fact 2 " in result.observations
    assert [lvl for lvl, _ in seen] == [0, 1, 2]
    assert COMPRESSION_GUIDANCE[2] in seen[2][1] and COMPRESSION_GUIDANCE[1] not in seen[2][1]
    first, garbage, good = result.attempts
    assert first.tokens is not None and first.tokens >= 100 and first.problem is None  # not smaller: retried
    assert garbage.problem is not None and good.tokens == result.tokens < 100


def test_reflect_keeps_smallest_shrink_or_gives_up() -> None:
    original = parse_observer_output(_obs(30)).observations
    partial = reflect(original, generate=lambda m, lvl: _obs(20), tokenizer=TOK, threshold=10, max_level=2)
    assert partial.observations is not None and not partial.under_threshold and "kept the smallest" in (partial.problem or "")

    def boom(messages: list[dict[str, Any]], level: int) -> str:
        raise TimeoutError("slow")

    failed = reflect(original, generate=boom, tokenizer=TOK, threshold=10)
    assert failed.observations is None and len(failed.attempts) == 1 and "TimeoutError" in (failed.problem or "")


# -- store -------------------------------------------------------------------------------------------
def test_commit_refuses_a_stale_record(tmp_path: Path) -> None:
    store = open_store(tmp_path / "m.db")
    store.memory.create_thread(thread_id="t1", resource_id="u1", metadata={"workingMemory": "x"})
    cursor = om_store.Cursor("2025-01-02T09:00:00.000Z", "m1")

    def obs(text: str) -> om_store.Observation:
        return om_store.Observation(text, 5, ["m1"], 10, 0, cursor, current_task="task")

    kw: dict[str, Any] = {"key": "thread:t1", "scope": "thread", "thread_id": "t1", "resource_id": "u1", "config": {}}
    first = om_store.commit_observation(store, record=None, obs=obs("A"), **kw)
    assert first is not None and first.active_observations == "A"
    assert om_store.commit_observation(store, record=None, obs=obs("B"), **kw) is None  # someone created it first
    second = om_store.commit_observation(store, record=first, obs=obs("A\n\nB"), **kw)
    assert second is not None
    assert om_store.commit_observation(store, record=first, obs=obs("stale"), **kw) is None
    assert om_store.commit_reflection(store, record=first, reflection="R", tokens=1) is None
    reflected = om_store.commit_reflection(store, record=second, reflection="R", tokens=1)
    assert reflected is not None and reflected.generation_count == 1
    history = om_store.load_history(store, thread_id="t1")
    assert [(r.generation_count, r.active_observations) for r in history] == [(1, "R"), (0, "A\n\nB")]
    thread = store.memory.get_thread("t1")
    assert thread is not None and thread.metadata is not None
    meta = thread.metadata
    assert meta["workingMemory"] == "x" and meta["mastra"]["om"]["currentTask"] == "task"
    with pytest.raises(ValueError):
        om_store.load_history(store, resource_id=None, scope="resource")
