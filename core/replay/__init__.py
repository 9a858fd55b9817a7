"""Replay: every stored turn exactly as the model saw it (issue 10).

- ``record``: ``TurnRecord`` (one row of ``memory_studio_turns`` per live turn), ``ReplayInfo``.
- ``capture``: building a live turn's record from its assembled prompt and processor notes.
- ``store``: reading and writing records.
- ``frozen`` / ``observations``: the inputs of a past turn, from its record or as of its time.
- ``rebuild``: ``Memory.assemble(as_of=...)``.
- ``diff``: ``prompt_diff`` and the reasons a fragment entered, left or changed.
- ``turns``, ``what_if``, ``fork``, ``rerun``: the thread-level operations the Studio's Replay pane uses.
"""

from __future__ import annotations

from core.replay.record import RecallHitRecord, ReplayInfo, TurnRecord, messages_hash

__all__ = [
    "RecallHitRecord",
    "ReplayInfo",
    "TurnRecord",
    "messages_hash",
]
