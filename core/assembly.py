"""How a turn is assembled: the processor chains in Mastra's order, and running them.

``TurnAssembler`` turns a request into an ``AssembledPrompt`` (input side) and persists a finished
turn (output side). ``Memory`` owns one and delegates to it; the assembler sees the memory only
through what it is given: its name, its options (and how per-call overrides resolve), its user
processors, and a factory of the ``MemoryServices`` handed to every processor.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable, Mapping, Sequence

from core.ids import check_ids
from core.context_window import PromptBudget, fit_prompt
from core.message_list import Entry, MessageList, Provenance
from core.message_size import check_messages
from core.observational.context import LEGACY_DATES
from core.messages import Message, MessageFormatError
from core.options import MemoryOptions
from core.processors.base import BaseProcessor, Processor, ProcessorContext, RequestContext
from core.processors.input_filter import MemoryInputFilter
from core.processors.message_history import MessageHistory
from core.processors.services import MemoryServices
from core.processors.token_limiter import MemoryTokenLimiter
from core.processors.working_memory import WorkingMemory
from core.prompt import AssembledPrompt, build_prompt
from core.scopes import check_caller_owns, check_thread_as_started, check_thread_owner, from_outside, parse_scopes
from core.storage import Store
from core.storage.memory_store import InvalidArgumentError, Thread
from core.timeutil import to_ms


class TurnAssembler:
    """Builds and runs the processor chains of one memory.

    ``store``: the memory's database. ``options``: the memory's own options (which processors run when a call gives none).
    ``resolve_options``: the effective options of a call, given its per-call overrides.
    ``services``: builds the services of one turn (called once per turn, so a recall index or a
    tokenizer created since the last turn is seen). ``processors`` / ``output_processors``: user
    processors; one with a built-in's id replaces that built-in.
    """

    def __init__(
        self,
        *,
        name: str,
        store: Store,
        options: MemoryOptions,
        resolve_options: Callable[[Mapping[str, Any] | None], MemoryOptions],
        services: Callable[[], MemoryServices],
        processors: Sequence[Processor] = (),
        output_processors: Sequence[Processor] = (),
    ) -> None:
        self.name = name
        self.store = store
        self.options = options
        self._resolve_options = resolve_options
        self._services = services
        self.user_processors = list(processors)
        self.user_output_processors = list(output_processors)

    # -- processors ------------------------------------------------------------------------------
    def input_processors(self, opts: MemoryOptions | None = None) -> list[Processor]:
        opts = opts or self.options
        user = {p.id: p for p in self.user_processors}
        chain: list[Processor] = []
        om = opts.observational_memory.enabled
        if opts.history_enabled or om:
            chain.append(_take(user, MemoryInputFilter))
        state_signals = opts.working_memory.enabled and opts.working_memory.use_state_signals
        if opts.working_memory.enabled and not state_signals:
            chain.append(_take(user, WorkingMemory))
        if opts.history_enabled and not om:
            chain.append(_take(user, MessageHistory))
        # Recall and observational memory are imported when used: recall pulls in numpy.
        if opts.semantic_recall.enabled:
            from core.processors.semantic_recall import SemanticRecall

            chain.append(_take(user, SemanticRecall))
        if opts.history_enabled and not om and opts.message_history.max_tokens is not None:
            chain.append(_take(user, MemoryTokenLimiter))  # after recall: it counts what recall added
        if om:
            from core.processors.observational import ObservationalMemory

            chain.append(_take(user, ObservationalMemory))
        if state_signals:
            # Last: it repeats the snapshot only when the history loaded above no longer holds it.
            from core.processors.working_memory_state import WorkingMemoryState

            chain.append(_take(user, WorkingMemoryState))
        chain.extend(user.values())
        return chain

    def output_processors(self, opts: MemoryOptions | None = None) -> list[Processor]:
        opts = opts or self.options
        user = {p.id: p for p in [*self.user_processors, *self.user_output_processors]}
        chain: list[Processor] = []
        if opts.semantic_recall.enabled:
            from core.processors.semantic_recall import SemanticRecall

            chain.append(_take(user, SemanticRecall))
        if opts.observational_memory.enabled:
            from core.processors.observational import ObservationalMemory

            chain.append(_take(user, ObservationalMemory))
        else:
            chain.append(_take(user, MessageHistory))
        chain.extend(p for p in user.values() if p.id not in {c.id for c in chain} and p not in self.user_processors)
        return chain

    # -- assembly --------------------------------------------------------------------------------
    def request_context(
        self, *, thread_id: str | None, resource_id: str | None, options: Mapping[str, Any] | None = None,
        scopes: Sequence[str] | None = None, values: Mapping[str, Any] | None = None, resolve: bool = True,
        thread: Thread | None = None,
    ) -> RequestContext:
        """``resolve=False``: the memory's own options, without reading overrides (a caller that
        brings the options, such as a rebuild from a turn record). ``thread``: its row, when the
        caller has read it already (a replay stepping through a thread)."""
        resource_id, thread_id, others = parse_scopes(scopes, resource_id=resource_id, thread_id=thread_id)
        check_ids(((thread_id, "thread id"), (resource_id, "resource id")), InvalidArgumentError)
        opts = self._resolve_options(options) if resolve else self.options
        if thread is None or thread.id != thread_id:
            thread = self.store.memory.get_thread(thread_id) if thread_id else None
        if thread is not None:
            check_thread_owner(thread.id, thread.resource_id, resource_id)
        if thread is not None and resource_id is None:
            resource_id = thread.resource_id or None
        return RequestContext(
            thread_id=thread_id, resource_id=resource_id, options=opts, thread=thread, scopes=others,
            values=dict(values or {}), memory_name=self.name,
        )

    def services(self) -> MemoryServices:
        """The services of one turn (the memory's store, tokenizer, clock...), built now."""
        return self._services()

    def new_context(
        self, request: RequestContext, messages: MessageList | None = None, *, services: MemoryServices | None = None
    ) -> ProcessorContext:
        """A fresh context for one turn, with the memory's services unless others are given (an agent
        run passes the memory's services with its own tracer)."""
        return ProcessorContext(
            request=request,
            messages=messages or MessageList(thread_id=request.thread_id, resource_id=request.resource_id),
            services=services if services is not None else self._services(),
        )

    def assemble(
        self,
        *,
        thread_id: str | None = None,
        resource_id: str | None = None,
        input: Sequence[Message] | Message | str = (),
        instructions: str | Sequence[str] | None = None,
        context: Sequence[Message] = (),
        options: Mapping[str, Any] | None = None,
        scopes: Sequence[str] | None = None,
        request_context: Mapping[str, Any] | None = None,
        tools: Sequence[Mapping[str, Any]] = (),
        as_of: str | None = None,
        budget: PromptBudget | None = None,
        rebuild: str = "record",
    ) -> AssembledPrompt:
        """Build the exact prompt for a turn without writing anything.

        ``as_of``: the id of a stored input message; the prompt that turn had is rebuilt
        (``core.replay.rebuild``): exactly from its turn record when there is one, else as of its
        time. ``rebuild="now"`` ignores the record. ``options`` with ``as_of`` make a what-if.
        ``budget`` (without ``as_of``): fit the prompt into a model's context window, as an agent
        run with that model does; a rebuilt turn already holds what fitted then.
        """
        if as_of is not None:
            from core.replay.rebuild import rebuild as rebuild_turn

            return rebuild_turn(
                self, as_of=as_of, thread_id=thread_id, resource_id=resource_id, options=options,
                instructions=instructions, context=context, scopes=scopes, request_context=request_context,
                tools=tools, rebuild=rebuild,  # type: ignore[arg-type]
            )
        request = self.request_context(
            thread_id=thread_id, resource_id=resource_id, options=options, scopes=scopes, values=request_context
        )
        ctx = self.new_context(request)
        ctx.budget = budget
        self.prepare_input(ctx, input=input, instructions=instructions, context=context)
        return self.run_input(ctx, extra_tools=tools)

    def prepare_input(
        self, ctx: ProcessorContext, *, input: Sequence[Message] | Message | str = (),
        instructions: str | Sequence[str] | None = None, context: Sequence[Message] = (),
    ) -> list[Message]:
        """Put instructions, call-time context and the new input into the list (context sits just
        before the input, and is never saved)."""
        req = ctx.request
        for text in ([instructions] if isinstance(instructions, str) else list(instructions or [])):
            if text:
                ctx.messages.add_system(text, None, Provenance("instructions"))
        store = ctx.services.store
        now = to_ms(ctx.services.clock.now())
        start = now + timedelta(milliseconds=1)
        if req.thread_id and req.as_of is None:
            # A new turn sorts after everything already stored in its resource, even when turns follow
            # each other within a millisecond (or the clock is behind another writer's): a reader of the
            # resource (resource-scoped recall, observational or working memory, whoever runs it) dates
            # the other threads' messages and writes by these stamps.
            with store.db.read() as conn:
                newest = store.memory.newest_in_resource(req.thread_id, req.resource_id, conn)
            if newest is not None and newest >= start:
                start = newest + timedelta(milliseconds=1)
        ctx_msgs = [m if isinstance(m, Message) else Message.user(str(m)) for m in context]
        context_at = start - timedelta(microseconds=1)
        for m in ctx_msgs:
            if m.role == "system":
                ctx.messages.add_system(m.text, None, Provenance("context", (m.id,)))
                continue
            # A microsecond before the input's millisecond: after every stored message (stamped in whole
            # milliseconds before it), even when the clock reads the newest message's millisecond. The
            # context messages share that time and keep their given order.
            ctx.messages.add(m.copy(created_at=context_at, created_at_given=True), "context", Provenance("context"))
        if isinstance(input, (str, Message)):
            input = [input]  # type: ignore[list-item]
        inputs: list[Message] = []
        for i, m in enumerate(input):
            made_here = isinstance(m, str)
            msg = Message.user(m) if isinstance(m, str) else m
            if not isinstance(msg, Message):
                raise MessageFormatError(f"Input messages must be Message objects or strings, got {type(m).__name__}.")
            changes: dict[str, Any] = {
                "thread_id": msg.thread_id or req.thread_id,
                "resource_id": msg.resource_id or req.resource_id,
            }
            if msg.thread_id and req.thread_id and msg.thread_id != req.thread_id:
                raise InvalidArgumentError(
                    f"Input message {msg.id} names thread {msg.thread_id}, but this turn is for thread {req.thread_id}."
                )
            if msg.resource_id and req.resource_id and msg.resource_id != req.resource_id and req.as_of is None:
                # Refused before the model is called: saved, it would be another user's message (and
                # the save would fail after the reply, naming an owner the thread does not have). A
                # rebuilt turn shows its stored inputs as they are, whatever another program wrote.
                raise InvalidArgumentError(
                    f"Input message {msg.id} names resource {msg.resource_id}, but this turn is for resource "
                    f"{req.resource_id}. Leave the message's resource id unset, or run the turn for that resource."
                )
            if not msg.created_at_given:
                changes["created_at"] = start + timedelta(milliseconds=i)
                changes["created_at_given"] = True
            if made_here:  # nobody else holds this content: no need for the copy's deep copy of it
                changes["content"] = msg.content
            msg = msg.copy(**changes)
            inputs.append(msg)
        check_messages(inputs, req.options.max_message_bytes)  # before any model call or write
        if inputs:
            ctx.messages.add(inputs, "input", Provenance("input"))
            if req.as_of is None:
                # Everything stored when the input was stamped sorts before ``start``; what sorts at
                # or after it was saved since, by another turn of this thread running beside this one.
                req.input_at = (start, "")
        return inputs

    def run_input(self, ctx: ProcessorContext, *, extra_tools: Sequence[Mapping[str, Any]] = ()) -> AssembledPrompt:
        chain = self.input_processors(ctx.request.options)
        for processor in chain:
            self._run(processor, ctx, "input")
        if ctx.request.as_of is None:  # a rebuilt turn shows what its turn had, whatever it was
            _thread_is_still_the_turns(ctx)
            _leave_out_later_turns(ctx)
        return self.record(ctx, [p.id for p in chain], extra_tools)

    def record(
        self, ctx: ProcessorContext, processors: list[str], extra_tools: Sequence[Mapping[str, Any]] = ()
    ) -> AssembledPrompt:
        tools = [*ctx.tools, *[dict(tl) for tl in extra_tools]]
        frozen = ctx.request.frozen
        if frozen is not None and frozen.tools is not None:
            tools = [dict(tl) for tl in frozen.tools]  # a recorded turn offers exactly what it offered then
        budget = ctx.budget

        def build() -> AssembledPrompt:
            return build_prompt(
                ctx.messages, tokenizer=ctx.services.tokenizer, tools=tools, skipped=ctx.skipped, notes=ctx.notes,
                options=ctx.request.options.to_dict(), processors=processors,
                context_window=budget.context_window if budget else ctx.request.options.context_window,
            )

        # A turn recorded before observational memory was fitted as framed units is fitted as it was then
        # (its record has no ``od``: the same release changed both).
        whole = frozen is None or frozen.record.om_dates != LEGACY_DATES
        return build() if budget is None else fit_prompt(ctx.messages, build, budget, ctx.skipped, ctx.notes,
                                                         observations_whole=whole)

    def run_output(self, ctx: ProcessorContext) -> list[Message]:
        """Run output processors (indexing, saving) after the model answered."""
        ctx.phase = "output"
        for processor in self.output_processors(ctx.request.options):
            self._run(processor, ctx, "output")
        for hook in ctx.after_output:
            hook()
        if ctx.saved and ctx.request.options.generate_title.enabled:
            from core.titles import schedule_title

            schedule_title(ctx)  # in the background: the turn never waits for its title
        return list(ctx.saved)

    def _run(self, processor: Processor, ctx: ProcessorContext, phase: str) -> None:
        method = processor.process_input if phase == "input" else processor.process_output
        with ctx.tracer.start_span(
            f"processor: {processor.id} ({phase})", "processor_run",
            attributes={"processorId": processor.id, "phase": phase},
            thread_id=ctx.request.thread_id, resource_id=ctx.request.resource_id,
        ) as span:
            method(ctx)
            reason = ctx.skipped.get(processor.id)
            span.set_attributes({"skipped": reason} if reason else {"notes": ctx.notes.get(processor.id, {})})


def _thread_is_still_the_turns(ctx: ProcessorContext) -> None:
    """Refuse a turn whose thread changed hands while its processors read (``ThreadOwnershipError``, before any
    model call), as ``request_context`` refuses another's thread when it is there at the start.

    The owner is checked once, when the turn starts; the processors then read the thread's memory by its id
    (thread-scoped working memory, recall, observations). A thread that another resource stored in between (two
    users' first turns in one thread id at once; or the turn's own thread deleted, and its id taken by another
    user) was read as this turn's own: its working memory went into this turn's prompt, and a streamed reply
    relayed it before the save refused the turn. So was one another program stored without an owner, which no
    caller of the gateway may read (for a gateway turn, ``from_outside``, one stored so after the gateway's check
    and before the turn's own is refused here too). Read again here, after every processor
    (``check_thread_as_started``); a thread gone by now is left to the save, which refuses it
    (``ThreadAsItStarted``): none of it was read."""
    req = ctx.request
    if not req.thread_id or (req.thread is None and req.resource_id is None):
        return
    thread = ctx.store.memory.get_thread(req.thread_id)
    if thread is not None and not thread.resource_id and from_outside(req.values):
        # The gateway refused it before the turn began; one stored since (by another program) is nobody's too.
        check_caller_owns(thread.id, thread.resource_id, req.resource_id or "")
    if thread is not None:
        check_thread_as_started(thread.id, req.thread.resource_id if req.thread is not None else None,
                                thread.resource_id, req.resource_id)


#: The note that names memory messages left out because they sort after the turn's own input.
LATER_TURNS_ID = "turn-order"


def _leave_out_later_turns(ctx: ProcessorContext) -> None:
    """The turn's own input ends its prompt: memory that would follow it is left out, and the note
    ``turn-order`` names it.

    Memory dated at or after the turn's cut-off (``RequestContext.input_at``) was stored after the
    input was prepared, by another turn of the same thread running beside this one (a client's
    retry, two gateway workers). History stops there already; this covers every other reader
    (observational memory's unobserved messages, same-thread recall, user processors).

    An input that is a stored message sent again unchanged (a retry or a regenerate by message id)
    keeps its stored place; what followed it (its first answer, later turns) is left out, so the
    model answers the message again rather than its own earlier reply. A message sent again with
    new content keeps Mastra's order (its stored place, the later messages after it)."""
    later: dict[str, Entry] = {}
    cutoff = ctx.request.input_at
    if cutoff is not None:
        later.update((e.message.id, e) for e in ctx.messages.memory_from(cutoff))
    resent = ctx.messages.memory_after_resent()
    later.update((e.message.id, e) for e in resent)
    if not later:
        return
    ids = [e.message.id for e in sorted(later.values(), key=lambda e: (e.message.created_at, e.seq))]
    ctx.messages.remove(ids)
    reasons = []
    if len(resent) < len(later):
        reasons.append("stored after this turn's input by another turn of this thread")
    if resent:
        reasons.append("stored after this turn's input, which was sent again unchanged (a retry): the model "
                       "answers it again")
    ctx.note(LATER_TURNS_ID, leftOut=ids, reason="; ".join(reasons) + ", so not part of its prompt")


def _take(user: dict[str, Processor], builtin: type[BaseProcessor]) -> Processor:
    """The user's processor with the built-in's id (removed from ``user``), else the built-in."""
    mine = user.pop(builtin.id, None)
    return mine if mine is not None else builtin()
