"""The traces pane's pure logic: waterfall layout, chat transcripts, filters, notices (no Qt)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from core import open_store
from core.traces.spans import SpanRecord, TraceFilters
from studio.logic.traces_layout import (
    ERROR_COLOR,
    chat_transcript,
    empty_list_notice,
    error_parts,
    filters_for,
    format_duration,
    layout_trace,
    messages_from_input,
    response_from_output,
    span_color,
    span_facts,
    store_notice,
    time_ticks,
    transcript_html,
)
from studio.selection import Selection

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)


def span(span_id: str, start_ms: float, end_ms: float | None, parent: str | None = None,
         span_type: str = "generic", **kw: object) -> SpanRecord:
    return SpanRecord(
        trace_id="T", span_id=span_id, name=span_id, span_type=span_type, parent_span_id=parent,
        started_at=T0 + timedelta(milliseconds=start_ms),
        ended_at=None if end_ms is None else T0 + timedelta(milliseconds=end_ms), **kw,  # type: ignore[arg-type]
    )


def test_layout_places_spans_on_the_trace_axis_with_depth_and_children() -> None:
    spans = [
        span("gen", 20, 80, "root", "model_generation"),
        span("root", 0, 100, None, "agent_run"),
        span("recall", 0, 20, "root", "memory_operation"),
        span("proc", 5, 15, "recall", "processor_run"),
        span("tool", 80, 90, "root", "tool_call", error={"message": "boom"}),
    ]
    layout = layout_trace(spans)
    names = [r.span.span_id for r in layout.rows]
    assert names == ["root", "recall", "proc", "gen", "tool"]  # tree order, siblings by start
    by = {r.span.span_id: r for r in layout.rows}
    assert layout.total_ms == pytest.approx(100)
    assert (by["root"].offset, by["root"].width, by["root"].depth) == (0.0, 1.0, 0)
    assert by["gen"].offset == pytest.approx(0.2) and by["gen"].width == pytest.approx(0.6)
    assert by["proc"].depth == 2 and by["proc"].parent == by["recall"].index
    assert by["root"].children == (by["recall"].index, by["gen"].index, by["tool"].index)
    assert layout.roots == (0,)
    assert by["tool"].error and by["tool"].color == ERROR_COLOR
    assert by["gen"].color == span_color("model_generation") != span_color("tool_call")
    for row in layout.rows:
        assert 0.0 <= row.offset <= 1.0 and 0.0 <= row.width and row.offset + row.width <= 1.0 + 1e-9


def test_running_spans_reach_now_and_skewed_clocks_stay_inside_the_axis() -> None:
    spans = [span("root", 0, None, None, "agent_run"), span("early", -50, 10, "root"),
             span("late", 40, 500, "root")]
    layout = layout_trace(spans, now=T0 + timedelta(milliseconds=200))
    by = {r.span.span_id: r for r in layout.rows}
    assert by["root"].running and by["root"].duration_ms is None
    assert layout.start == T0 - timedelta(milliseconds=50)
    assert layout.total_ms == pytest.approx(550)  # the latest end wins over "now"
    assert by["root"].offset + by["root"].width == pytest.approx(1.0)
    for row in layout.rows:
        assert 0.0 <= row.offset <= 1.0 and row.offset + row.width <= 1.0 + 1e-9
    assert layout_trace([]).rows == ()
    instant = layout_trace([span("only", 0, 0)])
    assert instant.total_ms == 0 and instant.rows[0].width == 0.0


def test_orphans_and_parent_cycles_still_show() -> None:
    spans = [span("a", 0, 10, "b"), span("b", 1, 9, "a"), span("orphan", 2, 3, "missing")]
    layout = layout_trace(spans)
    assert {r.span.span_id for r in layout.rows} == {"a", "b", "orphan"}
    assert all(r.parent is None or r.parent < r.index for r in layout.rows)


def test_time_ticks_and_durations() -> None:
    ticks = time_ticks(95.3)
    assert ticks[0] == (0.0, "0 ms") and all(0 <= f <= 1 for f, _ in ticks) and 3 <= len(ticks) <= 5
    assert [label for _, label in time_ticks(2000)] == ["0 ms", "500 ms", "1.00 s", "1.50 s", "2.00 s"]
    assert format_duration(None) == "running"
    assert format_duration(0.172) == "0.17 ms"
    assert format_duration(23.64) == "23.6 ms"
    assert format_duration(1520) == "1.52 s"
    assert format_duration(123_000) == "2m 03s"


def test_transcript_from_openai_messages_with_tool_calls() -> None:
    gen = span("gen", 0, 5, None, "model_generation", input={
        "messages": [
            {"role": "system", "content": "You are a chef."},
            {"role": "user", "content": "Weather in Lisbon?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "getWeather", "arguments": "{\"city\": \"Lisbon\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 19}"},
        ],
        "tools": [{"type": "function", "function": {"name": "getWeather"}}],
    }, output={"text": "Sunny, 19°C.", "toolCalls": []},
        attributes={"usage": {"prompt_tokens": 40, "completion_tokens": 6, "total_tokens": 46}})
    t = chat_transcript(gen)
    assert t is not None
    assert [m.role for m in t.messages] == ["system", "user", "assistant", "tool"]
    assert t.messages[2].tool_calls[0].name == "getWeather"
    assert '"city": "Lisbon"' in t.messages[2].tool_calls[0].arguments  # pretty-printed arguments
    assert t.messages[3].tool_call_id == "c1"
    assert t.response is not None and t.response.text == "Sunny, 19°C."
    assert t.tools == ("getWeather",)
    assert t.usage is not None and (t.usage.input_tokens, t.usage.output_tokens) == (40, 6)
    assert chat_transcript(span("x", 0, 1, None, "tool_call", input={"messages": []})) is None


def test_transcript_from_ai_sdk_parts_and_other_shapes() -> None:
    turns = messages_from_input({"system": "Be brief.", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image", "mimeType": "image/png"}]},
        {"role": "assistant", "content": [{"type": "tool-call", "toolCallId": "t1", "toolName": "search",
                                           "args": {"q": "x"}}]},
        {"role": "tool", "content": [{"type": "tool-result", "toolName": "search", "result": {"hits": 2}}]},
    ]})
    assert [t.role for t in turns] == ["system", "user", "assistant", "tool"]
    assert turns[1].text == "hi\n[image: image/png]"
    assert turns[2].tool_calls[0].name == "search" and turns[2].tool_calls[0].id == "t1"
    assert "search →" in turns[3].text and '"hits": 2' in turns[3].text
    assert [t.text for t in messages_from_input({"prompt": "hello"})] == ["hello"]
    assert [t.text for t in messages_from_input([{"role": "user", "content": "bare"}])] == ["bare"]
    assert messages_from_input("not messages") == [] and messages_from_input(None) == []
    assert response_from_output("plain").text == "plain"  # type: ignore[union-attr]
    choice = response_from_output({"choices": [{"message": {"role": "assistant", "content": "c"}}]})
    assert choice is not None and choice.text == "c"
    assert response_from_output({"unrelated": 1}) is None


def test_point_events_are_moments_not_running_spans() -> None:
    """Mastra's point events (``isEvent``, ``endedAt`` null) showed as still running."""
    spans = [span("root", 0, 100, None, "agent_run"), span("approval", 40, None, "root", is_event=True)]
    live = layout_trace(spans, now=T0 + timedelta(seconds=30))
    event = live.row_of("approval")
    assert event is not None and not event.running and event.event
    assert event.duration_text == "event" and event.width == 0.0 and event.offset == pytest.approx(0.4)
    assert live.total_ms == pytest.approx(100)  # a "running" event would stretch the trace to now
    assert ("duration", "point event") in span_facts(event.span)
    still_open = layout_trace([span("root", 0, None, None, "agent_run")]).rows[0]
    assert still_open.running and still_open.duration_text == "running"


