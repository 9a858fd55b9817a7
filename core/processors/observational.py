"""ObservationalMemory: replaces message history with a dated observation log (spec §3).

Input: load the thread's *unobserved* messages. The observer model turns old messages into
observation lines and they leave the raw context; when the log grows past ``observation_tokens`` the
reflector rewrites it into a new generation. The actor gets the log as system messages (tag
``observational-memory``), a continuation reminder, the still-unobserved messages and the input.
Output: the turn is saved and the row's ``pendingMessageTokens`` brought up to date.

With buffering (``buffer_tokens``, the default) the observer runs in the memory's background work
each time ``buffer_tokens`` of unobserved messages accumulate, and its output waits in the buffer.
When ``message_tokens`` is reached, the buffered observations are *activated* at once (the turn does
not wait); only above ``block_after`` does a turn wait for the observer. Reflection is buffered the
same way. With ``buffer_tokens=False`` (and in resource scope) everything runs in the turn.

A failed or unreadable observer reply changes nothing: the messages stay raw, and the model is not
asked again before a back-off expires. While previewing (``ctx.live`` False) nothing is written and
no model is called; the record says what would have happened.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Callable

from core.context_window import ContextWindowError
from core.llm.stopping import CallStopped, current_stop
from core.llm.yielding import TRAFFIC
from core.message_list import Provenance
from core.messages import Message
from core.observational import buffer_store
from core.observational import resource_scope as rs
from core.observational import store as om_store
from core.observational.batches import ObserverCall
from core.observational.buffer import activated_log, activation_count
from core.observational.context import DATE_STYLE, TAG, context_blocks, continuation_message
from core.observational.jobs import OMJob, buffer_observations, buffer_reflection
from core.observational.records import BufferedChunk, OMRecord, append_chunk, lookup_key
from core.observational.tokens import count_text, messages_tokens
from core.options import ObservationalMemoryOptions
from core.processors.base import BaseProcessor, ProcessorContext, ThreadAsItStarted
from core.processors.message_history import save_turn
from core.storage.memory_store import MessageQuery, ParsedRows
from core.timeutil import as_utc, parse_iso, to_iso

log = logging.getLogger(__name__)

# How long a turn past ``block_after`` waits for a background observer already running.
BLOCK_WAIT_SECONDS = 120.0


@dataclass
class _Turn:
    """What the input phase works on; rebuilt from storage whenever a write loses a race."""

    key: str
    record: OMRecord | None
    hints: om_store.ThreadHints
    unobserved: list[Message]
    others: dict[str, list[Message]] = field(default_factory=dict)  # resource scope: other threads' raw
    # The messages this turn has read, by their stored row: each reload parses only rows new or changed since
    # (after every observer call of a long backlog the turn reads what is left again, to take in what was
    # stored, edited or deleted meanwhile; parsing all of it each time cost half of such a turn's CPU).
    parsed: ParsedRows = field(default_factory=dict)
    # A past turn reconstructed: the messages it observed and still sent raw (``_kept_replies``, ``_kept_then``).
    kept: list[Message] = field(default_factory=list)

    @property
    def chunks(self) -> list[BufferedChunk]:
        return self.record.buffered if self.record is not None else []


class ObservationalMemory(BaseProcessor):
    """``options`` replace the turn's ``observational_memory`` options when given."""

    id = "observational-memory"

    def __init__(self, options: ObservationalMemoryOptions | None = None) -> None:
        self.options = options

    # -- settings ----------------------------------------------------------------------------------
    def _options(self, ctx: ProcessorContext) -> ObservationalMemoryOptions:
        return self.options or ctx.request.options.observational_memory

    def _config(self, ctx: ProcessorContext) -> dict[str, Any]:
        """What the row's ``config`` column records (Mastra's nesting, our values)."""
        opts = self._options(ctx)
        observer = ctx.services.observer_model
        reflector = ctx.services.reflector_model or observer
        return {
            "scope": opts.scope,
            "observation": {"messageTokens": opts.message_tokens, "model": observer.model_id if observer else None,
                            "previousObserverTokens": opts.previous_observer_tokens,
                            "bufferTokens": opts.buffer_interval or False,
                            "bufferActivation": opts.buffer_activation, "blockAfter": opts.block_after_tokens},
            "reflection": {"observationTokens": opts.observation_tokens,
                           "model": reflector.model_id if reflector else None,
                           "bufferActivation": opts.reflection_buffer_activation if opts.buffering else False,
                           "blockAfter": opts.reflection_block_after_tokens},
        }

    def _job(self, ctx: ProcessorContext, key: str, thread_id: str) -> OMJob:
        svc = ctx.services
        return OMJob(store=svc.store, tokenizer=svc.tokenizer, tracer=svc.tracer, clock=svc.clock,
                     observer=svc.observer_model, reflector=svc.reflector_model, options=self._options(ctx),
                     key=key, thread_id=thread_id, resource_id=ctx.request.resource_id, config=self._config(ctx),
                     title_hint=ctx.request.options.generate_title.enabled, parent=svc.tracer.current_span(),
                     window=self._observer_window(ctx))

    def _observer_window(self, ctx: ProcessorContext) -> int | None:
        """The observer model's context window, when known: its own ``context_window``; in a preview without an
        observer, the window the prompt is fitted to (``ctx.budget``, the turn's model's), since the turn's model
        observes unless ``observer_model`` names another."""
        model = ctx.services.observer_model
        if model is not None:
            window = getattr(model, "context_window", None)
        else:
            window = ctx.budget.context_window if ctx.budget is not None and \
                self._options(ctx).observer_model is None else None
        return window if isinstance(window, int) and not isinstance(window, bool) and window > 0 else None

    # -- loading ---------------------------------------------------------------------------------
    def _load(self, ctx: ProcessorContext, key: str, parsed: ParsedRows | None = None) -> _Turn:
        """The turn's state as stored now; ``parsed``: an earlier load's (``_Turn.parsed``), so a reload parses
        only the message rows new or changed since."""
        req = ctx.request
        assert req.thread_id is not None
        if req.as_of is not None:
            return self._load_past(ctx, key)
        parsed = {} if parsed is None else parsed
        record = om_store.current_record(ctx.store, key)
        thread = ctx.store.memory.get_thread(req.thread_id)
        hints = om_store.thread_hints(thread.metadata if thread is not None else None)
        unobserved = om_store.unobserved_messages(
            ctx.store, thread_id=req.thread_id, resource_id=req.resource_id, record=record, hints=hints,
            parsed=parsed)
        others: dict[str, list[Message]] = {}
        if self._options(ctx).scope == "resource" and req.resource_id:
            others = rs.other_unobserved(ctx.store, resource_id=req.resource_id, current_thread=req.thread_id,
                                         record=record, parsed=parsed)
        return _Turn(key, record, hints, unobserved, others, parsed)

    def _load_past(self, ctx: ProcessorContext, key: str) -> _Turn:
        """A past turn's state: from its record (exact), else as of its input's time (reconstructed)."""
        from core.replay import observations

        req = ctx.request
        assert req.thread_id is not None and req.as_of is not None
        if req.frozen is not None and req.frozen.om is not None:
            om = req.frozen.om
            return _Turn(key, om.record, om.hints, list(om.unobserved), {k: list(v) for k, v in om.others.items()})
        assert req.before is not None
        state = observations.as_of(ctx.store, key=key, thread_id=req.thread_id, resource_id=req.resource_id,
                                   before=req.before, turn_input=(req.as_of.created_at, req.as_of.id),
                                   not_memory=req.not_memory)
        kept, unknown = self._kept_then(ctx, state.record)
        if state.unknowns or unknown:
            ctx.note(self.id, unknown=[*state.unknowns, *unknown])
        return _Turn(key, state.record, state.hints, state.unobserved, dict(state.others), kept=kept)

    def _kept_then(self, ctx: ProcessorContext, record: OMRecord | None) -> tuple[list[Message], list[str]]:
        """A past turn rebuilt without its record: when it observed its own input (``_observe_with_input``), the
        messages it observed and still sent raw (``_kept_replies``: the reply after the thread's cursor as the turn
        found it, when that cursor named a user message); and what is not known. The log's ``appended`` marks say
        when each chunk joined it and its cursor's time; a chunk of the shared log (resource scope) names its
        thread. Buffered observation never takes a turn's input: nothing to find then."""
        req = ctx.request
        assert req.as_of is not None and req.thread_id is not None
        observation = record.config.get("observation") if record is not None else None
        if record is None or not isinstance(observation, dict) or \
                observation.get("bufferTokens") not in (None, False, 0):
            return [], []
        said = to_iso(req.as_of.created_at)
        chunks = record.chunks
        marks = {int(m[0]): (m[1], m[2]) for m in record.studio.get("appended") or ()
                 if isinstance(m, list) and len(m) == 3 and isinstance(m[0], int)}
        # Each chunk: when it joined the log (None: no mark) and its cursor's time (its boundary line, or its mark's).
        dated = [(marks.get(k + 1, (None, None))[0], c.boundary if k else marks.get(1, (None, None))[1])
                 for k, c in enumerate(chunks)]
        own = next((k for k, (_at, cursor) in enumerate(dated) if cursor == said), None)
        if own is None:
            return [], []  # the turn did not observe its own input
        if own == 0 and record.origin_type == "reflection":
            # The turn observed its input, then reflected: its generation's first chunk is the rewrite of every
            # observation before, the cursors of the turns before it are in the generation before (not read here).
            last = list(ctx.store.memory.list_messages(MessageQuery(
                thread_id=req.thread_id, resource_id=req.resource_id, last=1, before=req.before)))
            return [], ["whether the reply before this turn's input was still sent raw, observed (Mastra's rule: the "
                        "reply of a turn that observed its own input): the turn's reflection rewrote the log that "
                        "dated it"] if last and last[-1].role != "user" else []
        mine = [k for k in range(own) if record.scope != "resource" or rs.chunk_thread(chunks[k].text) == req.thread_id]
        before = [k for k in mine if dated[k][0] is not None and str(dated[k][0]) < said]
        if len(before) != len([k for k in mine if dated[k][0] is None or str(dated[k][0]) < said]):
            return [], ["whether a reply this turn observed was still sent raw (Mastra's rule: the reply of a turn "
                        "that observed its own input): the log does not date all of its chunks (a Mastra row)"]
        if not before:
            return [], []  # nothing of the thread observed before the turn: no cursor, nothing kept
        cursor = dated[before[-1]][1]
        if not isinstance(cursor, str):
            return [], []
        rows = list(ctx.store.memory.list_messages(MessageQuery(
            thread_id=req.thread_id, resource_id=req.resource_id, since=parse_iso(cursor), before=req.before)))
        at_cursor = [m for m in rows if to_iso(m.created_at) == cursor]
        if not at_cursor or at_cursor[-1].role != "user":
            return [], []
        kept: list[Message] = []
        for msg in rows[rows.index(at_cursor[-1]) + 1:]:
            if msg.role == "user":
                break
            kept.append(msg)
        return kept, []

    def _pending(self, ctx: ProcessorContext, turn: _Turn, input_tokens: int) -> int:
        return (messages_tokens(ctx.tokenizer, turn.unobserved) + messages_tokens(ctx.tokenizer, rs.flat(turn.others))
                + input_tokens)

    # -- input -----------------------------------------------------------------------------------
    def process_input(self, ctx: ProcessorContext) -> None:
        req = ctx.request
        opts = self._options(ctx)
        if not req.thread_id:
            ctx.skip(self.id, "no thread id was given, so there is no memory to load")
            return
        if opts.scope == "resource" and not req.resource_id:
            ctx.skip(self.id, "resource-scoped observational memory needs a resource id")
            return
        key = lookup_key(opts.scope, thread_id=req.thread_id, resource_id=req.resource_id)
        # One reading of the clock per turn: rows written now and the relative dates shown agree.
        now = ctx.services.clock.now()
        turn = self._load(ctx, key)
        may_write = ctx.live and not req.read_only

        stored_ids = {m.id for m in turn.unobserved}
        if not opts.buffering and req.as_of is None:
            retried = self._retried_input(ctx, turn)
            if retried is not None:
                stored_ids.add(retried.id)
        all_inputs = ctx.messages.messages("input")
        inputs = [m for m in all_inputs if m.id not in stored_ids]
        if len(inputs) != len(all_inputs):  # a client re-sent stored messages; don't count them twice later
            ctx.note(self.id, inputAlreadyStored=[m.id for m in all_inputs if m.id in stored_ids])
        input_tokens = messages_tokens(ctx.tokenizer, inputs)
        pending = self._pending(ctx, turn, input_tokens)
        ctx.note(self.id, scope=opts.scope, lookupKey=key, unobservedTokens=pending,
                 messageTokens=opts.message_tokens, observationTokens=opts.observation_tokens,
                 buffering=opts.buffering)
        job = self._job(ctx, key, req.thread_id)
        kept: list[Message] = list(turn.kept)
        if opts.buffering:
            turn = self._buffered(ctx, job, turn, pending, input_tokens, now, may_write)
        elif pending >= opts.message_tokens:
            if not may_write:
                # A turn backing off observes nothing: the note says so (``observationError``), not "would run".
                if not self._backing_off(ctx, turn, "observer", now):
                    why = "read-only turn" if req.read_only else "preview"
                    with_input = " (the input is stored first and observed with them)" if inputs else ""
                    ctx.note(self.id, observation=f"{why}: an observation would run now: {pending:,} unobserved "
                             f"tokens ≥ {opts.message_tokens:,}{with_input}")
                    if _previews_next(ctx):
                        self._note_observe_first(ctx, job, turn, input_tokens, waits=False, inputs=inputs)
            else:
                turn, kept = self._observe_with_input(ctx, job, turn, inputs, input_tokens, now)
        turn = self._reflection(ctx, job, turn, now, may_write)
        self._note_unrecovered(ctx, turn, now)
        self._inject(ctx, turn, now, kept)

    # -- observing the turn's own input (synchronous observation, as Mastra 1.71) -------------------
    def _observe_with_input(self, ctx: ProcessorContext, job: OMJob, turn: _Turn, inputs: list[Message],
                            input_tokens: int, now: datetime) -> tuple[_Turn, list[Message]]:
        """The turn whose input makes the unobserved tokens reach ``message_tokens`` observes that input too, as
        Mastra 1.71 does: one observer call over the thread's unobserved messages and the input. The observation's
        cursor names only stored messages, so the input is stored just before the observation that covers it is
        (``_store_inputs``), never before its observer call succeeded: a failed observer call stores nothing, and the
        turn goes on with the input raw. What stays raw in the prompt besides the input (``kept``): Mastra's rule,
        see ``_kept_replies``. If the model call then fails, the input stays stored and observed (its observation
        is not undone); a retry of the same input is taken as that stored message (``_retried_input``), so it is
        neither stored nor observed twice."""
        if ctx.services.observer_model is None or self._backing_off(ctx, turn, "observer", now):
            return self._observe(ctx, job, turn, input_tokens, now), []  # (says why nothing is observed)
        kept = self._kept_replies(ctx, turn)
        turn = self._observe(ctx, job, turn, input_tokens, now, inputs=list(inputs))
        left = {m.id for m in turn.unobserved}
        return turn, [m for m in kept if m.id not in left]

    def _store_inputs(self, ctx: ProcessorContext, batch: list[Message], inputs: list[Message]) -> list[Message]:
        """Store the turn's inputs in ``batch`` (just observed, about to be committed; removed from ``inputs``), the
        turn's own input messages replaced by the stored copies (a stamp may move after the thread's newest
        message). ``batch`` as stored. With semantic recall on, the input is indexed in the same transaction: it is
        stored whatever the model call does next, and the turn's own indexing takes only what its save stores."""
        given = {m.id for m in inputs}
        mine = [m for m in batch if m.id in given]
        if not mine:
            return batch
        rows = self._recall_rows(ctx, mine)
        # The turn's thread as it began (``ThreadAsItStarted``, kept for the turn's own save too): deleted or its
        # resource forgotten while the observer ran, the save refuses (``NotFoundError``) rather than make the
        # thread anew and write the observation of forgotten messages into it.
        writes = [*(w for w in ctx.pending_writes if isinstance(w, ThreadAsItStarted)),
                  *((rows,) if rows is not None else ())]
        saved = {m.id: m for m in (ctx.services.save_messages(mine, writes=writes) if writes
                                   else ctx.services.save_messages(mine))}
        if rows is not None:
            try:
                report = rows.staged.finish()
                ctx.note(self.id, inputIndexed=len(report.indexed), inputIndexFailed=dict(report.failed))
            except Exception as exc:  # indexing must never fail the turn (``reindex`` embeds it later)
                log.warning("indexing the input of thread %s for recall failed", ctx.request.thread_id, exc_info=True)
                ctx.note(self.id, inputIndexFailed={"*": f"{type(exc).__name__}: {exc}"})
        for msg in saved.values():
            entry = ctx.messages.entry(msg.id)
            ctx.messages.remove([msg.id])
            ctx.messages.add(msg, "input", entry.provenance if entry is not None else Provenance("input"))
        inputs[:] = [m for m in inputs if m.id not in saved]
        state = ctx.notes.get(self.id, {})
        ctx.note(self.id, inputStored=[*state.get("inputStored", ()), *saved.keys()])
        return [saved.get(m.id, m) for m in batch]

    def _recall_rows(self, ctx: ProcessorContext, messages: list[Message]) -> Any:
        """The recall rows of inputs stored before the model call (``RecallRows``), or None: recall off, no index,
        or staging failed (said; ``reindex`` embeds them later)."""
        index = ctx.services.recall_index
        if not ctx.request.options.semantic_recall.enabled or index is None:
            return None
        from core.processors.semantic_recall import RecallRows, stage_turn

        try:
            return RecallRows(stage_turn(index, messages, ctx.request.resource_id))
        except Exception as exc:  # indexing must never fail the turn
            log.warning("indexing the input of thread %s for recall failed", ctx.request.thread_id, exc_info=True)
            ctx.note(self.id, inputIndexFailed={"*": f"{type(exc).__name__}: {exc}"})
            return None

    def _kept_replies(self, ctx: ProcessorContext, turn: _Turn) -> list[Message]:
        """The messages Mastra 1.71 keeps raw in the prompt of a turn that observes them: the reply of an earlier
        turn that observed its own input. Mastra marks such an observation inside that turn's response message,
        before the reply was written; its cleanup keeps the parts after a completed marker as unobserved, so that
        reply is observed now and still sent raw (seen in its requests: turn 2 sends turn 1's reply raw). Here: when
        the thread's cursor names a user message (an input observed in its own turn), the unobserved messages after
        it up to the next user message."""
        cursor = turn.hints.cursor
        if cursor is None or not turn.unobserved:
            return []
        named = ctx.store.memory.get_messages([cursor.id])
        if not named or named[0].role != "user":
            return []
        out: list[Message] = []
        for msg in turn.unobserved:
            if msg.role == "user":
                break
            out.append(msg)
        return out

    def _retried_input(self, ctx: ProcessorContext, turn: _Turn) -> Message | None:
        """A retry of a turn whose input was stored and observed (``_observe_with_input``) but whose model call
        failed: the thread's newest stored message is that user message, observed, with nothing after it, and the
        newest input says the same. The input is taken as the stored message (same id), so the turn neither stores
        it again nor counts it as unobserved."""
        req = ctx.request
        inputs = ctx.messages.messages("input")
        cursor = turn.hints.cursor
        if cursor is None or turn.unobserved or not inputs or inputs[-1].role != "user" or req.thread_id is None:
            return None
        newest = list(ctx.store.memory.list_messages(MessageQuery(thread_id=req.thread_id,
                                                                  resource_id=req.resource_id, last=1)))
        if not newest or newest[-1].id != cursor.id or newest[-1].role != "user" or \
                newest[-1].content_key() != inputs[-1].content_key():
            return None
        stored, given = newest[-1], inputs[-1]
        if stored.id != given.id:
            entry = ctx.messages.entry(given.id)
            ctx.messages.remove([given.id])
            ctx.messages.add(stored, "input", entry.provenance if entry is not None else Provenance("input"))
        ctx.note(self.id, retriedInput={"stored": stored.id, "given": given.id,
                                        "why": "the same input was stored and observed by a turn whose model call "
                                               "failed; it is not stored or observed again"})
        return stored

    # -- buffering ---------------------------------------------------------------------------------
    def _buffered(self, ctx: ProcessorContext, job: OMJob, turn: _Turn, pending: int, input_tokens: int,
                  now: datetime, may_write: bool) -> _Turn:
        """Activate what the background observed once the threshold is reached; wait for the
        observer only past ``block_after``."""
        opts = self._options(ctx)
        blocked = False
        if pending >= opts.message_tokens and turn.chunks:
            if may_write:
                turn = self._activate(ctx, job, turn, pending, input_tokens, now, force=False)
                pending = self._pending(ctx, turn, input_tokens)
            elif _previews_next(ctx):
                turn = self._activate_in_memory(ctx, turn, pending)
                pending = self._pending(ctx, turn, input_tokens)
            else:  # a read-only turn sends its prompt without (it activates nothing); a past turn is as it was
                n = activation_count(turn.chunks, pending, opts.retained_tokens)
                ctx.note(self.id, activation=f"{n} buffered observation chunk(s) would be activated now")
        if pending >= opts.block_after_tokens:
            if self._backing_off(ctx, turn, "observer", now):
                pass  # noted: no turn waits for an observer that backs off, a previewed one neither
            elif not may_write:
                ctx.note(self.id, observation=f"a turn would wait for the observer now: {pending:,} unobserved "
                         f"tokens ≥ {opts.block_after_tokens:,} (block_after)")
                if _previews_next(ctx):
                    if turn.chunks:  # after waiting, the turn takes everything buffered
                        turn = self._activate_in_memory(ctx, turn, self._pending(ctx, turn, input_tokens), force=True)
                    if self._pending(ctx, turn, input_tokens) >= opts.message_tokens and turn.unobserved:
                        self._note_observe_first(ctx, job, turn, input_tokens, waits=True)
            elif ctx.services.observer_model is not None:
                blocked = True
                # A background observer may be about to deliver: wait for it, take everything ready,
                # then observe the rest here (unless it is still running: a second call would only
                # race it for the same messages).
                settled = _wait_for_background(ctx, turn.key, opts, "observer")
                turn = self._load(ctx, turn.key, turn.parsed)
                if turn.chunks:
                    turn = self._activate(ctx, job, turn, self._pending(ctx, turn, input_tokens), input_tokens, now,
                                          force=True, blocked=True)
                if not settled:
                    ctx.note(self.id, observation=f"the background observer is still running after "
                             f"{_block_wait(opts):.0f} s; this turn goes on with the messages raw")
                elif self._pending(ctx, turn, input_tokens) >= opts.message_tokens and turn.unobserved:
                    turn = self._observe(ctx, job, turn, input_tokens, now, blocked=True)
        elif pending >= opts.message_tokens and not self._backing_off(ctx, turn, "observer", now):
            # (Backing off, the record says so: nothing is being buffered for this turn to promise.)
            ctx.note(self.id, observation=f"{pending:,} unobserved tokens ≥ {opts.message_tokens:,}: what the "
                     "background observer has buffered is activated as it becomes ready; this turn did not wait")
        ctx.note(self.id, blocked=blocked)
        return turn

    def _activation(self, ctx: ProcessorContext, turn: _Turn, pending: int, *, force: bool,
                    blocked: bool = False) -> buffer_store.Activation:
        """Which chunks a turn activates now, and the log they make."""
        record = turn.record
        assert record is not None
        chunks = turn.chunks[:activation_count(turn.chunks, pending, self._options(ctx).retained_tokens, force=force)]
        active = activated_log(record.active_observations, chunks)
        covered = {i for c in chunks for i in c.message_ids}
        left = [m for m in turn.unobserved if m.id not in covered and (to_iso(m.created_at), m.id) > chunks[-1].cursor]
        return buffer_store.Activation(tuple(chunks), active, count_text(ctx.tokenizer, active),
                                       pending_after=messages_tokens(ctx.tokenizer, left), blocked=blocked)

    def _activate_in_memory(self, ctx: ProcessorContext, turn: _Turn, pending: int, *, force: bool = False) -> _Turn:
        """A preview: the activation the next turn makes first, applied to this prompt only (nothing is
        written: the Studio never changes data by looking at it), so the prompt shown is the one sent."""
        req = ctx.request
        assert turn.record is not None and req.thread_id is not None
        activation = self._activation(ctx, turn, pending, force=force)
        thread = ctx.store.memory.get_thread(req.thread_id)
        record, hints = buffer_store.activation_in_memory(
            turn.record, dict(thread.metadata or {}) if thread is not None else None, activation)
        hints = hints if hints is not None else turn.hints
        unobserved = om_store.unobserved_messages(ctx.store, thread_id=req.thread_id, resource_id=req.resource_id,
                                                  record=record, hints=hints)
        others: dict[str, list[Message]] = {}
        if self._options(ctx).scope == "resource" and req.resource_id:
            others = rs.other_unobserved(ctx.store, resource_id=req.resource_id, current_thread=req.thread_id,
                                         record=record)
        n = len(activation.chunks)
        done = ctx.notes.get(self.id, {}).get("previewActivated") or {"chunks": 0, "messages": 0}
        done = {"chunks": done["chunks"] + n,
                "messages": done["messages"] + sum(len(c.message_ids) for c in activation.chunks),
                "left": len(turn.chunks) - n}
        ctx.note(self.id, activation=f"the next turn first activates {done['chunks']} buffered observation "
                 "chunk(s); this preview shows them activated (nothing was written)", previewActivated=done)
        return _Turn(turn.key, record, hints, unobserved, others)

    def _activate(self, ctx: ProcessorContext, job: OMJob, turn: _Turn, pending: int, input_tokens: int,
                  now: datetime, *, force: bool, blocked: bool = False) -> _Turn:
        record = turn.record
        assert record is not None and ctx.request.thread_id is not None
        activation = self._activation(ctx, turn, pending, force=force, blocked=blocked)
        chunks = activation.chunks
        covered = {i for c in chunks for i in c.message_ids}
        with ctx.tracer.start_span("memory: activate observations", "memory_operation",
                                   thread_id=ctx.request.thread_id, resource_id=ctx.request.resource_id,
                                   attributes={"operationType": "activate", "chunks": len(chunks),
                                               "blocked": blocked}) as span:
            committed = buffer_store.commit_activation(ctx.store, record=record, thread_id=ctx.request.thread_id,
                                                       activation=activation, now=_written_at(ctx, now))
            if committed is None:
                span.set_attributes({"conflict": True})
                ctx.note(self.id, activation="another writer changed the buffer first; reloaded")
                return self._load(ctx, turn.key, turn.parsed)
            span.set_output({"chunks": len(chunks), "observationTokens": activation.observation_tokens})
        ctx.note(self.id, activated={"chunks": len(chunks), "messages": len(covered),
                                     "messageTokens": sum(c.message_tokens for c in chunks),
                                     "left": len(turn.chunks) - len(chunks), "blocked": blocked})
        return self._load(ctx, turn.key, turn.parsed)

    def _backing_off(self, ctx: ProcessorContext, turn: _Turn, which: str, now: datetime) -> bool:
        backoff = buffer_store.current_backoff(turn.record, which)
        if backoff is None or not backoff.active(now):
            return False
        what = "observation" if which == "observer" else "reflection"
        ctx.note(self.id, **{f"{what}Error": f"the {which} failed ({backoff.error}); backing off until "
                             f"{backoff.retry_at} (failure {backoff.failures}); the messages stay raw meanwhile",
                             f"{what}RetryAt": backoff.retry_at})
        return True

    def _note_unrecovered(self, ctx: ProcessorContext, turn: _Turn, now: datetime) -> None:
        """An observer failure no observation has succeeded since (the row keeps its back-off until one does), when
        the turn has not said so already: a background observer's failure was told only by a turn that reached
        ``message_tokens`` inside the back-off, so a client (the gateway's ``observation_failed`` notice) and the
        Prompt Inspector heard of it for at most 30 s, or not at all below the threshold."""
        if "observationError" in ctx.notes.get(self.id, {}):
            return
        backoff = buffer_store.current_backoff(turn.record, "observer")
        if backoff is None:
            return
        if backoff.active(now):
            self._backing_off(ctx, turn, "observer", now)
            return
        times = "once" if backoff.failures == 1 else f"{backoff.failures} times in a row"
        ctx.note(self.id, observationError=f"the observer failed ({backoff.error}; {times}) and no observation has "
                 f"succeeded since; its back-off ended at {backoff.retry_at}, so the next observation tries again; "
                 "the messages it did not observe stay raw meanwhile")

    def _note_observe_first(self, ctx: ProcessorContext, job: OMJob, turn: _Turn, input_tokens: int, *,
                            waits: bool, inputs: list[Message] | None = None) -> None:
        """A preview of a turn that calls the observer before its own model call: the preview makes no
        model call, so it names the messages that call would take out of the window (``observeFirst``),
        in the order ``_observe`` takes them, as if each observation succeeds. Whether this Memory has an
        observer does not matter: the Studio previews with none, the turn runs with its agent's. ``inputs``: the
        turn's input, observed with them (synchronous observation, ``_observe_with_input``) yet kept in the prompt,
        as are the replies ``_kept_replies`` names (``input`` and ``kept``)."""
        req = ctx.request
        assert req.thread_id is not None
        opts = self._options(ctx)
        given = list(inputs or ())
        kept = {m.id for m in self._kept_replies(ctx, turn)} if given else set()
        own = [*turn.unobserved, *given]
        batches = rs.observation_order(req.thread_id, own, turn.others) if opts.scope == "resource" \
            else [(req.thread_id, own)]
        pending = self._pending(ctx, turn, input_tokens)
        taken: list[Message] = []
        calls: list[ObserverCall] = []
        count, exact = 0, True  # how many calls the turn makes, counted as it counts them (``_observe_batch``)
        for thread_id, batch in batches:
            if taken and pending < opts.message_tokens:
                break
            taken += batch
            pending -= messages_tokens(ctx.tokenizer, batch)
            try:
                planned, left, exact_here = self._plan(ctx, job, turn, thread_id, batch,
                                                       cost=lambda m: messages_tokens(ctx.tokenizer, [m]))
            except ContextWindowError as exc:
                ctx.note(self.id, observeFirstError=str(exc))
                continue
            calls += planned
            count += (1 + left) if planned else 0
            exact = exact and exact_here
        if taken:
            first = calls[0] if calls else None
            stay = kept | {m.id for m in given}
            ctx.note(self.id, observeFirst={
                "messages": [m.id for m in taken if m.id not in stay], "tokens": messages_tokens(ctx.tokenizer, taken),
                **({"input": [m.id for m in taken if m.id in stay and m.id not in kept],
                    "kept": [m.id for m in taken if m.id in kept]}
                   if given else {}),
                "threads": sorted({m.thread_id or req.thread_id for m in taken}), "waitsForBackground": waits,
                # Each observer call (``max_tokens_per_batch``, the observer's window), as planned from the log now;
                # the first one's request exactly as the turn sends it (``OMJob.plan``, the turn's own path).
                "batches": [len(c.batch) for c in calls],
                # How many calls the turn makes: each planned from what the one before stored, so with a window known
                # a forecast (``OMJob.calls_left``), as the turn's own count is; exact without one (``len(batches)``).
                "calls": count, **({"callsForecast": True} if not exact and count > 1 else {}),
                "firstRequest": {"messages": first.messages, "tokens": first.request_tokens,
                                 "messageTokens": first.tokens, "window": job.window,
                                 "temperature": opts.observer_temperature, "maxTokens": opts.max_output_tokens,
                                 "maxTokensPerBatch": opts.max_tokens_per_batch,
                                 **({"leftOut": first.left_out} if first.left_out else {})}
                if first is not None else None})

    # -- observing ---------------------------------------------------------------------------------
    def _observe(self, ctx: ProcessorContext, job: OMJob, turn: _Turn, input_tokens: int, now: datetime,
                 *, blocked: bool = False, inputs: list[Message] | None = None) -> _Turn:
        """Observe synchronously: the thread's unobserved messages, and in resource scope the other
        threads' too, oldest first, until the pending tokens are under the threshold. ``inputs``: the turn's input,
        observed after the thread's messages (``_observe_with_input``); each is taken out as it is stored."""
        req = ctx.request
        assert req.thread_id is not None
        if ctx.services.observer_model is None:
            ctx.note(self.id, observationError="no observer model is configured; messages stay raw")
            return turn
        if self._backing_off(ctx, turn, "observer", now):
            return turn
        opts = self._options(ctx)
        resource = opts.scope == "resource"
        extra = inputs if inputs is not None else []
        own = [*turn.unobserved, *extra]
        batches = rs.observation_order(req.thread_id, own, turn.others) if resource else [(req.thread_id, own)]
        observed: list[dict[str, Any]] = []
        for thread_id, _ in batches:
            left = messages_tokens(ctx.tokenizer, extra) if inputs is not None else input_tokens
            if observed and self._pending(ctx, turn, left) < opts.message_tokens:
                break
            turn, whole = self._observe_thread(ctx, job, turn, thread_id, input_tokens, now, blocked, observed, inputs)
            if not whole:
                break  # failed, or lost a race: the turn goes on with what is stored
        if observed:
            ctx.note(self.id, observed=observed[0] if len(observed) == 1 else observed)
        return turn

    def _observe_thread(self, ctx: ProcessorContext, job: OMJob, turn: _Turn, thread_id: str, input_tokens: int,
                        now: datetime, blocked: bool, observed: list[dict[str, Any]],
                        inputs: list[Message] | None) -> tuple[_Turn, bool]:
        """Observe ``thread_id``'s unobserved messages in batches (``max_tokens_per_batch``, the observer's window):
        each call's result and cursor are stored before the next call is planned from what is stored then, so a
        failure keeps what was observed and the retry starts after it. Whether every batch was observed.
        ``inputs``: ``_observe``'s (None: the turn's input is not observed, as in a buffered turn past
        ``block_after``, and its tokens still count after each call)."""
        done, last_first = 0, None
        costs: dict[int, tuple[Message, int]] = {}  # each message's tokens, by the message read (``_cost``)
        own = thread_id == ctx.request.thread_id
        while pending := self._thread_unobserved(ctx, turn, thread_id) + (list(inputs) if own and inputs else []):
            if pending[0].id == last_first:
                return turn, False  # (stored, yet the same messages are unobserved: never observe them twice)
            last_first = pending[0].id
            made = len(observed)
            turn = self._observe_batch(ctx, job, turn, thread_id, pending, input_tokens, now, blocked, observed, done,
                                       costs, inputs)
            if len(observed) == made:
                return turn, False
            done += 1
        return turn, True

    def _thread_unobserved(self, ctx: ProcessorContext, turn: _Turn, thread_id: str) -> list[Message]:
        return list(turn.unobserved) if thread_id == ctx.request.thread_id else list(turn.others.get(thread_id, ()))

    def _thread_hints(self, ctx: ProcessorContext, turn: _Turn, thread_id: str) -> om_store.ThreadHints:
        return turn.hints if thread_id == ctx.request.thread_id else om_store.thread_hints(
            om_store.thread_metadata(ctx.store, thread_id))

    def _plan(self, ctx: ProcessorContext, job: OMJob, turn: _Turn, thread_id: str, pending: list[Message],
              cost: Callable[[Message], int], limit: int | None = None) -> tuple[list[ObserverCall], int, bool]:
        """The observer calls that observe ``pending`` of ``thread_id`` from the log and hints of ``turn`` (the first
        ``limit`` only, when given), and how many calls the rest after the first takes, exact or a forecast
        (``OMJob.calls_left``; ``cost``: a message's tokens): what ``_observe_batch`` sends first and numbers it by,
        and what a preview shows (one path, so the two agree; the thread's hints read once)."""
        hints = self._thread_hints(ctx, turn, thread_id)
        previous = turn.record.active_observations if turn.record else ""
        calls = job.plan(pending, previous=previous, current_task=hints.current_task,
                         suggested_response=hints.suggested_response, limit=limit)
        left, exact = job.calls_left(pending[len(calls[0].batch):] if calls else [], cost=cost, previous=previous,
                                     current_task=hints.current_task, suggested_response=hints.suggested_response)
        return calls, left, exact

    def _observe_batch(self, ctx: ProcessorContext, job: OMJob, turn: _Turn, thread_id: str, pending: list[Message],
                       input_tokens: int, now: datetime, blocked: bool, observed: list[dict[str, Any]],
                       done: int, costs: dict[int, tuple[Message, int]], inputs: list[Message] | None = None) -> _Turn:
        """Observe the first batch of ``pending`` (``done`` batches of the thread observed before it this turn).
        Each call plans only itself, from the log the one before stored: the same batch as planning the whole rest
        again would start with, without that planning (quadratic in the number of batches); the calls after it are
        counted (``OMJob.calls_left``, exact without a window, a forecast with one) for the call's numbering."""
        req = ctx.request
        opts = self._options(ctx)
        record = turn.record
        try:
            planned, left, exact = self._plan(ctx, job, turn, thread_id, pending, cost=lambda m: _cost(ctx, costs, m),
                                              limit=1)
            call = planned[0]
        except ContextWindowError as exc:  # max_output_tokens leaves no room in the observer's window
            retry_at = job.failed("observer", str(exc), record, now)
            ctx.note(self.id, observationError=f"{exc}; the messages stay raw and the observer is tried again "
                     f"after {retry_at}", observationRetryAt=retry_at)
            return turn
        batch = list(call.batch)
        batch_tokens = call.tokens
        # Which call of the thread's this is, when there are several, and how many there are: exact without a window;
        # with one, a forecast (how many a call can take depends on the observations the calls before it store).
        batches = done + 1 + left
        call_attrs: dict[str, Any] = {"batch": done + 1, "batches": batches} if batches > 1 else {}
        if batches > 1 and not exact:
            call_attrs["batchesForecast"] = True
        if call.left_out:  # a single message over the observer's window, cut to fit (``batches._cut_to_fit``)
            call_attrs["leftOut"] = call.left_out
        with ctx.tracer.start_span("memory: observe", "memory_operation", thread_id=req.thread_id,
                                   resource_id=req.resource_id,
                                   attributes={"operationType": "observe", "messages": len(batch),
                                               "tokens": batch_tokens, "blocked": blocked,
                                               "observedThread": thread_id,
                                               **call_attrs}) as span:
            parsed, problem = job.observe(call)
            if parsed is None:
                assert problem is not None
                span.record_error(problem)
                retry_at = job.failed("observer", problem, record, now)
                kept = ("the batch observed before it this turn is kept, the messages after it stay raw" if done == 1
                        else f"the {done} batches observed before it this turn are kept, the messages after them "
                        "stay raw" if done else "the messages stay raw")
                ctx.note(self.id, observationError=f"{problem}; {kept} and the observer is tried "
                         f"again after {retry_at}", observationRetryAt=retry_at)
                return turn
            text = rs.attributed(thread_id, parsed.observations) if opts.scope == "resource" else parsed.observations
            if inputs is not None:
                # The turn's own input (``_observe_with_input``): counted with the messages until stored now, with
                # the observation that covers it (the cursor names only stored messages).
                remaining = _stored_cost(ctx, costs, turn) + sum(_cost(ctx, costs, m) for m in inputs) - batch_tokens
                batch = self._store_inputs(ctx, batch, inputs)
                after = 0
            else:
                remaining, after = _stored_cost(ctx, costs, turn) - batch_tokens, input_tokens
            last = batch[-1]
            cursor = om_store.Cursor(to_iso(last.created_at), last.id)
            active = append_chunk(record.active_observations if record else "", text, cursor.created_at)
            obs = om_store.Observation(
                active_observations=active, observation_tokens=count_text(ctx.tokenizer, active),
                observed_ids=[m.id for m in batch], tokens_observed=batch_tokens,
                pending_after=max(0, remaining) + after, cursor=cursor, current_task=parsed.current_task,
                suggested_response=parsed.suggested_response, thread_title=parsed.thread_title,
            )
            committed = om_store.commit_observation(
                ctx.store, record=record, key=turn.key, scope=opts.scope, thread_id=thread_id,
                resource_id=req.resource_id, config=self._config(ctx), obs=obs, now=_written_at(ctx, now),
                event={"kind": "observed", "at": _written_at(ctx, now), "blocked": blocked, "messages": len(batch),
                       "messageTokens": batch_tokens, "thread": thread_id})
            if committed is None:
                # Another process observed this thread meanwhile; its result stands, ours is dropped.
                span.set_attributes({"conflict": True})
                ctx.note(self.id, observation="another writer observed this thread first; reloaded its result")
                return self._load(ctx, turn.key, turn.parsed)
            span.set_output({"observedMessages": len(batch), "observationTokens": obs.observation_tokens})
            observed.append({"messages": len(batch), "tokens": batch_tokens,
                             "observationTokens": obs.observation_tokens, "thread": thread_id,
                             **call_attrs})
        if parsed.thread_title and ctx.request.options.generate_title.enabled and job.observer is not None:
            from core.titles import title_from_observer

            title_from_observer(ctx.store, thread_id, parsed.thread_title, model_id=job.observer.model_id)
        # The hints were just written; re-reading keeps this turn's context identical to the next one's.
        return self._load(ctx, turn.key, turn.parsed)

    # -- reflecting --------------------------------------------------------------------------------
    def _reflection(self, ctx: ProcessorContext, job: OMJob, turn: _Turn, now: datetime, may_write: bool) -> _Turn:
        opts = self._options(ctx)
        record = turn.record
        if record is None or record.is_empty:
            return turn
        size = record.observation_token_count
        due = size >= opts.observation_tokens
        if not may_write:
            # A reflector backing off reflects nothing: the note says so (``reflectionError``), not "would run".
            if due and (record.buffered_reflection or not self._backing_off(ctx, turn, "reflector", now)):
                # What a turn that may write does here (below): swap, wait then swap or reflect, reflect,
                # or (buffered, below reflection_block_after) leave it to the background.
                first = ("swap" if record.buffered_reflection else
                         "wait" if size >= opts.reflection_block_after_tokens else None) if opts.buffering \
                    else "reflect"
                what = {"swap": "the buffered reflection would be swapped in",
                        "wait": "a turn would wait for the reflector now", "reflect": "a reflection would run now",
                        None: "a reflection would be prepared in the background; the turn would not wait"}[first]
                ctx.note(self.id, reflection=f"{what}: {size:,} observation tokens ≥ {opts.observation_tokens:,}")
                if first is not None and _previews_next(ctx):
                    ctx.note(self.id, reflectFirst={"how": first, "tokens": size,
                                                    "threshold": opts.observation_tokens})
            return turn
        if not opts.buffering:
            return self._reflect(ctx, job, turn, now) if due else turn
        if due and record.buffered_reflection:
            return self._swap_reflection(ctx, turn, now)
        if due and size >= opts.reflection_block_after_tokens:
            settled = _wait_for_background(ctx, turn.key, opts, "reflector")
            turn = self._load(ctx, turn.key, turn.parsed)
            if turn.record is not None and turn.record.buffered_reflection:
                return self._swap_reflection(ctx, turn, now, blocked=True)
            if not settled:
                ctx.note(self.id, reflection="the background reflector is still running; the log is kept as it is")
                return turn
            return self._reflect(ctx, job, turn, now, blocked=True)
        buffer_at = opts.reflection_buffer_at
        if buffer_at is not None and size >= buffer_at and not record.buffered_reflection:
            if not self._backing_off(ctx, turn, "reflector", now) and (job.reflector or job.observer) is not None:
                ctx.services.background.submit("reflection", _work_key(turn.key),
                                               lambda token: buffer_reflection(job, token),
                                               description=f"reflect {turn.key} in the background")
                ctx.note(self.id, reflection=f"{size:,} observation tokens ≥ {buffer_at:,}: a reflection is being "
                         "prepared in the background")
        return turn

    def _swap_reflection(self, ctx: ProcessorContext, turn: _Turn, now: datetime, *, blocked: bool = False) -> _Turn:
        record = turn.record
        assert record is not None
        active = buffer_store.reflected_log(record)
        tokens = count_text(ctx.tokenizer, active)
        committed = buffer_store.commit_generation(ctx.store, record=record, active=active, tokens=tokens,
                                                   now=_written_at(ctx, now), buffered=True, blocked=blocked)
        if committed is None:
            ctx.note(self.id, reflection="another writer changed the log first; reloaded")
            return self._load(ctx, turn.key, turn.parsed)
        ctx.note(self.id, reflected={"generation": committed.generation_count, "from": record.observation_token_count,
                                     "to": tokens, "buffered": True, "blocked": blocked})
        return replace(turn, record=committed)

    def _reflect(self, ctx: ProcessorContext, job: OMJob, turn: _Turn, now: datetime, *,
                 blocked: bool = False) -> _Turn:
        record = turn.record
        assert record is not None
        if (job.reflector or job.observer) is None:
            ctx.note(self.id, reflectionError="no reflector model is configured")
            return turn
        if self._backing_off(ctx, turn, "reflector", now):
            return turn
        with ctx.tracer.start_span("memory: reflect", "memory_operation", thread_id=ctx.request.thread_id,
                                   resource_id=ctx.request.resource_id,
                                   attributes={"operationType": "reflect", "generation": record.generation_count,
                                               "tokens": record.observation_token_count, "blocked": blocked}) as span:
            result = job.reflect(record.active_observations)
            attempts = [{"level": a.level, "tokens": a.tokens, "problem": a.problem} for a in result.attempts]
            if result.observations is None:
                span.record_error(result.problem or "reflection failed")
                retry_at = job.failed("reflector", result.problem or "reflection failed", record, now)
                ctx.note(self.id, reflectionError=f"{result.problem}; the log is kept and the reflector is tried "
                         f"again after {retry_at}", reflectionAttempts=attempts, reflectionRetryAt=retry_at)
                return turn
            committed = buffer_store.commit_generation(ctx.store, record=record, active=result.observations,
                                                       tokens=result.tokens, now=_written_at(ctx, now), buffered=False,
                                                       blocked=blocked)
            if committed is None:
                span.set_attributes({"conflict": True})
                ctx.note(self.id, reflection="another writer changed the log first; reloaded its result")
                return self._load(ctx, turn.key, turn.parsed)
            span.set_output({"generation": committed.generation_count, "tokens": result.tokens})
            ctx.note(self.id, reflected={"generation": committed.generation_count, "from": record.observation_token_count,
                                         "to": result.tokens, "attempts": attempts, "warning": result.problem,
                                         "blocked": blocked})
        return replace(turn, record=committed)

    # -- the context -------------------------------------------------------------------------------
    def _inject(self, ctx: ProcessorContext, turn: _Turn, now: datetime, kept: list[Message] | None = None) -> None:
        req = ctx.request
        record = turn.record
        stored_inputs = set(ctx.notes.get(self.id, {}).get("inputStored", ()))
        for msg in kept or ():  # observed now, sent raw as Mastra does (``_kept_replies``)
            ctx.messages.add(msg, "memory", Provenance(self.id, (msg.id,), detail={"observedThisTurn": True}))
        for msg in turn.unobserved:
            if msg.id in stored_inputs:  # the turn's input, stored with an observation another writer won: sent once
                continue
            ctx.messages.add(msg, "memory", Provenance(self.id, (msg.id,), detail={"unobserved": True}))
        ctx.messages.clear_system(TAG)
        others = rs.other_conversations_block(turn.others)
        # A recorded turn rebuilt annotates its dates as it did (its record says how); a new turn as Mastra.
        style = req.frozen.record.om_dates if req.frozen is not None else DATE_STYLE
        blocks = context_blocks(record, turn.hints, now, others, style=style)
        stored: tuple[str, ...] = (record.id,) if record is not None else ()
        generation = record.generation_count if record is not None else None
        chunk_texts = record.chunks if record is not None else []
        other_ids = tuple(m.id for m in rs.flat(turn.others))
        for block in blocks:
            detail: dict[str, Any] = {"part": block.part, "generation": generation}
            block_ids = stored
            if block.chunk_index is not None:
                detail["chunk"] = block.chunk_index
                source_thread = rs.chunk_thread(chunk_texts[block.chunk_index].text)
                if source_thread:
                    detail["thread"] = source_thread
            if block.part == "other-conversations":
                detail["threads"] = sorted(turn.others)
                block_ids = other_ids
            ctx.messages.add_system(block.text, TAG, Provenance(self.id, block_ids, detail=detail))
        if any(b.part != "other-conversations" for b in blocks):
            reminder = continuation_message(req.thread_id, req.resource_id)
            ctx.messages.add(reminder, "memory", Provenance(self.id, stored, detail={"part": "continuation"}))
        chunks = turn.chunks
        ctx.note(self.id, recordId=record.id if record else None, generation=generation,
                 observationTokenCount=record.observation_token_count if record else 0,
                 rawMessages=len(turn.unobserved), chunks=sum(b.part == "chunk" for b in blocks),
                 storedUnobservedTokens=messages_tokens(ctx.tokenizer, turn.unobserved))
        if req.as_of is None:  # a past turn's buffer is not known: the row holds today's
            ctx.note(self.id, buffer={"chunks": len(chunks), "messageTokens": sum(c.message_tokens for c in chunks),
                                      "observationTokens": sum(c.token_count for c in chunks),
                                      "reflection": bool(record is not None and record.buffered_reflection)},
                     unbufferedTokens=self._unbuffered_tokens(ctx, turn))
        if turn.others:
            ctx.note(self.id, otherIds=list(other_ids), otherThreads=sorted(turn.others))
        # What a turn record needs to show this log again exactly: the time relative dates count from,
        # how much of the generation's log existed, the thread's cursor and the hints shown.
        cursor = turn.hints.cursor
        ctx.note(self.id, now=to_iso(now), chunkCount=len(record.chunks) if record is not None else 0,
                 cursor=f"{cursor.created_at} {cursor.id}" if cursor is not None else None,
                 hints={k: v for k, v in (("currentTask", turn.hints.current_task),
                                          ("suggestedResponse", turn.hints.suggested_response)) if v})
        if not blocks and not turn.unobserved:
            ctx.skip(self.id, f"thread {req.thread_id} has nothing stored or observed yet")

    def _unbuffered_tokens(self, ctx: ProcessorContext, turn: _Turn) -> int:
        """Stored unobserved tokens that neither the log nor the buffer covers yet."""
        after = buffer_store.tail_cursor(turn.chunks, turn.hints.cursor)
        return messages_tokens(ctx.tokenizer, [m for m in turn.unobserved
                                               if after is None or (to_iso(m.created_at), m.id) > after])

    # -- output ----------------------------------------------------------------------------------
    def process_output(self, ctx: ProcessorContext) -> None:
        saved = save_turn(ctx, self.id, stored=ctx.notes.get(self.id, {}).get("inputStored", ()))
        if saved is None:
            return
        req = ctx.request
        assert req.thread_id is not None  # save_turn saves nothing without a thread
        opts = self._options(ctx)
        key = lookup_key(opts.scope, thread_id=req.thread_id, resource_id=req.resource_id)
        state = ctx.notes.get(self.id, {})
        already = set(state.get("inputAlreadyStored", ()))
        fresh = messages_tokens(ctx.tokenizer, [m for m in saved if m.id not in already])
        if "storedUnobservedTokens" in state:
            # The input phase already measured what stays unobserved; re-reading the thread would
            # double this processor's storage work per turn for a number that only feeds a progress bar.
            pending = int(state["storedUnobservedTokens"]) + fresh
            unbuffered = int(state.get("unbufferedTokens") or 0) + fresh
            record_id = state.get("recordId")
        else:
            turn = self._load(ctx, key)
            pending = messages_tokens(ctx.tokenizer, turn.unobserved)
            unbuffered = self._unbuffered_tokens(ctx, turn)
            record_id = turn.record.id if turn.record else None
        om_store.update_pending(ctx.store, record_id=record_id, key=key, scope=opts.scope, thread_id=req.thread_id,
                                resource_id=req.resource_id, config=self._config(ctx), pending=pending,
                                now=state.get("now"))  # the turn's clock: a new row dates like its messages
        ctx.note(self.id, saved=len(saved), pendingMessageTokens=pending)
        interval = opts.buffer_interval
        if interval is not None and unbuffered > 0 and ctx.services.observer_model is not None and \
                (unbuffered >= interval or pending >= opts.message_tokens):
            job = self._job(ctx, key, req.thread_id)
            ctx.services.background.submit("observation", _work_key(key),
                                           lambda token: buffer_observations(job, token),
                                           description=f"observe {key} in the background")
            ctx.note(self.id, bufferingStarted={"unbufferedTokens": unbuffered, "interval": interval})


