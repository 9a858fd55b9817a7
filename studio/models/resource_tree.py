"""Resources and their threads as a two-level Qt tree model, updated in place.

The model applies a fresh ``TreeData`` as inserts, removals, ``dataChanged`` and, when the order of
last activity changed, a layout change — never a reset — so a refresh after another process wrote
keeps the view's selection, expanded rows and scroll position. The model keeps its rows in order
itself (most recent activity first, ties in first-seen order): a sorting proxy asked the model's
``data`` twice per comparison, n log n times, on the UI thread — ~0.15 s for a resource of 3,000
threads at every load, expanded or not. The text filter is the proxy's job (``make_tree_proxy``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from PySide6.QtCore import (
    QAbstractItemModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QSortFilterProxyModel,
    Qt,
)
from PySide6.QtGui import QFont

from studio.logic.dates import date_tooltip, format_datetime
from studio.logic.thread_labels import (
    NO_DELEGATIONS,
    UNTITLED,
    Delegations,
    delegation_note,
    is_delegation,
    repeated_titles,
    resource_label,
    shared_id_prefix,
    shown_title,
    thread_label,
    untitled_openings,
    untitled_starts,
)
from studio.reads import TreeData
from studio.widgets.plain_tip import plain_tip

if TYPE_CHECKING:  # pragma: no cover - loaded with the tree's data, on a worker
    from core.storage.memory_store import ResourceSummary, ThreadSummary

COLUMNS = ("Thread", "Msgs", "Latest")  # (the date column's header short: its width is the titles' room)
COLUMN_TIPS = ("", "Messages stored in the thread (a resource: in all of its threads)",
               "Last activity: the newest message's time (hover a row for how long ago)")


class TreeRoles:
    KIND = Qt.ItemDataRole.UserRole + 1  # "resource" | "thread"
    RESOURCE_ID = Qt.ItemDataRole.UserRole + 2
    THREAD_ID = Qt.ItemDataRole.UserRole + 3
    SORT = Qt.ItemDataRole.UserRole + 4  # last activity as epoch seconds
    FILTER = Qt.ItemDataRole.UserRole + 5  # what the text filter matches
    OPENING = Qt.ItemDataRole.UserRole + 6  # a thread's label quotes its first words (untitled): cut at its end


_SORT_ROLE = int(TreeRoles.SORT)


def plan_update(old: Sequence[str], new: Sequence[str]) -> tuple[list[int], list[str]]:
    """Rows to remove (highest first, so earlier rows keep their numbers) and ids to append."""
    keep = set(new)
    removed = [i for i in range(len(old) - 1, -1, -1) if old[i] not in keep]
    present = set(old)
    added = [k for k in new if k not in present]
    return removed, added


@dataclass
class _ResourceNode:
    key: int
    summary: ResourceSummary
    threads: list[ThreadSummary] = field(default_factory=list)
    # The titles more than one of its threads has (``thread_labels.repeated_titles``): worked out when a
    # thread's text is first asked for, again after the threads change.
    repeated: frozenset[str] | None = None
    # The head its threads' ids share (``thread_labels.shared_id_prefix``), left out of the ids shown.
    id_prefix: str | None = None
    # When its untitled threads started, as their labels say it (``thread_labels.untitled_starts``).
    starts: dict[str, str] | None = None
    # The first words of its untitled threads' first user messages (``thread_labels.untitled_openings``).
    openings: dict[str, str] | None = None

    def repeated_titles(self) -> frozenset[str]:
        """The titles more than one thread has, an untitled thread's being its quoted first words."""
        if self.repeated is None:
            words = self.untitled_openings()
            self.repeated = repeated_titles(f"“{words[s.thread.id]}”" if s.thread.id in words else s.thread.title
                                            for s in self.threads)
        return self.repeated

    def untitled_openings(self) -> dict[str, str]:
        if self.openings is None:
            self.openings = untitled_openings((s.thread.id, s.thread.title, s.opening) for s in self.threads)
        return self.openings

    def shared_id_prefix(self) -> str:
        if self.id_prefix is None:
            self.id_prefix = shared_id_prefix(s.thread.id for s in self.threads)
        return self.id_prefix

    def untitled_starts(self) -> dict[str, str]:
        if self.starts is None:
            self.starts = untitled_starts((s.thread.id, s.thread.title, s.thread.created_at) for s in self.threads)
        return self.starts

    def label(self, s: ThreadSummary) -> str:
        """``s``'s text in the tree (``thread_labels.thread_label``)."""
        return thread_label(s.thread.title, s.thread.id, self.repeated_titles(), self.shared_id_prefix(),
                            self.untitled_starts().get(s.thread.id), self.untitled_openings().get(s.thread.id))

    @property
    def id(self) -> str:
        return self.summary.id


