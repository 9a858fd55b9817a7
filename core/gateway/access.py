"""Who called, and which resources' memory they may use: the one rule every HTTP route asks.

The request guard (``core.gateway.guard``) knows the caller once it has checked the bearer token: the
shared token (``--token``), or an entry of a tokens file (``--tokens-file``, ``core.gateway.tokens``)
with its own list of resources. It puts a ``Caller`` into the request's ASGI scope (``CALLER_KEY``);
the chat route, the memory API and the MCP server's tools read it back with ``caller_of`` and ask it
before they read or write anything:

- a resource the request names (``metadata.resource_id``, ``x-resource-id``, ``user``, ``resourceId``,
  an MCP tool's ``resource``) outside the caller's list is refused with 403 (``ResourceNotAllowed``);
- a request that names none gets the caller's only resource when it has exactly one
  (``Caller.only_resource``), else whatever the route did before (a default resource, a 400);
- a resource in the delegation namespace (``delegation:``, ``core.scopes.delegation_resource``: where a
  sub-agent runs for a resource's turns) is refused on the chat route whoever names it, the shared token
  too (400 ``reserved_resource``): only the engine's delegations run turns there, and no user's own id can
  equal one. The memory API and the MCP tools (``check(..., delegations=True)``) let a caller that may use
  resource R read and write R's delegations' memory (``delegation:R:<agent>``, nested ones too:
  ``core.scopes.delegation_root``), never another resource's: it is R's memory. A delegation id not
  written exactly as ``delegation_resource`` writes it names no resource's delegation and is refused.

A caller with every resource (``Caller.resources`` None) is the shared token's, or a server with no
token at all: the routes then behave as they did before tokens files existed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from core.gateway.errors import GatewayError, bad_request
from core.ids import MAX_NEW_ID, new_id_problem, shown
from core.scopes import ReservedResourceError, check_client_resource, delegation_root, is_delegation_resource
from core.storage import NotFoundError

log = logging.getLogger(__name__)

#: The ASGI scope key the guard stores the request's ``Caller`` under.
CALLER_KEY = "memory_studio.caller"


class ResourceNotAllowed(GatewayError, PermissionError):
    """A request named a resource its token may not use (403, ``resource_not_allowed``)."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(403, message, type="permission_error", code="resource_not_allowed", param=param)


@dataclass(frozen=True)
class Caller:
    """The authenticated caller of one request.

    ``name``: the tokens file entry's name (what traces and logs show as who called), or None for the
    shared token and for a server without one. ``resources``: the resources it may use, or None for all.
    """

    name: str | None = None
    resources: frozenset[str] | None = None

    @property
    def scoped(self) -> bool:
        """Whether this caller is limited to some resources (a tokens file entry without ``"*"``)."""
        return self.resources is not None

    @property
    def only_resource(self) -> str | None:
        """The caller's resource when it has exactly one (a request naming none is about it)."""
        if self.resources is not None and len(self.resources) == 1:
            return next(iter(self.resources))
        return None

    def allows(self, resource_id: str) -> bool:
        return self.resources is None or resource_id in self.resources

    def reaches(self, resource_id: str) -> bool:
        """``allows``, and for a delegation resource: whether this caller may use the resource it ran for
        (``delegation_root``; a malformed delegation id, or one of a turn without a resource, is nobody's)."""
        if not is_delegation_resource(resource_id):
            return self.allows(resource_id)
        root = delegation_root(resource_id)
        return root is not None and not is_delegation_resource(root) and self.allows(root)

    def check(self, resource_id: str, *, param: str | None = None, delegations: bool = False) -> str:
        """``resource_id`` when this caller may use it; ``ResourceNotAllowed`` otherwise. The message does not
        list the resources the token may use (a stolen token should not tell what else it reaches). A resource
        in the delegation namespace is refused to every caller (400 ``reserved_resource``), except with
        ``delegations`` (the memory API, the MCP tools): then one of the caller's own resources' delegations is
        allowed (``reaches``), another's is 403 as another resource is, and a malformed one 400."""
        if delegations and is_delegation_resource(resource_id):
            if delegation_root(resource_id) is None:
                raise GatewayError(
                    400, f"{shown(resource_id)} is not a delegation resource as the engine names them "
                    "(delegation:<resource>:<agent>, with '%' and ':' in either part written %25 and %3A), or is "
                    "one of a turn without a resource, which no token reaches. Copy the id from the delegation's "
                    "tool result ('resource'). Nothing was read or written.", code="reserved_resource", param=param)
            allowed = self.reaches(resource_id)
        else:
            try:
                check_client_resource(resource_id)
            except ReservedResourceError as exc:
                raise GatewayError(400, str(exc), code="reserved_resource", param=param) from None
            allowed = self.allows(resource_id)
        if not allowed:
            # Who tried what, for whoever watches the log (the token's name, never the token).
            log.warning("refused: token %r asked for resource %s, which it may not use", self.name, shown(resource_id))
            raise ResourceNotAllowed(
                f"The API token {self.name!r} may not use resource {shown(resource_id)}. Send a resource this "
                "token was given (its entry in the server's tokens file lists them), or use that resource's own "
                "token. Nothing was read or written.", param=param)
        return resource_id

    def resource_for(self, named: str | None, *, param: str, fallback: str | None = None,
                     delegations: bool = False) -> str | None:
        """The resource a request is about: the one it named (checked, ``delegations`` as ``check``), else the
        caller's only one, else ``fallback`` (checked too; None: the route decides what a request naming none
        means)."""
        if named:
            return self.check(named, param=param, delegations=delegations)
        only = self.only_resource
        if only is not None:
            return only
        if fallback is not None and self.scoped:
            if not self.allows(fallback):
                raise GatewayError(
                    400, f"The API token {self.name!r} may use several resources, and this request names none: "
                    f"say which with {param}.", param=param, code="resource_required")
        return fallback


