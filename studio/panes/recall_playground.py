"""Recall playground: type a query, see the vector, keyword and hybrid lists side by side, ask "why not?".

Every search runs ``core.recall.explain.inspect_search`` in a worker (``studio.reads.inspect_recall``)
under one key, so a slower, older answer is dropped instead of painted over a newer one. The lists
show every candidate with its rank, raw scores and fused score; what the threshold or the top-k cut
stays visible, dimmed, and the line under each list says how many were cut (never a silent empty
list). "Why not this message?" explains any stored message, picked from the thread or typed as an
id, or any row clicked in a list. Nothing here writes to the database.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QEvent, QItemSelection, QModelIndex, QObject, Qt, QTimer, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QSplitter,
    QStackedWidget,
    QTableView,
    QTabWidget,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from core.agent_configs import agent_for_thread
from core.recall.explain import LISTS, Candidate, Explanation, Inspection, ListName, keyword_scoring
from studio.commands import Command
from studio.logic import recall_layout as lay
from studio.logic.message_format import MessageRow
from studio.logic.prompt_layout import EmbedderHolder
from studio.logic.thread_labels import header_tip, resource_label, shown_title
from studio.reads import RecallView, explain_recall, inspect_recall, last_messages
from studio.selection import Selection
from studio.session import StudioSession
from studio.widgets.banner import Banner
from studio.widgets.fit_to_pane import FitToPane
from studio.widgets.flow_layout import FlowLayout, labelled
from studio.widgets.pane_header import alive_only, caption, pane_header, pane_layout, status_label
from studio.widgets.record_table import RIGHT, Column, RecordTableModel, RowTableView, keep_rows_in_sight
from studio.widgets.plain_tip import plain_tip
from studio.widgets.a11y import label_for, named

DEBOUNCE_MS = 300
# What a failure banner says failed (the search, or a read around it).
SEARCH_FAILED = "The search failed"
THREAD_FAILED = "This thread's messages could not be read (the list under “Why not this message?” is empty)"
AGENT_FAILED = "The agent's recall options could not be read (the controls keep their values)"
EXPLAIN_FAILED = "Why this message is in or out could not be worked out"
# Column widths come from sample text, not from the rows: sizing to contents re-read every cell of
# every list on each search (~100 ms at 10k messages, more than the search itself). Every resize fits
# the columns to the list (``FitToPane``): the rank and scores get their samples' width, Status a share
# of the rest (at most its longest word), Message what is left; a cut cell ends in "…" with the whole
# in its tooltip. Sized once, the lists ran past their edges at 1,100 and 1,500 px windows (Status and
# scores only seen by scrolling).
SAMPLES = {"#": "000", "Cosine": "-0.000", "BM25": "000.00", "ts_rank": "000.00", "Fused": "0.000",
           "Vector": "-0.000 #00", "Keyword": "00.00 #00"}
STATUS_SHARE = {"Status": 0.5}
STATUS_CAP = {"Status": "edited since indexed"}
STATUS_FLOOR = {"Status": "below threshold"}  # (at least: every status word but "edited since indexed")
MESSAGE_LEAST = "user: Message"
# ... and never less than half of its list, nor 170 px: the message is what people read (the scores and
# the status give way first, the optional ones left out).
MESSAGE_SHARE, MESSAGE_MIN_PX = 0.5, 170
LIST_SHARES = (0.3, 0.3, 0.4)  # vector, keyword, hybrid: of the width the lists side by side do not need
# Left out, in this order, when a list is too narrow for them all: each is shown in the list beside it
# (the vector list's cosine, the keyword list's score) and in the row's tooltips.
OPTIONAL: dict[ListName, tuple[str, ...]] = {"vector": (), "keyword": ("Cosine",), "hybrid": ("Keyword", "Vector")}


EMBEDDERS = EmbedderHolder()  # the database's local model, one per model and process, loaded on the first search


def _agent_recall(store: Any, thread_id: str | None) -> lay.RecallStart:
    """The recall options of the agent that applies to the thread (``agent_for_thread``, the rule of the
    inspector, Replay and the CLI), as the playground's starting point. Runs on a worker."""
    choice = agent_for_thread(store, thread_id)
    if choice.agent is None:
        return lay.recall_start(None, None)
    recall = choice.options().semantic_recall
    return lay.recall_start(recall, choice.agent.name, recall.enabled)


