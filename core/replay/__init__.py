"""Replay: every stored turn exactly as the model saw it (issue 10).

- ``record``: ``TurnRecord`` (one row of ``memory_studio_turns`` per live turn) with a ``CallRecord``
  per model call, ``ReplayInfo`` with a ``CallReplay`` per rebuilt call.
- ``capture``: building a live turn's record from its assembled prompt, processor notes and requests.
- ``store``: reading and writing records; ``tools``: tool definitions stored once by content hash.
- ``frozen`` / ``observations``: the inputs of a past turn, from its record or as of its time.
- ``rebuild``: ``Memory.assemble(as_of=...)``; ``verbatim``: a turn another framework built (an Agents
  SDK run), shown as its record says it was sent.
- ``diff``: ``prompt_diff`` and the reasons a fragment entered, left or changed.
- ``turns``, ``what_if``, ``fork``, ``rerun``: the thread-level operations the Studio's Replay pane uses.
"""

from __future__ import annotations

from core.replay.diff import REASONS, FragmentChange, prompt_diff
from core.replay.record import CallRecord, CallReplay, RecallHitRecord, ReplayInfo, TurnRecord, messages_hash
from core.replay.rerun import KEEP, RerunError, RerunResult, rerun
from core.replay.turns import Turn
from core.replay.what_if import WhatIfRow

__all__ = [
    "KEEP",
    "REASONS",
    "CallRecord",
    "CallReplay",
    "FragmentChange",
    "RecallHitRecord",
    "ReplayInfo",
    "RerunError",
    "RerunResult",
    "Turn",
    "TurnRecord",
    "WhatIfRow",
    "messages_hash",
    "prompt_diff",
    "rerun",
]
