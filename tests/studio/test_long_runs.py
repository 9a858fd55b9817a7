"""A message holding a very long run with no space (a hex dump, a token, a blob a tool returned): Qt's word
wrap looks for a boundary along the whole run for each line, so a 200,000-character run held the UI thread
2 to 5 s when the Messages pane's detail showed it, 2.8 to 4.9 s when Replay's turn did, and 22.7 s when Traces
showed the model call of a turn that sent it (its Messages transcript; offscreen, measured by a 5 ms timer's
longest gap or around the selection). The viewers that show such a text wrap it anywhere, and keep the word wrap for
any other; the text is shown whole either way. (Speed is not asserted here: the mode that is fast is.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtGui import QTextOption

from core import Memory, MemoryOptions, Message, ScriptedModel, open_store
from core.agent import Agent
from studio.main_window import MESSAGES
from studio.selection import Selection
from studio.widgets.code_editor import CodeEditor
from studio.widgets.wrap_mode import LONG_RUN_CHARS, has_long_run

WAIT = 30_000
RUN = "0123456789abcdef" * 12_500  # 200,000 characters, no space
ANYWHERE, WORDS = QTextOption.WrapMode.WrapAnywhere, QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere


def test_a_long_run_is_told_from_long_text() -> None:
    assert has_long_run("x" * LONG_RUN_CHARS)
    assert has_long_run("before " + "x" * LONG_RUN_CHARS + "\nafter")
    assert not has_long_run("x" * (LONG_RUN_CHARS - 1))
    assert not has_long_run(("x" * (LONG_RUN_CHARS - 1) + " ") * 40)  # long text, every run short
    assert not has_long_run(("x" * (LONG_RUN_CHARS - 1) + "\n") * 40)
    assert not has_long_run("")


def test_a_viewer_wraps_a_long_run_anywhere_and_other_text_at_words(qtbot: Any) -> None:
    view = CodeEditor("prose", read_only=True)
    qtbot.addWidget(view)
    view.resize(500, 300)
    view.show()
    assert view.wordWrapMode() == WORDS
    view.load("said: " + RUN)
    assert view.wordWrapMode() == ANYWHERE
    assert view.toPlainText() == "said: " + RUN
    view.load("a short reply that wraps at its words")
    assert view.wordWrapMode() == WORDS
    assert view.toPlainText() == "a short reply that wraps at its words"


def _seed(path: Path) -> None:
    store = open_store(path)
    memory = Memory(store, MemoryOptions(last_messages=10, semantic_recall=False))
    memory.create_thread(thread_id="blob", resource_id="ops", title="A tool's blob")
    memory.save_messages([Message.user("what did the tool return?", thread_id="blob", resource_id="ops"),
                          Message.assistant(RUN, thread_id="blob", resource_id="ops"),
                          Message.user("thanks, that is all", thread_id="blob", resource_id="ops")])
    store.close()


def test_the_messages_detail_and_the_inspector_wrap_a_long_run_anywhere(
        tmp_path: Path, make_window: Any, qtbot: Any) -> None:
    _seed(tmp_path / "memory.db")
    window = make_window()
    window.resize(1100, 800)
    window.open_database(str(tmp_path / "memory.db"))
    qtbot.waitUntil(lambda: window.resources is not None and len(window.resources.thread_rows()) == 1, timeout=WAIT)
    window.resources.set_selection(Selection("ops", "blob"))
    window.show_tab(MESSAGES.name)
    pane = window.panes[MESSAGES.name]
    qtbot.waitUntil(lambda: pane.model.rowCount() == 3 and pane.model.row_at(2).message is not None, timeout=WAIT)
    texts = [pane.model.row_at(i).preview for i in range(3)]
    blob = next(i for i, text in enumerate(texts) if text.startswith(RUN[:100]))
    pane.view.selectRow(blob)
    qtbot.waitUntil(lambda: RUN in pane.detail.toPlainText(), timeout=WAIT)
    assert pane.detail.wordWrapMode() == ANYWHERE
    other = next(i for i, text in enumerate(texts) if "thanks" in text)
    pane.view.selectRow(other)
    qtbot.waitUntil(lambda: "thanks, that is all" in pane.detail.toPlainText(), timeout=WAIT)
    assert RUN not in pane.detail.toPlainText()
    assert pane.detail.wordWrapMode() == WORDS

    window.show_tab("prompt")
    prompt = window.panes["prompt"]
    qtbot.waitUntil(lambda: prompt.preview is not None and not prompt.busy, timeout=WAIT)
    rows = prompt.fragment_model.rows()
    prompt.fragment_table.selectRow(next(i for i, r in enumerate(rows) if RUN in r.text))
    qtbot.waitUntil(lambda: RUN in prompt.detail_text.toPlainText(), timeout=WAIT)
    assert prompt.detail_text.wordWrapMode() == ANYWHERE
    prompt.fragment_table.selectRow(next(i for i, r in enumerate(rows) if "thanks" in r.text))
    qtbot.waitUntil(lambda: "thanks, that is all" in prompt.detail_text.toPlainText(), timeout=WAIT)
    assert prompt.detail_text.wordWrapMode() == WORDS
    window.session.pool.wait(20_000)


def test_the_traces_transcript_of_a_model_call_wraps_a_long_run_anywhere(
        tmp_path: Path, make_window: Any, qtbot: Any) -> None:
    path = tmp_path / "memory.db"
    store = open_store(path)
    memory = Memory(store, MemoryOptions(last_messages=10, semantic_recall=False), name="ops",
                    tracer=store.tracer())
    agent = Agent("ops", instructions="You read blobs.", model=ScriptedModel(["it is a hex dump"]), memory=memory)
    agent.generate("decode this: " + RUN, memory={"resource": "ops", "thread": "blob"})
    assert store.tracer().flush(10)
    store.close()
    window = make_window()
    window.resize(1100, 800)
    window.open_database(str(path))
    qtbot.waitUntil(lambda: window.resources is not None and len(window.resources.thread_rows()) == 1, timeout=WAIT)
    window.resources.set_selection(Selection("ops", "blob"))
    window.show_tab("traces")
    traces = window.panes["traces"]
    qtbot.waitUntil(lambda: not traces.loading and bool(traces.traces) and bool(traces.spans), timeout=WAIT)
    rows = traces.layout_model.rows
    assert traces.select_span(next(r.span.span_id for r in rows if r.span.span_type == "model_generation"))
    assert traces.tabs.isTabVisible(0)  # (the model call's Messages)
    assert RUN[:50_000] in traces.chat_view.toPlainText()  # (the span keeps what its size cap lets it)
    assert traces.chat_view.wordWrapMode() == ANYWHERE
    assert traces.select_span(next(r.span.span_id for r in rows if r.span.span_type == "agent_run"))
    assert RUN[:50_000] not in traces.chat_view.toPlainText()
    assert traces.chat_view.wordWrapMode() == WORDS
    window.session.pool.wait(20_000)
