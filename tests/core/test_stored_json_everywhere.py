"""Every JSON the engine stores, or writes to a file a user keeps, is JSON any reader parses.

Python's ``json`` writes a float that is not finite as the bare word ``NaN`` / ``Infinity``: not JSON, so
Mastra's ``JSON.parse`` of the row fails, Postgres refuses it in a JSON column, and our own import refuses
an export holding it. Messages and thread metadata were fixed first (``test_stored_json``); these tests
cover the other writes: turn records and tool definitions, span attributes (DuckDB and Postgres),
observational-memory rows, vector metadata, the export file, and a model's usage. Each reads every stored
row the way Mastra does (``json.loads`` refusing those constants).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from core import Memory, MemoryOptions, open_store
from core.agent import Agent, Tool
from core.llm import ScriptedModel, ScriptedReply, tool_call
from core.llm.base import Usage
from core.observational import store as om_store
from core.options import ObservationalMemoryOptions, OptionsError
from core.stored_text import json_text
from core.traces.spans import SpanRecord

pytestmark = pytest.mark.backends


def _strict(text: str) -> Any:
    def refuse(word: str) -> Any:
        raise ValueError(f"not JSON: {word}")

    return json.loads(text, parse_constant=refuse)


def _json_like(value: Any) -> Iterator[str]:
    """Text values (and nested ones) that are meant as JSON: an object or a list."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            value = bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        yield value
        parsed = _strict(value)
        for inner in (parsed.values() if isinstance(parsed, dict) else parsed if isinstance(parsed, list) else []):
            yield from _json_like(inner)


