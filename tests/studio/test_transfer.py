"""File > Export Thread…, Export Resource…, Import…: the export dialog (driven without a native file
dialog), exports written by a worker, import with a preview and confirmation, read-only refusal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QMessageBox

from core import open_store
from studio.selection import Selection
from studio.widgets.export_dialog import ExportDialog, ExportRequest

from .conftest import file_state, make_mastra_db


class Chooser:
    """Stands in for the native file dialog: records the call, answers with ``answer``."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.calls: list[tuple[Any, ...]] = []

    def save(self, parent: Any, title: str, start: str, filters: str, on_chosen: Callable[[str], None]) -> None:
        self.calls.append((title, start, filters))
        on_chosen(self.answer)

    def open(self, parent: Any, start: str, on_chosen: Callable[[str], None]) -> None:
        self.calls.append((start,))
        on_chosen(self.answer)


def _wait_open(qtbot: Any, window: Any, threads: int = 1) -> None:
    qtbot.waitUntil(lambda: window.session is not None and window.resources is not None
                    and len(window.resources.thread_rows()) >= threads, timeout=15_000)


def _import_box(qtbot: Any, window: Any, db: Path, threads: int, export: Path) -> QMessageBox:
    """Open ``db`` (``threads`` in its tree), choose File > Import… of ``export``: the box that asks."""
    window.open_database(str(db))
    _wait_open(qtbot, window, threads)
    window.transfer.choose_open_path = Chooser(str(export)).open
    window.commands.run("file.import")
    return _box(qtbot, window, "Import?")


def _box(qtbot: Any, window: Any, title: str) -> QMessageBox:
    qtbot.waitUntil(lambda: any(isinstance(d, QMessageBox) and d.windowTitle() == title
                                for d in window.presenter.open), timeout=15_000)
    return next(d for d in window.presenter.open if isinstance(d, QMessageBox) and d.windowTitle() == title)


def test_export_dialog_format_options_and_path(qtbot: Any, no_leaked_widgets: None, tmp_path: Path) -> None:
    chooser = Chooser(str(tmp_path / "picked.json"))
    dialog = ExportDialog("thread", "t/groceries 1", str(tmp_path), chooser.save)
    qtbot.addWidget(dialog)
    assert dialog.windowTitle() == "Export Thread"
    assert dialog.path_edit.text() == str(tmp_path / "t-groceries-1.json")
    dialog.browse.click()
    assert chooser.calls == [("Export thread as Json", str(tmp_path / "t-groceries-1.json"),
                              "Memory Studio export (*.json);;All files (*)")]
    assert dialog.path_edit.text() == str(tmp_path / "picked.json")
    dialog.markdown_button.click()
    assert dialog.format == "markdown" and dialog.path_edit.text() == str(tmp_path / "picked.md")
    assert not dialog.versions.isEnabled() and not dialog.turns.isEnabled() and dialog.observations.isEnabled()
    dialog.json_button.click()
    assert dialog.path_edit.text() == str(tmp_path / "picked.json") and dialog.versions.isEnabled()
    dialog.observations.setChecked(False)
    with qtbot.waitSignal(dialog.export_requested) as sig:
        dialog.export_button.click()
    request = sig.args[0]
    assert isinstance(request, ExportRequest)
    assert (request.kind, request.id, request.format, request.path) == ("thread", "t/groceries 1", "json",
                                                                         tmp_path / "picked.json")
    assert not request.options.observations and request.options.working_memory_versions
    assert not dialog.export_button.isEnabled()
    dialog.failed("The folder /nope does not exist")
    assert dialog.export_button.isEnabled() and dialog.error.text() == "The folder /nope does not exist"
    dialog.path_edit.clear()
    dialog.export_button.click()
    assert dialog.error.text() == "Choose a file to export to."


