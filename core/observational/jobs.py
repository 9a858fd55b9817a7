"""The observer and reflector calls, for a turn (synchronous) and for the background (buffered).

``OMJob`` holds what one observational-memory record's work needs: the store, tokenizer, tracer,
clock, models and options, and who it is for. A turn builds one from its context; a background job
gets a copy and reads everything else from storage when it starts (never the turn's snapshot, which
is stale by then). Background jobs:

- ``buffer_observations``: observe the stored messages that no observation or buffered chunk covers
  yet, and append the result to the buffer (``bufferedObservationChunks``), not to the log;
- ``buffer_reflection``: rewrite the log as it is now and keep the result in ``bufferedReflection``,
  to be swapped in when the log reaches its threshold.

A failed call leaves a back-off on the row (``record_failure``): neither the turn nor the background
asks that model again before it expires.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Mapping

from core.background import CANCELLED, CancelToken
from core.context_window import ContextWindowError, PromptBudget
from core.llm.base import CONTEXT_OVERFLOW_HINT, ModelError
from core.llm.stopping import CallStopped, current_stop
from core.llm.yielding import TRAFFIC, CallYielded, background_call
from core.observational import buffer_store
from core.observational import store as om_store
from core.observational.batches import BuildRequest, ObserverCall, calls_left, plan, request_tokens
from core.observational.buffer import next_backoff
from core.observational.observer import build_observer_messages
from core.observational.parsing import ObserverOutput, parse_observer_output
from core.observational.records import BufferedChunk, OMRecord
from core.observational.reflector import Reflection, ReplyCutOff, reflect
from core.observational.tokens import count_text, messages_tokens
from core.options import ObservationalMemoryOptions
from core.timeutil import to_iso

if TYPE_CHECKING:  # pragma: no cover
    from core.llm.base import ChatModel
    from core.messages import Message
    from core.storage import Store
    from core.timeutil import Clock
    from core.tokens import Tokenizer
    from core.traces.tracer import SpanTracer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OMJob:
    """What work on one observational-memory record needs (see the module doc)."""

    store: "Store"
    tokenizer: "Tokenizer"
    tracer: "SpanTracer"
    clock: "Clock"
    observer: "ChatModel | None"
    reflector: "ChatModel | None"
    options: ObservationalMemoryOptions
    key: str
    thread_id: str
    resource_id: str | None
    config: Mapping[str, Any]
    title_hint: bool = False  # ask the observer for a <thread-title> (generated titles are on)
    # The span current when the job was handed off: a background job's spans join the trace of the
    # turn that started it (after that turn's root span ended), not a trace of their own.
    parent: Any = None
    # Set for a job running in the background (its token): its calls give way to a turn's call to the same
    # server when ``options.yield_to_turns`` says so (``core.llm.yielding``); a turn's own calls take the server.
    background: CancelToken | None = None
    # The observer model's context window in tokens, when known (its ``context_window``; in a preview without
    # an observer, the turn's model's, which observes by default): each observer call is fitted into it.
    window: int | None = None

    # -- model calls ----------------------------------------------------------------------------------
    def generate(self, model: "ChatModel", messages: list[dict[str, Any]], *, role: str, temperature: float,
                 fitted: str | None = None) -> str:
        """One observer or reflector call. ``fitted``: how the request was fitted to the model's window (the
        observer's, when it is known), for the hint of a server that refuses it as over its context."""
        from core.model_call import sent_settings  # (here: the call machinery imports much of the engine)

        opts = self.options
        with self.tracer.start_span(f"{role}: {model.model_id}", "model_generation", input={"messages": messages},
                                    thread_id=self.thread_id, resource_id=self.resource_id,
                                    attributes={"model": model.model_id, "role": role,
                                                **sent_settings(model, messages, temperature,
                                                                opts.max_output_tokens)}) as span:
            said: dict[str, Any] = {}
            try:
                try:
                    with self._server(model, role, said):
                        result = model.generate(messages, temperature=temperature,
                                                max_tokens=opts.max_output_tokens, timeout=opts.timeout)
                finally:
                    span.set_attributes(said)
            except CallYielded as exc:
                # Not a failure: the span says why it stopped, and the job tries again after the turn's call.
                span.end(output=None, attributes={"yielded": exc.span_attribute()})
                raise
            except CallStopped as exc:
                # The turn was stopped (the Studio's Stop, a gateway client gone): nothing is written, no back-off.
                span.end(error=f"stopped: {exc.reason}")
                raise CallStopped(exc.reason, model_id=exc.model_id, during=role) from exc
            except ModelError as exc:
                told = _where_to_cap(_context_not_fitted(exc, role, fitted), opts)
                if told is exc:
                    raise
                raise told from exc
            span.set_attributes({"usage": result.usage.to_dict() if result.usage else None,
                                 "finishReason": result.finish_reason})
            span.set_output(result.text)
            if result.finish_reason == "length":
                window = self.window if role == "observer" else getattr(model, "context_window", None)
                raise ReplyCutOff(cut_off_reply(role, str(result.text or ""), result.usage, opts.max_output_tokens,
                                                window))
            return str(result.text or "")

    @contextmanager
    def _server(self, model: "ChatModel", role: str, said: dict[str, Any]) -> Iterator[None]:
        """Where this call stands on ``model``'s server. A background call that yields to turns
        (``yield_to_turns``) waits for a turn's call to finish and may be cancelled by the next one; any
        other call is a turn's (its own observer or reflector) and takes the server. ``said`` is filled,
        once the block ends, with what the call's span says about that (``core.llm.yielding``)."""
        if self.background is not None:
            token = self.background
            with background_call(model, role, self.options.yield_to_turns, stop=lambda: token.cancelled, said=said):
                yield
            return
        stop = current_stop()  # the turn's (armed by the agent): a stopped turn starts no call and uses no reply
        if stop is not None:
            stop.check(model.model_id)
        with TRAFFIC.foreground(model) as server:
            try:
                yield
            finally:
                said.update(server.span_attributes())
        if stop is not None:
            stop.check(model.model_id)  # (a model that cannot be cut short answered all the same)

    def observer_budget(self) -> PromptBudget | None:
        """What an observer request may use of the observer's context window (None: no window known).
        Raises ``ContextWindowError`` when ``max_output_tokens`` leaves no room for a request."""
        if self.window is None:
            return None
        model_id = self.observer.model_id if self.observer is not None else "the observer model"
        cap = self.options.max_output_tokens
        try:
            return PromptBudget.for_model(self.window, max_tokens=cap, model_id=model_id)
        except ContextWindowError as exc:
            raise ContextWindowError(
                f"{model_id}: observational_memory max_output_tokens ({cap:,}) leaves no room for the observer's "
                f"request in its {self.window:,}-token context window; lower max_output_tokens or observe with a "
                "model with a larger context window", prompt_tokens=0, reply_tokens=cap or 0,
                context_window=self.window, model_id=model_id) from exc

    def plan(self, pending: list["Message"], *, previous: str, current_task: str | None,
             suggested_response: str | None, max_tokens: int | None = None,
             limit: int | None = None) -> list[ObserverCall]:
        """The observer calls that observe ``pending`` (oldest first) given the log so far (``previous``) and
        the thread's hints: batches of at most ``max_tokens`` (default ``max_tokens_per_batch``) message
        tokens fitted to the observer's window (``core.observational.batches``); the first ``limit`` only when
        given. Raises ``ContextWindowError`` (``observer_budget``)."""
        opts = self.options
        return plan(pending, build=self._builder(previous, current_task, suggested_response), tokenizer=self.tokenizer,
                    max_tokens=max_tokens if max_tokens is not None else opts.max_tokens_per_batch,
                    budget=self.observer_budget(), previous_tokens=opts.previous_observer_tokens, limit=limit)

    def calls_left(self, rest: list["Message"], *, cost: Callable[["Message"], int], previous: str,
                   current_task: str | None, suggested_response: str | None) -> tuple[int, bool]:
        """How many observer calls ``rest`` takes after the one being made, and whether that is exact
        (``batches.calls_left``: a forecast when the observer's window is known). Raises ``ContextWindowError``."""
        opts = self.options
        return calls_left(rest, cost=cost, build=self._builder(previous, current_task, suggested_response),
                          tokenizer=self.tokenizer, max_tokens=opts.max_tokens_per_batch,
                          budget=self.observer_budget(), previous_tokens=opts.previous_observer_tokens)

    def _builder(self, previous: str, current_task: str | None, suggested_response: str | None) -> BuildRequest:
        instruction = _instruction(self.options.instruction, self.title_hint)

        def build(batch: Any, tail: int | None) -> list[dict[str, Any]]:
            return build_observer_messages(
                batch, previous_observations=previous, current_task=current_task,
                suggested_response=suggested_response, tokenizer=self.tokenizer, previous_tokens=tail,
                instruction=instruction)

        return build

    def _fitted(self, call: ObserverCall) -> str | None:
        """How ``call`` was fitted to the observer's window, in words (None: no window known)."""
        try:
            budget = self.observer_budget()
        except ContextWindowError:
            return None
        if budget is None:
            return None
        said = (f"{budget.describe()}, {budget.prompt_limit:,} tokens for the request; this one counted "
                f"{call.request_tokens:,} here")
        if call.request_tokens <= budget.prompt_limit:
            return said + ", so the server counts more than this engine's tokenizer or has a smaller context"
        instructions = request_tokens(self.tokenizer, call.messages[:-1])  # all but the history message
        if instructions > budget.prompt_limit:
            return said + f", its instructions with the observations' tail and hints alone {instructions:,}"
        return said + f", over it with a single message of {call.tokens:,} tokens"

    def observe(self, call: ObserverCall) -> tuple[ObserverOutput | None, str | None]:
        """One observer call (``plan``'s): (parsed reply, None) or (None, why it failed)."""
        assert self.observer is not None
        opts = self.options
        try:
            text = self.generate(self.observer, call.messages, role="observer",
                                 temperature=opts.observer_temperature, fitted=self._fitted(call))
        except (CallYielded, CallStopped):  # not a failure: tried again after the turn's call, or stopped with it
            raise
        except Exception as exc:  # noqa: BLE001 - a provider failure must not lose the messages
            return None, f"observer call failed: {type(exc).__name__}: {exc}"
        parsed = parse_observer_output(text, copied_from=[str(m["content"]) for m in call.messages])
        if not parsed.ok:
            return None, f"observer reply unusable: {parsed.problem}"
        return parsed, None

    def reflect(self, observations: str, *, level_label: str = "reflector") -> Reflection:
        model = self.reflector or self.observer
        assert model is not None
        opts = self.options

        def generate(messages: list[dict[str, Any]], level: int) -> str:
            return self.generate(model, messages, role=f"{level_label} (level {level})",
                                 temperature=opts.reflector_temperature)

        return reflect(observations, generate=generate, tokenizer=self.tokenizer, threshold=opts.observation_tokens,
                       max_level=opts.max_compression_level, guidance=opts.reflection_guidance)

    def failed(self, which: str, error: str, record: OMRecord | None, now: datetime) -> str:
        """Back off after a failed call; returns when the next try may run (ISO text). The back-off
        counts from when the call failed, not from ``now`` (when the turn or job started): a slow model's
        calls (a reflection's levels took minutes on a small local model) outlasted the first back-off,
        which had then expired before it was written, and the next turn waited for the same calls again."""
        now = max(now, self.clock.now())
        previous = buffer_store.current_backoff(record, which)
        retry = next_backoff(previous, error, now)
        log.warning("%s of %s failed (retry after %s): %s", which, self.key, retry.retry_at, error)
        try:
            buffer_store.record_failure(self.store, key=self.key, scope=self.options.scope, thread_id=self.thread_id,
                                        resource_id=self.resource_id, config=self.config, which=which, error=error,
                                        now=to_iso(now), retry=retry)
        except Exception:  # noqa: BLE001 - the back-off is a courtesy; the failure is already logged
            log.warning("could not record the %s back-off of %s", which, self.key, exc_info=True)
        return retry.retry_at