def test_transcript_html_escapes_everything() -> None:
    gen = span("gen", 0, 1, None, "model_generation",
               input={"messages": [{"role": "user", "content": "<script>alert(1)</script>"}]},
               output={"text": "a & b"})
    html = transcript_html(chat_transcript(gen))  # type: ignore[arg-type]
    assert "<script>" not in html and "&lt;script&gt;" in html and "a &amp; b" in html
    assert "assistant (response)" in html


def test_transcript_cards_follow_the_theme() -> None:
    gen = span("gen", 0, 1, None, "model_generation", input={"messages": [{"role": "user", "content": "hi"}]})
    assert "#1c1f25" in transcript_html(chat_transcript(gen), dark=True)  # type: ignore[arg-type]
    light = transcript_html(chat_transcript(gen), dark=False)  # type: ignore[arg-type]
    assert "#1c1f25" not in light and "#f0f3f6" in light


def test_filters_follow_the_selection_unless_all_threads() -> None:
    sel = Selection("li-wei", "liwei-shanghai")
    assert filters_for(sel, all_threads=False) == TraceFilters(thread_id="liwei-shanghai")
    assert filters_for(Selection("li-wei"), all_threads=False) == TraceFilters(resource_id="li-wei")
    assert filters_for(sel, all_threads=True, name="  chef ", status="error") == TraceFilters(
        status="error", name="chef")
    assert filters_for(Selection(), all_threads=False) == TraceFilters()