def client_id(name: str, value: Any) -> str | None:
    """The rule for an id a client names (a chat turn's ``thread_id``, ``resource_id`` and ``user``, the memory API's
    ``resourceId``, an MCP tool's ``resource``...): printable, at most ``MAX_NEW_ID`` characters (``new_id_problem``);
    400 naming ``name`` otherwise, the same words on every route and tool. None or "" is "not given" (None)."""
    if value is None or value == "":
        return None
    problem = new_id_problem(value)
    if problem is not None:
        raise bad_request(f"{name} must be a printable string of at most {MAX_NEW_ID} characters, got {shown(value)}: "
                          f"{problem}. Nothing was read or written.", param=name)
    assert isinstance(value, str)
    return value


def check_named_resource(name: str, resource_id: str, stored: Callable[[str], bool]) -> None:
    """``client_id``'s rule for a resource a client names to read or write its memory (the memory API's
    ``resourceId``, an MCP tool's ``resource``; for a delegation's resource, the resource it delegated for): 400,
    unless ``stored(resource_id)`` says something is stored under it (a row another tool wrote stays reachable).
    Without it, a ``resourceId`` of 8,000 characters answered an empty list where a chat turn refused it.
    ``stored`` reads the database: it is asked only for an id that breaks the rule."""
    if breaks_id_rule(resource_id) and not stored(resource_id):
        client_id(name, _named(resource_id))


def _named(resource_id: str) -> str | None:
    """The id a client named: a delegation's resource is named by the resource it delegated for."""
    return delegation_root(resource_id) if is_delegation_resource(resource_id) else resource_id


def breaks_id_rule(resource_id: str) -> bool:
    """Whether ``check_named_resource`` must ask the database (no read for an id that follows the rule)."""
    named = _named(resource_id)
    return bool(named) and new_id_problem(named) is not None


def has_rows(memory: Any, resource_id: str) -> bool:
    """Whether ``memory`` (a ``Memory``) stores anything of ``resource_id``: its resource row or a thread."""
    return memory.store.memory.get_resource(resource_id) is not None or \
        memory.list_threads(resource_id=resource_id, per_page=1).total > 0


def sees_thread(owner: str | None, resource_id: str) -> bool:
    """Whether a caller from outside asking as ``resource_id`` may read a stored thread whose owner is ``owner``
    (None: no such thread). The rule of ``core.scopes.check_caller_owns``: only the resource that owns it; a thread
    without an owner (another program stored it so) is nobody's."""
    return bool(owner) and owner == resource_id


def still_the_thread(memory: Any, thread: Any) -> bool:
    """Whether ``thread`` (a ``Thread`` read before its messages or working memory were) is still the stored thread:
    the same owner and creation time. A read checks the owner, then reads by the thread's id; a thread deleted and
    stored again by another resource in between (Bob's thread deleted, its id taken by Alice) was read as the
    asker's. Read after the data, so what was read belongs to the thread that was checked (one primary-key read)."""
    now = memory.get_thread(thread.id)
    return now is not None and now.resource_id == thread.resource_id and now.created_at == thread.created_at


def no_such_thread(thread_id: str, resource_id: str | None) -> NotFoundError:
    """The one answer to a caller who reads, searches or writes through a thread it may not see: a thread that
    does not exist and another resource's thread (or one without an owner) get the same words, so a token cannot
    learn which ids exist elsewhere by reading. (Creating a thread under an id in use elsewhere is refused, which
    does tell that the id is taken: ARCHITECTURE, "Existence of thread ids".) ``resource_id``: the resource asked
    as, or None when the call named none."""
    of = f"for resource {shown(resource_id)}" if resource_id is not None else "that this token may read"
    return NotFoundError(f"No thread {shown(thread_id)} {of}. List the threads for their ids. Nothing was read or "
                         "written.")


#: A caller that may use every resource: the shared token, or a server without a token.
ANYONE = Caller()


def caller_of(scope: Mapping[str, Any] | None) -> Caller:
    """The caller the guard authenticated for a request's ASGI ``scope``.

    None (no HTTP request: the MCP server over stdio) is ``ANYONE``: that server is bound by its own flags.
    An HTTP scope without a caller never passed the guard; it is refused rather than trusted.
    """
    if scope is None:
        return ANYONE
    caller = scope.get(CALLER_KEY)
    if not isinstance(caller, Caller):
        raise RuntimeError("This request did not pass the request guard (RequestGuard), so its caller is unknown; "
                           "serve the app only behind the guard.")
    return caller


__all__ = ["ANYONE", "CALLER_KEY", "Caller", "ResourceNotAllowed", "caller_of", "no_such_thread", "sees_thread"]
