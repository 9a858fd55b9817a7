"""Replay: step through a thread's stored turns exactly as the model saw them.

At each turn, and at each model call of a turn (the first, then one after each tool result), the
pane shows the whole request the model received (rebuilt from the turn record, or reconstructed as
of its time when there is none): its messages beside what the engine rebuilds now, the model,
endpoint and every setting, the tool definitions with their token counts, the usage the server
reported beside our o200k estimate; and the reply, the working-memory version and observation
generation then in force, the recall hits with their scores, tokens per section, and what entered,
left or changed since the previous turn (or call) and why. The turn's trace is one click away.
What-if and re-run have tabs of their own beside the turn.

Every rebuild runs in a worker (``studio.replay_jobs``) under one key, so stepping quickly drops the
stale answers; the pane never writes, except Fork (explicit, refused on a read-only database).

What the pane shows lives in a plain ``ReplayState`` (``studio.logic.replay_state``: the thread open,
the turn and model call asked for and shown, the mode tab, what waits for the pane to be shown); the
widget changes it through its methods and renders it.
"""

from __future__ import annotations

from typing import Any, Callable

from PySide6.QtCore import QEvent, QObject, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QKeyEvent, QKeySequence
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QSizePolicy,
    QSlider,
    QTabBar,
    QTabWidget,
    QTextEdit,
    QToolButton,
    QWidget,
)

from studio.commands import Command, CommandRegistry
from studio.dialogs import Problem
from studio.logic.replay_layout import (
    call_labels,
    compare,
    default_fork_title,
    fork_source,
    input_caption,
    step_label,
    turn_facts,
)
from studio.logic.replay_state import ReplayMode, ReplayState
from studio.logic.thread_labels import header_tip, header_title, resource_label, shown_title
from studio.preferences import Preferences, preferences_for
from studio.reads import SourceResolver, load_tree
from studio.replay_jobs import ReplayThread, StepData, TraceMatch, WhatIfDetail, find_trace
from studio.selection import Selection
from studio.session import StudioSession
from studio.widgets.banner import Banner
from studio.widgets.fitted_label import FittedLabel
from studio.widgets.flow_layout import FlowLayout, labelled
from studio.widgets.fork_dialog import ForkDialog
from studio.widgets.elided_label import ElidedLabel
from studio.widgets.pane_header import alive_only, header_bar, pane_header, pane_layout, status_label
from studio.widgets.replay_rerun import RerunPanel
from studio.widgets.replay_turn import TurnView, esc
from studio.widgets.replay_what_if import WhatIfPanel
from studio.widgets.a11y import label_for, named

STEP_DEBOUNCE_MS = 10  # coalesces a dragged slider's burst of values into one rebuild
STEP_WIDTH = 260  # px of the turn's "Turn n of N · date" where there is room
SLIDER_LEAST = 80  # px the turn slider keeps in a narrow pane
CALL_LEAST_CHARS = 16  # the model-call list's least width, in characters (28 where there is room)


