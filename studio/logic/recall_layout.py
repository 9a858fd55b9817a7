"""How the recall playground lays out one search: list rows, status words, the why-not text.

Pure functions over ``core.recall.explain`` records; no Qt, no I/O. Colours read on light and dark
themes, and every status has a word as well as a colour.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any, Collection, Literal, Mapping

from core.recall.explain import LISTS, Candidate, Explanation, Inspection, ListName
from core.recall.explain import score_text as exact_score
from studio.logic.thread_labels import shown_title
from studio.selection import Selection

Scope = Literal["resource", "thread"]

HIT_COLOUR = "#3fb27f"
CUT_COLOUR = "#8a8f98"  # readable on both themes; cut rows are dimmed, not hidden
WARN_COLOUR = "#d9a441"
STATUS_WORDS = {
    "hit": "hit",
    "below-threshold": "below threshold",
    "outside-top-k": "outside top-k",
    "deleted": "deleted",
    "edited": "edited since indexed",
}
LIST_TITLES: dict[ListName, str] = {
    "vector": "Vector (cosine similarity)",
    "keyword": "Keyword (BM25)",
    "hybrid": "Hybrid (fused, re-ranked)",
}


def list_title(name: ListName, scoring: str = "BM25") -> str:
    """A list's heading; the keyword list's names what its scores are (``explain.keyword_scoring``:
    BM25 on libSQL, ts_rank on Postgres)."""
    return f"Keyword ({scoring})" if name == "keyword" else LIST_TITLES[name]
VERDICT_TITLES = {
    "hit": "Returned: a hit",
    "neighbour": "Returned as a neighbour of a hit",
    "below-threshold": "Excluded: below the threshold",
    "outside-top-k": "Excluded: outside the top-k",
    "not-a-candidate": "Excluded: never a candidate",
    "no-match": "Not found by this query",
    "deleted": "Excluded: deleted",
    "edited": "Excluded from keyword results: edited since indexed",
    "other-resource": "Excluded: another resource",
    "other-thread": "Excluded: another thread",
    "role-not-indexed": "Excluded: this role is never indexed",
    "no-text": "Excluded: no text",
    "not-indexed": "Excluded: not indexed",
    "wrong-model": "Excluded: embedded by another model",
    "unreadable": "Excluded: its stored row cannot be read",
}
UNREADABLE_VERDICT = "unreadable"
UNREADABLE_STATUS = "unreadable row"


def unreadable_text(error: str) -> str:
    """What a list row and the why-not answer show of a stored row that does not parse."""
    return f"(its stored row cannot be read: {error})"


def unreadable_summary(message_id: str, error: str) -> str:
    return (f"Message {message_id} is stored, but its row cannot be read ({error.rstrip('.')}). Recall leaves it out of "
            "every search, as it does a deleted message. Repair or delete the row (the Messages view shows it "
            "in its place), then search again.")


def unreadable_note(ids: list[str]) -> str:
    n = len(ids)
    shown = ", ".join(ids[:3]) + (f" and {n - 3} more" if n > 3 else "")
    return (f"{n} candidate{'s' if n != 1 else ''} counted as deleted {'are' if n != 1 else 'is'} stored, but "
            f"{'their rows' if n != 1 else 'its row'} cannot be read ({shown}): recall leaves "
            f"{'them' if n != 1 else 'it'} out; repair or delete {'those rows' if n != 1 else 'that row'}")


@dataclass(frozen=True)
class RecallRequest:
    """One search as the controls describe it."""

    query: str
    scope: Scope
    resource_id: str | None
    thread_id: str | None
    top_k: int = 4
    threshold: float | None = None
    before: int = 1
    after: int = 1

    def search_scope(self) -> tuple[str | None, str | None]:
        """(resource_id, thread_id) as ``inspect_search`` takes them."""
        if self.scope == "resource":
            return self.resource_id, None
        return None, self.thread_id


@dataclass(frozen=True)
class RecallStart:
    """Where the controls start for a thread: the recall options its agent registered (what the agent
    really recalls), or the engine's defaults when no agent applies; ``label`` says which."""

    top_k: int
    threshold: float | None
    before: int
    after: int
    scope: Scope
    label: str
    mode: str = "hybrid"  # the agent's recall mode: which list its turns take the hits of


