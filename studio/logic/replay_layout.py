"""The Replay pane's logic (no Qt, no I/O): stepping, the fragment list with what changed since the
previous turn and why, "received" against "rebuilt now", facts, recall and token tables, what-if
options and rows, and the re-run comparison.

Everything is reshaped from the engine's own records (``AssembledPrompt``, ``TurnRecord``,
``FragmentChange``, ``WhatIfRow``, ``RerunResult``); nothing here computes a prompt or a diff reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Literal, Mapping, Sequence

from core import AssembledPrompt
from core.replay import FragmentChange, RecallHitRecord, TurnRecord
from core.replay.capture import recall_hits, token_sections
from core.replay.turns import Turn
from studio.logic.column_fit import fit_columns as fit_columns  # (where Replay and its tests import it)
from studio.logic.dates import format_datetime
from studio.logic.diffing import DiffLine, line_diff
from studio.logic.edit_marks import changed_since
from studio.logic.prompt_layout import (
    ROLE_LABELS,
    fragment_preview,
    ids_per_input,
    input_stored_ids,
    message_ids,
    observation_record_of,
    recorded_input_ids,
    source_color,
    text_preview,
)
from studio.logic.short_ids import short_id
from studio.logic.thread_labels import shown_title

Change = Literal["entered", "left", "changed"]

REASON_LABELS: dict[str, str] = {
    "outside-history-window": "outside the history window",
    "below-recall-threshold": "below the recall threshold",
    "outside-recall-top-k": "outside recall top-k",
    "recalled-for-input": "recalled for this turn's input",
    "observed": "observed by observational memory",
    "token-budget": "trimmed by the token budget",
    "working-memory-changed": "working memory changed",
    "working-memory-edited": "working memory edited by hand since",
    "new-message": "new message",
    "options-changed": "options changed",
    "message-edited": "a stored message was edited since",
    "message-deleted": "a stored message was deleted since",
    "recall-ranked-differently": "recall ranks differently now (same input and options)",
    "time-passed": "time passed (the same observations, dated from a later day)",
    "another-source": "the same message, reached the prompt another way",
    "other": "other",
}
# Shorter forms of each reason, the most telling first: a narrow context table (Replay at a 900 or 1,100 px window,
# ~530-680 px beside a whole source) draws the longest that fits its cell (``studio.widgets.short_forms``), where
# the whole label read "observed by ob…". Each is the label's own words in its order, nothing added (a test holds
# them to it); the cell's tooltip and the fragment's details under the table say the whole label.
REASON_SHORT: dict[str, tuple[str, ...]] = {
    "outside-history-window": ("outside history window", "outside window"),
    "below-recall-threshold": ("below recall threshold", "below threshold"),
    "outside-recall-top-k": ("outside top-k",),
    "recalled-for-input": ("recalled for input", "recalled"),
    "observed": ("observed",),
    "token-budget": ("trimmed by token budget", "trimmed"),
    # (as against "edited by hand": the agent's own). Not "changed" as its shortest: its row's Change column says
    # "~ changed" already, and at a 1,100 px window the reason read only that, not what changed (found by
    # s35-walk11); "memory" fits where "changed" did (Role kept at 1,100 px), and says what.
    "working-memory-changed": ("memory changed", "memory"),
    "working-memory-edited": ("edited by hand",),
    "new-message": ("new",),
    "message-edited": ("message edited", "edited"),
    "message-deleted": ("message deleted", "deleted"),
    "recall-ranked-differently": ("recall ranks differently", "ranks differently"),
    "time-passed": ("time passed",),
    "another-source": ("reached the prompt another way", "another way"),
}
# A text marker beside every colour, so the change is readable without telling colours apart.
CHANGE_MARKS: dict[str, str] = {"entered": "+ entered", "left": "− left", "changed": "~ changed"}
# Translucent tints: they lie over the palette's base colour, so they read in the light and dark theme.
CHANGE_TINTS: dict[str, tuple[int, int, int, int]] = {
    "entered": (46, 160, 67, 70), "left": (218, 54, 51, 70), "changed": (191, 135, 0, 70),
}
TOKEN_SECTIONS: tuple[tuple[str, str], ...] = (  # o200k_base counts, as the record and the rebuild count them
    ("system", "System and instructions"), ("working_memory", "Working memory"),
    ("observations", "Observations"), ("history", "History"), ("recall", "Recall"),
    ("input", "Input"), ("tools", "Tool definitions"),
)


# The reasons that name a change made by hand since a turn (in the Studio: a working-memory version, a stored
# message edited or deleted), as against what the thread did by itself since (its agent's own working-memory
# updates, new messages, observations, recall, time passing).
HAND_EDIT_REASONS = frozenset({"working-memory-edited", "message-edited", "message-deleted"})
CAUSE_HAND, CAUSE_THREAD = "hand edit", "the thread"
CAUSE_TIPS = {
    CAUSE_HAND: "A change made by hand since this turn (a working-memory version written in the Studio, a stored "
                "message edited or deleted) is among what makes its prompt differ now",
    CAUSE_THREAD: "No hand edit: its prompt differs now only by what the thread did since (its agent's own "
                  "working-memory updates, new messages, observations, recall, time passing)",
}


def reason_label(reason: str) -> str:
    return REASON_LABELS.get(reason, reason.replace("-", " "))


def reason_forms(reason: str) -> tuple[str, ...]:
    """The shorter forms of ``reason``'s label, the most telling first (none: a reason without any)."""
    return REASON_SHORT.get(reason, ())


