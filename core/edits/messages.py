"""Editing, deleting and undoing stored messages, each kept as a version (who, when, before, after).

Every change runs in one write transaction that also writes its version row, so a message and its
history can never disagree. Ownership is the thread rule (``core.scopes.check_thread_owner``): the
resource given must own the message's thread, and the message itself when it names a resource; one
foreign id refuses the whole call before anything is written.

A version row holds the whole stored row before and after (content exactly as stored), which is what
undo writes back and what a rebuild of an earlier turn reads (``core.replay.edited``). Recall is not
touched here: the facade (``Memory``) hands the changed ids to the recall index afterwards.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import sqlalchemy as sa

from core.edits.schema import MESSAGE_VERSIONS, message_versions
from core.ids import check_id, check_ids
from core.message_size import check_rows
from core.messages import Message, MessageFormatError, normalize_content
from core.scopes import check_thread_owner
from core.storage import catalog, dialect, locks
from core.storage.memory_store import InvalidArgumentError, NotFoundError, check_text
from core.stored_text import decode_stored_text, json_text
from core.timeutil import Clock, iso_now, parse_iso

if TYPE_CHECKING:  # pragma: no cover
    from core.storage import Store

_FIELDS = ("id", "thread_id", "content", "role", "type", "createdAt", "resourceId")
_INSERT = (
    'INSERT INTO mastra_messages ("id", "thread_id", "content", "role", "type", "createdAt", "resourceId") '
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)


class EditConflictError(InvalidArgumentError):
    """A message changed since the version being undone was written (undo the newer change first)."""


class NoVersionHistoryError(InvalidArgumentError):
    """The database has no message-versions table, so changes could not be kept (migrate it first)."""


@dataclass(frozen=True)
class MessageVersion:
    """One change of a stored message. ``before`` is None when the change brought the message back
    (an undone delete); ``after`` is None when it deleted the message."""

    id: int
    message_id: str
    thread_id: str
    resource_id: str | None
    op: str  # "edit" | "delete" | "undo"
    author: str
    before: Message | None
    after: Message | None
    note: str | None
    created_at: datetime

    @property
    def text_before(self) -> str:
        return self.before.text if self.before is not None else ""

    @property
    def text_after(self) -> str:
        return self.after.text if self.after is not None else ""


# -- rows -------------------------------------------------------------------------------------------
def _select(conn: sa.Connection, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    content = dialect.stored_text_sql(conn, '"content"')
    cols = ", ".join(content if c == "content" else f'"{c}"' for c in _FIELDS)
    out: dict[str, dict[str, Any]] = {}
    for start in range(0, len(ids), 500):
        chunk = list(ids[start:start + 500])
        rows = conn.exec_driver_sql(
            f"SELECT {cols} FROM mastra_messages WHERE id IN ({','.join('?' * len(chunk))})", tuple(chunk)).all()
        for r in rows:
            row = dict(zip(_FIELDS, r))
            row["content"] = decode_stored_text(row["content"])
            out[str(row["id"])] = row
    return out


def _dump_row(row: Mapping[str, Any] | None) -> str | None:
    return None if row is None else json_text({k: row.get(k) for k in _FIELDS}, ensure_ascii=False,
                                               separators=(",", ":"))


def _load_row(text: Any) -> dict[str, Any] | None:
    if text is None:
        return None
    value = json.loads(decode_stored_text(text) or "null")
    return dict(value) if isinstance(value, dict) else None


def row_message(row: Mapping[str, Any] | None) -> Message | None:
    """A version's stored row as a ``Message`` (None: the message did not exist)."""
    return None if row is None else Message.from_row(row)


def _thread_owners(conn: sa.Connection, thread_ids: Iterable[str]) -> dict[str, str]:
    wanted = sorted(set(thread_ids))
    if not wanted:
        return {}
    rows = conn.exec_driver_sql(
        f'SELECT id, "resourceId" FROM mastra_threads WHERE id IN ({",".join("?" * len(wanted))})', tuple(wanted))
    return {str(r[0]): str(r[1]) for r in rows}


