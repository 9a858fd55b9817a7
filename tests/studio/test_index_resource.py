"""Edit > Index Recall for Resource…: a resource whose messages recall never indexed (saved by an agent with recall
off, written by another program) is indexed from the Studio, asked first, with the model the database's vectors
come from; the Recall Playground's banner offers it where its search found the scope unindexed; a read-only
database refuses; closing the Studio stops it between batches with what was indexed kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QMessageBox

from core import Memory, MemoryOptions, Message, open_store
from core.embedding import HashingEmbedder
from studio.selection import Selection

from .test_memory_edits_window import _dialog, _open

RECALL = MemoryOptions(semantic_recall={"top_k": 3, "message_range": 0, "scope": "resource"})


def _two_resources(path: Path, unindexed: int = 4, by_memory: bool = False) -> None:
    """ada's messages saved with recall (hashing vectors: the database's model), bob's without: written by
    another program (below ``Memory``: no keyword docs either, they wait for a recall writer), or with
    ``by_memory`` by a memory without recall (its saves key their keyword docs, s37-backlog9; no vectors)."""
    with open_store(path) as store:
        Memory(store, RECALL, embedder=HashingEmbedder(64)).save_messages(
            [Message.user("I am allergic to peanuts", thread_id="t-ada", resource_id="ada"),
             Message.assistant("Noted, no peanuts.", thread_id="t-ada", resource_id="ada")])
        bobs = [(Message.user if i % 2 == 0 else Message.assistant)(f"bob's note {i} about the staging mail server",
                                                                    thread_id="t-bob", resource_id="bob")
                for i in range(unindexed)]
        if by_memory:
            Memory(store).save_messages(bobs)
        else:
            store.memory.create_thread(thread_id="t-bob", resource_id="bob")
            store.memory.save_messages(bobs)


def _vectors_of(path: Path, resource: str) -> int:
    with open_store(path, read_only=True) as store, store.db.read() as conn:
        table = conn.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'memory_messages_%'").scalar()
        return int(conn.exec_driver_sql(
            f"SELECT count(*) FROM {table} WHERE json_extract(metadata, '$.resource_id') = ?", (resource,)).scalar() or 0)


def _searched(qtbot: Any, window: Any) -> Any:
    """The Recall Playground on bob's thread, "mail server" searched."""
    window.show_tab("recall")
    window.select_thread(Selection("bob", "t-bob"))
    pane = window.panes["recall"]
    qtbot.waitUntil(lambda: pane.start is not None, timeout=15_000)
    pane.query_edit.setText("mail server")
    pane.search_now()
    qtbot.waitUntil(lambda: pane.view is not None and pane.view.request.query == "mail server", timeout=30_000)
    return pane


@pytest.mark.parametrize("writer", ["another program", "a memory without recall"])
def test_the_playground_offers_indexing_an_unindexed_resource_and_the_command_indexes_it(
        qtbot: Any, make_window: Any, tmp_path: Path, writer: str) -> None:
    db = tmp_path / "memory.db"
    _two_resources(db, by_memory=writer == "a memory without recall")
    assert _vectors_of(db, "bob") == 0 and _vectors_of(db, "ada") == 2
    window = _open(qtbot, make_window, db)
    pane = _searched(qtbot, window)
    assert pane.view.inspection.vectors_in_scope == 0
    if writer == "another program":
        assert pane.view.inspection.empty_reason("hybrid") == (  # not "nothing found": nothing there is indexed
            f"no messages indexed for resource bob with model {HashingEmbedder(64).model_id}")
    else:  # found by the keyword docs its saves wrote, with no vector: indexing is still offered
        hits = pane.view.inspection.hits("hybrid")
        assert hits and all(c.vector_score is None for c in hits)
        assert any("4 keyword matches have no vector from" in n for n in pane.view.inspection.notes)
    qtbot.waitUntil(lambda: pane.banner.isVisible(), timeout=5_000)
    assert [b.text() for b in pane.banner.buttons] == ["Index This Resource…"]
    assert _vectors_of(db, "bob") == 0  # the search itself wrote nothing

    pane.banner.buttons[0].click()  # the window's command: asked first
    box = _dialog(qtbot, window, QMessageBox)
    assert "resource bob" in box.text() and "no message, thread or memory changes" in box.informativeText()
    box.button(QMessageBox.StandardButton.Cancel).click()
    assert _vectors_of(db, "bob") == 0

    pane.banner.buttons[0].click()
    box = _dialog(qtbot, window, QMessageBox)
    with qtbot.waitSignal(window.edits.indexed, timeout=60_000) as done:
        box.property("yesButton").click()
    report = done.args[0]
    assert report.indexed == 4 and report.total == 4 and report.model_id == HashingEmbedder(64).model_id
    assert _vectors_of(db, "bob") == 4 and _vectors_of(db, "ada") == 2  # the other resource untouched
    assert "resource bob" in window.status_text.text().lower() and "Embedded 4 of 4" in window.status_text.text()
    assert window.commands.command("resource.index").is_enabled  # free again

    # The playground searches again by itself, finds the scope indexed and offers nothing more.
    qtbot.waitUntil(lambda: pane.view is not None and pane.view.inspection.vectors_in_scope == 4, timeout=30_000)
    assert not pane.banner.isVisible() or not pane.banner.buttons, pane.banner.text()

    # Run again: nothing to do, and said so.
    window.commands.run("resource.index")
    box = _dialog(qtbot, window, QMessageBox)
    with qtbot.waitSignal(window.edits.indexed, timeout=60_000) as again:
        box.property("yesButton").click()
    assert again.args[0].total == 0 and "Nothing new" in window.status_text.text()