def _every_json_value(store: Any, url: Any) -> list[tuple[str, str]]:
    """(table, text) of every JSON object or list stored in any column of any table of the database."""
    found: list[tuple[str, str]] = []
    if isinstance(url, str):  # Postgres: each row as JSON text (a JSON column is embedded as JSON)
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            tables = [r[0] for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' "
                "AND table_type = 'BASE TABLE'").fetchall()]
            for table in tables:
                for (row,) in conn.execute(f'SELECT row_to_json(x)::text FROM "{table}" x').fetchall():
                    for value in _strict(row).values():
                        text = value if isinstance(value, str) else json.dumps(value)
                        found += [(table, t) for t in _json_like(text)]
        return found
    with store.db.read() as conn:
        tables = [r[0] for r in conn.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND sql NOT LIKE 'CREATE VIRTUAL%'").fetchall()]
        for table in tables:
            for row in conn.exec_driver_sql(f'SELECT * FROM "{table}"').fetchall():
                for value in row:
                    found += [(table, t) for t in _json_like(value)]
    return found


def test_json_text_is_json_dumps_for_finite_values_and_writes_null_for_the_others() -> None:
    finite = {"b": [1.5, -0.0, 1e300, 3], "a": {"ü": "x", "2": None, "k": True}, "t": (1, "two"), "n": {2: 1.5}}
    for options in ({}, {"ensure_ascii": False}, {"indent": 2}, {"sort_keys": True, "separators": (",", ":")},
                    {"default": str, "ensure_ascii": True}):
        assert json_text(finite, **options) == json.dumps(finite, **options)  # byte for byte as before
    odd = {"x": math.nan, "y": [math.inf, -math.inf], math.nan: 1, math.inf: 2, -math.inf: 3, "d": datetime(2025, 1, 1)}
    text = json_text(odd, default=str)
    assert _strict(text) == {"x": None, "y": [None, None], "NaN": 1, "Infinity": 2, "-Infinity": 3,
                             "d": "2025-01-01 00:00:00"}  # as JSON.stringify writes them


def test_a_turn_with_nan_in_a_tool_result_arguments_definition_and_metadata_stores_only_json(
        store: Any, db_path: Any) -> None:
    """Tool result, tool arguments, a tool definition and thread metadata holding NaN / Infinity: every row
    of every table (messages, turn records and their texts, tool definitions, threads) parses as JSON."""
    memory = Memory(store, MemoryOptions(last_messages=10))
    memory.create_thread(thread_id="t", resource_id="ada", metadata={"score": math.nan, "inf": math.inf})
    model = ScriptedModel([ScriptedReply(tool_calls=(tool_call("stats", {"limit": math.inf}),),
                                         usage=Usage(3, 4, 7)), "Done."])
    tool = Tool("stats", "numbers", lambda args, ctx: {"mean": math.nan, "max": math.inf, "min": -math.inf},
                {"type": "object", "properties": {"limit": {"type": "number", "maximum": math.inf}}})
    agent = Agent("calc", instructions="Count.", model=model, memory=memory, tools=[tool])
    assert agent.generate("Numbers?", memory={"resource": "ada", "thread": "t"}).text == "Done."
    values = _every_json_value(store, db_path)
    tables = {table for table, _ in values}
    assert {"mastra_messages", "mastra_threads", "memory_studio_turns"} <= tables, tables
    assert any('"mean":null' in text for _, text in values)  # the tool result, as JSON.stringify wrote it
    # Read back through the engine: the record is whole and Replay's check of it still passes.
    from core.replay.store import for_thread

    [record] = for_thread(store, "t").values()
    assert record.facts_changed() == ()


def test_observational_memory_rows_hold_only_json(store: Any, db_path: Any) -> None:
    store.memory.create_thread(thread_id="t1", resource_id="u1")
    cursor = om_store.Cursor("2025-01-02T09:00:00.000Z", "m1")
    obs = om_store.Observation("A", 5, ["m1"], 10, 0, cursor, current_task="task")
    kw: dict[str, Any] = {"key": "thread:t1", "scope": "thread", "thread_id": "t1", "resource_id": "u1",
                          "config": {"observation": {"bufferActivation": math.nan, "blockAfter": math.inf}}}
    first = om_store.commit_observation(store, record=None, obs=obs, event={"kind": "observed", "ratio": math.nan},
                                        **kw)
    assert first is not None and first.config["observation"] == {"bufferActivation": None, "blockAfter": None}
    assert om_store.commit_reflection(store, record=first, reflection="R", tokens=1) is not None
    om_texts = [text for table, text in _every_json_value(store, db_path) if table == "mastra_observational_memory"]
    assert any('"blockAfter":null' in t.replace(" ", "") for t in om_texts)


def test_non_finite_observational_options_are_refused_before_a_turn() -> None:
    for bad in ({"block_after": math.inf}, {"block_after": math.nan}, {"reflection_block_after": math.inf},
                {"buffer_tokens": math.nan}):
        with pytest.raises(OptionsError):
            ObservationalMemoryOptions(**bad)  # accepted before; int() of it then raised inside a turn


def test_a_models_usage_that_is_not_finite_counts_as_not_reported() -> None:
    usage = Usage.from_dict({"prompt_tokens": math.nan, "completion_tokens": math.inf, "total_tokens": -math.inf})
    assert usage == Usage(0, 0, 0)  # int() of them raised and ended the turn
    assert Usage.from_dict({"prompt_tokens": 5, "completion_tokens": math.nan}) == Usage(5, 0, 5)


def test_span_attributes_holding_nan_are_stored_as_json(store: Any, db_path: Any) -> None:
    """DuckDB (beside a libSQL file) and Postgres (``mastra_ai_spans``, jsonb refused NaN: the span was lost)."""
    now = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)
    span = SpanRecord(trace_id="tr", span_id="s1", name="model call", span_type="model_generation",
                      started_at=now, ended_at=now, attributes={"usage": {"prompt_tokens": math.nan}, "t": math.inf},
                      metadata={"score": -math.inf}, output={"raw": [math.nan]})
    store.observability.write_spans([span])
    got = store.observability.get_trace("tr")
    assert got and got[0].attributes == {"usage": {"prompt_tokens": None}, "t": None}
    if isinstance(db_path, str):
        texts = [t for table, t in _every_json_value(store, db_path) if table == "mastra_ai_spans"]
        assert any('"prompt_tokens": null' in t or '"prompt_tokens":null' in t for t in texts)
        return
    import duckdb

    path = store.location.observability_path
    store.observability.close()
    with duckdb.connect(str(path), read_only=True) as conn:
        row = conn.execute('SELECT CAST(attributes AS VARCHAR), CAST(metadata AS VARCHAR), CAST(output AS VARCHAR) '
                           'FROM mastra_ai_spans WHERE "spanId" = ?', ["s1"]).fetchone()
    assert row is not None
    assert [_strict(v) for v in row] == [{"usage": {"prompt_tokens": None}, "t": None}, {"score": None},
                                         {"raw": [None]}]


