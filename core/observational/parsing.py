"""Reading what the observer (or reflector) wrote, without trusting it to follow the format.

The reply should hold ``<observations>``, ``<current-task>`` and ``<suggested-response>`` sections.
Models drop closing tags, wrap everything in a code fence, forget the tags entirely, or get stuck
repeating one line thousands of times. The parser accepts the first three when the content still
looks like observation lines and refuses the last: a refused reply is reported and the messages
stay unobserved, so a bad reply can cost a retry but never memory.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, replace
from typing import Sequence

MAX_LINE_CHARS = 10_000
SECTIONS = ("observations", "current-task", "suggested-response", "thread-title")

_FENCE_RE = re.compile(r"^\s*```[\w-]*\s*\n(.*?)\n\s*```\s*$", re.S)
_DATE_RE = re.compile(r"^\s*Date:\s*[A-Z][a-z]{2,8}\s+\d{1,2},\s*\d{4}")
_BULLET_RE = re.compile(r"^\s*[*-]\s+(?:🔴|🟡|🟢|✅|->)")
_OBS_LINE_RE = re.compile(r"^\s*(?:[*-]\s+)?(?:🔴|🟡|🟢|✅)")
# What an observation line may hold besides its text: thread tags, priority marks, bullets, arrows,
# times and ``[tags]`` (as the context view drops them). A section made of these alone says nothing
# about the messages it would replace.
_FORM_RE = re.compile(
    r"</?thread\b[^>]*>|🔴|🟡|🟢|✅|->|^\s*[*-]+|\(\d{1,2}:\d{2}(?:\s*[AP]M)?\)|\[[^\[\]\n]{1,60}\](?!\()", re.I)


@dataclass(frozen=True)
class ObserverOutput:
    observations: str
    current_task: str | None = None
    suggested_response: str | None = None
    thread_title: str | None = None
    problem: str | None = None  # why the reply was refused (then ``observations`` is empty)

    @property
    def ok(self) -> bool:
        return self.problem is None and bool(self.observations.strip())


def _section(text: str, name: str) -> list[str]:
    """Every ``<name>…</name>`` block; an unclosed one runs to the next known tag or the end."""
    blocks: list[str] = []
    others = "|".join(re.escape(s) for s in SECTIONS if s != name)
    pattern = re.compile(
        rf"<{re.escape(name)}>\s*(.*?)\s*(?:</{re.escape(name)}>|(?=<(?:{others})>)|(?=<{re.escape(name)}>)|\Z)", re.S
    )
    for match in pattern.finditer(text):
        blocks.append(match.group(1).strip())
    return blocks


# Our own tags (the reply's sections, a misspelt singular, the other tags of our prompts) standing at a
# line's start or end once the sections are read: a stray closing tag the section reader did not consume.
_OWN_TAG = (r"</?\s*(?:observations?|current[-_]task|suggested[-_]response|thread[-_]title|system-reminder|"
            r"observational-memory-instruction|other-conversations)\s*>")
_EDGE_TAGS_RE = re.compile(rf"^(?:\s*{_OWN_TAG})+|(?:{_OWN_TAG}\s*)+$", re.I)


def drop_own_tags(text: str) -> str:
    """``text`` without our own tags at the start or end of its lines (a line of tags alone goes);
    a tag inside a line's text is kept, as is every other line."""
    out: list[str] = []
    for line in text.splitlines():
        bare = _EDGE_TAGS_RE.sub("", line)
        if bare != line and not bare.strip():
            continue
        out.append(bare.rstrip() if bare != line else line)
    return "\n".join(out).strip()


