"""Chat playground: talk to an agent on the selected thread, or on a new one, and watch memory work.

The agent is one registered in the database (its memory options, its memory name so Studio overrides
apply, its instructions when it recorded them, the model settings of its newest recorded turn on the
thread) or a plain default agent; the model is one from Preferences, or the offline scripted model. The
agent's own tools are not offered (the Studio cannot run its code; the pane says so), every reply is
capped by the Reply cap control, and Temperature and Top-p, at "default" the agent's own, send a value set
here instead. Each turn runs on a worker (``studio.chat_runner``) and
the reply streams in: every text delta crosses to the UI thread by a queued signal and is painted
within a frame. When the turn is saved the session is told, so the tree, the message view, working
memory and traces follow at once. Every turn links to its prompt in the inspector (``as_of`` its user
message). Chatting writes, so a read-only database says so and offers File > Allow Writes; a model
error shows the endpoint and what to do, and nothing of that turn is saved. Stop shuts the model call's
connection at once (``chat_runner.turn_stop``; the UI thread only shuts a socket) and the turn saves nothing.
"""

from __future__ import annotations

from typing import Any, Callable

from PySide6.QtCore import QEvent, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QKeySequence, QShortcut, QShowEvent
from PySide6.QtWidgets import (
    QButtonGroup,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QRadioButton,
    QSizePolicy,
    QDoubleSpinBox,
    QSpinBox,
    QTextBrowser,
    QWidget,
)

from core import MemoryOptions
from core.agent_configs import AgentChoice, AgentConfig, agent_for_thread
from core.llm.stopping import CallStop
from core.messages import new_id
from studio import chat_runner
from studio.chat_runner import AgentRun, ChatRequest, ModelOption, TurnOutcome
from studio.commands import Command, CommandRegistry
from studio.logic import chat_layout as lay
from studio.logic.prompt_layout import EmbedderHolder
from studio.logic.memory_config import ignored_options_note
from studio.logic.thread_labels import delegation_refusal, header_tip, resource_label, shown_title
from studio.reads import last_messages
from studio.selection import Selection
from studio.theme import readable_html, set_tone
from studio.session import StudioSession
from studio.widgets.banner import Banner
from studio.widgets.flow_layout import FlowLayout, labelled
from studio.widgets.pane_header import alive_only, pane_header, pane_layout, status_label
from studio.widgets.plain_tip import plain_tip
from studio.widgets.a11y import label_for, named

TRANSCRIPT_MESSAGES = 60  # the newest messages of the thread shown above the conversation
PAINT_MS = 30  # deltas arriving faster than this are painted together
DEFAULT_RESOURCE = "playground-user"
STOPPING = "Stopping the turn: nothing of its reply will be saved…"  # what became of the message is said once stopped
READ_FAILED = "This thread's messages could not be read"  # the banner's start, so a later read can clear it


EMBEDDERS = EmbedderHolder()  # the database's local model, one per model and process