def test_export_thread_and_resource_from_the_file_menu(qtbot: Any, make_window: Any, small_db: Path,
                                                       tmp_path: Path) -> None:
    window = make_window()
    window.open_database(str(small_db))
    _wait_open(qtbot, window, 3)
    window.set_selection(Selection())
    assert not window.commands.command("file.export_thread").is_enabled  # nothing selected
    assert not window.commands.command("file.export_resource").is_enabled
    menu_titles = [a.text() for a in window.menus["File"].actions()]
    assert {"Export Thread…", "Export Resource…", "Import…"} <= set(menu_titles)

    window.set_selection(Selection("ada", "t-groceries"))
    assert window.commands.command("file.export_thread").is_enabled
    window.commands.run("file.export_thread")
    dialog = window.transfer.dialog
    assert dialog is not None and dialog.isVisible() and dialog in window.presenter.open
    qtbot.waitUntil(lambda: "3 messages" in dialog.details.text(), timeout=10_000)
    assert "“Weekly groceries”" in dialog.details.text()
    assert dialog.turns.isEnabled()  # this database keeps turn records (migration 0006_turn_records)
    out = tmp_path / "exports" / "groceries.md"
    out.parent.mkdir()
    dialog.markdown_button.click()
    dialog.path_edit.setText(str(out))
    with qtbot.waitSignal(window.transfer.exported, timeout=15_000):
        dialog.export_button.click()
    qtbot.waitUntil(lambda: window.transfer.dialog is None, timeout=5_000)
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# Weekly groceries") and "I am allergic to peanuts" in text
    assert "Exported thread t-groceries" in window.status_text.text()

    window.set_selection(Selection("ada", None))
    assert not window.commands.command("file.export_thread").is_enabled
    window.commands.run("file.export_resource")
    dialog = window.transfer.dialog
    assert dialog.path_edit.text() == str(out.parent / "ada.json")  # the last folder is remembered
    with qtbot.waitSignal(window.transfer.exported, timeout=15_000):
        dialog.export_button.click()
    data = json.loads((out.parent / "ada.json").read_text(encoding="utf-8"))
    assert data["scope"] == {"kind": "resource", "id": "ada"} and len(data["threads"]) == 2


def test_export_error_is_shown_in_the_dialog(qtbot: Any, make_window: Any, small_db: Path, tmp_path: Path) -> None:
    window = make_window()
    window.open_database(str(small_db))
    _wait_open(qtbot, window, 3)
    window.set_selection(Selection("li", "t-trip"))
    window.commands.run("file.export_thread")
    dialog = window.transfer.dialog
    dialog.path_edit.setText(str(tmp_path / "missing-folder" / "x.json"))
    dialog.export_button.click()
    qtbot.waitUntil(lambda: dialog.error.isVisible(), timeout=15_000)
    assert "does not exist" in dialog.error.text() and dialog.export_button.isEnabled()
    dialog.reject()
    qtbot.waitUntil(lambda: not window.presenter.open)


def test_mastra_database_exports_while_read_only_and_is_not_changed(qtbot: Any, make_window: Any,
                                                                    tmp_path: Path) -> None:
    path = tmp_path / "mastra.db"
    make_mastra_db(path)
    before = file_state(path)
    window = make_window()
    window.open_database(str(path))
    _wait_open(qtbot, window)
    assert window.session.read_only
    window.set_selection(Selection("user-42", "mastra-thread"))
    window.commands.run("file.export_resource")
    dialog = window.transfer.dialog
    qtbot.waitUntil(lambda: "message" in dialog.details.text(), timeout=10_000)
    assert not dialog.turns.isEnabled() and not dialog.turns.isChecked()  # a Mastra database keeps no turn records
    out = tmp_path / "user-42.json"
    dialog.path_edit.setText(str(out))
    with qtbot.waitSignal(window.transfer.exported, timeout=15_000):
        dialog.export_button.click()
    assert json.loads(out.read_text())["source"]["kind"] == "mastra"
    assert file_state(path) == before


