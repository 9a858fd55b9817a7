"""Column widths that keep a table as wide as its pane (pure: no Qt).

A table whose columns were sized once ran past its pane's edge at ordinary window widths, so what was
at its right end (a status, a score) could only be read by scrolling. ``fit_columns`` gives each column
a width from the table's width on every resize: the narrow columns what their usual text needs, the
wider ones a share of the rest, the last what is left; a cut cell elides its text ("…") and its
tooltip holds the whole. Used by Replay's context table and the recall playground's lists
(``studio.widgets.fit_to_pane``).
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence


def fit_columns(total: int, fixed: Mapping[str, int], shares: Mapping[str, float],
                minimum: Mapping[str, int], last: str, rest: int = 0,
                maximum: Mapping[str, int] | None = None, optional: Sequence[str] = (),
                room: Mapping[str, int] | None = None, roomy: Sequence[str] = ()) -> dict[str, int]:
    """Widths in pixels for a table ``total`` pixels wide: the ``fixed`` columns as given, each column of
    ``shares`` its share of what is left once the ``last`` column has its ``rest`` (and at least its
    ``minimum``, at most its ``maximum``), and ``last`` the remainder (at least ``rest``). A column cut
    short elides its text, whose whole is in the cell's tooltip.

    ``optional``: columns (fixed or shared) left out, in this order, while the table is too narrow for the
    others' widths and minima (a left-out column is absent from the answer: its table hides it). An optional
    column of ``roomy`` is shown only where the shared columns have their ``room`` as well (more than their
    minima: Replay's stored ids took 89 px of a 1,440 px window's table while its reason read "working memory
    c…"), and ``last`` its ``room`` when given (the role took 70 px while the fragment's text read "Hi! I'A…"), or
    where leaving it out (with the roomy columns after it) would not make that room either; shown with the room, it
    keeps it (the shares do not take it back)."""
    fixed, shares = dict(fixed), dict(shares)
    wanted = room or {}

    def fits(with_room: bool, leaving: Sequence[str] = ()) -> bool:
        """Whether the columns (but ``leaving``) fit: at their minima, or with the room the roomy ones wait for."""
        extra = wanted if with_room else {}
        needs = sum(max(minimum.get(t, 0), extra.get(t, 0)) for t in shares if t not in leaving)
        kept = sum(w for t, w in fixed.items() if t not in leaving)
        return kept + needs + max(rest, extra.get(last, 0)) <= total

    kept_roomy = False
    for i, title in enumerate(optional):
        if title in roomy:
            if fits(True):
                kept_roomy = True
                continue
            # It gives way where that (with the roomy columns after it) makes the room; where even that does
            # not, it stays as any optional column does (the stored ids at a 1,100 px window: the reason is cut
            # either way)
            later = [t for t in optional[i:] if t in roomy]
            if not fits(True, leaving=later) and fits(False):
                continue
        elif fits(False):
            continue  # (the minima only grow with the roomy columns: an earlier column that fits, fits)
        fixed.pop(title, None)
        shares.pop(title, None)
    if kept_roomy:  # a roomy column shown: the room it waited for is kept too (the shares gave Source and Why
        # their caps first, and the text 237 px of the quarter the stored ids waited for)
        minimum = {**minimum, **{t: max(minimum.get(t, 0), wanted.get(t, 0)) for t in shares}}
        rest = max(rest, wanted.get(last, 0))
    spare = max(0, total - sum(fixed.values()) - rest)
    cap = maximum or {}
    out = {**fixed}
    for title, share in shares.items():
        width = max(minimum.get(title, 0), int(spare * share))
        out[title] = min(width, cap[title]) if title in cap else width
    # Columns raised to their minimum take from the others' shares (above their own minima), not from
    # ``last``: otherwise the shares and minima together ran past the table's edge.
    over = sum(out.values()) + rest - total
    room = {t: out[t] - minimum.get(t, 0) for t in shares if out[t] > minimum.get(t, 0)}
    if over > 0 and room:
        spare_room = sum(room.values())
        for title, r in room.items():
            out[title] -= min(r, math.ceil(over * r / spare_room))
    out[last] = max(rest, total - sum(out.values()))
    return out
