"""SemanticRecall: similar stored messages join the prompt, and new messages are indexed (spec §2.4).

Input: the last user message is the query; hits (and ``message_range`` neighbours) from the current
thread join the conversation as ``memory`` messages, hits from other threads of the resource arrive as
one system message tagged ``memory``. Output: new user and assistant messages are embedded.
Unlike Mastra, nothing fails silently: an empty result or an error is recorded in the prompt record
(``ctx.skip`` on input, ``ctx.note`` on output) and logged, and every recalled fragment carries its
score in its provenance.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Sequence

from core.message_list import Provenance
from core.messages import Message
from core.options import SemanticRecallOptions
from core.processors.base import BaseProcessor, ProcessorContext, SavedAwareWrite
from core.processors.message_history import turn_failed
from core.storage.memory_store import Include
from core.recall.text import message_text
from core.timeutil import clock_12h, month_name, weekday_name
from core.working_memory import hide_working_memory

if TYPE_CHECKING:  # pragma: no cover
    from core.embedding import Embedder
    from core.storage import Store
    from core.recall import RecallIndex, SearchHit
    from core.recall.index import StagedIndex

log = logging.getLogger(__name__)

_ROLE_ORDER = {"system": 0, "user": 1, "assistant": 2, "tool": 3}
BLOCK_INTRO = "Messages recalled from this user's other conversations, because they resemble the current request:"
BLOCK_OPEN = "<recalled_from_other_threads>"
BLOCK_CLOSE = "</recalled_from_other_threads>"


class SemanticRecall(BaseProcessor):
    """``options`` override the turn's ``semantic_recall`` options when given (top_k 4, range 1/1, resource scope)."""

    id = "semantic-recall"

    def __init__(
        self,
        index: "RecallIndex | None" = None,
        *,
        store: "Store | None" = None,
        embedder: "Embedder | None" = None,
        options: SemanticRecallOptions | None = None,
    ) -> None:
        self.options = options
        if index is None and (store is not None or embedder is not None):
            from core.recall import RecallError, RecallIndex

            if store is None or embedder is None:
                missing = "a store" if store is None else "an embedder"
                raise RecallError(f"SemanticRecall needs {missing} (or a RecallIndex); recall cannot run without it.")
            index = RecallIndex.for_store(store, embedder)
            index.check()  # a missing model or vector table fails here, not at the first turn
        self.index = index

    def _index(self, ctx: ProcessorContext) -> "RecallIndex | None":
        return self.index if self.index is not None else ctx.services.recall_index

    def _options(self, ctx: ProcessorContext) -> SemanticRecallOptions:
        return self.options or ctx.request.options.semantic_recall

    # -- input -----------------------------------------------------------------------------------
    def process_input(self, ctx: ProcessorContext) -> None:
        try:
            self._recall(ctx)
        except Exception as exc:  # recall is an enhancement: the turn proceeds without it, visibly
            log.warning("semantic recall for thread %s failed; the turn goes on without it", ctx.request.thread_id,
                        exc_info=True)
            ctx.skip(self.id, f"recall failed: {type(exc).__name__}: {exc}")

    def _recall(self, ctx: ProcessorContext) -> None:
        req = ctx.request
        opts = self._options(ctx)
        index = self._index(ctx)
        recorded = req.frozen is not None and req.frozen.hits is not None  # a rebuild needs no index
        if index is None and not recorded:
            ctx.skip(self.id, "no recall index: this Memory was built with semantic recall off")
            return
        if not req.thread_id:
            ctx.skip(self.id, "no thread id was given, so there is nothing to recall into")
            return
        last = ctx.messages.last_user_message()
        if last is None:
            ctx.skip(self.id, "no user message in the input to search with")
            return
        query = message_text(last)
        if not query.strip():
            ctx.skip(self.id, "the last user message has no text to search with")
            return
        resource_scope = opts.scope == "resource" and bool(req.resource_id)
        left_out = req.recall_exclude_thread
        if left_out is not None and not resource_scope and left_out == req.thread_id and req.frozen is None:
            # The scope is the thread the model receives whole: nothing recall could find is new to it.
            ctx.note(self.id, query=query, scope="thread", mode=opts.mode, hits=[], excluded_thread=left_out,
                     passed_over=[], reason=None)
            ctx.skip(self.id, "recall searches this thread only (scope \"thread\"), and the model receives "
                              "every message of it already; set semantic recall's scope to \"resource\" to "
                              "recall from the user's other threads")
            return
        searched: dict[str, str] = {}  # the model that scored the hits, when this turn searched
        if req.frozen is not None and req.frozen.hits is not None:  # a recorded turn: exactly its hits
            hits, reason = list(req.frozen.hits), None
        else:
            assert index is not None
            excluded = req.recall_exclude
            unstored = req.not_memory  # (a reconstruction's: not indexed yet when the turn ran)
            filtered = left_out if resource_scope else None
            result = index.search(
                query,
                resource_id=req.resource_id if resource_scope else None,
                thread_id=None if resource_scope else req.thread_id,
                # Messages the model receives anyway take no place: a whole thread is left out by the
                # search itself (never ranked, so the top k is one search of top k); single messages by
                # asking deep enough that the top k is still full when every one of them ranks first.
                top_k=opts.top_k + len(excluded) + len(unstored),
                mode=opts.mode,
                threshold=opts.threshold,
                # Rebuilding a past turn: messages written since are never scored, so they cannot take
                # a place in the top-k that an older message had then.
                until=req.as_of.created_at if req.as_of is not None else None,
                # ... nor those stored after it ran (a reconstruction's): left out before the fusion, they
                # move no other message's score.
                unstored=unstored,
                exclude_thread=filtered,
            )
            hits, reason = [h for h in result.hits if req.as_of is None or h.message_id != req.as_of.id], result.reason
            searched["model"] = index.model_id
            if unstored:
                hits = [h for h in hits if h.message_id not in unstored][:opts.top_k + len(excluded)]
            if excluded or filtered is not None:
                # (the filtered thread's hits dropped too, should a search ever return one)
                passed = [h for h in hits if h.message_id in excluded
                          or (filtered is not None and h.thread_id == filtered)]
                dropped = {h.message_id for h in passed}
                hits = [h for h in hits if h.message_id not in dropped][:opts.top_k]
                # ``passed_over``: hits that were the model's own messages, dropped here. A thread left out
                # by the search is never ranked, so its messages are not among them (``excluded_thread``).
                ctx.note(self.id, passed_over=[h.message_id for h in passed])
                if excluded:
                    ctx.note(self.id, excluded=len(excluded))
                if filtered is not None:
                    ctx.note(self.id, excluded_thread=filtered)
                if not hits and passed and reason is None:
                    reason = f"every similar message ({len(passed)}) is one the model already receives"
        ctx.note(
            self.id, query=query, scope="resource" if resource_scope else "thread", mode=opts.mode,
            hits=[_hit_detail(h) for h in hits], reason=reason, **searched,
        )
        if not hits:
            ctx.skip(self.id, reason or "no similar messages found")
            return
        windows = self._windows(ctx, hits, opts, req.resource_id if resource_scope else None)
        present = ctx.messages.ids() | req.recall_exclude
        fresh = {mid: pair for mid, pair in windows.items() if mid not in present}
        later = 0
        if req.as_of is not None:  # replay: only what existed before the replayed turn is memory
            cutoff = req.before
            assert cutoff is not None
            kept = {mid: p for mid, p in fresh.items()
                    if (p[0].created_at, p[0].id) < cutoff and mid not in req.not_memory}
            later, fresh = len(fresh) - len(kept), kept
        if not fresh:
            present_count = len(windows) - later
            why = [f"{present_count} recalled message(s) already in the context"] if present_count else []
            if later:
                why.append(f"{later} written after this turn")
            ctx.skip(self.id, "nothing to add: " + "; ".join(why))
            return
        same = [p for p in fresh.values() if p[0].thread_id in (None, req.thread_id)]
        other = [p for p in fresh.values() if p[0].thread_id not in (None, req.thread_id)]
        for msg, hit in sorted(same, key=lambda p: _order_key(p[0])):
            ctx.messages.add(msg, "memory", _provenance(msg, hit))
        if other and resource_scope:
            other.sort(key=lambda p: _order_key(p[0]))
            ctx.messages.add_system(
                format_other_threads([m for m, _ in other]),
                "memory",
                Provenance(
                    self.id,
                    stored_ids=tuple(m.id for m, _ in other),
                    score=max(h.score for _, h in other),
                    detail={
                        "scores": {m.id: _score(h) for m, h in other},
                        "hit_ids": sorted({h.message_id for _, h in other}),
                        "threads": sorted({m.thread_id or "" for m, _ in other}),
                        "recalled": [recalled_detail(m, h) for m, h in other],
                    },
                ),
            )
        ctx.note(self.id, added_same_thread=len(same), added_other_threads=len(other) if resource_scope else 0)

    def _windows(
        self, ctx: ProcessorContext, hits: list["SearchHit"], opts: SemanticRecallOptions, resource_id: str | None
    ) -> dict[str, tuple[Message, "SearchHit"]]:
        """Each hit with its neighbours, attributed to the best-scoring hit whose window holds it."""
        out: dict[str, tuple[Message, SearchHit]] = {}
        rng = opts.message_range
        frozen = ctx.request.frozen
        if frozen is not None and frozen.hits is None:
            frozen = None  # recall re-queried (a what-if changed its options): windows are queried too
        seen: dict[str, list[str]] = {}
        windows: Sequence[list[Message]]
        if frozen is not None:
            windows = [frozen.window(hit.message_id) for hit in hits]
        else:  # every hit's window in one statement
            windows = ctx.store.memory.message_windows(
                [Include(hit.message_id, hit.thread_id, rng.before, rng.after) for hit in hits], resource_id=resource_id
            )
        for hit, msgs in zip(hits, windows):  # best first, so a shared neighbour keeps the better hit's score
            seen[hit.message_id] = [m.id for m in msgs]
            for m in msgs:
                if m.role != "system" and m.id not in out:
                    out[m.id] = (m, hit)
        ctx.note(self.id, windows=seen)  # each hit's whole window, for the turn record
        return out

    # -- output ----------------------------------------------------------------------------------
    def process_output(self, ctx: ProcessorContext) -> None:
        req = ctx.request
        if req.read_only:
            ctx.note(self.id, indexed=0, index_skipped="read-only: new messages were not indexed")
            return
        if not ctx.live:
            return  # a preview (Memory.assemble) must not write
        if turn_failed(ctx):  # nothing of the turn is saved, so nothing is indexed
            ctx.note(self.id, indexed=0, index_skipped="the model call failed; nothing of the turn was saved")
            return
        index = self._index(ctx)
        if index is None:
            ctx.note(self.id, index_skipped="no recall index: this Memory was built with semantic recall off")
            return
        # Mastra's order runs this before the turn is saved; indexing then would leave vector and
        # keyword rows for an input that a failed turn never stored. The rows are staged now (contexts
        # read, passages embedded: no lock held) and written in the save's own transaction
        # (``RecallRows``), so what a turn saved is indexed even if its process dies right after the save
        # (a separate write after it left such messages out of recall until a ``reindex``).
        try:
            staged = stage_turn(index, ctx.messages.new_messages(), req.resource_id)
        except Exception as exc:  # indexing must never fail the turn
            log.warning("indexing the turn of thread %s for recall failed", req.thread_id, exc_info=True)
            ctx.note(self.id, index_failed={"*": f"{type(exc).__name__}: {exc}"})
            return
        ctx.pending_writes.append(RecallRows(staged))
        ctx.after_output.append(lambda: self._indexed(ctx, staged))

    def _indexed(self, ctx: ProcessorContext, staged: "StagedIndex") -> None:
        """After the save: what follows the rows' commit (partition upkeep), and the turn record's notes.
        A save that did not take the staged rows (a save function of services built without a ``Memory``
        commits no staged writes) is indexed here, after it, as before."""
        try:
            if staged.pending:
                new = [m for m in ctx.saved if m.role in ("user", "assistant")]
                if ctx.request.resource_id:
                    new = [m if m.resource_id else m.copy(resource_id=ctx.request.resource_id) for m in new]
                report = staged.index.index_messages(staged.index.unindexed(new))
            else:
                report = staged.finish()
        except Exception as exc:  # indexing must never fail the turn
            log.warning("indexing the turn of thread %s for recall failed", ctx.request.thread_id, exc_info=True)
            ctx.note(self.id, index_failed={"*": f"{type(exc).__name__}: {exc}"})
            return
        ctx.note(self.id, indexed=len(report.indexed), index_failed=dict(report.failed))
        if report.failed and not report.indexed:
            first = next(iter(report.failed.values()))
            ctx.note(self.id, index_error=f"{len(report.failed)} new message(s) not indexed: {first}")


