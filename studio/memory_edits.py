"""Edit > Edit Message…, Delete Message…, Message History…, Undo / Redo Memory Edit, Delete Thread…,
Forget Resource…, Index Recall for Resource….

Every edit is explicit and confirmed: the edit dialog's Save Edit, a confirmation box for a delete (a
message's, a thread's),
Forget's summary with a tick box. The work runs on a session worker (``studio.edit_jobs``); the dialog
stays open with the user's text when the engine refuses (a message changed meanwhile, a read-only
file). Each edit goes on the window's undo stack (``studio.logic.edit_history``): Undo Memory Edit
asks the engine to revert the target's newest change, and a refused undo leaves the stack as it was.
When the selected thread disappears (forgotten here, deleted by another program) every pane is told
to show nothing of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import shiboken6
from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QDialog

from studio.commands import CommandRegistry
from studio.dialogs import Problem, explain
from studio.logic.edit_history import EditHistory, EditRecord
from studio.logic.short_ids import short_id
from studio.logic.thread_labels import shown_title
from studio.selection import Selection

# The jobs and the dialogs load the engine (SQLAlchemy): the jobs are imported by the worker that
# first runs one (``_jobs()``), the dialogs when one opens; the window's first paint waits for neither.
if TYPE_CHECKING:  # pragma: no cover
    from core.edits.forget import ForgetReport
    from studio import edit_jobs
    from studio.main_window import MainWindow
    from studio.widgets.forget_dialog import ForgetDialog
    from studio.widgets.message_edit_dialog import MessageEditDialog, MessageHistoryDialog


def _jobs() -> Any:
    """``studio.edit_jobs``, imported when a job first runs (on its worker)."""
    from studio import edit_jobs

    return edit_jobs


def read_only_problem(advice: str) -> Problem:
    """The refusal of an edit of a read-only database; ``advice`` is the session's ``write_advice``."""
    return Problem("Read-only", "This database is open read-only, so nothing in it can be changed.",
                   f"{advice} Nothing was changed.", warning_only=True)


READ_ONLY = read_only_problem("Choose File > Allow Writes… first.")


