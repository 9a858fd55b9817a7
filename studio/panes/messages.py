"""The messages of one thread: a virtualized list (role, time, parts, preview) over a lazily loaded
model, and the selected message rendered in full (text, tool calls and results, reasoning, data
parts, files) below it.

Every row has the same height and the view is a one-column QTableView with fixed-size rows, so
it asks the model only for the rows on screen (a QListView lays out every row, calling back into
Python millions of times for 100,000 rows): a 100,000-message thread opens as fast as a short one. When the file changes the list grows in place;
if the user was at the end it follows the new messages (as far as the selected one stays in view),
otherwise it stays where it was.
"""

from __future__ import annotations

import html

from PySide6.QtCore import QItemSelectionModel, QModelIndex, QPersistentModelIndex, QRect, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter, QPen, QTextLayout, QTextOption
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from studio import reads as queries
from studio.commands import Command
from studio.logic.message_format import DETAIL_CSS, ROLE_COLOURS, MessageRow, format_time, message_html
from studio.logic.thread_labels import resource_label, shown_title
from studio.models.messages_model import MessageListModel, MessageRoles
from studio.selection import Selection
from studio.session import StudioSession
from studio.widgets.elided_label import ElidedLabel
from studio.widgets.pane_header import elastic
from studio.widgets.plain_tip import plain_tip
from studio.widgets.record_table import RowTableView
from studio.widgets.wrap_mode import fit_wrap
from studio.widgets.a11y import named

KIND_LABELS = {"text": "", "tool-invocation": "tool", "reasoning": "reasoning", "file": "file", "data": "data",
               "error": "error", "source": "source", "source-url": "source", "source-document": "source",
               "edited": "edited"}
# The window's commands this pane offers as buttons under the list (Edit > …, and the row's context menu).
MESSAGE_ACTIONS = (("message.edit", "Edit…"), ("message.delete", "Delete…"), ("message.history", "History…"))


class MessageDelegate(QStyledItemDelegate):
    """Paints one row: a role chip, the time, part badges, and two lines of preview."""

    PAD = 8

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.mono = QFont("DejaVu Sans Mono")
        self.mono.setStyleHint(QFont.StyleHint.Monospace)
        self.mono.setPointSizeF(8.5)

    def row_height(self, font: QFont) -> int:
        return self.PAD * 2 + QFontMetrics(font).lineSpacing() * 3 + 4

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:
        return QSize(200, self.row_height(option.font))

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> None:
        painter.save()
        pal = option.palette
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        if selected:
            painter.fillRect(option.rect, pal.highlight())
        elif option.state & QStyle.StateFlag.State_MouseOver:
            painter.fillRect(option.rect, pal.alternateBase())
        text_colour = pal.highlightedText().color() if selected else pal.text().color()
        dim = QColor(text_colour)
        dim.setAlpha(150)
        r = option.rect.adjusted(self.PAD, self.PAD, -self.PAD, -self.PAD)
        fm = QFontMetrics(option.font)
        line = fm.lineSpacing()
        row: MessageRow | None = index.data(MessageRoles.ROW)
        painter.setPen(QPen(QColor(127, 127, 127, 50)))
        painter.drawLine(option.rect.bottomLeft(), option.rect.bottomRight())
        if row is None:
            painter.setPen(dim)
            painter.drawText(r, int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop), "loading…")
            painter.restore()
            return
        # role chip
        colour = QColor(ROLE_COLOURS.get(row.role, "#9aa0a6"))
        chip_font = QFont(option.font)
        chip_font.setBold(True)
        chip_font.setPointSizeF(max(7.0, option.font.pointSizeF() - 1.5))
        cfm = QFontMetrics(chip_font)
        label = row.role.upper()
        chip = QRect(r.left(), r.top() + 1, cfm.horizontalAdvance(label) + 12, line - 2)
        fill = QColor(colour)
        fill.setAlpha(60)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(fill)
        painter.drawRoundedRect(chip, 4, 4)
        painter.setFont(chip_font)
        light_theme = pal.base().color().lightness() > 128
        painter.setPen(text_colour if selected else colour.darker(150) if light_theme else colour.lighter(130))
        painter.drawText(chip, int(Qt.AlignmentFlag.AlignCenter), label)
        # time and row number
        painter.setFont(self.mono)
        painter.setPen(dim)
        x = chip.right() + 10
        stamp = f"{format_time(row.created_at)}   #{index.row() + 1:,}"
        painter.drawText(QRect(x, r.top(), r.width(), line), int(Qt.AlignmentFlag.AlignVCenter), stamp)
        x += QFontMetrics(self.mono).horizontalAdvance(stamp) + 12
        # part badges (and "edited": the message changed since it was stored)
        painter.setFont(chip_font)
        for kind in (*dict.fromkeys(row.kinds), *(("edited",) if row.edited else ())):
            text = KIND_LABELS.get(kind, kind)
            if not text:
                continue
            w = cfm.horizontalAdvance(text) + 10
            badge = QRect(x, r.top() + 1, w, line - 2)
            painter.setPen(QPen(dim, 1))
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawRoundedRect(badge, 4, 4)
            painter.drawText(badge, int(Qt.AlignmentFlag.AlignCenter), text)
            x += w + 6
        # preview
        painter.setFont(option.font)
        painter.setPen(text_colour)
        for i, text in enumerate(preview_lines(row.preview or "(no text)", option.font, r.width())):
            painter.drawText(QRect(r.left(), r.top() + line * (i + 1) + 4, r.width(), line),
                             int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop), text)
        painter.restore()


