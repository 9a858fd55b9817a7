"""Prompt inspector: the exact prompt the engine would send for a thread, with where each part came from.

Everything shown comes from ``Memory.assemble``'s record (``AssembledPrompt``), built in a worker
(``studio.reads.assemble_preview``). The options start from the thread's agent, chosen by
``core.agent_configs.agent_for_thread``: the rule ``memory-studio prompt`` uses too.
Option changes are debounced, and each assembly is submitted under one key so a slower, older result
is dropped rather than painted over a newer one. Nothing here writes to the database.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QItemSelection, Qt, QTimer, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QAbstractItemView,
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QRadioButton,
    QSizePolicy,
    QSpinBox,
    QSplitter,
    QTableView,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from core import MemoryOptions
from core.agent_configs import AgentChoice, AgentConfig, agent_for_thread
from studio.commands import CommandRegistry
from studio.logic.prompt_layout import (
    EmbedderHolder,
    FragmentRow,
    InspectorOptions,
    Preview,
    PreviewRequest,
    SkipRow,
    StartingPoint,
    context_usage,
    fragment_header,
    fragment_rows,
    skipped_rows,
    starting_point,
)
from studio.logic.dates import format_datetime
from studio.reads import assemble_preview
from studio.selection import Selection
from studio.widgets.banner import Banner
from studio.widgets.code_editor import CodeEditor
from studio.widgets.context_bar import ContextBar
from studio.widgets.pane_header import alive_only, caption, pane_header, pane_layout
from studio.widgets.record_table import RIGHT, Column, RecordTableModel

DEBOUNCE_MS = 250
EMBEDDERS = EmbedderHolder()  # one embedding model per process, loaded on the first recall preview
DEFAULTS_LABEL = "Defaults (no agent)"
NO_WRITES_LABEL = "No writes from the agent"
NO_WRITES_TIP = ("Memory option read_only: the turn reads memory but saves nothing, and the model gets no "
                 "working-memory update tool. (The database's own read-only mode is File > Allow Writes.)")


FRAGMENT_COLUMNS: list[Column[FragmentRow]] = [
    Column("#", lambda r: r.index, RIGHT),
    Column("Role", lambda r: r.role),
    Column("Source", lambda r: r.source, color=lambda r: r.color),
    Column("Stored messages", lambda r: r.stored_label, tooltip=lambda r: "\n".join(r.stored_ids)),
    Column("Score", lambda r: r.score_label, RIGHT),
    Column("Tokens", lambda r: f"{r.tokens:,}", RIGHT),
    Column("Share", lambda r: f"{100 * r.share:.1f}%", RIGHT),
    Column("Text", lambda r: r.preview, tooltip=lambda r: r.preview),
]

SKIP_COLUMNS: list[Column[SkipRow]] = [
    Column("Processor", lambda r: r.processor),
    Column("Why it added nothing", lambda r: r.reason, tooltip=lambda r: r.reason),
]



class PromptInspectorPane(QWidget):
    assembled = Signal(object)  # Preview
    failed = Signal(str)
    open_message = Signal(str)  # a stored message id the user wants to see in the message view

    def __init__(self, session: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("promptInspector")
        self.session = session
        self.selection = Selection()
        self.preview: Preview | None = None
        self._context: AgentChoice | None = None
        self._start: StartingPoint | None = None
        self._key = f"prompt-inspector-{id(self)}"
        self._busy = False
        self._syncing = False
        self._debounce = QTimer(self)
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(DEBOUNCE_MS)
        self._debounce.timeout.connect(self.assemble_now)
        self._build()
        self._register_commands()
        session.changed.connect(self._on_db_changed)
        self._show_empty("Pick a thread to see the prompt the engine would send for its next turn.")

    # -- construction ----------------------------------------------------------------------------
    def _build(self) -> None:
        root = pane_layout(self)
        head, self.title, self.subtitle = pane_header("No thread selected")
        self.copy_json_btn = QToolButton(self)
        self.copy_openai_btn = QToolButton(self)
        head.addWidget(self.copy_json_btn)
        head.addWidget(self.copy_openai_btn)
        root.addLayout(head)

        # What to assemble: a new message, or a stored turn.
        mode = QHBoxLayout()
        self.new_radio = QRadioButton("New message")
        self.turn_radio = QRadioButton("Stored turn")
        self.mode_group = QButtonGroup(self)
        self.mode_group.addButton(self.new_radio)
        self.mode_group.addButton(self.turn_radio)
        self.new_radio.setChecked(True)
        self.turn_radio.setEnabled(False)
        self.turn_label = QLabel("")
        self.turn_label.setStyleSheet("color: palette(placeholder-text);")
        self.message_edit = QLineEdit()
        self.message_edit.setPlaceholderText("Type the next user message (empty: what memory alone contributes)")
        mode.addWidget(self.new_radio)
        mode.addWidget(self.message_edit, 1)
        mode.addWidget(self.turn_radio)
        mode.addWidget(self.turn_label)
        root.addLayout(mode)
        self.instructions_edit = QLineEdit()
        self.instructions_edit.setPlaceholderText("optional — the agent's own instructions are not stored in the database")
        instr = QHBoxLayout()
        instr_label = QLabel("Instructions")
        instr_label.setMinimumWidth(self.new_radio.sizeHint().width())
        instr.addWidget(instr_label)
        instr.addWidget(self.instructions_edit, 1)
        root.addLayout(instr)

        # Options, starting from the thread's agent config.
        opts = QFrame()
        opts.setObjectName("optionsBar")
        opts.setFrameShape(QFrame.Shape.StyledPanel)
        ol = QHBoxLayout(opts)
        ol.setContentsMargins(8, 4, 8, 4)
        ol.addWidget(QLabel("Options from"))
        self.agent_combo = QComboBox()
        self.agent_combo.setMinimumWidth(160)
        self.agent_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        ol.addWidget(self.agent_combo)
        self.origin_label = QLabel("")
        self.origin_label.setStyleSheet("color: palette(placeholder-text);")
        # Long provenance text must not widen the pane; the full text is in the tooltip.
        self.origin_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.origin_label.setMinimumWidth(80)
        ol.addWidget(self.origin_label, 1)
        ol.addWidget(QLabel("Last messages"))
        self.last_spin = QSpinBox()
        self.last_spin.setRange(0, 10_000)
        self.last_spin.setSpecialValueText("off")
        ol.addWidget(self.last_spin)
        self.recall_check = QCheckBox("Semantic recall")
        ol.addWidget(self.recall_check)
        ol.addWidget(QLabel("Top-K"))
        self.topk_spin = QSpinBox()
        self.topk_spin.setRange(1, 100)
        ol.addWidget(self.topk_spin)
        ol.addWidget(QLabel("Scope"))
        self.scope_combo = QComboBox()
        self.scope_combo.addItems(["resource", "thread"])
        ol.addWidget(self.scope_combo)
        # "Read-only" means the database mode only; this is the memory option ``read_only``.
        self.readonly_check = QCheckBox(NO_WRITES_LABEL)
        self.readonly_check.setToolTip(NO_WRITES_TIP)
        ol.addWidget(self.readonly_check)
        self.reset_btn = QToolButton()
        ol.addWidget(self.reset_btn)
        root.addWidget(opts)

        self.bar = ContextBar()
        root.addWidget(self.bar)
        self.banner = Banner()
        root.addWidget(self.banner)

        split = QSplitter(Qt.Orientation.Vertical)
        upper = QWidget()
        ul = QVBoxLayout(upper)
        ul.setContentsMargins(0, 0, 0, 0)
        ul.addWidget(caption("Prompt, in the order the model reads it"))
        self.fragment_model: RecordTableModel[FragmentRow] = RecordTableModel(FRAGMENT_COLUMNS, self)
        self.fragment_table = self._table(self.fragment_model)
        ul.addWidget(self.fragment_table)
        split.addWidget(upper)

        lower = QSplitter(Qt.Orientation.Horizontal)
        detail = QWidget()
        dl = QVBoxLayout(detail)
        dl.setContentsMargins(0, 0, 0, 0)
        self.detail_header = caption("Fragment")
        self.detail_sources = QLabel("")
        self.detail_sources.setTextFormat(Qt.TextFormat.RichText)
        self.detail_sources.linkActivated.connect(self.open_message.emit)
        self.detail_text = CodeEditor("markdown", read_only=True)
        dl.addWidget(self.detail_header)
        dl.addWidget(self.detail_sources)
        dl.addWidget(self.detail_text)
        lower.addWidget(detail)
        skip = QWidget()
        sl = QVBoxLayout(skip)
        sl.setContentsMargins(0, 0, 0, 0)
        sl.addWidget(caption("Processors that added nothing"))
        self.skip_model: RecordTableModel[SkipRow] = RecordTableModel(SKIP_COLUMNS, self)
        self.skip_table = self._table(self.skip_model)
        self.skip_table.horizontalHeader().setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        self.processors_label = QLabel("")
        self.processors_label.setWordWrap(True)
        self.processors_label.setStyleSheet("color: palette(placeholder-text);")
        sl.addWidget(self.skip_table)
        sl.addWidget(self.processors_label)
        lower.addWidget(skip)
        lower.setSizes([620, 380])
        split.addWidget(lower)
        split.setSizes([330, 250])
        root.addWidget(split, 1)

        self.status = QLabel("")
        self.status.setStyleSheet("color: palette(placeholder-text);")
        root.addWidget(self.status)

        for w in (self.last_spin, self.topk_spin):
            w.valueChanged.connect(self._options_changed)
        for c in (self.recall_check, self.readonly_check):
            c.toggled.connect(self._options_changed)
        self.scope_combo.currentIndexChanged.connect(self._options_changed)
        self.agent_combo.currentIndexChanged.connect(self._agent_chosen)
        self.message_edit.textChanged.connect(self.schedule)
        self.instructions_edit.textChanged.connect(self.schedule)
        self.mode_group.buttonToggled.connect(lambda *_: self._mode_changed())
        self.fragment_table.selectionModel().selectionChanged.connect(self._fragment_selected)

    def _table(self, model: RecordTableModel[Any]) -> QTableView:
        table = QTableView(self)
        table.setModel(model)
        table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        table.verticalHeader().hide()
        table.verticalHeader().setDefaultSectionSize(table.fontMetrics().height() + 8)
        table.setAlternatingRowColors(True)
        table.setShowGrid(False)
        table.setWordWrap(False)
        header = table.horizontalHeader()
        header.setStretchLastSection(True)
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(model.columnCount() - 1, QHeaderView.ResizeMode.Stretch)
        return table

    def _register_commands(self) -> None:
        self.commands = CommandRegistry(self)
        add = self.commands.add
        has_prompt = lambda: self.preview is not None  # noqa: E731
        for action in (
            add("prompt.copy_json", "Copy Prompt as JSON (Assembly Record)", self.copy_json,
                shortcut="Ctrl+Shift+J", enabled=has_prompt, keywords="clipboard export"),
            add("prompt.copy_openai", "Copy Prompt as OpenAI Messages", self.copy_openai,
                shortcut="Ctrl+Shift+M", enabled=has_prompt, keywords="clipboard chat completions"),
            add("prompt.reassemble", "Reassemble Prompt", self.assemble_now, shortcut="F5"),
            add("prompt.reset_options", "Reset Options to the Agent's Configuration", self.reset_options),
            add("prompt.new_message", "Inspect a New Message (Not a Stored Turn)", self.use_new_message),
        ):
            action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        for button, cid, short in (
            (self.copy_json_btn, "prompt.copy_json", "Copy JSON"),
            (self.copy_openai_btn, "prompt.copy_openai", "Copy OpenAI Messages"),
            (self.reset_btn, "prompt.reset_options", "Reset"),
        ):
            action = self.commands.action(cid)
            action.setIconText(short)
            action.setToolTip(f"{action.text()} ({action.shortcut().toString()})" if not action.shortcut().isEmpty()
                              else action.text())
            button.setDefaultAction(action)
        self.commands.refresh_enabled()


    def palette_commands(self) -> list[Any]:
        """For the main window's registry: ``registry.add_provider(pane.palette_commands)``."""
        return self.commands.commands()

    # -- selection and refresh -------------------------------------------------------------------
    def set_selection(self, selection: Selection) -> None:
        previous = self.selection
        self.selection = selection
        if selection.thread_id is None:
            self._context = None
            self._show_empty("Pick a thread to see the prompt the engine would send for its next turn."
                             if selection.resource_id is None else
                             "Pick one of this resource's threads: a prompt is assembled for a thread.")
            return
        self.turn_radio.setEnabled(selection.message_id is not None)
        self.turn_label.setText(f"message {selection.message_id[:8]}…" if selection.message_id else "")
        self._syncing = True
        if selection.message_id is not None:
            self.turn_radio.setChecked(True)
        else:
            self.new_radio.setChecked(True)
        self._syncing = False
        self._mode_changed(schedule=False)
        if previous.thread_id != selection.thread_id or self._context is None:
            self._load_context(reset_options=True)
        else:
            self.schedule()

    def _load_context(self, *, reset_options: bool) -> None:
        thread_id = self.selection.thread_id
        self.status.setText("Loading thread…")
        self.session.run(
            lambda: agent_for_thread(self.session.store, thread_id),
            on_result=alive_only(self, lambda ctx: self._on_context(ctx, thread_id, reset_options)),
            on_error=alive_only(self, self._on_error), key=self._key + "-ctx",
        )

    def _on_context(self, ctx: AgentChoice, thread_id: str | None, reset_options: bool) -> None:
        if thread_id != self.selection.thread_id:
            return
        previous_agent = self.agent_combo.currentData() if not reset_options else None
        self._context = ctx
        thread = ctx.thread
        self.title.setText((thread.title if thread else "") or thread_id or "")
        resource = thread.resource_id if thread else self.selection.resource_id
        self.subtitle.setText(f"thread {thread_id} · resource {resource or '?'}")
        self._syncing = True
        self.agent_combo.clear()
        for agent in ctx.agents:
            self.agent_combo.addItem(f"Agent '{agent.name}'", agent.name)
        self.agent_combo.addItem(DEFAULTS_LABEL, None)
        wanted = previous_agent if previous_agent is not None else (ctx.agent.name if ctx.agent else None)
        index = self.agent_combo.findData(wanted) if wanted is not None else self.agent_combo.count() - 1
        self.agent_combo.setCurrentIndex(max(index, 0))
        self._syncing = False
        if reset_options or self._start is None:
            chosen = self._agent_named(wanted)
            self._apply_start(chosen, ctx.reason if chosen is ctx.agent else "chosen by you")
        self.schedule()

    def _agent_named(self, name: str | None) -> AgentConfig | None:
        if self._context is None or name is None:
            return None
        return next((a for a in self._context.agents if a.name == name), None)

    def _apply_start(self, agent: AgentConfig | None, reason: str) -> None:
        try:
            self._start = starting_point(agent, reason)
        except Exception as exc:  # noqa: BLE001 - an agent registered by a newer engine
            self._start = starting_point(None, f"agent config unreadable: {exc}")
        self._set_controls(self._start.options)
        self.origin_label.setText(self._start.origin)
        self.origin_label.setToolTip(self._start.origin)

    def _set_controls(self, opts: InspectorOptions) -> None:
        self._syncing = True
        self.last_spin.setValue(opts.last_messages)
        self.recall_check.setChecked(opts.recall)
        self.topk_spin.setValue(opts.top_k)
        self.scope_combo.setCurrentText(opts.scope)
        self.readonly_check.setChecked(opts.read_only)
        self._syncing = False
        self._update_option_states()

    def _update_option_states(self) -> None:
        self.topk_spin.setEnabled(self.recall_check.isChecked())
        self.scope_combo.setEnabled(self.recall_check.isChecked())

    def options(self) -> InspectorOptions:
        return InspectorOptions(
            last_messages=self.last_spin.value(), recall=self.recall_check.isChecked(),
            top_k=self.topk_spin.value(), scope=self.scope_combo.currentText(),  # type: ignore[arg-type]
            read_only=self.readonly_check.isChecked(),
        )

    def _options_changed(self, *_: Any) -> None:
        self._update_option_states()
        if self._syncing:
            return
        changed = self._start is not None and self.options() != self._start.options
        self.origin_label.setText((self._start.origin if self._start else "") + ("  · modified" if changed else ""))
        self.schedule()

    def _agent_chosen(self, _index: int) -> None:
        if self._syncing or self._context is None:
            return
        name = self.agent_combo.currentData()
        self._apply_start(self._agent_named(name), "chosen by you" if name else "chosen by you: defaults")
        self.schedule()

    def _mode_changed(self, *, schedule: bool = True) -> None:
        turn = self.turn_radio.isChecked()
        self.message_edit.setEnabled(not turn)
        if schedule and not self._syncing:
            self.schedule()

    def use_new_message(self) -> None:
        self.new_radio.setChecked(True)

    def reset_options(self) -> None:
        if self._start is not None:
            self._set_controls(self._start.options)
            self.origin_label.setText(self._start.origin)
            self.schedule()

    def _on_db_changed(self) -> None:
        if self.selection.thread_id is not None and self._context is not None:
            self._load_context(reset_options=False)

    # -- assembling ------------------------------------------------------------------------------
    def schedule(self) -> None:
        if self.selection.thread_id is None or self._context is None:
            return
        self._debounce.start()

    def request(self) -> PreviewRequest | None:
        if self.selection.thread_id is None or self._context is None:
            return None
        start = self._start or starting_point(None, "")
        agent = self._agent_named(self.agent_combo.currentData())
        turn = self.turn_radio.isChecked() and self.selection.message_id is not None
        return PreviewRequest(
            thread_id=self.selection.thread_id,
            resource_id=self._context.thread.resource_id if self._context.thread else self.selection.resource_id,
            base=start.base if start.base is not None else MemoryOptions(),
            options=self.options(),
            memory_name=agent.memory_name if agent else "default",
            text="" if turn else self.message_edit.text(),
            instructions=self.instructions_edit.text(),
            message_id=self.selection.message_id if turn else None,
        )

    def assemble_now(self) -> None:
        self._debounce.stop()
        req = self.request()
        if req is None:
            return
        self._busy = True
        self.status.setText("Assembling…" if req.options.recall is False else "Assembling (semantic recall)…")
        store = self.session.store
        factory = lambda o, n, e: self.session.memory(o, name=n, embedder=e)  # noqa: E731
        self.session.run(
            lambda: assemble_preview(store, req, factory, EMBEDDERS),
            on_result=alive_only(self, self._on_preview), on_error=alive_only(self, self._on_error), key=self._key,
        )

    @property
    def busy(self) -> bool:
        return self._busy or self._debounce.isActive()

    def _on_preview(self, preview: Preview) -> None:
        self._busy = False
        self.preview = preview
        prompt = preview.prompt
        self.banner.hide()
        if preview.notes:
            self.banner.show_message(" ".join(preview.notes), "info")
        self.fragment_model.set_rows(fragment_rows(prompt))
        self.skip_model.set_rows(skipped_rows(prompt))
        self.processors_label.setText("Ran, in order: " + " → ".join(prompt.processors) if prompt.processors
                                      else "No memory processors ran.")
        self.bar.set_usage(context_usage(prompt))
        if preview.turn is not None:
            when = format_datetime(preview.turn.created_at)
            first = preview.turn.input.id[:8] if preview.turn.input is not None else "?"
            self.turn_label.setText(f"as of {when} (turn starts at {first})")
            if preview.turn.input is not None:
                self._syncing = True
                self.message_edit.setText(preview.turn.input.text)
                self._syncing = False
        self.status.setText(
            f"{len(prompt.fragments)} fragments · {len(prompt.messages)} messages · "
            f"{prompt.total_tokens:,} tokens · {len(prompt.tools)} tool(s) · tokenizer {prompt.tokenizer}"
        )
        self.commands.refresh_enabled()
        if self.fragment_model.rowCount():
            self.fragment_table.selectRow(self._first_interesting_row())
        self.assembled.emit(preview)

    def _first_interesting_row(self) -> int:
        rows = self.fragment_model.rows()
        for i, r in enumerate(rows):
            if r.kind == "memory":
                return i
        return 0

    def _on_error(self, exc: BaseException) -> None:
        self._busy = False
        message = str(exc) or type(exc).__name__
        self.banner.show_message(message, "error")
        self.status.setText("The prompt could not be assembled.")
        self.failed.emit(message)

    def _show_empty(self, text: str) -> None:
        self.preview = None
        self.title.setText("No thread selected")
        self.subtitle.setText("")
        self.fragment_model.set_rows([])
        self.skip_model.set_rows([])
        self.bar.set_usage(None)
        self.detail_text.load("")
        self.detail_sources.setText("")
        self.status.setText(text)
        self.commands.refresh_enabled()

    def _fragment_selected(self, selected: QItemSelection, _deselected: QItemSelection) -> None:
        indexes = selected.indexes()
        row = self.fragment_model.row_at(indexes[0].row()) if indexes else None
        if row is None:
            return
        self.detail_header.setText(fragment_header(row))
        if row.stored_ids:
            links = ", ".join(f'<a href="{i}">{i}</a>' for i in row.stored_ids[:12])
            more = f" and {len(row.stored_ids) - 12} more" if len(row.stored_ids) > 12 else ""
            self.detail_sources.setText(f"From stored messages: {links}{more}")
        else:
            what = {"instructions": "agent instructions", "input": "the new input (not stored yet)",
                    "tools": "tool definitions offered to the model"}.get(row.kind, "generated by " + row.source)
            self.detail_sources.setText(f"Not from a stored message: {what}")
        self.detail_text.set_language("json" if row.role == "tool defs" else "markdown")
        self.detail_text.load(row.text)

    # -- copy ------------------------------------------------------------------------------------
    def copy_json(self) -> None:
        if self.preview is not None:
            text = self.preview.prompt.to_json()
            QGuiApplication.clipboard().setText(text)
            self.status.setText(f"Copied the assembly record as JSON ({len(text):,} characters).")

    def copy_openai(self) -> None:
        if self.preview is not None:
            text = self.preview.prompt.openai_messages_json()
            QGuiApplication.clipboard().setText(text)
            self.status.setText(f"Copied {len(self.preview.prompt.messages)} OpenAI messages ({len(text):,} characters).")
