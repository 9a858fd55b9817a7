"""A readable transcript of an export: title, resource, each message with its role, time and text,
tool calls summarised, then working memory (and the current observations, when exported).

Rendered from the export document itself, so the transcript and the JSON never disagree.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

from core.messages import MessageFormatError, normalize_content
from core.timeutil import parse_iso

ARG_CHARS = 160  # a tool's arguments or result beyond this is cut: the JSON export has it whole
ROLE_NAMES = {"user": "User", "assistant": "Assistant", "system": "System", "signal": "Signal", "tool": "Tool"}
# A line of a message's text that could pass for the transcript's own structure (a heading, a turn's
# "**Role** · time" line, a setext underline making the line above a heading) gets its first mark
# escaped with a backslash: shown as written when rendered, and no longer starting like one when read.
# Lines inside a fenced code block the message closes itself are code, shown as they are.
_STRUCTURE = re.compile(
    r"([ \t]*)(#|\*\*(?=[^*]+\*\*[ \t]*·|(?:" + "|".join(ROLE_NAMES.values()) + r")\*\*[ \t]*$)|=+[ \t]*$|-+[ \t]*$)",
    re.IGNORECASE,
)
_FENCE = re.compile(r"[ \t]{0,3}(`{3,}|~{3,})")
_BREAKS = re.compile(r"\r\n|[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]")


def to_markdown(data: Mapping[str, Any]) -> str:
    scope = data.get("scope") or {}
    threads = list(data.get("threads") or [])
    by_thread: dict[str, list[Mapping[str, Any]]] = {}
    for m in data.get("messages") or []:
        by_thread.setdefault(m["threadId"], []).append(m)
    lines: list[str] = []
    if scope.get("kind") == "thread" and threads:
        t = threads[0]
        lines.append(f"# {_title(t)}")
        lines.append("")
        lines.append(f"- Thread: `{_inline(t['id'])}`")
        lines.append(f"- Resource: `{_inline(t['resourceId'])}`")
    else:
        lines.append(f"# Resource {_inline(scope.get('id', '?'))}")
        lines.append("")
        lines.append(f"- Resource: `{_inline(scope.get('id', '?'))}`")
        lines.append(f"- Threads: {len(threads)}")
    lines.append(f"- Messages: {len(data.get('messages') or [])}")
    source = data.get("source") or {}
    database = source.get("database")  # (left out of what an MCP client reads: the server's file path)
    lines.append(f"- Exported: {_when(data.get('exportedAt'))}" + (f" from {database}" if database else ""))
    for t in threads:
        msgs = by_thread.get(t["id"], [])
        lines.append("")
        if scope.get("kind") != "thread":
            lines.append(f"## {_title(t)}")
            lines.append("")
            lines.append(f"Thread `{_inline(t['id'])}` · started {_when(t.get('createdAt'))} · {len(msgs)} messages")
            lines.append("")
        else:
            lines.append("## Conversation")
            lines.append("")
        if not msgs:
            lines.append("_No messages._")
        for m in msgs:
            lines.extend(_message(m))
    lines.extend(_working_memory(data))
    lines.extend(_observations(data))
    return "\n".join(lines).rstrip() + "\n"


def _title(thread: Mapping[str, Any]) -> str:
    return _inline(str(thread.get("title") or "").strip() or f"Thread {thread['id']}")


def _inline(value: Any) -> str:
    """A value shown inside one line (a title, an id): its line breaks become spaces, so it cannot
    start lines of its own (a turn, a heading)."""
    return _BREAKS.sub(" ", str(value))


def _text(text: str) -> str:
    """A message's text as its own lines, none of them passing for the transcript's structure."""
    lines = _BREAKS.split(text)
    if len(lines) == 1 and not _STRUCTURE.match(text):
        return text
    breaks = _BREAKS.findall(text)
    code = _fenced(lines)
    out = []
    for i, line in enumerate(lines):
        m = None if i in code else _STRUCTURE.match(line)
        if m:
            line = m.group(1) + "\\" + m.group(2).replace("**", "*\\*") + line[m.end():]
        out.append(line + (breaks[i] if i < len(breaks) else ""))
    return "".join(out)


def _fenced(lines: list[str]) -> set[int]:
    """Which lines are inside (or are the fences of) a fenced code block that is closed."""
    inside: set[int] = set()
    start: int | None = None
    mark = ""
    for i, line in enumerate(lines):
        m = _FENCE.match(line)
        if start is None:
            if m:
                start, mark = i, m.group(1)
        elif m and m.group(1)[0] == mark[0] and len(m.group(1)) >= len(mark) and not line[m.end():].strip():
            inside.update(range(start, i + 1))
            start = None
    return inside


def _when(value: Any) -> str:
    if not value:
        return "?"
    try:
        return parse_iso(value).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (TypeError, ValueError):
        return str(value)


def _message(m: Mapping[str, Any]) -> list[str]:
    role = ROLE_NAMES.get(str(m.get("role")), str(m.get("role")).title())
    out = [f"**{role}** · {_when(m.get('createdAt'))}", ""]
    try:
        content = normalize_content(m.get("content"), message_id=str(m.get("id")))
        body = [b for b in (_part(p) for p in content.get("parts") or []) if b]
    except MessageFormatError as exc:
        body = [f"_(this message could not be read: {exc})_"]
    if not body:
        body = ["_(no text)_"]
    for block in body:
        out.extend([block, ""])
    return out


def _part(part: Mapping[str, Any]) -> str:
    kind = str(part.get("type", "?"))
    if kind == "text":
        return _text(str(part.get("text", "")).strip())
    if kind == "tool-invocation":
        inv = part.get("toolInvocation") or {}
        line = f"> Tool call `{_inline(inv.get('toolName', '?'))}`({_compact(inv.get('args', {}))})"
        if "result" in inv:
            line += f" → {_compact(inv.get('result'))}"
        elif inv.get("state") not in (None, "result"):
            line += f" ({_inline(inv.get('state'))})"
        return line
    if kind == "reasoning":
        text = str(part.get("reasoning") or "").strip()
        return f"> _Reasoning:_ {_cut(' '.join(text.split()))}" if text else ""
    if kind == "file":
        name = part.get("filename") or "file"
        return f"> File: {_inline(name)} ({_inline(part.get('mimeType') or part.get('mediaType') or '?')})"
    if kind.startswith("data-"):
        return f"> Data `{_inline(kind[5:])}`: {_compact(part.get('data'))}"
    if kind.startswith("source"):
        return f"> Source: {_inline(part.get('url') or part.get('title') or _compact(part))}"
    if kind == "step-start":
        return ""
    return f"> {_inline(kind)}: {_compact(part)}"


def _compact(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    return _cut(_inline(text))


def _cut(text: str) -> str:
    return text if len(text) <= ARG_CHARS else text[: ARG_CHARS - 1] + "…"


def _fence(text: str, lang: str) -> list[str]:
    fence = "```"
    while fence in text:
        fence += "`"
    return [f"{fence}{lang}", text.rstrip("\n"), fence]


def _working_memory(data: Mapping[str, Any]) -> list[str]:
    entries = [e for e in data.get("workingMemory") or [] if e.get("value")]
    out = ["", "## Working memory", ""]
    if not entries:
        return [*out, "_None stored._"]
    for e in entries:
        value = str(e["value"])
        versions = len(e.get("versions") or [])
        label = "Resource" if e["scope"] == "resource" else "Thread"
        out.append(f"### {label} `{_inline(e['ownerId'])}`" + (f" ({versions} versions)" if versions else ""))
        out.append("")
        lang = "json" if value.lstrip().startswith(("{", "[")) else "markdown"
        if lang == "json":
            try:
                value = json.dumps(json.loads(value), ensure_ascii=False, indent=2)
            except ValueError:
                lang = "markdown"
        out.extend(_fence(value, lang))
        out.append("")
    return out


def _observations(data: Mapping[str, Any]) -> list[str]:
    current: dict[str, Mapping[str, Any]] = {}
    for row in data.get("observations") or []:
        key = str(row.get("lookupKey"))
        best = current.get(key)
        if best is None or (row.get("generationCount") or 0) >= (best.get("generationCount") or 0):
            current[key] = row
    rows = [r for r in current.values() if (r.get("activeObservations") or "").strip()]
    if not rows:
        return []
    out = ["", "## Observations", ""]
    for r in rows:
        owner = r.get("threadId") if r.get("scope") == "thread" else r.get("resourceId")
        out.append(f"### {_inline(str(r.get('scope', '')).title())} `{_inline(owner)}` · generation "
                   f"{_inline(r.get('generationCount', 0))}")
        out.append("")
        out.extend(_fence(str(r["activeObservations"]), "text"))
        out.append("")
    return out