def test_a_read_only_database_refuses_to_index_and_the_playground_does_not_offer_it(
        qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    _two_resources(db)
    window = make_window()
    window.open_database(str(db), allow_writes=False)
    qtbot.waitUntil(lambda: window.session is not None and window.resources is not None
                    and len(window.resources.thread_rows()) >= 1, timeout=15_000)
    assert window.session.read_only
    pane = _searched(qtbot, window)
    assert not pane.banner.buttons
    window.commands.run("resource.index")
    box = _dialog(qtbot, window, QMessageBox)
    assert "read-only" in box.text() and "Allow Writes" in box.informativeText()
    box.accept()
    assert _vectors_of(db, "bob") == 0


def test_indexing_stopped_between_batches_keeps_what_was_indexed(tmp_path: Path) -> None:
    from studio import edit_jobs

    db = tmp_path / "memory.db"
    _two_resources(db, unindexed=100)
    steps: list[tuple[int, int]] = []
    with open_store(db) as store:
        with pytest.raises(edit_jobs.IndexingStopped, match="stopped after 64 of 100"):
            edit_jobs.index_resource(store, "bob", lambda d, t: steps.append((d, t)), lambda: len(steps) >= 1)
    assert steps == [(0, 100)]
    assert _vectors_of(db, "bob") == 64  # the first batch (reindex's 64) kept
    with open_store(db) as store:  # and the next run does the rest, nothing twice
        report = edit_jobs.index_resource(store, "bob", lambda d, t: None)
    assert (report.total, report.indexed, report.already_indexed) == (36, 36, 64)
    assert _vectors_of(db, "bob") == 100


def test_indexing_a_resource_with_nothing_new_says_which_other_resources_keyword_docs_it_wrote(
        qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    """ada is indexed, bob's messages wait for the keyword index (the queue is the database's): Index Recall for
    ada embeds nothing, and its status said "0 indexed" while it had keyword-indexed bob's 4 messages. It says so
    now, and the question before it says that it may (found by session 28)."""
    db = tmp_path / "memory.db"
    _two_resources(db)
    window = _open(qtbot, make_window, db)
    window.select_thread(Selection("ada", "t-ada"))
    window.commands.run("resource.index")
    box = _dialog(qtbot, window, QMessageBox)
    assert "resource ada" in box.text() and "other resources' waiting keyword docs" in box.informativeText()
    with qtbot.waitSignal(window.edits.indexed, timeout=60_000) as done:
        box.property("yesButton").click()
    report = done.args[0]
    assert (report.total, report.keyword_docs, report.keyword_docs_elsewhere) == (0, 0, 4)
    status = window.status_text.text()
    assert status == ("Resource ada: Nothing new: 0 embedded, 2 already current. Keyword index: 4 queued message(s) "
                      "of other resources indexed too, 0 of this resource's."), status
    assert _vectors_of(db, "bob") == 0  # nothing of bob's embedded
