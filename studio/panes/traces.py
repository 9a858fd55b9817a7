"""Traces: the agent runs recorded as spans, a span tree with a waterfall, and each span's detail.

Reads only. Traces normally live in the DuckDB file beside the memory database; a Mastra database
keeps them in its own ``mastra_ai_spans`` table instead, read through ``LibSQLSpanReader``. An agent
process may hold the DuckDB file while it writes, so every read can come back busy (or stale, from
the reader's last good answer): the banner says so and the next poll retries. Traces sit in another
file than the memory database, so while the pane is visible a worker compares the trace files'
``stat()`` every two seconds (no lock taken, the writer is never delayed) and reloads on change.
The list is paged: only ``PAGE`` traces are read at a time. The reads are ``studio.reads``' traces section.
"""

from __future__ import annotations

import html
import time
from datetime import datetime, timezone
from typing import Any

from PySide6.QtCore import QEvent, QItemSelection, QModelIndex, QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QGuiApplication, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QSplitter,
    QTabWidget,
    QTextBrowser,
    QToolButton,
    QTreeView,
    QVBoxLayout,
    QWidget,
)

from core.traces import is_broken_trace_file_error
from core.traces.live import running_writer
from core.traces.spans import ModelUsage, ReadResult, SpanRecord, TraceFilters, TraceSummary
from studio.commands import Command, CommandRegistry
from studio.logic.traces_layout import (
    ERROR_COLOR,
    SPAN_COLORS,
    STATUS_COLORS,
    Status,
    TraceLayout,
    chat_transcript,
    duration_short,
    error_parts,
    filters_for,
    format_duration,
    format_spans,
    format_started,
    format_tokens,
    layout_trace,
    pretty_json,
    read_error_notice,
    span_facts,
    spans_short,
    status_short,
    status_text,
    status_tip,
    empty_list_notice,
    store_notice,
    tokens_tooltip,
    trace_duration_text,
    trace_label,
    trace_short,
    trace_tip,
    transcript_html,
)
from studio.logic.dates import date_tooltip, format_datetime
from studio.logic.pricing import CostEstimate, Price, dump_prices, estimate, load_prices, usage_summary
from studio.logic.thread_labels import header_tip, resource_label, resource_tip, shown_title
from studio.reads import SourceResolver, TracePage, TraceSource, load_traces_page, load_usage, traces_fingerprint
from studio.selection import Selection
from studio.theme import readable_html
from studio.session import StudioSession
from studio.widgets.banner import Banner
from studio.widgets.code_editor import CodeEditor, mono_font
from studio.widgets.elided_label import ElidedLabel
from studio.widgets.fit_to_pane import FitToPane
from studio.widgets.fitted_tabs import FittedTabs
from studio.widgets.pane_header import alive_only, caption, elastic, pane_header, pane_layout, status_label
from studio.widgets.price_editor import PriceEditor
from studio.widgets.record_table import LEAST_ROWS, RIGHT, Column, RecordTableModel, RowTableView, keep_rows_in_sight
from studio.widgets.scroll_fit import least_height_at_width, stack_when_narrow
from studio.widgets.short_forms import draw_short_forms
from studio.widgets.timeline import (
    ROW_ROLE,
    SpanTreeModel,
    TimelineDelegate,
    TimelineLegend,
)
from studio.widgets.wrap_mode import fit_wrap
from studio.widgets.a11y import named

PAGE = 50
POLL_MS = 2000
# After a list read that failed (an error, not a busy file) the poll reads again after RETRY_FIRST_S, then
# twice as long after each further failure up to RETRY_MAX_S; a read that succeeds starts over.
RETRY_FIRST_S, RETRY_MAX_S = 2.0, 30.0
FILTER_DEBOUNCE_MS = 250
STATUS_CHOICES: list[tuple[str, Status | None]] = [
    ("Any status", None), ("ok", "ok"), ("error", "error"), ("running", "running")]
TAB_MESSAGES, TAB_INPUT, TAB_OUTPUT, TAB_ATTRIBUTES, TAB_ERROR, TAB_SPAN = range(6)