# -- stepping --------------------------------------------------------------------------------------
def clamp_step(index: int, count: int) -> int:
    return 0 if count <= 0 else max(0, min(index, count - 1))


def step_label(index: int, turns: Sequence[Turn]) -> str:
    if not turns:
        return "No turns"
    turn = turns[clamp_step(index, len(turns))]
    return f"Turn {index + 1} of {len(turns)} · {format_datetime(turn.created_at)}"


def call_labels(calls: Sequence[AssembledPrompt]) -> list[str]:
    """One label per model call of a turn: "1 of 3 · the first call", "2 of 3 · after get_weather"."""
    out = []
    for k, prompt in enumerate(calls):
        what = "the first call"
        if k:
            # The tool calls this call answers: those its messages hold that the call before did not.
            before = {c.get("id") for m in calls[k - 1].messages for c in m.get("tool_calls") or ()}
            names = [str((c.get("function") or {}).get("name")) for m in prompt.messages
                     for c in m.get("tool_calls") or () if c.get("id") not in before]
            what = f"after {', '.join(names)}" if names else "after a tool result"
        out.append(f"{k + 1} of {len(calls)} · {what}")
    return out


def turn_index_for(turns: Sequence[Turn], message_id: str | None, created_at: Any = None) -> int:
    """The turn a message belongs to: its input, one of its responses, or the last turn started
    before it (``created_at``); the last turn when nothing matches."""
    if not turns:
        return 0
    for i, turn in enumerate(turns):
        if message_id == turn.input_message_id or message_id in turn.response_ids:
            return i
        if turn.record is not None and message_id in turn.record.input_ids:
            return i
    if created_at is not None:
        before = [i for i, t in enumerate(turns) if t.created_at <= created_at]
        if before:
            return before[-1]
        return 0
    return len(turns) - 1


# -- the fragment list, with what changed since the previous turn ---------------------------------
@dataclass(frozen=True)
class StepRow:
    index: int | None  # position in this turn's prompt; None for a fragment that left
    role: str
    source: str
    stored_ids: tuple[str, ...]
    tokens: int
    text: str
    preview: str
    score: float | None
    change: Change | None
    reason: str | None
    text_before: str | None
    color: str
    observation_record: str | None = None  # an observation block's record (its ``stored_ids`` are messages only)
    source_before: str | None = None  # a changed fragment that came by another way before (``prompt_diff``)
    part_notes: tuple[tuple[int, int], ...] = ()  # where ``text`` names a part that is no text (``Fragment``'s)

    @property
    def mark(self) -> str:
        return CHANGE_MARKS.get(self.change or "", "")

    @property
    def why(self) -> str:
        return reason_label(self.reason) if self.reason else ""

    @property
    def why_forms(self) -> tuple[str, ...]:
        """``why``'s shorter forms (``reason_forms``)."""
        return reason_forms(self.reason) if self.reason else ()

    @property
    def stored_label(self) -> str:
        if self.observation_record is not None:
            return f"record {short_id(self.observation_record)}"
        if not self.stored_ids:
            return ""
        first = short_id(self.stored_ids[0])
        return first if len(self.stored_ids) == 1 else f"{first} +{len(self.stored_ids) - 1}"

    @property
    def stored_forms(self) -> tuple[str, ...]:
        """``stored_label``'s shorter form: the record's id tail alone (in a column as wide as an id, "record
        …303fa4c0" read "record …303f…", its distinguishing end cut; the source says it is observational memory)."""
        return (short_id(self.observation_record),) if self.observation_record is not None else ()



def input_ids(turn: Turn) -> tuple[str, ...]:
    """The stored messages a turn sent as its input, oldest first (a turn may send several)."""
    return recorded_input_ids(turn.record, turn.input_message_id)


def with_left_input_ids(changes: Sequence[FragmentChange], previous_inputs: Sequence[str]) -> list[FragmentChange]:
    """``changes`` since the previous turn, its input fragments that left naming the stored messages they held
    (``previous_inputs``, that turn's ``input_ids``). The engine's input fragments carry no stored ids (a new
    input is not stored yet), so the previous turn's input, when it is not in this turn's prompt (two turns on
    one thread at once, observational memory after it observed, no history), read "Not from a stored message"."""
    left = [i for i, c in enumerate(changes) if c.kind == "left" and c.source == "input" and not c.stored_ids]
    out = list(changes)
    if not left or not previous_inputs:
        return out
    for i, ids in zip(left, ids_per_input(len(left), previous_inputs)):
        out[i] = replace(out[i], stored_ids=ids)
    return out


