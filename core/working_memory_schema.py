"""Schema-mode working memory: JSON Schema checks, merge rules and validation.

Merge rules (seed 004, spec §2.5): objects deep-merge, ``null`` deletes a field, arrays are replaced
whole, any other value overwrites. Inputs are never mutated and the result never aliases them.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Mapping

import jsonschema
from jsonschema import Draft7Validator

from core.errors import MemoryStudioError


class WorkingMemoryError(MemoryStudioError, ValueError):
    """A working-memory value or configuration was refused; nothing was written."""


def check_schema(schema: Any) -> None:
    """Refuse schemas that are not JSON Schema objects describing an object."""
    if not isinstance(schema, Mapping):
        raise WorkingMemoryError("working_memory.schema must be a JSON Schema object (a dict).")
    try:
        Draft7Validator.check_schema(dict(schema))
    except jsonschema.SchemaError as exc:
        raise WorkingMemoryError(f"working_memory.schema is not a valid JSON Schema: {exc.message}") from exc
    kind = schema.get("type")
    if kind not in (None, "object") or (kind is None and "properties" not in schema):
        raise WorkingMemoryError("working_memory.schema must describe an object (type: object with properties).")


def working_memory_merge(existing: Mapping[str, Any] | None, update: Mapping[str, Any] | None) -> dict[str, Any]:
    """Schema-mode working memory ``existing`` + ``update``: objects merge, ``null`` deletes, arrays replace.

    Not the options merge (``core.options.options_merge``), where ``null`` is a value and ``True``/``False``
    switch a feature on or off.
    """
    base: dict[str, Any] = copy.deepcopy(dict(existing)) if isinstance(existing, Mapping) else {}
    if not update:
        return base
    for key, value in update.items():
        if value is None:
            base.pop(key, None)
        elif isinstance(value, Mapping):
            current = base.get(key)
            base[key] = working_memory_merge(current if isinstance(current, Mapping) else {}, value)
        else:
            base[key] = copy.deepcopy(value)
    return base


def strip_nulls_from_optional(schema: Mapping[str, Any], value: Any) -> Any:
    """Drop ``null`` for properties the schema does not require (strict-mode providers pad with nulls).

    Without this, a provider that fills every optional field with ``null`` would wipe the memory
    (Mastra #20992). A required field set to ``null`` still deletes it.
    """
    if not isinstance(value, Mapping) or not isinstance(schema, Mapping):
        return value
    props = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    out: dict[str, Any] = {}
    for key, item in value.items():
        if item is None and key not in required:
            continue
        sub = props.get(key)
        out[key] = strip_nulls_from_optional(sub, item) if isinstance(sub, Mapping) else item
    return out


def parse_patch(patch: Any) -> dict[str, Any]:
    if isinstance(patch, str):
        try:
            patch = json.loads(patch)
        except json.JSONDecodeError as exc:
            raise WorkingMemoryError(f"The working-memory patch is not valid JSON: {exc.msg} at position {exc.pos}.") from exc
    if not isinstance(patch, Mapping):
        raise WorkingMemoryError(
            f"A working-memory patch must be a JSON object, got {type(patch).__name__}. Wrap the fields in {{...}}."
        )
    return dict(patch)


def validate(schema: Mapping[str, Any], value: Any) -> list[str]:
    """Return human-readable problems (empty when valid). Paths are shown as ``a.b[0]``."""
    validator = Draft7Validator(dict(schema))
    problems = []
    for error in sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path)):
        path = _path(error.absolute_path)
        problems.append(f"{path or '(root)'}: {error.message}")
    return problems


def _path(parts: Any) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def empty_object(schema: Mapping[str, Any]) -> Any:
    """The compact "shape" shown to the model in schema mode: strings empty, arrays empty, objects recursed."""
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind == "object" or (kind is None and "properties" in schema):
        return {k: empty_object(v) for k, v in (schema.get("properties") or {}).items() if isinstance(v, Mapping)}
    if kind == "array":
        return []
    if kind in ("number", "integer"):
        return 0
    if kind == "boolean":
        return False
    return ""


def load_stored(value: str | None) -> dict[str, Any]:
    """Stored schema-mode memory; unparseable or non-object data starts fresh (Mastra does the same)."""
    if not value:
        return {}
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}
