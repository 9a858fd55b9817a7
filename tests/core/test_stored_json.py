"""What a row stores is JSON that any reader parses, whatever floats a caller or a tool handed the engine.

Python's ``json`` writes a float that is not finite as the bare word ``NaN`` / ``Infinity``, which is not
JSON: Mastra's ``JSON.parse`` of such a row fails, Postgres refuses it in a JSON column, and our own import
refuses an export holding it. The engine now writes them ``null``, as JavaScript's ``JSON.stringify`` does.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from core import Memory
from core.messages import Message
from core.stored_text import stored_json

pytestmark = pytest.mark.backends


def _strict(text: str) -> Any:
    def refuse(word: str) -> Any:
        raise ValueError(f"not JSON: {word}")

    return json.loads(text, parse_constant=refuse)


def test_stored_json_writes_what_json_stringify_would() -> None:
    value = {"a": math.nan, "b": [math.inf, -math.inf, 1.5], "c": ({"d": math.nan},), "e": "NaN"}
    assert _strict(stored_json(value)) == {"a": None, "b": [None, None, 1.5], "c": [{"d": None}], "e": "NaN"}
    assert stored_json({"x": 1.0, "y": "ü"}) == '{"x":1.0,"y":"ü"}'  # finite values: as before, byte for byte

    class Odd:
        def __str__(self) -> str:
            return "odd"

    assert _strict(stored_json({"o": Odd(), "n": math.nan}, default=str)) == {"o": "odd", "n": None}


def test_a_tool_result_or_metadata_holding_nan_is_stored_as_json_on_both_backends(store: Any) -> None:
    memory = Memory(store)
    memory.create_thread(thread_id="t", resource_id="ada", metadata={"score": math.nan, "ok": 1})
    call = Message.create("assistant", [{"type": "tool-invocation", "toolInvocation": {
        "state": "result", "toolCallId": "c1", "toolName": "stats", "args": {},
        "result": {"mean": math.nan, "max": math.inf, "n": 3}}}], thread_id="t", resource_id="ada")
    memory.save_messages([Message.user("numbers?", thread_id="t", resource_id="ada"), call])
    with store.db.read() as conn:
        content = conn.exec_driver_sql("SELECT content FROM mastra_messages WHERE id = ?", (call.id,)).scalar()
        meta = conn.exec_driver_sql("SELECT metadata FROM mastra_threads WHERE id = ?", ("t",)).scalar()
    content = content if isinstance(content, str) else json.dumps(content)  # (Postgres may hand back parsed JSON)
    meta = meta if isinstance(meta, str) else json.dumps(meta)
    stored = _strict(content)
    result = stored["parts"][0]["toolInvocation"]["result"]
    assert result == {"mean": None, "max": None, "n": 3}
    assert _strict(meta) == {"score": None, "ok": 1}
    # Read back through the engine as well.
    back = [m for m in memory.recall(thread_id="t", resource_id="ada").messages if m.id == call.id]
    assert back and back[0].tool_invocations()[0]["result"] == {"mean": None, "max": None, "n": 3}


@pytest.mark.parametrize("value", [math.nan, math.inf])
@pytest.mark.libsql_only
def test_an_export_of_such_a_row_imports(store: Any, tmp_path: Any, value: float) -> None:
    from core.transfer import export_data, import_data, load, render

    memory = Memory(store)
    memory.save_messages([Message.create("assistant", [{"type": "tool-invocation", "toolInvocation": {
        "state": "result", "toolCallId": "c1", "toolName": "stats", "args": {}, "result": [value]}}],
        thread_id="t", resource_id="ada")])
    path = tmp_path / "ada.json"
    path.write_text(render(export_data(store, resource_id="ada"), "json"), encoding="utf-8")
    data = load(path)  # refused a file holding NaN before (the import's own check)
    from core import open_store

    with open_store(tmp_path / "other.db") as other:
        report = import_data(other, data)
        assert report.message_ids
