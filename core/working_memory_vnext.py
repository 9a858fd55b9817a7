"""The vNext working-memory tool (``working_memory={"version": "vnext"}``, Markdown only; spec
behaviour 43): edit the stored text in place instead of resending all of it.

The tool takes ``newMemory`` (required), ``searchString`` (find it and replace it with ``newMemory``;
append when it is not there) and ``updateReason``: ``append-new-memory`` (the default),
``clarify-existing-memory`` or ``replace-irrelevant-memory``. As in Mastra:

- a reason other than ``append-new-memory`` needs a ``searchString``; ``append-new-memory`` ignores
  one (models pass it by mistake);
- in resource scope ``replace-irrelevant-memory`` never deletes: what is off-topic in this thread may
  matter in another one, so it appends instead;
- ``newMemory`` already in the memory (whitespace aside), or equal to the empty template, is refused
  with a reason the model reads (``success: false``); nothing is written.

Each accepted update is versioned with its reason (``memory_studio_wm_versions.note``:
``"<updateReason>: <what happened>"``), which the Studio's version history shows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from core.options import WorkingMemoryOptions
from core.working_memory_update import ConcurrentUpdateError, UpdateResult, normalize_ws

if TYPE_CHECKING:  # pragma: no cover
    from core.working_memory import WorkingMemoryService
    from core.working_memory_stage import StagedWorkingMemory

REASONS = ("append-new-memory", "clarify-existing-memory", "replace-irrelevant-memory")


def tool_parameters() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "newMemory": {"type": "string",
                          "description": "The Markdown to store: a new line or section, or the corrected text that "
                                         "replaces searchString."},
            "searchString": {"type": "string",
                             "description": "Text of the stored memory to replace with newMemory (one line is best). "
                                            "Left out, or not found, newMemory is appended at the end. Required when "
                                            "updateReason is not append-new-memory."},
            "updateReason": {"type": "string", "enum": list(REASONS),
                             "description": "Why you update it: append-new-memory (default), clarify-existing-memory "
                                            "or replace-irrelevant-memory; the last two need a searchString."},
        },
        "required": ["newMemory"],
        "additionalProperties": False,
    }


TOOL_DESCRIPTION = (
    "Update working memory in place: append a new fact, or replace one stored line (searchString) with a "
    "corrected one. Send only what changes, never the whole memory."
)


def note(reason: str, what: str) -> str:
    """The version-history note of an update: its reason, then what happened."""
    return f"{reason}: {what}"


def reason_of(version_note: str | None) -> str | None:
    """The ``updateReason`` a version's note starts with (None for other writes)."""
    if not version_note:
        return None
    head = version_note.split(":", 1)[0].strip()
    return head if head in REASONS else None


def plan(opts: WorkingMemoryOptions, current: str | None, args: Any) -> tuple[bool, str, str | None, str]:
    """What the call does to ``current``: (accepted, why, the new text, the update reason)."""
    if not isinstance(args, Mapping):
        return False, "The arguments must be an object with newMemory (and optionally searchString).", None, ""
    new = args.get("newMemory")
    search = args.get("searchString") or None
    reason = args.get("updateReason") or "append-new-memory"
    if not isinstance(new, str) or not new.strip():
        return False, "newMemory must be a non-empty Markdown string: what to store.", None, str(reason)
    if reason not in REASONS:
        return False, f"updateReason must be one of {', '.join(REASONS)}; got {reason!r}.", None, str(reason)
    if search is not None and not isinstance(search, str):
        return False, "searchString must be a string (the stored text to replace).", None, reason
    if reason != "append-new-memory" and not search:
        return False, (f"updateReason was {reason} but no searchString was given, so there is nothing to replace "
                       f"with {new!r}. Name the stored text to replace, or use append-new-memory."), None, reason
    if opts.scope == "resource" and reason == "replace-irrelevant-memory":
        search = None  # off-topic here may matter in the user's other threads: never delete for that
    if reason == "append-new-memory":
        search = None  # models pass one by mistake when they mean to add
    template = opts.effective_template
    existing = current or ""
    if existing.strip():
        if search and search in existing:
            text, why = existing.replace(search, new, 1), "found searchString and replaced it with newMemory"
        elif normalize_ws(new) in normalize_ws(existing) or normalize_ws(new) == normalize_ws(template):
            return False, ("That is already in working memory (or is the empty template): duplicate data was not "
                           "inserted. Nothing changed."), None, reason
        else:
            why = ("searchString is not in working memory; newMemory was appended instead" if search
                   else "appended newMemory to the end of working memory")
            text = existing.rstrip("\n") + "\n" + new
    elif normalize_ws(new) == normalize_ws(template):
        return False, ("newMemory is the empty template, which holds no information: try again when you have "
                       "something to store. Nothing changed."), None, reason
    else:
        text, why = new, "started working memory"
    if template and template in text and normalize_ws(text) != normalize_ws(template):
        text = text.replace(template, "").strip("\n")  # models paste the empty template back in
    return True, why, text, reason


def apply(service: "WorkingMemoryService", opts: WorkingMemoryOptions, *, thread_id: str | None,
          resource_id: str | None, args: Any, stage: "StagedWorkingMemory | None" = None) -> "UpdateResult":
    """Run one vNext tool call: staged with the turn when ``stage`` is given, else written at once."""
    scope, owner = service.owner(opts, thread_id, resource_id)
    if stage is not None:
        current = stage.preview(scope, owner)
    else:
        current = service.get(opts, thread_id=thread_id, resource_id=resource_id).text
    ok, why, text, reason = plan(opts, current, args)
    if not ok or text is None:
        return UpdateResult(False, why, reason=reason or None)
    if stage is not None:  # planned again at commit, on the value stored by then
        stage.add(opts, thread_id, resource_id, "vnext", dict(args), note=note(reason, why))
        return UpdateResult(True, why, text, reason=reason)
    for _attempt in range(3):
        try:  # written only if nobody changed the memory since it was read; else planned again
            value = service.write(opts, thread_id=thread_id, resource_id=resource_id, value=text, author="agent",
                                  note=note(reason, why), expected=current, create_thread=True)
            return UpdateResult(True, why, value.text, reason=reason)
        except ConcurrentUpdateError as exc:
            current = exc.current
            ok, why, text, reason = plan(opts, current, args)
            if not ok or text is None:
                return UpdateResult(False, why, reason=reason or None)
    return UpdateResult(False, "Working memory kept changing while this update was applied; try again.",
                        reason=reason)


__all__ = ["REASONS", "TOOL_DESCRIPTION", "apply", "note", "plan", "reason_of", "tool_parameters"]