def _columns(pane: "RecallPlaygroundPane", name: ListName) -> list[Column[Candidate]]:
    # The inspection is read at paint time: the rows belong to the one shown.
    def message_text(c: Candidate) -> str:
        ins = pane.inspection
        return lay.preview(ins, c.message_id) if ins is not None else ""

    def message_tooltip(c: Candidate) -> str:
        ins = pane.inspection
        view = pane.view
        return lay.candidate_tooltip(ins, c, view.unreadable if view is not None else ()) if ins is not None else ""

    text = Column("Message", message_text, tooltip=message_tooltip, foreground=lay.row_colour)
    def status_text(c: Candidate) -> str:
        view = pane.view
        return lay.status_text(c, view.unreadable if view is not None else ())

    def scores(c: Candidate) -> str:  # what a list too narrow for every score column still tells
        return lay.scores_tooltip(c, scoring)

    # A cell cut short ends in "…": its tooltip holds the whole.
    status = Column("Status", status_text, foreground=lay.status_colour, tooltip=status_text)
    rank = Column("#", lambda c: c.rank, RIGHT, foreground=lay.row_colour, tooltip=scores)
    cosine = Column("Cosine", lambda c: lay.score_text(c.vector_score), RIGHT, foreground=lay.row_colour,
                    tooltip=scores)
    scoring = pane.keyword_scoring  # BM25 on libSQL, ts_rank on Postgres
    bm25 = Column(scoring, lambda c: lay.score_text(c.keyword_score, 2), RIGHT, foreground=lay.row_colour,
                  tooltip=scores)
    if name == "vector":
        return [rank, cosine, status, text]
    if name == "keyword":
        return [rank, bm25, cosine, status, text]
    return [
        rank, Column("Fused", lay.fused_text, RIGHT, foreground=lay.row_colour,
                     tooltip=lambda c: f"before the re-rank: {lay.fused_before_text(c)}\n{scores(c)}"),
        Column("Vector", lambda c: lay.ranked_score(c.vector_score, c.vector_rank), RIGHT, foreground=lay.row_colour,
               tooltip=lambda c: "cosine similarity · rank in the vector list"),
        Column("Keyword", lambda c: lay.ranked_score(c.keyword_score, c.keyword_rank, 2), RIGHT,
               foreground=lay.row_colour, tooltip=lambda c: f"{scoring} · rank in the keyword list"),
        status, text,
    ]