def cut_off_reply(role: str, text: str, usage: Any, cap: int | None, window: int | None) -> str:
    """Why an observer or reflector reply that ended at a length limit (finish reason ``length``) is not used,
    and what makes the next one end: which limit it hit (``cap``, ``max_output_tokens``; else the end of the
    model's ``window`` when the server's usage shows the request and the reply filled it; else the server's own),
    and whether what it wrote before the cut was usable at all. A small model (SmolLM2-135M on llama.cpp) writes
    "🟡" lines until its context is full: a larger limit does not make that reply end, another model may."""
    which = role.split(" ", 1)[0]  # "observer", "reflector (level 1)"
    prompt = getattr(usage, "prompt_tokens", None)
    written = getattr(usage, "completion_tokens", None)
    filled = window is not None and prompt is not None and written is not None and prompt + written >= window
    if cap is not None and not (filled and written is not None and written < cap):
        where = f"observational_memory max_output_tokens ({cap:,})"
    elif filled:
        where = (f"the end of the model's {window:,}-token context (a request of {prompt:,} tokens, {written:,} "
                 "written)")
    else:  # (no cap set, and the server's usage does not show its context filled, or no window is known)
        where = "the server's own limit (its reply limit or the end of its context: no max_output_tokens was set)"
    said = (f"the {role} reply was cut off at {where} (finish reason 'length'), so its last lines are missing and "
            "none of it was used")
    written_before = parse_observer_output(text)
    if not written_before.ok:
        return (f"{said}; what it wrote before the cut was not usable either ({written_before.problem}): the model "
                f"did not write the {which}'s format and end it, so a larger limit may not help; give the {which} "
                f"a model that does: observational_memory={{'{which}_model': ...}} (memory-studio serve: --om-model "
                "PROVIDER/MODEL)")
    if where.startswith("the end of"):
        shorter = (", or a smaller observational_memory max_tokens_per_batch for shorter requests"
                   if which == "observer" else "")
        return (f"{said}; its request and reply must fit the model's context: give the server a larger context "
                f"(llama.cpp --ctx-size, vLLM --max-model-len, Ollama num_ctx){shorter}")
    if cap is None:
        return (f"{said}; give the server a larger reply limit or context (llama.cpp --n-predict and --ctx-size, "
                "Ollama num_predict and num_ctx), or a model that writes less")
    return (f"{said}; raise observational_memory={{'max_output_tokens': ...}} (memory-studio serve: "
            "--om-max-output-tokens N)")


