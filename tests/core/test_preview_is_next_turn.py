"""The Prompt Inspector's preview of the next turn, when observational memory acts at the start of it.

A turn first activates what the background observer buffered (once ``message_tokens`` is reached),
and without buffering observes synchronously, before its own model call. The preview used to show
the prompt without either, while saying "N buffered chunk(s) would be activated now". Now:

- activation: the preview applies it in memory, so its messages are the bytes the loopback server then
  receives from the turn (official ``openai`` client), and the database is unchanged by the preview;
- synchronous observation: the preview makes no model call, so it names the messages the turn's
  observer call takes out of the window (``observeFirst``), exactly when the turn then observes them.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from datetime import datetime, timezone
from typing import Any

import pytest
import sqlalchemy as sa

from core import Agent, Memory, MemoryOptions
from core.llm import LoopbackServer, OpenAICompatibleModel, ScriptedModel
from core.llm.wire import without_transport
from core.messages import Message
from core.observational.store import load_current
from core.timeutil import FixedClock

pytestmark = pytest.mark.backends

RESOURCE, THREAD = "zoë", "t-preview"
INSTRUCTIONS = "Antworte kurz — „so“."
TEXTS = [f"Eintrag {n}: Zoë ging am Fluss entlang 🌊, kaufte Zitronen und plante den Zug nach Porto."
         for n in range(1, 9)]


def _observer() -> ScriptedModel:
    count = itertools.count(1)

    def reply(messages: list[dict[str, Any]], tools: Any) -> str:
        n = next(count)
        return (f"<observations>\nDate: Mar 2, 2026\n* 🔴 (09:{n:02d}) Zoë: Eintrag-Bündel {n} „Fluss“.\n"
                f"</observations>\n<current-task>\nBündel {n} notieren.\n</current-task>")

    return ScriptedModel(reply, name="observer")


#: A reflection shorter than any log it rewrites (so it is accepted and the log shrinks).
REFLECTOR = ScriptedModel(lambda messages, tools: "<observations>\nDate: Mar 2, 2026\n* 🔴 Zoë: Fluss.\n"
                          "</observations>", name="reflector")


def database_state(store: Any) -> dict[str, tuple[int, str]]:
    """Every table's row count and a hash of its rows (in a fixed order)."""
    out: dict[str, tuple[int, str]] = {}
    with store.db.read() as conn:
        for name in sorted(sa.inspect(conn).get_table_names()):
            rows = sorted(json.dumps(list(r), default=str, ensure_ascii=False)
                          for r in conn.exec_driver_sql(f'SELECT * FROM "{name}"'))
            out[name] = (len(rows), hashlib.sha256("\n".join(rows).encode()).hexdigest())
    return out


def previews_and_turns(store: Any, om: dict[str, Any]) -> list[tuple[Any, list[dict[str, Any]], set[str], bool]]:
    """For each text: the preview of the next turn (the database checked unchanged by it), the messages
    the server then received from the turn, the ids the turn's observation took out of the window, and
    whether the turn started a new generation (reflected)."""
    clock = FixedClock(datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc), step_ms=1000)
    out = []
    with LoopbackServer(lambda messages, tools: "Notiert ✓.") as server:
        memory = Memory(store, MemoryOptions(last_messages=40, observational_memory={"enabled": True, **om}),
                        clock=clock, observer_model=_observer(), reflector_model=REFLECTOR, name="preview")
        model = OpenAICompatibleModel("loopback-chat", base_url=server.base_url, api_key="sk-test", api_key_env=None,
                                      keyring_service=None)
        agent = Agent("preview", instructions=INSTRUCTIONS, model=model, memory=memory, tracer=False)
        try:
            for text in TEXTS:
                assert memory.wait_idle(30)
                before = database_state(store)
                observed_before = _observed(store)
                generation = _generation(store)
                preview = memory.assemble(thread_id=THREAD, resource_id=RESOURCE, input=[Message.user(text)],
                                          instructions=INSTRUCTIONS)
                assert database_state(store) == before, "the preview changed the database"
                agent.generate(text, memory={"resource": RESOURCE, "thread": THREAD})
                sent = without_transport(json.loads(server.chat_request_bytes()[-1]))["messages"]
                out.append((preview, sent, _observed(store) - observed_before, 0 <= generation < _generation(store)))
            assert memory.wait_idle(30)
        finally:
            model.close()
    return out


