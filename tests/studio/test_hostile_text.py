"""Stored text that looks like markup, in a database someone else wrote (a thread title, a resource id, a
message id, a message, an agent's instructions, a tool's description, a span's name from the trace
file): the Studio shows it as written, never as rich text, in labels, links and tooltips (pytest-qt,
offscreen, the real window over a real file)."""

from __future__ import annotations

import html
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from PySide6.QtCore import QAbstractListModel, QModelIndex
from PySide6.QtGui import QTextDocument, Qt
from PySide6.QtWidgets import QAbstractItemView, QApplication, QLabel

from core import Memory, MemoryOptions, Message, ScriptedModel, open_store
from core.agent import Agent, Tool
from core.traces.spans import SpanRecord
from studio.main_window import MESSAGES, REPLAY, TRACES
from studio.selection import Selection
from studio.widgets.plain_tip import plain_tip

WAIT = 30_000
MARKUP = '<b style="color:red">'  # what must never reach Qt as markup
RESOURCE, THREAD = "<i>res</i>", "<u>thr</u>"
MESSAGE_ID = 'm"><b style="color:red">id</b><i x="'
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
#: The seeded spans' time: within the trace retention's 30 days. The seed's agent run starts the tracer's writer,
#: which prunes traces older than that right after its first write, in its own thread: spans dated T0 were deleted
#: when that prune came after the seed's own write (under load), and the Traces list showed only the agent's run.
SPANS_T0 = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=1)


def hostile(what: str) -> str:
    return f'{MARKUP}{what}</b><img src="file:///etc/hostname"><a href="https://example.invalid/">x</a>'


def seed(path: Path) -> None:
    """A thread whose every piece of text is markup, a recorded turn over it, and spans named so."""
    store = open_store(path)
    memory = Memory(store, MemoryOptions(last_messages=10, working_memory={"enabled": True, "scope": "resource"}),
                    name="chef", tracer=store.tracer())
    memory.create_thread(thread_id=THREAD, resource_id=RESOURCE, title=hostile("title"))
    memory.save_messages([Message.user(hostile("earlier"), id=MESSAGE_ID, thread_id=THREAD, resource_id=RESOURCE)])
    agent = Agent("chef", instructions=hostile("instructions"), model=ScriptedModel([hostile("reply")]),
                  memory=memory, tools=[Tool(name="lookup", description=hostile("tool"), fn=lambda **_: "ok")])
    agent.generate(hostile("input"), memory={"resource": RESOURCE, "thread": THREAD})
    assert store.tracer().flush(10)
    store.observability.write_spans([
        SpanRecord(trace_id="tr-markup", span_id="s1", name=hostile("span"), span_type="agent_run",
                   started_at=SPANS_T0, ended_at=SPANS_T0 + timedelta(seconds=2), entity_name=hostile("entity"),
                   thread_id=THREAD, resource_id=RESOURCE, error={"message": hostile("error")}),
        SpanRecord(trace_id="tr-markup", span_id="s2", parent_span_id="s1", name=hostile("child"),
                   span_type="model_generation", started_at=SPANS_T0, ended_at=SPANS_T0 + timedelta(seconds=1),
                   thread_id=THREAD, resource_id=RESOURCE, attributes={"model": hostile("model")}),
    ])
    store.close()


def _as_markup(text: Any) -> bool:
    """Whether Qt would draw ``text`` (a tooltip, an AutoText label) as rich text with the data's markup."""
    return isinstance(text, str) and (MARKUP in text or RESOURCE in text or THREAD in text) \
        and Qt.mightBeRichText(text)


def _tooltips(view: QAbstractItemView) -> list[str]:
    model, found = view.model(), []
    if model is None:
        return found

    def walk(parent: QModelIndex, depth: int) -> None:
        for r in range(min(model.rowCount(parent), 100)):
            for c in range(1 if isinstance(model, QAbstractListModel) else model.columnCount(parent)):
                tip = model.data(model.index(r, c, parent), Qt.ItemDataRole.ToolTipRole)
                if isinstance(tip, str):
                    found.append(tip)
            if depth < 4:
                walk(model.index(r, 0, parent), depth + 1)

    walk(QModelIndex(), 0)
    return found


