"""Who a turn is for: ownership and scope rules, and their errors.

A thread belongs to one resource for life. Scopes (``resource:<id>``, ``thread:<id>``, and others
such as ``org:acme``) may name the resource and thread too; they must agree with what else was given.

A sub-agent a turn delegates to runs on a resource of its own, ``delegation:<resource>:<agent>``
(``delegation_resource``), a namespace no client-named id may take (``check_client_resource``): the
gateway's chat route, ``Agent.generate``/``stream`` and ``MemorySession`` refuse a resource id starting
``delegation:``, so a user whose id happens to read like another's delegation (Mastra's
``<resource>-<agent>``: user ``alice-helper`` and Alice's sub-agent ``helper``) never shares its memory.
The memory API and the MCP tools let a caller of resource R read R's own delegations, found by parsing
the id back (``delegation_parent``, ``delegation_root``), never by comparing a prefix.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

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


def delegation_parent(resource_id: str) -> tuple[str, str] | None:
    """The (resource, agent) pair ``resource_id`` is the delegation resource of, or None when it is not one
    exactly as ``delegation_resource`` writes it: not in the namespace, not two parts, or not in their one
    encoding (``delegation:ali%63e:x``, ``delegation:a%3ab:x`` name no pair). A nested delegation's parent is a
    delegation resource itself. A turn without a resource (``delegation::<agent>``) has the parent ``""``."""
    if not is_delegation_resource(resource_id):
        return None
    parts = resource_id[len(DELEGATION_PREFIX):].split(":")
    if len(parts) != 2 or not parts[1]:
        return None
    parent, agent = (_unescape(part) for part in parts)
    return (parent, agent) if delegation_resource(parent, agent) == resource_id else None


def delegation_root(resource_id: str) -> str | None:
    """The resource whose turns ``resource_id``'s delegations (nested ones too) ran for: ``alice`` for
    ``delegation:alice:helper`` and for a delegation of that one; None when it is no delegation resource
    (``delegation_parent``), or one of a turn without a resource."""
    pair = delegation_parent(resource_id)
    while pair is not None and is_delegation_resource(pair[0]):
        pair = delegation_parent(pair[0])
    return (pair[0] or None) if pair is not None else None


def delegation_chain(resource_id: str) -> tuple[str, tuple[str, ...]] | None:
    """The resource a delegation resource's turns ran for and the agents it was handed to, first first:
    ``("alice", ("helper", "checker"))`` for a delegation of ``delegation:alice:helper`` to ``checker``. None
    when ``delegation_root`` is None (no delegation resource as the engine writes them, or a turn without a
    resource)."""
    agents: list[str] = []
    pair = delegation_parent(resource_id)
    while pair is not None:
        agents.append(pair[1])
        if not is_delegation_resource(pair[0]):
            return (pair[0], tuple(reversed(agents))) if pair[0] else None
        pair = delegation_parent(pair[0])
    return None


def is_delegation_of(resource_id: str, owner: str) -> bool:
    """Whether ``resource_id`` is a delegation resource of ``owner``'s turns, directly or nested (a delegation
    of one of its delegations): parsed back with ``delegation_parent``, never compared by prefix, so
    ``delegation:alice:helper`` is no delegation of ``al``."""
    pair = delegation_parent(resource_id)
    while pair is not None:
        if pair[0] == owner:
            return bool(owner)
        pair = delegation_parent(pair[0])
    return False


def delegation_label(resource_id: str) -> str | None:
    """How a client is told what a delegation resource is: "delegation of alice to helper" (nested: "...
    to helper, then to checker"); None for any other id."""
    chain = delegation_chain(resource_id)
    if chain is None:
        return None
    root, agents = chain
    return f"delegation of {root} to " + ", then to ".join(agents)


#: What a refusal of a delegation resource tells a caller from outside to do instead.
CLIENT_ADVICE = ("Use the user's own resource id; a delegation's reply is in the supervisor's thread, and its own "
                 "memory is read with that resource's token on the memory API (resourceId=delegation:<resource>:"
                 "<agent>) or the MCP tools, or in the Studio.")


def check_client_resource(resource_id: str, *, advice: str = CLIENT_ADVICE) -> str:
    """``resource_id`` when a caller from outside (a gateway request, an MCP call, an application's end user
    through ``Agent.generate``) may name it: never one in the delegation namespace, which only the engine's
    delegations write (``ReservedResourceError``, ending with ``advice``: what the caller should do)."""
    if is_delegation_resource(resource_id):
        raise ReservedResourceError(
            f"Resource ids starting with {DELEGATION_PREFIX!r} belong to the agents' delegations (a sub-agent's "
            f"memory of a resource's turns), so no client may name one: {_quoted(resource_id)} was refused and "
            f"nothing was read or written. {advice}")
    return resource_id


def _escape(part: str) -> str:
    return part.replace("%", "%25").replace(":", "%3A")


def _unescape(part: str) -> str:
    return part.replace("%3A", ":").replace("%25", "%")


def check_thread_owner(thread_id: str, owner: str | None, resource_id: str | None) -> None:
    """The one ownership rule: a thread owned by ``owner`` may only be used with that resource.

    Nothing to check when either side is unknown (a thread without a stored owner, a call that
    names no resource: None). An empty resource id is a resource, not "none named": an app whose user id
    came out empty otherwise read another user's thread and wrote its turns into it. Raises
    ``ThreadOwnershipError`` before anything is written.
    """
    if owner and resource_id is not None and owner != resource_id:
        raise ThreadOwnershipError(thread_id, owner, resource_id)


def check_thread_as_started(thread_id: str, owner_at_start: str | None, owner_now: str,
                            resource_id: str | None) -> None:
    """A turn's thread, read again before its model call or its save, is still the one the turn began with.

    ``owner_at_start``: the thread's owner when the turn began, None when it was not stored then; ``owner_now``:
    its owner now (the thread is stored). A thread stored then must have the same owner now: a different one was
    deleted and stored again meanwhile (by another resource, or by another program without an owner), and is not
    the turn's. A thread not stored then must now be ``resource_id``'s: another resource's is refused as at the
    start, and one stored meanwhile without an owner is another program's (the turn would otherwise read it, and
    write its messages into it). Raises ``ThreadOwnershipError``."""
    if owner_at_start is not None:
        if owner_now != owner_at_start:
            raise ThreadOwnershipError(thread_id, owner_now, resource_id or "")
        return
    if not owner_now and resource_id:
        raise ThreadOwnershipError(thread_id, owner_now, resource_id)
    check_thread_owner(thread_id, owner_now, resource_id)


def from_outside(values: Mapping[str, Any]) -> bool:
    """Whether a turn's request-context ``values`` say it came from outside (the gateway's turns carry
    ``{"source": "gateway"}``): such a caller always names a resource, and a thread without an owner is nobody's to
    it (``check_caller_owns``), where the engine lets an in-process caller use one."""
    return values.get("source") == "gateway"


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


#: The request-context key where trusted server code (never a client's request body) puts scopes of a run,
#: beside the call's and the agent's own (Mastra's ``MASTRA_SCOPES_KEY``, the same string).
SCOPES_KEY = "mastra__scopes"


def scope_list(value: object, source: str) -> list[str]:
    """``value`` as a list of scopes, or ``ScopeConflictError`` naming ``source`` (where it came from)."""
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise ScopeConflictError(f"{source} must be a list of 'type:value' scopes (for example ['org:acme']); "
                                 f"got {type(value).__name__}.")
    for scope in value:
        if not isinstance(scope, str) or ":" not in scope or scope.startswith(":") or scope.endswith(":"):
            raise ScopeConflictError(f"{source}: a scope looks like 'type:value' (for example 'org:acme'); "
                                     f"got {scope!r}.")
    return list(value)


def run_scopes(*sources: tuple[object, str], resource_id: str | None = None,
               thread_id: str | None = None) -> list[str]:
    """The scopes of one run: every source's ``(scopes, name)`` in turn, each scope once, in first-seen order.
    A ``resource:`` or ``thread:`` scope that disagrees with another source's, or with the ``resource_id`` /
    ``thread_id`` the call's ``memory`` names, is refused naming both and where each came from
    (``ScopeConflictError``): one side may be the agent's definition or server code, not the caller's."""
    first: dict[str, tuple[str, str]] = {}
    for kind, given in (("resource", resource_id), ("thread", thread_id)):
        if isinstance(given, str) and given:
            first[kind] = (repr(given), f"the call's memory={{{kind!r}: ...}}")
    out: list[str] = []
    for value, source in sources:
        for scope in scope_list(value, source):
            kind, _, named = scope.partition(":")
            if kind in ("resource", "thread"):
                seen = first.setdefault(kind, (repr(scope), source[:1].lower() + source[1:]))
                if seen[0] not in (repr(scope), repr(named)):
                    raise ScopeConflictError(
                        f"Scope {scope!r} ({source[:1].lower() + source[1:]}) disagrees with {seen[0]} ({seen[1]}): "
                        f"a run is about one {kind}. Make them agree, or name the {kind} in one place only. Nothing "
                        "was read or written.")
            if scope not in out:
                out.append(scope)
    return out
