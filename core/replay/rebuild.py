"""Rebuilding a stored turn: exactly from its record, or as of its time when there is none.

``rebuild`` is what ``Memory.assemble(as_of=...)`` runs. It uses the same assembler as a live turn
(``TurnAssembler``: prepare the input, run the processors, build the prompt), only with the inputs
of the past:

- *recorded*: the record's options, instructions and call-time context, its clock reading, and a
  ``FrozenTurn`` from which the processors take what they would have queried. With a what-if's
  options, only the parts whose options changed are queried again (as of the turn's time). The
  result's hash is compared with the record's.
- *reconstructed* (no record, or ``rebuild="now"``): the processors query with the turn's input as
  the cut-off (``RequestContext.as_of``): history strictly before it, recall over messages created
  before it, working memory and observations as they stood then. What could not be known is listed.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence

from core.messages import Message
from core.options import MemoryOptions
from core.replay import edited
from core.replay import frozen as frozen_mod
from core.replay.record import ReplayInfo, TurnRecord, messages_hash
from core.storage.memory_store import InvalidArgumentError, NotFoundError
from core.timeutil import FixedClock

if TYPE_CHECKING:  # pragma: no cover
    from core.assembly import TurnAssembler
    from core.prompt import AssembledPrompt

Rebuild = Literal["record", "now"]
REBUILDS = ("record", "now")
_REQUERIED = {
    "history": "the history window was queried again for the changed options",
    "recall": "recall was searched again for the changed options (over today's index, older messages only)",
    "working-memory": "working memory was read again (the version in force then)",
    "observational-memory": "observations were read again as of the turn's time",
}


def _stopped_clock(when: datetime) -> FixedClock:
    return FixedClock(when, step_ms=0)


def _context(record: TurnRecord, at: datetime) -> list[Message]:
    out = []
    for i, item in enumerate(record.context):
        content = item.get("content")
        if not isinstance(content, dict):
            text = str(content or "")
            content = {"format": 2, "parts": [{"type": "text", "text": text}], "content": text}
        out.append(Message(id=str(item.get("id") or f"context-{i}"), role=item.get("role", "user"), content=content,
                           created_at=at))
    return out


def _inputs(source: frozen_mod.ReplaySource, as_of: str, record: TurnRecord | None,
            thread_id: str | None) -> list[Message]:
    wanted = list(record.input_ids) if record is not None else [as_of]
    found = source.messages(wanted)
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
    source: frozen_mod.ReplaySource | None = None,
) -> "AssembledPrompt":
    """The prompt of the stored turn whose input is message ``as_of`` (see the module docstring).
    ``source``: a cache of stored rows shared by several rebuilds (a what-if over a thread)."""
    if rebuild not in REBUILDS:
        raise InvalidArgumentError(f"rebuild must be 'record' or 'now', got {rebuild!r}.")
    source = source or frozen_mod.ReplaySource(assembler.store)
    record = source.record(as_of)
    past = _as_recorded(source, as_of, record) if rebuild == "record" else None  # edits since: what was seen
    source = past if past is not None else source  # type: ignore[assignment]
    inputs = _inputs(source, as_of, record, thread_id)
    turn = next(m for m in inputs if m.id == as_of)
    use_record = record is not None and rebuild == "record"
    request = assembler.request_context(thread_id=turn.thread_id, resource_id=resource_id, options=None,
                                        scopes=scopes, values=request_context, resolve=not use_record,
                                        thread=source.thread(turn.thread_id or ""))
    unknowns: list[str] = []
    effective = _options(record if use_record else None, options, request.options)
    request.options = effective
    request.as_of = inputs[0]
    frozen = None
    if use_record:
        assert record is not None
        same = frozen_mod.parts_unchanged(record, effective)
        frozen = frozen_mod.load(source, record, same)
        request.frozen = frozen
        unknowns.extend(_REQUERIED[p] for p in frozen_mod.PARTS if p not in frozen.parts)
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
    if record is None and effective.semantic_recall.enabled:
        unknowns.append("recall scores at the time (ranked over today's index, limited to older messages)")
    if frozen is not None:
        unknowns.extend(f"{m} (no longer stored)" if not m.endswith(")") else m for m in frozen.missing)
    if past is not None and not use_record and edited.thread_changed_since(source, turn.thread_id or "", turn_time):
        unknowns.append("messages edited or deleted since the turn (a reconstruction shows today's text)")
    prompt.replay = ReplayInfo(
        kind="recorded" if use_record else "reconstructed",
        matches=(messages_hash(prompt.messages) == record.messages_hash) if record is not None else None,
        record=record,
        unknowns=tuple(dict.fromkeys(unknowns)),
        what_if=options is not None,
        changed_since=dict(past.changed) if past is not None else {},
    )
    return prompt


def _as_recorded(source: frozen_mod.ReplaySource, as_of: str, record: TurnRecord | None) -> edited.SourceAsOf | None:
    """The rows as the turn saw them (``core.replay.edited``): at its record's clock, else its input's time."""
    if record is not None:
        return edited.as_of(source, record.created_at)
    found = source.messages([as_of]).get(as_of)
    return edited.as_of(source, found.created_at) if found is not None else None


def _options(record: TurnRecord | None, options: Mapping[str, Any] | None, current: MemoryOptions) -> MemoryOptions:
    """With a record: its options, with a what-if's changes on top. Without (or "now"): the engine's
    current configuration with them."""
    if record is not None:
        return record.memory_options(options)
    return current.merged(options) if options else current


__all__ = ["REBUILDS", "Rebuild", "rebuild"]
