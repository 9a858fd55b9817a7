"""The Studio's start-up order (issue 18, item 6): the window paints before the heavy modules load,
they load on a worker afterwards, the window's menus, shortcuts and palette are added right after its
first paint (and are then the same as a window built whole), and a thread opens at its newest rows with
a keyset read.

The start-up checks run the ``memory-studio`` command as a user starts it (``studio.cli.main``, which
calls ``studio.app.main`` and its ``launch``) in a fresh interpreter, because what matters is what
``sys.modules`` holds at the first paint of a cold process. No timings are asserted: ``bench/studio.py``
measures them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import sqlalchemy as sa

from core import open_store
from core.storage import message_pages
from studio import reads as queries
from studio.logic.row_cache import PageCache
from studio.models.messages_model import FIRST_ROWS, MessageListModel, MessageRoles

from .conftest import seed_many, seed_small
from .test_models import QueuedRunner

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("sqlalchemy", "numpy", "duckdb", "onnxruntime", "tiktoken", "jsonschema", "core.memory")

START = r"""
import builtins, json, sys
HEAVY = %r
real_compile = builtins.compile
out = {}
def menus(window):  # each menu's items: (title, shortcut), separators as "-"
    return {title: [("-", "") if a.isSeparator() else (a.text(), a.shortcut().toString()) for a in menu.actions()]
            for title, menu in window.menus.items()}
def watch(app_module):  # the app's own launch, watched
    from PySide6.QtCore import QEvent, QObject, QTimer
    from PySide6.QtWidgets import QApplication
    out["imported"] = [m for m in HEAVY if m in sys.modules]
    class Paint(QObject):
        def eventFilter(self, obj, event):
            if event.type() == QEvent.Type.Paint and "at_paint" not in out:
                out["at_paint"] = [m for m in HEAVY if m in sys.modules]
                out["open_started_at_paint"] = window.session is not None or startup.painted
                out["ready_at_paint"] = window.is_ready
                out["menu_titles_at_paint"] = [a.text() for a in window.menuBar().actions()]
                out["menus_at_paint"] = menus(window)
                out["window_actions_at_paint"] = len(window.actions())
                out["compile_restored"] = builtins.compile is real_compile
            return False
    real_launch = app_module.launch
    def launch(w, opening, warm=True):
        global window, startup
        window = w
        window.ready.connect(lambda: out.update(ready_after_paint="at_paint" in out,
                                                ready_before_open=window.session is None))
        f = Paint(window); window.installEventFilter(f)
        startup = real_launch(window, opening, warm)
        t = QTimer(window); t.timeout.connect(check); t.start(10)  # timers need the application: made here
        QTimer.singleShot(120_000, QApplication.instance().quit)
        return startup
    app_module.launch = launch
from studio.import_hook import after_import
after_import("studio.app", watch)  # importing studio.app here would load Qt before the command does
def check():
    if window.session is not None and startup.warm_result is not None:
        out["warm"] = sorted(startup.warm_result) if isinstance(startup.warm_result, dict) else repr(startup.warm_result)
        out["at_end"] = [m for m in HEAVY if m in sys.modules]
        out["opened"] = window.session.display_path
        out["ready"] = window.is_ready
        out["menus"] = menus(window)
        out["window_actions"] = sorted(a.objectName() for a in window.actions())
        # The same window built whole, as tests and scripts build it: nothing may differ.
        from studio.main_window import MainWindow
        from PySide6.QtCore import QSettings
        from PySide6.QtWidgets import QApplication
        whole = MainWindow(QSettings(sys.argv[2], QSettings.Format.IniFormat))
        out["whole_menus"] = menus(whole)
        out["whole_window_actions"] = sorted(a.objectName() for a in whole.actions())
        whole.deleteLater()
        print(json.dumps(out), flush=True); window.close(); QApplication.instance().quit()
