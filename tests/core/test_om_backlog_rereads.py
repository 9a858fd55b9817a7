"""A turn observing a backlog in several observer calls reads the thread's unobserved messages again after
each call, so what another writer stored, edited or deleted meanwhile counts for the calls after it. The
re-read parses only the rows new or changed since the last one (``MemoryStore.list_messages(parsed=...)``):
parsing the whole rest again after every call was about half of a 1,000-message turn's CPU."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from core import Message, open_store
from core.llm import ScriptedModel
from core.observational import load_current
from core.observational.store import thread_hints, thread_metadata, unobserved_messages
from core.observational.tokens import messages_tokens
from core.storage.memory_store import MessageQuery
from tests.core.test_om_batches import START, TOKENIZER, Backlog, observed, text, two_messages

pytestmark = pytest.mark.backends


def _backlog_in_pairs(db_path: Path | str, reply: Any) -> tuple[Backlog, list[Message]]:
    """The backlog (its stored messages as read first) with an observer replying by ``reply`` and batches of about
    two messages, so a turn observes it in several calls."""
    h = Backlog(db_path, ScriptedModel(reply, name="observer"))
    before = h.stored()
    h.om["max_tokens_per_batch"] = two_messages(before)
    h.memory = h._memory(h.om)
    return h, before


def _turn_observing(h: Backlog) -> None:
    notes = h.turn("go on", reply=None).notes["observational-memory"]
    assert "observationError" not in notes, notes


def test_what_another_writer_stores_edits_or_deletes_between_two_calls_counts_for_the_next(
        db_path: Path | str) -> None:
    calls: list[list[dict[str, Any]]] = []
    other = open_store(db_path)  # another writer: its own connections, as another process has
    h: Backlog

    def reply(messages: list[dict[str, Any]], _tools: Any) -> str:
        calls.append(messages)
        if len(calls) == 1:  # while the first call runs (the turn has read the backlog and planned it)
            stored = h.stored()
            edited = Message.user(text("t1-beta-edited"), id=stored[2].id, thread_id="t1", resource_id="u1",
                                  created_at=stored[2].created_at)
            between = Message.user(text("t1-between"), thread_id="t1", resource_id="u1",
                                   created_at=stored[3].created_at + timedelta(seconds=1))
            after = Message.user(text("t1-after"), thread_id="t1", resource_id="u1",
                                 created_at=stored[-1].created_at + timedelta(hours=1))
            other.memory.save_messages([edited, between, after])
            assert other.memory.delete_messages([stored[5].id]) == 1
        return observed(len(calls))

    h, _ = _backlog_in_pairs(db_path, reply)
    _turn_observing(h)
    histories = [str(m[2]["content"]) for m in calls]
    sent = "\n".join(histories)
    # Every message stored when each call was planned was observed once, in order; the deleted one never, the
    # edited one as edited; the two stored during the first call (one dated inside the backlog) by later calls.
    heads = [text(word).strip()[:40] for word in ("t1-alpha", "t1-alpha-reply", "t1-beta-edited", "t1-beta-reply",
                                                   "t1-between", "t1-gamma", "t1-after")]
    assert [sum(head in history for history in histories) for head in heads] == [1] * len(heads), histories
    assert [sent.index(head) for head in heads] == sorted(sent.index(head) for head in heads)
    assert text("t1-gamma-reply").strip()[:40] not in sent
    assert text("t1-beta").strip()[:40] not in sent  # the content before the edit was not sent after it
    assert len(calls) >= 4 and "t1-after" in histories[-1]
    record = load_current(h.store, "t1")
    assert record is not None
    assert not unobserved_messages(h.store, thread_id="t1", resource_id="u1", record=record,
                                   hints=thread_hints(thread_metadata(h.store, "t1")))
    other.close()
    h.store.close()


def test_each_call_stores_the_tokens_it_leaves_unobserved_and_an_edited_message_counts_as_edited(
        db_path: Path | str) -> None:
    # After each call the record says how many tokens stay unobserved (``pendingMessageTokens``: the backlog as the
    # turn read it before the call, less the call's batch, plus the turn's input). The turn keeps each message's
    # count by the message it read, so a row edited between two calls is counted again, as edited.
    calls: list[int] = []
    seen: list[tuple[int, int]] = []  # (stored by the call before, unobserved tokens stored now)
    other = open_store(db_path)
    h: Backlog

    def reply(messages: list[dict[str, Any]], _tools: Any) -> str:
        calls.append(len(messages))
        record = load_current(other, "t1")
        if len(calls) >= 2:
            assert record is not None
            left = unobserved_messages(other, thread_id="t1", resource_id="u1", record=record,
                                       hints=thread_hints(thread_metadata(other, "t1")))
            seen.append((record.pending_message_tokens, messages_tokens(TOKENIZER, left)))
        if len(calls) == 1:  # while the first call runs: the last message edited, three times as long
            last = h.stored()[-1]
            other.memory.save_messages([Message.assistant(text("t1-gamma-reply-edited", 600), id=last.id,
                                                          thread_id="t1", resource_id="u1",
                                                          created_at=last.created_at)])
        return observed(len(calls))

    h, before = _backlog_in_pairs(db_path, reply)
    _turn_observing(h)
    said = messages_tokens(TOKENIZER, [Message.user("go on")])
    edited = [m for m in h.stored() if m.id == before[-1].id]  # (the input is stored after it: observed in its turn)
    grown = messages_tokens(TOKENIZER, edited) - messages_tokens(TOKENIZER, before[-1:])
    assert grown > 0
    # The first call's figure was read before the edit; every later one after it, and matches what is stored.
    assert len(seen) >= 3, seen
    assert seen[0] == (seen[0][1] - grown + said, seen[0][1])
    assert [stored for stored, _ in seen[1:]] == [now + said for _, now in seen[1:]]
    other.close()
    h.store.close()


def test_a_row_read_again_unchanged_is_not_parsed_again(db_path: Path | str) -> None:
    store = open_store(db_path)
    first = [Message.user(text(f"m{i}"), thread_id="t1", resource_id="u1", created_at=START + timedelta(minutes=i))
             for i in range(4)]
    store.memory.save_messages(first)
    query = MessageQuery(thread_id="t1", resource_id="u1")
    parsed: dict[tuple[Any, ...], Message] = {}
    one = store.memory.list_messages(query, parsed=parsed)
    assert [m.id for m in one] == [m.id for m in first] and len(parsed) == 4
    store.memory.save_messages([Message.user("changed", id=first[1].id, thread_id="t1", resource_id="u1",
                                             created_at=one[1].created_at)])
    two = store.memory.list_messages(query, parsed=parsed)
    # The unchanged rows are the messages read before; the changed one is read as it is now.
    assert [m is o for m, o in zip(two, one)] == [True, False, True, True]
    assert two[1].text == "changed" and one[1].text != "changed"
    # The same as reading without ``parsed``.
    plain = store.memory.list_messages(query)
    assert [(m.id, m.text, m.created_at, m.role) for m in two] == [(m.id, m.text, m.created_at, m.role) for m in plain]
    store.close()


def test_the_messages_after_a_cursor_are_the_ones_its_text_and_id_order_after(db_path: Path | str) -> None:
    # ``unobserved_messages`` skips formatting a message's time when it is a millisecond or more after a cursor
    # written as ``to_iso`` writes; a cursor written otherwise (Mastra, an old row) is compared as text, as before.
    from core.observational.store import Cursor, ThreadHints
    from core.timeutil import to_iso

    store = open_store(db_path)
    times = [START + timedelta(milliseconds=ms) for ms in (0, 0, 0, 1, 1, 999, 1_000, 60_000)]
    msgs = [Message.user(f"m{i}", id=f"id-{i % 3}-{i}", thread_id="t1", resource_id="u1", created_at=at)
            for i, at in enumerate(times)]
    store.memory.save_messages(msgs)
    stored = store.memory.list_messages(MessageQuery(thread_id="t1", resource_id="u1"))
    cursors = [Cursor(to_iso(START), "id-1-1"), Cursor(to_iso(START), ""), Cursor(to_iso(START), "\uffff"),
               Cursor(to_iso(times[3]), "id-0-3"), Cursor(to_iso(times[5]), "id-2-5"),
               Cursor("2025-01-02T09:00:00Z", "id-0-0"), Cursor("2025-01-02T09:00:00.001+00:00", "id-0-3"),
               Cursor("2025-01-02T09:00:00.0005Z", "id-0-0")]
    for cursor in cursors:
        want = [m.id for m in stored if (to_iso(m.created_at), m.id) > (cursor.created_at, cursor.id)]
        got = unobserved_messages(store, thread_id="t1", resource_id="u1", record=None,
                                  hints=ThreadHints(cursor=cursor))
        assert [m.id for m in got] == want, cursor
    store.close()
