"""Running memory checks: rebuild each turn's prompt exactly as replay does, then test what must hold.

Each check's turn is rebuilt with ``Memory.assemble(as_of=<its input>, options=...)``, the call the
Studio's Replay pane and ``Memory.what_if`` make: a turn with a record rebuilds exactly from it, and a
what-if's options (``--options``, then the check's own ``options``) are merged over the options the
turn ran with. The memory is the one the thread's agent registered (``agent_for_thread``, the rule
the prompt inspector and the CLI use); a database with no registered agent (an imported export) uses
the options its turn records name. Nothing calls a chat model and nothing is written; the embedding
model is loaded only when a turn's recall must be searched again (no record, or a what-if changed
recall's options).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from core.agent_configs import agent_for_thread
from core.checks.model import Check
from core.options import MemoryOptions, OptionsError, options_merge

if TYPE_CHECKING:  # pragma: no cover
    from core.memory import Memory
    from core.prompt import AssembledPrompt, Fragment
    from core.replay.turns import Turn
    from core.storage import Store

PASS, FAIL, ERROR = "pass", "fail", "error"
EXCERPT = 60  # characters shown either side of a match


@dataclass(frozen=True)
class Failure:
    assertion: str  # "prompt_contains", ...
    expected: Any
    message: str  # one line: what did not hold
    excerpt: str  # the relevant part of the prompt, several lines


@dataclass
class CheckResult:
    check: Check
    status: str  # "pass" | "fail" | "error"
    failures: list[Failure] = field(default_factory=list)
    error: str | None = None
    turn_number: int | None = None  # 1-based
    input_message_id: str | None = None
    tokens: int | None = None
    seconds: float = 0.0
    replay: str | None = None  # "recorded (matches)", "reconstructed", ...

    @property
    def passed(self) -> bool:
        return self.status == PASS


def _fold(text: str) -> str:
    return " ".join(text.casefold().split())


def _find(haystack: str, needle: str) -> int:
    """Where ``needle`` is in ``haystack``, ignoring case and runs of white space (-1: nowhere)."""
    return _fold(haystack).find(_fold(needle))


def prompt_text(prompt: "AssembledPrompt") -> str:
    """Everything the model read, as one text (each message's content; parts' texts joined)."""
    out = []
    for message in prompt.messages:
        content = message.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out.extend(str(p.get("text") or "") for p in content if isinstance(p, Mapping))
        for call in message.get("tool_calls") or ():
            out.append(str((call.get("function") or {}).get("arguments") or ""))
    return "\n".join(out)


def _clip(text: str, limit: int = 100) -> str:
    one = " ".join(text.split())
    return one if len(one) <= limit else one[: limit - 1] + "…"


def outline(prompt: "AssembledPrompt") -> str:
    """One line per fragment, then what added nothing and why: the shape of a prompt at a glance."""
    lines = [f"[{f.index}] {f.role} · {f.source} · {f.tokens} tok: {_clip(f.text)}" for f in prompt.fragments
             if f.kind != "tools"]
    lines += [f"(nothing from {pid}: {why})" for pid, why in prompt.skipped.items() if pid != "memory-input-filter"]
    for key, label in (("working_memory", "working memory"), ("semantic_recall", "semantic recall"),
                       ("observational_memory", "observational memory")):
        part = prompt.options.get(key)
        if isinstance(part, Mapping) and part.get("enabled") is False:
            lines.append(f"({label} is off in these options)")
    return "\n".join(lines)


def _around(fragment: "Fragment", needle: str) -> str:
    folded = _fold(fragment.text)
    at = folded.find(_fold(needle))
    flat = " ".join(fragment.text.split())
    start, end = max(at - EXCERPT, 0), min(at + len(_fold(needle)) + EXCERPT, len(flat))
    body = ("…" if start else "") + flat[start:at] + "»" + flat[at:at + len(_fold(needle))] + "«" + \
        flat[at + len(_fold(needle)):end] + ("…" if end < len(flat) else "")
    return f"[{fragment.index}] {fragment.role} · {fragment.source}: {body}"


def _recall_fragments(prompt: "AssembledPrompt") -> list["Fragment"]:
    return [f for f in prompt.fragments if f.source == "semantic-recall"]


def _wm_fragments(prompt: "AssembledPrompt") -> list["Fragment"]:
    return [f for f in prompt.fragments if f.source == "working-memory" and f.kind != "tools"]


def evaluate(check: Check, prompt: "AssembledPrompt") -> list[Failure]:
    """What did not hold of ``check`` in ``prompt`` (empty: it passes)."""
    failures: list[Failure] = []
    whole = prompt_text(prompt)
    for kind, value in check.assertions():
        if kind == "prompt_contains" and _find(whole, value) < 0:
            failures.append(Failure(kind, value, f"the prompt does not contain {value!r}", outline(prompt)))
        elif kind == "prompt_excludes" and _find(whole, value) >= 0:
            where = [_around(f, value) for f in prompt.fragments if _find(f.text, value) >= 0]
            failures.append(Failure(kind, value, f"the prompt contains {value!r}", "\n".join(where) or outline(prompt)))
        elif kind == "recalled":
            recall = _recall_fragments(prompt)
            hits = [str(i) for f in recall for i in (f.detail.get("hit_ids") or f.stored_ids)]
            if value in hits or any(_find(f.text, value) >= 0 for f in recall):
                continue
            why = prompt.skipped.get("semantic-recall")
            excerpt = "\n".join(f"[{f.index}] hits {', '.join(f.detail.get('hit_ids') or f.stored_ids)}: {_clip(f.text, 240)}"
                                for f in recall) if recall else f"recall added nothing: {why or 'semantic recall is off'}"
            failures.append(Failure(kind, value, f"{value!r} is not among the recall hits", excerpt))
        elif kind == "working_memory_contains":
            blocks = _wm_fragments(prompt)
            if any(_find(f.text, value) >= 0 for f in blocks):
                continue
            why = prompt.skipped.get("working-memory")
            excerpt = "\n".join(f"[{f.index}] {_clip(f.text, 600)}" for f in blocks) if blocks else \
                f"no working memory in the prompt: {why or 'working memory is off'}"
            failures.append(Failure(kind, value, f"working memory does not contain {value!r}", excerpt))
        elif kind == "max_tokens" and prompt.total_tokens > int(value):
            by = ", ".join(f"{k} {v}" for k, v in prompt.tokens_by_source().items())
            failures.append(Failure(kind, value, f"the prompt has {prompt.total_tokens:,} tokens, over {int(value):,}",
                                    f"tokens by source: {by}"))
    return failures


class CheckRunner:
    """Runs checks over one store; keeps each thread's memory and turns between checks.

    ``memory_factory(options, name)``: how a ``Memory`` is built (the Studio passes its session's);
    ``embedder``: the embedder for recall searches a what-if needs (default: the local model);
    ``where``: the database as results name it (default: its location; ``--export`` names the export,
    not the temporary database it was imported into).
    """

    def __init__(self, store: "Store", *, options: Mapping[str, Any] | None = None, embedder: Any = None,
                 memory_factory: Callable[[MemoryOptions, str], "Memory"] | None = None,
                 where: str | None = None) -> None:
        self.store = store
        self.where = where or store.location.display
        self.options = dict(options or {})
        self.embedder = embedder
        self._factory = memory_factory
        self._memories: dict[tuple[str, bool], "Memory"] = {}
        self._threads: dict[str, tuple[list["Turn"], MemoryOptions, str]] = {}

    def _memory(self, options: MemoryOptions, name: str, recall: bool) -> "Memory":
        opts = options if recall else options.merged({"semantic_recall": False})
        key = (f"{name}|{opts.to_dict()}", recall)
        memory = self._memories.get(key)
        if memory is None:
            if self._factory is not None:
                memory = self._factory(opts, name)
            else:
                from core.memory import Memory

                memory = Memory(self.store, opts, name=name, embedder=self.embedder if recall else None)
            self._memories[key] = memory
        return memory

    def _thread(self, thread_id: str) -> tuple[list["Turn"], MemoryOptions, str]:
        if thread_id not in self._threads:
            from core.replay.turns import list_turns

            choice = agent_for_thread(self.store, thread_id)
            if choice.thread is None:
                raise LookupError(f"thread {thread_id!r} is not in {self.where}")
            turns = list_turns(self.store, thread_id)
            if choice.agent is not None:
                base, name = choice.options(), choice.memory_name
            else:  # no registered agent (an imported export): the options the turns ran with
                recorded = next((t.record for t in turns if t.record is not None), None)
                base = recorded.memory_options() if recorded is not None else MemoryOptions()
                name = choice.memory_name
            self._threads[thread_id] = (turns, base, name)
        return self._threads[thread_id]

    def _turn(self, check: Check, turns: list["Turn"]) -> tuple[int, "Turn"]:
        if not turns:
            raise LookupError(f"thread {check.thread!r} has no turns (no user message)")
        if check.turn is not None:
            index = check.turn - 1 if check.turn > 0 else len(turns) + check.turn
            if not 0 <= index < len(turns):
                raise LookupError(f"thread {check.thread!r} has {len(turns)} turn(s); there is no turn {check.turn}")
            return index, turns[index]
        wanted = (check.input or "").strip()
        exact = [i for i, t in enumerate(turns) if t.input_text.strip() == wanted]
        if not exact:
            exact = [i for i, t in enumerate(turns) if _find(t.input_text, wanted) >= 0]
        if not exact:
            raise LookupError(f"no turn of thread {check.thread!r} has the input {wanted!r} (it may have been edited; "
                              "use 'turn' or the new text)")
        if len(exact) > 1:
            raise LookupError(f"{len(exact)} turns of thread {check.thread!r} match the input {wanted!r} "
                              f"(turns {', '.join(str(i + 1) for i in exact)}); say which with 'turn'")
        return exact[0], turns[exact[0]]

    def run(self, check: Check) -> CheckResult:
        started = time.perf_counter()
        result = CheckResult(check, ERROR)
        try:
            turns, base, name = self._thread(check.thread)
            thread = self.store.memory.get_thread(check.thread)
            if check.resource is not None and thread is not None and thread.resource_id != check.resource:
                raise LookupError(f"thread {check.thread!r} belongs to resource {thread.resource_id!r}, not "
                                  f"{check.resource!r}")
            index, turn = self._turn(check, turns)
            what_if = options_merge(self.options, check.options) if check.options else dict(self.options)
            recall = _needs_recall(turn, base, what_if)
            memory = self._memory(base, name, recall)
            prompt = memory.assemble(thread_id=check.thread, resource_id=thread.resource_id if thread else None,
                                     as_of=turn.input_message_id, options=what_if or None)
            result.turn_number, result.input_message_id = index + 1, turn.input_message_id
            result.tokens = prompt.total_tokens
            if prompt.replay is not None:
                info = prompt.replay
                result.replay = (f"what-if over its {'record' if info.record is not None else 'time'}" if info.what_if
                                 else info.kind + (" (matches its record)" if info.matches else
                                                   " (differs from its record)" if info.matches is False else ""))
            result.failures = evaluate(check, prompt)
            result.status = FAIL if result.failures else PASS
        except (LookupError, OptionsError, ValueError, RuntimeError, PermissionError) as exc:
            result.error = str(exc) or type(exc).__name__
        result.seconds = time.perf_counter() - started
        return result

    def run_all(self, checks: Iterable[Check]) -> list[CheckResult]:
        return [self.run(c) for c in checks]


def _needs_recall(turn: "Turn", base: MemoryOptions, what_if: Mapping[str, Any]) -> bool:
    """Whether this rebuild searches recall again (and so needs the embedding model)."""
    record = turn.record
    if record is None:
        return bool(base.merged(what_if).semantic_recall.enabled) if what_if else bool(base.semantic_recall.enabled)
    after = record.memory_options(what_if or None)
    return bool(after.semantic_recall.enabled) and after.to_dict().get("semantic_recall") != \
        record.memory_options().to_dict().get("semantic_recall")


def run_checks(store: "Store", checks: Sequence[Check], *, options: Mapping[str, Any] | None = None,
               embedder: Any = None) -> list[CheckResult]:
    """Run every check (see ``CheckRunner``)."""
    return CheckRunner(store, options=options, embedder=embedder).run_all(checks)


def would_break(store: "Store", checks: Sequence[Check], options: Mapping[str, Any], *, embedder: Any = None,
                memory_factory: Callable[[MemoryOptions, str], "Memory"] | None = None,
                ) -> list[tuple[CheckResult, CheckResult]]:
    """Each check as it stands and under a what-if: (now, with ``options``)."""
    now = CheckRunner(store, embedder=embedder, memory_factory=memory_factory).run_all(checks)
    after = CheckRunner(store, options=options, embedder=embedder, memory_factory=memory_factory).run_all(checks)
    return list(zip(now, after))


__all__ = ["CheckResult", "CheckRunner", "ERROR", "FAIL", "Failure", "PASS", "evaluate", "outline", "prompt_text",
           "run_checks", "would_break"]