def _observed(store: Any) -> set[str]:
    record = load_current(store, THREAD)
    return set(record.observed_message_ids) if record is not None else set()


def _generation(store: Any) -> int:
    record = load_current(store, THREAD)
    return record.generation_count if record is not None else -1


def om_notes(preview: Any) -> dict[str, Any]:
    return dict(preview.notes.get("observational-memory", {}))


def test_a_preview_shows_the_buffered_chunks_the_next_turn_activates_and_writes_nothing(store: Any) -> None:
    runs = previews_and_turns(store, {"message_tokens": 60, "buffer_tokens": 0.25, "block_after": 10.0})
    for n, (preview, sent, _observed_ids, _reflected) in enumerate(runs, 1):
        assert preview.messages == sent, f"turn {n}: the preview is not what the turn sent"
        assert "observeFirst" not in om_notes(preview)
        assert "would be activated" not in json.dumps(om_notes(preview), ensure_ascii=False)
    activated = [om_notes(p)["previewActivated"] for p, _sent, _obs, _refl in runs if "previewActivated" in om_notes(p)]
    assert len(activated) >= 2, "the case under test came up (turns that activate buffered chunks first)"
    assert all(a["chunks"] >= 1 and a["messages"] >= 1 for a in activated)


def noted_exactly_when(runs: list[Any], key: str, did: Any) -> list[tuple[int, Any, list[Any], set[str], Any]]:
    """On every turn where ``did(run)`` is false the preview has no ``key`` note and is what the turn sent;
    the others must have one: their (turn number, preview, messages sent, ids observed, the note)."""
    out = []
    for n, (preview, sent, observed, reflected) in enumerate(runs, 1):
        note = om_notes(preview).get(key)
        if not did(observed, reflected):
            assert note is None, f"turn {n} did not, yet the preview's {key} said it would"
            assert preview.messages == sent, f"turn {n}: the preview is not what the turn sent"
            continue
        assert note is not None, f"turn {n} did first; the preview's {key} did not say so"
        out.append((n, preview, sent, observed, note))
    assert out and len(out) < len(runs), "turns that do it first and turns that do not"
    return out


def test_a_preview_names_the_messages_the_next_turn_observes_first_exactly_when_it_does(store: Any) -> None:
    runs = previews_and_turns(store, {"message_tokens": 60, "buffer_tokens": False})
    observing = noted_exactly_when(runs, "observeFirst", lambda observed, _reflected: bool(observed))
    assert len(observing) >= 2
    for n, preview, sent, observed, first in observing:
        # The turn observed what the preview named: the messages that leave the window, the reply kept raw
        # (Mastra's rule) and its own input, stored with the observation (the preview's input is not stored).
        (said,) = observed - set(first["messages"]) - set(first["kept"])
        assert [m.text for m in store.memory.get_messages([said])] == [TEXTS[n - 1]] and len(first["input"]) == 1
        assert set(first["messages"]) | set(first["kept"]) | {said} == observed and first["threads"] == [THREAD]
        assert first["waitsForBackground"] is False and first["tokens"] > 0
        # What the notice says: these messages left the window, observations were added.
        gone = {f.text for f in preview.fragments
                if f.role == "user" and f.stored_ids and set(f.stored_ids) <= observed}
        assert gone and gone <= {str(m["content"]) for m in preview.messages}
        assert not gone & {str(m["content"]) for m in sent}
        assert "Eintrag-Bündel" in json.dumps(sent, ensure_ascii=False)


def test_a_preview_says_when_the_next_turn_reflects_first_exactly_when_it_does(store: Any) -> None:
    runs = previews_and_turns(store, {"message_tokens": 60, "buffer_tokens": 0.25, "block_after": 10.0,
                                      "observation_tokens": 45})
    reflecting = noted_exactly_when(runs, "reflectFirst", lambda _observed, reflected: reflected)
    assert all(first["threshold"] == 45 and first["tokens"] >= 45 for *_, first in reflecting)
    # a reflection prepared in the background, and one the turn waits for
    assert {first["how"] for *_, first in reflecting} == {"swap", "wait"}
