"""What the MCP transcript list (``resources/list``) costs per page, and a whole listing page by page.

Builds a libSQL file with one resource of N threads (3 messages each), one delegation of it with 50
threads, and 2,000 threads of other resources' delegations (the list's candidates it must pass over),
then times, with the server's ``MemoryTools.transcripts``: the first page, the last page (its cursor kept from
a listing followed to the end), the listing followed to its end (every page), and, for comparison, the one read
the list made before it had pages (every thread summary of the resource and of the delegations, sorted, cut at
500); and the same first and last page of the ``list_threads`` tool (``THREADS_PAGE`` threads a page). Medians of
5 rounds, wall clock. Whether a page deep in the listing costs more than the first says whether the keyset
read needs an index on ``mastra_threads``.

``--probe-index``: then times the pages' key read alone (``MemoryTools._keyset_page``, 100 keys: the first page's
and the last's), before and after ``CREATE INDEX`` on ``mastra_threads ("createdAt", id)`` in this throwaway file
(the question of whether the keyset needs an index Mastra's schema does not have).

    .venv/bin/python bench/mcp_resource_pages.py [--threads 20000] [--probe-index]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core import Memory, MemoryOptions, open_store  # noqa: E402
from core.gateway.access import Caller  # noqa: E402
from core.mcp_server.tools import THREADS_PAGE, Binding, MemoryTools  # noqa: E402
from core.messages import Message  # noqa: E402
from core.scopes import delegation_resource  # noqa: E402


def build(memory: Memory, threads: int) -> None:
    batch: list[Message] = []
    for i in range(threads):
        batch += [Message.user(f"note {i} {k}", thread_id=f"ada-{i:06d}", resource_id="ada") for k in range(3)]
        if len(batch) >= 3000:
            memory.save_messages(batch)
            batch = []
    batch += [Message.user("delegated", thread_id=f"ada-helper-{i}", resource_id=delegation_resource("ada", "helper"))
              for i in range(50)]
    batch += [Message.user("others", thread_id=f"other-{i}", resource_id=delegation_resource(f"user{i % 100}", "x"))
              for i in range(2000)]
    memory.save_messages(batch)


def median_ms(fn: Callable[[], Any], rounds: int = 5) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(rounds):
        start = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=20000)
    parser.add_argument("--probe-index", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, open_store(Path(folder) / "m.db") as store:
        memory = Memory(store, MemoryOptions())
        start = time.perf_counter()
        build(memory, args.threads)
        print(f"built {args.threads:,} threads in {time.perf_counter() - start:.1f} s")
        for label, tools, caller in (
                ("bound to ada", MemoryTools(memory, Binding("ada")), None),
                ("token of ada", MemoryTools(memory, Binding(None, any_resource=True)),
                 Caller("ada-app", frozenset({"ada"})))):
            who = caller if caller is not None else Caller()

            def everything() -> int:
                count, cursor = 0, None
                while True:
                    page = tools.transcripts(who, cursor)
                    count += len(page.rows)
                    cursor = page.next_cursor
                    if cursor is None:
                        return count

            def before() -> int:  # the list's one read before pages: every summary, sorted, cut at 500
                rows = store.memory.thread_summaries("ada") + memory.delegation_threads("ada")
                rows.sort(key=lambda s: s.last_activity.timestamp() if s.last_activity else float("-inf"),
                          reverse=True)
                return len(rows[:500])

            def last_cursor(page: Callable[[str | None], str | None]) -> str | None:
                """The cursor that asks for the listing's last page (None: it has one page)."""
                cursor = None
                while True:
                    following = page(cursor)
                    if following is None:
                        return cursor
                    cursor = following

            first, _ = median_ms(lambda: tools.transcripts(who))
            deepest = last_cursor(lambda c: tools.transcripts(who, c).next_cursor)
            last, _ = median_ms(lambda: tools.transcripts(who, deepest))
            whole, count = median_ms(everything)
            old, _ = median_ms(before)
            pages = -(-count // 500)
            print(f"{label}: first page {first:.1f} ms, last page {last:.1f} ms; all {count:,} in {pages} pages "
                  f"{whole:.0f} ms ({whole / pages:.1f} ms a page); before pages, the 500 listed {old:.1f} ms")
            threads_first, _ = median_ms(lambda: tools.list_threads("ada", caller=who))
            deepest = last_cursor(lambda c: tools.list_threads("ada", c, caller=who)["nextCursor"])
            threads_last, _ = median_ms(lambda: tools.list_threads("ada", deepest, caller=who))
            print(f"{label}: list_threads ({THREADS_PAGE} a page) first page {threads_first:.1f} ms, "
                  f"last page {threads_last:.1f} ms")
        if args.probe_index:
            probe_index(memory)


def probe_index(memory: Memory) -> None:
    tools = MemoryTools(memory, Binding("ada"))

    def keys(after: tuple[str, str] | None = None) -> tuple[list[tuple[str, str, str]], bool]:
        return tools._keyset_page(["ada"], lambda resource: True, after, 100)

    deepest: tuple[str, str] | None = None  # the key the last page follows
    while True:
        page, more = keys(deepest)
        if not more:
            break
        deepest = page[-1][:2]
    for label in ("no index on mastra_threads", 'with ("createdAt", id)'):
        if label.startswith("with"):
            with memory.store.db.write() as conn:
                conn.exec_driver_sql('CREATE INDEX bench_probe ON mastra_threads ("createdAt", id)')
        first, _ = median_ms(lambda: keys())
        last, _ = median_ms(lambda: keys(deepest))
        print(f"key read, 100 a page, {label}: first page {first:.1f} ms, last page {last:.1f} ms")


if __name__ == "__main__":
    main()
