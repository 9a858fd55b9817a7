"""Rebuilding a stored turn: exactly from its record, or as of its time when there is none.

``rebuild`` is what ``Memory.assemble(as_of=...)`` runs. It uses the same assembler as a live turn
(``TurnAssembler``: prepare the input, run the processors, build the prompt), only with the inputs
of the past:

- *recorded*: the record's options, instructions and call-time context, its clock reading, and a
  ``FrozenTurn`` from which every processor takes what it would have queried. The result's hash is
  compared with the record's.
- *reconstructed* (no record, a what-if, or ``rebuild="now"``): the processors query with the
  turn's input as the cut-off (``RequestContext.as_of``): history strictly before it, recall over
  messages created before it, working memory and observations as they stood then. What could not be
  known is listed.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence

from core.messages import Message
from core.options import MemoryOptions
from core.replay import frozen as frozen_mod
from core.replay import store as records
from core.replay.record import ReplayInfo, TurnRecord, messages_hash
from core.storage.memory_store import InvalidArgumentError, NotFoundError
from core.timeutil import FixedClock

if TYPE_CHECKING:  # pragma: no cover
    from core.assembly import TurnAssembler
    from core.prompt import AssembledPrompt

Rebuild = Literal["record", "now"]
REBUILDS = ("record", "now")


def _stopped_clock(when: datetime) -> FixedClock:
    return FixedClock(when, step_ms=0)


def _context(record: TurnRecord, at: datetime) -> list[Message]:
    out = []
    for i, item in enumerate(record.context):
        content = item.get("content")
        if not isinstance(content, dict):
            content = {"format": 2, "parts": [{"type": "text", "text": str(content or "")}], "content": str(content or "")}
        out.append(Message(id=str(item.get("id") or f"context-{i}"), role=item.get("role", "user"), content=content,
                           created_at=at))
    return out


def _inputs(assembler: "TurnAssembler", as_of: str, record: TurnRecord | None, thread_id: str | None) -> list[Message]:
    wanted = list(record.input_ids) if record is not None else [as_of]
    found = {m.id: m for m in assembler.store.memory.get_messages(wanted)}
    if as_of not in found:
        raise NotFoundError(f"Message {as_of} not found")
    turn = found[as_of]
    if thread_id is not None and turn.thread_id != thread_id:
        raise InvalidArgumentError(f"Message {as_of} belongs to thread {turn.thread_id}, not {thread_id}.")
    return [found[i] for i in wanted if i in found and found[i].thread_id == turn.thread_id]


def rebuild(
    assembler: "TurnAssembler",
    *,
    as_of: str,
    thread_id: str | None = None,
    resource_id: str | None = None,
    options: Mapping[str, Any] | None = None,
    instructions: str | Sequence[str] | None = None,
    context: Sequence[Message] = (),
    scopes: Sequence[str] | None = None,
    request_context: Mapping[str, Any] | None = None,
    tools: Sequence[Mapping[str, Any]] = (),
    rebuild: Rebuild = "record",
) -> "AssembledPrompt":
    """The prompt of the stored turn whose input is message ``as_of`` (see the module docstring)."""
    if rebuild not in REBUILDS:
        raise InvalidArgumentError(f"rebuild must be 'record' or 'now', got {rebuild!r}.")
    record = records.read(assembler.store, as_of)
    if record is not None and record.input_message_id != as_of:
        record = None
    inputs = _inputs(assembler, as_of, record, thread_id)
    turn = inputs[-1] if inputs[-1].id == as_of else next(m for m in inputs if m.id == as_of)
    request = assembler.request_context(thread_id=turn.thread_id, resource_id=resource_id, options=None,
                                        scopes=scopes, values=request_context)
    unknowns: list[str] = []
    effective = _options(assembler, record, options, rebuild, request.options)
    exact = record is not None and rebuild == "record" and effective.to_dict() == record.options
    request.options = effective
    request.as_of = inputs[0]
    frozen = None
    if exact:
        assert record is not None
        frozen = frozen_mod.load(assembler.store, record)
        request.frozen = frozen
    elif record is None:
        if options is None:
            unknowns.append("the options in force (the current configuration is used)")
        if instructions is None:
            unknowns.append("the agent's instructions (older turns do not store them)")
    first = min(m.created_at for m in inputs)
    ctx = assembler.new_context(request)
    # Context sits just before the input, as in the live turn; then the processors see the turn's clock.
    ctx.services = replace(ctx.services, clock=_stopped_clock(first - timedelta(milliseconds=1)))
    if record is not None:
        instructions, context = list(record.instructions), _context(record, first)
    assembler.prepare_input(ctx, input=inputs, instructions=instructions, context=context)
    turn_time = record.created_at if record is not None else turn.created_at
    ctx.services = replace(ctx.services, clock=_stopped_clock(turn_time))
    prompt = assembler.run_input(ctx, extra_tools=tools)
    for notes in prompt.notes.values():
        unknowns.extend(str(u) for u in notes.get("unknown", ()) or ())
    if not exact and record is None and effective.semantic_recall.enabled:
        unknowns.append("recall scores at the time (ranked over today's index, limited to older messages)")
    if frozen is not None and frozen.missing:
        unknowns.extend(f"{m} (no longer stored)" if not m.endswith(")") else m for m in frozen.missing)
    prompt.replay = ReplayInfo(
        kind="recorded" if exact else "reconstructed",
        matches=(messages_hash(prompt.messages) == record.messages_hash) if record is not None else None,
        record=record,
        unknowns=tuple(dict.fromkeys(unknowns)),
        what_if=options is not None,
    )
    return prompt


def _options(assembler: "TurnAssembler", record: TurnRecord | None, options: Mapping[str, Any] | None,
             rebuild: Rebuild, current: MemoryOptions) -> MemoryOptions:
    """Record mode: the record's options, with a what-if's changes on top. "now" (or no record): the
    engine's current configuration with them."""
    if record is not None and rebuild == "record":
        return record.memory_options().merged(options)
    return current.merged(options) if options else current


__all__ = ["REBUILDS", "Rebuild", "rebuild"]