def stage_turn(index: "RecallIndex", messages: Sequence[Message], resource_id: str | None) -> "StagedIndex":
    """A turn's messages staged for recall (``RecallIndex.stage``) as its save stores them: users' and assistants'
    only, with the turn's resource, working-memory tool traffic hidden."""
    prepared = []
    for m in messages:
        if m.role not in ("user", "assistant"):
            continue
        if resource_id and not m.resource_id:
            m = m.copy(resource_id=resource_id)
        content = hide_working_memory(m.content)
        if content is not None:
            prepared.append(m if content is m.content else m.copy(content=content))
    return index.stage(prepared)


class RecallRows(SavedAwareWrite):
    """A turn's recall rows (vectors, keyword documents), staged before its save and written in the save's
    transaction, under a savepoint: a failed index write is reported and never takes the save with it."""

    indexes_recall = True

    def __init__(self, staged: "StagedIndex") -> None:
        self.staged = staged

    def commit(self, conn: Any) -> None:
        self.staged.commit(conn)

    def commit_saved(self, conn: Any, saved: Sequence[Message]) -> None:
        self.staged.commit(conn, saved)


def format_other_threads(messages: list[Message]) -> str:
    """One system message: intro, opening tag, a date header whenever the day changes, one line per message."""
    lines = [BLOCK_INTRO, BLOCK_OPEN]
    current_day = None
    for m in messages:
        when = m.created_at if m.created_at.tzinfo else m.created_at.replace(tzinfo=timezone.utc)
        when = when.astimezone(timezone.utc)
        day = when.date()
        if day != current_day:
            lines.append(f"-- {weekday_name(when)} {when.day:02d} {month_name(when)} {when.year} (UTC) --")
            current_day = day
        text = " ".join(message_text(m).split())
        lines.append(f"[{clock_12h(when)}] {m.role.capitalize()}: {text}")
    lines.append(BLOCK_CLOSE)
    return "\n".join(lines)


