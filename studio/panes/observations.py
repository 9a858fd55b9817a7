"""Observations: the observational memory of the selected thread (or resource).

The current observation log, the hints the observer left on the thread, how close the unobserved
messages and the log are to their thresholds, and every generation (reflections start a new one).
Reads only, in a worker (``studio.reads.load_observations``); reloads when the session sees the
database change.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QItemSelection, Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFormLayout,
    QGridLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QSplitter,
    QStackedWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from core.observational import OMRecord, ThreadHints
from studio.commands import Command, CommandRegistry
from studio.logic.observations_layout import (
    GenerationRow,
    TokenBar,
    empty_text,
    generation_rows,
    hint_rows,
    log_text,
    subtitle,
    token_bars,
)
from studio.logic.dates import date_tooltip
from studio.logic.thread_labels import header_tip, resource_label, shown_title
from studio.reads import OMView, load_observations
from studio.selection import Selection
from studio.session import StudioSession
from studio.widgets.fit_to_pane import FitToPane
from studio.widgets.observation_editor import ObservationLinesEditor
from studio.widgets.om_buffer import BufferPanel
from studio.widgets.priority_marks import ObservationLogView
from studio.widgets.pane_header import alive_only, caption, elastic, pane_header, pane_layout, status_label
from studio.widgets.record_table import RIGHT, Column, RecordTableModel, RowTableView, keep_rows_in_sight
from studio.widgets.scroll_fit import least_height_at_width, least_size, stack_when_narrow
from studio.widgets.a11y import named

PAGE_EMPTY, PAGE_CONTENT = range(2)


# Side by side, the log is at least this many average characters wide (its observation list's buttons wrap now, so
# its least width no longer says it), else the sides stack: 1,100 px side by side, 900 px stacked, as before.
SIDE_LOG_CHARS = 40
STACKED_LOG_LINES = 24  # lines of text the log and its observation list share with the generations above them
GENERATION_SAMPLES = {"Gen": "00", "Created": "2026-09-14 15:39:00", "Updated": "2026-09-14 15:39:00",
                      "Tokens": "000,000"}
GENERATION_COLUMNS: list[Column[GenerationRow]] = [
    Column("Gen", lambda g: str(g.number), RIGHT,
           tooltip=lambda g: "current generation" if g.current else "an earlier generation"),
    Column("Origin", lambda g: g.origin),
    Column("Created", lambda g: g.created, tooltip=lambda g: f"{date_tooltip(g.created_at)}\nupdated {g.updated}"),
    Column("Updated", lambda g: g.updated, tooltip=lambda g: date_tooltip(g.updated_at)),
    Column("Tokens", lambda g: f"{g.tokens:,}", RIGHT),
]



class ObservationsPane(QWidget):
    loaded = Signal()  # a read finished and its result is on screen
    # Edit/Delete of one observation line (the window's edit actions write it): record id, thread id,
    # resource id, old line, new line or None
    change_requested = Signal(str, object, str, str, object)

    def __init__(self, session: StudioSession, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("observationsPane")
        self.session = session
        self.selection = Selection()
        self.view = OMView(Selection())
        self._shown: OMRecord | None = None  # the generation whose log is on screen
        self._gen = 0
        self._key = f"observations-{id(self)}"
        self._build()
        self._register_commands()
        session.changed.connect(self.refresh)
        self._apply(self.view)

    def _build(self) -> None:
        root = pane_layout(self)
        head, self.title, self.subtitle = pane_header("Observations")
        self.refresh_btn = QToolButton(self)
        head.addWidget(self.refresh_btn)
        root.addLayout(head)

        self.stack = QStackedWidget(self)
        self.empty_label = QLabel("")
        self.empty_label.setWordWrap(True)
        self.empty_label.setTextFormat(Qt.TextFormat.PlainText)  # it may name a thread (user data)
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_label.setStyleSheet("color: palette(placeholder-text); padding: 24px;")
        self.stack.addWidget(self.empty_label)

        content = QWidget()
        cl = QVBoxLayout(content)
        cl.setContentsMargins(0, 0, 0, 0)
        hints = QFormLayout()
        hints.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self.hint_labels: dict[str, QLabel] = {}
        for label, _ in hint_rows(ThreadHints()):
            value = elastic(QLabel("—"), wrap=True)
            value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            value.setTextFormat(Qt.TextFormat.PlainText)  # the observer's words: never markup
            self.hint_labels[label] = value
            hints.addRow(caption(label + ":"), value)
        cl.addLayout(hints)

        bars = QGridLayout()
        self.bars: list[tuple[QLabel, QProgressBar]] = []
        self.bar_texts: list[QLabel] = []
        for row in range(2):
            name = QLabel("")
            bar = QProgressBar(self)
            bar.setRange(0, 100)
            bar.setTextVisible(False)  # themes draw thin bars; the figures sit in a label beside it
            figures = QLabel("")
            bars.addWidget(name, row, 0)
            bars.addWidget(bar, row, 1)
            bars.addWidget(figures, row, 2)
            self.bars.append((name, bar))
            self.bar_texts.append(figures)
        bars.setColumnStretch(1, 1)
        cl.addLayout(bars)

        split = QSplitter(Qt.Orientation.Horizontal)
        split.setChildrenCollapsible(False)  # (a part is never dragged away to nothing)
        left = QWidget()
        ll = QVBoxLayout(left)
        ll.setContentsMargins(0, 0, 0, 0)
        ll.addWidget(caption("Generations"))
        self.gen_model: RecordTableModel[GenerationRow] = RecordTableModel(GENERATION_COLUMNS, self)
        self.gen_table = RowTableView(self)
        self.gen_table.setModel(self.gen_model)
        named(self.gen_table, "Generations")
        self.gen_table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.gen_table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.gen_table.verticalHeader().hide()
        self.gen_table.setShowGrid(False)
        self.gen_table.setAlternatingRowColors(True)
        self.gen_table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.gen_table.horizontalHeader().setStretchLastSection(True)
        # Fitted to its side: at a 1,100 px window Updated and Tokens were behind a sideways scroll bar.
        # Dates stay whole; Updated gives way first (Created's tooltip says it).
        self.gen_fit = FitToPane(self.gen_table, GENERATION_SAMPLES, {}, last="Origin", rest_sample="reflection",
                                 pad=12, optional=("Updated",))
        self.gen_fit.hold_least()
        keep_rows_in_sight(self.gen_table)
        ll.addWidget(self.gen_table)
        # Background buffering: what waits to be activated, and what happened lately.
        ll.addWidget(caption("Buffer"))
        self.buffer_panel = BufferPanel(self)
        ll.addWidget(self.buffer_panel, 1)
        split.addWidget(left)

        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(0, 0, 0, 0)
        self.log_caption = caption("Observation log")
        rl.addWidget(self.log_caption)
        log_split = QSplitter(Qt.Orientation.Vertical)
        log_split.setChildrenCollapsible(False)  # (a part is never dragged away to nothing)
        self.log_view = ObservationLogView(self)
        log_split.addWidget(self.log_view)
        self.line_editor = ObservationLinesEditor(self)  # the current generation's lines: Edit… / Delete…
        self.line_editor.change_requested.connect(self.change_requested.emit)
        log_split.addWidget(self.line_editor)
        rl.addWidget(log_split)
        split.addWidget(right)
        split.setStretchFactor(0, 1)  # (2 : 3 left the generations and the buffer ~300 px at 1,100 px)
        split.setStretchFactor(1, 1)
        split.setSizes([540, 540])
        # Narrower than the generations and the log need side by side, the log goes under them (it was cut
        # at the pane's edge); each side's least height is what its layout needs at the width it has (stacked,
        # the buffer's wrapped lines took its table's rows: the hint counts a wrapped label's least lines).
        # Stacked, the log had what was left under the generations and the buffer: two lines of it and one
        # observation row at 720 x 800; it asks a reading's worth of lines there, and the page scrolls to it.
        stack_when_narrow(split, share=50, needs={1: lambda: max(
            least_size(right).width(), right.fontMetrics().averageCharWidth() * SIDE_LOG_CHARS)},
            stacked=lambda s: log_split.setMinimumHeight(
            STACKED_LOG_LINES * log_split.fontMetrics().lineSpacing() if s else 0))
        for part in (left, right):
            least_height_at_width(part, grow=True)
        cl.addWidget(split, 1)
        self.stack.addWidget(content)
        root.addWidget(self.stack, 1)

        self.status = status_label()
        root.addWidget(self.status)
        self.gen_table.selectionModel().selectionChanged.connect(self._generation_selected)

    def _register_commands(self) -> None:
        self.commands = CommandRegistry(self)
        action = self.commands.add("observations.refresh", "Reload Observational Memory", self.refresh,
                                   shortcut="F5", keywords="om observer reflection generations")
        action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        action.setIconText("Reload")
        action.setToolTip(action.text())
        self.refresh_btn.setDefaultAction(action)
        self.commands.refresh_enabled()

    def palette_commands(self) -> list[Command]:
        return self.commands.commands()


    # -- loading ---------------------------------------------------------------------------------------
    def set_selection(self, selection: Selection) -> None:
        if (selection.resource_id, selection.thread_id) == (self.selection.resource_id, self.selection.thread_id):
            self.selection = selection
            return
        self.selection = selection
        self.refresh()

    def refresh(self) -> None:
        self._gen += 1
        gen, selection, store = self._gen, self.selection, self.session.store
        if selection.empty:
            self._apply(OMView(selection))
            return
        self.status.setText("Reading observational memory…")
        self.session.run(lambda: load_observations(store, selection),
                         on_result=alive_only(self, lambda view: self._on_view(view, gen)),
                         on_error=alive_only(self, lambda exc: self._on_error(exc, gen)), key=self._key)

    def _on_view(self, view: OMView, gen: int) -> None:
        if gen != self._gen:
            return  # the selection moved on while this was read
        self._apply(view)

    def _on_error(self, exc: BaseException, gen: int) -> None:
        if gen != self._gen:
            return
        # Nothing of what was shown before stays on screen: it belongs to the previous selection, and its
        # Edit… / Delete… would act on that selection's lines.
        self._apply(OMView(self.selection))
        sel = self.selection
        owner = (f"thread {shown_title(sel.thread_id)}" if sel.thread_id
                 else f"resource {resource_label(sel.resource_id or '', self.session.delegations)}")
        self.empty_label.setText(f"The observational memory of {owner} could not be read (the reason is below). "
                                 "Nothing was changed; Reload (F5) reads it again.")
        self.status.setText(f"Could not read observational memory: {exc}")

    def _apply(self, view: OMView) -> None:
        self.view = view
        self._shown = None
        self.status.setText("")
        known = self.session.delegations  # (a delegation's resource as the tree names it; the stored id on hover)
        self.subtitle.setText(subtitle(view.lookup, view.history, known))
        scoped = view.lookup is not None and view.lookup.scope != "thread"
        self.subtitle.setToolTip(header_tip(self.subtitle.text(), view.lookup.resource_id, known)
                                 if scoped and view.lookup is not None else "")
        if not view.history:
            self.empty_label.setText(empty_text(view.selection))
            self.stack.setCurrentIndex(PAGE_EMPTY)
            self.gen_model.set_rows([])
            self.log_view.clear()
            self.buffer_panel.set_record(None)
            self.line_editor.set_record(None, current=False, thread_id=None, resource_id="")
            self.loaded.emit()
            return
        self.stack.setCurrentIndex(PAGE_CONTENT)
        for label, text in hint_rows(view.hints):
            self.hint_labels[label].setText(text)
        self.hint_labels["Last observed"].setToolTip(date_tooltip(view.hints.last_observed_at))
        for (name, bar), figures, info in zip(self.bars, self.bar_texts, token_bars(view.history[0])):
            self._set_bar(name, bar, figures, info)
        self.gen_model.set_rows(generation_rows(view.history))
        self.buffer_panel.set_record(view.history[0])
        self.gen_table.selectRow(0)
        self.show_generation(0)
        self.loaded.emit()

    @staticmethod
    def _set_bar(name: QLabel, bar: QProgressBar, figures: QLabel, info: TokenBar) -> None:
        name.setText(info.label)
        bar.setValue(info.percent)
        bar.setFormat(info.text)
        figures.setText(info.text)
        for widget in (name, bar, figures):
            widget.setToolTip(info.tooltip)

    # -- generations -----------------------------------------------------------------------------------
    def _generation_selected(self, selected: QItemSelection, _deselected: QItemSelection) -> None:
        rows = self.gen_table.selectionModel().selectedRows()
        if rows:
            self.show_generation(rows[0].row())

    def show_generation(self, row: int) -> None:
        if not 0 <= row < len(self.view.history):
            return
        record = self.view.history[row]
        if record is self._shown:
            return  # (selecting the first row of a new view shows it; _apply asks again)
        self._shown = record
        which = "current" if row == 0 else "earlier"
        self.log_caption.setText(f"Observation log · generation {record.generation_count} ({which}, "
                                 f"{record.origin_type})")
        text = self.view.texts.get(record.id)
        if text is None:  # a view made without its texts: take the log apart here
            history = self.view.history
            text = log_text(record, self.view.thread_titles, current=row == 0,
                            previous=history[row + 1] if row + 1 < len(history) else None)
        self.log_view.show_log(text.paragraphs)
        lookup = self.view.lookup
        self.line_editor.set_record(record, current=row == 0, thread_id=lookup.thread_id if lookup else None,
                                    resource_id=record.resource_id or self.selection.resource_id or "",
                                    lines=text.lines, reflected=text.reflected)
