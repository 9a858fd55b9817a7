"""The resources tree and the message view, each on a real session over a temp database."""

from __future__ import annotations

import html
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetrics

from core import Message, open_store
from studio.models.messages_model import MessageRoles
from studio.models.resource_tree import TreeRoles
from studio.panes.messages import MessagesPane
from studio.panes.resources import ResourcesPane
from studio.logic.dates import format_datetime
from studio.selection import Selection

from .conftest import at, seed_many, theme_restored

pytestmark = pytest.mark.usefixtures("no_leaked_widgets")


def _resources(qtbot: Any, session: Any) -> ResourcesPane:
    pane = ResourcesPane(session)
    qtbot.addWidget(pane)
    pane.resize(420, 500)
    pane.show()
    pane.refresh()
    qtbot.waitUntil(lambda: len(pane.thread_rows()) >= 3, timeout=10_000)
    return pane


def test_tree_lists_threads_with_counts_and_picks_one(qtbot: Any, make_session: Any, small_db: Path) -> None:
    session = make_session(small_db)
    pane = _resources(qtbot, session)
    rows = pane.thread_rows()
    assert ("ada", "Weekly groceries", 3) in rows and ("li", "上海出差", 2) in rows and ("ada", "Birthday party", 1) in rows
    # most recent activity first
    assert rows[0][0] == "li"
    with qtbot.waitSignal(pane.selection_changed) as sig:
        pane.set_selection(Selection("ada", "t-party"))
    assert sig.args[0] == Selection("ada", "t-party")


def test_filter_narrows_the_tree_without_io(qtbot: Any, make_session: Any, small_db: Path) -> None:
    pane = _resources(qtbot, make_session(small_db))
    pane.filter.setText("party")
    assert [r[1] for r in pane.thread_rows()] == ["Birthday party"]
    pane.filter.setText("上海")
    assert [r[1] for r in pane.thread_rows()] == ["上海出差"]
    pane.filter.setText("li")  # a resource id matches: all its threads stay
    assert ("li", "上海出差", 2) in pane.thread_rows()
    pane.filter.clear()
    assert len(pane.thread_rows()) == 3


def test_full_text_search_across_threads_opens_the_hit(qtbot: Any, make_session: Any, small_db: Path) -> None:
    pane = _resources(qtbot, make_session(small_db))
    pane.filter.setText("peanuts")
    pane.search()
    qtbot.waitUntil(lambda: pane.results.rowCount() == 1, timeout=10_000)
    assert "1 message" in pane.results_label.text()
    text = pane.results.index(0).data()
    assert "Weekly groceries" in text and "peanuts" in text
    with qtbot.waitSignal(pane.hit_activated) as sig:
        pane.results_view.clicked.emit(pane.results.index(0))
    hit = sig.args[0]
    assert (hit.resource_id, hit.thread_id) == ("ada", "t-groceries") and hit.message_id
    # Chinese text is searchable too
    pane.search("酒店")
    qtbot.waitUntil(lambda: pane.results.rowCount() == 2, timeout=10_000)
    assert all("上海出差" in pane.results.index(i).data() for i in range(2))


def test_a_search_hit_names_its_thread_as_stored_not_reordered(qtbot: Any, make_session: Any, small_db: Path) -> None:
    # Left open by the session-31 walk: a title holding a right-to-left override or a line break, escaped in the
    # tree, was to be checked in every other list that names a thread, the search results first.
    from core import Memory

    with open_store(small_db) as writer:  # (an id may hold such controls too: any program can write one)
        Memory(writer).save_messages([Message.user("pistachios please", thread_id="t-\u202ertl", resource_id="ada",
                                                   created_at=at(31))])
        writer.memory.update_thread("t-\u202ertl", title="\u202eevil title\nsecond line")
    pane = _resources(qtbot, make_session(small_db))
    pane.search("pistachios")
    qtbot.waitUntil(lambda: pane.results.rowCount() == 1, timeout=10_000)
    text = pane.results.index(0).data()
    assert text.startswith("\\u202eevil title\\nsecond line  ·  user") and "\u202e" not in text
    tip = pane.results.index(0).data(Qt.ItemDataRole.ToolTipRole)
    assert "thread t-\\u202ertl" in tip and "\u202e" not in tip


def test_tree_refresh_keeps_selection(qtbot: Any, make_session: Any, small_db: Path) -> None:
    session = make_session(small_db)
    pane = _resources(qtbot, session)
    pane.set_selection(Selection("ada", "t-party"))
    writer = open_store(small_db)
    writer.memory.save_messages([Message.user("more", thread_id="t-party", resource_id="ada", created_at=at(30))])
    writer.memory.create_thread(thread_id="t-extra", resource_id="ada", title="Extra")
    writer.close()
    pane.refresh()
    qtbot.waitUntil(lambda: ("ada", "Extra", 0) in pane.thread_rows(), timeout=10_000)
    assert ("ada", "Birthday party", 2) in pane.thread_rows()
    assert pane.current_selection() == Selection("ada", "t-party")


def test_alike_thread_titles_are_told_apart_in_the_tree(qtbot: Any, make_session: Any, small_db: Path) -> None:
    """Alike titles looked the same in the tree (cut at the right; two untitled threads both "(untitled)"):
    only the tooltip told them apart. A long title is now cut in the middle (a series differs at its
    end), and a title that does not name its thread (none, or a sibling's) gets the id's short form."""
    uuid = "0195f3c2-7a1b-7c3d-8e4f-a1b2c3d4e5f6"
    writer = open_store(small_db)
    same = datetime(2026, 12, 7, 9, 0, 0, tzinfo=timezone.utc)  # (untitled, started in one second: their ids)
    for tid, title in (("t-sync-1", "Weekly sync"), (uuid, "weekly  sync"), ("t-none-1", None), ("t-none-2", None)):
        writer.memory.create_thread(thread_id=tid, resource_id="ada", title=title, created_at=same)
    writer.close()
    pane = _resources(qtbot, make_session(small_db))
    qtbot.waitUntil(lambda: len(pane.thread_rows()) == 7, timeout=10_000)
    labels = {r[1] for r in pane.thread_rows() if r[0] == "ada"}
    assert labels == {"Weekly groceries", "Birthday party",  # a title of its own: no id
                      "Weekly sync · t-sync-1", "weekly  sync · …c3d4e5f6",  # the same title (case, spaces)
                      "(untitled) · t-none-1", "(untitled) · t-none-2"}
    assert pane.tree.textElideMode() == Qt.TextElideMode.ElideMiddle

    writer = open_store(small_db)  # a sibling takes a title another thread has: both follow on refresh
    writer.memory.update_thread("t-none-1", title="Birthday party")
    writer.close()
    pane.refresh()
    qtbot.waitUntil(lambda: "Birthday party · t-party" in {r[1] for r in pane.thread_rows()}, timeout=10_000)
    # (the other untitled one, alone now, reads when it started: ``untitled_starts``)
    assert {"Birthday party · t-none-1", f"(untitled) · {format_datetime(same)[:16]}"} <= {
        r[1] for r in pane.thread_rows()}


def _messages(qtbot: Any, session: Any) -> MessagesPane:
    pane = MessagesPane(session)
    qtbot.addWidget(pane)
    pane.resize(900, 700)
    pane.show()
    return pane


