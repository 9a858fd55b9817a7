"""Observations pane logic without Qt: lookups, dates, thresholds and bars, the log, generations."""

from __future__ import annotations

from datetime import timezone
from typing import Any

import pytest

from core.observational import OMRecord, ThreadHints
from core.observational.records import append_chunk
from studio.logic.observations_layout import (
    EMPTY_TEXT,
    Lookup,
    empty_text,
    format_when,
    generation_rows,
    hint_rows,
    log_html,
    log_sections,
    log_text,
    log_texts,
    lookups_for,
    reflection_of,
    subtitle,
    thresholds,
    token_bars,
)
from studio.logic import dates
from studio.selection import Selection


@pytest.fixture(autouse=True)
def _utc_display(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dates, "DISPLAY_TZ", timezone.utc)  # the Studio shows local time; pin it here

FIRST = "Date: Sep 14, 2026\n* 🔴 (09:05) Sam is blocked on <staging> access.\n  * -> Priya can grant it"
SECOND = "Date: Sep 15, 2026\n* 🟢 (10:00) Access granted."
MASTRA_CONFIG = {"scope": "thread", "observation": {"messageTokens": 120, "model": "scripted/observer"},
                 "reflection": {"observationTokens": 100_000, "model": "scripted/reflector"}}


def record(**kw: Any) -> OMRecord:
    row = {"id": "r1", "lookupKey": "thread:t1", "scope": "thread", "threadId": "t1", "resourceId": "u1",
           "activeObservations": FIRST, "originType": "initial", "config": MASTRA_CONFIG, "generationCount": 0,
           "pendingMessageTokens": 90, "observationTokenCount": 40, "createdAt": "2026-09-14T09:00:00.000Z",
           "updatedAt": "2026-09-14T10:30:00.000Z"}
    row.update(kw)
    return OMRecord.from_row(row)


def test_a_thread_looks_up_its_own_record_then_its_resources() -> None:
    assert lookups_for(Selection("u1", "t1")) == [Lookup("thread", "t1", "u1"), Lookup("resource", None, "u1")]
    assert lookups_for(Selection("u1")) == [Lookup("resource", None, "u1")]
    assert lookups_for(Selection()) == []
    assert empty_text(Selection("u1", "t1")) == EMPTY_TEXT
    assert "resource" in empty_text(Selection("u1")) and "Select" in empty_text(Selection())


def test_dates_use_the_studio_format_and_bad_values_pass_through() -> None:
    assert format_when("2026-09-14T14:01:00.000Z") == "2026-09-14 14:01:00"
    assert format_when("2026-09-14T16:01:00+02:00") == "2026-09-14 14:01:00"
    assert format_when(None) == "—" and format_when("yesterday") == "yesterday"


def test_thresholds_come_from_mastra_nested_or_flat_config() -> None:
    assert thresholds(MASTRA_CONFIG) == (120, 100_000)
    assert thresholds({"messageTokens": 500, "observation_tokens": 900}) == (500, 900)
    assert thresholds({}) == (None, None)
    assert thresholds({"observation": {"messageTokens": True}}) == (None, None)


def test_token_bars_compare_against_the_thresholds_and_name_the_models() -> None:
    messages, observations = token_bars(record())
    assert (messages.value, messages.limit, messages.percent) == (90, 120, 75)
    assert messages.text == "90 / 120 tokens (75%)" and "scripted/observer" in messages.tooltip
    assert "120" in messages.tooltip
    assert (observations.value, observations.limit, observations.percent) == (40, 100_000, 0)
    assert "scripted/reflector" in observations.tooltip
    over, _ = token_bars(record(pendingMessageTokens=300))
    assert over.percent == 100 and "300 / 120" in over.text  # past the threshold: full, true figure
    bare, _ = token_bars(record(config={}))
    assert bare.limit is None and bare.percent == 0 and "no threshold" in bare.text


