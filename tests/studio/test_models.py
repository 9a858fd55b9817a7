"""Pure logic and Qt models, without qtbot: formatting, the page cache, the tree diff, command
ranking, error wording, and the lazily loaded message model driven by a synchronous runner."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest
from PySide6.QtCore import QModelIndex, QPersistentModelIndex, Qt

from core import DatabaseOpenError, Message, SchemaError, open_store
from core.storage import CorruptDatabaseError, DiskFullError, ReadOnlyFileError
from core.messages import data_part, file_part, reasoning_part, text_part, tool_invocation_part
from studio.commands import Command, RecentFiles, rank, score
from studio.dialogs import explain
from studio import reads as queries
from studio.logic.message_format import message_html, snippet, summarize
from studio.models.messages_model import MessageListModel, MessageRoles
from studio.models.resource_tree import ResourceTreeModel, TreeRoles, plan_update
from studio.logic.row_cache import PageCache

from .conftest import at, seed_many


class QueuedRunner:
    """Stands in for StudioSession.run: jobs run when the test says so, on the test's thread."""

    def __init__(self) -> None:
        self.jobs: list[tuple[Callable[[], Any], Any, Any]] = []

    def __call__(self, fn: Callable[[], Any], on_result: Any = None, on_error: Any = None, key: Any = None) -> int:
        self.jobs.append((fn, on_result, on_error))
        return len(self.jobs)

    def drain(self, model: MessageListModel | None = None) -> int:
        ran = 0
        while self.jobs or (model is not None and model._wanted):
            if model is not None:
                model.flush_requests()
            if not self.jobs:
                break
            fn, ok, err = self.jobs.pop(0)
            try:
                result = fn()
            except Exception as exc:  # noqa: BLE001
                err(exc)
            else:
                ok(result)
            ran += 1
        return ran


# -- formatting ---------------------------------------------------------------------------------------

def test_summary_and_detail_show_every_part_type() -> None:
    msg = Message.create("assistant", [
        {"type": "step-start"},
        reasoning_part("think first"),
        tool_invocation_part("c1", "getWeather", {"city": "Paris"}, {"tempC": 21}),
        text_part("It is sunny."),
        data_part("chart", {"points": [1, 2]}),
        file_part("aGk=", "image/png", "plot.png"),
    ], thread_id="t", created_at=at(0))
    row = summarize(msg)
    assert row.kinds == ("reasoning", "tool-invocation", "text", "data", "file")
    assert "getWeather" in row.preview and "tempC" in row.preview and "It is sunny." in row.preview
    html = message_html(row)
    for needle in ("REASONING", "think first", "TOOL getWeather", "&quot;city&quot;: &quot;Paris&quot;",
                   "tempC", "DATA-CHART", "FILE plot.png", "image/png", "ASSISTANT"):
        assert needle in html, needle


def test_a_step_with_no_kept_parts_says_so_once_and_steps_are_numbered() -> None:
    """An assistant message stored with two step-start parts and nothing between (the first step's
    updateWorkingMemory call is not kept) showed "— step — / — step —" (found by s33-walk5)."""
    msg = Message.create("assistant", [
        {"type": "step-start", "model": "scripted/chef-demo"},
        {"type": "step-start"},
        text_part("Added rice noodles."),
    ], thread_id="t", created_at=at(0))
    html = message_html(summarize(msg))
    assert "— step —" not in html
    assert "— step 1 · model scripted/chef-demo · nothing of this step was stored —" in html
    assert "— step 2 —" in html and html.count("nothing of this step was stored") == 1
    assert html.index("step 2") < html.index("Added rice noodles.")
    one = message_html(summarize(Message.create("assistant", [{"type": "step-start"}, text_part("Hi.")],
                                                thread_id="t", created_at=at(0))))
    assert "— step —" in one and "nothing of" not in one  # one step with its text: as before


def test_snippet_centres_the_hit() -> None:
    text = "a " * 100 + "peanut allergy noted" + " b" * 100
    s = snippet(text, "PEANUT", width=40)
    assert "peanut" in s and s.startswith("…") and s.endswith("…")


# -- page cache ---------------------------------------------------------------------------------------

