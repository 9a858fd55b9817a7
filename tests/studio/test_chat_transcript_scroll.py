"""The Chat transcript keeps showing its end when its text reflows (found 2026-12-06: on the tab's first show the
newest reply was cut a few lines short), and keeps a reader's place when it is drawn again."""

from __future__ import annotations

from datetime import timedelta

from core import Memory, MemoryOptions, Message
from studio.selection import Selection
from .test_chat_pane import T0, select, pane, session, build  # noqa: F401


def test_the_transcript_stays_at_its_end_when_the_pane_narrows(qtbot, pane, session):
    mem_msgs = [Message.user(f"Question {i}: " + "a long line of words to wrap " * 12, id=f"q{i}", thread_id="t-food",
                             resource_id="ada", created_at=T0 + timedelta(minutes=10 + i)) for i in range(30)]
    Memory(session.store, MemoryOptions()).save_messages(mem_msgs)
    select(qtbot, pane, Selection("ada", "t-food"))
    bar = pane.transcript.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 0, timeout=5_000)
    assert bar.value() == bar.maximum()
    pane.resize(700, 760)
    qtbot.wait(200)
    assert bar.maximum() > 0 and bar.value() == bar.maximum(), (bar.value(), bar.maximum())


def test_a_transcript_scrolled_up_stays_where_it_was_when_it_is_drawn_again(qtbot, pane, session):
    Memory(session.store, MemoryOptions()).save_messages([
        Message.user(f"Question {i}: " + "a long line of words to wrap " * 12, id=f"q{i}", thread_id="t-food",
                     resource_id="ada", created_at=T0 + timedelta(minutes=10 + i)) for i in range(30)])
    select(qtbot, pane, Selection("ada", "t-food"))
    bar = pane.transcript.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 0, timeout=5_000)
    bar.setValue(bar.maximum() // 3)  # the user reads an earlier reply
    where = bar.value()
    pane._render()  # drawn again (a reply's piece, a theme switch)
    assert bar.value() == where