def _cost(ctx: ProcessorContext, costs: dict[int, tuple[Message, int]], msg: Message) -> int:
    """``msg``'s tokens (``messages_tokens``), kept by the message read: a re-read returns the same message for an
    unchanged row (``_Turn.parsed``), so each call's count of the calls left costs no tokenizing."""
    kept = costs.get(id(msg))
    if kept is not None and kept[0] is msg:
        return kept[1]
    tokens = messages_tokens(ctx.tokenizer, [msg])
    costs[id(msg)] = (msg, tokens)
    return tokens


def _stored_cost(ctx: ProcessorContext, costs: dict[int, tuple[Message, int]], turn: _Turn) -> int:
    """``_pending(ctx, turn, 0)`` from the tokens kept by the message read (``_cost``): after each observer call of a
    long backlog the turn sums what is left again, and a message re-read unchanged is not counted a second time."""
    return sum(_cost(ctx, costs, m) for m in turn.unobserved) + sum(_cost(ctx, costs, m) for m in rs.flat(turn.others))


def _previews_next(ctx: ProcessorContext) -> bool:
    """A preview of the next turn (not a live turn, not a past turn rebuilt): what that turn does first
    is applied to it (activation) or named (an observer or reflector call it cannot make)."""
    return not ctx.live and ctx.request.as_of is None