def check_owner(row: Mapping[str, Any], owners: Mapping[str, str], resource_id: str) -> None:
    """The resource must own the message's thread, and the message when it names a resource."""
    thread_id = str(row["thread_id"])
    check_thread_owner(thread_id, owners.get(thread_id), resource_id)
    own = row.get("resourceId")
    check_thread_owner(thread_id, str(own) if own else None, resource_id)


def _require_resource(resource_id: Any) -> str:
    if not isinstance(resource_id, str) or not resource_id:
        raise InvalidArgumentError("Say which resource owns the message (resource_id=...); one resource can "
                                   "never change another's messages.")
    check_id(resource_id, "resource id", InvalidArgumentError)
    return resource_id


def _has_versions(conn: sa.Connection) -> bool:
    return catalog.has_table(conn, MESSAGE_VERSIONS)


def _require_versions(conn: sa.Connection, where: str) -> None:
    if not _has_versions(conn):
        raise NoVersionHistoryError(
            f"{where} keeps no message versions, so an edit could not be undone. Run `memory-studio migrate` on it "
            "(Studio: File > Migrate Database…) first. Nothing was changed.")


def _version(conn: sa.Connection, *, row: Mapping[str, Any], op: str, author: str, before: Mapping[str, Any] | None,
             after: Mapping[str, Any] | None, owner: str | None, now: str, note: str | None = None) -> None:
    conn.execute(message_versions.insert().values(
        message_id=row["id"], thread_id=row["thread_id"], resource_id=row.get("resourceId") or owner, op=op,
        author=author, before_row=_dump_row(before), after_row=_dump_row(after), note=note, createdAt=now))


def _touch(conn: sa.Connection, thread_ids: Iterable[str], now: str) -> None:
    for thread_id in sorted(set(thread_ids)):
        conn.exec_driver_sql('UPDATE mastra_threads SET "updatedAt" = ? WHERE id = ?', (now, thread_id))


# -- content ----------------------------------------------------------------------------------------
# Parts that carry something to send besides text (a message made of them may have no text).
_CARRIERS = ("tool-invocation", "file")


def content_with_text(content: Mapping[str, Any], text: str) -> dict[str, Any]:
    """The content with its text replaced: the first text part holds ``text``, other text parts go,
    every other part (tool calls, files, reasoning) stays in place."""
    out = dict(content)
    parts: list[dict[str, Any]] = []
    placed = False
    for part in content.get("parts") or []:
        if isinstance(part, Mapping) and part.get("type") == "text":
            if not placed:
                parts.append({**part, "text": text})
                placed = True
            continue
        parts.append(dict(part) if isinstance(part, Mapping) else part)
    if not placed:
        parts.append({"type": "text", "text": text})
    out["parts"] = parts
    out.setdefault("format", 2)
    if "content" in content or text:
        out["content"] = text
    return out


def _new_content(current: dict[str, Any], message_id: str, text: str | None, content: Any) -> dict[str, Any]:
    if (text is None) == (content is None):
        raise InvalidArgumentError("edit_message takes either text=... (the new text) or content=... (the whole "
                                   "format-2 content), not both and not neither.")
    if text is not None:
        if not isinstance(text, str):
            raise InvalidArgumentError(f"text must be a string, got {type(text).__name__}.")
        if not text.strip() and not any(isinstance(p, Mapping) and p.get("type") in _CARRIERS
                                         for p in current.get("parts") or []):
            # Nothing would be left to send: many servers refuse a message with empty content, which
            # would fail every later turn of the thread.
            raise InvalidArgumentError(f"The new text of message {message_id} is empty, and the message holds "
                                       "nothing else: delete the message instead (Studio: Edit > Delete Message; "
                                       "API: delete_messages).")
        return content_with_text(current, text)
    if isinstance(content, Message):
        content = content.content
    if not isinstance(content, Mapping):
        raise InvalidArgumentError("content must be a format-2 content object (a dict with 'format': 2 and "
                                   "'parts'); to change only the words, pass text=... instead.")
    try:
        return normalize_content(json_text(dict(content), ensure_ascii=False), message_id=message_id)
    except (TypeError, ValueError, MessageFormatError) as exc:
        raise InvalidArgumentError(f"The new content of message {message_id} is not usable: {exc}") from None