class MemoryEditActions(QObject):
    edited = Signal(object)  # EditRecord of an edit just made
    reverted = Signal(str)  # one line: what an undo / redo did
    forgotten = Signal(object)  # ForgetReport
    thread_deleted = Signal(object)  # edit_jobs.ThreadTarget of the thread just deleted
    indexed = Signal(object)  # core.recall.reindex.ReindexReport of Index Recall for Resource…

    def __init__(self, window: "MainWindow") -> None:
        super().__init__(window)
        self.window = window
        self.history = EditHistory()
        self.dialog: QDialog | None = None
        self._busy = False
        self._indexing = False
        # The database the undo stack's edits were made in (its target): another database opened clears the
        # stack, so Undo never reverts a message of the same id there (a copy of the file holds them all).
        self._target: str | None = None
        window.session_opened.connect(self._session_opened)

    # -- commands ----------------------------------------------------------------------------------
    def register(self, registry: CommandRegistry) -> None:
        w = self.window

        def writable() -> bool:
            return w.session is not None and not w.session.read_only

        def message() -> bool:
            return w.session is not None and w.selection.message_id is not None

        registry.add("edit.undo", "Undo Memory Edit", self.undo, shortcut="Ctrl+Alt+Z", menu="Edit", group="undo",
                     enabled=lambda: writable() and self.history.next_undo is not None and not self._busy,
                     keywords="revert message observation")
        registry.add("edit.redo", "Redo Memory Edit", self.redo, shortcut="Ctrl+Alt+Shift+Z", menu="Edit",
                     group="undo", enabled=lambda: writable() and self.history.next_redo is not None and not self._busy)
        registry.add("message.edit", "Edit Message…", lambda: self.edit_message(), shortcut="F2", menu="Edit",
                     group="message", enabled=message, keywords="change fix correct text stored message")
        registry.add("message.delete", "Delete Message…", lambda: self.delete_message(), menu="Edit", group="message",
                     enabled=message, keywords="remove stored message")
        registry.add("message.history", "Message History…", lambda: self.show_history(), menu="Edit",
                     group="message", enabled=message, keywords="versions changes who when before after")
        registry.add("thread.delete", "Delete Thread…", lambda: self.delete_thread(), menu="Edit", group="forget",
                     enabled=lambda: w.session is not None and w.selection.thread_id is not None,
                     keywords="remove conversation chat thread and its messages")
        registry.add("resource.index", "Index Recall for Resource…", lambda: self.index_resource(), menu="Edit",
                     group="recall", enabled=lambda: w.session is not None and w.selection.resource_id is not None
                     and not self._indexing, keywords="reindex embed vectors keyword semantic recall catch up")
        registry.add("resource.forget", "Forget Resource…", lambda: self.forget_resource(), menu="Edit",
                     group="forget", enabled=lambda: w.session is not None and w.selection.resource_id is not None,
                     keywords="erase delete user gdpr data subject request privacy")

    def _session(self) -> Any:
        return self.window.session

    def _writable(self) -> bool:
        session = self._session()
        if session is None:
            return False
        if session.read_only:
            self.window.presenter.error(self.window, read_only_problem(session.write_advice))
            return False
        return True

    def _factory(self) -> Callable[..., Any]:
        session = self._session()
        return lambda options, name: session.memory(options, name=name)

    def _status(self, text: str) -> None:
        self.window.show_status(text)

    def _session_opened(self, session: Any) -> None:
        if session.target == self._target:
            return  # the same database again (File > Reload, Allow Writes): its edits can still be undone
        self._target = session.target
        self.history.clear()
        dialog, self.dialog = self.dialog, None
        if dialog is not None and shiboken6.isValid(dialog) and dialog.isVisible():
            dialog.reject()  # an edit or history dialog of a message of the database closed
        self.window.commands.refresh_enabled()

    def _same_database(self, session: Any) -> bool:
        """Whether ``session`` (where a dialog's message was read) is still the open database; if not,
        say that nothing was changed."""
        current = self._session()
        if session is not None and current is not None and current.target == session.target:
            return True  # (the same database reopened, File > Reload, is still it)
        self.window.presenter.error(self.window, Problem(
            "Not changed", f"{session.display_path if session is not None else 'The database'} is no longer the "
            "open database, so nothing was changed there or here.",
            "Select what to change in the open database and try again."))
        return False

    def _problem(self, exc: BaseException) -> None:
        self.window.presenter.error(self.window, explain(exc, self._session().display_path if self._session() else None))

    # -- messages ------------------------------------------------------------------------------------
    def _with_target(self, message_id: str | None, then: Callable[[edit_jobs.MessageTarget], None]) -> None:
        session = self._session()
        message_id = message_id or self.window.selection.message_id
        if session is None or not message_id:
            return
        store = session.store
        session.run(lambda: _jobs().load_message(store, message_id), on_result=then,
                    on_error=self._problem, key="memory-edit-load")

    def edit_message(self, message_id: str | None = None) -> None:
        """Open the edit dialog for a stored message (default: the selected one)."""
        if self._writable():
            self._with_target(message_id, self._open_edit)

    def _open_edit(self, target: edit_jobs.MessageTarget) -> None:
        from studio.widgets.message_edit_dialog import MessageEditDialog

        dialog = MessageEditDialog(target, self.window)
        session = self._session()
        dialog.save_requested.connect(lambda text, content: self._save(dialog, target, text, content, session))
        self.dialog = dialog
        self.window.presenter.show(dialog)

    def _save(self, dialog: MessageEditDialog, target: edit_jobs.MessageTarget, text: Any, content: Any,
              session: Any) -> None:
        if not self._same_database(session):
            return
        store, factory = session.store, self._factory()

        def done(outcome: edit_jobs.EditOutcome) -> None:
            if shiboken6.isValid(dialog):
                dialog.accept()
            if outcome.record is None:
                self._status("Nothing changed: the message already says that.")
                return
            self._pushed(outcome.record, outcome.note)

        def failed(exc: BaseException) -> None:
            if shiboken6.isValid(dialog):
                dialog.show_error(f"{exc}")

        session.run(lambda: _jobs().edit_message(store, factory, target, text=text, content=content),
                    on_result=done, on_error=failed)

    def _pushed(self, record: EditRecord, note: str = "") -> None:
        self.history.push(record)
        session = self._session()
        self._target = session.target if session is not None else self._target
        if session is not None:
            session.notify_local_write()
        self.window.commands.refresh_enabled()
        self._status(f"Saved the {record.label}: Edit > Undo Memory Edit (Ctrl+Alt+Z) reverts it."
                     + (f" Note: {note}." if note else ""))
        self.edited.emit(record)

    def delete_message(self, message_id: str | None = None) -> None:
        if self._writable():
            self._with_target(message_id, self._confirm_delete)

    def _confirm_delete(self, target: edit_jobs.MessageTarget) -> None:
        preview = " ".join(target.message.text.split())
        preview = preview if len(preview) <= 160 else preview[:159] + "…"
        session = self._session()  # the database the message was read from
        self.window.presenter.confirm(
            self.window, "Delete this message?",
            f"Delete the {target.message.role} message “{preview or '(no text)'}” from thread "
            f"{shown_title(target.thread_id)}?",
            "Its recall vector and keyword doc go with it, and the next message's passage is rebuilt. Turns that "
            "ran before keep what their model saw. Edit > Undo Memory Edit brings it back.",
            "Delete", lambda: self._delete(target, session))

    def _delete(self, target: edit_jobs.MessageTarget, session: Any) -> None:
        if not self._same_database(session):
            return
        store, factory = session.store, self._factory()

        def done(outcome: edit_jobs.EditOutcome) -> None:
            sel = self.window.selection
            if sel.message_id == target.message.id:
                self.window.set_selection(Selection(sel.resource_id, sel.thread_id))
            assert outcome.record is not None
            self._pushed(outcome.record, outcome.note)

        session.run(lambda: _jobs().delete_message(store, factory, target), on_result=done, on_error=self._problem)

    def show_history(self, message_id: str | None = None) -> None:
        self._with_target(message_id, self._open_history)

    def _open_history(self, target: edit_jobs.MessageTarget) -> None:
        from studio.widgets.message_edit_dialog import MessageHistoryDialog

        dialog = MessageHistoryDialog(target, self.window)
        record = EditRecord("message", target.message.id, target.resource_id, target.thread_id,
                            f"change of message {short_id(target.message.id)}")
        session = self._session()
        dialog.undo_requested.connect(lambda: self._undo_from_history(dialog, record, session))
        self.dialog = dialog
        self.window.presenter.show(dialog)

    def _undo_from_history(self, dialog: MessageHistoryDialog, record: EditRecord, session: Any) -> None:
        if not self._writable() or not self._same_database(session):
            return

        def refresh(_line: str) -> None:
            newest = self.history.next_undo
            if newest is not None and newest.kind == record.kind and newest.target_id == record.target_id:
                self.history.did_undo(newest)  # the window's Undo must not revert it a second time
            session = self._session()
            if session is None or not shiboken6.isValid(dialog):
                return
            store = session.store
            session.run(lambda: _jobs().message_history(store, record.target_id, record.thread_id or "",
                                                          record.resource_id),
                        on_result=lambda versions: dialog.set_versions(versions) if shiboken6.isValid(dialog) else None)

        self._revert(record, refresh)

    # -- undo / redo -----------------------------------------------------------------------------------
    def undo(self) -> None:
        record = self.history.next_undo
        if record is not None and self._writable():
            self._revert(record, lambda _line: self.history.did_undo(record), verb="Undid")

    def redo(self) -> None:
        record = self.history.next_redo
        if record is not None and self._writable():
            self._revert(record, lambda _line: self.history.did_redo(record), verb="Redid")

    def _revert(self, record: EditRecord, after: Callable[[str], None], verb: str = "Undid") -> None:
        session = self._session()
        store, factory = session.store, self._factory()
        self._busy = True

        def done(line: str) -> None:
            self._busy = False
            after(line)
            session.notify_local_write()
            self.window.commands.refresh_enabled()
            self._status(f"{verb} the {record.label}: {line}.")
            self.reverted.emit(line)

        def failed(exc: BaseException) -> None:
            self._busy = False
            self.window.commands.refresh_enabled()
            self._problem(exc)

        session.run(lambda: _jobs().revert(store, factory, record), on_result=done, on_error=failed)

    # -- observations (the observations pane asks) -------------------------------------------------------
    def change_observation(self, record_id: str, thread_id: str | None, resource_id: str, old: str,
                           new: str | None, on_done: Callable[[], None] | None = None) -> None:
        """Edit (``new``) or delete (``new`` None) one observation line, then refresh the panes."""
        if not self._writable():
            return
        session = self._session()
        store, factory = session.store, self._factory()

        def done(outcome: edit_jobs.EditOutcome) -> None:
            assert outcome.record is not None
            self._pushed(outcome.record)
            if on_done is not None:
                on_done()

        session.run(lambda: _jobs().edit_observation(store, factory, record_id, thread_id, resource_id, old, new),
                    on_result=done, on_error=self._problem)

    # -- delete a thread -------------------------------------------------------------------------------
    def delete_thread(self, thread_id: str | None = None) -> None:
        session = self._session()
        thread_id = thread_id or self.window.selection.thread_id
        if session is None or not thread_id or not self._writable():
            return
        store = session.store
        session.run(lambda: _jobs().load_thread(store, thread_id), on_result=self._confirm_delete_thread,
                    on_error=self._problem)

    def _confirm_delete_thread(self, target: edit_jobs.ThreadTarget) -> None:
        session = self._session()  # the database the thread was read from
        named = (f"“{shown_title(target.title)}” ({shown_title(target.thread_id)})" if target.title
                 else shown_title(target.thread_id))
        self.window.presenter.confirm(
            self.window, "Delete this thread?",
            f"Delete thread {named} of resource {shown_title(target.resource_id)} with its {target.messages:,} "
            "message(s)?",
            "Its messages, their edit history, its turn records, its own working memory and observations and its "
            "recall vectors go with it; the resource's other threads, its resource-scoped memory and the traces of "
            "the thread's runs stay (Forget Resource… removes those too). This cannot be undone (File > Export "
            "Thread… keeps a copy first).",
            "Delete Thread", lambda: self._delete_thread(target, session))

    def _delete_thread(self, target: edit_jobs.ThreadTarget, previewed: Any) -> None:
        if not self._same_database(previewed):
            return
        session = self._session()
        store, factory = session.store, self._factory()

        def done(deleted: edit_jobs.ThreadTarget) -> None:
            self.history.forget_thread(deleted.thread_id)
            if self.window.selection.thread_id == deleted.thread_id:
                self.window.select_thread(Selection(deleted.resource_id, None))
            session.notify_local_write()
            self.window.commands.refresh_enabled()
            self._status(f"Deleted thread {shown_title(deleted.thread_id)} and its {deleted.messages:,} message(s).")
            self.thread_deleted.emit(deleted)

        session.run(lambda: _jobs().delete_thread(store, factory, target), on_result=done, on_error=self._problem)

    # -- forget ------------------------------------------------------------------------------------------
    def forget_resource(self, resource_id: str | None = None) -> None:
        session = self._session()
        resource_id = resource_id or self.window.selection.resource_id
        if session is None or not resource_id or not self._writable():
            return
        store = session.store
        self._status(f"Counting what is stored about {shown_title(resource_id)}…")
        session.run(lambda: _jobs().preview_forget(store, resource_id), on_result=self._open_forget,
                    on_error=self._problem)

    def _open_forget(self, preview: ForgetReport) -> None:
        session = self._session()
        if session is None:
            return
        if not preview.found:
            self._status(f"Nothing is stored about resource {shown_title(preview.resource_id)}.")
            return
        from studio.widgets.forget_dialog import ForgetDialog

        dialog = ForgetDialog(preview, session.display_path, self.window)
        dialog.forget_requested.connect(lambda: self._forget(dialog, preview.resource_id, session))
        dialog.vacuum_requested.connect(lambda: self._vacuum(dialog))
        self.dialog = dialog
        self.window.presenter.show(dialog)

    def _forget(self, dialog: ForgetDialog, resource_id: str, previewed: Any) -> None:
        """Forget in the database the summary was counted in (never another one opened since)."""
        if not self._same_database(previewed):
            return
        session = self._session()
        store = session.store

        def done(report: ForgetReport) -> None:
            self.history.forget(resource_id)
            for rid in report.resources:
                self.history.forget(rid)
            if self.window.selection.resource_id in report.resources:
                self.window.select_thread(Selection())
            session.notify_local_write()
            self.window.commands.refresh_enabled()
            self._status(f"Forgot resource {shown_title(resource_id)}: {report.total:,} row(s) removed.")
            if shiboken6.isValid(dialog):
                dialog.show_done(report)
            self.forgotten.emit(report)

        session.run(lambda: _jobs().forget(store, resource_id), on_result=done,
                    on_error=lambda exc: dialog.show_failed(str(exc)) if shiboken6.isValid(dialog) else None)

    def _vacuum(self, dialog: ForgetDialog) -> None:
        session = self._session()
        store = session.store
        session.run(lambda: _jobs().vacuum(store),
                    on_result=lambda text: dialog.show_vacuumed(text) if shiboken6.isValid(dialog) else None,
                    on_error=lambda exc: dialog.show_vacuum_failed(f"Vacuum failed: {exc}") if shiboken6.isValid(dialog)
                    else None)

    # -- index a resource for recall ---------------------------------------------------------------------
    def index_resource(self, resource_id: str | None = None) -> None:
        """Embed and keyword-index the resource's messages recall has not indexed (or indexed before their text
        changed): what ``memory-studio reindex --resource`` does, asked first, in a worker, with progress."""
        session = self._session()
        resource_id = resource_id or self.window.selection.resource_id
        if session is None or not resource_id or self._indexing or not self._writable():
            return
        self.window.presenter.confirm(
            self.window, "Index recall for this resource?",
            f"Embed and keyword-index the messages of resource {resource_id} that semantic recall has not indexed "
            "yet, or indexed before their text changed?",
            "The model is the one this database's vectors come from (the one the Recall Playground searches "
            "with); messages with a current vector are not embedded again. Only recall's own tables are written "
            "(vectors and keyword docs): no message, thread or memory changes. The keyword index first applies its "
            "queue of recent message changes, which is the whole database's: other resources' waiting keyword docs "
            "are written too, and the result says how many. A large resource takes a while "
            "(several hundred messages a second with the local model); closing the Studio stops it between "
            "batches, keeping what was indexed.",
            "Index", lambda: self._index(resource_id, session))

    def _index(self, resource_id: str, previewed: Any) -> None:
        if not self._same_database(previewed) or self._indexing:
            return
        session = self._session()
        store, window = session.store, self.window
        self._indexing = True
        self.window.commands.refresh_enabled()
        self._status(f"Indexing resource {resource_id} for recall…")

        def progress(done: int, total: int) -> None:
            window.busy_bar.setRange(0, max(total, 1))
            window.busy_bar.setValue(done)
            window.busy_bar.show()
            self._status(f"Indexing resource {resource_id} for recall: {done:,} of {total:,} message(s)…")

        def finish() -> None:
            self._indexing = False
            window.busy_bar.setRange(0, 0)
            window.commands.refresh_enabled()

        def done(report: Any) -> None:
            finish()
            lines = report.summary_lines()
            if report.indexed or report.changed or report.keyword_line():
                session.notify_local_write()
            # (short: other resources' keyword docs written too must be in sight, not past the status bar's end)
            self._status(f"Resource {resource_id}: {report.status_line()}")
            if report.failed or report.skipped:
                window.presenter.error(window, Problem(
                    "Indexed, with messages left out", f"Resource {resource_id}: {lines[0]}", "\n".join(lines[1:]),
                    warning_only=True))
            self.indexed.emit(report)

        def failed(exc: BaseException) -> None:
            finish()
            session.notify_local_write()  # (batches written before the failure are kept)
            self._problem(exc)

        pool = session.pool
        session.run(lambda step: _jobs().index_resource(store, resource_id, step, lambda: pool.closed),
                    on_result=done, on_error=failed, on_progress=progress)

    # -- a thread that disappeared ---------------------------------------------------------------------------
    def check_selection(self) -> None:
        """After a change on disk: if the selected thread (or resource) is gone, every pane lets go of it."""
        session = self._session()
        sel = self.window.selection
        if session is None or sel.thread_id is None:
            return
        store, thread_id = session.store, sel.thread_id

        def done(exists: bool) -> None:
            if not exists and self._session() is session:
                self.selection_gone(Selection(sel.resource_id, thread_id))

        session.run(lambda: store.memory.get_thread(thread_id) is not None, on_result=done,
                    key="memory-edit-selection")

    def selection_gone(self, lost: Selection) -> None:
        """The thread (or, none selected, the resource) ``lost`` is not in the database any more (another program
        deleted it or forgot its resource): if it is still the one selected, every pane lets go of it and the
        status bar says why, rather than showing another one in its place."""
        sel = self.window.selection
        if lost.thread_id is not None:
            if sel.thread_id != lost.thread_id:
                return
            text = f"Thread {shown_title(lost.thread_id)} was deleted; nothing of it is shown any more."
        elif sel.thread_id is None and sel.resource_id is not None and sel.resource_id == lost.resource_id:
            text = (f"Resource {shown_title(lost.resource_id or '')} has no threads in the database any more; nothing "
                    "of it is shown.")
        else:
            return
        self.window.select_thread(Selection(None, None))
        self._status(text)


__all__ = ["MemoryEditActions", "READ_ONLY", "read_only_problem"]
