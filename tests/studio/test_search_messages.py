"""The search across all messages (the thread tree's "searches all messages") finds every message whose text
holds the query, in any case, on both engines: the storage matches the stored JSON, where every message
holds "type" and "text", so its candidates are read page after page (not only the newest thousand), and a
search that stops early says how far it looked."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from core.messages import Message
from studio import reads
from studio.reads import search_messages, search_note, search_summary

pytestmark = pytest.mark.backends

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=timezone.utc)


def _seed(store: Any, texts: list[str]) -> None:
    """``texts`` in one thread, oldest first, one minute apart."""
    store.memory.create_thread(thread_id="t", resource_id="ada", title="Tea")
    store.memory.save_messages([
        Message.user(text, id=f"m{i:05d}", thread_id="t", resource_id="ada", created_at=T0 + timedelta(minutes=i))
        for i, text in enumerate(texts)])


def test_an_old_message_is_found_behind_a_thousand_newer_ones_holding_the_word_only_in_their_json(store):
    _seed(store, ["What type of tea is this?", *(f"note {i}" for i in range(1_500))])
    found = search_messages(store, "type")
    assert [h.message_id for h in found.hits] == ["m00000"]
    assert found.complete and found.searched == 1_501
    assert search_summary("type", found) == "1 message contains “type”" and search_note(found) == ""


def test_case_quotes_and_letters_outside_ascii(store):
    _seed(store, ["We love PEANUT butter", 'She said "hi" twice', "Wir fahren nach münchen", "Привет, мир",
                  "plain words"])
    assert [h.message_id for h in search_messages(store, "peanut").hits] == ["m00000"]
    assert [h.message_id for h in search_messages(store, 'said "hi"').hits] == ["m00001"]
    assert [h.message_id for h in search_messages(store, '"').hits] == ["m00001"]
    assert [h.message_id for h in search_messages(store, "MÜNCHEN").hits] == ["m00002"]
    assert [h.message_id for h in search_messages(store, "ПРИВЕТ").hits] == ["m00003"]
    assert search_messages(store, "nothing here").hits == []


def test_a_search_that_stops_early_says_how_far_it_looked(store, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(reads, "SEARCH_PAGE", 100)
    monkeypatch.setattr(reads, "SEARCH_SCAN_LIMIT", 300)
    _seed(store, ["What type of tea is this?", *(f"note {i}" for i in range(500))])
    found = search_messages(store, "type")
    assert found.hits == [] and not found.complete and found.searched == 300
    assert search_summary("type", found) == "No message contains “type”"
    assert search_note(found) == ("Searched the newest 300 messages that might hold it; older ones were not searched. "
                                  "A longer query narrows the search.")
    # A query the stored JSON does not hold everywhere is matched by the storage: all of it is searched.
    assert [h.message_id for h in search_messages(store, "tea is").hits] == ["m00000"]


def test_a_hit_of_an_untitled_thread_names_the_thread_by_its_short_id(store):
    """A search hit of a thread without a title read "(untitled)" for every such thread; like the tree, it
    shows the thread's short id after it."""
    from studio.logic.short_ids import short_id
    from studio.panes.resources import SearchResultsModel

    store.memory.create_thread(thread_id="0197a1b2-0000-7000-8000-00000000beef", resource_id="ada")
    store.memory.save_messages([Message.user("peanut butter", id="p1", thread_id="0197a1b2-0000-7000-8000-00000000beef",
                                             resource_id="ada", created_at=T0)])
    found = search_messages(store, "peanut")
    model = SearchResultsModel()
    model.set_hits("peanut", found.hits)
    shown = model.index(0).data()
    assert shown.startswith(f"(untitled) · {short_id('0197a1b2-0000-7000-8000-00000000beef')}  ·  user")
