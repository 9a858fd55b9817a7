"""What ``memory-studio mcp`` does for each tool and resource, over ``Memory`` (no MCP import here).

``MemoryTools`` is bound to one resource, or to any resource (``any_resource``: each call names
it). A bound server refuses a call naming another resource and never reads another resource's
threads (its resource's delegations, ``delegation:<resource>:<agent>``, are its resource's memory: a call
may name one, as a token of a resource may name its delegations, ``Caller.check(..., delegations=True)``): every thread is checked against its owner with the one ownership rule for callers from
outside (``check_caller_owns``: a thread without an owner is nobody's). Every call is traced like an
agent turn: an ``agent_run`` root span named ``mcp: '<tool>'`` on the thread and resource it touched,
with a ``memory_operation`` child holding the arguments and what was read or written, so the Studio's
Traces pane shows what an MCP client read and wrote.

Over HTTP each call also has a ``Caller`` (``core.gateway.access``): the request guard's verdict on its
token. A tokens file's token reaches only the resources its entry lists: a call about another is
refused (403's message, as a tool error), a call naming none is about the token's only resource when
it has one, the transcripts listed are its resources' only (with their delegations' threads, named as
delegations, so a client finds them: ``transcripts``, and ``list_threads``' ``delegations``), and the span
names the token's entry as who called (``caller``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote

from core.errors import MemoryStudioError
from core.gateway.access import (ANYONE, Caller, check_named_resource, client_id, has_rows, no_such_thread, sees_thread,
                                 still_the_thread)
from core.gateway.idempotency import Claim, IdempotencySettings, Keeper, Replay, checked_key, request_hash, scope_of
from core.gateway.turns import CONVERSATION_PREFIX, anothers_conversation, client_thread
from core.ids import clipped, shown
from core.memory import Memory
from core.messages import Message
from core.scopes import (
    DELEGATION_PREFIX,
    check_caller_owns,
    check_client_resource,
    delegation_label,
    delegation_resource,
    delegation_root,
    is_delegation_of,
    is_delegation_resource,
)
from core.storage import InvalidArgumentError
from core.storage.memory_store import check_text
from core.stored_text import utf8_problem
from core.traces.tracer import NOOP_TRACER, SpanTracer, SpanType, tracing_disabled
from core.working_memory_schema import WorkingMemoryError

T = TypeVar("T")

#: How many messages ``read_thread`` returns when the client does not say.
DEFAULT_READ = 50
MAX_READ = 1000
#: The deepest ``read_thread`` page (0 is the newest): a million pages of ``MAX_READ`` reach any thread's start.
MAX_PAGE = 1_000_000
MAX_TOP_K = 50
#: The longest title ``remember`` gives a new thread (a generated title is at most 80 characters).
MAX_TITLE = 1000
#: Where thread transcripts live: ``memory://threads/<percent-encoded thread id>``.
URI_PREFIX = "memory://threads/"
#: How many transcripts one ``resources/list`` answer holds; its ``nextCursor`` continues the listing.
PAGE_SIZE = 500
#: How many messages a transcript resource holds at most (the newest; ``read_thread`` pages reach the others).
TRANSCRIPT_MESSAGES = MAX_READ
#: How many of the newest messages a search that found nothing checks for ones missing from the recall index.
UNINDEXED_CHECKED = 2000
#: How many threads (its own and its delegations') one ``list_threads`` answer holds; its ``nextCursor`` continues.
THREADS_PAGE = 100


def transcript_uri(thread_id: str) -> str:
    """The URI of a thread's transcript resource (any thread id: it is percent-encoded)."""
    return URI_PREFIX + quote(thread_id, safe="")


class ResourceNotAllowed(MemoryStudioError, PermissionError):
    """A call named a resource this server is not bound to, or named none when it must."""


class CursorError(MemoryStudioError, ValueError):
    """A list's cursor (the transcripts', list_threads') this server did not issue for that list, or issued for another
    caller's listing."""


@dataclass(frozen=True)
class TranscriptPage:
    """One page of the transcripts offered to a caller, and the cursor of the next (None: the last page)."""

    rows: list[dict[str, Any]]
    next_cursor: str | None


