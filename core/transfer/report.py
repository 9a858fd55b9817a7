"""What an import did (or, for a preview, would do): rows written and unchanged per kind, conflicts,
notes, and the ids of the messages written (for the recall index)."""

from __future__ import annotations

from dataclasses import dataclass, field

# A file's ids reach the report's lines (and the errors about the file), and must not drive the terminal
# or dialog that shows them.
from core.terminal_text import printable

KINDS = ["resources", "threads", "messages", "workingMemoryVersions", "observations", "turns"]
#: Counted even when nothing of them was written; kinds registered later appear once a row of them is.
CORE_KINDS = tuple(KINDS)
_LABELS = {"resources": "resource", "threads": "thread", "messages": "message",
           "workingMemoryVersions": "working-memory version", "observations": "observation row",
           "turns": "turn record"}


def register_kind(kind: str, label: str) -> None:
    """A kind of row the report counts (``core.transfer.sections.register`` calls this)."""
    if kind not in KINDS:
        KINDS.append(kind)
    _LABELS.setdefault(kind, label)


@dataclass(frozen=True)
class Conflict:
    kind: str  # one of KINDS
    id: str
    reason: str
    overwritten: bool = False
    replaceable: bool = True  # False: overwrite cannot resolve it (a thread owned by another resource)

    def __str__(self) -> str:
        kind = _LABELS.get(self.kind, self.kind.rstrip("s"))
        return printable(f"{kind} {self.id}: {self.reason}" + ("; replaced" if self.overwritten else ""))


@dataclass
class ImportReport:
    target: str
    dry_run: bool = False
    written: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CORE_KINDS, 0))
    unchanged: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CORE_KINDS, 0))
    conflicts: list[Conflict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    message_ids: list[str] = field(default_factory=list)  # messages inserted or replaced
    left_out: list[str] = field(default_factory=list)  # what the file does not carry that a replay here would use

    @property
    def changed(self) -> bool:
        return any(self.written.values())

    def summary(self) -> str:
        verb = "would write" if self.dry_run else "wrote"
        parts = [f"{n} {_label(k, n)}" for k, n in self.written.items() if n]
        same = sum(self.unchanged.values())
        line = f"{verb} {', '.join(parts) if parts else 'nothing'}"
        if same:
            line += f"; {same} row{'s' if same != 1 else ''} already there, unchanged"
        kept = sum(1 for c in self.conflicts if not c.overwritten and c.replaceable)
        if kept:
            one = kept == 1
            line += (f"; {kept} row{'' if one else 's'} that differ{'s' if one else ''} "
                     f"{'would be kept' if self.dry_run else 'kept'} as {'it is' if one else 'they are'} "
                     f"(overwrite replaces {'it' if one else 'them'})")
        would = "would be " if self.dry_run else ""
        owned = sum(1 for c in self.conflicts if not c.replaceable and c.kind == "threads")
        if owned:
            line += f"; {owned} thread{'s' if owned != 1 else ''} owned by another resource here {would}left out"
        # A message (or a record keyed by one) in another thread here, a row another thread owns: not threads.
        others = sum(1 for c in self.conflicts if not c.replaceable and c.kind != "threads")
        if others:
            line += f"; {others} row{'s' if others != 1 else ''} of another thread here {would}left out"
        replaced = sum(1 for c in self.conflicts if c.overwritten)
        if replaced:
            line += (f"; {replaced} row{'s' if replaced != 1 else ''} that differed "
                     f"{'would be ' if self.dry_run else ''}replaced")
        if self.left_out:
            # What, not why: ``details()`` gives each reason (a reader shows both, so it is said once).
            line += "; left out: " + "; ".join(x.split(": ", 1)[0] for x in self.left_out)
        return line

    def details(self) -> list[str]:
        return [*(str(c) for c in self.conflicts), *map(printable, self.notes), *(f"left out: {x}" for x in self.left_out)]


def _label(kind: str, n: int) -> str:
    return _LABELS.get(kind, kind) + ("s" if n != 1 else "")
