"""View > SQL Log: every statement the Studio ran on its memory database and its trace file, newest at the bottom.

A dock under the panes, hidden until asked for. While shown it copies what is new from the process's log
(``studio.logic.sql_log``) every half second (nothing while hidden); a filter, which database (both, the memory
database, the trace file), "Writes only", the selected statement in full with its parameters, Clear, and Copy (the
statements shown, as text). The counts line says how many of what kind ran since the log was cleared, on each, so
"browsing wrote nothing" reads as "0 writes" for the memory database and for the trace file.
"""

from __future__ import annotations

from datetime import datetime

from PySide6.QtCore import QEvent, QItemSelection, QObject, Qt, QTimer
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDockWidget,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from studio.logic.sql_log import CAPACITY, CHANGE_CHECK, DATABASE, TRACE_FILE, Kind, On, SqlLog, Statement
from studio.widgets.a11y import named
from studio.widgets.record_table import RIGHT, Column, RecordTableModel, record_table_view

POLL_MS = 500
NARROW = 760  # a table narrower than this (pixels) hides its Thread and Database columns


def _time(r: Statement) -> str:
    return datetime.fromtimestamp(r.at).strftime("%H:%M:%S.%f")[:-3]


def _kind(r: Statement) -> str:
    return "WRITE" if r.kind == "write" else r.kind


def _on(r: Statement) -> str:
    return "trace file" if r.on == TRACE_FILE else "memory db"


def _where(r: Statement) -> str:
    """The statement's database in full: which one, its name, and a trace file's connection."""
    if r.on == TRACE_FILE:
        return f"trace file {r.database} ({r.connection} connection)"
    return f"memory database {r.database}" + (f" ({r.connection} connection)" if r.connection else "")


#: The database choice: what it lists (None: both).
DATABASES: tuple[tuple[str, On | None], ...] = (("Both databases", None), ("Memory database", DATABASE),
                                                 ("Trace file", TRACE_FILE))