#: What a model client's hint says when a call that set no reply length timed out.
_UNCAPPED_HINT = "model_settings={'max_tokens'"


def _where_to_cap(exc: ModelError, opts: ObservationalMemoryOptions) -> ModelError:
    """The model client's timeout hint tells to cap the reply with the agent's ``model_settings``;
    those never reach the observer and the reflector, whose cap is ``max_output_tokens`` in the
    observational-memory options: say so (the client's sentence stays)."""
    if opts.max_output_tokens is not None or _UNCAPPED_HINT not in exc.hint:
        return exc
    return exc.with_hint(f"{exc.hint}; for observational memory's observer and reflector, which the agent's "
                         "model_settings do not reach: observational_memory={'max_output_tokens': 2000} "
                         "(memory-studio serve: --om-max-output-tokens 2000)")


def _context_not_fitted(exc: ModelError, role: str, fitted: str | None = None) -> ModelError:
    """The model client's hint for a request over the server's context is written for a caller that fitted its
    prompt to ``context_window`` (an agent's turn): "give a smaller context_window". The observer's and the
    reflector's requests are not fitted that way, so that advice only cut more of each turn's memory: say what
    makes them fit instead. The observer's calls are cut to its window when it is known (``fitted`` says how
    this one was): then what is left over is a single message, or the instructions with the observations' tail,
    or a server whose context is smaller than the window it was given."""
    if CONTEXT_OVERFLOW_HINT not in exc.hint:
        return exc
    which = role.split(" ", 1)[0]  # "observer", "reflector (level 1)"
    larger = ("give the server a larger context (llama.cpp --ctx-size, vLLM --max-model-len, Ollama num_ctx) or set "
              f"observational_memory's {which}_model to a model with a larger one")
    if which == "observer" and fitted is not None:
        return exc.with_hint(f"the observer's calls are cut to fit {fitted}: {larger} (a context_window that "
                             "says the server's real size keeps the cut right)")
    if which == "observer":
        return exc.with_hint("the observer's request is not fitted to a context window, as its model says none "
                             "(its instructions, the observations so far and a batch of messages, up to "
                             "max_tokens_per_batch, are sent as they are): give the observer model its "
                             "context_window (context_window=..., <PROVIDER>_CONTEXT_WINDOW, serve "
                             f"--context-window) so each call is cut to fit, or {larger}")
    return exc.with_hint(f"the {which}'s request is not fitted to context_window (its instructions, the "
                         f"observations so far and the messages it takes are sent whole): {larger}")


