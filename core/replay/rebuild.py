"""Rebuilding a stored turn: exactly from its record, or as of its time when there is none.

``rebuild`` is what ``Memory.assemble(as_of=...)`` runs. It uses the same assembler as a live turn
(``TurnAssembler``: prepare the input, run the processors, build the prompt), only with the inputs
of the past:

- *recorded*: the record's options, instructions and call-time context, its clock reading, the
  context window the prompts were fitted into, and a ``FrozenTurn`` from which the processors take
  what they would have queried, including the tool definitions the model was offered. With a
  what-if's options, only the parts whose options changed are queried again (as of the turn's time).
- *reconstructed* (no record, a damaged one, or ``rebuild="now"``): the processors query with the
  turn's input as the cut-off (``RequestContext.as_of``): memory is what is older than the input's
  millisecond, as in the live turn (history, recall and observational memory's unobserved messages),
  working memory and observations as they stood then. What could not be known is listed (among it,
  other messages stamped in the input's millisecond), and a damaged record says why it could not be used.
- *today* (``rebuild="today"``, "with the memory as it is now"): as "now", but working memory is today's
  value, not the version in force then (what a fix made by hand since would have given the turn); its
  note ``writtenSince`` names who wrote versions after the turn ("studio": by hand).

A turn another framework built (an Agents SDK run: ``TurnRecord.framework``) is shown from its record
as sent (``core.replay.verbatim``); a what-if over it, or "now", is our processors' view instead.

Every model call of the turn is rebuilt (``ReplayInfo.calls``): the first from the processors; each
later one, as the agent's tool loop built it, from the same list with the turn's reply as it stood
after each earlier call (the stored reply, with the parts its stored copy lacks put back from the
record). Each call's request body (model, messages, tools, tool choice, every setting) is hashed and
compared with the record's; the first call's body is ``prompt.request``.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence

from core.message_list import Provenance
from core.messages import Message
from core.options import MemoryOptions
from core.replay import edited
from core.replay import frozen as frozen_mod
from core.replay import store as records
from core.replay import tools as tool_defs
from core.replay import verbatim
from core.replay.record import (CallRecord, CallReplay, RecordState, ReplayInfo, TurnRecord, request_hash,
                                with_facts_checked)
from core.storage.memory_store import InvalidArgumentError, MessageQuery, NotFoundError
from core.timeutil import FixedClock
from core.working_memory import TOOL_NAME as WM_TOOL_NAME

if TYPE_CHECKING:  # pragma: no cover
    from core.assembly import TurnAssembler
    from core.processors.base import ProcessorContext
    from core.prompt import AssembledPrompt

Rebuild = Literal["record", "now", "today"]
REBUILDS = ("record", "now", "today")
_REQUERIED = {
    "history": "the history window was queried again for the changed options",
    "recall": "recall was searched again for the changed options (over today's index, older messages only)",
    "working-memory": "working memory was read again (the version in force then)",
    "observational-memory": "observations were read again as of the turn's time",
}
NO_CALLS = ("the tools and model settings that were sent, and the turn's later model calls (this turn was "
            "recorded before records kept them)")


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
    # The reply too, in the same read: its step marks say how many model calls the turn made (``_calls``).
    found = source.messages([*wanted, *(record.response_ids if record is not None else ())])
    if as_of not in found:
        raise NotFoundError(f"Message {as_of} not found")
    turn = found[as_of]
    if thread_id is not None and turn.thread_id != thread_id:
        raise InvalidArgumentError(f"Message {as_of} belongs to thread {turn.thread_id}, not {thread_id}.")
    return [found[i] for i in wanted if i in found and found[i].thread_id == turn.thread_id]


def _record_state(source: frozen_mod.ReplaySource, as_of: str) -> tuple[TurnRecord | None, RecordState, str | None]:
    record, damage = source.record_state(as_of)
    if record is not None:
        return record, "present", None
    if damage is not None:
        return None, "damaged", damage
    return None, ("missing" if records.has_table(source.store) else "no-table"), None


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
    """The first model call's prompt of the stored turn whose input is message ``as_of``, with every
    call in ``prompt.replay.calls`` (see the module docstring). ``tools``: the definitions to offer
    when the turn has no record that kept them. ``source``: a cache of stored rows shared by several
    rebuilds (a what-if over a thread)."""
    if rebuild not in REBUILDS:
        raise InvalidArgumentError(f"rebuild must be 'record', 'now' or 'today', got {rebuild!r}.")
    source = source or frozen_mod.ReplaySource(assembler.store)
    record, state, damage = _record_state(source, as_of)
    stored = source
    past = _as_recorded(stored, as_of, record) if rebuild == "record" else None  # edits since: what was seen
    source = past if past is not None else stored  # type: ignore[assignment]
    inputs = _inputs(source, as_of, record, thread_id)
    turn = next(m for m in inputs if m.id == as_of)
    if record is not None and record.thread_id != turn.thread_id:
        # A record is data: one that names another thread than its input's cannot describe this turn.
        damage = f"it names thread {record.thread_id}, but its input is in thread {turn.thread_id}"
        record, state = None, "damaged"
        past = _as_recorded(stored, as_of, None) if rebuild == "record" else None
        source = past if past is not None else stored  # type: ignore[assignment]
        inputs = _inputs(source, as_of, None, thread_id)
    built_by = record.framework if record is not None else None
    if record is not None and record.framework:
        if rebuild == "record" and options is None:
            # Another framework built the prompts: the record keeps what each call sent, shown as it is.
            return verbatim.replay(record, assembler.services().tokenizer)
        # A what-if, or "now": our processors' view of the turn, which never built its prompts (its record,
        # present, describes the framework's prompts: nothing of ours to freeze or compare with).
        record = None
        past = _as_recorded(stored, as_of, None) if rebuild == "record" else None
        source = past if past is not None else stored  # type: ignore[assignment]
        inputs = _inputs(source, as_of, None, thread_id)
    use_record = record is not None and rebuild == "record"
    request = assembler.request_context(thread_id=turn.thread_id, resource_id=resource_id, options=None,
                                        scopes=scopes, values=request_context, resolve=not use_record,
                                        thread=source.thread(turn.thread_id or ""))
    unknowns: list[str] = []
    effective = _options(record if use_record else None, options, request.options)
    request.options = effective
    request.as_of = inputs[0]
    request.memory_today = rebuild == "today"
    running: tuple[frozenset[str], int] = (frozenset(), 0)
    across: str | None = None
    if not use_record:
        # Recall over the user's other conversations (resource scope) would also find their turns' messages.
        recall = effective.semantic_recall
        across = request.resource_id if recall.enabled and recall.scope == "resource" else None
        running = _still_running(stored, source, request.as_of, {m.id for m in inputs},
                                 record.began_at if record is not None else None, across)
        request.not_memory = running[0]
    frozen = None
    recorded_tools = list(record.calls[0].tools) if record is not None and record.calls else None
    agent_tools = [dict(t) for t in tools] if tools or recorded_tools is None else \
        [t for t in recorded_tools if _tool_name(t) != WM_TOOL_NAME]
    if use_record:
        assert record is not None
        same = frozen_mod.parts_unchanged(record, effective)
        frozen = frozen_mod.load(source, record, same)
        if recorded_tools is not None and "working-memory" in same and not tools:
            frozen.tools = recorded_tools  # exactly the definitions sent, in their order
        request.frozen = frozen
        unknowns.extend(_REQUERIED[p] for p in frozen_mod.PARTS if p not in frozen.parts)
        if not record.calls:
            unknowns.append(NO_CALLS)
    elif record is None:
        if damage is not None:
            unknowns.append(f"everything the record would say: it is damaged ({damage})")
        if options is None:
            unknowns.append("the options in force (the current configuration is used)")
        if instructions is None:
            framework = _framework(source, turn.thread_id)
            unknowns.append(
                f"the agent's instructions ({framework} ran this thread's turns and built their prompts itself: "
                "what it sent is in the turn's record when it has one (rebuild it from the record), else in the "
                "run's trace)" if framework
                else "the agent's instructions (older turns do not store them)")
        if not tools:
            unknowns.append("the model, its settings and the tool definitions it was offered " + (
                f"(the turn's record keeps those {built_by} sent: rebuild it from the record)" if built_by
                else "(no record)"))
    first = min(m.created_at for m in inputs)
    ctx = assembler.new_context(request)
    if record is not None and options is None:
        ctx.budget = record.budget()
    # Context sits just before the input, as in the live turn; then the processors see the turn's clock.
    ctx.services = replace(ctx.services, clock=_stopped_clock(first - timedelta(milliseconds=1)))
    if record is not None:
        instructions, context = list(record.instructions), _context(record, first)
    assembler.prepare_input(ctx, input=inputs, instructions=instructions, context=context)
    turn_time = record.created_at if record is not None else turn.created_at
    ctx.services = replace(ctx.services, clock=_stopped_clock(turn_time))
    prompt = assembler.run_input(ctx, extra_tools=agent_tools)
    for notes in prompt.notes.values():
        unknowns.extend(str(u) for u in notes.get("unknown", ()) or ())
    if record is None and effective.semantic_recall.enabled:
        unknowns.append("recall scores at the time (ranked over today's index, limited to older messages)")
    elif record is not None and not use_record and effective.semantic_recall.enabled:
        unknowns.extend(_recall_moved(prompt, record))
    if frozen is not None:
        unknowns.extend(m if m.endswith(")") else f"{m} (no longer stored)" for m in frozen.missing)
    if not use_record:
        # The resource's other threads count too when the turn's memory read them (recall or observational
        # memory in resource scope): a turn of another thread running at the same time shares the millisecond.
        om = effective.observational_memory
        reads_across = across is not None or (om.enabled and om.scope == "resource")
        unknowns.extend(_same_millisecond(assembler, request.as_of, resource_id, [m.id for m in inputs],
                                          request.resource_id if reads_across else None))
    if running[0]:
        where = "this thread" if across is None else "this thread and the user's other conversations (recall reads them)"
        unknowns.append(
            f"the turns running beside this one: {len(running[0])} message(s) of {running[1]} other turn(s) of "
            f"{where}, older than its input but stored after it began (their records say so), are left out")
    if past is not None and not use_record and edited.thread_changed_since(source, turn.thread_id or "", turn_time):
        unknowns.append("messages edited or deleted since the turn (a reconstruction shows today's text)")
    calls, call_notes, missed = _calls(assembler, ctx, prompt, record, source, agent_tools, frozen)
    unknowns.extend(call_notes)
    if record is None:
        matches = None
    elif record.calls:
        matches = all(c.matches for c in calls) and len(calls) == len(record.calls) and missed is None
    else:
        matches = record.sent_messages(prompt.messages)
    prompt.request = calls[0].request
    prompt.replay = with_facts_checked(ReplayInfo(
        kind="recorded" if use_record else "reconstructed",
        matches=matches,
        record=record,
        unknowns=tuple(dict.fromkeys(unknowns)),
        what_if=options is not None,
        calls=tuple(calls),
        record_state=state,
        record_error=damage,
        differences=(*(d for c in calls for d in c.differences), *((missed,) if missed else ())),
        changed_since=_shown_changes(past.changed, calls, record, [m.id for m in inputs]) if past is not None else {},
    ))
    return prompt


def _still_running(stored: frozen_mod.ReplaySource, source: Any, turn: Message, inputs: set[str],
                   began: datetime | None, resource_id: str | None = None) -> tuple[frozenset[str], int]:
    """The messages older than ``turn`` (the rebuilt turn's first input) that other turns of its thread
    stored only after it had read its memory (``began``: its record's ``began_at``), and how many turns
    stored them: by their records' ``stored_at``, in a later millisecond (a turn stores its input with
    its reply, at its end, and its reply is stamped when its model call starts, so neither stamp says
    when). A message a record stored earlier (a retry sends a stored message again), or that no record
    dates, was there already and stays memory; without ``began`` nothing is left out. ``resource_id``:
    the turn's memory also read the resource's other threads (resource-scoped recall), whose turns
    count too."""
    if not turn.thread_id or began is None:
        return frozenset(), 0
    # (A decoded record's ``input_ids`` always holds at least its ``input_message_id``.)
    kept = list(stored.thread_records(turn.thread_id).values())
    if resource_id:
        kept += stored.other_threads_records(resource_id, turn.thread_id).values()
    others = [r for r in kept if not inputs.intersection(r.input_ids)]
    if not any(r.stored_at is not None and r.stored_at > began for r in others):
        return frozenset(), 0
    found = source.messages(sorted({i for r in others for i in (*r.input_ids, *r.response_ids)}))
    cut = turn.created_at
    late: list[set[str]] = []
    early: set[str] = set()
    for r in others:
        own = {i for i in (*r.input_ids, *r.response_ids)
               if i in found and found[i].thread_id == r.thread_id and found[i].created_at < cut}
        if r.stored_at is not None and r.stored_at > began:
            late.append(own)
        else:
            early |= own
    left = [ids - early for ids in late]
    return frozenset().union(*left), sum(1 for ids in left if ids)


def _recall_moved(prompt: "AssembledPrompt", record: TurnRecord) -> list[str]:
    """The reconstruction's word on recall when its hits are not the record's: it ranks over today's index,
    whose statistics (keyword frequencies, the fusion's spans, thread neighbours) count messages written
    since, and which only the live turn saw as it was; the record keeps the hits the model got."""
    now = [str(h.get("message_id")) for h in (prompt.notes.get("semantic-recall", {}).get("hits") or ())]
    then = [h.message_id for h in record.recall]
    if now == then:
        return []
    new, gone = len(set(now) - set(then)), len(set(then) - set(now))
    how = f"{new} hit(s) not in the record, {gone} of the record's missing" if new or gone else "in another order"
    return [f"recall's ranking at the time: rebuilt over today's index, whose statistics count the messages written "
            f"since, it differs from the record's hits ({how}); the record keeps what the model got"]


def _same_millisecond(assembler: "TurnAssembler", turn: Message, resource_id: str | None,
                      inputs: Sequence[str], across: str | None = None) -> list[str]:
    """The reconstruction's word on the thread's other messages stamped in the input's millisecond:
    memory is what is older than that millisecond (as in the live turn), so they are left out, but
    whether they were stored before the input is not in the data. ``across``: the resource whose other
    threads the turn's memory read too (resource-scoped recall or observational memory), whose messages
    of that millisecond are named apart: a turn of another conversation running at the same time is
    stamped so (each turn's stamps follow the resource's newest message stored when it began)."""
    if not turn.thread_id:
        return []
    rows = assembler.store.memory.list_messages(MessageQuery(
        thread_id=turn.thread_id, resource_id=resource_id, since=turn.created_at, until=turn.created_at))
    ids = [m.id for m in rows if m.id not in inputs]
    others = assembler.store.memory.others_at(across, turn.thread_id, turn.created_at) if across else []
    out = []
    if ids:
        out.append(f"whether {len(ids)} message(s) stamped in the same millisecond as the turn's input "
                   f"({_named(ids)}) were stored before it (left out: a turn's memory is what is older than its "
                   "input's millisecond)")
    if others:
        threads = sorted({thread for _, thread in others})
        out.append(f"whether {len(others)}{'+' if len(others) >= 100 else ''} message(s) of the user's other "
                   f"conversations ({_named(threads)}) stamped in the same millisecond as the turn's input "
                   f"({_named([i for i, _ in others])}) were stored before it: most likely a turn there ran at the "
                   "same time, and neither saw the other (left out: a turn's memory is what is older than its "
                   "input's millisecond)")
    return out


def _named(ids: Sequence[str]) -> str:
    return ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")


def _shown_changes(changed: Mapping[str, str], calls: Sequence[CallReplay], record: TurnRecord | None,
                   inputs: Sequence[str]) -> dict[str, str]:
    """The edited or deleted messages a rebuilt turn shows: its inputs, those its calls' fragments came
    from, and its reply (later calls show it). A message read but not sent (history the context window
    dropped, a recall window left out) is no reason to say the turn's messages changed."""
    if not changed:
        return {}
    shown: set[str] = set(inputs) | (set(record.response_ids) if record is not None else set())
    for call in calls:
        for f in call.prompt.fragments:
            shown.update(f.stored_ids)
            shown.update(str(i) for i in f.detail.get("hit_ids") or ())
    return {mid: how for mid, how in changed.items() if mid in shown}


def _tool_name(definition: Mapping[str, Any]) -> str:
    function = definition.get("function")
    return str(function.get("name")) if isinstance(function, Mapping) else ""


def _calls(assembler: "TurnAssembler", ctx: "ProcessorContext", first: "AssembledPrompt", record: TurnRecord | None,
           source: frozen_mod.ReplaySource, agent_tools: list[dict[str, Any]],
           frozen: frozen_mod.FrozenTurn | None) -> tuple[list[CallReplay], list[str], str | None]:
    """Every model call of the turn, rebuilt, with its request body compared with the record's; and, when
    the turn's reply shows more model calls than the record keeps, what says so (a record is data: a
    hand-edited one may have lost calls, and the calls it keeps still match)."""
    if record is None or not record.calls:
        body: dict[str, Any] = {"messages": first.messages, **({"tools": first.tools} if first.tools else {})}
        if record is not None and record.model:
            body = {"model": record.model.split("/", 1)[-1], **body}
        return [CallReplay(0, first, body, None)], [], None
    notes: list[str] = []
    prompts = [first]
    # The reply has one step mark per model call: read even for a one-call record, which it checks.
    reply, note = _reply(source, record)
    parts = _with_hidden(list(reply.parts) if reply is not None else [], record.hidden_parts)
    steps = sum(1 for p in parts if p.get("type") == "step-start")
    missed = None if steps <= len(record.calls) else (
        f"the turn's reply shows {steps} model calls, but its record keeps {len(record.calls)}: the later "
        "calls' requests are not recorded")
    if len(record.calls) > 1:
        if note:
            notes.append(note)
        template = reply or Message(id=f"reply-{record.input_message_id}", role="assistant",
                                    content={"format": 2, "parts": []}, thread_id=record.thread_id,
                                    resource_id=record.resource_id,
                                    created_at=max(m.created_at for m in ctx.messages.messages("input")) +
                                    timedelta(milliseconds=1))
        for k in range(1, len(record.calls)):
            step = template.copy(content={**template.content, "parts": _until_step(parts, k)})
            ctx.messages.add(step, "response", Provenance("response"))
            if frozen is not None and frozen.tools is not None:
                frozen.tools = list(record.calls[k].tools)
            prompts.append(assembler.record(ctx, list(first.processors), agent_tools))
    out: list[CallReplay] = []
    for k, (call, prompt) in enumerate(zip(record.calls, prompts)):
        body = _body(call, prompt)
        matches = request_hash(body) == call.body_hash
        if k > 0:
            prompt.request = body
        out.append(CallReplay(k, prompt, body, matches, call.usage, call.finish_reason,
                              () if matches else (_difference(k, call, prompt, record, frozen is None),), call))
    return out, notes, missed


def _body(call: CallRecord, prompt: "AssembledPrompt") -> dict[str, Any]:
    """A call's request body: the record's model, settings and tool choice around the rebuilt
    messages and tools."""
    body: dict[str, Any] = {"model": call.wire_model, "messages": prompt.messages}
    if prompt.tools:
        body["tools"] = prompt.tools
        if call.tool_choice is not None:
            body["tool_choice"] = call.tool_choice
    body.update(call.settings)
    return body


def _difference(k: int, call: CallRecord, prompt: "AssembledPrompt", record: TurnRecord,
                reconstructed: bool = False) -> str:
    """What makes call ``k``'s rebuilt body differ from the record's, in words. ``reconstructed``: rebuilt
    from today's data and engine ("now"), not from the record, so an edit is only one possible cause."""
    label = f"model call {k + 1}"
    rebuilt_tools = tool_defs.set_key(prompt.tools)[0] if prompt.tools else None
    if rebuilt_tools != call.tools_key:
        if call.tools_key and not call.tools:
            return f"{label}: the tool definitions it offered are no longer stored"
        return f"{label}: the tool definitions differ from those sent"
    if k == 0 and record.sent_messages(prompt.messages):
        return f"{label}: the request differs from the one sent outside its messages and tools"
    if reconstructed:
        return (f"{label}: the messages differ from those sent (rebuilt from today's data and engine, not from "
                "the record: see what the reconstruction could not know)")
    if any(not key.startswith("tools:") for key in record.unresolved):
        return (f"{label}: the messages differ from those sent (a text the record names is no longer stored: the "
                "agent's instructions, working memory, observation hints or a response format it kept by hash)")
    return (f"{label}: the messages differ from those sent (a message it names was changed or deleted since, "
            "with no version kept to rebuild it from)")


def _reply(source: frozen_mod.ReplaySource, record: TurnRecord) -> tuple[Message | None, str | None]:
    """The turn's stored reply (the assistant message among its responses, in the record's thread)."""
    found = source.messages(record.response_ids)
    replies = [found[i] for i in record.response_ids if i in found and found[i].role == "assistant"
               and found[i].thread_id == record.thread_id]
    if replies:
        return replies[-1], None
    if any(op == "+" for op, _i, _p in record.hidden_parts) and not record.response_ids:
        return None, None  # the reply was never stored: the record holds all of it
    return None, "the turn's stored reply (no longer stored): its later model calls cannot be rebuilt exactly"


def _with_hidden(stored: list[dict[str, Any]], hidden: Sequence[tuple[str, int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The live reply's parts: the stored ones with those the stored copy lacks (or holds changed) put back."""
    at = {i: (op, part) for op, i, part in hidden}
    total = len(stored) + sum(1 for op, _i, _p in hidden if op == "+")
    out: list[dict[str, Any]] = []
    j = 0
    for i in range(total):
        if i in at:
            op, part = at[i]
            out.append(dict(part))
            j += op == "~"
        elif j < len(stored):
            out.append(stored[j])
            j += 1
    return out


def _until_step(parts: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    """The reply as model call ``k`` (0-based) saw it: the parts before the step that call began."""
    starts = [i for i, p in enumerate(parts) if p.get("type") == "step-start"]
    return parts[:starts[k]] if len(starts) > k else list(parts)


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


__all__ = ["NO_CALLS", "REBUILDS", "Rebuild", "rebuild"]


def _framework(source: Any, thread_id: str | None) -> str | None:
    """The agent framework a thread says ran it (``metadata.framework``, e.g. "openai-agents" from
    ``core.integrations.openai_agents``), whose turns leave no record of ours; None for our own threads."""
    thread = source.thread(thread_id or "")
    metadata = getattr(thread, "metadata", None)
    framework = metadata.get("framework") if isinstance(metadata, Mapping) else None
    return framework if isinstance(framework, str) and framework else None