class SqlLogDock(QDockWidget):
    def __init__(self, log: SqlLog, parent: QWidget | None = None) -> None:
        super().__init__("SQL Log", parent)
        self.setObjectName("sqlLogDock")
        self.log = log
        self._seen = 0  # the log's last seq copied
        self._all: list[Statement] = []  # what was copied (at most CAPACITY)
        body = QWidget(self)
        lay = QVBoxLayout(body)
        lay.setContentsMargins(6, 4, 6, 6)
        row = QHBoxLayout()
        self.filter_edit = QLineEdit(body)
        self.filter_edit.setPlaceholderText("Filter statements (words in the SQL, a table name…)")
        self.filter_edit.setClearButtonEnabled(True)
        named(self.filter_edit, "Filter statements")
        self.database = QComboBox(body)
        for label, _on_ in DATABASES:
            self.database.addItem(label)
        self.database.setToolTip("Which database's statements to list: the memory database (SQLite or Postgres), "
                                 "the trace file (DuckDB, read by Traces and Replay), or both")
        named(self.database, "Database shown")
        self.writes_only = QCheckBox("Writes only", body)
        self.hide_checks = QCheckBox("Hide change checks", body)
        self.hide_checks.setChecked(True)
        self.hide_checks.setToolTip("The Studio reads the database's change marks once a second to keep every pane "
                                    "current; those reads are counted above, and listed when this is off")
        self.clear_btn = QPushButton("Clear", body)
        self.copy_btn = QPushButton("Copy", body)
        self.copy_btn.setToolTip("Copy the statements shown, one a line, with their time and parameters")
        row.addWidget(self.filter_edit, 1)
        row.addWidget(self.database)
        row.addWidget(self.writes_only)
        row.addWidget(self.hide_checks)
        row.addWidget(self.clear_btn)
        row.addWidget(self.copy_btn)
        lay.addLayout(row)
        self.counts = QLabel(body)
        self.counts.setWordWrap(True)
        lay.addWidget(self.counts)
        self.model: RecordTableModel[Statement] = RecordTableModel([
            Column("#", lambda r: r.seq, RIGHT),
            Column("Time", _time),
            Column("Kind", _kind),
            Column("Thread", lambda r: r.thread if not r.purpose else f"{r.thread} ({r.purpose})"),
            Column("On", _on, tooltip=_where),
            Column("Database", lambda r: r.database, tooltip=_where),
            Column("Statement", lambda r: r.line, tooltip=lambda r: r.sql[:2_000]),
        ], self)
        self.table = record_table_view(self.model, widths={"#": 56, "Time": 96, "Kind": 70, "Thread": 110,
                                                           "On": 76, "Database": 140})
        self.table.installEventFilter(self)  # (a narrow table lets the statements keep the room: ``eventFilter``)
        named(self.table, "Statements run")
        titles = [self.model.headerData(c, Qt.Orientation.Horizontal) for c in range(self.model.columnCount())]
        self._thread_col, self._database_col = titles.index("Thread"), titles.index("Database")
        self.detail = QPlainTextEdit(body)
        self.detail.setReadOnly(True)
        self.detail.setPlaceholderText("Select a statement to see it whole, with its parameters.")
        named(self.detail, "Selected statement")
        split = QSplitter(Qt.Orientation.Horizontal, body)
        split.addWidget(self.table)
        split.addWidget(self.detail)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        split.setChildrenCollapsible(False)
        lay.addWidget(split, 1)
        self.setWidget(body)
        self._timer = QTimer(self)
        self._timer.setInterval(POLL_MS)
        self._timer.timeout.connect(self.refresh)
        self.filter_edit.textChanged.connect(lambda _t: self._refill())
        self.database.currentIndexChanged.connect(lambda _i: self._refill())
        self.writes_only.toggled.connect(lambda _on: self._refill())
        self.hide_checks.toggled.connect(lambda _on: self._refill())
        self.clear_btn.clicked.connect(self.clear)
        self.copy_btn.clicked.connect(self.copy_shown)
        self.table.selectionModel().selectionChanged.connect(self._selected)
        self.visibilityChanged.connect(self._visible)
        self._show_counts()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.table and event.type() == QEvent.Type.Resize:
            # Narrow (a small window, a wide detail): Thread and Database give way to the statements; the
            # selected one's detail, and the tooltips of On, still say them.
            narrow = self.table.width() < NARROW
            for col in (self._thread_col, self._database_col):
                self.table.setColumnHidden(col, narrow)
        return super().eventFilter(watched, event)

    # -- reading the log -----------------------------------------------------------------------------
    def _visible(self, shown: bool) -> None:
        if shown:
            self.refresh()
            self._timer.start()
        else:
            self._timer.stop()

    def shown_database(self) -> On | None:
        """The database whose statements are listed (None: both)."""
        return DATABASES[max(self.database.currentIndex(), 0)][1]

    def _wanted(self, r: Statement) -> bool:
        if self.writes_only.isChecked() and r.kind != "write":
            return False
        on = self.shown_database()
        if on is not None and r.on != on:
            return False
        if self.hide_checks.isChecked() and r.purpose == CHANGE_CHECK:
            return False
        words = self.filter_edit.text().lower().split()
        text = r.sql.lower() if words else ""
        return all(w in text for w in words)

    def refresh(self) -> None:
        """Copy what ran since the last look (on the UI thread; the log only hands over new rows)."""
        new = self.log.since(self._seen)
        if new:
            self._seen = new[-1].seq
            self._all.extend(new)
            if len(self._all) > CAPACITY:
                del self._all[: len(self._all) - CAPACITY]
            bar = self.table.verticalScrollBar()
            at_end = bar.value() >= bar.maximum() - 2
            self.model.append_rows([r for r in new if self._wanted(r)], keep=CAPACITY)
            if at_end:
                self.table.scrollToBottom()
        self._show_counts()

    def _refill(self) -> None:
        chosen = self.table.selectionModel().selectedRows()
        seq = r.seq if chosen and (r := self.model.row_at(chosen[0].row())) is not None else None
        rows = [r for r in self._all if self._wanted(r)]
        self.model.set_rows(rows)
        at = next((i for i, r in enumerate(rows) if r.seq == seq), None)
        if at is not None:  # the statement chosen is still listed: still chosen, in sight
            self.table.selectRow(at)
            self.table.scrollTo(self.model.index(at, 0))
        else:  # (its detail goes with it: the detail never shows a statement the list does not)
            self.detail.setPlainText("")
            self.table.scrollToBottom()
        self._show_counts()

    def _show_counts(self) -> None:
        dropped = f" (the oldest {self.log.dropped:,} no longer listed)" if self.log.dropped else ""
        shown = self.model.rowCount()
        self.counts.setText(
            f"{self.log.total:,} statement(s) since the log was cleared{dropped} · memory database: "
            f"{_counted(self.log.counts(DATABASE))} · trace file: {_counted(self.log.counts(TRACE_FILE))} · "
            f"{shown:,} shown.")

    def _selected(self, _sel: QItemSelection, _old: QItemSelection) -> None:
        rows = self.table.selectionModel().selectedRows()
        r = self.model.row_at(rows[0].row()) if rows else None
        if r is None:
            self.detail.setPlainText("")
            return
        self.detail.setPlainText(
            f"#{r.seq} · {_time(r)} · {r.kind} · {r.thread} thread · {_where(r)}\n\n{r.sql.strip()}"
            + (f"\n\nparameters: {r.params}" if r.params else "\n\n(no parameters)"))

    # -- actions ---------------------------------------------------------------------------------------
    def clear(self) -> None:
        self.log.clear()
        self._all = []
        self.model.set_rows([])
        self.detail.setPlainText("")
        self._show_counts()

    def shown_text(self) -> str:
        return "\n".join(f"{_time(r)}\t{r.kind}\t{_on(r)}\t{r.line}" + (f"\t{r.params}" if r.params else "")
                         for r in self.model.rows())

    def copy_shown(self) -> None:
        QGuiApplication.clipboard().setText(self.shown_text())


def _counted(kinds: dict[Kind, int]) -> str:
    return (f"{kinds['read']:,} reads, {kinds['write']:,} writes, {kinds['transaction']:,} transaction steps, "
            f"{kinds['setting']:,} connection settings")


__all__ = ["SqlLogDock"]
