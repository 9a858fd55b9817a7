"""Screenshots of fixing and pinning memory on the demo data (called last by ``studio.screenshots``: it
edits and forgets): Edit Message…, Message History…, an edited message in the list and in Replay,
an observation edit, Pin…, the Checks view (and a what-if that breaks a check), Forget Resource…."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, Callable

Save = Callable[[Any, str], None]
Wait = Callable[..., bool]


def shoot_edits(app: Any, window: Any, save: Save, wait: Wait) -> None:
    from core.checks import Check, save_checks
    from studio.models.messages_model import MessageRoles
    from studio.selection import Selection

    pane = window.messages_pane
    model = pane.model
    window.show_tab("messages")
    window.resources.set_selection(Selection("ada", "ada-groceries"))
    wait(app, lambda: model.thread_id == "ada-groceries" and model.rowCount() > 0
         and model.index(model.rowCount() - 1).data(MessageRoles.LOADED), 30)
    pane._select_row(0)
    wait(app, lambda: window.selection.message_id is not None, 10)
    first = window.selection.message_id
    edits = window.edits

    # Edit Message…: the dialog, then the edit saved (recall follows), then its history.
    edits.edit_message(first)
    wait(app, lambda: edits.dialog is not None and edits.dialog.isVisible(), 30)
    dialog = edits.dialog
    dialog.editor.setPlainText("Hi! I'm Ada. Quick heads-up: I'm allergic to peanuts and sesame, so please keep "
                               "both out of any recipe.")
    save(dialog, "message-edit-dialog")
    done: list[Any] = []
    edits.edited.connect(done.append)
    dialog.request_save()
    wait(app, lambda: bool(done), 60)
    wait(app, lambda: (row := model.row_at(0)) is not None and row.edited, 30)
    pane._select_row(0)
    save(window, "messages-edited")
    edits.show_history(first)
    wait(app, lambda: edits.dialog is not dialog and edits.dialog is not None and edits.dialog.isVisible(), 30)
    save(edits.dialog, "message-history")
    edits.dialog.accept()

    # Replay of the next turn: the edited message is shown as the model saw it, and marked.
    replay = window.panes["replay"]
    window.show_tab("replay")
    # (and the pane's re-read of the edited thread landed: it comes back to the turn shown when it was asked)
    wait(app, lambda: replay.state.pending is None and replay.source is not None
         and replay.source.thread_id == "ada-groceries" and replay.step is not None and not replay.busy
         and window.session.pool.running == 0, 60)
    replay.go_to(1)
    wait(app, lambda: replay.step is not None and replay.step.index == 1 and not replay.busy, 60)
    rows = replay.view.step_model.rows()
    at = next((i for i, r in enumerate(rows) if first in r.stored_ids), None)
    if at is not None:
        replay.view.step_table.selectRow(at)
    # The tree and Replay on one thread (the picture showed "Weekly groceries" selected beside a Replay of
    # "Weekend plans"): a picture that says otherwise is not taken.
    shown = window.resources.current_selection().thread_id
    if shown != replay.state.thread_id:
        raise RuntimeError(f"replay-edited-since: the tree shows {shown!r}, Replay {replay.state.thread_id!r}")
    save(window, "replay-edited-since")

    # Observations: edit a line of the stand-up log.
    window.show_tab("observations")
    om = window.panes["observations"]
    window.resources.set_selection(Selection("sam", "sam-standup"))
    wait(app, lambda: bool(om.view.history) and om.view.selection.thread_id == "sam-standup"
         and om.line_editor.model.rowCount() > 0, 30)
    om.line_editor.set_current_row(2)
    save(window, "observations-edit")

    # Checks: a file with three checks, one pinned from the inspector.
    folder = Path(tempfile.gettempdir()) / "memory-studio-screenshots" / "checks"  # (one path on every run)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "checks.json"
    save_checks(path, [
        Check("allergy reaches the party", "ada-party", resource="ada", turn=1, prompt_contains=("peanuts",),
              working_memory_contains=("Allergies**: peanuts",)),
        Check("the allergy is recalled", "ada-party", turn=1, recalled=("allergic to peanuts",)),
        Check("no other user's data", "ada-party", turn=-1, prompt_excludes=("李伟", "Priya")),
    ])
    checks = window.panes["checks"]
    window.show_tab("prompt")
    prompt = window.panes["prompt"]
    window.resources.set_selection(Selection("ada", "ada-party"))
    turn = _first_user_message(window, "ada-party")
    window.set_selection(Selection("ada", "ada-party", turn))
    wait(app, lambda: prompt.preview is not None and prompt.preview.turn is not None and not prompt.busy, 60)
    rows = prompt.fragment_model.rows()
    recall = next((i for i, r in enumerate(rows) if r.source == "semantic-recall"), 0)
    prompt.fragment_table.selectRow(recall)
    checks.path = path
    prompt.pin_selected()
    wait(app, lambda: checks.dialog is not None and checks.dialog.isVisible(), 30)
    save(checks.dialog, "pin-dialog")
    checks.dialog.reject()
    window.show_tab("checks")
    ran: list[Any] = []
    checks.ran.connect(ran.append)
    checks.set_path(path, run=True)
    wait(app, lambda: bool(ran) and ran[-1].results is not None, 120)
    save(window, "checks-view")
    checks.options_edit.setText(json.dumps({"semantic_recall": False}))
    checks.run_what_if_text()
    wait(app, lambda: ran[-1].what_if is not None, 120)
    save(window, "checks-what-if")

    # Forget Resource…: the summary before, and what went after.
    window.resources.set_selection(Selection("li-wei", "liwei-lisbon"))
    wait(app, lambda: window.selection.resource_id == "li-wei", 10)
    edits.forget_resource("li-wei")
    wait(app, lambda: edits.dialog is not None and edits.dialog.objectName() == "forgetDialog"
         and edits.dialog.isVisible(), 60)
    forget = edits.dialog
    save(forget, "forget-dialog")
    forget.understood.setChecked(True)
    gone: list[Any] = []
    edits.forgotten.connect(gone.append)
    forget._forget()
    wait(app, lambda: bool(gone), 60)
    save(forget, "forget-done")
    forget.accept()


def _first_user_message(window: Any, thread_id: str) -> str:
    found = window.session.store.memory.list_messages(_query(thread_id))
    return str(next(m.id for m in found if m.role == "user"))


def _query(thread_id: str) -> Any:
    from core.storage.memory_store import MessageQuery

    return MessageQuery(thread_id=thread_id)


__all__ = ["shoot_edits"]