def test_an_empty_list_says_what_it_is_narrowed_to_and_what_lists_every_run() -> None:
    assert empty_list_notice(TraceFilters()) is None  # (not narrowed: ``store_notice`` says "No traces yet")
    thread = empty_list_notice(TraceFilters(resource_id="ada", thread_id="t1"))
    assert thread is not None and thread.level == "info"
    assert thread.text.startswith("No traced run of this thread: its messages were saved without one")
    assert "All Threads lists the runs of every thread." in thread.text
    resource = empty_list_notice(TraceFilters(resource_id="ada"))
    assert resource is not None and resource.text.startswith("No traced run of this resource")
    matched = empty_list_notice(TraceFilters(thread_id="t1", status="error", name="chef"))
    assert matched is not None and matched.text == (
        "No run matches the filter (status error, name “chef”). Any status and an empty filter list every run of "
        "this thread.")


def test_store_notices_say_what_state_the_trace_store_is_in() -> None:
    common = {"location": "/x/observability.duckdb", "kind": "duckdb"}
    missing = store_notice(busy=False, stale=False, missing=True, **common)
    assert missing is not None and "No traces yet" in missing.text and "/x/observability.duckdb" in missing.text
    stale = store_notice(busy=True, stale=True, missing=False, age_s=3.2, **common)
    assert stale is not None and stale.level == "warning"
    assert "Another process has the trace file open" in stale.text and "3 s ago" in stale.text
    busy = store_notice(busy=True, stale=False, missing=False, **common)
    assert busy is not None and "nothing could be read" in busy.text
    assert all("close the file in that program" in n.text for n in (stale, busy))  # what to do if it lasts
    assert store_notice(busy=False, stale=False, missing=False, **common) is None
    assert store_notice(busy=False, stale=False, missing=False, empty=True, filtered=True, **common) is None
    memory = store_notice(busy=False, stale=False, missing=True, location=":memory:", kind="memory")
    assert memory is not None and "in memory" in memory.text
    mastra = store_notice(busy=False, stale=False, missing=True, location="m.db", kind="libsql")
    assert mastra is not None and "mastra_ai_spans" in mastra.text
    # A Mastra database's spans are in the database: its lock, not a trace file, and no duckdb shell.
    held = store_notice(busy=True, stale=True, missing=False, age_s=2, location="m.db", kind="libsql")
    assert held is not None and held.level == "warning" and "2 s ago" in held.text
    assert "holds the database's lock" in held.text and "trace file" not in held.text and "duckdb" not in held.text
    assert "let that program finish its transaction, or close the database there" in held.text


