"""The Replay pane tests' shared set-up: a Studio session over a copied database, preferences of the test's
own, and the pane shown at the size the tests read it at (optionally with a thread opened)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from PySide6.QtCore import QSettings

from studio.panes.replay import ReplayPane
from studio.preferences import Preferences
from studio.selection import Selection
from studio.session import StudioSession, open_for_studio


def studio_session(db: Path) -> Iterator[StudioSession]:
    """A fixture's body: the session over ``db``, closed once its jobs are over."""
    session = StudioSession(open_for_studio(db))
    yield session
    session.pool.wait(20_000)
    session.close()


def pane_preferences(folder: Path) -> Preferences:
    return Preferences(QSettings(str(folder / "prefs.ini"), QSettings.Format.IniFormat))


def shown_pane(qtbot: Any, session: StudioSession, prefs: Preferences,
               opened: Selection | None = None) -> ReplayPane:
    """The Replay pane at 1,400 x 860, shown; with ``opened``, once that thread's first step is shown."""
    pane = ReplayPane(session, preferences=prefs)
    qtbot.addWidget(pane)
    pane.resize(1400, 860)
    pane.show()
    if opened is not None:
        with qtbot.waitSignal(pane.step_shown, timeout=30_000):
            pane.set_selection(opened)
    return pane
