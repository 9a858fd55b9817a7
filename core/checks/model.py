"""A memory check: a small declarative record pinning what one stored turn's prompt must (not) contain.

A checks file is a JSON list of records (YAML too, with PyYAML installed: ``memory-studio[yaml]``),
kept in the user's repository, for example::

    [{"name": "allergy reaches dessert", "thread": "food", "resource": "ada",
      "input": "Any dessert ideas?", "prompt_contains": "peanuts"}]

Which turn: ``thread`` (required), ``resource`` (optional; when given it must own the thread), and
the turn by its ``input`` text or its ``turn`` number (1 = the first; -1 = the last). What must hold,
any of: ``prompt_contains`` / ``prompt_excludes`` (text or a list of texts, matched in the whole
prompt the model received, ignoring case), ``recalled`` (a message id or a text that must be among
the recall hits), ``working_memory_contains`` (text in the working-memory block), ``max_tokens`` (the
prompt's token count at most this). ``options``: a what-if for this check alone, merged over the
options the turn ran with. ``description`` is free text. Anything else is a mistake in the file and
is reported as one (a misspelt assertion must never pass silently).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from core.errors import MemoryStudioError
from core.stored_text import json_text

TEXT_ASSERTIONS = ("prompt_contains", "prompt_excludes", "recalled", "working_memory_contains")
ASSERTIONS = (*TEXT_ASSERTIONS, "max_tokens")
_KEYS = {"name", "thread", "resource", "input", "turn", "options", "description", *ASSERTIONS}


class CheckFileError(MemoryStudioError, ValueError):
    """A checks file that cannot be used as it is; the message names the file, the check and the fix."""


@dataclass(frozen=True)
class Check:
    name: str
    thread: str
    resource: str | None = None
    input: str | None = None
    turn: int | None = None
    prompt_contains: tuple[str, ...] = ()
    prompt_excludes: tuple[str, ...] = ()
    recalled: tuple[str, ...] = ()
    working_memory_contains: tuple[str, ...] = ()
    max_tokens: int | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    description: str | None = None

    @property
    def turn_label(self) -> str:
        return f"turn {self.turn}" if self.turn is not None else f"input {self.input!r}"

    def assertions(self) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = [(kind, value) for kind in TEXT_ASSERTIONS for value in getattr(self, kind)]
        if self.max_tokens is not None:
            out.append(("max_tokens", self.max_tokens))
        return out

    def to_dict(self) -> dict[str, Any]:
        """The record as written in a checks file (one text stays a string, several a list)."""
        out: dict[str, Any] = {"name": self.name, "thread": self.thread}
        if self.resource is not None:
            out["resource"] = self.resource
        if self.input is not None:
            out["input"] = self.input
        if self.turn is not None:
            out["turn"] = self.turn
        for kind in TEXT_ASSERTIONS:
            values = getattr(self, kind)
            if values:
                out[kind] = values[0] if len(values) == 1 else list(values)
        if self.max_tokens is not None:
            out["max_tokens"] = self.max_tokens
        if self.options:
            out["options"] = dict(self.options)
        if self.description:
            out["description"] = self.description
        return out


def _texts(value: Any, where: str, key: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(v, str) and v.strip() for v in items):
        raise CheckFileError(f"{where}: {key!r} must be a non-empty text or a list of non-empty texts.")
    return tuple(items)


def parse_check(data: Any, where: str = "check") -> Check:
    """One record of a checks file as a ``Check``; ``CheckFileError`` says what is wrong with it."""
    if not isinstance(data, Mapping):
        raise CheckFileError(f"{where}: a check is an object with a name, a thread and what must hold; "
                             f"got {type(data).__name__}.")
    unknown = sorted(str(k) for k in data if k not in _KEYS)
    if unknown:
        raise CheckFileError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}. A check takes "
                             f"{', '.join(sorted(_KEYS))}.")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise CheckFileError(f"{where}: every check needs a 'name' (a short text that says what it pins).")
    where = f"{where} {name!r}"
    thread = data.get("thread")
    if not isinstance(thread, str) or not thread:
        raise CheckFileError(f"{where}: 'thread' (the thread's id) is required.")
    resource = data.get("resource")
    if resource is not None and (not isinstance(resource, str) or not resource):
        raise CheckFileError(f"{where}: 'resource' must be a resource id (text).")
    text_input, turn = data.get("input"), data.get("turn")
    if (text_input is None) == (turn is None):
        raise CheckFileError(f"{where}: say which turn with either 'input' (the user's message) or 'turn' "
                             "(1 = the first, -1 = the last), not both.")
    if text_input is not None and (not isinstance(text_input, str) or not text_input.strip()):
        raise CheckFileError(f"{where}: 'input' must be the text of the turn's user message.")
    if turn is not None and (isinstance(turn, bool) or not isinstance(turn, int) or turn == 0):
        raise CheckFileError(f"{where}: 'turn' must be a whole number: 1 for the first turn, -1 for the last.")
    values: dict[str, Any] = {k: _texts(data[k], where, k) for k in TEXT_ASSERTIONS if k in data}
    max_tokens = data.get("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens <= 0):
        raise CheckFileError(f"{where}: 'max_tokens' must be a positive whole number.")
    if not values and max_tokens is None:
        raise CheckFileError(f"{where}: nothing to check; add one of {', '.join(ASSERTIONS)}.")
    options = data.get("options") or {}
    if not isinstance(options, Mapping):
        raise CheckFileError(f"{where}: 'options' must be an object of memory options (a what-if for this check).")
    description = data.get("description")
    return Check(name=name.strip(), thread=thread, resource=resource, input=text_input, turn=turn,
                 max_tokens=max_tokens, options=dict(options),
                 description=description if isinstance(description, str) else None, **values)


def parse_checks(data: Any, source: str = "checks") -> list[Check]:
    """A whole file's content (a list of records, or ``{"checks": [...]}``)."""
    if isinstance(data, Mapping) and isinstance(data.get("checks"), list):
        data = data["checks"]
    if not isinstance(data, list):
        raise CheckFileError(f"{source}: a checks file holds a list of checks (a JSON array); got "
                             f"{type(data).__name__}.")
    checks = [parse_check(item, f"{source}: check {i}") for i, item in enumerate(data, start=1)]
    seen: set[str] = set()
    for check in checks:
        if check.name in seen:
            raise CheckFileError(f"{source}: two checks are named {check.name!r}; give each its own name "
                                 "(reports and JUnit files tell them apart by name).")
        seen.add(check.name)
    return checks


