"""What one model call sent, laid out for the Replay pane and the prompt inspector (no Qt, no I/O).

A call's request is the whole body the server received (``CallReplay.request``, ``AssembledPrompt.request``):
the model's name, the messages, every tool definition, the tool choice, every sampling setting and
the response format. Besides its messages (shown elsewhere), this lays out the model and endpoint, each
setting, each tool definition with its own token count (collapsible in the view), and the usage the
server reported beside our o200k_base estimate, each labelled, so three numbers for one prompt never
appear without saying what they are.

Token counts need the tokenizer: build these views on a worker (``studio.replay_jobs``,
``studio.reads``), never on the UI thread.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from core import AssembledPrompt
from core.replay import CallReplay, ReplayInfo, TurnRecord
from core.replay.wire import call_bytes, not_bytes_reason
from core.tokens import Tokenizer

NOT_RECORDED = "not recorded"
NOT_STREAMED = "not sent: the reply came whole"
TOOLS_AS_SENT = "Tool definitions (as sent)"
#: A preview knows only the tools memory adds (updateWorkingMemory...): an agent's own tools are not
#: registered with its memory configuration, so they cannot be listed or counted here.
TOOLS_OF_MEMORY = "Tool definitions (memory's own; the agent adds its own)"
#: A stored turn rebuilt without a record: the tools it was offered are not known; the list is memory's own.
TOOLS_NOT_RECORDED = "Memory's tools (others not recorded)"
SERVER = "Server-reported"
ESTIMATE = "Our estimate (o200k_base)"
_BODY_PARTS = ("model", "messages", "tools", "tool_choice", "instructions", "input")  # (a Responses call: the last two)
#: A call of another framework's turn taken from its trace (``CallRecord.partial``): what it does not know.
PARTIAL = "not recorded (taken from the agent framework's trace, which holds the model and messages only)"
#: What "Copy Request Body" copies, on its button: the exact bytes the server received, or (when they are
#: not knowable: ``core.replay.wire.not_bytes_reason``) the body as JSON, which is not those bytes.
COPY_BYTES = "Copy Request Body (exact bytes)"
COPY_JSON = "Copy Request Body (JSON, not bytes)"
COPY_READABLE = "Copy as Indented JSON (for reading)"
#: The title of a preview's observer call (``observer_call_view``), which the next turn makes before its own.
OBSERVER_CALL = "Observer call"


@dataclass(frozen=True)
class ToolRow:
    """One tool definition as sent: its name, description, JSON-schema parameters and token count."""

    name: str
    description: str
    parameters: str  # the JSON schema, indented for reading
    tokens: int  # o200k_base tokens of the definition's JSON
    definition: str  # the definition exactly as sent (compact JSON)


@dataclass(frozen=True)
class UsageRow:
    what: str
    server: str  # what the server reported ("not reported" when it said nothing)
    estimate: str  # our o200k_base count ("—" where we count nothing)


@dataclass(frozen=True)
class RequestView:
    """A call's request beside its messages: what the request view shows."""

    title: str  # "Model call 2 of 3"
    status: str  # how the body compares with the record, in words
    model: str
    endpoint: str
    settings: list[tuple[str, str]]  # (setting, value as sent)
    tools: list[ToolRow]
    tools_tokens: int  # the tool definitions as the prompt counts them (one JSON text)
    usage: list[UsageRow]
    request: Mapping[str, Any]  # the whole request body
    notes: list[str] = field(default_factory=list)
    tools_label: str = TOOLS_AS_SENT  # the tool list's heading
    #: The exact bytes the server received (``core.replay.wire.call_bytes``: the body with its ``stream``
    #: keys, serialised as its model did); None when not knowable, ``bytes_note`` then says why.
    wire: bytes | None = None
    bytes_note: str | None = None

    @property
    def body(self) -> str:
        """The whole request body as indented JSON, for reading (made on demand: a long conversation
        makes it large). Not the bytes sent: keys, spaces and escapes may differ (``copy_text``)."""
        return json.dumps(self.request, ensure_ascii=False, indent=2)

    @property
    def exact_bytes(self) -> bool:
        return self.wire is not None

    @property
    def copy_text(self) -> str:
        """What "Copy Request Body" copies: the exact bytes the server received (UTF-8 text, with
        ``stream`` / ``stream_options`` where they were sent), else the body as indented JSON."""
        return self.wire.decode("utf-8") if self.wire is not None else self.body

    @property
    def copy_label(self) -> str:
        return COPY_BYTES if self.wire is not None else COPY_JSON

    @property
    def copy_tip(self) -> str:
        if self.wire is not None:
            return ("Copy the exact bytes the server received for this call (UTF-8, byte for byte, with stream "
                    "and stream_options as sent). The view here is laid out for reading; "
                    "its menu's Copy as Indented JSON copies the body indented.")
        return f"Copy the whole request body as indented JSON: {self.bytes_note or 'not the bytes sent'}."

    @property
    def copy_line(self) -> str:
        """The line under the title that says what the copy is."""
        if self.wire is not None:
            return f"Copy Request Body: the exact bytes sent ({len(self.wire):,} bytes); the view is laid out for reading"
        return f"Copy Request Body: {self.bytes_note or 'the body as JSON, not the bytes sent'}"

    @property
    def summary(self) -> str:
        """One line: model, endpoint, settings, tools."""
        settings = ", ".join(f"{k} {v}" for k, v in self.settings) or "none"
        return (f"{self.model} at {self.endpoint} · settings: {settings} · {len(self.tools)} tool definition"
                f"{'s' if len(self.tools) != 1 else ''} ({self.tools_tokens:,} tokens)")


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