def input_caption(prompt: AssembledPrompt, turn: Turn, limit: int = 220) -> str:
    """The turn's input as the rebuilt prompt holds it (what its model received, for a recorded turn),
    quoted; marked when the stored message was edited or deleted since."""
    texts = [f.text for f in prompt.fragments if f.source == "input"]
    flat = " ".join(" ".join(texts).split()) if texts else " ".join(turn.input_text.split())
    quoted = f"“{flat[:limit]}{'…' if len(flat) > limit else ''}”"
    changed = changed_since(prompt)
    kinds = sorted({changed[i] for i in input_ids(turn) if i in changed})
    # The mark first: a long input is cut at the label's right edge.
    return (f"{' and '.join(kinds)}; the model received {quoted}") if kinds else quoted


def step_rows(prompt: AssembledPrompt, changes: Sequence[FragmentChange] = (),
              inputs: Sequence[str] = ()) -> list[StepRow]:
    """This turn's fragments in prompt order, each marked with its change since the previous turn; the
    fragments that left are listed where they were. ``inputs``: the turn's stored input message ids,
    which its input fragments hold."""
    input_stored = input_stored_ids(prompt, inputs)
    pending: dict[tuple[str, tuple[str, ...], str | None], list[FragmentChange]] = {}
    for c in changes:
        if c.kind != "left":
            pending.setdefault((c.source, tuple(c.stored_ids), c.text_after), []).append(c)
    marked: dict[int, FragmentChange] = {}
    for f in prompt.fragments:
        key = (f.source, tuple(f.stored_ids), f.text)
        found = pending.get(key)
        if not found and f.stored_ids:  # a changed fragment lists the ids of both sides
            found = next((v for k, v in pending.items() if v and k[0] == f.source and k[2] == f.text
                          and set(f.stored_ids) <= set(k[1])), None)
        if found:
            marked[f.index] = found.pop(0)
    rows: list[StepRow] = []
    left = [c for c in changes if c.kind == "left"]
    # ``prompt_diff`` lists changes in prompt order with what left at its old place: put each one that
    # left before the first fragment listed after it.
    order = list(changes)
    placed: dict[int, list[FragmentChange]] = {}
    for c in left:
        at = order.index(c)
        nxt = next((o for o in order[at + 1:] if o.kind != "left"), None)
        target = next((i for i, m in marked.items() if m is nxt), None) if nxt is not None else None
        placed.setdefault(target if target is not None else -1, []).append(c)
    for f in prompt.fragments:
        for c in placed.pop(f.index, []):
            rows.append(_left_row(c))
        change = marked.get(f.index)
        rows.append(StepRow(
            f.index, ROLE_LABELS.get(f.role, f.role), f.source, input_stored.get(f.index, message_ids(f)),
            f.tokens, f.text,
            fragment_preview(prompt, f), f.score, change.kind if change else None, change.reason if change else None,
            change.text_before if change else None, source_color(f.source), observation_record_of(f),
            change.source_before if change else None, f.part_notes))
    for rest in placed.values():
        rows.extend(_left_row(c) for c in rest)
    return rows


def _left_row(c: FragmentChange) -> StepRow:
    text = c.text_before or ""
    return StepRow(None, "", c.source, tuple(c.stored_ids), c.tokens_before, text, text_preview(text), None, "left",
                   c.reason, text, source_color(c.source))


def change_summary(changes: Sequence[FragmentChange]) -> str:
    if not changes:
        return "no change in the context"
    parts = []
    for kind in ("entered", "left", "changed"):  # each count with its own reasons: one list after them all
        of_kind = [c for c in changes if c.kind == kind]  # read as the reasons of the last count
        if not of_kind:
            continue
        reasons: dict[str, int] = {}
        for c in of_kind:
            reasons[c.reason] = reasons.get(c.reason, 0) + 1
        why = ", ".join(f"{reason_label(r)} ×{n}" if n > 1 else reason_label(r) for r, n in reasons.items())
        parts.append(f"{CHANGE_MARKS[kind].split()[0]}{len(of_kind)} {kind} ({why})")
    return " · ".join(parts)


# -- received vs rebuilt now ----------------------------------------------------------------------
@dataclass(frozen=True)
class Comparison:
    same: bool
    level: Literal["info", "warning", "error"] | None  # None: nothing to flag
    text: str


def _calls(prompt: AssembledPrompt) -> list[AssembledPrompt]:
    info = prompt.replay
    return [c.prompt for c in info.calls] if info is not None and info.calls else [prompt]


def same_calls(a: AssembledPrompt, b: AssembledPrompt) -> bool:
    """Whether two rebuilds of a turn send the same messages and tools in every model call."""
    first, second = _calls(a), _calls(b)
    return len(first) == len(second) and all(x.messages == y.messages and x.tools == y.tools
                                             for x, y in zip(first, second))