class _StepLabel(QLabel):
    """"Turn n of N · date": as wide as ``STEP_WIDTH`` where there is room (stepping, the slider beside it keeps
    its length), on two lines where there is not (a 720 px window: it asked 260 px in one line)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.setWordWrap(True)

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        hint = super().sizeHint()
        return QSize(max(hint.width(), STEP_WIDTH), hint.height())


class ReplayPane(QWidget):
    opened = Signal(object)  # ReplayThread
    step_shown = Signal(object)  # StepData
    failed = Signal(str)
    open_message = Signal(str)  # a stored message the user wants to see (main window opens its thread)
    open_trace = Signal(str)  # a trace id to show in the Traces tab
    open_thread = Signal(object)  # Selection picked in the pane's thread list
    forked = Signal(object)  # the new Thread

    def __init__(self, session: StudioSession, parent: QWidget | None = None, preferences: Preferences | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("replayPane")
        self.session = session
        self.preferences = preferences or preferences_for(parent)
        self.state = ReplayState()
        self._tab_bar: QTabBar | None = None  # the window's tab bar, whose Alt+arrows we take while shown
        self._key = f"replay-{id(self)}"
        self._syncing = False
        self.resolver = SourceResolver(session.store)
        self._debounce = QTimer(self)
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(STEP_DEBOUNCE_MS)
        self._debounce.timeout.connect(self._load_step)
        self._build()
        self._register_commands()
        session.changed.connect(self._on_db_changed)
        self._show_empty("Pick a thread on the left, or right-click a message and choose Replay From Here.")

    # -- construction ----------------------------------------------------------------------------
    def _build(self) -> None:
        root = pane_layout(self)
        head, self.title, self.subtitle = pane_header("Replay")
        self.subtitle.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.thread_combo = QComboBox()
        self.thread_combo.setObjectName("replayThread")
        self.thread_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.thread_combo.setMinimumContentsLength(16)
        self.trace_btn = QToolButton()
        self.fork_btn = QToolButton()
        # The thread, Open Trace and Fork… in a flow beside the title: in one row they asked 468-523 px, more than
        # a 720 px window gives the pane, which was read sideways (or cut, built there).
        tools = QWidget()
        flow = FlowLayout(tools)
        flow.setContentsMargins(0, 0, 0, 0)
        flow.addWidget(labelled("Thread", self.thread_combo))
        flow.addWidget(self.trace_btn)
        flow.addWidget(self.fork_btn)
        # The title and the tools in a flow too: where the title's whole text and the tools do not fit on one
        # row (a 720 px window), the tools go on the row below and the thread's name stays readable (in one
        # row it was elided to "Replay ·…"). Where they fit, one row, the subtitle taking what is left.
        root.addWidget(header_bar(head, self.title, tools))

        steps = QHBoxLayout()
        self.first_btn, self.prev_btn, self.next_btn, self.last_btn = (QToolButton() for _ in range(4))
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setObjectName("replaySlider")
        named(self.slider, "Turn")
        self.slider.setRange(0, 0)
        self.slider.setPageStep(1)
        self.slider.setMinimumWidth(SLIDER_LEAST)  # (squeezed, the turn's label wraps first: a handle alone is no slider)
        self.step_label = _StepLabel("")
        self.step_label.setObjectName("replayStep")
        for w in (self.first_btn, self.prev_btn, self.slider, self.next_btn, self.last_btn, self.step_label):
            steps.addWidget(w, 1 if w is self.slider else 0)
        root.addLayout(steps)
        calls = QHBoxLayout()
        self.prev_call_btn, self.next_call_btn = QToolButton(), QToolButton()
        self.call_combo = QComboBox()
        self.call_combo.setObjectName("replayCall")
        self.call_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.call_combo.setMinimumContentsLength(28)
        # (narrower where the pane is: a 720 px window's; a label cut short ends in "…", whole in its list)
        self.call_combo.setMinimumWidth(self.call_combo.fontMetrics().averageCharWidth() * CALL_LEAST_CHARS)
        self.call_label = label_for("Model call", self.call_combo)
        calls.addWidget(self.call_label)
        calls.addWidget(self.prev_call_btn)
        calls.addWidget(self.call_combo)
        calls.addWidget(self.next_call_btn)
        self.input_label = ElidedLabel("")  # a long input ends in "…" (whole in the tooltip)
        self.input_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        calls.addWidget(self.input_label, 1)
        root.addLayout(calls)
        self.banner = Banner()
        root.addWidget(self.banner)
        # (its least height is its wrapped lines': a short window's page scrolls, never cuts the turn below)
        self.facts = FittedLabel("")
        self.facts.setObjectName("replayFacts")
        self.facts.setTextFormat(Qt.TextFormat.RichText)
        root.addWidget(self.facts)

        # The turn, What-If and Re-Run each get the pane's whole width.
        self.tabs = QTabWidget()
        self.tabs.setObjectName("replayModes")
        self.view = TurnView(self)
        self.view.open_message.connect(self.open_message.emit)
        self.what_if = WhatIfPanel(self.session, self)
        self.rerun = RerunPanel(self.session, self.preferences, self)
        self._modes: dict[ReplayMode, QWidget] = {ReplayMode.TURN: self.view, ReplayMode.WHAT_IF: self.what_if,
                                                  ReplayMode.RERUN: self.rerun}
        for mode, panel in self._modes.items():
            self.tabs.addTab(panel, mode.value)
        root.addWidget(self.tabs, 1)
        self.status = status_label()  # cut with "…", whole in the tooltip
        self.status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        root.addWidget(self.status)

        self.slider.valueChanged.connect(self._slider_moved)
        self.call_combo.activated.connect(self.go_to_call)
        self.thread_combo.activated.connect(self._thread_picked)
        self.what_if.rerun_requested.connect(self._rerun_what_if)
        self.tabs.currentChanged.connect(self._mode_picked)

    def _register_commands(self) -> None:
        self.commands = CommandRegistry(self)
        add = self.commands.add
        state = self.state
        has_turns: Callable[[], bool] = lambda: state.has_turns  # noqa: E731
        has_step: Callable[[], bool] = lambda: state.has_step  # noqa: E731
        has_calls: Callable[[], bool] = lambda: state.has_calls  # noqa: E731
        specs = [
            ("replay.next", "Next Turn", self.next_turn, ["Alt+Right", "J"], has_turns, self.next_btn, "▶"),
            ("replay.previous", "Previous Turn", self.previous_turn, ["Alt+Left", "K"], has_turns, self.prev_btn, "◀"),
            ("replay.first", "First Turn", lambda: self.go_to(0), ["Alt+Home"], has_turns, self.first_btn, "|◀"),
            ("replay.last", "Last Turn", lambda: self.go_to(state.last_index), ["Alt+End"], has_turns, self.last_btn,
             "▶|"),
            ("replay.next_call", "Next Model Call of This Turn", self.next_call, ["Alt+Down", "Shift+J"], has_calls,
             self.next_call_btn, "▼"),
            ("replay.previous_call", "Previous Model Call of This Turn", self.previous_call, ["Alt+Up", "Shift+K"],
             has_calls, self.prev_call_btn, "▲"),
            ("replay.open_trace", "Open This Turn's Trace", self.show_trace, [], has_step, self.trace_btn,
             "Open Trace"),
            ("replay.fork", "Fork From This Turn…", self.fork, [], has_step, self.fork_btn, "Fork…"),
            ("replay.what_if", "Run What-If for This Thread", self.run_what_if, [], has_turns, None, ""),
            ("replay.rerun", "Re-Run This Turn", self.rerun_turn, [], has_step, None, ""),
        ]
        for cid, title, handler, keys, enabled, button, short in specs:
            action = add(cid, title, handler, shortcut=keys[0] if keys else None, enabled=enabled,
                         keywords="replay step turn")
            if len(keys) > 1:
                action.setShortcuts([QKeySequence(k) for k in keys])
            action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            if button is not None:
                action.setIconText(short)
                action.setToolTip(f"{title} ({', '.join(keys)})" if keys else title)
                button.setDefaultAction(action)
        self.commands.refresh_enabled()

    def palette_commands(self) -> list[Command]:
        return self.commands.commands()

    # -- the state, as tests and the window read it ------------------------------------------------
    @property
    def selection(self) -> Selection:
        return self.state.selection

    @property
    def source(self) -> ReplayThread | None:
        return self.state.source

    @property
    def step(self) -> StepData | None:
        return self.state.step

    @property
    def index(self) -> int:
        return self.state.index

    @property
    def call(self) -> int:
        return self.state.call

    @property
    def trace(self) -> TraceMatch | None:
        return self.state.trace

    def set_selection(self, selection: Selection) -> None:
        effect = self.state.select(selection)
        if effect.reload_threads:
            self._load_thread_list()
        if effect.show_empty:
            self._show_empty("Pick a thread on the left to replay its turns.")
        if effect.open_thread is not None:
            self.open(effect.open_thread)

    def open(self, thread_id: str, message_id: str | None = None) -> None:
        """Open a thread in Replay (at the turn holding ``message_id``, else at its last turn)."""
        self.state.ask_open(thread_id, message_id)
        if self.isVisible():
            self._open_pending()

    def replay_from(self, thread_id: str, message_id: str) -> None:
        """"Replay From Here": open the thread at the turn this message belongs to, now."""
        self.state.ask_open(thread_id, message_id)
        self._open_pending()

    def showEvent(self, event: Any) -> None:  # noqa: N802
        super().showEvent(event)
        self._watch_tab_bar()
        QTimer.singleShot(0, self._take_focus)  # so J/K and Alt+arrows step at once, not after a click
        if self.state.pending is not None:
            self._open_pending()
        elif self.state.stale:
            self._on_db_changed()

    def _take_focus(self) -> None:
        """Move the keyboard focus into the pane when it was left outside (on the tab bar, or in a pane
        that was just hidden): the stepping shortcuts work only while the focus is in here."""
        if not self.isVisible():
            return
        focus = QApplication.focusWidget()
        typing = isinstance(focus, (QLineEdit, QAbstractSpinBox, QPlainTextEdit, QTextEdit)) and focus.isVisible()
        if focus is None or (not self.isAncestorOf(focus) and not typing):
            self.view.step_table.setFocus(Qt.FocusReason.OtherFocusReason)

    def _watch_tab_bar(self) -> None:
        """Alt+Left/Right (and the other stepping keys) pressed while the window's tab bar has the focus
        step through turns instead of switching tabs, as long as this pane is the tab shown."""
        if self._tab_bar is not None:
            return
        parent = self.parentWidget()
        while parent is not None and not isinstance(parent, QTabWidget):
            parent = parent.parentWidget()
        if parent is not None:
            self._tab_bar = parent.tabBar()
            self._tab_bar.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802
        if watched is self._tab_bar and self.isVisible() and event.type() in (QEvent.Type.KeyPress,
                                                                              QEvent.Type.ShortcutOverride):
            assert isinstance(event, QKeyEvent)
            pressed = QKeySequence(event.keyCombination())
            for action in self.actions():  # the registry adds its actions to this pane
                if any(pressed.matches(k) == QKeySequence.SequenceMatch.ExactMatch for k in action.shortcuts()):
                    event.accept()
                    if event.type() == QEvent.Type.KeyPress and action.isEnabled():
                        action.trigger()
                        self._take_focus()
                    return True
        return super().eventFilter(watched, event)

    def _on_db_changed(self) -> None:
        """New turns (an agent writing, a fork, an import): read the thread again, staying on this turn. A
        thread that could not be read (the server was gone) is opened again."""
        retry = self.state.retry_open()
        if retry is not None:
            self.open(retry)
            return
        source = self.state.source
        if not self.state.wants_reread(self.isVisible()) or source is None:
            return
        store = self.session.store
        factory = self._memory_factory()
        # Not tied to the turn shown now: the user may step while this runs, and the answer then stays on
        # the turn they are on when it lands (``ReplayState.reread_turn``), even one deleted meanwhile.
        self.session.run(lambda: ReplayThread.open(store, factory, source.thread_id),
                         key=self._key + "-open", on_result=alive_only(self, self._on_reread),
                         on_error=lambda _e: None)  # the thread may be gone: the tree says so

    def _on_reread(self, fresh: ReplayThread) -> None:
        if self.state.reread_differs(fresh):
            index, call = self.state.reread_turn(fresh)
            notice = self.state.notice
            self._on_opened(fresh, index, call)
            self.state.notice = notice  # (the step above cleared it: it stays until the user steps)
            if notice:
                self.status.setText(notice + ".")

    def _memory_factory(self) -> Callable[[Any, str], Any]:
        session = self.session
        return lambda opts, name: session.memory(opts, name=name)

    def _open_pending(self) -> None:
        pending = self.state.take_pending()
        if pending is None:
            return
        thread_id, message_id = pending
        store = self.session.store
        factory = self._memory_factory()
        self.status.setText("Reading the thread's turns…")
        self.session.run(lambda: ReplayThread.open(store, factory, thread_id, message_id), key=self._key + "-open",
                         on_result=alive_only(self, self._on_opened),
                         on_error=alive_only(self, lambda exc: self._on_open_error(thread_id, exc)))

    def _on_opened(self, source: ReplayThread, index: int | None = None, call: int = 0) -> None:
        self.state.opened(source)
        thread = source.thread
        known = self.session.delegations  # (a delegation's resource as the tree names it; the stored id on hover)
        name = header_title(thread.title, thread.id, thread.resource_id, known)
        self.title.setText(f"Replay · {name if len(name) <= 40 else name[:39] + '…'}")  # never widens the pane
        fork = fork_source(thread.metadata)
        thread_part = f"thread {shown_title(thread.id)} · "
        resource_part = f"resource {resource_label(thread.resource_id, known)} · "
        tail = f" · {fork}" if fork else ""
        # The header names whose options (cut at 1,440 px it read "options from agent 'chef' (agen…", the agent said
        # twice: "(agent 'chef' answered last in this thread)"); how they were chosen is said on hover, and so is the
        # resource (the thread list beside it names it): with it the line was cut beside the header's tools at
        # 1,440 px in the themed app (10 pt), and a second row for them left the turn's table too short at 1,100 x 800.
        self.subtitle.setText(thread_part + "options from " + shown_title(source.agent_name or "") + tail)
        whole = thread_part + resource_part + "options from " + shown_title(source.agent or "") + tail
        self.subtitle.setToolTip(header_tip(whole, thread.resource_id, known) or whole)
        self._select_thread_in_list(thread.id)
        self.what_if.set_source(source)
        self.rerun.set_source(source)
        self.rerun.set_step(None)  # a summary of another thread's turn must not stay
        n = len(source.turns)
        self._syncing = True
        self.slider.setRange(0, max(n - 1, 0))
        self._syncing = False
        self.opened.emit(source)
        if not n:
            self._show_empty(f"Thread {shown_title(thread.title or thread.id)} has no user turns to "
                             "replay yet.")
            return
        self.go_to(source.start if index is None else index, call)

    # -- stepping --------------------------------------------------------------------------------
    def go_to(self, index: int, call: int = 0) -> None:
        state = self.state
        state.notice = ""
        if not state.go_to(index, call) or state.source is None:
            return
        self._syncing = True
        self.slider.setValue(state.index)
        self._syncing = False
        self.step_label.setText(step_label(state.index, state.source.turns))
        turn = state.source.turns[state.index]
        self.input_label.setText(f"“{' '.join(turn.input_text.split())[:220]}”")
        self._debounce.start()
        self.commands.refresh_enabled()

    def next_turn(self) -> None:
        self.go_to(self.state.index + 1)

    def previous_turn(self) -> None:
        self.go_to(self.state.index - 1)

    def go_to_call(self, call: int) -> None:
        """Show model call ``call`` of the turn shown (the first, then one after each tool result)."""
        step = self.state.step
        if step is not None and self.state.go_to_call(call):
            self._show_call(step)

    def next_call(self) -> None:
        self.go_to_call(self.state.call + 1)

    def previous_call(self) -> None:
        self.go_to_call(self.state.call - 1)

    def _slider_moved(self, value: int) -> None:
        if not self._syncing:
            self.go_to(value)

    @property
    def busy(self) -> bool:
        return self.state.loading_step or self._debounce.isActive()

    def _load_step(self) -> None:
        source, index = self.state.source, self.state.index
        if source is None:
            return
        self.status.setText(f"Rebuilding turn {index + 1}…")
        self.session.run(lambda: source.step(index), key=self._key + "-step",
                         on_result=alive_only(self, lambda step: self._on_step(source, step)),
                         on_error=alive_only(self, self._on_error))

    def _on_step(self, source: ReplayThread, step: StepData) -> None:
        if not self.state.step_arrived(source, step):
            return
        labels = call_labels(step.calls)
        if labels != [self.call_combo.itemText(i) for i in range(self.call_combo.count())]:
            self.call_combo.blockSignals(True)
            self.call_combo.clear()
            self.call_combo.addItems(labels)
            self.call_combo.blockSignals(False)
        self.call_combo.setEnabled(len(step.calls) > 1)
        self.input_label.setText(input_caption(step.received, step.turn))  # what the model received
        self.rerun.set_step(step, self.state.call)
        self._show_call(step)
        detail = self.state.take_rerun(step.index)
        if detail is not None:
            self.rerun.set_what_if(detail)  # "Re-Run This What-If Prompt" on another turn
            self._show_mode(ReplayMode.RERUN)
        self.step_shown.emit(step)

    def _show_call(self, step: StepData) -> None:
        received, now = step.received, step.now
        cmp = compare(received, now, step.now_changes)
        note = self.state.source.recall_note if self.state.source is not None else ""
        if cmp.level is None and not note:
            self.banner.hide()
        else:
            self.banner.show_message(" ".join(t for t in (note, cmp.text if cmp.level else "") if t),
                                     "warning" if note else cmp.level or "info")
        self.facts.setText(" · ".join(f"<b>{k}</b> {esc(v)}" for k, v in turn_facts(received, step.wm_label,
                                                                                     step.om_label, self.state.call)))
        self.call_combo.setCurrentIndex(self.state.call)
        self.view.show_step(step, self.state.source.thread_id if self.state.source else "", cmp, self.state.call)
        self.rerun.set_call(self.state.call)
        shown = step.calls[self.state.call]
        calls = f" · model call {self.state.call + 1} of {len(step.calls)}" if len(step.calls) > 1 else ""
        self.status.setText((f"{self.state.notice} · " if self.state.notice else "")
                            + f"{len(shown.fragments)} fragments · {len(shown.messages)} messages · "
                            f"{shown.total_tokens:,} tokens (o200k estimate){calls} · "
                            f"{cmp.text if cmp.same else 'differs now'}")
        self.commands.refresh_enabled()

    # -- thread list -----------------------------------------------------------------------------
    def _load_thread_list(self) -> None:
        store = self.session.store
        self.session.run(lambda: load_tree(store), key=self._key + "-threads",
                         on_result=alive_only(self, self._fill_threads), on_error=lambda _e: None)

    def _fill_threads(self, tree: Any) -> None:
        resource = self.state.selection.resource_id
        self._syncing = True
        self.thread_combo.clear()
        for rid in ([resource] if resource else sorted(tree.threads)):
            for summary in tree.threads.get(rid, []):
                t = summary.thread
                self.thread_combo.addItem(f"{shown_title(t.title or t.id)} — {shown_title(rid)}", (rid, t.id))
        self._syncing = False
        self._select_thread_in_list(self.state.thread_id or self.state.selection.thread_id)

    def _select_thread_in_list(self, thread_id: str | None) -> None:
        """The list's row of ``thread_id``; none when it is not listed (the list could not be read again, or the
        thread is newer than it), rather than the row of the thread shown before."""
        found = next((i for i in range(self.thread_combo.count()) if self.thread_combo.itemData(i)[1] == thread_id), -1)
        self._syncing = True
        self.thread_combo.setCurrentIndex(found)
        self._syncing = False

    def _thread_picked(self, index: int) -> None:
        data = self.thread_combo.itemData(index)
        if self._syncing or not data:
            return
        rid, tid = data
        self.open_thread.emit(Selection(rid, tid))
        if self.state.thread_id != tid:
            self.replay_from_thread(tid)

    def replay_from_thread(self, thread_id: str) -> None:
        self.state.ask_open(thread_id)
        self._open_pending()

    # -- trace, fork, what-if, re-run -------------------------------------------------------------
    def show_trace(self) -> None:
        source, step = self.state.source, self.state.step
        if source is None or step is None:
            return
        resolver = self.resolver
        self.status.setText(f"Looking for turn {step.index + 1}'s trace…")
        self.session.run(lambda: find_trace(resolver.resolve().reader, source.turns, step.index, source.thread_id),
                         key=self._key + "-trace", on_result=alive_only(self, self._on_trace),
                         on_error=alive_only(self, self._on_error))

    def _on_trace(self, match: TraceMatch) -> None:
        self.state.trace = match
        if match.trace_id is None:
            self.status.setText(match.note)
            self.banner.show_message(match.note, "info")
            return
        self.status.setText(f"Trace {match.trace_id} — Back (Alt+Backspace) returns here.")
        self.open_trace.emit(match.trace_id)

    def fork(self) -> None:
        source, step = self.state.source, self.state.step
        if source is None or step is None:
            return
        if self.session.read_only:
            self._problem(Problem("Read-only", f"{self.session.display_path} is open read-only, so a fork cannot "
                                  "be written.", f"{self.session.write_advice} Then fork again."))
            return
        dialog = ForkDialog(default_fork_title(source.thread.title, source.thread_id, step.index + 1),
                            f"turn {step.index + 1}", source.thread_scoped_wm, self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.accepted.connect(lambda: self._do_fork(source, step.index, dialog.title, dialog.working_memory))
        self.fork_dialog = dialog
        dialog.open()

    def _do_fork(self, source: ReplayThread, index: int, title: str, wm: str) -> None:
        self.status.setText(f"Forking at turn {index + 1}…")
        self.session.run(lambda: source.fork(index, title, wm), key=self._key + "-fork",
                         on_result=alive_only(self, self._on_forked), on_error=alive_only(self, self._on_fork_error))

    def _on_forked(self, thread: Any) -> None:
        self.status.setText(f"Forked into “{shown_title(thread.title or '')}” ({thread.id}). The original thread is "
                            "unchanged.")
        self.session.notify_local_write()
        self.forked.emit(thread)

    def _on_fork_error(self, exc: BaseException) -> None:
        from studio.dialogs import explain

        self._problem(explain(exc, self.session.display_path))

    def _problem(self, problem: Problem) -> None:
        self.banner.show_message(f"{problem.text} {problem.advice}", "error")
        self.status.setText(problem.text)
        self.failed.emit(f"{problem.text} {problem.advice}")

    def run_what_if(self) -> None:
        self._show_mode(ReplayMode.WHAT_IF)
        self.what_if.run()

    def rerun_turn(self) -> None:
        self._show_mode(ReplayMode.RERUN)
        self.rerun.run()

    def _rerun_what_if(self, detail: WhatIfDetail) -> None:
        if self.state.rerun_elsewhere(detail):
            self.go_to(detail.index)  # the re-run panel takes it once that turn is shown
            return
        self.rerun.set_what_if(detail)
        self._show_mode(ReplayMode.RERUN)

    def _show_mode(self, mode: ReplayMode) -> None:
        self.state.mode = mode
        self.tabs.setCurrentWidget(self._modes[mode])

    def _mode_picked(self, index: int) -> None:
        """The user clicked a mode tab."""
        self.state.mode = list(self._modes)[index]

    # -- states ----------------------------------------------------------------------------------
    def _on_error(self, exc: BaseException) -> None:
        self.state.failed()
        message = str(exc) or type(exc).__name__
        self.banner.show_message(message, "error")
        self.status.setText("Replay could not rebuild this.")
        self.failed.emit(message)

    def _on_open_error(self, thread_id: str, exc: BaseException) -> None:
        """The thread could not be read: what was shown is the thread open before (stepping, Fork… and
        Re-Run would act on it under the new selection), so it goes, and the error says which thread."""
        self.state.open_failed(thread_id)
        self.what_if.set_source(None)
        self.rerun.set_source(None)
        self.title.setText("Replay")
        self.subtitle.setText(f"thread {shown_title(thread_id)}")
        self.subtitle.setToolTip("")
        self._select_thread_in_list(thread_id)  # (the list showed the thread open before)
        self._show_empty(f"Thread {shown_title(thread_id)} could not be read; it is read again when the database "
                         "changes or its server answers again (File > Reload tries now).")
        message = str(exc) or type(exc).__name__
        self.banner.show_message(message, "error")
        self.failed.emit(message)

    def _show_empty(self, text: str) -> None:
        self.state.cleared()
        self.view.clear()
        self.rerun.set_step(None)
        self.call_combo.clear()
        self.banner.hide()
        self.facts.setText("")
        self.step_label.setText("No turns")
        self.input_label.setText("")
        self.status.setText(text)
        self.commands.refresh_enabled()
