"""Who a turn is for: ownership and scope rules, and their errors.

A thread belongs to one resource for life. Scopes (``resource:<id>``, ``thread:<id>``, and others
such as ``org:acme``) may name the resource and thread too; they must agree with what else was given.

A sub-agent a turn delegates to runs on a resource of its own, ``delegation:<resource>:<agent>``
(``delegation_resource``), a namespace no client-named id may take (``check_client_resource``): the
gateway and the MCP server refuse a resource id starting ``delegation:``, so a user whose id happens to
read like another's delegation (Mastra's ``<resource>-<agent>``: user ``alice-helper`` and Alice's
sub-agent ``helper``) never shares its memory.
"""

from __future__ import annotations

from typing import Sequence

from core.errors import MemoryStudioError
from core.ids import clipped


def _quoted(value: str) -> str:
    """``"value"`` for a message, cut as ``core.ids.clipped`` cuts it: a thread id an MCP client sent may be
    as long as its request."""
    return f'"{clipped(value)}"'


class ThreadOwnershipError(MemoryStudioError, PermissionError):
    """A thread was used with a resource other than the one that owns it."""

    def __init__(self, thread_id: str, owner: str, resource_id: str) -> None:
        super().__init__(
            f'Thread {_quoted(thread_id)} belongs to resource {_quoted(owner)}, but resource {_quoted(resource_id)} '
            "was given. "
            "A thread is owned by one resource for life; use a thread of that resource or a new thread id."
        )
        self.thread_id, self.owner, self.resource_id = thread_id, owner, resource_id

    def without_owner(self) -> str:
        """The refusal for a caller who may be another user (the gateway, the MCP server): it does not name
        the resource that owns the thread, an identifier of another user."""
        thread, resource = _quoted(self.thread_id), _quoted(self.resource_id)
        if not self.owner:
            return (f"Thread {thread} has no owner (another program stored it without a resource), so it is not "
                    f"{resource}'s to read or write from here; use a thread of {resource} or a new thread id.")
        return (f"Thread {thread} belongs to another resource, not {resource}. A thread is owned by one resource for "
                f"life; use a thread of {resource} or a new thread id.")


class ScopeConflictError(MemoryStudioError, ValueError):
    """The scopes of a call disagree with each other or with the ids given beside them."""


#: Resources of delegations (sub-agents' runs) live under this prefix, which clients may not use.
DELEGATION_PREFIX = "delegation:"


class ReservedResourceError(MemoryStudioError, PermissionError):
    """A caller from outside named a resource in the delegation namespace (``delegation:``)."""


def delegation_resource(resource_id: str | None, agent_name: str) -> str:
    """The resource a delegation from ``resource_id``'s turn to sub-agent ``agent_name`` runs on:
    ``delegation:<resource>:<agent>``, with ``%`` and ``:`` percent-encoded in both parts, so the id splits
    back into exactly one (resource, agent) pair (a nested delegation's resource is encoded whole) and no
    two pairs share a resource. A turn without a resource delegates to ``delegation::<agent>``."""
    return f"{DELEGATION_PREFIX}{_escape(resource_id or '')}:{_escape(agent_name)}"


def is_delegation_resource(resource_id: str) -> bool:
    return resource_id.startswith(DELEGATION_PREFIX)


def check_client_resource(resource_id: str) -> str:
    """``resource_id`` when a caller from outside (a gateway request, an MCP call) may name it: never one in
    the delegation namespace, which only the engine's delegations write (``ReservedResourceError``)."""
    if is_delegation_resource(resource_id):
        raise ReservedResourceError(
            f"Resource ids starting with {DELEGATION_PREFIX!r} belong to the agents' delegations (a sub-agent's "
            f"memory of a resource's turns), so no client may name one: {_quoted(resource_id)} was refused and "
            "nothing was read or written. Use the user's own resource id; a delegation's reply is in the "
            "supervisor's thread, and its own memory can be inspected in the Studio.")
    return resource_id


def _escape(part: str) -> str:
    return part.replace("%", "%25").replace(":", "%3A")


def check_thread_owner(thread_id: str, owner: str | None, resource_id: str | None) -> None:
    """The one ownership rule: a thread owned by ``owner`` may only be used with that resource.

    Nothing to check when either side is unknown (a thread without a stored owner, a call that
    names no resource). Raises ``ThreadOwnershipError`` before anything is written.
    """
    if owner and resource_id and owner != resource_id:
        raise ThreadOwnershipError(thread_id, owner, resource_id)


def check_caller_owns(thread_id: str, owner: str | None, resource_id: str) -> None:
    """``check_thread_owner`` for a caller from outside (a gateway request, an MCP call), who always names
    a resource: a stored thread without an owner (``owner`` empty; the engine never stores one, another
    program may have) is nobody's, so such a caller may not read or write it either. ``owner`` None: no
    such thread."""
    if owner is not None and not owner:
        raise ThreadOwnershipError(thread_id, owner, resource_id)
    check_thread_owner(thread_id, owner, resource_id)


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
