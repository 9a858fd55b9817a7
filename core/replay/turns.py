"""The turns of a thread: every user input in time order, with its record when it has one."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from core.replay import store as records
from core.replay.record import TurnRecord
from core.storage.memory_store import InvalidArgumentError, MessageQuery

if TYPE_CHECKING:  # pragma: no cover
    from core.replay.frozen import ReplaySource
    from core.storage import Store


@dataclass(frozen=True)
class Turn:
    """One turn: its (last) user input, the messages that answered it, and its record (None for
    older data or data Mastra wrote; such a turn is rebuilt as of its time)."""

    input_message_id: str
    thread_id: str
    created_at: datetime
    input_text: str
    response_ids: tuple[str, ...]
    record: TurnRecord | None
    record_error: str | None = None  # why its record could not be read (a damaged one), when it has one


def list_turns(store: "Store", thread_id: str, source: "ReplaySource | None" = None) -> list[Turn]:
    """Every user-input turn of the thread, oldest first (``source``: a cache that preloaded the thread)."""
    if source is not None:
        if source.preloaded != thread_id:  # (its messages are another thread's, or none were read)
            raise InvalidArgumentError(f"The replay source given for thread {thread_id!r} preloaded "
                                       f"{'thread ' + repr(source.preloaded) if source.preloaded else 'no thread'}; "
                                       f"pass ReplaySource(store).preload({thread_id!r}), or no source.")
        messages = [m for m in source.thread_messages if m.role != "system"]
        recorded, damaged = source.records, source.damaged
    else:
        messages = store.memory.list_messages(MessageQuery(thread_id=thread_id, exclude_system=True))
        recorded, damaged = records.thread_state(store, thread_id)
    # The earlier inputs of a turn that sent several belong to that turn, not to turns of their own.
    folded = {i for r in recorded.values() for i in r.input_ids[:-1]}
    turns: list[Turn] = []
    for i, msg in enumerate(messages):
        if msg.role != "user" or msg.id in folded:
            continue
        record = recorded.get(msg.id)
        if record is not None:
            responses = record.response_ids
        else:  # (the messages up to the next user input; not a slice of the rest: that was O(n²) in a thread)
            after = []
            j = i + 1
            while j < len(messages) and messages[j].role != "user":
                after.append(messages[j].id)
                j += 1
            responses = tuple(after)
        turns.append(Turn(msg.id, thread_id, msg.created_at, msg.text, responses, record, damaged.get(msg.id)))
    return turns


__all__ = ["Turn", "list_turns"]
