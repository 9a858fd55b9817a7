"""The complete prompt inspector (issue 11, item 3): memory toggles, recall and history controls,
per-message recall scores, whose context window it is, totals that add up, and a failed assembly
that leaves no stale table (pytest-qt, offscreen, real libSQL file, the lexical test embedder)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from core import Memory, MemoryOptions, Message, open_store
from core.embedding import HashingEmbedder
from studio.logic import prompt_layout
from studio.logic.prompt_layout import InspectorOptions
from studio.panes import prompt_inspector
from studio.panes.prompt_inspector import PromptInspectorPane
from studio.selection import Selection
from studio.session import StudioSession

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=timezone.utc)
WAIT = 15_000
EMBEDDER = HashingEmbedder()
OTHER = ["We talked about the weather", "My sister Clara lives in Porto and loves tiles",
         "Nice, Porto is lovely", "Unrelated: buy milk"]
CURRENT = [("user", "Hi, I am planning a trip"), ("assistant", "Where to?")]


def build(path: Any) -> Any:
    store = open_store(path)
    mem = Memory(store, MemoryOptions(last_messages=4, working_memory={"enabled": True},
                                      semantic_recall={"enabled": False}), name="assistant", embedder=EMBEDDER)
    indexer = Memory(store, MemoryOptions(semantic_recall={"enabled": True}), embedder=EMBEDDER)
    mem.create_thread(resource_id="ana", thread_id="t-old", title="Old chat")
    mem.create_thread(resource_id="ana", thread_id="t-now", title="Trip")
    indexer.save_messages([
        (Message.user if i % 2 == 0 else Message.assistant)(
            text, thread_id="t-old", resource_id="ana", created_at=T0 + timedelta(minutes=i), id=f"o{i}")
        for i, text in enumerate(OTHER)])
    replies = []
    for i, (role, text) in enumerate(CURRENT):
        when = T0 + timedelta(days=1, minutes=i)
        if role == "user":
            replies.append(Message.user(text, thread_id="t-now", resource_id="ana", created_at=when, id=f"n{i}"))
        else:
            replies.append(Message.create("assistant", [{"type": "text", "text": text}], thread_id="t-now",
                                          resource_id="ana", created_at=when, id=f"n{i}",
                                          metadata={"agent": "travel", "modelId": "openai/gpt-4o-mini"}))
    indexer.save_messages(replies)
    mem.update_working_memory(thread_id="t-now", resource_id="ana", working_memory="# User\n- Name: Ana")
    mem.register("travel")
    return store


@pytest.fixture()
def pane(no_leaked_widgets: None, qtbot: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(prompt_inspector, "EMBEDDERS", prompt_layout.EmbedderHolder(lambda: EMBEDDER))
    session = StudioSession(build(tmp_path / "memory.db"))
    p = PromptInspectorPane(session)
    qtbot.addWidget(p)
    p.resize(1100, 800)
    with qtbot.waitSignal(p.assembled, timeout=WAIT):
        p.set_selection(Selection("ana", "t-now"))
    yield p
    session.close()


def change(qtbot: Any, pane: Any, action: Any) -> Any:
    with qtbot.waitSignal(pane.assembled, timeout=WAIT) as blocker:
        action()
    return blocker.args[0]


def sources(preview: Any) -> list[str]:
    return [f.source for f in preview.prompt.fragments]


def test_working_and_observational_memory_toggles(qtbot: Any, pane: Any) -> None:
    assert pane.wm_check.isChecked() and not pane.om_check.isChecked()  # the agent's own settings
    assert "working-memory" in sources(pane.preview)
    preview = change(qtbot, pane, lambda: pane.wm_check.setChecked(False))
    assert "working-memory" not in sources(preview) and preview.prompt.tools == []
    preview = change(qtbot, pane, lambda: pane.om_check.setChecked(True))
    assert "observational-memory" in preview.prompt.processors
    assert "message-history" not in preview.prompt.processors and not pane.last_spin.isEnabled()
    assert "modified" in pane.origin_label.text()


def test_recall_controls_and_per_message_scores(qtbot: Any, pane: Any) -> None:
    pane.message_edit.setText("Where does my sister Clara live?")
    change(qtbot, pane, lambda: None)
    for w in (pane.topk_spin, pane.threshold_spin, pane.before_spin, pane.after_spin):
        assert not w.isEnabled()  # recall is off
    pane.topk_spin.blockSignals(True)
    pane.topk_spin.setValue(1)
    pane.topk_spin.blockSignals(False)
    preview = change(qtbot, pane, lambda: pane.recall_check.setChecked(True))
    assert preview.request.options.top_k == 1 and preview.request.options.message_range == (1, 1)
    rows = pane.fragment_model.rows()
    block = next(i for i, r in enumerate(rows) if r.source == "semantic-recall")
    pane.fragment_table.selectRow(block)
    recalled = pane.recalled_model.rows()
    assert pane.recalled_table.isVisibleTo(pane)
    assert [r.message_id for r in recalled] == ["o0", "o1", "o2"]
    hit = next(r for r in recalled if r.hit)
    assert hit.message_id == "o1" and hit.found_as == "hit"
    assert hit.score is not None and hit.vector is not None and hit.keyword is not None  # hybrid: both lists
    neighbours = [r for r in recalled if not r.hit]
    assert {r.message_id for r in neighbours} == {"o0", "o2"}
    assert all(r.found_as == "neighbour of o1" and r.score is None and r.vector is None for r in neighbours)
    shown = [[pane.recalled_model.index(r, c).data() for c in range(7)] for r in range(3)]
    assert shown[1][1] == "hit" and shown[1][3] == f"{hit.vector:.3f}" and shown[1][4] == f"{hit.keyword:.3f}"
    assert shown[0][1] == "neighbour of o1" and shown[0][2:5] == ["", "", ""] and shown[0][5] == "t-old"

    preview = change(qtbot, pane, lambda: pane.after_spin.setValue(0))
    assert preview.request.options.message_range == (1, 0)
    block = next(f for f in preview.prompt.fragments if f.source == "semantic-recall")
    assert block.stored_ids == ("o0", "o1")
    preview = change(qtbot, pane, lambda: pane.threshold_spin.setValue(0.99))
    assert "semantic-recall" not in sources(preview) and "semantic-recall" in preview.prompt.skipped


def test_the_token_budget_reaches_the_assembled_prompt(qtbot: Any, pane: Any) -> None:
    assert pane.budget_spin.isEnabled()
    preview = change(qtbot, pane, lambda: pane.budget_spin.setValue(20))
    assert preview.prompt.options.get("message_history", {}).get("max_tokens") == 20
    assert InspectorOptions(history_tokens=500).to_overrides()["message_history"] == {"max_tokens": 500}
    assert InspectorOptions().to_overrides()["message_history"] == {"max_tokens": None}


def test_the_context_window_names_its_model_and_the_totals_add_up(qtbot: Any, pane: Any) -> None:
    prompt = pane.preview.prompt
    usage = pane.bar.usage
    assert usage.model == "openai/gpt-4o-mini" and "openai/gpt-4o-mini" in usage.window_owner
    assert "openai/gpt-4o-mini" in pane.bar.toolTip()
    assert sum(s.tokens for s in usage.segments) == usage.total == prompt.total_tokens
    legend = [int(item.split()[-2].replace(",", "")) for item in pane.bar.legend_items()]
    assert sum(legend) == usage.total
    table = sum(int(pane.fragment_model.index(r, 5).data().replace(",", ""))
                for r in range(pane.fragment_model.rowCount()))
    primer = next(s.tokens for s in usage.segments if s.source == "reply primer")
    assert table + primer == usage.total
    assert f"{table:,} in {len(prompt.fragments)} fragments + {primer} reply primer = {usage.total:,} tokens" \
        in pane.status.text()


def test_a_thread_without_a_model_says_so(qtbot: Any, pane: Any) -> None:
    with qtbot.waitSignal(pane.assembled, timeout=WAIT):
        pane.set_selection(Selection("ana", "t-old"))
    usage = pane.bar.usage
    assert usage.model is None and "unknown model" in usage.window_owner and "context_window" in usage.window_owner


def test_a_failed_assembly_clears_the_old_table(qtbot: Any, pane: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    assert pane.fragment_model.rowCount() > 0 and pane.bar.usage is not None

    def missing() -> Any:
        raise RuntimeError("The embedding model is not installed. Run: memory-studio models install")

    monkeypatch.setattr(prompt_inspector, "EMBEDDERS", prompt_layout.EmbedderHolder(missing))
    with qtbot.waitSignal(pane.failed, timeout=WAIT):
        pane.recall_check.setChecked(True)
    assert pane.fragment_model.rowCount() == 0 and pane.skip_model.rowCount() == 0
    assert pane.bar.usage is None and pane.preview is None and pane.detail_text.toPlainText() == ""
    assert not pane.commands.action("prompt.copy_json").isEnabled()
