"""ObservationalMemory: replaces message history with a dated observation log (spec §3).

Input: load the thread's *unobserved* messages. When they (plus the new input) reach
``message_tokens``, the observer model turns the stored ones into observation lines, and they leave
the raw context. When the log reaches ``observation_tokens``, the reflector rewrites it into a new
generation. The actor then gets the log as system messages (tag ``observational-memory``), a
continuation reminder, the still-unobserved messages and the input. Output: the turn is saved and
the row's ``pendingMessageTokens`` brought up to date.

Everything runs synchronously inside the turn; Mastra's background buffering is not reproduced.
A failed or unreadable observer reply changes nothing: the messages stay raw and the next turn tries
again. While previewing (``ctx.live`` False) nothing is written and no model is called; the record
says what would have happened.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Iterator

from core.message_list import Provenance
from core.messages import Message
from core.observational import store as om_store
from core.observational.context import TAG, context_blocks, continuation_message
from core.observational.observer import build_observer_messages
from core.observational.parsing import parse_observer_output
from core.observational.records import OMRecord, append_chunk, lookup_key
from core.observational.reflector import reflect
from core.observational.tokens import count_text, messages_tokens
from core.options import ObservationalMemoryOptions
from core.processors.base import BaseProcessor, ProcessorContext
from core.processors.message_history import save_turn
from core.timeutil import to_iso
from core.traces.tracer import TracedSpan

if TYPE_CHECKING:  # pragma: no cover
    from core.llm.base import ChatModel

log = logging.getLogger(__name__)


@dataclass
class _Turn:
    """What the input phase works on; rebuilt from storage whenever a write loses a race."""

    key: str
    record: OMRecord | None
    hints: om_store.ThreadHints
    unobserved: list[Message]


class ObservationalMemory(BaseProcessor):
    """``options`` replace the turn's ``observational_memory`` options when given."""

    id = "observational-memory"

    def __init__(self, options: ObservationalMemoryOptions | None = None) -> None:
        self.options = options

    # -- settings ----------------------------------------------------------------------------------
    def _options(self, ctx: ProcessorContext) -> ObservationalMemoryOptions:
        return self.options or ctx.request.options.observational_memory

    @staticmethod
    def _reflector(ctx: ProcessorContext) -> "ChatModel | None":
        reflector = ctx.services.reflector_model
        return reflector if reflector is not None else ctx.services.observer_model

    def _config(self, ctx: ProcessorContext) -> dict[str, Any]:
        """What the row's ``config`` column records (Mastra's nesting, our values)."""
        opts = self._options(ctx)
        observer, reflector = ctx.services.observer_model, self._reflector(ctx)
        return {
            "scope": opts.scope,
            "observation": {"messageTokens": opts.message_tokens, "model": observer.model_id if observer else None,
                            "previousObserverTokens": opts.previous_observer_tokens, "bufferTokens": False},
            "reflection": {"observationTokens": opts.observation_tokens,
                           "model": reflector.model_id if reflector else None},
        }

    # -- loading ---------------------------------------------------------------------------------
    def _load(self, ctx: ProcessorContext, key: str) -> _Turn:
        req = ctx.request
        assert req.thread_id is not None
        if req.as_of is not None:
            return self._load_past(ctx, key)
        record = om_store.current_record(ctx.store, key)
        thread = ctx.store.memory.get_thread(req.thread_id)
        hints = om_store.thread_hints(thread.metadata if thread is not None else None)
        before = (req.as_of.created_at, req.as_of.id) if req.as_of is not None else None
        unobserved = om_store.unobserved_messages(
            ctx.store, thread_id=req.thread_id, resource_id=req.resource_id, record=record, hints=hints, before=before)
        return _Turn(key, record, hints, unobserved)

    def _load_past(self, ctx: ProcessorContext, key: str) -> _Turn:
        """A past turn's state: from its record (exact), else as of its input's time (reconstructed)."""
        from core.replay import observations

        req = ctx.request
        assert req.thread_id is not None and req.as_of is not None
        if req.frozen is not None and req.frozen.om is not None:
            om = req.frozen.om
            return _Turn(key, om.record, om.hints, list(om.unobserved))
        state = observations.as_of(ctx.store, key=key, thread_id=req.thread_id, resource_id=req.resource_id,
                                   before=(req.as_of.created_at, req.as_of.id))
        if state.unknowns:
            ctx.note(self.id, unknown=state.unknowns)
        return _Turn(key, state.record, state.hints, state.unobserved)

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
        all_inputs = ctx.messages.messages("input")
        inputs = [m for m in all_inputs if m.id not in stored_ids]
        if len(inputs) != len(all_inputs):  # a client re-sent stored messages; don't count them twice later
            ctx.note(self.id, inputAlreadyStored=[m.id for m in all_inputs if m.id in stored_ids])
        input_tokens = messages_tokens(ctx.tokenizer, inputs)
        pending = messages_tokens(ctx.tokenizer, turn.unobserved) + input_tokens
        ctx.note(self.id, scope=opts.scope, lookupKey=key, unobservedTokens=pending,
                 messageTokens=opts.message_tokens, observationTokens=opts.observation_tokens)

        if pending >= opts.message_tokens:
            if not turn.unobserved:
                ctx.note(self.id, observation="the new input alone reaches the threshold; it is observed "
                         "once it has been saved (next turn)")
            elif not may_write:
                why = "read-only turn" if req.read_only else "preview"
                ctx.note(self.id, observation=f"{why}: an observation would run now: {pending:,} unobserved "
                         f"tokens ≥ {opts.message_tokens:,}")
            else:
                turn = self._observe(ctx, turn, input_tokens, now)

        record = turn.record
        if record is not None and record.observation_token_count >= opts.observation_tokens:
            if not may_write:
                ctx.note(self.id, reflection=f"a reflection would run now: {record.observation_token_count:,} "
                         f"observation tokens ≥ {opts.observation_tokens:,}")
            else:
                turn = self._reflect(ctx, turn, now)
        self._inject(ctx, turn, now)

    def _inject(self, ctx: ProcessorContext, turn: _Turn, now: datetime) -> None:
        req = ctx.request
        record = turn.record
        for msg in turn.unobserved:
            ctx.messages.add(msg, "memory", Provenance(self.id, (msg.id,), detail={"unobserved": True}))
        ctx.messages.clear_system(TAG)
        blocks = context_blocks(record, turn.hints, now)
        stored = (record.id,) if record is not None else ()
        generation = record.generation_count if record is not None else None
        for block in blocks:
            detail: dict[str, Any] = {"part": block.part, "generation": generation}
            if block.chunk_index is not None:
                detail["chunk"] = block.chunk_index
            ctx.messages.add_system(block.text, TAG, Provenance(self.id, stored, detail=detail))
        if blocks:
            reminder = continuation_message(req.thread_id, req.resource_id)
            ctx.messages.add(reminder, "memory", Provenance(self.id, stored, detail={"part": "continuation"}))
        ctx.note(self.id, recordId=record.id if record else None, generation=generation,
                 observationTokenCount=record.observation_token_count if record else 0,
                 rawMessages=len(turn.unobserved), chunks=sum(b.part == "chunk" for b in blocks),
                 storedUnobservedTokens=messages_tokens(ctx.tokenizer, turn.unobserved))
        # What a turn record needs to show this log again exactly: the time relative dates count from,
        # how much of the generation's log existed, the thread's cursor and the hints shown.
        cursor = turn.hints.cursor
        ctx.note(self.id, now=to_iso(now), chunkCount=len(record.chunks) if record is not None else 0,
                 cursor=f"{cursor.created_at} {cursor.id}" if cursor is not None else None,
                 hints={k: v for k, v in (("currentTask", turn.hints.current_task),
                                          ("suggestedResponse", turn.hints.suggested_response)) if v})
        if not blocks and not turn.unobserved:
            ctx.skip(self.id, f"thread {req.thread_id} has nothing stored or observed yet")

    # -- observing ---------------------------------------------------------------------------------
    @contextmanager
    def _span(self, ctx: ProcessorContext, name: str, span_type: str, **kw: Any) -> Iterator[TracedSpan]:
        with ctx.tracer.start_span(name, span_type, thread_id=ctx.request.thread_id,
                                   resource_id=ctx.request.resource_id, **kw) as span:
            yield span

    def _generate(self, ctx: ProcessorContext, model: "ChatModel", messages: list[dict[str, Any]], *, role: str,
                  temperature: float) -> str:
        opts = self._options(ctx)
        with self._span(ctx, f"{role}: {model.model_id}", "model_generation", input={"messages": messages},
                        attributes={"model": model.model_id, "role": role}) as span:
            result = model.generate(messages, temperature=temperature, max_tokens=opts.max_output_tokens,
                                    timeout=opts.timeout)
            span.set_attributes({"usage": result.usage.to_dict() if result.usage else None,
                                 "finishReason": result.finish_reason})
            span.set_output(result.text)
            return str(result.text or "")

    def _observe(self, ctx: ProcessorContext, turn: _Turn, input_tokens: int, now: datetime) -> _Turn:
        req = ctx.request
        assert req.thread_id is not None
        model = ctx.services.observer_model
        if model is None:
            ctx.note(self.id, observationError="no observer model is configured; messages stay raw")
            return turn
        opts = self._options(ctx)
        record, batch = turn.record, list(turn.unobserved)
        batch_tokens = messages_tokens(ctx.tokenizer, batch)
        messages = build_observer_messages(
            batch, previous_observations=record.active_observations if record else "",
            current_task=turn.hints.current_task, suggested_response=turn.hints.suggested_response,
            tokenizer=ctx.tokenizer, previous_tokens=opts.previous_observer_tokens, instruction=opts.instruction,
        )
        with self._span(ctx, "memory: observe", "memory_operation",
                        attributes={"operationType": "observe", "messages": len(batch), "tokens": batch_tokens}) as span:
            try:
                text = self._generate(ctx, model, messages, role="observer", temperature=opts.observer_temperature)
            except Exception as exc:  # noqa: BLE001 - a provider failure must not lose the messages
                return self._observe_failed(ctx, span, turn, f"observer call failed: {type(exc).__name__}: {exc}")
            parsed = parse_observer_output(text)
            if not parsed.ok:
                return self._observe_failed(ctx, span, turn, f"observer reply unusable: {parsed.problem}")
            last = batch[-1]
            cursor = om_store.Cursor(to_iso(last.created_at), last.id)
            active = append_chunk(record.active_observations if record else "", parsed.observations, cursor.created_at)
            obs = om_store.Observation(
                active_observations=active, observation_tokens=count_text(ctx.tokenizer, active),
                observed_ids=[m.id for m in batch], tokens_observed=batch_tokens, pending_after=input_tokens,
                cursor=cursor, current_task=parsed.current_task, suggested_response=parsed.suggested_response,
                thread_title=parsed.thread_title,
            )
            committed = om_store.commit_observation(
                ctx.store, record=record, key=turn.key, scope=opts.scope,
                thread_id=req.thread_id, resource_id=req.resource_id, config=self._config(ctx), obs=obs,
                now=to_iso(now))
            if committed is None:
                # Another process observed this thread meanwhile; its result stands, ours is dropped.
                span.set_attributes({"conflict": True})
                ctx.note(self.id, observation="another writer observed this thread first; reloaded its result")
                return self._load(ctx, turn.key)
            span.set_output({"observedMessages": len(batch), "observationTokens": obs.observation_tokens})
            ctx.note(self.id, observed={"messages": len(batch), "tokens": batch_tokens,
                                        "observationTokens": obs.observation_tokens})
        fresh = self._load(ctx, turn.key)
        # The hints were just written; re-reading keeps this turn's context identical to the next one's.
        return _Turn(turn.key, committed, fresh.hints, fresh.unobserved)

    def _observe_failed(self, ctx: ProcessorContext, span: TracedSpan, turn: _Turn, reason: str) -> _Turn:
        # The turn goes on with the messages raw; the failure is in the record, the span and the log.
        log.warning("observation of thread %s failed: %s", ctx.request.thread_id, reason)
        span.record_error(reason)
        ctx.note(self.id, observationError=f"{reason}; the messages stay raw and the next turn retries")
        return turn

    # -- reflecting --------------------------------------------------------------------------------
    def _reflect(self, ctx: ProcessorContext, turn: _Turn, now: datetime) -> _Turn:
        record = turn.record
        assert record is not None
        model = self._reflector(ctx)
        if model is None:
            ctx.note(self.id, reflectionError="no reflector model is configured")
            return turn
        opts = self._options(ctx)
        threshold, temperature = opts.observation_tokens, opts.reflector_temperature

        def generate(messages: list[dict[str, Any]], level: int) -> str:
            return self._generate(ctx, model, messages, role=f"reflector (level {level})", temperature=temperature)

        with self._span(ctx, "memory: reflect", "memory_operation",
                        attributes={"operationType": "reflect", "generation": record.generation_count,
                                    "tokens": record.observation_token_count}) as span:
            result = reflect(record.active_observations, generate=generate, tokenizer=ctx.tokenizer,
                             threshold=threshold, max_level=opts.max_compression_level,
                             guidance=opts.reflection_guidance)
            attempts = [{"level": a.level, "tokens": a.tokens, "problem": a.problem} for a in result.attempts]
            if result.observations is None:
                log.warning("reflection of %s failed: %s", turn.key, result.problem)
                span.record_error(result.problem or "reflection failed")
                ctx.note(self.id, reflectionError=f"{result.problem}; the log is kept and the next turn retries",
                         reflectionAttempts=attempts)
                return turn
            committed = om_store.commit_reflection(ctx.store, record=record, reflection=result.observations,
                                                   tokens=result.tokens, now=to_iso(now))
            if committed is None:
                span.set_attributes({"conflict": True})
                ctx.note(self.id, reflection="another writer changed the log first; reloaded its result")
                return self._load(ctx, turn.key)
            span.set_output({"generation": committed.generation_count, "tokens": result.tokens})
            ctx.note(self.id, reflected={"generation": committed.generation_count, "from": record.observation_token_count,
                                         "to": result.tokens, "attempts": attempts, "warning": result.problem})
        return _Turn(turn.key, committed, turn.hints, turn.unobserved)

    # -- output ----------------------------------------------------------------------------------
    def process_output(self, ctx: ProcessorContext) -> None:
        saved = save_turn(ctx, self.id)
        if saved is None:
            return
        req = ctx.request
        assert req.thread_id is not None  # save_turn saves nothing without a thread
        opts = self._options(ctx)
        key = lookup_key(opts.scope, thread_id=req.thread_id, resource_id=req.resource_id)
        state = ctx.notes.get(self.id, {})
        if "storedUnobservedTokens" in state:
            # The input phase already measured what stays unobserved; re-reading the thread would
            # double this processor's storage work per turn for a number that only feeds a progress bar.
            already = set(state.get("inputAlreadyStored", ()))
            pending = int(state["storedUnobservedTokens"]) + messages_tokens(
                ctx.tokenizer, [m for m in saved if m.id not in already])
            record_id = state.get("recordId")
        else:
            turn = self._load(ctx, key)
            pending = messages_tokens(ctx.tokenizer, turn.unobserved)
            record_id = turn.record.id if turn.record else None
        om_store.update_pending(ctx.store, record_id=record_id, key=key, scope=opts.scope, thread_id=req.thread_id,
                                resource_id=req.resource_id, config=self._config(ctx), pending=pending)
        ctx.note(self.id, saved=len(saved), pendingMessageTokens=pending)


__all__ = ["ObservationalMemory"]
