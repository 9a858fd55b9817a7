"""Threads, messages and resources on the libSQL file, with Mastra's semantics (spec §1.3).

Plain data in, plain data out: no knowledge of processors or prompts. Metadata is written as JSON
text; reads accept JSON text and the SQLite JSONB blobs Mastra writes.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generator, Iterable, Iterator, Mapping, Sequence

import sqlalchemy as sa

from core.json_kind import json_kind
from core.message_size import check_rows
from core.ids import check_id, check_ids, clipped
from core.messages import Message
from core.storage import bulk, catalog, dialect, driver_sql, locks, message_pages, message_windows
from core.storage import schema as t
from core.storage.database import Database, StorageError
from core.storage.message_pages import MessageRows, UnreadableMessage
from core.stored_text import decode_stored_text, nul_path, stored_json, utf8_problem
from core.timeutil import iso_now, parse_iso, to_iso


class NotFoundError(StorageError, LookupError):
    pass


class AlreadyExistsError(StorageError):
    pass


class InvalidArgumentError(StorageError, ValueError):
    pass


def _like_needle(text: str, *, fold_all: bool) -> str:
    """What a LIKE (``fold_all``: an ILIKE) looks for to find every stored message holding ``text`` in any
    case: ``text`` as it sits inside a JSON string, or, where LIKE folds only ASCII letters, the longest
    piece of it without a letter that has a case outside ASCII ("" when there is none: match everything)."""
    pieces = [text] if fold_all else "".join(
        "\0" if not ch.isascii() and ch.lower() != ch.upper() else ch for ch in text).split("\0")
    longest = max(pieces, key=len)
    return json.dumps(longest, ensure_ascii=False)[1:-1] if longest.strip() else ""


@dataclass(frozen=True)
class TextPage:
    """A page of ``MemoryStore.search_text_pages``: the messages read (rows that do not parse left out) and
    how many rows were read."""

    messages: list[Message]
    rows: int


@dataclass
class Thread:
    id: str
    resource_id: str
    title: str
    metadata: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "resourceId": self.resource_id,
            "title": self.title,
            "metadata": self.metadata,
            "createdAt": to_iso(self.created_at),
            "updatedAt": to_iso(self.updated_at),
        }


@dataclass
class ThreadSummary:
    thread: Thread
    message_count: int
    last_activity: datetime | None
    #: An untitled thread's first user message, its stored content's first ``OPENING_CHARS`` characters (the
    #: JSON may be cut short): read only where asked (``tree_summaries(openings=True)``), else None.
    opening: str | None = None


#: How much of an untitled thread's first user message ``tree_summaries(openings=True)`` reads: the Studio's tree
#: shows its first words (``studio.logic.thread_labels.opening_words``), never the whole of a long message. (The
#: JSON's head, ``{"format":2,"parts":[{"type":"text","text":"``, takes 45; 600 characters doubled the read's cost
#: on Postgres, mostly in sending them: ``bench/thread_tree_openings.py``.)
OPENING_CHARS = 200


@dataclass
class Resource:
    id: str
    working_memory: str | None
    metadata: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime


@dataclass
class ResourceSummary:
    id: str
    thread_count: int
    message_count: int
    last_activity: datetime | None
    has_working_memory: bool


@dataclass
class ThreadPage:
    threads: list[Thread]
    total: int
    page: int
    per_page: int
    has_more: bool
    # The last thread's key in the list's order, ``(createdAt as stored, id)`` (``thread_keys``' form): where the
    # next page starts (``list_threads(after=...)``). None: an empty page.
    last_key: tuple[str, str] | None = None

    def __iter__(self) -> Iterator[Thread]:
        return iter(self.threads)

    def __len__(self) -> int:
        return len(self.threads)

    def __getitem__(self, index: int) -> Thread:
        return self.threads[index]


@dataclass
class Include:
    """A stored message plus ``before``/``after`` neighbours in its own thread (recall context)."""

    id: str
    thread_id: str | None = None
    before: int = 0
    after: int = 0


@dataclass
class MessageQuery:
    thread_id: str
    resource_id: str | None = None
    last: int | None = None  # newest N, returned oldest-first
    since: datetime | None = None
    until: datetime | None = None
    ids: Sequence[str] | None = None
    before: tuple[datetime, str] | None = None  # strictly older than (createdAt, id): history "as of" a turn
    exclude_system: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


# ``list_messages(parsed=...)``: messages already parsed, by their stored row (a tuple of ``_MESSAGE_FIELDS``).
ParsedRows = dict[tuple[Any, ...], Message]


def _readable_with(rows: Sequence[tuple[Any, ...]], parsed: ParsedRows) -> MessageRows:
    """``message_pages.readable`` of ``rows``, taking each row read before from ``parsed`` and adding the others."""
    out = MessageRows()
    for row in rows:
        key = tuple(row)
        try:
            known = parsed.get(key)
            keep = True
        except TypeError:  # a driver value that cannot be hashed: parsed each time, as without ``parsed``
            known, keep = None, False
        if known is not None:
            out.append(known)
            continue
        page = message_pages.readable([dict(zip(_MESSAGE_FIELDS, row))])
        out.unreadable.extend(page.unreadable)  # not kept: it is reported each time it is read, as without
        for msg in page:
            if keep:
                parsed[key] = msg
            out.append(msg)
    return out


def json_col(col: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
    """Read a JSON column as JSON text, whether it holds text, a JSONB blob (libSQL) or ``jsonb``."""
    return dialect.json_text(col)


def load_json(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("utf-8", errors="replace")
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def check_text(value: Any, what: str) -> None:
    """Refuse text the driver cannot store: a lone surrogate (libSQL's fails with "Unsupported parameter type"), and
    a NUL character, which PostgreSQL stores in no text column (psycopg's "PostgreSQL text fields cannot contain NUL
    (0x00) bytes", its SQL and parameters with it) and libSQL kept, so a title written on one failed on the other
    and in an import from it."""
    if isinstance(value, str):
        problem = utf8_problem(value)
        if problem is not None:
            raise InvalidArgumentError(
                f"{what} contains {problem}, which cannot be stored as UTF-8 text. Nothing was written. Fix the "
                "text where it was decoded (e.g. bytes.decode('utf-8', errors='replace')) and try again."
            )
        if "\x00" in value:
            raise InvalidArgumentError(
                f"{what} contains a NUL character (U+0000), which PostgreSQL stores in no text. Nothing was "
                "written. Remove it (or write what it stands for as text) and try again."
            )


def check_json_text(text: str | None, what: str) -> None:
    """``check_text`` for a JSON document as it is stored (thread metadata): a NUL in one of its strings or keys is
    written ``\\u0000``, which PostgreSQL's JSONB refuses (psycopg's "unsupported Unicode escape sequence", the
    gateway's 500) and libSQL kept, so such a row failed an import into Postgres."""
    check_text(text, what)
    if text is not None and "\\u0000" in text and (where := nul_path(json.loads(text))) is not None:
        raise InvalidArgumentError(
            f"{what} holds a NUL character (U+0000) at {clipped(where)}, which PostgreSQL stores in no JSON. Nothing "
            "was written. Remove it (or write what it stands for as text) and try again.")


def _check_rows(rows: list[tuple[Any, ...]]) -> None:
    """``check_text`` for every text column of message rows; the common case is one encode per row."""
    try:
        for row in rows:
            (row[0] + row[1] + row[2] + (row[6] or "")).encode("utf-8")
    except (UnicodeEncodeError, TypeError):
        for row in rows:
            for index, what in ((2, "The content"), (0, "The id"), (1, "The thread id"), (6, "The resource id")):
                check_text(row[index], f"{what} of message {row[0]!r}")


def dump_json(value: Any) -> str | None:
    if value is None:
        return None
    return stored_json(value, default=str)


_MESSAGE_FIELDS = ("id", "thread_id", "content", "role", "type", "createdAt", "resourceId")
# Content is read as a blob on libSQL, which panics on a TEXT value that is not valid UTF-8
# (core.stored_text); ``{content}`` is filled in per dialect (``dialect.stored_text_sql``).
_MESSAGE_SELECT = ", ".join("{content}" if c == "content" else f'"{c}"' for c in _MESSAGE_FIELDS)
# A save's rows go in one multi-row statement (``bulk.insert_rows``): head, the values, then this tail.
_INSERT_MESSAGES = 'INSERT INTO mastra_messages ("id", "thread_id", "content", "role", "type", "createdAt", "resourceId")'
# A message saved again keeps its stored place in time, as Mastra's saveMessages does (its upsert sets
# every column but ``createdAt``): a retry of a message by id after its first answer was saved must not
# move it after that answer.
_ON_CONFLICT_MESSAGE = (
    "ON CONFLICT (id) DO UPDATE SET thread_id = excluded.thread_id, "
    'content = excluded.content, role = excluded.role, type = excluded.type, '
    '"resourceId" = excluded."resourceId"'
)

# Per thread a max() the engine answers from the end of the thread's index; a statement that
# compared every message's resourceId would read the resource's whole history.
_NEWEST_IN_RESOURCE = (
    'SELECT max(newest) FROM (SELECT max("createdAt") AS newest FROM mastra_messages WHERE thread_id = ? '
    'UNION ALL SELECT (SELECT max(m."createdAt") FROM mastra_messages m WHERE m.thread_id = th.id) '
    'FROM mastra_threads th WHERE th."resourceId" = coalesce(?, (SELECT o."resourceId" FROM mastra_threads o '
    'WHERE o.id = ?))) AS newest_of_each'
)

_OTHERS_AT = (
    'SELECT m.id, m.thread_id FROM mastra_threads th JOIN mastra_messages m ON m.thread_id = th.id '
    'WHERE th."resourceId" = ? AND th.id != ? AND m."createdAt" >= ? AND m."createdAt" <= ? ORDER BY m.id LIMIT ?'
)

# Title and metadata are read as blobs on libSQL (see _MESSAGE_SELECT); filled in per dialect.
_GET_THREAD = 'SELECT id, "resourceId", {title} AS title, {metadata} AS metadata, "createdAt", "updatedAt" FROM mastra_threads WHERE id = ?'

_THREAD_COLS = (
    t.threads.c.id,
    t.threads.c.resourceId,
    t.threads.c.title,
    json_col(t.threads.c.metadata).label("metadata"),
    t.threads.c.createdAt,
    t.threads.c.updatedAt,
)


def _thread(row: Any) -> Thread:
    """A thread from a row starting with ``_THREAD_COLS`` (an SQLAlchemy row or a driver tuple)."""
    thread_id, resource_id, title, metadata, created_at, updated_at = row[:6]
    meta = load_json(decode_stored_text(metadata))
    return Thread(
        id=thread_id,
        resource_id=resource_id,
        title=decode_stored_text(title) or "",
        metadata=meta if isinstance(meta, dict) else ({} if meta is not None else None),
        created_at=parse_iso(created_at),
        updated_at=parse_iso(updated_at),
    )


class MemoryStore:
    """CRUD for the memory tables. Every method opens its own short transaction."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # -- threads ---------------------------------------------------------------------------------
    def create_thread(
        self, *, thread_id: str, resource_id: str, title: str = "", metadata: Mapping[str, Any] | None = None,
        created_at: datetime | None = None, conn: sa.Connection | None = None,
    ) -> Thread:
        if not thread_id or not isinstance(thread_id, str):
            raise InvalidArgumentError("A thread needs a non-empty string id.")
        if not isinstance(resource_id, str):
            raise InvalidArgumentError("A thread needs a resource id (a string).")
        if metadata is not None and not isinstance(metadata, Mapping):
            raise InvalidArgumentError("Thread metadata must be a JSON object (a dict).")
        meta_text = dump_json(dict(metadata)) if metadata is not None else None
        check_text(thread_id, "The thread id")
        check_text(resource_id, f"The resource id of thread {thread_id!r}")
        check_text(title, f"The title of thread {thread_id!r}")
        check_json_text(meta_text, f"The metadata of thread {thread_id!r}")
        check_id(thread_id, "thread id", InvalidArgumentError)
        check_id(resource_id, "resource id", InvalidArgumentError)
        now = to_iso(created_at) if created_at else iso_now()
        with self.db.write() if conn is None else _nullcontext(conn) as wconn:
            self.db.lock(wconn, locks.thread_key(thread_id))
            if wconn.execute(sa.select(t.threads.c.id).where(t.threads.c.id == thread_id)).first():
                raise AlreadyExistsError(f"Thread with id {thread_id} already exists")
            wconn.execute(
                t.threads.insert().values(
                    id=thread_id, resourceId=resource_id, title=title or "", metadata=meta_text,
                    createdAt=now, updatedAt=now,
                )
            )
        thread = self.get_thread(thread_id, conn=conn) if conn is not None else self.get_thread(thread_id)
        assert thread is not None
        return thread

    def get_thread(self, thread_id: str, *, conn: sa.Connection | None = None) -> Thread | None:
        # An id the database would cut short must not find the thread it is cut to.
        check_id(thread_id, "thread id", InvalidArgumentError)
        if conn is None:
            with self.db.read() as own:
                return self.get_thread(thread_id, conn=own)
        sql = _GET_THREAD.format(
            title=dialect.stored_text_sql(conn, "title"),
            metadata=dialect.stored_text_sql(conn, dialect.json_text_sql(conn, "metadata")),
        )
        row = driver_sql.first(conn, sql, (thread_id,))  # every turn reads it (twice): the driver's cursor
        return _thread(row) if row else None

    def thread_owner(self, thread_id: str, conn: sa.Connection) -> tuple[str | None] | None:
        """``(resourceId,)`` of a stored thread (its owner; None when the column is empty), or None when
        there is no such thread: what a save checks under the write lock, without the thread's title
        and metadata (every agent turn saves once)."""
        check_id(thread_id, "thread id", InvalidArgumentError)
        row = driver_sql.first(conn, 'SELECT "resourceId" FROM mastra_threads WHERE id = ?', (thread_id,))
        return (row[0],) if row else None

    def list_threads(
        self, *, resource_id: str | None = None, page: int = 0, per_page: int | None = 100,
        metadata_filter: Mapping[str, Any] | None = None, order_desc: bool = True,
        after: tuple[str, str] | None = None,
    ) -> ThreadPage:
        """``after``: a keyset start, the ``last_key`` of the page before: only threads after it in the list's
        order (``page`` then counts from there), so threads created between two page reads move no page."""
        if page < 0 or (per_page is not None and per_page < 0):
            raise InvalidArgumentError("page and per_page must be non-negative.")
        query = sa.select(*_THREAD_COLS)
        count = sa.select(sa.func.count()).select_from(t.threads)
        conds = []
        if resource_id is not None:
            check_id(resource_id, "resource id", InvalidArgumentError)
            conds.append(t.threads.c.resourceId == resource_id)
        for key, value in (metadata_filter or {}).items():
            if isinstance(value, (dict, list)):
                raise InvalidArgumentError(
                    f"Metadata filter values must be plain JSON values (a string, a number, true, false or null); "
                    f"{key!r} is {json_kind(value)}. Only top-level keys holding such a value can be filtered on."
                )
            conds.append(dialect.json_value_equals(t.threads.c.metadata, str(key), value))
        if conds:
            query = query.where(*conds)
            count = count.where(*conds)
        order = t.threads.c.createdAt.desc() if order_desc else t.threads.c.createdAt.asc()
        query = query.order_by(order, t.threads.c.id)
        if after is not None:
            created, thread_id = after
            beyond = t.threads.c.createdAt < created if order_desc else t.threads.c.createdAt > created
            query = query.where(sa.or_(beyond, sa.and_(t.threads.c.createdAt == created, t.threads.c.id > thread_id)))
        if per_page:
            query = query.limit(per_page).offset(page * per_page)
        with self.db.read() as conn:
            total = int(conn.execute(count).scalar() or 0)
            rows = conn.execute(query).all()
        size = per_page or total
        last = (str(rows[-1][4]), str(rows[-1][0])) if rows else None
        if after is not None:  # ``total`` counts the whole list; what follows this page is asked for
            more = bool(per_page) and bool(rows) and self._has_threads_after(conds, order_desc, last)
            return ThreadPage([_thread(r) for r in rows], total, page, size, more, last)
        return ThreadPage([_thread(r) for r in rows], total, page, size, bool(per_page) and (page + 1) * size < total,
                          last)

    def _has_threads_after(self, conds: list[Any], order_desc: bool, key: tuple[str, str] | None) -> bool:
        assert key is not None
        created, thread_id = key
        beyond = t.threads.c.createdAt < created if order_desc else t.threads.c.createdAt > created
        stmt = sa.select(t.threads.c.id).where(
            *conds, sa.or_(beyond, sa.and_(t.threads.c.createdAt == created, t.threads.c.id > thread_id))).limit(1)
        with self.db.read() as conn:
            return conn.execute(stmt).first() is not None

    def update_thread(
        self, thread_id: str, *, title: str | None = None, metadata: Mapping[str, Any] | None = None,
        replace_metadata: bool = False, conn: sa.Connection | None = None,
    ) -> Thread:
        """Mastra semantics: metadata merges shallowly, an omitted title is kept. ``conn``: in that (write)
        transaction, as ``create_thread``'s."""
        if metadata is not None and not isinstance(metadata, Mapping):
            raise InvalidArgumentError("Thread metadata must be a JSON object (a dict).")
        check_id(thread_id, "thread id", InvalidArgumentError)
        with self.db.write() if conn is None else _nullcontext(conn) as wconn:
            self.db.lock(wconn, locks.thread_key(thread_id))
            row = wconn.execute(sa.select(*_THREAD_COLS).where(t.threads.c.id == thread_id)).first()
            if row is None:
                raise NotFoundError(f"Thread {clipped(thread_id)} not found")
            current = _thread(row)
            values: dict[str, Any] = {"updatedAt": iso_now()}
            if title is not None:
                check_text(title, f"The title of thread {thread_id!r}")
                values["title"] = title
            if metadata is not None:
                merged = dict(metadata) if replace_metadata else {**(current.metadata or {}), **metadata}
                values["metadata"] = dump_json(merged)
                check_json_text(values["metadata"], f"The metadata of thread {thread_id!r}")
            wconn.execute(t.threads.update().where(t.threads.c.id == thread_id).values(**values))
            updated = self.get_thread(thread_id, conn=wconn)
        assert updated is not None
        return updated

    def delete_thread(self, thread_id: str) -> int:
        """Delete the messages, the thread-scoped working-memory history, then the thread (no FK cascade
        in Mastra's schema). Returns messages removed."""
        check_id(thread_id, "thread id", InvalidArgumentError)
        with self.db.write() as conn:
            removed = conn.execute(t.messages.delete().where(t.messages.c.thread_id == thread_id)).rowcount
            if catalog.has_table(conn, t.wm_versions.name):  # absent from a Mastra database
                conn.execute(t.wm_versions.delete().where(
                    t.wm_versions.c.scope == "thread", t.wm_versions.c.owner_id == thread_id))
            conn.execute(t.threads.delete().where(t.threads.c.id == thread_id))
        return int(removed or 0)

    # -- messages --------------------------------------------------------------------------------
    def save_messages(
        self, messages: Sequence[Message], *, conn: sa.Connection | None = None, max_bytes: int | None = None,
    ) -> list[Message]:
        """Upsert by id (newer content wins); bumps each touched thread's ``updatedAt``.

        ``max_bytes``: refuse the whole batch if a message's stored content is larger (before any row).
        """
        if not messages:
            return []
        if conn is None:
            with self.db.write() as own:
                return self.save_messages(messages, conn=own, max_bytes=max_bytes)
        latest: dict[str, Message] = {}
        for m in messages:  # a repeated id inside one batch: the later copy wins, O(n)
            latest[m.id] = m
        # Checked here, on the last path every save takes: a Message's fields can be changed after
        # it was built, and the caller's transaction then rolls back the whole batch.
        check_ids(((v, what) for m in latest.values()
                   for v, what in ((m.id, "message id"), (m.thread_id, "thread id"), (m.resource_id, "resource id"))),
                  InvalidArgumentError)
        rows = [m.to_row_tuple() for m in latest.values()]
        _check_rows(rows)
        check_rows(rows, max_bytes)
        # Straight to the driver, as multi-row statements: building SQLAlchemy parameters per row cost
        # more than the insert itself, and the driver's executemany runs one statement per row. The
        # ids are distinct (``latest``), as Postgres' ON CONFLICT needs within one statement.
        bulk.insert_rows(conn, _INSERT_MESSAGES, rows, _ON_CONFLICT_MESSAGE)
        now = iso_now()
        for thread_id in {r[1] for r in rows}:
            driver_sql.execute(conn, 'UPDATE mastra_threads SET "updatedAt" = ? WHERE id = ?', (now, thread_id))
        return list(latest.values())

    def list_messages(self, query: MessageQuery, *, parsed: ParsedRows | None = None) -> MessageRows:
        """``parsed``: the messages of rows read before, by the row (every column as stored); a row read again
        unchanged is that message, not parsed again, and each row parsed now is added. A reader that reads the
        same rows again and again (a turn observing a long backlog re-reads what is left after each observer
        call) pays for the rows that are new or changed only; any change of a stored column makes a new row."""
        # Plain SQL: this runs on every turn, and building a SQLAlchemy statement each time cost more
        # than the indexed lookup itself.
        check_ids(((query.thread_id, "thread id"), (query.resource_id, "resource id")), InvalidArgumentError)
        where = ["thread_id = ?"]
        params: list[Any] = [query.thread_id]
        if query.resource_id is not None:
            # Rows written before messages carried resourceId have NULL there; they still belong.
            where.append('("resourceId" = ? OR "resourceId" IS NULL)')
            params.append(query.resource_id)
        if query.exclude_system:
            where.append("role != 'system'")
        if query.since is not None:
            where.append('"createdAt" >= ?')
            params.append(to_iso(query.since))
        if query.until is not None:
            where.append('"createdAt" <= ?')
            params.append(to_iso(query.until))
        if query.ids is not None:
            ids = list(query.ids)
            if not ids:
                return MessageRows()
            where.append(f"id IN ({','.join('?' * len(ids))})")
            params.extend(ids)
        if query.before is not None:
            where.append('("createdAt", id) < (?, ?)')
            params.extend((to_iso(query.before[0]), query.before[1]))
        order = ' ORDER BY "createdAt" DESC, id DESC LIMIT ?' if query.last is not None else ' ORDER BY "createdAt" ASC, id ASC'
        if query.last is not None:
            params.append(int(query.last))
        with self.db.read() as conn:
            select = _MESSAGE_SELECT.format(content=dialect.stored_text_sql(conn, '"content"'))
            sql = f'SELECT {select} FROM mastra_messages WHERE {" AND ".join(where)}{order}'
            rows = driver_sql.rows(conn, sql, params)
        # A row that does not parse is skipped and reported (``result.unreadable``), never fatal.
        if parsed is None:
            result = message_pages.readable(dict(zip(_MESSAGE_FIELDS, r)) for r in rows)
        else:
            result = _readable_with(rows, parsed)
        if query.last is not None:
            result.reverse()
        return result

    def newest_message_times(self, thread_ids: Iterable[str], conn: sa.Connection) -> dict[str, datetime]:
        """Newest stored createdAt per thread (so unstamped new messages sort after what is stored)."""
        wanted = [tid for tid in thread_ids if tid]
        out: dict[str, datetime] = {}
        if wanted:
            for tid in wanted:  # driver SQL: it runs on every agent turn, and compiling it cost more than running it
                value = driver_sql.scalar(
                    conn, f'SELECT max("createdAt") FROM {t.messages.name} WHERE thread_id = ?', (tid,))
                if value:
                    out[tid] = parse_iso(value)
        return out

    def newest_in_resource(self, thread_id: str, resource_id: str | None, conn: sa.Connection) -> datetime | None:
        """Newest stored createdAt of the thread and of every thread of ``resource_id`` (None: the
        thread's stored owner), in one statement: a new turn's stamps go after it, so the messages of
        a resource sort in the order they were written, whichever of its threads they are in (what a
        resource-scoped reader dates by: recall, observational memory, working memory).

        Each thread's newest is read from its (thread_id, createdAt) index; the resource's threads are
        the thread rows that name it."""
        value = driver_sql.scalar(conn, _NEWEST_IN_RESOURCE, (thread_id, resource_id, thread_id))
        return parse_iso(value) if value else None

    def others_at(self, resource_id: str, thread_id: str, at: datetime, limit: int = 100) -> list[tuple[str, str]]:
        """(id, thread id) of the messages of ``resource_id``'s other threads (every thread the resource owns
        but ``thread_id``) stamped exactly ``at``, in id order, at most ``limit``: each thread's are read from
        its (thread_id, createdAt) index."""
        check_ids(((thread_id, "thread id"), (resource_id, "resource id")), InvalidArgumentError)
        stamp = to_iso(at)
        with self.db.read() as conn:
            rows = driver_sql.rows(conn, _OTHERS_AT, (resource_id, thread_id, stamp, stamp, int(limit)))
        return [(str(r[0]), str(r[1])) for r in rows]

    def list_messages_page(self, thread_id: str, offset: int, limit: int) -> MessageRows:
        """Chronological slice in the engine's (createdAt, id) order (``Memory.recall`` pages).

        Viewers page with ``browse_messages`` instead: faster deep in a thread, and corrupt-row tolerant.
        """
        msg = t.messages.c
        stmt = (
            sa.select(t.messages).where(msg.thread_id == thread_id)
            .order_by(msg.createdAt.asc(), msg.id.asc()).limit(limit).offset(offset)
        )
        with self.db.read() as conn:
            rows = conn.execute(stmt).mappings().all()
        return message_pages.readable(rows)

    def browse_messages(self, thread_id: str, offset: int, limit: int) -> list[Message | UnreadableMessage]:
        """A viewer's page of a thread, in (createdAt, rowid) order; corrupt rows come back in place."""
        return message_pages.read_page(self.db, thread_id, offset, limit)

    def browse_newest(self, thread_id: str, limit: int) -> message_pages.NewestPage:
        """The newest ``limit`` messages of a thread in ``browse_messages`` order, with the thread's
        count: what a viewer shows first (a keyset read from the end of the index, not an offset)."""
        return message_pages.read_newest(self.db, thread_id, limit)

    def message_position(self, thread_id: str, message_id: str) -> int | None:
        """A message's index in ``browse_messages`` order, or None if it is not in the thread."""
        return message_pages.position(self.db, thread_id, message_id)

    def count_messages(self, thread_id: str) -> int:
        with self.db.read() as conn:
            return int(
                conn.execute(
                    sa.select(sa.func.count()).select_from(t.messages).where(t.messages.c.thread_id == thread_id)
                ).scalar() or 0
            )

    def thread_message_ids(self, thread_id: str) -> list[str]:
        """The ids of a thread's messages (no content read or decoded), in no particular order."""
        with self.db.read() as conn:
            return [r[0] for r in driver_sql.rows(conn, "SELECT id FROM mastra_messages WHERE thread_id = ?",
                                                  (thread_id,))]

    def get_messages(self, ids: Iterable[str]) -> MessageRows:
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return MessageRows()
        check_ids(((i, "message id") for i in wanted), InvalidArgumentError)
        rows: list[Any] = []
        # Plain SQL, like list_messages: replaying a turn fetches its rows by id, and compiling a
        # SQLAlchemy IN clause each time cost more than the lookup.
        with self.db.read() as conn:
            for start in range(0, len(wanted), 500):
                chunk = wanted[start:start + 500]
                select = _MESSAGE_SELECT.format(content=dialect.stored_text_sql(conn, '"content"'))
                rows.extend(conn.exec_driver_sql(
                    f"SELECT {select} FROM mastra_messages WHERE id IN ({','.join('?' * len(chunk))})",
                    tuple(chunk)).all())
        found = message_pages.readable(dict(zip(_MESSAGE_FIELDS, r)) for r in rows)
        found.sort(key=lambda m: (m.created_at, m.id))
        return found

    def message_windows(self, includes: Sequence[Include], resource_id: str | None = None) -> list[MessageRows]:
        """The window of each include, in the same order: the target and its ``before`` / ``after``
        neighbours in the target's own thread, each once, oldest first; empty when the target is
        missing or another resource's (``core.storage.message_windows``). Two statements for all of them."""
        for inc in includes:
            for side in (inc.before, inc.after):
                if not isinstance(side, int) or side < 0:
                    raise InvalidArgumentError(
                        f"A recall range must count messages (0 or more), not {side!r}: "
                        "set message_range's before and after to non-negative integers.")
        if not includes:
            return []
        with self.db.read() as conn:
            return message_windows.read(conn, [(inc.id, inc.before, inc.after) for inc in includes], resource_id)

    def messages_with_context(self, includes: Sequence[Include], resource_id: str | None = None) -> list[Message]:
        """Each target plus its neighbours in the target's own thread, de-duplicated, oldest first."""
        found: dict[str, Message] = {}
        for window in self.message_windows(includes, resource_id):
            found.update((m.id, m) for m in window)
        return sorted(found.values(), key=lambda m: (m.created_at, m.id))

    def delete_messages(self, ids: Iterable[str]) -> int:
        wanted = list(ids)
        if not wanted:
            return 0
        check_ids(((i, "message id") for i in wanted), InvalidArgumentError)
        with self.db.write() as conn:
            return int(conn.execute(t.messages.delete().where(t.messages.c.id.in_(wanted))).rowcount or 0)

    def search_text(self, text: str, *, resource_id: str | None = None, limit: int = 50) -> list[Message]:
        """Plain substring search, newest first (the first ``limit`` candidates of ``search_text_pages``).
        Full-text ranking lives in the recall index."""
        if not text.strip():
            return []
        pages = self.search_text_pages(text, resource_id=resource_id, page=limit, limit=limit)
        try:
            return next(pages, TextPage([], 0)).messages
        finally:
            pages.close()

    def search_text_pages(
        self, text: str, *, resource_id: str | None = None, page: int = 1_000, limit: int | None = None,
    ) -> Generator["TextPage", None, None]:
        """The candidates for a case-insensitive search of ``text``, newest first, ``page`` at a time, from one
        statement in one read (stop iterating to end it): every message whose stored content may hold it.
        The content is matched as a JSON string holds the text (a quote, a
        backslash or a newline escaped). SQLite's LIKE folds only ASCII letters, so on libSQL the needle
        is the longest piece of ``text`` without a letter that has a case outside ASCII ("München":
        "nchen"; none: every message); Postgres's ILIKE folds every letter. The stored JSON also holds
        field names and part types ("type", "text"), so the caller checks what each candidate says."""
        msg = t.messages.c
        stmt = sa.select(t.messages).where(msg.role != "system")
        if resource_id is not None:
            stmt = stmt.join(t.threads, t.threads.c.id == msg.thread_id).where(t.threads.c.resourceId == resource_id)
        stmt = stmt.order_by(msg.createdAt.desc(), msg.id.desc())
        if limit is not None:
            stmt = stmt.limit(limit)
        with self.db.read() as conn:
            postgres = dialect.is_postgres(conn)
            needle = _like_needle(text, fold_all=postgres)
            if needle:
                pattern = "%" + needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
                stmt = stmt.where(msg.content.ilike(pattern, escape="\\") if postgres
                                  else msg.content.like(pattern, escape="\\"))
            # (One statement read in pieces: paging with a key re-ran the sort of every candidate each page,
            # 111 ms a page at 100,000 messages; the sort runs once here.)
            result = conn.execute(stmt).mappings()
            while rows := result.fetchmany(page):
                out = []
                for r in rows:
                    try:
                        out.append(Message.from_row(r))
                    except ValueError:
                        continue  # a corrupt row must not hide the other hits
                yield TextPage(out, len(rows))

    # -- resources -------------------------------------------------------------------------------
    def get_resource(self, resource_id: str) -> Resource | None:
        check_id(resource_id, "resource id", InvalidArgumentError)
        cols = (
            t.resources.c.id, t.resources.c.workingMemory, json_col(t.resources.c.metadata).label("metadata"),
            t.resources.c.createdAt, t.resources.c.updatedAt,
        )
        with self.db.read() as conn:
            row = conn.execute(sa.select(*cols).where(t.resources.c.id == resource_id)).first()
        if row is None:
            return None
        meta = load_json(row.metadata)
        return Resource(
            row.id, row.workingMemory, meta if isinstance(meta, dict) else None,
            parse_iso(row.createdAt), parse_iso(row.updatedAt),
        )

    def update_resource(
        self, resource_id: str, *, working_memory: str | None = None, metadata: Mapping[str, Any] | None = None,
        conn: sa.Connection | None = None,
    ) -> None:
        """Create the row if missing; merge metadata shallowly; replace working memory only when given."""
        check_id(resource_id, "resource id", InvalidArgumentError)
        if conn is None:
            with self.db.write() as own:
                self.update_resource(resource_id, working_memory=working_memory, metadata=metadata, conn=own)
            return
        now = iso_now()
        self.db.lock(conn, locks.resource_key(resource_id))
        row = conn.execute(
            sa.select(json_col(t.resources.c.metadata).label("metadata")).where(t.resources.c.id == resource_id)
        ).first()
        if row is None:
            conn.execute(
                t.resources.insert().values(
                    id=resource_id, workingMemory=working_memory,
                    metadata=dump_json(dict(metadata)) if metadata is not None else None,
                    createdAt=now, updatedAt=now,
                )
            )
            return
        values: dict[str, Any] = {"updatedAt": now}
        if working_memory is not None:
            values["workingMemory"] = working_memory
        if metadata is not None:
            current = load_json(row.metadata)
            values["metadata"] = dump_json({**(current if isinstance(current, dict) else {}), **metadata})
        conn.execute(t.resources.update().where(t.resources.c.id == resource_id).values(**values))

    def has_memory(self) -> bool:
        """Whether any thread or resource row is stored (``list_resources()`` is not empty), without counting."""
        with self.db.read() as conn:
            return bool(driver_sql.scalar(conn, "SELECT EXISTS (SELECT 1 FROM mastra_threads) "
                                                "OR EXISTS (SELECT 1 FROM mastra_resources)"))

    def list_resources(self) -> list[ResourceSummary]:
        """Every resource that owns a thread or a resource row, with counts for the Studio tree. (The
        messages are counted per thread first, by the (thread, time) index, then summed per resource:
        joining every message to its thread cost ~0.7 s at a million messages, this ~0.1 s.)"""
        sql = """
        WITH ids AS (SELECT "resourceId" AS id FROM mastra_threads UNION SELECT id FROM mastra_resources),
        th AS (SELECT "resourceId" AS id, count(*) AS n, max("updatedAt") AS last FROM mastra_threads GROUP BY 1),
        ms AS (SELECT t."resourceId" AS id, sum(c.n) AS n, max(c.last) AS last
               FROM (SELECT thread_id, count(*) AS n, max("createdAt") AS last FROM mastra_messages GROUP BY thread_id) c
               JOIN mastra_threads t ON t.id = c.thread_id GROUP BY 1)
        SELECT ids.id, coalesce(th.n, 0), coalesce(ms.n, 0), coalesce(ms.last, th.last),
               r."workingMemory" IS NOT NULL AND r."workingMemory" != ''
        FROM ids LEFT JOIN th ON th.id = ids.id LEFT JOIN ms ON ms.id = ids.id
        LEFT JOIN mastra_resources r ON r.id = ids.id
        ORDER BY coalesce(ms.last, th.last) DESC NULLS LAST, ids.id
        """
        with self.db.read() as conn:
            rows = conn.exec_driver_sql(sql).all()
        return [
            ResourceSummary(r[0], int(r[1]), int(r[2]), parse_iso(r[3]) if r[3] else None, bool(r[4])) for r in rows
        ]

    def tree_summaries(self, *, openings: bool = False) -> tuple[list[ResourceSummary], list[ThreadSummary]]:
        """``list_resources()`` and ``thread_summaries()`` from one read, counting the messages once: each
        resource's counts and last activity are summed from its threads'. (The Studio's tree reloads both
        on every change of the database, and with libSQL's driver a statement keeps the GIL while it runs:
        the second count of every message was ~70 ms of every other thread's time at 100,000 messages.)
        ``openings``: each untitled thread's ``ThreadSummary.opening`` is read in the same statement (a subquery
        per untitled thread, answered from the messages' (thread, time) index)."""
        with self.db.read() as conn:
            threads = self._thread_summaries(conn, None, openings=openings)
            flags = conn.exec_driver_sql(
                'SELECT id, "workingMemory" IS NOT NULL AND "workingMemory" != \'\' FROM mastra_resources').all()
        # per resource: thread count, message count, newest message, newest thread update
        acc: dict[str, list[Any]] = {}
        for summary in threads:
            entry = acc.setdefault(summary.thread.resource_id, [0, 0, None, None])
            entry[0] += 1
            entry[1] += summary.message_count
            if summary.last_activity is not None and (entry[2] is None or summary.last_activity > entry[2]):
                entry[2] = summary.last_activity
            updated = summary.thread.updated_at
            if updated is not None and (entry[3] is None or updated > entry[3]):
                entry[3] = updated
        with_memory = {rid: bool(flag) for rid, flag in flags}
        resources = [ResourceSummary(rid, entry[0], entry[1], entry[2] if entry[2] is not None else entry[3],
                                     with_memory.get(rid, False)) for rid, entry in acc.items()]
        resources += [ResourceSummary(rid, 0, 0, None, flag) for rid, flag in with_memory.items() if rid not in acc]
        # ``list_resources``' order: the latest activity first (none: last), then the id
        resources.sort(key=lambda r: r.id)
        resources.sort(key=lambda r: (r.last_activity is not None, r.last_activity or datetime.min), reverse=True)
        return resources, threads

    def thread_summaries(self, resource_id: str | None = None) -> list[ThreadSummary]:
        with self.db.read() as conn:
            return self._thread_summaries(conn, resource_id)

    def thread_summaries_starting(self, prefix: str) -> list[ThreadSummary]:
        """``thread_summaries`` of the threads whose resource id begins with ``prefix``, compared exactly (no
        LIKE, which folds case and reads ``%`` and ``_``): the candidates a caller then checks one by one."""
        with self.db.read() as conn:
            return self._thread_summaries(conn, None, prefix)

    def thread_summaries_of(self, thread_ids: Sequence[str]) -> list[ThreadSummary]:
        """``thread_summaries`` of the named threads (those still stored; at most a few hundred: one ``IN``
        list), in ``thread_summaries``' order; their messages alone are counted."""
        if not thread_ids:
            return []
        with self.db.read() as conn:
            return self._thread_summaries(conn, None, ids=thread_ids)

    def thread_keys(self, *, resource_ids: Sequence[str] | None = None, prefixes: Sequence[str] | None = None,
                    after: tuple[str, str] | None = None, limit: int) -> list[tuple[str, str, str]]:
        """``(createdAt as stored, id, resourceId)`` of at most ``limit`` threads in a keyset order: newest
        created first, then by id (``list_threads``' order; a thread's creation time and id never change, so
        threads written meanwhile never move a listed one). Only those after the thread keyed ``after``
        (``(createdAt, id)``, as this returned them) in that order, and whose resource is one of
        ``resource_ids`` or begins with one of ``prefixes`` (compared exactly, as ``thread_summaries_starting``);
        both None: every thread. Rows only, no messages counted: what a caller filters, then pages."""
        if limit < 1:
            raise InvalidArgumentError("limit must be at least 1.")
        stmt = sa.select(t.threads.c.createdAt, t.threads.c.id, t.threads.c.resourceId)
        wanted: list[sa.ColumnElement[bool]] = []
        if resource_ids is not None:
            wanted.append(t.threads.c.resourceId.in_(list(resource_ids)))
        wanted += [sa.func.substr(t.threads.c.resourceId, 1, len(prefix)) == prefix for prefix in prefixes or ()]
        if wanted:
            stmt = stmt.where(sa.or_(*wanted))
        if after is not None:
            created, thread_id = after
            stmt = stmt.where(sa.or_(t.threads.c.createdAt < created,
                                     sa.and_(t.threads.c.createdAt == created, t.threads.c.id > thread_id)))
        stmt = stmt.order_by(t.threads.c.createdAt.desc(), t.threads.c.id).limit(limit)
        with self.db.read() as conn:
            return [(str(r[0]), str(r[1]), str(r[2])) for r in conn.execute(stmt).all()]

    def _thread_summaries(self, conn: sa.Connection, resource_id: str | None, prefix: str | None = None,
                          ids: Sequence[str] | None = None, openings: bool = False) -> list[ThreadSummary]:
        counted = sa.select(
            t.messages.c.thread_id, sa.func.count().label("n"), sa.func.max(t.messages.c.createdAt).label("last")
        )
        if ids is not None:
            counted = counted.where(t.messages.c.thread_id.in_(list(ids)))
        counts = counted.group_by(t.messages.c.thread_id).subquery()
        stmt = sa.select(*_THREAD_COLS, counts.c.n, counts.c.last,
                         *([_opening(dialect.is_postgres(conn)).label("opening")] if openings else [])).select_from(
            t.threads.outerjoin(counts, counts.c.thread_id == t.threads.c.id)
        )
        if resource_id is not None:
            stmt = stmt.where(t.threads.c.resourceId == resource_id)
        if prefix is not None:
            stmt = stmt.where(sa.func.substr(t.threads.c.resourceId, 1, len(prefix)) == prefix)
        if ids is not None:
            stmt = stmt.where(t.threads.c.id.in_(list(ids)))
        stmt = stmt.order_by(sa.func.coalesce(counts.c.last, t.threads.c.updatedAt).desc(), t.threads.c.id)
        rows = conn.execute(stmt).all()
        return [ThreadSummary(_thread(r), int(r.n or 0), parse_iso(r.last) if r.last else None,
                              decode_stored_text(r.opening) if openings else None) for r in rows]


def _opening(postgres: bool) -> sa.ColumnElement[Any]:
    """An untitled thread's first user message in page order (time, then the row key: ``dialect.row_key``), the
    first ``OPENING_CHARS`` characters of its stored content (cut by characters, then read as a blob on libSQL,
    ``dialect.stored_text``); NULL for a titled thread: a subquery the engine runs only for an untitled row
    (``CASE``), in the order of the (thread_id, createdAt) index (on libSQL its entries end with the rowid, so no sort:
    ties broken by the message id took twice as long)."""
    m = t.messages.alias("first_message")
    tie = m.c.id if postgres else sa.literal_column("first_message.rowid")
    first = (sa.select(dialect.stored_text(sa.func.substr(m.c.content, 1, OPENING_CHARS)))
             .where(m.c.thread_id == t.threads.c.id, m.c.role == "user")
             .order_by(m.c.createdAt, tie).limit(1).correlate(t.threads).scalar_subquery())
    untitled = sa.func.coalesce(sa.func.trim(t.threads.c.title), "") == ""
    return sa.case((untitled, first), else_=sa.null())


@contextmanager
def _nullcontext(conn: sa.Connection) -> Iterator[sa.Connection]:
    yield conn

