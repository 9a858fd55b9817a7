"""Reflection generations on the demo's stand-up thread, written by the engine's own store functions (no SQL by
hand): one made in the turn, then a chunk the observer appended after it; or one prepared in the background
over the log's first lines and swapped in, the lines it did not see after it."""

from __future__ import annotations

from pathlib import Path

from core import open_store
from core.observational import load_current
from core.observational.buffer_store import commit_buffered_reflection, commit_generation, reflected_log
from core.observational.records import append_chunk
from core.observational.store import Cursor, Observation, commit_observation, commit_reflection

REFLECTION = "Date: Sep 14, 2026\n* 🔴 (14:01) Sam: reset email due Wednesday; blocked on staging mail access."
LATER = "Date: Sep 15, 2026\n* 🟡 (09:05) Sam got staging access from Priya; reset email back on track."
REFLECTED_AT = "2026-09-15T08:00:00.000Z"
OBSERVED_AT = "2026-09-15T09:05:00.000Z"


def reflect_in_turn(db: Path) -> None:
    """Generation 1: a reflection over generation 0's whole log, then one observer chunk after it."""
    with open_store(db) as store:
        first = load_current(store, thread_id="sam-standup")
        assert first is not None
        reflected = commit_reflection(store, record=first, reflection=REFLECTION, tokens=24, now=REFLECTED_AT)
        assert reflected is not None
        log = append_chunk(reflected.active_observations, LATER, OBSERVED_AT)
        obs = Observation(log, 44, ["m-later"], 30, 0, Cursor(OBSERVED_AT, "m-later"))
        assert commit_observation(store, record=reflected, key=reflected.lookup_key, scope=reflected.scope,
                                  thread_id="sam-standup", resource_id="sam", config=reflected.config, obs=obs,
                                  now=OBSERVED_AT) is not None


def reflect_in_background(db: Path, seen: int = 4) -> tuple[int, int]:
    """Generation 1 from a reflection prepared over generation 0's first ``seen`` lines: (observation lines of
    generation 0 it covered, observation lines of generation 0 after them)."""
    from studio.logic.observations_layout import observation_lines

    with open_store(db) as store:
        first = load_current(store, thread_id="sam-standup")
        assert first is not None
        lines = first.active_observations.splitlines()
        reflected = "\n".join(lines[:seen])
        held = commit_buffered_reflection(store, record=first, reflected=reflected, reflection=REFLECTION,
                                          tokens=24, input_tokens=60, now=REFLECTED_AT)
        assert held is not None
        assert commit_generation(store, record=held, active=reflected_log(held), tokens=40, now=REFLECTED_AT,
                                 buffered=True) is not None
        return (len(observation_lines(reflected)),
                len(observation_lines(first.active_observations)) - len(observation_lines(reflected)))