def test_import_previews_asks_then_imports_and_refreshes_the_tree(qtbot: Any, make_window: Any, small_db: Path,
                                                                  tmp_path: Path) -> None:
    from core.transfer import dumps, export_resource

    with open_store(small_db, read_only=True) as store:
        export = tmp_path / "ada.json"
        export.write_text(dumps(export_resource(store, "ada")), encoding="utf-8")
    target = tmp_path / "target.db"
    seed_small_other(target)
    window = make_window()
    box = _import_box(qtbot, window, target, 1, export)
    assert f"Import resource ada\nfrom {export}\n(exported from" in box.text()  # the path as chosen, as errors name it
    assert box.text().endswith(f"\ninto {target}?")
    whole_lines(box)
    assert "It would write 2 threads, 4 messages" in box.informativeText()
    assert box.checkBox() is None  # no conflicts: nothing to overwrite
    with qtbot.waitSignal(window.transfer.imported, timeout=15_000) as sig:
        box.property("yesButton").click()
    assert sig.args[0].report.written["threads"] == 2
    qtbot.waitUntil(lambda: len(window.resources.thread_rows()) == 3, timeout=15_000)
    assert ("ada", "Weekly groceries", 3) in window.resources.thread_rows()
    assert "Imported: wrote 2 threads, 4 messages" in window.status_text.text()
    done = _box(qtbot, window, "Import finished")  # says what happened to recall
    assert "memory-studio reindex" in done.informativeText()
    done.accept()

    window.commands.run("file.import")  # the same file again: nothing to do, and it says so
    box = _box(qtbot, window, "Nothing to import")
    assert box.text() == f"Everything in the file\n{export}\nis already in the database\n{target}"
    whole_lines(box)  # (a path within the sentence was wrapped at a slash: "in /tmp/" then "s33/…")
    box.accept()


def whole_lines(box: QMessageBox) -> None:
    """Each line of the box's text (a path has one of its own) shows whole on one line: none is wrapped."""
    from PySide6.QtWidgets import QLabel

    label = box.findChild(QLabel, "qt_msgbox_label")
    metrics, lines = label.fontMetrics(), box.text().split("\n")
    for line in lines:
        assert metrics.horizontalAdvance(line) <= label.contentsRect().width(), (line, label.width())
    assert label.heightForWidth(label.width()) <= len(lines) * metrics.lineSpacing() + 2 * label.margin() + 4


def seed_small_other(path: Path) -> None:
    with open_store(path) as store:
        store.memory.create_thread(thread_id="t-other", resource_id="zed", title="Zed's thread")


def test_import_with_conflicts_offers_overwrite(qtbot: Any, make_window: Any, small_db: Path, tmp_path: Path) -> None:
    from core.transfer import dumps, export_thread

    with open_store(small_db, read_only=True) as store:
        data = export_thread(store, "t-party")
    data["threads"][0]["title"] = "Party (edited elsewhere)"
    export = tmp_path / "party.json"
    export.write_text(dumps(data), encoding="utf-8")
    window = make_window()
    box = _import_box(qtbot, window, small_db, 3, export)
    assert "thread t-party: differs here (title)" in box.informativeText()
    assert box.checkBox() is not None and not box.checkBox().isChecked()
    box.checkBox().setChecked(True)
    with qtbot.waitSignal(window.transfer.imported, timeout=15_000) as sig:
        box.property("yesButton").click()
    assert sig.args[0].report.conflicts[0].overwritten
    qtbot.waitUntil(lambda: ("ada", "Party (edited elsewhere)", 1) in window.resources.thread_rows(), timeout=15_000)
    _box(qtbot, window, "Import finished").accept()


def test_import_into_a_read_only_database_says_to_allow_writes(qtbot: Any, make_window: Any, tmp_path: Path) -> None:
    path = tmp_path / "mastra.db"
    make_mastra_db(path)
    before = file_state(path)
    window = make_window()
    window.open_database(str(path))
    _wait_open(qtbot, window)
    chooser = Chooser(str(tmp_path / "whatever.json"))
    window.transfer.choose_open_path = chooser.open
    window.commands.run("file.import")
    box = _box(qtbot, window, "Read-only database")
    assert "Allow Writes" in box.informativeText() and chooser.calls == []  # refused before picking a file
    box.accept()
    assert file_state(path) == before


def test_a_bad_file_is_refused_with_a_clear_message(qtbot: Any, make_window: Any, small_db: Path,
                                                    tmp_path: Path) -> None:
    bad = tmp_path / "notes.json"
    bad.write_text('{"format": "something-else"}', encoding="utf-8")
    window = make_window()
    window.open_database(str(small_db))
    _wait_open(qtbot, window, 3)
    window.transfer.choose_open_path = Chooser(str(bad)).open
    window.commands.run("file.import")
    box = _box(qtbot, window, "Cannot import")
    assert "not a Memory Studio export" in box.text() and "Nothing was written" in box.informativeText()
    box.accept()