def _written_at(ctx: ProcessorContext, now: datetime) -> str:
    """When this turn's writes (marks, hint entries, a new generation) are dated: the clock, or the
    turn's newest input stamp when that is later. Messages stored within one millisecond are each
    stamped 1 ms after the thread's newest, so stamps can run ahead of the clock; dated by the clock
    alone, a turn's activation would sort before the previous turn's reply, and a rebuild without a
    record would show it to that turn. Never after the turn's reply, which is stamped after its input."""
    newest = max((as_utc(m.created_at) for m in ctx.messages.messages("input")), default=None)
    return to_iso(newest if newest is not None and newest > as_utc(now) else now)


def _wait_for_background(ctx: ProcessorContext, key: str, opts: ObservationalMemoryOptions, role: str) -> bool:
    """A turn past ``block_after`` (or ``reflection_block_after``) waits for the record's background
    work. Meanwhile background calls on the observer's and reflector's servers neither wait for nor give
    way to other turns' calls (``TRAFFIC.awaiting``): under steady traffic to a one-slot server they would
    otherwise keep giving way, and the wait would end with the messages still raw, turn after turn.

    The turn's stop (``current_stop``: Studio Chat's Stop, a gateway client gone) ends the wait at once and
    raises ``CallStopped`` (``waiting``); the background work goes on, and the next turn takes what it writes."""
    svc = ctx.services
    stop = current_stop()
    limit = _block_wait(opts)
    # A span of its own: a trace shows how long the turn waited and for what, and a caller listening to the
    # turn's spans (Studio Chat) says what the turn waits for, not that the model is slow.
    with ctx.tracer.start_span(f"memory: wait for the background {role}", "memory_operation",
                               thread_id=ctx.request.thread_id, resource_id=ctx.request.resource_id,
                               attributes={"operationType": "wait", "waitsFor": role,
                                           "limitSeconds": limit}) as span, \
            TRAFFIC.awaiting(svc.observer_model, svc.reflector_model), \
            (stop.waking(svc.background.wake) if stop is not None else nullcontext()):
        settled = svc.background.wait_key(_work_key(key), limit,
                                          give_up=(lambda: stop.stopped) if stop is not None else None)
        span.set_output({"settled": settled, "stopped": stop is not None and stop.reason is not None})
    if stop is not None and stop.reason is not None:
        model = (svc.reflector_model or svc.observer_model) if role == "reflector" else svc.observer_model
        raise CallStopped(stop.reason, model_id=model.model_id if model is not None else "", during=role,
                          waiting=True)
    return settled


def _block_wait(opts: ObservationalMemoryOptions) -> float:
    """How long a turn past ``block_after`` waits for a running background call: longer than the
    call may take (its ``timeout``), so a slow call is not raced by a second one."""
    return max(BLOCK_WAIT_SECONDS, (opts.timeout or 0) * 1.5)


def _work_key(lookup: str) -> str:
    """The background-work key of one record: its observer and reflector jobs run one at a time."""
    return f"om:{lookup}"


__all__ = ["ObservationalMemory"]