class RecallPlaygroundPane(QWidget):
    searched = Signal(object)  # RecallView on screen
    # A window command the banner's button asks for: "resource.index" (Edit > Index Recall for Resource…,
    # confirmed there; this pane itself writes nothing).
    request_command = Signal(str)
    explained = Signal(object)  # Explanation on screen
    failed = Signal(str)

    def __init__(self, session: StudioSession, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("recallPlayground")
        self.session = session
        self.embedders = EMBEDDERS
        self.selection = Selection()
        self.resource_id: str | None = None
        self.view: RecallView | None = None
        self.explanation: Explanation | None = None
        self._read_failure: str | None = None  # a failed read of the selection's thread or agent: it stays said
        self._key = f"recall-playground-{id(self)}"
        self.keyword_scoring = keyword_scoring(session.store)  # what the keyword list's scores are
        self._debounce = QTimer(self)
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(DEBOUNCE_MS)
        self._debounce.timeout.connect(self.search_now)
        self._build()
        self._show_empty()

    @property
    def inspection(self) -> Inspection | None:
        return self.view.inspection if self.view is not None else None

    # -- construction ----------------------------------------------------------------------------
    def _build(self) -> None:
        root = pane_layout(self)
        head, self.title, self.subtitle = pane_header("Recall Playground")
        self.subtitle.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        root.addLayout(head)

        row = QHBoxLayout()
        self.query_edit = QLineEdit()
        self.query_edit.setPlaceholderText("Type what a user might ask; recall searches the stored messages")
        self.query_edit.setClearButtonEnabled(True)
        named(self.query_edit, "Search query")
        self.search_btn = QPushButton("Search")
        row.addWidget(self.query_edit, 1)
        row.addWidget(self.search_btn)
        root.addLayout(row)

        # A flow, not a row: scope, threshold, top-k and the range asked 617 px in one row, and a 720 px
        # window's pane was read sideways (built there, its spin boxes were cut). Each control keeps its label.
        controls_bar = QWidget()
        controls = FlowLayout(controls_bar)
        controls.setContentsMargins(0, 0, 0, 0)
        self.scope_combo = QComboBox()
        self.scope_combo.addItem("Resource", "resource")
        self.scope_combo.addItem("Thread", "thread")
        self.threshold_check = QCheckBox("Threshold")
        self.threshold_spin = QDoubleSpinBox()
        self.threshold_spin.setRange(-1.0, 1.0)
        self.threshold_spin.setSingleStep(0.05)
        self.threshold_spin.setDecimals(2)
        self.threshold_spin.setValue(0.5)
        self.threshold_spin.setEnabled(False)
        named(self.threshold_spin, "Threshold")
        self.topk_spin = QSpinBox()
        self.topk_spin.setRange(1, 200)
        self.topk_spin.setValue(4)
        self.before_spin = QSpinBox()
        self.after_spin = QSpinBox()
        for spin in (self.before_spin, self.after_spin):
            spin.setRange(0, 20)
            spin.setValue(1)
        controls.addWidget(labelled("Scope", self.scope_combo))
        threshold = QWidget()  # (the check box is the spin box's label: the two never wrap apart)
        pair = QHBoxLayout(threshold)
        pair.setContentsMargins(0, 0, 0, 0)
        pair.setSpacing(4)
        pair.addWidget(self.threshold_check)
        pair.addWidget(self.threshold_spin)
        controls.addWidget(threshold)
        controls.addWidget(labelled("Top-k", self.topk_spin))
        span = QWidget()  # "Range before [n] after [n]": one item
        pair = QHBoxLayout(span)
        pair.setContentsMargins(0, 0, 0, 0)
        pair.setSpacing(4)
        pair.addWidget(label_for("Range before", self.before_spin))
        pair.addWidget(self.before_spin)
        pair.addWidget(label_for("after", self.after_spin, "Range after"))
        pair.addWidget(self.after_spin)
        controls.addWidget(span)
        # Which settings the controls started from: the thread's agent's (what it really recalls).
        self.start_label = QLabel("")
        self.start_label.setObjectName("recallStart")
        self.start_label.setTextFormat(Qt.TextFormat.PlainText)  # it names the agent (a registration's data)
        self.start_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.start_label.setStyleSheet("color: palette(placeholder-text);")
        self.reset_btn = QPushButton("Reset to Agent")
        self.reset_btn.setEnabled(False)
        root.addWidget(controls_bar)
        start_row = QHBoxLayout()
        start_row.addWidget(self.start_label, 1)
        start_row.addWidget(self.reset_btn)
        root.addLayout(start_row)
        self.start: lay.RecallStart | None = None

        self.banner = Banner(self)
        root.addWidget(self.banner)
        self.summary = QLabel("")
        self.summary.setWordWrap(True)
        self.summary.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.summary.setStyleSheet("color: palette(placeholder-text);")
        root.addWidget(self.summary)

        vsplit = QSplitter(Qt.Orientation.Vertical)
        vsplit.setChildrenCollapsible(False)  # (a part is never dragged away to nothing)
        # Side by side when the pane has room for the three lists' rank, scores, status and some message
        # text; else one list at a time, in tabs (side by side at a 1,100 px window, each list was
        # ~200 px wide and showed neither its status nor its message).
        lists = QSplitter(Qt.Orientation.Horizontal)
        lists.setChildrenCollapsible(False)  # (a part is never dragged away to nothing)
        self.lists_split = lists
        self.lists_tabs = QTabWidget()
        self.lists_tabs.setObjectName("recallListTabs")
        self.lists_stack = QStackedWidget()
        self.lists_stack.addWidget(lists)
        self.lists_stack.addWidget(self.lists_tabs)
        self.list_boxes: dict[ListName, QWidget] = {}
        self._tab_index = LISTS.index("hybrid")  # the list a turn's prompt takes its hits from, shown first
        self.fits: dict[ListName, FitToPane] = {}
        self.models: dict[ListName, RecordTableModel[Candidate]] = {}
        self.tables: dict[ListName, QTableView] = {}
        self.captions: dict[ListName, QLabel] = {}
        for name in LISTS:
            box = QWidget()
            bl = QVBoxLayout(box)
            bl.setContentsMargins(0, 0, 0, 0)
            bl.addWidget(caption(lay.list_title(name, self.keyword_scoring)))
            note = QLabel("")
            note.setWordWrap(True)
            note.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
            bl.addWidget(note)
            model: RecordTableModel[Candidate] = RecordTableModel(_columns(self, name), self)
            table = RowTableView(self)
            table.setObjectName(f"recall-{name}")
            named(table, f"{lay.list_title(name, self.keyword_scoring)} hits")
            table.setModel(model)
            table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
            table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
            table.verticalHeader().hide()
            table.setShowGrid(False)
            table.setWordWrap(False)
            keep_rows_in_sight(table)
            header = table.horizontalHeader()
            header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
            # The message is what people read: shown right after the rank (at the end it was cut to a
            # few characters), with what is left once the rank, scores and status have their widths.
            header.moveSection(model.columnCount() - 1, 1)
            self.fits[name] = FitToPane(table, SAMPLES, STATUS_SHARE, last="Message", pad=14, caps=STATUS_CAP,
                                        floors=STATUS_FLOOR,
                                        rest_sample=MESSAGE_LEAST, optional=OPTIONAL[name],
                                        last_share=MESSAGE_SHARE, last_least=MESSAGE_MIN_PX)
            table.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
            table.verticalHeader().setDefaultSectionSize(table.fontMetrics().height() + 8)
            table.selectionModel().selectionChanged.connect(
                lambda sel, _old, n=name: self._row_picked(n, sel))
            bl.addWidget(table, 1)
            lists.addWidget(box)
            self.list_boxes[name] = box
            self.models[name], self.tables[name], self.captions[name] = model, table, note
        vsplit.addWidget(self.lists_stack)
        self.lists_stack.installEventFilter(self)

        bottom = QSplitter(Qt.Orientation.Horizontal)
        bottom.setChildrenCollapsible(False)  # (a part is never dragged away to nothing)
        picker = QWidget()
        pl = QVBoxLayout(picker)
        pl.setContentsMargins(0, 0, 0, 0)
        pl.addWidget(caption("Why not this message?"))
        why_row = QHBoxLayout()
        self.why_edit = QLineEdit()
        self.why_edit.setPlaceholderText("message id, or pick one below / click a row above")
        named(self.why_edit, "Why not this message? Message id")
        self.why_btn = QPushButton("Explain")
        why_row.addWidget(self.why_edit, 1)
        why_row.addWidget(self.why_btn)
        pl.addLayout(why_row)
        self.thread_list = QListWidget(self)
        self.thread_list.setObjectName("recallThreadMessages")
        named(self.thread_list, "The thread's messages")
        self.thread_list.setUniformItemSizes(True)
        # As wide as the pane: a long message ends in "…" (its tooltip holds it), no sideways scrolling.
        self.thread_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.thread_list.setTextElideMode(Qt.TextElideMode.ElideRight)
        pl.addWidget(self.thread_list, 1)
        bottom.addWidget(picker)
        self.explain_view = QTextBrowser(self)
        self.explain_view.setObjectName("recallExplanation")
        named(self.explain_view, "Why (not) recalled")
        self.explain_view.setOpenLinks(False)
        bottom.addWidget(self.explain_view)
        bottom.setSizes([420, 760])
        vsplit.addWidget(bottom)
        vsplit.setSizes([430, 300])
        root.addWidget(vsplit, 1)

        self.status = status_label()  # cut with "…", whole in the tooltip
        self.status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        root.addWidget(self.status)

        self.query_edit.textChanged.connect(lambda _t: self.schedule())
        self.query_edit.returnPressed.connect(self.search_now)
        self.search_btn.clicked.connect(self.search_now)
        self.scope_combo.currentIndexChanged.connect(lambda _i: self.schedule())
        self.threshold_check.toggled.connect(self._threshold_toggled)
        self.threshold_spin.valueChanged.connect(lambda _v: self.schedule())
        for count in (self.topk_spin, self.before_spin, self.after_spin):
            count.valueChanged.connect(lambda _v: self.schedule())
        self.reset_btn.clicked.connect(self.reset_to_agent)
        self._touched = False  # the user changed a control since picking the thread: keep it
        for control in (self.threshold_spin, self.topk_spin, self.before_spin, self.after_spin):
            control.valueChanged.connect(self._touch)
        self.threshold_check.toggled.connect(self._touch)
        self.scope_combo.currentIndexChanged.connect(self._touch)
        self.why_btn.clicked.connect(self.explain_now)
        self.why_edit.returnPressed.connect(self.explain_now)
        self.thread_list.currentItemChanged.connect(self._thread_message_picked)

    # -- side by side, or in tabs --------------------------------------------------------------------
    def side_by_side(self) -> bool:
        return self.lists_stack.currentWidget() is self.lists_split

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        if watched is self.lists_stack and event.type() == QEvent.Type.Resize and isinstance(event, QResizeEvent):
            if event.size().width() != event.oldSize().width():  # (a handle the user dragged holds otherwise)
                self._arrange_lists(event.size().width())
        return False

    def _arrange_lists(self, width: int) -> None:
        handles = self.lists_split.handleWidth() * (len(LISTS) - 1)
        least = [self.fits[name].least() for name in LISTS]
        spare = width - sum(least) - handles
        side = spare >= 0
        if side:
            if not self.side_by_side():
                self._tab_index = self.lists_tabs.currentIndex()
                for name in LISTS:
                    self.lists_split.addWidget(self.list_boxes[name])  # (taken out of its tab)
                    self.list_boxes[name].show()  # (a tab not on top was hidden)
                self.lists_stack.setCurrentWidget(self.lists_split)
            # each list what it needs, and a share of the rest (a handle the user dragged holds until
            # the pane's width changes: a change of its height alone, such as the splitter below, keeps it)
            self.lists_split.setSizes([n + int(spare * share) for n, share in zip(least, LIST_SHARES)])
        elif self.side_by_side():
            for name in LISTS:
                self.lists_tabs.addTab(self.list_boxes[name], "")
            self._title_tabs()
            self.lists_tabs.setCurrentIndex(self._tab_index)
            self.lists_stack.setCurrentWidget(self.lists_tabs)
        # (a list in a tab not on top gets no resize event until it is shown: fitted now from the width it
        # has; a shown one is fitted by its own resize)
        for fit in self.fits.values():
            if not fit.table.isVisible():
                fit.fit()

    def _title_tabs(self) -> None:
        """In tabs, each list's name and its hits ("Keyword · 0 hits"), so the lists not on top still say
        what they hold."""
        ins = self.inspection
        for name in LISTS:
            index = self.lists_tabs.indexOf(self.list_boxes[name])
            if index >= 0:
                self.lists_tabs.setTabText(index, lay.tab_title(name, ins))

    def _threshold_toggled(self, on: bool) -> None:
        self.threshold_spin.setEnabled(on)
        self.schedule()

    # -- selection -------------------------------------------------------------------------------
    def palette_commands(self) -> list[Command]:
        return []  # no commands of its own (its buttons act on what it shows)

    def set_selection(self, selection: Selection) -> None:
        previous = self.selection
        self.selection = selection
        self.resource_id = selection.resource_id
        if selection.thread_id != previous.thread_id:
            self._read_failure = None
            self.thread_list.clear()
            if selection.thread_id is not None:
                self._load_thread_messages(selection.thread_id)
            self._touched = False
            self._load_agent_options(selection.thread_id)
        if selection.message_id is not None and selection.message_id != previous.message_id:
            self._show_id(selection.message_id)
        if (selection.resource_id, selection.thread_id) != (previous.resource_id, previous.thread_id):
            self._show_scope()
            self.schedule()

    # -- the agent's registered recall options -------------------------------------------------------
    def _load_agent_options(self, thread_id: str | None) -> None:
        store = self.session.store
        self.session.run(lambda: _agent_recall(store, thread_id),
                         on_result=alive_only(self, lambda start: self._on_start(thread_id, start)),
                         on_error=alive_only(self, lambda exc: self._on_error(exc, AGENT_FAILED)),
                         key=self._key + "-agent")

    def _on_start(self, thread_id: str | None, start: lay.RecallStart) -> None:
        if thread_id != self.selection.thread_id:
            return
        self.start = start
        if self._touched:  # the user set the controls while this was read: keep theirs, say what differs
            self._update_start_label()
        else:
            self.reset_to_agent()

    def _touch(self, *_args: object) -> None:
        self._touched = True

    def reset_to_agent(self) -> None:
        """Put the controls back to the thread's agent's recall options (what its turns recall)."""
        start = self.start
        if start is None:
            return
        widgets = (self.topk_spin, self.threshold_spin, self.threshold_check, self.before_spin, self.after_spin,
                   self.scope_combo)
        for w in widgets:
            w.blockSignals(True)
        self.topk_spin.setValue(start.top_k)
        self.threshold_check.setChecked(start.threshold is not None)
        self.threshold_spin.setEnabled(start.threshold is not None)
        if start.threshold is not None:
            self.threshold_spin.setValue(start.threshold)
        self.before_spin.setValue(start.before)
        self.after_spin.setValue(start.after)
        self.scope_combo.setCurrentIndex(max(self.scope_combo.findData(start.scope), 0))
        for w in widgets:
            w.blockSignals(False)
        self._update_start_label()
        self.schedule()

    def _update_start_label(self) -> None:
        start = self.start
        if start is None:
            self.start_label.setText("")
            self.reset_btn.setEnabled(False)
            return
        req = self.request()
        changed = (req.top_k, req.threshold, req.before, req.after, req.scope) != (
            start.top_k, start.threshold, start.before, start.after, start.scope)
        self.start_label.setText(start.label + (" · changed here" if changed else ""))
        self.start_label.setToolTip(plain_tip(start.label))
        self.reset_btn.setEnabled(changed)

    def _show_scope(self) -> None:
        text = self._scope_text()
        self.subtitle.setText(text)
        self.subtitle.setToolTip(header_tip(text, self.resource_id, self.session.delegations))

    def _scope_text(self) -> str:
        sel = self.selection
        parts = []
        if self.resource_id:  # (a delegation's as the tree names it; the stored id on hover)
            parts.append(f"resource {resource_label(self.resource_id, self.session.delegations)}")
        if sel.thread_id:
            parts.append(f"thread {shown_title(sel.thread_id)}")
        return " · ".join(parts) or "pick a resource or thread in the tree"

    def _load_thread_messages(self, thread_id: str) -> None:
        store = self.session.store
        self.session.run(lambda: (last_messages(store, thread_id), store.memory.get_thread(thread_id)),
                         on_result=alive_only(self, lambda r: self._on_thread_messages(thread_id, *r)),
                         on_error=alive_only(self, lambda exc: self._on_error(exc, THREAD_FAILED)),
                         key=self._key + "-thread")

    def _on_thread_messages(self, thread_id: str, rows: list[MessageRow], thread: Any) -> None:
        if thread_id != self.selection.thread_id:
            return
        if self.resource_id is None and thread is not None:
            self.resource_id = thread.resource_id  # a thread picked alone still names its resource
            self._show_scope()
            self.schedule()
        self.thread_list.clear()
        for r in rows:
            item = QListWidgetItem(f"{r.role}: {' '.join(r.preview.split())[:120]}")
            item.setData(Qt.ItemDataRole.UserRole, r.id)
            item.setToolTip(plain_tip(f"{r.id}\n{r.preview if len(r.preview) <= 400 else r.preview[:399] + '…'}"))
            self.thread_list.addItem(item)

    # -- searching -------------------------------------------------------------------------------
    def request(self) -> lay.RecallRequest:
        return lay.RecallRequest(
            query=self.query_edit.text(), scope=self.scope_combo.currentData(),
            resource_id=self.resource_id, thread_id=self.selection.thread_id, top_k=self.topk_spin.value(),
            threshold=self.threshold_spin.value() if self.threshold_check.isChecked() else None,
            before=self.before_spin.value(), after=self.after_spin.value(),
        )

    def schedule(self) -> None:
        self._update_start_label()
        self._debounce.start()

    def search_now(self) -> None:
        self._debounce.stop()
        req = self.request()
        problem = lay.scope_problem(req.scope, self.selection, req.resource_id)
        if problem is not None or not req.query.strip():
            self.session.pool.submit(lambda: None, key=self._key)  # supersede a search in flight
            self._show_empty(problem)
            return
        self.status.setText("Searching…")
        store, embedders = self.session.store, self.embedders
        self.session.run(lambda: inspect_recall(store, embedders, req),
                         on_result=alive_only(self, self._on_result),
                         on_error=alive_only(self, self._on_error), key=self._key)

    def search_again(self) -> None:
        """Run the shown search again (the index changed under it: Index Recall for Resource…)."""
        if self.query_edit.text().strip():
            self.search_now()

    def _on_result(self, view: RecallView) -> None:
        if view.request != self.request():
            return  # the controls moved on while this ran; the newer search is on its way
        self.view = view
        ins = view.inspection
        for name in LISTS:
            self.models[name].set_rows(ins.lists[name])
            self.captions[name].setText(lay.list_caption(ins, name))
            self.captions[name].setStyleSheet(
                "" if ins.hits(name) else f"color: {lay.WARN_COLOUR};")
        notes = [n for n in ins.notes if n]
        actions = self._index_action(view)
        if view.problem:  # the notes follow it: "keyword results work" must not hide that none are indexed
            self.banner.show_message(view.problem + (" Also: " + "; ".join(notes) if notes else ""), "warning",
                                     actions)
        elif notes:
            self.banner.show_message("; ".join(notes), "info", actions)
        else:
            self._hide_banner()
        self.summary.setText(lay.search_summary(ins) + "\n" + lay.indexed_by_text(view.indexed_by, ins.model_id, view.with_pieces))
        self._title_tabs()
        self.status.setText("")
        self.searched.emit(view)
        if self.why_edit.text().strip():
            self.explain_now()

    def _index_action(self, view: RecallView) -> list[tuple[str, Any]]:
        """The banner's way forward when the scope has messages recall has not indexed and this Studio can
        index them (writes allowed, the recall tables there): Edit > Index Recall for Resource…."""
        ins = view.inspection
        resource = ins.resource_id or self.selection.resource_id
        if self.session.read_only or not view.migrated or not resource:
            return []
        if not (ins.waiting or view.problem or ins.vectors_in_scope == 0 or ins.unembedded):
            return []
        return [("Index This Resource…", lambda: self.request_command.emit("resource.index"))]

    def _on_error(self, exc: BaseException, what: str = SEARCH_FAILED) -> None:
        """``what`` failed: the search, or one of the reads around it (each says which, so a thread that
        could not be read is not reported as a failed search)."""
        text = f"{type(exc).__name__}: {exc}"
        if what == SEARCH_FAILED:  # the lists of the search before are not this query's: they go
            self._show_empty("")
            self.explanation = None
            self.explain_view.clear()
        self.status.setText("")
        if what != SEARCH_FAILED and what != EXPLAIN_FAILED:
            self._read_failure = f"{what}: {text}"
        self.banner.show_message(f"{what}: {text}", "error")
        self.failed.emit(text)

    def _show_empty(self, why: str | None = None) -> None:
        self.view = None
        # "Why not?" answers a search: with no search on screen, its last answer (ranks in lists no longer
        # shown, "Returned: a hit") goes too; the id stays typed and is explained again by the next search.
        self.explanation = None
        self.explain_view.clear()
        for name in LISTS:
            self.models[name].set_rows([])
            self.captions[name].setText("")
        self._hide_banner()
        self.summary.setText(why or "Type a query to see what recall finds, list by list.")
        self._title_tabs()
        self.status.setText("")

    def _hide_banner(self) -> None:
        """A new search has nothing to say: a failed read of the selection's thread or agent is still said."""
        if self._read_failure:
            self.banner.show_message(self._read_failure, "error")
        else:
            self.banner.hide()

    # -- why not? --------------------------------------------------------------------------------
    def _row_picked(self, name: ListName, selected: QItemSelection) -> None:
        rows = selected.indexes()
        if not rows:
            return
        cand = self.models[name].row_at(rows[0].row())
        if cand is not None:
            self.explain(cand.message_id)

    def _thread_message_picked(self, item: QListWidgetItem | None, _previous: Any = None) -> None:
        if item is not None:
            self.explain(str(item.data(Qt.ItemDataRole.UserRole)))

    def _show_id(self, message_id: str) -> None:
        """An id put in the field shows from its start (the cursor at its end showed "…-8eb4-1d840e194a10"
        in a narrow pane, the start out of sight)."""
        self.why_edit.setText(message_id)
        self.why_edit.setCursorPosition(0)

    def explain(self, message_id: str) -> None:
        self._show_id(message_id)
        self.explain_now()

    def explain_now(self) -> None:
        message_id = self.why_edit.text().strip()
        ins = self.inspection
        if not message_id:
            return
        if ins is None:
            self.explain_view.setHtml("<p>Run a search first: “why not” is asked of a search.</p>")
            return
        store, embedders = self.session.store, self.embedders
        self.session.run(lambda: explain_recall(store, embedders, ins, message_id),
                         on_result=alive_only(self, lambda e: self._on_explained(e, ins)),
                         on_error=alive_only(self, lambda exc: self._on_error(exc, EXPLAIN_FAILED)),
                         key=self._key + "-why")

    def _on_explained(self, e: Explanation, ins: Inspection) -> None:
        if ins is not self.inspection:
            return
        self.explanation = e
        self.explain_view.setHtml(lay.explanation_html(e, ins))
        self.explained.emit(e)

    def row_index(self, name: ListName, message_id: str) -> QModelIndex:
        model = self.models[name]
        for i, c in enumerate(model.rows()):
            if c.message_id == message_id:
                return model.index(i, 0)
        return QModelIndex()