# -- the pane ---------------------------------------------------------------------------------------
TRACE_COLUMNS: list[Column[TraceSummary]] = [
    Column("Status", status_text, color=lambda t: STATUS_COLORS.get(t.status),
           foreground=lambda t: ERROR_COLOR if t.status == "error" else None, tooltip=status_tip, short=status_short),
    Column("Trace", trace_label, tooltip=trace_tip, short=trace_short),
    Column("Agent", lambda t: t.entity_name or "", tooltip=lambda t: t.entity_name or ""),
    Column("Started", lambda t: format_started(t.started_at), tooltip=lambda t: date_tooltip(t.started_at)),
    Column("Duration", trace_duration_text, RIGHT, tooltip=trace_duration_text, short=duration_short),
    Column("Spans", format_spans, RIGHT, tooltip=format_spans, short=spans_short),
    Column("Tokens", format_tokens, RIGHT, tooltip=tokens_tooltip),
    Column("Thread", lambda t: t.thread_id or "",
           tooltip=lambda t: f"{t.thread_id or '(no thread)'}\nresource {t.resource_id or '?'}"),
]
COL_COST = 7  # inserted after Tokens, per pane: it reads the pane's price table
# Column widths follow the pane on every resize (``FitToPane``): sized to their contents, the trace list
# and the span tree ran past their edges at a 1,100 px window (the Trace column "agent r…", the span
# Timeline out of sight). The usual text of the narrow columns sets their width, the others share the rest
# (a cut cell ends in "…", its tooltip holds the whole); the trace's name, and the span's, take what is left.
TRACE_SAMPLES = {"Started": "2026-12-05 04:26:43", "Tokens": "00,000"}
TRACE_SHARES = {"Status": 0.1, "Duration": 0.12, "Spans": 0.08, "Cost": 0.08, "Agent": 0.25, "Thread": 0.37}
# (Status: its widest short form, "unfinished", whole; "ok, 12 err" fits too. At "ok, 0 err": "never …", "ok, 12 e…")
TRACE_FLOORS = {"Status": "unfinished", "Duration": "00.0 ms", "Spans": "00"}
TRACE_CAPS = {"Status": "never finished", "Duration": "never finished", "Spans": "000 (00 err)", "Cost": "$0.0000+",
              "Agent": "an-agent-name-of-some-length", "Thread": "a-thread-id-of-some-length-000000"}
TRACE_LEAST = "agent run: '…"
TRACE_SHARE = 0.25  # the trace's name: at least this share of the list (the others give way first)
# Left out while the list is too narrow for every column: the Thread column when the list shows one
# thread's traces (the header names it; with all threads it stays, and Spans goes), then Agent; the span
# tree's Type (each span's colour says it, the legend above the tree names the colours).
TRACE_OPTIONAL_ONE_THREAD = ("Thread", "Agent", "Spans", "Cost")  # (a 720 px window: the caption and the usage
# line above the list say the spans and the cost)
# (the span tree's caption counts a trace's spans; an agent run's name holds its agent's: "agent run: 'chef'")
TRACE_OPTIONAL_ALL_THREADS = ("Spans", "Agent")
SPAN_SAMPLES = {"Type": "processor", "Duration": "00.00 ms"}
SPAN_SHARES = {"Span": 1.0}
SPAN_FLOORS = {"Span": "processor: working-m…"}  # below this, the Type column goes first
SPAN_OPTIONAL = ("Type",)
# Spans the tree keeps in sight with the detail under it (a 900 px window): at its 3 rows of least, a run's tree
# was read 3 spans at a time, and a run of one model call has 8 to 12; the page scrolls to the detail instead.
STACKED_SPAN_ROWS = 8
SPAN_TIMELINE_SHARE, SPAN_TIMELINE_PX = 0.3, 110  # the waterfall: at least this share of the tree and this wide
# The span detail's tabs: title, the shorter one used while the titles don't fit, tooltip.
SPAN_TABS = (("Messages", "Msgs", "Messages: the chat messages a model call was sent"),
             ("Input", "In", "Input: the span's input"), ("Output", "Out", "Output: the span's output"),
             ("Attributes", "Attrs", "Attributes: the span's attributes"),
             ("Error", "Err", "Error: the span's error, if it failed"),
             ("Span JSON", "JSON", "Span JSON: the whole span as stored"))
PRICES_KEY = "modelPrices"  # in the Studio's settings (QSettings), never in the memory database



