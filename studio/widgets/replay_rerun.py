"""Re-run a turn's model call: send the request the record says it sent (as received, its what-if
prompt, or the turn rebuilt with the memory as it is now) to a model from Preferences, with the settings
and tool choice as recorded unless changed here, and show the new reply beside the stored one: a text
diff, what in the request differs from the original, and the usage each server reported beside our
o200k estimates.

"With the memory as it is now" answers "would the model have answered right after my fix?": the turn is
rebuilt from today's data (``ReplayThread.today``, ``rebuild="today"``) when it is picked and again when
it is sent, and the panel says plainly that it is a reconstruction and which fragments differ from what
the model received, with Replay's reasons (edited by hand, time passed, recall found other messages…).

Tool definitions go as recorded, so a tool whose function does not exist here is still offered; a
call the reply asks for is shown, never run. The request runs on a worker; nothing is written anywhere
(``core.replay.rerun``).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QLabel,
    QLineEdit,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from core import AssembledPrompt
from core.replay import RerunResult
from studio.logic.replay_layout import (
    RERUN_SETTINGS,
    RerunComparison,
    changed_settings,
    reply_text,
    rerun_comparison,
    setting_fields,
    settings_from_fields,
    today_note,
    tool_choice_items,
)
from studio.preferences import Preferences
from studio.replay_jobs import ReplayThread, StepData, TodayRerun, WhatIfDetail, rerun_prompt, rerun_today
from studio.session import StudioSession
from studio.widgets.code_editor import CodeEditor
from studio.widgets.diff_view import DiffView
from studio.widgets.fit_to_pane import FitToPane
from studio.widgets.flow_layout import FlowLayout, labelled
from studio.widgets.pane_header import alive_only, caption
from studio.widgets.record_table import Column, RecordTableModel
from studio.widgets.replay_what_if import table_for
from studio.theme import set_tone
from studio.widgets.a11y import label_for, named

FIGURE_COLUMNS: list[Column[tuple[str, str, str]]] = [  # (a cell cut short ends in "…", whole on hover)
    Column("", lambda r: r[0], tooltip=lambda r: r[0]),
    Column("Original call", lambda r: r[1], tooltip=lambda r: r[1]),
    Column("Re-run", lambda r: r[2], tooltip=lambda r: r[2]),
]
DIFFERENCE_COLUMNS: list[Column[tuple[str, str, str]]] = [
    Column("Differs from the original request", lambda r: r[0], tooltip=lambda r: r[0]),
    Column("Original", lambda r: r[1], tooltip=lambda r: r[1]),
    Column("Re-run", lambda r: r[2], tooltip=lambda r: r[2]),
]
MODEL_CHARS = 26  # the model's label in sight ("Scripted (offline) — no language model"; whole on hover)
CHANGED_STYLE = "QLineEdit { font-weight: bold; }"
RECEIVED, TODAY, WHAT_IF = "received", "today", "what-if"  # the prompt choices
# What Re-Run does while nothing has run yet, for the prompt chosen (one text for the three said "with its
# recorded tools…" whatever was picked, silent on a rebuilt prompt being a reconstruction).
_ASK = "Pick a model (File > Preferences… adds endpoints) and re-run this call"
_SAFE = "Nothing is written to any thread, and no tool runs."
IDLE_HINTS = {
    RECEIVED: f"{_ASK} as the model received it: its recorded messages, tools, settings and tool choice (change "
              f"any of them above). {_SAFE}",
    TODAY: f"{_ASK} with the turn rebuilt from the memory as it is now (today's working memory and messages as "
           "stored now: a fix made since is in), with the call's recorded tools, settings and tool choice. A "
           f"reconstruction, not what the model received. {_SAFE}",
    WHAT_IF: f"{_ASK} with the turn's what-if prompt (the options of the What-If tab), with the call's recorded "
             f"tools, settings and tool choice (change any of them above). {_SAFE}",
}


class RerunPanel(QWidget):
    finished = Signal(object)  # RerunResult
    failed = Signal(str)

    def __init__(self, session: StudioSession, preferences: Preferences, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("rerunPanel")
        self.session = session
        self.preferences = preferences
        self.step: StepData | None = None
        self.call = 0
        self.what_if: WhatIfDetail | None = None
        self.source: ReplayThread | None = None  # the thread open in Replay (rebuilds "as it is now")
        self.today: WhatIfDetail | None = None  # the step rebuilt with the memory as it is now
        self._run_after_today = False
        self.result: RerunResult | None = None
        self.comparison: RerunComparison | None = None
        self._key = f"rerun-{id(self)}"
        self._picked: str | None = None  # a model chosen here, kept when Preferences change
        self._filled_for: Any = None  # the request the setting fields were filled from (refilled lazily)
        self._marked: dict[str, bool] = {}
        self._build()
        self.fill_models()
        preferences.changed.connect(self.fill_models)

    def _build(self) -> None:
        root = QVBoxLayout(self)
        root.setContentsMargins(0, 4, 0, 0)
        # A flow, not one row: the model, the prompt, the call and Re-Run asked 568 px side by side; at a 720 px
        # window the pane was read sideways (or, built there, its combos were cut to 111 px over their text).
        # Each control keeps its label and its width, and a row that runs out of room goes on the next line.
        bar = QWidget()
        bar.setObjectName("rerunBar")
        row = FlowLayout(bar)
        row.setContentsMargins(0, 0, 0, 0)
        self.model_combo = QComboBox()
        self.model_combo.setObjectName("rerunModel")
        self.model_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.model_combo.setMinimumContentsLength(MODEL_CHARS)
        self.model_combo.currentIndexChanged.connect(
            lambda _i: self.model_combo.setToolTip(self.model_combo.currentText()))  # (a long label, whole)
        row.addWidget(labelled("Model", self.model_combo))
        self.prompt_combo = QComboBox()
        self.prompt_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.prompt_combo.setMinimumContentsLength(22)  # "With the memory as it is now" (nearly) whole
        self.prompt_combo.addItem("As the model received it", RECEIVED)
        self.prompt_combo.addItem("With the memory as it is now", TODAY)
        self.prompt_combo.addItem("Its what-if prompt", WHAT_IF)
        self.prompt_combo.setItemData(1, "The turn rebuilt from today's data: working memory as it is today, "
                                         "messages as stored now (a fix made since is in). A reconstruction, "
                                         "not what the model received.", Qt.ItemDataRole.ToolTipRole)
        row.addWidget(labelled("Prompt", self.prompt_combo))
        self.call_label = QLabel("")
        self.call_label.hide()  # (shown where the turn made more than one call)
        row.addWidget(self.call_label)
        self.run_btn = QPushButton("Re-Run")
        self.run_btn.setObjectName("rerunButton")
        row.addWidget(self.run_btn)
        root.addWidget(bar)

        # Settings as recorded, editable; each field holds the value as sent (JSON), empty: not sent.
        box = QWidget()
        flow = FlowLayout(box)
        flow.setContentsMargins(0, 0, 0, 0)
        self.setting_edits: dict[str, QLineEdit] = {}
        for key in RERUN_SETTINGS:
            edit = QLineEdit()
            edit.setObjectName(f"rerunSetting_{key}")
            edit.setPlaceholderText("not sent")
            edit.setMaximumWidth(240 if key == "response_format" else 110)
            edit.textChanged.connect(self._mark_changes)
            self.setting_edits[key] = edit
            flow.addWidget(labelled(key.replace("_", " "), edit))
        self.tool_choice_combo = QComboBox()
        self.tool_choice_combo.setObjectName("rerunToolChoice")
        # A fixed-width combo: re-filled on every step, it must not make the bar lay itself out again.
        self.tool_choice_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.tool_choice_combo.setMinimumContentsLength(22)
        flow.addWidget(labelled("tool choice", self.tool_choice_combo))
        self.reset_btn = QPushButton("Reset to Recorded")
        self.reset_btn.setToolTip("Put back the settings and tool choice this call sent")
        flow.addWidget(self.reset_btn)
        root.addWidget(box)

        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        # "With the memory as it is now": that the prompt is a reconstruction, and what differs and why.
        self.today_label = QLabel("")
        self.today_label.setObjectName("rerunTodayNote")
        self.today_label.setWordWrap(True)
        self.today_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.today_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.today_label.setTextFormat(Qt.TextFormat.PlainText)
        self.today_label.hide()
        root.addWidget(self.today_label)
        root.addWidget(self.status)
        self._idle_status()

        split = QSplitter(Qt.Orientation.Vertical)
        split.setChildrenCollapsible(False)  # (a part is never dragged away to nothing)
        sides = QSplitter(Qt.Orientation.Horizontal)
        sides.setChildrenCollapsible(False)  # (a part is never dragged away to nothing)
        self.stored_view = CodeEditor("prose", read_only=True)
        self.new_view = CodeEditor("prose", read_only=True)
        self.new_view.setObjectName("rerunReply")
        for title, view in (("Stored reply", self.stored_view), ("Re-run reply", self.new_view)):
            named(view, title)
            holder = QWidget()
            hl = QVBoxLayout(holder)
            hl.setContentsMargins(0, 0, 0, 0)
            hl.addWidget(caption(title))
            hl.addWidget(view)
            sides.addWidget(holder)
        split.addWidget(sides)
        bottom = QSplitter(Qt.Orientation.Horizontal)
        bottom.setChildrenCollapsible(False)  # (a part is never dragged away to nothing)
        self.diff = DiffView()
        self.diff.setObjectName("rerunDiff")
        named(self.diff, "Stored reply against the re-run reply")
        self.figure_model: RecordTableModel[tuple[str, str, str]] = RecordTableModel(FIGURE_COLUMNS, self)
        self.figures = named(table_for(self.figure_model), "Original call and re-run: figures")
        self.figures.setMinimumWidth(320)
        self.difference_model: RecordTableModel[tuple[str, str, str]] = RecordTableModel(DIFFERENCE_COLUMNS, self)
        self.differences = table_for(self.difference_model)
        self.differences.setObjectName("rerunDifferences")
        named(self.differences, "Differs from the original request")
        # Both fitted to their side (at a 1,100 px window the Re-run column was past the edge of each)
        self.figure_fit = FitToPane(self.figures, {}, {"": 0.6, "Original call": 0.4}, last="Re-run",
                                    floors={"": "Prompt tokens, server", "Original call": "scripted/offline"},
                                    caps={"": "Prompt tokens, our o200k estimate"},
                                    rest_sample="scripted/offline", pad=16)
        self.difference_fit = FitToPane(self.differences, {}, {"Differs from the original request": 0.5,
                                                               "Original": 0.5}, last="Re-run",
                                        floors={"Differs from the original request": "temperature"},
                                        rest_sample="Re-run ·", pad=16)
        tables = QSplitter(Qt.Orientation.Vertical)
        tables.setChildrenCollapsible(False)  # (a part is never dragged away to nothing)
        tables.addWidget(self.figures)
        tables.addWidget(self.differences)
        bottom.addWidget(self.diff)
        bottom.addWidget(tables)
        bottom.setSizes([440, 560])
        split.addWidget(bottom)
        split.setSizes([180, 280])
        root.addWidget(split, 1)
        self.run_btn.clicked.connect(self.run)
        self.reset_btn.clicked.connect(self.reset_settings)
        self.prompt_combo.currentIndexChanged.connect(lambda _i: self._prompt_picked())
        self.model_combo.activated.connect(lambda _i: setattr(self, "_picked", self.model_combo.currentData()))

    def _idle_status(self) -> None:
        set_tone(self.status, None)
        self.status.setText(IDLE_HINTS.get(self.choice(), IDLE_HINTS[RECEIVED]))

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
    def set_source(self, source: ReplayThread | None) -> None:
        """The thread open in Replay, which rebuilds a turn with the memory as it is now."""
        if source is not self.source:
            self.source = source
            self.today = None
            self._update_prompt_choice()

    def set_step(self, step: StepData | None, call: int = 0) -> None:
        same_turn = step is not None and self.step is not None and \
            step.turn.input_message_id == self.step.turn.input_message_id
        self.step = step
        if not same_turn:
            self._clear_result()
            self._idle_status()  # a summary of another turn (or thread) must not stay
            if self.what_if is not None and (step is None or self.what_if.index != step.index):
                self.what_if = None
            self.today = None
            self._run_after_today = False
        self.stored_view.load(reply_text(step.reply) if step is not None else "")
        self._update_prompt_choice()
        self.set_call(call)
        if not same_turn and self.choice() == TODAY:
            self._load_today()

    def set_call(self, call: int) -> None:
        """Re-run model call ``call`` of the turn (the pane's selected call)."""
        if call != self.call and self.result is not None:
            self._clear_result()
            self._idle_status()
        self.call = call
        n = len(self.step.calls) if self.step is not None else 0
        self.call_label.setText(f"Model call {call + 1} of {n}" if n > 1 else "")
        self.call_label.setVisible(n > 1)
        self._refill()

    def _refill(self) -> None:
        """Fill the setting fields from the selected call's request, unless they already are."""
        request = self.recorded_request()
        if request is not self._filled_for or request is None:
            self.reset_settings()

    def _clear_result(self) -> None:
        self.result = None
        self.comparison = None
        self.new_view.load("")
        self.diff.set_diff([], empty_text="")
        self.figure_model.set_rows([])
        self.difference_model.set_rows([])

    def set_what_if(self, detail: WhatIfDetail | None) -> None:
        """A turn opened in the What-If tab: its what-if prompt, or (against today's memory) the turn
        rebuilt with the memory as it is now."""
        if detail is not None and detail.against == "today":
            self.today = detail
            self._update_prompt_choice()
            self._pick(TODAY)
            return
        self.what_if = detail
        self._update_prompt_choice()
        if detail is not None:
            self._pick(WHAT_IF)

    def choice(self) -> str:
        return str(self.prompt_combo.currentData())

    def _pick(self, choice: str) -> None:
        index = self.prompt_combo.findData(choice)
        if index == self.prompt_combo.currentIndex():
            self._prompt_picked()
        else:
            self.prompt_combo.setCurrentIndex(index)

    def _update_prompt_choice(self) -> None:
        model = self.prompt_combo.model()
        usable = self.what_if is not None and self.step is not None and self.what_if.index == self.step.index
        model.item(self.prompt_combo.findData(WHAT_IF)).setEnabled(usable)  # type: ignore[attr-defined]
        model.item(self.prompt_combo.findData(TODAY)).setEnabled(self.source is not None)  # type: ignore[attr-defined]
        if (not usable and self.choice() == WHAT_IF) or (self.source is None and self.choice() == TODAY):
            self.prompt_combo.setCurrentIndex(0)
        self.run_btn.setEnabled(self.step is not None)

    def _prompt_picked(self) -> None:
        """Another prompt chosen: the settings from its call; "as it is now" rebuilds the turn first."""
        self.reset_settings()
        if self.status.text() in IDLE_HINTS.values():
            self._idle_status()  # the hint follows the choice (a result, an error or a send in progress stays)
        if self.choice() != TODAY:
            self.today_label.hide()
            return
        self.today_label.show()
        if self.today is not None and self.step is not None and self.today.index == self.step.index:
            self._show_today(self.today)
        else:
            self._load_today()

    def _load_today(self) -> None:
        source, step = self.source, self.step
        if source is None or step is None:
            return
        self.today_label.show()
        self.today_label.setText(f"Rebuilding turn {step.index + 1} with the memory as it is now…")
        index = step.index
        self.session.run(lambda: source.today(index), key=self._key + "-today",
                         on_result=alive_only(self, self._on_today), on_error=alive_only(self, self._on_today_error))

    def _on_today_error(self, exc: BaseException) -> None:
        self._run_after_today = False
        set_tone(self.today_label, "error")
        self.today_label.setText(f"This turn could not be rebuilt with the memory as it is now: {exc or type(exc).__name__}. "
                                 "Nothing was sent; re-run it as the model received it, or File > Reload and try again.")

    def _on_today(self, detail: WhatIfDetail) -> None:
        if self.step is None or detail.index != self.step.index:
            return  # the user stepped on meanwhile
        before = self.recorded_request()
        self.today = detail
        if self.choice() == TODAY:
            self._show_today(detail)
            after = self.recorded_request()
            if setting_fields(before) == setting_fields(after) and tool_choice_items(before) == tool_choice_items(after):
                self._filled_for = after  # the same settings and choices: what the user typed stays
            else:
                self.reset_settings()
        if self._run_after_today:
            self._run_after_today = False
            self.run()

    def _show_today(self, detail: WhatIfDetail) -> None:
        self.today_label.setText(today_note(detail.real, detail.what_if, detail.changes))
        set_tone(self.today_label, "warning" if detail.changes else None)

    def prompt(self) -> AssembledPrompt | None:
        if self.step is None:
            return None
        if self.choice() == WHAT_IF and self.what_if is not None:
            return self.what_if.what_if
        if self.choice() == TODAY:
            return self.today.what_if if self.today is not None and self.today.index == self.step.index else None
        return self.step.received

    def recorded_request(self) -> dict[str, Any] | None:
        """What the selected call sent (as rebuilt from its record), whose settings the fields start from
        (with the memory as it is now, before that rebuild arrives: those the call sent, the same)."""
        prompt = self.prompt() or (self.step.received if self.step is not None else None)
        info = prompt.replay if prompt is not None else None
        if info is None or not info.calls:
            return None
        call = info.calls[min(self.call, len(info.calls) - 1)]
        return call.request if call.record is not None else None

    # -- settings --------------------------------------------------------------------------------
    def reset_settings(self) -> None:
        request = self.recorded_request()
        self._filled_for = request
        for key, text in setting_fields(request).items():
            self.setting_edits[key].blockSignals(True)
            self.setting_edits[key].setText(text)
            self.setting_edits[key].blockSignals(False)
        self.tool_choice_combo.clear()
        for label, value in tool_choice_items(request):
            self.tool_choice_combo.addItem(label, value)
        self._mark_changes()

    def fields(self) -> dict[str, str]:
        return {k: e.text() for k, e in self.setting_edits.items()}

    def _mark_changes(self) -> None:
        changed = set(changed_settings(self.recorded_request(), self.fields()))
        for key, edit in self.setting_edits.items():
            if self._marked.get(key) == (key in changed):
                continue  # restyling a field costs a re-polish: only when its state flips
            self._marked[key] = key in changed
            edit.setStyleSheet(CHANGED_STYLE if key in changed else "")
            edit.setToolTip("changed from what the call sent" if key in changed else "as the call sent it")

    # -- running ---------------------------------------------------------------------------------
    def run(self) -> None:
        prompt, step, call = self.prompt(), self.step, self.call
        choice = self.preferences.model(self.model_combo.currentData())
        today = self.choice() == TODAY
        if today and prompt is None and step is not None and choice is not None and self.source is not None:
            self._run_after_today = True  # sent once the rebuild with today's memory arrives
            self._load_today()
            return
        if prompt is None or step is None or choice is None:
            return
        self._refill()
        try:
            settings = settings_from_fields(self.fields())
        except ValueError as exc:
            set_tone(self.status, "error")
            self.status.setText(f"Not sent: {exc}.")
            return
        tool_choice = self.tool_choice_combo.currentData()
        which = ("prompt rebuilt with the memory as it is now" if today else
                 "what-if prompt" if prompt is not step.received else "request as received")
        set_tone(self.status, None)
        self.status.setText(f"Sending turn {step.index + 1}'s {which} (model call {call + 1}) to {choice.name}…")
        self.run_btn.setEnabled(False)
        source = self.source
        if today and source is not None:
            # Rebuilt again as it is sent: an edit made since the panel showed the prompt is in what goes out.
            index = step.index
            self.session.run(lambda: rerun_today(source, index, choice, tool_choice=tool_choice, call=call,
                                                 settings=settings),
                             key=self._key, on_result=alive_only(self, lambda r: self._on_today_result(step, call, r)),
                             on_error=alive_only(self, self._on_error))
            return
        self.session.run(lambda: rerun_prompt(prompt, choice, tool_choice=tool_choice, call=call, settings=settings),
                         key=self._key, on_result=alive_only(self, lambda r: self._on_result(step, call, r)),
                         on_error=alive_only(self, self._on_error))

    def _on_today_result(self, step: StepData, call: int, outcome: TodayRerun) -> None:
        if self.step is not None and outcome.detail.index == self.step.index:
            self.today = outcome.detail
            if self.choice() == TODAY:
                self._show_today(outcome.detail)
        self._on_result(step, call, outcome.result, today=True)

    def _on_result(self, step: StepData, call: int, result: RerunResult, today: bool = False) -> None:
        self.run_btn.setEnabled(True)
        if self.step is None or step.turn.input_message_id != self.step.turn.input_message_id or call != self.call:
            return  # the user stepped on: this reply belongs to another turn or call
        self.result = result
        stored = reply_text(step.reply)
        record = step.received.replay.record if step.received.replay is not None else None
        shown = step.calls[min(call, len(step.calls) - 1)]
        self.comparison = rerun_comparison(stored, shown.total_tokens, result,
                                           record.model if record is not None else None)
        asked = "".join(f"\n[tool call {c['name']}({c['arguments']}): shown, not run]" for c in result.tool_calls)
        self.new_view.load(result.text + asked)
        self.diff.set_diff(self.comparison.diff, empty_text="(the same reply)")
        self.figure_model.set_rows(self.comparison.figures)
        self.difference_model.set_rows(self.comparison.differences)
        differs = ", ".join(d[0] for d in self.comparison.differences)
        rebuilt = ("Sent with the memory as it is now (a reconstruction from today's data; what differs from what "
                   "the model received is listed above). ") if today else ""
        self.status.setText(f"Re-run with {result.model}: {self.diff.summary()} against the stored reply. " + rebuilt
                            + (f"Outside its messages, the request differs from the original in: {differs}. "
                               if differs else "The same request as the original outside its messages. "
                               if today else "The same request as the original. ") + "Nothing was saved.")
        self.finished.emit(result)

    def _on_error(self, exc: BaseException) -> None:
        self.run_btn.setEnabled(True)
        text = str(exc) or type(exc).__name__
        set_tone(self.status, "error")
        self.status.setText(f"The re-run failed: {text}. Check the model in File > Preferences… (Test Connection).")
        self.failed.emit(text)


__all__ = ["RerunPanel"]
