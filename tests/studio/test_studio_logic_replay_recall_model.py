"""Replay's Recall tab says whose scores it shows (the embedding model the turn's record names) and when today's
index is another model's (after ``memory-studio reindex --model``); a record from before says "not recorded"."""

from __future__ import annotations

import pytest

from core.embedding.hashing import HashingEmbedder
from studio.logic.replay_layout import recall_scored_text
from studio.replay_jobs import ReplayThread
from tests.core.test_replay_recall_model import _store_record, _stored_record, memory_with, run_turns

pytestmark = pytest.mark.backends


def test_replay_says_whose_scores_the_recall_tab_shows_and_when_todays_index_is_another_models(store):
    run_turns(store)
    same = ReplayThread.open(store, lambda options, name: memory_with(store, 64), "t1")
    step = same.step(len(same.turns) - 1)
    said = recall_scored_text(step.received, step.recall_model_now)
    model = HashingEmbedder(64).model_id
    assert said == f"Scores as the turn recorded them, from embedding model {model} (today's index is the same model)."
    # As after ``reindex --model``: today's index is another model's. The recorded scores stay, and say so.
    other = ReplayThread.open(store, lambda options, name: memory_with(store, 32), "t1")
    step = other.step(len(other.turns) - 1)
    said = recall_scored_text(step.received, step.recall_model_now)
    assert said.startswith(f"Scores as the turn recorded them, from embedding model {model}. Today's index is "
                           f"another model's ({HashingEmbedder(32).model_id})")
    assert "not comparable" in said
    # A record from before records kept the model.
    raw = _stored_record(store, other.turns[-1].input_message_id)
    del raw["rm"]
    _store_record(store, other.turns[-1].input_message_id, raw)
    old = ReplayThread.open(store, lambda options, name: memory_with(store, 32), "t1")
    step = old.step(len(old.turns) - 1)
    said = recall_scored_text(step.received, step.recall_model_now)
    assert "the embedding model that scored them was not recorded" in said
    assert f"Today's index is {HashingEmbedder(32).model_id}'s" in said
