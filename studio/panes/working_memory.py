"""Working-memory editor: the value (Markdown or JSON), its saved versions, the template/schema, and
what each agent runs with.

Looking never writes. Edits are staged in the editor (its document is the undo stack) and written
only by Save, in a worker, with the loaded text as ``expected``: if the agent changed the memory in
the meantime the write is refused and both sides are shown. Undo after a save stages the value stored
before it (as History's Restore stages a version): Save writes it as a new version, checked the same way.
A read-only session disables every write action and says why.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from PySide6.QtCore import QItemSelection, QSize, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QSplitter,
    QStackedWidget,
    QTabWidget,
    QTextBrowser,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from core import ConcurrentUpdateError
from core.agent_configs import AgentConfig, save_override
from core.tokens import default_tokenizer
from studio.commands import Command, CommandRegistry
from studio.logic.dates import date_tooltip, format_datetime
from studio.logic.memory_config import ignored_options_note
from studio.logic.thread_labels import header_tip
from studio.logic.wm_editing import (
    DraftCheck,
    VersionRow,
    WmDraft,
    WmSnapshot,
    WmTarget,
    changed_paths,
    editor_size_label,
    editor_size_tip,
    pretty_json,
    save_wm,
    stored_size_label,
    switch_json_mode,
)
from studio.reads import load_wm
from studio.selection import Selection
from studio.session import DatabaseFileLostError, StudioSession
from studio.widgets.banner import Banner
from studio.widgets.code_editor import CodeEditor, error_line
from studio.widgets.conflict_view import ConflictView
from studio.widgets.content_height import grow_to_content
from studio.widgets.flow_layout import FlowLayout, labelled
from studio.widgets.pane_header import alive_only, elastic, header_bar, pane_header, pane_layout, status_label
from studio.widgets.scroll_fit import least_height_at_width
from studio.widgets.record_table import RIGHT, Column, RecordTableModel, record_table_view
from studio.widgets.template_editor import TemplateEditor
from studio.widgets.version_history import VersionHistory
from studio.widgets.plain_tip import plain_tip
from studio.theme import set_tone
from studio.widgets.a11y import named

AUTO = "__auto__"
# The rendered preview of a Markdown document longer than this follows the editor PREVIEW_DELAY_MS after the
# last keystroke rather than on each one: Qt's setMarkdown of 200 KB takes ~80 ms of the UI thread.
PREVIEW_NOW_CHARS = 20_000
PREVIEW_DELAY_MS = 300

NO_HISTORY_TEXT = ("This database has no Memory Studio tables, so saving here keeps no version history: an "
                   "earlier value cannot be compared or restored. File > Migrate Database… adds the tables "
                   "(Mastra's own data stays as it is).")

AGENT_COLUMNS: list[Column[AgentConfig]] = [
    Column("Agent", lambda a: a.name),
    Column("Memory", lambda a: a.memory_name),
    Column("Working memory", lambda a: _wm_summary(a)),
    Column("Last messages", lambda a: a.options.get("last_messages"), RIGHT),
    Column("Recall", lambda a: "on" if (a.options.get("semantic_recall") or {}).get("enabled") else "off"),
    Column("Process", lambda a: a.process or ""),
    Column("Registered", lambda a: format_datetime(a.updated_at), tooltip=lambda a: date_tooltip(a.updated_at)),
]


def _wm_summary(agent: AgentConfig) -> str:
    wm = agent.options.get("working_memory") or {}
    if not wm.get("enabled"):
        return "off"
    mode = "schema" if wm.get("schema") else "template"
    return f"{mode}, {wm.get('scope', 'resource')} scope"


class _WrappedLine(QLabel):
    """A plain-text label never cut: one line where it fits, else wrapped at its spaces; its least width is its
    longest word's. (A wrapped QLabel asks a quarter of 80 characters, so beside a title it wrapped at any
    width: "188 chars · 72 / tokens as formatted / here" in a 1,440 px window.)"""

    def __init__(self, text: str = "") -> None:
        super().__init__(text)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setWordWrap(True)

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        """Its whole text on one line (the height of that line)."""
        m = self.contentsMargins()
        flags = int(self.alignment()) | int(Qt.TextFlag.TextWordWrap)  # (measured as the label lays it out:
        # its plain advance is a pixel short, and the last word wrapped)
        line = self.fontMetrics().boundingRect(0, 0, 1 << 20, 1 << 10, flags, self.text()).width()
        width = line + m.left() + m.right() + 2 * self.margin()
        return QSize(width, max(self.heightForWidth(width), 0))


def _bold(text: str) -> QLabel:
    """A section's title: whole at any width, wrapped where its line is too short (an elastic title was cut
    with no mark: "Template the age" at a 720 px window, "Editoı" beside the editor's size)."""
    label = _WrappedLine(text)
    f = label.font()
    f.setBold(True)
    label.setFont(f)
    return label


