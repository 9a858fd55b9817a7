"""Every user action is a registered command: one id, one title, one shortcut.

Menus, keyboard shortcuts and the command palette (Ctrl+K) are all built from this registry, so an
action cannot exist in a menu but be missing from the palette (napari's app-model idea). Matching a
palette query is a pure function (``rank``), tested without Qt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from PySide6.QtCore import QAbstractListModel, QModelIndex, QObject, QPersistentModelIndex, Qt, Signal
from PySide6.QtGui import QAction, QKeySequence, QPainter
from PySide6.QtWidgets import (
    QDialog,
    QLineEdit,
    QListView,
    QMenu,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QVBoxLayout,
    QWidget,
)


@dataclass
class Command:
    id: str
    title: str
    handler: Callable[[], Any]
    shortcut: str | None = None
    menu: str | None = None  # top-level menu title; None = palette and shortcut only
    group: str = ""  # commands of one menu are separated where the group changes
    checkable: bool = False
    enabled: Callable[[], bool] | None = None
    keywords: str = ""

    @property
    def is_enabled(self) -> bool:
        return self.enabled() if self.enabled is not None else True

    @property
    def shortcut_text(self) -> str:
        if not self.shortcut:
            return ""
        return QKeySequence(self.shortcut).toString(QKeySequence.SequenceFormat.NativeText)


# Words that stay lower case inside a Title Case command title (unless first, or after a colon).
MINOR_WORDS = frozenset("a an and as at but by for from in into nor of on onto or the to vs with".split())


def title_case_problems(title: str) -> list[str]:
    """Words of a command title that break Title Case (empty: the title is fine).

    Every word starts with a capital except the minor words above; a word's leading punctuation
    ("(Not") is skipped. Titles are what menus, the palette and tooltips show, so they must agree.
    """
    problems: list[str] = []
    first = True
    for word in title.split():
        letters = word.lstrip("([\"'“‘…")
        if letters and letters[0].isalpha():
            minor = letters.rstrip(":,)…").lower() in MINOR_WORDS
            if letters[0].islower() and (first or not minor):
                problems.append(word)
            first = False
        if word.endswith(":"):
            first = True
    return problems


def score(query: str, text: str) -> float | None:
    """Fuzzy subsequence match: None when ``query``'s letters are not all in ``text`` in order.

    Higher is better: contiguous runs, word starts and an early first hit score more.
    """
    q = query.lower().strip()
    if not q:
        return 0.0
    t = text.lower()
    if q in t:
        at = t.find(q)
        return 100.0 - at + (20.0 if at == 0 or not t[at - 1].isalnum() else 0.0)
    total, pos, prev = 0.0, 0, -2
    for ch in q:
        if ch == " ":
            continue
        found = t.find(ch, pos)
        if found < 0:
            return None
        total += 3.0 if found == prev + 1 else 1.0
        if found == 0 or not t[found - 1].isalnum():
            total += 2.0
        prev, pos = found, found + 1
    return total


def rank(query: str, commands: Iterable[Command]) -> list[Command]:
    """Enabled commands matching ``query``, best first (ties keep registration order)."""
    scored = []
    for i, cmd in enumerate(commands):
        if not cmd.is_enabled:
            continue
        s = score(query, f"{cmd.menu or ''} {cmd.title} {cmd.keywords}")
        s_title = score(query, cmd.title)
        best = max(x for x in (s, s_title, -1.0) if x is not None)
        if best >= 0:
            scored.append((-best, i, cmd))
    scored.sort(key=lambda x: (x[0], x[1]))
    return [c for _s, _i, c in scored]


class CommandRegistry(QObject):
    """Owns one QAction per command, attached to ``host`` so shortcuts work without menus."""

    changed = Signal()

    def __init__(self, host: QWidget) -> None:
        super().__init__(host)
        self._host = host
        self._commands: dict[str, Command] = {}
        self._actions: dict[str, QAction] = {}
        self._extra: list[Callable[[], Sequence[Command]]] = []

    def register(self, command: Command) -> QAction:
        if command.id in self._commands:
            raise ValueError(f"Command {command.id!r} is registered twice.")
        action = QAction(command.title, self._host)
        action.setObjectName(command.id)
        if command.shortcut:
            action.setShortcut(QKeySequence(command.shortcut))
            action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        action.setCheckable(command.checkable)
        action.triggered.connect(lambda _checked=False, c=command: c.handler())
        self._host.addAction(action)
        self._commands[command.id] = command
        self._actions[command.id] = action
        self.changed.emit()
        return action

    def add(self, id: str, title: str, handler: Callable[[], Any], **kw: Any) -> QAction:
        return self.register(Command(id, title, handler, **kw))

    def add_provider(self, provider: Callable[[], Sequence[Command]]) -> None:
        """Commands that come and go (recent files): listed in the palette, not bound to keys."""
        self._extra.append(provider)

    def command(self, id: str) -> Command:
        return self._commands[id]

    def action(self, id: str) -> QAction:
        return self._actions[id]

    def commands(self) -> list[Command]:
        extra = [c for p in self._extra for c in p()]
        return [*self._commands.values(), *extra]

    def run(self, id: str) -> None:
        command = self._commands.get(id) or next((c for c in self.commands() if c.id == id), None)
        if command is None:
            raise KeyError(id)
        if command.is_enabled:
            command.handler()

    def refresh_enabled(self) -> None:
        for cid, action in self._actions.items():
            action.setEnabled(self._commands[cid].is_enabled)

    def fill_menus(self, menus: dict[str, QMenu]) -> None:
        """Put every command that names a menu into that menu (``menus``: the menu bar's menus by title,
        made before the commands exist so that the first paint shows them), in registration order, with a
        separator where the group changes. A command naming a menu that is not there is a KeyError."""
        groups: dict[str, str] = {}
        for cid, cmd in self._commands.items():
            if not cmd.menu:
                continue
            menu = menus[cmd.menu]
            if cmd.menu in groups and groups[cmd.menu] != cmd.group:
                menu.addSeparator()
            groups[cmd.menu] = cmd.group
            menu.addAction(self._actions[cid])
        for menu in menus.values():
            menu.aboutToShow.connect(self.refresh_enabled)


# -- palette ----------------------------------------------------------------------------------------

class CommandListModel(QAbstractListModel):
    COMMAND = Qt.ItemDataRole.UserRole + 1
    SHORTCUT = Qt.ItemDataRole.UserRole + 2

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._items: list[Command] = []

    def set_commands(self, commands: list[Command]) -> None:
        self.beginResetModel()
        self._items = commands
        self.endResetModel()

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._items)

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        cmd = self._items[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return f"{cmd.menu}: {cmd.title}" if cmd.menu else cmd.title
        if role == self.COMMAND:
            return cmd
        if role == self.SHORTCUT:
            return cmd.shortcut_text
        return None


class _ShortcutDelegate(QStyledItemDelegate):
    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> None:
        super().paint(painter, option, index)
        keys = index.data(CommandListModel.SHORTCUT)
        if keys:
            painter.save()
            painter.setPen(option.palette.placeholderText().color())
            painter.drawText(option.rect.adjusted(0, 0, -10, 0),
                             int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter), keys)
            painter.restore()


class CommandPalette(QDialog):
    """Type to filter, Enter to run. Opened non-modally so tests (and users) never get stuck in it."""

    def __init__(self, registry: CommandRegistry, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("commandPalette")
        self.setWindowTitle("Command palette")
        self.registry = registry
        self.input = QLineEdit(self)
        self.input.setPlaceholderText("Type a command…")
        self.input.setAccessibleName("Command")
        self.model = CommandListModel(self)
        self.list = QListView(self)
        self.list.setModel(self.model)
        self.list.setAccessibleName("Commands")
        self.list.setItemDelegate(_ShortcutDelegate(self.list))
        self.list.setUniformItemSizes(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 8, 8)
        layout.addWidget(self.input)
        layout.addWidget(self.list)
        self.resize(560, 360)
        self.input.textChanged.connect(self._refilter)
        self.input.returnPressed.connect(self.run_current)
        self.list.activated.connect(lambda _i: self.run_current())
        self.input.installEventFilter(self)
        self._refilter("")

    def _refilter(self, text: str) -> None:
        self.model.set_commands(rank(text, self.registry.commands()))
        if self.model.rowCount():
            self.list.setCurrentIndex(self.model.index(0))

    def visible_titles(self) -> list[str]:
        return [self.model.index(i).data(CommandListModel.COMMAND).title for i in range(self.model.rowCount())]

    def run_current(self) -> None:
        index = self.list.currentIndex()
        if not index.isValid():
            return
        command: Command = index.data(CommandListModel.COMMAND)
        self.accept()
        command.handler()

    def eventFilter(self, obj: QObject, event: Any) -> bool:
        from PySide6.QtCore import QEvent

        if obj is self.input and event.type() == QEvent.Type.KeyPress and event.key() in (
            Qt.Key.Key_Down, Qt.Key.Key_Up, Qt.Key.Key_PageDown, Qt.Key.Key_PageUp
        ):
            self.list.keyPressEvent(event)
            return True
        return super().eventFilter(obj, event)


@dataclass
class RecentFiles:
    """The recent-databases list (most recent first, no duplicates, bounded). Pure; stored by the caller."""

    paths: list[str] = field(default_factory=list)
    limit: int = 10

    @classmethod
    def from_setting(cls, value: Any) -> "RecentFiles":
        """The list as QSettings gives it back: an INI file returns a one-item list as a plain string
        (iterating that would give single characters), and nothing at all as None."""
        if value is None or value == "":
            items: list[Any] = []
        elif isinstance(value, str):
            items = [value]
        else:
            items = list(value)
        return cls([str(p) for p in items if p])

    def push(self, path: str) -> None:
        self.paths = [path, *[p for p in self.paths if p != path]][: self.limit]

    def remove(self, path: str) -> None:
        self.paths = [p for p in self.paths if p != path]