def test_default_file_choosers_are_tracked_and_answer(qtbot: Any, make_window: Any, small_db: Path,
                                                      tmp_path: Path) -> None:
    from PySide6.QtWidgets import QFileDialog

    window = make_window()
    window.open_database(str(small_db))
    _wait_open(qtbot, window, 3)
    chosen: list[str] = []
    window.transfer.choose_open_path(window, str(tmp_path), chosen.append)
    window.transfer.choose_save_path(window, "Export", str(tmp_path / "x.json"), "JSON (*.json)", chosen.append)
    dialogs = [d for d in window.presenter.open if isinstance(d, QFileDialog)]
    assert [d.objectName() for d in dialogs] == ["importFileDialog", "exportFileDialog"]
    assert dialogs[1].acceptMode() == QFileDialog.AcceptMode.AcceptSave
    dialogs[0].fileSelected.emit(str(tmp_path / "a.json"))
    assert chosen == [str(tmp_path / "a.json")]
    for d in dialogs:
        d.reject()
    qtbot.waitUntil(lambda: not window.presenter.open)


def test_export_to_an_existing_file_asks_before_replacing_it(qtbot: Any, make_window: Any, small_db: Path,
                                                             tmp_path: Path) -> None:
    """A typed (or default) path that names an existing file is not overwritten silently: the dialog
    says so and a second click (Replace) replaces it; a path picked in the file chooser (which asks
    itself) is replaced at once."""
    window = make_window()
    window.open_database(str(small_db))
    _wait_open(qtbot, window, 3)
    window.set_selection(Selection("ada", "t-groceries"))
    earlier = tmp_path / "groceries.json"
    earlier.write_text("an earlier export", encoding="utf-8")
    window.commands.run("file.export_thread")
    dialog = window.transfer.dialog
    dialog.path_edit.setText(str(earlier))
    dialog.export_button.click()
    qtbot.waitUntil(lambda: dialog.error.isVisible(), timeout=15_000)
    assert dialog.error.text() == f"{earlier} already exists. Click Replace to overwrite it, or choose another file name."
    assert dialog.export_button.text() == "Replace" and dialog.export_button.isEnabled()
    assert earlier.read_text(encoding="utf-8") == "an earlier export"
    dialog.path_edit.setText(str(tmp_path / "other.json"))  # another file: the question was about the first
    assert dialog.export_button.text() == "Export" and not dialog.error.isVisible()
    dialog.path_edit.setText(str(earlier))
    with qtbot.waitSignal(window.transfer.exported, timeout=15_000):
        dialog.export_button.click()
    assert json.loads(earlier.read_text(encoding="utf-8"))["scope"] == {"kind": "thread", "id": "t-groceries"}

    earlier.write_text("an earlier export", encoding="utf-8")
    window.transfer.choose_save_path = Chooser(str(earlier)).save
    window.commands.run("file.export_thread")
    dialog = window.transfer.dialog
    dialog.browse.click()
    with qtbot.waitSignal(window.transfer.exported, timeout=15_000):
        dialog.export_button.click()
    assert json.loads(earlier.read_text(encoding="utf-8"))["scope"] == {"kind": "thread", "id": "t-groceries"}


def test_export_into_a_path_through_a_file_names_the_users_path(qtbot: Any, make_window: Any, small_db: Path,
                                                               tmp_path: Path) -> None:
    """The system's error names a temporary file the user never typed: the dialog names theirs and what to do."""
    window = make_window()
    window.open_database(str(small_db))
    _wait_open(qtbot, window, 3)
    window.set_selection(Selection("ada", "t-groceries"))
    (tmp_path / "notes").write_text("a file, not a folder", encoding="utf-8")
    target = tmp_path / "notes" / "groceries.json"
    window.commands.run("file.export_thread")
    dialog = window.transfer.dialog
    dialog.path_edit.setText(str(target))
    dialog.export_button.click()
    qtbot.waitUntil(lambda: dialog.error.isVisible(), timeout=15_000)
    assert dialog.error.text() == (f"Cannot write {target}: {tmp_path / 'notes'} is a file, not a folder. "
                                   "Choose another folder.")
    assert ".tmp" not in dialog.error.text() and dialog.export_button.isEnabled()
    dialog.reject()
    qtbot.waitUntil(lambda: not window.presenter.open)


