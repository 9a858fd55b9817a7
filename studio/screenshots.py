"""Render every pane on the demo data: ``python -m studio.screenshots docs/screenshots``.

Runs offscreen. The demo database is made by ``core.demo.seed_demo`` (the real engine with scripted
models) in a temporary folder, so the project's own database is never touched.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

WIDTH, HEIGHT = 1440, 900


def _wait(app: Any, cond: Callable[[], bool], timeout: float = 60.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        app.processEvents()
        if cond():
            return True
        time.sleep(0.01)
    return cond()


def _settle(app: Any, seconds: float = 0.4) -> None:
    _wait(app, lambda: False, seconds)


def render(out_dir: Path) -> list[Path]:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QSettings

    from core import DatabaseOpenError, open_store
    from core.demo import seed_demo
    from studio.app import make_app
    from studio.commands import CommandPalette
    from studio.dialogs import DialogPresenter, build_error_box, explain
    from studio.main_window import WORKING_MEMORY, MainWindow
    from studio.models.messages_model import MessageRoles
    from studio.selection import Selection
    from studio.theme import apply_theme

    out_dir.mkdir(parents=True, exist_ok=True)
    app = make_app()
    apply_theme(app, "dark")
    # One folder name on every run: its path shows in the pictures (status bar, error dialog), and a
    # random one changed every picture at each run.
    tmp = Path(tempfile.gettempdir()) / "memory-studio-screenshots"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    db = tmp / "memory.db"
    store = open_store(db)
    seed_demo(store)
    store.close()

    written: list[Path] = []

    def save(widget: Any, name: str) -> None:
        _settle(app)
        path = out_dir / f"{name}.png"
        widget.grab().save(str(path))
        written.append(path)

    window = MainWindow(QSettings(str(tmp / "studio.ini"), QSettings.Format.IniFormat), DialogPresenter())
    window.resize(WIDTH, HEIGHT)
    window.show()
    window.open_database(str(db))
    _wait(app, lambda: window.resources is not None and len(window.resources.thread_rows()) >= 6)
    resources = window.resources  # the one tree of this session, for the whole run
    assert resources is not None
    resources.tree.expandAll()

    # messages: the Chinese travel thread has tool calls and working-memory updates
    resources.set_selection(Selection("li-wei", "liwei-shanghai"))
    model = window.messages_pane.model
    _wait(app, lambda: model.thread_id == "liwei-shanghai" and model.rowCount() > 0
          and model.index(model.rowCount() - 1).data(MessageRoles.LOADED))
    tool_row = next((i for i in range(model.rowCount())
                     if "tool-invocation" in (model.index(i).data(MessageRoles.ROW).kinds or ())), 0)
    window.messages_pane._select_row(tool_row)
    save(window, "main-window")
    save(resources, "resources")
    save(window.messages_pane, "messages")

    # prompt inspector on the same thread
    window.show_tab("prompt")
    prompt = window.panes["prompt"]
    if hasattr(prompt, "assembled"):
        done: list[Any] = []
        prompt.assembled.connect(done.append)
        prompt.set_selection(Selection("li-wei", "liwei-shanghai"))
        _wait(app, lambda: bool(done), 60)
    save(window, "prompt-inspector")

    # working memory: schema mode (li-wei), then template mode (ada)
    window.show_tab("working_memory")
    wm = window.pane(WORKING_MEMORY)
    _wait(app, lambda: wm.snapshot is not None, 30)
    save(window, "working-memory-schema")
    resources.set_selection(Selection("ada", "ada-groceries"))
    _wait(app, lambda: wm.snapshot is not None and wm.snapshot.text is not None and "Ada" in wm.snapshot.text, 30)
    save(window, "working-memory-template")
    _shoot_wm_history(app, window, save)
    _shoot_wm_vnext(app, window, save)
    _shoot_prompt_recall(app, window, save)

    _shoot_traces(app, window, save)
    _shoot_observations(app, window, save)
    _shoot_export(app, window, save)
    _shoot_recall_playground(app, window, save)
    _shoot_chat_playground(app, window, save)
    from studio.screenshots_replay import shoot_replay

    shoot_replay(app, window, save, _wait)

    # full-text search across threads
    window.show_tab("messages")
    resources.filter.setText("peanut")
    resources.search()
    _wait(app, lambda: resources.results.rowCount() > 0)
    save(window, "search")
    resources.filter.clear()

    # command palette
    window.show_palette()
    palette = window.findChild(CommandPalette)
    assert palette is not None
    palette.input.setText("open")
    save(palette, "command-palette")
    palette.close()

    # an error dialog
    box = build_error_box(window, explain(DatabaseOpenError(
        f"{tmp / 'notes.txt'} is not a SQLite/libSQL database (its header does not match). "
        "Open a .db file written by Memory Studio or Mastra."), str(tmp / "notes.txt")))
    box.show()
    save(box, "error-dialog")
    box.close()

    # light theme
    apply_theme(app, "light")
    resources.set_selection(Selection("ada", "ada-weekend"))
    _wait(app, lambda: model.thread_id == "ada-weekend" and model.rowCount() > 0
          and model.index(model.rowCount() - 1).data(MessageRoles.LOADED))
    window.messages_pane._select_row(1)
    save(window, "main-window-light")
    apply_theme(app, "dark")

    from studio.screenshots_edits import shoot_edits

    shoot_edits(app, window, save, _wait)  # last: it edits messages and forgets a resource

    window.close()
    app.processEvents()
    return written


def _shoot_traces(app: Any, window: Any, save: Callable[[Any, str], None]) -> None:
    """The travel thread's latest run, with its LLM span's messages open."""
    from studio.selection import Selection

    window.show_tab("traces")
    pane = window.panes["traces"]
    window.resources.set_selection(Selection("li-wei", "liwei-shanghai"))
    _wait(app, lambda: bool(pane.traces) and pane.traces[0].thread_id == "liwei-shanghai"
          and bool(pane.spans) and pane.spans[0].trace_id == pane.traces[0].trace_id, 30)
    gen = next((r.span.span_id for r in pane.layout_model.rows if r.span.span_type == "model_generation"), None)
    if gen is not None:
        pane.select_span(gen)
    save(window, "traces")
    pane.edit_prices()
    save(pane.price_editor, "model-prices")
    pane.price_editor.reject()


def _shoot_wm_history(app: Any, window: Any, save: Callable[[Any, str], None]) -> None:
    """Ada's working memory: two versions compared (numbered per resource, sizes in tokens)."""
    wm = window.panes["working_memory"]
    wm.tabs.setCurrentIndex(1)
    numbers = [row.number for row in wm.version_model.rows()]
    if len(numbers) >= 2:
        wm.select_versions(numbers[-1], numbers[0])
    save(window, "working-memory-history")
    wm.tabs.setCurrentIndex(0)