class _Cursors:
    """The cursors of the lists a caller pages through (``resources/list``'s transcripts, ``list_threads``): a
    page's last (creation time, thread id), which list it continues (``kind``) and a digest of whose listing
    (``scope``), signed with this server's key (HMAC-SHA256, a key made at start).

    A client cannot make one (nor change one to start elsewhere, or continue another caller's listing): what
    it did not get from this server run for this list, or got for another token's listing, is refused, and it
    lists again from the start. A cursor names no resource; it carries a thread id of the caller's own listing."""

    VERSION = 1

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)

    def issue(self, kind: str, scope: str, position: tuple[str, str]) -> str:
        payload = json.dumps([self.VERSION, kind, scope, *position], ensure_ascii=False,
                             separators=(",", ":")).encode("utf-8", "surrogatepass")
        return f"{_b64(payload)}.{_b64(self._sign(payload))}"

    def read(self, cursor: str, kind: str, scope: str) -> tuple[str, str]:
        """The position ``cursor`` continues from; ``CursorError`` saying what to do when it is not one this
        server issued for the ``kind`` list of ``scope``."""
        what, again = _LISTS[kind]
        payload = self._payload(cursor)
        if payload is None or payload[1] != kind:
            raise CursorError(f"This cursor was not issued by this server for the {what} (it is cut short, changed, "
                              "made up, from another list, or from before the server restarted), so it says nowhere "
                              f"to continue from: {again}")
        _version, _kind, issued_for, created, thread_id = payload
        if issued_for != scope:
            raise CursorError(f"This cursor continues the {what} of another token (other resources) or of another "
                              f"resource; a cursor continues only the listing it came with: {again}")
        return created, thread_id

    def _payload(self, cursor: Any) -> list[Any] | None:
        if not isinstance(cursor, str) or cursor.count(".") != 1 or len(cursor) > 4096:
            return None
        body, tag = cursor.split(".")
        try:
            payload, signature = _unb64(body), _unb64(tag)
        except ValueError:
            return None
        if not hmac.compare_digest(signature, self._sign(payload)):
            return None
        try:
            value = json.loads(payload.decode("utf-8", "surrogatepass"))
        except ValueError:  # (signed by this server: never happens)
            return None
        if not (isinstance(value, list) and len(value) == 5 and value[0] == self.VERSION
                and all(isinstance(v, str) for v in value[1:])):
            return None
        return value

    def _sign(self, payload: bytes) -> bytes:
        return hmac.new(self._key, payload, hashlib.sha256).digest()


#: Each list's name in a refused cursor's message, and what to do then.
_LISTS = {
    "transcripts": ("resource list", "list the resources again from the start, without a cursor."),
    "threads": ("list_threads listing", "call list_threads again without a cursor, which starts from the first page."),
}


def _scope(*parts: Any) -> str:
    """A digest of whose listing a cursor continues."""
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    if not text or not text.isascii():
        raise ValueError("not base64")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as exc:
        raise ValueError("not base64") from exc


@dataclass(frozen=True)
class Binding:
    """Whose memory this server serves: one ``resource``, or any (``any_resource``, a token required)."""

    resource: str | None
    any_resource: bool = False

    def __post_init__(self) -> None:
        if self.any_resource == bool(self.resource):
            raise InvalidArgumentError("Bind the MCP server to one resource (--resource ID) or to any resource "
                                       "(--any-resource, with a token), not both and not neither.")
        if self.resource is not None:
            check_client_resource(self.resource)

    def resolve(self, asked: str | None, caller: Caller = ANYONE) -> str:
        """The resource a call is about, which ``caller`` (the call's token) must be allowed to use. A
        delegation of a resource the server and token serve (``delegation:<resource>:<agent>``) is that
        resource's memory too (``Caller.check(..., delegations=True)``)."""
        if self.resource is not None:
            if asked and asked != self.resource and delegation_root(asked) != self.resource:
                if is_delegation_resource(asked):  # (a malformed one: the refusal every server gives)
                    caller.check(asked, param="resource", delegations=True)
                raise ResourceNotAllowed(
                    f"This MCP server is bound to resource {self.resource!r}; it cannot read or write {shown(asked)}. "
                    "Start another server with --resource for that user, or one with --any-resource and a token.")
            caller.check(self.resource, param="resource")
            return caller.check(asked or self.resource, param="resource", delegations=True)
        asked = asked or caller.only_resource
        if not asked:
            raise ResourceNotAllowed("This MCP server serves any resource: name one with the 'resource' argument.")
        return caller.check(asked, param="resource", delegations=True)