def compare(received: AssembledPrompt, now: AssembledPrompt,
            now_changes: Sequence[FragmentChange] = ()) -> Comparison:
    """The banner over a replayed turn: how the prompt "as received" came about (exact from its record,
    differing from it, reconstructed, or from a damaged record) and whether the engine rebuilds it the
    same way now. "Identical to what the model received" is said only of an exact record."""
    info = received.replay
    same = same_calls(received, now)
    notes: list[str] = []
    level: Literal["info", "warning", "error"] | None = None
    exact = info is not None and info.exact
    if info is not None and info.kind == "reconstructed" and info.record is None:
        unknown = "; ".join(info.unknowns) if info.unknowns else "nothing"
        if info.record_state == "damaged":
            notes.append(f"Reconstructed — the record of this turn is damaged ({info.record_error}), so what the "
                         f"model received is unknown; unknown: {unknown}.")
        else:
            notes.append(f"Reconstructed — no record of this turn; unknown: {unknown}.")
        level = "info"
    elif info is not None and info.record is not None and not info.record.calls and info.matches:
        notes.append("Recorded before records kept the whole request: the messages are exactly those sent; the "
                     "tools, settings and later model calls are unknown.")
        level = "info"
    elif info is not None and info.record is not None and info.matches and not info.what_if and \
            any(c.partial for c in info.record.calls):
        notes.append(f"Kept from the trace of {info.record.framework or 'the agent framework'}: the messages are "
                     "exactly those sent; the tool definitions and settings of "
                     + ", ".join(f"model call {k + 1}" for k, c in enumerate(info.record.calls) if c.partial)
                     + " are unknown.")
        level = "info"
    elif info is not None and info.kind == "recorded" and not exact and not info.what_if:
        why = "; ".join([*info.differences, *info.unknowns]) or "a message or version it names was changed or deleted since"
        notes.append(f"The rebuild does not match the record: {why}.")
        level = "error"
    framework = info.record.framework if info is not None and info.record is not None else None
    if not same and framework:
        # Our processors never built this turn: "now" is their view of it, not a change since.
        what = change_summary(now_changes) if now_changes else "the messages or model calls differ"
        notes.append(f"{framework} built this turn's prompts; rebuilt now is our memory processors' view of it, "
                     f"which it did not send: {what}.")
        level = level or "info"
    elif not same:
        what = change_summary(now_changes) if now_changes else "the messages or model calls differ"
        notes.append(f"The engine rebuilds this turn differently now: {what}.")
        level = level if level == "error" else "warning"
    if notes:
        text = " ".join(notes)
    elif exact:
        text = "Rebuilt now: identical to what the model received."
    else:
        text = "Rebuilt now: identical to this rebuild."
    return Comparison(same, level, text)


def same_now_text(received: AssembledPrompt) -> str:
    """What the "rebuilt now" diff says when there is nothing to show."""
    info = received.replay
    if info is not None and info.exact:
        return "(rebuilt now: identical to what the model received)"
    return "(rebuilt now: identical to this rebuild; what the model received is not known exactly)"


def prompt_text(prompt: AssembledPrompt) -> str:
    """The request exactly as sent, one block per message, then the tool definitions and the model and
    settings (what the side-by-side view shows)."""
    out: list[str] = []
    for i, m in enumerate(prompt.messages, start=1):
        head = f"── {i} · {m.get('role', '?')}" + (f" · {m['name']}" if m.get("name") else "") + " ──"
        body = m.get("content")
        text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False, indent=1)
        if m.get("tool_calls"):
            text = (text or "") + "\ntool calls: " + json.dumps(m["tool_calls"], ensure_ascii=False)
        if m.get("tool_call_id"):
            text = f"(result of {m['tool_call_id']}) {text or ''}"
        out.append(f"{head}\n{text or ''}")
    if prompt.tools:
        lines = []
        for t in prompt.tools:
            function = t.get("function", {}) if isinstance(t.get("function"), dict) else {}
            lines.append(f"{function.get('name', '?')}: {function.get('description', '')}\n  parameters "
                         + json.dumps(function.get("parameters", {}), ensure_ascii=False, sort_keys=True))
        out.append("── tools ──\n" + "\n".join(lines))
    request = prompt.request or {}
    sent = [f"{k}: {v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}"
            for k, v in request.items() if k not in ("messages", "tools")]
    if sent:
        out.append("── model and settings ──\n" + "\n".join(sent))
    return "\n\n".join(out)


def prompt_text_diff(a: AssembledPrompt, b: AssembledPrompt) -> list[DiffLine]:
    return line_diff(prompt_text(a), prompt_text(b))


# -- facts, recall and tokens ---------------------------------------------------------------------
def _record(prompt: AssembledPrompt) -> TurnRecord | None:
    return prompt.replay.record if prompt.replay is not None else None


def turn_facts(prompt: AssembledPrompt, wm_label: str, om_label: str, call: int = 0) -> list[tuple[str, str]]:
    """Label/value pairs for the facts line; ``wm_label`` / ``om_label`` come from the step read; the
    token counts are model call ``call``'s and say whose they are: our o200k_base estimate, and what the
    server reported."""
    info, record = prompt.replay, _record(prompt)
    kind = info.status if info is not None else "no rebuild"
    calls = info.calls if info is not None else ()
    model = record.model if record is not None and record.model else "not recorded"
    if record is not None and record.endpoint:
        model += f" at {record.endpoint}"
    shown = calls[call] if 0 <= call < len(calls) else None
    tokens = f"{(shown.estimated_tokens if shown is not None else prompt.total_tokens):,} (o200k estimate)"
    reported = shown.usage if shown is not None else None
    if reported:
        tokens += f" · {int(reported.get('prompt_tokens', 0)):,} (server-reported)"
    return [
        ("Rebuild", kind),
        ("Model", model),
        ("Model calls", str(len(calls) or 1)),
        ("Working memory", wm_label),
        ("Observations", om_label),
        (f"Call {call + 1} prompt tokens" if len(calls) > 1 else "Prompt tokens", tokens),
        ("Tools", ", ".join(t.get("function", {}).get("name", "?") for t in prompt.tools) or "none"),
    ]


