"""Keyset cursors of the memory API's lists (``GET /api/memory/threads``, ``/api/memory/delegations``).

A page's answer carries ``nextCursor``: where the next page starts, the last thread's key in the list's order
(its creation time as stored and its id, which never change). A client passes it back as ``cursor=``; threads
created (or deleted) between two page reads then move no page, where ``page=`` offsets showed a thread twice or
skipped one. A cursor is opaque (base64url JSON) and validated, not signed: every gateway process of a fleet on
one database must read another's cursors without a shared secret, and a cursor only says where to continue in a
list the caller may read whole anyway (the query still keeps to the resource the request names). What is checked:
the form, the version, which list it continues and for which resource and agent, and that its time is a time; a
cursor that fails is 400 ``invalid_cursor`` saying to list again from the first page.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from datetime import datetime
from typing import Any

from core.gateway.errors import GatewayError

VERSION = 1
MAX_CURSOR = 4096
#: A key's time as either engine stores it (libSQL ``...T...Z`` text, Postgres' ``... ...+00:00``): nothing else is
#: sent to the database (Python reads more ISO forms than Postgres does, such as week dates).
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})?")


def _scope(kind: str, parts: tuple[Any, ...]) -> str:
    return hashlib.sha256(json.dumps([kind, *parts], ensure_ascii=False).encode("utf-8", "surrogatepass")).hexdigest()[:24]


def issue(kind: str, parts: tuple[Any, ...], key: tuple[str, str]) -> str:
    """The cursor continuing the ``kind`` list of ``parts`` (resource, agent) after the thread keyed ``key``."""
    payload = json.dumps([VERSION, kind, _scope(kind, parts), *key], ensure_ascii=False, separators=(",", ":"))
    return base64.urlsafe_b64encode(payload.encode("utf-8", "surrogatepass")).decode("ascii").rstrip("=")


def read(cursor: str, kind: str, parts: tuple[Any, ...], *, what: str) -> tuple[str, str]:
    """The key ``cursor`` continues after; 400 ``invalid_cursor`` when it is not a cursor of this list."""
    value = _decode(cursor)
    if value is None:
        raise _invalid(f"This cursor is not one the gateway gave for the {what} (it is cut short, changed or made up)",
                       what)
    _version, cursor_kind, scope, created, thread_id = value
    if cursor_kind != kind or scope != _scope(kind, parts):
        raise _invalid(f"This cursor continues another list (another resource, agent or route), not the {what}",
                       what)
    return created, thread_id


def _decode(cursor: str) -> list[Any] | None:
    if not cursor or len(cursor) > MAX_CURSOR or not cursor.isascii():
        return None
    try:
        value = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("utf-8", "surrogatepass"))
    except ValueError:
        return None
    if not (isinstance(value, list) and len(value) == 5 and value[0] == VERSION
            and all(isinstance(v, str) and v for v in value[1:])):
        return None
    if not _TIME.fullmatch(value[3]):
        return None
    try:
        datetime.fromisoformat(value[3].replace("Z", "+00:00"))
    except ValueError:  # (a 13th month)
        return None
    return value


def _invalid(reason: str, what: str) -> GatewayError:
    return GatewayError(400, f"{reason}. Pass back the nextCursor of the answer before, unchanged; or list the {what} "
                             "again from the first page, without a cursor.", code="invalid_cursor", param="cursor")


__all__ = ["issue", "read"]