class MemoryTools:
    """The MCP server's tools and resources, synchronous (the server runs them on worker threads)."""

    def __init__(self, memory: Memory, binding: Binding, *, tracer: SpanTracer | None = None,
                 idempotency: IdempotencySettings | None = None) -> None:
        self.memory = memory
        self.binding = binding
        self._tracer = tracer
        self._cursors = _Cursors()
        # ``remember``'s idempotency keys: the gateway's table and rules (``core.gateway.idempotency``).
        self.keeper = Keeper(idempotency)

    @property
    def tracer(self) -> SpanTracer:
        if tracing_disabled():
            return NOOP_TRACER
        return self._tracer if self._tracer is not None else self.memory.turn_tracer()

    # -- tools -----------------------------------------------------------------------------------
    def search_memory(self, query: str, top_k: int = 5, thread: str | None = None,
                      resource: str | None = None, *,
                 caller: Caller = ANYONE) -> dict[str, Any]:
        """Hybrid recall (vector + keyword) over the resource's messages, best first, with scores. A query longer
        than ``MAX_QUERY_CHARS`` (what recall embeds of one) is refused."""
        from core.recall.text import MAX_QUERY_CHARS  # (not at import: core.recall brings the index with it)

        def run(owner: str) -> dict[str, Any]:
            if not 1 <= top_k <= MAX_TOP_K:
                raise InvalidArgumentError(f"top_k must be between 1 and {MAX_TOP_K}, got {shown(top_k)}.")
            if isinstance(query, str) and len(query) > MAX_QUERY_CHARS:
                # (The answer repeats the query, and recall embeds no more of it than this.)
                raise InvalidArgumentError(f"The query is {len(query):,} characters long; search_memory takes at most "
                                           f"{MAX_QUERY_CHARS:,}. Search with the words that matter (a question, a "
                                           "name, a phrase), not a whole document. Nothing was searched. (The limit "
                                           "is what recall embeds of a query: no flag or setting of the server "
                                           "changes it.)")
            problem = utf8_problem(query) if isinstance(query, str) else None
            if problem is not None:  # the answer repeats the query, and no client could read it back
                raise InvalidArgumentError(f"The query contains {problem}, which has no UTF-8 form; decode the "
                                           "text properly before searching with it.")
            if thread is not None:
                self._owned(thread, owner)
            hits = self.memory.search(query, resource_id=owner, thread_id=thread, top_k=top_k, mode="hybrid")
            by_id = {m.id: m for m in self.memory.store.memory.get_messages([h.message_id for h in hits])}
            results = []
            for hit in hits:
                message = by_id.get(hit.message_id)
                if message is None or message.resource_id not in (None, owner):
                    continue
                results.append({"messageId": hit.message_id, "threadId": hit.thread_id, "role": message.role,
                                "text": message.text, "createdAt": message.to_dict().get("createdAt"),
                                "score": hit.score, "vectorScore": hit.vector_score,
                                "keywordScore": hit.keyword_score})
            answer: dict[str, Any] = {"query": query, "resource": owner, "results": results}
            if not results:
                note = self._unindexed_note(owner, thread)
                if note:
                    answer["note"] = note
            return answer

        # A refused query is traced cut (``clipped``), as the refusal repeats it: the trace is not a way around the cap.
        traced = clipped(query) if isinstance(query, str) and len(query) > MAX_QUERY_CHARS else query
        return self._traced("search_memory", "search", {"query": traced, "top_k": top_k, "thread": thread},
                            resource, thread, run, lambda r: {"hits": [h["messageId"] for h in r["results"]]}, caller)

    def _unindexed_note(self, owner: str, thread: str | None) -> str | None:
        """Why a search found nothing when the searched messages have no vector in the recall index (saved by
        a memory with semantic recall off, a Mastra agent without it; their keyword docs are written by the
        save, ``core.recall.own_docs``): an empty answer alone reads as "nothing was said about it"."""
        from core.recall import recall_text
        from core.recall.passages import INDEXED_ROLES
        from core.storage.memory_store import MessageQuery

        index = self.memory.recall_index
        if index is None:
            return None
        store = self.memory.store.memory
        threads = [thread] if thread is not None else [
            t.id for t in store.list_threads(resource_id=owner, per_page=None).threads]  # newest first
        # The newest ``UNINDEXED_CHECKED`` messages at most: a search that finds nothing is common, and a
        # client's searches must not each read every message the user has (the note needs a sample only).
        searchable: list[Any] = []
        more = False
        for tid in threads:
            left = UNINDEXED_CHECKED - len(searchable)
            if left <= 0:
                more = True
                break
            rows = store.list_messages(MessageQuery(thread_id=tid, last=left + 1))
            more = more or len(rows) > left
            searchable += [m for m in rows[-left:] if m.role in INDEXED_ROLES and recall_text(m).strip()]
        missing = len(index.unindexed(searchable))
        if not missing:
            return None
        where = f"thread {shown(thread)}" if thread is not None else "this user's threads"
        of = f"the newest {len(searchable):,} messages checked" if more else f"the {len(searchable)} messages"
        return (f"{missing} of {of} in {where} have no vector in the recall index (saved while "
                f"semantic recall was off), so search_memory finds them only by their words, not by meaning. Ask "
                f"the user to run `memory-studio reindex --resource {owner}` on this database, then search again; "
                "meanwhile read_thread reads them.")

    def list_threads(self, resource: str | None = None, cursor: str | None = None, *,
                     caller: Caller = ANYONE) -> dict[str, Any]:
        """A page (``THREADS_PAGE``) of the resource's threads and of its delegations' (grouped per delegation,
        named as one), newest created first, then by id (``MemoryStore.thread_keys``), with message counts and
        last activity. A thread's place never changes, so threads written or created while a client pages are
        never listed twice nor skipped (a thread created meanwhile is newer than the listing's start: the next
        listing from the start has it). ``nextCursor`` (None on the last page) continues the listing; a cursor
        continues only the listing of the resource and caller it was issued for (``CursorError`` otherwise)."""
        def row(s: Any) -> dict[str, Any]:
            return {"id": s.thread.id, "title": s.thread.title, "messageCount": s.message_count,
                    "lastActivity": s.last_activity.isoformat() if s.last_activity else None,
                    "uri": transcript_uri(s.thread.id)}

        def run(owner: str) -> dict[str, Any]:
            scope = _scope(self.binding.resource, owner, caller.name,
                           sorted(caller.resources) if caller.resources is not None else None)
            after = self._cursors.read(cursor, "threads", scope) if cursor is not None else None

            def offered(resource: str) -> bool:
                return resource == owner or (is_delegation_resource(resource) and is_delegation_of(resource, owner))

            page, more = self._keyset_page([owner], offered, after, THREADS_PAGE)
            found = {s.thread.id: s for s in self.memory.store.memory.thread_summaries_of([k[1] for k in page])}
            threads: list[dict[str, Any]] = []
            # Its delegations' threads too (read them with resource=<the delegation's resource>).
            delegations: dict[str, list[dict[str, Any]]] = {}
            for key in page:
                s = found.get(key[1])
                if s is None:  # deleted meanwhile: left out
                    continue
                if s.thread.resource_id == owner:
                    threads.append(row(s))
                else:
                    delegations.setdefault(s.thread.resource_id, []).append(row(s))
            return {"resource": owner, "threads": threads, "delegations": [
                {"resource": delegated, "label": delegation_label(delegated), "threads": rows}
                for delegated, rows in delegations.items()],
                "nextCursor": self._cursors.issue("threads", scope, (page[-1][0], page[-1][1])) if more else None}

        return self._traced("list_threads", "read", {"cursor": cursor} if cursor is not None else {}, resource,
                            None, run, lambda r: {"threads": [t["id"] for t in r["threads"]] + [
                                t["id"] for d in r["delegations"] for t in d["threads"]]}, caller)

    def read_thread(self, thread: str, last: int = DEFAULT_READ, resource: str | None = None, page: int = 0, *,
                    caller: Caller = ANYONE) -> dict[str, Any]:
        """``last`` messages of a thread of this resource, oldest first: the newest (``page`` 0), or the ``last``
        before those (``page`` 1), and so on (the gateway's ``page``/``perPage``); ``hasMore``: older ones remain,
        so every message of a long thread can be read, ``MAX_READ`` at most an answer."""
        def run(owner: str) -> dict[str, Any]:
            if not 1 <= last <= MAX_READ:
                more = (f" Ask for last={MAX_READ}, then the older ones with page=1, 2, … (no flag or setting of "
                        "the server raises the limit)." if last > MAX_READ else "")
                raise InvalidArgumentError(f"last must be between 1 and {MAX_READ}, got {shown(last)}.{more}")
            if not 0 <= page <= MAX_PAGE:
                raise InvalidArgumentError(f"page must be between 0 (the newest messages) and {MAX_PAGE:,}, got "
                                           f"{shown(page)}.")
            found = self._owned(thread, owner)
            read = self.memory.recall(thread_id=thread, resource_id=owner, page=page, per_page=last)
            if not still_the_thread(self.memory, found):  # (deleted, maybe another resource's now, while read)
                raise no_such_thread(thread, owner)
            return {"thread": thread, "title": found.title, "resource": owner, "total": read.total, "page": page,
                    "hasMore": read.has_more,
                    "messages": [{"id": m.id, "role": m.role, "text": m.text,
                                  "createdAt": m.to_dict().get("createdAt")} for m in read.messages]}

        return self._traced("read_thread", "read", {"thread": thread, "last": last, **({"page": page} if page else {})},
                            resource, thread, run, lambda r: {"messages": [m["id"] for m in r["messages"]]}, caller)

    def get_working_memory(self, thread: str | None = None, resource: str | None = None, *,
                 caller: Caller = ANYONE) -> dict[str, Any]:
        """The working memory in force for the resource (or the thread, when it is thread-scoped)."""
        def run(owner: str) -> dict[str, Any]:
            opts = self._wm_options()
            # A thread this resource may not read is one not stored yet (per resource: the resource's own).
            seen = self._owned(thread, owner, must_exist=opts.scope == "thread") if thread is not None else None
            if thread is None and opts.scope == "thread":
                raise WorkingMemoryError("This memory keeps working memory per thread: name the thread.")
            value = self.memory.working_memory_service.get(opts, thread_id=thread if seen else None, resource_id=owner)
            if seen is not None and opts.scope == "thread" and not still_the_thread(self.memory, seen):
                raise no_such_thread(str(thread), owner)  # (deleted, maybe another resource's now, while read)
            return {"resource": owner, "thread": thread, "scope": value.scope, "format": value.format,
                    "workingMemory": value.data if value.text is not None else None,
                    "template": opts.template if opts.schema is None else None, "schema": opts.schema}

        return self._traced("get_working_memory", "read-working-memory", {"thread": thread}, resource, thread, run,
                            lambda r: {"workingMemory": r["workingMemory"]}, caller)

    def update_working_memory(self, working_memory: Any, thread: str | None = None,
                              resource: str | None = None, *,
                 caller: Caller = ANYONE) -> dict[str, Any]:
        """Replace working memory (Markdown: the template's rules; schema: validated, merged as the
        agent's tool merges). The update is versioned like any other, authored ``mcp`` (``mcp: <name>`` for a
        tokens file's token: its name, never the token)."""
        author = "mcp" if caller.name is None else f"mcp: {caller.name}"

        def run(owner: str) -> dict[str, Any]:
            opts = self._wm_options()
            seen = self._owned(thread, owner, must_exist=opts.scope == "thread") if thread is not None else None
            through = thread if seen is not None else None  # (per resource: the resource's own, whichever thread)
            if self.binding.any_resource and opts.scope == "resource" and \
                    self.memory.store.memory.get_resource(owner) is None:
                # The write makes the resource: its id follows the rule remember's new resources follow (and the
                # gateway's), so no MCP client makes a resource no chat request could name.
                client_id("resource", owner)
            if _traceable(working_memory) != working_memory:  # its text holds a lone surrogate
                check_text(next(t for t in _texts(working_memory) if utf8_problem(t)), "The working memory")
            if opts.schema is not None:
                data = self.memory.merge_working_memory(thread_id=through, resource_id=owner, patch=working_memory,
                                                        author=author)
            else:
                if not isinstance(working_memory, str):
                    raise WorkingMemoryError("This memory keeps working memory as Markdown: send the whole text.")
                data = self.memory.update_working_memory(thread_id=through, resource_id=owner,
                                                         working_memory=working_memory, author=author)
            return {"resource": owner, "thread": thread, "scope": opts.scope, "workingMemory": data}

        return self._traced("update_working_memory", "update-working-memory",
                            {"thread": thread, "workingMemory": working_memory}, resource, thread, run,
                            lambda r: {"workingMemory": r["workingMemory"]}, caller)

    def remember(self, text: str, thread: str, role: str = "user", title: str | None = None,
                 resource: str | None = None, idempotency_key: str | None = None, *,
                 caller: Caller = ANYONE) -> dict[str, Any]:
        """Store a message in a thread of this resource (the thread is created when it is new).

        ``idempotency_key`` (MCP has no headers, so an argument): a call sent again with the same key and the same
        arguments stores nothing and answers the first call's result, with ``"replayed": true``. The key is kept in
        the gateway's table (``memory_studio_idempotency``, its rules: ``core.gateway.idempotency``) under the
        caller (its token's name, else the shared token), the resource and this tool, in the transaction that
        stores the message, so a server that dies after the save has kept the answer too. The same key with other
        arguments is refused (``idempotency_key_reused``), one whose first call is still running too (in use); a
        call that fails stores nothing and gives the key back."""
        def run(owner: str) -> dict[str, Any]:
            if role not in ("user", "assistant"):
                raise InvalidArgumentError(f"role must be 'user' or 'assistant', got {shown(role)}.")
            if not isinstance(text, str) or not text.strip():
                raise InvalidArgumentError("remember needs the text to store.")
            if not isinstance(thread, str) or not thread:
                raise InvalidArgumentError("remember needs the id of the thread to store the message in.")
            check_text(title, "The title")
            if title is not None and len(title) > MAX_TITLE:
                # Every later list_threads answer (and so the client model's context) would carry it.
                raise InvalidArgumentError(f"The title is {len(title):,} characters long; a thread's title may have "
                                           f"at most {MAX_TITLE:,} (no flag or setting of the server raises it). "
                                           "Nothing was stored.")
            if anothers_conversation(thread, owner):
                # Asked before the thread is looked up, so the refusal is the same whether it exists or not.
                raise ResourceNotAllowed(
                    f"Thread ids starting with {CONVERSATION_PREFIX!r} are the gateway's conversation threads, and "
                    f"{shown(thread)} is not one of resource {shown(owner)}'s; remember into another thread id.")
            existing = self.memory.get_thread(thread)
            if existing is not None:
                # Another resource's id cannot be taken for a new thread: refused, which says the id is in use
                # (ARCHITECTURE, "Existence of thread ids"), and nothing is read or written.
                check_caller_owns(thread, existing.resource_id or "", owner)
            else:
                # A new thread (and, with --any-resource, maybe a new resource) gets ids the gateway's chat
                # route could name too: printable, at most 256 characters.
                client_id("thread", thread)
                if self.binding.any_resource:
                    client_id("resource", owner)
            claim: Claim | None = None
            if idempotency_key is not None:
                key = checked_key(idempotency_key, "remember's idempotency_key", "idempotency_key")
                digest = request_hash(route=REMEMBER_ROUTE, text=text, thread=thread, role=role, title=title)
                got = self.keeper.claim(self.memory.store.db, scope=scope_of(caller, owner, REMEMBER_ROUTE), key=key,
                                        digest=digest, resource_id=owner, thread_id=thread, named="idempotency_key")
                if isinstance(got, Replay):
                    return {**got.outcome["body"], "replayed": True}
                claim = got
            message = (Message.user if role == "user" else Message.assistant)(
                text, thread_id=thread, resource_id=owner, metadata={"source": "mcp"})
            # A new thread is created by the save, in its transaction: a refused message leaves no thread. Its title
            # and a key's outcome are written in that transaction too, so a server that stops at any point leaves
            # the message with its titled thread and kept answer, or none of them.
            writes: list[Any] = [] if existing is not None else [_TitleNewThread(self.memory, thread, title or "")]
            if claim is not None:
                writes.append(self.keeper.saved_with(
                    claim, lambda stored: {"kind": "json", "status": 200,
                                           "body": _remembered(owner, thread, stored[0])}, thread_id=thread))
            try:
                if claim is None:
                    (saved,) = self.memory.save_messages([message], _writes=writes)
                else:
                    with self.keeper.renewing(claim):  # a save slower than the lease keeps its key
                        (saved,) = self.memory.save_messages([message], _writes=writes)
            except BaseException:
                if claim is not None:
                    self.keeper.release(claim)
                raise
            if claim is not None and self.keeper.sweep_due(claim.db):
                self.keeper.sweep(claim.db)
            return _remembered(owner, thread, saved)

        return self._traced("remember", "save-messages", {"thread": thread, "role": role, "text": text},
                            resource, thread, run, lambda r: {"saved": [r["messageId"]]}, caller)

    # -- resources -------------------------------------------------------------------------------
    def transcripts(self, caller: Caller = ANYONE, cursor: str | None = None) -> TranscriptPage:
        """A page (``PAGE_SIZE``) of the thread transcripts this server offers ``caller`` as resources: its
        resources' threads and their delegations' (``Memory.delegation_threads``' rule: what the caller may read,
        listed so it need not know their ids), each delegation's named as one (``delegation``). Newest created
        first, then by id (``MemoryStore.thread_keys``): a thread's place never changes, so threads written
        while a client pages are never listed twice nor skipped. ``cursor``: a page's ``next_cursor``, which
        only this caller's listing (its resources) continues (``CursorError`` otherwise)."""
        if self.binding.resource is not None:
            owners: list[str | None] = [self.binding.resource] if caller.allows(self.binding.resource) else []
        else:
            owners = [None] if caller.resources is None else [*sorted(caller.resources)]  # None: any resource
        scope = _scope(self.binding.resource, owners)
        after = self._cursors.read(cursor, "transcripts", scope) if cursor is not None else None
        if not owners:
            return TranscriptPage([], None)
        own = {o for o in owners if o is not None}

        def offered(resource: str) -> bool:
            if not own:  # every thread whose resource the caller reaches (a malformed delegation's: none)
                return caller.reaches(resource)
            return resource in own or (is_delegation_resource(resource)
                                       and any(is_delegation_of(resource, o) for o in own))

        page, more = self._keyset_page(sorted(own) if own else None, offered, after, PAGE_SIZE)
        store = self.memory.store.memory
        found = {s.thread.id: s for s in store.thread_summaries_of([key[1] for key in page])}
        rows = [found[key[1]] for key in page if key[1] in found]  # (one deleted meanwhile: left out)
        return TranscriptPage(
            [{"uri": transcript_uri(s.thread.id), "threadId": s.thread.id,
              "name": _transcript_name(s.thread.title or s.thread.id, s.thread.resource_id),
              "resource": s.thread.resource_id, "delegation": delegation_label(s.thread.resource_id or ""),
              "messageCount": s.message_count} for s in rows],
            self._cursors.issue("transcripts", scope, (page[-1][0], page[-1][1])) if more else None)

    def transcript(self, thread: str, *, caller: Caller = ANYONE) -> str:
        """A thread's transcript as Markdown (``memory-studio export --format markdown``'s rendering): its newest
        ``TRANSCRIPT_MESSAGES`` messages, with a note saying how to read the older ones when there are more."""
        from core.transfer.export import export_thread
        from core.transfer.markdown import to_markdown

        found = self.memory.get_thread(thread)
        # The token holder reads any thread (of its resources and their delegations); a server bound to a
        # resource reads that resource's delegations' threads too.
        asked = found.resource_id if found is not None and (self.binding.any_resource or (
            self.binding.resource is not None and delegation_root(found.resource_id or "") == self.binding.resource
        )) else None
        if found is None or (asked is not None and not caller.reaches(asked)):
            # A thread of another resource is answered as one that does not exist (``no_such_thread``).
            client_thread("thread", thread)
            raise no_such_thread(thread, self.binding.resource or caller.only_resource)

        def run(owner: str) -> str:
            if not sees_thread(found.resource_id, owner):
                raise no_such_thread(thread, owner)
            data = export_thread(self.memory.store, thread)
            # Not the server's database path: a client (over HTTP, someone else's machine) has no use for it.
            data["source"] = {k: v for k, v in (data.get("source") or {}).items() if k != "database"}
            messages = list(data.get("messages") or [])
            if len(messages) <= TRANSCRIPT_MESSAGES:
                return to_markdown(data)
            # A resource read has no pages: the newest messages, and where the rest are read.
            text = to_markdown({**data, "messages": messages[-TRANSCRIPT_MESSAGES:]})
            title, _, rest = text.partition("\n")
            return (f"{title}\n\n> This transcript holds the newest {TRANSCRIPT_MESSAGES:,} of the thread's "
                    f"{len(messages):,} messages. Read the older ones with the read_thread tool: last={MAX_READ}, "
                    f"page=1, 2, … (page 0 is the newest {MAX_READ:,}).\n{rest}")

        return self._traced("read_resource", "read", {"uri": transcript_uri(thread)}, asked, thread, run,
                            lambda r: {"characters": len(r)}, caller)

    # -- helpers ---------------------------------------------------------------------------------
    def _keyset_page(self, own: list[str] | None, offered: Callable[[str], bool], after: tuple[str, str] | None,
                     size: int) -> tuple[list[tuple[str, str, str]], bool]:
        """The next ``size`` thread keys (``MemoryStore.thread_keys``: newest created first, then by id) after
        ``after`` whose resource is ``offered``, and whether more follow. Candidates: the threads of ``own``'s
        resources, their direct delegations' (``delegation:<owner>:``) and every nested delegation's
        (``delegation:delegation%3A…``, rare), which ``offered`` parses one by one; ``own`` None: every thread."""
        nested = DELEGATION_PREFIX + DELEGATION_PREFIX.replace(":", "%3A")
        prefixes = [delegation_resource(o, "") for o in own] + [nested] if own is not None else None
        store = self.memory.store.memory
        page: list[tuple[str, str, str]] = []
        more, position = False, after
        while not more:
            batch = store.thread_keys(resource_ids=own, prefixes=prefixes, after=position, limit=size + 1)
            for key in batch:
                if offered(key[2]):
                    more = len(page) == size
                    if more:
                        break
                    page.append(key)
            if len(batch) <= size:
                break
            position = batch[-1][:2]
        return page, more

    def _owned(self, thread: str, owner: str, *, must_exist: bool = True) -> Any:
        """The stored thread when ``owner`` may read it (``sees_thread``); else, with ``must_exist``, the one answer
        to a thread that does not exist and to another resource's (``no_such_thread``), or None without it."""
        found = self.memory.get_thread(thread)
        if found is None or not sees_thread(found.resource_id, owner):
            client_thread("thread", thread)  # (an id no client could name: refused saying why, as the gateway does)
            if must_exist:
                raise no_such_thread(thread, owner)
            return None
        return found

    def _wm_options(self) -> Any:
        opts = self.memory.effective_options().working_memory
        if not opts.enabled:
            raise WorkingMemoryError("Working memory is not enabled for this memory (see --agent).")
        return opts

    def _traced(self, tool: str, operation: str, arguments: dict[str, Any], asked: str | None,
                thread: str | None, run: Callable[[str], T], summary: Callable[[T], Any], caller: Caller) -> T:
        """Run ``run(owner)`` as a traced call; a refused resource is a traced run with an error too."""
        tracer = self.tracer
        traced_as = self.binding.resource or asked or caller.only_resource
        if traced_as is not None and not caller.reaches(traced_as):
            # Refused below: traced as the caller's own, never under a resource its token may not use (its
            # arguments would land in that user's traces and export).
            traced_as = caller.only_resource
        if asked is not None and asked != traced_as:
            arguments = {**arguments, "resource": asked}
        # A refused argument is still traced; text with a lone surrogate (which JSON allows) could never
        # be stored in the trace file, so the span shows it escaped.
        arguments = _traceable(arguments)
        traced_as = _traceable(traced_as)
        thread = _traceable(thread)
        with tracer.start_span(f"mcp: '{tool}'", SpanType.AGENT_RUN, new_trace=True, input=arguments,
                               thread_id=thread, resource_id=traced_as, entity_type="agent", entity_id="mcp",
                               entity_name="mcp", attributes={"framework": "mcp", "tool": tool,
                                                              **({"caller": caller.name} if caller.name else {})}
                               ) as root:
            owner = self.binding.resolve(asked, caller)
            # An id no client could name is refused as the gateway refuses it, unless something is stored under it.
            check_named_resource("resource", owner, lambda r: has_rows(self.memory, r))
            with tracer.start_span(f"memory: {operation}", SpanType.MEMORY_OPERATION, parent=root,
                                   input=arguments, attributes={"operationType": operation}) as span:
                result = run(owner)
                span.set_output(summary(result))
            root.set_output(summary(result))
        return result


