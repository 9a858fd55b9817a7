"""Resources and their threads (title, message count, last activity), a filter and full-text search.

Typing filters the tree at once (no I/O: the proxy filters what is loaded). Enter searches the text
of every message across all threads in a worker and lists the hits; picking one opens its thread at
that message. A refresh (the file changed) updates rows in place, so selection and scroll stay.
"""

from __future__ import annotations

from bisect import bisect_right
from datetime import datetime, timezone
from typing import Any

from PySide6.QtCore import (
    QAbstractListModel,
    QEvent,
    QItemSelectionModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    Qt,
    Signal,
)
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListView,
    QStackedWidget,
    QToolButton,
    QTreeView,
    QVBoxLayout,
    QWidget,
)

from studio import reads as queries
from studio.logic.dates import format_datetime
from studio.logic.message_format import format_time, snippet
from studio.logic.thread_labels import shown_title, thread_label
from studio.reads import SearchFound, SearchHit, TreeData, search_note, search_summary
from studio.models.resource_tree import ResourceTreeModel, TreeRoles, make_tree_proxy
from studio.selection import Selection
from studio.session import StudioSession
from studio.widgets.banner import Banner
from studio.widgets.elided_lines import fit_rows_to_width
from studio.widgets.pane_header import elastic
from studio.widgets.plain_tip import plain_tip
from studio.widgets.resource_label_delegate import ResourceLabelDelegate
from studio.widgets.a11y import named

AUTO_EXPAND_LIMIT = 25  # a resource is expanded when it first appears, while the tree holds at most this many
NO_THREADS = ("No threads in this database yet. An agent's first turn here starts one (or the Chat Playground, "
              "Ctrl+6); File > Import… brings in threads exported from another database.")


