"""How the Checks view lays out memory checks and their results, and how a pinned fragment becomes a
check (pure: no Qt, no I/O).

A row's state is one word with a colour: not run, pass, fail, error; with a what-if it says what
would happen ("pass → FAIL": this change would break it). A pin takes the text the model read from a
fragment (its first lines, clipped: the whole of a long fragment is brittle to pin) and the turn it
was in, identified by its input text (stable across new turns) with the turn number as the fallback
for an empty input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

from core.checks import Check, CheckResult
from core.checks.runner import ERROR, FAIL, PASS

PinKind = Literal["prompt_contains", "prompt_excludes", "recalled"]
PIN_TEXT_CHARS = 200
PIN_KINDS: dict[str, str] = {
    "prompt_contains": "This must stay in the prompt",
    "prompt_excludes": "This must never be in the prompt",
    "recalled": "This message must be among the recall hits",
}
COLOURS = {PASS: "#3fb27f", FAIL: "#e5534b", ERROR: "#d9a441", "not run": "#8a8f98", "breaks": "#e5534b",
           "fixes": "#3fb27f"}


@dataclass(frozen=True)
class PinTarget:
    """What the user pinned: a fragment of a stored turn's prompt."""

    thread_id: str
    resource_id: str | None
    input_text: str
    turn_number: int | None  # 1-based, when known
    text: str  # the fragment's text as the model read it
    source: str  # the processor (or "instructions", "input"…)
    stored_ids: tuple[str, ...] = ()


