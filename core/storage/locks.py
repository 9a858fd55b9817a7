"""Names of the things a read-modify-write locks (``Database.lock``), one home for every caller.

Everything that rewrites a thread's row (title, metadata, thread-scoped working memory, the
observational-memory hints) takes the thread's name; everything that rewrites a resource row
(working memory, metadata) takes the resource's. On libSQL ``BEGIN IMMEDIATE`` already serialises
all writers; on Postgres these become transaction-scoped advisory locks.
"""

from __future__ import annotations

from typing import Iterable


def thread_key(thread_id: str) -> str:
    return f"thread:{thread_id}"


def resource_key(resource_id: str) -> str:
    return f"resource:{resource_id}"


def owner_key(scope: str, owner: str) -> str:
    """Working memory's owner: the resource row or the thread row it lives in."""
    return resource_key(owner) if scope == "resource" else thread_key(owner)


def in_lock_order(keys: "Iterable[str]") -> list[str]:
    """The order every caller takes several keys in: by name, except that resource keys come after all
    others. A turn's save takes its threads first (``Memory._ensure_threads``) and its resource later,
    when it writes resource-scoped working memory in the same transaction; a caller that took the
    resource first (``forget``, an import: names sorted put ``resource:`` before ``thread:``) and then
    waited for a thread such a turn held was waited for by that turn: a deadlock, which the server
    ended by failing one of them (the forget, or the turn)."""
    return sorted(set(keys), key=lambda k: (k.startswith("resource:"), k))


def om_key(lookup_key: str) -> str:
    """One observational-memory record (``thread:<id>`` / ``resource:<id>`` lookup keys)."""
    return f"om:{lookup_key}"
