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
from core.json_kind import json_kind
from core.working_memory import (
    DEFAULT_KEPT_VERSIONS,
    DEFAULT_MAX_WORKING_MEMORY_BYTES,
    Version,
    WorkingMemoryService,
    normalize_ws,
)
from core.working_memory_schema import load_stored, validate, working_memory_merge
from studio.logic.memory_config import ConfigState
from studio.logic.thread_labels import NO_DELEGATIONS, Delegations, resource_label
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

    def title(self, known: Delegations = NO_DELEGATIONS) -> str:
        """``label`` for the pane's header: a delegation's resource named as the tree names it
        (``thread_labels.resource_label``; ``known``: the Mastra-written delegations the data proves)."""
        if self.scope == "resource":
            return f"Resource {resource_label(self.owner_id, known)}"
        return self.label


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
    history_available: bool = True  # False: the file has no memory_studio_wm_versions table (unmigrated)
    tokens: int = 0  # of the stored text
    version_tokens: dict[int, int] = field(default_factory=dict)  # version id -> tokens
    # The agent's limits (MemoryOptions): the largest value saved, and how many versions are kept.
    max_bytes: int | None = DEFAULT_MAX_WORKING_MEMORY_BYTES
    versions_kept: int | None = DEFAULT_KEPT_VERSIONS
    # Why the scope shown is not the configuration's (a thread keeping its own working memory, no agent
    # registered); "" when the configuration's scope is shown.
    scope_note: str = ""

    @property
    def fmt(self) -> str:
        return self.options.mode

    def version_rows(self) -> list["VersionRow"]:
        """The versions newest first, numbered 1, 2, 3 … from the oldest of this resource or thread."""
        n = len(self.versions)
        return [VersionRow(v, n - i, self.version_tokens.get(v.id, 0)) for i, v in enumerate(self.versions)]


@dataclass(frozen=True)
class VersionRow:
    """A saved version as the history table shows it: numbered within its owner, not by row id."""

    version: Version
    number: int
    tokens: int

    @property
    def label(self) -> str:
        return f"version {self.number}"

    # The stored version's own facts, read through the row.
    @property
    def text(self) -> str | None:
        return self.version.text

    @property
    def author(self) -> str:
        return self.version.author

    @property
    def note(self) -> str | None:
        return self.version.note

    @property
    def created_at(self) -> Any:
        return self.version.created_at

    @property
    def size(self) -> str:
        return size_label(self.version.text or "", self.tokens)


def size_label(text: str, tokens: int) -> str:
    return f"{len(text):,} chars · {tokens:,} tokens"


# Schema mode shows the value formatted (indented, one key a line) while the store keeps it compact:
# the editor said "188 chars" beside a status line's "154 chars stored" with nothing saying why. Each
# count says which form it counts.
def editor_size_label(text: str, tokens: int, fmt: str) -> str:
    """The editor's live count (its title line): in schema mode, of the formatted text there."""
    return size_label(text, tokens) + (" as formatted here" if fmt == "json" else "")


def stored_size_label(text: str, tokens: int, fmt: str) -> str:
    """The status line's count of the stored value: in schema mode, of its compact JSON."""
    return size_label(text, tokens) + (" stored (compact JSON)" if fmt == "json" else " stored")


def editor_size_tip(fmt: str) -> str:
    if fmt == "json":
        return ("Characters and tokens (the prompt's tokenizer) of the JSON as formatted in the editor. It is "
                "stored compact (no indents or line breaks): the status line below counts that form.")
    return "Characters and tokens (the prompt's tokenizer) of the text in the editor"


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
        return None, f"Working memory must be a JSON object ({{...}}), not {json_kind(value)}."
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
    """The editor's staged state. ``baseline`` is what was loaded (and is sent as ``expected``);
    ``stored`` is what is stored now as far as we know (it moves when the agent writes meanwhile),
    and the merge preview is computed on it."""

    baseline: str | None
    fmt: Literal["markdown", "json"]
    schema: Mapping[str, Any] | None = None
    template: str = ""
    json_mode: JsonMode = "replace"
    stored: str | None = None

    def __post_init__(self) -> None:
        if self.stored is None:
            self.stored = self.baseline

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
        return bool(json.loads(check.value) != load_stored(self.baseline))

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
        current = load_stored(self.stored)
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


def patch_between(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """The patch that turns ``before`` into ``after`` under the merge rules (objects merge deeply,
    ``null`` deletes, anything else replaces): ``working_memory_merge(before, patch) == after``
    whenever ``after`` holds no nulls of its own."""
    patch: dict[str, Any] = {}
    for key, value in after.items():
        old = before.get(key, _MISSING)
        if isinstance(value, Mapping) and isinstance(old, Mapping):
            inner = patch_between(old, value)
            if inner:
                patch[key] = inner
        elif old is _MISSING or old != value:
            patch[key] = value
    for key in before:
        if key not in after:
            patch[key] = None
    return patch


_MISSING = object()


def switch_json_mode(draft: WmDraft, text: str, to: JsonMode) -> tuple[str, bool]:
    """Switch the draft to ``to``: (the editor text, whether it was converted).

    An unsaved edit is carried over, not dropped: converted so it saves the same result (a whole
    value becomes the patch that produces it, a patch becomes the value it produces). Text that is
    not a JSON object yet cannot be converted and is kept exactly as typed."""
    if draft.json_mode == to:
        return text, True
    if not draft.is_dirty(text):
        draft.json_mode = to
        return draft.initial_text(), True
    parsed, problem = parse_json_object(text)
    if problem is not None or parsed is None:
        draft.json_mode = to
        return text, False
    current = load_stored(draft.stored)
    result = working_memory_merge(current, parsed) if draft.json_mode == "merge" else parsed
    draft.json_mode = to
    return pretty_json(result if to == "replace" else patch_between(current, result)), True


def save_wm(
    store: Store, opts: WorkingMemoryOptions, target: WmTarget, value: str, *, expected: str | None,
    note: str | None = None, max_bytes: int | None = DEFAULT_MAX_WORKING_MEMORY_BYTES,
    versions_kept: int | None = DEFAULT_KEPT_VERSIONS,
) -> str | None:
    """Write the staged value if the stored one still equals ``expected`` (else ConcurrentUpdateError).

    Returns the stored text. The service keeps a version of every write, within the agent's limits
    (``max_bytes``: a larger value is refused; ``versions_kept``: older versions are deleted).
    """
    service = WorkingMemoryService(store, max_bytes=max_bytes, keep_versions=versions_kept)
    payload: Any = json.loads(value) if opts.mode == "json" else value
    written = service.write(
        opts, thread_id=target.thread_id, resource_id=target.resource_id, value=payload, author="studio",
        note=note, expected=expected,
    )
    return written.text