def _bulk_thread(qtbot: Any, make_session: Any, path: Path, thread: str, messages: int) -> MessagesPane:
    """A messages pane showing ``thread`` of ``messages`` messages (``seed_many``), loaded."""
    seed_many(path, thread, messages)
    pane = _messages(qtbot, make_session(path))
    with qtbot.waitSignal(pane.model.loaded, timeout=20_000):
        pane.set_selection(Selection("bulk", thread))
    return pane


def test_message_view_renders_parts_role_and_time(qtbot: Any, make_session: Any, small_db: Path) -> None:
    pane = _messages(qtbot, make_session(small_db))
    with qtbot.waitSignal(pane.model.loaded):
        pane.set_selection(Selection("ada", "t-groceries"))
    model = pane.model
    qtbot.waitUntil(lambda: model.index(0).data(MessageRoles.LOADED), timeout=10_000)
    assert [model.index(i).data(MessageRoles.ROLE) for i in range(3)] == ["user", "assistant", "assistant"]
    assert model.index(0).data(MessageRoles.TIME).startswith("2026-03-01")
    assert "3 messages" in pane.header.text().replace("<b>", "").replace("</b>", "")
    pane._select_row(1)
    html = pane.detail.toHtml()
    for needle in ("REASONING", "searchRecipes", "green curry", "Try a Thai green curry."):
        assert needle in html, needle
    pane._select_row(2)
    assert "DATA-SHOPPING-LIST" in pane.detail.toHtml() and "list.txt" in pane.detail.toHtml()


def test_large_thread_opens_at_the_end_and_loads_pages_on_scroll(qtbot: Any, make_session: Any,
                                                                  tmp_path: Path) -> None:
    path = tmp_path / "large.db"
    pane = _bulk_thread(qtbot, make_session, path, "large", 20_000)
    model = pane.model
    assert model.rowCount() == 20_000
    qtbot.waitUntil(lambda: model.index(19_999).data(MessageRoles.LOADED), timeout=10_000)
    assert len(model._cache) <= 2  # only what is on screen was read
    middle = model.index(10_000)
    pane.view.scrollTo(middle)
    qtbot.waitUntil(lambda: model.index(10_000).data(MessageRoles.PREVIEW) == "message number 10000", timeout=10_000)
    assert len(model._cache) <= 4



def test_home_and_end_go_to_the_first_and_last_message(qtbot: Any, make_session: Any, small_db: Path) -> None:
    """Home and End moved along the columns of the current row (Qt's table keys), which with whole rows
    selected did nothing visible: the message list and every table of the Studio (found by the Studio QA
    pass on a thread of 300 messages)."""
    from studio.widgets.record_table import Column, RecordTableModel, record_table_view

    pane = _messages(qtbot, make_session(small_db))
    with qtbot.waitSignal(pane.model.loaded):
        pane.set_selection(Selection("ada", "t-groceries"))
    view = pane.view
    view.setFocus()
    view.setCurrentIndex(pane.model.index(1))
    qtbot.keyClick(view, Qt.Key.Key_End)
    assert view.currentIndex().row() == pane.model.rowCount() - 1 == 2
    qtbot.keyClick(view, Qt.Key.Key_Home)
    assert view.currentIndex().row() == 0
    model: RecordTableModel[int] = RecordTableModel([Column("A", str), Column("B", str), Column("C", str)])
    model.set_rows(list(range(5)))
    table = record_table_view(model)
    qtbot.addWidget(table)
    table.setCurrentIndex(model.index(2, 0))
    qtbot.keyClick(table, Qt.Key.Key_End)
    assert table.currentIndex().row() == 4
    qtbot.keyClick(table, Qt.Key.Key_Home)
    assert table.currentIndex().row() == 0


def test_tab_leaves_the_message_list_for_the_next_control(qtbot: Any, make_session: Any, small_db: Path) -> None:
    """Tab in the message list (and every table of the Studio, ``RowTableView``) moved from cell to cell,
    which with whole rows selected showed nothing, row after row: a keyboard user could not Tab out of a
    thread's list to its Edit… button or the message below (found 2026-12-06 walking the Tab order)."""
    pane = _messages(qtbot, make_session(small_db))
    with qtbot.waitSignal(pane.model.loaded):
        pane.set_selection(Selection("ada", "t-groceries"))
    pane.activateWindow()
    qtbot.waitUntil(pane.isActiveWindow, timeout=5_000)
    view = pane.view
    view.setFocus()
    pane._select_row(0)
    qtbot.waitUntil(view.hasFocus, timeout=5_000)
    qtbot.keyClick(view, Qt.Key.Key_Tab)
    assert not view.hasFocus() and pane.isAncestorOf(pane.focusWidget())
    assert view.currentIndex().row() == 0  # the row stays as it was
    view.setFocus()
    qtbot.keyClick(view, Qt.Key.Key_Backtab)
    assert not view.hasFocus()


def test_a_table_title_longer_than_its_column_is_cut_at_its_end(qtbot: Any) -> None:
    """A right-aligned title wider than its column lost its start ("Our estimate (o200k_base)" showed as
    ":imate (o200k_base)" in Replay's usage table at a 1,360 px window): Qt's header elided nothing, and the
    theme painted the titles in a heavier font than the header's own. Every record table now cuts a title
    at its end with "…", measured in the font it is painted in, in both themes."""
    from PySide6.QtGui import QFontMetrics
    from PySide6.QtWidgets import QApplication
    from studio.theme import apply_theme
    from studio.widgets.record_table import Column, RecordTableModel, record_table_view

    app = QApplication.instance()
    assert isinstance(app, QApplication)
    with theme_restored(app):  # (other tests see the theme only when they set it)
        for theme in ("light", "dark"):
            apply_theme(app, theme)
            _title_is_cut_at_its_end(qtbot, Column, RecordTableModel, record_table_view, QFontMetrics)


def _title_is_cut_at_its_end(qtbot: Any, Column: Any, RecordTableModel: Any, record_table_view: Any,  # noqa: N803
                             QFontMetrics: Any) -> None:  # noqa: N803

    right = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
    title = "Our estimate (o200k_base)"
    model: RecordTableModel[int] = RecordTableModel([Column("", str), Column("Server-reported", str, right),
                                                     Column(title, str, right)])
    model.set_rows([1, 2])
    table = record_table_view(model, widths={"": 120, "Server-reported": 130})
    qtbot.addWidget(table)
    table.resize(410, 120)
    table.show()
    table.selectRow(0)
    header = table.horizontalHeader()
    qtbot.waitUntil(lambda: header.sectionSize(2) > 0)
    room = header.sectionSize(2) - 12  # (the themes' padding: 6 px each side)
    painted = QFontMetrics(header.font())
    assert painted.horizontalAdvance(title) > room  # (the case: the title does not fit)
    assert header.font().weight() >= 600  # (the sections' weight in both themes)
    shown = painted.elidedText(title, header.textElideMode(), room)
    assert shown.startswith("Our") and shown.endswith("…")
    assert painted.horizontalAdvance(shown) <= room