def test_log_keeps_chunks_apart_with_dates_and_drawn_priority_markers() -> None:
    active = append_chunk(FIRST, SECOND, "2026-09-15T10:05:00.000Z")
    sections = log_sections(active)
    assert [s.heading for s in sections] == ["Chunk 1", "Chunk 2 · after 2026-09-15 10:05:00"]
    assert sections[1].lines == ("Date: Sep 15, 2026", "* 🟢 (10:00) Access granted.")
    page = log_html(active)
    assert page.count("<hr/>") == 1
    assert "<b>Date: Sep 14, 2026</b>" in page and "<b>Date: Sep 15, 2026</b>" in page
    # Priorities are drawn markers, not emoji: no colour-emoji font is needed to read them.
    assert '<img src="priority:high" width="11" height="11" alt="high priority"/> (09:05)' in page
    assert '<img src="priority:low" width="11" height="11" alt="low priority"/> (10:00)' in page
    assert not any(ch in page for ch in "🔴🟡🟢✅")
    assert "&lt;staging&gt;" in page and "<staging>" not in page  # observer text is escaped
    assert "-&gt; Priya can grant it" in page
    assert "Nothing observed yet" in log_html("")


def test_hints_and_generations() -> None:
    rows = dict(hint_rows(ThreadHints(current_task="Plan the stand-up", last_observed_at="2026-09-14T14:01:00Z")))
    assert rows == {"Current task": "Plan the stand-up", "Suggested response": "—",
                    "Last observed": "2026-09-14 14:01:00"}
    history = [record(id="r2", generationCount=1, originType="reflection", observationTokenCount=12),
               record()]
    gens = generation_rows(history)
    assert [(g.number, g.origin, g.tokens, g.current) for g in gens] == [
        (1, "reflection", 12, True), (0, "initial", 40, False)]
    assert gens[1].created == "2026-09-14 09:00:00" and gens[1].updated == "2026-09-14 10:30:00"
    assert subtitle(Lookup("thread", "t1", "u1"), history) == "thread t1 · thread scope · 2 generations"
    assert subtitle(Lookup("resource", None, "u1"), history[:1]) == "resource u1 · resource scope · 1 generation"
    assert subtitle(None, []) == ""


def test_every_priority_emoji_has_a_marker_and_done_is_distinct() -> None:
    page = log_html("Date: Sep 14, 2026\n* 🔴 a\n* 🟡 b\n* 🟢 c\n* ✅ d")
    for name in ("high", "medium", "low", "done"):
        assert f'src="priority:{name}"' in page


REFLECTED = "Date: Sep 14, 2026\n* 🔴 (09:05) Sam: blocked on staging; Priya can grant access."
LATER = "Date: Sep 16, 2026\n* 🟡 (08:00) Sam asked Priya."


def test_a_reflection_made_in_the_turn_is_its_logs_first_chunk_the_observers_chunks_after_it() -> None:
    """Generation 1 (a reflection) holds the reflector's rewrite, then what the observer appended after it; its
    heading says when it was written and what it replaced (generation 0's log: its observations and tokens)."""
    before = record(activeObservations=append_chunk(FIRST, SECOND, "2026-09-15T10:05:00.000Z"))
    after = record(id="r2", generationCount=1, originType="reflection", lastReflectionAt="2026-09-16T07:00:00.000Z",
                   activeObservations=append_chunk(REFLECTED, LATER, "2026-09-16T08:01:00.000Z"))
    reflection = reflection_of(after, before)
    assert reflection is not None and reflection.exact
    assert after.active_observations[:reflection.end] == REFLECTED
    sections = log_sections(after.active_observations, reflection=reflection)
    assert [(s.heading, s.reflection) for s in sections] == [
        ("Reflection at 2026-09-16 07:00:00: the reflector's rewrite · replaced generation 0's log "
         "(3 observations, 40 tokens)", True),
        ("Chunk 2 · after 2026-09-16 08:01:00 · the observer's", False)]
    assert sections[0].lines == tuple(REFLECTED.splitlines()) and sections[1].lines == tuple(LATER.splitlines())
    page = log_html(after.active_observations)  # (without a reflection: as any log)
    assert "Reflection" not in page and "observer" not in page
    text = log_text(after, current=True, previous=before)
    assert text.reflected == 1 and len(text.lines) == 2
    assert "replaced generation 0" in "".join(text.paragraphs)
    assert any("font-weight: bold" in p and "Reflection at" in p for p in text.paragraphs)
    # The initial generation is the observer's only: headed as before.
    assert reflection_of(before, None) is None
    assert [s.heading for s in log_sections(before.active_observations, reflection=None)] == [
        "Chunk 1", "Chunk 2 · after 2026-09-15 10:05:00"]


