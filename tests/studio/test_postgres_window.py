"""The Studio on a Postgres database: opens read-only until writes are allowed, shows the data,
refreshes when another process writes, and never keeps a password."""

from __future__ import annotations

from typing import Any

from core import Memory, Message, open_store
from studio.main_window import WORKING_MEMORY
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
    # The title starts with the database's name, not the last folder of the server's socket path.
    database = pg_url.split("?")[0].rsplit("/", 1)[1]
    assert window.windowTitle().startswith(f"{database} — postgresql://")
    assert window.path_label.text().endswith(" · opened by URL")  # not "by path"
    assert any("上海出差" in str(r) for r in window.resources.thread_rows())
    window.set_selection(Selection("ada", "t-groceries"))
    qtbot.waitUntil(lambda: window.messages_pane.model.rowCount() > 0, timeout=10_000)
    shown = window.messages_pane.model.rowCount()

    # Another process (here: another store) writes; the open window follows without a reload.
    with open_store(pg_url) as other:
        Memory(other).save_messages([Message.user("one more thing", thread_id="t-groceries", resource_id="ada")])
    qtbot.waitUntil(lambda: window.messages_pane.model.rowCount() == shown + 1, timeout=20_000)

    window.show_tab(WORKING_MEMORY)  # whose banner says to choose File > Allow Writes
    window.commands.run("file.allow_writes")
    qtbot.waitUntil(lambda: bool(window.presenter.open), timeout=10_000)
    # Why it is read-only: a server is shared (not "was not created by Memory Studio … this file", which it
    # said of every server database, its agents' own included: found by the session-31 walk).
    box = window.presenter.open[-1]
    assert "is a database server other programs share" in box.text()
    assert "not created by Memory Studio" not in box.text() and "file" not in box.informativeText()
    box.property("yesButton").click()
    qtbot.waitUntil(lambda: window.session is not None and not window.session.read_only, timeout=20_000)
    assert pg_url.split("?")[0].rsplit("/", 1)[1] in window.recent.paths[0]
    assert window.current_pane() is window.pane(WORKING_MEMORY)  # still there (it went back to Messages)
    qtbot.waitUntil(lambda: window.selection.thread_id == "t-groceries", timeout=20_000)  # (once the tree is read)


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


def _traced_turn(url: str, text: str, thread: str) -> None:
    from core.agent import Agent
    from core.llm import ScriptedModel

    with open_store(url) as store:
        agent = Agent("chef", instructions="Cook.", memory=Memory(store),
                      model=ScriptedModel(lambda messages, tools: "Try a curry."))
        agent.generate(text, memory={"resource": "ada", "thread": thread})
        assert store.tracer().flush(10)


def test_traces_pane_shows_the_runs_kept_in_the_postgres_database(
    no_leaked_widgets: None, qtbot: Any, make_session: Any, pg_url: str
) -> None:
    from studio.panes.traces import TAB_MESSAGES, TracesPane

    _traced_turn(pg_url, "Dinner ideas?", "t-dinner")
    pane = TracesPane(make_session(pg_url))  # opened read-only, as the Studio opens a server database
    qtbot.addWidget(pane)
    pane.resize(1200, 800)
    with qtbot.waitSignal(pane.traces_loaded, timeout=20_000):
        pane.show()
    assert pane.source is not None and pane.source.kind == "postgres"
    assert "mastra_ai_spans" in pane.subtitle.text() and not pane.banner.isVisible()
    assert [(t.entity_name, t.status, t.thread_id) for t in pane.traces] == [("chef", "ok", "t-dinner")]
    qtbot.waitUntil(lambda: bool(pane.spans) and pane.spans[0].trace_id == pane.traces[0].trace_id, timeout=20_000)
    gen = next(r.span for r in pane.layout_model.rows if r.span.span_type == "model_generation")
    assert pane.select_span(gen.span_id) and pane.tabs.isTabVisible(TAB_MESSAGES)
    assert "Dinner ideas?" in pane.chat_view.toPlainText()

    # An agent process writes another run: the pane polls the table and shows it, no reload needed.
    _traced_turn(pg_url, "And dessert?", "t-dessert")
    qtbot.waitUntil(lambda: len(pane.traces) == 2, timeout=30_000)
    assert pane.traces[0].thread_id == "t-dessert"