# -- the operations -----------------------------------------------------------------------------------
def edit(store: "Store", message_id: str, *, resource_id: str, text: str | None = None, content: Any = None,
         author: str = "api", clock: Clock | None = None, max_bytes: int | None = None,
         hide: Any = None, expected: Any = None) -> tuple[Message, bool]:
    """Change one stored message; returns (the message as stored now, whether anything changed).

    ``hide``: the facade's rule for what may be persisted (working-memory tags); None keeps content as given.
    ``expected``: the content the caller read and edited (``Message.content``); checked in the edit's own
    transaction, so a change another program made since is never saved over (``EditConflictError``)."""
    check_id(message_id, "message id", InvalidArgumentError)
    resource_id = _require_resource(resource_id)
    with store.db.write() as conn:
        _require_versions(conn, store.location.display)
        row = _select(conn, [message_id]).get(message_id)
        if row is None:
            raise NotFoundError(f"Message {message_id} not found; it may have been deleted. Nothing was changed.")
        store.db.lock(conn, locks.thread_key(str(row["thread_id"])))
        # Read again under the thread's lock: on Postgres another writer may have committed a change of it
        # between the first read and the lock (the first read only names the thread to lock).
        row = _select(conn, [message_id]).get(message_id)
        if row is None:
            raise NotFoundError(f"Message {message_id} not found; it may have been deleted. Nothing was changed.")
        owners = _thread_owners(conn, [str(row["thread_id"])])
        check_owner(row, owners, resource_id)
        _check_expected(row, expected, "Nothing was changed")
        current = normalize_content(row["content"], message_id=message_id)
        new = _new_content(current, message_id, text, content)
        if hide is not None:
            hidden = hide(new)
            if hidden is None:
                raise InvalidArgumentError(
                    f"The new content of message {message_id} holds only working-memory traffic, which is never "
                    "stored in messages. Nothing was changed; edit working memory in its own editor.")
            new = hidden
        stored = json_text(new, ensure_ascii=False, separators=(",", ":"))
        check_text(stored, f"The new content of message {message_id!r}")
        check_rows([(message_id, row["thread_id"], stored)], max_bytes)
        if new == current:
            return Message.from_row(row), False
        after = {**row, "content": stored}
        now = iso_now(clock)
        conn.exec_driver_sql("UPDATE mastra_messages SET content = ? WHERE id = ?", (stored, message_id))
        _version(conn, row=row, op="edit", author=author, before=row, after=after,
                 owner=owners.get(str(row["thread_id"])), now=now)
        _touch(conn, [str(row["thread_id"])], now)
    return Message.from_row(after), True


def delete(store: "Store", ids: Iterable[str], *, resource_id: str, author: str = "api",
           clock: Clock | None = None, expected: Mapping[str, Any] | None = None) -> list[Message]:
    """Delete stored messages (all or none); returns them as they were. ``expected``: the content the caller
    read of some of them, by id (as ``edit``'s): none is deleted if one of those changed since."""
    wanted = list(dict.fromkeys(ids if not isinstance(ids, str) else [ids]))
    if not wanted:
        return []
    check_ids(((i, "message id") for i in wanted), InvalidArgumentError)
    resource_id = _require_resource(resource_id)
    with store.db.write() as conn:
        _require_versions(conn, store.location.display)
        threads = {str(r["thread_id"]) for r in _all_of(conn, wanted).values()}
        store.db.lock(conn, *(locks.thread_key(t) for t in sorted(threads)))
        rows = _all_of(conn, wanted)  # again, under the locks (as ``edit``'s)
        owners = _thread_owners(conn, threads)
        for row in rows.values():
            check_owner(row, owners, resource_id)
            if expected is not None and row["id"] in expected:
                _check_expected(row, expected[row["id"]], "Nothing was deleted")
        now = iso_now(clock)
        for mid in wanted:
            row = rows[mid]
            _version(conn, row=row, op="delete", author=author, before=row, after=None,
                     owner=owners.get(str(row["thread_id"])), now=now)
        for start in range(0, len(wanted), 500):
            chunk = wanted[start:start + 500]
            conn.exec_driver_sql(f"DELETE FROM mastra_messages WHERE id IN ({','.join('?' * len(chunk))})",
                                 tuple(chunk))
        _touch(conn, threads, now)
    return [Message.from_row(rows[i]) for i in wanted]


