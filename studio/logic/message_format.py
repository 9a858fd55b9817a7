"""How a stored message reads in the Studio: a one-line summary for the list, HTML for the detail.

Pure functions over ``core.messages.Message``; no Qt. The list view shows ``MessageRow`` values built
on a worker thread, so painting never parses JSON.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Mapping

from studio.logic.dates import format_datetime

if TYPE_CHECKING:  # pragma: no cover - the message list imports this before the window's first paint
    from core.messages import Message

PREVIEW_CHARS = 400  # the list shows two lines; the rest is in the detail view
MAX_DETAIL_CHARS = 200_000  # a multi-megabyte tool result must not stall the UI thread

ROLE_COLOURS = {
    "user": "#4f9cf7",
    "assistant": "#3fb27f",
    "system": "#9aa0a6",
    "signal": "#e8a33d",
    "tool": "#b48ead",
}


@dataclass(frozen=True)
class MessageRow:
    """What one list row shows. ``kinds`` lists the part types in order (for the part badges)."""

    id: str
    role: str
    created_at: datetime
    preview: str
    kinds: tuple[str, ...]
    message: Message | None  # None when the stored row could not be read
    error: str | None = None
    edited: bool = False  # changed since it was stored (it has versions: Edit > Message History…)


def part_kind(part: dict[str, Any]) -> str:
    kind = str(part.get("type", "?"))
    return "data" if kind.startswith("data-") else kind


def summarize_part(part: dict[str, Any]) -> str:
    kind = str(part.get("type", "?"))
    if kind == "text":
        return str(part.get("text", ""))
    if kind == "reasoning":
        return "(thinking) " + str(part.get("reasoning") or _details_text(part))
    if kind == "tool-invocation":
        inv = part.get("toolInvocation") or {}
        call = f"{inv.get('toolName', '?')}({compact(inv.get('args', {}), 80)})"
        if "result" in inv:
            return f"{call} → {compact(inv.get('result'), 120)}"
        return f"{call} …"
    if kind == "file":
        return f"[{part.get('filename') or 'file'} · {part.get('mimeType') or part.get('mediaType') or '?'}]"
    if kind.startswith("data-"):
        said = om_marker_text(kind, part.get("data"))
        return f"[{said}]" if said else f"{{{kind}}} {compact(part.get('data'), 120)}"
    if kind == "step-start":
        return ""
    if kind in ("source", "source-url", "source-document"):
        source = part.get("source")
        src = source if isinstance(source, dict) else part
        return f"[source: {src.get('title') or src.get('url') or kind}]"
    if kind == "error":
        return f"[error] {compact(part.get('error') or part.get('text'), 120)}"
    return f"[{kind}]"


#: The largest token count a marker's words give in full; a bigger one (only a damaged or crafted row holds one)
#: reads "more than 10¹⁵", not thousands of digits (Python refuses past 4,300 of them).
MOST_TOKENS_SHOWN = 10**15


def _tokens(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        return "?"
    return f"{value:,}" if abs(value) <= MOST_TOKENS_SHOWN else ("more than 10¹⁵" if value > 0 else "less than -10¹⁵")


def om_marker_text(kind: str, data: Any) -> str | None:
    """What one of Mastra's observational-memory markers says, in words (None: not one of them). Mastra 1.71
    keeps a turn's markers (``data-om-observation-start`` / ``-end`` / ``-failed``, the ``buffering`` ones,
    ``activation``, ``thread-update``) in the assistant message before the reply's text; the model never reads
    them, and shown as JSON they filled the list's two lines, the reply out of sight."""
    if not kind.startswith("data-om-") or not isinstance(data, Mapping):
        return None
    event = kind[len("data-om-"):]
    reflecting = data.get("operationType") == "reflection"
    if event == "observation-start":
        return f"{'reflecting on' if reflecting else 'observing'} {_tokens(data, 'tokensToObserve')} tokens"
    if event == "observation-end":
        return (f"{'reflected on' if reflecting else 'observed'} {_tokens(data, 'tokensObserved')} tokens → "
                f"{_tokens(data, 'observationTokens')} tokens of observations")
    if event in ("observation-failed", "buffering-failed"):
        what = "buffering" if event == "buffering-failed" else "reflection" if reflecting else "observation"
        return f"{what} failed: {compact(data.get('error'), 100)}"
    if event == "buffering-start":
        return f"buffering {_tokens(data, 'tokensToBuffer')} tokens"
    if event == "buffering-end":
        return (f"buffered {_tokens(data, 'tokensBuffered')} tokens → {_tokens(data, 'bufferedTokens')} tokens "
                "of observations")
    if event == "activation":
        return (f"activated {_tokens(data, 'chunksActivated')} buffered chunk(s): "
                f"{_tokens(data, 'observationTokens')} tokens of observations")
    if event == "thread-update":
        return f"title {_title(data.get('oldTitle'))} → {_title(data.get('newTitle'))}"
    return None