def _shoot_wm_vnext(app: Any, window: Any, save: Callable[[Any, str], None]) -> None:
    """The retro thread's working memory, edited by the vNext tool: each version with its update reason."""
    from studio.selection import Selection

    wm = window.panes["working_memory"]
    window.resources.set_selection(Selection("sam", "sam-retro"))
    _wait(app, lambda: "Thursdays" in (getattr(getattr(wm, "snapshot", None), "text", None) or ""), 30)
    wm.tabs.setCurrentIndex(1)
    _wait(app, lambda: len(wm.version_model.rows()) >= 2, 30)
    wm.select_versions(wm.version_model.rows()[0].number)
    save(window, "working-memory-vnext")
    wm.tabs.setCurrentIndex(0)


def _shoot_prompt_recall(app: Any, window: Any, save: Callable[[Any, str], None]) -> None:
    """The inspector with semantic recall on: each recalled message with its own scores."""
    from studio.selection import Selection

    window.show_tab("prompt")
    prompt = window.panes["prompt"]
    window.resources.set_selection(Selection("li-wei", "liwei-shanghai"))
    done: list[Any] = []
    prompt.assembled.connect(done.append)
    prompt.message_edit.setText("Any restaurant tips for Lisbon?")
    prompt.recall_check.setChecked(True)
    _wait(app, lambda: bool(done) and not prompt.busy and prompt.preview is not None
          and prompt.preview.request.options.recall, 60)
    rows = prompt.fragment_model.rows()
    recall = next((i for i, r in enumerate(rows) if r.source == "semantic-recall"), None)
    if recall is not None:
        prompt.fragment_table.selectRow(recall)
    save(window, "prompt-inspector-recall")
    prompt.recall_check.setChecked(False)


