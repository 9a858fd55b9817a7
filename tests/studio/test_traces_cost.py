"""Tokens and estimated cost in the traces pane (issue 11, item 5): per run and per thread, from a
price table the user edits (kept in the Studio's settings), with no price for local models."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QSettings, Qt

from core import Memory, Message, open_store
from core.traces.spans import ModelUsage, SpanRecord
from core.traces.store import DuckDBObservabilityStore
from studio.logic.pricing import (
    DEFAULT_PRICES,
    NO_PRICE,
    Price,
    check_rows,
    dump_prices,
    estimate,
    format_cost,
    is_local,
    load_prices,
    price_for,
)
from studio.panes.traces import COL_COST, PRICES_KEY, TracesPane
from studio.selection import Selection

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
WAIT = 20_000


# -- pure -----------------------------------------------------------------------------------------------

def test_local_models_are_recognised() -> None:
    assert is_local(ModelUsage("scripted/chef"))
    assert is_local(ModelUsage("openai-compatible/qwen2.5", base_url="http://127.0.0.1:8000/v1"))
    assert is_local(ModelUsage("openai-compatible/mistral", base_url="http://localhost:1234/v1"))
    assert is_local(ModelUsage("openai-compatible/llama3:8b"))  # Ollama's name:tag
    assert is_local(ModelUsage("gemma", provider="ollama"))
    assert not is_local(ModelUsage("openai/gpt-4o-mini", provider="openai", base_url="https://api.openai.com/v1"))


def test_prices_match_full_id_or_bare_name_and_never_default_a_local_model() -> None:
    table = {**DEFAULT_PRICES, "openai/gpt-4o": Price(5, 20)}
    assert price_for(table, ModelUsage("openai/gpt-4o-mini")) == DEFAULT_PRICES["gpt-4o-mini"]
    assert price_for(table, ModelUsage("openai/gpt-4o")) == Price(5, 20)  # the full id wins
    local = ModelUsage("openai-compatible/gpt-4o-mini", base_url="http://localhost:8000/v1")
    assert price_for(table, local) is None  # a local server named like a cloud model: no default price
    assert price_for({**table, "openai-compatible/gpt-4o-mini": Price(0.01, 0.01)}, local) == Price(0.01, 0.01)


def test_estimates_say_what_they_know() -> None:
    paid = ModelUsage("openai/gpt-4o-mini", input_tokens=1_000_000, output_tokens=500_000)
    local = ModelUsage("scripted/chef", input_tokens=40, output_tokens=4)
    assert estimate(DEFAULT_PRICES, [paid]).label == "$0.45"  # 0.15 + 0.5 × 0.60
    only_local = estimate(DEFAULT_PRICES, [local])
    assert only_local.label == NO_PRICE and "no price set" in only_local.tooltip.lower()
    both = estimate(DEFAULT_PRICES, [paid, local])
    assert both.label == "$0.45+" and both.unpriced == ["scripted/chef"]
    assert format_cost(0.000123) == "$0.0001" and format_cost(12.5) == "$12.50" and format_cost(0) == "$0.00"


def test_price_table_round_trip_and_row_checks() -> None:
    table = {"openai/gpt-4o": Price(2.5, 10.0), "my-model": Price(0.0, 1.25)}
    assert load_prices(dump_prices(table)) == table
    assert load_prices(None) == DEFAULT_PRICES and load_prices("not json") == DEFAULT_PRICES
    assert load_prices("{}") == {}  # the user removed every row: that is kept
    ok, problems = check_rows([("gpt-4o", "2.5", "$10"), ("", "", "")])
    assert ok == {"gpt-4o": Price(2.5, 10.0)} and problems == []
    _, problems = check_rows([("a", "x", "1"), ("a", "1", "1"), ("", "1", "1"), ("b", "-1", "1")])
    assert len(problems) == 3 and "numbers" in problems[0] and "name the model" in problems[1]


# -- the pane -------------------------------------------------------------------------------------------

def _run(trace: str, thread: str, minutes: int, model: str, inp: int, out: int,
         root_model: Any = None) -> list[SpanRecord]:
    base = T0 + timedelta(minutes=minutes)
    return [
        SpanRecord(trace_id=trace, span_id=f"{trace}-root", name="agent run: 'chef'", span_type="agent_run",
                   started_at=base, ended_at=base + timedelta(seconds=2), thread_id=thread, resource_id="ana",
                   attributes={"model": root_model or {"model_id": model}}),
        SpanRecord(trace_id=trace, span_id=f"{trace}-gen", parent_span_id=f"{trace}-root", name="llm",
                   span_type="model_generation", started_at=base, ended_at=base + timedelta(seconds=1),
                   thread_id=thread, resource_id="ana",
                   attributes={"model": model, "provider": model.split("/")[0],
                               "usage": {"prompt_tokens": inp, "completion_tokens": out}}),
    ]


@pytest.fixture()
def db(tmp_path: Path) -> Path:
    path = tmp_path / "memory.db"
    store = open_store(path)
    Memory(store).save_messages([Message.user("hi", thread_id="t1", resource_id="ana")])
    store.close()
    traces = DuckDBObservabilityStore(path.with_name("observability.duckdb"))
    traces.write_spans(_run("paid", "t1", 0, "openai/gpt-4o-mini", 2_000_000, 1_000_000))
    traces.write_spans(_run("local", "t1", 1, "openai-compatible/llama3", 30_000, 3_000,
                            root_model={"model_id": "openai-compatible/llama3", "base_url": "http://localhost:11434/v1"}))
    traces.write_spans(_run("other", "t2", 2, "openai/gpt-4o", 1_000_000, 0))
    return path


def open_pane(qtbot: Any, make_session: Any, db: Path) -> TracesPane:
    pane = TracesPane(make_session(db))
    qtbot.addWidget(pane)
    pane.resize(1200, 800)
    with qtbot.waitSignal(pane.traces_loaded, timeout=WAIT):
        pane.show()
    with qtbot.waitSignal(pane.traces_loaded, timeout=WAIT):
        pane.set_selection(Selection("ana", "t1"))
    qtbot.waitUntil(lambda: "Thread t1" in pane.usage_label.text(), timeout=WAIT)
    return pane


def cost_cell(pane: TracesPane, trace_id: str) -> tuple[str, str]:
    row = next(i for i, t in enumerate(pane.traces) if t.trace_id == trace_id)
    index = pane.trace_model.index(row, COL_COST)
    return index.data(), index.data(Qt.ItemDataRole.ToolTipRole)


def test_cost_per_run_and_per_thread(no_leaked_widgets: None, qtbot: Any, make_session: Any, db: Path) -> None:
    pane = open_pane(qtbot, make_session, db)
    assert pane.trace_model.headerData(COL_COST, Qt.Orientation.Horizontal) == "Cost"
    assert [t.trace_id for t in pane.traces] == ["local", "paid"]
    assert cost_cell(pane, "paid")[0] == "$0.90"  # 2M × $0.15 + 1M × $0.60
    shown, tip = cost_cell(pane, "local")
    assert shown == NO_PRICE and "no price set (local model)" in tip  # never "$0.00"
    line = pane.usage_label.text()
    assert line.startswith("Thread t1: 3,033,000 tokens (2,030,000 in · 1,003,000 out)")
    assert "est. $0.90+" in line and "openai-compatible/llama3" in pane.usage_label.toolTip()


def test_prices_are_edited_in_a_dialog_and_kept_in_the_settings(no_leaked_widgets: None, qtbot: Any,
                                                                 make_session: Any, db: Path) -> None:
    pane = open_pane(qtbot, make_session, db)
    pane.commands.run("traces.prices")
    dialog = pane.price_editor
    assert dialog.isVisible() and dialog.windowTitle() == "Model Prices"
    dialog.add_row()
    row = dialog.grid.rowCount() - 1
    for col, text in enumerate(("openai-compatible/llama3", "1", "2")):
        dialog.grid.item(row, col).setText(text)
    assert dialog.validate()
    with qtbot.waitSignal(dialog.accepted):
        dialog.buttons.accepted.emit()
    assert cost_cell(pane, "local")[0] == "$0.04"  # 30k × $1/M + 3k × $2/M
    assert "est. $0.94" in pane.usage_label.text() and "+" not in pane.usage_label.text().split("est.")[1]
    saved = load_prices(QSettings().value(PRICES_KEY))
    assert saved["openai-compatible/llama3"] == Price(1.0, 2.0) and saved["gpt-4o-mini"] == DEFAULT_PRICES["gpt-4o-mini"]
    again = open_pane(qtbot, make_session, db)  # a new pane (a new launch) reads them back
    assert cost_cell(again, "local")[0] == "$0.04"


def test_a_bad_price_blocks_save(no_leaked_widgets: None, qtbot: Any, make_session: Any, db: Path) -> None:
    pane = open_pane(qtbot, make_session, db)
    pane.edit_prices()
    dialog = pane.price_editor
    dialog.grid.item(0, 1).setText("cheap")
    assert not dialog.validate() and "numbers" in dialog.problem.text()
    dialog.reject()


def test_a_price_of_nan_or_infinity_is_refused_like_any_other_non_number() -> None:
    """float() reads "nan", "inf" and "Infinity": saved, they showed costs of $nan or $inf."""
    for bad in ("nan", "inf", "-inf", "Infinity", "$inf"):
        table, problems = check_rows([("gpt-4o", bad, "1"), ("gpt-4o-mini", "1", bad)])
        assert table == {} and problems == ["Row 1: prices must be numbers (US $ per million tokens).",
                                            "Row 2: prices must be numbers (US $ per million tokens)."], bad
