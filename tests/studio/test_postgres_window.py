"""The Studio on a Postgres database: opens read-only until writes are allowed, shows the data,
refreshes when another process writes, and never keeps a password."""

from __future__ import annotations

from typing import Any

from core import Memory, Message, open_store
from studio.selection import Selection

from .conftest import seed_small


def _wait_open(qtbot: Any, window: Any, threads: int) -> None:
    qtbot.waitUntil(lambda: window.session is not None and window.resources is not None
                    and len(window.resources.thread_rows()) >= threads, timeout=20_000)


def test_postgres_database_opens_read_only_and_live(qtbot: Any, make_window: Any, pg_url: str) -> None:
    seed_small(pg_url)  # type: ignore[arg-type]  # open_store takes a URL as well as a path
    window = make_window()
    window.open_database(pg_url)
    _wait_open(qtbot, window, 3)
    assert window.session.read_only and "[read-only]" in window.windowTitle()
    assert any("上海出差" in str(r) for r in window.resources.thread_rows())
    window.set_selection(Selection("ada", "t-groceries"))
    qtbot.waitUntil(lambda: window.messages_pane.model.rowCount() > 0, timeout=10_000)
    shown = window.messages_pane.model.rowCount()

    # Another process (here: another store) writes; the open window follows without a reload.
    with open_store(pg_url) as other:
        Memory(other).save_messages([Message.user("one more thing", thread_id="t-groceries", resource_id="ada")])
    qtbot.waitUntil(lambda: window.messages_pane.model.rowCount() == shown + 1, timeout=20_000)

    window.commands.run("file.allow_writes")
    qtbot.waitUntil(lambda: bool(window.presenter.open), timeout=10_000)
    window.presenter.open[-1].property("yesButton").click()
    qtbot.waitUntil(lambda: window.session is not None and not window.session.read_only, timeout=20_000)
    assert pg_url.split("?")[0].rsplit("/", 1)[1] in window.recent.paths[0]


def test_connect_dialog_builds_a_url_without_password_and_recent_keeps_none(
    qtbot: Any, make_window: Any, pg_url: str
) -> None:
    window = make_window()
    window.commands.run("file.connect_postgres")
    qtbot.waitUntil(lambda: bool(window.presenter.open), timeout=5_000)
    dialog = window.presenter.open[-1]
    dialog.host.setText("db.example.internal")
    dialog.port.setValue(6543)
    dialog.database.setText("memory")
    dialog.user.setText("agent")
    assert dialog.url() == "postgresql://agent@db.example.internal:6543/memory"
    dialog.reject()
    qtbot.waitUntil(lambda: not window.presenter.open)

    secret_url = pg_url.replace("postgres:@", "postgres:s3cret@")  # the test server trusts any password
    window.open_database(secret_url)
    qtbot.waitUntil(lambda: window.session is not None, timeout=20_000)
    assert "s3cret" not in window.session.display_path and "s3cret" not in window.windowTitle()
    assert window.recent.paths and all("s3cret" not in p for p in window.recent.paths)
    assert "s3cret" not in str(window.settings.value("recentFiles"))
    window.reload()  # reopening uses the full URL kept in memory, not the shown one
    qtbot.waitUntil(lambda: window.session is not None and window.session.read_only, timeout=20_000)