def preview_lines(text: str, font: QFont, width: int, count: int = 2) -> list[str]:
    """``text`` broken into at most ``count`` lines of ``width`` pixels, at word boundaries (anywhere in
    a run without one: CJK, a long URL). When more follows, the last line ends in "…" (a preview cut at
    a fixed length ends in one already)."""
    layout = QTextLayout(text, font)
    wrap = QTextOption()
    wrap.setWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
    layout.setTextOption(wrap)
    starts: list[int] = []
    layout.beginLayout()
    while len(starts) < count:
        line = layout.createLine()
        if not line.isValid():
            break
        line.setLineWidth(width)
        starts.append(line.textStart())
    layout.endLayout()
    units = text.encode("utf-16-le")  # Qt's offsets count UTF-16 units: an emoji is two
    ends = [*starts[1:], len(units) // 2]
    lines = [units[2 * a:2 * b].decode("utf-16-le", "replace").rstrip() for a, b in zip(starts, ends)]
    if lines:
        fm = QFontMetrics(font)
        last = " ".join(units[2 * starts[-1]:].decode("utf-16-le", "replace").split())
        if fm.horizontalAdvance(last) > width:  # more than the last line holds
            last = fm.elidedText(last, Qt.TextElideMode.ElideRight, width)
        lines[-1] = last
    return lines


class MessagesPane(QWidget):
    message_selected = Signal(object)  # message id, or None
    request_command = Signal(str)  # a window command for the selected message (Edit…, Delete…, History…)

    def __init__(self, session: StudioSession, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("messagesPane")
        self.session = session
        self._selection = Selection()
        self._follow = True
        self._jump_to: str | None = None
        self._selecting: str | None = None  # the message a jump selects (its row may not be read yet)
        self._unread_current: int | None = None  # a current row not read yet: its id is said once it is
        self._opening = False  # a thread was asked for and its rows have not arrived yet

        self.header = elastic(QLabel("Pick a thread on the left.", self))
        self.header.setObjectName("paneHeader")
        # Always markup (ids and reasons in it are escaped): left to guess, Qt showed an escaped reason as plain
        # text, so a path like "R&D's notes" read "R&amp;D&#x27;s notes".
        self.header.setTextFormat(Qt.TextFormat.RichText)
        self.header.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        self.model = MessageListModel(session.run, session.store, parent=self)
        self.view = RowTableView(self)
        self.view.setObjectName("messageList")
        named(self.view, "Messages")
        self.view.setModel(self.model)
        delegate = MessageDelegate(self.view)
        self.view.setItemDelegate(delegate)
        self.view.setShowGrid(False)
        self.view.setWordWrap(False)
        self.view.horizontalHeader().hide()
        self.view.horizontalHeader().setStretchLastSection(True)
        rows = self.view.verticalHeader()
        rows.hide()
        rows.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        rows.setDefaultSectionSize(delegate.row_height(self.view.font()))
        self.view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.view.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.view.setMouseTracking(True)

        self.detail = QTextBrowser(self)
        self.detail.setObjectName("messageDetail")
        named(self.detail, "Selected message")
        self.detail.document().setDefaultStyleSheet(DETAIL_CSS)
        self.detail.setOpenLinks(False)
        self.detail.setPlaceholderText("Select a message to see all of its parts.")

        self.empty = QLabel("No thread selected.\nPick one in the tree, or press Ctrl+K.", self)
        self.empty.setObjectName("emptyState")
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)

        lower = QWidget(self)
        ll = QVBoxLayout(lower)
        ll.setContentsMargins(0, 0, 0, 0)
        ll.setSpacing(4)
        actions = QHBoxLayout()
        self.action_buttons: dict[str, QPushButton] = {}
        for cid, title in MESSAGE_ACTIONS:
            button = QPushButton(title)
            button.setObjectName(cid.replace(".", "_"))
            button.setEnabled(False)
            button.clicked.connect(lambda _checked=False, cid=cid: self.request_command.emit(cid))
            actions.addWidget(button)
            self.action_buttons[cid] = button
        self.edited_label = elastic(ElidedLabel(""))  # beside the buttons: cut with "…", whole on hover
        self.edited_label.setStyleSheet("color: palette(placeholder-text);")
        actions.addWidget(self.edited_label, 1)
        ll.addLayout(actions)
        ll.addWidget(self.detail, 1)
        split = QSplitter(Qt.Orientation.Vertical, self)
        split.setChildrenCollapsible(False)  # (a part is never dragged away to nothing)
        split.addWidget(self.view)
        split.addWidget(lower)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        self.stack = QStackedWidget(self)
        self.stack.addWidget(self.empty)
        self.stack.addWidget(split)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.setSpacing(6)
        layout.addWidget(self.header)
        layout.addWidget(self.stack)

        self.model.loaded.connect(self._on_loaded)
        self.model.failed.connect(self._on_load_failed)
        self.model.rowsAboutToBeInserted.connect(self._remember_follow)
        self.model.rowsInserted.connect(self._after_grow)
        self.model.dataChanged.connect(self._on_data_changed)
        self.view.selectionModel().currentChanged.connect(self._on_current)
        self.view.verticalScrollBar().valueChanged.connect(self._on_scrolled)

    # -- selection from the window -------------------------------------------------------------
    def palette_commands(self) -> list[Command]:
        return []  # no commands of its own (its buttons act on what it shows)

    def set_selection(self, selection: Selection) -> None:
        previous, self._selection = self._selection, selection
        if selection.thread_id != previous.thread_id:
            self._jump_to = selection.message_id
            self.detail.clear()
            self.stack.setCurrentIndex(1 if selection.thread_id else 0)
            self.header.setText("Loading…" if selection.thread_id else "Pick a thread on the left.")
            self.header.setToolTip("")
            self._opening = True
            self.model.open_thread(selection.thread_id)
        elif selection.message_id and self._opening:
            self._jump_to = selection.message_id  # the thread's rows are on their way: jump once they are shown
        elif selection.message_id and selection.message_id != self.current_message_id():
            self.jump_to(selection.message_id)

    def refresh(self) -> None:
        self.model.refresh()
        self._update_header()

    def current_message_id(self) -> str | None:
        row = self.model.row_at(self.view.currentIndex().row()) if self.view.currentIndex().isValid() else None
        return row.id if row else None

    # -- loading -------------------------------------------------------------------------------
    def _on_loaded(self, total: int) -> None:
        self._opening = False
        self._update_header()
        if self._jump_to:
            target, self._jump_to = self._jump_to, None
            self.jump_to(target)
        else:
            self.view.scrollToBottom()
            self._follow = True

    def _on_load_failed(self, message: str) -> None:
        self._opening = False  # a jump asked for meanwhile is dropped with the rows it needed
        # Said where "Loading…" was: a read that failed must not look like one still under way.
        self.header.setWordWrap(True)  # the engine's reason can be long (a damaged file: how to salvage it)
        self.header.setText(f"⚠ This thread's messages could not be read: {html.escape(message)}")

    def _update_header(self) -> None:
        tid = self._selection.thread_id
        if not tid:
            return
        n = self.model.rowCount()
        resource = self._selection.resource_id or ""
        label = resource_label(resource, self.session.delegations)  # (a delegation's as the tree names it)
        named = f"<code>{html.escape(resource)}</code>" if label == resource else f"<i>{html.escape(label)}</i>"
        # (ids are user data: escaped, so one cannot restyle the header; the stored ids whole on hover)
        self.header.setText(f"<b>{n:,}</b> message{'s' if n != 1 else ''}  ·  thread <code>{html.escape(tid)}</code>  ·  "
                            f"resource {named}")
        self.header.setToolTip(plain_tip(f"thread {shown_title(tid)}\nresource {shown_title(resource)}"))

    def jump_to(self, message_id: str) -> None:
        row = self.model.find_loaded(message_id)
        if row is not None:
            self._select_row(row)
            return
        store, thread_id = self.session.store, self.model.thread_id
        if thread_id is None:
            return
        self.session.run(lambda: queries.message_position(store, thread_id, message_id),
                         on_result=lambda pos: self._select_row(pos, message_id) if pos is not None else None,
                         key=f"jump:{id(self)}")

    def _select_row(self, row: int, message_id: str | None = None) -> None:
        """Make ``row`` current. ``message_id``: the message a jump found there, said to the window even while
        the row's page is still being read (the window's selection kept its message: a chat turn's prompt
        link opened the inspector on the new turn's thread without it, found 2026-12-06)."""
        if not 0 <= row < self.model.rowCount():
            return
        index = self.model.index(row)
        self._selecting = message_id
        try:
            self.view.selectionModel().setCurrentIndex(index, QItemSelectionModel.SelectionFlag.ClearAndSelect)
        finally:
            self._selecting = None
        self.view.scrollTo(index, QAbstractItemView.ScrollHint.PositionAtCenter)

    def _on_scrolled(self, value: int) -> None:
        bar = self.view.verticalScrollBar()
        self._follow = value >= bar.maximum() - 4

    def _remember_follow(self, *_args: object) -> None:
        bar = self.view.verticalScrollBar()
        self._follow = bar.value() >= bar.maximum() - 4

    def _after_grow(self, *_args: object) -> None:
        self._update_header()
        if self._follow:
            self.view.scrollToBottom()
            # As far as the selected message stays in view: following must not push away the message the
            # user picked (many new ones at once); the view then rests with it at the top, no longer following.
            current = self.view.currentIndex()
            if current.isValid() and not self.view.visualRect(current).intersects(self.view.viewport().rect()):
                self.view.scrollTo(current, QAbstractItemView.ScrollHint.PositionAtTop)

    # -- detail --------------------------------------------------------------------------------
    def _on_current(self, current: QModelIndex, _previous: QModelIndex) -> None:
        self._render_detail()
        message_id = self.current_message_id() or self._selecting
        if message_id is None and current.isValid():
            self._unread_current = current.row()  # its page is on its way: "no message" would be untrue
            return
        self._unread_current = None
        self.message_selected.emit(message_id)

    def _on_data_changed(self, top: QModelIndex, bottom: QModelIndex, *_roles: object) -> None:
        cur = self.view.currentIndex()
        if cur.isValid() and top.row() <= cur.row() <= bottom.row():
            self._render_detail()
            message_id = self.current_message_id()
            if self._unread_current == cur.row() and message_id is not None:
                self._unread_current = None
                self.message_selected.emit(message_id)

    def _render_detail(self) -> None:
        cur = self.view.currentIndex()
        row = self.model.row_at(cur.row()) if cur.isValid() else None
        for button in self.action_buttons.values():
            button.setEnabled(row is not None and row.message is not None)
        self.edited_label.setText("edited since it was stored: History… shows who changed what"
                                  if row is not None and row.edited else "")
        if row is None:
            self.detail.clear()
            return
        html = message_html(row)
        if html == self.detail.property("shownHtml"):
            return
        same = row.id == self.detail.property("shownId")
        scroll = self.detail.verticalScrollBar().value() if same else 0
        fit_wrap(self.detail, html)  # (a 200,000-character run with no space held the UI thread 2 to 5 s)
        self.detail.setHtml(html)
        self.detail.setProperty("shownHtml", html)
        self.detail.setProperty("shownId", row.id)
        self.detail.verticalScrollBar().setValue(scroll)