def looks_like_observations(text: str) -> bool:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return False
    marked = sum(1 for ln in lines if _DATE_RE.match(ln) or _BULLET_RE.match(ln) or _OBS_LINE_RE.match(ln))
    return marked >= max(1, len(lines) // 2)


def has_observation_text(text: str) -> bool:
    """Whether some line says something: not only date headers, priority marks, bullets, times or tags
    (a small model's "🟡" would otherwise stand in for every message it covered)."""
    for line in text.splitlines():
        if _DATE_RE.match(line):
            continue
        if re.search(r"\w", _FORM_RE.sub(" ", line)):
            return True
    return False


def is_degenerate(text: str) -> bool:
    """A reply stuck in a loop: few distinct lines repeated many times, or one phrase over and over."""
    # Compared without times, marks and bullets: a loop that writes each repeat at a new time ("(09:40)",
    # "(09:41)", …) is still a loop.
    lines = [" ".join(_FORM_RE.sub(" ", ln).split()) or ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(lines) >= 20:
        # Short lines ("* -> done") legitimately repeat in long tool runs; only long ones count as looping.
        long_lines = [ln for ln in lines if len(ln) >= 20]
        top = Counter(long_lines).most_common(1)[0][1] if long_lines else 0
        if len(set(lines)) / len(lines) < 0.2 or top >= max(10, len(lines) // 3):
            return True
    words = text.split()
    if len(words) >= 300:
        grams = [" ".join(words[i:i + 6]) for i in range(0, len(words) - 5)]
        if len(set(grams)) / len(grams) < 0.15:
            return True
    return False


def sanitize_lines(text: str) -> str:
    """Cap line length and drop repeated observation lines (date headers may repeat)."""
    seen: set[str] = set()
    out: list[str] = []
    for line in text.splitlines():
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + " …"
        key = line.strip()
        if key and not _DATE_RE.match(key) and key in seen:
            continue
        if key:
            seen.add(key)
        out.append(line.rstrip())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()


def _copy_key(line: str) -> str:
    return " ".join(line.split())


#: A Markdown rule ("---"): the reflector's request puts one between the log and its instructions.
_RULE_RE = re.compile(r"^\s*([-=_*])(?:\s*\1){2,}\s*$")


def _copied_lines(sources: Sequence[str]) -> frozenset[str]:
    """The lines of ``sources`` (the request's texts) a reply line may not simply repeat: every line
    that says something, date headers aside (a new observation may well open the same day), and the
    request's rules (a small model copied the reflector's "---" separator into the new log)."""
    keys = set()
    for source in sources:
        for line in source.splitlines():
            if line.strip() and not _DATE_RE.match(line) and (re.search(r"\w", _FORM_RE.sub(" ", line))
                                                              or _RULE_RE.match(line)):
                keys.add(_copy_key(line))
    return frozenset(keys)


def _without_copies(text: str, copied: frozenset[str]) -> tuple[str, int]:
    """``text`` without the lines found in ``copied``; and how many were left out."""
    kept: list[str] = []
    dropped = 0
    for line in text.splitlines():
        if line.strip() and _copy_key(line) in copied:
            dropped += 1
            continue
        kept.append(line)
    return "\n".join(kept), dropped


def _own_hint(value: str | None, copied: frozenset[str]) -> str | None:
    """A task or response hint, unless it only repeats the request (the instructions' placeholder)."""
    if value is None or not copied:
        return value
    rest, _ = _without_copies(value, copied)
    return value if rest.strip() else None


def parse_observer_output(text: str | None, *, copied_from: Sequence[str] = ()) -> ObserverOutput:
    """``copied_from``: the texts the model was sent (its instructions, the log it was shown, the
    messages). A line of the reply found there is a copy, not an observation, and is left out: a small
    model writes back its instructions' example, or the previous observations, as if they were new.
    A reply whose observations were all copies is refused."""
    copied = _copied_lines(copied_from)
    parsed = _parse(text)
    if not parsed.ok or not copied:
        return parsed
    observations, dropped = _without_copies(parsed.observations, copied)
    current_task = _own_hint(parsed.current_task, copied)
    suggested = _own_hint(parsed.suggested_response, copied)
    if dropped and not has_observation_text(observations):
        return ObserverOutput("", current_task, suggested, parsed.thread_title, problem=(
            f"the reply only copies lines of its instructions or of the messages it was given ({dropped} "
            "line(s)): nothing new was observed"))
    return replace(parsed, observations=sanitize_lines(observations) if dropped else parsed.observations,
                   current_task=current_task, suggested_response=suggested)


def _parse(text: str | None) -> ObserverOutput:
    if not text or not text.strip():
        return ObserverOutput("", problem="the reply was empty")
    body = text.strip()
    fenced = _FENCE_RE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    if is_degenerate(body):
        return ObserverOutput("", problem="the reply repeats itself (degenerate output); it was discarded")

    def first(name: str) -> str | None:
        found = [b for b in (drop_own_tags(b) for b in _section(body, name)) if b]
        return found[0] if found else None

    obs_blocks = [b for b in (drop_own_tags(b) for b in _section(body, "observations")) if b]
    if obs_blocks:
        observations = "\n\n".join(obs_blocks)
    elif "<observations>" in body:
        return ObserverOutput("", first("current-task"), first("suggested-response"), first("thread-title"),
                              problem="the <observations> section was empty")
    else:
        # No tags at all: accept the text only if it reads as observation lines.
        bare = re.sub(r"<(%s)>.*?(</\1>|\Z)" % "|".join(SECTIONS), "", body, flags=re.S).strip()
        bare = drop_own_tags(bare)
        if not looks_like_observations(bare):
            return ObserverOutput("", problem="the reply has no <observations> section and no observation lines")
        observations = bare
    observations = sanitize_lines(observations)
    if not observations:
        return ObserverOutput("", problem="the <observations> section was empty")
    if not has_observation_text(observations):
        return ObserverOutput("", first("current-task"), first("suggested-response"), first("thread-title"),
                              problem="the observations hold no text, only priority marks, dates or times")
    return ObserverOutput(observations, first("current-task"), first("suggested-response"), first("thread-title"))


__all__ = ["ObserverOutput", "drop_own_tags", "has_observation_text", "is_degenerate", "looks_like_observations", "parse_observer_output",
           "sanitize_lines"]