def recall_start(recall: Any, agent_name: str | None, enabled: bool = True) -> RecallStart:
    """``recall``: the agent's ``SemanticRecallOptions`` (None: no agent applies to the thread)."""
    from core.options import SemanticRecallOptions

    opts = recall if recall is not None else SemanticRecallOptions()
    rng = opts.message_range
    bits = [f"top-k {opts.top_k}", f"range {rng.before}/{rng.after}", f"scope {opts.scope}"]
    if opts.threshold is not None:
        bits.append(f"threshold {opts.threshold:.2f}")
    if opts.mode != "hybrid":
        # Its turns take one list's hits, while the verdict of "why not?" follows the hybrid list: said here,
        # so a "Returned: a hit" is not read as what this agent recalls (its list's row below says that).
        bits.append(f"mode {opts.mode}: its turns take the {LIST_TITLES[opts.mode].split(' (')[0]} list's hits; "
                    "“why not?” judges the hybrid list (its row for that list says what the agent gets)")
    if agent_name is None:
        label = "no agent applies to this thread: engine defaults (" + ", ".join(bits) + ")"
    elif not enabled:
        label = f"agent '{agent_name}' has recall off; showing what its settings would find (" + ", ".join(bits) + ")"
    else:
        label = f"agent '{agent_name}': " + ", ".join(bits)
    return RecallStart(opts.top_k, opts.threshold, rng.before, rng.after, opts.scope, label, opts.mode)


def scope_problem(scope: Scope, selection: Selection, resource_id: str | None) -> str | None:
    """What is missing to search in ``scope`` for this selection, or None."""
    if scope == "thread" and selection.thread_id is None:
        return "Pick a thread in the tree to search it (or switch the scope to resource)."
    if scope == "resource" and resource_id is None:
        return "Pick a resource or one of its threads in the tree to search its memory."
    return None


def index_problem(*, migrated: bool, has_vectors: bool, model_id: str, location: str) -> str | None:
    """One clear way forward when the database cannot answer a recall search; None when it can."""
    db = f" --db {location}" if location and location != ":memory:" else ""
    if not migrated:
        return ("This database has no recall index (it holds Mastra's tables only). Run "
                f"`memory-studio migrate{db}` once — it adds the recall tables and leaves Mastra's data as it is — "
                f"then `memory-studio reindex{db}` to embed the messages, and reopen it here.")
    if not has_vectors:
        return (f"No message has been embedded with {model_id} in this database yet. Run "
                f"`memory-studio reindex{db}` to embed them; keyword results below work already.")
    return None


NEAR_ZERO_CELL = "≈0"


def score_text(value: float | None, digits: int = 3) -> str:
    """A score in a list's cell: ``digits`` decimals, "≈0" for one those would show as 0 (a BM25 of
    0.0000012 read "0.00", as if the message had no score), "—" for none. Tooltips and the why-not
    answer give such a score its digits (``exact_score``)."""
    if value is None:
        return "—"
    if value != 0 and abs(value) < 10 ** -digits / 2:
        return NEAR_ZERO_CELL
    return f"{value:.{digits}f}"


def near_zero_note(ins: Inspection, name: ListName) -> str:
    """Said under a list with a BM25 shown as "≈0" (never on Postgres, whose ts_rank has no such floor)."""
    if ins.keyword_scoring != "BM25" or name != "keyword":
        return ""
    tiny = any(c.keyword_score is not None and 0 < c.keyword_score < 0.005 for c in ins.lists.get(name, []))
    return (" · BM25 ≈0: words in half or more of the indexed messages, weighed at almost nothing "
            "(a small database)" if tiny else "")


def ranked_score(score: float | None, rank: int | None, digits: int = 3) -> str:
    """A raw score with its rank in its own list ("0.430 #2"), or a dash when the list lacks it."""
    if rank is None:
        return "—" if score is None else f"{score:.{digits}f}"
    return f"{score_text(score, digits)} #{rank}"


def rank_text(value: int | None) -> str:
    return "—" if value is None else str(value)


def status_text(c: Candidate, unreadable: Collection[str] = ()) -> str:
    """The status word; a candidate the search took for deleted whose row is stored but unreadable
    (``unreadable``: such ids) says so."""
    if c.status == "deleted" and c.message_id in unreadable:
        return UNREADABLE_STATUS
    return STATUS_WORDS.get(c.status, c.status)