def test_an_import_goes_into_the_database_it_was_previewed_on_or_nowhere(qtbot: Any, make_window: Any,
                                                                       small_db: Path, tmp_path: Path) -> None:
    """Another database opened while the import's confirmation was up (an open started before Import…):
    its Import button imported the first database's preview into the new database. Now the confirmation
    closes, a dialog says nothing was imported, and neither database changes."""
    from core.transfer import dumps, export_resource

    with open_store(small_db, read_only=True) as store:
        export = tmp_path / "ada.json"
        export.write_text(dumps(export_resource(store, "ada")), encoding="utf-8")
    first, second = tmp_path / "first.db", tmp_path / "second.db"
    seed_small_other(first)
    seed_small_other(second)
    window = make_window()
    box = _import_box(qtbot, window, first, 1, export)
    assert "into " + str(first) in box.text()
    window.open_database(str(second))  # the open the user started before choosing Import… ends now
    qtbot.waitUntil(lambda: window.session is not None and window.session.display_path == str(second),
                    timeout=15_000)
    refused = _box(qtbot, window, "Not imported")
    assert box not in window.presenter.open  # the confirmation is gone: its button would import here
    assert str(first) in refused.text() and "nothing was imported" in refused.text()
    assert "File > Import… again" in refused.informativeText() and str(second) in refused.informativeText()
    refused.accept()
    for path in (first, second):
        with open_store(path, read_only=True) as store:
            assert [t.id for t in store.memory.list_threads(resource_id="ada")] == []


def test_an_export_dialog_closes_when_another_database_opens(qtbot: Any, make_window: Any, small_db: Path,
                                                            tmp_path: Path) -> None:
    """The export dialog describes a thread of the database it was opened on; with another database opened
    meanwhile (a copy holds the same thread) its Export button exported the new database's thread."""
    from .conftest import another_program

    copy = tmp_path / "copy.db"
    another_program(small_db, f"VACUUM INTO '{copy}'")
    window = make_window()
    window.open_database(str(small_db))
    _wait_open(qtbot, window, 3)
    window.set_selection(Selection("ada", "t-groceries"))
    window.commands.run("file.export_thread")
    dialog = window.transfer.dialog
    assert dialog is not None and dialog.isVisible()
    out = tmp_path / "out.json"
    dialog.path_edit.setText(str(out))
    window.open_database(str(copy))  # an open started before File > Export Thread… ends now
    qtbot.waitUntil(lambda: window.session is not None and window.session.display_path == str(copy), timeout=15_000)
    qtbot.waitUntil(lambda: window.transfer.dialog is None, timeout=5_000)  # closed with its database
    assert not out.exists()


