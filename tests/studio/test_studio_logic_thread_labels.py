"""How the thread tree names a thread (``studio.logic.thread_labels``; no Qt)."""

from __future__ import annotations

from studio.logic.thread_labels import repeated_titles, thread_label

UUID = "0195f3c2-7a1b-7c3d-8e4f-a1b2c3d4e5f6"


def test_a_title_of_its_own_is_shown_alone_and_an_alike_or_missing_one_gets_the_short_id() -> None:
    titles = ["Trip, day 1", "Trip, day 2", "Weekly sync", "weekly   Sync ", None, ""]
    repeated = repeated_titles(titles)
    assert repeated == frozenset({"weekly sync", ""})
    assert thread_label("Trip, day 1", "t-1", repeated) == "Trip, day 1"
    assert thread_label("Weekly sync", UUID, repeated) == "Weekly sync · …c3d4e5f6"  # a UUID by its tail
    assert thread_label("weekly   Sync ", "t-sync", repeated) == "weekly   Sync  · t-sync"
    assert thread_label(None, "t-none", frozenset()) == "(untitled) · t-none"  # untitled: always the id
    assert thread_label("  ", "t-blank", frozenset()) == "(untitled) · t-blank"
