"""Prompt inspector: the exact prompt the engine would send for a thread, with where each part came from.

For a stored turn it rebuilds what was sent (its record: every model call's whole request, with the
agent's options; a what-if when the options here are changed), and its Request tab shows each call's
model, endpoint, settings, tool definitions with their token counts, and the usage the server reported
beside our o200k estimate.

Everything shown comes from ``Memory.assemble``'s record (``AssembledPrompt``), built in a worker
(``studio.reads.assemble_preview``). The options start from the thread's agent, chosen by
``core.agent_configs.agent_for_thread``: the rule ``memory-studio prompt`` uses too.
Option changes are debounced, and each assembly is submitted under one key so a slower, older result
is dropped rather than painted over a newer one. Nothing here writes to the database.
"""

from __future__ import annotations

import html

from typing import Any

from PySide6.QtCore import QItemSelection, QSignalBlocker, Qt, QTimer, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QButtonGroup,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QRadioButton,
    QScrollArea,
    QSplitter,
    QTabWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from core import AssembledPrompt, MemoryOptions
from core.agent_configs import AgentChoice, AgentConfig, agent_for_thread
from studio.commands import Command, CommandRegistry
from studio.logic.prompt_layout import (
    EmbedderHolder,
    FragmentRow,
    InspectorOptions,
    Preview,
    PreviewRequest,
    SkipRow,
    StartingPoint,
    context_usage,
    options_ran_with,
    fragment_header,
    fragment_rows,
    skipped_rows,
    starting_point,
    token_sum_text,
    turn_input_ids,
)
from studio.logic.dates import format_datetime
from studio.logic.memory_config import ignored_options_note
from studio.logic.replay_layout import call_labels
from studio.logic.recall_detail import RecalledRow, fmt_score, recalled_rows
from studio.logic.short_ids import short_id
from studio.logic.thread_labels import header_tip, header_title, resource_label, resource_tip, shown_title
from studio.reads import assemble_preview
from studio.logic.checks_layout import PinTarget
from studio.logic.edit_marks import changed_since, edited_note, sources_note
from studio.selection import Selection
from studio.session import StudioSession
from studio.widgets.banner import Banner
from studio.widgets.fit_to_pane import FitToPane
from studio.widgets.fitted_label import FittedLabel
from studio.widgets.fragment_actions import fragment_menu, popup
from studio.widgets.code_editor import PART_NOTES_HINT, CodeEditor
from studio.widgets.context_bar import ContextBar
from studio.widgets.inspector_options import InspectorOptionsBar
from studio.logic.row_match import same_fragment
from studio.widgets.plain_tip import rich_tip
from studio.widgets.pane_header import alive_only, caption, elastic, pane_header, pane_layout, status_label
from studio.widgets.record_table import RIGHT, Column, RecordTableModel, keep_rows_in_sight, record_table_view
from studio.widgets.request_view import RequestPanel
from studio.widgets.scroll_fit import least_height_at_width, stack_when_narrow
from studio.widgets.a11y import label_for, named
from studio.theme import TONES

NO_INSTRUCTIONS = "none — the agent recorded no instructions (type some to add them)"
DEBOUNCE_MS = 250
MAX_LINE_CHARS = 2**31 - 1  # QLineEdit's own limit is 32,767 characters
MIN_FRAGMENT_ROWS = 4  # the fragment table keeps at least this many rows in sight
STACKED_FRAGMENT_ROWS = 6  # the fragment table's rows in sight while the request tabs are under the detail
STACKED_REQUEST_LINES = 14  # lines of text the request tabs keep under the fragment's detail (stacked)
NO_STORED_TURN = "(pick a message in Messages)"  # beside the Stored turn radio while it is off
NO_STORED_TURN_TIP = ("Stored turn rebuilds the prompt a stored turn was sent: pick one of the thread's messages "
                      "in the Messages pane (its turn opens here)")
STORED_TURN_TIP = "The prompt the turn of the message picked in the Messages pane was sent, rebuilt"
MIGRATE_COMMAND = "file.migrate"
OBSERVATIONS_COMMAND = "view.tab.observations"  # an observation block's record is edited there
MIGRATE_HINT_TEXT = "memory-studio migrate"  # recall errors that only a migration fixes say this
EMBEDDERS = EmbedderHolder()  # one embedding model per process, loaded on the first recall preview
DEFAULTS_LABEL = "Defaults (no agent)"


def _first_colour(row: FragmentRow) -> str | None:
    """A row whose messages the next turn first observes stands out (``OBSERVED_FIRST_MARK``)."""
    return TONES["dark"]["warning"] if row.observed_first else None  # (shaded to stay readable on a light theme)


def _text_tip(row: FragmentRow) -> str:
    return f"{row.observed_first_tip}\n\n{row.preview}" if row.observed_first else row.preview