from studio.cli import main  # the `memory-studio` command, as a user starts it
main(["--db", sys.argv[1]])
""" % (HEAVY,)


def run_python(code: str, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(ROOT), **(env or {})}
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1])  # type: ignore[no-any-return]


def record_reads(store: Any) -> list[tuple[str, Any]]:
    """Every statement the store's engine runs, with its parameters (SQLAlchemy's own event)."""
    seen: list[tuple[str, Any]] = []
    sa.event.listen(store.db.engine, "before_cursor_execute",
                    lambda _c, _cur, statement, params, *_a: seen.append((statement, params)))
    return seen


def offsets(seen: list[tuple[str, Any]]) -> list[int]:
    """The OFFSET of each paged read (SQLite's dialect always binds one after LIMIT: 0 for none)."""
    return [int(params[-1]) for statement, params in seen if "OFFSET ?" in statement]


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What one cold start of ``memory-studio --db <db>`` saw (settings in a temporary folder)."""
    tmp = tmp_path_factory.mktemp("start")
    db = tmp / "start.db"
    seed_small(db)
    folders = {"XDG_CONFIG_HOME": str(tmp / "config"), "XDG_CACHE_HOME": str(tmp / "cache")}
    out = run_python(START, str(db), str(tmp / "whole.ini"), env=folders)
    out["db"] = str(db)
    out["qt_boot_cache"] = [p.name for p in (tmp / "cache" / "memory-studio").glob("shiboken-signature-*.marshal")]
    return out


def test_window_paints_before_the_heavy_modules_load_and_a_worker_loads_them_after(started: dict[str, Any]) -> None:
    out = started
    # memory-studio loaded Qt through studio.qt_boot before importing the app: had anything loaded Qt
    # first, import_qt would have had nothing to do and written no cache.
    assert out["qt_boot_cache"] and out["compile_restored"] is True
    assert out["imported"] == []  # importing the app and its window loads none of them
    assert out["at_paint"] == []  # nor does building and painting the window
    assert out["open_started_at_paint"] is False  # the database opens after the first paint
    assert out["opened"] == out["db"]
    # After the paint: the open and the warm-up loaded the engine; the tokenizer's table and the
    # embedding model stay unloaded until a read needs them.
    assert {"sqlalchemy", "numpy", "duckdb", "jsonschema", "core.memory"} <= set(out["at_end"])
    assert "onnxruntime" not in out["at_end"]
    from studio.app import WARM_MODULES

    assert out["warm"] == sorted(WARM_MODULES)


def test_the_first_paint_shows_the_menu_bar_and_the_menus_items_are_added_right_after(
        started: dict[str, Any]) -> None:
    out = started
    assert out["menu_titles_at_paint"] == ["File", "Edit", "View", "Help"]  # the bar looks the same
    assert out["ready_at_paint"] is False
    assert all(items == [] for items in out["menus_at_paint"].values())
    assert out["window_actions_at_paint"] == 0  # no command, so no shortcut, yet
    assert out["ready"] is True
    assert out["ready_after_paint"] is True and out["ready_before_open"] is True  # between the paint and the open
    # Every menu item, with its shortcut, and every window action (the shortcuts) of a window built whole.
    assert out["menus"] == out["whole_menus"]
    assert out["window_actions"] == out["whole_window_actions"]
    assert ["Open Database…", "Ctrl+O"] in out["menus"]["File"] and ["Command Palette…", "Ctrl+K"] in out["menus"]["View"]
    assert {"view.palette", "app.quit", "file.open"} <= set(out["window_actions"])


def test_a_window_built_to_finish_later_gets_its_commands_once_from_finish_building(
        make_window: Callable[..., Any], qtbot: Any) -> None:
    window = make_window(finish_later=True)
    assert not window.is_ready
    assert window.actions() == [] and all(not menu.actions() for menu in window.menus.values())
    with qtbot.waitSignal(window.ready, timeout=1000):
        window.finish_building()
    assert window.is_ready and window.commands.action("view.palette").shortcut().toString() == "Ctrl+K"
    count = len(window.actions())
    window.finish_building()  # a second call does nothing (registering a command twice would raise)
    assert len(window.actions()) == count
    window.show_palette()
    assert window.command_palette is not None and "Open Database…" in window.command_palette.visible_titles()
    window.command_palette.close()
    unfinished = make_window(finish_later=True)
    unfinished.close()  # closing before the rest was built is fine


def test_a_first_argument_that_is_not_an_option_goes_to_the_engine_as_a_subcommand(
        capsys: pytest.CaptureFixture[str]) -> None:
    from studio.cli import main

    assert main(["nonsense"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'nonsense'" in err and "'threads'" in err  # core.cli lists the real ones
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "Subcommands: prompt, threads," in capsys.readouterr().out  # the app's help still names them


def test_importing_core_and_its_storage_paths_loads_no_sqlalchemy() -> None:
    out = run_python(
        "import json, sys\n"
        "import core, core.storage.paths, core.storage, core.llm, studio.reads, studio.session\n"
        "from core import DatabaseOpenError, MemoryStudioError, __version__\n"
        "from core.storage import CorruptDatabaseError, open_store\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
        .replace("print(json.dumps(", "print(json.dumps({'loaded': ").replace("sys.modules]))", "sys.modules]}))"))
    assert out["loaded"] == []


def test_lazy_names_of_core_resolve_to_the_engine_classes() -> None:
    import core
    from core.memory import Memory
    from core.storage.database import Database
    from core.storage.memory_store import NotFoundError

    assert core.Memory is Memory
    assert all(hasattr(core, name) for name in core.__all__)
    import core.storage

    assert core.storage.Database is Database and core.storage.NotFoundError is NotFoundError
    assert "Memory" in dir(core)


def test_newest_rows_are_a_keyset_read_that_uses_the_thread_index(tmp_path: Path) -> None:
    path = tmp_path / "many.db"
    seed_many(path, "big", 1_250)
    store = open_store(path, read_only=True, create=False)
    seen = record_reads(store)
    total, rows = queries.load_newest(store, "big", 30)
    assert total == 1_250
    assert [r.id for r in rows] == [f"m{i:07d}" for i in range(1_220, 1_250)]  # oldest first
    assert rows == queries.load_page(store, "big", 1_220, 30)  # the same rows as the offset read
    newest, params = next((s, p) for s, p in seen if "DESC" in s)
    assert offsets([(newest, params)]) == [0]  # from the end of the index, nothing skipped
    inner = newest[newest.index("(SELECT") + 1:newest.rindex(")")]
    with store.db.read() as conn:
        plan = " ".join(str(r[-1]) for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {inner}", params).all())
    assert "idx_messages_thread_created_at" in plan and "TEMP B-TREE" not in plan
    page = message_pages.read_newest(store.db, "big", 0)
    assert page.total == 1_250 and page.messages == []
    store.close()


def test_message_model_opens_at_the_newest_rows_and_reads_the_rest_on_scroll(qapp: Any, tmp_path: Path) -> None:
    path = tmp_path / "many.db"
    seed_many(path, "big", 1_030)
    store = open_store(path, read_only=True, create=False)
    seen = record_reads(store)
    runner = QueuedRunner()
    model = MessageListModel(runner, store, page_size=100)
    model.open_thread("big")
    runner.drain()
    assert model.rowCount() == 1_030
    assert offsets(seen) == [0]  # the first rows came from one keyset read, from the end
    first_shown = 1_030 - FIRST_ROWS
    assert model.index(1_029).data(MessageRoles.PREVIEW) == "message number 1029"
    assert model.index(first_shown).data(MessageRoles.PREVIEW) == f"message number {first_shown}"
    # Page 9 (rows 900..999) holds only its end so far: the row before it is fetched, with its page.
    assert model.index(first_shown - 1).data(MessageRoles.ROW) is None
    runner.drain(model)
    assert model.index(first_shown - 1).data(MessageRoles.PREVIEW) == f"message number {first_shown - 1}"
    assert model.index(900).data(MessageRoles.PREVIEW) == "message number 900"
    assert offsets(seen)[1:] == [900]  # scrolling up read page 9 by its position
    assert model.find_loaded(f"m{first_shown:07d}") == first_shown
    store.close()


def test_message_model_opens_a_short_thread_whole(qapp: Any, tmp_path: Path) -> None:
    path = tmp_path / "few.db"
    seed_many(path, "few", 7)
    store = open_store(path, read_only=True, create=False)
    runner = QueuedRunner()
    model = MessageListModel(runner, store, page_size=4)
    model.open_thread("few")
    runner.drain()
    assert model.rowCount() == 7
    assert [model.index(i).data(MessageRoles.ID) for i in range(7)] == [f"m{i:07d}" for i in range(7)]
    assert runner.jobs == [] and not model._wanted
    store.close()


def test_page_cache_holds_the_end_of_a_page_until_the_whole_page_arrives() -> None:
    cache: PageCache[int] = PageCache(page_size=10)
    assert cache.put(3, cache.generation, [36, 37, 38, 39], start=6)
    assert cache.row(36) == 36 and cache.row(39) == 39
    assert cache.row(35) is None
    assert cache.needs(37) is None  # loaded
    assert cache.needs(35) == 3  # before the part it holds: the whole page is wanted
    cache.mark_requested(3)
    assert cache.needs(35) is None  # on its way
    assert cache.find(lambda r: r == 38) == 38
    assert cache.put(3, cache.generation, list(range(30, 40)))
    assert cache.row(30) == 30 and cache.needs(30) is None