def row_colour(c: Candidate) -> str | None:
    """Foreground of a row: hits stay the theme's text colour, cut rows are dimmed."""
    return None if c.status == "hit" else CUT_COLOUR


def status_colour(c: Candidate) -> str:
    return HIT_COLOUR if c.status == "hit" else WARN_COLOUR if c.status in ("deleted", "edited") else CUT_COLOUR


def preview(ins: Inspection, message_id: str, limit: int = 160) -> str:
    shown = ins.messages.get(message_id)
    if shown is None:
        return "(deleted)"
    text = " ".join(shown.text.split())
    body = text if len(text) <= limit else text[: limit - 1] + "…"
    return f"{shown.role}: {body}"


def thread_label(ins: Inspection, message_id: str) -> str:
    shown = ins.messages.get(message_id)
    return shown_title(shown.thread_id or "") if shown is not None else ""


def fused_text(c: Candidate) -> str:
    """A hybrid row's fused score. A message deleted since it was indexed was never fused: the score it
    carries is its raw cosine or BM25 from the list that found it (a BM25 of 4 read as a fused score
    above every hit), so its Fused cell is a dash; so is one left out as edited since indexed."""
    return "—" if c.status in ("deleted", "edited") else score_text(c.score)


def fused_before_text(c: Candidate) -> str:
    """A hybrid candidate's fused score before the re-rank, and its own lists' part when its thread's
    share changed it (its neighbours' scores and its thread's best other match: ``Combined.propagate``,
    ``Combined.thread_prior``)."""
    if not c.thread_moved:
        return score_text(c.combined)
    return f"{score_text(c.combined)} ({score_text(c.own)} from its own lists, the rest its thread's share)"


def scores_tooltip(c: Candidate, keyword_scoring: str) -> str:
    """Both raw scores with their ranks, for a list too narrow to show every score column."""
    def exact(score: float | None, rank: int | None, digits: int = 3) -> str:
        shown = "—" if score is None else exact_score(score, digits)
        return shown if rank is None else f"{shown} #{rank}"

    return (f"cosine {exact(c.vector_score, c.vector_rank)} · "
            f"{keyword_scoring} {exact(c.keyword_score, c.keyword_rank, 2)}")


def _exact(value: float | None) -> str:
    return "—" if value is None else exact_score(value)


def candidate_tooltip(ins: Inspection, c: Candidate, unreadable: Collection[str] = ()) -> str:
    """A row's Message tooltip; its status as the Status cell says it (``unreadable``: ``status_text``)."""
    lines = [f"{shown_title(c.message_id)} · thread {thread_label(ins, c.message_id) or '?'}",
             f"cosine {_exact(c.vector_score)} · {ins.keyword_scoring} {_exact(c.keyword_score)}"]
    if c.combined is not None:
        lines.append(f"fused {fused_before_text(c)} before the re-rank, {score_text(c.score)} after "
                     "(next message in the thread, dates and speakers named in the query)")
    lines.append(f"status: {status_text(c, unreadable)}")
    shown = ins.messages.get(c.message_id)
    if shown is not None:
        lines.append("")
        lines.append(shown.text if len(shown.text) <= 600 else shown.text[:599] + "…")  # (a cut is marked)
    return "\n".join(lines)


def tab_title(name: ListName, ins: Inspection | None) -> str:
    """A list's tab when the lists are shown one at a time: "Hybrid · 3 hits" (its name alone before a search)."""
    short = LIST_TITLES[name].split(" (")[0]
    if ins is None:
        return short
    hits = len(ins.hits(name))
    return f"{short} · {hits} hit" + ("" if hits == 1 else "s")


def list_caption(ins: Inspection | None, name: ListName) -> str:
    """The line under a list's title: hits and cuts, or why it is empty (never a silent empty list)."""
    if ins is None:
        return ""
    reason = ins.empty_reason(name)
    summary = ins.summary(name)
    note = near_zero_note(ins, name)
    if not reason:
        return summary + note
    # The reason may begin with what the summary already counts ("12 results below the threshold
    # 0.99"): said once, followed by the rest of the reason.
    said = next((part for part in summary.split(" · ") if reason.startswith(part)), None)
    if said is not None:
        return f"{summary} {reason[len(said):].lstrip()}".rstrip() + note
    return f"{summary} — {reason}{note}"


