"""What entered, left or changed between two prompts, and why.

Fragments are matched by identity, not by text: a conversation message by its id, a system block by
its source (and, for observational memory, its part and chunk), the instructions by position. Each
difference gets one reason from ``REASONS``, read from the two prompts alone (their options, notes
and skip reasons, and the fragments' provenance), so a diff of a turn against the previous one and a
diff of a turn against its what-if read the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from core.observational.context import without_relative_dates
from core.replay.edited import edit_reason

if TYPE_CHECKING:  # pragma: no cover
    from core.prompt import AssembledPrompt, Fragment

REASONS = ("outside-history-window", "below-recall-threshold", "outside-recall-top-k", "recalled-for-input",
           "observed", "token-budget", "working-memory-changed", "new-message", "options-changed", "message-edited",
           "message-deleted", "recall-ranked-differently", "time-passed", "working-memory-edited", "another-source",
           "other")

ChangeKind = Literal["entered", "left", "changed"]
HISTORY = ("message-history",)
OM = "observational-memory"
RECALL = "semantic-recall"
_BUDGET_WORDS = ("budget", "trim", "context window")


@dataclass(frozen=True)
class FragmentChange:
    """One difference: ``text_before`` is None for a fragment that entered, ``text_after`` for one that left.
    ``source_before``: for a fragment that changed and came by another way before (``source`` is the way it
    comes now), that way; None otherwise."""

    kind: ChangeKind
    source: str
    stored_ids: tuple[str, ...]
    text_before: str | None
    text_after: str | None
    tokens_before: int
    tokens_after: int
    reason: str
    source_before: str | None = None


Key = tuple[Any, ...]


def _keys(prompt: "AssembledPrompt") -> dict[Key, "Fragment"]:
    out: dict[Key, Fragment] = {}
    instructions = 0
    for f in prompt.fragments:
        if f.role == "tools":
            key: Key = ("tools",)
        elif f.role == "system":
            if f.source == "instructions":
                key, instructions = ("system", "instructions", instructions), instructions + 1
            elif f.source == OM:
                key = ("system", OM, str(f.detail.get("part")), f.detail.get("chunk"))
            else:
                key = ("system", f.source, f.tag)
        else:
            key = ("message", f.detail.get("messageId") or (f.stored_ids[0] if f.stored_ids else f.index))
        while key in out:  # never merge two fragments that share an identity
            key = (*key, "+")
        out[key] = f
    return out


def _option(prompt: "AssembledPrompt", *path: str) -> Any:
    value: Any = prompt.options
    for part in path:
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _input_time(prompt: "AssembledPrompt") -> str | None:
    times = [f.created_at for f in prompt.fragments if f.kind == "input" and f.created_at]
    return max(times) if times else None


def _oldest_history(prompt: "AssembledPrompt") -> str | None:
    times = [f.created_at for f in prompt.fragments if f.source in HISTORY and f.created_at]
    return min(times) if times else None


def _budgeted(prompt: "AssembledPrompt", source: str) -> bool:
    texts = [prompt.skipped.get(source, ""), *(str(k) for k in prompt.notes.get(source, {}))]
    texts += [str(v) for k, v in prompt.skipped.items() if "budget" in k or "window" in k]
    return any(w in t.lower() for t in texts for w in _BUDGET_WORDS)


def _recall_reason(frag: "Fragment", without: "AssembledPrompt") -> str:
    """Why a recalled fragment is missing from ``without``."""
    if not _option(without, "semantic_recall", "enabled"):
        return "options-changed"
    threshold = _option(without, "semantic_recall", "threshold")
    similarity = frag.detail.get("similarity", frag.score)
    if threshold is not None and similarity is not None and float(similarity) < float(threshold):
        return "below-recall-threshold"
    hits = [h.get("message_id") for h in without.notes.get(RECALL, {}).get("hits", ()) or ()]
    hit = frag.detail.get("context_of") or (frag.stored_ids[0] if frag.stored_ids else None)
    if hit not in hits:
        return "outside-recall-top-k"
    return "other"


def _new_query(present: "AssembledPrompt", missing: "AssembledPrompt") -> bool:
    """The two prompts are of different turns, so recall searched with another input."""
    return _input_time(present) != _input_time(missing)


def _wm_reason(*prompts: "AssembledPrompt") -> str:
    """Why a working-memory block differs: ``working-memory-edited`` when one side is a turn rebuilt with
    today's memory and a version was written by hand in the Studio since that turn (its note
    ``writtenSince``), else ``working-memory-changed``."""
    for prompt in prompts:
        if "studio" in ((prompt.notes.get("working-memory") or {}).get("writtenSince") or ()):
            return "working-memory-edited"
    return "working-memory-changed"


def _why_missing(frag: "Fragment", present: "AssembledPrompt", missing: "AssembledPrompt",
                 entering: bool = False) -> str:
    """Why ``frag`` (in ``present``) is not in ``missing``; the same reasons serve both directions
    (``entering``: ``present`` is the later prompt)."""
    edited = edit_reason(frag, present, missing, differing=True)
    if edited is not None:
        return edited
    if frag.kind == "input" or frag.source in ("input", "context"):
        return "new-message"
    if frag.source == "working-memory":
        return _wm_reason(present, missing) if _option(missing, "working_memory", "enabled") else "options-changed"
    if frag.source == OM:
        start = _input_time(missing)
        if (frag.role != "system" and start is not None and frag.created_at is not None and frag.created_at >= start
                and entering):
            return "new-message"  # an unobserved message written after the other prompt's turn: nothing observed
        return "observed" if _option(missing, "observational_memory", "enabled") else "options-changed"
    if frag.source == RECALL:
        if entering and _option(missing, "semantic_recall", "enabled") and _new_query(present, missing):
            return "recalled-for-input"  # this turn's input found it; the other turn's did not
        return _recall_reason(frag, missing)
    if frag.source in HISTORY:
        start = _input_time(missing)
        if start is not None and frag.created_at is not None and frag.created_at >= start:
            return "new-message"  # written after the other prompt's turn
        if _option(missing, "observational_memory", "enabled"):
            return "observed"
        if _budgeted(missing, "message-history"):
            return "token-budget"
        oldest = _oldest_history(missing)
        if _option(missing, "last_messages") != _option(present, "last_messages") or oldest is None or (
                frag.created_at is not None and frag.created_at < oldest):
            return "outside-history-window"
        return "other"
    if frag.role == "tools" or frag.source == "instructions":
        return "options-changed" if present.options != missing.options else "other"
    return "other"


def _changed_reason(before: "Fragment", after: "Fragment", a: "AssembledPrompt", b: "AssembledPrompt") -> str:
    edited = edit_reason(before, a, b) or edit_reason(after, a, b)
    if edited is not None:
        return edited
    source = after.source
    if source == "working-memory" or before.source == "working-memory":
        return _wm_reason(a, b)
    if (before.source != source and before.text == after.text and before.source not in HISTORY
            and source not in HISTORY):
        # The same message by another way (observational memory's unobserved messages, then semantic recall, or
        # the reverse): nothing about it changed, and nothing was observed for it to say so.
        return "another-source"
    if source == OM:
        # The same observations dated from another day ("(today)" then, "(2 months ago)" now): nothing was
        # observed between the two prompts, the clock moved.
        same = before.source == OM and without_relative_dates(before.text) == without_relative_dates(after.text)
        return "time-passed" if same else "observed"
    if source == RECALL and before.source == RECALL:
        gone = set(before.stored_ids) - set(after.stored_ids)
        came = set(after.stored_ids) - set(before.stored_ids)
        if came and _option(a, "semantic_recall", "enabled") and _new_query(b, a):
            return "recalled-for-input"
        if gone or came:
            reason = _recall_reason(before, b) if gone else _recall_reason(after, a)
            if reason != "other":
                return reason
        if a.options == b.options and not _new_query(b, a):
            # The same input and options, and no message edited: the search itself answers otherwise (the
            # engine's ranking changed since, or the index holds other messages or vectors now).
            return "recall-ranked-differently"
    if before.source != after.source:  # the same message reached the prompt another way
        moved_from = before if before.source in HISTORY else after
        return "outside-history-window" if moved_from.source in HISTORY else "other"
    if _budgeted(b, source) or _budgeted(a, source):
        return "token-budget"
    return "options-changed" if a.options != b.options else "other"


def prompt_diff(a: "AssembledPrompt", b: "AssembledPrompt") -> list[FragmentChange]:
    """The fragments that entered (in ``b`` only), left (in ``a`` only) or changed, each with a reason,
    in prompt order (``b``'s, with what left at its place in ``a``)."""
    before, after = _keys(a), _keys(b)
    out: list[tuple[float, FragmentChange]] = []
    for key, frag in before.items():
        if key not in after:
            out.append((frag.index - 0.5, FragmentChange(
                "left", frag.source, frag.stored_ids, frag.text, None, frag.tokens, 0, _why_missing(frag, a, b))))
    for key, frag in after.items():
        old = before.get(key)
        if old is None:
            out.append((frag.index, FragmentChange(
                "entered", frag.source, frag.stored_ids, None, frag.text, 0, frag.tokens,
                _why_missing(frag, b, a, entering=True))))
        elif old.kind == "input" and frag.kind == "memory" and old.text == frag.text:
            continue  # the earlier turn's input, now part of the history: nothing changed in the context
        elif old.source == frag.source == OM and old.text == frag.text:
            # The same block read from another observation record (a reflection wrote the next generation): the
            # preamble, the marker, the task or the reminder it left as they were is what the model read before.
            continue
        elif old.text != frag.text or old.source != frag.source or old.stored_ids != frag.stored_ids:
            out.append((frag.index, FragmentChange(
                "changed", frag.source, tuple(dict.fromkeys((*old.stored_ids, *frag.stored_ids))), old.text, frag.text,
                old.tokens, frag.tokens, _changed_reason(old, frag, a, b),
                old.source if old.source != frag.source else None)))
    out.sort(key=lambda pair: pair[0])
    return [change for _, change in out]


__all__ = ["FragmentChange", "REASONS", "prompt_diff"]
