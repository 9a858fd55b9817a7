"""A page cache for a long list whose rows load in the background (DB4S's RowCache idea).

Rows are fetched in fixed-size pages. Every page remembers the *generation* it was loaded in; a
refresh bumps the generation, so rows stay visible (no flicker) but count as stale and are fetched
again when next looked at. Results that arrive for an older generation or thread are dropped by the
caller comparing tokens. The cache keeps at most ``max_pages`` pages, least recently used out first,
so scrolling through 100,000 rows does not keep them all in memory. A page may hold only its last
rows (``put(..., start=k)``: the newest rows a view shows first); the rows before ``k`` count as
missing, so looking at them fetches the whole page. Pure Python; no Qt.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Generic, Sequence, TypeVar

T = TypeVar("T")


class PageCache(Generic[T]):
    def __init__(self, page_size: int = 200, max_pages: int = 64) -> None:
        self.page_size = page_size
        self.max_pages = max_pages
        self.generation = 0
        self._pages: OrderedDict[int, tuple[int, list[T], int]] = OrderedDict()  # page -> (generation, rows, start)
        self._requested: dict[int, int] = {}  # page -> generation it was requested in

    def page_of(self, row: int) -> int:
        return row // self.page_size

    def page_range(self, page: int) -> tuple[int, int]:
        return page * self.page_size, self.page_size

    def row(self, index: int) -> T | None:
        page = self.page_of(index)
        entry = self._pages.get(page)
        if entry is None:
            return None
        self._pages.move_to_end(page)
        _gen, rows, start = entry
        offset = index - page * self.page_size - start
        return rows[offset] if 0 <= offset < len(rows) else None

    def needs(self, index: int) -> int | None:
        """The page to fetch for ``index``, or None if it is fresh or already on its way."""
        page = self.page_of(index)
        entry = self._pages.get(page)
        if entry is not None and entry[0] == self.generation and index - page * self.page_size >= entry[2]:
            return None
        if self._requested.get(page) == self.generation:
            return None
        return page

    def mark_requested(self, page: int) -> None:
        self._requested[page] = self.generation

    def forget_request(self, page: int) -> None:
        """A request was dropped before it ran; let the page be asked for again."""
        if self._requested.get(page) == self.generation:
            del self._requested[page]

    def put(self, page: int, generation: int, rows: Sequence[T], start: int = 0) -> bool:
        """Store a fetched page (or, with ``start``, its rows from ``start`` on); False (and nothing
        stored) when it belongs to an older generation."""
        if generation != self.generation:
            return False
        if start == 0:
            self._requested.pop(page, None)
        self._pages[page] = (generation, list(rows), start)
        self._pages.move_to_end(page)
        while len(self._pages) > self.max_pages:
            self._pages.popitem(last=False)
        return True

    def invalidate(self) -> None:
        """Mark everything stale; rows stay readable until their fresh copies arrive."""
        self.generation += 1
        self._requested.clear()

    def clear(self) -> None:
        self.generation += 1
        self._pages.clear()
        self._requested.clear()

    def find(self, predicate: Callable[[T], bool]) -> int | None:
        """Row index of the first cached row matching ``predicate`` (cached rows only)."""
        for page, (_gen, rows, start) in self._pages.items():
            for i, item in enumerate(rows):
                if predicate(item):
                    return page * self.page_size + start + i
        return None

    def __len__(self) -> int:
        return len(self._pages)