def test_error_parts_read_our_shape_and_mastras() -> None:
    ours = {"message": "boom", "name": "RuntimeError", "details": {"stack": "Traceback…\nRuntimeError: boom"}}
    assert error_parts(ours) == ("RuntimeError: boom", "Traceback…\nRuntimeError: boom")
    assert error_parts({"message": "model refused", "id": "LLM_ERR", "domain": "AGENT"})[0] == "LLM_ERR: model refused"
    assert "AGENT" in error_parts({"message": "model refused", "domain": "AGENT"})[1]
    assert error_parts("plain") == ("plain", "") and error_parts(None) == ("", "")


def test_span_facts_include_timing_scope_and_tokens() -> None:
    gen = span("gen", 30, 45, None, "model_generation", thread_id="t1", resource_id="r1",
               attributes={"usage": {"inputTokens": 11, "outputTokens": 4}})
    facts = dict(span_facts(gen, T0))
    assert facts["duration"] == "15.0 ms" and "(+30.0 ms)" in facts["started"]
    assert facts["thread"] == "t1" and facts["resource"] == "r1"
    assert facts["tokens"] == "11 in · 4 out · 15 total"


@pytest.mark.slow
def test_demo_traces_lay_out_and_carry_the_prompt(tmp_path: Path) -> None:
    """On real spans from the engine: every bar inside the axis, the LLM input as a transcript."""
    from core.demo import seed_demo
    from core.traces.store import DuckDBObservabilityStore

    store = open_store(tmp_path / "memory.db")
    seed_demo(store)
    assert store.tracer().flush(10)
    store.close()
    reader = DuckDBObservabilityStore(tmp_path / "observability.duckdb", read_only=True)
    traces = reader.list_traces(limit=5)
    assert traces
    for summary in traces:
        layout = layout_trace(reader.get_trace(summary.trace_id))
        assert layout.rows[0].span.span_type == "agent_run" and layout.rows[0].depth == 0
        # Background work a turn handed off (issue 19: buffered observations) joins the turn's trace
        # after the run ended; without it the run spans the whole trace.
        late = {r.span.span_id for r in layout.rows if (r.span.attributes or {}).get("background")}
        for r in layout.rows:  # a background span's children are late too
            if r.span.parent_span_id in late:
                late.add(r.span.span_id)
        assert layout.rows[0].offset == 0.0
        root_end = layout.rows[0].offset + layout.rows[0].width
        assert all(r.offset + r.width <= root_end + 1e-9 for r in layout.rows if r.span.span_id not in late)
        if not late:
            assert layout.rows[0].width == pytest.approx(1.0)
        assert all(0 <= r.offset <= 1 and r.offset + r.width <= 1 + 1e-9 for r in layout.rows)
        gens = [r.span for r in layout.rows if r.span.span_type == "model_generation" and r.depth == 1]
        # The actor's calls hang off the run; only the observer's (observational memory) nest deeper.
        assert gens and all(r.depth > 1 and r.span.name.startswith("observer") for r in layout.rows
                            if r.span.span_type == "model_generation" and r.depth != 1)
        transcript = chat_transcript(gens[0])
        assert transcript is not None
        sent = gens[0].input["messages"]
        assert [m.role for m in transcript.messages] == [m["role"] for m in sent]
        assert transcript.messages[-1].text == sent[-1]["content"]