def test_the_first_key_in_a_long_thread_starts_from_the_messages_on_screen(qtbot: Any, make_session: Any,
                                                                          tmp_path: Path) -> None:
    """A thread opens at its newest message with no row current; the first Up, Down or End jumped to the
    oldest message (Qt starts from the model's first row), hundreds of rows away from what was on screen
    (found by the Studio QA pass on a thread of 300 messages)."""
    path = tmp_path / "long.db"
    pane = _bulk_thread(qtbot, make_session, path, "long", 300)
    view = pane.view
    qtbot.waitUntil(lambda: view.rowAt(view.viewport().height() - 1) >= 290, timeout=10_000)  # at the end
    # No row is current, or (the window took focus meanwhile: Qt's focus-in makes the row ``moveCursor``
    # gives current) one on screen; never a row far from it.
    assert not view.currentIndex().isValid() or view.currentIndex().row() >= 290
    view.setCurrentIndex(pane.model.index(-1))
    view.setFocus()
    qtbot.keyClick(view, Qt.Key.Key_Up)
    assert view.currentIndex().row() >= 290
    view.setCurrentIndex(pane.model.index(-1))
    assert not view.currentIndex().isValid()
    qtbot.keyClick(view, Qt.Key.Key_End)
    assert view.currentIndex().row() == 299


def _live_thread_with_its_last_message_selected(qtbot: Any, make_session: Any, path: Path) -> Any:
    """A messages pane on a thread of 300 messages that follows the file's changes, its last row selected."""
    seed_many(path, "live", 300)
    session = make_session(path)
    pane = _messages(qtbot, session)
    session.changed.connect(pane.refresh)
    session.start()
    with qtbot.waitSignal(pane.model.loaded, timeout=10_000):
        pane.set_selection(Selection("bulk", "live"))
    pane._select_row(299)
    return pane


def test_new_messages_appear_and_the_view_follows_the_end(qtbot: Any, make_session: Any, tmp_path: Path) -> None:
    path = tmp_path / "live.db"
    pane = _live_thread_with_its_last_message_selected(qtbot, make_session, path)
    writer = open_store(path)
    writer.memory.save_messages([Message.user(f"new {i}", id=f"new{i}", thread_id="live", resource_id="bulk",
                                              created_at=at(600 + i)) for i in range(3)])
    writer.close()
    qtbot.waitUntil(lambda: pane.model.rowCount() == 303, timeout=10_000)
    qtbot.waitUntil(lambda: pane.model.index(302).data(MessageRoles.ID) == "new2", timeout=10_000)
    bar = pane.view.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.value() == bar.maximum(), timeout=5_000)
    assert pane.current_message_id() == "m0000299"  # the selection stayed on its message


def test_following_new_messages_never_pushes_the_selected_one_out_of_view(qtbot: Any, make_session: Any,
                                                                          tmp_path: Path) -> None:
    """At the end, the view follows new messages; when so many come at once that the selected message would
    scroll out of view (an agent writing a long turn while the user reads one), it follows only as far as
    the selected message stays in view (found 2026-12-06 walking the Studio beside a writing agent)."""
    path = tmp_path / "live.db"
    pane = _live_thread_with_its_last_message_selected(qtbot, make_session, path)
    bar = pane.view.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.value() == bar.maximum(), timeout=5_000)
    before = bar.value()
    writer = open_store(path)
    writer.memory.save_messages([Message.user(f"new {i}", id=f"new{i:03d}", thread_id="live", resource_id="bulk",
                                              created_at=at(600 + i)) for i in range(100)])
    writer.close()
    qtbot.waitUntil(lambda: pane.model.rowCount() == 400, timeout=10_000)
    qtbot.waitUntil(lambda: pane.model.index(399).data(MessageRoles.ID) == "new099", timeout=10_000)
    qtbot.wait(50)
    selected = pane.view.visualRect(pane.model.index(299))
    assert pane.current_message_id() == "m0000299" and selected.intersects(pane.view.viewport().rect())
    assert before < bar.value() < bar.maximum()  # it followed the new ones, as far as that


def test_jump_to_a_message_far_from_the_loaded_pages(qtbot: Any, make_session: Any, tmp_path: Path) -> None:
    path = tmp_path / "jump.db"
    seed_many(path, "j", 5_000)
    pane = _messages(qtbot, make_session(path))
    with qtbot.waitSignal(pane.message_selected, timeout=10_000) as sig:
        pane.set_selection(Selection("bulk", "j", "m0000123"))
    qtbot.waitUntil(lambda: pane.current_message_id() == "m0000123", timeout=10_000)
    assert pane.view.currentIndex().row() == 123
    assert sig.args is not None


def test_search_matches_what_messages_say_not_their_stored_json(qtbot: Any, make_session: Any,
                                                                 small_db: Path) -> None:
    """Every stored message holds "format", "parts", "type", quotes and braces in its JSON: searching
    for those words or characters must not list every message as a match."""
    pane = _resources(qtbot, make_session(small_db))
    for query in ("format", "parts", "type", '"', "{", "toolInvocation"):
        pane.search(query)
        qtbot.waitUntil(lambda: "Searching" not in pane.results_label.text(), timeout=10_000)
        assert pane.results.rowCount() == 0, query
        assert pane.results_label.text() == f"No message contains “{query}”"
    # What a part says is still found: a tool's name and arguments, a data part's values, a file's name.
    for query, thread in (("searchRecipes", "Weekly groceries"), ("tofu", "Weekly groceries"),
                          ("list.txt", "Weekly groceries"), ("PLAN DINNER", "Weekly groceries")):
        pane.search(query)
        qtbot.waitUntil(lambda: "Searching" not in pane.results_label.text(), timeout=10_000)
        assert pane.results.rowCount() == 1, query
        assert thread in pane.results.index(0).data()


def _damage_thread_index(path: Path) -> None:
    """Overwrite the index the thread list and a thread's messages are read through: the file still
    opens, those reads fail as damaged."""
    import sqlite3

    con = sqlite3.connect(path)
    page_size = con.execute("PRAGMA page_size").fetchone()[0]
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'idx_messages_thread_created_at'").fetchone()[0]
    con.close()
    with open(path, "r+b") as fh:
        fh.seek((root - 1) * page_size)
        fh.write(b"\xff" * page_size)


def test_a_tree_that_cannot_be_read_says_why_instead_of_looking_empty(qtbot: Any, make_session: Any,
                                                                      small_db: Path) -> None:
    """A damaged file that opens but whose thread list cannot be read must not look like an empty
    database: the tree says why, with the engine's advice (how to salvage it)."""
    _damage_thread_index(small_db)
    pane = ResourcesPane(make_session(small_db))
    qtbot.addWidget(pane)
    pane.show()
    pane.refresh()
    qtbot.waitUntil(lambda: pane.banner.isVisible(), timeout=10_000)
    assert pane.banner.text().startswith("The threads could not be read: ")
    assert "is damaged" in pane.banner.text() and ".recover" in pane.banner.text()
    assert pane.thread_rows() == []


