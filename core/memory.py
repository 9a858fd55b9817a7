"""The Memory facade: threads, messages, working memory, recall, and the assembled prompt.

``Memory`` owns a ``TurnAssembler`` (``core/assembly.py``) that builds the processors in Mastra's
order (spec §2.2), runs them over a ``MessageList`` and hands back an ``AssembledPrompt``; the
turn methods here delegate to it. Processors get this memory's ``MemoryServices``, never the
facade. Assembling only reads; saving happens in output processors (or ``save_messages``) when an
agent actually runs a turn.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Literal, Mapping, Sequence

from core.assembly import TurnAssembler
from core.background import BackgroundWork
from core.errors import ConfigurationError
from core.message_list import MessageList
from core.ids import check_ids, clipped
from core.messages import Message, MessageFormatError, new_id
from core.options import MemoryOptions, OptionsError
from core.processors.base import Processor, ProcessorContext, RequestContext, SavedAwareWrite, ThreadAsItStarted
from core.processors.services import MemoryServices
from core.prompt import AssembledPrompt
from core.scopes import (
    DELEGATION_PREFIX,
    ScopeConflictError,
    ThreadOwnershipError,
    check_thread_as_started,
    check_thread_owner,
    delegation_resource,
    is_delegation_of,
    parse_scopes,
)
from core.storage import Store, locks, open_store
from core.storage.memory_store import (
    AlreadyExistsError,
    InvalidArgumentError,
    MessageQuery,
    NotFoundError,
    Thread,
    ThreadPage,
    ThreadSummary,
)
from core.storage.message_pages import MessageRows, UnreadableMessage
from core.thread_clone import CloneResult, clone_thread as _clone_thread
from core.timeutil import Clock, SystemClock, iso_now
from core.tokens import Tokenizer, default_tokenizer
from core.traces.tracer import NOOP_TRACER, SpanTracer
from core.working_memory import WorkingMemoryService, hide_working_memory
from core.working_memory_schema import WorkingMemoryError

if TYPE_CHECKING:  # pragma: no cover
    from core.context_window import PromptBudget
    from core.embedding import Embedder
    from core.llm.base import ChatModel
    from core.recall import RecallIndex, SearchHit
    from core.recall.index import Mode
    from core.replay.frozen import ReplaySource
    from core.replay.rebuild import Rebuild
    from core.replay.record import TurnRecord
    from core.replay.turns import Turn
    from core.replay.what_if import WhatIfRow


logger = logging.getLogger(__name__)


@dataclass
class RecallResult:
    """``messages``: the thread's newest messages (and, with a search string, the recalled ones),
    oldest first. ``total`` / ``page`` / ``per_page`` / ``has_more`` page through the thread.
    ``hits``: with ``vector_search_string``, each semantic hit with the message ids of its range;
    ``reason``: why the search found nothing, or was degraded."""

    messages: list[Message]
    total: int
    page: int
    per_page: int | None
    has_more: bool
    # Stored rows of the page that do not parse: skipped, never fatal (Invariant 15).
    unreadable: list[UnreadableMessage] = field(default_factory=list)
    hits: list[Any] = field(default_factory=list)  # core.search_recall.RecalledRange
    reason: str | None = None

    @property
    def oldest_key(self) -> tuple[datetime, str] | None:
        """``(createdAt, id)`` of the page's oldest stored row (readable or not): ``recall(before=...)`` of the
        page that follows it, older. None: an empty page."""
        keys = [(m.created_at, m.id) for m in self.messages] + [(u.created_at, u.id) for u in self.unreadable]
        return min(keys) if keys else None

    def __post_init__(self) -> None:
        if not self.unreadable:
            self.unreadable = list(getattr(self.messages, "unreadable", ()))

    def __iter__(self) -> Iterator[Message]:
        return iter(self.messages)

    def __len__(self) -> int:
        return len(self.messages)

    def __getitem__(self, index: int) -> Message:
        return self.messages[index]


@dataclass(frozen=True)
class DelegationPage:
    """``Memory.delegation_thread_page``: the page's threads, how many there are in all, whether more follow, and
    the last one's key (``(createdAt as stored, id)``: where the next page starts, ``after=``)."""

    rows: list[ThreadSummary]
    total: int
    has_more: bool
    last_key: tuple[str, str] | None


