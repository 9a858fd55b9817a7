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
resource (``is_delegation``), which no id can do.
"""

from __future__ import annotations

import re
from typing import Iterable

from core.scopes import DELEGATION_PREFIX, delegation_parent
from studio.logic.short_ids import short_id

UNTITLED = "(untitled)"
SEPARATOR = " · "
_ID_SEPARATORS = re.compile(r"[-_:./]")


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
        return "…" + short_id(thread_id[len(prefix):])
    return short_id(thread_id)


def thread_label(title: str | None, thread_id: str, repeated: frozenset[str], shared_prefix: str = "") -> str:
    """The tree's text for a thread: its title, with its short id after it when the title alone does not
    tell it from the other threads of its resource (no title, or one of the ``repeated`` ones); the head
    the resource's thread ids share (``shared_prefix``, from ``shared_id_prefix``) is left out of it."""
    if not (title or "").strip():
        return f"{UNTITLED}{SEPARATOR}{_id_part(thread_id, shared_prefix)}"
    if title_key(title) in repeated:
        return f"{title}{SEPARATOR}{_id_part(thread_id, shared_prefix)}"
    return str(title)


DELEGATION = "(delegation)"
ARROW = " → "


def _delegation_chain(resource_id: str) -> list[str] | None:
    """``["alice", "helper"]`` for ``delegation:alice:helper``; a nested delegation's whole chain
    (``["alice", "helper", "checker"]``); None for any other id, a malformed delegation one included."""
    pair = delegation_parent(resource_id)
    if pair is None:
        return None
    parent, agent = pair
    above = _delegation_chain(parent) if parent.startswith("delegation:") else [parent or "(no resource)"]
    return None if above is None else [*above, agent]


def resource_label(resource_id: str) -> str:
    """The tree's text for a resource: its id, or for a delegation's resource who delegated to whom:
    "alice → helper (delegation)" (a nested one: "alice → helper → checker (delegation)")."""
    chain = _delegation_chain(resource_id)
    return resource_id if chain is None else f"{ARROW.join(chain)} {DELEGATION}"


def is_delegation(resource_id: str) -> bool:
    """Whether the tree labels ``resource_id`` as a delegation's (and draws it as one: in italics)."""
    return _delegation_chain(resource_id) is not None


def delegation_note(resource_id: str) -> str | None:
    """What a delegation's resource is, for its tooltip; None for any other resource."""
    chain = _delegation_chain(resource_id)
    if chain is None:
        return None
    *above, agent = chain
    return (f"The memory sub-agent {agent!r} keeps of the turns of {ARROW.join(above)} that delegated to it: each "
            f"thread is one delegation (its prompt and reply; the reply is also in the delegating thread). "
            f"Forgetting {above[0]} forgets it too.")


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


__all__ = ["ARROW", "DELEGATION", "SEPARATOR", "UNTITLED", "delegation_note", "delegation_refusal", "is_delegation",
           "repeated_titles", "resource_label",
           "shared_id_prefix", "thread_label", "title_key"]
