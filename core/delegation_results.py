"""Delegations as the supervisor's stored tool results name them, and which resources Mastra's prove to be.

A supervisor's turn that delegates calls the tool ``agent-<name>``; its stored result names where the
sub-agent ran: ours ``{"resource": "delegation:<resource>:<agent>", "thread": ...}``, Mastra's
``{"subAgentResourceId": ..., "subAgentThreadId": ...}`` (Mastra's ``Agent.listAgentTools``; Mastra writes the
sub-agent's thread with no metadata pointing back, so this result is the only link). ``delegation_results``
reads them out of one stored message; ``forget`` follows them (``core.edits.forget``).

Mastra names a sub-agent's resource ``<resource>-<agent>``, which a user's own id can equal (a user
``alice-helper`` beside ``alice``'s sub-agent ``helper``). ``mastra_delegations`` says which resources are
such delegations, only where the data proves it: a resource ``R-A`` each of whose threads one of ``R``'s
threads names, in the result of a call of ``agent-A``, as ``subAgentThreadId`` with ``subAgentResourceId``
``R-A``. The id's shape alone never makes one (it picks the resources to check)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import sqlalchemy as sa

from core.scopes import is_delegation_resource
from core.storage import dialect

if TYPE_CHECKING:  # pragma: no cover
    from core.storage import Store

_CHUNK = 400
TOOL_PREFIX = "agent-"  # the tool a supervisor delegates with: agent-<the sub-agent's name>
_KEYS = (("resource", "thread"), ("subAgentResourceId", "subAgentThreadId"))  # ours, then Mastra's


def delegation_results(raw: Any) -> set[tuple[str, str, str | None]]:
    """(agent, resource, thread) of each delegation result in one stored message's content (JSON text or
    bytes); the thread is None where the result names none. Unreadable content names none."""
    if isinstance(raw, (bytes, bytearray)):
        raw = raw.decode("utf-8", errors="replace")
    try:
        content = json.loads(raw)
    except (TypeError, ValueError):
        return set()
    out: set[tuple[str, str, str | None]] = set()
    for part in (content.get("parts") or []) if isinstance(content, dict) else []:
        inv = part.get("toolInvocation") if isinstance(part, dict) else None
        tool = inv.get("toolName") if isinstance(inv, dict) else None
        if not isinstance(tool, str) or not tool.startswith(TOOL_PREFIX):
            continue
        result = inv.get("result") if isinstance(inv, dict) else None
        if not isinstance(result, dict):
            continue
        for resource_key, thread_key in _KEYS:
            if isinstance(result.get(resource_key), str):
                child = result.get(thread_key)
                out.add((tool[len(TOOL_PREFIX):], result[resource_key], child if isinstance(child, str) else None))
    return out


def delegations_in(conn: sa.Connection, threads: Sequence[str], *,
                   marker: str = TOOL_PREFIX) -> list[tuple[str, str, str, str | None]]:
    """(thread, agent, resource, sub-agent's thread) of every delegation result in the messages of ``threads``;
    only messages whose text holds ``marker`` are read."""
    found: list[tuple[str, str, str, str | None]] = []
    content = dialect.stored_text_sql(conn, '"content"')
    for start in range(0, len(threads), _CHUNK):
        chunk = list(threads[start:start + _CHUNK])
        rows = conn.exec_driver_sql(
            f"SELECT thread_id, {content} FROM mastra_messages WHERE thread_id IN ({','.join('?' * len(chunk))}) "
            "AND content LIKE ?", (*chunk, f"%{marker}%"))
        for thread, raw in rows:
            found += [(thread, agent, resource, child) for agent, resource, child in delegation_results(raw)]
    return found


def mastra_delegations(store: Store, threads_of: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, str]]:
    """``{resource: (the resource that delegated, the sub-agent's name)}`` for each resource of ``threads_of``
    (resource id -> its thread ids, as the caller has them) that is a delegation Mastra wrote, proven as
    the module says. Reads only the messages of resources ``R`` beside which an ``R-<agent>`` is listed."""
    candidates: dict[str, list[tuple[str, str]]] = {}  # parent -> [(resource, agent)]
    for rid in sorted(threads_of):
        if is_delegation_resource(rid) or not threads_of[rid]:
            continue
        for i, ch in enumerate(rid):
            parent = rid[:i]
            if ch == "-" and i + 1 < len(rid) and parent and parent != rid and threads_of.get(parent):
                candidates.setdefault(parent, []).append((rid, rid[i + 1:]))
    if not candidates:
        return {}
    owner = {t: parent for parent in candidates for t in threads_of[parent]}
    named: dict[tuple[str, str, str], set[str]] = {}  # (parent, agent, resource) -> the threads named
    with store.db.read() as conn:
        for thread, agent, resource, child in delegations_in(conn, list(owner), marker="subAgentResourceId"):
            if child is not None:
                named.setdefault((owner[thread], agent, resource), set()).add(child)
    out: dict[str, tuple[str, str]] = {}
    for parent, pairs in candidates.items():
        for rid, agent in pairs:
            if rid not in out and set(threads_of[rid]) <= named.get((parent, agent, rid), set()):
                out[rid] = (parent, agent)
    return out


__all__ = ["TOOL_PREFIX", "delegation_results", "delegations_in", "mastra_delegations"]