_TOOL_ROWS: dict[tuple[str, str], ToolRow] = {}  # (tokenizer, definition) -> row: an agent's tools repeat every turn


def tool_rows(tools: Sequence[Mapping[str, Any]], tokenizer: Tokenizer) -> list[ToolRow]:
    out = []
    for definition in tools:
        text = json.dumps(definition, ensure_ascii=False, separators=(",", ":"))
        key = (tokenizer.name, text)
        row = _TOOL_ROWS.get(key)
        if row is None:
            function = definition.get("function") if isinstance(definition.get("function"), Mapping) else {}
            assert isinstance(function, Mapping)
            row = ToolRow(str(function.get("name", "?")), str(function.get("description", "")),
                          json.dumps(function.get("parameters", {}), ensure_ascii=False, indent=2),
                          tokenizer.count(json.dumps(definition, ensure_ascii=False)), text)
            if len(_TOOL_ROWS) > 512:
                _TOOL_ROWS.clear()
            _TOOL_ROWS[key] = row
        out.append(row)
    return out


def _tools_tokens(prompt: AssembledPrompt) -> int:
    return sum(f.tokens for f in prompt.fragments if f.kind == "tools")


def call_view(prompt: AssembledPrompt, tokenizer: Tokenizer, index: int = 0) -> RequestView:
    """Call ``index`` of a rebuilt turn (``prompt.replay.calls``), or the one request a preview would send."""
    info = prompt.replay
    calls = info.calls if info is not None else ()
    call: CallReplay | None = calls[index] if 0 <= index < len(calls) else None
    record: TurnRecord | None = info.record if info is not None else None
    shown = call.prompt if call is not None else prompt
    body: Mapping[str, Any] = call.request if call is not None else (prompt.request or {
        "messages": prompt.messages, **({"tools": prompt.tools} if prompt.tools else {})})
    recorded = call is not None and call.record is not None
    wire = call_bytes(info, call)  # the exact bytes sent, when knowable (with the stream keys in them)
    partial = call is not None and call.record is not None and call.record.partial
    settings = [(k, _value(v)) for k, v in body.items() if k not in _BODY_PARTS]
    if partial:
        settings = [("settings, tool choice and tools", PARTIAL)]
    elif recorded and not settings:
        settings.append(("sampling settings", "none sent: the server's defaults"))
    if recorded and record is not None:
        # Outside the body (and its hash): how the replies travelled, as the record kept it.
        if record.transport:
            where = "in the bytes copied, not in the JSON" if wire is not None else "not in Copy Request Body"
            settings += [(k, f"{_value(v)} (how the reply travels; {where})") for k, v in record.transport.items()]
        else:
            settings.append(("stream", NOT_STREAMED if record.transport is not None else
                             "not recorded (records before stream options were kept)"))
    if "tool_choice" in body:
        settings.insert(0, ("tool_choice", _value(body["tool_choice"])))
    elif recorded and body.get("tools"):
        settings.insert(0, ("tool_choice", "not sent: the server's default (auto)"))
    notes: list[str] = []
    if not recorded:
        if info is None:
            notes.append("A preview: the model, its settings and the tool choice are the agent's, chosen when it "
                         "sends the prompt.")
            notes.append("The tool definitions listed are memory's own; an agent sends its own tools too, which "
                         "are not listed or counted here (a stored turn's request shows every tool it sent).")
        else:
            notes.append("This turn's record does not keep its model settings and tool choice"
                         + (" (it was recorded before records kept them)." if record is not None else
                            " (it has no usable record)."))
    if info is not None:
        # What the turn's calls do not say (a record that lost its later calls): beside every call shown.
        notes += [d for d in info.differences if not any(d in c.differences for c in calls)]
        notes += info.unchecked  # a record written before its endpoint, model, usage... were covered
    usage = call.usage if call is not None else None
    total = len(calls) or 1
    return RequestView(
        title=f"Model call {index + 1} of {total}",
        status=_status(call, info),
        model=str(body.get("model") or (record.model if record is not None and record.model else NOT_RECORDED)),
        endpoint=(record.endpoint if record is not None and record.endpoint else
                  "none (a model called in process)" if recorded else NOT_RECORDED),
        settings=settings if recorded else settings or [("settings", NOT_RECORDED)],
        tools=tool_rows(body.get("tools") or shown.tools, tokenizer),
        tools_tokens=_tools_tokens(shown),
        usage=usage_rows(usage, shown.total_tokens, call.finish_reason if call is not None else None),
        request=body,
        notes=notes,
        tools_label=TOOLS_AS_SENT if recorded else TOOLS_NOT_RECORDED if info is not None else TOOLS_OF_MEMORY,
        wire=wire,
        bytes_note=not_bytes_reason(info, call),
    )