def test_a_reflection_prepared_in_the_background_is_the_text_it_kept_the_unseen_lines_the_observers() -> None:
    """Prepared in the background over generation 0's first lines, the reflection's text is kept on generation 0
    (``bufferedReflection``, with how many lines it covers); generation 1's log starts with it and goes on with
    the lines it did not see, in the same chunk (no boundary line): those are said to be the observer's."""
    log = FIRST + "\n* 🟡 (09:30) Sam will ask Priya."
    before = record(activeObservations=log, bufferedReflection=REFLECTED, reflectedObservationLineCount=2)
    after = record(id="r2", generationCount=1, originType="reflection", lastReflectionAt="2026-09-16T07:00:00.000Z",
                   activeObservations=REFLECTED + "\n" + "\n".join(log.splitlines()[2:]))
    reflection = reflection_of(after, before)
    assert reflection is not None and reflection.exact and reflection.end == len(REFLECTED)
    sections = log_sections(after.active_observations, reflection=reflection)
    assert sections[0].heading == ("Reflection at 2026-09-16 07:00:00: the reflector's rewrite · replaced the first "
                                   "1 observation of generation 0 (prepared in the background)")
    assert sections[1].heading == "Chunk 2 · the observer's lines the reflector did not see"
    assert sections[1].lines == ("  * -> Priya can grant it", "* 🟡 (09:30) Sam will ask Priya.")
    texts = log_texts([after, before])
    assert texts["r2"].reflected == 1 and texts["r1"].reflection is None


def test_a_reflection_whose_generation_before_is_not_stored_says_so_and_that_its_end_is_a_guess() -> None:
    after = record(id="r2", generationCount=3, originType="reflection", lastReflectionAt=None,
                   createdAt="2026-09-16T07:00:00.000Z", activeObservations=append_chunk(REFLECTED, LATER, "x"))
    reflection = reflection_of(after, None)
    assert reflection is not None and not reflection.exact
    assert reflection.heading == ("Reflection at 2026-09-16 07:00:00: the reflector's rewrite (where it ends is not "
                                  "recorded: its first chunk) · replaced generation 2, which is not stored here")
    # An earlier generation that is not the one just before (one lost between) is not taken for it.
    assert "not stored" in reflection_of(after, record(generationCount=1)).replaced  # type: ignore[union-attr]


def test_a_resource_scoped_logs_thread_tags_are_not_editable_lines() -> None:
    """The pane's editable lines leave out the ``<thread id="…">`` tags a resource-scoped log is made of."""
    from core.observational.resource_scope import attributed
    from studio.logic.observations_layout import observation_lines

    log = "Date: Mar 3, 2025\n" + attributed("trip-1", "* 🔴 (09:00) Ada booked the ferry.\n* 🟡 (09:05) Ferry at 7.")
    assert observation_lines(log) == ("* 🔴 (09:00) Ada booked the ferry.", "* 🟡 (09:05) Ferry at 7.")


def test_an_empty_log_says_why_nothing_was_observed() -> None:
    """An empty current log said "the messages are still below the threshold" beside a Messages bar at 540 / 400
    and "The observer failed 2×" (found 2026-12-07 by walk4 on a real llama.cpp thread whose observer calls timed
    out): it says what holds, from the same record."""
    below = log_text(record(activeObservations="", pendingMessageTokens=90), current=True)
    assert "below the threshold" in below.paragraphs[0] and "90 of 120" in below.paragraphs[0]
    reached = log_text(record(activeObservations="", pendingMessageTokens=540), current=True)
    assert "below" not in reached.paragraphs[0] and "540" in reached.paragraphs[0]
    assert "reached the threshold (120)" in reached.paragraphs[0]
    failed = log_text(record(activeObservations="", pendingMessageTokens=540, metadata={"memoryStudio": {
        "observerBackoff": {"failures": 2, "retryAt": "2026-12-07T03:28:00.000Z",
                            "error": "observer call failed: ModelError: no response within 300s"}}}), current=True)
    text = failed.paragraphs[0]
    assert "below" not in text and "the observer failed 2×" in text and "no response within 300s" in text
    assert "2026-12-07 03:28:00" in text and "stay unobserved" in text
    earlier = log_text(record(activeObservations="", pendingMessageTokens=540), current=False)
    assert "below" not in earlier.paragraphs[0]  # an earlier generation's figures are not kept: no cause claimed