@dataclass(frozen=True)
class RecallRow:
    rank: int
    message_id: str
    thread_id: str
    vector: float | None
    keyword: float | None
    fused: float
    window: int
    other_thread: bool

    @staticmethod
    def score(value: float | None) -> str:
        return "—" if value is None else f"{value:.3f}"


def recall_rows(prompt: AssembledPrompt, thread_id: str | None) -> list[RecallRow]:
    """The recall hits of the turn with their scores: the record's (what the live turn used), else the
    rebuild's notes."""
    record = _record(prompt)
    hits: Sequence[RecallHitRecord] = record.recall if record is not None else \
        recall_hits(prompt.notes.get("semantic-recall", {}) or {})
    return [RecallRow(h.rank, h.message_id, h.thread_id, h.vector, h.keyword, h.fused, len(h.window_ids),
                      bool(thread_id) and bool(h.thread_id) and h.thread_id != thread_id) for h in hits]


def recall_scored_text(prompt: AssembledPrompt, today: str | None) -> str:
    """Whose scores the Recall tab shows: the embedding model the turn's record names (a record from before
    records kept it: "not recorded"), and, when the index a search would use today (``today``: its model id;
    None when this replay has no recall index) is another model's, that these scores are not what it gives."""
    record = _record(prompt)
    if record is None or not record.recall:
        hits = (prompt.notes.get("semantic-recall", {}) or {}).get("hits") or ()
        return "" if not hits else "Scores from this rebuild's search" + (f" (model {today})." if today else ".")
    if record.recall_model is None:
        said = "Scores as the turn recorded them; the embedding model that scored them was not recorded " \
               "(a record from before Memory Studio kept it)"
        return said + (f". Today's index is {today}'s: a search now may score differently." if today else ".")
    said = f"Scores as the turn recorded them, from embedding model {record.recall_model}"
    if today is None or today == record.recall_model:
        return said + (" (today's index is the same model)." if today else ".")
    return said + (f". Today's index is another model's ({today}): a search now scores with it, so these scores "
                   "are not comparable with today's.")


@dataclass(frozen=True)
class TokenRow:
    section: str
    label: str
    at_turn: int
    now: int | None


def token_rows(received: AssembledPrompt, now: AssembledPrompt | None = None) -> list[TokenRow]:
    """Tokens per section at the turn (the record's counts when there is one) and rebuilt now."""
    record = _record(received)
    then = dict(record.tokens) if record is not None and record.tokens else token_sections(received)
    later = token_sections(now) if now is not None else {}
    rows = [TokenRow(k, label, int(then.get(k, 0)), later.get(k) if now is not None else None)
            for k, label in TOKEN_SECTIONS]
    # The total also counts the tokens that prime the reply; a row of its own keeps the column's sum honest.
    rest_then = int(then.get("total", received.total_tokens)) - sum(r.at_turn for r in rows)
    rest_now = int(later.get("total", 0)) - sum(int(later.get(k, 0)) for k, _ in TOKEN_SECTIONS) if later else None
    if rest_then or rest_now:
        rows.append(TokenRow("reply", "Reply primer", rest_then, rest_now))
    rows.append(TokenRow("total", "Total (o200k estimate)", int(then.get("total", received.total_tokens)),
                         later.get("total") if now is not None else None))
    return rows


# -- what-if --------------------------------------------------------------------------------------
WorkingMemoryChoice = Literal["as-recorded", "on", "off", "agent-may-not-write"]


@dataclass(frozen=True)
class WhatIfOptions:
    """What the user changes for a what-if; None everywhere means "as it was at each turn"."""

    last_messages: int | None = None  # 0: history off
    token_budget: int | None = None
    recall: bool | None = None
    top_k: int | None = None
    threshold: float | None = None
    message_range: int | None = None
    scope: Literal["resource", "thread"] | None = None
    working_memory: WorkingMemoryChoice = "as-recorded"
    om_message_tokens: int | None = None
    om_observation_tokens: int | None = None

    def overrides(self) -> dict[str, Any]:
        """The option dict merged over each turn's own options (``assemble(as_of=, options=)``)."""
        out: dict[str, Any] = {}
        if self.last_messages is not None:
            out["last_messages"] = self.last_messages if self.last_messages > 0 else False
        if self.token_budget is not None:
            out["message_history"] = {"max_tokens": self.token_budget}
        recall: dict[str, Any] = {}
        if self.recall is not None:
            recall["enabled"] = self.recall
        for key, value in (("top_k", self.top_k), ("threshold", self.threshold),
                           ("message_range", self.message_range), ("scope", self.scope)):
            if value is not None:
                recall[key] = value
        if recall:
            out["semantic_recall"] = recall
        if self.working_memory == "on":
            out["working_memory"] = {"enabled": True, "agent_managed": True}
        elif self.working_memory == "off":
            out["working_memory"] = {"enabled": False}
        elif self.working_memory == "agent-may-not-write":
            out["working_memory"] = {"enabled": True, "agent_managed": False}
        om: dict[str, Any] = {}
        if self.om_message_tokens is not None:
            om["message_tokens"] = self.om_message_tokens
        if self.om_observation_tokens is not None:
            om["observation_tokens"] = self.om_observation_tokens
        if om:
            out["observational_memory"] = om
        return out

    def describe(self) -> str:
        changes = self.overrides()
        return json.dumps(changes, sort_keys=True) if changes else "no change"


