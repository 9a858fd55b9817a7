"""WorkingMemoryState: working memory delivered as a state message (``use_state_signals``, seed 004).

Instead of a system message rebuilt every turn, the memory reaches the model as a ``signal`` message
in the conversation (``metadata.state = {"id": "working-memory", "cacheKey": …}``), saved with the
turn like any input, so it is part of the thread's history:

- it is sent again only when it changed: a snapshot with the same ``cacheKey`` (sha256 of format and
  data) already in the context is not repeated;
- when the last snapshot has left the context (history moved on, or observational memory observed
  it), the current one is sent again;
- storage is the same as without signals (resource or thread working memory), and the update tool is
  offered as ``setWorkingMemory``, whose calls stay in the saved conversation as an audit record.

The snapshot is placed just before the turn's input. A read-only turn gets it as call-time context
(never saved).
"""

from __future__ import annotations

import hashlib
from datetime import timedelta

from core.message_list import Provenance
from core.messages import Message, text_part
from core.options import WorkingMemoryOptions
from core.processors.base import BaseProcessor, ProcessorContext
from core.processors.working_memory import value_to_show
from core.working_memory import tool_definition, tool_name

STATE_ID = "working-memory"


def cache_key(fmt: str, data: str | None) -> str:
    return hashlib.sha256(f"{fmt}\0{data or ''}".encode("utf-8")).hexdigest()[:16]


def state_text(opts: WorkingMemoryOptions, data: str | None, *, read_only: bool) -> str:
    """The snapshot the model reads (our wording)."""
    how = ("It is read-only in this session." if read_only else
           f"Keep it current with the {tool_name(opts)} tool, sending the whole memory each time; this snapshot "
           "is repeated only when it changes.")
    lines = [f'<state id="{STATE_ID}" format="{opts.mode}">',
             f"Your working memory: what you keep about the user across turns. {how}"]
    if opts.schema is None:
        lines += ["<working_memory_template>", opts.effective_template, "</working_memory_template>"]
    lines += ["<working_memory_data>", data if data else "null", "</working_memory_data>", "</state>"]
    return "\n".join(lines)


def snapshot_key(message: Message) -> str | None:
    """The ``cacheKey`` of a working-memory state message (None for any other message)."""
    state = message.metadata.get("state") if message.role == "signal" else None
    if isinstance(state, dict) and state.get("id") == STATE_ID:
        return str(state.get("cacheKey") or "")
    return None


class WorkingMemoryState(BaseProcessor):
    """``options`` replace the turn's ``working_memory`` options when given."""

    id = "working-memory-state"

    def __init__(self, options: WorkingMemoryOptions | None = None) -> None:
        self.options = options

    def process_input(self, ctx: ProcessorContext) -> None:
        # Noted under "working-memory": the turn record keeps the version in force from there.
        shown_now = value_to_show(ctx, self.options, self.id, noted_as="working-memory")
        if shown_now is None:
            return
        opts, value, _as_of = shown_now
        req = ctx.request
        offered = not req.read_only and opts.agent_managed
        if offered:
            ctx.tools.append(tool_definition(opts))
        key = cache_key(value.format, value.text)
        shown = [m for m in ctx.messages.messages() if snapshot_key(m) is not None]
        ctx.note(self.id, scope=value.scope, owner=value.owner_id, cacheKey=key,
                 tools=[tool_name(opts)] if offered else [])
        if shown and snapshot_key(shown[-1]) == key:
            ctx.skip(self.id, f"working memory unchanged: the snapshot in message {shown[-1].id} is still in the "
                     "context")
            return
        inputs = ctx.messages.messages("input")
        if not inputs:
            ctx.skip(self.id, "no input to place the snapshot before")
            return
        at = inputs[0].created_at - timedelta(milliseconds=1)
        earlier = [m.created_at for m in ctx.messages.messages("memory") if m.created_at >= at]
        if earlier:  # no room before the input (turns within one millisecond): sort by insertion instead
            at = inputs[0].created_at
        signal = Message.create("signal", [text_part(state_text(opts, value.text, read_only=req.read_only))],
                                thread_id=req.thread_id, resource_id=req.resource_id, created_at=at,
                                metadata={"state": {"id": STATE_ID, "cacheKey": key, "format": value.format}})
        source = "context" if req.read_only else "input"
        detail = {"scope": value.scope, "owner": value.owner_id, "cacheKey": key, "empty": not value.text}
        ctx.messages.remove([m.id for m in inputs])
        ctx.messages.add(signal, source, Provenance(self.id, detail=detail))  # type: ignore[arg-type]
        ctx.messages.add(inputs, "input", Provenance("input"))
        ctx.note(self.id, snapshot=signal.id, resent=bool(shown))


__all__ = ["STATE_ID", "WorkingMemoryState", "cache_key", "snapshot_key", "state_text"]
