"""Marks for fragments whose stored messages changed after the turn (pure: no Qt).

A rebuilt turn (``Memory.assemble(as_of=...)``) shows what its model saw; ``ReplayInfo.changed_since``
names the stored messages that were edited or deleted since. Viewers mark the fragments built from
them, so nobody mistakes the old text for what is stored now.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from studio.logic.short_ids import short_id


def changed_since(prompt: Any) -> Mapping[str, str]:
    """Message id -> "edited since" / "deleted since" for a rebuilt prompt (empty otherwise)."""
    replay = getattr(prompt, "replay", None)
    changed = getattr(replay, "changed_since", None) if replay is not None else None
    return dict(changed) if changed else {}


def fragment_mark(changed: Mapping[str, str], stored_ids: Iterable[str]) -> str:
    """"edited since" / "deleted since" (or both) for a fragment's stored messages; "" when none changed."""
    kinds = sorted({changed[i] for i in stored_ids if i in changed})
    return " and ".join(kinds)


def sources_note(changed: Mapping[str, str], stored_ids: Iterable[str]) -> str:
    """One sentence for a fragment's detail: which of its messages changed, and what is shown."""
    ids = [i for i in stored_ids if i in changed]
    if not ids:
        return ""
    listed = ", ".join(f"{short_id(i)} ({changed[i]})" for i in ids[:4]) + (" …" if len(ids) > 4 else "")
    return f"Shown as the model saw it at this turn; changed since: {listed}."


def edited_note(changed: Mapping[str, str]) -> str:
    """For a turn's caption: how many of the stored messages it used changed since ("1 edited since"),
    and that the turn still shows them as the model received them ("" when none did)."""
    if not changed:
        return ""
    kinds = sorted(set(changed.values()))
    n = len(changed)
    return f"{n} {' or '.join(kinds)}, shown as sent"


__all__ = ["changed_since", "edited_note", "fragment_mark", "sources_note"]