def test_a_search_that_fails_says_so_instead_of_searching_forever(qtbot: Any, make_session: Any,
                                                                  tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "many.db"
    seed_many(path, "t-bulk", 400)
    con = sqlite3.connect(path)
    page_size = con.execute("PRAGMA page_size").fetchone()[0]
    leaves = [p for p, kind in con.execute("SELECT pageno, pagetype FROM dbstat WHERE name = 'mastra_messages'")
              if kind == "leaf"]
    con.close()
    with open(path, "r+b") as fh:  # one leaf of the messages table: the file opens, a scan of it fails
        fh.seek((leaves[-1] - 1) * page_size)
        fh.write(b"\xff" * page_size)
    pane = ResourcesPane(make_session(path))
    qtbot.addWidget(pane)
    pane.show()
    pane.search("message number")
    qtbot.waitUntil(lambda: "Searching" not in pane.results_label.text(), timeout=10_000)
    assert pane.results_label.text().startswith("The search for “message number” failed: ")
    assert "is damaged" in pane.results_label.text() and pane.results.rowCount() == 0


def test_a_thread_that_cannot_be_read_does_not_stay_loading(qtbot: Any, make_session: Any, small_db: Path) -> None:
    _damage_thread_index(small_db)
    pane = _messages(qtbot, make_session(small_db))
    pane.set_selection(Selection("ada", "t-groceries"))
    assert pane.header.text() == "Loading…"
    qtbot.waitUntil(lambda: pane.header.text() != "Loading…", timeout=10_000)
    assert pane.header.text().startswith("⚠ This thread's messages could not be read: ")
    assert "is damaged" in pane.header.text()


def test_a_failed_read_names_the_file_as_it_is_spelled(qtbot: Any, make_session: Any, small_db: Path) -> None:
    """The reason is escaped for the header, so the header must show it as markup: a folder named with
    ``&`` or an apostrophe read ``R&amp;D&#x27;s`` when Qt took the escaped text for plain text."""
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QTextDocument

    folder = small_db.parent / "R&D's notes"
    folder.mkdir()
    path = folder / "small.db"
    small_db.rename(path)
    _damage_thread_index(path)
    pane = _messages(qtbot, make_session(path))
    pane.set_selection(Selection("ada", "t-groceries"))
    qtbot.waitUntil(lambda: pane.header.text().startswith("⚠"), timeout=10_000)
    assert pane.header.textFormat() == Qt.TextFormat.RichText
    shown = QTextDocument()
    shown.setHtml(pane.header.text())
    assert f"{path} is damaged" in shown.toPlainText()


def test_ids_in_the_message_header_are_shown_as_text_not_markup(qtbot: Any, make_session: Any, tmp_path: Path) -> None:
    # Ids are user data (an import, the gateway): a thread named like markup must not restyle the header.
    db = tmp_path / "markup.db"
    with open_store(db) as store:
        store.memory.create_thread(thread_id="<b>t</b>", resource_id="<i>ada</i>")
        store.memory.save_messages([Message.user("hi", thread_id="<b>t</b>", resource_id="<i>ada</i>")])
    pane = _messages(qtbot, make_session(db))
    with qtbot.waitSignal(pane.model.loaded):
        pane.set_selection(Selection("<i>ada</i>", "<b>t</b>"))
    qtbot.waitUntil(lambda: "thread" in pane.header.text(), timeout=10_000)
    assert "<code>&lt;b&gt;t&lt;/b&gt;</code>" in pane.header.text()
    assert "<code>&lt;i&gt;ada&lt;/i&gt;</code>" in pane.header.text()


def test_ids_in_pane_titles_are_shown_as_text_not_markup(qtbot: Any, make_session: Any, tmp_path: Path) -> None:
    # The Working Memory title and the Traces / Recall subtitles name the selected thread or resource.
    from PySide6.QtCore import Qt

    from studio.panes.recall_playground import RecallPlaygroundPane
    from studio.panes.traces import TracesPane
    from studio.panes.working_memory import WorkingMemoryPane

    db = tmp_path / "markup.db"
    with open_store(db) as store:
        store.memory.create_thread(thread_id="<b>t</b>", resource_id="<i>ada</i>")
        store.memory.save_messages([Message.user("hi", thread_id="<b>t</b>", resource_id="<i>ada</i>")])
    session = make_session(db)
    wm = WorkingMemoryPane(session)
    traces = TracesPane(session)
    recall = RecallPlaygroundPane(session)
    for pane in (wm, traces, recall):
        qtbot.addWidget(pane)
        pane.show()
    with qtbot.waitSignal(wm.loaded, timeout=10_000):
        wm.set_selection(Selection("<i>ada</i>", "<b>t</b>"))
    traces.set_selection(Selection("<i>ada</i>", "<b>t</b>"))
    recall.set_selection(Selection("<i>ada</i>", "<b>t</b>"))
    qtbot.waitUntil(lambda: "<b>t</b>" in traces.subtitle.text() and "<" in recall.subtitle.text(), timeout=10_000)
    assert "<i>ada</i>" in wm.title.text()
    for label in (wm.title, traces.title, traces.subtitle, traces.span_title, recall.subtitle):
        assert label.textFormat() == Qt.TextFormat.PlainText, label.text()


def test_problem_and_confirm_dialogs_show_their_text_as_plain_text(qtbot: Any) -> None:
    # An import's confirmation and refusals quote a file's ids: markup in them must not restyle the dialog.
    from PySide6.QtCore import Qt

    from studio.dialogs import Problem, build_confirm_box, build_error_box

    for box in (build_error_box(None, Problem("Title", "Import resource <b>ada</b>", "<i>advice</i>")),
                build_confirm_box(None, "Import?", "Import resource <b>ada</b>", "<i>advice</i>", "Import")):
        qtbot.addWidget(box)
        assert box.textFormat() == Qt.TextFormat.PlainText
        assert box.text() == "Import resource <b>ada</b>"


def test_a_tree_of_thousands_of_threads_sizes_its_columns_without_reading_every_row(
        qtbot: Any, make_session: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Sized to their contents by Qt, the count and date columns asked every row for its text (a thousand
    # at least) on each load: a second of the UI thread with 3,000 threads, at the open and at every refresh
    # the database's changes bring; and a wide count further down was cut ("100,…").
    from datetime import timedelta

    from PySide6.QtCore import Qt

    from studio.models.resource_tree import ResourceTreeModel

    from .conftest import T0

    path = tmp_path / "many.db"
    store = open_store(path)
    for k in range(1500):
        store.memory.create_thread(thread_id=f"t{k:04d}", resource_id="many", title=f"Thread {k}")
    store.memory.save_messages([Message.user("hi", id=f"m{k}", thread_id=f"t{k:04d}", resource_id="many",
                                             created_at=T0 + timedelta(hours=5, minutes=k)) for k in range(1500)])
    store.close()
    seed_many(path, "long", 12_345, resource_id="old")  # older: listed last, below the 1,500 others
    asked: list[int] = []
    shown = ResourceTreeModel._thread_data

    def counting(self: Any, node: Any, s: Any, col: int, role: int) -> Any:
        if role == Qt.ItemDataRole.DisplayRole and col in (1, 2):
            asked.append(col)
        return shown(self, node, s, col, role)

    monkeypatch.setattr(ResourceTreeModel, "_thread_data", counting)
    pane = ResourcesPane(make_session(path))
    qtbot.addWidget(pane)
    pane.resize(520, 500)  # (wide enough for the date column beside titles with their room)
    pane.show()
    pane.refresh()
    qtbot.waitUntil(lambda: pane.proxy.rowCount() == 2, timeout=10_000)
    qtbot.wait(200)
    assert len(asked) < 400, len(asked)  # the rows shown (a few dozen), not every row
    assert len(pane.thread_rows()) == 1501
    header, metrics = pane.tree.header(), pane.tree.fontMetrics()
    assert header.sectionSize(1) > metrics.horizontalAdvance("12,345")  # the widest count fits
    asked.clear()
    # (asked of every row here, once the count above is done: the widest date shown fits)
    days = {pane.proxy.index(r, 2, pane.proxy.index(p, 0)).data() for p in range(2)
            for r in range(pane.proxy.rowCount(pane.proxy.index(p, 0)))}
    assert len(days) > 1
    assert header.sectionSize(2) > max(metrics.horizontalAdvance(d) for d in days), days
    asked.clear()
    pane.refresh()  # (what each change of the database brings)
    qtbot.wait(300)
    assert len(asked) < 400, len(asked)


def test_a_resource_that_appears_after_the_first_load_is_expanded_as_the_first_ones_were(
        qtbot: Any, make_session: Any, tmp_path: Path) -> None:
    """The first launch fills the database with the demo while the tree loads: the first load held one resource
    (expanded), the two seeded after it came in collapsed, their threads hidden. A resource that appears later
    is expanded too now; one the user collapsed stays collapsed."""
    from .conftest import T0

    path = tmp_path / "memory.db"
    store = open_store(path)

    def add(resource_id: str) -> None:
        store.memory.create_thread(thread_id=f"t-{resource_id}", resource_id=resource_id, title=f"{resource_id}'s")
        store.memory.save_messages([Message.user("hi", id=f"m-{resource_id}", thread_id=f"t-{resource_id}",
                                                 resource_id=resource_id, created_at=T0)])

    def expanded() -> dict[str, bool]:
        proxy = pane.proxy
        return {proxy.index(r, 0).data(TreeRoles.RESOURCE_ID): pane.tree.isExpanded(proxy.index(r, 0))
                for r in range(proxy.rowCount())}

    def load(count: int) -> None:
        pane.refresh()
        qtbot.waitUntil(lambda: pane.proxy.rowCount() == count, timeout=10_000)

    add("ada")
    pane = ResourcesPane(make_session(path))
    qtbot.addWidget(pane)
    pane.show()
    load(1)
    add("sam")
    add("li-wei")
    load(3)
    assert expanded() == {"ada": True, "sam": True, "li-wei": True}
    pane.tree.collapse(pane.proxy.mapFromSource(pane.model.index_of("sam")))
    add("bo")
    load(4)
    assert expanded() == {"ada": True, "sam": False, "li-wei": True, "bo": True}
    store.close()


def test_threads_whose_ids_share_a_head_are_told_apart_in_the_tree(qtbot: Any, make_session: Any,
                                                                   small_db: Path) -> None:
    """Found by a QA pass with 360 threads: a resource's "Standup" threads, ids "customer-029-6ea9ab1b-t2",
    "…-t5", …, were all "Standup · customer-0…" in the tree (the id's head, the same for every one)."""
    writer = open_store(small_db)
    ids = [f"customer-029-6ea9ab1b-t{n}" for n in (2, 5, 11)]
    for tid in ids:
        writer.memory.create_thread(thread_id=tid, resource_id="customer-029-6ea9ab1b", title="Standup")
    for n in (3, 4):  # (untitled, started in one second: named by their ids)
        writer.memory.create_thread(thread_id=f"customer-029-6ea9ab1b-t{n}", resource_id="customer-029-6ea9ab1b",
                                    created_at=datetime(2026, 12, 7, 9, 0, 0, tzinfo=timezone.utc))
    writer.close()
    pane = _resources(qtbot, make_session(small_db))
    qtbot.waitUntil(lambda: any(r[0] == "customer-029-6ea9ab1b" for r in pane.thread_rows()), timeout=10_000)
    labels = sorted(r[1] for r in pane.thread_rows() if r[0] == "customer-029-6ea9ab1b")
    assert labels == ["(untitled) · …t3", "(untitled) · …t4", "Standup · …t11", "Standup · …t2", "Standup · …t5"]


def _thread_indexes(pane: ResourcesPane, resource_id: str) -> list[Any]:
    """The tree's rows of ``resource_id``'s threads (its row expanded), column 0, as the view shows them."""
    tree, proxy = pane.tree, pane.tree.model()
    tree.expandAll()
    parent = next(proxy.index(r, 0) for r in range(proxy.rowCount())
                  if proxy.index(r, 0).data(TreeRoles.RESOURCE_ID) == resource_id)
    return [proxy.index(row, 0, parent) for row in range(proxy.rowCount(parent))]


@pytest.mark.parametrize("theme", [None, "dark", "light"])
def test_untitled_threads_served_read_apart_by_when_they_started(
        qtbot: Any, make_session: Any, small_db: Path, qapp: Any, theme: str | None) -> None:
    """Untitled threads ``memory-studio serve`` makes ("thread_" and 16 hex digits; an agent without title
    generation, Mastra's default) read "(untitled) · …3fa2b1c4d5…", "(untitled) · …9c0e7d1a2b…" in the tree: hex
    (found by s35-walk11). Each reads when it started, whole in the tree's column and no wider than a title's least
    room (the Latest column stays beside it); its id is in the tooltip, and looking wrote nothing."""
    import uuid

    from studio.panes.resources import TITLE_LEAST_CHARS
    from studio.theme import apply_theme

    from .conftest import file_state

    t0 = datetime(2026, 12, 7, 9, 15, 42, tzinfo=timezone.utc)
    writer = open_store(small_db)
    made = []
    for delay in (timedelta(0), timedelta(minutes=3), timedelta(minutes=3, seconds=10)):
        tid = f"thread_{uuid.uuid4().hex[:16]}"  # (as core.gateway.turns names a new thread)
        writer.memory.create_thread(thread_id=tid, resource_id="walker", created_at=t0 + delay)
        made.append((tid, t0 + delay))
    writer.close()
    before = file_state(small_db)
    with theme_restored(qapp):
        if theme is not None:
            apply_theme(qapp, theme)
        pane = _resources(qtbot, make_session(small_db))
        pane.resize(380, 600)
        qtbot.waitUntil(lambda: sum(r[0] == "walker" for r in pane.thread_rows()) == 3, timeout=10_000)
        labels = {r[1] for r in pane.thread_rows() if r[0] == "walker"}
        assert labels == {f"(untitled) · {format_datetime(made[0][1])[:16]}",
                          f"(untitled) · {format_datetime(made[1][1])}",  # (one minute: to the second)
                          f"(untitled) · {format_datetime(made[2][1])}"}
        tree = pane.tree
        metrics = tree.fontMetrics()
        for index in _thread_indexes(pane, "walker"):
            shown = index.data()
            room = tree.visualRect(index).width()
            assert metrics.horizontalAdvance(shown) + 8 <= room, (shown, room)  # (whole: not cut to "(untit…")
            assert metrics.horizontalAdvance(shown) <= metrics.horizontalAdvance("x") * TITLE_LEAST_CHARS, shown
            assert index.data(TreeRoles.THREAD_ID) in (index.data(Qt.ItemDataRole.ToolTipRole) or "")
    pane.session.pool.wait(10_000)
    assert file_state(small_db) == before


@pytest.mark.parametrize("theme", ["dark"])
def test_untitled_threads_read_the_first_words_of_their_first_message(
        qtbot: Any, make_session: Any, small_db: Path, qapp: Any, theme: str) -> None:
    """An untitled thread read "(untitled) · 2026-12-07 09:15" (when it started; its id before that): the first
    words of its first user message say more (noted by s35-walk11). It reads them in quotes, whole in the tree's
    column and within a title's least room; two that begin alike add when each started; one with no user message yet
    keeps its start; its tooltip says it has no title; the filter finds the words; looking wrote nothing."""
    from studio.panes.resources import TITLE_LEAST_CHARS
    from studio.theme import apply_theme

    from .conftest import file_state

    t0 = datetime(2026, 12, 7, 9, 15, 42, tzinfo=timezone.utc)
    writer = open_store(small_db)
    messages = []
    for n, (tid, first) in enumerate((("w1", "Plan a trip to Lisbon in May with the kids, trams and pastries"),
                                      ("w2", "Hi"), ("w3", "  Hi\n"), ("w4", None))):
        writer.memory.create_thread(thread_id=tid, resource_id="walker", created_at=t0 + timedelta(minutes=n))
        messages.append(Message.assistant("Hello! What can I do?", thread_id=tid, resource_id="walker",
                                          created_at=t0 + timedelta(minutes=n)))
        if first is not None:
            messages.append(Message.user(first, thread_id=tid, resource_id="walker",
                                         created_at=t0 + timedelta(minutes=n, seconds=5)))
    writer.memory.save_messages(messages)
    writer.close()
    before = file_state(small_db)
    with theme_restored(qapp):
        apply_theme(qapp, theme)
        pane = _resources(qtbot, make_session(small_db))
        pane.resize(380, 600)
        qtbot.waitUntil(lambda: sum(r[0] == "walker" for r in pane.thread_rows()) == 4, timeout=10_000)
        labels = {r[1] for r in pane.thread_rows() if r[0] == "walker"}
        assert labels == {"“Plan a trip to Lisbon in…”", f"“Hi” · {format_datetime(t0 + timedelta(minutes=1))[:16]}",
                          f"“Hi” · {format_datetime(t0 + timedelta(minutes=2))[:16]}",
                          f"(untitled) · {format_datetime(t0 + timedelta(minutes=3))[:16]}"}
        tree = pane.tree
        metrics = tree.fontMetrics()
        for index in _thread_indexes(pane, "walker"):
            shown = index.data()
            assert metrics.horizontalAdvance(shown) + 8 <= tree.visualRect(index).width(), shown  # whole
            assert metrics.horizontalAdvance(shown) <= metrics.horizontalAdvance("x") * TITLE_LEAST_CHARS, shown
            if index.data(TreeRoles.THREAD_ID) == "w1":
                tip = index.data(Qt.ItemDataRole.ToolTipRole)
                assert "(untitled): its first message begins “Plan a trip to Lisbon in…”" in tip and "w1" in tip
        pane.tree.grab().save(str(small_db.parent / "untitled-openings.png"))
        # Where the words do not fit (a narrow tree) they are cut at their end, not in the middle ("“Plan…in…”")
        from PySide6.QtWidgets import QStyleOptionViewItem

        from studio.widgets.item_text import text_room

        index = next(i for i in _thread_indexes(pane, "walker") if i.data(TreeRoles.THREAD_ID) == "w1")
        whole = metrics.horizontalAdvance("“Plan a trip to Lisbon in…”")
        pane.resize(200, 600)
        qtbot.waitUntil(lambda: tree.visualRect(index).width() < whole, timeout=10_000)
        option = QStyleOptionViewItem()
        tree.initViewItemOption(option)
        option.rect = tree.visualRect(index)
        tree.itemDelegateForIndex(index).initStyleOption(option, index)
        drawn = option.fontMetrics.elidedText(option.text, option.textElideMode, text_room(option))
        assert drawn.startswith("“Plan a") and drawn.endswith("…") and drawn != option.text, drawn
        pane.filter.setText("lisbon")
        qtbot.waitUntil(lambda: [r[:2] for r in pane.thread_rows() if r[0] == "walker"] == [
            ("walker", "“Plan a trip to Lisbon in…”")], timeout=10_000)
    pane.session.pool.wait(10_000)
    assert file_state(small_db) == before


def test_an_empty_database_says_it_has_no_threads_and_how_one_starts(qtbot: Any, make_session: Any,
                                                                     tmp_path: Path) -> None:
    """Found by a QA pass on an empty database: the tree was a blank list under its header, beside "No
    thread selected. Pick one in the tree": nothing said the file has no threads (rather than still
    loading) or how a thread comes to be."""
    path = tmp_path / "empty.db"
    open_store(path).close()
    pane = ResourcesPane(make_session(path))
    qtbot.addWidget(pane)
    pane.show()
    pane.refresh()
    qtbot.waitUntil(lambda: pane.banner.isVisible(), timeout=10_000)
    assert "No threads in this database yet" in pane.banner.text() and "Chat Playground" in pane.banner.text()
    assert pane.banner.level == "info"
    writer = open_store(path)
    writer.memory.create_thread(thread_id="t1", resource_id="u1", title="First")
    writer.close()
    pane.refresh()
    qtbot.waitUntil(lambda: len(pane.thread_rows()) == 1, timeout=10_000)
    assert not pane.banner.isVisible()


def test_a_tree_of_thousands_of_threads_is_not_sorted_on_the_ui_thread(
        qtbot: Any, make_session: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A sorting proxy asked the model for two rows' last activity per comparison, n log n times: ~0.15 s of
    # the UI thread for a resource of 3,000 threads at every load, expanded or not (bench/studio_stalls.py,
    # "start, open the database"). The model keeps its rows in order itself; a refresh that changes the
    # order moves the rows and keeps the selection.
    from datetime import timedelta

    from studio.models.resource_tree import ResourceTreeModel, TreeRoles

    from .conftest import T0

    path = tmp_path / "many.db"
    store = open_store(path)
    for k in range(1500):
        store.memory.create_thread(thread_id=f"t{k:04d}", resource_id="many", title=f"Thread {k}")
    store.memory.save_messages([Message.user("hi", id=f"m{k}", thread_id=f"t{k:04d}", resource_id="many",
                                             created_at=T0 + timedelta(hours=5, minutes=k)) for k in range(1500)])
    store.close()
    seed_many(path, "long", 3, resource_id="old")  # older: listed last
    asked: list[int] = []
    data = ResourceTreeModel.data

    def counting(self: Any, index: Any, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if role == TreeRoles.SORT:
            asked.append(role)
        return data(self, index, role)

    monkeypatch.setattr(ResourceTreeModel, "data", counting)
    pane = ResourcesPane(make_session(path))
    qtbot.addWidget(pane)
    pane.resize(420, 500)
    pane.show()
    pane.refresh()
    qtbot.waitUntil(lambda: pane.proxy.rowCount() == 2, timeout=10_000)
    qtbot.wait(100)
    rows = pane.thread_rows()
    assert [r[1] for r in rows[:3]] == ["Thread 1499", "Thread 1498", "Thread 1497"] and rows[-1][0] == "old"
    pane.set_selection(Selection("many", "t0700"))
    writer = open_store(path)  # the oldest thread of each resource has the newest message now
    writer.memory.save_messages([Message.user("late", id="late-a", thread_id="t0000", resource_id="many",
                                              created_at=T0 + timedelta(days=3)),
                                 Message.user("later", id="late-b", thread_id="long", resource_id="old",
                                              created_at=T0 + timedelta(days=4))])
    writer.close()
    pane.refresh()
    qtbot.waitUntil(lambda: pane.thread_rows()[0][0] == "old", timeout=10_000)
    rows = pane.thread_rows()
    assert [r[1] for r in rows[1:4]] == ["Thread 0", "Thread 1499", "Thread 1498"] and len(rows) == 1501
    assert pane.current_selection() == Selection("many", "t0700")
    assert pane.tree.currentIndex().data() == "Thread 700"
    assert asked == []  # nothing sorted the rows by asking the model, row by row


def test_a_delegations_resource_is_labelled_as_one_not_shown_as_another_user(qtbot: Any, make_session: Any,
                                                                            small_db: Path, tmp_path: Path) -> None:
    """A sub-agent's delegations run on ``delegation:<resource>:<agent>``: the tree showed
    "delegation:ada:helper" as one more resource beside "ada", with nothing saying what it was. It reads
    "ada → helper (delegation)", its tooltip says what it holds, and the filter finds it by either name."""
    from core import Memory
    from core.agent import Agent
    from core.llm import ScriptedModel, ScriptedReply, tool_call
    from core.scopes import delegation_resource

    def boss_model(messages: Any, tools: Any) -> Any:
        if messages[-1].get("role") == "user":
            return ScriptedReply(tool_calls=(tool_call("agent-helper", {"prompt": "plan the party"}),))
        return "Helper is on it."

    writer = open_store(small_db)
    helper = Agent("helper", instructions="Help.", model=ScriptedModel(["Cake at four."]), tracer=False)
    boss = Agent("boss", instructions="Delegate.", model=ScriptedModel(boss_model), memory=Memory(writer),
                 agents=[helper], tracer=False, register=False)
    boss.generate("help with the party", memory={"resource": "ada", "thread": "t-party"})
    writer.close()
    delegated = delegation_resource("ada", "helper")
    pane = _resources(qtbot, make_session(small_db))
    qtbot.waitUntil(lambda: any(r[0] == delegated for r in pane.thread_rows()), timeout=10_000)
    rows = {pane.proxy.index(r, 0).data(TreeRoles.RESOURCE_ID): pane.proxy.index(r, 0)
            for r in range(pane.proxy.rowCount())}
    assert set(rows) == {"ada", "li", delegated}  # (the data is as stored: its own resource)
    assert rows[delegated].data() == "ada → helper (delegation)" and rows["ada"].data() == "ada"
    tip = rows[delegated].data(Qt.ItemDataRole.ToolTipRole)
    assert f"Resource {delegated}" in tip and "sub-agent 'helper'" in tip and "Forgetting ada" in tip
    pane.tree.expandAll()
    pane.grab().save(str(tmp_path / "tree-delegation.png"))  # (looked at when this was written)
    for text in ("helper", "delegation", "ada →"):
        pane.filter.setText(text)
        qtbot.waitUntil(lambda: any(r[0] == delegated for r in pane.thread_rows()), timeout=10_000)
    pane.filter.setText("li")  # (li's threads only: ada's delegation is not li's)
    qtbot.waitUntil(lambda: all(r[0] == "li" for r in pane.thread_rows()), timeout=10_000)


def test_a_resource_named_like_a_delegations_label_does_not_look_like_the_delegation(qtbot: Any, make_session: Any,
                                                                                    tmp_path: Path) -> None:
    """A resource id can be any text: one spelled "alice → helper (delegation)" had the very label of Alice's
    delegation ``delegation:alice:helper`` in the tree, in the same bold, and only the tooltip told them
    apart. A delegation is drawn in italics (not bold), which no id can produce: the two rows differ on
    screen."""
    from core import Memory
    from core.scopes import delegation_resource

    delegated, lookalike = delegation_resource("alice", "helper"), "alice → helper (delegation)"
    db = tmp_path / "lookalike.db"
    store = open_store(db)
    memory = Memory(store)
    for resource, thread in ((delegated, "t-delegated"), (lookalike, "t-lookalike"), ("alice", "t-alice")):
        memory.create_thread(resource_id=resource, thread_id=thread, title="Plan")
    store.close()
    pane = _resources(qtbot, make_session(db))
    rows = {pane.proxy.index(r, 0).data(TreeRoles.RESOURCE_ID): pane.proxy.index(r, 0)
            for r in range(pane.proxy.rowCount())}
    assert set(rows) == {delegated, lookalike, "alice"}
    assert rows[delegated].data() == rows[lookalike].data() == lookalike  # the same words
    fonts = {rid: index.data(Qt.ItemDataRole.FontRole) for rid, index in rows.items()}
    assert fonts[delegated].italic() and not fonts[delegated].bold()
    assert fonts[lookalike].bold() and not fonts[lookalike].italic() and fonts["alice"] == fonts[lookalike]
    pane.tree.selectionModel().clearSelection()
    pane.tree.setCurrentIndex(pane.proxy.index(0, 0, rows["alice"]))  # (neither row current nor selected)
    pane.tree.collapseAll()
    qtbot.wait(50)
    shot = pane.tree.viewport().grab().toImage()

    def cell(rid: str) -> Any:
        return shot.copy(pane.tree.visualRect(rows[rid]))

    assert cell(delegated) != cell(lookalike)  # what is on screen, not only the font asked for


def test_search_results_fit_the_pane_and_cut_a_long_line_with_an_ellipsis(qtbot: Any, make_session: Any,
                                                                          small_db: Path) -> None:
    """The search results were as wide as their longest line: the list scrolled sideways and a long snippet
    was cut at the pane's edge with no "…" (search.png). Each row is the list's width now, a line longer
    than that ends in "…", and the row's tooltip has its text whole, as plain text."""
    from PySide6.QtGui import Qt as GuiQt  # (mightBeRichText is QtGui's)
    from PySide6.QtWidgets import QStyleOptionViewItem

    writer = open_store(small_db)
    long_text = ("Reminder for <b>the cook</b>: peanuts are out, and so are sesame, cashews, pine nuts and every "
                 "sauce made with them, at home, at the party and at every restaurant we book this year.")
    writer.memory.save_messages([Message.user(long_text, thread_id="t-party", resource_id="ada", created_at=at(9))])
    writer.close()
    pane = _resources(qtbot, make_session(small_db))
    pane.resize(320, 500)
    pane.filter.setText("peanuts")
    pane.search()
    qtbot.waitUntil(lambda: pane.results.rowCount() == 2, timeout=10_000)
    view = pane.results_view
    row = next(i for i in range(2) if "sesame" in pane.results.index(i).data())
    index = pane.results.index(row)
    qtbot.waitUntil(lambda: view.visualRect(index).isValid(), timeout=5_000)  # (laid out)
    qtbot.wait(50)
    width = view.viewport().width()
    rect = view.visualRect(index)
    assert view.horizontalScrollBar().maximum() == 0, (view.horizontalScrollBar().maximum(), rect, width)
    assert rect.left() >= 0 and rect.right() < width
    # No row asks for more than the list's width (the list is as wide as its rows' widest hint: with a
    # long snippet first it scrolled sideways, search.png).
    assert all(view.sizeHintForIndex(pane.results.index(i)).width() <= width for i in range(2))
    option = QStyleOptionViewItem()
    option.initFrom(view)
    option.rect = rect
    option.widget = view
    lines = pane.results_delegate.shown_lines(option, index)
    title, text = index.data().split("\n")
    assert len(lines) == 2 and lines[1].endswith("…") and lines[1] != text
    assert all(view.fontMetrics().horizontalAdvance(line) <= rect.width() for line in lines)
    tip = index.data(Qt.ItemDataRole.ToolTipRole)
    assert tip.startswith(f"{title}\n{text}\n")  # the row's lines whole
    assert not GuiQt.mightBeRichText(tip)  # shown as written (its "<b>" not as markup)
    pane.resize(900, 500)  # wider: the rows follow, the short one whole
    qtbot.waitUntil(lambda: view.visualRect(index).width() > rect.width(), timeout=5_000)
    assert view.horizontalScrollBar().maximum() == 0


def _ideograph(char: str) -> bool:
    """Whether `char` is a CJK ideograph: UAX #14 (class ID) lets a line break before and after one, so
    with a font that has their glyphs Qt may break "中文" between its two characters."""
    import unicodedata
    return unicodedata.name(char, "").startswith("CJK UNIFIED IDEOGRAPH")


def test_a_message_longer_than_its_two_lines_ends_in_an_ellipsis_and_its_tooltip_has_the_text(
        qtbot: Any, make_session: Any, tmp_path: Path) -> None:
    """The list's rows showed two lines of a message and cut the rest at the second line's end with no
    "…" (a 200 kB message, a 20,000-message thread's long rows: found walking the Studio on a large
    database); the preview was also cut at 400 characters unmarked, and the row's tooltip held only its
    role, time and id. A row now ends in "…" when more follows, a run with no spaces (Chinese) is broken
    inside the row, a line is never wider than the row nor broken inside a word, other than between two
    ideographs where Unicode's line breaking allows it (Qt counts an emoji as two characters), and the
    tooltip has the text, escaped and wrapped."""
    from PySide6.QtGui import Qt as GuiQt  # (mightBeRichText is QtGui's)
    from PySide6.QtWidgets import QStyleOptionViewItem

    from studio.panes.messages import preview_lines

    path = tmp_path / "long.db"
    store = open_store(path)
    long_words = "the <b>cook</b> said the plans for the party are done " * 30  # ~1,600 chars
    chinese = "我们讨论了项目的计划和进度" * 40
    mixed = "lorem ipsum dolor sit amet 🎉🎂 العربية 中文 " * 30  # Qt counts an emoji as two (UTF-16)
    texts = [long_words, chinese, mixed, "short and whole"]
    store.memory.save_messages([Message.user(t, thread_id="t", resource_id="r", created_at=at(i))
                                for i, t in enumerate(texts)])
    store.close()
    pane = _messages(qtbot, make_session(path))
    pane.resize(520, 600)
    with qtbot.waitSignal(pane.model.loaded, timeout=10_000):
        pane.set_selection(Selection("r", "t"))
    model, view = pane.model, pane.view
    qtbot.waitUntil(lambda: all(model.index(i).data(MessageRoles.LOADED) for i in range(4)), timeout=10_000)
    preview = model.index(0).data(MessageRoles.PREVIEW)
    assert len(preview) <= 400 and preview.endswith("…")  # cut, and marked as cut
    delegate = view.itemDelegate()
    for i, text in enumerate(texts):
        index = model.index(i)
        option = QStyleOptionViewItem()
        option.initFrom(view)
        rect = view.visualRect(index)
        width = rect.width() - 2 * delegate.PAD
        lines = preview_lines(index.data(MessageRoles.PREVIEW), option.font, width)
        fm = QFontMetrics(option.font)
        assert all(fm.horizontalAdvance(line) <= width for line in lines), (i, lines)
        if i < 3:
            assert len(lines) == 2 and lines[1].endswith("…"), (i, lines)
            words = lines[0].split()
            assert text.startswith(lines[0]), (i, lines)
            if i != 1:  # a word is whole, or cut where Unicode lets a line break: between two ideographs
                whole = text.split()[len(words) - 1]
                cut = len(words[-1])
                assert words[-1] == whole or (
                    whole.startswith(words[-1]) and _ideograph(whole[cut - 1]) and _ideograph(whole[cut])), (i, lines)
        else:
            assert lines == ["short and whole"]
        tip = index.data(Qt.ItemDataRole.ToolTipRole)
        assert "r" in tip and html.escape(index.data(MessageRoles.PREVIEW), quote=False) in tip
        assert GuiQt.mightBeRichText(tip) and "<b>" not in tip  # wrapped by Qt; the text's markup escaped
    pane.grab().save(str(tmp_path / "rows.png"))


def test_the_first_launch_selects_the_trees_first_row_once_the_demo_is_seeded_unless_the_user_picked_one(
        qtbot: Any, make_session: Any, tmp_path: Path) -> None:
    """The first launch seeds the demo while the tree loads: the first load held ada alone, so ada's thread was
    selected, and it stayed selected once sam's, listed first, came in (found 2026-12-07 by s33-walk5). The
    tree's pick follows its first row while the user has picked nothing; a row the user picked stays."""
    from datetime import timedelta

    from .conftest import T0

    path = tmp_path / "memory.db"
    store = open_store(path)

    def add(resource_id: str, minutes: int) -> None:
        store.memory.create_thread(thread_id=f"t-{resource_id}", resource_id=resource_id, title=f"{resource_id}'s")
        store.memory.save_messages([Message.user("hi", id=f"m-{resource_id}", thread_id=f"t-{resource_id}",
                                                 resource_id=resource_id, created_at=T0 + timedelta(minutes=minutes))])

    def load(count: int) -> None:
        pane.refresh()
        qtbot.waitUntil(lambda: pane.proxy.rowCount() == count, timeout=10_000)

    def first_row() -> tuple[str, str]:
        top = pane.proxy.index(0, 0)
        return top.data(TreeRoles.RESOURCE_ID), pane.proxy.index(0, 0, top).data(TreeRoles.THREAD_ID)

    add("ada", 0)
    pane = ResourcesPane(make_session(path))
    qtbot.addWidget(pane)
    picks: list[Any] = []
    pane.selection_changed.connect(picks.append)
    pane.show()
    load(1)
    assert (pane.current_selection().resource_id, pane.current_selection().thread_id) == ("ada", "t-ada")
    add("sam", 10)
    add("li-wei", 5)
    load(3)
    assert first_row() != ("ada", "t-ada")  # (the newest resource is listed first)
    current = pane.current_selection()
    assert (current.resource_id, current.thread_id) == first_row()
    assert picks[-1] == current  # (the panes were told)
    # An agent writing to a thread the tree already lists puts it first: the row the user reads stays selected
    # (only resources appearing, the seeding, move the tree's own pick).
    store.memory.save_messages([Message.user("again", id="m-ada-2", thread_id="t-ada", resource_id="ada",
                                             created_at=T0 + timedelta(minutes=15))])
    pane.refresh()
    qtbot.waitUntil(lambda: first_row() == ("ada", "t-ada"), timeout=10_000)
    assert pane.current_selection() == current
    pane.tree.setCurrentIndex(pane.proxy.index(0, 0, pane.proxy.index(2, 0)))  # the user picks the last resource's
    picked = pane.current_selection()
    add("bo", 20)
    load(4)
    assert first_row() == ("bo", "t-bo")
    assert pane.current_selection() == picked
    store.close()