def undo(store: "Store", message_id: str, *, resource_id: str, author: str = "api",
         clock: Clock | None = None) -> tuple[Message | None, Message | None]:
    """Revert the newest change of a message (an edit, a delete, or an undo: undoing twice redoes).

    Returns (the message before this undo, the message after it); either is None when it did not exist.
    """
    check_id(message_id, "message id", InvalidArgumentError)
    resource_id = _require_resource(resource_id)
    with store.db.write() as conn:
        _require_versions(conn, store.location.display)
        last = conn.execute(sa.select(message_versions).where(message_versions.c.message_id == message_id)
                            .order_by(message_versions.c.id.desc()).limit(1)).mappings().first()
        if last is None:
            raise NotFoundError(f"Message {message_id} has no change to undo.")
        thread_id = str(last["thread_id"])
        store.db.lock(conn, locks.thread_key(thread_id))
        owners = _thread_owners(conn, [thread_id])
        before, after = _load_row(last["before_row"]), _load_row(last["after_row"])
        probe = before or after or {"id": message_id, "thread_id": thread_id, "resourceId": last["resource_id"]}
        check_thread_owner(thread_id, owners.get(thread_id) or last["resource_id"], resource_id)
        check_owner(probe, owners, resource_id)
        current = _select(conn, [message_id]).get(message_id)
        if not _same(current, after):
            raise EditConflictError(
                f"Message {message_id} changed after version {last['id']} ({last['op']} by {last['author']}); "
                "that change cannot be undone on top of it. Look at its history and edit it by hand. Nothing was changed.")
        if before is None:
            conn.exec_driver_sql("DELETE FROM mastra_messages WHERE id = ?", (message_id,))
        elif current is None:
            if thread_id not in owners:
                raise NotFoundError(f"Thread {thread_id} of message {message_id} is gone; the message cannot be "
                                    "restored into it. Nothing was changed.")
            conn.exec_driver_sql(_INSERT, tuple(before[k] for k in _FIELDS))
        else:
            conn.exec_driver_sql("UPDATE mastra_messages SET content = ? WHERE id = ?", (before["content"], message_id))
        now = iso_now(clock)
        _version(conn, row=before or after or probe, op="undo", author=author, before=current, after=before,
                 owner=owners.get(thread_id), now=now, note=f"undid version {last['id']} ({last['op']})")
        _touch(conn, [thread_id], now)
    return row_message(current), row_message(before)