def _is_yaml(path: Path) -> bool:
    return path.suffix.lower() in (".yaml", ".yml")


def _yaml() -> Any:
    try:
        import importlib

        return importlib.import_module("yaml")  # optional: memory-studio[yaml]
    except ImportError:
        raise CheckFileError("Reading a YAML checks file needs PyYAML: pip install 'memory-studio[yaml]' "
                             "(or write the checks as JSON).") from None


def read_text(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CheckFileError(f"{path}: no such checks file. Create one (a JSON list of checks), or pin a "
                             "fragment in the Studio to start one.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckFileError(f"{path}: cannot be read ({exc}).") from None
    if not text.strip():
        return []
    try:
        if _is_yaml(path):
            return _yaml().safe_load(text)
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CheckFileError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}).") from None
    except Exception as exc:  # noqa: BLE001 - a YAML syntax error of any kind
        if isinstance(exc, CheckFileError):
            raise
        raise CheckFileError(f"{path}: not valid YAML ({exc}).") from None


def load_checks(path: str | os.PathLike[str]) -> list[Check]:
    """Read and validate a checks file (JSON, or YAML by its extension)."""
    where = Path(path)
    return parse_checks(read_text(where), str(where))


def save_checks(path: str | os.PathLike[str], checks: Sequence[Check]) -> None:
    """Write a checks file whole (next to it, then renamed: a crash never leaves half a file)."""
    where = Path(path)
    records = [c.to_dict() for c in checks]
    if _is_yaml(where):
        text = _yaml().safe_dump(records, allow_unicode=True, sort_keys=False)
    else:
        text = json_text(records, ensure_ascii=False, indent=2) + "\n"
    tmp = where.with_name(where.name + ".tmp")
    where.parent.mkdir(parents=True, exist_ok=True)
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, where)


def add_check(path: str | os.PathLike[str], check: Check) -> Check:
    """Append a check to a file (created when missing); a taken name gets " (2)", " (3)"... Returns
    the check as written."""
    where = Path(path)
    existing = load_checks(where) if where.exists() else []
    names = {c.name for c in existing}
    name, n = check.name, 2
    while name in names:
        name, n = f"{check.name} ({n})", n + 1
    if name != check.name:
        from dataclasses import replace

        check = replace(check, name=name)
    parse_check(check.to_dict(), str(where))  # never write a record the file could not read back
    save_checks(where, [*existing, check])
    return check


__all__ = ["ASSERTIONS", "Check", "CheckFileError", "TEXT_ASSERTIONS", "add_check", "load_checks", "parse_check",
           "parse_checks", "save_checks"]