def test_page_cache_generations_and_eviction() -> None:
    cache: PageCache[int] = PageCache(page_size=10, max_pages=2)
    assert cache.needs(15) == 1
    cache.mark_requested(1)
    assert cache.needs(15) is None  # already on its way
    assert cache.put(1, cache.generation, list(range(10, 20)))
    assert cache.row(15) == 15
    cache.invalidate()
    assert cache.row(15) == 15  # stale rows stay visible
    assert cache.needs(15) == 1  # …but are fetched again
    assert not cache.put(1, cache.generation - 1, [0] * 10)  # a late answer from before the refresh
    cache.put(0, cache.generation, list(range(10)))
    cache.put(2, cache.generation, list(range(20, 30)))
    assert len(cache) == 2 and cache.row(15) is None  # least recently used page went


def test_plan_update() -> None:
    assert plan_update(["a", "b", "c"], ["c", "d", "a"]) == ([1], ["d"])


# -- commands -------------------------------------------------------------------------------------

def test_rank_prefers_contiguous_matches_and_skips_disabled() -> None:
    cmds = [Command("a", "Open Database…", lambda: None, menu="File"),
            Command("b", "Toggle Dark Mode", lambda: None, menu="View"),
            Command("c", "Allow Writes…", lambda: None, menu="File", enabled=lambda: False)]
    assert [c.id for c in rank("dark", cmds)] == ["b"]
    assert [c.id for c in rank("odb", cmds)][0] == "a"
    assert "c" not in [c.id for c in rank("", cmds)]
    assert score("xyz", "Open") is None


def test_recent_files_are_unique_and_bounded() -> None:
    recent = RecentFiles(limit=3)
    for p in ("a", "b", "c", "a", "d"):
        recent.push(p)
    assert recent.paths == ["d", "a", "c"]


# -- error wording --------------------------------------------------------------------------------

@pytest.mark.parametrize(("exc", "title", "advice"), [
    (DatabaseOpenError("/x.db does not exist. Check the path"), "Database not found", "File > Open"),
    (DatabaseOpenError("/x.db is locked by another process"), "Database is locked", "Wait"),
    (DatabaseOpenError("/x.db is not a SQLite/libSQL database"), "Not a database", "left unchanged"),
    (DatabaseOpenError("/x.db cannot be read (permission denied)"), "Cannot read the database", "permissions"),
    (SchemaError("/x.db was written by a newer Memory Studio"), "Newer database", "Upgrade"),
    (SchemaError("/x.db has no memory tables"), "Not a memory database", "Mastra"),
    (CorruptDatabaseError("/x.db is damaged"), "Damaged database", "backup"),
    (ReadOnlyFileError("/x.db is read-only for this user"), "Cannot write this file", "permissions"),
    (DiskFullError("/x.db: the disk is full"), "Disk full", "Free"),
])
def test_explain_says_what_to_do(exc: Exception, title: str, advice: str) -> None:
    problem = explain(exc, "/x.db")
    assert problem.title == title
    assert advice in problem.advice


@pytest.mark.parametrize(("message", "title", "advice"), [
    ("Cannot sign in to postgresql://agent@db/memory: password authentication failed for user \"agent\". Set "
     "PGPASSWORD, add the password to ~/.pgpass, or keep it in the system keyring", "Cannot sign in", "Connect to Postgres"),
    ("postgresql://agent@db/memory: database \"memory\" does not exist. Create the database first (createdb), "
     "then try again.", "Database not found", "createdb"),
    ("Cannot reach postgresql://agent@db/memory: connection refused", "Cannot open the database", "Connect to Postgres"),
])
def test_a_postgres_database_that_cannot_be_opened_gets_server_advice_not_file_advice(
        message: str, title: str, advice: str) -> None:
    problem = explain(DatabaseOpenError(message), "postgresql://agent@db/memory")
    assert (problem.title, problem.text) == (title, message)
    assert advice in problem.advice
    assert "File > Open" not in problem.advice and "this file" not in problem.advice.lower()


@pytest.mark.parametrize(("exc", "title", "advice"), [
    (SchemaError("postgresql://agent@db/memory is a PostgreSQL database, but it has no memory tables"),
     "Not a memory database", "Mastra (PgStore) with File > Connect to Postgres"),
    (SchemaError("postgresql://agent@db/memory was written by a newer Memory Studio"), "Newer database",
     "Upgrade Memory Studio to work with this database"),
])
def test_a_postgres_database_that_is_not_ours_gets_server_advice_not_file_advice(
        exc: Exception, title: str, advice: str) -> None:
    # It said "Open a database written by ... Mastra (LibSQLStore)" and "this file" for a Postgres database.
    problem = explain(exc, "postgresql://agent@db/memory")
    assert problem.title == title and advice in problem.advice
    assert "LibSQLStore" not in problem.advice and "this file" not in problem.advice.lower()


