"""What the window says while opening a database waits for another program's lock.

A file in a rollback journal mode (as Mastra or another program may leave it) cannot be read while another
process holds its EXCLUSIVE lock (a transaction, a VACUUM). The open's worker then waits with the UI running
(``core.storage.reading``), and the status bar said only "Opening …" for up to the busy timeout. The open's
worker now tells when it begins to wait (``reading.telling_waits``), and a banner says what it waits for, that
the database opens as soon as the lock goes, when the Studio gives up, and offers to stop waiting or to open
another database.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from typing import Any, Callable

from PySide6.QtCore import QObject, QTimer, Signal

from studio.widgets.banner import Banner


def lock_wait_notice(display: str, seconds_left: float, current: str | None) -> str:
    """The banner's text: what the open waits for, what happens when it ends either way, what stays open."""
    stays = f" {current} stays open meanwhile." if current else ""
    return (f"Waiting to open {display}: another program holds the database's lock (Mastra writing, or a "
            "program such as the sqlite3 shell in a transaction or a VACUUM). It opens as soon as that program "
            f"lets go; the Studio stops waiting in {max(seconds_left, 0):.0f} s and says the database is locked."
            f"{stays}")


class OpenWait(QObject):
    """The window's banner for the open in progress while it waits for a lock."""

    #: (open token, seconds until the wait gives up); emitted on the open's worker thread, handled on the UI's.
    waiting = Signal(int, float)

    def __init__(self, banner: Banner, *, stop: Callable[[], None], open_another: Callable[[], None],
                 status: Callable[[str], None]) -> None:
        super().__init__(banner)
        self.banner = banner
        self._stop, self._open_another, self._status = stop, open_another, status
        self.token: int | None = None
        self.display = ""
        self.current: str | None = None
        self._gives_up_at = 0.0
        self._tick = QTimer(self)
        self._tick.setInterval(1000)
        self._tick.timeout.connect(self._update)
        self.waiting.connect(self._on_waiting)

    # (Open Another… is File > Open: the wait goes on while the user chooses, and ends when another open begins.)

    def begin(self, token: int, display: str, current: str | None) -> None:
        """The open ``token`` of ``display`` starts (``current``: the database open now, if any)."""
        self.end()
        self.token, self.display, self.current = token, display, current

    def watching(self, token: int) -> AbstractContextManager[Any]:
        """Around the open's work, on its worker thread: its waits for a lock are told to the window, and
        given up once this open is no longer the window's (stopped, superseded, the window closing)."""
        from core.storage import reading  # (on the worker: it loads SQLAlchemy, which the first paint does without)

        return reading.telling_waits(lambda seconds: self._tell(token, seconds), stop=lambda: self.token != token)

    def end(self) -> None:
        """The open ended (opened, failed, superseded or stopped): nothing more to say about its wait, and
        a wait still going on gives up."""
        self.token = None
        self._tick.stop()
        self.banner.hide()

    @property
    def shown(self) -> bool:
        return self.token is not None and self._tick.isActive()

    def _tell(self, token: int, seconds: float) -> None:
        try:
            self.waiting.emit(token, seconds)
        except RuntimeError:  # the window is gone: nobody to tell
            pass

    def _on_waiting(self, token: int, seconds: float) -> None:
        if token != self.token:
            return  # an open given up or superseded meanwhile
        self._gives_up_at = time.monotonic() + seconds
        self.banner.show_message(self._text(), "warning",
                                 [("Stop Waiting", self._stop), ("Open Another…", self._open_another)])
        self._status(f"Opening {self.display}… waiting for another program's lock")
        self._tick.start()

    def _update(self) -> None:
        self.banner.label.setText(self._text())  # (the buttons stay: a focused one keeps its focus)

    def _text(self) -> str:
        return lock_wait_notice(self.display, self._gives_up_at - time.monotonic(), self.current)
