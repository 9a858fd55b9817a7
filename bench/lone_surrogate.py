"""What ``core.ids.lone_surrogate`` costs on long text: the regex search it used before beside the encode-first
check it makes now, alternated (docs/ARCHITECTURE.md, Figures):

    PYTHONPATH=. .venv/bin/python bench/lone_surrogate.py
"""

from __future__ import annotations

import re
import timeit
from typing import Any

from core.ids import lone_surrogate

_SURROGATE = re.compile("[\ud800-\udfff]")


def by_regex(value: Any) -> str | None:
    """The check as it was (a regex search of every non-ASCII string)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            match = _SURROGATE.search(item)
            if match is not None:
                return f"a lone surrogate (U+{ord(match.group()):04X}), which has no UTF-8 form"
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return None


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
