"""The Replay pane's state without a window (studio/logic/replay_state.py): what a selection, a step, a
late answer, a change on disk and a what-if re-run do to it. Real turns: a libSQL file written by the
engine, opened and rebuilt with the same jobs the pane runs on its workers. No Qt is imported."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from core import Memory, MemoryOptions, Store, open_store
from studio.logic.replay_state import ReplayMode, ReplayState
from studio.replay_jobs import ReplayThread, WhatIfDetail
from studio.selection import Selection

from .replay_data import OTHER, RESOURCE, THREAD, TURNS, build_replay_db


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("replay-state")
    build_replay_db(folder / "replay.db")
    return folder


@pytest.fixture
def store(template: Path, tmp_path: Path) -> Iterator[Store]:
    folder = tmp_path / "data"
    shutil.copytree(template, folder)
    s = open_store(folder / "replay.db")
    yield s
    s.close()


def open_thread(store: Store, thread_id: str = THREAD, message_id: str | None = None) -> ReplayThread:
    def factory(options: Any, name: str) -> Memory:
        opts = options if isinstance(options, MemoryOptions) else MemoryOptions(**dict(options or {}))
        return Memory(store, opts, name=name)

    return ReplayThread.open(store, factory, thread_id, message_id)


def test_the_state_module_needs_no_qt() -> None:
    code = ("import sys; import studio.logic.replay_state; "
            "print(sorted(m for m in sys.modules if m.startswith(('PySide6', 'shiboken6'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_selection_opens_its_thread_once_and_an_empty_one_says_how_to_pick(store: Store) -> None:
    state = ReplayState()
    empty = state.select(Selection())
    assert (empty.reload_threads, empty.open_thread, empty.show_empty) == (False, None, True)

    picked = state.select(Selection(RESOURCE, THREAD))
    assert (picked.reload_threads, picked.open_thread, picked.show_empty) == (True, THREAD, False)
    state.ask_open(THREAD)
    assert state.take_pending() == (THREAD, None) and state.take_pending() is None
    state.opened(open_thread(store))
    assert state.thread_id == THREAD and state.turn_count == len(TURNS) and state.has_turns

    again = state.select(Selection(RESOURCE, THREAD, "some-message"))  # a message in the open thread
    assert (again.reload_threads, again.open_thread, again.show_empty) == (False, None, False)
    other = state.select(Selection(RESOURCE, OTHER))
    assert (other.reload_threads, other.open_thread) == (True, OTHER)
    none = state.select(Selection(RESOURCE, None))  # a resource only: the open thread stays, no empty page
    assert (none.open_thread, none.show_empty) == (None, False)


def test_stepping_clamps_and_drops_a_late_answer(store: Store) -> None:
    state = ReplayState()
    assert not state.go_to(0)  # nothing open: nothing to step through
    source = open_thread(store)
    state.opened(source)
    assert state.go_to(99) and state.index == len(TURNS) - 1 and state.loading_step
    assert state.go_to(-5) and state.index == 0
    first = source.step(0)
    assert state.go_to(1)
    assert not state.step_arrived(source, first)  # turn 1 was asked for meanwhile: turn 0 is dropped
    assert state.step is None and state.loading_step
    second = source.step(1)
    assert state.step_arrived(source, second)
    assert state.step is second and not state.loading_step and state.has_step and state.trace is None
    assert not state.step_arrived(open_thread(store), second)  # a thread opened again is another source

    calls = len(second.calls)
    assert state.go_to_call(99) and state.call == calls - 1
    assert state.go_to_call(-1) and state.call == 0
    assert state.has_calls == (calls > 1)
    assert state.last_index == len(TURNS) - 1
    assert state.shown_message_id == source.turns[1].input_message_id

    state.go_to(2, call=5)
    state.failed()
    assert not state.loading_step and state.call == 5  # clamped once the turn arrives
    third = source.step(2)
    assert state.step_arrived(source, third) and state.call == len(third.calls) - 1
    state.cleared()
    assert state.step is None and not state.has_step


def test_a_change_on_disk_rereads_now_or_once_shown(store: Store) -> None:
    state = ReplayState()
    assert not state.wants_reread(visible=True)  # nothing open
    source = open_thread(store)
    state.opened(source)
    assert not state.wants_reread(visible=False) and state.stale
    assert state.wants_reread(visible=True) and not state.stale
    state.ask_open(OTHER)
    assert not state.wants_reread(visible=True)  # another thread is about to open anyway
    state.take_pending()
    assert not state.reread_differs(open_thread(store))  # the same turns: keep what is shown
    assert not state.reread_differs(open_thread(store, OTHER))  # another thread's answer


def test_a_what_if_rerun_on_another_turn_waits_for_that_turn(store: Store) -> None:
    state = ReplayState()
    source = open_thread(store)
    state.opened(source)
    state.go_to(2)
    step = source.step(2)
    state.step_arrived(source, step)
    here = WhatIfDetail(2, step.received, step.received)
    assert not state.rerun_elsewhere(here) and state.rerun_detail is None  # the turn shown: at once
    earlier = WhatIfDetail(0, step.received, step.received)
    assert state.rerun_elsewhere(earlier) and state.rerun_detail is earlier
    assert state.take_rerun(1) is None and state.rerun_detail is None  # another turn arrived: dropped
    state.rerun_elsewhere(earlier)
    assert state.take_rerun(0) is earlier


def test_the_mode_tab_is_part_of_the_state() -> None:
    state = ReplayState()
    assert state.mode is ReplayMode.TURN
    assert [m.value for m in ReplayMode] == ["Turn", "What-If", "Re-Run"]  # the pane's tab titles, in order


def test_picking_the_open_thread_again_while_hidden_drops_the_other_threads_pending_open(store: Store) -> None:
    """Replay hidden with a thread open; another thread picked in the tree (its open waits for the pane to be
    shown); then the open thread picked again. Shown, the pane opened the other thread, beside a tree that
    showed this one (replay-edited-since.png: "Weekly groceries" selected, Replay on "Weekend plans")."""
    state = ReplayState()
    state.select(Selection(RESOURCE, THREAD))
    state.opened(open_thread(store))
    other = state.select(Selection(RESOURCE, OTHER))
    assert other.open_thread == OTHER
    state.ask_open(OTHER)  # (the pane, hidden: opens it once shown)
    back = state.select(Selection(RESOURCE, THREAD, "a-message"))
    assert back.open_thread is None and state.thread_id == THREAD
    assert state.take_pending() is None  # shown now: it stays on the thread the tree shows


def test_a_reread_stays_on_the_turn_asked_for_when_it_lands(store: Store) -> None:
    """The user steps while the re-read of a changed thread is on its way: its answer keeps that turn (and
    its model call), not the one shown when it was asked for."""
    state = ReplayState()
    source = open_thread(store)
    state.opened(source)
    state.go_to(5)
    fresh = open_thread(store)  # read again (as the pane does on a change on disk) ...
    state.go_to(2, call=1)  # ... and the user steps before it lands
    assert state.reread_turn(fresh) == (2, 1) and state.notice == ""
