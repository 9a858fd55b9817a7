"""A small dialog to edit the model price table: one row per model, US $ per million input and output
tokens. Kept in the Studio's settings (QSettings), never in the memory database.

A view over ``studio.logic.pricing``: ``check_rows`` validates, the caller stores ``table()``.
"""

from __future__ import annotations

from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from studio.logic.pricing import DEFAULT_PRICES, Price, check_rows
from studio.theme import set_tone
from studio.widgets.scroll_fit import dialog_body

HEADERS = ("Model", "Input $ / 1M tokens", "Output $ / 1M tokens")
HELP = ("A model matches its full id (openai/gpt-4o-mini) or its name alone (gpt-4o-mini). Local models — the "
        "scripted model, a server on localhost, Ollama-style name:tag — get a price only from a row with exactly "
        "their id. The defaults are public list prices when this version was released: check your provider's page.")


class PriceEditor(QDialog):
    def __init__(self, table: dict[str, Price], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("priceEditor")
        self.setWindowTitle("Model Prices")
        self.grid = QTableWidget(0, 3, self)
        self.grid.setHorizontalHeaderLabels(HEADERS)
        self.grid.setAccessibleName("Model prices")
        self.grid.verticalHeader().hide()
        self.grid.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.grid.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.grid.horizontalHeader().setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        self.grid.horizontalHeader().setSectionResizeMode(2, QHeaderView.ResizeMode.ResizeToContents)
        self.help = QLabel(HELP)
        self.help.setWordWrap(True)
        self.help.setStyleSheet("color: palette(placeholder-text);")
        self.problem = QLabel("")
        self.problem.setWordWrap(True)
        set_tone(self.problem, "error")
        self.add_btn = QPushButton("Add Model")
        self.remove_btn = QPushButton("Remove")
        self.defaults_btn = QPushButton("Restore Defaults")
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel)
        row = QHBoxLayout()
        for b in (self.add_btn, self.remove_btn, self.defaults_btn):
            row.addWidget(b)
        row.addStretch(1)
        layout = QVBoxLayout(dialog_body(self))
        layout.addWidget(self.help)
        layout.addWidget(self.grid, 1)
        layout.addLayout(row)
        layout.addWidget(self.problem)
        layout.addWidget(self.buttons)
        self.resize(560, 420)
        self.set_table(table)
        self.add_btn.clicked.connect(self.add_row)
        self.remove_btn.clicked.connect(self.remove_selected)
        self.defaults_btn.clicked.connect(lambda: self.set_table(dict(DEFAULT_PRICES)))
        self.buttons.accepted.connect(self._save)
        self.buttons.rejected.connect(self.reject)
        self.grid.itemChanged.connect(lambda _i: self.validate())

    def set_table(self, table: dict[str, Price]) -> None:
        self.grid.blockSignals(True)
        self.grid.setRowCount(0)
        for model, price in sorted(table.items()):
            self._append(model, f"{price.input_per_m:g}", f"{price.output_per_m:g}")
        self.grid.blockSignals(False)
        self.validate()

    def _append(self, model: str, inp: str, out: str) -> int:
        row = self.grid.rowCount()
        self.grid.insertRow(row)
        for col, text in enumerate((model, inp, out)):
            self.grid.setItem(row, col, QTableWidgetItem(text))
        return row

    def add_row(self) -> None:
        row = self._append("", "0", "0")
        self.grid.setCurrentCell(row, 0)
        item = self.grid.item(row, 0)
        if item is not None:  # _append filled every cell of the row
            self.grid.editItem(item)

    def remove_selected(self) -> None:
        for row in sorted({i.row() for i in self.grid.selectedIndexes()}, reverse=True):
            self.grid.removeRow(row)
        self.validate()

    def rows(self) -> list[tuple[str, str, str]]:
        def cell(r: int, c: int) -> str:
            item = self.grid.item(r, c)
            return item.text() if item is not None else ""
        return [(cell(r, 0), cell(r, 1), cell(r, 2)) for r in range(self.grid.rowCount())]

    def validate(self) -> bool:
        _table, problems = check_rows(self.rows())
        self.problem.setText(problems[0] if problems else "")
        self.buttons.button(QDialogButtonBox.StandardButton.Save).setEnabled(not problems)
        return not problems

    def table(self) -> dict[str, Price]:
        return check_rows(self.rows())[0]

    def _save(self) -> None:
        if self.validate():
            self.accept()