def shown(app: QApplication) -> tuple[list[str], list[str]]:
    """(every tooltip and label text now in the window, those Qt draws as the data's markup)."""
    texts, markup = [], []
    for w in app.allWidgets():
        if isinstance(w, QLabel):
            texts.append(w.text())
            rich = w.textFormat() == Qt.TextFormat.RichText or (
                w.textFormat() == Qt.TextFormat.AutoText and Qt.mightBeRichText(w.text()))
            if rich and MARKUP in w.text():
                markup.append(f"label {w.objectName()!r}: {w.text()[:100]!r}")
        texts.append(w.toolTip())
        if _as_markup(w.toolTip()):
            markup.append(f"tooltip of {type(w).__name__} {w.objectName()!r}: {w.toolTip()[:100]!r}")
        if isinstance(w, QAbstractItemView) and w.isVisible():
            for tip in _tooltips(w):
                texts.append(tip)
                if _as_markup(tip):
                    markup.append(f"item tooltip in {type(w.model()).__name__}: {tip[:100]!r}")
    return texts, sorted(set(markup))


def shows(app: QApplication, what: str) -> bool:
    """Whether ``what``'s text is on show yet (as written, or escaped for a tooltip)."""
    return any(hostile(what) in t or html.escape(hostile(what), quote=False) in t for t in shown(app)[0])


def test_stored_markup_is_shown_as_written_in_tooltips_and_labels(qtbot: Any, make_window: Any,
                                                                   tmp_path: Path) -> None:
    """Qt draws a tooltip (and an AutoText label) as rich text when its first line holds an HTML tag: a thread
    titled '<b style=…>' showed bold and red in the thread tree's tooltip, the pane titles' tooltips, the
    Traces pane's lists; a span named '<img src="file:…">' read that file as an image; a message id with a quote
    broke out of Replay's link to it. Every such tooltip now says the text as written (``plain_tip``)."""
    db = tmp_path / "<b>folder" / "markup.db"  # the path is shown too
    db.parent.mkdir()
    seed(db)
    app = QApplication.instance()
    window = make_window()
    window.resize(1100, 800)
    window.open_database(str(db))
    qtbot.waitUntil(lambda: window.resources is not None and len(window.resources.thread_rows()) == 1, timeout=WAIT)
    window.select_thread(Selection(RESOURCE, THREAD))

    assert "<b>folder" in _drawn(window.path_label)
    window.show_tab(MESSAGES)
    qtbot.waitUntil(lambda: window.messages_pane.model.rowCount() >= 3 and shows(app, "title"), timeout=WAIT)
    assert shown(app)[1] == []

    window.show_tab(TRACES)
    try:
        qtbot.waitUntil(lambda: shows(app, "span") and shows(app, "entity"), timeout=WAIT)  # the runs list
    except Exception as exc:  # (seen twice in ~10 whole-suite runs, never alone: say the pane's state)
        raise AssertionError(f"the Traces pane's runs list did not show: {_traces_state(window)}") from exc
    assert shown(app)[1] == []
    traces = window.pane(TRACES)
    traces.open_trace("tr-markup")  # its span tree, and its root's facts (entity, thread, resource, error)
    qtbot.waitUntil(lambda: shows(app, "child") and hostile("span") in traces.span_title.text(), timeout=WAIT)
    assert shown(app)[1] == []
    assert html.escape(hostile("entity")) in traces.span_facts.text()

    window.show_tab(REPLAY)
    replay = window.pane(REPLAY)
    qtbot.waitUntil(lambda: replay.step is not None and not replay.busy, timeout=WAIT)
    rows = replay.view.step_model.rows()
    row = next(i for i, r in enumerate(rows) if MESSAGE_ID in r.stored_ids)
    replay.view.step_table.selectRow(row)
    qtbot.waitUntil(lambda: "From stored messages" in replay.view.fragment_sources.text(), timeout=WAIT)
    assert shown(app)[1] == []
    # The link to the message carries its whole id (opening it opens that message; it was cut at the quote, 'm').
    assert _hrefs(replay.view.fragment_sources.text()) == [MESSAGE_ID]