@pytest.mark.libsql_only
def test_the_export_file_of_such_rows_is_json_and_imports(store: Any, tmp_path: Path) -> None:
    from core.transfer import export_data, import_data, load, render

    memory = Memory(store)
    memory.create_thread(thread_id="t", resource_id="ada", metadata={"x": 1})
    with store.db.write() as conn:  # a row another program wrote with a bare NaN (SQLite keeps any text)
        conn.exec_driver_sql("UPDATE mastra_threads SET metadata = ? WHERE id = ?", ('{"x": NaN}', "t"))
    text = render(export_data(store, resource_id="ada"), "json")
    assert _strict(text)["threads"][0]["metadata"] == {"x": None}
    path = tmp_path / "ada.json"
    path.write_text(text, encoding="utf-8")
    with open_store(tmp_path / "other.db") as other:
        import_data(other, load(path))  # load refused a file holding NaN (its own check)
        thread = other.memory.get_thread("t")
        assert thread is not None and thread.metadata == {"x": None}


def test_an_export_too_large_for_the_memory_available_is_refused_before_it_is_read() -> None:
    """Import holds every row of the file at once (measured: a 1.0 GB export peaked at 1.15 GB of RSS read in
    pieces, 3.07 GB before): a file that cannot fit is refused up front, naming its size and what to do."""
    from core.transfer.errors import ExportFormatError
    from core.transfer.format import _check_whole_fits, available_memory, check_fits

    check_fits(1_000_000_000, "big.json", available=3_000_000_000)  # fits: no error
    with pytest.raises(ExportFormatError) as caught:
        check_fits(2_000_000_000, "big.json", available=2_500_000_000)
    message = str(caught.value)
    assert "big.json is 2.0 GB" in message and "about 3.0 GB of memory" in message and "2.5 GB available" in message
    assert "Nothing was imported" in message and "memory-studio export --thread" in message
    with pytest.raises(ExportFormatError) as caught:  # a broken file too large to be read whole to say where
        _check_whole_fits(2_000_000_000, "big.json", available=2_500_000_000)
    assert "not an export import can read" in str(caught.value) and "json.tool" in str(caught.value)
    available = available_memory()
    assert available is None or available > 0


@pytest.mark.libsql_only
def test_the_file_read_in_pieces_is_what_json_loads_makes_and_refuses_what_it_refuses(
        store: Any, tmp_path: Path) -> None:
    import io

    from core.transfer import export_data, render
    from core.transfer.format import _not_json
    from core.transfer.stream_json import load_pieces

    memory = Memory(store)
    memory.create_thread(thread_id="t", resource_id="ada", metadata={"n": 1e21, "s": "é \" 😀"})
    from core.messages import Message

    memory.save_messages([Message.user(f"number {i} -0.5 1e-7 ü", thread_id="t", resource_id="ada") for i in range(5)])
    text = render(export_data(store, resource_id="ada"), "json")
    raw = text.encode("utf-8")
    want = json.loads(text)
    for chunk in (1, 2, 3, 5, 64, 1 << 20):  # every boundary: inside a number, a string, a UTF-8 sequence
        assert load_pieces(io.BytesIO(raw), _not_json, chunk) == want
        assert load_pieces(io.BytesIO(b"\xef\xbb\xbf" + raw), _not_json, chunk) == want  # a byte-order mark
    broken = [raw[:-3], raw + b"{}", raw.replace(b'"version": 1', b'"version": NaN'), raw.replace(b"],", b"]", 1),
              b"[" + raw + b"]", raw.replace(b'"format"', b"format"), b"\xff" + raw, b"", b"   "]
    for bad in broken:
        for chunk in (1, 7, 1 << 20):
            assert load_pieces(io.BytesIO(bad), _not_json, chunk) is None  # the whole-text reader says why
