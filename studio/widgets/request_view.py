"""One model call's request beside its messages: model and endpoint, every setting, the tool
definitions (collapsible, each with its token count), and the usage the server reported beside our
o200k estimate. Shows a ``studio.logic.request_layout.RequestView`` built on a worker; used by the
Replay pane and the prompt inspector.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMenu,
    QSizePolicy,
    QSplitter,
    QToolButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from studio.logic.request_layout import (
    COPY_JSON,
    COPY_READABLE,
    ESTIMATE,
    SERVER,
    TOOLS_AS_SENT,
    RequestView,
    ToolRow,
    UsageRow,
)
from studio.widgets.fit_to_pane import FitToPane
from studio.widgets.pane_header import caption
from studio.widgets.record_table import RIGHT, Column, RecordTableModel, keep_rows_in_sight, record_table_view
from studio.widgets.plain_tip import plain_tip
from studio.widgets.a11y import named

USAGE_COLUMNS: list[Column[UsageRow]] = [
    Column("", lambda r: r.what),
    Column(SERVER, lambda r: r.server, RIGHT, tooltip=lambda r: "what the model's server said it counted"),
    Column(ESTIMATE, lambda r: r.estimate, RIGHT,
           tooltip=lambda r: "our count with the o200k_base tokenizer: the server's own tokenizer may differ"),
]
SETTING_COLUMNS: list[Column[tuple[str, str]]] = [
    Column("Setting", lambda r: r[0]),
    Column("Value sent", lambda r: r[1], tooltip=lambda r: r[1]),
]


def _set_text(label: QLabel, text: str) -> None:
    if label.text() != text:
        label.setText(text)


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class RequestPanel(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("requestView")
        self.view: RequestView | None = None
        self._tools_shown: list[ToolRow] | None = None  # the tree is rebuilt only when the tools change
        root = QVBoxLayout(self)
        root.setContentsMargins(0, 4, 0, 0)
        head = QHBoxLayout()
        self.title = caption("Request")
        self.title.setWordWrap(True)
        self.title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        # What the copy is, on the button: the exact bytes sent, or (not knowable) the body as JSON.
        self.copy_btn = QToolButton()
        self.copy_btn.setObjectName("copyRequestBody")
        self.copy_btn.setText(COPY_JSON)
        self.copy_btn.setToolTip("Copy the whole request body as indented JSON: not the bytes sent")
        self.copy_btn.clicked.connect(self.copy_body)
        # The readable copy is in the button's menu (the inspector's panel is narrow).
        menu = QMenu(self.copy_btn)
        self.copy_readable_action = menu.addAction(COPY_READABLE)
        self.copy_readable_action.setToolTip("Copy the whole request body as indented JSON, for reading: not "
                                             "the bytes sent (keys, spaces and escapes may differ)")
        self.copy_readable_action.triggered.connect(self.copy_readable)
        self.copy_btn.setMenu(menu)
        self.copy_btn.setPopupMode(QToolButton.ToolButtonPopupMode.MenuButtonPopup)
        # The title on its own line, the button under it: beside the button, in the inspector's panel at a
        # 1,100 px window, the title wrapped a word a line in a ~45 px column.
        root.addWidget(self.title)
        head.addWidget(self.copy_btn)
        head.addStretch(1)
        root.addLayout(head)
        self.header = QLabel("")
        self.header.setObjectName("requestHeader")
        self.header.setTextFormat(Qt.TextFormat.RichText)
        self.header.setWordWrap(True)
        self.header.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.header.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        root.addWidget(self.header)
        self.usage_model: RecordTableModel[UsageRow] = RecordTableModel(USAGE_COLUMNS, self)
        # Fixed column widths: the panel is re-filled on every step, and measuring cells costs a relayout.
        self.usage_table = record_table_view(self.usage_model)
        # Fitted to the panel: with 120 and 130 px fixed, the last column's heading lost its start in the
        # inspector's ~450 px panel ("ur estimate (o200k_base)"): the row names and the server's column
        # take what their text needs (headings measured bold), the estimate the rest.
        self._usage_fit = FitToPane(self.usage_table, {"": "Finish reason", SERVER: "not reported"}, {},
                                    last=ESTIMATE, rest_sample="000,000")
        self.usage_table.setObjectName("requestUsage")
        named(self.usage_table, "Token usage")
        # (its three rows whole under its header: four rows' height cut the last by a few pixels)
        self.usage_table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)  # (fitted: FitToPane)
        keep_rows_in_sight(self.usage_table)
        self.usage_table.setFixedHeight(self.usage_table.minimumHeight())
        root.addWidget(self.usage_table)
        split = QSplitter(Qt.Orientation.Vertical)
        split.setChildrenCollapsible(False)  # (a part is never dragged away to nothing)
        self.settings_model: RecordTableModel[tuple[str, str]] = RecordTableModel(SETTING_COLUMNS, self)
        self.settings_table = record_table_view(self.settings_model, widths={"Setting": 140})
        self.settings_table.setObjectName("requestSettings")
        named(self.settings_table, "Settings sent")
        self.tools = QTreeWidget()
        self.tools.setObjectName("requestTools")
        named(self.tools, TOOLS_AS_SENT)
        self.tools.setColumnCount(2)
        self.tools.setHeaderLabels([TOOLS_AS_SENT, "Tokens (o200k)"])
        self.tools.header().setStretchLastSection(False)
        self.tools.header().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        # the counts' column is as wide as its header (or its widest count), never cut to "Tokens (o200"
        self.tools.header().setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        self.tools.setUniformRowHeights(True)  # one line per row (long descriptions are in tooltips)
        keep_rows_in_sight(self.tools)
        split.addWidget(self.settings_table)
        split.addWidget(self.tools)
        split.setSizes([140, 260])
        root.addWidget(split, 1)

    def heightForWidth(self, width: int) -> int:  # noqa: N802 - Qt's name
        """None (-1): it sits in a scroll area (the inspector's and Replay's Request tab), which made the
        panel as tall as its layout's preferred height for the width (its wrapped labels' and its tables'),
        taller than the tab, with a scroll bar, where it fits by letting its tables give up rows. It
        scrolls only below its minimum height."""
        return -1

    def show_request(self, view: RequestView | None) -> None:
        self.view = view
        if view is None:
            self.tools.clear()
            self._tools_shown = None
            self.title.setText("Request")
            self.header.setText("")
            self.copy_btn.setText(COPY_JSON)
            self.copy_readable_action.setEnabled(False)
            self.usage_model.set_rows([])
            self.settings_model.set_rows([])
            return
        # Stepping re-fills this on every turn: texts and rows that did not change are left alone, so
        # Qt does not lay the panel out again for nothing.
        _set_text(self.title, f"{view.title} · {view.status}")
        if self.copy_btn.text() != view.copy_label:
            self.copy_btn.setText(view.copy_label)
        self.copy_btn.setToolTip(view.copy_tip)
        self.copy_readable_action.setEnabled(view.exact_bytes)  # else the button copies that JSON already
        notes = "".join(f"<br><i>{_esc(n)}</i>" for n in [*view.notes, view.copy_line])
        _set_text(self.header, f"<b>Model</b> {_esc(view.model)} · <b>Endpoint</b> {_esc(view.endpoint)}{notes}")
        self.usage_model.update_rows(view.usage)
        self.settings_model.update_rows(view.settings)
        if self.tools.headerItem().text(0) != view.tools_label:
            self.tools.setHeaderLabels([view.tools_label, "Tokens (o200k)"])
        first = self.tools.topLevelItem(0)
        if view.tools == self._tools_shown and first is not None:
            first.setText(1, f"{view.tools_tokens:,}")  # the same definitions: no rebuild
            return
        self.tools.clear()
        self._tools_shown = list(view.tools)
        top = QTreeWidgetItem([f"{len(view.tools)} tool definition{'s' if len(view.tools) != 1 else ''}",
                               f"{view.tools_tokens:,}"])
        top.setToolTip(0, "All definitions as the prompt counts them (one JSON text, o200k_base); each tool's "
                          "own count is beside it. Open a tool to read its description and JSON schema.")
        top.setTextAlignment(1, RIGHT)
        for tool in view.tools:
            item = QTreeWidgetItem([tool.name, f"{tool.tokens:,}"])
            item.setTextAlignment(1, RIGHT)
            item.setToolTip(0, plain_tip(tool.description))  # a turn record's (an imported file's) text
            description = QTreeWidgetItem([f"description: {tool.description}", ""])
            description.setToolTip(0, plain_tip(tool.description))
            item.addChild(description)
            params = QTreeWidgetItem(["parameters (JSON schema)", ""])
            for line in tool.parameters.splitlines():
                params.addChild(QTreeWidgetItem([line, ""]))
            item.addChild(params)
            top.addChild(item)
        self.tools.addTopLevelItem(top)
        top.setExpanded(True)  # the list of tools shows; each definition opens on demand

    def copy_body(self) -> None:
        """The exact bytes the server received when they are knowable, else the body as JSON (the
        button's text says which)."""
        if self.view is not None:
            QGuiApplication.clipboard().setText(self.view.copy_text)

    def copy_readable(self) -> None:
        """The body as indented JSON, for reading."""
        if self.view is not None:
            QGuiApplication.clipboard().setText(self.view.body)


__all__ = ["RequestPanel"]
