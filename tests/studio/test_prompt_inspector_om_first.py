"""The Prompt Inspector's preview when observational memory acts first in the next turn (pytest-qt,
offscreen, real libSQL file). Buffered chunks the turn activates are shown activated (nothing written);
a turn that observes synchronously first gets a warning at the top that names the messages that go,
and only then."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import pytest

from core import Agent, Memory, MemoryOptions, Message, open_store
from core.llm import ScriptedModel
from studio.panes.prompt_inspector import PromptInspectorPane
from studio.selection import Selection
from studio.session import StudioSession
from tests.studio.test_prompt_inspector import checksum, select

RESOURCE, THREAD = "zoë", "t-om"
NOTICE = "Not the exact prompt: the next turn will first observe "
SHOTS = os.environ.get("PREV2_SHOTS")  # a folder: save the pane at 1440x900 and 900x800 there


def _observer() -> ScriptedModel:
    count = itertools.count(1)
    return ScriptedModel(lambda m, t: (f"<observations>\nDate: Mar 2, 2026\n* 🔴 (09:{next(count):02d}) Zoë walked "
                                       "by the river.\n</observations>\n<current-task>\nNote the walk.\n"
                                       "</current-task>"), name="observer")


def _entry(n: int) -> str:
    return f"Entry {n}: walked by the river, bought lemons, planned the train to Porto."


NEXT = _entry(99)  # the next user message, typed into the pane


def build(path: Path, om: dict[str, Any], *, until: str | None = None, turns: int = 12) -> None:
    """Turns of an agent with observational memory: until a preview of ``NEXT`` notes ``until``
    (or ``turns`` turns)."""
    store = open_store(path)
    try:
        memory = Memory(store, MemoryOptions(last_messages=40, observational_memory={"enabled": True, **om}),
                        observer_model=_observer(), name="walker",
                        reflector_model=ScriptedModel(lambda m, t: "<observations>\nDate: Mar 2, 2026\n* 🔴 Zoë "
                                                      "walks.\n</observations>", name="reflector"))
        memory.register("walker")
        agent = Agent("walker", instructions="Answer briefly.", model=ScriptedModel(lambda m, t: "Noted.", name="a"),
                      memory=memory, tracer=False)
        for n in range(1, turns + 1):
            agent.generate(_entry(n), memory={"resource": RESOURCE, "thread": THREAD})
            assert memory.wait_idle(30)
            if until and until in memory.assemble(thread_id=THREAD, resource_id=RESOURCE,
                                                  input=[Message.user(NEXT)]).notes["observational-memory"]:
                return
        assert until is None, f"no preview noted {until}"
    finally:
        store.close()


def preview_of_next(qtbot: Any, pane: PromptInspectorPane) -> Any:
    select(qtbot, pane, Selection(RESOURCE, THREAD))
    with qtbot.waitSignal(pane.assembled, timeout=15_000) as blocker:
        pane.message_edit.setText(NEXT)
    return blocker.args[0]


@pytest.fixture()
def pane_on(no_leaked_widgets: Any, qtbot: Any, tmp_path: Path) -> Any:
    sessions: list[StudioSession] = []

    def make(path: Path) -> PromptInspectorPane:
        session = StudioSession(open_store(path))
        sessions.append(session)
        pane = PromptInspectorPane(session)
        qtbot.addWidget(pane)
        return pane

    yield make
    for s in sessions:
        s.close()


def _shots(qtbot: Any, pane: PromptInspectorPane, name: str) -> None:
    if not SHOTS:
        return
    for w, h in ((1440, 900), (900, 800)):
        pane.resize(w, h)
        pane.show()
        qtbot.wait(50)
        pane.grab().save(str(Path(SHOTS) / f"{name}_{w}x{h}.png"))


@pytest.mark.parametrize("observes", [False, True], ids=["below-threshold", "observes-first"])
def test_the_notice_appears_exactly_when_the_next_turn_observes_first(qtbot: Any, tmp_path: Path, pane_on: Any,
                                                                      observes: bool) -> None:
    path = tmp_path / "memory.db"
    if observes:
        build(path, {"message_tokens": 60, "buffer_tokens": False}, until="observeFirst")
    else:
        build(path, {"message_tokens": 60, "buffer_tokens": False}, turns=1)
    pane = pane_on(path)
    before = checksum(pane.session.store)
    preview = preview_of_next(qtbot, pane)
    assert checksum(pane.session.store) == before
    banner = pane.banner.text() if not pane.banner.isHidden() else ""
    om = preview.prompt.notes["observational-memory"]
    if not observes:
        assert "observeFirst" not in om and preview.notice is None and NOTICE not in banner
        return
    first = om["observeFirst"]
    assert preview.notice is not None and preview.notice.startswith(NOTICE)
    assert banner.startswith(NOTICE) and pane.banner.level == "warning"
    # The message being sent is observed too (synchronous observation, as Mastra 1.71) and stays in the prompt.
    assert len(first["input"]) == 1
    taken = len(first["messages"]) + len(first["input"]) + len(first["kept"])
    assert f"observe {taken} message(s)" in preview.notice
    assert f"{len(first['messages'])} of them leave the window and the observations made of them are added " \
        "(the message being sent" in preview.notice
    named = [f for f in preview.prompt.fragments if f.stored_ids and f.stored_ids[0] in first["messages"]]
    assert named and f"Would go: {named[0].role} “{named[0].text[:60]}" in preview.notice
    _shots(qtbot, pane, "observe_first")


def test_buffered_chunks_the_next_turn_activates_are_shown_activated(qtbot: Any, tmp_path: Path,
                                                                     pane_on: Any) -> None:
    path = tmp_path / "memory.db"
    build(path, {"message_tokens": 60, "buffer_tokens": 0.25, "block_after": 10.0}, until="previewActivated")
    pane = pane_on(path)
    before = checksum(pane.session.store)
    preview = preview_of_next(qtbot, pane)
    assert checksum(pane.session.store) == before
    assert preview.notice is None
    om = preview.prompt.notes["observational-memory"]
    assert om["previewActivated"]["chunks"] >= 1
    assert any("Zoë walked by the river" in f.text for f in preview.prompt.fragments if f.role == "system")
    assert "this preview shows them activated (nothing was written)" in pane.banner.text()
    _shots(qtbot, pane, "activated")


def test_the_notice_says_when_the_next_turn_reflects_first(qtbot: Any, tmp_path: Path, pane_on: Any) -> None:
    path = tmp_path / "memory.db"
    build(path, {"message_tokens": 60, "buffer_tokens": 0.25, "block_after": 10.0, "observation_tokens": 45},
          until="reflectFirst")
    pane = pane_on(path)
    before = checksum(pane.session.store)
    preview = preview_of_next(qtbot, pane)
    assert checksum(pane.session.store) == before
    first = preview.prompt.notes["observational-memory"]["reflectFirst"]
    start = {"swap": "Not the exact prompt: the next turn will first swap in the reflection prepared in the "
                     "background (the log holds",
             "wait": "Not the exact prompt: the next turn will first wait for the background reflector and swap "
                     "in what it prepared, or else reflect (the log holds"}[first["how"]]
    assert preview.notice is not None and preview.notice.startswith(start)
    assert f"{first['tokens']:,} tokens ≥ 45)" in preview.notice and "the observations shown here are replaced" \
        in preview.notice
    assert pane.banner.text().startswith(start) and pane.banner.level == "warning"
    _shots(qtbot, pane, "reflect_first")


def test_the_rows_the_next_turn_observes_first_are_marked_in_the_table(qtbot: Any, tmp_path: Path,
                                                                        pane_on: Any) -> None:
    """The banner names at most five of the messages that go; the fragment table marks every row that holds one
    (the Text cell starts "will be observed first", the row's tooltip says why), and no other row."""
    from PySide6.QtCore import Qt

    from studio.logic.prompt_layout import OBSERVED_FIRST_MARK

    path = tmp_path / "memory.db"
    build(path, {"message_tokens": 60, "buffer_tokens": False}, until="observeFirst")
    pane = pane_on(path)
    preview = preview_of_next(qtbot, pane)
    first = set(preview.prompt.notes["observational-memory"]["observeFirst"]["messages"])
    model = pane.fragment_model
    text_col = [model.headerData(c, Qt.Orientation.Horizontal) for c in range(model.columnCount())].index("Text")
    marked, unmarked = [], []
    for row, fragment in enumerate(preview.prompt.fragments):
        cell = model.index(row, text_col)
        text, tip = str(cell.data()), str(cell.data(Qt.ItemDataRole.ToolTipRole) or "")
        goes = fragment.role in ("user", "assistant", "tool") and bool(first & set(fragment.stored_ids))
        (marked if goes else unmarked).append(fragment.index)
        assert text.startswith(OBSERVED_FIRST_MARK) == goes, (fragment.index, text)
        assert ("the next turn first observes it with the observer model" in tip) == goes
        assert (cell.data(Qt.ItemDataRole.ForegroundRole) is not None) == goes
    assert len(marked) == len(first) and unmarked  # every message that goes has its row; the rest stay unmarked
    from studio.logic.prompt_layout import fragment_header
    assert all(fragment_header(r).endswith(OBSERVED_FIRST_MARK) == (r.index in marked) for r in model.rows())
    _shots(qtbot, pane, "observe_first_rows")

    # A preview that observes nothing first marks no row.
    below = tmp_path / "below.db"
    build(below, {"message_tokens": 60, "buffer_tokens": False}, turns=1)
    pane = pane_on(below)
    preview_of_next(qtbot, pane)
    assert not any(str(pane.fragment_model.index(r, text_col).data()).startswith(OBSERVED_FIRST_MARK)
                   for r in range(pane.fragment_model.rowCount()))


def test_a_backlog_over_max_tokens_per_batch_shows_the_first_observer_call_as_sent(qtbot: Any, tmp_path: Path,
                                                                                  pane_on: Any) -> None:
    # The next turn observes its backlog in several observer calls (max_tokens_per_batch): the notice says how many,
    # and the Request view shows the first call's request, which the turn then sends byte for byte.
    import json

    path = tmp_path / "memory.db"
    om = {"message_tokens": 120, "buffer_tokens": False, "max_tokens_per_batch": 45}
    build(path, om, until="observeFirst")
    pane = pane_on(path)
    before = checksum(pane.session.store)
    preview = preview_of_next(qtbot, pane)
    assert checksum(pane.session.store) == before
    first = preview.prompt.notes["observational-memory"]["observeFirst"]
    batches = first["batches"]
    # (every message the calls take: those that go, the message being sent and a reply kept raw)
    assert len(batches) >= 2 and sum(batches) == len(first["messages"]) + len(first["input"]) + len(first["kept"])
    more = len(batches) - 1
    assert preview.notice is not None
    assert f"in {len(batches)} calls of at most 45 message tokens" in preview.notice
    assert f"{more} more batch{'es' if more != 1 else ''} after this one" in preview.notice
    titles = [pane.call_combo.itemText(i) for i in range(pane.call_combo.count())]
    assert titles[-1] == f"Observer call 1 of {len(batches)}" and pane.call_combo.isVisibleTo(pane)
    pane.call_combo.setCurrentIndex(len(titles) - 1)
    shown = preview.requests[-1]
    assert shown.title == titles[-1] and json.loads(shown.body)["messages"] == first["firstRequest"]["messages"]
    _shots(qtbot, pane, "observer_batches")
    # The next turn, run for real, sends exactly that request first.
    store = open_store(path)
    try:
        observer = _observer()
        memory = Memory(store, MemoryOptions(last_messages=40, observational_memory={"enabled": True, **om}),
                        observer_model=observer, name="walker")
        agent = Agent("walker", instructions="Answer briefly.", model=ScriptedModel(lambda m, t: "Noted.", name="a"),
                      memory=memory, tracer=False)
        agent.generate(NEXT, memory={"resource": RESOURCE, "thread": THREAD})
    finally:
        store.close()
    assert len(observer.requests) == len(batches)
    assert json.dumps(observer.requests[0].messages, ensure_ascii=False) == \
        json.dumps(shown.request["messages"], ensure_ascii=False)


def test_the_observer_call_of_a_message_over_the_window_says_what_it_leaves_out(tmp_path: Path) -> None:
    # One unobserved message over the observer's window on its own: the observer call the Request view shows is the
    # request the turn sends (its beginning and end, a line saying how much is left out), and its notes say so.
    from core.tokens import EstimatingTokenizer
    from studio.logic.request_layout import observer_call_view

    store = open_store(tmp_path / "memory.db")
    try:
        memory = Memory(store, MemoryOptions(observational_memory={"enabled": True, "buffer_tokens": False,
                                                                   "message_tokens": 100}),
                        observer_model=ScriptedModel(["unused"], name="observer", context_window=2_000),
                        tokenizer=EstimatingTokenizer())
        words = " ".join(f"line{i}" for i in range(3_000))
        memory.save_messages([Message.user(f"Here is the build log: {words} -- so why does it fail?", thread_id=THREAD,
                                           resource_id=RESOURCE)])
        prompt = memory.assemble(thread_id=THREAD, resource_id=RESOURCE, input=[Message.user(NEXT)])
    finally:
        store.close()
    left_out = prompt.notes["observational-memory"]["observeFirst"]["firstRequest"]["leftOut"]
    view = observer_call_view(prompt)
    assert view is not None and left_out > 0
    history = view.request["messages"][2]["content"]
    assert "Here is the build log:" in history and "so why does it fail?" in history
    assert f"[… {left_out:,} characters of this message are left out here" in history
    assert any(f"{left_out:,} characters between them left out" in note and "the stored message stays whole" in note
               for note in view.notes)