class SearchResultsModel(QAbstractListModel):
    HIT = Qt.ItemDataRole.UserRole + 1

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self.hits: list[SearchHit] = []
        self.query = ""

    def set_hits(self, query: str, hits: list[SearchHit]) -> None:
        self.beginResetModel()
        self.query, self.hits = query, hits
        self.endResetModel()

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.hits)

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        hit = self.hits[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return self._text(hit)
        if role == self.HIT:
            return hit
        if role == Qt.ItemDataRole.ToolTipRole:  # the row's text whole (the list cuts its lines with "…")
            return plain_tip(f"{self._text(hit)}\n\nresource {shown_title(hit.resource_id)}\n"
                             f"thread {shown_title(hit.thread_id)}\nmessage {shown_title(hit.message_id)}")
        return None

    def _text(self, hit: SearchHit) -> str:
        title = thread_label(hit.thread_title, hit.thread_id, frozenset())  # (untitled: its short id too)
        return f"{title}  ·  {hit.role}  ·  {format_time(hit.created_at)}\n{snippet(hit.text, self.query)}"


TITLE_LEAST_CHARS = 30  # a thread title's least room, in "x" widths (after its indent), before the date column gives way
TITLE_FLOOR_CHARS = 18  # ... or, where every title reads whole in less, that room, never less than this
# ... or, where only a few titles are longer than the room (one, or at most this share of the threads), that room: the
# few are cut in the middle (whole on hover) and every thread keeps its date. One long title hid the date of all (two
# chats titled "Plan a picnic number 1" and "… 2" at a 1,440 px window, found 2026-12-07 by a walk of the app).
TITLES_CUT_SHARE = 0.25
LABEL_WIDTHS_KEPT = 50_000  # thread labels whose widths are kept across loads (past it: measured again)
TREE_INDENT = 12  # each level's indent (Qt's 20, twice before a thread's title, left 16 px less of a 1,440 px list)


class _DateGivesWay(QObject):
    """Fits the thread list's date column to the list's width as the list is resized."""

    def __init__(self, pane: "ResourcesPane") -> None:
        super().__init__(pane)
        self.pane = pane

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        if event.type() == QEvent.Type.Resize:
            self.pane.fit_date_column()
        return False


class ResourcesPane(QWidget):
    selection_changed = Signal(object)  # Selection (resource, thread) picked in the tree
    hit_activated = Signal(object)  # Selection with message_id: a search hit to open
    texts_shown = Signal(list)  # the thread titles and resource ids a load put in the tree (the font check)
    # Selection: the current thread (or resource) left the tree at a refresh (another program deleted it). Qt
    # would make the row's neighbour current, which is not the user's pick: the tree selects nothing instead.
    selection_lost = Signal(object)

    def __init__(self, session: StudioSession, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("resourcesPane")
        # (no least width of its own: the window's ``SideWidth`` gives the list its least, a share of the window)
        self.session = session
        self._loaded_once = False
        # The resources the tree has listed: one that appears later (the demo seeding on first launch, an agent
        # writing while the Studio is open) is expanded as the first load's were; one the user collapsed stays so.
        self._listed: set[str] = set()
        self._pending: Selection | None = None
        # The first row picked for the user on the first load, while they have picked nothing themselves: a load
        # that puts another row first (the demo seeded while the first load ran) moves the pick to it.
        self._auto: Selection | None = None
        self._picking = False  # (the tree's own pick: not the user's)
        self._applying = False  # (a row removed by a refresh moves Qt's current row: not a pick of the user's)

        self.filter = QLineEdit(self)
        self.filter.setObjectName("treeFilter")
        named(self.filter, "Filter threads")
        self.filter.setPlaceholderText("Filter threads…   ⏎ searches all messages")
        self.filter.setClearButtonEnabled(True)

        self.model = ResourceTreeModel(self)
        self.proxy = make_tree_proxy(self.model, self)
        self.tree = QTreeView(self)
        self.tree.setObjectName("resourceTree")
        named(self.tree, "Resources and threads")
        self.tree.setModel(self.proxy)
        self.tree.setUniformRowHeights(True)
        self.tree.setIndentation(TREE_INDENT)
        # A long title is cut in the middle: a series of alike titles differs at the end ("… day 2"), which
        # a cut at the right hid (``studio.logic.thread_labels``).
        self.tree.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        # ... except a delegation's row, fitted so who delegated, to which agent, and the mark all stay.
        self.tree.setItemDelegateForColumn(0, ResourceLabelDelegate(self.model, self.tree))
        self.tree.setAlternatingRowColors(False)
        self.tree.setSortingEnabled(False)
        header = self.tree.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        # The count and date columns are sized from the loaded data's texts (``_size_columns``), not by Qt's
        # ResizeToContents, which asks a thousand rows or more for their text on every load.
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Fixed)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.Fixed)
        # In a narrow list (a 720 px window) the date column goes while more than a few titles (``TITLES_CUT_SHARE``)
        # would be cut beside it, or where titles are long while they would have less than ``TITLE_LEAST_CHARS``
        # (each row's tooltip says its last activity): titles are what users scan.
        self._date_width = 0
        self._title_widths: list[int] = []  # every thread title's cell, as loaded, in order of width
        # Each thread label's width in the tree's font, kept across loads (a load of thousands of threads measured
        # them all again on the UI thread: ~50-80 ms at 10,000), and for which font it was measured.
        self._label_widths: dict[str, int] = {}
        self._label_widths_for: tuple[str, float] = ("", 0.0)
        self._date_fit = _DateGivesWay(self)
        self.tree.viewport().installEventFilter(self._date_fit)

        self.results = SearchResultsModel(self)
        self.results_view = QListView(self)
        self.results_view.setObjectName("searchResults")
        self.results_view.setModel(self.results)
        # Rows as wide as the pane, each line cut with "…" (whole in the tooltip): a long snippet made the
        # list scroll sideways, cut at the edge with nothing saying so.
        self.results_delegate = fit_rows_to_width(self.results_view)
        self.results_view.setUniformItemSizes(True)
        self.results_label = elastic(QLabel(self))
        self.results_label.setTextFormat(Qt.TextFormat.PlainText)  # it quotes the query and the database's errors
        self.results_label.setObjectName("searchSummary")
        back = QToolButton(self)
        back.setText("✕ Back to Threads")
        back.clicked.connect(self.show_tree)
        results_page = QWidget(self)
        rl = QVBoxLayout(results_page)
        rl.setContentsMargins(0, 0, 0, 0)
        top = QHBoxLayout()
        top.addWidget(self.results_label, 1)
        top.addWidget(back)
        rl.addLayout(top)
        # What a search did not look at (``search_note``), in full: it changes what the list means.
        self.results_note = QLabel(self)
        self.results_note.setObjectName("searchNote")
        self.results_note.setWordWrap(True)
        self.results_note.hide()
        rl.addWidget(self.results_note)
        rl.addWidget(self.results_view)

        self.stack = QStackedWidget(self)
        self.stack.addWidget(self.tree)
        self.stack.addWidget(results_page)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.setSpacing(6)
        layout.addWidget(self.filter)
        # A tree that could not be read must not look like an empty database: the reason (for a damaged
        # file, how to salvage it) stays above it until a read succeeds.
        self.banner = Banner(self)
        self.banner.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.banner)
        layout.addWidget(self.stack)

        self.filter.textChanged.connect(self._on_filter)
        self.filter.returnPressed.connect(self.search)
        self.tree.selectionModel().currentChanged.connect(self._on_current)
        self.results_view.activated.connect(self._on_hit)
        self.results_view.clicked.connect(self._on_hit)

    # -- data --------------------------------------------------------------------------------
    def refresh(self) -> None:
        store = self.session.store
        self.session.run(lambda: queries.load_tree(store), on_result=self._apply, on_error=self._load_failed,
                         key=f"tree:{id(self)}")

    def _load_failed(self, exc: BaseException) -> None:
        self.banner.show_message(f"The threads could not be read: {str(exc) or type(exc).__name__}", "error")

    def _apply(self, data: TreeData) -> None:
        if data.resources:
            self.banner.hide()
        else:  # an empty tree alone looked like a list still loading, or a filter hiding everything
            self.banner.show_message(NO_THREADS, "info")
        before = self.current_selection()
        self._applying = True
        try:
            self.model.apply(data)
        finally:
            self._applying = False
        if not before.empty and not self.model.index_of(before.resource_id or "", before.thread_id).isValid():
            self.tree.selectionModel().clearSelection()
            self.tree.selectionModel().setCurrentIndex(QModelIndex(), QItemSelectionModel.SelectionFlag.NoUpdate)
            self.selection_lost.emit(before)
        self.session.delegations = data.delegations  # (the panes' headers name resources as the tree does)
        self._size_columns(data)
        appeared = [r.id for r in data.resources if r.id not in self._listed]
        self._listed.update(appeared)
        if appeared and len(data.resources) <= AUTO_EXPAND_LIMIT:
            for resource_id in appeared:
                self.tree.expand(self.proxy.mapFromSource(self.model.index_of(resource_id, None)))
        first_load = not self._loaded_once and bool(data.resources)  # (the first with data, not an empty file)
        self._loaded_once = self._loaded_once or first_load
        # (only when resources appeared: the first launch's seeding; an agent writing to a thread the tree already
        # lists reorders it, and the row a user is reading must not move away from under them)
        if self._pending is None and (first_load or (appeared and self._auto is not None
                                                     and self.current_selection() == self._auto)):
            first = self._first_row()
            if first != self.current_selection():
                self._auto = self._pending = first
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self._picking = pending == self._auto
            try:
                self.set_selection(pending)
            finally:
                self._picking = False
        self.texts_shown.emit([r.id for r in data.resources]
                              + [s.thread.title or "" for threads in data.threads.values() for s in threads])

    def _first_row(self) -> Selection | None:
        """The tree's first thread row (its first resource's first thread), if any."""
        first = self.proxy.index(0, 0)
        if not first.isValid() or not self.proxy.rowCount(first):
            return None
        return Selection(first.data(TreeRoles.RESOURCE_ID), self.proxy.index(0, 0, first).data(TreeRoles.THREAD_ID))

    def _size_columns(self, data: TreeData) -> None:
        """The count and date columns as wide as their widest text in ``data`` (and their titles): what
        ResizeToContents gives, measured on the distinct texts instead of asked of every row. The cell's
        padding (the theme's style sheet adds some) is what the view's size hint for one row adds to that
        row's text."""
        reference = self.proxy.index(0, 0)
        if not reference.isValid():
            return
        counts = {s.message_count for s in data.resources}
        counts.update(t.message_count for threads in data.threads.values() for t in threads)
        metrics = self.tree.fontMetrics()
        # (a date is always ``YYYY-MM-DD HH:MM:SS`` or a dash: ``format_datetime``, the one date format)
        widest = {1: max((metrics.horizontalAdvance(f"{n:,}") for n in counts), default=0),
                  2: max(metrics.horizontalAdvance(format_datetime(datetime.now(timezone.utc))),
                         metrics.horizontalAdvance("0000-00-00 00:00:00"))}
        header = self.tree.header()
        for column, width in widest.items():
            cell = reference.siblingAtColumn(column)
            padding = self.tree.sizeHintForIndex(cell).width() - metrics.horizontalAdvance(str(cell.data() or ""))
            header.resizeSection(column, max(width + max(padding, 0) + 2, header.sectionSizeHint(column)))
        self._date_width = header.sectionSize(2) or self._date_width
        self._title_widths = self._title_cells(metrics, reference)
        self.fit_date_column()

    def _title_cells(self, metrics: QFontMetrics, reference: QModelIndex) -> list[int]:
        """Every thread title's cell as the tree shows it (its label and the cell's padding, measured as
        ``_size_columns`` measures the counts'), in order of width."""
        text = str(reference.data() or "")
        padding = max(self.tree.sizeHintForIndex(reference).width() - metrics.horizontalAdvance(text), 0)
        font = (self.tree.font().key(), metrics.fontDpi())
        if self._label_widths_for != font or len(self._label_widths) > LABEL_WIDTHS_KEPT:
            self._label_widths.clear()  # (another font or screen: measured again)
            self._label_widths_for = font
        widths = self._label_widths
        cells = []
        for label in self.model.thread_labels():  # (each label measured once while the font stays)
            width = widths.get(label)
            if width is None:
                width = widths[label] = metrics.horizontalAdvance(label)
            cells.append(width + padding)
        cells.sort()
        return cells

    def titles_cut(self, room: int) -> int:
        """How many threads' titles do not read whole in ``room`` (``title_room``: after the row's indent; the title's
        cell starts one indent further where the tree draws its resources' arrows)."""
        decoration = self.tree.indentation() if self.tree.rootIsDecorated() else 0
        return len(self._title_widths) - bisect_right(self._title_widths, room - decoration)

    def fit_date_column(self) -> None:
        """The date column (Latest: the last activity) shown while every title reads whole beside it, or all but a few
        (``TITLES_CUT_SHARE``), or the titles keep ``TITLE_LEAST_CHARS`` "x" widths (longer ones cut in the middle),
        and never below ``TITLE_FLOOR_CHARS``."""
        if not self._date_width:
            return
        header = self.tree.header()
        room = self.title_room(self._date_width)
        x = self.tree.fontMetrics().horizontalAdvance("x")
        few = max(1, int(len(self._title_widths) * TITLES_CUT_SHARE))  # (one long title never hides every date)
        many_cut = not self._title_widths or self.titles_cut(room) > few
        hide = room < x * TITLE_FLOOR_CHARS or (room < x * TITLE_LEAST_CHARS and many_cut)
        if self.tree.isColumnHidden(2) != hide:
            self.tree.setColumnHidden(2, hide)
            if not hide:
                header.resizeSection(2, self._date_width)

    def title_room(self, date_width: int | None = None) -> int:
        """The px a thread's title has beside the count and (``date_width``, else the date column as shown) date
        columns: a thread row is indented under its resource (the indent was left out, so titles kept ~20 px less
        than ``TITLE_LEAST_CHARS`` said)."""
        header = self.tree.header()
        if date_width is None:
            date_width = 0 if self.tree.isColumnHidden(2) else header.sectionSize(2)
        return self.tree.viewport().width() - header.sectionSize(1) - date_width - self.tree.indentation()

    def thread_rows(self) -> list[tuple[str, str, int]]:
        """(resource id, thread title, message count) of every visible thread (tests, screenshots)."""
        out = []
        for r in range(self.proxy.rowCount()):
            parent = self.proxy.index(r, 0)
            for t in range(self.proxy.rowCount(parent)):
                idx = self.proxy.index(t, 0, parent)
                count = self.proxy.index(t, 1, parent).data()
                out.append((idx.data(TreeRoles.RESOURCE_ID), idx.data(), int(count.replace(",", ""))))
        return out

    # -- selection ---------------------------------------------------------------------------
    def set_selection(self, selection: Selection) -> None:
        if selection.resource_id is None:
            self._pending = None
            self.tree.selectionModel().clearSelection()  # e.g. the selected resource was forgotten
            self.tree.selectionModel().setCurrentIndex(QModelIndex(), QItemSelectionModel.SelectionFlag.NoUpdate)
            return
        source = self.model.index_of(selection.resource_id, selection.thread_id)
        if not source.isValid():
            self._pending = selection  # not loaded yet: apply when it is
            return
        index = self.proxy.mapFromSource(source)
        if not index.isValid():  # hidden by the filter
            self.filter.clear()
            index = self.proxy.mapFromSource(source)
        if index.parent().isValid():
            self.tree.expand(index.parent())
        if self.tree.currentIndex() != index:
            self.tree.selectionModel().setCurrentIndex(
                index, QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows
            )
        self.tree.scrollTo(index)

    def current_selection(self) -> Selection:
        index = self.tree.currentIndex()
        if not index.isValid():
            return Selection()
        return Selection(index.data(TreeRoles.RESOURCE_ID), index.data(TreeRoles.THREAD_ID))

    def _on_current(self, current: QModelIndex, _previous: QModelIndex) -> None:
        if current.isValid() and not self._applying:
            if not self._picking:
                self._auto = None  # the user's pick (or the app's): kept from now on
            self.selection_changed.emit(self.current_selection())

    def _on_filter(self, text: str) -> None:
        self.proxy.setFilterFixedString(text.strip())
        if text.strip():
            self.tree.expandAll()
        if self.stack.currentIndex() != 0 and not text.strip():
            self.show_tree()

    # -- search ------------------------------------------------------------------------------
    def search(self, text: str | None = None) -> None:
        query = (self.filter.text() if text is None else text).strip()
        if not query:
            return
        store = self.session.store
        self.results_label.setText(f"Searching for “{query}”…")
        self.results_note.hide()
        self.stack.setCurrentIndex(1)
        self.session.run(lambda: queries.search_messages(store, query), key=f"search:{id(self)}",
                         on_result=lambda hits: self._show_hits(query, hits),
                         on_error=lambda exc: self._search_failed(query, exc))

    def _search_failed(self, query: str, exc: BaseException) -> None:
        """Say so where "Searching…" was, instead of leaving it there."""
        self.results.set_hits(query, [])
        self.results_label.setText(f"The search for “{query}” failed: {str(exc) or type(exc).__name__}")
        self.results_label.setToolTip(plain_tip(self.results_label.text()))

    def _show_hits(self, query: str, found: SearchFound) -> None:
        self.results.set_hits(query, found.hits)
        self.results_label.setText(search_summary(query, found))
        self.results_label.setToolTip(plain_tip(self.results_label.text()))
        note = search_note(found)
        self.results_note.setText(note)
        self.results_note.setVisible(bool(note))

    def show_tree(self) -> None:
        self.stack.setCurrentIndex(0)

    def _on_hit(self, index: QModelIndex) -> None:
        hit: SearchHit = index.data(SearchResultsModel.HIT)
        self.set_selection(Selection(hit.resource_id, hit.thread_id))
        self.hit_activated.emit(Selection(hit.resource_id, hit.thread_id, hit.message_id))

    def focus_filter(self) -> None:
        self.show_tree()
        self.filter.setFocus()
        self.filter.selectAll()
