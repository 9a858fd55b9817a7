"""Idempotency keys: a request sent again with the same ``Idempotency-Key`` header runs once.

The official ``openai`` client sends a request again (twice by default) when its answer is lost: a
timeout, a cut connection, a 5xx. Without a key each copy is a new turn, stored again. A client that
passes ``extra_headers={"Idempotency-Key": key}`` sends the same key with every copy, and the gateway
then runs the first and answers the others from what it kept (Stripe's semantics):

- a key is 1 to 255 visible ASCII characters (400 ``invalid_idempotency_key`` otherwise);
- it belongs to the caller (the tokens file entry, or the shared token), the resource the request is
  about and the route (``scope_of``): another user's, resource's or route's equal key is another key;
- the first request takes the key (a row of ``memory_studio_idempotency`` in the memory's own database,
  so every gateway process on that database sees it) and holds it under a lease, renewed while it runs;
- its outcome (status and body; for a chat turn its text, finish reason, usage and ids, enough to answer
  as JSON or as a stream) is kept with the key, in the transaction that writes what the request did
  (``Keeper.saved_with``: given to ``Agent.generate``/``stream`` as ``save_with``, to the working-memory
  write, to the MCP ``remember``'s save), so a process that dies at any point leaves either nothing written
  and a leased key, or both; a request whose key was taken over meanwhile (its lease ran out while it ran)
  writes nothing (409). A repeat with the same request (``request_hash``: the body, without ``stream``/``stream_options``, the route's path and the headers and query parameters
  that choose what is written) gets it back with ``Idempotent-Replayed: true``, and nothing runs;
- a repeat while the first still runs: 409 ``idempotency_key_in_use`` with ``Retry-After``, saying when the first
  last renewed its lease (``holders.Holder``: the holder's id records its lease and process); a first whose process
  died leaves a lease that runs out (``IdempotencySettings.lease``), after which a repeat takes the key over (a chat
  turn then keeps the thread the first one chose; it ran nothing that was stored). Until then a holder that missed
  its renewals is answered as seeming stopped, ``Retry-After`` when its key frees; one whose process ran on this
  host and has ended (a gateway killed and restarted) is taken over at once;
- the same key with another request: 422 ``idempotency_key_reused``;
- what is kept: a success, and a 4xx found while running (a thread of another resource, a message too
  large, a working-memory ``If-Match`` that failed), which the same request would meet again. A failure
  that stored nothing of the reply (a model error, a 5xx, 408/409/425/429, a client that left a stream before
  the turn was stored) gives the key back, so the repeat runs again; what it may have stored is the client's
  message, which synchronous observational memory stores with its observation before the model is asked, and
  the repeat takes as that stored message (not stored or observed twice). A request refused before it ran (a malformed
  body, a resource the token may not use) never takes the key;
- kept outcomes expire (``ttl``, 24 hours unless set): an expired key is a new key. Expired rows are
  deleted after a response has been sent, at most once per ``sweep_every`` per process and database,
  so no separate job is needed and no request waits for it. ``forget`` deletes a resource's rows,
  deleting a thread deletes the rows of its turns; export and import leave them out. A kept outcome names a
  thread (``thread_id``) only when its request wrote through it as its owner: a kept failure names none
  (``fail``), and a working-memory write names its thread only once its transaction saw that the thread is the
  asking resource's. So no key keeps another resource's thread id, goes when that thread is deleted or its
  resource forgotten, or is counted by that ``forget``. (A chat turn's row names the thread it asked for while
  it runs: a repeat that takes the key over continues that thread, and is refused as the first was.)

Times are the gateway processes' clocks (milliseconds since the epoch): processes sharing a database
should keep their clocks in step (NTP); a skew shortens or lengthens leases by as much.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from core.gateway.access import Caller
from core.gateway.errors import GatewayError, known
from core.gateway.holders import Holder
from core.messages import Message
from core.processors.base import SavedAwareWrite
from core.storage import catalog
from core.storage.schema import IDEMPOTENCY_TABLE
from core.timeutil import iso_now

log = logging.getLogger(__name__)
T = TypeVar("T")
#: What ``Keeper.saved_with`` keeps: the outcome, or a function of what was saved with it (the messages a save
#: stored, ``commit_saved``; the working-memory value written, ``commit_value``).
Outcome = Mapping[str, Any] | Callable[[Any], Mapping[str, Any]]

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
MAX_KEY_LENGTH = 255
#: Statuses a repeat should meet again only if it runs again: never kept.
_NOT_KEPT = frozenset({408, 409, 425, 429})
#: The longest ``Retry-After`` a 409 sends: the ``openai`` client (``_base_client``'s ``MAX_RETRY_AFTER_DELAY``)
#: sends nothing again after a longer one, so a key freeing later is asked about again after this.
MAX_RETRY_AFTER = 120
#: What the ``openai`` client does with a 409 (``_base_client._should_retry``: 408, 409, 429, 5xx, or
#: ``x-should-retry: true``; ``DEFAULT_MAX_RETRIES``), said in the 409's message.
CLIENT_RETRIES = ("The openai client waits Retry-After and sends the request again by itself, at most max_retries "
                  "times (2 unless set).")


@dataclass(frozen=True)
class IdempotencySettings:
    """``ttl``: seconds an outcome is kept; ``lease``: seconds a running request holds its key without
    renewing it (renewed every third of that while it runs); ``sweep_every``: seconds between deletes of
    expired rows, per process and database; ``retry_after``: the 409's ``Retry-After`` seconds."""

    ttl: float = 24 * 3600.0
    lease: float = 60.0
    sweep_every: float = 60.0
    retry_after: int = 2

    def __post_init__(self) -> None:
        for name in ("ttl", "lease", "sweep_every"):
            value = getattr(self, name)
            if not 0 < value < math.inf:
                raise ValueError(f"idempotency {name} must be a positive number of seconds, got {value}.")
        if self.lease > self.ttl:
            raise ValueError(f"the idempotency lease ({self.lease:g}s) must not be longer than the time keys are "
                             f"kept ({self.ttl:g}s).")


