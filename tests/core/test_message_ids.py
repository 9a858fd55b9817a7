"""New message ids are UUID version 7: unique, valid UUIDs, and later ids sort after earlier ones
(a batch's rows then land at the end of every index keyed by message id)."""

from __future__ import annotations

import time
import uuid

from core import Message
from core.messages import new_id


def test_new_ids_are_version_7_uuids_and_unique() -> None:
    ids = [new_id() for _ in range(20_000)]
    assert len(set(ids)) == len(ids)
    for text in ids[:200]:
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert parsed.version == 7 and parsed.variant == uuid.RFC_4122


def test_an_id_made_in_a_later_millisecond_sorts_after() -> None:
    earlier = [new_id() for _ in range(50)]
    time.sleep(0.003)
    later = [new_id() for _ in range(50)]
    assert max(earlier) < min(later)


def test_created_messages_get_such_ids() -> None:
    message = Message.create("user", [{"type": "text", "text": "hello"}], thread_id="t")
    assert uuid.UUID(message.id).version == 7
