"""Building a turn's record from what the live turn actually used, and writing it.

Everything comes from the turn's first ``AssembledPrompt`` (fragments carry their source processor
and stored ids) and the notes the processors left on the context (recall hits with their windows,
the working-memory version in force, the observational-memory generation, cursor and hints). Each
model call then adds what went with its messages (``TurnCapture.add_call``: the request body the
server received, ``AssembledPrompt.request``) and what the server said about the reply (usage,
finish reason). Nothing is queried again, so the record cannot disagree with what was sent.

The record is a staged write: the agent hands the capture to the turn's save, which commits it in
the transaction that stores the turn's messages (``commit(conn)``), so a turn has its record exactly
when it is stored.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from core.context_window import CONTEXT_WINDOW_ID
from core.llm.http import safe_url
from core.llm.wire import wire_bytes
from core.messages import Message
from core.processors.base import SavedAwareWrite
from core.replay import store as records
from core.replay import tools as tool_defs
from core.replay.record import (CallRecord, RecallHitRecord, TurnRecord, bytes_hash, messages_hash, options_json_of,
                                 request_hash)
from core.storage import driver_sql
from core.timeutil import parse_iso, to_ms
from core.working_memory import hide_working_memory

if TYPE_CHECKING:  # pragma: no cover
    from core.processors.base import ProcessorContext
    from core.prompt import AssembledPrompt, Fragment
    from core.storage import Store

log = logging.getLogger(__name__)

HISTORY_SOURCES = ("message-history", "observational-memory")


def model_label(model: Any) -> str | None:
    """``provider/model``, and ``@<base URL>`` for a model reached over HTTP (never a key)."""
    if model is None:
        return None
    label = model_id_of(model)
    base = endpoint_of(model)
    return f"{label}@{base}" if base else label


def model_id_of(model: Any) -> str:
    return str(getattr(model, "model_id", "") or type(model).__name__)


def endpoint_of(model: Any) -> str | None:
    """The base URL a model is reached at, without credentials or query (where keys may hide)."""
    base = getattr(model, "base_url", None)
    return safe_url(str(base)) if base else None


def section_of(fragment: "Fragment") -> str:
    """The token section a fragment counts in (``TurnRecord.tokens``)."""
    source, kind = fragment.source, fragment.kind
    if kind == "tools":
        return "tools"
    if source == "instructions" or kind == "system":
        return "system"
    if source == "working-memory":
        return "working_memory"
    if source == "observational-memory":
        return "observations" if fragment.role == "system" or fragment.detail.get("part") == "continuation" \
            else "history"
    if source == "message-history":
        return "history"
    if source == "semantic-recall":
        return "recall"
    if kind in ("input", "context"):
        return "input"
    return "system" if fragment.role == "system" else "input"


def token_sections(prompt: "AssembledPrompt") -> dict[str, int]:
    out = {k: 0 for k in ("system", "working_memory", "observations", "history", "recall", "input", "tools")}
    for f in prompt.fragments:
        out[section_of(f)] += f.tokens
    out["total"] = prompt.total_tokens
    return out


def history_ids(prompt: "AssembledPrompt") -> tuple[str, ...]:
    """Stored messages of the history window (or the unobserved raw messages), in prompt order."""
    out: list[str] = []
    for f in prompt.fragments:
        if f.source in HISTORY_SOURCES and f.kind == "memory" and f.role != "system" and \
                f.detail.get("part") != "continuation":
            out.extend(f.stored_ids)
    return tuple(out)


def window_dropped(notes: dict[str, Any]) -> tuple[str, ...]:
    """The history messages the context window dropped from the first prompt (``fit_prompt``'s note)."""
    note = notes.get(CONTEXT_WINDOW_ID) or {}
    dropped = (note.get("dropped") or {}).get("history") or ()
    return tuple(str(d) for d in dropped if not str(d).startswith("system:"))


def recall_hits(notes: dict[str, Any]) -> tuple[RecallHitRecord, ...]:
    windows = notes.get("windows") or {}
    out: list[RecallHitRecord] = []
    for rank, hit in enumerate(notes.get("hits") or (), start=1):
        mid = str(hit["message_id"])
        out.append(RecallHitRecord(
            mid, str(hit.get("thread_id") or ""), hit.get("vector_score"), hit.get("keyword_score"),
            float(hit.get("score") or 0.0), rank, tuple(windows.get(mid, ()))))
    return tuple(out)


@dataclass
class TurnCapture(SavedAwareWrite):
    """A record built when the prompt was assembled, completed by each model call, and written once the
    turn is saved: ``commit(conn)`` inside the transaction that stores the turn's messages (the
    capture is one of the turn's staged writes), naming the responses that transaction stored."""

    record: TurnRecord
    store: "Store | None" = None
    new_messages: Callable[[], list[Message]] | None = None
    calls: list[tuple[CallRecord, list[dict[str, Any]]]] = field(default_factory=list)
    # The first call's messages, hashed only for a record without calls (``TurnRecord.messages_hash``):
    # a record with calls stores each call's body hash instead, so a live agent turn never needs it.
    first_messages: Sequence[Mapping[str, Any]] | None = None
    # ``record.options`` as canonical JSON (``options_json_of``), so writing the record does not dump
    # the options again; None: the record's writer works it out.
    options_json: str | None = None
    # The keys sent beside each request body (``stream``, ``stream_options``; {} when not streamed):
    # one for the turn, which streams every call or none. None: not told.
    transport: dict[str, Any] | None = None
    # How the model says it serialises each call's body (``core.llm.wire.WIRE_FORMS``); None: not known.
    # A call whose bytes as sent were not this form's keeps no ``wire_hash`` (``add_call``).
    wire: str | None = None
    # The turn's clock: its reading when the messages are stored is ``TurnRecord.stored_at``.
    clock: Callable[[], datetime] | None = None

    def add_call(self, prompt: "AssembledPrompt", usage: Mapping[str, Any] | None, finish_reason: str | None,
                 transport: Mapping[str, Any] | None = None, wire: str | None = None,
                 sent: bytes | None = None) -> None:
        """One model call of the turn: its request body (``prompt.request``, set by the agent), the keys
        sent beside it (``transport``), how the model says it serialised it (``wire``), the bytes its
        HTTP client actually sent (``sent``, ``ChatResult.sent``) and what the server reported. The
        record keeps the call's bytes hash (``CallRecord.wire_hash``) only when ``wire`` makes exactly
        ``sent`` from the body: a client that serialised otherwise (an ``openai`` upgrade that changed
        its key order or JSON settings), or bytes not seen, leave none, and Replay copies that call's
        body as JSON, saying why (``core.replay.wire.NOT_BYTES_CLIENT``). A prompt without a body (a
        model the agent could not describe) is skipped."""
        body = prompt.request
        if body is None:
            return
        if transport is not None and self.transport is None:
            self.transport = dict(transport)
        tools = [dict(t) for t in body.get("tools") or ()]
        settings = {k: v for k, v in body.items() if k not in ("model", "messages", "tools", "tool_choice")}
        call = CallRecord(prompt.request_hash or request_hash(body), body.get("model"), settings,
                          body.get("tool_choice") if tools else None, None, tuple(tools),
                          {k: int(usage.get(k) or 0) for k in ("prompt_tokens", "completion_tokens", "total_tokens")}
                          if usage else None, finish_reason,
                          wire_hash=_sent_hash(body, transport, wire, sent))
        if wire is not None and self.wire is None and not self.calls:
            self.wire = wire
        self.calls.append((call, tools))

    def complete(self, saved: Sequence[Message] | Sequence[str], calls: Sequence[CallRecord] = (),
                 hidden: Sequence[tuple[str, int, dict[str, Any]]] = ()) -> TurnRecord | None:
        """The record with the response ids of what was saved; None when the input was not saved."""
        saved_ids = [m if isinstance(m, str) else m.id for m in saved]
        if self.record.input_message_id not in saved_ids:
            return None
        inputs = set(self.record.input_ids)
        responses = tuple(i for i in saved_ids if i not in inputs)
        record = self.record
        if not calls and not record.messages_hash and self.first_messages is not None:
            record = replace(record, messages_hash=messages_hash(self.first_messages))
        return replace(record, response_ids=responses, calls=tuple(calls), hidden_parts=tuple(hidden),
                       transport=self.transport if calls else record.transport,
                       wire=(self.wire or "") if calls else record.wire)

    def commit(self, conn: Any) -> None:
        self.commit_saved(conn, ())

    def commit_saved(self, conn: Any, saved: Sequence[Message]) -> None:
        """``commit``, told which messages this transaction has just upserted (``Memory.save_messages``):
        those are stored, and only the turn's other messages (none, usually) are looked up."""
        assert self.store is not None and self.new_messages is not None
        new = self.new_messages()
        if not new:
            return
        ids = [m.id for m in new]
        upserted = {m.id for m in saved}
        stored = {i for i in ids if i in upserted}
        rest = [i for i in ids if i not in upserted]
        if rest:
            marks = ",".join("?" * len(rest))
            stored.update(r[0] for r in driver_sql.rows(
                conn, f"SELECT id FROM mastra_messages WHERE id IN ({marks})", rest))
        calls = [replace(call, tools_key=tool_defs.write(conn, self.store, tools)) if tools else call
                 for call, tools in self.calls]
        reply = next((m for m in reversed(new) if m.role == "assistant"), None)
        hidden = hidden_parts(reply, stored=reply is not None and reply.id in stored) if len(calls) > 1 else ()
        record = self.complete([i for i in ids if i in stored], calls, hidden)
        if record is not None:
            if self.clock is not None:
                record = replace(record, stored_at=to_ms(self.clock()))
            records.write(conn, self.store, record, options_json=self.options_json)


def _sent_hash(body: Mapping[str, Any], transport: Mapping[str, Any] | None, wire: str | None,
               sent: bytes | None) -> str | None:
    """The bytes hash of a call whose reproduced bytes (``wire_bytes``) are the ones its client sent."""
    if wire is None or sent is None:
        return None
    try:
        made = wire_bytes(body, transport, wire)
    except (TypeError, ValueError):  # an unknown form, a body JSON cannot hold: no exact bytes
        return None
    if made != sent:
        log.info("a model call's bytes differ from their %s reproduction: its record keeps no bytes hash", wire)
        return None
    return bytes_hash(made)


def hidden_parts(reply: Message | None, *, stored: bool) -> list[tuple[str, int, dict[str, Any]]]:
    """The parts of the live reply that its stored copy lacks or holds changed (working-memory tool
    calls, ``<working_memory>`` tags: ``hide_working_memory``), so the turn's later model calls, which
    saw them, rebuild exactly: ("+", index, part) was removed, ("~", index, part) was changed."""
    if reply is None:
        return []
    out: list[tuple[str, int, dict[str, Any]]] = []
    for i, part in enumerate(reply.parts):
        if not stored:
            out.append(("+", i, dict(part)))
            continue
        one = {"parts": [part]}
        kept = hide_working_memory(one)
        if kept is None:
            out.append(("+", i, dict(part)))
        elif kept is not one:
            out.append(("~", i, dict(part)))
    return out


def capture(ctx: "ProcessorContext", prompt: "AssembledPrompt", *, model: Any = None) -> TurnCapture | None:
    """The record of a live turn whose first prompt is ``prompt``; None when the turn has no thread
    or no stored input to key it by."""
    req = ctx.request
    inputs = [m for m in ctx.messages.messages("input")]
    if not req.thread_id or not inputs:
        return None
    t0 = time.perf_counter()
    notes = ctx.notes
    wm = notes.get("working-memory", {})
    om = notes.get("observational-memory", {})
    recall = notes.get("semantic-recall", {})
    instructions = tuple(f.text for f in prompt.fragments if f.source == "instructions")
    context = tuple(_context_message(e.message) for e in (prompt.message_list.conversation()
                    if prompt.message_list is not None else ()) if e.source == "context")
    context += tuple({"role": "system", "content": f.text} for f in prompt.fragments
                     if f.source == "context" and f.role == "system")
    hints = {k: v for k, v in (om.get("hints") or {}).items() if isinstance(v, str) and v}
    # Only observational memory reads the clock into the prompt (relative dates); its reading is the
    # turn's time. Otherwise the input's own stamp is.
    when = parse_iso(om["now"]) if om.get("now") else inputs[-1].created_at
    # The dict the prompt holds (``build_prompt`` was given ``req.options.to_dict()``): the same
    # values, without parsing the options' JSON a second time in the turn.
    options = prompt.options if prompt.options else req.options.to_dict()
    record = TurnRecord(
        input_message_id=inputs[-1].id,
        thread_id=req.thread_id,
        resource_id=req.resource_id,
        response_ids=(),
        created_at=when,
        options=options,
        model=model_id_of(model) if model is not None else None,
        endpoint=endpoint_of(model) if model is not None else None,
        context_window=ctx.budget.context_window if ctx.budget is not None else None,
        history_ids=history_ids(prompt),
        window_dropped=window_dropped(notes) if ctx.budget is not None else (),
        recall=recall_hits(recall),
        recall_model=str(recall["model"]) if recall.get("hits") and recall.get("model") else None,
        wm_version_id=wm.get("versionId"),
        om_generation=om.get("recordId"),
        om_cursor=om.get("cursor"),
        tools=tuple(t["function"]["name"] for t in prompt.tools),
        tokens=token_sections(prompt),
        messages_hash="",  # set by ``TurnCapture.complete`` when the record has no calls
        input_ids=tuple(m.id for m in inputs),
        instructions=instructions,
        context=context,
        wm_text=wm.get("unversionedText"),
        om_chunks=om.get("chunkCount") if om.get("recordId") else None,
        om_hints=hints,
        om_others=tuple(om.get("otherIds") or ()),
        began_at=to_ms(ctx.services.clock.now()),  # (after every read of memory)
    )
    log.debug("turn record of %s built in %.3f ms", record.input_message_id, (time.perf_counter() - t0) * 1000)
    return TurnCapture(record, ctx.services.store, ctx.messages.new_messages, first_messages=prompt.messages,
                       options_json=options_json_of(req.options, options), clock=ctx.services.clock.now)


def _context_message(message: Message) -> dict[str, Any]:
    return {"id": message.id, "role": message.role, "content": message.content}


__all__ = ["TurnCapture", "capture", "endpoint_of", "hidden_parts", "history_ids", "model_id_of", "model_label",
           "recall_hits", "section_of", "token_sections", "window_dropped"]