def _shoot_observations(app: Any, window: Any, save: Callable[[Any, str], None]) -> None:
    """The stand-up thread's observation log, hints and token bars."""
    from studio.selection import Selection

    window.show_tab("observations")
    pane = window.panes["observations"]
    window.resources.set_selection(Selection("sam", "sam-standup"))
    _wait(app, lambda: bool(pane.view.history) and pane.view.selection.thread_id == "sam-standup", 30)
    save(window, "observations")
    # Background buffering: what the observer buffered, and the activations of the conversation.
    pane.buffer_panel.tabs.setCurrentIndex(1)
    save(window, "observations-buffer")
    pane.buffer_panel.tabs.setCurrentIndex(0)
    # The inspector on the same thread: the activated chunks in the prompt, the buffered one outside it.
    window.show_tab("prompt")
    inspector = window.panes["prompt"]
    _wait(app, lambda: inspector.preview is not None and inspector.preview.request.thread_id == "sam-standup"
          and bool(inspector.preview.notes), 30)
    save(window, "prompt-inspector-buffer")


def _shoot_export(app: Any, window: Any, save: Callable[[Any, str], None]) -> None:
    """File > Export Thread… on the groceries thread, details read, before choosing a file."""
    from studio.selection import Selection

    window.show_tab("messages")
    window.set_selection(Selection("ada", "ada-groceries"))
    dialog = window.transfer.open_export_dialog("thread", "ada-groceries")
    _wait(app, lambda: "message" in dialog.details.text(), 30)
    save(dialog, "export-dialog")
    dialog.reject()


def _shoot_recall_playground(app: Any, window: Any, save: Callable[[Any, str], None]) -> None:
    """Ada's memory searched with a threshold: three lists, the cut rows, and why one message is out."""
    from studio.selection import Selection

    window.resources.set_selection(Selection("ada", "ada-groceries"))
    window.show_tab("recall")
    pane = window.panes["recall"]
    pane.threshold_check.setChecked(True)
    pane.threshold_spin.setValue(0.35)
    pane.query_edit.setText("what is she allergic to?")
    pane.search_now()
    _wait(app, lambda: pane.view is not None and pane.view.request.threshold == 0.35, 60)
    _wait(app, lambda: pane.thread_list.count() > 2, 30)
    pane.thread_list.setCurrentRow(2)
    _wait(app, lambda: pane.explanation is not None, 30)
    save(window, "recall-playground")


def _shoot_chat_playground(app: Any, window: Any, save: Callable[[Any, str], None]) -> None:
    """A turn with the chef agent on the groceries thread, answered by the offline scripted model."""
    window.show_tab("chat")
    pane = window.panes["chat"]
    _wait(app, lambda: pane.context is not None and pane.thread_radio.isChecked(), 30)
    done: list[Any] = []
    pane.turn_finished.connect(done.append)
    pane.input.setPlainText("Can you add coconut milk to the list?")
    pane.send()
    _wait(app, lambda: bool(done), 60)
    _wait(app, lambda: "prompt" in pane.transcript_text() and not pane.busy, 10)
    save(window, "chat-playground")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0] if args else "docs/screenshots")
    for path in render(out):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
