"""Delegations read as what they are in the Studio: the thread tree at the width a 1,100 px window gives it,
the panes' headers, and the delegations Mastra wrote (``<resource>-<agent>``) where the data proves them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QModelIndex, Qt
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QStyle, QStyleOptionViewItem

from core import Memory, open_store
from core.agent import Agent
from core.llm import ScriptedModel, ScriptedReply, tool_call
from core.messages import Message, text_part, tool_invocation_part
from core.scopes import delegation_resource
from studio.models.resource_tree import TreeRoles
from studio.panes.messages import MessagesPane
from studio.panes.resources import ResourcesPane
from studio.selection import Selection

from .conftest import theme_restored

DELEGATED = delegation_resource("ada", "helper")
TREE_WIDTH_AT_1100 = 380  # the thread list's width in a 1,100 px window (the splitter's first size)


def _seed(path: Path) -> str:
    """ada's agent delegated to ``helper`` (the engine's ``delegation:ada:helper``); user-42's supervisor, run by
    Mastra, delegated to ``researcher`` (``user-42-researcher``, its tool result naming it); alice-helper is a
    user of that name, which nothing names. The id of the helper's thread."""
    store = open_store(path)
    memory = Memory(store)

    def boss_model(messages: Any, tools: Any) -> Any:
        if messages[-1].get("role") == "user":
            return ScriptedReply(tool_calls=(tool_call("agent-helper", {"prompt": "plan the party"}),))
        return "Helper is on it."

    helper = Agent("helper", instructions="Help.", model=ScriptedModel(["Cake at four."]), tracer=False)
    boss = Agent("boss", instructions="Delegate.", model=ScriptedModel(boss_model), memory=memory, agents=[helper],
                 tracer=False, register=False)
    boss.generate("help with the party", memory={"resource": "ada", "thread": "t-party"})
    memory.create_thread(resource_id="user-42", thread_id="t-sup", title="Find sources")
    memory.save_messages([
        Message.user("find sources", thread_id="t-sup", resource_id="user-42"),
        Message.create("assistant", [tool_invocation_part("c1", "agent-researcher", {"prompt": "find"}, {
            "text": "found", "subAgentThreadId": "th-sub-1", "subAgentResourceId": "user-42-researcher"}),
            text_part("Here they are.")], thread_id="t-sup", resource_id="user-42")])
    memory.create_thread(resource_id="user-42-researcher", thread_id="th-sub-1")  # (as Mastra: no title)
    memory.save_messages([Message.user("find", thread_id="th-sub-1", resource_id="user-42-researcher"),
                          Message.assistant("found", thread_id="th-sub-1", resource_id="user-42-researcher")])
    memory.create_thread(resource_id="alice", thread_id="t-alice", title="Hello")
    memory.create_thread(resource_id="alice-helper", thread_id="t-ah", title="My own thread")
    thread = store.memory.thread_summaries(DELEGATED)[0].thread.id
    store.close()
    return thread


def _tree(qtbot: Any, session: Any, width: int) -> ResourcesPane:
    pane = ResourcesPane(session)
    qtbot.addWidget(pane)
    pane.resize(width, 500)
    pane.show()
    pane.refresh()
    qtbot.waitUntil(lambda: pane.proxy.rowCount() == 6, timeout=10_000)
    pane.tree.expandAll()
    return pane


def _row(pane: ResourcesPane, resource_id: str) -> QModelIndex:
    return next(pane.proxy.index(r, 0) for r in range(pane.proxy.rowCount())
                if pane.proxy.index(r, 0).data(TreeRoles.RESOURCE_ID) == resource_id)


def _drawn(pane: ResourcesPane, index: QModelIndex) -> tuple[str, int, Any]:
    """What the tree draws in ``index``'s cell: the text the delegate gives the style, the width that text has
    (inside the margins the style keeps), and the font's metrics."""
    tree = pane.tree
    option = QStyleOptionViewItem()
    tree.initViewItemOption(option)
    option.rect = tree.visualRect(index)
    tree.itemDelegateForIndex(index).initStyleOption(option, index)
    style = tree.style()
    room = (style.subElementRect(QStyle.SubElement.SE_ItemViewItemText, option, tree).width()
            - 2 * (style.pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, tree) + 1))
    return option.text, room, QFontMetrics(option.font)  # (the row's own font: italic for a delegation)