def _all_of(conn: sa.Connection, wanted: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``_select`` of every id in ``wanted``, or ``NotFoundError`` naming the missing ones."""
    rows = _select(conn, wanted)
    missing = [i for i in wanted if i not in rows]
    if missing:
        raise NotFoundError(f"Message(s) not found: {', '.join(missing[:5])}{'…' if len(missing) > 5 else ''}. "
                            "Nothing was deleted; refresh and pick messages that exist.")
    return rows


def _check_expected(row: Mapping[str, Any], expected: Any, nothing: str) -> None:
    """``EditConflictError`` when ``expected`` (content a caller read) is given and the stored row's differs."""
    if expected is not None and Message.from_row(row).content != expected:
        raise EditConflictError(
            f"Message {row['id']} changed since it was read (another program edited it meanwhile). {nothing}; "
            "read it again and make the change on what it holds now.")


def _same(current: Mapping[str, Any] | None, expected: Mapping[str, Any] | None) -> bool:
    if current is None or expected is None:
        return current is None and expected is None
    return bool(current["content"] == expected["content"] and current["thread_id"] == expected["thread_id"])


def _from_db(r: Any) -> MessageVersion:
    return MessageVersion(
        id=int(r["id"]), message_id=str(r["message_id"]), thread_id=str(r["thread_id"]), resource_id=r["resource_id"],
        op=str(r["op"]), author=str(r["author"]), before=row_message(_load_row(r["before_row"])),
        after=row_message(_load_row(r["after_row"])), note=r["note"], created_at=parse_iso(r["createdAt"]))


def versions(store: "Store", message_id: str, *, resource_id: str) -> list[MessageVersion]:
    """Every change of a message, oldest first (empty when it was never changed)."""
    check_id(message_id, "message id", InvalidArgumentError)
    resource_id = _require_resource(resource_id)
    with store.db.read() as conn:
        if not _has_versions(conn):
            return []
        rows = conn.execute(sa.select(message_versions).where(message_versions.c.message_id == message_id)
                            .order_by(message_versions.c.id)).mappings().all()
        current = _select(conn, [message_id]).get(message_id)
        if current is None and not rows:
            return []
        probe = current or {"thread_id": rows[-1]["thread_id"], "resourceId": rows[-1]["resource_id"]}
        owners = _thread_owners(conn, [str(probe["thread_id"])])
    thread_id = str(probe["thread_id"])
    check_thread_owner(thread_id, owners.get(thread_id) or probe.get("resourceId"), resource_id)
    check_owner(probe, owners, resource_id)
    return [_from_db(r) for r in rows]


def changed_ids(store: "Store", ids: Sequence[str]) -> set[str]:
    """Which of these messages have ever been changed (one read; for marks in a list)."""
    if not ids:
        return set()
    with store.db.read() as conn:
        if not _has_versions(conn):
            return set()
        out: set[str] = set()
        for start in range(0, len(ids), 500):
            chunk = list(ids[start:start + 500])
            out.update(str(r[0]) for r in conn.exec_driver_sql(
                f"SELECT DISTINCT message_id FROM {MESSAGE_VERSIONS} WHERE message_id IN ({','.join('?' * len(chunk))})",
                tuple(chunk)))
    return out


def has_versions_table(store: "Store") -> bool:
    """Whether the database keeps message versions (cached per store: a table, once there, stays)."""
    if not store.extensions.get("message_versions_table"):
        with store.db.read() as conn:
            store.extensions["message_versions_table"] = _has_versions(conn)
    return bool(store.extensions["message_versions_table"])


def newest_change(store: "Store") -> str | None:
    """When the newest message change was made (ISO text), or None: nothing was ever changed."""
    if not has_versions_table(store):
        return None
    with store.db.read() as conn:
        value = conn.exec_driver_sql(f'SELECT max("createdAt") FROM {MESSAGE_VERSIONS}').scalar()
    return str(value) if value else None


def version_rows(store: "Store", ids: Sequence[str]) -> dict[str, list[tuple[str, Message | None]]]:
    """Each message's versions, oldest first, as (when, the message before that change: None when it
    did not exist). Messages never changed are left out."""
    out: dict[str, list[tuple[str, Message | None]]] = {}
    if not ids or not has_versions_table(store):
        return out
    with store.db.read() as conn:
        for start in range(0, len(ids), 500):
            chunk = list(ids[start:start + 500])
            rows = conn.exec_driver_sql(
                f'SELECT message_id, "createdAt", before_row FROM {MESSAGE_VERSIONS} WHERE message_id IN '
                f"({','.join('?' * len(chunk))}) ORDER BY id", tuple(chunk)).all()
            for mid, when, before in rows:
                out.setdefault(str(mid), []).append((str(when), row_message(_load_row(before))))
    return out


def delete_thread_versions(conn: sa.Connection, thread_id: str) -> None:
    """A deleted thread's message and observation versions go with it (inside its delete transaction)."""
    from core.edits.schema import OBSERVATION_VERSIONS

    for table in (MESSAGE_VERSIONS, OBSERVATION_VERSIONS):
        if catalog.has_table(conn, table):
            conn.exec_driver_sql(f"DELETE FROM {table} WHERE thread_id = ?", (thread_id,))


def thread_changed_after(store: "Store", thread_id: str, when: str) -> bool:
    """Whether any message of the thread was edited, deleted or restored after ``when``."""
    with store.db.read() as conn:
        if not _has_versions(conn):
            return False
        return conn.exec_driver_sql(
            f'SELECT 1 FROM {MESSAGE_VERSIONS} WHERE thread_id = ? AND "createdAt" > ? LIMIT 1',
            (thread_id, when)).first() is not None


__all__ = [
    "EditConflictError", "MessageVersion", "NoVersionHistoryError", "changed_ids", "check_owner",
    "content_with_text", "delete", "delete_thread_versions", "edit", "has_versions_table", "newest_change",
    "row_message", "thread_changed_after", "undo", "version_rows", "versions",
]