class TracesPane(QWidget):
    traces_loaded = Signal()  # a page (first or further) was applied
    trace_loaded = Signal(str)  # trace id whose spans are now shown

    def __init__(self, session: StudioSession, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("tracesPane")
        self.session = session
        self.selection = Selection()
        self.resolver = SourceResolver(session.store)
        self.source: TraceSource | None = None
        self.traces: list[TraceSummary] = []
        self.total: int | None = None
        self.flags = {"busy": False, "stale": False, "missing": False}
        self.trace_id: str | None = None
        self.all_threads = False
        self.spans: list[SpanRecord] = []
        self.prices: dict[str, Price] = load_prices(QSettings().value(PRICES_KEY))
        self.usage: list[ModelUsage] = []
        self.layout_model = TraceLayout((), (), None, 0.0)
        self._trace_busy = False
        self._gen = 0
        self._loading = False
        self._polling = False
        self._dirty = True
        self._fingerprint: tuple[Any, ...] | None = None
        self._fresh_at: dict[TraceFilters, float] = {}
        self._retry_s = 0.0  # the wait before the next read after a failed one; 0: the last read did not fail
        self._retry_at = 0.0  # (time.monotonic()) when the poll reads again after a failed read
        self._key = f"traces-{id(self)}"
        self._poll_timer = QTimer(self)
        self._poll_timer.setInterval(POLL_MS)
        self._poll_timer.timeout.connect(self.poll)
        self._debounce = QTimer(self)
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(FILTER_DEBOUNCE_MS)
        self._debounce.timeout.connect(self.refresh)
        self._build()
        self._register_commands()
        session.changed.connect(self.poll)
        session.server_back.connect(self._server_back)

    # -- construction ----------------------------------------------------------------------------
    def _build(self) -> None:
        root = pane_layout(self)
        head, self.title, self.subtitle = pane_header("Traces")
        self.prices_btn = QToolButton(self)
        self.refresh_btn = QToolButton(self)
        head.addWidget(self.prices_btn)
        head.addWidget(self.refresh_btn)
        root.addLayout(head)

        bar = QHBoxLayout()
        self.filter_edit = QLineEdit()
        self.filter_edit.setPlaceholderText("Filter by trace or agent name…")
        self.filter_edit.setClearButtonEnabled(True)
        named(self.filter_edit, "Filter traces by trace or agent name")
        self.status_combo = QComboBox()
        for text, value in STATUS_CHOICES:
            self.status_combo.addItem(text, value)
        self.all_threads_btn = QToolButton(self)
        bar.addWidget(self.filter_edit, 1)
        bar.addWidget(named(self.status_combo, "Trace status"))
        bar.addWidget(self.all_threads_btn)
        root.addLayout(bar)

        self.usage_label = elastic(ElidedLabel(""))  # tokens and estimated cost of every run in view
        root.addWidget(self.usage_label)
        self.banner = Banner()
        root.addWidget(self.banner)

        split = QSplitter(Qt.Orientation.Vertical)
        split.setChildrenCollapsible(False)  # (a part is never dragged away to nothing)
        upper = QWidget()
        ul = QVBoxLayout(upper)
        ul.setContentsMargins(0, 0, 0, 0)
        columns = list(TRACE_COLUMNS)
        columns.insert(COL_COST, Column("Cost", lambda t: self.cost_of(t).label, RIGHT,
                                        tooltip=lambda t: self.cost_of(t).tooltip))
        self.trace_model: RecordTableModel[TraceSummary] = RecordTableModel(columns, self)
        self.trace_table = RowTableView(self)
        self.trace_table.setModel(self.trace_model)
        named(self.trace_table, "Traces")
        self.trace_table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.trace_table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.trace_table.verticalHeader().hide()
        self.trace_table.verticalHeader().setDefaultSectionSize(self.trace_table.fontMetrics().height() + 8)
        self.trace_table.setAlternatingRowColors(True)
        self.trace_table.setShowGrid(False)
        self.trace_table.setWordWrap(False)
        self.trace_fit = FitToPane(self.trace_table, TRACE_SAMPLES, TRACE_SHARES, last="Trace", caps=TRACE_CAPS,
                                   floors=TRACE_FLOORS, rest_sample=TRACE_LEAST, pad=12, last_share=TRACE_SHARE,
                                   decorated=("Status",))  # (its colour swatch: "running" read "runn…")
        keep_rows_in_sight(self.trace_table)
        draw_short_forms(self.trace_table)  # (a run's "12 (1 err)" spans read "12 (1 …" in a narrow list: "12")
        ul.addWidget(self.trace_table)
        more = QHBoxLayout()
        self.count_label = elastic(ElidedLabel(""))
        self.count_label.setStyleSheet("color: palette(placeholder-text);")
        self.more_btn = QToolButton(self)
        more.addWidget(self.count_label, 1)
        more.addWidget(self.more_btn)
        ul.addLayout(more)
        split.addWidget(upper)

        lower = QSplitter(Qt.Orientation.Horizontal)
        lower.setChildrenCollapsible(False)  # (a part is never dragged away to nothing)
        tree_box = QWidget()
        tl = QVBoxLayout(tree_box)
        tl.setContentsMargins(0, 0, 0, 0)
        self.tree_caption = caption("Spans")
        tl.addWidget(self.tree_caption)  # the legend gets its own line, so neither cuts the other
        legend = TimelineLegend(tuple(t for t in SPAN_COLORS if t not in ("model_step", "generic")))
        tl.addWidget(legend)
        self.span_model = SpanTreeModel(self)
        self.tree = QTreeView(self)
        self.tree.setModel(self.span_model)
        named(self.tree, "Spans")
        self.tree.setItemDelegate(TimelineDelegate(self.tree))
        self.tree.setUniformRowHeights(True)
        keep_rows_in_sight(self.tree)
        self.tree.setAlternatingRowColors(True)
        self.tree.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.tree.setIndentation(14)
        self.span_fit = FitToPane(self.tree, SPAN_SAMPLES, SPAN_SHARES, last="Timeline", floors=SPAN_FLOORS,
                                  last_share=SPAN_TIMELINE_SHARE, last_least=SPAN_TIMELINE_PX, pad=14,
                                  optional=SPAN_OPTIONAL)
        tl.addWidget(self.tree)
        lower.addWidget(tree_box)

        detail = QWidget()
        dl = QVBoxLayout(detail)
        dl.setContentsMargins(0, 0, 0, 0)
        self.span_title = caption("Span")
        self.span_title.setTextFormat(Qt.TextFormat.PlainText)  # a span's name comes from the trace file
        self.span_facts = elastic(QLabel(""))
        self.span_facts.setTextFormat(Qt.TextFormat.RichText)
        self.span_facts.setWordWrap(True)
        self.span_facts.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.tabs = QTabWidget(self)
        self.tabs.setDocumentMode(True)
        self.chat_view = QTextBrowser(self)
        self.chat_view.setOpenLinks(False)
        self.input_view = CodeEditor("json", read_only=True)
        self.output_view = CodeEditor("json", read_only=True)
        self.attributes_view = CodeEditor("json", read_only=True)
        self.error_view = QTextBrowser(self)
        self.error_view.setFont(mono_font())
        self.span_json_view = CodeEditor("json", read_only=True)
        for widget, (title, _short, _tip) in zip((self.chat_view, self.input_view, self.output_view,
                                                  self.attributes_view, self.error_view, self.span_json_view),
                                                 SPAN_TABS):
            self.tabs.addTab(named(widget, title if title.startswith("Span") else f"Span {title.lower()}"), title)
        self.tab_fit = FittedTabs(self.tabs, SPAN_TABS)  # (at 1,100 px three tabs hid behind scroll arrows)
        dl.addWidget(self.span_title)
        dl.addWidget(self.span_facts)
        dl.addWidget(self.tabs, 1)
        lower.addWidget(detail)
        lower.setStretchFactor(0, 3)
        lower.setStretchFactor(1, 2)
        lower.setSizes([600, 420])
        # Narrower than the span tree and the span's detail need side by side (a 900 px window), the detail
        # goes under the tree (it was cut at its edge, the tree's Timeline out of sight); each part asks the
        # least height its wrapped lines need at the width it has, not at its least width.
        # (side by side the tree needs its legend on one line; stacked, the legend wraps where it must)
        stack_when_narrow(lower, share=55, needs={0: lambda: legend.sizeHint().width()},
                          stacked=lambda s: keep_rows_in_sight(self.tree, STACKED_SPAN_ROWS if s else LEAST_ROWS))
        for part in (upper, tree_box, detail):
            least_height_at_width(part)
        split.addWidget(lower)
        split.setSizes([210, 530])
        root.addWidget(split, 1)

        self.status = status_label()
        root.addWidget(self.status)

        self.filter_edit.textChanged.connect(lambda _t: self._debounce.start())
        self.status_combo.currentIndexChanged.connect(lambda _i: self.refresh())
        self.trace_table.selectionModel().selectionChanged.connect(self._trace_selected)
        self.tree.selectionModel().selectionChanged.connect(self._span_selected)
        self._show_span(None)

    def _register_commands(self) -> None:
        self.commands = CommandRegistry(self)
        add = self.commands.add
        has_span = lambda: self.current_span() is not None  # noqa: E731
        actions = (
            add("traces.refresh", "Reload Traces", self.refresh, shortcut="F5", keywords="spans observability"),
            add("traces.load_more", f"Load {PAGE} More Traces", self.load_more,
                enabled=lambda: self.total is not None and len(self.traces) < self.total),
            add("traces.all_threads", "Show Traces of All Threads", self.toggle_all_threads,
                checkable=True, keywords="filter thread"),
            # (no shortcut of its own: View > Filter's Ctrl+F comes here while the focus is in this pane;
            # the same key on both was ambiguous to Qt, which then ran neither)
            add("traces.filter", "Filter Traces by Name", self.focus_own_filter),
            add("traces.copy_span", "Copy Span as JSON", self.copy_span, shortcut="Ctrl+Shift+C",
                enabled=has_span, keywords="clipboard"),
            add("traces.raw_input", "Show Raw Span Input (JSON)", lambda: self.tabs.setCurrentIndex(TAB_INPUT),
                enabled=has_span, keywords="model_generation prompt messages"),
            add("traces.prices", "Edit Model Prices…", self.edit_prices, keywords="cost dollars tokens price"),
        )
        for action in actions:
            action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        for button, cid, short in ((self.prices_btn, "traces.prices", "Prices…"),
                                   (self.refresh_btn, "traces.refresh", "Reload"),
                                   (self.more_btn, "traces.load_more", f"Load {PAGE} More"),
                                   (self.all_threads_btn, "traces.all_threads", "All Threads")):
            action = self.commands.action(cid)
            action.setIconText(short)
            action.setToolTip(action.text())
            button.setDefaultAction(action)
        self.commands.refresh_enabled()

    def focus_own_filter(self) -> None:
        self.filter_edit.setFocus()
        self.filter_edit.selectAll()

    @property
    def all_threads_action(self) -> QAction:
        return self.commands.action("traces.all_threads")

    def palette_commands(self) -> list[Command]:
        return self.commands.commands()

    @property
    def loading(self) -> bool:
        """A page of traces is being read (``traces_loaded`` fires when it is shown)."""
        return self._loading


    # -- visibility-driven polling -----------------------------------------------------------------
    def showEvent(self, event: Any) -> None:  # noqa: N802
        super().showEvent(event)
        self._poll_timer.start()
        if self._dirty:
            self.refresh()
        else:
            self.poll()

    def _server_back(self) -> None:
        """The database server answers again: a list read that failed is read again now, not after its back-off
        (up to 30 s under a red banner while the window's said the server was back)."""
        if self._retry_s:
            self._retry_at = 0.0
            self.poll()

    def hideEvent(self, event: Any) -> None:  # noqa: N802
        super().hideEvent(event)
        self._poll_timer.stop()

    def poll(self) -> None:
        """Stat the trace files in a worker; reload when they changed or the last read was busy. After a read
        that failed, read again once its back-off has passed (one read at a time, in a worker)."""
        if not self.isVisible():
            self._dirty = True
            return
        if self._polling or self._loading:
            return
        if self._retry_s:  # the last list read failed: nothing to compare with, read again in time
            if time.monotonic() >= self._retry_at:
                self.refresh(keep=True)
            return
        if self.source is None:
            return
        self._polling = True
        watch = self.source.watch
        self.session.run(lambda: traces_fingerprint(watch), on_result=alive_only(self, self._on_fingerprint),
                         on_error=alive_only(self, lambda _e: setattr(self, "_polling", False)), key=self._key + "-poll")

    def _on_fingerprint(self, stamp: tuple[Any, ...]) -> None:
        self._polling = False
        if stamp != self._fingerprint or self.flags["busy"] or self._trace_busy:
            self.refresh(keep=True)

    # -- selection and filters -----------------------------------------------------------------------
    def set_selection(self, selection: Selection) -> None:
        if selection == self.selection and not self._dirty:
            return
        scope_changed = (selection.thread_id, selection.resource_id) != (
            self.selection.thread_id, self.selection.resource_id)
        self.selection = selection
        self.all_threads_action.setEnabled(not selection.empty)
        if scope_changed:
            self.refresh()

    def toggle_all_threads(self) -> None:
        # The state lives here, not in the action: the palette runs the handler without toggling it.
        self.all_threads = not self.all_threads
        self.all_threads_action.setChecked(self.all_threads)
        self.refresh()

    def filters(self) -> TraceFilters:
        all_threads = self.all_threads or self.selection.empty
        return filters_for(self.selection, all_threads=all_threads, name=self.filter_edit.text(),
                           status=self.status_combo.currentData())

    def _scope_text(self) -> str:
        f = self.filters()
        if f.thread_id:
            return f"thread {shown_title(f.thread_id)}"
        if f.resource_id:  # (a delegation's as the tree names it; the stored id on hover)
            return f"resource {resource_label(f.resource_id, self.session.delegations)}"
        return "all threads"

    # -- loading ---------------------------------------------------------------------------------
    def refresh(self, *, keep: bool = False) -> None:
        """Read the first page again; ``keep`` re-reads as many rows as are shown (a poll)."""
        if not self.isVisible():
            self._dirty = True
            return
        self._dirty = False
        self._debounce.stop()
        self._gen += 1
        gen = self._gen
        filters = self.filters()
        limit = max(PAGE, len(self.traces)) if keep else PAGE
        self._loading = True
        self.status.setText("Reading traces…")
        resolver = self.resolver
        self.session.run(lambda: load_traces_page(resolver, filters, 0, limit),
                         on_result=alive_only(self, lambda page: self._on_page(page, gen, filters, keep)),
                         on_error=alive_only(self, lambda exc: self._on_list_error(gen, exc)), key=self._key + "-list")

    def _on_list_error(self, gen: int, exc: BaseException) -> None:
        """The list could not be read: what it showed is the scope read before (another thread's traces, with
        its header), so it goes; the header names the scope asked for."""
        if gen != self._gen:
            return
        self.traces = []
        self.trace_model.set_rows([])
        f = self.filters()
        self.trace_fit.optional = TRACE_OPTIONAL_ONE_THREAD if f.thread_id else TRACE_OPTIONAL_ALL_THREADS
        self.trace_fit.fit()  # (the empty list's columns fitted too: they read "ation" under a sideways bar)
        self.total = None
        self._clear_trace("")
        self.count_label.setText("")
        self.usage = []  # (the tokens and cost line summed the scope read before: another thread's runs)
        self.usage_label.setText("")
        self.usage_label.setToolTip("")
        self.subtitle.setText(self._scope_text())
        self.subtitle.setToolTip(header_tip(self.subtitle.text(), None if f.thread_id else f.resource_id,
                                            self.session.delegations))
        self._loading = False
        # The poll reads again after a back-off: a first read that failed left no source to watch, and the
        # pane read no more until File > Reload; a transient error (a file being replaced) mends itself.
        self._retry_s = min(self._retry_s * 2, RETRY_MAX_S) if self._retry_s else RETRY_FIRST_S
        self._retry_at = time.monotonic() + self._retry_s
        notice = read_error_notice(str(exc) or type(exc).__name__, broken=is_broken_trace_file_error(exc),
                                   location=self.source.location if self.source else None, retry_s=self._retry_s,
                                   server=self.session.store.capabilities.server)
        self.banner.show_message(notice.text, notice.level, [("Try Now", lambda: self.refresh())])
        self.status.setText("")

    def load_more(self) -> None:
        if self.total is None or len(self.traces) >= self.total:
            return
        gen, offset, filters = self._gen, len(self.traces), self.filters()
        resolver = self.resolver
        self.status.setText("Reading more traces…")
        self.session.run(lambda: load_traces_page(resolver, filters, offset, PAGE),
                         on_result=alive_only(self, lambda page: self._on_page(page, gen, filters, True)),
                         on_error=alive_only(self, self._on_error), key=self._key + "-more")

    def _on_page(self, page: TracePage, gen: int, filters: TraceFilters, keep: bool) -> None:
        if gen != self._gen:
            return  # filters changed or a newer reload started: this answer is out of date
        if page.offset == 0:
            self._loading = False
            self._retry_s = 0.0
        elif page.offset != len(self.traces):
            return
        self.source = page.source
        self._fingerprint = page.fingerprint
        rows = page.rows
        self.flags = {"busy": rows.busy, "stale": rows.stale, "missing": rows.missing}
        if not rows.busy and not rows.missing:
            self._fresh_at[filters] = time.monotonic()
        if rows.busy and not rows.stale and page.offset == 0 and keep and self.traces:
            pass  # nothing new could be read: keep showing what is on screen
        else:
            new = list(rows) if page.offset == 0 else [*self.traces, *rows]
            # (one thread's list may leave its Thread column out when narrow: the header names the thread)
            self.trace_fit.optional = TRACE_OPTIONAL_ONE_THREAD if filters.thread_id else TRACE_OPTIONAL_ALL_THREADS
            self._set_traces(new, reload=keep)
            self.trace_fit.fit()
        if page.total is not None and not page.total.busy:
            self.total = int(page.total)
        elif page.total is None:
            self.total = 0 if rows.missing else None
        self._update_banner(filters)
        self._update_counts()
        if page.offset == 0:
            if page.usage is not None:  # read with the page
                self._on_usage(page.usage, self._scope_text(), filters)
            else:
                self._load_usage(filters)
        self.traces_loaded.emit()

    def _set_traces(self, traces: list[TraceSummary], *, reload: bool = False) -> None:
        """Show ``traces``, keeping the trace shown when it is among them. ``reload``: the same scope and
        filters read again (the file changed, more rows): a trace opened by id that was not on the list
        before (Replay's Open Trace, past the first page) stays, read again; another scope clears it."""
        selected = self.trace_id
        before = {t.trace_id: t for t in self.traces}
        self.traces = traces
        self.trace_model.set_rows(traces)
        row = next((i for i, t in enumerate(traces) if t.trace_id == selected), None)
        if row is not None:
            self.trace_table.selectRow(row)  # re-selecting the same id keeps the span view as it is
            fresh = traces[row]
            if before.get(fresh.trace_id) != fresh or self._trace_busy:
                self.open_trace(fresh.trace_id, keep_span=True)
            return
        if selected is not None and reload and selected not in before:
            self.open_trace(selected, keep_span=True)  # opened by id, never on the list: still shown, fresh
            return
        if selected is not None and not self.flags["busy"]:
            # (another thread, resource or filter: nothing "went"; the same list read again: the trace did)
            self._clear_trace("The trace shown before is not in this list any more." if reload else
                              "Pick a trace, then a span." if traces else "No trace to show.")
        if self.trace_id is None and traces:
            self.trace_table.selectRow(0)

    def _update_banner(self, filters: TraceFilters) -> None:
        source = self.source
        fresh = self._fresh_at.get(filters)
        notice = store_notice(
            busy=self.flags["busy"], stale=self.flags["stale"], missing=self.flags["missing"],
            location=source.location if source else "?", kind=source.kind if source else "duckdb",
            age_s=time.monotonic() - fresh if fresh is not None else None, empty=not self.traces,
            filtered=filters != TraceFilters(),
        )
        if notice is None and not self.traces:
            notice = empty_list_notice(filters)
        if notice is None:
            self.banner.hide()
        else:
            self.banner.show_message(notice.text, notice.level)

    def _update_counts(self) -> None:
        shown = len(self.traces)
        total = "?" if self.total is None else f"{self.total:,}"
        self.count_label.setText(f"{shown:,} of {total} traces · newest first")
        source = self.source
        where = {"duckdb": "trace file", "libsql": "Mastra spans table", "memory": "no trace file",
                 "postgres": "spans table"}.get(
            source.kind if source else "", "")
        self.subtitle.setText(f"{self._scope_text()} · {where} {source.location if source else ''}".rstrip())
        f = self.filters()
        named = resource_tip("" if f.thread_id else f.resource_id or "", self.session.delegations)
        self.subtitle.setToolTip("\n".join(t for t in (source.location if source else "", named) if t))
        follows = {"postgres": "reloads when new spans arrive", "memory": "nothing to follow"}.get(
            source.kind if source else "", "reloads when the trace file changes")
        self.status.setText(f"Read at {format_datetime(datetime.now(timezone.utc))} · {follows}")
        self.commands.refresh_enabled()

    # -- tokens and cost ---------------------------------------------------------------------------
    def cost_of(self, trace: TraceSummary) -> CostEstimate:
        return estimate(self.prices, trace.models)

    def _load_usage(self, filters: TraceFilters) -> None:
        resolver, scope = self.resolver, self._scope_text()
        self.session.run(lambda: load_usage(resolver, filters),
                         on_result=alive_only(self, lambda usage: self._on_usage(usage, scope, filters)),
                         on_error=alive_only(self, lambda _e: None), key=self._key + "-usage")

    def _on_usage(self, usage: ReadResult[ModelUsage], scope: str, filters: TraceFilters) -> None:
        if filters != self.filters():
            return  # the view moved on
        self.usage = list(usage)
        self._show_usage(scope)

    def _show_usage(self, scope: str | None = None) -> None:
        text, tip = usage_summary(scope or self._scope_text(), self.usage, self.prices)
        self.usage_label.setText(text)
        self.usage_label.setToolTip(f"{text}\n\n{tip}" if tip else "")  # (the line whole, should it be cut)

    def edit_prices(self) -> None:
        dialog = PriceEditor(self.prices, self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.accepted.connect(lambda: self.set_prices(dialog.table()))
        dialog.open()  # window-modal without a nested event loop
        self.price_editor = dialog

    def set_prices(self, table: dict[str, Price]) -> None:
        self.prices = dict(table)
        QSettings().setValue(PRICES_KEY, dump_prices(self.prices))
        self.trace_model.set_rows(self.trace_model.rows())  # repaint the cost column
        self._show_usage()
        self.status.setText(f"Prices saved for {len(self.prices)} model(s); costs are estimates.")

    def _on_error(self, exc: BaseException) -> None:
        self._loading = False
        text = f"Traces could not be read: {exc or type(exc).__name__}"
        if is_broken_trace_file_error(exc):
            # A damaged (or foreign) trace file: say what it holds and how the user gets a working one.
            text += (" The trace file holds traces only (no conversation): the next traced turn moves it aside "
                     "(its name ending in .broken- and the time) and starts a new one; or delete it, then Reload.")
        self.banner.show_message(text, "error")
        self.status.setText("")

    # -- one trace ---------------------------------------------------------------------------------
    def _trace_selected(self, selected: QItemSelection, _deselected: QItemSelection) -> None:
        indexes = selected.indexes()
        summary = self.trace_model.row_at(indexes[0].row()) if indexes else None
        if summary is not None and summary.trace_id != self.trace_id:
            self.open_trace(summary.trace_id)

    def select_trace(self, row: int) -> None:
        self.trace_table.selectRow(row)

    def open_trace(self, trace_id: str, *, keep_span: bool = False) -> None:
        span_id = self._selected_span_id() if keep_span else None
        self.trace_id = trace_id
        reader = self.source.reader if self.source else None
        if reader is None:
            return
        self.tree_caption.setText("Spans · reading…")
        self.session.run(lambda: reader.get_trace(trace_id),
                         on_result=alive_only(self, lambda spans: self._on_trace(trace_id, spans, span_id)),
                         on_error=alive_only(self, self._on_error), key=self._key + "-trace")

    def _on_trace(self, trace_id: str, spans: ReadResult[SpanRecord], span_id: str | None) -> None:
        if trace_id != self.trace_id:
            return
        self._trace_busy = spans.busy
        if spans.busy and not spans:
            self.tree_caption.setText("Spans · the trace file is busy; retrying…")
            return
        if not spans:  # (a trace opened by id that was deleted, or never written to this store)
            self._clear_trace(f"Trace {trace_id} is not in the trace store (any more): it may have been forgotten, "
                              "or written to another trace file.")
            return
        self.spans = list(spans)
        # A run whose writer is known to live is drawn up to now: its open spans have lasted that long
        # at least. Others (Mastra's own open spans, whose writer nobody can ask) run to the trace's end.
        live = any(s.running and s.span_id not in spans.unfinished and running_writer(s.metadata) for s in spans)
        self.layout_model = layout_trace(self.spans, now=datetime.now(timezone.utc) if live else None,
                                         unfinished=spans.unfinished)
        self.span_model.set_layout(self.layout_model)
        self.tree.expandAll()
        n = len(self.spans)
        errors = sum(1 for r in self.layout_model.rows if r.error)
        running = sum(1 for r in self.layout_model.rows if r.running)
        # A run in progress has no length yet, and one whose writer died never will: no total is made up.
        length = ("never finished (the process writing it is gone)" if spans.unfinished
                  else f"{running} running" if running else format_duration(self.layout_model.total_ms))
        self.tree_caption.setText(f"Spans · {n} · {length}"
                                  + (f" · {errors} with errors" if errors else "")
                                  + (" · stale" if spans.stale else ""))
        index = self.span_model.index_of(span_id) if span_id else QModelIndex()
        if not index.isValid() and self.span_model.rowCount():
            index = self.span_model.index(0, 0)
        if index.isValid():
            self.tree.setCurrentIndex(index)
        self.trace_loaded.emit(trace_id)

    def _clear_trace(self, text: str) -> None:
        self.trace_id = None
        self.spans = []
        self.layout_model = layout_trace([])
        self.span_model.set_layout(self.layout_model)
        self.tree_caption.setText("Spans")
        self._show_span(None, text)

    def select_span(self, span_id: str) -> bool:
        index = self.span_model.index_of(span_id)
        if index.isValid():
            self.tree.setCurrentIndex(index)
        return index.isValid()

    def _selected_span_id(self) -> str | None:
        span = self.current_span()
        return span.span_id if span else None

    def current_span(self) -> SpanRecord | None:
        node = self.tree.currentIndex().data(ROW_ROLE) if self.tree.currentIndex().isValid() else None
        return node.span if node is not None else None

    def _span_selected(self, _selected: QItemSelection, _deselected: QItemSelection) -> None:
        self._show_span(self.current_span())

    def changeEvent(self, event: Any) -> None:  # noqa: N802 - Qt's name
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and hasattr(self, "commands"):
            self._show_span(self.current_span())  # the transcript's colours follow the theme

    # -- span detail -------------------------------------------------------------------------------
    def _show_span(self, span: SpanRecord | None, empty_text: str = "Pick a trace, then a span.") -> None:
        if hasattr(self, "commands"):
            self.commands.refresh_enabled()
        self._fill_span(span, empty_text)
        self.tab_fit.fit()  # (the Messages and Error tabs come and go with the span)

    def _fill_span(self, span: SpanRecord | None, empty_text: str) -> None:
        if span is None:
            self.span_title.setText("Span")
            muted = self.span_facts.palette().color(QPalette.ColorRole.PlaceholderText).name()  # (the theme's)
            self.span_facts.setText(f"<span style='color:{muted}'>{empty_text}</span>")
            for view in (self.input_view, self.output_view, self.attributes_view, self.span_json_view):
                view.load("")
            self.chat_view.setHtml("")
            self.error_view.setHtml("")
            self.tabs.setTabVisible(TAB_MESSAGES, False)
            self.tabs.setTabVisible(TAB_ERROR, False)
            return
        self.span_title.setText(("⚠ " if span.error is not None else "") + span.name)
        row = self.layout_model.row_of(span.span_id)
        facts = span_facts(span, self.layout_model.start, unfinished=row is not None and row.unfinished)
        muted = self.span_facts.palette().color(QPalette.ColorRole.PlaceholderText).name()  # (the theme's)
        cells = "".join(f"<tr><td style='color:{muted}; padding-right:10px'>{label}</td><td>{_esc(value)}</td></tr>"
                        for label, value in facts)
        self.span_facts.setText(f"<table cellspacing='0' cellpadding='1'>{cells}</table>")
        transcript = chat_transcript(span)
        self.tabs.setTabVisible(TAB_MESSAGES, transcript is not None)
        dark = self.palette().base().color().lightness() < 128
        chat = transcript_html(transcript, dark=dark) if transcript is not None else ""
        fit_wrap(self.chat_view, chat)  # (a model call's 200,000-character message held the UI thread 22 s)
        self.chat_view.setHtml(chat)
        self.input_view.load(pretty_json(span.input))
        self.output_view.load(pretty_json(span.output))
        self.attributes_view.load(pretty_json(span.attributes))
        self.span_json_view.load(pretty_json(span.to_json_dict()))
        headline, stack = error_parts(span.error)
        self.tabs.setTabVisible(TAB_ERROR, bool(headline))
        error = readable_html(f"<div style='color:{ERROR_COLOR}; font-weight:600'>{_esc(headline)}</div>"
                              f"<pre style='white-space:pre-wrap'>{_esc(stack)}</pre>", self) if headline else ""
        fit_wrap(self.error_view, error)
        self.error_view.setHtml(error)  # (see ChatPane)
        for tab, has in ((TAB_INPUT, span.input is not None), (TAB_OUTPUT, span.output is not None),
                         (TAB_ATTRIBUTES, span.attributes is not None)):
            self.tabs.setTabEnabled(tab, has)
        if headline:
            self.tabs.setCurrentIndex(TAB_ERROR)
        elif transcript is not None:
            self.tabs.setCurrentIndex(TAB_MESSAGES)
        elif not self.tabs.isTabEnabled(self.tabs.currentIndex()) or not self.tabs.isTabVisible(
                self.tabs.currentIndex()):
            first = next((t for t in (TAB_INPUT, TAB_OUTPUT, TAB_ATTRIBUTES) if self.tabs.isTabEnabled(t)), TAB_SPAN)
            self.tabs.setCurrentIndex(first)

    def copy_span(self) -> None:
        span = self.current_span()
        if span is not None:
            text = pretty_json(span.to_json_dict())
            QGuiApplication.clipboard().setText(text)
            self.status.setText(f"Copied span '{span.name}' as JSON ({len(text):,} characters).")


def _esc(text: str) -> str:
    return html.escape(text)


__all__ = ["PAGE", "TracesPane"]
