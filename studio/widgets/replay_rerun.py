"""Re-run a turn: send its prompt (as received, or its what-if prompt) to a model from Preferences and
show the new reply beside the stored one, with a text diff and token and latency figures.

The request runs on a worker; nothing is written anywhere (``core.replay.rerun``).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from core import AssembledPrompt
from core.replay import RerunResult
from studio.logic.replay_layout import RerunComparison, reply_text, rerun_comparison
from studio.preferences import Preferences
from studio.replay_jobs import StepData, WhatIfDetail, rerun_prompt
from studio.widgets.code_editor import CodeEditor
from studio.widgets.diff_view import DiffView
from studio.widgets.pane_header import alive_only, caption
from studio.widgets.record_table import Column, RecordTableModel
from studio.widgets.replay_what_if import table_for

FIGURE_COLUMNS: list[Column[tuple[str, str, str]]] = [
    Column("", lambda r: r[0]),
    Column("Stored", lambda r: r[1]),
    Column("Re-run", lambda r: r[2]),
]


class RerunPanel(QWidget):
    finished = Signal(object)  # RerunResult
    failed = Signal(str)

    def __init__(self, session: Any, preferences: Preferences, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("rerunPanel")
        self.session = session
        self.preferences = preferences
        self.step: StepData | None = None
        self.what_if: WhatIfDetail | None = None
        self.result: RerunResult | None = None
        self.comparison: RerunComparison | None = None
        self._key = f"rerun-{id(self)}"
        self._picked: str | None = None  # a model chosen here, kept when Preferences change
        self._build()
        self.fill_models()
        preferences.changed.connect(self.fill_models)

    def _build(self) -> None:
        root = QVBoxLayout(self)
        root.setContentsMargins(0, 4, 0, 0)
        row = QHBoxLayout()
        row.addWidget(QLabel("Model"))
        self.model_combo = QComboBox()
        self.model_combo.setObjectName("rerunModel")
        self.model_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.model_combo.setMinimumContentsLength(12)
        row.addWidget(self.model_combo, 1)
        row.addWidget(QLabel("Prompt"))
        self.prompt_combo = QComboBox()
        self.prompt_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.prompt_combo.setMinimumContentsLength(12)
        self.prompt_combo.addItem("As the model received it", "received")
        self.prompt_combo.addItem("Its what-if prompt", "what-if")
        row.addWidget(self.prompt_combo)
        self.run_btn = QPushButton("Re-Run")
        self.run_btn.setObjectName("rerunButton")
        row.addWidget(self.run_btn)
        root.addLayout(row)
        self.status = QLabel("Pick a model (File > Preferences… adds endpoints) and re-run this turn. "
                             "Nothing is written to any thread.")
        self.status.setWordWrap(True)
        self.status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        root.addWidget(self.status)

        split = QSplitter(Qt.Orientation.Vertical)
        sides = QSplitter(Qt.Orientation.Horizontal)
        self.stored_view = CodeEditor("prose", read_only=True)
        self.new_view = CodeEditor("prose", read_only=True)
        self.new_view.setObjectName("rerunReply")
        for title, view in (("Stored reply", self.stored_view), ("Re-run reply", self.new_view)):
            holder = QWidget()
            hl = QVBoxLayout(holder)
            hl.setContentsMargins(0, 0, 0, 0)
            hl.addWidget(caption(title))
            hl.addWidget(view)
            sides.addWidget(holder)
        split.addWidget(sides)
        bottom = QSplitter(Qt.Orientation.Horizontal)
        self.diff = DiffView()
        self.diff.setObjectName("rerunDiff")
        self.figure_model: RecordTableModel[tuple[str, str, str]] = RecordTableModel(FIGURE_COLUMNS, self)
        self.figures = table_for(self.figure_model)
        self.figures.setMinimumWidth(320)
        bottom.addWidget(self.diff)
        bottom.addWidget(self.figures)
        bottom.setSizes([560, 300])
        split.addWidget(bottom)
        split.setSizes([220, 200])
        root.addWidget(split, 1)
        self.run_btn.clicked.connect(self.run)
        self.model_combo.activated.connect(lambda _i: setattr(self, "_picked", self.model_combo.currentData()))

    def fill_models(self) -> None:
        """The models from Preferences; the default one unless the user picked another here."""
        self.model_combo.clear()
        for choice in self.preferences.models():
            self.model_combo.addItem(choice.label, choice.name)
        index = self.model_combo.findData(self._picked) if self._picked is not None else -1
        if index < 0:
            self._picked = None
            index = self.model_combo.findData(self.preferences.default_model().name)
        self.model_combo.setCurrentIndex(max(0, index))

    # -- inputs ----------------------------------------------------------------------------------
    def set_step(self, step: StepData | None) -> None:
        same_turn = step is not None and self.step is not None and \
            step.turn.input_message_id == self.step.turn.input_message_id
        self.step = step
        if not same_turn:
            self.result = None
            self.comparison = None
            self.new_view.load("")
            self.diff.set_diff([], empty_text="")
            self.figure_model.set_rows([])
            if self.what_if is not None and (step is None or self.what_if.index != step.index):
                self.what_if = None
        self.stored_view.load(reply_text(step.reply) if step is not None else "")
        self._update_prompt_choice()

    def set_what_if(self, detail: WhatIfDetail | None) -> None:
        self.what_if = detail
        self._update_prompt_choice()
        if detail is not None:
            self.prompt_combo.setCurrentIndex(1)

    def _update_prompt_choice(self) -> None:
        usable = self.what_if is not None and self.step is not None and self.what_if.index == self.step.index
        item = self.prompt_combo.model().item(1)  # type: ignore[attr-defined]
        item.setEnabled(usable)
        if not usable:
            self.prompt_combo.setCurrentIndex(0)
        self.run_btn.setEnabled(self.step is not None)

    def prompt(self) -> AssembledPrompt | None:
        if self.step is None:
            return None
        if self.prompt_combo.currentData() == "what-if" and self.what_if is not None:
            return self.what_if.what_if
        return self.step.received

    # -- running ---------------------------------------------------------------------------------
    def run(self) -> None:
        prompt, step = self.prompt(), self.step
        choice = self.preferences.model(self.model_combo.currentData())
        if prompt is None or step is None or choice is None:
            return
        which = "what-if prompt" if prompt is not step.received else "prompt as received"
        self.status.setStyleSheet("")
        self.status.setText(f"Sending turn {step.index + 1}'s {which} ({prompt.total_tokens:,} tokens) to "
                            f"{choice.name}…")
        self.run_btn.setEnabled(False)
        self.session.run(lambda: rerun_prompt(prompt, choice), key=self._key,
                         on_result=alive_only(self, lambda r: self._on_result(step, r)),
                         on_error=alive_only(self, self._on_error))

    def _on_result(self, step: StepData, result: RerunResult) -> None:
        self.run_btn.setEnabled(True)
        if self.step is None or step.turn.input_message_id != self.step.turn.input_message_id:
            return  # the user stepped on: this reply belongs to another turn
        self.result = result
        stored = reply_text(step.reply)
        record = step.received.replay.record if step.received.replay is not None else None
        stored_in = record.tokens.get("total") if record is not None else None
        from core.tokens import default_tokenizer

        stored_out = default_tokenizer().count(stored) if stored else None
        self.comparison = rerun_comparison(stored, stored_in, stored_out, result,
                                           record.model if record is not None else None)
        self.new_view.load(result.text)
        self.diff.set_diff(self.comparison.diff, empty_text="(the same reply)")
        self.figure_model.set_rows(self.comparison.figures)
        self.status.setText(f"Re-run with {result.model}: {result.tokens_in:,} → {result.tokens_out:,} tokens in "
                            f"{result.latency_ms:,.0f} ms · {self.diff.summary()} against the stored reply. "
                            "Nothing was saved.")
        self.finished.emit(result)

    def _on_error(self, exc: BaseException) -> None:
        self.run_btn.setEnabled(True)
        text = str(exc) or type(exc).__name__
        self.status.setStyleSheet("color: #E5534B;")
        self.status.setText(f"The re-run failed: {text}. Check the model in File > Preferences… (Test Connection).")
        self.failed.emit(text)