def _epoch(when: Any) -> float:
    return when.timestamp() if when is not None else 0.0


def _resource_key(node: "_ResourceNode") -> float:
    return -_epoch(node.summary.last_activity)


def _thread_key(s: "ThreadSummary") -> float:
    return -_epoch(s.last_activity or s.thread.updated_at)


def recency_order(keys: Sequence[float]) -> list[int]:
    """The rows of ``keys`` (negated epochs) most recent first, ties in their present order (what a
    stable descending sort gives)."""
    return sorted(range(len(keys)), key=keys.__getitem__)


def _short_time(when: Any) -> str:
    return format_datetime(when)


class ResourceTreeModel(QAbstractItemModel):
    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._nodes: list[_ResourceNode] = []
        self._by_key: dict[int, _ResourceNode] = {}
        self._row_of: dict[int, int] = {}  # node key -> row, so parent() is O(1)
        self._keys = itertools.count(1)
        self._bold = QFont()
        self._bold.setBold(True)
        # A delegation's resource in italics, not bold: its label can be any resource's id too.
        self._delegation = QFont()
        self._delegation.setItalic(True)
        # The delegations Mastra wrote that the data proves (``TreeData.delegations``): labelled as ours are.
        self.delegations: Delegations = NO_DELEGATIONS

    # -- plain state ---------------------------------------------------------------------------
    def resource_ids(self) -> list[str]:
        return [n.id for n in self._nodes]

    def thread_ids(self, resource_id: str) -> list[str]:
        node = self._node(resource_id)
        return [s.thread.id for s in node.threads] if node else []

    def thread_labels(self) -> Iterator[str]:
        """Every thread row's label (column 0 as shown), resource by resource: what ``data`` gives, without a model
        index and a call through Qt for each row (the list's title width reads them at every load)."""
        for node in self._nodes:
            for s in node.threads:
                yield node.label(s)

    def _node(self, resource_id: str) -> _ResourceNode | None:
        return next((n for n in self._nodes if n.id == resource_id), None)

    def index_of(self, resource_id: str, thread_id: str | None = None) -> QModelIndex:
        for r, node in enumerate(self._nodes):
            if node.id != resource_id:
                continue
            parent = self.createIndex(r, 0, 0)
            if thread_id is None:
                return parent
            for t, s in enumerate(node.threads):
                if s.thread.id == thread_id:
                    return self.createIndex(t, 0, node.key)
        return QModelIndex()

    def apply(self, data: TreeData) -> None:
        """Bring the model to ``data`` with the smallest set of row changes."""
        fresh = {r.id: r for r in data.resources}
        removed, added = plan_update(self.resource_ids(), [r.id for r in data.resources])
        for row in removed:
            self.beginRemoveRows(QModelIndex(), row, row)
            node = self._nodes.pop(row)
            del self._by_key[node.key]
            self._reindex()
            self.endRemoveRows()
        changed: list[_ResourceNode] = []
        changed_threads: list[tuple[_ResourceNode, set[str]]] = []
        for r, node in enumerate(self._nodes):
            if node.summary != fresh[node.id]:
                changed.append(node)
            node.summary = fresh[node.id]
            changed_threads.append((node, self._apply_threads(r, node, data.threads.get(node.id, []))))
        if added:
            start = len(self._nodes)
            self.beginInsertRows(QModelIndex(), start, start + len(added) - 1)
            for rid in sorted(added, key=lambda rid: -_epoch(fresh[rid].last_activity)):
                threads = data.threads.get(rid, [])
                node = _ResourceNode(next(self._keys), fresh[rid],
                                     [threads[i] for i in recency_order([_thread_key(s) for s in threads])])
                self._nodes.append(node)
                self._by_key[node.key] = node
            self._reindex()
            self.endInsertRows()
        if dict(data.delegations) != dict(self.delegations):  # (rare: a proof came or went; a nested label may
            self.delegations = data.delegations              # change with its parent's, so every resource row)
            changed = list(self._nodes)
        self._reorder()
        # (signalled after the reorder, at the rows they have now)
        self._changed(QModelIndex(), sorted(self._row_of[n.key] for n in changed))
        for node, ids in changed_threads:
            if ids:
                parent = self.createIndex(self._row_of[node.key], 0, 0)
                self._changed(parent, [t for t, s in enumerate(node.threads) if s.thread.id in ids])

    def _reorder(self) -> None:
        """Put resources, and each one's threads, most recent first again: one layout change when the
        order changed (persistent indexes, so the view's selection and expanded rows, follow their rows),
        nothing when it did not."""
        resources = recency_order([_resource_key(n) for n in self._nodes])
        threads = {n.key: recency_order([_thread_key(s) for s in n.threads]) for n in self._nodes}
        moved = {key: order for key, order in threads.items() if order != list(range(len(order)))}
        if not moved and resources == list(range(len(self._nodes))):
            return
        self.layoutAboutToBeChanged.emit()
        new_resource_row = {old: new for new, old in enumerate(resources)}
        new_thread_row = {key: {old: new for new, old in enumerate(order)} for key, order in moved.items()}
        before = self.persistentIndexList()
        after = []
        for index in before:
            key = index.internalId()
            if key == 0:
                after.append(self.createIndex(new_resource_row[index.row()], index.column(), 0))
            else:
                rows = new_thread_row.get(key)
                after.append(self.createIndex(rows[index.row()] if rows else index.row(), index.column(), key))
        for key, order in moved.items():
            node = self._by_key[key]
            node.threads = [node.threads[i] for i in order]
        self._nodes = [self._nodes[i] for i in resources]
        self._reindex()
        self.changePersistentIndexList(before, after)
        self.layoutChanged.emit()

    def _changed(self, parent: QModelIndex, rows: list[int]) -> None:
        """``dataChanged`` for these rows of ``parent`` (ascending), a signal per run of adjacent rows. Only
        rows whose summary changed: the proxy looks at every signalled row again (when it also sorted, a
        refresh that signalled all 3,000 threads cost ~0.2 s of the UI thread)."""
        start = 0
        while start < len(rows):
            end = start
            while end + 1 < len(rows) and rows[end + 1] == rows[end] + 1:
                end += 1
            self.dataChanged.emit(self.index(rows[start], 0, parent), self.index(rows[end], len(COLUMNS) - 1, parent))
            start = end + 1

    def _reindex(self) -> None:
        self._row_of = {n.key: r for r, n in enumerate(self._nodes)}

    def _apply_threads(self, row: int, node: _ResourceNode, threads: list[ThreadSummary]) -> set[str]:
        """Remove and append ``node``'s threads to match ``threads``; the ids of those whose summary
        changed (signalled once the rows are in order)."""
        parent = self.index(row, 0)
        fresh = {s.thread.id: s for s in threads}
        removed, added = plan_update([s.thread.id for s in node.threads], [s.thread.id for s in threads])
        for t in removed:
            self.beginRemoveRows(parent, t, t)
            node.threads.pop(t)
            self.endRemoveRows()
        kept = [fresh[s.thread.id] for s in node.threads]
        changed = {new.thread.id for old, new in zip(node.threads, kept) if old != new}
        node.threads = kept
        # (a sibling's title may have changed what this one needs to show)
        node.repeated = node.id_prefix = node.starts = node.openings = None
        if added:
            start = len(node.threads)
            self.beginInsertRows(parent, start, start + len(added) - 1)
            new = [fresh[tid] for tid in added]
            node.threads.extend(new[i] for i in recency_order([_thread_key(s) for s in new]))
            node.repeated = node.id_prefix = node.starts = node.openings = None
            self.endInsertRows()
        return changed

    # -- Qt model ------------------------------------------------------------------------------
    def index(self, row: int, column: int, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> QModelIndex:  # noqa: B008
        # ``hasIndex``'s checks written out: it asks ``rowCount`` and ``columnCount`` back through Qt, and the
        # proxy's sort and filter call this a hundred thousand times for 3,000 threads.
        if row < 0 or not 0 <= column < len(COLUMNS):
            return QModelIndex()
        if not parent.isValid():
            return self.createIndex(row, column, 0) if row < len(self._nodes) else QModelIndex()
        if parent.internalId() != 0 or parent.column() != 0:  # (a thread, or a resource's other columns: no rows)
            return QModelIndex()
        node = self._nodes[parent.row()]
        return self.createIndex(row, column, node.key) if row < len(node.threads) else QModelIndex()

    def parent(self, index: QModelIndex | QPersistentModelIndex = QModelIndex()) -> QModelIndex:  # type: ignore[override]  # noqa: B008
        if not index.isValid() or index.internalId() == 0:
            return QModelIndex()
        row = self._row_of.get(index.internalId())
        return QModelIndex() if row is None else self.createIndex(row, 0, 0)

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        if not parent.isValid():
            return len(self._nodes)
        if parent.internalId() == 0 and parent.column() == 0:
            return len(self._nodes[parent.row()].threads)
        return 0

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section]
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.ToolTipRole:
            return COLUMN_TIPS[section] or None
        return None

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        if role == _SORT_ROLE:
            key = index.internalId()
            if key == 0:
                return _epoch(self._nodes[index.row()].summary.last_activity)
            owner = self._by_key.get(key)
            if owner is None or index.row() >= len(owner.threads):
                return None
            s = owner.threads[index.row()]
            return _epoch(s.last_activity or s.thread.updated_at)
        col = index.column()
        if index.internalId() == 0:
            node = self._nodes[index.row()]
            return self._resource_data(node, col, role)
        owner = self._by_key.get(index.internalId())
        if owner is None or index.row() >= len(owner.threads):
            return None
        return self._thread_data(owner, owner.threads[index.row()], col, role)

    def _resource_data(self, node: _ResourceNode, col: int, role: int) -> Any:
        s = node.summary
        if role == Qt.ItemDataRole.DisplayRole:
            return (resource_label(s.id, self.delegations), f"{s.message_count:,}", _short_time(s.last_activity))[col]
        if role == TreeRoles.KIND:
            return "resource"
        if role == TreeRoles.RESOURCE_ID:
            return s.id
        if role == TreeRoles.SORT:
            return _epoch(s.last_activity)
        if role == TreeRoles.FILTER:
            label = resource_label(s.id, self.delegations)
            return s.id if label == s.id else f"{s.id} {label}"
        if role == Qt.ItemDataRole.FontRole and col == 0:
            return self._delegation if is_delegation(s.id, self.delegations) else self._bold
        if role == Qt.ItemDataRole.ToolTipRole:
            wm = "has working memory" if s.has_working_memory else "no working memory"
            note = delegation_note(s.id, self.delegations)
            return plain_tip(f"Resource {shown_title(s.id)}\n{s.thread_count} threads · {s.message_count:,} "
                             f"messages · {wm}\n"
                             f"last activity: {date_tooltip(s.last_activity)}" + (f"\n{note}" if note else ""))
        if role == Qt.ItemDataRole.TextAlignmentRole and col == 1:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    def _thread_data(self, node: _ResourceNode, s: ThreadSummary, col: int, role: int) -> Any:
        title = s.thread.title or UNTITLED
        if role == Qt.ItemDataRole.DisplayRole:
            if col == 0:
                return node.label(s)
            return f"{s.message_count:,}" if col == 1 else _short_time(s.last_activity or s.thread.updated_at)
        if role == TreeRoles.KIND:
            return "thread"
        if role == TreeRoles.RESOURCE_ID:
            return node.id
        if role == TreeRoles.THREAD_ID:
            return s.thread.id
        if role == TreeRoles.SORT:
            return _epoch(s.last_activity or s.thread.updated_at)
        if role == TreeRoles.OPENING:
            return s.thread.id in node.untitled_openings()
        if role == TreeRoles.FILTER:
            words = node.untitled_openings().get(s.thread.id)
            return f"{title} {s.thread.id}" + (f" {words}" if words else "")
        if role == Qt.ItemDataRole.ToolTipRole:
            from studio.logic.replay_layout import fork_source  # warmed on a worker after first paint (studio.app)

            fork = fork_source(s.thread.metadata)
            words = node.untitled_openings().get(s.thread.id)
            if words is not None:  # (what the label quotes, said to be no title)
                title = f"{UNTITLED}: its first message begins “{words}”"
            return plain_tip(f"{shown_title(title)}\nthread {shown_title(s.thread.id)}\n{s.message_count:,} messages\n"
                             f"started: {date_tooltip(s.thread.created_at)}\n"
                             f"last activity: {date_tooltip(s.last_activity or s.thread.updated_at)}"
                             + (f"\n{fork}" if fork else ""))
        if role == Qt.ItemDataRole.TextAlignmentRole and col == 1:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None


def make_tree_proxy(source: ResourceTreeModel, parent: QObject | None = None) -> QSortFilterProxyModel:
    """The filter keeps a resource when it or any thread matches. It does not sort: the model's rows are in
    order already (most recent activity first), and a sort here asked the model's ``data`` n log n times on
    the UI thread."""
    proxy = QSortFilterProxyModel(parent)
    proxy.setSourceModel(source)
    proxy.setRecursiveFilteringEnabled(True)
    proxy.setAutoAcceptChildRows(True)
    proxy.setFilterRole(TreeRoles.FILTER)
    proxy.setFilterKeyColumn(0)
    proxy.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
    proxy.setDynamicSortFilter(True)
    return proxy
