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
from core.json_kind import json_kind


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


def resolve_ref(root: Mapping[str, Any], node: Mapping[str, Any]) -> Mapping[str, Any]:
    """``node``, or the subschema its local ``$ref`` (``#/$defs/Address``, as Pydantic writes nested
    models) points to within ``root``; a ref that is not local or does not resolve is left as is. An
    optional one (``anyOf`` of it and ``null``, Pydantic's ``Address | None``) is followed too."""
    for _ in range(32):  # a chain of refs, never a cycle
        for key in ("anyOf", "oneOf"):
            branches = node.get(key)
            if isinstance(branches, list):
                kept = [b for b in branches if isinstance(b, Mapping) and b.get("type") != "null"]
                if len(kept) == 1 and len(branches) == 2:
                    node = kept[0]
                    break
        ref = node.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#"):
            return node
        target: Any = root
        for raw in ref[1:].split("/")[1:] if ref != "#" else []:
            key = raw.replace("~1", "/").replace("~0", "~")
            target = target.get(key) if isinstance(target, Mapping) else None
        if not isinstance(target, Mapping):
            return node
        node = target
    return node


def strip_nulls_from_optional(schema: Mapping[str, Any], value: Any, root: Mapping[str, Any] | None = None) -> Any:
    """Drop ``null`` for properties the schema does not require (strict-mode providers pad with nulls).

    Without this, a provider that fills every optional field with ``null`` would wipe the memory
    (Mastra #20992). A required field set to ``null`` still deletes it. Nested objects given by a
    local ``$ref`` are followed (``root``: the whole schema, where refs point), and so are the objects
    inside an array (its ``items``), as Mastra's ``stripNullsFromOptional`` does: a padded item of a list
    of people would otherwise fail validation and the whole update be refused. A value without a schema
    of its own has nothing required, so its nulls go too (Mastra recurses with an empty schema).
    """
    if not isinstance(schema, Mapping):
        schema = {}
    root = schema if root is None else root
    schema = resolve_ref(root, schema)
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, list):  # a tuple's positional schemas (draft 7)
            return [strip_nulls_from_optional(items[i] if i < len(items) else {}, item, root)
                    for i, item in enumerate(value)]
        return [strip_nulls_from_optional(items if isinstance(items, Mapping) else {}, item, root) for item in value]
    if not isinstance(value, Mapping):
        return value
    props = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    out: dict[str, Any] = {}
    for key, item in value.items():
        if item is None and key not in required:
            continue
        sub = props.get(key) if isinstance(props, Mapping) else None
        out[key] = strip_nulls_from_optional(sub if isinstance(sub, Mapping) else {}, item, root)
    return out


#: What a JSON working-memory update looks like, in the refusals that say what to send.
_EXAMPLE = '{"name": "Ada"}'


def parse_patch(patch: Any, *, whole: bool = False, nulls_delete: bool = True) -> dict[str, Any]:
    """A JSON working-memory update as an object: ``patch`` itself, or the JSON text of one (an MCP client's or a
    model's argument may be either). Anything else is refused saying what came in JSON's words (``json_kind``: null,
    an array of 3 items, JSON text that reads as a number) and what to send: the fields to change, or with ``whole``
    (a write of the whole value) every field.

    ``nulls_delete``: whether a null in this update deletes its field, so the refusal says what is true for the
    caller. The model's tool passes False: its nulls are dropped (``strip_nulls_from_optional``), and its tool
    description says a null never deletes; telling it otherwise was Mastra #14424's oversold null-delete."""
    noun = "JSON working memory" if whole else "JSON working-memory update"
    keep = "a field set to null is deleted" if nulls_delete else "a field left out is kept"
    wanted = (f"an object of all its fields, such as {_EXAMPLE}" if whole else
              f"an object of the fields to change, such as {_EXAMPLE} ({keep})")
    came = json_kind(patch)
    if isinstance(patch, str):
        try:
            patch = json.loads(patch)
        except json.JSONDecodeError as exc:
            raise WorkingMemoryError(
                f"The {noun} is text that is not valid JSON ({exc.msg} at position {exc.pos}): "
                f"send {wanted}. Nothing changed.") from exc
        came = f"JSON text that reads as {json_kind(patch)}"
    if not isinstance(patch, Mapping):
        raise WorkingMemoryError(f"The {noun} must be {wanted}, not {came}. Nothing changed.")
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


def empty_object(schema: Mapping[str, Any], root: Mapping[str, Any] | None = None, depth: int = 0) -> Any:
    """The compact "shape" shown to the model in schema mode: strings empty, arrays empty, objects recursed
    (through local ``$ref``s, as Pydantic writes nested models; ``root``: where they point)."""
    root = schema if root is None else root
    schema = resolve_ref(root, schema)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind == "object" or (kind is None and "properties" in schema):
        if depth >= 8:  # a recursive model (a tree of itself): the shape stops here
            return {}
        return {k: empty_object(v, root, depth + 1) for k, v in (schema.get("properties") or {}).items()
                if isinstance(v, Mapping)}
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
