"""How the thread tree names a thread (no Qt): the one rule for telling similar titles apart.

Titles are often alike: an agent's generated titles, or a user's series ("Weekly sync 2026-03-02",
"Weekly sync 2026-03-09"; "Trip to Lisbon, day 1", "…, day 2"). Cut at the right, as Qt cuts a cell
by default, they all read "Weekly sync 2026-…" in a narrow tree, and only the tooltip told them apart.
Two things make them distinguishable:

* the tree cuts a long title in the middle (``Qt.ElideMiddle``), so its start and its end (where a
  series puts the number or the date) both stay on screen;
* a thread whose title does not name it (none at all, or the same title as another thread of its
  resource) gets its id after the title, shortened as everywhere else (``short_ids.short_id``). A
  thread with a title of its own does not: an id is noise to whoever wrote the title.
"""

from __future__ import annotations

from typing import Iterable

from studio.logic.short_ids import short_id

UNTITLED = "(untitled)"
SEPARATOR = " · "


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


def thread_label(title: str | None, thread_id: str, repeated: frozenset[str]) -> str:
    """The tree's text for a thread: its title, with its short id after it when the title alone does not
    tell it from the other threads of its resource (no title, or one of the ``repeated`` ones)."""
    if not (title or "").strip():
        return f"{UNTITLED}{SEPARATOR}{short_id(thread_id)}"
    return f"{title}{SEPARATOR}{short_id(thread_id)}" if title_key(title) in repeated else str(title)


__all__ = ["SEPARATOR", "UNTITLED", "repeated_titles", "thread_label", "title_key"]
