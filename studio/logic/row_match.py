"""The row of a fragment the user had selected, in rows read again (a prompt assembled again, a turn shown
again after another program wrote): what keeps a selection across refreshes."""

from __future__ import annotations

from typing import Protocol, Sequence, TypeVar


class Fragmentish(Protocol):
    @property
    def source(self) -> str: ...
    @property
    def stored_ids(self) -> tuple[str, ...]: ...
    @property
    def text(self) -> str: ...


F = TypeVar("F", bound=Fragmentish)


def same_fragment(rows: Sequence[F], kept: F) -> int | None:
    """Where ``kept`` is in ``rows``: the equal row; else the same text from the same source and stored
    messages; else the same stored messages (an edited message); else, for a fragment of no stored message,
    the same source (working memory updated). None: it is gone."""
    def key(r: F) -> tuple[str, tuple[str, ...], str]:
        return r.source, r.stored_ids, r.text

    for i, r in enumerate(rows):
        if r == kept:
            return i
    for i, r in enumerate(rows):
        if key(r) == key(kept):
            return i
    for i, r in enumerate(rows):  # (with no stored message: the same source with none either)
        if (r.source, r.stored_ids) == (kept.source, kept.stored_ids):
            return i
    return None
