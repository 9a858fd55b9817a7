"""Observation dates in the prompt follow Mastra's rules, and a turn recorded before them still rebuilds
exactly (its record says how its dates were written).

Mastra 1.71 annotates the log's date headers with its own relative time ("1 week ago" from 7 days), puts a
line such as "[1 week later]" between headers more than a day apart, and expands inline estimated dates.
This engine first wrote "10 days ago" and no gap lines; records from then carry no ``od`` key, and a
rebuild of such a turn must write its dates the old way, or an exact turn would show as changed.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pytest

from core import Agent, Memory, MemoryOptions, open_store
from core.llm import ScriptedModel
from core.observational.context import LEGACY_DATES
from core.processors import observational as om_processor
from core.timeutil import FixedClock
from core.traces.tracer import InMemorySpanExporter, Tracer

RESOURCE, THREAD = "ada", "t-journal"
START = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)


class Observer:
    """Each call observes a block dated ten days before the conversation, then one dated that day."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, messages: list[dict[str, Any]], tools: Any) -> str:
        self.calls += 1
        n = self.calls
        return (f"<observations>\nDate: Feb 20, 2026\n* 🔴 (09:{n:02d}) Batch {n}: the user plans to visit Porto "
                f"(meaning Feb 25, 2026).\n\nDate: Mar 2, 2026\n* 🔴 (10:{n:02d}) Batch {n}: back home.\n"
                "</observations>")


def run_turns(db_path: Any) -> tuple[Any, Memory, dict[str, list[dict[str, Any]]]]:
    store = open_store(db_path)
    memory = Memory(store, MemoryOptions(observational_memory={"message_tokens": 60, "observation_tokens": 50_000,
                                                               "buffer_tokens": False}),
                    clock=FixedClock(START, step_ms=1000), name="journal",
                    observer_model=ScriptedModel(Observer(), name="observer"))
    exporter = InMemorySpanExporter()
    agent = Agent("journal", instructions="You keep a travel journal.", memory=memory, tracer=Tracer(exporter),
                  model=ScriptedModel(lambda messages, tools: "Noted, and the rest of the journal too."))
    sent: dict[str, list[dict[str, Any]]] = {}  # each turn's input id -> the messages its model call received
    for i in range(6):
        result = agent.generate(f"Journal entry {i}: markets, the river, a tram ride and lemons again.",
                                memory={"resource": RESOURCE, "thread": THREAD})
        call = next(s for s in exporter.spans if s.trace_id == result.trace_id and s.span_type == "model_generation"
                    and s.name.startswith("llm:"))
        user = next(m for m in result.messages if m.role == "user")
        sent[user.id] = call.input["messages"]
    return store, memory, sent


def om_text(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(m["content"]) for m in messages if m["role"] == "system")


def test_new_turns_write_mastras_dates_and_rebuild_exactly(db_path: Any) -> None:
    store, memory, sent = run_turns(db_path)
    try:
        texts = [om_text(messages) for messages in sent.values()]
        observed = [t for t in texts if "Date: Feb 20, 2026" in t]
        assert observed, "the observer ran and its notes reached the prompt"
        assert all("Date: Feb 20, 2026 (1 week ago)" in t and "[1 week later]\n\nDate: Mar 2, 2026 (today)" in t
                   and "(meaning Feb 25, 2026 - 5 days ago, likely already happened)" in t for t in observed)
        for turn in memory.turns(THREAD):
            prompt = memory.assemble(thread_id=THREAD, resource_id=RESOURCE, as_of=turn.input_message_id)
            assert prompt.replay is not None and prompt.replay.matches is True, turn.input_text
            assert prompt.messages == sent[turn.input_message_id]
    finally:
        store.close()


def test_a_turn_recorded_before_mastras_dates_rebuilds_with_its_own(db_path: Any,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # The turns run as the engine did before Mastra's rules; their records are then made to look as
    # that engine wrote them (no ``od`` key).
    monkeypatch.setattr(om_processor, "DATE_STYLE", LEGACY_DATES)
    store, memory, sent = run_turns(db_path)
    monkeypatch.undo()
    try:
        observed = [mid for mid, messages in sent.items() if "Date: Feb 20, 2026" in om_text(messages)]
        assert observed and all("Date: Feb 20, 2026 (10 days ago)\n" in om_text(sent[mid])
                                and "later]" not in om_text(sent[mid]) for mid in observed)
        with store.db.write() as conn:
            rows = conn.exec_driver_sql("SELECT input_message_id, record FROM memory_studio_turns").fetchall()
            for mid, raw in rows:
                data = json.loads(raw)
                assert data.pop("od") == 2  # every new record says how it showed observational memory
                conn.exec_driver_sql("UPDATE memory_studio_turns SET record = ? WHERE input_message_id = ?",
                                     (json.dumps(data, separators=(",", ":")), mid))
        fresh = Memory(store, MemoryOptions(observational_memory={"message_tokens": 60, "observation_tokens": 50_000,
                                                                  "buffer_tokens": False}), name="journal")
        for mid in observed:
            prompt = fresh.assemble(thread_id=THREAD, resource_id=RESOURCE, as_of=mid)
            assert prompt.replay is not None and prompt.replay.matches is True
            assert prompt.messages == sent[mid]
        # The key is what decides: the same records claiming Mastra's dates no longer match.
        with store.db.write() as conn:
            for mid in observed:
                raw = conn.exec_driver_sql("SELECT record FROM memory_studio_turns WHERE input_message_id = ?",
                                           (mid,)).scalar()
                data = json.loads(raw)
                data["od"] = 2
                conn.exec_driver_sql("UPDATE memory_studio_turns SET record = ? WHERE input_message_id = ?",
                                     (json.dumps(data, separators=(",", ":")), mid))
        claimed = Memory(store, MemoryOptions(observational_memory={"message_tokens": 60,
                                                                    "observation_tokens": 50_000,
                                                                    "buffer_tokens": False}), name="journal")
        prompt = claimed.assemble(thread_id=THREAD, resource_id=RESOURCE, as_of=observed[-1])
        assert prompt.replay is not None and prompt.replay.matches is False
    finally:
        store.close()


def test_the_records_date_styles_are_the_contexts() -> None:
    from core.observational.context import DATE_STYLE, MASTRA_DATES
    from core.replay import record

    assert record.OM_DATE_STYLES == (LEGACY_DATES, MASTRA_DATES) and record.OM_DATES == DATE_STYLE
