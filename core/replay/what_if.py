"""What-if over a whole thread: every turn's prompt under other options, or with the memory as it is now
(``against="today"``: the turn rebuilt from today's data, working memory included), against the real one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Literal, Mapping

from core.replay.diff import FragmentChange, prompt_diff

if TYPE_CHECKING:  # pragma: no cover
    from core.memory import Memory


AGAINST = ("options", "today")  # what a what-if compares each turn with: other options, or today's memory


@dataclass(frozen=True)
class WhatIfRow:
    """One turn: tokens of the prompt it had and of its what-if (both rebuilt the same way, tool
    definitions included on both sides), and the fragments that differ."""

    input_message_id: str
    tokens_real: int
    tokens_what_if: int
    entered: int
    left: int
    changes: list[FragmentChange] = field(default_factory=list)


def what_if(
    memory: "Memory", thread_id: str, *, options: Mapping[str, Any], resource_id: str | None = None,
    progress: Callable[[int, int], None] | None = None, cancel: Callable[[], bool] | None = None,
    against: Literal["options", "today"] = "options",
) -> Iterator[WhatIfRow]:
    """For each turn of the thread, oldest first: its prompt (from its record, else reconstructed) and
    the prompt it would have had with ``options`` merged over the options then in force; with
    ``against="today"``, the prompt it has with the memory as it is now (``rebuild="today"``: today's
    stored rows, working memory and configuration, ``options`` merged over it), so the changes say which
    turns a fix made since touches, and why. Nothing is written. ``progress(i, n)`` is called after each
    turn; ``cancel()`` is checked before each."""
    from core.replay.frozen import ReplaySource
    from core.replay.rebuild import rebuild

    from core.replay.turns import list_turns

    memory._owned_thread(thread_id, resource_id)
    source = ReplaySource(memory.store).preload(thread_id)  # every row is read once for the whole thread
    turns = list_turns(memory.store, thread_id, source)
    total = len(turns)
    for i, turn in enumerate(turns):
        if cancel is not None and cancel():
            return
        real = rebuild(memory.assembler, thread_id=thread_id, as_of=turn.input_message_id, source=source)
        if against == "today":
            alt = rebuild(memory.assembler, thread_id=thread_id, as_of=turn.input_message_id,
                          options=options or None, source=source, rebuild="today")
        else:
            alt = rebuild(memory.assembler, thread_id=thread_id, as_of=turn.input_message_id, options=options,
                          source=source)
        changes = prompt_diff(real, alt)
        yield WhatIfRow(
            turn.input_message_id,
            real.total_tokens,  # like with like: the real prompt rebuilt as the what-if is (tools included)
            alt.total_tokens,
            sum(c.kind == "entered" for c in changes),
            sum(c.kind == "left" for c in changes),
            changes,
        )
        if progress is not None:
            progress(i + 1, total)


__all__ = ["AGAINST", "WhatIfRow", "what_if"]
