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
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal
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
    clamp_step,
    compare,
    default_fork_title,
    fork_source,
    step_label,
    turn_facts,
)
from studio.preferences import Preferences, preferences_for
from studio.reads import SourceResolver, load_tree
from studio.replay_jobs import ReplayThread, StepData, TraceMatch, find_trace
from studio.selection import Selection
from studio.session import StudioSession
from studio.widgets.banner import Banner
from studio.widgets.fork_dialog import ForkDialog
from studio.widgets.pane_header import alive_only, pane_header, pane_layout
from studio.widgets.replay_rerun import RerunPanel
from studio.widgets.replay_turn import TurnView, esc
from studio.widgets.replay_what_if import WhatIfPanel

STEP_DEBOUNCE_MS = 10  # coalesces a dragged slider's burst of values into one rebuild


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
        self.selection = Selection()
        self.source: ReplayThread | None = None
        self.step: StepData | None = None
        self.index = 0
        self.call = 0  # the model call of the turn shown (0: the first)
        self.trace: TraceMatch | None = None
        self._tab_bar: QTabBar | None = None  # the window's tab bar, whose Alt+arrows we take while shown
        self._pending: tuple[str, str | None] | None = None  # (thread, message) to open when shown
        self._key = f"replay-{id(self)}"
        self._syncing = False
        self._loading_step = False
        self._rerun_detail: Any = None  # a what-if prompt to re-run once its turn is shown
        self.resolver = SourceResolver(session.store)
        self._debounce = QTimer(self)
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(STEP_DEBOUNCE_MS)
        self._debounce.timeout.connect(self._load_step)
        self._stale = False  # the file changed while the pane was hidden
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
        head.addWidget(QLabel("Thread"))
        head.addWidget(self.thread_combo)
        head.addWidget(self.trace_btn)
        head.addWidget(self.fork_btn)
        root.addLayout(head)

        steps = QHBoxLayout()
        self.first_btn, self.prev_btn, self.next_btn, self.last_btn = (QToolButton() for _ in range(4))
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setObjectName("replaySlider")
        self.slider.setRange(0, 0)
        self.slider.setPageStep(1)
        self.step_label = QLabel("")
        self.step_label.setObjectName("replayStep")
        self.step_label.setMinimumWidth(260)  # its text is short and bounded ("Turn n of N · date")
        for w in (self.first_btn, self.prev_btn, self.slider, self.next_btn, self.last_btn, self.step_label):
            steps.addWidget(w, 1 if w is self.slider else 0)
        root.addLayout(steps)
        calls = QHBoxLayout()
        self.prev_call_btn, self.next_call_btn = QToolButton(), QToolButton()
        self.call_combo = QComboBox()
        self.call_combo.setObjectName("replayCall")
        self.call_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.call_combo.setMinimumContentsLength(28)
        self.call_label = QLabel("Model call")
        calls.addWidget(self.call_label)
        calls.addWidget(self.prev_call_btn)
        calls.addWidget(self.call_combo)
        calls.addWidget(self.next_call_btn)
        self.input_label = QLabel("")
        self.input_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        calls.addWidget(self.input_label, 1)
        root.addLayout(calls)
        self.banner = Banner()
        root.addWidget(self.banner)
        self.facts = QLabel("")
        self.facts.setObjectName("replayFacts")
        self.facts.setWordWrap(True)
        self.facts.setTextFormat(Qt.TextFormat.RichText)
        self.facts.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        root.addWidget(self.facts)

        # The turn, What-If and Re-Run each get the pane's whole width.
        self.tabs = QTabWidget()
        self.tabs.setObjectName("replayModes")
        self.view = TurnView(self)
        self.view.open_message.connect(self.open_message.emit)
        self.tabs.addTab(self.view, "Turn")
        self.what_if = WhatIfPanel(self.session, self)
        self.tabs.addTab(self.what_if, "What-If")
        self.rerun = RerunPanel(self.session, self.preferences, self)
        self.tabs.addTab(self.rerun, "Re-Run")
        root.addWidget(self.tabs, 1)
        self.status = QLabel("")
        self.status.setStyleSheet("color: palette(placeholder-text);")
        self.status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        root.addWidget(self.status)

        self.slider.valueChanged.connect(self._slider_moved)
        self.call_combo.activated.connect(self.go_to_call)
        self.thread_combo.activated.connect(self._thread_picked)
        self.what_if.rerun_requested.connect(self._rerun_what_if)

    def _register_commands(self) -> None:
        self.commands = CommandRegistry(self)
        add = self.commands.add
        has_turns = lambda: self.source is not None and bool(self.source.turns)  # noqa: E731
        has_step = lambda: self.step is not None  # noqa: E731
        has_calls = lambda: self.step is not None and len(self.step.calls) > 1  # noqa: E731
        specs = [
            ("replay.next", "Next Turn", self.next_turn, ["Alt+Right", "J"], has_turns, self.next_btn, "▶"),
            ("replay.previous", "Previous Turn", self.previous_turn, ["Alt+Left", "K"], has_turns, self.prev_btn, "◀"),
            ("replay.first", "First Turn", lambda: self.go_to(0), ["Alt+Home"], has_turns, self.first_btn, "|◀"),
            ("replay.last", "Last Turn", lambda: self.go_to(len(self.source.turns) - 1 if self.source else 0),
             ["Alt+End"], has_turns, self.last_btn, "▶|"),
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

    # -- selection -------------------------------------------------------------------------------
    def set_selection(self, selection: Selection) -> None:
        previous, self.selection = self.selection, selection
        if selection.resource_id != previous.resource_id or selection.thread_id != previous.thread_id:
            self._load_thread_list()
        if selection.thread_id is None:
            if self.source is None:
                self._show_empty("Pick a thread on the left to replay its turns.")
            return
        if self.source is None or self.source.thread_id != selection.thread_id:
            self.open(selection.thread_id)

    def open(self, thread_id: str, message_id: str | None = None) -> None:
        """Open a thread in Replay (at the turn holding ``message_id``, else at its last turn)."""
        self._pending = (thread_id, message_id)
        if self.isVisible():
            self._open_pending()

    def replay_from(self, thread_id: str, message_id: str) -> None:
        """"Replay From Here": open the thread at the turn this message belongs to, now."""
        self._pending = (thread_id, message_id)
        self._open_pending()

    def showEvent(self, event: Any) -> None:  # noqa: N802
        super().showEvent(event)
        self._watch_tab_bar()
        QTimer.singleShot(0, self._take_focus)  # so J/K and Alt+arrows step at once, not after a click
        if self._pending is not None:
            self._open_pending()
        elif self._stale:
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
        """New turns (an agent writing, a fork, an import): read the thread again, staying on this turn."""
        source = self.source
        if source is None or self._pending is not None:
            return
        if not self.isVisible():
            self._stale = True
            return
        self._stale = False
        store = self.session.store
        factory = lambda opts, name: self.session.memory(opts, name=name)  # noqa: E731
        current = source.turns[self.index].input_message_id if source.turns else None
        self.session.run(lambda: ReplayThread.open(store, factory, source.thread_id, current),
                         key=self._key + "-open", on_result=alive_only(self, self._on_reread),
                         on_error=lambda _e: None)  # the thread may be gone: the tree says so

    def _on_reread(self, fresh: ReplayThread) -> None:
        if self.source is None or fresh.thread_id != self.source.thread_id or self.source.same_turns(fresh):
            return
        self._on_opened(fresh)

    def _open_pending(self) -> None:
        if self._pending is None:
            return
        thread_id, message_id = self._pending
        self._pending = None
        store = self.session.store
        factory = lambda opts, name: self.session.memory(opts, name=name)  # noqa: E731
        self.status.setText("Reading the thread's turns…")
        self.session.run(lambda: ReplayThread.open(store, factory, thread_id, message_id), key=self._key + "-open",
                         on_result=alive_only(self, self._on_opened), on_error=alive_only(self, self._on_error))

    def _on_opened(self, source: ReplayThread) -> None:
        self.source = source
        self.step = None
        thread = source.thread
        name = thread.title or thread.id
        self.title.setText(f"Replay · {name if len(name) <= 40 else name[:39] + '…'}")  # never widens the pane
        fork = fork_source(thread.metadata)
        self.subtitle.setText(f"thread {thread.id} · resource {thread.resource_id} · options from {source.agent}"
                              + (f" · {fork}" if fork else ""))
        self.subtitle.setToolTip(self.subtitle.text())
        self._select_thread_in_list(thread.id)
        self.what_if.set_source(source)
        self.rerun.set_step(None)  # a summary of another thread's turn must not stay
        n = len(source.turns)
        self._syncing = True
        self.slider.setRange(0, max(n - 1, 0))
        self._syncing = False
        self.opened.emit(source)
        if not n:
            self._show_empty(f"Thread {thread.title or thread.id} has no user turns to replay yet.")
            return
        self.go_to(source.start)

    # -- stepping --------------------------------------------------------------------------------
    def go_to(self, index: int, call: int = 0) -> None:
        if self.source is None or not self.source.turns:
            return
        self.index = clamp_step(index, len(self.source.turns))
        self.call = call
        self._syncing = True
        self.slider.setValue(self.index)
        self._syncing = False
        self.step_label.setText(step_label(self.index, self.source.turns))
        turn = self.source.turns[self.index]
        self.input_label.setText(f"“{' '.join(turn.input_text.split())[:220]}”")
        self._loading_step = True
        self._debounce.start()
        self.commands.refresh_enabled()

    def next_turn(self) -> None:
        self.go_to(self.index + 1)

    def previous_turn(self) -> None:
        self.go_to(self.index - 1)

    def go_to_call(self, call: int) -> None:
        """Show model call ``call`` of the turn shown (the first, then one after each tool result)."""
        step = self.step
        if step is None:
            return
        self.call = clamp_step(call, len(step.calls))
        self._show_call(step)

    def next_call(self) -> None:
        self.go_to_call(self.call + 1)

    def previous_call(self) -> None:
        self.go_to_call(self.call - 1)

    def _slider_moved(self, value: int) -> None:
        if not self._syncing:
            self.go_to(value)

    @property
    def busy(self) -> bool:
        return self._loading_step or self._debounce.isActive()

    def _load_step(self) -> None:
        source, index = self.source, self.index
        if source is None:
            return
        self.status.setText(f"Rebuilding turn {index + 1}…")
        self.session.run(lambda: source.step(index), key=self._key + "-step",
                         on_result=alive_only(self, lambda step: self._on_step(source, step)),
                         on_error=alive_only(self, self._on_error))

    def _on_step(self, source: ReplayThread, step: StepData) -> None:
        if source is not self.source or step.index != self.index:
            return
        self._loading_step = False
        self.step = step
        self.trace = None
        self.call = clamp_step(self.call, len(step.calls))
        labels = call_labels(step.calls)
        if labels != [self.call_combo.itemText(i) for i in range(self.call_combo.count())]:
            self.call_combo.blockSignals(True)
            self.call_combo.clear()
            self.call_combo.addItems(labels)
            self.call_combo.blockSignals(False)
        self.call_combo.setEnabled(len(step.calls) > 1)
        self.rerun.set_step(step, self.call)
        self._show_call(step)
        if self._rerun_detail is not None and self._rerun_detail.index == step.index:
            self.rerun.set_what_if(self._rerun_detail)  # "Re-Run This What-If Prompt" on another turn
            self.tabs.setCurrentWidget(self.rerun)
        self._rerun_detail = None
        self.step_shown.emit(step)

    def _show_call(self, step: StepData) -> None:
        received, now = step.received, step.now
        cmp = compare(received, now, step.now_changes)
        if cmp.level is None:
            self.banner.hide()
        else:
            self.banner.show_message(cmp.text, cmp.level)
        self.facts.setText(" · ".join(f"<b>{k}</b> {esc(v)}" for k, v in turn_facts(received, step.wm_label,
                                                                                     step.om_label, self.call)))
        self.call_combo.setCurrentIndex(self.call)
        self.view.show_step(step, self.source.thread_id if self.source else "", cmp, self.call)
        self.rerun.set_call(self.call)
        shown = step.calls[self.call]
        calls = f" · model call {self.call + 1} of {len(step.calls)}" if len(step.calls) > 1 else ""
        self.status.setText(f"{len(shown.fragments)} fragments · {len(shown.messages)} messages · "
                            f"{shown.total_tokens:,} tokens (o200k estimate){calls} · "
                            f"{cmp.text if cmp.same else 'differs now'}")
        self.commands.refresh_enabled()

    # -- thread list -----------------------------------------------------------------------------
    def _load_thread_list(self) -> None:
        store = self.session.store
        self.session.run(lambda: load_tree(store), key=self._key + "-threads",
                         on_result=alive_only(self, self._fill_threads), on_error=lambda _e: None)

    def _fill_threads(self, tree: Any) -> None:
        resource = self.selection.resource_id
        self._syncing = True
        self.thread_combo.clear()
        for rid in ([resource] if resource else sorted(tree.threads)):
            for summary in tree.threads.get(rid, []):
                t = summary.thread
                self.thread_combo.addItem(f"{t.title or t.id} — {rid}", (rid, t.id))
        self._syncing = False
        self._select_thread_in_list(self.source.thread_id if self.source else self.selection.thread_id)

    def _select_thread_in_list(self, thread_id: str | None) -> None:
        for i in range(self.thread_combo.count()):
            if self.thread_combo.itemData(i)[1] == thread_id:
                self._syncing = True
                self.thread_combo.setCurrentIndex(i)
                self._syncing = False
                return

    def _thread_picked(self, index: int) -> None:
        data = self.thread_combo.itemData(index)
        if self._syncing or not data:
            return
        rid, tid = data
        self.open_thread.emit(Selection(rid, tid))
        if self.source is None or self.source.thread_id != tid:
            self.replay_from_thread(tid)

    def replay_from_thread(self, thread_id: str) -> None:
        self._pending = (thread_id, None)
        self._open_pending()

    # -- trace, fork, what-if, re-run -------------------------------------------------------------
    def show_trace(self) -> None:
        source, step = self.source, self.step
        if source is None or step is None:
            return
        resolver = self.resolver
        self.status.setText(f"Looking for turn {step.index + 1}'s trace…")
        self.session.run(lambda: find_trace(resolver.resolve().reader, source.turns, step.index, source.thread_id),
                         key=self._key + "-trace", on_result=alive_only(self, self._on_trace),
                         on_error=alive_only(self, self._on_error))

    def _on_trace(self, match: TraceMatch) -> None:
        self.trace = match
        if match.trace_id is None:
            self.status.setText(match.note)
            self.banner.show_message(match.note, "info")
            return
        self.status.setText(f"Trace {match.trace_id} — Back (Alt+Backspace) returns here.")
        self.open_trace.emit(match.trace_id)

    def fork(self) -> None:
        source, step = self.source, self.step
        if source is None or step is None:
            return
        if self.session.read_only:
            self._problem(Problem("Read-only", f"{self.session.display_path} is open read-only, so a fork cannot "
                                  "be written.", "Choose File > Allow Writes first, then fork again."))
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
        self.status.setText(f"Forked into “{thread.title}” ({thread.id}). The original thread is unchanged.")
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
        self.tabs.setCurrentWidget(self.what_if)
        self.what_if.run()

    def rerun_turn(self) -> None:
        self.tabs.setCurrentWidget(self.rerun)
        self.rerun.run()

    def _rerun_what_if(self, detail: Any) -> None:
        if self.source is not None and detail.index != self.index:
            self._rerun_detail = detail  # applied once that turn is shown
            self.go_to(detail.index)
            return
        self.rerun.set_what_if(detail)
        self.tabs.setCurrentWidget(self.rerun)

    # -- states ----------------------------------------------------------------------------------
    def _on_error(self, exc: BaseException) -> None:
        self._loading_step = False
        message = str(exc) or type(exc).__name__
        self.banner.show_message(message, "error")
        self.status.setText("Replay could not rebuild this.")
        self.failed.emit(message)

    def _show_empty(self, text: str) -> None:
        self.step = None
        self.view.clear()
        self.rerun.set_step(None)
        self.call_combo.clear()
        self.banner.hide()
        self.facts.setText("")
        self.step_label.setText("No turns")
        self.input_label.setText("")
        self.status.setText(text)
        self.commands.refresh_enabled()
