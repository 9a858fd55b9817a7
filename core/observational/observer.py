"""The observer: a model call that turns raw messages into dated, prioritised observation lines.

Call shape (spec §3.3, item 57): ``[system, user(task), user(history)]``. The task message carries the
tail of the existing log and the thread's previous task hints, so the observer adds only what is new;
the history message carries the messages being observed, grouped by day with a time label
whenever the clock moves. All prompt wording here is Memory Studio's own.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Sequence

from core.observational.tokens import count_text, observer_lines
from core.timeutil import clock_12h, month_name

if TYPE_CHECKING:  # pragma: no cover
    from core.messages import Message
    from core.tokens import Tokenizer

OBSERVER_SYSTEM_PROMPT = """\
You keep the long-term notes of an AI assistant. The conversation you are shown will be dropped \
from the assistant's context once you are done; from then on your notes are all it will know about \
what happened. Write them so the assistant can carry on as if it remembered.

=== WHAT TO RECORD ===

Facts the user states about themselves, their work, their plans and their preferences. What the \
user says is the truth about the user: if they correct an earlier statement, record the correction \
and mark it as replacing the old fact ("now lives in Lyon, no longer Berlin").

Questions are not facts. "Should I learn Rust?" records that the user is weighing Rust, not that \
they decided to learn it. Keep intentions ("plans to", "wants to", "is considering") apart from things \
that already happened.

Dates: turn relative times into calendar dates using the date of the message ("next Friday" in a \
message of Mar 3, 2025 becomes Mar 7, 2025), and keep the relative phrase only when it adds something.

What the assistant did and what came of it: answers given, recommendations made, tool calls and \
their results. Several steps of one tool run go on indented sub-lines starting with "->".

Exact details survive summarising badly, so copy them exactly: names, numbers, amounts, file paths, \
identifiers, error messages, quoted wording the user cares about.

=== OUTPUT FORMAT ===

Reply with these sections and nothing else:

<observations>
Date: Mar 3, 2025
* 🔴 (09:14) User is preparing a talk on tide pools for a school visit on Mar 7, 2025.
* 🟡 (09:15) User asked which species are easiest for children to spot; assistant suggested \
sea anemones and hermit crabs.
* 🟢 (09:20) User mentioned they enjoy photographing rock pools.
* ✅ (09:31) Assistant drafted the talk outline; user approved it.
  * -> searched the field guide for "anemone", 3 matches
  * -> summarised the matches into two slides
</observations>

<current-task>
Primary: what the user is working on right now, in one or two lines.
Secondary: anything else still open.
</current-task>

<suggested-response>
A short note on how the assistant should pick up at the next message.
</suggested-response>

Priorities: 🔴 matters beyond this conversation (identity, commitments, decisions, hard constraints); \
🟡 useful context for the current work; 🟢 minor detail; ✅ a task or question that is now finished.
Every observation line starts with "* ", a priority marker and the time as (HH:MM, 24-hour). Group \
lines under "Date: Mon D, YYYY" headers in time order.

=== GUIDELINES ===

- Usually one to five lines per exchange; more only when a lot happened.
- Terse, factual, third person ("User", "Assistant"). No commentary about the notes themselves.
- Keep the user's own words for anything they might want quoted back.
- Mark something ✅ only when it is really finished; an abandoned task is a 🟡 line saying so.
- Never repeat a line that is already in the previous observations.
- If nothing new is worth keeping, still return the sections, with one 🟢 line saying what was \
discussed.

The user's messages carry the most weight: when in doubt, keep what the user said and drop what \
the assistant said.\
"""


def _tail_by_tokens(text: str, tokenizer: "Tokenizer", budget: int | None) -> str:
    """The newest part of the log that fits ``budget`` tokens, cut at a line boundary."""
    if budget is None or count_text(tokenizer, text) <= budget:
        return text
    if budget <= 0:
        return ""
    kept: list[str] = []
    used = 0
    for line in reversed(text.splitlines()):
        cost = count_text(tokenizer, line) + 1
        if used + cost > budget:
            break
        kept.append(line)
        used += cost
    return "\n".join(reversed(kept)).strip()


def build_task_prompt(
    previous_observations: str, *, current_task: str | None, suggested_response: str | None,
    tokenizer: "Tokenizer", previous_tokens: int | None = 2000, instruction: str | None = None,
) -> str:
    """The first user message. Without earlier observations or hints it starts at ``## Your Task``."""
    parts: list[str] = []
    prior = _tail_by_tokens(previous_observations.strip(), tokenizer, previous_tokens)
    if prior:
        parts.append(
            f"## Previous Observations\n\n{prior}\n\n---\n\n"
            "These are already in the notes. Do not write them again; add only what the new messages change or add."
        )
    hint_lines = []
    if current_task:
        hint_lines.append(f"- prior current-task: {current_task}")
    if suggested_response:
        hint_lines.append(f"- prior suggested-response: {suggested_response}")
    if hint_lines:
        parts.append(
            "## Prior Thread Metadata\n\n" + "\n".join(hint_lines) + "\n\n"
            "Use the prior current-task and suggested-response to stay continuous: keep them if they "
            "still hold, rewrite them if the conversation has moved on."
        )
    task = (
        "## Your Task\n\n"
        "Write new observations for the message history in the next message, in the output format "
        "from your instructions: <observations> with dated, prioritised lines, then <current-task> "
        "and <suggested-response>."
    )
    if instruction:
        task += f"\n\n=== CUSTOM INSTRUCTIONS ===\n\n{instruction.strip()}"
    parts.append(task)
    return "\n\n".join(parts)


_ROLE_NAMES = {"user": "User", "assistant": "Assistant", "signal": "User", "system": "System"}


def _time_label(dt: datetime) -> str:
    return clock_12h(dt)


def format_history(messages: Sequence["Message"]) -> str:
    """``## New Message History to Observe`` with ``Mon D YYYY:`` day headers and ``Role (h:mm AM):`` lines
    (the time only when it changes). Times are UTC, as stored."""
    out = ["## New Message History to Observe", ""]
    day: str | None = None
    last_time: str | None = None
    for msg in messages:
        when = msg.created_at.astimezone(timezone.utc)
        day_label = f"{month_name(when)} {when.day} {when.year}:"
        if day_label != day:
            if day is not None:
                out.append("")
            out.append(day_label)
            day, last_time = day_label, None
        label = _time_label(when)
        role = _ROLE_NAMES.get(msg.role, msg.role.title())
        prefix = f"{role} ({label}):" if label != last_time else f"{role}:"
        last_time = label
        body = "\n".join(observer_lines(msg)).splitlines() or ["[empty message]"]
        out.append(f"{prefix} {body[0]}")
        out.extend(f"  {ln}" for ln in body[1:])
    return "\n".join(out).rstrip() + "\n"


def build_observer_messages(
    messages: Sequence["Message"], *, previous_observations: str, current_task: str | None,
    suggested_response: str | None, tokenizer: "Tokenizer", previous_tokens: int | None = 2000,
    instruction: str | None = None,
) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": OBSERVER_SYSTEM_PROMPT},
        {"role": "user", "content": build_task_prompt(
            previous_observations, current_task=current_task, suggested_response=suggested_response,
            tokenizer=tokenizer, previous_tokens=previous_tokens, instruction=instruction,
        )},
        {"role": "user", "content": format_history(messages)},
    ]


__all__ = ["OBSERVER_SYSTEM_PROMPT", "build_observer_messages", "build_task_prompt", "format_history"]
