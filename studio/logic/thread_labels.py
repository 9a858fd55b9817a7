"""How the thread tree names a thread (no Qt): the one rule for telling similar titles apart.

Titles are often alike: an agent's generated titles, or a user's series ("Weekly sync 2026-03-02",
"Weekly sync 2026-03-09"; "Trip to Lisbon, day 1", "…, day 2"). Cut at the right, as Qt cuts a cell
by default, they all read "Weekly sync 2026-…" in a narrow tree, and only the tooltip told them apart.
Two things make them distinguishable:

* the tree cuts a long title in the middle (``Qt.ElideMiddle``), so its start and its end (where a
  series puts the number or the date) both stay on screen;
* a thread whose title does not name it (none at all, or the same title as another thread of its
  resource) gets its id after the title, shortened as everywhere else (``short_ids.short_id``). A
  thread with a title of its own does not: an id is noise to whoever wrote the title. Ids of one
  resource often share a head ("customer-029-6ea9ab1b-t2", "…-t5"; "thread-2026-03-"): that shared
  head, up to its last separator, is left out ("Standup · …t5"), since the head alone ("customer-0…")
  named every sibling alike (``shared_id_prefix``).

A resource is shown by its id, except a delegation's (``delegation:alice:helper``, where Alice's sub-agent
``helper`` keeps its memory of her turns: ``core.scopes.delegation_resource``): it reads
"alice → helper (delegation)" (``resource_label``), and its tooltip says what it is (``delegation_note``),
so it does not look like a user of its own beside ``alice``. The id stays what is stored and filtered on.
A resource id can be any text, "alice → helper (delegation)" too, so the words alone did not tell that
resource from Alice's delegation: the tree draws a delegation's row in italics, not bold as every other
resource (``is_delegation``), which no id can do. A delegation Mastra wrote (``<resource>-<agent>``, which a
user's own id can equal) is labelled so only where the data proves it (``known``: ``Delegations``, loaded with
the tree by ``core.delegation_results.mastra_delegations``), never from the id's shape.

The same ``resource_label`` names the resource in every pane's header, the stored id on hover (``header_tip``);
an untitled delegation thread is titled by its delegation (``header_title``). In the narrow tree a delegation's
label is fitted to its cell (``fit_resource_label``) so who delegated and to which agent stay on screen.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import datetime
from types import MappingProxyType
from typing import Callable, Iterable, Mapping

from core.scopes import DELEGATION_PREFIX, delegation_parent
from studio.logic.dates import format_datetime
from studio.logic.short_ids import short_id

UNTITLED = "(untitled)"
SEPARATOR = " · "
_ID_SEPARATORS = re.compile(r"[-_:./]")


# Bidirectional embeddings, overrides and isolates (U+202A–U+202E, U+2066–U+2069): invisible, they reorder the
# text after them, so "\u202eevil title" is drawn "eltit live". Marks (U+200E/U+200F) only nudge neutral
# characters and stay; right-to-left scripts need none of these to be drawn in their order.
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def shown_title(title: str) -> str:
    """A stored title as the Studio writes it on one line: a bidirectional control and a control character
    (a line break, a tab, an escape) written as its escape (``\\u202e``, ``\\n``), so what is drawn is what
    is stored, in its order. Anything else, emoji joiners and right-to-left scripts included, is unchanged.
    The same for any other stored short text the Studio shows as a label (a thread's, resource's or message's
    id, an agent's name): whatever program wrote it, none of it reorders or breaks the line it is drawn in.
    Prose (a message's text, an observation) is drawn as stored: such controls may be meant there."""
    if not any(c in _BIDI_CONTROLS or c < " " or c == "\x7f" for c in title):
        return title
    named = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
    return "".join(named.get(c) or (f"\\u{ord(c):04x}" if c in _BIDI_CONTROLS else f"\\x{ord(c):02x}")
                   if c in _BIDI_CONTROLS or c < " " or c == "\x7f" else c for c in title)


def title_key(title: str | None) -> str:
    """What two titles are compared by: "Notes" and "notes " name no thread apart."""
    return " ".join((title or "").split()).casefold()


def repeated_titles(titles: Iterable[str | None]) -> frozenset[str]:
    """The ``title_key`` of every title that more than one of ``titles`` has (the threads of one
    resource); the empty key stands for "no title"."""
    seen: set[str] = set()
    repeated: set[str] = set()
    for title in titles:
        key = title_key(title)
        (repeated if key in seen else seen).add(key)
    return frozenset(repeated)


def shared_id_prefix(ids: Iterable[str]) -> str:
    """The head that all of ``ids`` (the threads of one resource, two or more) share, up to and with its
    last separator (``-``, ``_``, ``:``, ``.``, ``/``), so what is left of each id starts where they
    differ and keeps whole words: "customer-7-t2" and "customer-7-t5" share "customer-7-"; "t1" and
    "t10" share nothing (no separator). Empty for fewer than two ids."""
    listed = list(ids)
    if len(listed) < 2:
        return ""
    low, high = min(listed), max(listed)  # the common head of all is the common head of these two
    n = 0
    while n < len(low) and low[n] == high[n]:
        n += 1
    cut = max((m.end() for m in _ID_SEPARATORS.finditer(low[:n])), default=0)
    return low[:cut] if cut < len(low) else ""


def _id_part(thread_id: str, prefix: str) -> str:
    if prefix and thread_id.startswith(prefix) and len(thread_id) > len(prefix):
        return "…" + short_id(shown_title(thread_id[len(prefix):]))
    return short_id(shown_title(thread_id))


def untitled_starts(threads: Iterable[tuple[str, str | None, datetime | None]]) -> dict[str, str]:
    """When each untitled thread of a resource (``threads``: its threads' id, title and creation time) started, as
    the tree names it: "2026-12-07 12:55", to the second where two untitled threads started in one minute (no word
    before it: "(untitled) · 2026-12-07 12:55" keeps within the tree's ``TITLE_LEAST_CHARS``, so Latest stays
    beside it). A thread whose start another untitled one shares to the second, or is unknown, is not in it (its id
    names it). Ids of threads made by a program tell them apart but say nothing to a user: ``memory-studio
    serve`` makes "thread_3fa2b1c4d5e6f7a8", a client a UUID, so the untitled threads of a resource (an agent
    without title generation, Mastra's default) read "(untitled) · …3fa2b1c4d5…", "(untitled) · …9c0e…" (found
    by s35-walk11). Mastra's playground names an untitled thread by its id as well; when it started is what a user
    remembers of it. Read from the thread's row: nothing is written (looking never changes data)."""
    shown = [(tid, format_datetime(created)) for tid, title, created in threads
             if not (title or "").strip() and created is not None]
    minutes = Counter(when[:16] for _, when in shown)
    seconds = Counter(when for _, when in shown)
    starts: dict[str, str] = {}
    for tid, when in shown:
        if minutes[when[:16]] == 1:
            starts[tid] = when[:16]
        elif seconds[when] == 1:
            starts[tid] = when
    return starts


#: The most characters of a message's opening words an untitled thread's label holds (with its quotes and "…"
#: within the tree's ``TITLE_LEAST_CHARS``, so Latest stays beside it).
OPENING_WORDS_CHARS = 26
_TEXT_KEY = re.compile(r'"text"\s*:\s*"')
_CONTENT_KEY = re.compile(r'"content"\s*:\s*"')
_STRING_BODY = re.compile(r'(?:[^"\\]|\\.)*')
_CUT_ESCAPE = re.compile(r'\\u[0-9a-fA-F]{0,3}$')


def opening_words(stored: str | None, limit: int = OPENING_WORDS_CHARS) -> str | None:
    """The first words of a message from the start of its stored content (``ThreadSummary.opening``: the first
    ``OPENING_CHARS`` characters of the JSON, which may be cut short): its text parts' text (else its ``content``,
    else a legacy row's plain text), on one line, at most ``limit`` characters, cut after a word ("…"). None when
    it has no text (a message of tool results or files only)."""
    if not stored:
        return None
    text = _message_text(str(stored))
    words = " ".join(text.split())
    if not words:
        return None
    if len(words) > limit:
        cut = words[:limit]
        space = cut.rfind(" ")
        words = (cut[:space] if space >= limit // 2 else cut).rstrip(" ,;:.-") + "…"
    return shown_title(words)


def _message_text(stored: str) -> str:
    """What ``core.messages.Message.text`` gives for stored content, read from its start (``opening_words``)."""
    if not stored.lstrip().startswith(("{", "[")):
        return stored  # a legacy row: the text itself
    try:
        value = json.loads(stored)
    except (ValueError, RecursionError):  # cut short (or not JSON): the first text part's string, as far as it goes
        return _string_at(stored, _TEXT_KEY) or _string_at(stored, _CONTENT_KEY)
    parts = value.get("parts") if isinstance(value, dict) else value
    texts = [p["text"] for p in parts if isinstance(p, dict) and p.get("type") == "text"
             and isinstance(p.get("text"), str)] if isinstance(parts, list) else []
    if texts:
        return " ".join(texts)
    content = value.get("content") if isinstance(value, dict) else None
    return content if isinstance(content, str) else ""


def _string_at(doc: str, key: re.Pattern[str]) -> str:
    """The JSON string after the first ``key`` of ``doc``, to its end or to where ``doc`` is cut."""
    found = key.search(doc)
    if found is None:
        return ""
    body = _STRING_BODY.match(doc, found.end())
    try:
        text = str(json.loads('"' + _CUT_ESCAPE.sub("", body.group() if body else "") + '"'))
    except ValueError:
        return ""
    return text[:-1] if text and "\ud800" <= text[-1] <= "\udbff" else text  # (half a pair, cut)


def untitled_openings(threads: Iterable[tuple[str, str | None, str | None]]) -> dict[str, str]:
    """The first words (``opening_words``) of each untitled thread's first user message, of a resource's threads
    (``threads``: id, title and ``ThreadSummary.opening``), for the threads that have some: a thread the tree named
    "(untitled) · 2026-12-07 12:55" reads "“Plan a trip to Lisbon…”" (noted by s35-walk11). Read with the tree's one
    statement (``MemoryStore.tree_summaries(openings=True)``): no read per thread, nothing written."""
    found: dict[str, str] = {}
    for tid, title, opening in threads:
        if not (title or "").strip():
            words = opening_words(opening)
            if words is not None:
                found[tid] = words
    return found


def thread_label(title: str | None, thread_id: str, repeated: frozenset[str], shared_prefix: str = "",
                 started: str | None = None, opening: str | None = None) -> str:
    """The tree's text for a thread: its title, with its short id after it when the title alone does not
    tell it from the other threads of its resource (one of the ``repeated`` ones); the head the resource's
    thread ids share (``shared_prefix``, from ``shared_id_prefix``) is left out of it. An untitled thread reads
    the first words of its first user message in quotes (``opening``, from ``untitled_openings``), followed by when
    it started (or its id) when another untitled thread's begin alike (``title_key`` of ``“words”`` in
    ``repeated``); without them "(untitled)" and when it started (``started``, from ``untitled_starts``; its tooltip
    says "started"), else its short id."""
    if not (title or "").strip():
        if opening is not None:
            quoted = f"“{opening}”"
            if title_key(quoted) not in repeated:
                return quoted
            return f"{quoted}{SEPARATOR}{started or _id_part(thread_id, shared_prefix)}"
        return f"{UNTITLED}{SEPARATOR}{started or _id_part(thread_id, shared_prefix)}"
    if title_key(title) in repeated:
        return f"{shown_title(str(title))}{SEPARATOR}{_id_part(thread_id, shared_prefix)}"
    return shown_title(str(title))


DELEGATION = "(delegation)"
SHORT_DELEGATION = "(deleg.)"  # the mark where the whole one does not fit (``fit_resource_label``)
ARROW = " → "
#: The delegations Mastra wrote that the data proves (``core.delegation_results.mastra_delegations``):
#: resource id -> (the resource that delegated, the sub-agent). Loaded with the tree (``TreeData``).
Delegations = Mapping[str, tuple[str, str]]
NO_DELEGATIONS: Delegations = MappingProxyType({})
_MAX_DEPTH = 64  # (a chain of proven Mastra delegations cannot loop, ids being distinct; a guard all the same)


def _delegation_chain(resource_id: str, known: Delegations = NO_DELEGATIONS) -> list[str] | None:
    """``["alice", "helper"]`` for ``delegation:alice:helper``; a nested delegation's whole chain
    (``["alice", "helper", "checker"]``); the same for a delegation Mastra wrote that ``known`` proves
    (``alice-helper``: ``known["alice-helper"] == ("alice", "helper")``); None for any other id, a malformed
    delegation one included."""
    chain = _raw_chain(resource_id, known)
    return None if chain is None else [shown_title(name) for name in chain]


def _raw_chain(resource_id: str, known: Delegations = NO_DELEGATIONS, depth: int = 0) -> list[str] | None:
    """``_delegation_chain`` as stored (the names not yet made safe to draw)."""
    pair = delegation_parent(resource_id)
    if pair is None and not resource_id.startswith(DELEGATION_PREFIX):
        pair = known.get(resource_id)
    if pair is None or depth > _MAX_DEPTH:
        return None
    parent, agent = pair
    nested = parent.startswith(DELEGATION_PREFIX) or parent in known
    above = _raw_chain(parent, known, depth + 1) if nested else [parent or "(no resource)"]
    return None if above is None else [*above, agent]


def resource_label(resource_id: str, known: Delegations = NO_DELEGATIONS) -> str:
    """How the Studio names a resource, in the tree and in every pane's header: its id, or for a delegation's
    resource who delegated to whom: "alice → helper (delegation)" (a nested one: "alice → helper → checker
    (delegation)"); a Mastra-written one (``alice-helper``) only when ``known`` proves it."""
    chain = _delegation_chain(resource_id, known)
    return shown_title(resource_id) if chain is None else f"{ARROW.join(chain)} {DELEGATION}"


def resource_tip(resource_id: str, known: Delegations = NO_DELEGATIONS) -> str:
    """What a header that names a resource by ``resource_label`` says on hover: the stored id (what filters,
    the CLI and the API take); "" when the label is the id."""
    shown = shown_title(resource_id)
    return "" if resource_label(resource_id, known) == shown else f"resource id: {shown}"


def header_title(title: str | None, thread_id: str, resource_id: str | None,
                 known: Delegations = NO_DELEGATIONS) -> str:
    """How a pane's header names a thread: its title; an untitled thread of a delegation (the engine and
    Mastra name none) by the delegation ("ada → helper (delegation)"), not by its raw id; else its id."""
    if (title or "").strip():
        return shown_title(str(title))
    return (resource_label(resource_id, known) if resource_id and is_delegation(resource_id, known)
            else shown_title(thread_id))


def header_tip(text: str, resource_id: str | None, known: Delegations = NO_DELEGATIONS) -> str:
    """The tooltip of a pane's header line ``text`` that names ``resource_id`` by ``resource_label``: the line
    and the stored id (``resource_tip``); "" when the label is the id (an ``ElidedLabel`` then shows the
    line whole on hover when it is cut)."""
    tip = resource_tip(resource_id or "", known)
    return f"{text}\n{tip}" if tip else ""


def _cut(name: str, keep: int) -> str:
    """``name`` with its middle cut so ``keep`` of its characters stay, the head one longer ("cust…ers")."""
    if keep >= len(name):
        return name
    tail = keep // 2
    return name[:keep - tail] + "…" + (name[-tail:] if tail else "")


MIN_KEPT = 4  # characters a cut name keeps at least ("cu…rs"): fewer would name no one


def fit_resource_label(resource_id: str, width: int, advance: Callable[[str], int],
                       known: Delegations = NO_DELEGATIONS) -> str:
    """``resource_label`` for a place ``width`` wide (``advance``: a text's width in the font it is drawn in),
    keeping what tells a delegation apart: who delegated and to which agent. Cut first, in this order: a nested
    chain's middle agents ("alice → … → checker"), the middle of the delegating resource's id (to ``MIN_KEPT``
    characters), the mark (to "(deleg.)", then away: the tree draws a delegation's row in italics, which no
    id can be, and its tooltip says what it is), the middle of the agent's name, and last a nested chain's
    "…". Any other
    resource, and a label that fits, comes back whole (a view cuts it as it cuts any text); so does the
    tightest form when even that does not fit."""
    chain = _delegation_chain(resource_id, known)
    whole = resource_label(resource_id, known)
    if chain is None or advance(whole) <= width:
        return whole
    root, *agents = chain
    middle = ["…"] if len(agents) > 1 else []

    def text(root_kept: int, mark: str, agent_kept: int | None = None) -> str:
        last = agents[-1] if agent_kept is None else _cut(agents[-1], agent_kept)
        return ARROW.join([_cut(root, root_kept), *middle, last]) + (f" {mark}" if mark else "")

    def longest(fits: Callable[[int], bool], low: int, high: int) -> int | None:
        """The largest ``n`` in ``low..high`` with ``fits(n)`` (true for all below any true one), or None."""
        if high < low or not fits(low):
            return None
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if fits(mid) else (low, mid - 1)
        return low

    floor = min(MIN_KEPT, len(root))
    for mark in (DELEGATION, SHORT_DELEGATION, ""):
        def fits(n: int, m: str = mark) -> bool:
            return advance(text(n, m)) <= width

        kept = longest(fits, floor, len(root))
        if kept is not None:
            return text(kept, mark)
    agent = agents[-1]
    agent_floor = min(MIN_KEPT, len(agent))
    kept = longest(lambda n: advance(text(floor, "", n)) <= width, agent_floor, len(agent))
    if kept is None and middle:  # (a nested chain's "…" goes last: the tooltip has the whole chain)
        middle = []
        kept = longest(lambda n: advance(text(floor, "", n)) <= width, agent_floor, len(agent))
    return text(floor, "", agent_floor if kept is None else kept)


def is_delegation(resource_id: str, known: Delegations = NO_DELEGATIONS) -> bool:
    """Whether the Studio labels ``resource_id`` as a delegation's (and the tree draws it as one: in italics)."""
    return _delegation_chain(resource_id, known) is not None


def delegation_note(resource_id: str, known: Delegations = NO_DELEGATIONS) -> str | None:
    """What a delegation's resource is, for its tooltip; None for any other resource."""
    chain = _delegation_chain(resource_id, known)
    if chain is None:
        return None
    *above, agent = chain
    note = (f"The memory sub-agent {agent!r} keeps of the turns of {ARROW.join(above)} that delegated to it: each "
            f"thread is one delegation (its prompt and reply; the reply is also in the delegating thread). "
            f"Forgetting {above[0]} forgets it too.")
    if resource_id in known and not resource_id.startswith(DELEGATION_PREFIX):
        parent = shown_title(known[resource_id][0])
        note += (f"\nMastra named it <resource>-<agent>, as a user's own id could be named: it is shown as a "
                 f"delegation because {parent}'s threads hold the results of its agent-{agent} calls, which name "
                 "this resource and each of its threads.")
    return note


def delegation_refusal(resource_id: str) -> str | None:
    """Why the Chat pane sends no turn to a delegation's resource (the engine refuses every turn an application
    starts there: ``Agent.generate`` / ``stream``), in the Studio's words; None for any other resource."""
    if not resource_id.startswith(DELEGATION_PREFIX):
        return None
    chain = _delegation_chain(resource_id)
    if chain is None:
        return (f"Resource ids starting with {DELEGATION_PREFIX!r} belong to agents' delegations, and "
                f"{resource_id!r} is not one the engine wrote: no chat turn runs on it. Name another resource.")
    root, *agents = chain
    return (f"{resource_label(resource_id)} is the memory sub-agent {agents[-1]!r} keeps of {root}'s turns: no chat "
            f"turn runs there (only a delegation from {root}'s agent does). Chat in one of {root}'s own threads "
            "instead; this thread's messages stay readable in the Messages pane.")


__all__ = ["ARROW", "DELEGATION", "MIN_KEPT", "NO_DELEGATIONS", "SEPARATOR", "SHORT_DELEGATION", "UNTITLED",
           "Delegations", "delegation_note", "delegation_refusal", "fit_resource_label", "header_tip", "header_title", "is_delegation",
           "repeated_titles", "resource_label", "resource_tip",
           "shared_id_prefix", "shown_title", "thread_label", "title_key"]
