"""Working-memory editing: what is being edited, the staged draft, validation, merge preview (no Qt).

The editor pane holds a ``WmDraft``; every keystroke asks it for ``check()``, which returns the
problems that block Save and, in schema mode, the merge preview (current + patch = result under the
seed-004 rules: objects deep-merge, ``null`` deletes, arrays are replaced). Saving passes the text the
editor loaded as ``expected``, so an agent's change in the meantime raises ``ConcurrentUpdateError``
instead of being overwritten.

``save_wm`` writes and runs in a worker; the pane's read, ``studio.reads.load_wm``, fills a ``WmSnapshot``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

from core import Store, WorkingMemoryOptions
from core.agent_configs import AgentConfig
from core.working_memory import Version, WorkingMemoryService, normalize_ws
from core.working_memory_schema import load_stored, validate, working_memory_merge
from studio.logic.dates import format_datetime
from studio.logic.memory_config import ConfigState
from studio.selection import Selection

JsonMode = Literal["merge", "replace"]


@dataclass(frozen=True)
class WmTarget:
    """Whose working memory: a resource (resource scope) or a thread (thread scope)."""

    scope: Literal["resource", "thread"]
    owner_id: str
    thread_id: str | None
    resource_id: str | None

    @property
    def label(self) -> str:
        return f"{'Resource' if self.scope == 'resource' else 'Thread'} {self.owner_id}"


def target_for(selection: Selection, opts: WorkingMemoryOptions) -> tuple[WmTarget | None, str]:
    """The owner for the selection under the agent's scope, or why there is none."""
    if opts.scope == "thread":
        if not selection.thread_id:
            return None, "This agent keeps working memory per thread: pick a thread."
        return WmTarget("thread", selection.thread_id, selection.thread_id, selection.resource_id), ""
    if not selection.resource_id:
        return None, "Pick a resource (or one of its threads) to see its working memory."
    return WmTarget("resource", selection.resource_id, selection.thread_id, selection.resource_id), ""


@dataclass
class WmSnapshot:
    """One consistent read of everything the working-memory pane shows."""

    agents: list[AgentConfig]
    agent: AgentConfig | None
    agent_reason: str
    memory_name: str
    declared_enabled: bool  # whether the agent itself has working memory on
    options: WorkingMemoryOptions  # effective (override applied), always enabled for viewing
    target: WmTarget | None
    target_reason: str
    text: str | None = None  # stored value (None: nothing stored yet)
    versions: list[Version] = field(default_factory=list)  # newest first
    config: ConfigState | None = None

    @property
    def fmt(self) -> str:
        return self.options.mode


# -- the staged draft ----------------------------------------------------------------------------
def parse_json_object(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """Parse editor text as a JSON object; the problem names line and column, as editors do."""
    if not text.strip():
        return {}, None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"JSON syntax: line {exc.lineno}, column {exc.colno}: {exc.msg}"
    if not isinstance(value, dict):
        return None, f"Working memory must be a JSON object ({{...}}), not {type(value).__name__}."
    return value, None


def changed_paths(before: Any, after: Any, prefix: str = "") -> list[str]:
    """Dotted paths that differ between two JSON values, marked "(added)" / "(deleted)" where so."""
    if isinstance(before, dict) and isinstance(after, dict):
        out: list[str] = []
        for key in [*before, *[k for k in after if k not in before]]:
            path = f"{prefix}.{key}" if prefix else str(key)
            if key not in after:
                out.append(f"{path} (deleted)")
            elif key not in before:
                out.append(f"{path} (added)")
            else:
                out.extend(changed_paths(before[key], after[key], path))
        return out
    return [] if before == after else [prefix or "(root)"]


def pretty_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2)


@dataclass(frozen=True)
class MergePreview:
    current: dict[str, Any]
    patch: dict[str, Any] | None
    result: dict[str, Any] | None
    deleted: tuple[str, ...] = ()  # top-level keys the patch removes with null


@dataclass(frozen=True)
class DraftCheck:
    problems: tuple[str, ...]  # non-empty: Save is blocked, and the first one is shown
    warnings: tuple[str, ...] = ()
    preview: MergePreview | None = None
    value: str | None = None  # exactly what Save would store

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class WmDraft:
    """The editor's staged state. ``baseline`` is what was loaded (and is sent as ``expected``)."""

    baseline: str | None
    fmt: Literal["markdown", "json"]
    schema: Mapping[str, Any] | None = None
    template: str = ""
    json_mode: JsonMode = "replace"

    def initial_text(self) -> str:
        """What the editor starts with: the stored text (pretty JSON in schema mode, ``{}`` for a patch)."""
        if self.fmt == "markdown":
            return self.baseline if self.baseline is not None else ""
        if self.json_mode == "merge":
            return "{\n  \n}"
        return pretty_json(load_stored(self.baseline))

    def is_dirty(self, text: str) -> bool:
        if self.fmt == "markdown":
            return text != (self.baseline or "")
        check = self.check(text)
        if check.value is None:
            return True
        return json.loads(check.value) != load_stored(self.baseline)

    def check(self, text: str) -> DraftCheck:
        if self.fmt == "markdown":
            return self._check_markdown(text)
        return self._check_json(text)

    def _check_markdown(self, text: str) -> DraftCheck:
        warnings = []
        if self.template and normalize_ws(text) == normalize_ws(self.template):
            warnings.append("This is the empty template: saving it clears everything the agent stored.")
        if text.lstrip().startswith("{"):
            warnings.append("This memory uses a Markdown template; JSON is stored as plain text.")
        return DraftCheck((), tuple(warnings), None, text)

    def _check_json(self, text: str) -> DraftCheck:
        current = load_stored(self.baseline)
        parsed, problem = parse_json_object(text)
        if problem is not None or parsed is None:
            return DraftCheck((problem or "Not a JSON object.",), (), MergePreview(current, None, None))
        if self.json_mode == "merge":
            result = working_memory_merge(current, parsed)
            deleted = tuple(k for k, v in parsed.items() if v is None and k in current)
            preview = MergePreview(current, parsed, result, deleted)
        else:
            result = parsed
            preview = MergePreview(current, parsed, result)
        problems = validate(self.schema, result) if self.schema is not None else []
        return DraftCheck(
            tuple(f"Schema: {p}" for p in problems), (), preview, json.dumps(result, ensure_ascii=False)
        )


def save_wm(
    store: Store, opts: WorkingMemoryOptions, target: WmTarget, value: str, *, expected: str | None,
    note: str | None = None,
) -> str | None:
    """Write the staged value if the stored one still equals ``expected`` (else ConcurrentUpdateError).

    Returns the stored text. The service keeps a version of every write.
    """
    service = WorkingMemoryService(store)
    payload: Any = json.loads(value) if opts.mode == "json" else value
    written = service.write(
        opts, thread_id=target.thread_id, resource_id=target.resource_id, value=payload, author="studio",
        note=note, expected=expected,
    )
    return written.text


def version_label(v: Version) -> str:
    when = format_datetime(v.created_at)
    return f"#{v.id} · {when} · {v.author}"
