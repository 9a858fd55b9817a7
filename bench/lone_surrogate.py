"""What ``core.ids.lone_surrogate`` costs on long text: the regex search it used before beside the encode-first
check it makes now, alternated (docs/ARCHITECTURE.md, Figures):

    PYTHONPATH=. .venv/bin/python bench/lone_surrogate.py
"""

from __future__ import annotations

import re
import timeit
from typing import Any

from core.ids import first_in_strings, lone_surrogate

_SURROGATE = re.compile("[\ud800-\udfff]")


def regex_search(text: str) -> int | None:
    """The string check as it was: a regex search of every string."""
    match = _SURROGATE.search(text)
    return None if match is None else ord(match.group())


def by_regex(value: Any) -> str | None:
    return first_in_strings(value, regex_search)


CASES = {"16 KB Latin-1 (é)": "café " * 3277, "16 KB mixed (é, 日本, 🙂)": ("word é 日本 🙂 " * 1300)[:16384],
         "16 KB CJK": "日本語" * 5461, "16 KB, a surrogate at the end": "é" * 16383 + "\udc80"}


def main(rounds: int = 5, calls: int = 2000) -> None:
    for name, text in CASES.items():
        assert by_regex(text) == lone_surrogate(text)
        old = new = 0.0
        for _ in range(rounds):
            old += timeit.timeit(lambda: by_regex(text), number=calls)
            new += timeit.timeit(lambda: lone_surrogate(text), number=calls)
        n = rounds * calls
        print(f"{name}: regex {old / n * 1e6:.1f} µs, encode-first {new / n * 1e6:.1f} µs, x{old / new:.1f}")


if __name__ == "__main__":
    main()
