"""The Observations pane's buffer panel: what the background observer made that the model does not
see yet, the settings that activate it, and the recent activity (activations, turns that waited,
failures). A view over ``studio.logic.om_buffer_layout.BufferView``; it reads nothing itself."""

from __future__ import annotations

from PySide6.QtWidgets import QAbstractItemView, QLabel, QTabWidget, QVBoxLayout, QWidget

from core.observational import OMRecord
from studio.logic.dates import date_tooltip
from studio.logic.om_buffer_layout import BufferView, ChunkRow, EventRow, buffer_view
from studio.widgets.fit_to_pane import FitToPane
from studio.widgets.pane_header import elastic
from studio.widgets.record_table import RIGHT, Column, RecordTableModel, record_table_view
from studio.widgets.a11y import named

DATE_SAMPLE = "2026-09-14 19:30:00"
CHUNK_SAMPLES = {"#": "00", "Until": DATE_SAMPLE, "Tokens": "0,000"}
CHUNK_COLUMNS: list[Column[ChunkRow]] = [
    Column("#", lambda c: c.number, RIGHT),
    Column("Covers", lambda c: c.covers, tooltip=lambda c: c.covers),
    Column("Until", lambda c: c.until, tooltip=lambda c: f"covers {c.covers}"),  # (Covers gives way first)
    Column("Tokens", lambda c: f"{c.tokens:,}", RIGHT),
    Column("Observations", lambda c: c.preview, tooltip=lambda c: c.text),
]

EVENT_COLUMNS: list[Column[EventRow]] = [
    Column("When", lambda e: e.when, tooltip=lambda e: date_tooltip(e.at)),
    Column("What", lambda e: e.what, tooltip=lambda e: e.what,
           foreground=lambda e: "#E5534B" if e.blocked else None),
]


class BufferPanel(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.settings_label = elastic(QLabel(""), wrap=True)
        self.settings_label.setStyleSheet("color: palette(placeholder-text);")
        self.status_label = elastic(QLabel(""), wrap=True)
        layout.addWidget(self.settings_label)
        layout.addWidget(self.status_label)
        self.tabs = QTabWidget(self)
        self.chunk_model: RecordTableModel[ChunkRow] = RecordTableModel(CHUNK_COLUMNS, self)
        self.chunk_table = record_table_view(self.chunk_model, widths={"#": 28, "Covers": 150, "Until": 140, "Tokens": 56},
                                             selection=QAbstractItemView.SelectionMode.SingleSelection)
        self.event_model: RecordTableModel[EventRow] = RecordTableModel(EVENT_COLUMNS, self)
        self.event_table = record_table_view(self.event_model, widths={"When": 140},
                                             selection=QAbstractItemView.SelectionMode.SingleSelection)
        # Fitted to the panel (at a 1,100 px window Tokens and Observations were past its edge, and the
        # activity's times cut to "2026-09-14 19:30…"): dates whole, Covers gives way first (Until's tooltip
        # says it), the observations end in "…". What was observed, the chunk's meaning, keeps at least 40 % of
        # the table (at a 1,440 px window it had ~90 px, "[low] (18:4…", beside Covers' ~150).
        self.chunk_fit = FitToPane(self.chunk_table, CHUNK_SAMPLES, {"Covers": 1.0}, last="Observations",
                                   floors={"Covers": "2 messages"}, caps={"Covers": "12 messages · 1,234 tokens"},
                                   rest_sample="(15:32) Sam", pad=16, optional=("Covers",), last_share=0.4,
                                   share_in_least=False)  # (the pane stacks at its least, as before)
        self.event_fit = FitToPane(self.event_table, {"When": DATE_SAMPLE}, {}, last="What", rest_sample="buffered",
                                   pad=12)
        for fit in (self.chunk_fit, self.event_fit):
            fit.hold_least()  # (the Observations pane stacks before it cuts a column: Tokens at 900 px)
        self.tabs.addTab(named(self.chunk_table, "Buffered observations"), "Buffered")
        self.tabs.addTab(named(self.event_table, "Activity"), "Activity")
        layout.addWidget(self.tabs, 1)
        self.view: BufferView | None = None

    def set_record(self, record: OMRecord | None) -> None:
        if record is None:
            self.view = None
            self.settings_label.setText("")
            self.status_label.setText("")
            self.chunk_model.set_rows([])
            self.event_model.set_rows([])
            return
        view = self.view = buffer_view(record)
        self.settings_label.setText(view.settings)
        status = view.status
        if view.blocked_turns:
            status += f" {view.blocked_turns} recent turn(s) waited for the observer or reflector."
        self.status_label.setText(status)
        self.chunk_model.set_rows(view.chunks)
        self.event_model.set_rows(view.events)
        self.tabs.setTabText(0, f"Buffered ({len(view.chunks)})")
        self.tabs.setTabText(1, f"Activity ({len(view.events)})")


__all__ = ["BufferPanel"]