class WorkingMemoryPane(QWidget):
    loaded = Signal(object)  # WmSnapshot
    saved = Signal(object)  # stored text
    conflict = Signal(object)  # the stored text found instead of the expected one
    failed = Signal(str)
    edit_saved_as = Signal(str)  # the editor's text was written to this file (Save Edit As…)
    config_saved = Signal(object)
    request_command = Signal(str)  # a main-window command this pane offers (File > Migrate Database…)

    def __init__(self, session: StudioSession, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("workingMemory")
        self.session = session
        self.selection = Selection()
        self.snapshot: WmSnapshot | None = None
        self.draft: WmDraft | None = None
        self._check: DraftCheck | None = None
        self._key = f"working-memory-{id(self)}"
        self._saving = False
        self._pending_note: str | None = None
        self._in_conflict = False
        self._conflict_current: str | None = None
        self._stale_warning = False  # the info banner says the stored value changed under the edit
        # What this pane saved last (owner, text, when), watched until another writer changes it: an agent's turn
        # that read the memory before the save writes its own value after it, and the pane then showed that value
        # as if nothing had happened to the edit just saved. ``_replaced`` says so until the owner changes.
        self._my_save: tuple[Any, str | None, datetime] | None = None
        self._replaced: str | None = None
        # What the last save replaced (owner, format, the text stored before it): Undo, with nothing left in the
        # editor to undo, stages it as History's Restore does (found by s33-walk5: after Save, Undo was off and only
        # History brought the previous value back). ``_saving_over``: the same, for the save under way.
        self._undo_save: tuple[Any, str, str | None] | None = None
        self._saving_over: tuple[Any, str, str | None] | None = None
        # Unsaved edits of owners the user moved away from (another resource, thread or agent), by owner and
        # format: picking that owner again brings the edit back instead of the stored text replacing it.
        self._kept: dict[tuple[WmTarget, str], tuple[WmDraft, str]] = {}
        # The template tab shows one memory's template/schema (None: nobody's); an unsaved edit of it is kept
        # aside by memory name while another memory's (or none) is shown, and never saved into another one.
        self._template_owner: str | None = None
        self._kept_templates: dict[str, tuple[str, str]] = {}
        self._build()
        self._register_commands()
        session.changed.connect(self.reload)
        session.read_only_changed.connect(lambda _ro: self._on_read_only_changed())
        session.file_lost.connect(self._on_file_lost)
        self._show_empty("Pick a resource or a thread to see its working memory.")

    # -- construction ----------------------------------------------------------------------------
    def _build(self) -> None:
        root = pane_layout(self)
        self.badges = QLabel("")
        self.badges.setTextFormat(Qt.TextFormat.RichText)
        head, self.title, _ = pane_header("Working memory", self.badges)
        self.agent_combo = QComboBox()
        self.agent_combo.setMinimumWidth(170)
        # A long agent name must not widen the pane: the combo keeps its width and the popup shows it all.
        self.agent_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.agent_combo.setMinimumContentsLength(16)
        # (the owner's name and its scope badge whole; where they and the agent config do not fit on one row,
        # a 720 px window's, the agent config goes on the row below)
        root.addWidget(header_bar(head, self.title, labelled("Agent config", self.agent_combo), beside=self.badges))
        self.agent_reason = elastic(QLabel(""), wrap=True)  # (a long reason was cut with no mark)
        self.agent_reason.setStyleSheet("color: palette(placeholder-text);")
        root.addWidget(self.agent_reason)
        self.readonly_banner = Banner()
        self.info_banner = Banner()
        self.history_banner = Banner()
        root.addWidget(self.readonly_banner)
        root.addWidget(self.info_banner)
        root.addWidget(self.history_banner)

        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(self._build_memory_tab(), "Memory")
        self.tabs.addTab(self._build_history_tab(), "History")
        self.template_editor = TemplateEditor()
        self.tabs.addTab(self.template_editor, "Template / schema")
        self.tabs.addTab(self._build_agents_tab(), "Agents")
        root.addWidget(self.tabs, 1)
        # (wrapped: it says what a save did and what to do next, cut at a 900 px window)
        self.status = status_label(wrap=True)
        root.addWidget(self.status)

        self.agent_combo.currentIndexChanged.connect(self._agent_chosen)
        self.template_editor.save_requested.connect(self._save_config)
        self.template_editor.reset_requested.connect(lambda: self._save_config("reset", None))

    def _build_memory_tab(self) -> QWidget:
        tab = QWidget()
        layout = QVBoxLayout(tab)
        layout.setContentsMargins(0, 6, 0, 0)
        # A flow, not a row: Save, Revert, Undo, Redo and "Apply as" asked 498 px in one row, and a 720 px
        # window's pane was read sideways. On one row where there is room, the saved state at its right end.
        bar_box = QWidget()
        bar = FlowLayout(bar_box)
        bar.setContentsMargins(0, 0, 0, 0)
        self.save_btn, self.revert_btn, self.undo_btn, self.redo_btn = (QToolButton() for _ in range(4))
        buttons = QWidget()  # (the four stay together)
        row = QHBoxLayout(buttons)
        row.setContentsMargins(0, 0, 0, 0)
        for b in (self.save_btn, self.revert_btn, self.undo_btn, self.redo_btn):
            row.addWidget(b)
        bar.addWidget(buttons)
        self.json_mode = QComboBox()
        self.json_mode.addItem("Whole value (replace)", "replace")
        self.json_mode.addItem("Patch (merge rules)", "merge")
        self.json_mode_box = labelled("Apply as", self.json_mode)  # (shown for a JSON memory only)
        margins = self.json_mode_box.layout()
        assert margins is not None
        margins.setContentsMargins(12, 0, 0, 0)
        bar.addWidget(self.json_mode_box)
        bar.add(QWidget(), 1)  # (what the row leaves over: the saved state goes to its right end)
        self.size_label = _WrappedLine()  # the editor's text: characters and tokens, live
        self.size_label.setStyleSheet("color: palette(placeholder-text);")
        self.size_label.setToolTip(editor_size_tip("markdown"))
        self.dirty_label = QLabel("")
        bar.addWidget(self.dirty_label)
        layout.addWidget(bar_box)

        self.editor = named(CodeEditor("markdown"), "Working memory editor")
        self.problem_label = elastic(QLabel(""), wrap=True)
        self.problem_label.setObjectName("problems")
        set_tone(self.problem_label, "error")
        self.warning_label = elastic(QLabel(""), wrap=True)
        set_tone(self.warning_label, "warning")
        # why Save is off, under the bar that has Save: under the editor, a 720 x 800 window showed the reason
        # below the fold once "Stored now" grew to its text
        for label in (self.problem_label, self.warning_label):
            label.hide()  # (shown with a problem: an empty line would leave a gap under the bar)
            layout.addWidget(label)

        # Markdown side panels: rendered preview and the template.
        self.preview = QTextBrowser()
        self.preview.setOpenLinks(False)
        self._preview_timer = QTimer(self)
        self._preview_timer.setSingleShot(True)
        self._preview_timer.setInterval(PREVIEW_DELAY_MS)
        self._preview_timer.timeout.connect(self._render_preview)
        self.template_view = CodeEditor("markdown", read_only=True)
        md_side = QSplitter(Qt.Orientation.Horizontal)
        md_side.setChildrenCollapsible(False)  # (a part is never dragged away to nothing)
        md_side.addWidget(self._titled("Rendered", self.preview))
        md_side.addWidget(self._titled("Template the agent fills in", self.template_view))
        # JSON side panels: current + patch = result.
        self.current_view = CodeEditor("json", read_only=True)
        self.result_view = CodeEditor("json", read_only=True)
        self.merge_caption = elastic(QLabel(""), wrap=True)  # "Changes: …" can list many paths
        self.merge_caption.setStyleSheet("color: palette(placeholder-text);")
        for viewer in (self.current_view, self.result_view):  # wrapped as the editor beside them is: at a 900 px
            # window a long value ran past their edge ("English for restaurant t") behind a sideways scroll bar
            viewer.setLineWrapMode(CodeEditor.LineWrapMode.WidgetWidth)
        for viewer in (self.template_view, self.current_view, self.result_view):
            grow_to_content(viewer)  # (the page scrolls, not a viewer inside it)
        js_side = QSplitter(Qt.Orientation.Vertical)
        js_side.setChildrenCollapsible(False)  # (a part is never dragged away to nothing)
        js_side.addWidget(self._titled("Stored now", self.current_view))
        # the caption (replace or merge, and the paths that change) under the title, over the viewer: under it,
        # it was below the fold of a 720 x 800 window as soon as the result was more than a few lines
        result_box = self._titled("Result after save (merge preview)", self.result_view, above=self.merge_caption)
        # (its caption's lines at the width it has: counted at one line, a wrapped caption lay over the viewer's
        # last lines once the viewer asked its whole text)
        least_height_at_width(result_box, grow=True, shrink=False)
        js_side.addWidget(result_box)
        self.side = QStackedWidget()
        self.side.addWidget(md_side)
        self.side.addWidget(js_side)

        split = QSplitter(Qt.Orientation.Horizontal)
        split.setChildrenCollapsible(False)  # (a part is never dragged away to nothing)
        # the editor's size sits on its title line
        editor_box = self._titled("Editor", self.editor, beside_title=self.size_label)
        split.addWidget(editor_box)
        split.addWidget(self.side)
        split.setSizes([520, 640])
        self.conflict_view = ConflictView()
        stack = QSplitter(Qt.Orientation.Vertical)
        stack.setChildrenCollapsible(False)  # (a part is never dragged away to nothing)
        stack.addWidget(split)
        stack.addWidget(self.conflict_view)
        layout.addWidget(stack, 1)

        self.editor.textChanged.connect(self._on_edit)
        self.editor.undoAvailable.connect(lambda _a: self._update_actions())
        self.editor.redoAvailable.connect(lambda _a: self._update_actions())
        self.json_mode.currentIndexChanged.connect(self._json_mode_changed)
        self.conflict_view.overwrite.connect(self.overwrite_with_mine)
        self.conflict_view.take_theirs.connect(self.take_theirs)
        self.conflict_view.keep_editing.connect(self.keep_editing)
        return tab

    def _titled(self, title: str, widget: QWidget, *, above: QWidget | None = None,
                beside_title: QWidget | None = None) -> QWidget:
        box = QWidget()
        bl = QVBoxLayout(box)
        bl.setContentsMargins(0, 0, 0, 0)
        bl.setSpacing(3)
        if not widget.accessibleName():
            widget.setAccessibleName(title)
        if beside_title is None:
            bl.addWidget(_bold(title))
        else:
            # the title and its details on one line where both fit (the details at its right end), else the
            # details on the line below: at a 720 px window the editor's read "Editoı 188 chars · 72 tokens a"
            title_row = QWidget()
            flow = FlowLayout(title_row)
            flow.setContentsMargins(0, 0, 0, 0)
            flow.add(_bold(title), 1)
            flow.addWidget(beside_title)
            bl.addWidget(title_row)
        if above is not None:
            bl.addWidget(above)
        bl.addWidget(widget, 1)
        return box

    def _build_history_tab(self) -> QWidget:
        self.history = VersionHistory(self._editor_value)
        h = self.history
        self.version_model, self.version_table, self.compare_combo = h.model, h.table, h.compare_combo
        self.version_diff, self.version_diff_label, self.restore_btn = h.diff, h.diff_label, h.restore_btn
        h.selection_changed.connect(self._update_actions)
        return h

    def _editor_value(self) -> tuple[str, str]:
        """What Save would store now (a patch already applied), and its format."""
        if self.draft is not None and self.draft.fmt == "json" and self._check is not None and self._check.value:
            return self._check.value, "json"
        return self.editor.toPlainText(), self.draft.fmt if self.draft else "markdown"

    def _build_agents_tab(self) -> QWidget:
        tab = QWidget()
        layout = QVBoxLayout(tab)
        layout.setContentsMargins(0, 6, 0, 0)
        self.agent_model: RecordTableModel[AgentConfig] = RecordTableModel(AGENT_COLUMNS, self)
        self.agent_table = record_table_view(self.agent_model)
        self.agent_config_view = CodeEditor("json", read_only=True)
        grow_to_content(self.agent_config_view)
        split = QSplitter(Qt.Orientation.Vertical)
        split.setChildrenCollapsible(False)  # (a part is never dragged away to nothing)
        split.addWidget(self._titled("Registered agents and the memory configuration each runs with",
                                     self.agent_table))
        # (the options of a newer version's agent this one leaves out: ``memory_config.ignored_options_note``)
        self.agent_ignored = elastic(QLabel(""), wrap=True)
        self.agent_ignored.setObjectName("agentIgnoredOptions")
        self.agent_ignored.setTextFormat(Qt.TextFormat.PlainText)
        self.agent_ignored.hide()
        split.addWidget(self._titled("Resolved configuration (as the agent registered it)", self.agent_config_view,
                                     above=self.agent_ignored))
        split.setSizes([200, 400])
        layout.addWidget(split)
        self.agent_table.selectionModel().selectionChanged.connect(self._agent_row_selected)
        return tab

    def _register_commands(self) -> None:
        self.commands = CommandRegistry(self)
        add = self.commands.add
        specs = [
            ("wm.save", "Save Working Memory", self.save, "Ctrl+S", self._can_save, self.save_btn, "Save"),
            ("wm.revert", "Revert Working Memory Edits", self.revert, None, self._is_dirty, self.revert_btn, "Revert"),
            ("wm.undo", "Undo Working Memory Edit", self.undo, None,
             lambda: self.editor.document().isUndoAvailable() or self._can_undo_save(), self.undo_btn, "Undo"),
            ("wm.redo", "Redo Working Memory Edit", self.editor.redo, None,
             lambda: self.editor.document().isRedoAvailable(), self.redo_btn, "Redo"),
            ("wm.restore_version", "Restore Selected Version into the Editor",
             self.restore_selected_version, None, self._can_restore, self.restore_btn, "Restore into Editor"),
        ]
        for cid, title, handler, shortcut, enabled, button, short in specs:
            action = add(cid, title, handler, shortcut=shortcut, enabled=enabled)
            action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            action.setIconText(short)
            button.setDefaultAction(action)
        add("wm.overwrite_mine", "Resolve Conflict: Overwrite with My Version", self.overwrite_with_mine,
            enabled=lambda: self._in_conflict and self._writable())
        add("wm.take_theirs", "Resolve Conflict: Take the Stored Version", self.take_theirs,
            enabled=lambda: self._in_conflict)
        add("wm.reload", "Reload Working Memory", self.reload)
        add("wm.save_edit_as", "Save Working Memory Edit As…", self.save_edit_as,
            enabled=lambda: self.draft is not None)
        self._update_actions()


    def palette_commands(self) -> list[Command]:
        """For the main window's registry: ``registry.add_provider(pane.palette_commands)``."""
        return self.commands.commands()

    # -- selection and loading -------------------------------------------------------------------
    def _keep_unsaved(self) -> None:
        """The pane is about to show another owner: keep the editor's unsaved edit for when it comes back."""
        snap, draft = self.snapshot, self.draft
        if snap is not None and snap.target is not None and draft is not None and self._is_dirty():
            self._kept[(snap.target, draft.fmt)] = (draft, self.editor.toPlainText())

    def set_selection(self, selection: Selection) -> None:
        if selection.resource_id is None and selection.thread_id is None:
            self._keep_unsaved()
            self.selection = selection
            self._show_empty("Pick a resource or a thread to see its working memory.")
            return
        same_owner = (selection.resource_id, selection.thread_id) == (self.selection.resource_id,
                                                                      self.selection.thread_id)
        self.selection = selection
        if not same_owner or self.snapshot is None:
            self._keep_unsaved()
            self.reload()

    def _chosen_agent(self) -> str | None:
        data = self.agent_combo.currentData()
        return None if data in (None, AUTO) else str(data)

    def reload(self) -> None:
        if self.selection.resource_id is None and self.selection.thread_id is None:
            return
        selection, agent = self.selection, self._chosen_agent()
        store = self.session.store
        self.status.setText("Loading…")
        self.session.run(lambda: load_wm(store, selection, agent), on_result=alive_only(self, self._on_loaded),
                         on_error=alive_only(self, self._on_load_error), key=self._key + "-load")

    def _on_loaded(self, snap: WmSnapshot) -> None:
        previous = self.snapshot
        self.snapshot = snap
        self._fill_agents(snap)
        fmt = snap.fmt
        scope = snap.target.scope if snap.target else snap.options.scope
        mode_badge = "JSON · schema" if fmt == "json" else "Markdown · template"
        known = self.session.delegations  # (a delegation's resource as the tree names it; the stored id on hover)
        self.title.setText(snap.target.title(known) if snap.target else "Working memory")
        self.title.setToolTip(header_tip(self.title.text(), snap.target.owner_id, known)
                              if snap.target is not None and snap.target.scope == "resource" else "")
        self.badges.setText(
            f'&nbsp;<span style="background:#2F4A66;color:#DDE;">&nbsp;{scope} scope&nbsp;</span>'
            f'&nbsp;<span style="background:#4A3A12;color:#EED;">&nbsp;{mode_badge}&nbsp;</span>'
        )
        self.agent_reason.setText(f"Configuration: {snap.agent_reason}; memory name '{snap.memory_name}'.")
        self.info_banner.hide()
        if snap.scope_note:  # the scope shown is not the configuration's: say which one and why
            self.info_banner.show_message(snap.scope_note, "info")
        if not snap.declared_enabled:
            self.info_banner.show_message(
                f"Working memory is not enabled for {('agent ' + repr(snap.agent.name)) if snap.agent else 'the defaults'}: "
                "the agent does not see or update it. Shown here as stored.", "info")
        same_target = previous is not None and previous.target == snap.target and previous.fmt == snap.fmt
        dirty = self._is_dirty()
        if snap.target is None:
            self.draft = None
            self.editor.load("")
            self.editor.setReadOnly(True)
            self.status.setText(snap.target_reason)
        elif same_target and dirty and self.draft is not None:
            if snap.text != self.draft.baseline:
                self._stale_warning = True
                self.info_banner.show_message(
                    "The stored working memory changed while you were editing (another process). "
                    "Your edit is kept; Save will show both versions before anything is overwritten.", "warning")
            self._stored_changed(snap.text)  # "Stored now" and the merge preview follow what is stored
        else:
            self._start_draft(snap)
            self._restore_kept(snap)
        replaced = self._replaced_since_save(snap)
        if replaced and not self._stale_warning:
            self.info_banner.show_message(replaced, "warning")
        if snap.target is not None:
            self._kept.pop((snap.target, snap.fmt), None)  # shown (or still in the editor): no longer kept aside
        self.version_model.set_rows(snap.version_rows())
        self.history.set_kept(snap.versions_kept, len(snap.versions))
        self._fill_template_tab(snap)
        self.tabs.setTabText(1, f"History ({len(snap.versions)})")
        self._apply_read_only()
        self._update_history_banner()
        self._update_actions()
        if snap.target is not None:
            stored = ("nothing stored yet" if snap.text is None
                      else stored_size_label(snap.text, snap.tokens, snap.fmt))
            history = f"{len(snap.versions)} saved version(s)" if snap.history_available else "no version history"
            self.status.setText(f"{history} · {stored}")
        self.loaded.emit(snap)

    def _replaced_since_save(self, snap: WmSnapshot) -> str | None:
        """What to say when another writer (an agent's turn, another process) changed the value this pane saved:
        the user's edit is no longer what is stored, and nothing else would tell them."""
        mine = self._my_save
        if mine is None or snap.target is None or snap.target != mine[0]:
            self._my_save = self._replaced = None
            return None
        if self._replaced is None and snap.text != mine[1]:
            newest = snap.versions[0] if snap.versions else None
            who = f"by {newest.author}, " if newest is not None and newest.author != "studio" else ""
            where = ("Your saved version is in History: select it and Restore brings it back."
                     if snap.history_available else "This database keeps no history, so your version is not kept.")
            self._replaced = (f"The working memory you saved at {format_datetime(mine[2])} was changed since {who}"
                              "and what is shown is stored now: your edit may not be in it (an agent's turn that "
                              f"began before your save writes what it had read). {where}")
        return self._replaced

    def _stored_changed(self, text: str | None) -> None:
        """What is stored now moved under an unsaved edit: show it, and preview the merge on it."""
        if self.draft is None:
            return
        self.draft.stored = text
        if self.draft.fmt == "json":
            self.current_view.load(pretty_json(json.loads(text)) if text else "{}")
        self._on_edit()

    def _update_history_banner(self) -> None:
        snap = self.snapshot
        if snap is not None and snap.target is not None and not snap.history_available:
            self.history_banner.show_message(NO_HISTORY_TEXT, "warning",
                                             [("Migrate Database…", lambda: self.request_command.emit("file.migrate"))])
        else:
            self.history_banner.hide()

    def _start_draft(self, snap: WmSnapshot) -> None:
        self._clear_stale_warning()
        mode = str(self.json_mode.currentData() or "replace")
        self.draft = WmDraft(snap.text, snap.fmt, snap.options.schema, snap.options.effective_template, mode)  # type: ignore[arg-type]
        is_json = snap.fmt == "json"
        self.editor.set_language("json" if is_json else "markdown")
        self.conflict_view.set_language("json" if is_json else "markdown")
        self.side.setCurrentIndex(1 if is_json else 0)
        self.json_mode_box.setVisible(is_json)
        self.template_view.load(snap.options.effective_template)
        self.current_view.load(pretty_json(json.loads(snap.text)) if is_json and snap.text else "{}")
        self._end_conflict()
        self.editor.load(self.draft.initial_text())
        self._on_edit()

    def _restore_kept(self, snap: WmSnapshot) -> None:
        """Bring back the unsaved edit made to this owner before the user looked elsewhere."""
        kept = self._kept.get((snap.target, snap.fmt)) if snap.target is not None else None
        if kept is None:
            return
        draft, text = kept
        self.draft = draft
        if draft.fmt == "json":
            self.json_mode.blockSignals(True)
            self.json_mode.setCurrentIndex(max(self.json_mode.findData(draft.json_mode), 0))
            self.json_mode.blockSignals(False)
        self.editor.load(text)
        if snap.text != draft.baseline:  # stored meanwhile: Save shows both versions, as during an edit
            self._stale_warning = True
            self.info_banner.show_message(
                "The stored working memory changed while you were editing (another process). "
                "Your edit is kept; Save will show both versions before anything is overwritten.", "warning")
            self._stored_changed(snap.text)
        else:
            self.info_banner.show_message(
                "Your unsaved edit of this working memory was kept while you looked elsewhere: "
                "Save it, or Revert to the stored text.", "info")
            self._on_edit()

    def _fill_agents(self, snap: WmSnapshot) -> None:
        chosen = self._chosen_agent()
        self.agent_combo.blockSignals(True)
        self.agent_combo.clear()
        self.agent_combo.addItem(f"Automatic ({snap.agent.name})" if snap.agent and not chosen
                                 else "Automatic", AUTO)
        for a in snap.agents:
            self.agent_combo.addItem(f"Agent '{a.name}'", a.name)
        self.agent_combo.setCurrentIndex(max(self.agent_combo.findData(chosen), 0) if chosen else 0)
        self.agent_combo.blockSignals(False)
        self.agent_model.set_rows(snap.agents)
        if snap.agent is not None and snap.agent in snap.agents:
            self.agent_table.selectRow(snap.agents.index(snap.agent))

    def _keep_template_edit(self) -> None:
        """The template tab is about to show another memory's template (or none): keep its unsaved edit."""
        edit = self.template_editor.edit()
        if self._template_owner is not None and edit is not None:
            self._kept_templates[self._template_owner] = edit

    def _fill_template_tab(self, snap: WmSnapshot) -> None:
        same_owner = self._template_owner == snap.memory_name
        if not same_owner:
            self._keep_template_edit()
        self._template_owner = snap.memory_name
        opts = snap.options
        kind = "schema" if opts.schema is not None else "template"
        text = json.dumps(opts.schema, ensure_ascii=False, indent=2) if opts.schema is not None else opts.effective_template
        current = snap.config.current if snap.config else None
        if snap.config is not None and not snap.config.available:
            effect = "This database has no Studio tables, so the template cannot be overridden here."
        elif current is not None and current.kind != "code default":
            effect = (f"In effect: Studio version #{current.id} ({current.kind}, {current.author}). "
                      f"Agents using memory '{snap.memory_name}' pick up a new version on their next turn — no restart.")
        else:
            effect = (f"In effect: the agent's own {kind}. Saving here overrides it for memory "
                      f"'{snap.memory_name}' from the agent's next turn — no restart.")
        self.template_editor.set_state(kind, text, snap.config.versions if snap.config else [], effect,
                                       keep_edit=same_owner)
        kept = None if same_owner else self._kept_templates.pop(snap.memory_name, None)
        if kept is not None:
            self.template_editor.restore_edit(*kept)

    def _agent_chosen(self, _i: int) -> None:
        self._keep_unsaved()
        self.snapshot = None  # a different agent may mean another scope, mode or template
        self.reload()

    def _agent_row_selected(self, sel: QItemSelection, _d: QItemSelection) -> None:
        idx = sel.indexes()
        agent = self.agent_model.row_at(idx[0].row()) if idx else None
        if agent is not None:
            self.agent_config_view.load(json.dumps(agent.config, ensure_ascii=False, indent=2))
        note = ignored_options_note(agent)
        self.agent_ignored.setText(note)
        self.agent_ignored.setVisible(bool(note))

    # -- editing ---------------------------------------------------------------------------------
    def unsaved_edits(self) -> int:
        """Owners whose working memory has an edit not saved: the one in the editor, and those kept aside
        while the user looked elsewhere; and memories whose template or schema has one (in the Template /
        schema tab, or kept aside). The window asks before closing them."""
        template_dirty = self._template_owner is not None and self.template_editor.edit() is not None
        return len(self._kept) + (1 if self._is_dirty() else 0) + len(self._kept_templates) + (1 if template_dirty else 0)

    def _is_dirty(self) -> bool:
        return self.draft is not None and self.draft.is_dirty(self.editor.toPlainText())

    def _writable(self) -> bool:
        return not self.session.read_only and self.snapshot is not None and self.snapshot.target is not None

    def _can_save(self) -> bool:
        return (self._writable() and not self._saving and self._is_dirty()
                and self._check is not None and self._check.ok)

    def _can_restore(self) -> bool:
        return self._writable() and self._selected_version() is not None

    def _on_edit(self) -> None:
        if self.draft is None:
            return
        text = self.editor.toPlainText()
        check = self.draft.check(text)
        self._check = check
        self.size_label.setText(editor_size_label(text, default_tokenizer().count(text), self.draft.fmt))
        self.size_label.setToolTip(editor_size_tip(self.draft.fmt))
        self.problem_label.setText("✖ " + check.problems[0] if check.problems else "")
        self.problem_label.setVisible(bool(check.problems))
        self.warning_label.setText("⚠ " + " ".join(check.warnings) if check.warnings else "")
        self.warning_label.setVisible(bool(check.warnings))
        self.editor.mark_error_line(error_line(check.problems[0]) if check.problems else None)
        if self.draft.fmt == "markdown":
            if len(text) <= PREVIEW_NOW_CHARS:
                self._preview_timer.stop()
                self.preview.document().setMarkdown(text)
            else:
                self._preview_timer.start()  # (restarted by every keystroke: rendered once typing pauses)
        else:
            p = check.preview
            # (the viewer does not wrap: "(fix the problems above to see the result)" was cut at a 720 px window)
            self.result_view.load(pretty_json(p.result) if p is not None and p.result is not None
                                  else "(fix the problems above)")
            rule = ("Merge rules: objects merge deeply, null deletes a field, arrays are replaced."
                    if self.draft.json_mode == "merge" else "The editor's object replaces the stored one.")
            if p is None or p.result is None:  # (said "No changes." beside an edit that does not parse)
                self.merge_caption.setText(rule + "  Changes: known once the problems above are fixed.")
            else:
                changes = changed_paths(p.current, p.result)
                self.merge_caption.setText(rule + ("  Changes: " + ", ".join(changes) if changes
                                                   else "  No changes."))
        self._update_actions()

    def _render_preview(self) -> None:
        if self.draft is not None and self.draft.fmt == "markdown":
            self.preview.document().setMarkdown(self.editor.toPlainText())

    def _json_mode_changed(self, _i: int) -> None:
        if self.draft is None or self.draft.fmt != "json":
            return
        before = self.editor.toPlainText()
        text, converted = switch_json_mode(self.draft, before, str(self.json_mode.currentData()))  # type: ignore[arg-type]
        if text != before:
            self.editor.replace_all(text)  # undoable: Ctrl+Z brings the edit back as it was
        if not converted:
            self.status.setText("Your edit is kept as typed: it is not a JSON object yet, so it could not be "
                                "converted to the other mode.")
        self._on_edit()

    def _update_actions(self) -> None:
        if not hasattr(self, "commands"):
            return
        self.commands.refresh_enabled()
        dirty = self._is_dirty()
        self.dirty_label.setText("● unsaved changes" if dirty else ("no unsaved changes" if self.draft is not None else ""))
        self.dirty_label.setStyleSheet("" if dirty else "color: palette(placeholder-text);")
        set_tone(self.dirty_label, "warning" if dirty else None)
        reason = self._read_only_reason()
        self.save_btn.setToolTip(plain_tip(reason or (self._check.problems[0] if self._check and self._check.problems
                                                      else "Save working memory (Ctrl+S)")))

    def revert(self) -> None:
        if self.draft is not None:
            self.editor.replace_all(self.draft.initial_text())  # undoable: Ctrl+Z brings the edit back
            self._pending_note = None
            self._end_conflict()

    # -- saving ----------------------------------------------------------------------------------
    def save(self, *, expected: Any = ...) -> None:
        if not self._can_save() or self.snapshot is None or self.draft is None or self._check is None:
            return
        snap, value = self.snapshot, self._check.value
        assert snap.target is not None and value is not None
        baseline = self.draft.baseline if expected is ... else expected
        self._saving_over = (snap.target, self.draft.fmt, baseline)
        note = self._pending_note
        store = self.session.store
        self._saving = True
        self.status.setText("Saving…")
        self._update_actions()
        check_file = self.session.check_file

        def write() -> str | None:
            text = save_wm(store, snap.options, snap.target, value, expected=baseline, note=note,  # type: ignore[arg-type]
                           max_bytes=snap.max_bytes, versions_kept=snap.versions_kept)
            check_file()  # a file deleted or replaced under us took the write with it: not saved
            return text

        self.session.run(write, on_result=alive_only(self, self._on_saved),
                         on_error=alive_only(self, self._on_save_error), key=self._key + "-save")

    def _on_saved(self, text: str | None) -> None:
        self._saving = False
        self._undo_save, self._saving_over = self._saving_over, None
        self._pending_note = None
        self._end_conflict()
        if self.draft is not None:
            self.draft.baseline = text
        target = self.snapshot.target if self.snapshot is not None else None
        self._my_save, self._replaced = ((target, text, datetime.now(timezone.utc)) if target is not None else None), None
        kept = self.snapshot is None or self.snapshot.history_available
        self.snapshot = None  # reload as a fresh view of what is stored now
        self.status.setText("Saved. A new version was recorded." if kept else
                            "Saved. No version was recorded: this database keeps no history "
                            "(File > Migrate Database… adds it).")
        self.saved.emit(text)
        self.session.notify_local_write()
        self.reload()

    def _on_save_error(self, exc: BaseException) -> None:
        self._saving = False
        if isinstance(exc, DatabaseFileLostError):
            self.session.mark_lost(str(exc))  # the banner (with Save Edit As…) comes with it
            return
        if isinstance(exc, ConcurrentUpdateError):
            mine = self.editor.toPlainText()
            theirs = exc.current
            if self.draft is not None and self.draft.fmt == "json" and theirs:
                try:
                    theirs = pretty_json(json.loads(theirs))
                    mine = pretty_json(json.loads(self._check.value)) if self._check and self._check.value else mine
                except json.JSONDecodeError:
                    pass
            self._conflict_current = exc.current
            self._in_conflict = True
            self._stored_changed(exc.current)
            self.conflict_view.show_conflict(mine, theirs, who="the agent (or another process)")
            self.status.setText("Not saved: the stored working memory changed since you loaded it.")
            self._update_actions()
            self.conflict.emit(exc.current)
            return
        self._on_error(exc)

    def overwrite_with_mine(self) -> None:
        """The user saw both and chose theirs to be replaced: save against what is stored now."""
        if not self._in_conflict:
            return
        self.save(expected=self._conflict_current)

    def take_theirs(self) -> None:
        if self.draft is None or not self._in_conflict:
            return
        current = self._conflict_current
        self.draft.baseline = self.draft.stored = current
        self.editor.replace_all(self.draft.initial_text())  # undoable: Ctrl+Z brings mine back
        if self.draft.fmt == "json":
            self.current_view.load(pretty_json(json.loads(current)) if current else "{}")
        self._end_conflict()
        self._on_edit()
        self.status.setText("Took the stored version; your edit is one Undo away.")

    def _end_conflict(self) -> None:
        self._in_conflict = False
        self.conflict_view.hide()
        self._clear_stale_warning()  # the conflict is decided: its warning goes with it

    def _clear_stale_warning(self) -> None:
        if self._stale_warning:
            self._stale_warning = False
            self.info_banner.hide()

    def keep_editing(self) -> None:
        """Carry on from the stored value as the new base; the next Save replaces it knowingly."""
        if self.draft is not None:
            self.draft.baseline = self.draft.stored = self._conflict_current
        self._end_conflict()
        self._on_edit()

    # -- history ---------------------------------------------------------------------------------
    def _selected_version(self) -> VersionRow | None:
        return self.history.selected()

    def select_versions(self, *numbers: int) -> None:
        self.history.select_versions(*numbers)

    def undo(self) -> None:
        """The editor's own Undo; with nothing left there after a save, the value stored before the save is staged
        (as History's Restore stages a version): Save writes it as a new version, against what is stored now."""
        if self.editor.document().isUndoAvailable():
            self.editor.undo()
            return
        if not self._can_undo_save() or self._undo_save is None:
            return
        before = self._undo_save[2]
        self._undo_save = None  # (staged: the editor's Undo now brings the saved value back)
        self._stage(before or "")
        self._pending_note = "restored the value stored before a save (Undo)"
        self.status.setText("Undo: the value stored before your save is staged. Save makes it current, a new "
                            "version (yours stays in History).")

    def _can_undo_save(self) -> bool:
        """A save of this owner to undo, with the editor showing what is stored (no edit of its own)."""
        saved, snap = self._undo_save, self.snapshot
        return (saved is not None and snap is not None and self._writable() and not self._saving
                and not self._in_conflict and not self._is_dirty() and self.draft is not None
                and (snap.target, self.draft.fmt) == saved[:2])

    def _stage(self, stored: str) -> None:
        """Stage the stored text ``stored`` in the editor (undoable), a JSON value whole (the replace mode)."""
        assert self.draft is not None
        if self.draft.fmt == "json":
            if self.draft.json_mode != "replace":
                self.json_mode.setCurrentIndex(self.json_mode.findData("replace"))
            stored = pretty_json(json.loads(stored)) if stored else "{}"
        self.editor.replace_all(stored)
        self.tabs.setCurrentIndex(0)

    def restore_selected_version(self) -> None:
        """Stage an old version in the editor (undoable); Save writes it as a new version."""
        row = self._selected_version()
        if row is None or self.draft is None or not self._writable():
            return
        self._stage(row.version.text or "")
        self._pending_note = f"restored version {row.number}"
        self.status.setText(f"Version {row.number} is staged in the editor. Save to make it current.")

    # -- template / schema -----------------------------------------------------------------------
    def _save_config(self, kind: str, value: Any) -> None:
        snap = self.snapshot
        if snap is None or self.session.read_only:
            return
        name, store = snap.memory_name, self.session.store
        template = value if kind == "template" else None
        schema = value if kind == "schema" else None
        self.status.setText("Saving the template…")
        self.session.run(lambda: save_override(store, name, template=template, schema=schema),
                         on_result=alive_only(self, self._on_config_saved), on_error=alive_only(self, self._on_error), key=self._key + "-config")

    def _on_config_saved(self, version: Any) -> None:
        self.status.setText(f"Saved {version.kind} version #{version.id}; agents use it from their next turn.")
        self.snapshot = None
        self.template_editor.editor.document().setModified(False)
        self.template_editor._baseline = self.template_editor.editor.toPlainText()  # noqa: SLF001
        self.template_editor._baseline_kind = self.template_editor.kind  # noqa: SLF001
        self.config_saved.emit(version)
        self.session.notify_local_write()
        self.reload()

    # -- read-only and errors --------------------------------------------------------------------
    def _on_read_only_changed(self) -> None:
        self._apply_read_only()
        self._update_actions()

    def _on_file_lost(self, message: str) -> None:
        """The database file is gone: nothing can be saved to it, but an unsaved edit is not lost."""
        self._saving = False
        self._on_read_only_changed()
        if self._is_dirty():
            self.info_banner.show_message(
                f"{message} Your edit was not saved: Save Edit As… keeps it in a file of your choice.", "error",
                [("Save Edit As…", self.save_edit_as)])
            self.status.setText("Not saved: the database file is gone. Your edit is still in the editor.")

    def save_edit_as(self) -> None:
        if self.draft is None:
            return
        path, _ = QFileDialog.getSaveFileName(self, "Save the working-memory edit as",
                                              "working-memory.json" if self.draft.fmt == "json"
                                              else "working-memory.md")
        if path:
            self.save_edit_to(path)

    def save_edit_to(self, path: str) -> None:
        """Write the editor's text to ``path`` (on a worker): the way out for an edit with nowhere to go."""
        text = self.editor.toPlainText()

        def done(_result: object) -> None:
            self.status.setText(f"Your edit was saved to {path}.")
            self.edit_saved_as.emit(path)

        self.session.run(lambda: Path(path).write_text(text, encoding="utf-8"), on_result=alive_only(self, done),
                         on_error=alive_only(self, self._on_error), key=self._key + "-save-as")

    def _read_only_reason(self) -> str:
        if self.session.lost:
            return self.session.lost
        if self.session.read_only:
            refusal = self.session.write_refusal  # its folder cannot be written: Allow Writes would not help
            if refusal:
                return f"Read-only: {refusal}"
            return (f"Read-only: {self.session.display_path} was opened read-only, so nothing can be saved. "
                    f"{self.session.write_advice}")
        return ""

    def _apply_read_only(self) -> None:
        reason = self._read_only_reason()
        if reason:
            self.readonly_banner.show_message(reason, "info")
        else:
            self.readonly_banner.hide()
        self.editor.setReadOnly(bool(reason) or self.snapshot is None or self.snapshot.target is None)
        self.json_mode.setEnabled(not reason)
        snap = self.snapshot
        if snap is None:  # no memory's template is shown: nothing to edit or save
            self.template_editor.set_writable(False, reason or "No working memory is shown.")
        else:
            self.template_editor.set_writable(not reason and (snap.config is None or snap.config.available), reason)

    def _on_error(self, exc: BaseException) -> None:
        self._saving = False
        message = str(exc) or type(exc).__name__
        self.info_banner.show_message(message, "error")
        self.status.setText("Something went wrong; nothing was written unless it says so above.")
        self._update_actions()
        self.failed.emit(message)

    def _on_load_error(self, exc: BaseException) -> None:
        """The read failed: what was shown belongs to the owner read before (Save would write there), so it
        goes; an unsaved edit is kept for when its owner reads again."""
        self._keep_unsaved()
        self._show_empty("Working memory could not be read.")
        self._on_error(exc)
        # (not "Something went wrong; nothing was written…": nothing was asked to be written)
        self.status.setText("Working memory could not be read; it is read again when the database changes or its "
                            "server answers again (File > Reload tries now).")

    def _show_empty(self, text: str) -> None:
        self.snapshot = None
        self.draft = None
        # The template tab showed the previous owner's memory: it goes too (an unsaved edit is kept aside).
        self._keep_template_edit()
        self._template_owner = None
        self.template_editor.set_state("template", "", [], f"{text} No template or schema is shown.",
                                       keep_edit=False)
        self.template_editor.diff_label.setText("")
        self.agent_reason.setText("")  # named the previous owner's agent and memory
        if self.agent_combo.count() and self.agent_combo.itemData(0) == AUTO:
            self.agent_combo.setItemText(0, "Automatic")  # "Automatic (<the previous owner's agent>)"
        self.tabs.setTabText(1, "History")
        self.title.setText("Working memory")
        self.title.setToolTip("")
        self.badges.setText("")
        self.editor.load("")
        self.editor.setReadOnly(True)
        # What the editor's text made (``_on_edit``, which does nothing without a draft): the previous owner's
        # rendering, size, result and problems stayed beside the empty editor.
        self._preview_timer.stop()
        self.preview.document().setMarkdown("")
        self.result_view.load("")
        self.merge_caption.setText("")
        self.size_label.setText("")
        self.size_label.setToolTip("")
        self.problem_label.hide()
        self.warning_label.hide()
        self.editor.mark_error_line(None)
        self._check = None
        self.version_model.set_rows([])
        self.status.setText(text)
        self._apply_read_only()
        self._update_actions()