def window_of(ins: Inspection, message_id: str) -> list[tuple[str, str]]:
    """(mark, text) lines of the prompt window a hybrid hit brings in: its neighbours and itself."""
    for w in ins.windows:
        if w.hit_id == message_id:
            return [("hit" if mid == message_id else "neighbour", preview(ins, mid, 400)) for mid in w.message_ids]
    return []


def explanation_html(e: Explanation, ins: Inspection) -> str:
    """The why-not answer: a verdict line, the message, then one row per list."""
    esc = html.escape
    title = VERDICT_TITLES.get(e.verdict, e.verdict)
    colour = HIT_COLOUR if e.verdict in ("hit", "neighbour") else WARN_COLOUR
    out = [f"<p><b style='color:{colour}'>{esc(title)}</b><br>{esc(e.summary)}</p>"]
    if e.message is not None:
        text = e.message.text if len(e.message.text) <= 500 else e.message.text[:499] + "…"
        out.append(f"<p><code>{esc(shown_title(e.message_id))}</code> · {esc(e.message.role)} · thread "
                   f"{esc(shown_title(e.message.thread_id or '?'))}<br><i>{esc(text)}</i></p>")
    if e.placements:
        out.append("<table cellspacing='0' cellpadding='3'>"
                   "<tr><th align='left'>List</th><th align='right'>Rank</th><th align='right'>Score</th>"
                   "<th align='left'>Why</th></tr>")
        for name in LISTS:
            p = e.placements.get(name)
            if p is None:
                continue
            rank = f"{p.rank} of {p.ranked}" if p.rank is not None else f"— of {p.ranked}"
            out.append(f"<tr><td>{esc(name)}</td><td align='right'>{esc(rank)}</td>"
                       f"<td align='right'>{esc(_exact(p.score))}</td><td>{esc(p.why)}</td></tr>")
        out.append("</table>")
    if e.facts:
        out.append("<p style='color:" + CUT_COLOUR + "'>" + esc(" · ".join(e.facts)) + "</p>")
    window = window_of(ins, e.message_id)
    if window:
        out.append("<p><b>What recall adds to the prompt for this hit</b> (range "
                   f"{ins.before} before, {ins.after} after):</p><ul>")
        out.extend(f"<li><b>{esc(mark)}</b> {esc(text)}</li>" for mark, text in window)
        out.append("</ul>")
    return "".join(out)


def indexed_by_text(counts: Mapping[str | None, int], searched_with: str,
                    pieces: Mapping[str, int] | None = None) -> str:
    """Which model indexed what: "index: 2,431 vectors from e5 (multilingual-e5-small-q4@1571fc98), searched;
    120 from use (…), not searched: `memory-studio reindex --model NAME` replaces them". ``pieces``:
    messages with piece vectors per model (``core.recall.pieces``), said after that model's vectors."""
    from core.embedding import local_model_of

    parts = []
    for model_id, n in sorted(counts.items(), key=lambda kv: (kv[0] != searched_with, -kv[1], kv[0] or "")):
        if n <= 0:
            continue
        local = local_model_of(model_id)
        name = "an unknown model (written by Mastra)" if model_id is None else (
            f"{local.name} ({model_id})" if local is not None else model_id)
        state = "searched" if model_id in (searched_with, None) else "not searched"
        with_pieces = (pieces or {}).get(model_id or "", 0)
        extra = (f" ({with_pieces:,} long message{'s' if with_pieces != 1 else ''} also as piece vectors)"
                 if with_pieces > 0 else "")
        parts.append(f"{n:,} vectors from {name}{extra}, {state}")
    if not parts:
        return "index: no vectors yet"
    tail = ("; `memory-studio reindex --model NAME` re-embeds with one model and drops the others"
            if any(m not in (searched_with, None) for m, n in counts.items() if n > 0) else "")
    return "index: " + "; ".join(parts) + tail


def search_summary(ins: Inspection) -> str:
    """The header line: scope, model, vectors searched and how long the search took."""
    took = ins.timings.get("search")
    timing = f" · {took:.0f} ms (+{ins.timings.get('embed', 0.0):.0f} ms embedding)" if took is not None else ""
    terms = f" · words: {', '.join(ins.terms)}" if ins.terms else ""
    dropped = f" (dropped as very common: {', '.join(ins.dropped_terms)})" if ins.dropped_terms else ""
    return f"{ins.scope} · {ins.vectors_in_scope:,} vectors ({ins.model_id}){terms}{dropped}{timing}"
