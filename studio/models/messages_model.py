"""The message list of one thread as a lazily loaded Qt list model.

``rowCount`` is the thread's full message count, known from one cheap count. Opening a thread reads
the count and the newest ``FIRST_ROWS`` messages in one worker job, with a keyset read from the end of
the thread's index (``MemoryStore.browse_newest``): a view opens at the bottom, and those rows cost the
same in a 100,000-message thread as in a short one. Every other row is read in pages on worker threads
when a view first asks for it, scrolling up included (``data`` never touches the database). At most
``MAX_IN_FLIGHT`` page reads run at once and the most recently wanted page goes first, so dragging
the scroll bar across 100,000 rows never builds a queue of pages nobody looks at any more.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable

from PySide6.QtCore import (
    QAbstractListModel,
    QByteArray,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    Qt,
    QTimer,
    Signal,
)

from studio import reads as queries
from studio.logic.dates import relative_time
from studio.logic.message_format import MessageRow, format_time
from studio.logic.row_cache import PageCache
from studio.widgets.plain_tip import rich_tip

if TYPE_CHECKING:  # pragma: no cover
    from core import Store

# runner(fn, on_result, on_error, key) -> job id: StudioSession.run, or a synchronous stand-in in tests
Runner = Callable[..., Any]

MAX_IN_FLIGHT = 2
MAX_WANTED = 8
FIRST_ROWS = 60  # newest rows read when a thread opens: more than a tall window shows


class MessageRoles:
    ROW = Qt.ItemDataRole.UserRole + 1  # the MessageRow, or None while loading
    ID = Qt.ItemDataRole.UserRole + 2
    ROLE = Qt.ItemDataRole.UserRole + 3
    TIME = Qt.ItemDataRole.UserRole + 4
    PREVIEW = Qt.ItemDataRole.UserRole + 5
    LOADED = Qt.ItemDataRole.UserRole + 6


class MessageListModel(QAbstractListModel):
    loaded = Signal(int)  # a thread opened: its message count
    rows_arrived = Signal(int, int)  # first, last row of a page that arrived
    grew = Signal(int)  # rows appended by a refresh (another process wrote)
    failed = Signal(str)

    def __init__(self, runner: Runner, store: Store, page_size: int = 200, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._run = runner
        self._store = store
        self._cache: PageCache[MessageRow] = PageCache(page_size=page_size)
        self._thread_id: str | None = None
        self._total = 0
        self._wanted: OrderedDict[int, None] = OrderedDict()
        self._in_flight = 0
        self._open_token = 0
        self._flush = QTimer(self)
        self._flush.setSingleShot(True)
        self._flush.setInterval(0)
        self._flush.timeout.connect(self.flush_requests)

    # -- state -------------------------------------------------------------------------------
    @property
    def thread_id(self) -> str | None:
        return self._thread_id

    @property
    def page_size(self) -> int:
        return self._cache.page_size

    def row_at(self, row: int) -> MessageRow | None:
        return self._cache.row(row) if 0 <= row < self._total else None

    def find_loaded(self, message_id: str) -> int | None:
        return self._cache.find(lambda r: r.id == message_id)

    # -- Qt model ----------------------------------------------------------------------------
    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else self._total

    def roleNames(self) -> dict[int, QByteArray]:
        names = {MessageRoles.ROW: b"row", MessageRoles.ID: b"messageId", MessageRoles.ROLE: b"role",
                 MessageRoles.TIME: b"time", MessageRoles.PREVIEW: b"preview", MessageRoles.LOADED: b"loaded"}
        return {role: QByteArray(name) for role, name in names.items()}

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < self._total:
            return None
        row = self._cache.row(index.row())
        self._want(index.row())
        if role == MessageRoles.ROW:
            return row
        if role == MessageRoles.LOADED:
            return row is not None
        if row is None:
            return "…" if role == Qt.ItemDataRole.DisplayRole else None
        if role in (Qt.ItemDataRole.DisplayRole, MessageRoles.PREVIEW):
            return row.preview if role == MessageRoles.PREVIEW else f"{row.role}: {row.preview}"
        if role == MessageRoles.ID:
            return row.id
        if role == MessageRoles.ROLE:
            return row.role
        if role == MessageRoles.TIME:
            return format_time(row.created_at)
        if role == Qt.ItemDataRole.ToolTipRole:
            when = f"{format_time(row.created_at)} ({relative_time(row.created_at)})"
            # the text too: the row shows two lines of it (the whole message is in the view below)
            return rich_tip(f"{row.role} · {when} · {row.id}\n{row.preview}")
        return None

    # -- loading -----------------------------------------------------------------------------
    def open_thread(self, thread_id: str | None) -> None:
        """Show another thread: one worker job counts it and reads its last page."""
        self.beginResetModel()
        self._thread_id = thread_id
        self._total = 0
        self._cache.clear()
        self._wanted.clear()
        self.endResetModel()
        self._open_token += 1
        if thread_id is None:
            self.loaded.emit(0)
            return
        token, generation, store = self._open_token, self._cache.generation, self._store

        def done(result: tuple[int, list[MessageRow]]) -> None:
            if token != self._open_token:
                return
            total, rows = result
            self._put_newest(generation, total, rows)
            self.beginResetModel()
            self._total = total
            self.endResetModel()
            self.loaded.emit(total)

        self._run(lambda: queries.load_newest(store, thread_id, FIRST_ROWS), on_result=done,
                  on_error=self._on_error, key=f"messages-open:{id(self)}")

    def _put_newest(self, generation: int, total: int, rows: list[MessageRow]) -> None:
        """File the newest rows (positions ``total - len(rows)`` .. ``total``) under their pages: the
        oldest of them may start inside a page, which then holds only its end. (A delete between the
        count and the read could leave more rows than the count: the newest ``total`` are kept, and
        the session's change poll re-reads them.)"""
        rows = rows[max(0, len(rows) - total):]
        size, first = self.page_size, total - len(rows)
        row = first
        while row < total:
            page = row // size
            end = min(total, (page + 1) * size)
            self._cache.put(page, generation, rows[row - first:end - first], start=row - page * size)
            row = end

    def refresh(self) -> None:
        """The file changed: recount, keep showing what we have, re-read what is looked at."""
        if self._thread_id is None:
            return
        self._cache.invalidate()
        token, store, thread_id = self._open_token, self._store, self._thread_id

        def done(total: int) -> None:
            if token != self._open_token:
                return
            old = self._total
            if total > old:
                self.beginInsertRows(QModelIndex(), old, total - 1)
                self._total = total
                self.endInsertRows()
                self.grew.emit(total - old)
            elif total < old:
                self.beginRemoveRows(QModelIndex(), total, old - 1)
                self._total = total
                self.endRemoveRows()
            if self._total:
                self.dataChanged.emit(self.index(0), self.index(self._total - 1))

        self._run(lambda: queries.count_messages(store, thread_id), on_result=done, on_error=self._on_error,
                  key=f"messages-count:{id(self)}")

    def _want(self, row: int) -> None:
        page = self._cache.needs(row)
        if page is None:
            return
        self._wanted[page] = None
        self._wanted.move_to_end(page)
        while len(self._wanted) > MAX_WANTED:
            self._wanted.popitem(last=False)
        if not self._flush.isActive():
            self._flush.start()

    def previews(self, first: int, last: int) -> list[str]:
        """The preview texts of the loaded rows ``first``..``last``."""
        rows = (self._cache.row(i) for i in range(max(first, 0), min(last + 1, self._total)))
        return [row.preview for row in rows if row is not None]

    def flush_requests(self) -> None:
        while self._wanted and self._in_flight < MAX_IN_FLIGHT:
            page, _ = self._wanted.popitem(last=True)  # newest wish first
            if self._cache.needs(page * self.page_size) is None:
                continue
            self._request(page)

    def _request(self, page: int) -> None:
        self._cache.mark_requested(page)
        self._in_flight += 1
        token, generation, store, thread_id = self._open_token, self._cache.generation, self._store, self._thread_id
        offset, limit = self._cache.page_range(page)
        assert thread_id is not None

        def done(rows: list[MessageRow]) -> None:
            self._in_flight -= 1
            if token == self._open_token and self._cache.put(page, generation, rows):
                first, last = offset, min(offset + len(rows), self._total) - 1
                if last >= first:
                    self.dataChanged.emit(self.index(first), self.index(last))
                    self.rows_arrived.emit(first, last)
            self.flush_requests()

        def failed(exc: BaseException) -> None:
            self._in_flight -= 1
            self._cache.forget_request(page)
            self._on_error(exc)

        self._run(lambda: queries.load_page(store, thread_id, offset, limit), on_result=done, on_error=failed)

    def _on_error(self, exc: BaseException) -> None:
        self.failed.emit(str(exc) or type(exc).__name__)