@dataclass(frozen=True)
class WhatIfTableRow:
    number: int  # 1-based turn number
    input_message_id: str
    input_preview: str
    tokens_real: int
    tokens_what_if: int
    entered: int
    left: int
    changed: int
    reasons: str
    hand_edited: bool = False  # a change of its prompt is a hand edit since (``HAND_EDIT_REASONS``)

    @property
    def cause(self) -> str:
        """Against the memory as it is now: whether a hand edit is among what changed it, or only the thread."""
        return CAUSE_HAND if self.hand_edited else CAUSE_THREAD

    @property
    def delta(self) -> int:
        return self.tokens_what_if - self.tokens_real

    @property
    def delta_label(self) -> str:
        return f"{self.delta:+,}" if self.delta else "0"


def what_if_rows(rows: Sequence[Any], turns: Sequence[Turn]) -> list[WhatIfTableRow]:
    """Table rows from ``memory.what_if``'s ``WhatIfRow`` items (in turn order)."""
    number = {t.input_message_id: i + 1 for i, t in enumerate(turns)}
    text = {t.input_message_id: t.input_text for t in turns}
    out = []
    for r in rows:
        reasons: dict[str, int] = {}
        for c in r.changes:
            reasons[c.reason] = reasons.get(c.reason, 0) + 1
        out.append(WhatIfTableRow(
            number.get(r.input_message_id, 0), r.input_message_id, text_preview(text.get(r.input_message_id, ""), 80),
            int(r.tokens_real), int(r.tokens_what_if), int(r.entered), int(r.left),
            sum(c.kind == "changed" for c in r.changes),
            ", ".join(reason_label(k) for k in reasons), any(k in HAND_EDIT_REASONS for k in reasons)))
    return out


def what_if_summary(rows: Sequence[WhatIfTableRow], total: int, cancelled: bool) -> str:
    if not rows:
        return "Cancelled before the first turn." if cancelled else "No turns."
    real = sum(r.tokens_real for r in rows)
    alt = sum(r.tokens_what_if for r in rows)
    affected = sum(1 for r in rows if r.entered or r.left or r.changed or r.delta)
    head = f"Cancelled after {len(rows)} of {total} turns. " if cancelled else f"{len(rows)} turns. "
    return (head + f"{affected} prompt(s) would differ; tokens {real:,} → {alt:,} ({alt - real:+,}).")


# -- with the memory as it is now ("today") ---------------------------------------------------------
TODAY_WHAT = ("working memory as it is today, messages as stored now (edits included), recall searched again over "
              "today's index, today's configuration")


def change_lines(changes: Sequence[FragmentChange], limit: int = 6) -> list[str]:
    """One line per fragment that differs: its mark, source, stored message and the reason, in words."""
    out = []
    for c in changes[:limit]:
        stored = f" {short_id(c.stored_ids[0])}" if c.stored_ids else ""
        out.append(f"{CHANGE_MARKS.get(c.kind, c.kind)} {c.source}{stored}: {reason_label(c.reason)}")
    if len(changes) > limit:
        out.append(f"… and {len(changes) - limit} more (the What-If tab lists them all)")
    return out


def today_note(real: AssembledPrompt, today: AssembledPrompt, changes: Sequence[FragmentChange]) -> str:
    """What Re-Run says of a prompt rebuilt with the memory as it is now: that it is a reconstruction
    from today's data, not what the model received, and which fragments differ from what it received, why."""
    head = f"A reconstruction from today's data ({TODAY_WHAT}), not the request the model received."
    if not changes and same_calls(real, today):
        return head + " It holds the same messages as what the model received: nothing since changes this turn."
    lines = change_lines(changes)
    count = f"{len(changes)} fragment(s) differ" if changes else "The model calls differ"
    return head + f" {count} from what the model received ({real.total_tokens:,} → {today.total_tokens:,} tokens):\n" + \
        "\n".join(lines)


def today_rows(rows: Sequence[WhatIfTableRow], *, hand_only: bool = False) -> list[WhatIfTableRow]:
    """The what-if rows against today's memory worth listing: the turns whose prompt differs now (``hand_only``:
    those among them a hand edit since changes)."""
    return [r for r in rows if (r.entered or r.left or r.changed or r.delta) and (r.hand_edited or not hand_only)]


def _numbers(rows: Sequence[WhatIfTableRow]) -> str:
    return ", ".join(str(r.number) for r in rows[:12]) + (" …" if len(rows) > 12 else "")