def _settled_starts(parts: list[dict[str, Any]]) -> set[str]:
    """Cycle ids of the marker pairs a message holds whole: their start says nothing the end does not."""
    ends = {"data-om-observation-end", "data-om-observation-failed", "data-om-buffering-end",
            "data-om-buffering-failed"}
    return {str(p["data"]["cycleId"]) for p in parts
            if p.get("type") in ends and isinstance(p.get("data"), Mapping) and p["data"].get("cycleId")}


def _is_settled_start(part: dict[str, Any], settled: set[str]) -> bool:
    data = part.get("data")
    return (part.get("type") in ("data-om-observation-start", "data-om-buffering-start")
            and isinstance(data, Mapping) and str(data.get("cycleId")) in settled)


def _leaves(value: Any) -> list[str]:
    """The values a person reads in a JSON value: strings and numbers, never its keys or punctuation."""
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    if isinstance(value, str):
        return [value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [str(value)]
    return []


def part_search_text(part: dict[str, Any]) -> str:
    """What a search across messages looks in for one part: what the Studio shows of it, whole (never
    the stored JSON's field names, part types or a file's encoded bytes)."""
    kind = str(part.get("type", "?"))
    if kind == "text":
        return str(part.get("text", ""))
    if kind == "reasoning":
        return str(part.get("reasoning") or "") + " " + _details_text(part)
    if kind == "tool-invocation":
        inv = part.get("toolInvocation") or {}
        return " ".join([str(inv.get("toolName", "")), *_leaves(inv.get("args")), *_leaves(inv.get("result"))])
    if kind == "file":
        return " ".join(str(part.get(k) or "") for k in ("filename", "mimeType", "mediaType"))
    if kind == "step-start":
        return ""
    if kind.startswith("data-"):
        return " ".join(_leaves(part.get("data")))
    return " ".join(_leaves({k: v for k, v in part.items() if k != "type"}))


def shown_parts(message: Message) -> list[dict[str, Any]]:
    """The parts the Studio shows for a message: its parts, with the tool calls kept only in the legacy
    ``content.toolInvocations`` field first (AI SDK v4 clients and older Mastra versions wrote calls only
    there, and Mastra's working-memory hiding leaves that field as it was) when no part is a tool
    invocation: the rule ``core.prompt`` sends such a message to the model by, so the list shows the calls
    the model received (a call still waiting for its result is shown too, as any unanswered call is); and
    a user message's ``experimental_attachments`` after its parts when no part is a file (the prompt's
    rule for them too)."""
    parts = message.parts
    content = message.content if isinstance(message.content, dict) else {}
    attachments = content.get("experimental_attachments")
    if message.role == "user" and isinstance(attachments, list) and not any(p.get("type") == "file" for p in parts):
        # A user message's files kept only as attachments (AI SDK v4 clients, Mastra): the prompt sends
        # them after the text when no part is a file, so they are shown there, as file parts are.
        parts = [*parts, *({"type": "file", "filename": a.get("name"), "mimeType": a.get("contentType"),
                            "data": a["url"]} for a in attachments
                           if isinstance(a, dict) and isinstance(a.get("url"), str))]
    legacy = content.get("toolInvocations")
    if not isinstance(legacy, list) or not legacy or any(p.get("type") == "tool-invocation" for p in parts):
        return parts
    calls = [{"type": "tool-invocation", "toolInvocation": inv} for inv in legacy
             if isinstance(inv, dict) and isinstance(inv.get("toolName"), str)]
    return [*calls, *parts]


def search_text(message: Message) -> str:
    """A message's searchable text: its parts as read (``part_search_text``), else its plain text."""
    pieces = [t for t in (part_search_text(p) for p in shown_parts(message)) if t.strip()]
    return "\n".join(pieces) if pieces else message.text


INVALID_UTF8_NOTE = "stored text is not valid UTF-8; the unreadable bytes are shown as \ufffd"


def summarize(message: Message) -> MessageRow:
    parts = shown_parts(message)
    settled = _settled_starts(parts)
    pieces = [s for s in (summarize_part(p) for p in parts if not _is_settled_start(p, settled)) if s]
    if not pieces and message.text:
        pieces = [message.text]
    preview = " · ".join(" ".join(p.split()) for p in pieces)
    if len(preview) > PREVIEW_CHARS:  # cut here: the list's "…" says so even where two lines hold it all
        preview = preview[:PREVIEW_CHARS - 1].rstrip() + "…"
    kinds = tuple(part_kind(p) for p in parts if p.get("type") != "step-start")
    if message.invalid_utf8:  # readable, but not as stored: say so in the list and the detail
        return MessageRow(message.id, message.role, message.created_at, f"[partly unreadable] {preview}",
                          ("error", *kinds), message, INVALID_UTF8_NOTE)
    return MessageRow(message.id, message.role, message.created_at, preview, kinds, message)


def unreadable_row(row_id: str, role: str, created_at: datetime, error: str) -> MessageRow:
    return MessageRow(row_id, role, created_at, f"[unreadable message] {error}", ("error",), None, error)


def _details_text(part: dict[str, Any]) -> str:
    details = part.get("details")
    if isinstance(details, list):
        return " ".join(str(d.get("text", "")) for d in details if isinstance(d, dict))
    return ""


def _title(value: Any) -> str:
    """A title a thread-update marker names, as the thread tree writes titles (``shown_title``: a bidirectional or
    control character as its escape, so it reorders nothing after it), cut to 60 characters."""
    from studio.logic.thread_labels import shown_title

    return compact(shown_title(value) if isinstance(value, str) else value or "", 60)


def compact(value: Any, limit: int) -> str:
    """``value`` on one line of at most ``limit`` characters (JSON for what is not text), cut with "…"."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def pretty_json(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, indent=2, default=str)
    if len(text) > MAX_DETAIL_CHARS:
        return text[:MAX_DETAIL_CHARS] + f"\n… ({len(text) - MAX_DETAIL_CHARS:,} more characters)"
    return text


def format_time(when: datetime) -> str:
    """The Studio's one date format (``studio.logic.dates``)."""
    return format_datetime(when)


def snippet(text: str, query: str, width: int = 90) -> str:
    """The part of ``text`` around the first case-insensitive hit of ``query``, on one line."""
    flat = " ".join(text.split())
    at = flat.lower().find(query.lower().strip()) if query.strip() else -1
    if at < 0:
        return flat[:width] + ("…" if len(flat) > width else "")
    start = max(0, at - width // 3)
    end = min(len(flat), start + width)
    return ("…" if start else "") + flat[start:end] + ("…" if end < len(flat) else "")


# -- detail HTML -----------------------------------------------------------------------------------

def _pre(text: str, cls: str = "code") -> str:
    return f'<pre class="{cls}">{html.escape(text)}</pre>'


def _block(label: str, colour: str, body: str) -> str:
    return (
        f'<div class="part"><div class="label" style="color:{colour}">{html.escape(label)}</div>{body}</div>'
    )


def _text_html(text: str) -> str:
    if len(text) > MAX_DETAIL_CHARS:
        text = text[:MAX_DETAIL_CHARS] + f"\n… ({len(text) - MAX_DETAIL_CHARS:,} more characters)"
    return '<div class="text">' + html.escape(text).replace("\n", "<br>") + "</div>"


def part_html(part: dict[str, Any]) -> str:
    kind = str(part.get("type", "?"))
    if kind == "text":
        return _text_html(str(part.get("text", "")))
    if kind == "reasoning":
        body = '<div class="reasoning">' + html.escape(str(part.get("reasoning") or _details_text(part))).replace(
            "\n", "<br>") + "</div>"
        return _block("REASONING", "#a78bfa", body)
    if kind == "tool-invocation":
        inv = part.get("toolInvocation") or {}
        state = inv.get("state", "?")
        head = f"TOOL {inv.get('toolName', '?')}  ·  {state}  ·  {inv.get('toolCallId', '')}"
        body = '<div class="sub">args</div>' + _pre(pretty_json(inv.get("args", {})))
        if "result" in inv:
            body += '<div class="sub">result</div>' + _pre(pretty_json(inv.get("result")))
        return _block(head, ROLE_COLOURS["tool"], body)
    if kind == "file":
        data = part.get("data")
        size = f"{len(data):,} characters of data" if isinstance(data, str) else "no inline data"
        name = part.get("filename") or "(unnamed)"
        mime = part.get("mimeType") or part.get("mediaType") or "?"
        return _block(f"FILE {name}", "#d08770", f'<div class="sub">{html.escape(str(mime))} · {size}</div>')
    if kind.startswith("data-"):
        said = om_marker_text(kind, part.get("data"))
        sub = f'<div class="sub">{html.escape(said)}</div>' if said else ""
        return _block(kind.upper(), "#e8a33d", sub + _pre(pretty_json(part.get("data"))))
    if kind == "step-start":
        return _step_html(part)
    return _block(kind.upper(), "#9aa0a6", _pre(pretty_json(part)))


def _step_html(part: dict[str, Any], number: int | None = None, *, empty: bool = False) -> str:
    """A step's start: its number when the message has more than one, the model that ran it when the part
    names it, and, for a step with no part kept after it (the next step starts, or the message ends),
    that nothing of it was stored (a step with no kept parts showed as a bare "— step —" line)."""
    said = ["step" if number is None else f"step {number}"]
    if part.get("model"):
        said.append(f"model {part['model']}")
    if empty:
        said.append("nothing of this step was stored")
    return f'<div class="step">— {html.escape(" · ".join(said))} —</div>'


def parts_html(parts: list[dict[str, Any]]) -> str:
    """Each part's HTML, steps numbered when there is more than one."""
    numbered = sum(p.get("type") == "step-start" for p in parts) > 1
    out, steps = [], 0
    for i, part in enumerate(parts):
        if part.get("type") != "step-start":
            out.append(part_html(part))
            continue
        steps += 1
        nxt = parts[i + 1] if i + 1 < len(parts) else None
        out.append(_step_html(part, steps if numbered else None,
                              empty=nxt is None or nxt.get("type") == "step-start"))
    return "".join(out)


def message_html(row: MessageRow) -> str:
    colour = ROLE_COLOURS.get(row.role, "#9aa0a6")
    head = (
        f'<div class="head"><span class="role" style="color:{colour}">{html.escape(row.role.upper())}</span>'
        f'&nbsp;&nbsp;<span class="meta">{html.escape(format_time(row.created_at))}'
        f"&nbsp;&nbsp;·&nbsp;&nbsp;{html.escape(row.id)}</span></div>"
    )
    if row.message is None:
        return head + _block("UNREADABLE", "#e06c75", _text_html(row.error or "?"))
    body = parts_html(shown_parts(row.message)) or _text_html(row.message.text)
    if row.error:
        body = _block("PARTLY UNREADABLE", "#e06c75", _text_html(row.error)) + body
    meta = row.message.metadata
    if meta:
        body += _block("METADATA", "#9aa0a6", _pre(pretty_json(meta)))
    return head + body


DETAIL_CSS = """
body { font-size: 10.5pt; }
.head { margin-bottom: 8px; }
.role { font-weight: 700; letter-spacing: 1px; }
.meta { color: #8b949e; font-family: monospace; font-size: 9pt; }
.part { margin: 8px 0 8px 0; }
.label { font-weight: 700; font-size: 8.5pt; letter-spacing: 1px; margin-bottom: 2px; }
.sub { color: #8b949e; font-size: 8.5pt; margin-top: 4px; }
.reasoning { font-style: italic; color: #a0a8b4; }
.step { color: #6e7681; font-size: 8pt; }
pre.code { font-family: "DejaVu Sans Mono", "Menlo", "Consolas", monospace; font-size: 9pt;
           background: rgba(127,127,127,0.12); padding: 6px; margin: 2px 0 4px 0; }
"""
