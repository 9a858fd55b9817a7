"""One replayed model call of a turn: the context as a fragment list marked with what changed since the
previous turn (or, for a later call of the turn, since the call before), the selected fragment, and
tabs for the call's whole request (model, endpoint, settings, tool definitions with their tokens,
usage), the prompt as received beside the one rebuilt now, the reply, the recall hits and the tokens
per section.

Widgets only: it shows a ``StepData`` (``studio.replay_jobs``) through the layout functions of
``studio.logic.replay_layout`` and emits the stored messages the user wants to open.
"""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, Qt, Signal
from PySide6.QtGui import QColor, QResizeEvent
from PySide6.QtWidgets import (
    QLabel,
    QScrollArea,
    QSizePolicy,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from studio.logic.replay_layout import (
    CHANGE_TINTS,
    STEP_CAPS,
    STEP_FLOORS,
    STEP_OPTIONAL,
    STEP_SAMPLES,
    STEP_SHARES,
    STEP_STACKED_ROOMY,
    STEP_TEXT_LEAST,
    STEP_TEXT_ROOM,
    STEP_TEXT_ROOM_SHARE,
    STEP_TEXT_SHORT,
    STEP_WHY_ROOM,
    Comparison,
    RecallRow,
    StepRow,
    TokenRow,
    change_summary,
    input_ids,
    prompt_text,
    prompt_text_diff,
    reason_label,
    same_now_text,
    recall_rows,
    recall_scored_text,
    reply_text,
    step_rows,
    token_rows,
)
from studio.logic.checks_layout import PinTarget
from studio.logic.edit_marks import changed_since, edited_note, fragment_mark, sources_note
from studio.logic.row_match import same_fragment
from studio.logic.short_ids import short_id
from studio.replay_jobs import StepData
from studio.widgets.code_editor import PART_NOTES_HINT, CodeEditor
from studio.widgets.diff_view import DiffView
from studio.widgets.fit_to_pane import FitToPane
from studio.widgets.fitted_label import FittedLabel
from studio.widgets.fitted_tabs import FittedTabs
from studio.widgets.fragment_actions import fragment_menu, popup
from studio.widgets.pane_header import caption
from studio.widgets.record_table import (RIGHT, ROW_ROLE, SHORT_ROLE, SORT_ROLE, Column, RecordTableModel,
                                         keep_current_in_sight)
from studio.widgets.replay_what_if import table_for
from studio.widgets.scroll_fit import least_height_at_width
from studio.widgets.request_view import RequestPanel
from studio.widgets.short_forms import draw_short_forms
from studio.widgets.a11y import named

STEP_COLUMNS: list[Column[StepRow]] = [
    Column("#", lambda r: "" if r.index is None else r.index, RIGHT),
    Column("Change", lambda r: r.mark, tooltip=lambda r: r.mark),
    Column("Role", lambda r: r.role, tooltip=lambda r: r.role),
    Column("Source", lambda r: r.source, color=lambda r: r.color, tooltip=lambda r: f"{r.source} · role {r.role}"),
    Column("Stored", lambda r: r.stored_label,
           tooltip=lambda r: (f"observational-memory record {r.observation_record}" if r.observation_record
                              else "\n".join(r.stored_ids)), short=lambda r: r.stored_forms),
    Column("Tokens", lambda r: f"{r.tokens:,}", RIGHT),
    Column("Why", lambda r: r.why, tooltip=lambda r: r.why, short=lambda r: r.why_forms),
    Column("Text", lambda r: r.preview, tooltip=lambda r: r.preview),
]
STEP_WIDTHS = {"#": 34, "Change": 92, "Role": 70, "Source": 176, "Tokens": 60, "Why": 190}  # (until the first resize)
RECALL_COLUMNS: list[Column[RecallRow]] = [
    Column("#", lambda r: r.rank, RIGHT, tooltip=lambda r: f"rank {r.rank} of the recall hits"),
    Column("Message", lambda r: short_id(r.message_id),
           tooltip=lambda r: f"message {r.message_id} (rank {r.rank}, with {r.window} messages around it)\n"
                             "Double-click to open this message"),
    Column("Thread", lambda r: r.thread_id + ("  (other thread)" if r.other_thread else ""),
           tooltip=lambda r: r.thread_id + ("\n(another thread than the one replayed)" if r.other_thread else "")),
    Column("Vector", lambda r: r.score(r.vector), RIGHT, tooltip=lambda r: "cosine similarity to the query"),
    Column("Keyword", lambda r: r.score(r.keyword), RIGHT,
           tooltip=lambda r: "keyword score (BM25 on libSQL, ts_rank on Postgres)"),
    Column("Fused", lambda r: r.score(r.fused), RIGHT),
    Column("Window", lambda r: f"{r.window} msg", RIGHT, tooltip=lambda r: f"{r.window} messages around the hit"),
]
# Fitted to the request side (at a 1,440 px window the whole message ids pushed Keyword, Fused and Window
# past its edge; at that width the request side is ~450 px): short message ids, the scores and the window
# whole, the thread the rest, cut with "…", whole on hover. The rank ("#") is left out while the thread would
# have less than a usual thread id: the rows are in rank order, and the message's tooltip says the rank.
# (The window was the one left out before, and a user at 1,440 px never saw how much context a hit brought.)
RECALL_SAMPLES = {"#": "00", "Message": "…2d46ecda", "Vector": "0.000", "Keyword": "00.000", "Fused": "0.000",
                  "Window": "00 msg"}
TOKEN_COLUMNS: list[Column[TokenRow]] = [
    Column("Section", lambda r: r.label),
    Column("At the turn (o200k)", lambda r: f"{r.at_turn:,}", RIGHT),
    Column("Rebuilt now (o200k)", lambda r: "" if r.now is None else f"{r.now:,}", RIGHT),
]


class StepTableModel(RecordTableModel[StepRow]):
    """Fragment rows tinted by their change since the previous turn (the Change column says it in words).

    Painting asks every cell for seven roles; the cells are computed once per step, so a repaint is a
    few list lookups rather than a call into each column's accessor."""

    _DISPLAY = Qt.ItemDataRole.DisplayRole
    _BACKGROUND = Qt.ItemDataRole.BackgroundRole
    _DECORATION = Qt.ItemDataRole.DecorationRole
    _ALIGN = Qt.ItemDataRole.TextAlignmentRole

    def __init__(self, columns: list[Column[StepRow]], parent: Any = None) -> None:
        super().__init__(columns, parent)
        self._columns_list = columns
        self._cells: list[list[str]] = []
        self._tints: list[QColor | None] = []
        self._swatches: list[list[QColor | None]] = []
        self._shorts: list[list[tuple[str, ...]]] = []
        self._aligns = [int(c.align) for c in columns]

    def set_rows(self, rows: Any) -> None:
        rows = list(rows)
        self._cells = [["" if (v := c.text(r)) is None else str(v) for c in self._columns_list] for r in rows]
        self._tints = [QColor(*CHANGE_TINTS[r.change]) if r.change in CHANGE_TINTS else None for r in rows]
        self._swatches = [[QColor(c.color(r)) if c.color is not None and c.color(r) else None
                           for c in self._columns_list] for r in rows]
        self._shorts = [[tuple(c.short(r)) if c.short is not None else () for c in self._columns_list] for r in rows]
        super().set_rows(rows)

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        row, col = index.row(), index.column()
        if role == self._DISPLAY:
            return self._cells[row][col]
        if role == self._BACKGROUND:
            return self._tints[row]
        if role == self._DECORATION:
            return self._swatches[row][col]
        if role == self._ALIGN:
            return self._aligns[col]
        if role == SHORT_ROLE:
            return self._shorts[row][col]
        if role in (Qt.ItemDataRole.ToolTipRole, ROW_ROLE, SORT_ROLE):
            return super().data(index, role)
        return None


def _ignored_width(label: QLabel) -> QLabel:
    """Long dynamic text must never widen the window: it wraps or is cut, the width comes from the pane."""
    label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    return label


# The request side's tabs: title, the shorter one used while the titles don't fit, tooltip.
REQUEST_TABS = (("Request", "Request", "Request: the whole request of this model call"),
                ("Received vs Rebuilt Now", "vs Now", "Received vs Rebuilt Now: what the model received beside "
                 "the prompt rebuilt from the database now, and their diff"),
                ("Reply", "Reply", "Reply: what the model answered"),
                ("Recall", "Recall", "Recall: the messages semantic recall brought into this prompt"),
                ("Tokens", "Tokens", "Tokens: the prompt's tokens by source"))
# px: a view narrower than this puts its tabs under the context table, not beside it. The table is Replay's main
# view: beside the request at a 1,440 px window (a ~1,030 px view) it had ~575 px, the request side ~450 (its recall
# table's columns need ~420), so the fragment's text kept ~70 px ("Hi! I'A…") and its reason read "observed by
# observati…". Stacked there, the table has the view's width: every reason whole, the text ~280 px, Role and Stored.
STACK_BELOW = 1280
TABS_LEAST = 150  # px: the request side's least height, its tab bar and a request's first lines (stacked)


class TurnView(QSplitter):
    open_message = Signal(str)  # a stored message id (a fragment's source, a recall hit)
    edit_requested = Signal(str)  # Edit Stored Message… (a fragment's context menu)
    pin_requested = Signal(object)  # Pin… (a fragment's context menu): a PinTarget

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(Qt.Orientation.Horizontal, parent)
        left = QSplitter(Qt.Orientation.Vertical)
        left.setChildrenCollapsible(False)  # (a part is never dragged away to nothing)
        upper = QWidget()
        ul = QVBoxLayout(upper)
        ul.setContentsMargins(0, 0, 0, 0)
        self.context_caption = _ignored_width(caption("Context at this turn"))
        self.change_label = FittedLabel("")  # wraps, and is never cut when the list above is crowded
        self.change_label.setObjectName("replayChanges")
        self.step_model = StepTableModel(STEP_COLUMNS, self)
        self.step_table = table_for(self.step_model, STEP_WIDTHS)
        self.step_table.setObjectName("replayFragments")
        named(self.step_table, "Context at this turn")
        self.step_table.setTextElideMode(Qt.TextElideMode.ElideRight)
        keep_current_in_sight(self.step_table)  # (the fragment picked on opening a thread was out of sight)
        self._fit = FitToPane(self.step_table, STEP_SAMPLES, STEP_SHARES, last="Text", floors=STEP_FLOORS,
                              caps=STEP_CAPS, optional=STEP_OPTIONAL, decorated=("Source",),
                              rest_sample=STEP_TEXT_LEAST, optional_room={"Why": STEP_WHY_ROOM, "Text": STEP_TEXT_ROOM},
                              last_room_share=STEP_TEXT_ROOM_SHARE,
                              short_floors=[("Why", STEP_FLOORS["Why"]), ("Text", STEP_TEXT_SHORT)])
        # A reason or a stored record too long for its cell is drawn in its longest short form that fits, whole
        # (``REASON_SHORT``): at a 900 px window the reason read "observed by ob…"; the tooltip says it all.
        self.step_delegate = draw_short_forms(self.step_table)
        for w in (self.context_caption, self.change_label, self.step_table):
            ul.addWidget(w)
        left.addWidget(upper)
        lower = QWidget()
        ll = QVBoxLayout(lower)
        ll.setContentsMargins(0, 0, 0, 0)
        # The picked fragment's change, source, tokens and whole reason: it wraps (the table's cell may show a short
        # form of the reason, and cut here at a 900 px window it read "why: observed by observati…")
        self.fragment_header = FittedLabel("Fragment")
        self.fragment_header.setObjectName("caption")
        bold = self.fragment_header.font()
        bold.setBold(True)
        self.fragment_header.setFont(bold)
        self.fragment_sources = FittedLabel("")  # (wraps; its lines are its least height: never cut)
        self.fragment_sources.setTextFormat(Qt.TextFormat.RichText)
        self.fragment_sources.linkActivated.connect(self.open_message.emit)
        self.fragment_text = named(CodeEditor("prose", read_only=True), "Selected fragment's text")
        for part in (self.fragment_header, self.fragment_sources, self.fragment_text):
            ll.addWidget(part)
        # A few lines of the fragment stay in sight when the view is crowded (stacked, with a banner above)
        self.fragment_text.setMinimumHeight(4 * self.fragment_text.fontMetrics().lineSpacing()
                                            + self.fragment_text.horizontalScrollBar().sizeHint().height()
                                            + 2 * self.fragment_text.frameWidth() + 8)
        left.addWidget(lower)
        left.setSizes([380, 200])
        least_height_at_width(upper)  # (their wrapped lines at the width they have, not at their least)
        least_height_at_width(lower)
        self.addWidget(left)

        self.tabs = QTabWidget()
        self.tabs.setObjectName("replayTabs")
        self.request_view = RequestPanel()
        # Its usage, settings and tool tables ask ~310 px of height: they scroll in their tab, so the
        # view can stack (``STACK_BELOW``) in a pane of ordinary height.
        self.request_page = QScrollArea()
        self.request_page.setObjectName("replayRequestScroll")
        self.request_page.setWidgetResizable(True)
        self.request_page.setFrameShape(QScrollArea.Shape.NoFrame)
        self.request_page.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.request_page.setWidget(self.request_view)
        self.tabs.addTab(self.request_page, "Request")
        compare_tab = QSplitter(Qt.Orientation.Vertical)
        compare_tab.setChildrenCollapsible(False)  # (a part is never dragged away to nothing)
        sides = QSplitter(Qt.Orientation.Horizontal)
        sides.setChildrenCollapsible(False)  # (a part is never dragged away to nothing)
        self.received_view = named(CodeEditor("prose", read_only=True), "Received (the record)")
        self.now_view = named(CodeEditor("prose", read_only=True), "Rebuilt now")
        self.received_caption = caption("Received (the record)")
        for head, view in ((self.received_caption, self.received_view), (caption("Rebuilt now"), self.now_view)):
            holder = QWidget()
            hl = QVBoxLayout(holder)
            hl.setContentsMargins(0, 0, 0, 0)
            hl.addWidget(head)
            hl.addWidget(view)
            sides.addWidget(holder)
        compare_tab.addWidget(sides)
        self.now_diff = DiffView()
        self.now_diff.setObjectName("replayNowDiff")
        compare_tab.addWidget(self.now_diff)
        compare_tab.setSizes([300, 160])
        self.tabs.addTab(compare_tab, "Received vs Rebuilt Now")
        self.reply_view = named(CodeEditor("prose", read_only=True), "Reply")
        self.tabs.addTab(self.reply_view, "Reply")
        self.recall_model: RecordTableModel[RecallRow] = RecordTableModel(RECALL_COLUMNS, self)
        self.recall_table = named(table_for(self.recall_model), "Recall")
        self.recall_table.doubleClicked.connect(self._open_recall)
        self.recall_fit = FitToPane(self.recall_table, RECALL_SAMPLES, {}, last="Thread",
                                rest_sample="liwei-shanghai", optional=("#",))
        # Whose scores these are (the embedding model the record names) and whether today's index is another's.
        self.recall_scored = QLabel()
        self.recall_scored.setObjectName("replayRecallScored")
        self.recall_scored.setWordWrap(True)
        self.recall_scored.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.recall_page = QWidget()
        recall_box = QVBoxLayout(self.recall_page)
        recall_box.setContentsMargins(0, 4, 0, 0)
        recall_box.addWidget(self.recall_scored)
        recall_box.addWidget(self.recall_table, 1)
        self.tabs.addTab(self.recall_page, "Recall")
        self.token_model: RecordTableModel[TokenRow] = RecordTableModel(TOKEN_COLUMNS, self)
        self.tabs.addTab(named(table_for(self.token_model), "Tokens"), "Tokens")
        self.tab_fit = FittedTabs(self.tabs, REQUEST_TABS)  # (Tokens and Recall hid behind scroll arrows)
        # Stacked in a short page, the tabs kept their bar and two lines (135 px: they ask the least height of
        # the page shown, a scroll area); a request's call, its Copy button and its model line stay in sight.
        self.tabs.setMinimumHeight(TABS_LEAST)
        self.addWidget(self.tabs)
        self.setSizes([660, 520])  # the context table's eight columns get the larger part
        self.setChildrenCollapsible(False)
        self.step_table.selectionModel().currentRowChanged.connect(lambda cur, _prev: self._show_fragment(cur.row()))
        self.step_table.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.step_table.customContextMenuRequested.connect(self._fragment_menu)
        self._step: StepData | None = None
        self._thread_id = ""
        self._call = 0  # the model call shown

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        """Side by side from ``STACK_BELOW`` px wide, else the tabs under the context table: side by side in
        a narrower pane (a 1,100 px window) the table had ~385 px, below what its columns' titles need, so
        Source, Why and Text sat behind a scroll bar, and the received and rebuilt prompts were ~150 px
        columns each; at a 1,440 px window ~575 px, the text ~70 px. The split is a splitter: the user drags it."""
        want = Qt.Orientation.Horizontal if event.size().width() >= STACK_BELOW else Qt.Orientation.Vertical
        # Side by side the table is narrower than stacked: there the role and the stored ids (said again in the
        # source's tooltip and under the table) give way before the reason or the text is cut; stacked, the role
        # shows where it fits, the stored ids (cut to "record …7d…" there) where the text keeps a quarter of the
        # table too (in the themed app at a 1,440 px window they left the text 237 px of 1,024).
        roomy = STEP_OPTIONAL if want == Qt.Orientation.Horizontal else STEP_STACKED_ROOMY
        if self._fit.roomy != roomy:
            self._fit.roomy = roomy
            self._fit.fit()
        if want != self.orientation():
            self.setOrientation(want)
            # (stacked, the table and the fragment's text above get the larger part: the tabs scroll)
            whole, share = ((event.size().width(), 55) if want == Qt.Orientation.Horizontal
                            else (event.size().height(), 62))
            self.setSizes([whole * share // 100, whole - whole * share // 100])
        super().resizeEvent(event)

    def show_step(self, step: StepData, thread_id: str, cmp: Comparison, call: int = 0) -> None:
        """Turn ``step``'s model call ``call`` (0: the first). The same call shown again (the thread read
        again after another program wrote to it) keeps the fragment selected when it is still there."""
        calls = step.calls
        call = max(0, min(call, len(calls) - 1))
        same = self._step is not None and (self._thread_id, self._step.index, self._call) == (thread_id, step.index,
                                                                                             call)
        kept = self.step_model.row_at(self.step_table.currentIndex().row()) if same else None
        self._step, self._thread_id = step, thread_id
        received, now = calls[call], step.now_call(call)
        self._call = call
        of = f", model call {call + 1} of {len(calls)}" if len(calls) > 1 else ""
        self.context_caption.setText(f"Context at turn {step.index + 1}{of} ({received.total_tokens:,} tokens, "
                                     "o200k estimate)")
        changes = step.call_changes[call] if call < len(step.call_changes) else (step.changes if call == 0 else [])
        if call > 0:
            self.change_label.setText(f"Since model call {call}: {change_summary(changes)}")
        else:
            self.change_label.setText("First turn: nothing to compare with." if step.previous_index is None else
                                      f"Since turn {step.index}: {change_summary(changes)}")
        self.step_model.set_rows(step_rows(received, changes, input_ids(step.turn)))
        self._fit_rows()
        info = step.received.replay
        if info is not None and info.record is not None and info.kind == "recorded":
            edited = f"; {edited_note(info.changed_since)}" if info.changed_since else ""
            self.received_caption.setText("Received (the record" + (", exact" if info.exact else ", differs")
                                          + edited + ")")
        elif info is not None and info.record_state == "damaged":
            self.received_caption.setText("Received (reconstructed: the record is damaged)")
        else:
            self.received_caption.setText("Received (reconstructed: no record)")
        self.received_view.load(prompt_text(received))
        self.now_view.load(prompt_text(now) if now is not None else "(the engine makes fewer model calls now)")
        if now is not None and cmp.same:  # a diff of two identical prompts is all noise
            self.now_diff.set_diff([], empty_text=same_now_text(step.received))
        elif now is not None:
            self.now_diff.set_diff(prompt_text_diff(received, now))
        else:
            self.now_diff.set_diff([], empty_text="(rebuilt now, the turn makes fewer model calls)")
        self.request_view.show_request(step.requests[call] if call < len(step.requests) else None)
        self.reply_view.load(reply_text(step.reply) or "(no stored reply: the turn failed or was not saved)")
        self.recall_model.set_rows(recall_rows(step.received, thread_id))
        scored = recall_scored_text(step.received, step.recall_model_now)
        self.recall_scored.setText(scored)
        self.recall_scored.setVisible(bool(scored))
        self.token_model.set_rows(token_rows(received, now) if call > 0 else token_rows(step.received, step.now))
        rows = self.step_model.rows()
        first = next((i for i, r in enumerate(rows) if r.change), 0)
        found = same_fragment(rows, kept) if kept is not None else None  # (``row_match``)
        first = first if found is None else found
        if self.step_model.rowCount():
            self.step_table.selectRow(first)

    def _fit_rows(self) -> None:
        """What the rows shown ask of the columns: the Source column's floor, the widest source ("observational-memory"
        was cut to "observational-…" at a 1,440 px window), at least the usual one; what the reason gives way to in a
        table too narrow for the floors, the widest of the rows' short reasons ("observed"); the stored ids' width,
        the widest of their shortest labels ("…441431fe +2" was cut in a column as wide as one id)."""
        metrics, rows = self.step_table.fontMetrics(), self.step_model.rows()
        widest = max((r.source for r in rows), key=metrics.horizontalAdvance, default=STEP_FLOORS["Source"])
        floor = max(widest, STEP_FLOORS["Source"], key=metrics.horizontalAdvance)
        # (the rows' most telling short reasons before the text gives way, their shortest after it: "memory changed"
        # beside "working-memory" rather than "changed" where the text's "You are a" gives the few px it needs)
        telling = max(((r.why, *r.why_forms)[min(1, len(r.why_forms))] for r in rows if r.why),
                      key=metrics.horizontalAdvance, default="new")
        why = max(((r.why, *r.why_forms)[-1] for r in rows if r.why), key=metrics.horizontalAdvance, default="new")
        stored = max(((r.stored_label, *r.stored_forms)[-1] for r in rows), key=metrics.horizontalAdvance,
                     default=STEP_SAMPLES["Stored"])
        stored = max(stored, STEP_SAMPLES["Stored"], key=metrics.horizontalAdvance)
        fit, short = self._fit, [("Why", telling), ("Text", STEP_TEXT_SHORT), ("Why", why)]
        if (fit.floors.get("Source"), fit.short_floors, fit.samples.get("Stored")) != (floor, short, stored):
            fit.floors["Source"], fit.short_floors, fit.samples["Stored"] = floor, short, stored
            fit.fit()

    def clear(self) -> None:
        for model in (self.step_model, self.recall_model, self.token_model):
            model.set_rows([])
        self.request_view.show_request(None)
        for view in (self.received_view, self.now_view, self.reply_view, self.fragment_text):
            view.load("")
        self.now_diff.set_diff([], empty_text="")
        self.change_label.setText("")
        self.context_caption.setText("Context at this turn")  # (not the turn cleared away: its number, its tokens)
        self.fragment_header.setText("Fragment")
        self.fragment_sources.setText("")

    def _show_fragment(self, row: int) -> None:
        rec = self.step_model.row_at(row)
        if rec is None:
            return
        changed = changed_since(self._step.received) if self._step else {}
        edited = fragment_mark(changed, rec.stored_ids)
        # (turn 1's first call has nothing before it: its fragments are neither changed nor unchanged)
        compared = self._step is not None and (self._step.previous_index is not None or self._call > 0)
        mark = rec.mark or ("unchanged" if compared else "")
        bits = [*([mark] if mark else []), *([edited] if edited else []), rec.source, f"{rec.tokens:,} tokens"]
        if rec.reason:
            bits.append(f"why: {reason_label(rec.reason)}")
        self.fragment_header.setText(" · ".join(bits))
        links = ", ".join(f'<a href="{esc(i)}">{esc(i)}</a>' for i in rec.stored_ids[:12])
        note = sources_note(changed, rec.stored_ids)
        where = (f"From the observational-memory record {esc(rec.observation_record)}, not a stored message"
                 if rec.observation_record is not None else
                 f"From stored messages: {links}" if links else "Not from a stored message")
        self.fragment_sources.setText(where + (f"<br><i>{esc(note)}</i>" if note else "")
                                      + (f"<br><i>{esc(PART_NOTES_HINT)}</i>" if rec.part_notes else ""))
        if rec.change == "changed" and rec.text_before is not None:
            # A message that came another way names both ways, the only thing about it that changed.
            before, now = ((f" (from {rec.source_before})", f" (from {rec.source})") if rec.source_before else ("", ""))
            same = "The same text; only the way it reached the prompt changed.\n\n" \
                if rec.source_before and rec.text_before == rec.text else ""
            head = f"{same}— before{before} —\n{rec.text_before}\n\n— now{now} —\n"
            self.fragment_text.load(head + rec.text, [(a + len(head), b + len(head)) for a, b in rec.part_notes])
        else:
            self.fragment_text.load(rec.text, rec.part_notes)

    def pin_target(self, row: int) -> PinTarget | None:
        rec, step = self.step_model.row_at(row), self._step
        if rec is None or step is None or rec.index is None:
            return None  # a fragment that left this turn's prompt is not in it to pin
        calls = step.calls
        shown = calls[self._call] if self._call < len(calls) else step.received
        if shown is not step.received and not any(f.source == rec.source and f.text == rec.text
                                                  for f in step.received.fragments):
            return None  # a check rebuilds the turn's first model call, which lacks this fragment
        fragment = shown.fragments[rec.index] if rec.index < len(shown.fragments) else None
        hits = tuple(fragment.detail.get("hit_ids") or ()) if fragment is not None else ()
        return PinTarget(thread_id=self._thread_id, resource_id=step.received.resource_id,
                         input_text=step.turn.input_text, turn_number=step.index + 1, text=rec.text,
                         source=rec.source, stored_ids=hits or rec.stored_ids)

    def _fragment_menu(self, pos: Any) -> None:
        index = self.step_table.indexAt(pos)
        if not index.isValid():
            return
        self.step_table.selectRow(index.row())
        rec = self.step_model.row_at(index.row())
        target = self.pin_target(index.row())
        menu = fragment_menu(self.step_table, rec.stored_ids if rec else (), self.edit_requested.emit,
                             (lambda: self.pin_requested.emit(target)) if target is not None else None,
                             "this fragment left the prompt at this turn")
        self.fragment_menu_shown = menu
        popup(menu, self.step_table.viewport(), pos)

    def _open_recall(self, index: QModelIndex) -> None:
        row = self.recall_model.row_at(index.row())
        if row is not None:
            self.open_message.emit(row.message_id)


def esc(text: str) -> str:
    """``text`` for rich text, an attribute's value included (a stored id in a link's ``href``)."""
    return html.escape(text)
