"""The reflector: when the observation log itself grows too large, a model rewrites it smaller.

The rewrite becomes a new generation (a new row); the old one stays as history. A rewrite that is
not below the threshold is retried with stronger compression guidance (four levels, our wording).
If every attempt fails, the smallest result that still shrank the log is kept; if none shrank it,
nothing changes and the next turn tries again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from core.llm.stopping import CallStopped
from core.llm.yielding import CallYielded
from core.errors import MemoryStudioError
from core.observational.observer import OBSERVER_SYSTEM_PROMPT
from core.observational.parsing import parse_observer_output
from core.observational.tokens import count_text

if TYPE_CHECKING:  # pragma: no cover
    from core.tokens import Tokenizer

REFLECTOR_SYSTEM_PROMPT = f"""\
You keep the long-term notes of an AI assistant, and the notes have grown too long. Your rewrite \
will replace them completely: whatever you leave out, the assistant forgets for good.

For reference, these are the instructions the notes were written under:

<observational-memory-instruction>
{OBSERVER_SYSTEM_PROMPT}
</observational-memory-instruction>

Your job now is different: reorganise and condense the existing notes, merge lines that say the \
same thing, and draw the conclusions the lines support ("asked about flights three times and booked \
on Mar 9" becomes one line).

Rules for the rewrite:
- Keep the "Date: Mon D, YYYY" headers and the (HH:MM) times of the lines you keep.
- Keep every ✅ line's outcome, even if shortened; finished work must not look unfinished.
- Condense old material harder than recent material; the last day or two should stay close to the original.
- When two lines contradict each other, the newer one wins; when the user stated something and the \
assistant assumed something else, the user's statement wins.
- Keep 🔴 lines unless a newer line supersedes them.
- Use the same output format: <observations>, then <current-task> and <suggested-response>.\
"""

# Guidance added on retries, from gentle to drastic. "n/10" tells the model how much detail to keep.
COMPRESSION_GUIDANCE: tuple[str, ...] = (
    "",
    "## COMPRESSION NEEDED\n\nYour previous rewrite was not smaller than the notes it replaced. Keep about "
    "8/10 of the detail: merge related lines and drop repetition.",
    "## STRONG COMPRESSION\n\nThe rewrite is still too long. Keep about 6/10 of the detail: one line per topic "
    "per day for anything older than the last few days, and drop 🟢 lines unless they are still relevant.",
    "## SEVERE COMPRESSION\n\nStill too long. Keep about 4/10 of the detail: summarise each older day in two or "
    "three lines, keep 🔴 facts, outcomes of ✅ tasks and the most recent day.",
    "## MAXIMUM COMPRESSION\n\nLast attempt. Keep about 2/10 of the detail: only lasting facts about the user, "
    "open commitments, and the current work. Everything else goes.",
)


def build_reflector_prompt(observations: str, *, level: int = 0, guidance: str | None = None) -> str:
    text = (
        f"## OBSERVATIONS TO REFLECT ON\n\n{observations.strip()}\n\n---\n\n"
        "Rewrite these notes into a shorter, better organised version. It will become the assistant's "
        "entire memory from now on."
    )
    if guidance:
        text += f"\n\n## SPECIFIC GUIDANCE\n\n{guidance.strip()}"
    if level > 0:
        text += "\n\n" + COMPRESSION_GUIDANCE[min(level, len(COMPRESSION_GUIDANCE) - 1)]
    return text


def build_reflector_messages(observations: str, *, level: int = 0, guidance: str | None = None) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": REFLECTOR_SYSTEM_PROMPT},
        {"role": "user", "content": build_reflector_prompt(observations, level=level, guidance=guidance)},
    ]


class ReplyCutOff(MemoryStudioError):
    """An observer or reflector reply that ended at the length cap (finish reason ``length``): its
    last lines are missing, so it is not used (a reflection would replace the whole log with the part
    that fitted; an observation would let its messages leave the context half described)."""


@dataclass
class Attempt:
    level: int
    tokens: int | None = None
    problem: str | None = None


@dataclass
class Reflection:
    observations: str | None  # None: nothing usable, keep the current generation
    tokens: int
    attempts: list[Attempt] = field(default_factory=list)
    problem: str | None = None
    under_threshold: bool = False


def reflect(
    observations: str, *, generate: Callable[[list[dict[str, Any]], int], str], tokenizer: "Tokenizer",
    threshold: int, max_level: int = len(COMPRESSION_GUIDANCE) - 1, guidance: str | None = None,
) -> Reflection:
    """Ask ``generate(messages, level)`` for rewrites until one fits under ``threshold`` tokens.

    ``generate`` raising counts as a failed attempt at that level (and stops: a provider outage will
    not be fixed by asking for more compression). Garbage replies move on to the next level.
    """
    original = count_text(tokenizer, observations)
    own_text = [REFLECTOR_SYSTEM_PROMPT, build_reflector_prompt("", guidance=guidance), *COMPRESSION_GUIDANCE]
    best: tuple[str, int] | None = None
    attempts: list[Attempt] = []
    for level in range(0, max_level + 1):
        messages = build_reflector_messages(observations, level=level, guidance=guidance)
        try:
            reply = generate(messages, level)
        except ReplyCutOff as exc:  # a stronger compression level asks for a shorter rewrite: try it
            attempts.append(Attempt(level, problem=str(exc)))
            continue
        except (CallYielded, CallStopped):  # gave way to a turn, or the turn was stopped: no attempt
            raise
        except Exception as exc:  # noqa: BLE001 - reported in the result; the log is left as it was
            attempts.append(Attempt(level, problem=f"{type(exc).__name__}: {exc}"))
            break
        # The request's own text copied back (the instructions' example, "Rewrite these notes…", the
        # compression guidance) is no rewrite; the log's lines may be kept, of course.
        parsed = parse_observer_output(reply, copied_from=own_text)
        if not parsed.ok:
            attempts.append(Attempt(level, problem=parsed.problem))
            continue
        tokens = count_text(tokenizer, parsed.observations)
        attempts.append(Attempt(level, tokens=tokens))
        if tokens < original and (best is None or tokens < best[1]):
            best = (parsed.observations, tokens)
        if tokens < min(original, threshold):
            return Reflection(parsed.observations, tokens, attempts, under_threshold=True)
    if best is not None:
        return Reflection(best[0], best[1], attempts,
                          problem=f"no rewrite got under {threshold} tokens; kept the smallest ({best[1]})")
    return Reflection(None, original, attempts, problem=f"no usable rewrite ({_reasons(attempts)})")


_LEVEL_RE = re.compile(r" \(level \d+\)")


def _levels(levels: list[int]) -> str:
    if len(levels) == 1:
        return f"level {levels[0]}"
    if levels == list(range(levels[0], levels[-1] + 1)):
        return f"levels {levels[0]}–{levels[-1]}"
    return "levels " + ", ".join(str(n) for n in levels)


def _reasons(attempts: list[Attempt]) -> str:
    """Why each attempt failed, a reason said once with the levels it stopped (five levels cut off at
    the cap were five copies of one long sentence): "levels 0–4: the reflector reply was cut off …"."""
    grouped: dict[str, list[int]] = {}
    for a in attempts:
        reason = _LEVEL_RE.sub("", a.problem) if a.problem else f"{a.tokens} tokens, not smaller"
        grouped.setdefault(reason, []).append(a.level)
    return "; ".join(f"{_levels(levels)}: {reason}" for reason, levels in grouped.items())


__all__ = [
    "COMPRESSION_GUIDANCE",
    "REFLECTOR_SYSTEM_PROMPT",
    "Reflection",
    "ReplyCutOff",
    "build_reflector_messages",
    "build_reflector_prompt",
    "reflect",
]
