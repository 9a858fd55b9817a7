"""Line diffs for working-memory versions, templates and conflicts (pure logic, no Qt).

Views render ``DiffLine`` rows; they never call ``difflib`` themselves, so what a test asserts is what
the user sees.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import Literal

Kind = Literal["equal", "insert", "delete"]


@dataclass(frozen=True)
class DiffLine:
    kind: Kind
    text: str
    old_no: int | None  # 1-based line number in the old text (None for inserts)
    new_no: int | None  # 1-based line number in the new text (None for deletes)


@dataclass(frozen=True)
class DiffStats:
    added: int
    removed: int

    @property
    def unchanged(self) -> bool:
        return self.added == 0 and self.removed == 0

    def label(self) -> str:
        return "no changes" if self.unchanged else f"+{self.added} −{self.removed}"


def normalize_for_diff(text: str | None, fmt: str = "markdown") -> str:
    """JSON is compared pretty-printed with sorted keys, so key order and spacing are not "changes"."""
    if text is None:
        return ""
    if fmt == "json":
        try:
            return json.dumps(json.loads(text), ensure_ascii=False, indent=2, sort_keys=True)
        except (json.JSONDecodeError, TypeError):
            return text
    return text


def line_diff(old: str | None, new: str | None) -> list[DiffLine]:
    a = (old or "").splitlines()
    b = (new or "").splitlines()
    out: list[DiffLine] = []
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            out.extend(DiffLine("equal", a[i], i + 1, j1 + (i - i1) + 1) for i in range(i1, i2))
            continue
        if tag in ("delete", "replace"):
            out.extend(DiffLine("delete", a[i], i + 1, None) for i in range(i1, i2))
        if tag in ("insert", "replace"):
            out.extend(DiffLine("insert", b[j], None, j + 1) for j in range(j1, j2))
    return out


def stats(lines: list[DiffLine]) -> DiffStats:
    return DiffStats(
        added=sum(1 for ln in lines if ln.kind == "insert"),
        removed=sum(1 for ln in lines if ln.kind == "delete"),
    )


def unified(old: str | None, new: str | None, *, old_label: str = "before", new_label: str = "after") -> str:
    """A unified diff as text (what "Copy diff" puts on the clipboard)."""
    return "".join(
        difflib.unified_diff(
            (old or "").splitlines(keepends=True), (new or "").splitlines(keepends=True),
            fromfile=old_label, tofile=new_label,
        )
    )