def test_a_delegation_row_keeps_who_delegated_and_to_whom_at_the_width_of_a_1100_px_window(
        qtbot: Any, qapp: Any, make_window: Any, tmp_path: Path) -> None:
    """The tree cuts a long text in the middle, so in a 1,100 px window "ada → helper (delegation)" was drawn
    "ada → he…egation)": the agent's name went. A delegation's row is fitted instead, the least telling
    part first, in either theme; the tooltip keeps the stored id; a wide tree shows the whole label. (Where the date
    column gives the titles its room at 1,100 px the label is whole there; a 720 px window with the list at its
    least cuts it.)"""
    from studio.theme import apply_theme

    db = tmp_path / "d.db"
    _seed(db)
    with theme_restored(qapp):
        for theme in ("light", "dark"):
            apply_theme(qapp, theme)
            window = make_window()
            window.resize(1100, 800)
            window.open_database(str(db))
            qtbot.waitUntil(lambda w=window: w.resources is not None and w.resources.proxy.rowCount() == 6,
                            timeout=20_000)
            pane = window.resources
            pane.tree.expandAll()
            # (whole while the date column gave way at 1,100 px; since session 36 the untitled threads here read their
            # first words, "“plan the party”", shorter than "(untitled) · 2026-…", so every title fits beside the
            # date, which stays, and the label has its short mark: who and to whom stay whole either way)
            assert _drawn(pane, _row(pane, DELEGATED))[0] in ("ada → helper (delegation)", "ada → helper (deleg.)")
            window.resize(720, 800)
            qtbot.waitUntil(lambda w=window: w.left.width() < 300, timeout=5_000)
            # (the list at its least: with the tree's 12 px indent the label has 1 px to spare at 720 px)
            least = window.left.minimumWidth()
            window.split.setSizes([least, window.split.width() - least])
            qtbot.waitUntil(lambda w=window, n=least: w.left.width() <= n + 1, timeout=5_000)
            index = _row(pane, DELEGATED)
            text, room, metrics = _drawn(pane, index)
            assert metrics.horizontalAdvance(index.data()) > room  # (the whole label does not fit: Qt cut it)
            assert text.startswith("ada → helper") and metrics.horizontalAdvance(text) <= room, (text, room)
            text, room, metrics = _drawn(pane, _row(pane, "user-42-researcher"))
            assert text.startswith("us") and "→ res" in text and metrics.horizontalAdvance(text) <= room, text
            assert f"Resource {DELEGATED}" in index.data(Qt.ItemDataRole.ToolTipRole)
            window.grab().save(str(tmp_path / f"window-720-{theme}.png"))  # (looked at when this was written)
            window.close()


def test_a_wide_tree_shows_a_delegations_whole_label(qtbot: Any, make_session: Any, tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    _seed(db)
    pane = _tree(qtbot, make_session(db), 700)
    assert _drawn(pane, _row(pane, DELEGATED))[0] == "ada → helper (delegation)"
    assert _drawn(pane, _row(pane, "alice-helper"))[0] == "alice-helper"


def test_a_resource_mastra_wrote_is_labelled_a_delegation_only_where_the_data_proves_it(
        qtbot: Any, make_session: Any, tmp_path: Path) -> None:
    """Mastra names a sub-agent's resource ``<resource>-<agent>``. ``user-42-researcher``, which user-42's
    supervisor's tool result names with its thread, reads "user-42 → researcher (delegation)" in italics;
    ``alice-helper``, a user's own id of the same shape that nothing names, stays a user's bold row."""
    db = tmp_path / "d.db"
    _seed(db)
    pane = _tree(qtbot, make_session(db), 700)
    mastra, lookalike = _row(pane, "user-42-researcher"), _row(pane, "alice-helper")
    assert mastra.data() == "user-42 → researcher (delegation)" and lookalike.data() == "alice-helper"
    assert mastra.data(Qt.ItemDataRole.FontRole).italic() and lookalike.data(Qt.ItemDataRole.FontRole).bold()
    tip = mastra.data(Qt.ItemDataRole.ToolTipRole)
    assert "Resource user-42-researcher" in tip and "Mastra" in tip and "agent-researcher" in tip
    assert "Mastra" not in (lookalike.data(Qt.ItemDataRole.ToolTipRole) or "")
    pane.filter.setText("researcher (delegation)")  # (the filter finds it by its label too)
    qtbot.waitUntil(lambda: pane.proxy.rowCount() == 1, timeout=5_000)


def test_pane_headers_name_a_delegation_as_the_tree_does_with_the_stored_id_on_hover(
        qtbot: Any, make_session: Any, tmp_path: Path) -> None:
    """The Messages and Prompt Inspector headers named a delegation's resource by its raw id
    (``delegation:ada:helper``), the Prompt Inspector's title by the thread's raw id. They name it as the tree
    does (the one function, ``thread_labels.resource_label``), the stored ids on hover, as plain text."""
    from studio.panes.prompt_inspector import PromptInspectorPane

    db = tmp_path / "d.db"
    thread = _seed(db)
    session = make_session(db)
    _tree(qtbot, session, 700)  # (it loads what the data proves of Mastra's delegations)
    messages = MessagesPane(session)
    qtbot.addWidget(messages)
    messages.resize(1100 - TREE_WIDTH_AT_1100, 600)
    messages.show()
    messages.set_selection(Selection(DELEGATED, thread))
    qtbot.waitUntil(lambda: "messages" in messages.header.text(), timeout=10_000)
    assert "resource <i>ada → helper (delegation)</i>" in messages.header.text()
    assert DELEGATED not in messages.header.text() and f"resource {DELEGATED}" in messages.header.toolTip()
    messages.set_selection(Selection("user-42-researcher", "th-sub-1"))
    qtbot.waitUntil(lambda: "user-42 → researcher (delegation)" in messages.header.text(), timeout=10_000)
    messages.set_selection(Selection("alice-helper", "t-ah"))
    qtbot.waitUntil(lambda: "<code>alice-helper</code>" in messages.header.text(), timeout=10_000)

    inspector = PromptInspectorPane(session)
    qtbot.addWidget(inspector)
    inspector.resize(1440 - TREE_WIDTH_AT_1100, 800)
    inspector.show()
    with qtbot.waitSignal(inspector.assembled, timeout=15_000):
        inspector.set_selection(Selection(DELEGATED, thread))
    assert inspector.title.text() == "ada → helper (delegation)"  # (an untitled delegation thread)
    assert inspector.subtitle.text() == f"thread {thread} · resource ada → helper (delegation)"
    assert f"resource id: {DELEGATED}" in inspector.subtitle.toolTip()
    assert f"thread id: {thread}" in inspector.title.toolTip()
    inspector.grab().save(str(tmp_path / "inspector-1440.png"))