def _instruction(custom: str | None, title_hint: bool) -> str | None:
    if not title_hint:
        return custom
    ask = ("Also add a <thread-title> section: a short title (at most six words) naming what this "
           "conversation is about, in the conversation's language.")
    return f"{custom.strip()}\n\n{ask}" if custom else ask


# -- background jobs -----------------------------------------------------------------------------------
#: What a background step returns when its model call gave way to a turn's (it is tried again).
_YIELDED = object()


def buffer_observations(job: OMJob, token: CancelToken) -> Any:
    """Observe what the buffer does not cover yet, in batches of about two ``buffer_tokens``, and
    append each result as a chunk (see the module doc). Returns the chunks made. A batch whose call
    gave way to a turn's is read and observed again once that call has finished: nothing was written."""
    job = replace(job, background=token)
    made: list[BufferedChunk] = []
    interval = job.options.buffer_interval or job.options.message_tokens
    while not token.cancelled:
        chunk = _buffer_once(job, token, max_tokens=2 * interval)
        if chunk is _YIELDED:
            continue
        if chunk is None or chunk is CANCELLED:
            return CANCELLED if chunk is CANCELLED else made
        made.append(chunk)
        if _unbuffered_tokens(job) < interval:
            return made
    return CANCELLED


def _unbuffered(job: OMJob) -> tuple[OMRecord | None, Any, list["Message"], tuple[str, str] | None]:
    record = om_store.current_record(job.store, job.key)
    thread = job.store.memory.get_thread(job.thread_id)
    hints = om_store.thread_hints(thread.metadata if thread is not None else None)
    chunks = record.buffered if record is not None else []
    after = buffer_store.tail_cursor(chunks, hints.cursor)
    unobserved = om_store.unobserved_messages(job.store, thread_id=job.thread_id, resource_id=job.resource_id,
                                              record=record, hints=hints) if thread is not None else []
    return record, hints, [m for m in unobserved if after is None or (to_iso(m.created_at), m.id) > after], after