def test_another_programs_postgres_database_is_named_as_postgres(pg_url: str) -> None:
    """The refusal names the database's kind: it said "a SQLite database" for a Postgres one."""
    import psycopg
    import pytest

    from core import SchemaError
    from studio.session import open_studio_database

    with psycopg.connect(pg_url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        conn.execute("CREATE TABLE invoices (id serial PRIMARY KEY, total numeric)")
    with pytest.raises(SchemaError) as caught:
        open_studio_database(pg_url)
    assert "is a PostgreSQL database, but it has no memory tables" in str(caught.value)
    assert "SQLite" not in str(caught.value)


def test_a_server_that_stops_answering_is_said_above_the_panes(qtbot: Any, make_window: Any, pg_url: str,
                                                               monkeypatch: Any) -> None:
    """The panes keep what they last read while the server is down: a banner says it may be out of date,
    and goes when the server answers again (the panes then read again)."""
    from core.storage.errors import StorageUnavailableError

    seed_small(pg_url)  # type: ignore[arg-type]
    window = make_window()
    window.open_database(pg_url)
    _wait_open(qtbot, window, 3)
    db = window.session.store.db
    plain = db.change_fingerprint

    def down() -> Any:  # what the change poll meets while the server is stopped
        raise StorageUnavailableError("Cannot reach the database server: connection refused. Try again once the "
                                      "server is back; connections are re-made automatically.")

    monkeypatch.setattr(db, "change_fingerprint", down)
    window.session.poll()
    qtbot.waitUntil(lambda: window.file_banner.isVisible(), timeout=10_000)
    assert "connection refused" in window.file_banner.label.text()
    assert "may be out of date" in window.file_banner.label.text()
    monkeypatch.setattr(db, "change_fingerprint", plain)
    with qtbot.waitSignal(window.session.changed, timeout=10_000):
        window.session.poll()
    qtbot.waitUntil(lambda: not window.file_banner.isVisible(), timeout=10_000)


def _refuse_connections(pg_server: Any, url: str, refuse: bool) -> None:
    """The database stops (or starts again) taking connections, and its open ones are ended: to its clients, a
    server gone mid-session (the test server itself keeps running for the other tests)."""
    name = url.split("?")[0].rsplit("/", 1)[1]
    with pg_server.admin() as conn:
        conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {"false" if refuse else "true"}')
        if refuse:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                         "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))


def test_a_thread_picked_while_the_server_is_gone_shows_nothing_of_the_thread_before(
        no_leaked_widgets: None, qtbot: Any, make_session: Any, pg_server: Any, pg_url: str, tmp_path: Any) -> None:
    """Found by the session-31 walk (the Postgres server stopped under a Studio, another thread then picked): the
    Traces pane kept the previous thread's token total under the new thread's name, and told the user to check
    that the "trace file" postgresql://… exists; Replay kept the previous turn's context caption ("Context at
    turn 3 … 536 tokens") and the previous thread in its Thread list."""
    from studio.panes.prompt_inspector import PromptInspectorPane
    from studio.panes.traces import TracesPane
    from studio.panes.working_memory import WorkingMemoryPane

    from .replay_panes import pane_preferences, shown_pane

    _traced_turn(pg_url, "Dinner ideas?", "t-dinner")
    _traced_turn(pg_url, "And dessert?", "t-dessert")
    session = make_session(pg_url)
    traces = TracesPane(session)
    qtbot.addWidget(traces)
    traces.resize(1200, 800)
    traces.set_selection(Selection("ada", "t-dinner"))
    with qtbot.waitSignal(traces.traces_loaded, timeout=20_000):
        traces.show()
    qtbot.waitUntil(lambda: "t-dinner" in traces.usage_label.text() and "tokens" in traces.usage_label.text(),
                    timeout=20_000)
    prompt = PromptInspectorPane(session)
    qtbot.addWidget(prompt)
    prompt.show()
    with qtbot.waitSignal(prompt.assembled, timeout=20_000):
        prompt.set_selection(Selection("ada", "t-dinner"))
    assert prompt.instructions_edit.text() == "Cook." and prompt.agent_combo.count()
    memory = WorkingMemoryPane(session)
    qtbot.addWidget(memory)
    memory.show()
    with qtbot.waitSignal(memory.loaded, timeout=20_000):
        memory.set_selection(Selection("ada", "t-dinner"))
    replay = shown_pane(qtbot, session, pane_preferences(tmp_path), Selection("ada", "t-dinner"))
    qtbot.waitUntil(lambda: "t-dinner" in replay.thread_combo.currentText(), timeout=20_000)
    assert "Context at turn 1" in replay.view.context_caption.text()

    _refuse_connections(pg_server, pg_url, True)
    try:
        with qtbot.waitSignal(replay.failed, timeout=30_000):
            replay.set_selection(Selection("ada", "t-dessert"))
        with qtbot.waitSignal(memory.failed, timeout=30_000):
            memory.set_selection(Selection("ada", "t-dessert"))
        prompt.set_selection(Selection("ada", "t-dessert"))
        qtbot.waitUntil(lambda: "t-dessert could not be read" in prompt.subtitle.text(), timeout=30_000)
        traces.set_selection(Selection("ada", "t-dessert"))
        qtbot.waitUntil(lambda: traces.banner.isVisible() and "could not be read" in traces.banner.label.text(),
                        timeout=30_000)
        with qtbot.waitSignal(session.server_lost, timeout=30_000):
            session.poll()  # (the window's change poll, once a second)
    finally:
        _refuse_connections(pg_server, pg_url, False)
    assert traces.subtitle.text() == "thread t-dessert" and not traces.traces
    assert "t-dinner" not in traces.usage_label.text() and "tokens" not in traces.usage_label.text()
    assert "trace file" not in traces.banner.label.text()  # a server has none to check
    assert "Context at turn" not in replay.view.context_caption.text()
    assert "t-dinner" not in replay.thread_combo.currentText()
    assert "t-dessert could not be read" in replay.status.text()
    assert memory.status.text().startswith("Working memory could not be read")  # not "nothing was written"
    # (the agent, its options and instructions were t-dinner's, kept under t-dessert's header)
    assert prompt.instructions_edit.text() == "" and prompt.agent_combo.count() == 0

    # The server answers again: both panes read the thread asked for, not at their next back-off (Traces) or
    # only at File > Reload (Replay).
    with qtbot.waitSignal(replay.step_shown, timeout=30_000):
        with qtbot.waitSignal(session.server_back, timeout=30_000):
            session.poll()
        assert traces.status.text() == "Reading traces…"  # now, not after up to 30 s
    assert replay.state.thread_id == "t-dessert" and "t-dessert" in replay.thread_combo.currentText()
    qtbot.waitUntil(lambda: prompt.preview is not None and prompt.selection.thread_id == "t-dessert"
                    and "And dessert?" in str(prompt.preview.prompt.messages), timeout=30_000)
    assert prompt.instructions_edit.text() == "Cook." and "could not be read" not in prompt.subtitle.text()
    qtbot.waitUntil(lambda: [t.thread_id for t in traces.traces] == ["t-dessert"], timeout=30_000)
    assert not traces.banner.isVisible() and "t-dessert" in traces.usage_label.text()


def test_connect_dialog_shows_the_url_that_could_not_sign_in(qtbot: Any, make_window: Any, pg_server: Any,
                                                             pg_url: str) -> None:
    """A sign-in that failed (here: a wrong password) said "connect again with File >
    Connect to Postgres…", whose dialog then showed localhost and empty fields: the socket folder, the
    database and the user were all to be typed again. It shows them now, and never the password."""
    import os

    import psycopg

    role = f"pw{os.getpid()}"
    with pg_server.admin() as conn:
        conn.execute(f"CREATE ROLE \"{role}\" LOGIN PASSWORD 'right'")
    try:
        with psycopg.connect(pg_url, autocommit=True) as conn:  # this server trusts every role: not this one
            hba = conn.execute("SHOW hba_file").fetchone()[0]
        original = open(hba, encoding="utf-8").read()
        with open(hba, "w", encoding="utf-8") as f:
            f.write(f"local all {role} scram-sha-256\nhost all {role} 127.0.0.1/32 scram-sha-256\n" + original)
        try:
            with pg_server.admin() as conn:
                conn.execute("SELECT pg_reload_conf()")
            window = make_window()
            tried = pg_url.replace("postgres:@", f"{role}:wrong@", 1)
            window.open_database(tried)
            qtbot.waitUntil(lambda: bool(window.presenter.open), timeout=20_000)
            assert "Cannot sign in" in window.presenter.open[-1].text()
            window.presenter.open[-1].close()
            window.presenter.open.clear()
            window.commands.run("file.connect_postgres")
            qtbot.waitUntil(lambda: bool(window.presenter.open), timeout=5_000)
            dialog = window.presenter.open[-1]
            host = pg_url.split("host=", 1)[1].split("&", 1)[0]
            assert dialog.host.text() == host and dialog.user.text() == role
            assert dialog.database.text() == pg_url.split("?")[0].rsplit("/", 1)[1]
            assert "wrong" not in dialog.url() and dialog.url().startswith(f"postgresql://{role}@/")
            dialog.reject()
        finally:
            with open(hba, "w", encoding="utf-8") as f:
                f.write(original)
            with pg_server.admin() as conn:
                conn.execute("SELECT pg_reload_conf()")
    finally:
        with pg_server.admin() as conn:
            conn.execute(f'DROP ROLE IF EXISTS "{role}"')


def test_vacuum_now_refused_to_a_role_that_may_not_rewrite_says_so_and_can_be_tried_again(
    qtbot: Any, make_window: Any, pg_server: Any, pg_url: str
) -> None:
    """Forget Resource…, then Vacuum Now, as a role that may write the memory but does not own its tables: the
    vacuum failed (it had said "reclaimed 0.00 MB" before it was refused), and the button said "Vacuumed",
    disabled, above "Vacuum failed: …"."""
    import os

    from studio.widgets.forget_dialog import ForgetDialog

    seed_small(pg_url)  # type: ignore[arg-type]
    role = f"wr{os.getpid()}"
    with pg_server.role(pg_url, role, "SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public",
                        "USAGE ON ALL SEQUENCES IN SCHEMA public") as writer_url:
        window = make_window()
        window.open_database(writer_url, allow_writes=True)
        _wait_open(qtbot, window, 3)
        assert not window.session.read_only
        window.select_thread(Selection("ada", "t-groceries"))
        qtbot.waitUntil(lambda: window.selection.resource_id == "ada", timeout=10_000)
        window.commands.run("resource.forget")
        qtbot.waitUntil(lambda: any(isinstance(d, ForgetDialog) and d.isVisible() for d in window.presenter.open),
                        timeout=15_000)
        dialog = next(d for d in reversed(window.presenter.open) if isinstance(d, ForgetDialog))
        qtbot.waitUntil(lambda: dict(dialog.model.rows()).get("messages", 0) > 0, timeout=15_000)
        dialog.understood.setChecked(True)
        with qtbot.waitSignal(window.edits.forgotten, timeout=30_000):
            dialog.forget_btn.click()
        dialog.vacuum_btn.click()
        qtbot.waitUntil(lambda: "Vacuum failed" in dialog.detail.text(), timeout=30_000)
        assert f"the role '{role}' may not vacuum" in dialog.detail.text()
        assert dialog.vacuum_btn.text() == "Vacuum Now" and dialog.vacuum_btn.isEnabled()
        dialog.close()
