"""Who a turn is for: ownership and scope rules, and their errors.

A thread belongs to one resource for life. Scopes (``resource:<id>``, ``thread:<id>``, and others
such as ``org:acme``) may name the resource and thread too; they must agree with what else was given.
"""

from __future__ import annotations

from typing import Sequence


class MemoryError_(RuntimeError):
    """Base for errors the memory facade raises about how it was called."""


class ThreadOwnershipError(MemoryError_, PermissionError):
    def __init__(self, thread_id: str, owner: str, resource_id: str) -> None:
        super().__init__(
            f'Thread "{thread_id}" belongs to resource "{owner}", but resource "{resource_id}" was given. '
            "A thread is owned by one resource for life; use a thread of that resource or a new thread id."
        )
        self.thread_id, self.owner, self.resource_id = thread_id, owner, resource_id


class ScopeConflictError(MemoryError_, ValueError):
    pass


def parse_scopes(
    scopes: Sequence[str] | None, *, resource_id: str | None, thread_id: str | None
) -> tuple[str | None, str | None, tuple[str, ...]]:
    """Split ``resource:``/``thread:`` scopes from the others; a disagreement is an error."""
    others: list[str] = []
    for scope in scopes or ():
        if not isinstance(scope, str) or ":" not in scope or scope.startswith(":") or scope.endswith(":"):
            raise ScopeConflictError(f"A scope looks like 'type:value' (for example 'org:acme'); got {scope!r}.")
        kind, value = scope.split(":", 1)
        if kind == "resource":
            if resource_id is not None and resource_id != value:
                raise ScopeConflictError(
                    f"Scope 'resource:{value}' disagrees with the resource id {resource_id!r}; pass one of them."
                )
            resource_id = value
        elif kind == "thread":
            if thread_id is not None and thread_id != value:
                raise ScopeConflictError(
                    f"Scope 'thread:{value}' disagrees with the thread id {thread_id!r}; pass one of them."
                )
            thread_id = value
        else:
            others.append(scope)
    return resource_id, thread_id, tuple(others)
