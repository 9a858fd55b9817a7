"""The assembled prompt and its record: exactly what the model receives, and where each piece came from.

This is the one code path that turns a ``MessageList`` into model messages. The agent runtime sends
``AssembledPrompt.messages``; the Studio and the CLI render ``AssembledPrompt.fragments``. Neither
recomputes the prompt another way (Mastra #17797: the panel showed recall the model never got).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from core.ids import clipped
from core.message_list import MessageList
from core.messages import Message
from core.stored_text import json_text
from core.terminal_text import printable
from core.timeutil import to_iso
from core.tokens import REPLY_PRIMER, Tokenizer, count_message_tokens

if TYPE_CHECKING:  # pragma: no cover
    from core.replay.record import ReplayInfo


@dataclass
class Fragment:
    """One piece of the prompt: a system message, a conversation message, or the tool definitions."""

    index: int  # position among fragments
    role: str  # "system" | "user" | "assistant" | "tool" | "tools"
    text: str  # what the model reads (for tools: the JSON definitions)
    source: str  # processor id or "instructions" / "input" / "context" / "tools"
    kind: str  # "instructions" | "system" | "memory" | "input" | "context" | "tools"
    stored_ids: tuple[str, ...] = ()
    score: float | None = None
    tokens: int = 0
    tag: str | None = None
    message_indexes: tuple[int, ...] = ()  # which entries of ``messages`` this fragment became
    created_at: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    # Where ``text`` names a content part that is no text (an image, a file: ``part_note``), as [start, end)
    # character ranges, each a whole line: a user can type "[image_url: …]" too, so the text alone cannot tell a
    # note from what was typed; views style these apart. Not sent, not counted, not compared.
    part_notes: tuple[tuple[int, int], ...] = field(default=(), compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "role": self.role,
            "text": self.text,
            "source": self.source,
            "kind": self.kind,
            "storedIds": list(self.stored_ids),
            "score": self.score,
            "tokens": self.tokens,
            "tag": self.tag,
            "messageIndexes": list(self.message_indexes),
            "createdAt": self.created_at,
            "detail": self.detail,
            "partNotes": [list(span) for span in self.part_notes],
        }


@dataclass
class AssembledPrompt:
    messages: list[dict[str, Any]]  # OpenAI chat format, in order
    fragments: list[Fragment]
    skipped: dict[str, str]  # processor id -> why it added nothing
    tools: list[dict[str, Any]]
    tokenizer: str
    thread_id: str | None
    resource_id: str | None
    options: dict[str, Any]
    processors: list[str]  # input processors that ran, in order
    context_window: int
    notes: dict[str, dict[str, Any]] = field(default_factory=dict)
    message_list: MessageList | None = field(default=None, repr=False, compare=False)
    # Set when the prompt rebuilds a stored turn (``Memory.assemble(as_of=...)``): how, and whether
    # it matches what the model was sent (``core.replay.ReplayInfo``).
    replay: "ReplayInfo | None" = field(default=None, compare=False)
    # The whole request body of the model call this prompt went out as (``model``, ``messages``,
    # ``tools``, ``tool_choice``, every setting; ``stream`` / ``stream_options`` left out): set by the
    # agent for each call, and by a rebuild of a stored turn for its first call.
    request: dict[str, Any] | None = field(default=None, compare=False)
    # ``core.replay.record.request_hash(request)``, when whoever set ``request`` computed it already
    # (the agent does, for its span): the turn record then reuses it instead of hashing the body again.
    request_hash: str | None = field(default=None, compare=False, repr=False)

    @property
    def total_tokens(self) -> int:
        return sum(f.tokens for f in self.fragments) + REPLY_PRIMER

    def tokens_by_source(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for f in self.fragments:
            out[f.source] = out.get(f.source, 0) + f.tokens
        return out

    def fragments_from(self, source: str) -> list[Fragment]:
        return [f for f in self.fragments if f.source == source]

    def to_dict(self) -> dict[str, Any]:
        return {
            "threadId": self.thread_id,
            "resourceId": self.resource_id,
            "tokenizer": self.tokenizer,
            "totalTokens": self.total_tokens,
            "contextWindow": self.context_window,
            "tokensBySource": self.tokens_by_source(),
            "processors": self.processors,
            "skipped": self.skipped,
            "messages": self.messages,
            "tools": self.tools,
            "fragments": [f.to_dict() for f in self.fragments],
            "options": self.options,
            "notes": self.notes,
            **({"replay": {"kind": self.replay.kind, "matches": self.replay.matches,
                           "unknowns": list(self.replay.unknowns), "whatIf": self.replay.what_if,
                           "status": self.replay.status, "recordState": self.replay.record_state,
                           "recordError": self.replay.record_error,
                           "differences": list(self.replay.differences),
                           "calls": [{"request": c.request, "matches": c.matches, "usage": c.usage,
                                      "finishReason": c.finish_reason, "estimatedTokens": c.estimated_tokens}
                                     for c in self.replay.calls]}}
               if self.replay is not None else {}),
            **({"request": self.request} if self.request is not None else {}),
        }

    def to_json(self, **kw: Any) -> str:
        # Strict JSON (``jq``, ``JSON.parse``): a non-finite float in a message or a tool result is null.
        return json_text(self.to_dict(), ensure_ascii=False, indent=kw.pop("indent", 2), default=str, **kw)

    def openai_messages_json(self) -> str:
        return json_text(self.messages, ensure_ascii=False, indent=2)


def build_prompt(
    ml: MessageList,
    *,
    tokenizer: Tokenizer,
    tools: list[dict[str, Any]],
    skipped: dict[str, str],
    notes: dict[str, dict[str, Any]],
    options: dict[str, Any],
    processors: list[str],
    context_window: int,
) -> AssembledPrompt:
    messages: list[dict[str, Any]] = []
    fragments: list[Fragment] = []

    for entry in ml.system_entries():
        kind = "instructions" if entry.provenance.processor_id == "instructions" else (
            "memory" if entry.tag == "memory" or entry.provenance.processor_id not in ("system", "input", "context") else "system"
        )
        messages.append({"role": "system", "content": entry.text})
        fragments.append(
            Fragment(
                index=len(fragments), role="system", text=entry.text, source=entry.provenance.processor_id, kind=kind,
                stored_ids=entry.provenance.stored_ids, score=entry.provenance.score,
                tokens=count_message_tokens(tokenizer, entry.text), tag=entry.tag,
                message_indexes=(len(messages) - 1,), detail=dict(entry.provenance.detail),
            )
        )

    for conv in ml.conversation():  # a name of its own: ``entry`` above is a system entry
        # Stored history sends only tool calls with their results; this turn's own calls go as they are.
        wire = to_openai(conv.message, complete_calls_only=conv.source == "memory")
        if not wire:
            continue
        start = len(messages)
        messages.extend(wire)
        counted = [_counted_text(w) for w in wire]
        text, part_notes = joined_notes([shown_with_notes(w, c) for w, c in zip(wire, counted)])
        tokens = sum(count_message_tokens(tokenizer, c) for c in counted)
        kind = {"memory": "memory", "input": "input", "context": "context", "response": "input"}.get(conv.source, "system")
        fragments.append(
            Fragment(
                index=len(fragments), role=conv.message.role, text=text, source=conv.provenance.processor_id,
                kind=kind, stored_ids=conv.provenance.stored_ids or ((conv.message.id,) if conv.source == "memory" else ()),
                score=conv.provenance.score, tokens=tokens, message_indexes=tuple(range(start, len(messages))),
                created_at=_iso(conv.message.created_at), detail={"messageId": conv.message.id, **conv.provenance.detail},
                part_notes=part_notes,
            )
        )

    if tools:
        text = json_text(tools, ensure_ascii=False)
        fragments.append(
            Fragment(
                index=len(fragments), role="tools", text=text, source=_tool_source(tools, notes), kind="tools",
                tokens=tokenizer.count(text), detail={"names": [t["function"]["name"] for t in tools]},
            )
        )

    return AssembledPrompt(
        messages=messages, fragments=fragments, skipped=dict(skipped), tools=list(tools), tokenizer=tokenizer.name,
        thread_id=ml.thread_id, resource_id=ml.resource_id, options=options, processors=processors,
        # Each processor's notes are copied, so a later call's record never changes this one.
        context_window=context_window, notes={k: dict(v) for k, v in notes.items()}, message_list=ml,
    )


#: ``to_iso``, remembered: its text depends on the instant alone, and a prompt's history repeats the
#: last turn's times (~5 µs a fragment).
_iso = lru_cache(maxsize=4096)(to_iso)


def message_tokens(tokenizer: Tokenizer, message: Message) -> int:
    """What one stored conversation message costs in the prompt, counted as ``build_prompt`` counts it."""
    return sum(count_message_tokens(tokenizer, _counted_text(w)) for w in to_openai(message, complete_calls_only=True))


def _tool_source(tools: list[dict[str, Any]], notes: dict[str, dict[str, Any]]) -> str:
    owners = {name for pid, n in notes.items() for name in n.get("tools", ())}
    names = {t["function"]["name"] for t in tools}
    if names and names <= owners:
        return next(pid for pid, n in notes.items() if n.get("tools"))
    return "tools"


def _counted_text(message: Mapping[str, Any]) -> str:
    """An outgoing chat message as plain text (its token count; its fragment shows it with ``shown_text``): text
    parts, tool calls."""
    content = message.get("content")
    if isinstance(content, list):
        text = " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    else:
        text = content or ""
    if message.get("tool_calls"):
        calls = json_text(message["tool_calls"], ensure_ascii=False)
        text = f"{text}\n{calls}" if text else calls
    return text


def shown_text(message: Mapping[str, Any], text: str | None = None) -> str:
    """An outgoing chat message as its fragment shows it: ``text`` (its counted text, ``_counted_text``, when not
    given) and a line naming each content part that is no text (an image and its URL, a file, audio), which the
    model was sent as well: a fragment's text alone would show a turn with an image as if it had been text only.
    The parts are not counted in its tokens (an estimate of text). ``shown_with_notes`` says where the notes are."""
    return shown_with_notes(message, text)[0]


#: A [start, end) character range of a fragment's text (``Fragment.part_notes``).
Span = tuple[int, int]


def shown_with_notes(message: Mapping[str, Any], text: str | None = None) -> tuple[str, tuple[Span, ...]]:
    """``shown_text`` and where in it each part note is (a line of its own, after the text)."""
    text = _counted_text(message) if text is None else text
    content = message.get("content")
    notes = [part_note(p) for p in content if isinstance(p, Mapping) and not _is_text(p)] \
        if isinstance(content, list) else []
    if not notes:
        return text, ()
    lines = [text, *notes] if text else notes
    spans, at = [], len(text) + 1 if text else 0
    for note in notes:
        spans.append((at, at + len(note)))
        at += len(note) + 1
    return "\n".join(lines), tuple(spans)


def joined_notes(pieces: Sequence[tuple[str, tuple[Span, ...]]]) -> tuple[str, tuple[Span, ...]]:
    """Texts with their part notes (``shown_with_notes``) joined by a new line, as one fragment shows them."""
    spans: list[Span] = []
    at = 0
    for text, notes in pieces:
        spans.extend((start + at, end + at) for start, end in notes)
        at += len(text) + 1
    return "\n".join(text for text, _ in pieces), tuple(spans)


def _is_text(part: Mapping[str, Any]) -> bool:
    """Whether a content part is text alone: a string ``text`` and a type that says text (``text``, ``input_text``,
    ``output_text``) or none. An image part that also carries a ``text`` is an image (its note says so)."""
    kind = part.get("type")
    return isinstance(part.get("text"), str) and (kind is None or kind == "text" or str(kind).endswith("_text"))


def part_note(part: Mapping[str, Any]) -> str:
    """A content part that is no text, as ``shown_text`` names it: ``[image_url: <its URL>]`` (a data URL cut to its
    first 80 characters and its length), ``[input_audio: wav]``, ``[file: report.pdf]``, else ``[<its type>]``. What it
    quotes is written as ``printable`` writes it: a new line or a bidi override in a URL would show as a line the
    model was not sent, or turn the text after it around."""
    kind = clipped(str(part.get("type") or "part"))
    value = part.get(kind) if kind in part else part.get("image_url") or part.get("filename") or part.get("file_id")
    if isinstance(value, Mapping):
        value = value.get("url") or value.get("filename") or value.get("format") or value.get("file_id")
    return printable(f"[{kind}: {clipped(value)}]" if isinstance(value, str) and value else f"[{kind}]")


def to_openai(message: Message, *, complete_calls_only: bool = False) -> list[dict[str, Any]]:
    """One stored message as OpenAI chat messages.

    An assistant message that called tools becomes: assistant(tool_calls) → tool(result) … →
    assistant(text). Reasoning, step markers and data parts are UI-only and are not sent back.
    ``complete_calls_only`` (history): a tool call without its result (state ``call``: a client-side
    tool never answered, a run cut short) is left out, as Mastra leaves incomplete calls out of the
    prompts it sends; OpenAI refuses a ``tool_calls`` message that no tool message answers.
    """
    if message.role in ("user", "signal"):
        return [_user(message, _signal_markup(message) if message.role == "signal" else None)]
    if message.role == "system":
        return [{"role": "system", "content": message.text}]
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []

    def flush() -> None:
        nonlocal texts, calls, results
        if calls:
            out.append({"role": "assistant", "content": "\n".join(texts) or None, "tool_calls": calls})
            out.extend(results)
        elif texts:
            out.append({"role": "assistant", "content": "\n".join(texts)})
        texts, calls, results = [], [], []

    for part in _with_legacy_calls(message):
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("text"), str) and part["text"]:
            if calls:
                flush()
            texts.append(part["text"])
        elif kind == "tool-invocation":
            inv = part.get("toolInvocation") or {}
            if inv.get("state") == "partial-call" or (complete_calls_only and inv.get("state") != "result"):
                continue
            call_id = str(inv.get("toolCallId"))
            calls.append({
                "id": call_id, "type": "function",
                "function": {"name": inv.get("toolName"), "arguments": json_text(inv.get("args") or {}, ensure_ascii=False)},
            })
            if inv.get("state") == "result":
                # A result's NaN or Infinity is null, as its stored row holds it: a live turn's call and
                # its rebuild from the database send the same text (and the model reads JSON).
                result = inv.get("result")
                results.append({
                    "role": "tool", "tool_call_id": call_id,
                    "content": result if isinstance(result, str) else json_text(result, ensure_ascii=False, default=str),
                })
    flush()
    if not out and message.content.get("content"):
        out.append({"role": "assistant", "content": message.content["content"]})
    return out


def _with_legacy_calls(message: Message) -> list[dict[str, Any]]:
    """The parts an assistant message is sent from. A message whose parts hold no tool invocation but
    whose ``toolInvocations`` field does (AI SDK v4 clients and older Mastra versions wrote calls only
    there; Mastra's working-memory hiding leaves that field as it was) is sent with those calls first,
    then its parts, as Mastra builds its prompt from such a row."""
    parts = message.parts
    legacy = message.content.get("toolInvocations") if isinstance(message.content, dict) else None
    if not isinstance(legacy, list) or not legacy or any(p.get("type") == "tool-invocation" for p in parts):
        return parts
    calls = [{"type": "tool-invocation", "toolInvocation": inv} for inv in legacy
             if isinstance(inv, dict) and isinstance(inv.get("toolName"), str)]
    return [*calls, *parts]


# Mastra's signal types and the XML tag each is sent in (a stored ``tagName`` wins); "user" is plain text.
_SIGNAL_KINDS = {"user-message": ("user", "user"), "system-reminder": ("reactive", "system-reminder"),
                 "reactive": ("reactive", "system-reminder"), "user": ("user", "user"), "state": ("state", "state"),
                 "notification": ("notification", "notification")}
_XML_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


def _xml_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _signal_markup(message: Message) -> str | None:
    """The text Mastra sends for a signal it stored (``metadata.signal``): a reminder, notification or
    state signal goes to the model wrapped in its tag, ``<system-reminder>text</system-reminder>``
    (with its attributes; ``<tag />`` when it has no text); a user signal without attributes goes as its
    text (None here). Our own signals (the working-memory state message) carry their markup already."""
    signal = message.metadata.get("signal")
    if not isinstance(signal, dict):
        return None
    stored = signal.get("type")
    if not isinstance(stored, str):
        stored = message.type or "user-message"
    kind: str = stored
    tag: str | None = None
    if stored in _SIGNAL_KINDS:
        kind, tag = _SIGNAL_KINDS[stored]
    if isinstance(signal.get("tagName"), str):
        tag = signal["tagName"]
    attributes = signal.get("attributes")
    attrs = [(str(k), v) for k, v in attributes.items() if v is not None] if isinstance(attributes, dict) else []
    if (kind == "user" and not attrs) or tag is None or not _XML_NAME.match(tag) \
            or not all(_XML_NAME.match(k) for k, _ in attrs):
        return None  # (Mastra refuses a signal it cannot name: it goes as plain text here)
    attr_xml = "".join(f' {k}="{_xml_escape(_attribute_text(v)).replace(chr(34), "&quot;")}"' for k, v in attrs)
    legacy = signal.get("contents")
    texts = [p["text"] for p in message.parts if p.get("type") == "text" and isinstance(p.get("text"), str)]
    contents = legacy if isinstance(legacy, str) else "\n".join(texts)
    return f"<{tag}{attr_xml}>{_xml_escape(contents)}</{tag}>" if contents else f"<{tag}{attr_xml} />"


def _attribute_text(value: Any) -> str:
    # As JavaScript's String(value) writes a scalar.
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _user(message: Message, text: str | None = None) -> dict[str, Any]:
    # What a user message carries besides its text, in the order it is sent: "file" parts (format 2),
    # "image" parts (the AI SDK's core shape, which clients sometimes store as they are) and
    # ``experimental_attachments`` (where AI SDK v4 clients, and so Mastra, keep a message's attachments).
    files: list[tuple[str, str, str | None]] = []  # (media type, data or URL, file name)
    for p in message.parts:
        if p.get("type") == "file":
            files.append((str(p.get("mimeType") or p.get("mediaType") or ""), str(p.get("data") or p.get("url") or ""),
                          p.get("filename")))
        elif p.get("type") == "image" and isinstance(p.get("image"), str):
            files.append((str(p.get("mimeType") or p.get("mediaType") or "image/png"), p["image"], None))
    # Attachments count only when the parts hold no "file" part: a client that stores both keeps the
    # same files twice, and Mastra then sends the file parts alone (each image once).
    has_file_part = any(p.get("type") == "file" for p in message.parts)
    attachments = message.content.get("experimental_attachments") if isinstance(message.content, dict) else None
    for a in attachments if isinstance(attachments, list) and not has_file_part else ():
        if isinstance(a, dict) and isinstance(a.get("url"), str):
            files.append((str(a.get("contentType") or ""), a["url"], a.get("name")))
    text = message.text if text is None else text
    if not files:
        return {"role": "user", "content": text}
    content: list[dict[str, Any]] = []
    if text:
        content.append({"type": "text", "text": text})
    for mime, data, filename in files:
        if mime.startswith("image/"):
            url = data if data.startswith(("http", "data:")) else f"data:{mime};base64,{data}"
            content.append({"type": "image_url", "image_url": {"url": url}})
        else:
            content.append({"type": "text", "text": f"[file {filename or ''} ({mime})]"})
    return {"role": "user", "content": content}