# -- message model ------------------------------------------------------------------------------

def test_message_model_reads_only_the_pages_it_is_asked_for(qapp: Any, tmp_path: Path) -> None:
    path = tmp_path / "big.db"
    seed_many(path, "big", 2_050)
    store = open_store(path, read_only=True, create=False)
    runner = QueuedRunner()
    model = MessageListModel(runner, store, page_size=100)
    model.open_thread("big")
    assert model.rowCount() == 0
    runner.drain()
    assert model.rowCount() == 2_050
    assert model.index(2_049).data(MessageRoles.PREVIEW) == "message number 2049"  # last page came with the count
    assert model.index(1_000).data(MessageRoles.ROW) is None  # not loaded: a placeholder, no I/O in data()
    assert runner.jobs == []
    runner.drain(model)
    assert model.index(1_000).data(MessageRoles.PREVIEW) == "message number 1000"
    assert model.index(1_000).data(MessageRoles.ROLE) == "user"
    store.close()


def test_message_model_refresh_appends_without_reset(qapp: Any, tmp_path: Path) -> None:
    path = tmp_path / "grow.db"
    seed_many(path, "g", 10)
    store = open_store(path)
    runner = QueuedRunner()
    model = MessageListModel(runner, store, page_size=4)
    model.open_thread("g")
    runner.drain()
    keep = QPersistentModelIndex(model.index(9))
    resets: list[int] = []
    model.modelReset.connect(lambda: resets.append(1))
    store.memory.save_messages([Message.user("late", id="late", thread_id="g", resource_id="bulk",
                                             created_at=at(60))])
    model.refresh()
    runner.drain()
    assert model.rowCount() == 11 and resets == [] and keep.row() == 9
    model.index(10).data(MessageRoles.ROW)
    runner.drain(model)
    assert model.index(10).data(MessageRoles.ID) == "late"
    store.close()


def test_unreadable_row_does_not_hide_its_neighbours(tmp_path: Path) -> None:
    path = tmp_path / "bad.db"
    seed_many(path, "t", 3)
    store = open_store(path)
    with store.db.write() as conn:
        conn.exec_driver_sql("UPDATE mastra_messages SET content = '{broken' WHERE id = 'm0000001'")
    rows = queries.load_page(store, "t", 0, 10)
    assert [r.error is not None for r in rows] == [False, True, False]
    assert "unreadable" in rows[1].preview
    store.close()


# -- tree model ---------------------------------------------------------------------------------------

def test_tree_model_updates_in_place(qapp: Any, small_db: Path) -> None:
    store = open_store(small_db)
    model = ResourceTreeModel()
    model.apply(queries.load_tree(store))
    assert sorted(model.resource_ids()) == ["ada", "li"]
    party = QPersistentModelIndex(model.index_of("ada", "t-party"))
    assert party.data(TreeRoles.THREAD_ID) == "t-party" and party.data() == "Birthday party"
    resets: list[int] = []
    model.modelReset.connect(lambda: resets.append(1))
    store.memory.create_thread(thread_id="t-new", resource_id="zed", title="New")
    store.memory.save_messages([Message.user("hi", thread_id="t-party", resource_id="ada", created_at=at(9))])
    model.apply(queries.load_tree(store))
    assert resets == [] and party.isValid() and party.data(TreeRoles.THREAD_ID) == "t-party"
    assert model.index(party.row(), 1, party.parent()).data() == "2"
    assert "zed" in model.resource_ids()
    store.memory.delete_thread("t-new")
    model.apply(queries.load_tree(store))
    assert "zed" not in model.resource_ids() and party.isValid()
    store.close()


def test_tree_model_signals_only_the_rows_that_changed(qapp: Any, small_db: Path) -> None:
    # (the sorting proxy sorts every row again on each signal: a refresh of 3,000 unchanged threads signalled
    # them all, ~0.2 s of the UI thread each time the database changed)
    store = open_store(small_db)
    model = ResourceTreeModel()
    model.apply(queries.load_tree(store))
    changed: list[tuple[str | None, int, int]] = []
    model.dataChanged.connect(lambda first, last, *_: changed.append(
        (first.parent().data(TreeRoles.RESOURCE_ID), first.row(), last.row())))
    model.apply(queries.load_tree(store))
    assert changed == []  # nothing changed, nothing signalled
    store.memory.save_messages([Message.user("hi", thread_id="t-party", resource_id="ada", created_at=at(9))])
    model.apply(queries.load_tree(store))
    party = model.index_of("ada", "t-party")
    resource = party.parent()
    assert sorted(changed, key=str) == sorted([(None, resource.row(), resource.row()), ("ada", party.row(), party.row())], key=str)
    assert model.index(party.row(), 1, resource).data() == "2"
    store.close()