def test_an_import_takes_the_files_memory_overrides_only_when_asked(qtbot: Any, make_window: Any, small_db: Path,
                                                                  tmp_path: Path) -> None:
    """A file's memory override sets the working-memory template every user of that memory gets: the import
    box offers it as a choice, unticked, beside the overwrite choice when there is one too."""
    from core.agent_configs import latest_override
    from core.transfer import dumps, export_thread
    from studio.transfer import CONFIGS_CHOICE

    with open_store(small_db, read_only=True) as store:
        data = export_thread(store, "t-party")
    data["configs"] = [{"id": 7, "name": "default", "template": "# From elsewhere\n- Secret:\n", "schema": None,
                        "author": "someone else", "createdAt": "2026-01-01T00:00:00.000Z"}]
    data["threads"][0]["title"] = "Party (edited elsewhere)"  # (a conflict where the thread is: see the end)
    export = tmp_path / "party.json"
    export.write_text(dumps(data), encoding="utf-8")
    target = tmp_path / "target.db"
    seed_small_other(target)
    window = make_window()
    box = _import_box(qtbot, window, target, 1, export)
    configs = box.findChild(QCheckBox, "importConfigs")
    assert configs is not None and configs.text() == CONFIGS_CHOICE and not configs.isChecked()
    with qtbot.waitSignal(window.transfer.imported, timeout=15_000) as sig:
        box.property("yesButton").click()
    assert sig.args[0].report.written.get("configs", 0) == 0
    assert any("--with-configs" in n for n in sig.args[0].report.notes)
    _box(qtbot, window, "Import finished").accept()
    with open_store(target, read_only=True) as store:
        assert latest_override(store, "default") is None

    window.commands.run("file.import")  # again, ticked this time
    box = _box(qtbot, window, "Import?")
    box.findChild(QCheckBox, "importConfigs").setChecked(True)
    with qtbot.waitSignal(window.transfer.imported, timeout=15_000) as sig:
        box.property("yesButton").click()
    assert sig.args[0].report.written.get("configs", 0) >= 1
    _box(qtbot, window, "Import finished").accept()
    with open_store(target, read_only=True) as store:
        assert latest_override(store, "default").template == "# From elsewhere\n- Secret:\n"  # type: ignore[union-attr]

    # Where the file conflicts too, both choices are offered, each unticked.
    box = _import_box(qtbot, window, small_db, 3, export)
    assert box.checkBox() is not None and not box.checkBox().isChecked()  # overwrite
    configs = box.findChild(QCheckBox, "importConfigs")
    assert configs is not None and configs is not box.checkBox() and not configs.isChecked()
    qtbot.waitUntil(configs.isVisible, timeout=5_000)
    box.reject()


def test_the_status_bar_follows_the_import_in_hand_not_the_one_before(qtbot: Any, make_window: Any, small_db: Path,
                                                                       tmp_path: Path) -> None:
    """A refused file, then a file whose rows are all here already: the dialog said "Nothing to import"
    while the status bar still said "Import failed" (and kept saying it after a cancelled import)."""
    from core.transfer import dumps, export_resource

    bad = tmp_path / "notes.json"
    bad.write_text('{"format": "something-else"}', encoding="utf-8")
    with open_store(small_db, read_only=True) as store:
        same = tmp_path / "ada.json"
        same.write_text(dumps(export_resource(store, "ada")), encoding="utf-8")
    window = make_window()
    window.open_database(str(small_db))
    _wait_open(qtbot, window, 3)
    window.transfer.choose_open_path = Chooser(str(bad)).open
    window.commands.run("file.import")
    _box(qtbot, window, "Cannot import").accept()
    assert window.status_text.text() == "Import failed"

    window.transfer.choose_open_path = Chooser(str(same)).open
    window.commands.run("file.import")
    _box(qtbot, window, "Nothing to import").accept()
    assert "failed" not in window.status_text.text()
    assert "Nothing to import" in window.status_text.text() and "ada.json" in window.status_text.text()

    window.transfer.choose_open_path = Chooser(str(bad)).open  # failed again, then a file that would write
    window.commands.run("file.import")
    _box(qtbot, window, "Cannot import").accept()
    data = json.loads(same.read_text(encoding="utf-8"))
    data["threads"][0]["title"] = "Edited elsewhere"
    export = tmp_path / "ada-elsewhere.json"
    export.write_text(json.dumps(data), encoding="utf-8")
    window.transfer.choose_open_path = Chooser(str(export)).open
    window.commands.run("file.import")
    box = _box(qtbot, window, "Import?")
    assert "failed" not in window.status_text.text()
    box.reject()  # cancelled: nothing was written, and the status bar does not say it failed
    qtbot.waitUntil(lambda: not box.isVisible(), timeout=15_000)
    assert "failed" not in window.status_text.text()