FRAGMENT_COLUMNS: list[Column[FragmentRow]] = [
    Column("#", lambda r: r.index, RIGHT, tooltip=lambda r: r.observed_first_tip, foreground=_first_colour),
    Column("Role", lambda r: r.role, tooltip=lambda r: r.observed_first_tip, foreground=_first_colour),
    Column("Source", lambda r: r.source, color=lambda r: r.color),
    Column("Stored messages", lambda r: r.stored_label, tooltip=lambda r: "\n".join(r.stored_ids)),
    Column("Score", lambda r: r.score_label, RIGHT, tooltip=lambda r: r.score_tip),
    Column("Tokens", lambda r: f"{r.tokens:,}", RIGHT),
    Column("Share", lambda r: f"{100 * r.share:.1f}%", RIGHT),
    Column("Text", lambda r: r.text_label, tooltip=_text_tip, foreground=_first_colour),
]

# The fragments fitted to their table (at a 720 px window its columns ran ~10 px past its edge, Tokens, Share
# and Text behind a sideways scroll bar): numbers whole, Source and the stored ids sharing the rest, the text
# the rest; while the table cannot hold them all, Share (the context bar above says it by source), Score and the
# stored ids (the fragment's detail says them) give way, in that order.
FRAGMENT_SAMPLES = {"#": "00", "Role": "assistant", "Score": "0.000", "Tokens": "00,000", "Share": "100.0%"}
RECALLED_SAMPLES = {"Message": "…2d46ecda", "Score": "0.000", "Vector": "0.000", "Keyword": "00.000",
                    "Role": "assistant"}
RECALLED_COLUMNS: list[Column[RecalledRow]] = [
    Column("Message", lambda r: short_id(r.message_id),
           tooltip=lambda r: f"message {shown_title(r.message_id)}\nthread {shown_title(r.thread_id or '?')}"),
    Column("Found as", lambda r: r.found_as, tooltip=lambda r: r.found_tip,
           foreground=lambda r: None if r.hit else "#8A8F98"),
    Column("Score", lambda r: fmt_score(r.score), RIGHT,
           tooltip=lambda r: f"score {fmt_score(r.score) or '(none)'} · vector {fmt_score(r.vector) or '(none)'}"
                             f" · keyword {fmt_score(r.keyword) or '(none)'} · role {r.role}"),
    Column("Vector", lambda r: fmt_score(r.vector), RIGHT, tooltip=lambda r: "cosine similarity to the query"),
    Column("Keyword", lambda r: fmt_score(r.keyword), RIGHT, tooltip=lambda r: "keyword score (BM25 on libSQL, ts_rank on Postgres)"),
    Column("Thread", lambda r: short_id(r.thread_id) if r.thread_id else "this thread",
           tooltip=lambda r: r.thread_id or "this thread"),
    Column("Role", lambda r: r.role),
]

SKIP_COLUMNS: list[Column[SkipRow]] = [
    Column("Processor", lambda r: r.processor),
    Column("Why it added nothing", lambda r: r.reason, tooltip=lambda r: r.reason),
]