def single_header(headers: Mapping[str, str], name: str, *, kind: str = "header") -> str | None:
    """The value of header ``name`` (lower case), or None; 400 when the request sent it more than once with different
    values. A header that says where a turn is stored, or which request this is, has one meaning: Starlette reads the
    first copy, and a proxy or client library in front may have meant (or checked) another, so neither is guessed.
    (``headers`` without ``getlist``, a plain mapping, holds one value a name.) The same for a query parameter
    (``kind``; Starlette reads its last copy): the memory API's ``resourceId``, ``agentId``, pages and cursor."""
    values = headers.getlist(name) if hasattr(headers, "getlist") else []
    if len(set(values)) > 1:
        raise GatewayError(400, f"The {name} {kind} was sent {len(values)} times with different values; send it once. "
                           "Nothing was run.", code="invalid_request", param=name)
    return headers.get(name)


def key_of(headers: Mapping[str, str]) -> str | None:
    """The request's ``Idempotency-Key``, checked; None without one."""
    raw = single_header(headers, HEADER.lower())
    if raw is None:
        return None
    return checked_key(raw, f"The {HEADER} header", HEADER)


def checked_key(raw: Any, what: str, param: str) -> str:
    """A key as sent (``what``: where, for the message), checked: 1 to 255 visible ASCII characters."""
    if not isinstance(raw, str) or not 0 < len(raw) <= MAX_KEY_LENGTH or not all("!" <= c <= "~" for c in raw):
        got = (f"{len(raw)} character(s){'' if raw.isascii() else ' with non-ASCII ones'}" if isinstance(raw, str)
               else type(raw).__name__)
        raise GatewayError(
            400, f"{what} must be 1 to {MAX_KEY_LENGTH} visible ASCII characters (letters, digits, "
            f"punctuation; no spaces), got {got}. "
            "Send a random id such as a UUID, the same one with every retry of one request. Nothing was run.",
            code="invalid_idempotency_key", param=param)
    return raw