def test_a_file_refused_in_the_preview_is_named_as_chosen_in_plain_text_and_nothing_changes(
        qtbot: Any, make_window: Any, small_db: Path, tmp_path: Path) -> None:
    """Errors about the file named it two ways: the reading's by its path, the import's own checks as "the file"
    (a thread of another resource, an id no client could create) and the Studio's status and boxes by its bare
    name (session 22). Now by the path as chosen, everywhere, as plain text (a folder may be named like markup)."""
    import hashlib

    from core.transfer import dumps, export_resource

    folder = tmp_path / "<i>exports"
    folder.mkdir()
    with open_store(small_db, read_only=True) as store:
        data = export_resource(store, "ada")
    data["threads"].append({"id": "t-planted", "resourceId": "bob", "title": "", "metadata": None,
                            "createdAt": "2026-03-01T09:00:00.000Z", "updatedAt": "2026-03-01T09:00:00.000Z"})
    planted = folder / "ada.json"
    planted.write_text(dumps(data), encoding="utf-8")
    target = tmp_path / "target.db"
    seed_small_other(target)
    window = make_window()
    window.open_database(str(target))
    _wait_open(qtbot, window, 1)

    def fingerprint() -> tuple[str | None, ...]:
        return tuple(hashlib.sha256(p.read_bytes()).hexdigest() if p.exists() else None
                     for p in (target, target.with_name(target.name + "-wal")))

    before = fingerprint()
    window.transfer.choose_open_path = Chooser(str(planted)).open
    window.commands.run("file.import")
    assert window.status_text.text() == f"Checking {planted}: nothing is written yet…"  # (the worker reads the file)
    box = _box(qtbot, window, "Cannot import")
    assert box.textFormat() == Qt.TextFormat.PlainText
    assert box.text().startswith(f"{planted}: threads[")
    assert "belongs to resource 'bob'" in box.text() and "the file:" not in box.text()
    assert box.informativeText() == f"Nothing was written to {window.session.display_path}."
    assert window.status_text.text() == "Import failed"
    box.accept()
    # a file the reading refuses: named the same way
    cut = folder / "cut.json"
    cut.write_text(dumps(export_resource_of(small_db))[:400], encoding="utf-8")
    window.transfer.choose_open_path = Chooser(str(cut)).open
    window.commands.run("file.import")
    box = _box(qtbot, window, "Cannot import")
    assert box.text().startswith(f"{cut} ends before its JSON does")
    box.accept()
    assert fingerprint() == before


def export_resource_of(db: Path) -> dict[str, Any]:
    from core.transfer import export_resource

    with open_store(db, read_only=True) as store:
        return export_resource(store, "ada")


def test_the_export_dialog_shows_a_title_and_an_error_as_written_never_as_markup(
        qtbot: Any, no_leaked_widgets: None, tmp_path: Path) -> None:
    dialog = ExportDialog("thread", "t-1", str(tmp_path), Chooser(str(tmp_path / "x.json")).save)
    qtbot.addWidget(dialog)
    dialog.set_details("“<b>Plans</b> <img src='x'>” · resource ada · 2 messages")
    dialog.failed(f"Cannot write {tmp_path}/<i>out/x.json: the folder <i>out does not exist; create it.")
    # a label in Qt's automatic format draws text that looks like markup as markup: the tags would vanish
    assert dialog.details.textFormat() == Qt.TextFormat.PlainText
    assert dialog.error.textFormat() == Qt.TextFormat.PlainText


def test_a_files_source_of_any_shape_is_shown_or_left_out_never_breaks_the_confirmation(
        qtbot: Any, make_window: Any, small_db: Path, tmp_path: Path) -> None:
    """``source`` is not checked (nothing is written from it); the confirmation read ``source["database"]`` of it,
    so a file whose ``source`` was a string raised in the UI thread and the import never asked (session 22)."""
    from core.transfer import dumps

    data = export_resource_of(small_db)
    target = tmp_path / "target.db"
    seed_small_other(target)
    window = make_window()
    window.open_database(str(target))
    _wait_open(qtbot, window, 1)
    for source, says in (("laptop", "\nfrom {path}\ninto "), ({"database": "a\x1b[2Jb"}, "\n(exported from a\\x1b[2Jb)\n")):
        export = tmp_path / "ada.json"
        export.write_text(dumps({**data, "source": source}), encoding="utf-8")
        window.transfer.choose_open_path = Chooser(str(export)).open
        window.commands.run("file.import")
        box = _box(qtbot, window, "Import?")
        assert says.format(path=export) in box.text()
        box.reject()
        qtbot.waitUntil(lambda: not box.isVisible(), timeout=15_000)
