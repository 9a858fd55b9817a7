"""The Replay pane's state as a plain object (no Qt, no I/O): which thread is open, which turn and
model call are shown, what is loading, which mode tab is in front, and what waits for the pane to be
shown. ``studio.panes.replay.ReplayPane`` holds one ``ReplayState``, changes it only through these
methods, and renders it; every rule about what a step, a selection or a change on disk does to the
state is here, tested without a window (tests/studio/test_replay_state.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from studio.logic.replay_layout import clamp_step, turn_index_for
from studio.selection import Selection

if TYPE_CHECKING:
    from studio.replay_jobs import ReplayThread, StepData, TraceMatch, WhatIfDetail


class ReplayMode(Enum):
    """The pane's mode tabs, each the pane's whole width."""

    TURN = "Turn"
    WHAT_IF = "What-If"
    RERUN = "Re-Run"


@dataclass(frozen=True)
class SelectionEffect:
    """What a new selection asks of the pane."""

    reload_threads: bool  # the thread list (another resource or thread was picked)
    open_thread: str | None  # a thread to open (None: keep what is open)
    show_empty: bool  # nothing to replay: say how to pick a thread


@dataclass
class ReplayState:
    selection: Selection = field(default_factory=Selection)
    source: ReplayThread | None = None  # the thread open in Replay, with its turns
    step: StepData | None = None  # the turn shown, once rebuilt (None while it is being rebuilt)
    index: int = 0  # the turn asked for (0-based)
    call: int = 0  # the model call of that turn (0: the first; then one after each tool result)
    trace: TraceMatch | None = None  # the shown turn's trace, once looked for
    mode: ReplayMode = ReplayMode.TURN
    pending: tuple[str, str | None] | None = None  # (thread, message) to open once the pane is shown
    stale: bool = False  # the file changed while the pane was hidden: read the thread again when shown
    loading_step: bool = False  # a turn was asked for and its rebuild has not arrived
    rerun_detail: WhatIfDetail | None = None  # a what-if prompt to re-run once its turn is shown
    notice: str = ""  # said beside the turn shown until the next step (a re-read lost the turn asked for)
    failed_open: str | None = None  # the thread whose open failed (a server gone): opened again at the next change

    # -- what the commands may do ----------------------------------------------------------------
    @property
    def thread_id(self) -> str | None:
        return self.source.thread_id if self.source is not None else None

    @property
    def turn_count(self) -> int:
        return len(self.source.turns) if self.source is not None else 0

    @property
    def has_turns(self) -> bool:
        return self.turn_count > 0

    @property
    def has_step(self) -> bool:
        return self.step is not None

    @property
    def has_calls(self) -> bool:
        """The turn shown made more than one model call (it used tools)."""
        return self.step is not None and len(self.step.calls) > 1

    @property
    def last_index(self) -> int:
        return max(self.turn_count - 1, 0)

    @property
    def shown_message_id(self) -> str | None:
        """The user message of the turn asked for (a re-read stays on it)."""
        if self.source is None or not self.source.turns:
            return None
        return self.source.turns[self.index].input_message_id

    # -- selection and opening -------------------------------------------------------------------
    def select(self, selection: Selection) -> SelectionEffect:
        previous, self.selection = self.selection, selection
        reload_threads = (selection.resource_id != previous.resource_id
                          or selection.thread_id != previous.thread_id)
        if selection.thread_id is None:
            return SelectionEffect(reload_threads, None, self.source is None)
        wanted = selection.thread_id if self.thread_id != selection.thread_id else None
        if wanted is None and self.pending is not None and self.pending[0] != selection.thread_id:
            # Back to the open thread before the hidden pane opened the one picked in between: that one
            # is not wanted any more (it opened when the pane was shown, beside a tree showing this one).
            self.pending = None
        return SelectionEffect(reload_threads, wanted, False)

    def ask_open(self, thread_id: str, message_id: str | None = None) -> None:
        """Open ``thread_id`` (at the turn holding ``message_id``, else its last turn) when shown."""
        self.pending = (thread_id, message_id)

    def take_pending(self) -> tuple[str, str | None] | None:
        pending, self.pending = self.pending, None
        return pending

    def opened(self, source: ReplayThread) -> None:
        self.source = source
        self.step = None
        self.failed_open = None

    def wants_reread(self, visible: bool) -> bool:
        """The file changed: read the open thread again now (visible), or once shown (``stale``)."""
        if self.source is None or self.pending is not None:
            return False
        self.stale = not visible
        return visible

    def reread_differs(self, fresh: ReplayThread) -> bool:
        """A re-read thread replaces the open one only when its turns changed."""
        return (self.source is not None and fresh.thread_id == self.source.thread_id
                and not self.source.same_turns(fresh))

    def reread_turn(self, fresh: ReplayThread) -> tuple[int, int]:
        """The turn and model call of ``fresh`` (the open thread read again) to show: the turn asked for
        *now*, which the user may have stepped to while the re-read was on its way (never the one shown
        when it was asked for). When that turn is gone (another program deleted its message), the nearest
        turn started before it (else the first), and ``notice`` says so. Call before ``opened(fresh)``."""
        self.notice = ""
        if self.source is None or not self.source.turns or not fresh.turns:
            return fresh.start, 0
        turn = self.source.turns[self.index]
        for i, t in enumerate(fresh.turns):
            if t.input_message_id == turn.input_message_id:
                return i, self.call
        index = turn_index_for(fresh.turns, None, turn.created_at)
        self.notice = (f"Turn {self.index + 1} is not in this thread any more (its message was deleted "
                       f"elsewhere); showing turn {index + 1}, the nearest one")
        return index, 0

    # -- stepping --------------------------------------------------------------------------------
    def go_to(self, index: int, call: int = 0) -> bool:
        """Ask for turn ``index`` (clamped) at model call ``call``; False when there are no turns."""
        if not self.has_turns:
            return False
        self.index = clamp_step(index, self.turn_count)
        self.call = call
        self.loading_step = True
        return True

    def step_arrived(self, source: ReplayThread, step: StepData) -> bool:
        """A rebuilt turn arrived: keep it only when it is still the one asked for."""
        if source is not self.source or step.index != self.index:
            return False
        self.loading_step = False
        self.step = step
        self.trace = None
        self.call = clamp_step(self.call, len(step.calls))
        return True

    def go_to_call(self, call: int) -> bool:
        """Show model call ``call`` (clamped) of the turn shown; False when no turn is shown."""
        if self.step is None:
            return False
        self.call = clamp_step(call, len(self.step.calls))
        return True

    def failed(self) -> None:
        self.loading_step = False

    def cleared(self) -> None:
        """Nothing to show (no thread, or a thread without turns)."""
        self.step = None

    def open_failed(self, thread_id: str) -> None:
        """``thread_id`` could not be read: the one open before is not shown under it (nor stepped, forked or
        re-run), and it is read again at the next change of the database (``retry_open``)."""
        self.source = None
        self.step = None
        self.trace = None
        self.loading_step = False
        self.failed_open = thread_id

    def retry_open(self) -> str | None:
        """The database changed (or its server answers again, which the session reports as a change): the
        thread whose open failed, to open again, if it is still the one selected and nothing else is asked."""
        if (self.failed_open is not None and self.source is None and self.pending is None
                and self.selection.thread_id == self.failed_open):
            return self.failed_open
        return None

    # -- what-if and re-run ----------------------------------------------------------------------
    def rerun_elsewhere(self, detail: WhatIfDetail) -> bool:
        """"Re-Run This What-If Prompt" on another turn than the one shown: remember it and say so (the
        pane steps there, and the re-run panel takes it once that turn is shown)."""
        if self.source is not None and detail.index != self.index:
            self.rerun_detail = detail
            return True
        return False

    def take_rerun(self, step_index: int) -> WhatIfDetail | None:
        """The what-if prompt waiting for turn ``step_index``, if any (it is dropped either way)."""
        detail, self.rerun_detail = self.rerun_detail, None
        return detail if detail is not None and detail.index == step_index else None