def scope_of(caller: Caller, resource_id: str | None, route: str) -> str:
    """Where a key belongs: the caller (a tokens file entry by name, else the shared token), the resource
    the request is about, and the route."""
    who = f"token:{caller.name}" if caller.name is not None else "shared"
    return "\x1f".join((who, resource_id or "", route))


def request_hash(**parts: Any) -> str:
    """A digest of what makes two requests the same request (canonical JSON of ``parts``)."""
    text = json.dumps(parts, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def kept_status(exc: BaseException) -> int | None:
    """The status of a failure to keep for its key, or None when the key is given back (see the module)."""
    reply = known(exc)
    if reply is None or not 400 <= reply.status < 500 or reply.status in _NOT_KEPT:
        return None
    return reply.status


def error_outcome(exc: BaseException) -> dict[str, Any]:
    reply = known(exc)
    assert reply is not None
    return {"kind": "json", "status": reply.status, "body": reply.body, "headers": dict(reply.headers)}


@dataclass(frozen=True)
class Replay:
    """A kept outcome (``outcome["kind"]``: ``"json"`` with status, body, headers; ``"completion"``)."""

    outcome: dict[str, Any]


@dataclass
class Claim:
    """A key this request holds. ``thread_id``: the thread a taken-over key's first request chose."""

    db: Any
    scope: str
    key: str
    holder: str
    thread_id: str | None = None
    took_over: bool = False
    #: What the client calls the key (the header, or the MCP tool's argument), for the messages.
    named: str = HEADER


def _now_ms() -> int:
    return int(time.time() * 1000)


class Keeper:
    """One per gateway: takes, renews, completes and gives back keys in a memory's database."""

    def __init__(self, settings: IdempotencySettings | None = None) -> None:
        self.settings = settings or IdempotencySettings()
        self._swept: dict[int, float] = {}
        self._sweep_lock = threading.Lock()

    # -- on worker threads --------------------------------------------------------------------------
    def claim(self, db: Any, *, scope: str, key: str, digest: str, resource_id: str | None,
              thread_id: str | None, named: str = HEADER) -> Claim | Replay:
        """Take ``key`` for this request, or the kept outcome of its first request; 409 while another
        request holds it, 422 when it was used for another request. ``named``: what the client calls the key
        (the header, or the MCP tool's argument), for the messages. A holder whose lease ran out, or whose process
        has provably ended (``Holder.process_gone``: a gateway on this host killed and restarted), is taken over."""
        now = _now_ms()
        holder = Holder.new(self.settings.lease).text
        lease = now + int(self.settings.lease * 1000)
        expires = now + int(self.settings.ttl * 1000)
        found: Any = None
        with db.write() as conn:
            if not catalog.has_table(conn, IDEMPOTENCY_TABLE):
                raise GatewayError(
                    400, f"This gateway's database has no table for idempotency keys ({IDEMPOTENCY_TABLE}): it was not "
                    "created by Memory Studio or not migrated yet. Its operator can run `memory-studio migrate`; until "
                    f"then send the request without {named}. Nothing was run.",
                    code="idempotency_unavailable", param=named)
            db.lock(conn, f"idempotency:{scope}:{key}")
            conn.exec_driver_sql(f"DELETE FROM {IDEMPOTENCY_TABLE} WHERE scope = ? AND idem_key = ? AND expires_at <= ?",
                                 (scope, key, now))
            found = conn.exec_driver_sql(
                f"SELECT request_hash, state, locked_until, outcome, thread_id, holder FROM {IDEMPOTENCY_TABLE} "
                "WHERE scope = ? AND idem_key = ?", (scope, key)).first()
            if found is None:
                conn.exec_driver_sql(
                    f"INSERT INTO {IDEMPOTENCY_TABLE} (scope, idem_key, request_hash, resource_id, thread_id, state, "
                    'holder, locked_until, outcome, "createdAt", expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
                    (scope, key, digest, resource_id, thread_id, "running", holder, lease, None,
                     iso_now(), expires))
                return Claim(db, scope, key, holder, thread_id, named=named)
            stored_hash, state, locked_until, outcome, stored_thread, stored_holder = found
            held = Holder.parse(stored_holder)
            expired = int(locked_until) <= now
            if stored_hash == digest and state == "running" and (expired or held.process_gone()):
                # Its holder stopped renewing (its process died): this request takes the key over. Only from that
                # holder: on Postgres a commit of the holder's may have landed since the row was read.
                took = conn.exec_driver_sql(
                    f"UPDATE {IDEMPOTENCY_TABLE} SET holder = ?, locked_until = ?, expires_at = ? "
                    "WHERE scope = ? AND idem_key = ? AND holder = ? AND state = 'running'",
                    (holder, lease, expires, scope, key, stored_holder)).rowcount
                if took:
                    if expired:
                        log.warning("idempotency key taken over after its first request's lease ran out (its process "
                                    "stopped?); the request runs again")
                    else:
                        log.warning("idempotency key taken over at once: its first request's gateway process on this "
                                    "host has ended; the request runs again")
                    return Claim(db, scope, key, holder, stored_thread or thread_id, took_over=True, named=named)
        if stored_hash != digest:
            raise GatewayError(
                422, f"This {named} was already used for a different request (another body, thread, resource or "
                "route) within the time keys are kept. Use a new key for a new request; send exactly the same "
                "request to get the first one's result. Nothing was run.",
                code="idempotency_key_reused", param=named, retry=False)
        if state == "done":
            return Replay(json.loads(outcome))
        raise self._in_use(named, held, int(locked_until), now)

    def _in_use(self, named: str, held: Holder, locked_until: int, now: int) -> GatewayError:
        """The 409 for a key another request holds: what this gateway can tell of its holder, and when to come back.
        A holder that missed its renewals (none for half its lease, renewing every third) seems to have stopped:
        ``Retry-After`` is when its key frees. Otherwise it is running as far as can be told, and the wait is short."""
        ago = held.renewed_ago(locked_until, now)
        frees = max(1, math.ceil((locked_until - now) / 1000))
        if ago is not None and held.lease_ms is not None and ago > held.lease_ms / 2000:
            wait = min(frees, MAX_RETRY_AFTER)
            told = (f"A request with this {named} is held by a gateway that seems to have stopped: it last renewed the "
                    f"key's lease {ago:.0f} s ago and renews it every {held.lease_ms / 3000:.3g} s while the request "
                    f"runs. The key frees in {frees} s: send the request again then, with the same key and body, and "
                    "it runs once.")
        else:
            wait = self.settings.retry_after
            renewed = (f"its gateway renewed the key's lease {ago:.0f} s ago" if ago is not None
                       else "its gateway holds the key's lease")
            told = (f"A request with this {named} is still running ({renewed}). Send it again in {wait} s, with the "
                    f"same key and body, to get its result; if its gateway has stopped, the key frees within {frees} s.")
        if named == HEADER:  # (an MCP tool's argument: its client has no Retry-After)
            told = f"{told} {CLIENT_RETRIES}"
        return GatewayError(409, f"{told} Nothing was run twice.", code="idempotency_key_in_use",
                            param=named, retry=True, headers={"Retry-After": str(wait)})

    def renew(self, claim: Claim) -> bool:
        """Extend the lease of a key this request still holds; False when it lost it."""
        lease = _now_ms() + int(self.settings.lease * 1000)
        with claim.db.write() as conn:
            n = conn.exec_driver_sql(
                f"UPDATE {IDEMPOTENCY_TABLE} SET locked_until = ? WHERE scope = ? AND idem_key = ? AND holder = ? "
                "AND state = 'running'", (lease, claim.scope, claim.key, claim.holder)).rowcount
        return bool(n)

    def complete(self, claim: Claim, outcome: Mapping[str, Any], *, thread_id: str | None = None,
                 wrote: bool = True) -> None:
        """Keep ``outcome`` for the key (its expiry counted from now)."""
        with claim.db.write() as conn:
            n = self._complete(conn, claim, outcome, thread_id, wrote=wrote)
        if not n:
            log.warning("an idempotent request finished after another took its key over (its lease ran out); "
                        "its outcome was not kept")

    def _complete(self, conn: Any, claim: Claim, outcome: Mapping[str, Any], thread_id: str | None, *,
                  wrote: bool = True) -> int:
        """Keep ``outcome``; ``wrote`` False (a kept failure): the row then names no thread (see ``fail``)."""
        expires = _now_ms() + int(self.settings.ttl * 1000)
        text = json.dumps(outcome, ensure_ascii=False, separators=(",", ":"))
        thread = "COALESCE(?, thread_id)" if wrote else "?"
        return int(conn.exec_driver_sql(
            f"UPDATE {IDEMPOTENCY_TABLE} SET state = 'done', outcome = ?, holder = NULL, expires_at = ?, "
            f"thread_id = {thread} WHERE scope = ? AND idem_key = ? AND holder = ?",
            (text, expires, thread_id if wrote else None, claim.scope, claim.key, claim.holder)).rowcount or 0)

    def saved_with(self, claim: Claim, outcome: Outcome, *, thread_id: str | None = None) -> SavedOutcome:
        """A staged write keeping ``outcome`` for the key in the transaction that saves what the request did
        (``Agent.generate``'s ``save_with``, ``Memory.save_messages``' writes): both are stored, or neither.
        ``outcome`` may be a function of the messages that transaction saved (their ids and times)."""
        return SavedOutcome(self, claim, outcome, thread_id)

    def run(self, claim: Claim, work: Callable[[], T],
            outcome: Callable[[T], Mapping[str, Any] | None] | None = None) -> T:
        """Run ``work`` under ``claim`` on this (worker) thread: a failure is kept or gives the key back (``fail``),
        a result's ``outcome(result)`` is kept (None, or no ``outcome``: the work kept it itself, in the transaction
        of what it wrote: ``saved_with``).
        On the worker thread, so a request cancelled while it waits never leaves its work done and its key leased."""
        try:
            result = work()
        except BaseException as exc:
            self.fail(claim, exc)
            raise
        kept = outcome(result) if outcome is not None else None
        if kept is not None:
            try:
                self.complete(claim, kept)
            except Exception:  # noqa: BLE001 - the work is done and answered; a repeat after the lease runs it again
                log.error("a request's work was done but its outcome could not be kept for its idempotency key",
                          exc_info=True)
        return result

    @contextmanager
    def renewing(self, claim: Claim) -> Iterator[None]:
        """Renew ``claim``'s lease every third of it while the block runs, from a thread of its own: the synchronous
        callers' ``holding`` (the MCP ``remember``, whose save may wait on a lock or an embedding longer than the
        lease). Without it a slow save lost its key to a repeat, which ran the call again: the first's save then
        failed (``taken_over``) and its answer was an error though the call was stored once, by the repeat."""
        stop = threading.Event()

        def renew() -> None:
            while not stop.wait(self.settings.lease / 3):
                try:
                    if not self.renew(claim):
                        return  # done (its outcome kept) or taken over: nothing more to hold
                except Exception:  # noqa: BLE001 - the next renewal tries again
                    log.warning("renewing an idempotency key's lease failed", exc_info=True)

        renewer = threading.Thread(target=renew, name="idempotency-lease", daemon=True)
        renewer.start()
        try:
            yield
        finally:
            stop.set()
            renewer.join()

    def fail(self, claim: Claim, exc: BaseException) -> None:
        """A failure: kept when the same request would fail so again (``kept_status``), else the key is given back.
        A kept failure wrote through no thread, so its row names none: the thread its request named may be another
        resource's (refused, or answered as one not stored yet), and a row naming it would go when that resource
        deletes the thread or is forgotten, telling a repeat (which then runs again) that the id was in use there."""
        if kept_status(exc) is not None:
            self.complete(claim, error_outcome(exc), wrote=False)
        else:
            self.release(claim)

    def release(self, claim: Claim) -> None:
        """Give the key back (nothing was stored): the next request with it runs."""
        try:
            with claim.db.write() as conn:
                conn.exec_driver_sql(f"DELETE FROM {IDEMPOTENCY_TABLE} WHERE scope = ? AND idem_key = ? AND holder = ?",
                                     (claim.scope, claim.key, claim.holder))
        except Exception:  # noqa: BLE001 - the lease runs out instead; the request's own error is the one to report
            log.warning("could not give an idempotency key back; it is free again when its lease runs out",
                        exc_info=True)

    def sweep_due(self, db: Any) -> bool:
        """Whether this process should delete ``db``'s expired rows now (and, if so, it counts as done)."""
        now = time.monotonic()
        with self._sweep_lock:
            last = self._swept.get(id(db))
            if last is not None and now - last < self.settings.sweep_every:
                return False
            self._swept[id(db)] = now
            return True

    def sweep(self, db: Any) -> int:
        """Delete expired rows; returns how many."""
        try:
            with db.write() as conn:
                return int(conn.exec_driver_sql(f"DELETE FROM {IDEMPOTENCY_TABLE} WHERE expires_at <= ?",
                                                (_now_ms(),)).rowcount or 0)
        except Exception:  # noqa: BLE001 - the next sweep tries again; expired rows are never answered anyway
            log.warning("deleting expired idempotency keys failed; the next sweep tries again", exc_info=True)
            return 0


class SavedOutcome(SavedAwareWrite):
    """``Keeper.saved_with``'s staged write: ``commit(conn)`` keeps the outcome in the caller's transaction, and
    raises (so nothing of that transaction is stored) when another request took the key over meanwhile, which is
    then running the same request itself. ``committed``: whether ``commit`` ran (false: the turn saved nothing)."""

    def __init__(self, keeper: Keeper, claim: Claim, outcome: Outcome, thread_id: str | None) -> None:
        self.keeper, self.claim, self.outcome, self.thread_id = keeper, claim, outcome, thread_id
        self.committed = False

    def commit(self, conn: Any) -> None:
        self.commit_value(conn, ())

    def commit_saved(self, conn: Any, saved: Sequence[Message]) -> None:
        self.commit_value(conn, saved)

    def commit_value(self, conn: Any, value: Any) -> None:
        outcome = self.outcome(value) if callable(self.outcome) else self.outcome
        if not self.keeper._complete(conn, self.claim, outcome, self.thread_id):
            raise taken_over(self.keeper.settings.retry_after, self.claim.named)
        self.committed = True


def taken_over(wait: int, named: str = HEADER) -> GatewayError:
    return GatewayError(
        409, f"This request's {named} was taken over by a repeat of it while it ran (this request held it longer than "
        "its lease without renewing it), so this request saved nothing; the repeat's result is the one kept. Send the "
        f"request again with the same key in {wait} second(s) to get that result.",
        code="idempotency_key_in_use", param=named, retry=True, headers={"Retry-After": str(wait)})


__all__ = ["HEADER", "MAX_KEY_LENGTH", "REPLAYED_HEADER", "Claim", "IdempotencySettings", "Keeper", "Replay",
           "SavedOutcome", "checked_key", "error_outcome", "kept_status", "key_of", "request_hash", "scope_of"]
