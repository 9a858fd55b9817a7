"""Replay's "what changed" reasons after a stored message of the demo data was edited (the Studio's first-launch
data, edited as ``studio/screenshots_edits.py`` edits it): the reason belongs to the row of the edited message,
not to a row that merely entered the prompt at a turn after it."""

from __future__ import annotations

from pathlib import Path

from core import Memory, MemoryOptions
from core.demo import seed_demo
from core.embedding.hashing import HashingEmbedder
from core.storage import open_store
from studio.logic.edit_marks import changed_since, fragment_mark
from studio.logic.replay_layout import input_ids, step_rows
from studio.replay_jobs import ReplayThread

EDITED = ("Hi! I'm Ada. Quick heads-up: I'm allergic to peanuts and sesame, so please keep both out of any "
          "recipe.")


def test_an_edit_after_the_turns_is_the_reason_of_the_edited_rows_only(tmp_path: Path) -> None:
    """Turn 2 of ada-groceries, after its first message (turn 1's input) and turn 1's reply were edited: the
    turn's own input row said why "a stored message was edited since" (it took the previous turn's input
    message for its own), the reply that entered the history said so too, and the edited message's row had
    no mark (found on the demo data by another helper)."""
    store = open_store(tmp_path / "memory.db")
    try:
        seed_demo(store)
        memory = Memory(store, MemoryOptions(), embedder=HashingEmbedder())
        first, reply = [m for m in store.memory.list_messages_page("ada-groceries", 0, 2)]
        old_text = first.text
        memory.edit_message(first.id, resource_id="ada", text=EDITED)
        memory.edit_message(reply.id, resource_id="ada", text=reply.text + " (edited)")

        thread = ReplayThread.open(store, lambda options, name: Memory(store, options, name=name,
                                                                       embedder=HashingEmbedder()), "ada-groceries")
        step = thread.step(1)
        assert step.received.replay is not None and step.received.replay.exact  # the turn as its model saw it
        rows = step_rows(step.received, step.changes, input_ids(step.turn))

        # Since turn 1: the input and the reply entered as new messages; neither edit happened between the turns.
        entered = {r.source: r for r in rows if r.change == "entered"}
        assert entered["input"].stored_ids == (step.turn.input_message_id,)
        assert entered["input"].why == "new message"
        assert entered["message-history"].stored_ids == (reply.id,) and entered["message-history"].why == "new message"
        assert not [r for r in rows if r.reason in ("message-edited", "message-deleted")]

        # The edited message: unchanged since turn 1 (both turns saw the old text), marked as edited since.
        row = next(r for r in rows if r.stored_ids == (first.id,))
        assert row.change is None and row.text == old_text
        assert fragment_mark(changed_since(step.received), row.stored_ids) == "edited since"

        # Against the prompt rebuilt now, the edited messages are the ones that changed, with both texts.
        now = {c.stored_ids: c for c in step.now_changes}
        assert set(now) == {(first.id,), (reply.id,)}
        assert all(c.kind == "changed" and c.reason == "message-edited" for c in now.values())
        assert (now[(first.id,)].text_before, now[(first.id,)].text_after) == (old_text, EDITED)
    finally:
        store.close()