def today_summary(rows: Sequence[WhatIfTableRow], total: int, cancelled: bool, *, hand_only: bool = False) -> str:
    """The What-If summary against today's memory (``rows``: every turn rebuilt, differing or not): how many
    differ, how many of those a hand edit since changes and how many only the thread's own course, and which
    are listed (``hand_only``: the list shows the hand-edited ones alone)."""
    if not rows:
        return "Cancelled before the first turn." if cancelled else "No turns."
    differing = today_rows(rows)
    head = f"Cancelled after {len(rows)} of {total} turns. " if cancelled else ""
    if not differing:
        return head + (f"With the memory as it is now, none of {len(rows)} turns' prompts differs from what its "
                       "model received.")
    reasons = [label for label in REASON_LABELS.values() if any(label in r.reasons for r in differing)]
    text = (f"With the memory as it is now, {len(differing)} of {len(rows)} turns' prompts differ from what their "
            f"model received (turns {_numbers(differing)}): {'; '.join(reasons)}. ")
    hand = [r for r in differing if r.hand_edited]
    thread = len(differing) - len(hand)
    only_thread = (f"{thread} only by what the thread did since (its agent's own updates, new messages)"
                   if thread else "")
    if not hand:
        text += "None by a hand edit since: they differ only by what the thread did since (its agent's own " \
                "updates, new messages). "
        text += "Clear \u201cOnly hand edits\u201d to list them." if hand_only else "Open one to see what changed."
    elif not thread:
        text += "All by a hand edit since. Open one to see what changed, or re-run it."
    elif hand_only:
        text += (f"{len(hand)} by a hand edit since (turns {_numbers(hand)}), listed; {only_thread}: clear "
                 "\u201cOnly hand edits\u201d to list them too.")
    else:
        text += (f"{len(hand)} by a hand edit since (turns {_numbers(hand)}), {only_thread}: the Cause column says "
                 "which. Open one to see what changed, or re-run it.")
    return head + text


# -- re-run ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RerunComparison:
    diff: list[DiffLine]
    figures: list[tuple[str, str, str]]  # (what, original, re-run)
    differences: list[tuple[str, str, str]]  # (what, original, re-run): the request outside its messages


def _count(value: Any) -> str:
    return f"{int(value):,}" if isinstance(value, int) else "not reported"


def rerun_comparison(stored_text: str, stored_estimate: int | None, result: Any,
                     stored_model: str | None = None) -> RerunComparison:
    """The stored reply beside a ``RerunResult``: a line diff, figures (each token count says whose it
    is: the server's or our o200k_base estimate) and what differs in the request."""
    original = getattr(result, "original_usage", None) or {}
    usage = getattr(result, "usage", None) or {}
    est = " (no usage reported: estimated)" if getattr(result, "usage_estimated", False) else ""
    # Both sides as ``provider/model@base URL`` (``RerunResult.model`` names its endpoint), so the same
    # server does not read as two.
    original_endpoint = getattr(result, "original_endpoint", None)
    if stored_model and original_endpoint and "@" not in stored_model:
        stored_model = f"{stored_model}@{original_endpoint}"
    figures = [
        ("Model", stored_model or "not recorded", str(result.model or "?")),
        ("Prompt tokens, server-reported", _count(original.get("prompt_tokens")),
         _count(usage.get("prompt_tokens")) if usage else f"{result.tokens_in:,}{est}"),
        ("Prompt tokens, our o200k estimate", f"{stored_estimate:,}" if stored_estimate is not None else "—",
         f"{int(getattr(result, 'estimated_tokens', 0) or 0):,}"),
        ("Reply tokens, server-reported", _count(original.get("completion_tokens")),
         _count(usage.get("completion_tokens")) if usage else f"{result.tokens_out:,}{est}"),
        ("Latency", "—", f"{result.latency_ms:,.0f} ms"),
    ]
    differences = list(getattr(result, "differences", ()) or ())
    return RerunComparison(line_diff(stored_text, result.text), figures, differences)


# The settings a re-run may change, each edited as its JSON value ("" leaves it out of the request).
RERUN_SETTINGS = ("temperature", "max_tokens", "top_p", "top_k", "seed", "stop", "frequency_penalty",
                  "presence_penalty", "response_format")


def setting_fields(request: Mapping[str, Any] | None) -> dict[str, str]:
    """The re-run panel's fields filled with what a call sent (``""``: not sent)."""
    body = request or {}
    return {k: ("" if body.get(k) is None else json.dumps(body[k], ensure_ascii=False)) for k in RERUN_SETTINGS}


def settings_from_fields(fields: Mapping[str, str]) -> dict[str, Any]:
    """The settings the re-run panel's fields say to send; raises ``ValueError`` naming a field that is
    not JSON (a bare word in "stop" is taken as that one string)."""
    out: dict[str, Any] = {}
    for key in RERUN_SETTINGS:
        text = (fields.get(key) or "").strip()
        if not text:
            continue
        try:
            out[key] = json.loads(text)
        except ValueError:
            if key != "stop":
                raise ValueError(f"{key.replace('_', ' ')}: {text!r} is not a value (write a number, a list "
                                 "or a JSON object, or leave it empty to send none)") from None
            out[key] = [text]
    return out


def changed_settings(request: Mapping[str, Any] | None, fields: Mapping[str, str]) -> list[str]:
    """The settings whose field differs from what the call sent (to mark them in the panel)."""
    sent = setting_fields(request)
    return [k for k in RERUN_SETTINGS if (fields.get(k) or "").strip() != sent[k]]