#: ``remember`` as idempotency keys are scoped to it (beside the gateway's routes, in the same table).
REMEMBER_ROUTE = "mcp tools/call remember"


@dataclass(frozen=True)
class _TitleNewThread:
    """``remember``'s staged write for a thread it found missing: in the save's transaction, the thread (then
    created by the save, or by another writer meanwhile, still without title or metadata) gets its title and
    ``createdBy: mcp``. A thread someone else already titled or described is left as it is."""

    memory: Memory
    thread: str
    title: str

    def commit(self, conn: Any) -> None:
        store = self.memory.store.memory
        created = store.get_thread(self.thread, conn=conn)
        if created is not None and not created.title and not created.metadata:
            store.update_thread(self.thread, title=self.title, metadata={"createdBy": "mcp"}, conn=conn)


def _remembered(owner: str, thread: str, saved: Message) -> dict[str, Any]:
    return {"resource": owner, "thread": thread, "messageId": saved.id, "createdAt": saved.to_dict().get("createdAt")}


def _transcript_name(name: str, resource: str | None) -> str:
    """A transcript's name in the resource list: its thread's title (or id), and for a delegation's thread what
    it is ("… (delegation of alice to helper)"), so it does not read as one of the user's own conversations."""
    label = delegation_label(resource or "")
    return f"{name} ({label})" if label else name


def _traceable(value: Any) -> Any:
    """``value`` with each lone surrogate of its text written as ``\\udXXX`` (a span must be UTF-8)."""
    if isinstance(value, str):
        return value if utf8_problem(value) is None else value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_traceable(k): _traceable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_traceable(v) for v in value]
    return value


def _texts(value: Any) -> list[str]:
    """Every text in a JSON value (its keys too)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for k, v in value.items() for t in (*_texts(k), *_texts(v))]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _texts(v)]
    return []