def pin_text(text: str, limit: int = PIN_TEXT_CHARS) -> str:
    """The part of a fragment worth pinning: its first non-empty lines, up to ``limit`` characters,
    cut at a word boundary."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    joined = ""
    for line in lines:
        candidate = f"{joined} {line}".strip()
        if len(candidate) > limit:
            if not joined:
                cut = line[:limit].rsplit(" ", 1)[0]
                joined = cut if len(cut) > limit // 2 else line[:limit]
            break
        joined = candidate
    return joined


def default_pin(target: PinTarget) -> tuple[PinKind, str]:
    """The check a pin starts as: a recall fragment pins its first hit; anything else its text."""
    if target.source == "semantic-recall" and target.stored_ids:
        return "recalled", target.stored_ids[0]
    return "prompt_contains", pin_text(target.text)


def pin_name(target: PinTarget, kind: str, value: str) -> str:
    where = f"turn {target.turn_number}" if target.turn_number else "its turn"
    short = " ".join(value.split())
    short = short if len(short) <= 40 else short[:39] + "…"
    verb = {"prompt_excludes": "never shows", "recalled": "recalls"}.get(kind, "keeps")
    return f"{target.thread_id} {where} {verb} “{short}”"


def pin_check(target: PinTarget, kind: str, value: str, name: str) -> Check:
    """The check a confirmed pin writes."""
    by_input = bool(target.input_text.strip())
    return Check(
        name=name.strip(), thread=target.thread_id, resource=target.resource_id,
        input=target.input_text if by_input else None,
        turn=None if by_input else (target.turn_number or -1),
        **{kind: (value,)},  # type: ignore[arg-type]
    )


@dataclass(frozen=True)
class CheckRow:
    name: str
    where: str  # thread and turn
    asserts: str  # what must hold, in words
    state: str  # "pass", "fail", "error", "not run", or "pass → FAIL" with a what-if
    colour: str
    detail: str  # the first thing that did not hold, or the error
    check: Check
    result: CheckResult | None = None
    what_if: CheckResult | None = None

    @property
    def breaks(self) -> bool:
        return self.result is not None and self.what_if is not None and self.result.passed and not self.what_if.passed


def describe(check: Check) -> str:
    words = []
    for kind, value in check.assertions():
        short = str(value)
        short = short if len(short) <= 48 else short[:47] + "…"
        label = {"prompt_contains": "contains", "prompt_excludes": "excludes", "recalled": "recalls",
                 "working_memory_contains": "working memory has", "max_tokens": "at most"}[kind]
        words.append(f"{label} {short!r}" if kind != "max_tokens" else f"{label} {int(value):,} tokens")
    return "; ".join(words)


def _first_problem(result: CheckResult | None) -> str:
    if result is None:
        return ""
    if result.error:
        return result.error
    return result.failures[0].message if result.failures else ""


def check_rows(checks: Sequence[Check], results: Sequence[CheckResult] | None = None,
               what_if: Sequence[CheckResult] | None = None) -> list[CheckRow]:
    by_name = {r.check.name: r for r in results or ()}
    after = {r.check.name: r for r in what_if or ()}
    rows = []
    for check in checks:
        result, changed = by_name.get(check.name), after.get(check.name)
        where = f"{check.thread} · {check.turn_label}"
        if result is None:
            state, colour = "not run", COLOURS["not run"]
        elif changed is None:
            state, colour = result.status, COLOURS[result.status]
        elif result.passed and not changed.passed:
            state, colour = f"pass → {changed.status.upper()} (would break)", COLOURS["breaks"]
        elif not result.passed and changed.passed:
            state, colour = f"{result.status} → pass (would fix)", COLOURS["fixes"]
        else:
            state, colour = f"{result.status} → {changed.status}", COLOURS.get(changed.status, COLOURS["not run"])
        detail = _first_problem(changed) if changed is not None and not changed.passed else _first_problem(result)
        rows.append(CheckRow(check.name, where, describe(check), state, colour, detail, check, result, changed))
    return rows


def summary(rows: Sequence[CheckRow]) -> str:
    if not rows:
        return "No checks yet. Pin a fragment (Prompt Inspector or Replay: right-click > Pin…) to add one."
    ran = [r for r in rows if r.result is not None]
    if not ran:
        return f"{len(rows)} check(s), not run yet."
    if any(r.what_if is not None for r in rows):
        broken = sum(r.breaks for r in rows)
        return (f"With the what-if, {broken} of {len(rows)} check(s) would break" if broken else
                f"With the what-if, no passing check breaks ({len(rows)} checked)")
    counts = {s: sum(1 for r in ran if r.result is not None and r.result.status == s) for s in (PASS, FAIL, ERROR)}
    return f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[ERROR]} could not run"


DETAIL_CAPTION = "The selected check"


def detail_caption(row: CheckRow | None) -> str:
    """The caption above the detail of the selected check, saying what the detail holds for its state:
    it said "what did not hold" for a passing check too."""
    if row is None:
        return f"{DETAIL_CAPTION}: none selected (pick one above to see its result)"
    now, after = row.result, row.what_if
    if now is None:
        return f"{DETAIL_CAPTION}: not run yet (Run Checks to test it); what it asserts, and where"
    if after is None:
        if now.passed:
            return f"{DETAIL_CAPTION}: it held (what it asserts, and the turn it was checked on)"
        if now.status == ERROR:
            return f"{DETAIL_CAPTION}: why it could not run"
        return f"{DETAIL_CAPTION}: what did not hold, with the relevant part of the prompt"
    if now.passed and after.passed:
        return f"{DETAIL_CAPTION}: it held, as it stands and with the what-if"
    if row.breaks:
        return f"{DETAIL_CAPTION}: what the what-if would break, with the relevant part of the prompt"
    if after.passed:
        return f"{DETAIL_CAPTION}: what does not hold as it stands (the what-if would fix it)"
    return f"{DETAIL_CAPTION}: what did not hold, as it stands and with the what-if"


def result_text(row: CheckRow) -> str:
    """The detail below the table: every failure with the relevant part of the prompt."""
    lines = [f"{row.name}", f"  thread {row.check.thread}, {row.check.turn_label}: {row.asserts}"]
    for label, result in (("now", row.result), ("with the what-if", row.what_if)):
        if result is None:
            continue
        head = f"{label}: {result.status}"
        if result.turn_number:
            head += f" (turn {result.turn_number}, {result.tokens or 0:,} tokens, {result.replay or 'rebuilt'})"
        lines.append(head)
        if result.error:
            lines.append(f"  {result.error}")
        for failure in result.failures:
            lines.append(f"  {failure.assertion}: {failure.message}")
            lines += [f"    {line}" for line in failure.excerpt.splitlines()]
    return "\n".join(lines)


__all__ = [
    "COLOURS", "CheckRow", "PIN_KINDS", "PIN_TEXT_CHARS", "PinKind", "PinTarget", "check_rows", "default_pin",
    "DETAIL_CAPTION", "describe", "detail_caption", "pin_check", "pin_name", "pin_text", "result_text", "summary",
]
