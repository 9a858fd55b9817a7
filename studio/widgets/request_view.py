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
    QSizePolicy,
    QSplitter,
    QToolButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from studio.logic.request_layout import ESTIMATE, SERVER, RequestView, UsageRow
from studio.widgets.pane_header import caption
from studio.widgets.record_table import RIGHT, Column, RecordTableModel, record_table_view

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


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class RequestPanel(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("requestView")
        self.view: RequestView | None = None
        root = QVBoxLayout(self)
        root.setContentsMargins(0, 4, 0, 0)
        head = QHBoxLayout()
        self.title = caption("Request")
        self.title.setWordWrap(True)
        self.title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.copy_btn = QToolButton()
        self.copy_btn.setText("Copy Request Body")
        self.copy_btn.setToolTip("Copy the whole JSON body this call sent (stream options left out)")
        self.copy_btn.clicked.connect(self.copy_body)
        head.addWidget(self.title, 1)
        head.addWidget(self.copy_btn)
        root.addLayout(head)
        self.header = QLabel("")
        self.header.setObjectName("requestHeader")
        self.header.setTextFormat(Qt.TextFormat.RichText)
        self.header.setWordWrap(True)
        self.header.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.header.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        root.addWidget(self.header)
        self.usage_model: RecordTableModel[UsageRow] = RecordTableModel(USAGE_COLUMNS, self)
        self.usage_table = record_table_view(self.usage_model)
        self.usage_table.setObjectName("requestUsage")
        self.usage_table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.usage_table.horizontalHeader().setStretchLastSection(True)
        self.usage_table.setFixedHeight(self.usage_table.verticalHeader().defaultSectionSize() * 4 + 6)
        root.addWidget(self.usage_table)
        split = QSplitter(Qt.Orientation.Vertical)
        self.settings_model: RecordTableModel[tuple[str, str]] = RecordTableModel(SETTING_COLUMNS, self)
        self.settings_table = record_table_view(self.settings_model)
        self.settings_table.setObjectName("requestSettings")
        self.settings_table.horizontalHeader().setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        self.tools = QTreeWidget()
        self.tools.setObjectName("requestTools")
        self.tools.setColumnCount(2)
        self.tools.setHeaderLabels(["Tool definitions (as sent)", "Tokens (o200k)"])
        self.tools.header().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.tools.header().setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        self.tools.setWordWrap(True)
        split.addWidget(self.settings_table)
        split.addWidget(self.tools)
        split.setSizes([140, 260])
        root.addWidget(split, 1)

    def show_request(self, view: RequestView | None) -> None:
        self.view = view
        self.tools.clear()
        if view is None:
            self.title.setText("Request")
            self.header.setText("")
            self.usage_model.set_rows([])
            self.settings_model.set_rows([])
            return
        self.title.setText(f"{view.title} · {view.status}")
        notes = "".join(f"<br><i>{_esc(n)}</i>" for n in view.notes)
        self.header.setText(f"<b>Model</b> {_esc(view.model)} · <b>Endpoint</b> {_esc(view.endpoint)}{notes}")
        self.usage_model.set_rows(view.usage)
        self.settings_model.set_rows(view.settings)
        top = QTreeWidgetItem([f"{len(view.tools)} tool definition{'s' if len(view.tools) != 1 else ''}",
                               f"{view.tools_tokens:,}"])
        top.setToolTip(0, "All definitions as the prompt counts them (one JSON text, o200k_base); each tool's "
                          "own count is beside it. Open a tool to read its description and JSON schema.")
        top.setTextAlignment(1, RIGHT)
        for tool in view.tools:
            item = QTreeWidgetItem([tool.name, f"{tool.tokens:,}"])
            item.setTextAlignment(1, RIGHT)
            item.setToolTip(0, tool.description)
            item.addChild(QTreeWidgetItem([f"description: {tool.description}", ""]))
            params = QTreeWidgetItem(["parameters (JSON schema)", ""])
            for line in tool.parameters.splitlines():
                params.addChild(QTreeWidgetItem([line, ""]))
            item.addChild(params)
            top.addChild(item)
        self.tools.addTopLevelItem(top)
        top.setExpanded(True)  # the list of tools shows; each definition opens on demand

    def copy_body(self) -> None:
        if self.view is not None:
            QGuiApplication.clipboard().setText(self.view.body)


__all__ = ["RequestPanel"]
