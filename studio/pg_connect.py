"""File > Connect to Postgres…: host, port, database and user; never a password.

The password comes from where libpq and the system look for it — ``$PGPASSWORD``, ``~/.pgpass``, or
the system keyring (service ``memory-studio-postgres``, key ``user@host:port/database``) — so it is
never typed here, shown, or stored in the recent list (which keeps the URL without it).
"""

from __future__ import annotations

from typing import Callable

from PySide6.QtWidgets import QDialog, QDialogButtonBox, QFormLayout, QLabel, QLineEdit, QSpinBox, QWidget

from core.storage.pg.location import KEYRING_SERVICE, make_url, url_fields

DEFAULT_PORT = 5432


class ConnectPostgresDialog(QDialog):
    def __init__(self, parent: QWidget | None, on_url: Callable[[str], None], initial: str | None = None) -> None:
        """``initial``: the URL tried last, whose fields are filled in (a failed sign-in tells the user to
        connect again here; the fields were empty, to be typed again)."""
        super().__init__(parent)
        self.setObjectName("connectPostgresDialog")
        self.setWindowTitle("Connect to Postgres")
        self._on_url = on_url
        form = QFormLayout(self)
        self.host = QLineEdit("localhost", self)
        self.host.setToolTip("A host name, or a Unix socket folder such as /var/run/postgresql")
        self.port = QSpinBox(self)
        self.port.setRange(1, 65535)
        self.port.setValue(DEFAULT_PORT)
        self.database = QLineEdit(self)
        self.database.setPlaceholderText("memory")
        self.user = QLineEdit(self)
        self.user.setPlaceholderText("postgres")
        if initial:
            host, port, database, user = url_fields(initial)
            self.host.setText(host or "localhost")
            self.port.setValue(port or DEFAULT_PORT)
            self.database.setText(database)
            self.user.setText(user)
        form.addRow("Host", self.host)
        form.addRow("Port", self.port)
        form.addRow("Database", self.database)
        form.addRow("User", self.user)
        note = QLabel(
            "The password is read from PGPASSWORD, ~/.pgpass or the system keyring "
            f"(service “{KEYRING_SERVICE}”). Memory Studio never shows or stores it. "
            "The database opens read-only until you allow writes.", self)
        note.setWordWrap(True)
        form.addRow(note)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel, self)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Connect")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        form.addRow(self.buttons)
        self.accepted.connect(lambda: self._on_url(self.url()))

    def url(self) -> str:
        return make_url(host=self.host.text().strip(), port=self.port.value(),
                        database=self.database.text().strip() or "memory", user=self.user.text().strip())
