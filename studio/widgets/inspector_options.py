"""The prompt inspector's options: where they start from, and every setting the user can vary live.

A view: ``options()`` reads the controls into an ``InspectorOptions``, ``set_options`` fills them
without emitting ``changed``. The controls sit in groups in a flow layout, so on a narrow window
the bar wraps onto more rows instead of widening the window.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from studio.logic.prompt_layout import InspectorOptions
from studio.widgets.a11y import label_for, named
from studio.widgets.elided_label import ElidedLabel
from studio.widgets.flow_layout import FlowLayout

NO_WRITES_LABEL = "No writes from the agent"
NO_WRITES_TIP = ("Memory option read_only: the turn reads memory but saves nothing, and the model gets no "
                 "working-memory update tool. (The database's own read-only mode is File > Allow Writes.)")

def _group(*widgets: QWidget | str) -> QWidget:
    box = QWidget()
    row = QHBoxLayout(box)
    row.setContentsMargins(0, 0, 10, 0)
    row.setSpacing(4)
    for w, after in zip(widgets, (*widgets[1:], None)):
        # a label names the control after it, unless that one is named already ("Range", "before")
        row.addWidget(label_for(w, after) if isinstance(w, str) and isinstance(after, QWidget)
                      and not after.accessibleName() else QLabel(w) if isinstance(w, str) else w)
    return box


def _spin(low: int, high: int, special: str | None = None, tip: str = "") -> QSpinBox:
    # No width cap: a spin box's hint is the width of its widest value and special text. Capped 1-24 px
    # below it, digits were clipped at some widths and themes; the flow wraps a group that does not fit.
    spin = QSpinBox()
    spin.setRange(low, high)
    if special:
        spin.setSpecialValueText(special)
    spin.setToolTip(tip)
    return spin


class InspectorOptionsBar(QFrame):
    changed = Signal()  # the user changed a setting
    agent_chosen = Signal()  # the user picked another agent's configuration

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("optionsBar")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self._syncing = False
        outer = QVBoxLayout(self)
        outer.setContentsMargins(8, 4, 8, 4)
        outer.setSpacing(4)

        # A flow: in one row the agent, its origin and Reset made the pane 28 px wider than a 720 px window's
        # page (dark theme). Where they fit, one row, the origin taking what is left; else Reset goes below.
        top_box = QWidget()
        top = FlowLayout(top_box)
        top.setContentsMargins(0, 0, 0, 0)
        self.agent_combo = QComboBox()
        agent = QWidget()  # (the label and its combo never wrap apart)
        pair = QHBoxLayout(agent)
        pair.setContentsMargins(0, 0, 0, 0)
        pair.addWidget(label_for("Options from", self.agent_combo, "Options from agent"))
        # A long agent name must not widen the pane: the combo keeps its width and the popup shows it all.
        self.agent_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.agent_combo.setMinimumContentsLength(16)
        pair.addWidget(self.agent_combo)
        top.addWidget(agent)
        self.origin_label = ElidedLabel("")  # cut with "…", never at the edge with no mark
        self.origin_label.setStyleSheet("color: palette(placeholder-text);")
        # Long provenance text must not widen the pane; the full text is in the tooltip.
        self.origin_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.origin_label.setMinimumWidth(80)
        top.add(self.origin_label, 1, elastic=True)
        self.reset_btn = QToolButton()
        top.addWidget(self.reset_btn)
        outer.addWidget(top_box)

        self._uncapped = False
        self.last_spin = _spin(0, 10_000, "off", "Message history: how many of the thread's newest messages join "
                                                 "the prompt (last_messages).")
        self.budget_spin = _spin(0, 1_000_000, "none", "Message history's token budget (message_history.max_tokens): "
                                                        "the oldest history messages are left out above it.")
        self.budget_spin.setSingleStep(500)
        self.recall_check = QCheckBox("Semantic recall")
        self.topk_spin = _spin(1, 100, tip="How many hits the search returns (top_k).")
        self.threshold_spin = QDoubleSpinBox()
        self.threshold_spin.setRange(0.0, 1.0)
        self.threshold_spin.setSingleStep(0.05)
        self.threshold_spin.setDecimals(2)
        self.threshold_spin.setSpecialValueText("none")
        self.threshold_spin.setToolTip("The minimum score a hit needs (hybrid: the fused score, 0–1). "
                                       "'none' keeps every hit.")
        self.before_spin = named(_spin(0, 50, tip="Messages recalled before each hit (message_range.before)."),
                                 "Range: messages before each hit")
        self.after_spin = named(_spin(0, 50, tip="Messages recalled after each hit (message_range.after)."),
                                "Range: messages after each hit")
        self.scope_combo = QComboBox()
        self.scope_combo.addItems(["resource", "thread"])
        self.wm_check = QCheckBox("Working memory")
        self.om_check = QCheckBox("Observational memory")
        self.om_check.setToolTip("Observational memory replaces message history with the observation log; "
                                 "a preview never calls the observer.")
        self.readonly_check = QCheckBox(NO_WRITES_LABEL)
        self.readonly_check.setToolTip(NO_WRITES_TIP)

        flow_box = QWidget()
        flow = FlowLayout(flow_box)
        flow.setContentsMargins(0, 0, 0, 0)
        for group in (
            _group("Last messages", self.last_spin, "Token budget", self.budget_spin),
            _group(self.recall_check, "Top-K", self.topk_spin, "Threshold", self.threshold_spin),
            _group("Range", self.before_spin, "before", self.after_spin, "after"), _group("Scope", self.scope_combo),
            # (one item each: as one group, wider than the pane at a 900 px window, it ran past the bar's edge
            # and "No writes from the agent" read "No writes from the ag" with no mark)
            _group(self.wm_check), _group(self.om_check), _group(self.readonly_check),
        ):
            flow.addWidget(group)
        outer.addWidget(flow_box)

        for spin in (self.last_spin, self.budget_spin, self.topk_spin, self.before_spin, self.after_spin):
            spin.valueChanged.connect(self._changed)
        self.threshold_spin.valueChanged.connect(self._changed)
        for check in (self.recall_check, self.wm_check, self.om_check, self.readonly_check):
            check.toggled.connect(self._changed)
        self.scope_combo.currentIndexChanged.connect(self._changed)
        self.agent_combo.currentIndexChanged.connect(lambda _i: None if self._syncing else self.agent_chosen.emit())

    # -- values ---------------------------------------------------------------------------------
    def options(self) -> InspectorOptions:
        threshold = self.threshold_spin.value()
        last: int | None = self.last_spin.value()
        if self._uncapped and last == self.last_spin.maximum():
            last = None  # still at "no count cap": the token budget bounds history
        return InspectorOptions(
            last_messages=last, recall=self.recall_check.isChecked(),
            top_k=self.topk_spin.value(), scope=self.scope_combo.currentText(),  # type: ignore[arg-type]
            read_only=self.readonly_check.isChecked(), working_memory=self.wm_check.isChecked(),
            observational=self.om_check.isChecked(), threshold=threshold if threshold > 0 else None,
            message_range=(self.before_spin.value(), self.after_spin.value()),
            history_tokens=self.budget_spin.value(),
        )

    def set_options(self, opts: InspectorOptions) -> None:
        self._syncing = True
        try:
            # No count cap (a token budget bounds history) shows as the spin box's maximum.
            self._uncapped = opts.last_messages is None
            self.last_spin.setValue(self.last_spin.maximum() if opts.last_messages is None else opts.last_messages)
            self.last_spin.setToolTip(
                "No count cap: the token budget (message_history.max_tokens) bounds history" if self._uncapped
                else "Message history: how many of the thread's newest messages join the prompt (last_messages).")
            self.budget_spin.setValue(opts.history_tokens)
            self.recall_check.setChecked(opts.recall)
            self.topk_spin.setValue(opts.top_k)
            self.threshold_spin.setValue(opts.threshold or 0.0)
            self.before_spin.setValue(opts.message_range[0])
            self.after_spin.setValue(opts.message_range[1])
            self.scope_combo.setCurrentText(opts.scope)
            self.wm_check.setChecked(bool(opts.working_memory))
            self.om_check.setChecked(bool(opts.observational))
            self.readonly_check.setChecked(opts.read_only)
        finally:
            self._syncing = False
        self._update_states()

    def set_agents(self, items: list[tuple[str, Any]], current: int) -> None:
        self._syncing = True
        try:
            self.agent_combo.clear()
            for text, data in items:
                self.agent_combo.addItem(text, data)
            self.agent_combo.setCurrentIndex(max(current, 0))
        finally:
            self._syncing = False

    def set_origin(self, text: str, *, modified: bool = False) -> None:
        # "modified" first: at the end of a long origin it was cut off in a narrow pane (a 1,100 px window),
        # so options changed here read as the agent's own.
        shown = ("modified here · " if modified else "") + text
        self.origin_label.setText(shown)
        self.origin_label.setToolTip(shown)

    def _update_states(self) -> None:
        recall = self.recall_check.isChecked()
        for w in (self.topk_spin, self.threshold_spin, self.before_spin, self.after_spin, self.scope_combo):
            w.setEnabled(recall)
        self.last_spin.setEnabled(not self.om_check.isChecked())  # observational memory replaces history
        self.budget_spin.setEnabled(not self.om_check.isChecked())

    def _changed(self, *_: Any) -> None:
        self._update_states()
        if not self._syncing:
            self.changed.emit()
