"""Screenshots of the Replay pane on the demo data (called by ``studio.screenshots``): the pane with a
call's whole request (tools and settings), a turn's second model call, a turn diff (dark and light
theme), the what-if table and a re-run comparison."""

from __future__ import annotations

from typing import Any, Callable

Save = Callable[[Any, str], None]
Wait = Callable[..., bool]


def shoot_replay(app: Any, window: Any, save: Save, wait: Wait) -> None:
    from studio.selection import Selection
    from studio.theme import apply_theme

    pane = window.panes["replay"]

    def at(resource: str, thread: str, index: int | None = None) -> None:
        window.resources.set_selection(Selection(resource, thread))
        window.show_tab("replay")
        wait(app, lambda: pane.source is not None and pane.source.thread_id == thread and pane.step is not None
             and not pane.busy, 60)
        if index is not None:
            pane.go_to(index)
            wait(app, lambda: pane.step is not None and pane.step.index == index and not pane.busy, 60)

    # The travel thread: a turn with a tool call makes two model calls; the first call's whole request
    # (model, settings, tool definitions with their tokens, usage beside our estimate).
    at("li-wei", "liwei-shanghai", 2)
    pane.tabs.setCurrentIndex(0)
    pane.view.tabs.setCurrentWidget(pane.view.request_page)
    top = pane.view.request_view.tools.topLevelItem(0)
    if top is not None and top.childCount():
        top.child(top.childCount() - 1).setExpanded(True)  # one definition opened: description and schema
    save(window, "replay-pane")
    pane.view.tabs.setCurrentWidget(pane.view.recall_page)
    save(window, "replay-recall")

    # A turn's second model call (after getWeather): its context grew by the call and its result.
    at("ada", "ada-weekend", 0)
    pane.go_to_call(1)
    wait(app, lambda: pane.call == 1, 10)
    pane.view.tabs.setCurrentWidget(pane.view.request_page)
    save(window, "replay-calls")
    pane.go_to_call(0)

    # The stand-up thread: observational memory takes the early messages out of the context.
    at("sam", "sam-standup", 2)
    pane.tabs.setCurrentIndex(0)
    pane.view.tabs.setCurrentIndex(1)  # received vs rebuilt now
    save(window, "replay-turn-diff")
    apply_theme(app, "light")
    save(pane, "replay-turn-diff-light")
    apply_theme(app, "dark")

    # What-if: history of one message and no working memory, for every turn of the groceries thread.
    at("ada", "ada-groceries")
    panel = pane.what_if
    pane.tabs.setCurrentWidget(panel)
    panel.last_spin.setValue(1)
    panel.wm_combo.setCurrentIndex(panel.wm_combo.findData("off"))
    done: list[Any] = []
    panel.finished.connect(done.append)
    panel.run()
    wait(app, lambda: bool(done), 60)
    opened: list[Any] = []
    panel.opened.connect(opened.append)
    panel.table.selectRow(panel.model.rowCount() - 1)
    panel.open_row(panel.model.rowCount() - 1)
    wait(app, lambda: bool(opened), 60)
    save(window, "replay-what-if")

    # Re-run the last turn with the offline scripted model (no network), beside the stored reply.
    rerun = pane.rerun
    pane.tabs.setCurrentWidget(rerun)
    rerun.model_combo.setCurrentIndex(0)
    finished: list[Any] = []
    rerun.finished.connect(finished.append)
    rerun.run()
    wait(app, lambda: bool(finished), 60)
    save(window, "replay-rerun")
    pane.tabs.setCurrentIndex(0)