def _unbuffered_tokens(job: OMJob) -> int:
    return messages_tokens(job.tokenizer, _unbuffered(job)[2])


def _buffer_once(job: OMJob, token: CancelToken, *, max_tokens: int) -> Any:
    if job.observer is None:
        return None
    now = job.clock.now()
    record, hints, pending, after = _unbuffered(job)
    backoff = buffer_store.current_backoff(record, "observer")
    if backoff is not None and backoff.active(now):
        return None
    chunks = record.buffered if record is not None else []
    previous = "\n\n".join([record.active_observations if record else "", *(c.observations for c in chunks)]).strip()
    last_chunk = chunks[-1] if chunks else None
    current_task = (last_chunk.current_task if last_chunk else None) or hints.current_task
    suggested_response = (last_chunk.suggested_response if last_chunk else None) or hints.suggested_response
    try:  # the oldest first, at least one message, about ``max_tokens`` at most (and what the window holds)
        calls = job.plan(pending, previous=previous, current_task=current_task, suggested_response=suggested_response,
                         max_tokens=min(max_tokens, job.options.max_tokens_per_batch), limit=1)
    except ContextWindowError as exc:
        job.failed("observer", str(exc), record, now)
        return None
    if not calls:
        return None
    call = calls[0]
    batch, used = list(call.batch), call.tokens
    with job.tracer.start_span("memory: buffer observations", "memory_operation", job.parent,
                               thread_id=job.thread_id, resource_id=job.resource_id,
                               attributes={"operationType": "buffer-observation", "messages": len(batch),
                                           "tokens": used, "background": True,
                                           **({"leftOut": call.left_out} if call.left_out else {})}) as span:
        buffer_store.set_buffering(job.store, job.key, observation=True)
        try:
            parsed, problem = job.observe(call)
        except CallYielded as exc:
            span.set_attributes({"yielded": {"to": exc.to}})
            buffer_store.set_buffering(job.store, job.key, observation=False)
            return _YIELDED
        if parsed is None:
            assert problem is not None
            span.record_error(problem)
            job.failed("observer", problem, record, now)
            return None
        if token.cancelled:
            buffer_store.set_buffering(job.store, job.key, observation=False)
            return CANCELLED
        last = batch[-1]
        chunk_id = str(uuid.uuid4())
        chunk = BufferedChunk(
            id=chunk_id, cycle_id=chunk_id, observations=parsed.observations,
            token_count=count_text(job.tokenizer, parsed.observations), message_ids=tuple(m.id for m in batch),
            message_tokens=used, last_observed_at=to_iso(last.created_at),
            last_observed_message_id=last.id, created_at=to_iso(now), thread_id=job.thread_id,
            current_task=parsed.current_task, suggested_response=parsed.suggested_response,
            thread_title=parsed.thread_title)
        committed = buffer_store.commit_chunk(
            job.store, key=job.key, scope=job.options.scope, thread_id=job.thread_id, resource_id=job.resource_id,
            config=job.config, chunk=chunk, after=after, now=to_iso(job.clock.now()))
        if committed is None:
            span.set_attributes({"conflict": True})
            buffer_store.set_buffering(job.store, job.key, observation=False)
            return None
        span.set_output({"chunk": chunk.id, "messages": len(batch), "observationTokens": chunk.token_count})
    if parsed.thread_title and job.title_hint:
        from core.titles import title_from_observer

        title_from_observer(job.store, job.thread_id, parsed.thread_title, model_id=job.observer.model_id)
    return chunk