def _traces_state(window: Any) -> dict[str, Any]:
    """What the Traces pane holds and is doing, for a failure's message."""
    pane = window.pane(TRACES)
    return {"visible": pane.isVisible(), "table visible": pane.trace_table.isVisible(), "flags": pane.flags,
            "loading": pane.loading, "polling": pane._polling, "dirty": pane._dirty, "source": pane.source,
            "traces": [t.trace_id for t in pane.traces], "rows": pane.trace_model.rowCount(),
            "generation": pane._gen, "status": pane.status.text(), "banner": pane.banner.text()
            if pane.banner.isVisible() else None, "poll timer": pane._poll_timer.isActive(),
            "jobs running": window.session.pool.running,
            "tooltips": [tip[:60] for tip in _tooltips(pane.trace_table)][:8]}


def _hrefs(text: str) -> list[str]:
    """The links of rich text as Qt reads them (what ``linkActivated`` hands on)."""
    doc = QTextDocument()
    doc.setHtml(text)
    found, block = [], doc.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fmt = it.fragment().charFormat()
            if fmt.isAnchor() and fmt.anchorHref() not in found:
                found.append(fmt.anchorHref())
            it += 1
        block = block.next()
    return found


def test_plain_tip_leaves_plain_text_alone_and_escapes_what_qt_would_draw_as_markup() -> None:
    assert plain_tip("thread t1\n3 messages") == "thread t1\n3 messages"
    assert plain_tip("x < y > z") == "x < y > z"  # Qt shows it as plain text already
    # ... but not this one: "< b" reads as the tag <b> to Qt, so plain words lost their brackets.
    assert Qt.mightBeRichText("a < b and c > d") and "a &lt; b and c &gt; d" in plain_tip("a < b and c > d")
    tip = plain_tip("Thread <u>thr</u>: 5 tokens\n\n  two  spaces")
    assert Qt.mightBeRichText(tip) and "<u>" not in tip and "&lt;u&gt;thr&lt;/u&gt;" in tip
    assert "white-space:pre-wrap" in tip and "\n\n  two  spaces" in tip  # line breaks and spaces kept


def _drawn(label: QLabel) -> str:
    """A label's text as Qt draws it."""
    rich = label.textFormat() == Qt.TextFormat.RichText or (
        label.textFormat() == Qt.TextFormat.AutoText and Qt.mightBeRichText(label.text()))
    if not rich:
        return label.text()
    doc = QTextDocument()
    doc.setHtml(label.text())
    return doc.toPlainText()


def test_dialogs_and_banners_show_stored_ids_input_and_paths_as_written(qtbot: Any) -> None:
    """The message edit and history dialogs put the message's, thread's and resource's ids into rich text
    unescaped, and the pin dialog the thread's id, its fragment's source and (an AutoText label) the turn's
    input; a banner (which quotes paths, ids and errors) was an AutoText label: an id, input or path holding
    markup was drawn as markup, and what it said was lost. Each is now drawn as
    written (the tags in what the labels show)."""
    from core.messages import Message as Stored
    from studio.edit_jobs import MessageTarget
    from studio.logic.checks_layout import PinTarget
    from studio.widgets.message_edit_dialog import MessageEditDialog, MessageHistoryDialog
    from studio.widgets.banner import Banner
    from studio.widgets.pin_dialog import PinDialog

    message = Stored.user(hostile("text"), id=MESSAGE_ID, thread_id=THREAD, resource_id=RESOURCE, created_at=T0)
    target = MessageTarget(message, THREAD, RESOURCE)
    pin = PinTarget(THREAD, RESOURCE, hostile("input"), 1, hostile("fragment"), "<b>source</b>", (MESSAGE_ID,))
    for dialog in (MessageEditDialog(target), MessageHistoryDialog(target), PinDialog(pin, "/tmp/checks.json")):
        qtbot.addWidget(dialog)
        labels = dialog.findChildren(QLabel)
        drawn = " ".join(_drawn(label) for label in labels)
        shown_here = {MessageEditDialog: (MESSAGE_ID, RESOURCE), MessageHistoryDialog: (MESSAGE_ID,),
                      PinDialog: (hostile("input"), "<b>source</b>")}[type(dialog)]
        for text in (THREAD, *shown_here):
            assert text in drawn, (type(dialog).__name__, text)
    banner = Banner()
    qtbot.addWidget(banner)
    banner.show_message(f"Cannot open {hostile('path')}: permission denied.")
    assert hostile("path") in _drawn(banner.label)
