"""Conditional requests on the memory API's working memory (RFC 9110, section 13): ETags, ``If-Match``, ``If-None-Match``.

The working memory's GET and PUT answer an ``ETag`` naming the stored value (``etag``: a hash of its text;
``"none"`` when there is none). A request may then carry:

- ``If-Match: <ETags>``: go on only if the value now is one of them (a weak ``W/`` tag compared by its tag);
  ``If-Match: *``: only if there is a value. A PUT so conditioned writes only over the value its client read,
  checked again in the write's own transaction (``Memory.update_working_memory(expected=)``); a GET answers it too.
- ``If-None-Match: <ETags>``: go on only if the value now is none of them; ``If-None-Match: *``: only if there is
  no value. A GET whose tag still matches is answered 304 Not Modified (with the ETag, no body), so a client
  polling the value reads it only when it changed; a PUT with ``If-None-Match: *`` creates the value and never
  replaces one another client wrote first.

A condition that fails is 412 ``precondition_failed`` with the ETag of the value now (the GET's ``If-None-Match``:
304). Both headers are lists: sent on several lines, they are read as one list, the lines joined by commas, as
RFC 9110 (section 5.3) says a recipient may; a proxy that folds them does the same, so both readings agree. A
list holding ``*`` and ETags has no meaning (``*`` stands alone in the grammar): 400 naming the header. Every
conditional header the memory API reads is read here (``Conditions.of``); the others (``If-Modified-Since``,
``If-Unmodified-Since``: the value has no modification date the API answers; ``If-Range``: no ranges) are
ignored, as RFC 9110 says a server without them does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from core.gateway.errors import GatewayError

#: The conditional headers the memory API reads (lower case, as Starlette's headers are asked), and as shown.
IF_MATCH = "if-match"
IF_NONE_MATCH = "if-none-match"
_SHOWN = {IF_MATCH: "If-Match", IF_NONE_MATCH: "If-None-Match"}


def etag(text: str | None) -> str:
    """The ETag of a stored working-memory text: a hash of its bytes, ``"none"`` when there is none."""
    return '"none"' if text is None else '"' + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32] + '"'


def list_header(headers: Mapping[str, str], name: str) -> tuple[str | None, int]:
    """A list header (``name`` lower case) as one value, its lines joined by ``", "`` (RFC 9110, section 5.3), and
    how many lines carried it; ``(None, 0)`` without one. (``headers`` without ``getlist``, a plain mapping, holds
    one value a name.)"""
    values = list(headers.getlist(name)) if hasattr(headers, "getlist") else \
        ([headers[name]] if name in headers else [])
    if not values:
        return None, 0
    return ", ".join(values), len(values)


def _tags(name: str, value: str, lines: int) -> tuple[str, ...]:
    """The entity tags of a list header (``("*",)`` for ``*``); 400 for ``*`` mixed with tags."""
    tags = tuple(t.strip() for t in value.split(",") if t.strip())
    if "*" in tags and len(tags) > 1:
        sent = f" (it was sent on {lines} lines, read as one list)" if lines > 1 else ""
        shown = _SHOWN[name]
        raise GatewayError(
            400, f"The {shown} header holds both * and entity tags{sent}; * stands alone. Send {shown}: * (any "
            f"stored value{' or none' if name == IF_NONE_MATCH else ''}, as the header means) or the ETags the value "
            "was read with, once. Nothing was read or written.", code="invalid_request", param=shown)
    return tags


def _holds(tags: tuple[str, ...], current: str | None) -> bool:
    """Whether ``tags`` name the value ``current`` (``*``: any existing value; weak tags compared by their tag)."""
    if tags == ("*",):
        return current is not None
    return etag(current) in {t[2:] if t.startswith("W/") else t for t in tags}


@dataclass(frozen=True)
class Conditions:
    """A request's ``If-Match`` and ``If-None-Match`` (each its lines joined, or None), their tags checked."""

    if_match: str | None = None
    if_none_match: str | None = None
    match_tags: tuple[str, ...] = ()
    none_match_tags: tuple[str, ...] = ()

    @classmethod
    def of(cls, headers: Mapping[str, str]) -> Conditions:
        if_match, n_match = list_header(headers, IF_MATCH)
        if_none, n_none = list_header(headers, IF_NONE_MATCH)
        return cls(if_match, if_none,
                   _tags(IF_MATCH, if_match, n_match) if if_match is not None else (),
                   _tags(IF_NONE_MATCH, if_none, n_none) if if_none is not None else ())

    @property
    def any(self) -> bool:
        return self.if_match is not None or self.if_none_match is not None

    def digest(self) -> dict[str, str | None]:
        """What of them makes two idempotent writes the same request (``If-None-Match`` only when sent, so a
        request without it has the digest it had before the header was read)."""
        parts: dict[str, str | None] = {"if_match": self.if_match}
        if self.if_none_match is not None:
            parts["if_none_match"] = self.if_none_match
        return parts

    def allow(self, current: str | None, *, reading: bool) -> bool:
        """Check the conditions against the value ``current`` (RFC 9110, section 13.2.2: ``If-Match`` first).
        True: go on. False: a read whose ``If-None-Match`` matched, to answer 304. Raises 412 when a condition
        fails otherwise."""
        if self.if_match is not None and not _holds(self.match_tags, current):
            raise precondition_failed(current, IF_MATCH, reading=reading)
        if self.if_none_match is not None and _holds(self.none_match_tags, current):
            if reading:
                return False
            raise precondition_failed(current, IF_NONE_MATCH)
        return True


def precondition_failed(current: str | None, header: str = IF_MATCH, *, reading: bool = False) -> GatewayError:
    """412 with the value's ETag now, so the client can read it again and redo its change."""
    if reading:
        message = ("The working memory is not the value this request's If-Match names (an agent or another client "
                   "wrote it since), so it was not answered. Read it without If-Match for the value and its ETag.")
    elif header == IF_NONE_MATCH:
        message = ("The working memory already holds a value this request's If-None-Match excludes (If-None-Match: * "
                   "writes only where there is none; an ETag, only over another value), so nothing was written. Read "
                   "it (GET gives its ETag) and decide: send your change with that ETag in If-Match to replace it.")
    else:
        message = ("The working memory changed since you read it (an agent or another client wrote it), so your "
                   "value was not written. Read it again (GET gives its ETag), redo your change on what it holds now, "
                   "and send it with that ETag in If-Match.")
    return GatewayError(412, message, code="precondition_failed", param=_SHOWN[header], headers={"ETag": etag(current)})


__all__ = ["IF_MATCH", "IF_NONE_MATCH", "Conditions", "etag", "list_header", "precondition_failed"]