def test_tree_model_index_answers_as_has_index_does(qapp: Any, small_db: Path) -> None:
    store = open_store(small_db)
    model = ResourceTreeModel()
    model.apply(queries.load_tree(store))
    store.close()
    resource = model.index(0, 0)
    thread = model.index(0, 0, resource)
    assert resource.isValid() and thread.isValid() and thread.parent() == resource
    for row, column, parent in [(-1, 0, QModelIndex()), (0, -1, QModelIndex()), (0, 3, QModelIndex()),
                                (len(model.resource_ids()), 0, QModelIndex()), (0, 0, model.index(0, 1)),
                                (model.rowCount(resource), 0, resource), (0, 0, thread)]:
        assert not model.index(row, column, parent).isValid(), (row, column)
        assert not model.hasIndex(row, column, parent)


def test_leak_check_catches_a_window_left_open(qapp: Any) -> None:
    from PySide6.QtWidgets import QWidget

    from .conftest import _key, leaked_top_levels

    before = {_key(w) for w in qapp.topLevelWidgets()}
    stray = QWidget()
    stray.show()
    assert stray in leaked_top_levels(before)
    stray.close()
    stray.deleteLater()
    assert leaked_top_levels(before) == []


def test_invalid_utf8_row_is_shown_and_marked(tmp_path: Path) -> None:
    path = tmp_path / "bytes.db"
    seed_many(path, "t", 3)
    store = open_store(path)
    bad = '{"format":2,"parts":[{"type":"text","text":"caf'.encode().hex() + "c3" + '"}]}'.encode().hex()
    with store.db.write() as conn:
        conn.exec_driver_sql(f"UPDATE mastra_messages SET content = CAST(X'{bad}' AS TEXT) WHERE id = 'm0000001'")
    rows = queries.load_page(store, "t", 0, 10)
    assert [r.message is not None for r in rows] == [True, True, True]
    assert rows[1].preview.startswith("[partly unreadable] caf\ufffd") and "error" in rows[1].kinds
    assert rows[0].error is None and "not valid UTF-8" in (rows[1].error or "")
    html = message_html(rows[1])
    assert "PARTLY UNREADABLE" in html and "caf\ufffd" in html
    store.close()


def test_a_mistake_the_message_explains_shows_no_traceback_and_a_fault_keeps_it() -> None:
    # --db missing.db / a folder / another program's file: the dialog says what to do; a "Show Details…" with a
    # traceback under it would read as a crash. A damaged file or an unexpected error keeps it, for a report.
    def raised(exc: Exception) -> Exception:
        try:
            raise exc
        except Exception as caught:  # noqa: BLE001 - the traceback is what is tested
            return caught

    for exc in (DatabaseOpenError("/x.db does not exist. Check the path"),
                DatabaseOpenError("/tmp is a folder, not a database file. Choose a file inside it."),
                SchemaError("/x.db has no memory tables"), ReadOnlyFileError("/x.db is read-only for this user")):
        assert explain(raised(exc), "/x.db").details == "", exc
    assert "Traceback" in explain(raised(CorruptDatabaseError("/x.db is damaged")), "/x.db").details
    assert "Traceback" in explain(raised(KeyError("surprise")), "/x.db").details


def test_tree_rows_and_tooltips_show_a_titles_bidirectional_controls(qapp: Any, small_db: Path) -> None:
    store = open_store(small_db)
    store.memory.create_thread(thread_id="t-rtl", resource_id="ada", title="\u202eevil title\u202c\nsecond line")
    model = ResourceTreeModel()
    model.apply(queries.load_tree(store))
    row = model.index_of("ada", "t-rtl")
    assert row.data() == "\\u202eevil title\\u202c\\nsecond line"
    assert row.data(Qt.ItemDataRole.ToolTipRole).startswith("\\u202eevil title\\u202c\\nsecond line\nthread t-rtl")
    assert row.data(TreeRoles.FILTER).startswith("\u202eevil")  # (the filter matches what is stored)
    store.close()