def buffer_reflection(job: OMJob, token: CancelToken) -> Any:
    """Rewrite the log as it stands and keep the rewrite beside it, for the turn that reaches the
    reflection threshold to swap in without waiting. A rewrite whose call gave way to a turn's starts
    again (from the log as it is then) once that call has finished."""
    job = replace(job, background=token)
    while not token.cancelled:
        result = _reflect_once(job, token)
        if result is not _YIELDED:
            return result
    return CANCELLED


def _reflect_once(job: OMJob, token: CancelToken) -> Any:
    if (job.reflector or job.observer) is None:
        return None
    now = job.clock.now()
    record = om_store.current_record(job.store, job.key)
    if record is None or record.buffered_reflection or record.is_empty:
        return None
    backoff = buffer_store.current_backoff(record, "reflector")
    if backoff is not None and backoff.active(now):
        return None
    reflected = record.active_observations
    with job.tracer.start_span("memory: buffer reflection", "memory_operation", job.parent,
                               thread_id=job.thread_id, resource_id=job.resource_id,
                               attributes={"operationType": "buffer-reflection", "generation": record.generation_count,
                                           "tokens": record.observation_token_count, "background": True}) as span:
        buffer_store.set_buffering(job.store, job.key, reflection=True)
        try:
            result = job.reflect(reflected)
        except CallYielded as exc:
            span.set_attributes({"yielded": {"to": exc.to}})
            buffer_store.set_buffering(job.store, job.key, reflection=False)
            return _YIELDED
        if result.observations is None:
            span.record_error(result.problem or "reflection failed")
            job.failed("reflector", result.problem or "reflection failed", record, now)
            return None
        if token.cancelled:
            buffer_store.set_buffering(job.store, job.key, reflection=False)
            return CANCELLED
        committed = buffer_store.commit_buffered_reflection(
            job.store, record=record, reflected=reflected, reflection=result.observations, tokens=result.tokens,
            input_tokens=record.observation_token_count, now=to_iso(job.clock.now()))
        if committed is None:
            span.set_attributes({"conflict": True})
            buffer_store.set_buffering(job.store, job.key, reflection=False)
            return None
        span.set_output({"tokens": result.tokens})
        return result


__all__ = ["OMJob", "buffer_observations", "buffer_reflection", "cut_off_reply"]