def _order_key(m: Message) -> tuple[Any, ...]:
    return (m.created_at, m.thread_id or "", _ROLE_ORDER.get(m.role, 9), m.id)


def _score(hit: "SearchHit") -> float:
    return float(hit.vector_score if hit.vector_score is not None else hit.score)


def _provenance(msg: Message, hit: "SearchHit") -> Provenance:
    detail: dict[str, Any] = {"source": hit.source, "rank_score": hit.score}
    if hit.vector_score is not None:
        detail["similarity"] = hit.vector_score
    if hit.keyword_score is not None:
        detail["keyword_score"] = hit.keyword_score
    if msg.id != hit.message_id:
        detail["context_of"] = hit.message_id  # a message_range neighbour of the hit
    return Provenance("semantic-recall", stored_ids=(msg.id,), score=hit.score, detail=detail)


def recalled_detail(msg: Message, hit: "SearchHit") -> dict[str, Any]:
    """One message of the other-threads block: its own scores when it is a hit; a neighbour (from
    ``message_range``) has none of its own and names the hit it came with (and that hit's score)."""
    is_hit = msg.id == hit.message_id
    return {
        "message_id": msg.id, "thread_id": msg.thread_id, "role": msg.role, "hit": is_hit,
        "hit_id": hit.message_id, "hit_score": hit.score, "source": hit.source,
        "score": hit.score if is_hit else None,
        "vector_score": hit.vector_score if is_hit else None,
        "keyword_score": hit.keyword_score if is_hit else None,
    }


def _hit_detail(hit: "SearchHit") -> dict[str, Any]:
    return {
        "message_id": hit.message_id, "thread_id": hit.thread_id, "score": hit.score, "source": hit.source,
        "vector_score": hit.vector_score, "keyword_score": hit.keyword_score,
    }