class ChatPane(QWidget):
    open_prompt = Signal(object)  # Selection(resource, thread, user message id): show that turn's prompt
    thread_started = Signal(object)  # Selection of a thread this pane created: select it in the tree
    turn_finished = Signal(object)  # TurnOutcome, after the session heard of the write
    turn_failed = Signal(str)
    delta_shown = Signal(str)  # a piece of the reply was added to the transcript
    context_loaded = Signal()
    _delta = Signal(str)  # from the worker thread (queued to the UI thread)
    _tools = Signal(object)
    _waiting = Signal(str)  # what the turn waits for before its reply (from the worker thread)

    def __init__(self, session: StudioSession, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("chatPane")
        self.session = session
        self.embedders = EMBEDDERS
        self.models_provider: Callable[[], list[ModelOption]] = lambda: chat_runner.configured_models(self)
        self.default_model_provider: Callable[[], str] = lambda: chat_runner.default_model_name(self)
        self._model_picked = False  # the user chose a model here: keep it; else follow Preferences' default
        host_prefs = getattr(parent.window() if parent is not None else None, "preferences", None)
        if host_prefs is not None:  # the default changed in File > Preferences… while this tab is shown
            host_prefs.changed.connect(self.refresh_models)
        self.selection = Selection()
        self.context: AgentChoice | None = None
        self.runs: dict[str, AgentRun] = {}  # agent name -> its newest recorded turn on the selected thread
        self.entries: list[lay.Entry] = []
        self.busy = False
        self._turn: ChatRequest | None = None
        self._stop: CallStop | None = None  # the running turn's (``chat_runner.turn_stop``)
        self._model_name = ""  # the running turn's model, as the picker names it
        self._models: list[ModelOption] = []
        self._turn_scope: dict[str, tuple[str, str]] = {}  # user message id -> (resource, thread) of turns sent here
        # The last failed turn's entries and its thread: a read of that thread (another pane's write, a
        # reload) shows them again after the stored messages until the next turn is sent or another thread
        # is chosen; they were never stored, so a read alone dropped the failure from the transcript.
        self._failed: tuple[str | None, list[lay.Entry]] = (None, [])
        self._key = f"chat-{id(self)}"
        self._paint = QTimer(self)
        self._paint.setSingleShot(True)
        self._paint.setInterval(PAINT_MS)
        self._paint.timeout.connect(self._render)
        self._follow_end = True  # the transcript shows its end: kept there when its text reflows or grows
        self._replacing = False  # the transcript's text is being replaced
        self._build()
        self._delta.connect(self._on_delta)
        self._tools.connect(self._on_tools)
        self._waiting.connect(self._on_waiting)
        session.changed.connect(self._on_db_changed)
        session.read_only_changed.connect(lambda _ro: self._update_state())
        self.refresh_models()
        self._load_context()
        self._render()
        self._update_state()

    # -- construction ----------------------------------------------------------------------------
    def _build(self) -> None:
        root = pane_layout(self)
        head, self.title, self.subtitle = pane_header("Chat Playground")
        self.subtitle.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        root.addLayout(head)

        # Flows, not rows: the agent and model row asked 665 px, the sampling row 460, and a 720 px window's
        # pane was read sideways (or, built there, its combos were cut). On one row where there is room, the
        # combos sharing it as before; else the next control goes on the next line.
        bar = QWidget()
        row = FlowLayout(bar)
        row.setContentsMargins(0, 0, 0, 0)
        self.agent_combo = QComboBox()
        self.agent_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.agent_combo.setMinimumContentsLength(18)
        self.model_combo = QComboBox()
        self.model_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.model_combo.setMinimumContentsLength(26)
        self.model_combo.activated.connect(lambda _i: setattr(self, "_model_picked", True))
        self.prefs_btn = QPushButton("Preferences…")
        self.prefs_btn.setToolTip("Add an OpenAI-compatible model (OpenAI, Ollama, LM Studio, vLLM)")
        row.add(labelled("Agent", self.agent_combo), 1)
        row.add(labelled("Model", self.model_combo), 2)
        row.add(self.prefs_btn)
        root.addWidget(bar)

        where_bar = QWidget()
        where = FlowLayout(where_bar)
        where.setContentsMargins(0, 0, 0, 0)
        self.thread_radio = QRadioButton("Selected thread")
        self.new_radio = QRadioButton("New thread for resource")
        group = QButtonGroup(self)
        group.addButton(self.thread_radio)
        group.addButton(self.new_radio)
        self.new_radio.setChecked(True)
        self.resource_edit = QLineEdit(DEFAULT_RESOURCE)
        self.resource_edit.setMaximumWidth(260)
        named(self.resource_edit, "Resource of the new thread")
        where.addWidget(self.thread_radio)
        where.addWidget(self.new_radio)
        where.addWidget(self.resource_edit)
        self.cap_spin = QSpinBox()
        self.cap_spin.setObjectName("chatReplyCap")
        self.cap_spin.setRange(1, chat_runner.MAX_REPLY_CAP)
        self.cap_spin.setSingleStep(128)
        self.cap_spin.setSuffix(" tokens")
        self.cap_spin.setValue(chat_runner.DEFAULT_REPLY_CAP)
        self.cap_spin.setToolTip(
            "The longest reply the model may write (max_tokens). It starts at the agent's own cap from its "
            "recorded turn on this thread (else the cap it registered), else at 1,024. An uncapped reply of a "
            "small local model can fill its context, be stored, and make the thread's later turns too long for "
            "the model.")
        self.cap_spin.valueChanged.connect(lambda _v: setattr(self, "_cap_picked", True))
        self._cap_picked = False  # the user set the cap here: keep it when the agent changes
        root.addWidget(where_bar)
        sampling_bar = QWidget()  # a row of its own, so a narrow pane never squeezes the resource field
        sampling = FlowLayout(sampling_bar)
        sampling.setContentsMargins(0, 0, 0, 0)
        sampling.addWidget(labelled("Reply cap", self.cap_spin))
        # Sampling: "default" (the lowest value) sends the agent's own setting, else none (the model's default).
        self.temperature_spin = _sampling_spin(
            "chatTemperature", 2.0, 0.1,
            "Sampling temperature sent with each turn. At \"default\" the agent's own (from its recorded turn on "
            "this thread, or its registration) is sent, else none, so the model's default applies.")
        self.top_p_spin = _sampling_spin(
            "chatTopP", 1.0, 0.05,
            "Nucleus sampling (top_p) sent with each turn. At \"default\" the agent's own is sent, else none.")
        for spin, title in ((self.temperature_spin, "Temperature"), (self.top_p_spin, "Top-p")):
            spin.valueChanged.connect(lambda _v: self._show_run())
            sampling.addWidget(labelled(title, spin))
        root.addWidget(sampling_bar)

        self.memory_label = QLabel("")
        self.memory_label.setWordWrap(True)
        self.memory_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.memory_label.setStyleSheet("color: palette(placeholder-text);")
        root.addWidget(self.memory_label)
        # Observational memory's observer (or reflector) failing, as the last turn on this thread noted it: a turn
        # succeeds without it, so only this line says it (each turn notes it until an observation succeeds).
        self.memory_problem_label = QLabel("")
        self.memory_problem_label.setObjectName("chatMemoryProblem")
        self.memory_problem_label.setWordWrap(True)
        self.memory_problem_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.memory_problem_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        set_tone(self.memory_problem_label, "warning")
        self.memory_problem_label.hide()
        self._memory_problem: tuple[str | None, str] = (None, "")  # (thread, what its last turn here noted)
        root.addWidget(self.memory_problem_label)
        self.settings_label = QLabel("")  # the model settings sent as the agent's, and where they come from
        self.tools_label = QLabel("")  # the agent's own tools are not offered here
        for label in (self.settings_label, self.tools_label):
            label.setWordWrap(True)
            label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
            label.setStyleSheet("color: palette(placeholder-text);")
            root.addWidget(label)
        self.instructions_edit = QPlainTextEdit()
        self.instructions_edit.setObjectName("chatInstructions")
        self.instructions_edit.setPlaceholderText("Instructions (the system message); not saved")
        self.instructions_edit.setMaximumHeight(64)
        self.instructions_edit.setTabChangesFocus(True)  # prose: Tab moves on, it types no tab character
        instructions = QHBoxLayout()
        label = label_for("Instructions", self.instructions_edit)
        label.setAlignment(Qt.AlignmentFlag.AlignTop)
        instructions.addWidget(label)
        instructions.addWidget(self.instructions_edit, 1)
        root.addLayout(instructions)

        self.banner = Banner(self)
        root.addWidget(self.banner)
        self.transcript = QTextBrowser(self)
        self.transcript.setObjectName("chatTranscript")
        named(self.transcript, "Transcript")
        self.transcript.setOpenLinks(False)
        self.transcript.anchorClicked.connect(self._link)
        bar = self.transcript.verticalScrollBar()
        bar.valueChanged.connect(self._transcript_scrolled)
        bar.rangeChanged.connect(self._transcript_range)
        root.addWidget(self.transcript, 1)

        send_row = QHBoxLayout()
        self.input = QPlainTextEdit()
        self.input.setObjectName("chatInput")
        named(self.input, "Message to the agent")
        self.input.setPlaceholderText("Message the agent (Ctrl+Enter sends)")
        self.input.setMaximumHeight(80)
        self.input.setTabChangesFocus(True)
        self.send_btn = QPushButton("Send")
        self.send_btn.setDefault(True)
        self.stop_btn = QPushButton("Stop")
        send_row.addWidget(self.input, 1)
        send_row.addWidget(self.send_btn)
        send_row.addWidget(self.stop_btn)
        root.addLayout(send_row)
        self.status = status_label()  # cut with "…", whole in the tooltip
        self.status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        root.addWidget(self.status)

        self.send_btn.clicked.connect(self.send)
        self.stop_btn.clicked.connect(self.stop)
        for keys in ("Ctrl+Return", "Ctrl+Enter"):
            QShortcut(QKeySequence(keys), self.input).activated.connect(self.send)
        self.agent_combo.currentIndexChanged.connect(self._agent_chosen)
        self.thread_radio.toggled.connect(lambda _on: self._update_state())
        self.prefs_btn.clicked.connect(lambda: self._run_window_command("app.preferences"))

    def _allow_writes(self) -> None:
        self._run_window_command("file.allow_writes")

    def _window_commands(self) -> CommandRegistry | None:
        """The main window's commands (None: the pane is shown on its own, as in tests)."""
        commands = getattr(self.window(), "commands", None)
        return commands if isinstance(commands, CommandRegistry) else None

    def _run_window_command(self, command_id: str) -> bool:
        if not self._has_window_command(command_id):
            return False
        commands = self._window_commands()
        assert commands is not None
        commands.run(command_id)
        return True

    def _has_window_command(self, command_id: str) -> bool:
        """One of the window's own commands (File > Allow Writes…, Preferences…): asking never builds a
        pane, as listing every command (the palette's pane commands) would."""
        commands = self._window_commands()
        try:
            return commands is not None and commands.command(command_id) is not None
        except KeyError:
            return False

    # -- models and agents -----------------------------------------------------------------------
    def refresh_models(self) -> None:
        """The models Preferences offers, starting at its default (File > Preferences… > default model)
        until the user picks another one here."""
        current = self.model_combo.currentData() if self._model_picked else self.default_model_provider()
        self._models = list(self.models_provider())
        self.model_combo.blockSignals(True)
        self.model_combo.clear()
        for i, m in enumerate(self._models):
            self.model_combo.addItem(m.label, m.name)
            self.model_combo.setItemData(i, plain_tip(m.label), Qt.ItemDataRole.ToolTipRole)  # the label may be cut
        index = self.model_combo.findData(current) if current is not None else -1
        self.model_combo.setCurrentIndex(max(index, 0))
        self.model_combo.blockSignals(False)

    def model_choice(self) -> ModelOption | None:
        name = self.model_combo.currentData()
        return next((m for m in self._models if m.name == name), None)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self.refresh_models()  # Preferences may have changed while another tab was shown
        self.prefs_btn.setVisible(self._has_window_command("app.preferences"))

    def _load_context(self) -> None:
        thread_id = self.selection.thread_id
        store = self.session.store

        def job() -> tuple[AgentChoice, list[Any], dict[str, AgentRun]]:
            choice = agent_for_thread(store, thread_id)
            rows = last_messages(store, thread_id, TRANSCRIPT_MESSAGES) if thread_id else []
            return choice, rows, chat_runner.recorded_runs(store, rows)

        self.session.run(job, on_result=alive_only(self, lambda r: self._on_context(thread_id, *r)),
                         on_error=alive_only(self, self._on_read_error), key=self._key + "-ctx")

    def _on_context(self, thread_id: str | None, choice: AgentChoice, rows: list[Any],
                    runs: dict[str, AgentRun] | None = None) -> None:
        if thread_id != self.selection.thread_id:
            return
        previous = self.agent_combo.currentData() if self.context is not None else None
        first = self.context is None or (self.context.thread.id if self.context.thread else None) != thread_id
        self.context = choice
        self.runs = dict(runs or {})
        self.agent_combo.blockSignals(True)
        self.agent_combo.clear()
        for agent in choice.agents:
            self.agent_combo.addItem(f"{agent.name}", agent.name)
        self.agent_combo.addItem("Default agent (no registered configuration)", None)
        wanted = (choice.agent.name if choice.agent else previous) if first else previous
        index = self.agent_combo.findData(wanted) if wanted is not None else self.agent_combo.count() - 1
        self.agent_combo.setCurrentIndex(index if index >= 0 else self.agent_combo.count() - 1)
        self.agent_combo.blockSignals(False)
        if first:
            self._agent_chosen()
        else:
            self._show_run()  # a new turn may have been recorded meanwhile
        if not self.busy:
            stored = lay.entries_from_rows(rows)
            failed_thread, failed = self._failed
            if failed and failed_thread == thread_id:
                kept = {e.id for e in stored}
                stored += [e for e in failed if e.id is None or e.id not in kept]
            self.entries = stored
            self._render()
        if self.banner.level == "error" and self.banner.text().startswith(READ_FAILED):
            self.banner.hide()  # read now
        self._update_state()
        self.context_loaded.emit()

    def agent(self) -> AgentConfig | None:
        name = self.agent_combo.currentData()
        if self.context is None or name is None:
            return None
        return next((a for a in self.context.agents if a.name == name), None)

    def _agent_chosen(self, *_: Any) -> None:
        agent = self.agent()
        self.instructions_edit.setPlainText(chat_runner.agent_instructions(agent))
        if agent is not None and agent.instructions is None:
            self.instructions_edit.setPlaceholderText(
                f"Agent '{agent.name}' did not record its instructions; type them here (not saved)")
        try:
            opts = agent.memory_options() if agent is not None else MemoryOptions()
            ignored = ignored_options_note(agent)  # (a newer version's options: the chat runs without them)
            self.memory_label.setText(lay.memory_summary(opts) + (f"\n{ignored}" if ignored else ""))
        except Exception as exc:  # noqa: BLE001 - a configuration from a newer engine
            self.memory_label.setText(f"Memory: this agent's registered options cannot be read ({exc}).")
        run = self.run()
        if run is not None and run.max_tokens is not None and not self._cap_picked:
            self.cap_spin.blockSignals(True)
            self.cap_spin.setValue(min(run.max_tokens, chat_runner.MAX_REPLY_CAP))  # the agent's own cap
            self.cap_spin.blockSignals(False)
        self._show_run()

    def run(self) -> AgentRun | None:
        """The chosen agent's newest recorded turn on the selected thread (its model settings), else what
        it registered (a new thread, or one it has not answered), if anything."""
        agent = self.agent()
        if agent is None:
            return None
        return self.runs.get(agent.name) or chat_runner.registered_run(agent)

    def _show_run(self) -> None:
        agent, run = self.agent(), self.run()
        self.settings_label.setText(chat_runner.settings_summary(run, agent, self._sampling()))
        self.tools_label.setText(chat_runner.tools_summary(run, agent))

    # -- selection -------------------------------------------------------------------------------
    def palette_commands(self) -> list[Command]:
        return []  # no commands of its own (its buttons act on what it shows)

    def set_selection(self, selection: Selection) -> None:
        previous = self.selection
        self.selection = selection
        if selection.resource_id and not self.busy:
            self.resource_edit.setText(selection.resource_id)
        if selection.thread_id != previous.thread_id:
            if self._failed[0] != selection.thread_id:
                self._failed = (None, [])
            self._show_memory_problem()
            self.runs = {}  # the previous thread's recorded turns: not what its agents ran with on this one
            self._show_run()
            self.thread_radio.setChecked(selection.thread_id is not None)
            self.new_radio.setChecked(selection.thread_id is None)
            if not self.busy:
                self.entries = []
                self._render()
            self._load_context()
        self._update_state()

    def _on_db_changed(self) -> None:
        if not self.busy:
            self._load_context()

    def _update_state(self) -> None:
        sel = self.selection
        self.thread_radio.setEnabled(sel.thread_id is not None and not self.busy)
        self.new_radio.setEnabled(not self.busy)
        self.resource_edit.setEnabled(self.new_radio.isChecked() and not self.busy)
        on_thread = self.thread_radio.isChecked() and sel.thread_id is not None
        thread = self.context.thread if self.context is not None else None
        if on_thread:
            thread_id = sel.thread_id or ""
            title = shown_title((thread.title if thread is not None and thread.id == thread_id else "") or thread_id)
            resource = thread.resource_id if thread is not None and thread.id == sel.thread_id else sel.resource_id
            named = resource_label(resource, self.session.delegations) if resource else "?"
            self.subtitle.setText(f"{title} · thread {shown_title(thread_id)} · resource {named}")
            self.subtitle.setToolTip(header_tip(self.subtitle.text(), resource, self.session.delegations))
        else:
            self.subtitle.setText(f"a new thread for resource {self.resource_edit.text().strip() or '?'}")
            self.subtitle.setToolTip("")
        read_only = bool(self.session.read_only)
        if read_only:
            refusal = self.session.write_refusal  # its folder cannot be written: Allow Writes would not help
            actions: list[tuple[str, Callable[[], None]]] = (
                [("Allow Writes…", self._allow_writes)]
                if refusal is None and self._has_window_command("file.allow_writes") else [])
            self.banner.show_message(
                "This database is open read-only, and a chat turn saves messages. Choose File > Allow Writes… "
                "to chat here (browsing stays read-only either way)." if refusal is None else
                f"This database is read-only here, and a chat turn saves messages: {refusal}", "warning", actions)
        elif self.banner.level == "warning" and "read-only" in self.banner.text():
            self.banner.hide()
        self.send_btn.setEnabled(not self.busy and not read_only)
        self.stop_btn.setEnabled(self.busy and not (self._stop is not None and self._stop.stopped))
        self.agent_combo.setEnabled(not self.busy)
        self.model_combo.setEnabled(not self.busy)
        self.cap_spin.setEnabled(not self.busy)
        self.temperature_spin.setEnabled(not self.busy)
        self.top_p_spin.setEnabled(not self.busy)

    # -- a turn ----------------------------------------------------------------------------------
    def request(self, text: str) -> ChatRequest | str:
        """The turn the controls describe, or why it cannot be sent."""
        if not text.strip():
            return "Type a message first."
        if self.session.read_only:
            return f"This database is open read-only, so a chat turn cannot be saved. {self.session.write_advice}"
        if self.thread_radio.isChecked() and self.selection.thread_id is not None:
            thread = self.context.thread if self.context is not None else None
            if thread is not None and thread.id == self.selection.thread_id:
                resource = thread.resource_id
            else:
                resource = self.selection.resource_id or ""
            if not resource:
                return "The selected thread's resource is not known yet; wait a moment and send again."
            refused = delegation_refusal(resource)
            if refused is not None:
                return refused
            return ChatRequest(self.selection.thread_id, resource, text, self.agent(),
                               self.instructions_edit.toPlainText(), new_id(), **self._settings())
        resource = self.resource_edit.text().strip()
        if not resource:
            return "Name the resource (the user) the new thread belongs to."
        refused = delegation_refusal(resource)
        if refused is not None:
            return refused
        return ChatRequest(f"thread_{new_id().replace('-', '')[:16]}", resource, text, self.agent(),
                           self.instructions_edit.toPlainText(), new_id(), new_thread=True, **self._settings())

    def _sampling(self) -> dict[str, float]:
        """Temperature and top_p set here (a spin box at "default" gives nothing)."""
        chosen = {}
        for key, spin in (("temperature", self.temperature_spin), ("top_p", self.top_p_spin)):
            if spin.value() > spin.minimum():
                chosen[key] = round(spin.value(), 2)
        return chosen

    def _settings(self) -> dict[str, Any]:
        """The reply cap, and the model settings the agent's recorded turn ran with, under those set here."""
        run = self.run()
        own = run.sampling() if run is not None else {}
        return {"max_tokens": self.cap_spin.value(), "model_settings": {**own, **self._sampling()}}

    def send(self) -> None:
        if self.busy:
            return
        req = self.request(self.input.toPlainText())
        if isinstance(req, str):
            self.status.setText(req)
            return
        choice = self.model_choice()
        if choice is None:
            self.status.setText("Pick a model first (File > Preferences… adds one).")
            return
        self.busy = True
        self._turn = req
        self._failed = (None, [])  # the next read shows what this turn stores instead
        self._turn_scope[req.input_id] = (req.resource_id, req.thread_id)
        self._stop = chat_runner.turn_stop()
        if self.banner.level in ("error", "info"):  # the last turn's failure, or that it was stopped
            self.banner.hide()
        self.entries = [*self.entries, lay.Entry("user", req.text, req.input_id, req.input_id, "streaming"),
                        lay.Entry("assistant", "", req.input_id, None, "streaming")]
        self.input.clear()
        self._render()
        self._update_state()
        self.status.setText(f"Waiting for {choice.name}…")
        self._model_name = choice.name
        store, embedders, stop = self.session.store, self.embedders, self._stop

        def job() -> TurnOutcome:
            model = choice.build()
            try:
                return chat_runner.run_turn(store, req, model, embedder=lambda: embedders.get(store), on_delta=self._delta.emit,
                                            on_tools=self._tools.emit, stop=stop, on_waiting=self._waiting.emit)
            finally:
                chat_runner.close_when_idle(store, req.agent, model)  # (after the observer it may have started)

        self.session.run(job, on_result=alive_only(self, self._on_turn), on_error=alive_only(self, self._on_failed),
                         key=self._key + "-turn")

    def stop(self) -> None:
        """Stop the running turn: its model call's connection is shut at once (never waits: the worker
        ends the turn and ``turn_failed`` follows: nothing of the reply saved, and what became of the message said
        then, read off the UI thread: ``chat_runner.InputKept`` when observational memory had stored it)."""
        if self._stop is not None and self.busy and self._stop.stop(chat_runner.STOP_REASON):
            self.status.setText(STOPPING)
            self._update_state()

    def _on_delta(self, piece: str) -> None:
        if not self.busy:
            return
        self.entries = lay.with_delta(self.entries, piece)
        self.status.setText("Receiving the reply…")
        if not self._paint.isActive():
            self._paint.start()
        self.delta_shown.emit(piece)

    def _on_waiting(self, what: str) -> None:
        """Before the reply: say what the turn waits for (observational memory observing first, then the model)."""
        if not self.busy or self._stop is None or self._stop.stopped:
            return
        self.entries = lay.waiting(self.entries, what)
        self.status.setText(f"Waiting for {self._model_name}…" if what == lay.WAITING_FOR_MODEL
                            else f"{what[:1].upper()}{what[1:]}…")
        self._render()

    def _on_tools(self, names: list[str]) -> None:
        if self.busy and self.entries:
            last = self.entries[-1]
            self.entries[-1] = lay.Entry(last.role, last.text, last.turn_id, last.id, last.state,
                                         (last.note + " " if last.note else "") + f"called {', '.join(names)}")
            self._render()

    def _on_turn(self, outcome: TurnOutcome) -> None:
        self.busy = False
        self._turn = None
        req = outcome.request
        capped = (f"the reply stopped at the cap of {req.max_tokens:,} tokens (raise Reply cap for longer replies)"
                  if outcome.finish_reason == "length" and req.max_tokens else "")

        def note(e: lay.Entry) -> str:
            if e.role != "assistant" or not capped:
                return e.note
            return (e.note + " · " if e.note else "") + capped

        self.entries = [lay.Entry(e.role, outcome.text if e.role == "assistant" and e.turn_id == req.input_id else e.text,
                                  e.turn_id, e.id, "stored", note(e)) if e.turn_id == req.input_id else e
                        for e in self.entries]
        self._render()
        tokens = f"{outcome.prompt_tokens:,} → {outcome.completion_tokens:,} tokens"
        capped = f" · {capped}" if capped else ""
        late = "Stop came once the reply was complete and being saved: the turn is stored. " \
            if outcome.stop_too_late else ""
        self.status.setText(f"{late}Saved {len(outcome.saved_ids)} messages · {outcome.model_id} · {tokens} · "
                            f"{outcome.seconds:.1f} s · the reply arrived in {outcome.deltas} pieces{capped}")
        self._memory_problem = (req.thread_id, outcome.memory_problem)
        self._show_memory_problem()
        self._update_state()
        self.session.notify_local_write()  # the tree, the message view, working memory and traces follow
        if req.new_thread:
            self.thread_started.emit(Selection(req.resource_id, req.thread_id))
        self.turn_finished.emit(outcome)

    def _show_memory_problem(self) -> None:
        """The memory problem the last turn noted, while its thread is the one selected (a new thread's turn selects
        it); another thread's turns say their own."""
        thread_id, text = self._memory_problem
        shown = bool(text) and thread_id == self.selection.thread_id
        self.memory_problem_label.setText(text if shown else "")
        self.memory_problem_label.setVisible(shown)

    def _on_failed(self, exc: BaseException) -> None:
        turn = self._turn
        self.busy = False
        self._turn = None
        what, todo = chat_runner.model_problem(exc)
        # The message stored all the same (observational memory stored it with its observation before the model
        # was asked): shown stored, its thread read again (and selected, if the turn started it), sent again there.
        kept = isinstance(exc, chat_runner.InputKept)
        stopped = isinstance(exc.error if isinstance(exc, chat_runner.InputKept) else exc, chat_runner.TurnStopped)
        if turn is not None:
            why = "stopped: you pressed Stop" if stopped else "not saved"
            self.entries = lay.failed(self.entries, turn.input_id, why, stored=turn.input_id if kept else None)
            self._failed = (None if turn.new_thread and not kept else turn.thread_id,
                            [e for e in self.entries if e.state == "failed"])
            if not self.input.toPlainText().strip():
                self.input.setPlainText(turn.text)  # the message is kept for another try
        self._render()
        self.banner.show_message(f"{what}\n{todo}", "info" if stopped else "error")  # a stop is no failure
        if kept:
            self.status.setText(f"{'Stopped' if stopped else 'The turn failed'}; your message was stored, with its "
                                "observation (no reply).")
        else:
            self.status.setText("Stopped; nothing of this turn was saved." if stopped
                                else "The turn failed; nothing was saved.")
        self._update_state()
        if kept and turn is not None:
            self.session.notify_local_write()  # the tree, the message view and the observations follow
            if turn.new_thread:
                self.thread_started.emit(Selection(turn.resource_id, turn.thread_id))
        self.turn_failed.emit(f"{what} {todo}")

    def _on_read_error(self, exc: BaseException) -> None:
        self.runs = {}
        self._show_run()
        self.status.setText(f"Could not read the thread: {type(exc).__name__}: {exc}")
        # Not "No messages yet": the thread may hold many; they could not be read.
        self.banner.show_message(f"{READ_FAILED}: {str(exc) or type(exc).__name__}", "error")
        if not self.busy and not self.entries:
            self.transcript.setHtml(readable_html(lay.unreadable_html(), self))

    # -- transcript ------------------------------------------------------------------------------
    def _render(self) -> None:
        self._paint.stop()
        bar = self.transcript.verticalScrollBar()
        at_end, was = self._follow_end or self.busy, bar.value()
        self._replacing = True  # (the range and value the new text passes through are not the user's scrolling)
        try:
            self.transcript.setHtml(readable_html(lay.transcript_html(self.entries, busy=self.busy), self))
        finally:
            self._replacing = False
        self._follow_end = at_end
        bar.setValue(bar.maximum() if at_end else was)  # the end, or where the user had scrolled to

    def _transcript_scrolled(self, value: int) -> None:
        if not self._replacing:
            self._follow_end = value >= self.transcript.verticalScrollBar().maximum() - 4

    def _transcript_range(self, _minimum: int, maximum: int) -> None:
        # The text reflowed (the pane narrowed, its tab was first shown) or grew: a transcript showing its end
        # keeps showing it (it was left a few lines above the newest reply, found 2026-12-06 on a tab's first show).
        if self._follow_end and not self._replacing:
            self.transcript.verticalScrollBar().setValue(maximum)

    def changeEvent(self, event: Any) -> None:  # noqa: N802 - Qt's name
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and hasattr(self, "transcript") and self.entries:
            # The transcript's colours follow the theme (``readable_html``), read from this pane's palette: a
            # theme's change reaches the pane and its children one by one, so the transcript's own may be the
            # old one still when this runs.
            self._render()

    def transcript_text(self) -> str:
        return self.transcript.toPlainText()

    def _link(self, url: QUrl) -> None:
        target = url.toString()
        if not target.startswith(lay.PROMPT_SCHEME):
            return
        message_id = target[len(lay.PROMPT_SCHEME):]
        thread = self.context.thread if self.context is not None else None
        resource, thread_id = self._turn_scope.get(message_id) or (
            thread.resource_id if thread is not None else self.selection.resource_id, self.selection.thread_id)
        self.open_prompt.emit(Selection(resource, thread_id, message_id))


def _sampling_spin(name: str, top: float, step: float, tip: str) -> QDoubleSpinBox:
    """A sampling setting from 0 to ``top``, with "default" (sending none of its own) one step below 0."""
    spin = QDoubleSpinBox()
    spin.setObjectName(name)
    spin.setDecimals(2)
    spin.setRange(-step, top)
    spin.setSingleStep(step)
    spin.setSpecialValueText("default")
    spin.setValue(-step)
    spin.setToolTip(tip)
    return spin
