"""WorkingMemory: shows the stored working memory to the model as one system message (tag ``memory``)
and offers the update tool. Updates happen in the tool (``core.working_memory``), not here."""

from __future__ import annotations

from core.message_list import Provenance
from core.options import WorkingMemoryOptions
from core.processors.base import BaseProcessor, ProcessorContext
from core.working_memory import WorkingMemoryValue, instruction, tool_definition, tool_name
from core.working_memory_schema import WorkingMemoryError


#: Why a call without a thread id shows no thread-scoped working memory (nor its tool), and what to do.
NO_THREAD_FOR_THREAD_SCOPE = (
    "working memory is thread-scoped and this call gives no thread id, so there is no memory to show and none the "
    "model could update: no instruction and no update tool were added. Give the call a thread id, or set "
    "working_memory.scope to 'resource' to keep one memory per resource")


def shown_value(ctx: ProcessorContext, opts: WorkingMemoryOptions, processor_id: str) -> tuple[WorkingMemoryValue, str | None]:
    """The working memory a turn shows, and a note when it is a past turn's: a recorded turn's
    version, a replayed turn's value as of its time, or the current value (noting for the turn record
    the version in force, or the text when no version holds it). Raises ``WorkingMemoryError``."""
    req = ctx.request
    service = ctx.services.working_memory
    if req.frozen is not None and req.frozen.wm_frozen:  # a recorded turn: the version it showed
        return service.value_of(opts, thread_id=req.thread_id, resource_id=req.resource_id,
                                text=req.frozen.wm_text), None
    value = service.get(opts, thread_id=req.thread_id, resource_id=req.resource_id)
    if req.as_of is not None and req.memory_today:
        # A stored turn rebuilt with the memory as it is now: today's value, and who wrote it since the turn
        # (``prompt_diff`` calls a change "edited by hand" when the Studio wrote a version since).
        authors = service.authors_after(opts, thread_id=req.thread_id, resource_id=req.resource_id,
                                        when=req.as_of.created_at)
        ctx.note(processor_id, writtenSince=sorted(set(authors)))
        return value, "today's value (not the version in force at the turn)"
    if req.as_of is not None:
        # Replaying a stored turn: show the memory as it was then, not as it is now.
        historic = service.value_as_of(opts, thread_id=req.thread_id, resource_id=req.resource_id,
                                       when=req.as_of.created_at)
        if historic is not None:
            return historic, "as of the replayed turn (from the version history)"
        ctx.note(processor_id, unknown=["working memory at the time (shown: the current value)"])
        return value, "current value: this database keeps no working-memory history"
    if ctx.live:
        version_id = service.version_in_force(opts, thread_id=req.thread_id, resource_id=req.resource_id,
                                              text=value.text)
        if version_id is not None:
            ctx.note(processor_id, versionId=version_id)
        elif value.text:
            ctx.note(processor_id, unversionedText=value.text)
    return value, None


def value_to_show(
    ctx: ProcessorContext, options: WorkingMemoryOptions | None, processor_id: str, *, noted_as: str | None = None,
) -> tuple[WorkingMemoryOptions, WorkingMemoryValue, str | None] | None:
    """The options in force, the working memory the turn shows and its ``shown_value`` note; None after
    skipping ``processor_id`` with the reason (disabled, no thread or resource, unreadable memory).
    ``noted_as`` names the processor ``shown_value`` notes under (default ``processor_id``)."""
    req = ctx.request
    opts = options or req.options.working_memory
    if not opts.enabled:
        ctx.skip(processor_id, "working memory is disabled")
        return None
    if not req.thread_id and not req.resource_id:
        ctx.skip(processor_id, "neither a thread id nor a resource id was given")
        return None
    if opts.scope == "thread" and not req.thread_id:
        # Mastra shows its instruction with empty data here and offers the tool, whose every call then fails
        # ("Thread ID is required"): the model is told to keep notes it cannot keep. Neither is shown.
        ctx.skip(processor_id, NO_THREAD_FOR_THREAD_SCOPE)
        return None
    try:
        value, as_of_note = shown_value(ctx, opts, noted_as or processor_id)
    except WorkingMemoryError as exc:
        ctx.skip(processor_id, str(exc))
        return None
    return opts, value, as_of_note


class WorkingMemory(BaseProcessor):
    """``options`` replace the turn's ``working_memory`` options when given."""

    id = "working-memory"

    def __init__(self, options: WorkingMemoryOptions | None = None) -> None:
        self.options = options

    def process_input(self, ctx: ProcessorContext) -> None:
        shown = value_to_show(ctx, self.options, self.id)
        if shown is None:
            return
        opts, value, as_of_note = shown
        req = ctx.request
        text = instruction(opts, value.text, read_only=req.read_only)
        ctx.messages.add_system(
            text, "memory",
            Provenance(self.id, detail={"scope": value.scope, "owner": value.owner_id, "format": value.format,
                                        "empty": not value.text, "readOnly": req.read_only}),
        )
        offered = not req.read_only and opts.agent_managed
        if offered:
            ctx.tools.append(tool_definition(opts))
        ctx.note(self.id, scope=value.scope, owner=value.owner_id, tools=[tool_name(opts)] if offered else [],
                 **({"asOf": as_of_note} if as_of_note else {}))
