"""Observations pane: the demo's stand-up thread (log, hints, bars, generations), a reflected
generation, the empty state, and no writes (pytest-qt, offscreen, files in tmp_path)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtGui import Qt

from core import Memory, MemoryOptions, open_store
from core.observational import load_current
from core.observational.store import commit_reflection
from studio.logic.observations_layout import EMPTY_TEXT
from studio.main_window import OBSERVATIONS, PANES
from studio.panes.observations import PAGE_CONTENT, PAGE_EMPTY, ObservationsPane
from studio.selection import Selection

from .conftest import another_program, file_state, seeded_demo_folder

WAIT = 20_000
STANDUP = Selection("sam", "sam-standup")


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return seeded_demo_folder(tmp_path_factory, "demo-om")


@pytest.fixture
def demo_db(tmp_path: Path, demo_dir: Path) -> Path:
    shutil.copytree(demo_dir, tmp_path / "demo")
    return tmp_path / "demo" / "memory.db"


def open_pane(qtbot: Any, make_session: Any, db: Path, selection: Selection = STANDUP) -> ObservationsPane:
    pane = ObservationsPane(make_session(db))
    qtbot.addWidget(pane)
    pane.resize(1100, 700)
    pane.show()
    select(qtbot, pane, selection)
    return pane


def select(qtbot: Any, pane: ObservationsPane, selection: Selection) -> None:
    with qtbot.waitSignal(pane.loaded, timeout=WAIT):
        pane.set_selection(selection)


def test_shows_the_log_hints_bars_and_generation(no_leaked_widgets, qtbot, make_session, demo_db):
    pane = open_pane(qtbot, make_session, demo_db)
    assert pane.stack.currentIndex() == PAGE_CONTENT
    assert "thread sam-standup" in pane.subtitle.text() and "1 generation" in pane.subtitle.text()
    log = pane.log_view.toPlainText()
    assert "Date: Sep 14, 2026" in log and "staging mail server" in log
    assert 'src="priority:high"' in pane.log_view.toHtml()  # the observer's 🔴, drawn (no emoji font)
    assert "Chunk 1" in log and "Chunk 2" in log  # two observations, kept apart
    assert "Priya" in pane.hint_labels["Current task"].text()
    assert "Remind Sam" in pane.hint_labels["Suggested response"].text()
    assert "2026-09-14" in pane.hint_labels["Last observed"].text()

    record = pane.view.history[0]
    (_, messages), (_, observations) = pane.bars
    assert record.pending_message_tokens > 0
    assert messages.format() == f"{record.pending_message_tokens:,} / 120 tokens ({messages.value()}%)"
    assert messages.value() == round(100 * record.pending_message_tokens / 120)
    assert pane.bar_texts[0].text() == messages.format()
    assert "/ 100,000 tokens" in observations.format() and "scripted/observer-demo" in messages.toolTip()

    assert pane.gen_model.rowCount() == 1
    row = pane.gen_model.row_at(0)
    assert row is not None and (row.number, row.origin, row.tokens) == (0, "initial", record.observation_token_count)


def test_a_reflection_shows_as_a_new_generation_and_the_old_log_stays_readable(
        no_leaked_widgets, qtbot, make_session, demo_db):
    store = open_store(demo_db)
    first = load_current(store, thread_id="sam-standup")
    assert first is not None
    commit_reflection(store, record=first, tokens=21,
                      reflection="Date: Sep 14, 2026\n* 🔴 (14:01) Sam: reset email due Wednesday; blocked on staging.")
    store.close()

    pane = open_pane(qtbot, make_session, demo_db)
    assert [(g.number, g.origin, g.current) for g in pane.gen_model.rows()] == [
        (1, "reflection", True), (0, "initial", False)]
    assert "blocked on staging" in pane.log_view.toPlainText()
    assert "generation 1" in pane.log_caption.text()
    pane.gen_table.selectRow(1)
    assert "generation 0" in pane.log_caption.text() and "earlier" in pane.log_caption.text()
    assert "Jonas is on holiday" in pane.log_view.toPlainText()


def test_a_reflections_lines_are_marked_apart_from_the_observers_and_looking_writes_nothing(
        no_leaked_widgets, qtbot, make_session, demo_db):
    """A reflection's output was shown as the log's "Chunk 1", like any observer chunk: nothing said that the
    reflector had rewritten generation 0 there, when, or that the chunk after it was the observer's. Its part is
    now headed as the reflection (its time, what it replaced), the observer's chunk after it as the observer's,
    and in the list of lines the reflection's are in italics, each row's tooltip saying whose it is."""
    from PySide6.QtCore import Qt

    from studio.logic.observations_layout import format_when

    from .om_reflections import OBSERVED_AT, REFLECTED_AT, reflect_in_turn

    reflect_in_turn(demo_db)
    before = file_state(demo_db)
    pane = open_pane(qtbot, make_session, demo_db)
    qtbot.waitUntil(lambda: not pane.log_view.filling, timeout=WAIT)
    log = pane.log_view.toPlainText()
    heading = f"Reflection at {format_when(REFLECTED_AT)}: the reflector's rewrite · replaced generation 0's log ("
    assert heading in log and "297 tokens)" in log
    assert f"Chunk 2 · after {format_when(OBSERVED_AT)} · the observer's" in log
    assert log.index(heading) < log.index("blocked on staging") < log.index("Chunk 2") < log.index("back on track")
    lines = pane.line_editor.list
    model = lines.model()
    assert model.rowCount() == 2
    first, second = model.index(0, 0), model.index(1, 0)
    assert "blocked on staging" in first.data() and first.data(Qt.ItemDataRole.FontRole).italic()
    assert "from the reflection" in first.data(Qt.ItemDataRole.ToolTipRole)
    assert second.data(Qt.ItemDataRole.FontRole) is None
    assert "from the observer" in second.data(Qt.ItemDataRole.ToolTipRole)
    assert "1 from the reflection" in pane.line_editor.note.text()
    pane.gen_table.selectRow(1)  # generation 0: the observer's only, headed as before
    qtbot.waitUntil(lambda: not pane.log_view.filling, timeout=WAIT)
    assert "Reflection" not in pane.log_view.toPlainText() and "observer's" not in pane.log_view.toPlainText()
    assert file_state(demo_db) == before  # (looking never changes data)


def test_a_reflection_prepared_in_the_background_shows_the_lines_it_did_not_see_as_the_observers(
        no_leaked_widgets, qtbot, make_session, demo_db):
    from .om_reflections import reflect_in_background

    covered, unseen = reflect_in_background(demo_db)
    pane = open_pane(qtbot, make_session, demo_db)
    qtbot.waitUntil(lambda: not pane.log_view.filling, timeout=WAIT)
    log = pane.log_view.toPlainText()
    assert (f"replaced the first {covered} observations of generation 0 (prepared in the background)" in log)
    assert log.index("blocked on staging") < log.index("the observer's") < log.index("Jonas is on holiday")
    assert pane.line_editor.model.reflected == 1 and pane.line_editor.model.rowCount() == 1 + unseen


def test_empty_state_for_a_thread_without_observational_memory(no_leaked_widgets, qtbot, make_session, demo_db):
    pane = open_pane(qtbot, make_session, demo_db, Selection("ada", "ada-groceries"))
    assert pane.stack.currentIndex() == PAGE_EMPTY and pane.empty_label.text() == EMPTY_TEXT
    assert pane.gen_model.rowCount() == 0 and pane.subtitle.text() == ""
    select(qtbot, pane, STANDUP)
    assert pane.stack.currentIndex() == PAGE_CONTENT
    select(qtbot, pane, Selection())
    assert pane.stack.currentIndex() == PAGE_EMPTY and "Select a thread" in pane.empty_label.text()


def test_browsing_never_writes(no_leaked_widgets, qtbot, make_session, demo_db):
    before = file_state(demo_db)
    pane = open_pane(qtbot, make_session, demo_db)
    for selection in (Selection("sam"), Selection("ada", "ada-weekend"), Selection("sam", "sam-retro"), STANDUP):
        select(qtbot, pane, selection)
    with qtbot.waitSignal(pane.loaded, timeout=WAIT):
        pane.commands.run("observations.refresh")
    pane.gen_table.selectRow(0)
    assert file_state(demo_db) == before


def test_registered_in_the_main_window_and_the_palette(no_leaked_widgets, qtbot, make_session, demo_db):
    assert OBSERVATIONS in PANES and (OBSERVATIONS.name, OBSERVATIONS.title) == ("observations", "Observations")
    assert OBSERVATIONS.build.__annotations__["return"] == "ObservationsPane"  # the tab builds an ObservationsPane
    pane = open_pane(qtbot, make_session, demo_db)
    assert "observations.refresh" in {c.id for c in pane.palette_commands()}


def test_priority_markers_are_drawn_without_an_emoji_font(no_leaked_widgets, qtbot, make_session, demo_db):
    from PySide6.QtCore import QUrl
    from PySide6.QtGui import QColor, QImage, QTextDocument

    pane = open_pane(qtbot, make_session, demo_db)
    shown = pane.log_view.toPlainText()
    assert shown.strip() and not any(ch in shown for ch in "🔴🟡🟢✅")  # no glyph that needs an emoji font
    assert "\ufffc" in shown  # the markers are inline images
    image = pane.log_view.loadResource(QTextDocument.ResourceType.ImageResource.value, QUrl("priority:high"))
    assert isinstance(image, QImage) and not image.isNull()
    centre = QColor(image.pixel(image.width() // 2, image.height() // 2))
    assert centre.name() == "#e5534b"


def test_a_read_that_fails_does_not_leave_the_previous_log_on_screen(no_leaked_widgets, qtbot, make_session,
                                                                   demo_db):
    """A failed read says why and shows no observations: the log, hints and Edit… of the thread shown
    before stayed on screen under the new selection."""
    pane = open_pane(qtbot, make_session, demo_db)
    assert pane.stack.currentIndex() == PAGE_CONTENT
    another_program(demo_db, "DROP INDEX idx_om_lookup_key",  # another program reshapes the table: reads fail
                    "ALTER TABLE mastra_observational_memory DROP COLUMN scope")
    select(qtbot, pane, Selection("sam", "sam-retro"))
    assert pane.status.text().startswith("Could not read observational memory: ")
    assert pane.stack.currentIndex() == PAGE_EMPTY
    assert pane.empty_label.text().startswith("The observational memory of thread sam-retro could not be read")
    assert pane.view.history == [] and "sam-standup" not in pane.subtitle.text()


def _long_log(path: Path, count: int) -> str:
    """A thread whose observation log holds ``count`` observations (a date line every 50), committed as
    the observer commits; returns its last observation."""
    from core.messages import Message
    from core.observational.records import lookup_key
    from core.observational.store import Cursor, Observation, commit_observation

    store = open_store(path)
    store.memory.create_thread(thread_id="long-om", resource_id="sam", title="A long log")
    store.memory.save_messages([Message.user("hello", id="lm1", thread_id="long-om", resource_id="sam")])
    lines = []
    for i in range(count):
        if i % 50 == 0:
            lines.append(f"Date: Jan {1 + i // 50 % 28}, 2026")
        lines.append(f"* {'🔴🟡🟢✅'[i % 4]} ({i % 24:02d}:00) observation {i} about the project and its plans")
    commit_observation(store, record=None, key=lookup_key("thread", thread_id="long-om", resource_id="sam"),
                       scope="thread", thread_id="long-om", resource_id="sam", config={},
                       obs=Observation("\n".join(lines), 10 * count, ["lm1"], 10, 0,
                                       Cursor("2026-01-01T00:00:00.000Z", "lm1")))
    store.close()
    return f"observation {count - 1} about the project"


def test_a_log_of_thousands_of_observations_is_shown_in_slices_and_its_lines_made_as_drawn(
        no_leaked_widgets, qtbot, make_session, demo_db):
    """5,000 observations held the UI thread ~380 ms (the log's 5,000 paragraphs parsed in one setHtml,
    5,000 list items made and laid out wrapped, the log taken apart twice). Now the log is taken apart on
    the worker, the view gets it a slice per turn of the event loop, and the list of lines is a model
    that makes a row only when Qt draws it."""
    last = _long_log(demo_db, 5000)
    pane = open_pane(qtbot, make_session, demo_db, Selection("sam", "long-om"))
    record = pane.view.history[0]
    assert record.id in pane.view.texts  # taken apart by the read, on its worker
    assert pane.log_view.filling and last not in pane.log_view.toPlainText()
    assert pane.log_view.document().blockCount() < 500  # one slice so far, not 5,000 paragraphs

    model = pane.line_editor.model
    assert model.rowCount() == 5000
    pane.grab()  # paint: the list asks for the rows it shows
    assert 0 < len(model.made) < 100
    assert model.index(4999).data() == f"({4999 % 24:02d}:00) {last} and its plans"  # made when asked
    pane.line_editor.set_current_row(4999)
    assert pane.line_editor.current_line() == f"* ✅ ({4999 % 24:02d}:00) {last} and its plans"

    with qtbot.waitSignal(pane.log_view.filled, timeout=WAIT):
        pass
    shown = pane.log_view.toPlainText()
    rows = [ln for ln in shown.splitlines() if "observation " in ln]
    assert len(rows) == 5000 and last in rows[-1]  # one paragraph each: no slice joined the one before


def test_at_a_1100_px_window_the_generations_and_buffer_tables_fit_with_their_dates_whole(
        no_leaked_widgets, qtbot, make_session, demo_db):
    """The pane's width in a 1,100 px window (~700 px): the generations table (~300 px) had Updated and
    Tokens behind a sideways scroll bar, the buffered chunks their Tokens and Observations, and the
    activity's times were cut ("2026-09-14 19:30…"). Each table fits now, its dates whole: Updated and
    Covers give way first (Created's and Until's tooltips say them), the rest ends in "…"."""
    from PySide6.QtCore import Qt

    pane = open_pane(qtbot, make_session, demo_db)
    pane.resize(690, 700)
    panel = pane.buffer_panel
    qtbot.waitUntil(lambda: panel.chunk_model.rowCount() > 0 and panel.event_model.rowCount() > 0, timeout=WAIT)
    for index in (0, 1):
        panel.tabs.setCurrentIndex(index)
        qtbot.wait(50)  # (laid out)
        for table in (pane.gen_table, panel.chunk_table, panel.event_table):
            if not table.isVisible():
                continue
            header = table.horizontalHeader()
            assert header.length() <= table.viewport().width(), (header.length(), table.viewport().width())
            assert table.horizontalScrollBar().maximum() == 0
            model, metrics = table.model(), table.fontMetrics()
            titles = [model.headerData(c, Qt.Orientation.Horizontal) for c in range(model.columnCount())]
            for title in ("Created", "Until", "When", "Tokens"):
                if title in titles:
                    column = titles.index(title)
                    text = model.index(0, column).data()
                    assert not table.isColumnHidden(column)
                    assert table.columnWidth(column) >= metrics.horizontalAdvance(text), (title, text)
    gen_titles = [pane.gen_model.headerData(c, Qt.Orientation.Horizontal) for c in range(pane.gen_model.columnCount())]
    if pane.gen_table.isColumnHidden(gen_titles.index("Updated")):
        assert "updated" in pane.gen_model.index(0, gen_titles.index("Created")).data(Qt.ItemDataRole.ToolTipRole)


def test_at_a_1440_px_window_the_buffered_observations_and_the_count_are_not_cut_to_a_few_characters(
        no_leaked_widgets, qtbot, make_session, demo_db):
    """The pane's width in a 1,440 × 900 window (~1,010 px): the buffered chunk's Observations column had ~90 px
    ("[low] (18:4…") beside Covers' ~150, and the count under the log read "8 observation(s) in the current…"
    (found by s33-walk5). What was observed keeps at least 40 % of its table; the count is whole."""
    from PySide6.QtCore import Qt

    pane = open_pane(qtbot, make_session, demo_db)
    pane.resize(1010, 800)
    panel = pane.buffer_panel
    qtbot.waitUntil(lambda: panel.chunk_model.rowCount() > 0 and "observation(s)" in pane.line_editor.note.text(),
                    timeout=WAIT)
    qtbot.wait(50)  # (laid out)
    table = panel.chunk_table
    titles = [table.model().headerData(c, Qt.Orientation.Horizontal) for c in range(table.model().columnCount())]
    observations = table.columnWidth(titles.index("Observations"))
    assert observations >= 0.4 * table.viewport().width() - 1, (observations, table.viewport().width())
    assert table.horizontalHeader().length() <= table.viewport().width()
    assert not pane.line_editor.note.elided(), pane.line_editor.note.text()


def test_the_observers_hints_are_shown_as_written_never_as_markup(no_leaked_widgets, qtbot, make_session, demo_db):
    """The hints are the observer model's words about the user's conversation (or any program's, in a database
    someone else wrote): a current task '<img src="file:…">' read that file as an image, and '<b>' drew bold, as the
    hint labels took their text as rich text when it looked like HTML (s36-trust7)."""
    markup = '<b style="color:red">x</b><img src="file:///etc/hostname">'
    store = open_store(demo_db)
    memory = Memory(store, MemoryOptions(), name="m")
    thread = memory.get_thread("sam-standup")
    assert thread is not None
    om = dict(thread.metadata["mastra"]["om"])
    om.update(currentTask=f"task {markup}", suggestedResponse=f"reply {markup}", lastObservedAt=markup)
    om.pop("lastObservedMessageCursor", None)  # (else the cursor's time is the one shown)
    memory.update_thread("sam-standup", metadata={"mastra": {**thread.metadata["mastra"], "om": om}})
    store.close()

    pane = open_pane(qtbot, make_session, demo_db)
    texts = {name: label.text() for name, label in pane.hint_labels.items()}
    assert texts == {"Current task": f"task {markup}", "Suggested response": f"reply {markup}",
                     "Last observed": markup}
    drawn_as_markup = [name for name, label in pane.hint_labels.items()
                       if label.textFormat() == Qt.TextFormat.RichText
                       or label.textFormat() == Qt.TextFormat.AutoText and Qt.mightBeRichText(label.text())]
    assert drawn_as_markup == []