def observer_calls(first: Mapping[str, Any]) -> tuple[int, str]:
    """How many observer calls an ``observeFirst`` note says the turn makes, and "about " when that is a forecast
    (the observer's window known: ``OMJob.calls_left``); a note written before ``calls``: its planned batches."""
    calls = first.get("calls")
    if not isinstance(calls, int) or isinstance(calls, bool) or calls < 1:
        calls = len([n for n in first.get("batches") or ()]) or 1
    return calls, "about " if first.get("callsForecast") and calls > 1 else ""


def observer_call_view(prompt: AssembledPrompt) -> RequestView | None:
    """A preview's observer call: the request of the first observer call the next turn makes before its own model
    call (the ``observeFirst`` note's ``firstRequest``, built by the turn's own code), None when it makes none."""
    om = prompt.notes.get("observational-memory") or {}
    first = om.get("observeFirst") if isinstance(om, Mapping) else None
    if not isinstance(first, Mapping):
        return None
    request = first.get("firstRequest")
    if not isinstance(request, Mapping) or not isinstance(request.get("messages"), list):
        return None
    batches = [int(n) for n in first.get("batches") or ()] or [1]
    body: dict[str, Any] = {"messages": request["messages"], "temperature": request.get("temperature")}
    if request.get("maxTokens") is not None:
        body["max_tokens"] = request["maxTokens"]
    calls, about = observer_calls(first)
    more = calls - 1
    window = request.get("window")
    notes = [f"The first of {about}{calls} observer calls: {batches[0]} message(s), "
             f"{int(request.get('messageTokens') or 0):,} message tokens; "
             + (f"{about}{more} more batch{'es' if more != 1 else ''} after this one (max_tokens_per_batch "
                f"{int(request.get('maxTokensPerBatch') or 0):,}), each made from what the one before stored."
                if more else "no other batch."),
             f"Fitted to the observer's {int(window):,}-token context window"
             + (": how many messages each later call fits depends on the observations the calls before it store, so "
                "their number is a forecast." if about else ".") if window else
             "No context window is known for the observer, so only max_tokens_per_batch cuts its calls.",
             *([f"Its one message is over that window on its own: the observer is sent its beginning and its end, "
                f"{int(request['leftOut']):,} characters between them left out (a line in the message says so); the "
                "stored message stays whole."] if request.get("leftOut") else []),
             "The messages are exactly what the observer will receive; the model, its endpoint and other settings "
             "are the observer's, chosen when the turn sends it."]
    return RequestView(
        title=f"{OBSERVER_CALL} 1 of {about}{calls}",
        status="preview: the observer's first call, which the next turn makes before its own model call",
        model="the observer model (the agent's own unless observer_model names another)",
        endpoint="the observer model's",
        settings=[(k, _value(v)) for k, v in body.items() if k != "messages"],
        tools=[], tools_tokens=0,
        usage=usage_rows(None, int(request.get("tokens") or 0), None),
        request=body, notes=notes, tools_label="Tool definitions (the observer is sent none)",
        bytes_note="not the bytes: the observer's client serialises the body when the turn sends it")


def usage_rows(usage: Mapping[str, int] | None, estimate: int, finish_reason: str | None) -> list[UsageRow]:
    """The usage the server reported beside our o200k_base estimate of the prompt, each labelled."""
    reported = usage is not None
    return [
        UsageRow("Prompt tokens", f"{usage['prompt_tokens']:,}" if reported and usage else "not reported",
                 f"{estimate:,}"),
        UsageRow("Reply tokens", f"{usage['completion_tokens']:,}" if reported and usage else "not reported", "—"),
        UsageRow("Finish reason", finish_reason or ("not reported" if not reported else "—"), "—"),
    ]


def _status(call: CallReplay | None, info: ReplayInfo | None) -> str:
    if info is None:
        return "preview: what the engine would send now"
    if call is None or call.record is None:
        return info.status
    if info.what_if:
        return info.status
    if call.matches and call.record.partial:
        return "the messages match the record; its tools and settings were " + PARTIAL
    if call.matches:
        return "the whole request matches the record (exact)"
    return "; ".join(call.differences) or "differs from the record"


__all__ = ["COPY_BYTES", "COPY_JSON", "COPY_READABLE", "ESTIMATE", "NOT_RECORDED", "OBSERVER_CALL", "PARTIAL",
           "SERVER", "TOOLS_AS_SENT", "TOOLS_NOT_RECORDED", "TOOLS_OF_MEMORY", "RequestView", "ToolRow", "UsageRow",
           "call_view", "observer_call_view", "observer_calls", "tool_rows", "usage_rows"]
