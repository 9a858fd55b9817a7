"""Generated thread titles (Mastra's ``generateTitle``): an untitled thread is named after its first
exchange, in the memory's background work, never on the turn's critical path. Its call gives way to
a turn's call to the same server as the observer's does (``generate_title.yield_to_turns``,
``core.llm.yielding``): a title is a courtesy, never a reason for a turn to queue on a one-slot server.

A title is written only while the thread has none (``''``, Mastra's "untitled"), so a title a user
or the application set is never replaced, and a thread is named once. The model is the one
``generate_title`` names, else the agent's own (``MemoryServices.title_model``). With observational
memory on, the observer's ``<thread-title>`` may name the thread too (it is asked for one when titles
are on); a title written that way replaces only a generated one.
"""

from __future__ import annotations

import logging
import re
import weakref
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from core.background import CancelToken
from core.llm.yielding import CallYielded, background_call
from core.storage import locks
from core.storage import schema as t
from core.storage.memory_store import MessageQuery, dump_json, json_col, load_json
from core.timeutil import iso_now, to_iso

if TYPE_CHECKING:  # pragma: no cover
    from core.llm.base import ChatModel
    from core.llm.yielding import YieldChoice
    from core.processors.base import ProcessorContext
    from core.storage import Store
    from core.traces.tracer import SpanTracer

log = logging.getLogger(__name__)

#: Where a generated title is noted in the thread's metadata (so a later one may replace it).
TITLE_KEY = "titleGenerated"
MAX_TITLE_CHARS = 80
# Messages of the thread's start the title model reads, and how much of each.
TITLE_MESSAGES = 4
TITLE_MESSAGE_CHARS = 1500
# The title call's settings: a little variety, and a reply no longer than a title.
TITLE_TEMPERATURE = 0.3
TITLE_MAX_TOKENS = 32

# A title model that fails is asked again at the next turns, but not forever: per memory, per thread.
MAX_ATTEMPTS = 2
_attempts: "weakref.WeakKeyDictionary[Any, dict[str, int]]" = weakref.WeakKeyDictionary()

DEFAULT_INSTRUCTIONS = (
    "Write a title for the conversation below: at most six words, in the language the user writes in, "
    "naming its topic. Reply with the title alone, without quotes or punctuation at the end."
)


def clean_title(text: str | None) -> str:
    """The first non-empty line of a model's reply, without quotes, a "Title:" label or markdown."""
    for line in (text or "").splitlines():
        line = re.sub(r"^\s*(#+\s*|\*\*|title\s*:\s*)", "", line.strip(), flags=re.I).strip()
        line = line.strip("*_`\"'“”‘’ ").rstrip(".")
        if line:
            return line[:MAX_TITLE_CHARS].rstrip()
    return ""


def title_messages(store: "Store", thread_id: str) -> list[dict[str, str]]:
    """The title model's request: instructions aside, the start of the thread as one user message."""
    msgs = store.memory.list_messages(MessageQuery(thread_id=thread_id, exclude_system=True))[:TITLE_MESSAGES]
    lines = []
    for m in msgs:
        text = m.text.strip()
        if text:
            role = "User" if m.role == "user" else "Assistant"
            lines.append(f"{role}: {text[:TITLE_MESSAGE_CHARS]}")
    return [{"role": "user", "content": "\n\n".join(lines)}] if lines else []


def set_title(store: "Store", thread_id: str, title: str, *, source: str, model_id: str | None,
              replace_generated: bool = False) -> bool:
    """Write ``title`` if the thread has none (or, with ``replace_generated``, only a generated one).
    False when the thread is gone or was named meanwhile."""
    title = clean_title(title)
    if not title:
        return False
    now = iso_now()
    with store.db.write() as conn:
        store.db.lock(conn, locks.thread_key(thread_id))
        row = conn.execute(sa.select(t.threads.c.title, json_col(t.threads.c.metadata).label("m"))
                           .where(t.threads.c.id == thread_id)).first()
        if row is None:
            return False
        meta = load_json(row.m)
        meta = dict(meta) if isinstance(meta, dict) else {}
        generated = isinstance(meta.get(TITLE_KEY), dict)
        if (row.title or "").strip() and not (replace_generated and generated):
            return False
        meta[TITLE_KEY] = {"source": source, "model": model_id, "at": now}
        conn.execute(t.threads.update().where(t.threads.c.id == thread_id)
                     .values(title=title, metadata=dump_json(meta), updatedAt=now))
    return True


def title_from_observer(store: "Store", thread_id: str, title: str, *, model_id: str | None) -> bool:
    """The observer's ``<thread-title>``: names an untitled thread, or renames a generated title."""
    try:
        return set_title(store, thread_id, title, source="observer", model_id=model_id, replace_generated=True)
    except Exception:  # noqa: BLE001 - a title is a courtesy; the observation already stands
        log.warning("could not write the observer's title for thread %s", thread_id, exc_info=True)
        return False


