"""What-if for a whole thread: change options, see every turn's prompt against the real one; or compare
each turn with the memory as it is now ("Compare with: the memory as it is now"), which lists the turns
whose prompt differs now and why, so a user who fixed a value by hand sees every turn the fix touches.

The run goes through ``memory.what_if`` on a worker with a progress bar and Cancel (checked between
turns). Opening a row rebuilds that turn's what-if prompt on a worker and shows what entered, left or
changed (with the engine's reasons) and a text diff against the real prompt.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QSplitter,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from core.replay import FragmentChange
from studio.logic.replay_layout import (
    CAUSE_TIPS,
    CHANGE_MARKS,
    WhatIfOptions,
    WhatIfTableRow,
    change_summary,
    prompt_text_diff,
    reason_label,
    today_rows,
    today_summary,
    what_if_rows,
    what_if_summary,
)
from studio.logic.short_ids import short_id
from studio.replay_jobs import Against, ReplayThread, WhatIfDetail, WhatIfOutcome
from studio.session import StudioSession
from studio.widgets.diff_view import DiffView
from studio.widgets.flow_layout import FlowLayout, labelled
from studio.widgets.pane_header import alive_only, caption
from studio.widgets.fit_to_pane import FitToPane
from studio.widgets.record_table import RIGHT, Column, RecordTableModel, record_table_view
from studio.widgets.a11y import named

AS_RECORDED = "as recorded"
PROGRESS_WIDTH = 120  # px of the run's progress bar beside its buttons (in a flow it has no stretch to take)
IDLE_TEXT = {
    "options": "Change options, then Run What-If: every turn is rebuilt with them.",
    "today": "Run What-If: every turn is rebuilt with the memory as it is now (today's working memory, messages "
             "as stored now, recall over today's index) and compared with what its model received; the turns "
             "that differ are listed, with why and whether a hand edit since is among the causes.",
}
HAND_ONLY_TEXT = "Only hand edits"
# The tokens of each turn's rebuilt prompt: with the options (what-if) or with the memory as it is now.
TOKENS_TITLE = {"options": "Tokens what-if", "today": "Tokens now"}
RERUN_TEXT = {"options": "Re-Run This What-If Prompt…", "today": "Re-Run With the Memory as It Is Now…"}

WHAT_IF_COLUMNS: list[Column[WhatIfTableRow]] = [
    Column("#", lambda r: r.number, RIGHT),
    Column("Input", lambda r: r.input_preview, tooltip=lambda r: f"{r.input_preview}\n{r.input_message_id}"),
    Column("Tokens real", lambda r: f"{r.tokens_real:,}", RIGHT),
    Column("Tokens what-if", lambda r: f"{r.tokens_what_if:,}", RIGHT),
    Column("Δ", lambda r: r.delta_label, RIGHT, tooltip=lambda r: f"{r.delta_label} tokens: +{r.entered} entering · "
           f"−{r.left} leaving · ~{r.changed} changed"),  # (the three columns after it give way in a narrow pane)
    Column("Entering", lambda r: f"+{r.entered}" if r.entered else "", RIGHT),
    Column("Leaving", lambda r: f"−{r.left}" if r.left else "", RIGHT),
    Column("Changed", lambda r: f"~{r.changed}" if r.changed else "", RIGHT),
    # (against the memory as it is now only: a hand edit since among the causes, or only the thread's own course)
    Column("Cause", lambda r: r.cause, tooltip=lambda r: CAUSE_TIPS[r.cause]),
    Column("Why", lambda r: r.reasons, tooltip=lambda r: r.reasons),
]
COL_TOKENS_WHAT_IF = 3

# The narrow columns' usual widest text (the what-if table's and the changes' table's ``FitToPane``).
WHAT_IF_SAMPLES = {"#": "00", "Tokens real": "00,000", "Tokens what-if": "00,000", "Tokens now": "00,000",
                   "Δ": "-0,000", "Entering": "+00", "Leaving": "−00", "Changed": "~00", "Cause": "the thread"}
CHANGE_SAMPLES = {"Change": "~ changed", "Tokens": "0,000 → 0,000"}
CHANGE_COLUMNS: list[Column[FragmentChange]] = [
    Column("Change", lambda c: CHANGE_MARKS.get(c.kind, c.kind)),
    Column("Source", lambda c: c.source),
    Column("Stored", lambda c: ", ".join(short_id(i) for i in c.stored_ids[:2])
           + (" …" if len(c.stored_ids) > 2 else ""), tooltip=lambda c: "\n".join(c.stored_ids)),
    Column("Tokens", lambda c: f"{c.tokens_before:,} → {c.tokens_after:,}", RIGHT),
    Column("Why", lambda c: reason_label(c.reason)),
]


def _spin(low: int, high: int, step: int = 1) -> QSpinBox:
    spin = QSpinBox()
    spin.setRange(low, high)
    spin.setSingleStep(step)
    spin.setSpecialValueText(AS_RECORDED)
    spin.setValue(low)
    return spin


def _combo(*items: tuple[str, Any]) -> QComboBox:
    combo = QComboBox()
    for text, data in items:
        combo.addItem(text, data)
    return combo


class WhatIfPanel(QWidget):
    finished = Signal(object)  # WhatIfOutcome
    opened = Signal(object)  # WhatIfDetail
    rerun_requested = Signal(object)  # WhatIfDetail: re-run this what-if prompt
    checks_requested = Signal(object)  # the what-if's option overrides: which memory checks would break?

    def __init__(self, session: StudioSession, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("whatIfPanel")
        self.session = session
        self.source: ReplayThread | None = None
        self.outcome: WhatIfOutcome | None = None
        self._against: Against = "options"  # what the rows shown were compared with
        self.detail: WhatIfDetail | None = None
        self._cancel = threading.Event()
        self._running = False
        self._key = f"what-if-{id(self)}"
        self._build()

    # -- construction ----------------------------------------------------------------------------
    def _build(self) -> None:
        root = QVBoxLayout(self)
        root.setContentsMargins(0, 4, 0, 0)
        box = QFrame()
        box.setObjectName("optionsBar")
        box.setFrameShape(QFrame.Shape.StyledPanel)
        self.last_spin = _spin(-1, 10_000)
        self.budget_spin = _spin(-1, 2_000_000, 500)
        self.recall_combo = _combo((AS_RECORDED, None), ("on", True), ("off", False))
        self.topk_spin = _spin(0, 100)
        self.threshold_spin = QDoubleSpinBox()
        self.threshold_spin.setRange(-0.01, 1.0)
        self.threshold_spin.setSingleStep(0.05)
        self.threshold_spin.setDecimals(2)
        self.threshold_spin.setSpecialValueText(AS_RECORDED)
        self.threshold_spin.setValue(-0.01)
        self.range_spin = _spin(-1, 20)
        self.scope_combo = _combo((AS_RECORDED, None), ("resource", "resource"), ("thread", "thread"))
        self.wm_combo = _combo((AS_RECORDED, "as-recorded"), ("on", "on"), ("off", "off"),
                               ("on, agent may not write", "agent-may-not-write"))
        self.om_msg_spin = _spin(0, 1_000_000, 1000)
        self.om_obs_spin = _spin(0, 1_000_000, 1000)
        cells: list[tuple[str, QWidget]] = [
            ("Last messages", self.last_spin), ("Token budget", self.budget_spin), ("Recall", self.recall_combo),
            ("Top-K", self.topk_spin), ("Threshold", self.threshold_spin), ("Range ±", self.range_spin),
            ("Scope", self.scope_combo), ("Working memory", self.wm_combo),
            ("OM message tokens", self.om_msg_spin), ("OM observation tokens", self.om_obs_spin),
        ]
        # The options wrap onto more rows in a narrow pane: every one stays in sight, none widens the window.
        flow = FlowLayout(box, spacing=14)
        flow.setContentsMargins(8, 6, 8, 6)
        # First: what each turn is compared with (these options, or the memory as it is now, which turns
        # the options off: a turn is then rebuilt from today's data as configured).
        self.against_combo = _combo(("these options", "options"), ("the memory as it is now", "today"))
        self.against_combo.setObjectName("whatIfAgainst")
        self.against_combo.setToolTip("Rebuild every turn with the options beside this, or with the memory as it "
                                      "is now: which turns' prompts does a fix made since change, and why")
        flow.addWidget(labelled("Compare with", self.against_combo))
        # Against the memory as it is now, on by default: a user who compares with it has (nearly always) just
        # fixed something by hand and asks which turns that fix changes; the turns that differ only because the
        # thread went on (its agent updating its own working memory, new messages) are counted in the summary
        # and listed when this is cleared.
        self.hand_only_box = QCheckBox(HAND_ONLY_TEXT)
        self.hand_only_box.setObjectName("whatIfHandOnly")
        self.hand_only_box.setChecked(True)
        self.hand_only_box.setToolTip("List only the turns whose prompt a change made by hand since changes (a "
                                      "working-memory version written in the Studio, a stored message edited or "
                                      "deleted); clear it to list too the turns that differ only by what the thread "
                                      "did since")
        self.hand_only_box.setVisible(False)
        flow.addWidget(self.hand_only_box)
        self.option_cells: list[QWidget] = []
        for label, widget in cells:
            widget.setMinimumWidth(120)
            self.option_cells.append(labelled(label, widget))
            flow.addWidget(self.option_cells[-1])
        root.addWidget(box)

        bar = QWidget()
        bar.setObjectName("whatIfBar")
        row = FlowLayout(bar)
        row.setContentsMargins(0, 0, 0, 0)
        self.run_btn = QPushButton("Run What-If")
        self.run_btn.setObjectName("runWhatIf")
        self.cancel_btn = QPushButton("Cancel")
        self.cancel_btn.setEnabled(False)
        self.progress = QProgressBar()
        self.progress.setObjectName("whatIfProgress")
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.progress.setTextVisible(False)  # the theme draws a thin bar; the count is in the label beside it
        self.progress_label = QLabel("")
        self.progress_label.setObjectName("whatIfProgressLabel")
        self.summary = QLabel(IDLE_TEXT["options"])
        self.summary.setWordWrap(True)
        self.summary.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.checks_btn = QPushButton("Run Checks With These Options")
        self.checks_btn.setObjectName("whatIfChecks")
        self.checks_btn.setToolTip("Run the memory checks (the Checks tab) as they stand and with these options, "
                                   "and mark each check they would break")
        # A flow, as Re-Run's bar: the three buttons and the progress side by side asked 496 px, and Replay's pane
        # was read sideways at a 720 px window whichever tab it showed (a tab widget is as wide as its widest page).
        row.addWidget(self.run_btn)
        row.addWidget(self.checks_btn)
        row.addWidget(self.cancel_btn)
        progress = QWidget()
        pl = QHBoxLayout(progress)
        pl.setContentsMargins(0, 0, 0, 0)
        pl.addWidget(self.progress, 1)
        pl.addWidget(self.progress_label)
        self.progress.setMinimumWidth(PROGRESS_WIDTH)
        row.addWidget(progress)
        root.addWidget(bar)
        root.addWidget(self.summary)

        split = QSplitter(Qt.Orientation.Vertical)
        split.setChildrenCollapsible(False)  # (a part is never dragged away to nothing)
        self.model: RecordTableModel[WhatIfTableRow] = RecordTableModel(WHAT_IF_COLUMNS, self)
        self.table = named(table_for(self.model), "Turns rebuilt with the what-if options")
        _wrap_last_column(self.table)  # "Why" reads whole, on as many lines as it needs
        # (at a 1,100 px window the columns ran ~100 px past the table's edge: Changed and Why out of sight)
        self.fit = FitToPane(self.table, WHAT_IF_SAMPLES, {"Input": 1.0}, last="Why", floors={"Input": "Great, add rice"},
                             rest_sample="options changed", pad=20,
                             optional=("Changed", "Leaving", "Entering"), left_out=("Cause",))
        split.addWidget(self.table)
        lower = QWidget()
        ll = QVBoxLayout(lower)
        ll.setContentsMargins(0, 0, 0, 0)
        head = QHBoxLayout()
        self.detail_caption = caption("Open a turn (double-click) to see its what-if prompt against the real one")
        self.detail_caption.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.rerun_btn = QPushButton("Re-Run This What-If Prompt…")
        self.rerun_btn.setEnabled(False)
        head.addWidget(self.detail_caption, 1)
        head.addWidget(self.rerun_btn)
        ll.addLayout(head)
        inner = QSplitter(Qt.Orientation.Horizontal)
        inner.setChildrenCollapsible(False)  # (a part is never dragged away to nothing)
        self.change_model: RecordTableModel[FragmentChange] = RecordTableModel(CHANGE_COLUMNS, self)
        self.change_table = named(table_for(self.change_model), "What changed in the opened turn's prompt")
        _wrap_last_column(self.change_table)
        self.change_fit = FitToPane(self.change_table, CHANGE_SAMPLES, {"Source": 0.6, "Stored": 0.4}, last="Why",
                                    floors={"Source": "message-hist", "Stored": "…7d6abd61"}, rest_sample="new message",
                                    pad=12, optional=("Stored",))
        self.diff = DiffView()
        self.diff.setObjectName("whatIfDiff")
        named(self.diff, "The what-if prompt against the real one")
        inner.addWidget(self.change_table)
        inner.addWidget(self.diff)
        inner.setSizes([560, 440])
        ll.addWidget(inner)
        split.addWidget(lower)
        split.setSizes([260, 240])
        root.addWidget(split, 1)

        self.run_btn.clicked.connect(self.run)
        self.checks_btn.clicked.connect(lambda: self.checks_requested.emit(self.options().overrides()))
        self.cancel_btn.clicked.connect(self.cancel)
        self.table.doubleClicked.connect(lambda index: self.open_row(index.row()))
        self.table.activated.connect(lambda index: self.open_row(index.row()))
        self.rerun_btn.clicked.connect(self._rerun_requested)
        self.against_combo.currentIndexChanged.connect(lambda _i: self._against_picked())
        self.hand_only_box.toggled.connect(lambda _on: self._show_rows() if self._against == "today" else None)

    def _rerun_requested(self) -> None:
        if self.detail is not None:
            self.rerun_requested.emit(self.detail)

    def against(self) -> Against:
        """What the next run compares each turn with: "options" or "today" (the memory as it is now)."""
        return "today" if self.against_combo.currentData() == "today" else "options"

    def _against_picked(self) -> None:
        today = self.against() == "today"
        for cell in self.option_cells:  # today's memory is compared as configured: no options
            cell.setEnabled(not today)
        self.checks_btn.setEnabled(not today)
        self.hand_only_box.setVisible(today)
        if not self._running:
            self.summary.setText(IDLE_TEXT[self.against()])

    # -- options ---------------------------------------------------------------------------------
    def options(self) -> WhatIfOptions:
        def val(spin: QSpinBox, none_at: int) -> int | None:
            return None if spin.value() == none_at else spin.value()

        threshold = self.threshold_spin.value()
        return WhatIfOptions(
            last_messages=val(self.last_spin, -1),
            token_budget=val(self.budget_spin, -1) if self.budget_spin.isEnabled() else None,
            recall=self.recall_combo.currentData(), top_k=val(self.topk_spin, 0),
            threshold=None if threshold < 0 else threshold, message_range=val(self.range_spin, -1),
            scope=self.scope_combo.currentData(), working_memory=self.wm_combo.currentData(),
            om_message_tokens=val(self.om_msg_spin, 0), om_observation_tokens=val(self.om_obs_spin, 0),
        )

    # -- running ---------------------------------------------------------------------------------
    def set_source(self, source: ReplayThread | None) -> None:
        if source is not self.source:
            self.cancel()
            self.source = source
            self.outcome = None
            self.detail = None
            self.model.set_rows([])
            self.change_model.set_rows([])
            self.diff.set_diff([], empty_text="")
            self.rerun_btn.setEnabled(False)
            self.progress.setRange(0, max(len(source.turns) if source else 1, 1))
            self.progress.setValue(0)
            self.progress_label.setText("")
            self.summary.setText(IDLE_TEXT[self.against()])

    @property
    def running(self) -> bool:
        return self._running

    def run(self) -> None:
        source = self.source
        if source is None:
            return
        against = self.against()
        overrides = self.options().overrides() if against == "options" else {}
        self._cancel = cancel = threading.Event()
        self._running = True
        self.run_btn.setEnabled(False)
        self.cancel_btn.setEnabled(True)
        total = len(source.turns)
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(0)
        self.progress_label.setText(f"0 of {total:,} turns")
        self.summary.setText(f"Rebuilding {total:,} turns with "
                             + (f"{self.options().describe()}…" if against == "options" else
                                "the memory as it is now…"))
        job: Callable[[Callable[[int, int], None]], WhatIfOutcome] = \
            lambda report: source.what_if(overrides, progress=report, cancel=cancel.is_set,  # noqa: E731
                                          against=against)
        self.session.run(job, key=self._key, on_progress=alive_only(self, self._on_progress),
                         on_result=alive_only(self, lambda out: self._on_done(source, out)),
                         on_error=alive_only(self, self._on_error))

    def cancel(self) -> None:
        if self._running:
            self._cancel.set()
            self.summary.setText("Cancelling after the turn being rebuilt…")

    def _on_progress(self, done: int, total: int) -> None:
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(done)
        self.progress_label.setText(f"{done:,} of {total:,} turns")

    def _on_done(self, source: ReplayThread, outcome: WhatIfOutcome) -> None:
        self._finish()
        if source is not self.source:
            return
        self.outcome = outcome
        self._against = outcome.against
        self.detail = None
        self.change_model.set_rows([])
        self.diff.set_diff([], empty_text="")
        self.rerun_btn.setEnabled(False)
        self.rerun_btn.setText(RERUN_TEXT[outcome.against])
        rows = what_if_rows(outcome.rows, source.turns)
        self.progress.setValue(len(rows))
        self.progress_label.setText(f"{len(rows):,} of {outcome.total:,} turns")
        self._show_rows()
        self.finished.emit(outcome)

    def _show_rows(self) -> None:
        """The outcome's rows as its comparison lists them: every turn with the options; against the memory as
        it is now, the turns whose prompt differs (with "Only hand edits", those a hand edit since changes), with
        the Cause column and the rebuilt prompt's tokens headed "Tokens now"."""
        outcome, source = self.outcome, self.source
        if outcome is None or source is None:
            return
        rows = what_if_rows(outcome.rows, source.turns)
        today = outcome.against == "today"
        hand_only = self.hand_only_box.isChecked()
        self.model.retitle(COL_TOKENS_WHAT_IF, TOKENS_TITLE[outcome.against])
        self.fit.left_out = () if today else ("Cause",)
        self.model.set_rows(today_rows(rows, hand_only=hand_only) if today else rows)
        self.fit.fit()
        self.summary.setText(today_summary(rows, outcome.total, outcome.cancelled, hand_only=hand_only) if today
                             else what_if_summary(rows, outcome.total, outcome.cancelled))

    def _on_error(self, exc: BaseException) -> None:
        self._finish()
        self.summary.setText(f"What-if failed: {exc or type(exc).__name__}. Check the options and run it again.")

    def _finish(self) -> None:
        self._running = False
        self.run_btn.setEnabled(True)
        self.cancel_btn.setEnabled(False)

    # -- one turn --------------------------------------------------------------------------------
    def open_row(self, row: int) -> None:
        record = self.model.row_at(row)
        source = self.source
        if record is None or source is None:
            return
        index = record.number - 1
        against = self._against  # as the rows were compared
        overrides = self.options().overrides() if against == "options" else {}
        self.detail_caption.setText(f"Turn {record.number}: rebuilding its what-if prompt…" if against == "options"
                                    else f"Turn {record.number}: rebuilding it with the memory as it is now…")
        self.session.run(lambda: source.what_if_turn(index, overrides, against), key=self._key + "-turn",
                         on_result=alive_only(self, self._on_detail), on_error=alive_only(self, self._on_error))

    def _on_detail(self, detail: WhatIfDetail) -> None:
        self.detail = detail
        self.change_model.set_rows(detail.changes)
        today = detail.against == "today"
        self.diff.set_diff(prompt_text_diff(detail.real, detail.what_if),
                           empty_text="(rebuilt with the memory as it is now, it is identical to what the model "
                                      "received)" if today else "(the what-if prompt is identical to the real one)")
        self.detail_caption.setText(f"Turn {detail.index + 1}: real {detail.real.total_tokens:,} tokens → "
                                    f"{'with the memory as it is now' if today else 'what-if'} "
                                    f"{detail.what_if.total_tokens:,} · {change_summary(detail.changes)}")
        self.rerun_btn.setEnabled(True)
        self.opened.emit(detail)


def _wrap_last_column(table: QTableView) -> None:
    table.setWordWrap(True)
    table.setTextElideMode(Qt.TextElideMode.ElideNone)
    table.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)


def table_for(model: RecordTableModel[Any], widths: dict[str, int] | None = None) -> QTableView:
    """A Replay table: long-text columns get fixed widths (a table re-filled on every step must not
    measure every cell again, and never widens the window)."""
    return record_table_view(model, widths={"Input": 220, "Message": 200, "Stored": 110, **(widths or {})})


__all__ = ["WhatIfPanel", "table_for"]
