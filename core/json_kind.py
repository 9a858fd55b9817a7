"""What kind of JSON value came, in words, for a refusal that says what was sent without repeating it.

Every surface that refuses a value of the wrong kind (an MCP tool's argument, a working-memory update through MCP,
the gateway, the model's tool or the Studio's editor) names it as JSON does, never by Python's type name
("NoneType", "list"): ``null``, ``true``, ``the number 5``, ``a string (12 characters)``, ``an array (3 items)``,
``an object (2 keys)``. A string's text and an object's contents are never repeated: a client's value may be
megabytes, or hold control characters.
"""

from __future__ import annotations

from typing import Any


def json_kind(value: Any) -> str:
    """What kind of JSON value a client sent, with its size; the value itself only when it is a short number."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"the number {value}" if abs(value) < 10**15 else "an integer too large to repeat"
    if isinstance(value, float):
        return f"the number {value!r}" if len(repr(value)) <= 24 else "a number"
    if isinstance(value, str):
        return f"a string ({count(len(value), 'character')})"
    if isinstance(value, list):
        return f"an array ({count(len(value), 'item')})"
    if isinstance(value, dict):
        return f"an object ({count(len(value), 'key')})"
    return "a value of another kind"


def count(n: int, noun: str) -> str:
    """``n`` ``noun``s, with thousands separators ("1 item", "3,000 characters")."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")