class PromptInspectorPane(QWidget):
    assembled = Signal(object)  # Preview
    failed = Signal(str)
    open_message = Signal(str)  # a stored message id the user wants to see in the message view
    request_command = Signal(str)  # a main-window command this pane offers (e.g. Migrate Database…)
    edit_requested = Signal(str)  # Edit Stored Message…: the message behind a fragment
    pin_requested = Signal(object)  # Pin…: a PinTarget (a memory check of this stored turn)

    def __init__(self, session: StudioSession, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("promptInspector")
        self.session = session
        self.selection = Selection()
        self.preview: Preview | None = None
        self._shown: AssembledPrompt | None = None  # the prompt of the model call on screen
        self._rows_thread: str | None = None  # the thread whose prompt the fragment table shows
        self._context: AgentChoice | None = None
        self._start: StartingPoint | None = None
        self._key = f"prompt-inspector-{id(self)}"
        self._busy = False
        self._syncing = False
        # The next message the user typed: the field shows a stored turn's message while one is shown, and gets
        # this back after (it was left holding that turn's text, which then went, as if typed, into the prompt
        # of the next thread picked; and what was typed was gone).
        self._typed = ""
        self._unread: str | None = None  # the thread whose read failed (a server gone): read again at the next change
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
        self.turn_label = elastic(QLabel(""))
        self.turn_label.setStyleSheet("color: palette(placeholder-text);")
        self.message_edit = QLineEdit()
        self.message_edit.setPlaceholderText("Type the next user message (empty: what memory alone contributes)")
        named(self.message_edit, "Next user message")
        mode.addWidget(self.new_radio)
        mode.addWidget(self.message_edit, 1)
        mode.addWidget(self.turn_radio)
        mode.addWidget(self.turn_label)
        root.addLayout(mode)
        self.instructions_edit = QLineEdit()
        self.instructions_edit.setPlaceholderText(NO_INSTRUCTIONS)
        # A line edit keeps 32,767 characters unless told otherwise: longer instructions (or a pasted
        # message) were cut silently, and the prompt shown was not the agent's.
        for edit in (self.message_edit, self.instructions_edit):
            edit.setMaxLength(MAX_LINE_CHARS)
        instr = QHBoxLayout()
        instr_label = label_for("Instructions", self.instructions_edit)
        instr_label.setMinimumWidth(self.new_radio.sizeHint().width())
        instr.addWidget(instr_label)
        instr.addWidget(self.instructions_edit, 1)
        root.addLayout(instr)

        # Options, starting from the thread's agent config.
        self.options_bar = InspectorOptionsBar()
        ob = self.options_bar
        self.agent_combo, self.origin_label, self.reset_btn = ob.agent_combo, ob.origin_label, ob.reset_btn
        self.last_spin, self.budget_spin, self.recall_check = ob.last_spin, ob.budget_spin, ob.recall_check
        self.topk_spin, self.threshold_spin, self.scope_combo = ob.topk_spin, ob.threshold_spin, ob.scope_combo
        self.before_spin, self.after_spin = ob.before_spin, ob.after_spin
        self.wm_check, self.om_check, self.readonly_check = ob.wm_check, ob.om_check, ob.readonly_check
        root.addWidget(ob)

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
        self.fragment_table = named(record_table_view(self.fragment_model), "Prompt fragments")
        self.fragment_fit = FitToPane(self.fragment_table, FRAGMENT_SAMPLES, {"Source": 0.5, "Stored messages": 0.5},
                                      last="Text", floors={"Source": "message-hist", "Stored messages": "…494e77"},
                                      caps={"Source": "observational-memory", "Stored messages": "record …494e774c"},
                                      rest_sample="You are a tra", decorated=("Source",),
                                      optional=("Share", "Score", "Stored messages"))
        ul.addWidget(self.fragment_table)
        # The prompt's fragments are what this pane is for: never squeezed below a few rows (asked through the
        # table's own watch, which had set its 3 rows again, a sideways bar's height over it, at 720 px).
        keep_rows_in_sight(self.fragment_table, MIN_FRAGMENT_ROWS)
        split.addWidget(upper)

        lower = QSplitter(Qt.Orientation.Horizontal)
        lower.setChildrenCollapsible(False)  # (a part is never dragged away to nothing)
        detail = QWidget()
        dl = QVBoxLayout(detail)
        dl.setContentsMargins(0, 0, 0, 0)
        # Its time and score wrap, never cut off by the Request side, and a crowded pane never cuts its
        # lines either (a themed window of 700 px gave it four of five: ``FittedLabel``).
        self.detail_header = FittedLabel("Fragment")
        self.detail_header.setObjectName("caption")
        bold = self.detail_header.font()
        bold.setBold(True)
        self.detail_header.setFont(bold)
        self.detail_sources = elastic(QLabel(""), wrap=True)  # a long list of message ids wraps
        self.detail_sources.setTextFormat(Qt.TextFormat.RichText)
        self.detail_sources.linkActivated.connect(self._source_link)
        self.detail_text = named(CodeEditor("markdown", read_only=True), "Selected fragment's text")
        self.recalled_model: RecordTableModel[RecalledRow] = RecordTableModel(RECALLED_COLUMNS, self)
        self.recalled_table = named(record_table_view(self.recalled_model), "Recalled messages")
        # Fitted to the fragment's side (at a 1,440 px window Thread and Role were past its edge); the
        # neighbour's "Found as" gives way first, ending in "…", whole on hover. In a narrower side (a
        # 1,100 px window, ~360 px) Role, then Keyword are left out rather than scrolled to (Score's
        # tooltip says both).
        self.recalled_fit = FitToPane(self.recalled_table, RECALLED_SAMPLES, {"Thread": 1.0}, last="Found as",
                                      floors={"Thread": "liwei-l"}, caps={"Thread": "a-thread-id-of-some"},
                                      rest_sample="neighbour", pad=16, optional=("Role", "Keyword"))
        # Two rows at least (not three): it shares the fragment's side with the fragment's text, and at a
        # 1,100 x 900 window a third row made the pane taller than its page.
        keep_rows_in_sight(self.recalled_table, 2)
        self.recalled_table.hide()
        actions = QHBoxLayout()
        self.edit_btn = QToolButton(self)
        self.edit_btn.setText("Edit Stored Message…")
        self.edit_btn.setObjectName("editStoredMessage")
        self.pin_btn = QToolButton(self)
        self.pin_btn.setText("Pin…")
        self.pin_btn.setObjectName("pinFragment")
        for button in (self.edit_btn, self.pin_btn):
            button.setEnabled(False)
            actions.addWidget(button)
        actions.addStretch(1)
        # The header on a line of its own, the whole width: beside the two buttons it had a third of a
        # narrow pane and wrapped to five lines, more than a crowded pane gave it.
        dl.addWidget(self.detail_header)
        dl.addLayout(actions)
        dl.addWidget(self.detail_sources)
        detail_split = QSplitter(Qt.Orientation.Vertical)  # recalled messages above the fragment's text
        detail_split.setChildrenCollapsible(False)  # (a part is never dragged away to nothing)
        detail_split.addWidget(self.recalled_table)
        detail_split.addWidget(self.detail_text)
        detail_split.setSizes([140, 160])
        dl.addWidget(detail_split, 1)
        lower.addWidget(detail)
        self.side_tabs = QTabWidget()
        self.side_tabs.setObjectName("inspectorSideTabs")
        request = QWidget()
        rl = QVBoxLayout(request)
        rl.setContentsMargins(0, 0, 0, 0)
        self.call_combo = QComboBox()
        self.call_combo.setObjectName("inspectorCall")
        named(self.call_combo, "Model call")
        self.call_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.call_combo.setMinimumContentsLength(20)
        self.call_combo.currentIndexChanged.connect(self._call_chosen)
        rl.addWidget(self.call_combo)
        self.request_view = RequestPanel()
        rl.addWidget(self.request_view, 1)
        skip = QWidget()
        sl = QVBoxLayout(skip)
        sl.setContentsMargins(0, 0, 0, 0)
        sl.addWidget(caption("Processors that added nothing"))
        self.skip_model: RecordTableModel[SkipRow] = RecordTableModel(SKIP_COLUMNS, self)
        self.skip_table = named(record_table_view(self.skip_model), "Processors that added nothing")
        self.skip_table.horizontalHeader().setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        self.processors_label = elastic(QLabel(""))
        self.processors_label.setWordWrap(True)
        self.processors_label.setStyleSheet("color: palette(placeholder-text);")
        sl.addWidget(self.skip_table)
        sl.addWidget(self.processors_label)
        # The request's tables (usage, settings, tools) asked ~350 px of height: in a window of 800 px the
        # splitter gave the prompt's own table what was left, one row. They scroll in their tab instead.
        request_scroll = QScrollArea()
        request_scroll.setObjectName("inspectorRequestScroll")
        request_scroll.setWidgetResizable(True)
        request_scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        request_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        request_scroll.setWidget(request)
        self.side_tabs.addTab(request_scroll, "Request")
        self.side_tabs.addTab(skip, "Skipped")
        lower.addWidget(self.side_tabs)
        lower.setSizes([540, 460])
        # Narrower than the fragment's detail and the request tabs need side by side, the tabs go under the
        # detail (they were cut at the pane's edge); the table's least height is taken at the width it has.
        # (the request scrolls up and down only: side by side the tabs need its least width, not a scroll area's)
        stack_when_narrow(lower, share=55, needs={1: lambda: max(request.minimumSizeHint().width() + 8,
                                                                 self.side_tabs.minimumSizeHint().width())},
                          stacked=self._stacked)
        least_height_at_width(upper)
        # The detail asks at least its hint, and more where its wrapped header and sources need more lines at the
        # width it has (with the theme's 10 pt font at a 900 px window they left its text 40 px of its 56)
        least_height_at_width(detail, grow=True, shrink=False)
        split.addWidget(lower)
        split.setSizes([250, 330])
        split.setStretchFactor(0, 1)
        split.setStretchFactor(1, 1)
        split.setChildrenCollapsible(False)
        root.addWidget(split, 1)

        self.status = status_label()
        root.addWidget(self.status)

        ob.changed.connect(self._options_changed)
        ob.agent_chosen.connect(self._agent_chosen)
        self.message_edit.textChanged.connect(self.schedule)
        self.instructions_edit.textChanged.connect(self.schedule)
        self.mode_group.buttonToggled.connect(lambda *_: self._mode_changed())
        self.fragment_table.selectionModel().selectionChanged.connect(self._fragment_selected)
        self.fragment_table.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.fragment_table.customContextMenuRequested.connect(self._fragment_menu)
        self.edit_btn.clicked.connect(self._edit_selected)
        self.pin_btn.clicked.connect(self.pin_selected)

    def _stacked(self, stacked: bool) -> None:
        """The request tabs went under the fragment's detail (``stacked``) or beside it again. Stacked, the
        tabs had their least, two lines of the request, and the fragment table 3 rows at 720 x 800: both ask
        a reading's worth there, and the page scrolls to them."""
        keep_rows_in_sight(self.fragment_table, STACKED_FRAGMENT_ROWS if stacked else MIN_FRAGMENT_ROWS)
        lines = STACKED_REQUEST_LINES * self.side_tabs.fontMetrics().lineSpacing()
        self.side_tabs.setMinimumHeight(lines if stacked else 0)

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


    def palette_commands(self) -> list[Command]:
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
        # Disabled, the radio (and Pin…, which pins a stored turn) said nothing of why: the label says what to do.
        self.turn_label.setText(f"message {short_id(selection.message_id)}" if selection.message_id
                                else NO_STORED_TURN)
        self.turn_radio.setToolTip(STORED_TURN_TIP if selection.message_id else NO_STORED_TURN_TIP)
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
            on_error=alive_only(self, lambda exc: self._on_context_error(thread_id, exc)), key=self._key + "-ctx",
        )

    def _on_context_error(self, thread_id: str | None, exc: BaseException) -> None:
        """The selected thread could not be read: the header and the agent's options shown are the thread read
        before, and a reassembly would send that thread's resource with this thread (which the engine refuses
        with a sentence about ownership). Forget them; Reassemble reads the thread again."""
        if thread_id != self.selection.thread_id:
            return
        self._context = None
        self._start = None
        self.title.setText(shown_title(thread_id) if thread_id else "No thread selected")
        self.title.setToolTip("")
        self.subtitle.setText(f"thread {shown_title(thread_id or '')} could not be read; it is read again when the "
                              "database changes or its server answers again (Reassemble, F5, tries now)")
        self.subtitle.setToolTip("")
        self.options_bar.set_origin("")
        # (the agents, options and instructions of the thread read before, another agent's maybe, go too)
        self.options_bar.set_agents([], -1)
        self._syncing = True
        self.instructions_edit.setText("")
        self._syncing = False
        self.instructions_edit.setPlaceholderText("not known: the thread could not be read")
        self._unread = thread_id
        self._on_error(exc)

    def _on_context(self, ctx: AgentChoice, thread_id: str | None, reset_options: bool) -> None:
        if thread_id != self.selection.thread_id:
            return
        previous_agent = self.agent_combo.currentData() if not reset_options else None
        self._context = ctx
        self._unread = None
        self.instructions_edit.setPlaceholderText(NO_INSTRUCTIONS)
        thread = ctx.thread
        resource = thread.resource_id if thread else self.selection.resource_id
        # (a delegation's resource as the tree names it, an untitled delegation thread too; the stored ids on hover)
        known = self.session.delegations
        self.title.setText(header_title(thread.title if thread else None, thread_id or "", resource, known))
        named = resource_label(resource, known) if resource else "?"
        self.subtitle.setText(f"thread {shown_title(thread_id or '')} · resource {named}")
        self.subtitle.setToolTip(header_tip(self.subtitle.text(), resource, known))
        tip = resource_tip(resource or "", known)
        self.title.setToolTip(f"{self.title.text()}\nthread id: {shown_title(thread_id or '')}\n{tip}" if tip else "")
        items: list[tuple[str, Any]] = [(f"Agent '{a.name}'", a.name) for a in ctx.agents] + [(DEFAULTS_LABEL, None)]
        wanted = previous_agent if previous_agent is not None else (ctx.agent.name if ctx.agent else None)
        names = [data for _text, data in items]
        self.options_bar.set_agents(items, names.index(wanted) if wanted in names else len(items) - 1)
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
        self.options_bar.set_options(self._start.options)
        self.options_bar.set_origin(self._start.origin)
        # The agent's instructions are part of what the model reads: start from those it recorded.
        with QSignalBlocker(self.instructions_edit):
            self.instructions_edit.setText((agent.instructions if agent is not None else None) or "")
            self.instructions_edit.setCursorPosition(0)  # shown from their start, not their tail

    def options(self) -> InspectorOptions:
        return self.options_bar.options()

    def _options_changed(self) -> None:
        changed = self._start is not None and self.options() != self._start.options
        self.options_bar.set_origin(self._start.origin if self._start else "", modified=changed)
        self.schedule()

    def _agent_chosen(self) -> None:
        if self._context is None:
            return
        name = self.agent_combo.currentData()
        self._apply_start(self._agent_named(name), "chosen by you" if name else "chosen by you: defaults")
        self.schedule()

    def _mode_changed(self, *, schedule: bool = True) -> None:
        turn = self.turn_radio.isChecked()
        was_typing = self.message_edit.isEnabled()
        self.message_edit.setEnabled(not turn)
        if turn and was_typing:
            self._typed = self.message_edit.text()
        elif not turn and not was_typing:
            syncing, self._syncing = self._syncing, True
            self.message_edit.setText(self._typed)  # (not the stored turn's message, shown while it was)
            self._syncing = syncing
            self.message_edit.setToolTip("")  # (the stored turn's text, while it was shown)
        if schedule and not self._syncing:
            self.schedule()

    def use_new_message(self) -> None:
        self.new_radio.setChecked(True)

    def reset_options(self) -> None:
        if self._start is not None:
            self.options_bar.set_options(self._start.options)
            self.options_bar.set_origin(self._start.origin)
            self.schedule()

    def _on_db_changed(self) -> None:
        if self.selection.thread_id is not None and self._context is not None:
            self._load_context(reset_options=False)
        elif self.selection.thread_id is not None and self._unread == self.selection.thread_id:
            self._load_context(reset_options=True)  # (its read failed: the server answers again, or it changed)

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
        recorded_instructions = (agent.instructions if agent is not None else None) or ""
        return PreviewRequest(
            thread_id=self.selection.thread_id,
            resource_id=self._context.thread.resource_id if self._context.thread else self.selection.resource_id,
            base=start.base if start.base is not None else MemoryOptions(),
            options=self.options(),
            memory_name=agent.memory_name if agent else "default",
            text="" if turn else self.message_edit.text(),
            instructions=self.instructions_edit.text(),
            message_id=self.selection.message_id if turn else None,
            as_recorded=turn and self.options() == start.options
            and self.instructions_edit.text() == recorded_instructions,
        )

    def assemble_now(self) -> None:
        self._debounce.stop()
        if self._context is None and self.selection.thread_id is not None:
            self._load_context(reset_options=True)  # its read failed: read it again (it assembles when read)
            return
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
        # The same thread assembled again (another program wrote to it, an option changed): the fragment
        # the user was reading stays selected when the new prompt still has it.
        kept = self.selected_fragment() if self._rows_thread == self.selection.thread_id else None
        self._rows_thread = self.selection.thread_id
        self.preview = preview
        prompt = preview.prompt
        self._shown = prompt
        self.banner.hide()
        # (options a newer version's agent registered, which this one leaves out: said with the other notes)
        ignored = ignored_options_note(self._start.agent if self._start is not None else None)
        notes = [*preview.notes, *([ignored] if ignored else [])]
        if preview.notice:  # first, as a warning: the next turn will not send this exact prompt
            self.banner.show_message(" ".join([preview.notice, *notes]), "warning")
        elif notes:
            self.banner.show_message(" ".join(notes), "info")
        self.fragment_model.set_rows(fragment_rows(prompt, turn_input_ids(prompt, preview.turn)))
        self.skip_model.set_rows(skipped_rows(prompt))
        self._fill_calls(preview)
        replay = prompt.replay
        if replay is not None:
            calls = len(replay.calls)
            self.banner.show_message(
                f"Stored turn: {replay.status}"
                + (f" — {calls} model calls; pick one under Request." if calls > 1 else ".")
                + ("" if preview.request.as_recorded else " The options or instructions here differ from the "
                   "agent's, so this is what the turn would have sent with them.")
                + (f" Stored messages it used: {edited_note(replay.changed_since)}." if replay.changed_since else "")
                + self._ran_with_note(preview) + (f" {ignored}" if ignored else ""),
                "info" if replay.exact or replay.what_if else "warning")
        self.processors_label.setText("Ran, in order: " + " → ".join(prompt.processors) if prompt.processors
                                      else "No memory processors ran.")
        self.bar.set_usage(context_usage(prompt, preview.model, preview.model_note))
        if preview.turn is not None:
            when = format_datetime(preview.turn.created_at)
            first = short_id(preview.turn.input.id) if preview.turn.input is not None else "?"
            self.turn_label.setText(f"as of {when} (turn starts at {first})")
            if preview.turn.input is not None and self.turn_radio.isChecked():  # (not over a message typed since)
                self._syncing = True
                self.message_edit.setText(preview.turn.input.text)
                # From its start (the field is off for a stored turn, so its tail was all one could see),
                # and whole in the tooltip.
                self.message_edit.setCursorPosition(0)
                self.message_edit.setToolTip(rich_tip(preview.turn.input.text[:2000]))
                self._syncing = False
        self.status.setText(self._prompt_status(prompt))
        self.pin_btn.setToolTip(self._pin_tip(self.selected_fragment()))
        self.commands.refresh_enabled()
        if self.fragment_model.rowCount():
            if kept is None:  # another thread's prompt: from its top, not where the last one's was scrolled to
                self.fragment_table.scrollToTop()
            self.fragment_table.selectRow(self._row_like(kept))
        self.assembled.emit(preview)

    def _row_like(self, kept: FragmentRow | None) -> int:
        """The row of the fragment ``kept`` names in the rows shown now (``row_match.same_fragment``), else
        the first memory fragment."""
        found = same_fragment(self.fragment_model.rows(), kept) if kept is not None else None
        if found is not None:
            return found
        return self._first_interesting_row()

    def _ran_with_note(self, preview: Preview) -> str:
        """For a turn rebuilt from its record: what it ran with that differs from the options and
        instructions shown (the agent's as registered now), since the prompt is the record's."""
        replay = preview.prompt.replay
        record = replay.record if replay is not None and replay.kind == "recorded" else None
        if record is None or not preview.request.as_recorded:
            return ""
        try:
            ran = InspectorOptions.from_memory_options(record.memory_options())
        except Exception:  # noqa: BLE001 - options a newer engine wrote: the banner says nothing of them
            return ""
        differs = options_ran_with(ran, preview.request.options)
        if "\n".join(record.instructions) != preview.request.instructions:
            differs.append("other instructions")
        if not differs:
            return ""
        return (" The options and instructions above are the agent's as registered now; this turn ran with "
                f"{'; '.join(differs)} (its prompt is rebuilt from what it ran with).")

    @staticmethod
    def _prompt_status(prompt: AssembledPrompt) -> str:
        return (f"{token_sum_text(prompt)} · {len(prompt.messages)} messages · {len(prompt.tools)} tool(s) · "
                f"tokenizer {prompt.tokenizer}")

    @property
    def shown_prompt(self) -> AssembledPrompt | None:
        """The prompt of the model call on screen (a stored turn's first call until another is picked)."""
        return self._shown if self.preview is not None else None

    def _fill_calls(self, preview: Preview) -> None:
        """One entry per model call of a stored turn (one for a preview); the first is shown."""
        prompt = preview.prompt
        calls = [c.prompt for c in prompt.replay.calls] if prompt.replay is not None and prompt.replay.calls \
            else [prompt]
        self.call_combo.blockSignals(True)
        self.call_combo.clear()
        for label in call_labels(calls):
            self.call_combo.addItem(f"Model call {label}")
        for extra in preview.requests[len(calls):]:  # the observer's first call, which the next turn makes first
            self.call_combo.addItem(extra.title)
        self.call_combo.setCurrentIndex(0)
        self.call_combo.blockSignals(False)
        self.call_combo.setVisible(self.call_combo.count() > 1)
        self.request_view.show_request(preview.requests[0] if preview.requests else None)

    def _call_chosen(self, index: int) -> None:
        preview = self.preview
        if preview is None or index < 0:
            return
        info = preview.prompt.replay
        calls = [c.prompt for c in info.calls] if info is not None and info.calls else [preview.prompt]
        if index < len(calls):
            # The table, the context bar, the status line and the copies all follow the call shown:
            # a later call of the tool loop has more messages than the first.
            self._shown = calls[index]
            self.fragment_model.set_rows(fragment_rows(calls[index], turn_input_ids(preview.prompt, preview.turn)))
            self.bar.set_usage(context_usage(calls[index], preview.model, preview.model_note))
            self.status.setText(self._prompt_status(calls[index]))
            if self.fragment_model.rowCount():
                self.fragment_table.selectRow(self._first_interesting_row())
        if index < len(preview.requests):
            self.request_view.show_request(preview.requests[index])

    def _first_interesting_row(self) -> int:
        rows = self.fragment_model.rows()
        for i, r in enumerate(rows):
            if r.kind == "memory":
                return i
        return 0

    def _on_error(self, exc: BaseException) -> None:
        self._busy = False
        message = str(exc) or type(exc).__name__
        self._clear_prompt()  # the table must not keep showing a prompt these options did not produce
        actions = [("Migrate Database…", lambda: self.request_command.emit(MIGRATE_COMMAND))] \
            if MIGRATE_HINT_TEXT in message else []
        self.banner.show_message(message, "error", actions)
        self.status.setText("The prompt could not be assembled.")
        self.failed.emit(message)

    def _clear_prompt(self) -> None:
        self.preview = None
        self.request_view.show_request(None)
        self.call_combo.clear()
        self.fragment_model.set_rows([])
        self.skip_model.set_rows([])
        self.recalled_model.set_rows([])
        self.recalled_table.hide()
        self.bar.set_usage(None)
        self.detail_header.setText("Fragment")
        self.detail_text.load("")
        self.detail_sources.setText("")
        self.edit_btn.setEnabled(False)
        self.pin_btn.setEnabled(False)
        self.pin_btn.setToolTip(self._pin_tip(None))
        self.processors_label.setText("")
        self.commands.refresh_enabled()

    def _show_empty(self, text: str) -> None:
        self.title.setText("No thread selected")
        self.title.setToolTip("")
        self.subtitle.setText("")
        self.subtitle.setToolTip("")
        self._clear_prompt()
        self.status.setText(text)

    # -- fragment actions: Edit Stored Message…, Pin… ----------------------------------------------
    def selected_fragment(self) -> FragmentRow | None:
        index = self.fragment_table.currentIndex()
        return self.fragment_model.row_at(index.row()) if index.isValid() else None

    def pin_target(self, row: FragmentRow | None = None) -> PinTarget | None:
        """What Pin… pins for a fragment: only a stored turn's prompt can be rebuilt by a check."""
        row = row or self.selected_fragment()
        preview = self.preview
        if row is None or preview is None or preview.turn is None or preview.turn.input is None:
            return None
        if not self._in_first_call(row):
            return None  # a check rebuilds the turn's first model call: this fragment would fail it at once
        turn = preview.turn.input
        return PinTarget(thread_id=preview.request.thread_id or "", resource_id=preview.request.resource_id,
                         input_text=turn.text, turn_number=None, text=row.text, source=row.source,
                         stored_ids=tuple(row.detail.get("hit_ids") or row.stored_ids))

    def _pin_tip(self, row: FragmentRow | None) -> str:
        """Why Pin… is off, and what to do, or what it does."""
        if row is not None and self.pin_target(row) is not None:
            return "Pin this fragment as a memory check"
        if self.preview is None or self.preview.turn is None:
            return ("Pin… needs a stored turn (a check rebuilds a stored turn's prompt): pick a message in the "
                    "Messages pane, then a fragment here")
        if row is None:
            return "Pick a fragment in the list above to pin it as a memory check"
        return "Pin… checks a turn's first model call, and this fragment entered at a later one"

    def _in_first_call(self, row: FragmentRow) -> bool:
        """Whether the turn's first model call (what a check rebuilds) has this fragment."""
        preview = self.preview
        if preview is None or self._shown is None or self._shown is preview.prompt:
            return True
        return any(f.source == row.source and f.text == row.text for f in preview.prompt.fragments)

    def pin_selected(self) -> None:
        target = self.pin_target()
        if target is not None:
            self.pin_requested.emit(target)

    def _edit_selected(self) -> None:
        row = self.selected_fragment()
        if row is None or not row.stored_ids:
            return
        if len(row.stored_ids) == 1:
            self.edit_requested.emit(row.stored_ids[0])
        else:
            self._fragment_menu(self.fragment_table.visualRect(self.fragment_table.currentIndex()).center())

    def _fragment_menu(self, pos: Any) -> None:
        index = self.fragment_table.indexAt(pos)
        if index.isValid():
            self.fragment_table.selectRow(index.row())
        row = self.selected_fragment()
        if row is None:
            return
        target = self.pin_target(row)
        menu = fragment_menu(self.fragment_table, row.stored_ids, self.edit_requested.emit,
                             (lambda: self.pin_requested.emit(target)) if target is not None else None,
                             "pick a stored turn: a check rebuilds a turn that ran")
        self.fragment_menu_shown = menu
        popup(menu, self.fragment_table.viewport(), pos)

    def _source_link(self, link: str) -> None:
        row = self.selected_fragment()
        if row is not None and row.observation_record is not None:  # its one link: the Observations pane
            self.request_command.emit(OBSERVATIONS_COMMAND)
        else:
            self.open_message.emit(link)

    def _fragment_selected(self, selected: QItemSelection, _deselected: QItemSelection) -> None:
        indexes = selected.indexes()
        row = self.fragment_model.row_at(indexes[0].row()) if indexes else None
        self.edit_btn.setEnabled(row is not None and bool(row.stored_ids))
        self.pin_btn.setEnabled(row is not None and self.pin_target(row) is not None)
        self.pin_btn.setToolTip(self._pin_tip(row))
        if row is None:
            return
        self.detail_header.setText(fragment_header(row))
        if row.observation_record is not None:
            self.detail_sources.setText(
                f"From the observational-memory record {html.escape(row.observation_record)}, not a stored message: "
                f'edit its observations in the <a href="observations">Observations pane</a>')
        elif row.stored_ids:
            links = ", ".join(f'<a href="{html.escape(i)}">{html.escape(i)}</a>' for i in row.stored_ids[:12])
            more = f" and {len(row.stored_ids) - 12} more" if len(row.stored_ids) > 12 else ""
            note = sources_note(changed_since(self.preview.prompt) if self.preview else {}, row.stored_ids)
            self.detail_sources.setText(f"From stored messages: {links}{more}"
                                        + (f"<br><i>{html.escape(note)}</i>" if note else ""))
        else:
            what = {"instructions": "agent instructions", "input": "the new input (not stored yet)",
                    "tools": "tool definitions offered to the model"}.get(row.kind, "generated by " + row.source)
            self.detail_sources.setText(f"Not from a stored message: {what}")
        if row.part_notes:
            self.detail_sources.setText(f"{self.detail_sources.text()}<br><i>{html.escape(PART_NOTES_HINT)}</i>")
        recalled = recalled_rows(row, self.selection.thread_id)
        self.recalled_model.set_rows(recalled)
        self.recalled_table.setVisible(bool(recalled))
        self.detail_text.set_language("json" if row.role == "tool defs" else "prose")
        self.detail_text.load(row.text, row.part_notes)

    # -- copy ------------------------------------------------------------------------------------
    def copy_json(self) -> None:
        shown = self.shown_prompt
        if shown is not None:
            text = shown.to_json()
            QGuiApplication.clipboard().setText(text)
            self.status.setText(f"Copied the assembly record as JSON ({len(text):,} characters).")

    def copy_openai(self) -> None:
        shown = self.shown_prompt
        if shown is not None:
            text = shown.openai_messages_json()
            QGuiApplication.clipboard().setText(text)
            self.status.setText(f"Copied {len(shown.messages)} OpenAI messages ({len(text):,} characters).")