class Memory:
    """Agent memory over one store. Synchronous; safe to share between threads.

    ``tracer``: where previews and the processors of this memory's turns record spans. Without
    one, previews are untraced and agent turns go to the store's trace file (``turn_tracer``).

    ``observer_model`` / ``reflector_model``: chat models for observational memory (or the
    ``observational_memory`` options' ``observer_model`` / ``reflector_model``: a model or a
    ``provider/model`` name). Without either, an agent turn uses the agent's own model, as Mastra does.
    ``background``: this memory's background work (buffered observations and reflections, titles,
    embeddings); ``wait_idle()`` waits for it and ``Store.close()`` finishes or cancels it. Passed in, it is
    shared: memories built one per turn for the same agent (Studio Chat) then see each other's jobs, so a
    turn past ``block_after`` waits for the observer the turn before started.
    """

    def __init__(
        self,
        store: Store | None = None,
        options: MemoryOptions | Mapping[str, Any] | None = None,
        *,
        embedder: "Embedder | None" = None,
        processors: Sequence[Processor] = (),
        output_processors: Sequence[Processor] = (),
        name: str = "default",
        tokenizer: Tokenizer | None = None,
        clock: Clock | None = None,
        tracer: SpanTracer | None = None,
        observer_model: "ChatModel | None" = None,
        reflector_model: "ChatModel | None" = None,
        background: BackgroundWork | None = None,
    ) -> None:
        self.store = store if store is not None else open_store()
        if isinstance(options, Mapping):
            options = MemoryOptions(**options)
        self.options = options or MemoryOptions()
        self.name = name
        self.clock: Clock = clock or SystemClock()
        self._tokenizer = tokenizer
        self.tracer: SpanTracer = tracer or NOOP_TRACER
        self._own_tracer = tracer is not None
        self.working_memory_service = WorkingMemoryService(
            self.store, self.clock, max_bytes=self.options.max_working_memory_bytes,
            keep_versions=self.options.max_working_memory_versions)
        self.embedder = embedder
        om = self.options.observational_memory
        self.observer_model = observer_model if observer_model is not None else _model_setting(
            om, "observer_model", "observer model")
        self.reflector_model = reflector_model if reflector_model is not None else _model_setting(
            om, "reflector_model", "reflector model")
        self.title_model = _model_setting(self.options.generate_title, "model", "title model")
        self.background = background if background is not None else BackgroundWork(name)
        self.store.register_background(self.background)  # (a set: a shared one is registered once)
        self._recall_index: RecallIndex | None = None
        if self.options.semantic_recall.enabled:
            self._recall_index = self._build_recall_index()
        self.assembler = TurnAssembler(
            name=name, store=self.store, options=self.options, resolve_options=self.effective_options,
            services=self.services, processors=processors, output_processors=output_processors,
        )

    # -- collaborators ---------------------------------------------------------------------------
    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            self._tokenizer = default_tokenizer()
        return self._tokenizer

    @property
    def recall_index(self) -> "RecallIndex | None":
        return self._recall_index

    def services(self) -> MemoryServices:
        """What this memory's processors may use (built per turn: a recall index built since is seen)."""
        return MemoryServices(
            store=self.store, tokenizer=self.tokenizer, working_memory=self.working_memory_service,
            save_messages=self._save_turn, clock=self.clock, tracer=self.tracer, recall_index=self._recall_index,
            observer_model=self.observer_model, reflector_model=self.reflector_model, title_model=self.title_model,
            background=self.background,
        )

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until every queued piece of this memory's background work (buffered observations and
        reflections, generated titles, embeddings) is done. False when ``timeout`` seconds passed first."""
        return self.background.wait_idle(timeout)

    def turn_tracer(self) -> SpanTracer:
        """Where an agent turn's spans go: this memory's tracer if it was given one, else the trace
        file beside the database."""
        return self.tracer if self._own_tracer else self.store.tracer()

    def _save_turn(self, messages: Sequence[Message], *, writes: Sequence[Any] = ()) -> list[Message]:
        # The output processors index the turn themselves, after it is saved (semantic recall).
        return self.save_messages(messages, _index=False, _writes=writes)

    # -- turns (delegated to the TurnAssembler) --------------------------------------------------
    def input_processors(self, opts: MemoryOptions | None = None) -> list[Processor]:
        return self.assembler.input_processors(opts)

    def output_processors(self, opts: MemoryOptions | None = None) -> list[Processor]:
        return self.assembler.output_processors(opts)

    def request_context(
        self, *, thread_id: str | None, resource_id: str | None, options: Mapping[str, Any] | None = None,
        scopes: Sequence[str] | None = None, values: Mapping[str, Any] | None = None,
    ) -> RequestContext:
        """Who a turn is for, with its effective options; checks thread ownership first."""
        return self.assembler.request_context(
            thread_id=thread_id, resource_id=resource_id, options=options, scopes=scopes, values=values)

    def new_context(
        self, request: RequestContext, messages: MessageList | None = None, *, services: MemoryServices | None = None
    ) -> ProcessorContext:
        return self.assembler.new_context(request, messages, services=services)

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
        budget: "PromptBudget | None" = None,
        rebuild: "Rebuild" = "record",
    ) -> AssembledPrompt:
        """Build the exact prompt for a turn without writing anything (see ``TurnAssembler.assemble``).

        ``as_of=<input message id>`` rebuilds a stored turn; ``prompt.replay`` then says how
        (``ReplayInfo``: recorded or reconstructed, whether it matches the record, what is unknown)."""
        return self.assembler.assemble(
            thread_id=thread_id, resource_id=resource_id, input=input, instructions=instructions, context=context,
            options=options, scopes=scopes, request_context=request_context, tools=tools, as_of=as_of,
            budget=budget,
            rebuild=rebuild,
        )

    def prepare_input(
        self, ctx: ProcessorContext, *, input: Sequence[Message] | Message | str = (),
        instructions: str | Sequence[str] | None = None, context: Sequence[Message] = (),
    ) -> list[Message]:
        return self.assembler.prepare_input(ctx, input=input, instructions=instructions, context=context)

    def run_input(self, ctx: ProcessorContext, *, extra_tools: Sequence[Mapping[str, Any]] = ()) -> AssembledPrompt:
        return self.assembler.run_input(ctx, extra_tools=extra_tools)

    def run_output(self, ctx: ProcessorContext) -> list[Message]:
        return self.assembler.run_output(ctx)

    def record(
        self, ctx: ProcessorContext, processors: list[str], extra_tools: Sequence[Mapping[str, Any]] = ()
    ) -> AssembledPrompt:
        return self.assembler.record(ctx, processors, extra_tools)

    # -- replay (core/replay) --------------------------------------------------------------------
    def turns(self, thread_id: str, *, resource_id: str | None = None,
              source: "ReplaySource | None" = None) -> list["Turn"]:
        """Every user-input turn of the thread in time order, with its record when it has one.
        ``source``: the thread preloaded already (``ReplaySource.preload``), read from it instead."""
        from core.replay.turns import list_turns

        self._owned_thread(thread_id, resource_id)
        return list_turns(self.store, thread_id, source)

    def turn_record(self, input_message_id: str) -> "TurnRecord | None":
        """The record of the live turn whose input is this message (None: older data, or Mastra's)."""
        from core.replay import store as records

        return records.read(self.store, input_message_id)

    def turn_requests(self, input_message_id: str, *, resource_id: str | None = None) -> list[dict[str, Any]]:
        """The request body of every model call of the stored turn whose input is this message, in
        order (the first call, then one after each tool result), as the server received it: model,
        messages, tools, tool choice and every setting (``stream`` / ``stream_options`` left out).
        Rebuilt from the database alone; ``assemble(as_of=...).replay`` says whether each is exact
        (a turn without a usable record gives its reconstructed first call only)."""
        prompt = self.assemble(as_of=input_message_id, resource_id=resource_id)
        assert prompt.replay is not None
        return [dict(call.request) for call in prompt.replay.calls]

    def what_if(
        self, thread_id: str, *, options: Mapping[str, Any], resource_id: str | None = None,
        progress: Callable[[int, int], None] | None = None, cancel: Callable[[], bool] | None = None,
        against: Literal["options", "today"] = "options",
    ) -> Iterator["WhatIfRow"]:
        """Every turn's prompt with ``options`` merged over the options it had (``against="today"``: with
        the memory as it is now), against the real one (``core.replay.what_if``)."""
        from core.replay.what_if import AGAINST, what_if

        if against not in AGAINST:  # (said now, not at the first turn the generator would rebuild)
            raise InvalidArgumentError(f"against must be 'options' or 'today', got {against!r}.")
        return what_if(self, thread_id, options=options, resource_id=resource_id, progress=progress, cancel=cancel,
                       against=against)

    def fork_thread(
        self, thread_id: str, *, at: str, new_thread_id: str | None = None, title: str | None = None,
        working_memory: str = "as_of", resource_id: str | None = None,
    ) -> Thread:
        """A new thread with copies of exactly the messages before message ``at`` (see ``core.replay.fork``)."""
        from core.replay.fork import fork_thread

        return fork_thread(self, thread_id, at=at, new_thread_id=new_thread_id, title=title,
                           working_memory=working_memory, resource_id=resource_id)  # type: ignore[arg-type]

    def _owned_thread(self, thread_id: str, resource_id: str | None) -> Thread:
        return _owned(thread_id, self.get_thread(thread_id), resource_id)

    def _build_recall_index(self) -> "RecallIndex":
        if self.embedder is None:
            # A local model: the one this database's vectors come from (a database keeps its model until
            # `memory-studio reindex --model` replaces it), else the configured default. If it is not
            # installed, this raises now, at construction, saying how to install it.
            from core.recall.models import store_embedder

            self.embedder = store_embedder(self.store)
        from core.recall import RecallIndex

        index = RecallIndex.for_store(self.store, self.embedder)
        index.check()
        return index

    def _recall_index_for_search(self) -> "RecallIndex":
        if self._recall_index is None:
            self._recall_index = self._build_recall_index()
        return self._recall_index

    # -- threads ---------------------------------------------------------------------------------
    def create_thread(
        self, *, resource_id: str, thread_id: str | None = None, title: str = "",
        metadata: Mapping[str, Any] | None = None,
    ) -> Thread:
        wm_opts = self.options.working_memory
        initial = (metadata or {}).get("workingMemory") if isinstance(metadata, Mapping) else None
        if initial is not None and wm_opts.enabled and wm_opts.schema is not None:
            # Validate before anything is written: a bad initial value must not leave a half-made thread.
            self.working_memory_service._serialize(wm_opts, initial)
        tid = thread_id or new_id()
        try:
            thread = self.store.memory.create_thread(thread_id=tid, resource_id=resource_id, title=title,
                                                     metadata=metadata)
        except AlreadyExistsError:
            # A script run a second time on the file it wrote lands here: say how to go on.
            raise AlreadyExistsError(
                f"Thread with id {tid} already exists (stored earlier in {self.store.location.display}). To go on "
                f"with it, read it with memory.get_thread({tid!r}) instead of creating it; for a new thread, give "
                "another thread_id, or none (a new id is made)."
            ) from None
        if initial is not None and wm_opts.enabled and wm_opts.scope == "resource":
            self.working_memory_service.write(
                wm_opts, thread_id=thread.id, resource_id=resource_id, value=initial, author="api",
                note="initial working memory from thread metadata",
            )
        return thread

    def get_thread(self, thread_id: str) -> Thread | None:
        return self.store.memory.get_thread(thread_id)

    def list_threads(
        self, *, resource_id: str | None = None, page: int = 0, per_page: int | None = 100,
        metadata: Mapping[str, Any] | None = None, after: tuple[str, str] | None = None,
    ) -> ThreadPage:
        """Newest created first, then by id. ``after``: a page's ``last_key``, where the next page starts (a
        keyset: threads created meanwhile move no page, as ``page`` offsets would)."""
        return self.store.memory.list_threads(
            resource_id=resource_id, page=page, per_page=per_page, metadata_filter=metadata, after=after
        )

    def delegation_threads(self, resource_id: str) -> list[ThreadSummary]:
        """The threads of ``resource_id``'s delegations (``delegation:<resource>:<agent>``, and nested ones:
        ``core.scopes.is_delegation_of``), as ``ThreadSummary`` rows, newest activity first: what a caller that
        may use ``resource_id`` may read besides its own threads, listed so it need not know their ids. Old
        delegations (``<resource>-<agent>``, before the namespace) are not among them: such an id may be a user's."""
        check_ids(((resource_id, "resource id"),), InvalidArgumentError)
        return [s for s in self.store.memory.thread_summaries_starting(DELEGATION_PREFIX)
                if is_delegation_of(s.thread.resource_id or "", resource_id)]

    def delegation_thread_page(self, resource_id: str, *, page: int, per_page: int,
                               after: tuple[str, str] | None = None) -> DelegationPage:
        """A page of ``delegation_threads(resource_id)`` in a fixed order, newest created first, then by id
        (``MemoryStore.thread_keys``), and how many there are: the candidates' keys are read (rows, no messages
        counted), those of ``resource_id``'s delegations kept, and only the page's threads summarised. ``after``:
        the ``last_key`` of the page before (a keyset: threads created meanwhile move no page; ``page`` then
        counts from there)."""
        check_ids(((resource_id, "resource id"),), InvalidArgumentError)
        if page < 0 or per_page < 1:
            raise InvalidArgumentError("page must be 0 or more and per_page 1 or more.")
        store = self.store.memory
        prefixes = [delegation_resource(resource_id, ""), DELEGATION_PREFIX + DELEGATION_PREFIX.replace(":", "%3A")]

        def keys_after(start: tuple[str, str] | None) -> list[tuple[str, str, str]]:
            keys: list[tuple[str, str, str]] = []
            while True:
                batch = store.thread_keys(prefixes=prefixes, after=start, limit=5000)
                keys += [k for k in batch if is_delegation_of(k[2], resource_id)]
                if len(batch) < 5000:
                    return keys
                start = batch[-1][:2]

        every = keys_after(None)
        rest = every if after is None else keys_after(after)
        window = rest[page * per_page:(page + 1) * per_page]
        found = {s.thread.id: s for s in store.thread_summaries_of([k[1] for k in window])}
        return DelegationPage([found[k[1]] for k in window if k[1] in found], len(every),
                              (page + 1) * per_page < len(rest), window[-1][:2] if window else None)

    def update_thread(
        self, thread_id: str, *, title: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> Thread:
        """Metadata merges shallowly, an omitted title is kept. A ``workingMemory`` in ``metadata`` is the
        working memory from now on, as in ``create_thread`` (Mastra's ``updateThread``): in resource scope it
        is written to the resource, when it differs from the value the thread's metadata holds (a caller
        spreading the thread's old metadata back does not undo the model's updates since)."""
        wm_opts = self.options.working_memory
        given = metadata.get("workingMemory") if isinstance(metadata, Mapping) else None
        if given is None or not wm_opts.enabled:
            return self.store.memory.update_thread(thread_id, title=title, metadata=metadata)
        if wm_opts.schema is not None or wm_opts.scope == "resource":
            # Checked before anything is written: a refused value leaves the thread as it was.
            self.working_memory_service._serialize(wm_opts, given)
        before = self.store.memory.get_thread(thread_id)
        thread = self.store.memory.update_thread(thread_id, title=title, metadata=metadata)
        stale = before is not None and (before.metadata or {}).get("workingMemory") == given
        if wm_opts.scope == "resource" and not stale:
            self.working_memory_service.write(
                wm_opts, thread_id=thread.id, resource_id=thread.resource_id, value=given, author="api",
                note="working memory from thread metadata",
            )
        return thread

    def delete_thread(self, thread_id: str) -> None:
        self.store.memory.delete_thread(thread_id)
        if not self.store.read_only:
            from core.replay import store as records

            from core.edits.messages import delete_thread_versions

            from core.observational.records import lookup_key
            from core.storage import catalog
            from core.storage.schema import IDEMPOTENCY_TABLE

            with self.store.db.write() as conn:
                records.delete_for_threads(conn, [thread_id], self.store)
                delete_thread_versions(conn, thread_id)
                # The gateway's kept answers of its turns (core.gateway.idempotency) held their text.
                if catalog.has_table(conn, IDEMPOTENCY_TABLE):
                    conn.exec_driver_sql(f"DELETE FROM {IDEMPOTENCY_TABLE} WHERE thread_id = ?", (thread_id,))
                # Its own observation log (thread scope) holds what its messages said: a new thread given
                # the same id must not start with it. A resource-scoped log stays with the resource.
                if catalog.has_table(conn, "mastra_observational_memory"):
                    conn.exec_driver_sql('DELETE FROM mastra_observational_memory WHERE "lookupKey" = ?',
                                         (lookup_key("thread", thread_id=thread_id, resource_id=None),))
        if self._recall_index is not None:
            self._recall_index.delete_thread(thread_id)
            return
        # Recall may be off in this process but on in another that shares the file: vectors of a
        # deleted thread must not survive to be recalled later (Mastra #12225).
        if not self.store.read_only:
            from core.recall import delete_thread_everywhere

            delete_thread_everywhere(self.store, thread_id)

    def clone_thread(
        self, source_thread_id: str, *, new_thread_id: str | None = None, title: str | None = None,
        resource_id: str | None = None, message_limit: int | None = None, message_ids: Sequence[str] | None = None,
        since: datetime | None = None, until: datetime | None = None, metadata: Mapping[str, Any] | None = None,
    ) -> CloneResult:
        """A new thread with copies of the source's messages (all, or the newest ``message_limit``, or those
        picked by id or time), its working memory and observational memory carried as Mastra's
        ``cloneThread`` carries them (see ``core.thread_clone``)."""
        return _clone_thread(self, source_thread_id, new_thread_id=new_thread_id, title=title,
                            resource_id=resource_id, message_limit=message_limit, message_ids=message_ids,
                            since=since, until=until, metadata=metadata)

    # -- messages --------------------------------------------------------------------------------
    def save_messages(
        self, messages: Sequence[Message], *, _index: bool = True, _writes: Sequence[Any] = ()
    ) -> list[Message]:
        """Persist messages: system rows are dropped, working-memory tool traffic is hidden,
        a missing thread is created for the message's resource, and ownership is checked.

        ``_writes``: staged writes of the same turn (``commit(conn)``), committed in the same
        transaction, so the turn's messages and its working-memory update land together or not at all."""
        # A repeated id inside one call: the last content wins, at the first copy's place in time.
        unique: dict[str, Message] = {}
        for msg in messages:
            if isinstance(msg, Message) and msg.id in unique:
                first = unique[msg.id]
                unique[msg.id] = msg.copy(created_at=first.created_at, created_at_given=first.created_at_given)
            else:
                unique[getattr(msg, "id", str(id(msg)))] = msg
        messages = list(unique.values())
        prepared: list[Message] = []
        for msg in messages:
            if not isinstance(msg, Message):
                raise MessageFormatError(f"save_messages takes Message objects, got {type(msg).__name__}.")
            if msg.role == "system":
                continue
            if not msg.thread_id:
                raise MessageFormatError(f"Message {msg.id} has no thread_id; say which thread it belongs to.")
            content = hide_working_memory(msg.content)
            if content is None:
                continue
            prepared.append(msg if content is msg.content else msg.copy(content=content))
        if not prepared and not _writes:
            return []
        # Before the ownership check, so an unstorable id gets the error that names it.
        check_ids(((v, what) for m in prepared
                   for v, what in ((m.id, "message id"), (m.thread_id, "thread id"), (m.resource_id, "resource id"))),
                  InvalidArgumentError)
        # Recall's part that needs no lock (contexts, the model) runs first; its rows are then written
        # in the save's own transaction (under a savepoint: a failed index write never loses the save).
        staged = (self._recall_index.stage(prepared)
                  if _index and self._recall_index is not None and not self.options.read_only else None)
        # One write transaction: ownership check, thread creation, ordering and the upsert are atomic.
        started = {w.thread_id: w for w in _writes if isinstance(w, ThreadAsItStarted)}
        with self.store.db.write() as conn:
            self._ensure_threads(prepared, conn, started)
            # An unstamped message goes after the newest stored in its thread's resource (as a turn's input
            # does, ``prepare_input``), and after the one before it of its thread in this call.
            newest = {tid: self.store.memory.newest_in_resource(tid, None, conn)
                      for tid in {m.thread_id for m in prepared if not m.created_at_given and m.thread_id}}
            last_at: dict[str, datetime] = {}
            for i, msg in enumerate(prepared):
                tid = msg.thread_id or ""
                prev = last_at.get(tid) or newest.get(tid)
                if not msg.created_at_given and prev is not None and msg.created_at <= prev:
                    msg = prepared[i] = msg.copy(content=msg.content, created_at=prev + timedelta(milliseconds=1))
                last_at[tid] = msg.created_at
            saved = self.store.memory.save_messages(prepared, conn=conn, max_bytes=self.options.max_message_bytes)
            for write in _writes:
                if isinstance(write, SavedAwareWrite):
                    write.commit_saved(conn, saved)
                else:
                    write.commit(conn)
            if staged is not None:
                staged.commit(conn, saved)
            elif not any(isinstance(w, SavedAwareWrite) and w.indexes_recall for w in _writes):
                # No recall write for these messages: their keyword docs are keyed here (no model needed),
                # so searches find them now instead of after the next save with recall (their vectors wait).
                from core.recall.own_docs import key_saved

                key_saved(self.store, conn, saved)
        if staged is not None:
            staged.finish()
        return saved

    # -- edits (core/edits): versioned, owner-checked, followed by recall ------------------------
    def edit_message(
        self, message_id: str, *, resource_id: str, text: str | None = None, content: Any = None,
        author: str = "api", expected: Any = None,
    ) -> Message:
        """Change a stored message's text (``text=``) or whole content (``content=``), keeping a version
        (who, when, before, after) that ``undo_message_edit`` can revert. Recall follows: the message
        gets a new vector and keyword doc. Turns that ran before the edit still rebuild as they were.
        ``expected``: the content the caller read (``Message.content``); if the message holds something else
        by the time the edit writes (another program changed it), ``EditConflictError`` and nothing changes."""
        from core.edits import messages as edits

        message, changed = edits.edit(self.store, message_id, resource_id=resource_id, text=text, content=content,
                                      author=author, clock=self.clock, max_bytes=self.options.max_message_bytes,
                                      hide=hide_working_memory, expected=expected)
        if changed:
            self._recall_follow([message_id])
        return message

    def delete_messages(self, ids: Sequence[str], *, resource_id: str, author: str = "api",
                        expected: Mapping[str, Any] | None = None) -> int:
        """Delete stored messages of ``resource_id`` (all or none, each kept as a version), with their
        vectors, keyword docs and passages; the neighbours' passages are rebuilt. Returns how many went.
        ``expected``: the content the caller read of messages, by id; none is deleted if one of those
        holds something else by then (``EditConflictError``)."""
        from core.edits import messages as edits

        gone = edits.delete(self.store, ids, resource_id=resource_id, author=author, clock=self.clock,
                            expected=expected)
        if gone:
            self._recall_follow([m.id for m in gone])
        return len(gone)

    def undo_message_edit(self, message_id: str, *, resource_id: str, author: str = "api") -> Message | None:
        """Revert the newest change of a message (an edit or a delete; undoing an undo redoes it).
        Returns the message as it is now (None: the undo deleted it again)."""
        from core.edits import messages as edits

        _was, now = edits.undo(self.store, message_id, resource_id=resource_id, author=author, clock=self.clock)
        self._recall_follow([message_id])
        return now

    def message_versions(self, message_id: str, *, resource_id: str) -> list[Any]:
        """Every change of a stored message, oldest first (``core.edits.messages.MessageVersion``)."""
        from core.edits import messages as edits

        return edits.versions(self.store, message_id, resource_id=resource_id)

    def edit_observation(self, record_id: str, old: str, new: str, *, resource_id: str, author: str = "api") -> Any:
        """Replace one observation line of a generation's current log (versioned; the next turn sees it)."""
        from core.edits import observations

        return observations.edit(self.store, record_id, old, new, resource_id=resource_id, author=author,
                                 tokenizer=self.tokenizer, clock=self.clock)

    def delete_observation(self, record_id: str, line: str, *, resource_id: str, author: str = "api") -> Any:
        """Remove one observation line from a generation's current log (versioned)."""
        from core.edits import observations

        return observations.delete(self.store, record_id, line, resource_id=resource_id, author=author,
                                   tokenizer=self.tokenizer, clock=self.clock)

    def undo_observation_edit(self, record_id: str, *, resource_id: str, author: str = "api") -> Any:
        """Revert the newest change of a generation's log (undoing an undo redoes it)."""
        from core.edits import observations

        return observations.undo(self.store, record_id, resource_id=resource_id, author=author,
                                 tokenizer=self.tokenizer, clock=self.clock)

    def observation_versions(self, record_id: str, *, resource_id: str) -> list[Any]:
        from core.edits import observations

        return observations.versions(self.store, record_id, resource_id=resource_id)

    def forget_resource(self, resource_id: str, *, dry_run: bool = False) -> Any:
        """Delete everything about a resource, everywhere (``core.edits.forget``): threads, messages and
        their versions, recall rows, working memory, observations, turn records, its sub-agents' rows
        and the traces that name it. ``dry_run``: only count. Returns a ``ForgetReport``."""
        from core.edits.forget import forget_resource

        report = forget_resource(self.store, resource_id, dry_run=dry_run)
        if not dry_run and self._recall_index is not None:
            self._recall_index.close()  # cached vectors of the forgotten resource go too
        return report

    def _recall_follow(self, ids: Sequence[str]) -> None:
        """Hand changed or deleted message ids to the recall index (``RecallIndex.refresh_messages``:
        new vectors and keyword docs, rows of deleted messages removed, the next messages' passages
        rebuilt). Without an index in this memory the database's triggers have queued the change, and
        the next recall write applies it (searches already leave deleted messages out); vector rows
        holding the old text are dropped now, in every table (``drop_stale_vectors_everywhere``)."""
        if self.store.read_only:
            return
        if self._recall_index is None:
            # Rows holding the old text (Mastra's, another model's) must not wait for a recall write: the
            # Studio edits with the thread's agent's options, recall off for a Mastra file.
            from core.recall import drop_stale_vectors_everywhere

            drop_stale_vectors_everywhere(self.store, ids)
            return
        report = self._recall_index.refresh_messages(list(ids))
        if report.failed:
            logger.warning("recall did not follow %d edited message(s): %s", len(report.failed),
                           "; ".join(f"{k}: {v}" for k, v in list(report.failed.items())[:3]))

    def _ensure_threads(self, messages: Iterable[Message], conn: Any,
                        started: Mapping[str, ThreadAsItStarted] | None = None) -> None:
        # Every message is checked, not only the first of its thread: one foreign message refuses the
        # whole batch, and the caller's transaction then rolls back everything (threads included).
        claims: dict[str, list[str]] = {}
        for m in messages:
            names = claims.setdefault(m.thread_id or "", [])
            if m.resource_id is not None and m.resource_id not in names:  # ("" too: see below)
                names.append(m.resource_id)
        # Two processes saving to a new thread at once: the second waits, then sees the first's thread.
        self.store.db.lock(conn, *(locks.thread_key(tid) for tid in claims))
        for thread_id, resource_ids in claims.items():
            stored = self.store.memory.thread_owner(thread_id, conn)
            began = (started or {}).get(thread_id)
            if began is not None and stored is not None:
                check_thread_as_started(thread_id, began.owner, stored[0] or "", began.resource_id)
            if stored is None and began is not None and began.owner is not None:
                raise NotFoundError(
                    f"Thread {thread_id} was deleted while this turn ran (the thread was deleted, or its resource "
                    "forgotten), so nothing of the turn was saved: saving it would have brought the thread back. "
                    "Start a new conversation to go on.")
            new_owner = next((r for r in resource_ids if r), thread_id)
            owner = stored[0] if stored is not None else new_owner
            for resource_id in resource_ids:
                # An empty resource id is checked against a stored thread's owner (a message of an app whose
                # user id came out empty was written into another user's thread, and reached that user's
                # prompt); a new thread it claims nothing of, as before.
                if resource_id or stored is not None:
                    check_thread_owner(thread_id, owner, resource_id)
            if stored is None:
                self.store.memory.create_thread(thread_id=thread_id, resource_id=new_owner, title="", metadata={},
                                                conn=conn)

    def thread_message_ids(self, *, thread_id: str, resource_id: str | None = None) -> frozenset[str]:
        """The ids of every message of a thread, checked like ``recall`` (an unknown thread raises
        ``NotFoundError``, another resource's is refused), without reading the messages themselves."""
        check_ids(((thread_id, "thread id"), (resource_id, "resource id")), InvalidArgumentError)
        self._owned_thread(thread_id, resource_id)
        return frozenset(self.store.memory.thread_message_ids(thread_id))

    def recall(
        self, *, thread_id: str, resource_id: str | None = None, last_messages: int | bool | None = None,
        page: int = 0, per_page: int | bool | None = None, vector_search_string: str | None = None,
        threshold: float | None = None, top_k: int | None = None, before: tuple[datetime, str] | None = None,
    ) -> RecallResult:
        """Stored messages of a thread: by default the newest ``last_messages``, oldest first.

        ``before``: a keyset page, the newest ``per_page`` strictly older than ``(createdAt, id)`` (a page's oldest
        message, ``RecallResult.oldest_key``), so messages stored between two page reads move no page (``page``
        offsets count from the newest, which a new message shifts); ``page`` must then be 0.

        ``vector_search_string``: also what semantic recall finds for it (``top_k`` hits over
        ``threshold``, defaults from ``semantic_recall``), each hit with its ``message_range``
        neighbours, merged into ``messages``; ``hits`` names each hit and its range (Mastra's
        ``recall({vectorSearchString})``). A thread not stored yet is refused ("No thread found"), unless a
        resource id is given and semantic recall is on with resource scope: then it has no messages, and a
        search string finds the resource's (a new conversation searching its user's memory, as in Mastra)."""
        if vector_search_string is not None:
            if not isinstance(vector_search_string, str) or not vector_search_string.strip():
                raise InvalidArgumentError("vector_search_string must be a non-empty string (what to search for).")
            if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1):
                raise InvalidArgumentError(f"top_k must be a positive integer, got {top_k!r}.")
            if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))):
                raise InvalidArgumentError(f"threshold must be a number, got {threshold!r}.")
            page_result = self.recall(thread_id=thread_id, resource_id=resource_id, last_messages=last_messages,
                                      page=page, per_page=per_page, before=before)
            from core.search_recall import merged, search_with_ranges

            owner = resource_id or (self.get_thread(thread_id).resource_id or None)  # type: ignore[union-attr]
            found, ranges, reason = search_with_ranges(
                self.store, self._recall_index_for_search(), vector_search_string, thread_id=thread_id,
                resource_id=owner, options=self.effective_options().semantic_recall, top_k=top_k, threshold=threshold)
            return replace(page_result, messages=merged(page_result.messages, found), hits=ranges, reason=reason)
        if threshold is not None or top_k is not None:
            raise InvalidArgumentError("threshold and top_k apply to a search: give vector_search_string too.")
        check_ids(((thread_id, "thread id"), (resource_id, "resource id")), InvalidArgumentError)
        thread = self.get_thread(thread_id)
        if resource_id and thread is None:
            recall = self.effective_options().semantic_recall
            if recall.enabled and recall.scope == "resource":
                # A conversation not stored yet, searching its user's memory (Mastra's resource-scoped recall):
                # no messages of its own, nothing created.
                return RecallResult([], 0, page, per_page if type(per_page) is int else None, False)
        _owned(thread_id, thread, resource_id)  # (the thread read once)
        total = self.store.memory.count_messages(thread_id)
        if per_page is False:
            msgs = self.store.memory.list_messages(MessageQuery(thread_id=thread_id))
            return RecallResult(msgs, total, 0, None, False)
        limit = per_page if isinstance(per_page, int) and not isinstance(per_page, bool) else None
        if limit is None:
            lm = self.options.last_messages if last_messages is None else last_messages
            if lm is None:  # a token budget and no count cap: every stored message
                msgs = self.store.memory.list_messages(MessageQuery(thread_id=thread_id))
                return RecallResult(msgs, total, 0, None, False)
            limit = 0 if lm is False else int(lm)
        if limit <= 0:
            return RecallResult([], total, page, 0, total > 0)
        if before is not None:
            if page:
                raise InvalidArgumentError("Give a keyset start (before) or a page, not both.")
            got = self.store.memory.list_messages(MessageQuery(thread_id=thread_id, last=limit + 1, before=before))
            more = len(got) + len(got.unreadable) > limit
            if more:  # one row more than the page, to know whether more follow: the oldest, left out
                drop = min([(m.created_at, m.id) for m in got] + [(u.created_at, u.id) for u in got.unreadable])
                got = MessageRows([m for m in got if (m.created_at, m.id) != drop],
                                  [u for u in got.unreadable if (u.created_at, u.id) != drop])
            return RecallResult(got, total, 0, limit, more)
        if page:
            # Page ``page`` counted from the newest: the oldest page holds what is left (it overlapped the one
            # before it, whole ``limit`` from the start), a page past the start none (Mastra's offset from the end).
            start = total - (page + 1) * limit
            msgs = self.store.memory.list_messages_page(thread_id, max(start, 0), max(limit + min(start, 0), 0))
        else:
            msgs = self.store.memory.list_messages(MessageQuery(thread_id=thread_id, last=limit))
        return RecallResult(msgs, total, page, limit, total > (page + 1) * limit)

    def search(
        self, query: str, *, resource_id: str | None, thread_id: str | None = None, top_k: int = 20,
        mode: "Mode" = "hybrid", threshold: float | None = None,
    ) -> list["SearchHit"]:
        if not isinstance(query, str) or not query.strip():
            raise InvalidArgumentError("search needs a non-empty query string.")
        if resource_id is None and thread_id is None:
            raise InvalidArgumentError("search needs a resource_id or a thread_id, so one user's memory never leaks to another.")
        check_ids(((resource_id, "resource id"), (thread_id, "thread id")), InvalidArgumentError)
        index = self._recall_index_for_search()
        return list(index.search(query, resource_id=resource_id, thread_id=thread_id, top_k=top_k, mode=mode,
                                 threshold=threshold).hits)

    # -- working memory --------------------------------------------------------------------------
    def _wm_options(self, overrides: Mapping[str, Any] | None = None) -> Any:
        opts = self.effective_options(overrides).working_memory
        if not opts.enabled:
            raise WorkingMemoryError("Working memory is not enabled for this memory instance.")
        return opts

    def get_working_memory(self, *, thread_id: str | None = None, resource_id: str | None = None) -> Any:
        """Markdown mode: the stored text (or None). Schema mode: the stored object (or None)."""
        opts = self._wm_options()
        if thread_id and resource_id:  # reading is held to the same ownership rule as writing
            check_ids(((thread_id, "thread id"), (resource_id, "resource id")), InvalidArgumentError)
            thread = self.get_thread(thread_id)
            check_thread_owner(thread_id, thread.resource_id if thread is not None else None, resource_id)
        value = self.working_memory_service.get(opts, thread_id=thread_id, resource_id=resource_id)
        if value.text is None:
            return None
        return value.data if value.format == "json" else value.text

    def update_working_memory(
        self, *, thread_id: str | None = None, resource_id: str | None = None, working_memory: Any,
        author: str = "api", expected: str | None | object = ..., _writes: Sequence[Any] = (),
    ) -> Any:
        """Replace the working memory. ``expected``: the stored text the caller read (None: there was none);
        when given, the write happens only if it is still that (``ConcurrentUpdateError`` otherwise).
        ``_writes``: staged writes committed in the write's transaction (``WorkingMemoryService.write``)."""
        opts = self._wm_options()
        self._check_wm_thread(opts, thread_id, resource_id)
        value = self.working_memory_service.write(
            opts, thread_id=thread_id, resource_id=resource_id, value=working_memory, author=author,
            expected=expected, writes=_writes,
        )
        return value.data

    def merge_working_memory(
        self, *, thread_id: str | None = None, resource_id: str | None = None, patch: Any, author: str = "api"
    ) -> dict[str, Any]:
        opts = self._wm_options()
        if opts.schema is None:
            raise WorkingMemoryError(
                "merge_working_memory needs schema-based working memory; this memory uses a Markdown template "
                "(use update_working_memory instead)."
            )
        self._check_wm_thread(opts, thread_id, resource_id)
        value = self.working_memory_service.merge(
            opts, thread_id=thread_id, resource_id=resource_id, patch=patch, author=author
        )
        return value.data  # type: ignore[no-any-return]

    def _check_wm_thread(self, opts: Any, thread_id: str | None, resource_id: str | None) -> None:
        if opts.scope == "thread":
            if not thread_id:
                raise WorkingMemoryError("Thread-scoped working memory needs a thread id.")
            if self.get_thread(thread_id) is None:
                raise NotFoundError(f"Thread {clipped(thread_id)} not found")
        if thread_id and resource_id:
            thread = self.get_thread(thread_id)
            if thread is not None:
                check_thread_owner(thread_id, thread.resource_id, resource_id)

    def working_memory_tool(self, overrides: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """The update tool's definition, or None when the model may not update working memory."""
        from core.working_memory import tool_definition

        opts = self.effective_options(overrides)
        wm = opts.working_memory
        if not wm.enabled or opts.read_only or not wm.agent_managed:
            return None
        return tool_definition(wm)

    def apply_working_memory_tool(
        self, *, thread_id: str | None, resource_id: str | None, args: Any,
        overrides: Mapping[str, Any] | None = None, stage: Any = None,
    ) -> Any:
        """Run an ``updateWorkingMemory`` call from the model; returns an ``UpdateResult``.

        With ``stage`` (a ``StagedWorkingMemory``) the update is validated now but only recorded;
        it is written when the stage is committed (with the turn's messages)."""
        opts = self.effective_options(overrides)
        return self.working_memory_service.apply_tool_call(
            opts.working_memory, thread_id=thread_id, resource_id=resource_id, args=args, stage=stage
        )

    # -- configuration ---------------------------------------------------------------------------
    def effective_options(self, overrides: Mapping[str, Any] | None = None) -> MemoryOptions:
        """Instance options, then the Studio's template/schema override (newest), then per-call overrides."""
        from core.agent_configs import effective_options

        # An override only ever changes working memory, and only when it is on: otherwise it is not read.
        override = self.config_override() if self.options.working_memory.enabled else None
        return effective_options(self.options, override, overrides)

    def config_override(self) -> dict[str, Any] | None:
        from core.agent_configs import latest_override

        version = latest_override(self.store, self.name)
        if version is None:
            return None
        return {"template": version.template, "schema": version.schema}

    def describe(self) -> dict[str, Any]:
        """The resolved configuration (what the Studio shows as "what this agent runs with")."""
        opts = self.effective_options()
        return {
            "name": self.name,
            "database": self.store.location.display,
            "options": opts.to_dict(),
            "embedder": getattr(self.embedder, "model_id", None),
            "tokenizer": self.tokenizer.name,
            "inputProcessors": [p.id for p in self.input_processors(opts)],
            "outputProcessors": [p.id for p in self.output_processors(opts)],
        }

    # -- registry --------------------------------------------------------------------------------
    def register(self, agent_name: str | None = None, *, instructions: str | None = None,
                 model_settings: Mapping[str, Any] | None = None, tools: Sequence[str] | None = None) -> None:
        """Record this memory's resolved configuration so the Studio can show what agents run with
        (and, given the agent's instructions, chat as that agent in the playground). ``model_settings``
        (``ModelSettings.to_dict()``) and ``tools`` (the names of the agent's own tools), when given, are
        recorded beside it (``modelSettings``, ``tools``: the playground sends those settings and names
        those tools when no recorded turn says more)."""
        from core.agent_configs import register_agent

        config = self.describe()
        if instructions:
            config["instructions"] = instructions
        if model_settings is not None:
            config["modelSettings"] = dict(model_settings)
        if tools is not None:
            config["tools"] = [str(name) for name in tools]
        register_agent(self.store, agent_name or self.name, config)


def _model_setting(options: Any, name: str, what: str) -> "ChatModel | None":
    """The chat model an options object names: the model object given there, else its
    ``provider/model`` name resolved through the provider table (``ConfigurationError`` now, not at
    the first turn), else None."""
    from core.options import _model_object

    given = _model_object(options, name)
    if given is not None:
        return given  # type: ignore[no-any-return]
    label = getattr(options, name, None)
    if not label or not getattr(options, "enabled", True):
        return None
    from core.llm.providers import is_label_only, is_model_name, resolve_model

    if not is_model_name(label) or is_label_only(label):
        # A bare label ("gpt-4o-mini") only names the model for the Studio; so does the registered name of
        # a model object ("openai-compatible/<model>", "scripted/<name>"), which no provider can rebuild:
        # a preview from registered options calls no model, and a live turn falls back to the agent's.
        return None
    return resolve_model(label, what=what)  # type: ignore[no-any-return]


MemoryFactory = Callable[[Mapping[str, Any]], Memory]


def resolve_memory(memory: Memory | MemoryFactory | None, request_context: Mapping[str, Any]) -> Memory | None:
    """A memory may be given as a factory that picks one per request (e.g. by user tier)."""
    if memory is None or isinstance(memory, Memory):
        return memory
    if callable(memory):
        chosen = memory(request_context)
        if not isinstance(chosen, Memory):
            raise ConfigurationError(f"The memory factory returned {type(chosen).__name__}, not a Memory.")
        return chosen
    raise ConfigurationError(f"memory must be a Memory or a factory function, got {type(memory).__name__}.")



def _owned(thread_id: str, thread: Thread | None, resource_id: str | None) -> Thread:
    """``thread`` (read for ``thread_id``) when it exists and ``resource_id`` may use it; else the errors
    every caller gets (``NotFoundError``, ``ThreadOwnershipError``)."""
    if thread is None:
        raise NotFoundError(f"No thread found with id {clipped(thread_id)}")
    check_thread_owner(thread_id, thread.resource_id, resource_id)
    return thread

__all__ = [
    "ConfigurationError",
    "Memory",
    "MemoryFactory",
    "OptionsError",
    "RecallResult",
    "ScopeConflictError",
    "ThreadOwnershipError",
    "parse_scopes",
    "resolve_memory",
]