def generate_title(store: "Store", thread_id: str, model: "ChatModel", *, instructions: str | None,
                   tracer: "SpanTracer", resource_id: str | None, token: CancelToken | None = None,
                   parent: Any = None, yield_to_turns: "YieldChoice" = False) -> str | None:
    """Ask ``model`` for a title and write it if the thread still has none; returns the title.
    ``yield_to_turns`` (the background job's): the call gives way to a turn's call to the same server
    (``core.llm.yielding``) and is made again, from the thread as it is then, once that call has finished."""
    while True:
        try:
            return _generate_title_once(store, thread_id, model, instructions=instructions, tracer=tracer,
                                        resource_id=resource_id, token=token, parent=parent,
                                        yield_to_turns=yield_to_turns)
        except CallYielded:
            if token is not None and token.cancelled:
                return None


def _generate_title_once(store: "Store", thread_id: str, model: "ChatModel", *, instructions: str | None,
                         tracer: "SpanTracer", resource_id: str | None, token: CancelToken | None,
                         parent: Any, yield_to_turns: "YieldChoice") -> str | None:
    thread = store.memory.get_thread(thread_id)
    if thread is None or (thread.title or "").strip():
        return None
    request = title_messages(store, thread_id)
    if not request:
        return None
    messages = [{"role": "system", "content": instructions or DEFAULT_INSTRUCTIONS}, *request]
    # ``parent``: the span of the turn that asked for the title (its trace shows the title job).
    with tracer.start_span("memory: generate title", "memory_operation", parent, thread_id=thread_id,
                           resource_id=resource_id,
                           attributes={"operationType": "generate-title", "model": model.model_id,
                                       "background": True}) as span:
        try:
            result = _title_call(tracer, model, messages, thread_id, resource_id, token, yield_to_turns)
        except CallYielded as exc:  # not a failure: ``generate_title`` asks again after the turn's call
            span.end(output=None, attributes={"yielded": {"to": exc.to}})
            raise
        title = clean_title(result.text)
        span.set_output({"title": title})
        if not title:
            span.record_error("the title model's reply held no title")
            log.warning("the title model %s returned no usable title for thread %s", model.model_id, thread_id)
            return None
        if token is not None and token.cancelled:
            return None
        written = set_title(store, thread_id, title, source="title-model", model_id=model.model_id)
        span.set_attributes({"written": written})
        return title if written else None


def _title_call(tracer: "SpanTracer", model: "ChatModel", messages: list[dict[str, str]], thread_id: str,
                resource_id: str | None, token: CancelToken | None, yield_to_turns: "YieldChoice") -> Any:
    """The title model's call, under a model span of its own as an observer's (the Traces pane shows its
    messages, settings, request hash, usage and reply: the one model call of ours it did not show). It
    gives way to turns as a background observer's call does (``yielded`` / ``notYielded`` on its span)."""
    from core.model_call import sent_settings  # (here: the call machinery imports much of the engine)

    with tracer.start_span(f"title: {model.model_id}", "model_generation", input={"messages": messages},
                           thread_id=thread_id, resource_id=resource_id,
                           attributes={"model": model.model_id, "role": "title",
                                       **sent_settings(model, messages, TITLE_TEMPERATURE, TITLE_MAX_TOKENS)}) as span:
        said: dict[str, Any] = {}
        try:
            try:
                with background_call(model, "title", yield_to_turns, said=said,
                                     stop=lambda: token is not None and token.cancelled):
                    result = model.generate(messages, temperature=TITLE_TEMPERATURE, max_tokens=TITLE_MAX_TOKENS)
            finally:
                span.set_attributes(said)
        except CallYielded as exc:
            span.end(output=None, attributes={"yielded": exc.span_attribute()})
            raise
        span.set_attributes({"usage": result.usage.to_dict() if result.usage else None,
                             "finishReason": result.finish_reason})
        span.set_output(result.text)
        return result


def schedule_title(ctx: "ProcessorContext") -> bool:
    """After a live turn is saved: name the thread in the background if titles are on, the turn
    saved a reply and the thread has no title yet. True when a title job was queued."""
    req = ctx.request
    opts = req.options.generate_title
    model = ctx.services.title_model
    if not (opts.enabled and ctx.live and not req.read_only and req.thread_id and model is not None):
        return False
    if not any(m.role == "assistant" for m in ctx.saved):
        return False
    thread = ctx.store.memory.get_thread(req.thread_id)
    if thread is None or (thread.title or "").strip():
        return False
    try:
        tries = _attempts.setdefault(ctx.services.background, {})
    except TypeError:  # a background object that cannot be weakly referenced: no attempt limit
        tries = {}
    if tries.get(req.thread_id, 0) >= MAX_ATTEMPTS:
        return False
    tries[req.thread_id] = tries.get(req.thread_id, 0) + 1
    store, tracer, thread_id, resource_id = ctx.store, ctx.services.tracer, req.thread_id, req.resource_id
    instructions, choice = opts.instructions, opts.yield_to_turns
    parent = tracer.current_span()

    def job(token: CancelToken) -> Any:
        return generate_title(store, thread_id, model, instructions=instructions, tracer=tracer,
                              resource_id=resource_id, token=token, parent=parent, yield_to_turns=choice)

    ctx.services.background.submit("title", f"title:{thread_id}", job, description=f"title for thread {thread_id}")
    ctx.note("generate-title", queued=True, model=model.model_id, at=to_iso(ctx.services.clock.now()))
    return True


__all__ = ["DEFAULT_INSTRUCTIONS", "TITLE_KEY", "clean_title", "generate_title", "schedule_title", "set_title",
           "title_from_observer", "title_messages"]