def test_a_failed_list_read_says_what_happened_and_what_to_do() -> None:
    """The banner of a runs list that could not be read said DuckDB's words alone; it says now what to check,
    that the pane reads again by itself and when, and that Reload tries now (the broken file's own advice kept)."""
    from studio.logic.traces_layout import read_error_notice

    plain = read_error_notice("IO Error: Permission denied.", broken=False, location="/d/observability.duckdb",
                              retry_s=8)
    assert plain.level == "error"
    assert plain.text.startswith("Traces could not be read: IO Error: Permission denied. Check that the trace "
                                 "file (/d/observability.duckdb) exists and can be read by you")
    assert plain.text.endswith("The pane tries again by itself (next in 8 s); Reload (F5) tries now.")
    broken = read_error_notice("not a valid DuckDB database file", broken=True, location=None, retry_s=2)
    assert "holds traces only (no conversation)" in broken.text and "Check that" not in broken.text
    assert "next in 2 s" in broken.text


def test_a_run_that_ended_itself_while_spans_under_it_failed_is_not_called_failed(tmp_path: Path) -> None:
    """Walked with a real llama.cpp (s34-walk9): a turn that answered while its background observer's call failed
    read "error" in the Traces list, as a turn that failed did. Both stay under the Status filter's "error"; the
    list says which: "ok, 1 err" for the first, "error" for a run whose own span failed."""
    from core.traces.store import DuckDBObservabilityStore
    from studio.logic.traces_layout import status_text, status_tip

    now = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=5)  # (within the retention)

    def run(trace: str, *, own: bool, inner: int) -> list[SpanRecord]:
        root = SpanRecord(trace_id=trace, span_id=f"{trace}-r", name=f"agent run {trace}", span_type="agent_run",
                          started_at=now, ended_at=now + timedelta(seconds=2),
                          error={"message": "the model failed"} if own else None)
        children = [SpanRecord(trace_id=trace, span_id=f"{trace}-c{i}", parent_span_id=root.span_id,
                               name="memory: observe", span_type="memory_operation", started_at=now,
                               ended_at=now + timedelta(seconds=1), error={"message": "observer call failed"})
                    for i in range(inner)]
        return [root, *children]

    store = DuckDBObservabilityStore(tmp_path / "observability.duckdb")
    store.write_spans([*run("answered", own=False, inner=1), *run("failed", own=True, inner=0),
                       *run("both", own=True, inner=2), *run("fine", own=False, inner=0)])
    listed = {t.trace_id: t for t in store.list_traces()}
    store.close()
    answered, failed, both, fine = (listed[k] for k in ("answered", "failed", "both", "fine"))
    assert [t.status for t in (answered, failed, both, fine)] == ["error", "error", "error", "ok"]
    assert [t.failed_itself for t in (answered, failed, both, fine)] == [False, True, True, False]
    assert [status_text(t) for t in (answered, failed, both, fine)] == ["ok, 1 err", "error", "error", "ok"]
    assert status_tip(answered).startswith("The run itself ended without an error; 1 span under it failed")
    assert status_tip(failed).startswith("The run failed: its own span has an error")


def test_a_runs_words_in_the_trace_cell_reorder_nothing() -> None:
    """What a run was asked is a user's text: a right-to-left override in it is written as its escape in the Trace
    cell (as titles are), so the cell reads in stored order; the tooltip keeps the words as they came."""
    from core.traces.spans import TraceSummary
    from studio.logic.traces_layout import trace_label, trace_short, trace_tip

    asked = "pay \u202eylno kcab\u202c now"
    run = TraceSummary("t1", "agent run: 'scribe'", "agent_run", "scribe", datetime(2026, 1, 1, tzinfo=timezone.utc),
                       None, None, "ok", 1, 0, 0, 0, 0, "th", "ada", input_text=asked)
    assert trace_label(run) == "agent run: 'scribe' · “pay \\u202eylno kcab\\u202c now”"
    assert trace_short(run) == ("'scribe' · “pay \\u202eylno kcab\\u202c now”",)
    assert asked in trace_tip(run)