def tool_choice_items(request: Mapping[str, Any] | None) -> list[tuple[str, Any]]:
    """The re-run panel's tool choices: what the call sent first, then the others (a named tool among them)."""
    body = request or {}
    sent = body.get("tool_choice")
    items: list[tuple[str, Any]] = [(f"as sent ({_choice_label(sent)})", sent)]
    for choice in ("auto", "none", "required"):
        if choice != sent:
            items.append((choice, choice))
    for tool in body.get("tools") or ():
        name = (tool.get("function") or {}).get("name")
        wire = {"type": "function", "function": {"name": name}}
        if name and wire != sent:
            items.append((f"call {name}", wire))
    return items


def _choice_label(choice: Any) -> str:
    if choice is None:
        return "none given"
    if isinstance(choice, dict):
        return f"call {(choice.get('function') or {}).get('name')}"
    return str(choice)


def reply_text(messages: Sequence[Any]) -> str:
    """The stored reply of a turn as text (assistant text; tool calls named)."""
    parts: list[str] = []
    for m in messages:
        if getattr(m, "role", "") == "user":
            continue
        text = getattr(m, "text", "") or ""
        calls = [p.get("toolInvocation", {}).get("toolName") for p in getattr(m, "parts", []) or []
                 if isinstance(p, Mapping) and p.get("type") == "tool-invocation"]
        if calls:
            parts.append("[tool calls: " + ", ".join(str(c) for c in calls) + "]")
        if text:
            parts.append(text)
    return "\n".join(parts)


def default_fork_title(thread_title: str | None, thread_id: str, number: int) -> str:
    """The name the fork dialog suggests: the stored title (or id) as every label shows it (``shown_title``).
    The field draws what it holds, and what it holds is what the fork is named, so a right-to-left override
    or a line break any program stored in the source's title is suggested as its escape, never reordering or
    cutting the field, nor copied unseen into the new title."""
    return f"{shown_title(thread_title or thread_id)} — fork at turn {number}"


def fork_source(metadata: Mapping[str, Any] | None) -> str | None:
    """"Forked from thread X at message Y" for a thread ``fork_thread`` made (None for any other)."""
    fork = (metadata or {}).get("fork") if isinstance(metadata, Mapping) else None
    if not isinstance(fork, Mapping) or not fork.get("sourceThreadId"):
        return None
    wm = {"as_of": "working memory as it was then", "current": "working memory as it was when forked"}.get(
        str(fork.get("workingMemory")), "")
    when = str(fork.get("forkedAt") or "")[:19].replace("T", " ")
    return (f"Forked from thread {fork['sourceThreadId']} at message {fork.get('atMessageId', '?')}"
            + (f" on {when}" if when else "") + (f"; {wm}" if wm else ""))


# -- the context table's columns ------------------------------------------------------------------------
# Each column's widest usual text (the width it gets when the pane has room for it), and the share of
# the width left after the narrow columns that each wider one takes when it has not. The Text column,
# the last, stretches into whatever remains. The source is never cut below its usual name (the widest one
# of the rows shown: ``TurnView`` raises the floor to it), the reason and the text keep a few words (at a
# 1,440 px window they read "mess…", "working …" and "You ar…"): Role gives way first (the source's
# tooltip says the role), then Stored (the fragment's details below link its stored messages).
STEP_SAMPLES = {"#": "00", "Change": "+ entered", "Role": "assistant", "Stored": "…00000000", "Tokens": "00,000"}
STEP_SHARES = {"Source": 0.45, "Why": 0.55}  # (the reason reads whole before the source gets spare width)
STEP_FLOORS = {"Source": "message-history", "Why": "new message"}
# ... and the most they take: beyond it the spare width goes to the fragment's text (at a 2,560 px window
# the two shares gave Source and Why ~500 px each, mostly blank, and the text ~150 px, "You are a st…")
STEP_CAPS = {"Source": "observational-memory", "Why": "a stored message was deleted since"}
# Where even the floors do not fit (a 900 px window's ~530 px table beside "observational-memory"), the reason
# gives way first, down to the widest of its rows' shortest forms (``REASON_SHORT``; ``TurnView`` sets it from the
# rows shown), so the source stays whole and every reason reads in a short form: it read "observed by ob…".
STEP_OPTIONAL = ("Role", "Stored")
STEP_TEXT_LEAST = "You are a"  # the Text column's least
STEP_TEXT_SHORT = "You are"  # ... where the reason's short form and the whole source need a few px more (900 px)
# What the reason and the text get before Role and Stored are shown: at a 1,440 px window the stored ids (said
# again under the table) took 89 px while the reason read "working memory c…", and the role 70 px while the text
# read "Hi! I'A…" (the source's tooltip says the role, the fragment's details below link its stored messages).
STEP_WHY_ROOM = "observed by observational memory"
STEP_TEXT_ROOM = "Hi! I'm your assistant. Today"
STEP_TEXT_ROOM_SHARE = 0.25  # ... or a quarter of the table, whichever is wider
STEP_STACKED_ROOMY = ("Stored",)  # stacked (the table the view's width), what waits for that room: not the role
