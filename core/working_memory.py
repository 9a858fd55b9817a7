"""Working memory: where it is stored, how updates apply, what the model is told, the update tool.

Storage (spec §1.3): resource scope in ``mastra_resources.workingMemory``; thread scope in the
thread's metadata under ``workingMemory``. Every write is also kept as a version in
``memory_studio_wm_versions`` (when that table exists) so the Studio can diff and restore.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence

import sqlalchemy as sa

from core.ids import check_ids, first_in_strings
from core.json_kind import json_kind
from core.options import OptionsError, WorkingMemoryOptions
from core.scopes import ThreadOwnershipError, check_thread_owner
from core.storage import Store, catalog, dialect, driver_sql, locks
from core.storage import schema as t
from core.storage.memory_store import InvalidArgumentError, NotFoundError, dump_json, json_col, load_json
from core.stored_text import decode_stored_text, integer_beyond_double
from core.timeutil import iso_now, parse_iso
from core.working_memory_update import (  # defined below this module, so the vNext tool can use them
    ConcurrentUpdateError as ConcurrentUpdateError,
    UpdateResult as UpdateResult,
    normalize_ws as normalize_ws,
    unwrap_own_tags,
)
from core.working_memory_schema import (
    WorkingMemoryError,
    empty_object,
    load_stored,
    parse_patch,
    strip_nulls_from_optional,
    validate,
    working_memory_merge,
)

if TYPE_CHECKING:  # pragma: no cover
    from core.working_memory_stage import StagedWorkingMemory

TOOL_NAME = "updateWorkingMemory"
# The same tool under ``working_memory.use_state_signals`` (seed 004): its calls are kept in the saved
# conversation as an audit record (the hide filter only removes ``updateWorkingMemory``).
STATE_TOOL_NAME = "setWorkingMemory"
TOOL_NAMES = (TOOL_NAME, STATE_TOOL_NAME)
TOOL_ID = "update-working-memory"
WM_TAG_RE = re.compile(r"<working_memory>.*?</working_memory>", re.DOTALL)

RESOURCE_ID_REQUIRED = (
    "Memory error: working memory is resource-scoped but no resource id was given. "
    "Pass a resource id, or set working_memory.scope to 'thread'."
)


@dataclass(frozen=True)
class WorkingMemoryValue:
    scope: Literal["resource", "thread"]
    owner_id: str
    text: str | None  # what is stored (Markdown, or JSON text in schema mode)
    format: Literal["markdown", "json"]

    @property
    def data(self) -> Any:
        """Schema mode: the parsed object (``{}`` when empty)."""
        return load_stored(self.text) if self.format == "json" else self.text


def tool_name(opts: WorkingMemoryOptions) -> str:
    """What the update tool is called for these options (``setWorkingMemory`` with state signals)."""
    return STATE_TOOL_NAME if opts.use_state_signals else TOOL_NAME


@dataclass(frozen=True)
class Version:
    id: int
    scope: str
    owner_id: str
    text: str | None
    format: str
    author: str
    note: str | None
    created_at: Any


_key_locks: dict[str, threading.Lock] = {}
_key_locks_guard = threading.Lock()


def _lock_for(key: str) -> threading.Lock:
    with _key_locks_guard:
        return _key_locks.setdefault(key, threading.Lock())


DEFAULT_MAX_WORKING_MEMORY_BYTES = 256_000
DEFAULT_KEPT_VERSIONS = 100


class WorkingMemoryTooLargeError(WorkingMemoryError):
    """A working-memory value over ``MemoryOptions.max_working_memory_bytes``; nothing was written."""

    def __init__(self, scope: str, size: int, limit: int) -> None:
        super().__init__(
            f"This {scope}-scoped working memory would be {size:,} bytes, over the limit of {limit:,} bytes. "
            "Nothing was written. Keep it to what the agent needs in every prompt (store the rest as "
            "messages or elsewhere), or raise MemoryOptions(max_working_memory_bytes=...).")
        self.size = size
        self.limit = limit


#: Why working memory holding a NUL is refused (``nul_refused``; import's check of a file, ``holds_nul``).
NUL_HELD = ("holds a NUL character (U+0000, the escape \\u0000 in JSON), which working memory cannot store "
            "(PostgreSQL stores no NUL in text)")
NUL_FIX = "Remove it, or write what it stands for as text."


def holds_nul(text: str, *, as_json: bool) -> bool:
    """Whether working memory stored as ``text`` holds a NUL character: a raw one anywhere, or, when ``text`` is a
    schema memory's JSON (``as_json``), the escape ``\\u0000`` in a string or key (the text ``\\u0000`` in
    Markdown is kept: it is six characters, no NUL). JSON text that does not parse is looked at for raw NULs only."""
    if "\x00" in text:
        return True
    if not as_json or "\\u0000" not in text:
        return False
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return first_in_strings(data, _nul_at) is not None


def nul_refused(opts: WorkingMemoryOptions, text: str) -> None:
    """Refuse working memory holding a NUL character (U+0000), on every backend: Postgres stores none, in a text
    column (Markdown, a resource's value, a version) or in the JSON of a thread's metadata, and failed there with
    the driver's "cannot contain NUL (0x00) bytes" (an HTTP client got a 500), while libSQL kept it; a value one
    backend takes and the other refuses would also stop an export of it from importing. ``text``: the value as
    stored (JSON text for schema working memory, where a NUL in a string is written ``\\u0000``)."""
    if holds_nul(text, as_json=opts.schema is not None):
        raise WorkingMemoryError(f"The working memory {NUL_HELD}. {NUL_FIX} Nothing changed.")


def _nul_at(text: str) -> int | None:
    return 0 if "\x00" in text else None


class WorkingMemoryService:
    """``max_bytes``: the largest value written (None: no limit). ``keep_versions``: versions kept per
    scope and owner; older ones are deleted as new ones are written (None: all are kept)."""

    def __init__(self, store: Store, clock: Any = None, *, max_bytes: int | None = DEFAULT_MAX_WORKING_MEMORY_BYTES,
                 keep_versions: int | None = DEFAULT_KEPT_VERSIONS) -> None:
        self.store = store
        self.clock = clock  # versions are stamped with the memory's clock, like its messages
        self.max_bytes = max_bytes
        self.keep_versions = keep_versions

    # -- reading ---------------------------------------------------------------------------------
    def owner(self, opts: WorkingMemoryOptions, thread_id: str | None, resource_id: str | None) -> tuple[str, str]:
        check_ids(((thread_id or None, "thread id"), (resource_id or None, "resource id")), InvalidArgumentError)
        if opts.scope == "resource":
            if not resource_id:
                raise WorkingMemoryError(RESOURCE_ID_REQUIRED)
            return "resource", resource_id
        if not thread_id:
            raise WorkingMemoryError("Thread-scoped working memory needs a thread id.")
        return "thread", thread_id

    def get(self, opts: WorkingMemoryOptions, *, thread_id: str | None, resource_id: str | None) -> WorkingMemoryValue:
        scope, owner = self.owner(opts, thread_id, resource_id)
        with self.store.db.read() as conn:
            text = self._read(conn, scope, owner)
        return WorkingMemoryValue(scope, owner, text, opts.mode)  # type: ignore[arg-type]

    def _read(self, conn: sa.Connection, scope: str, owner: str) -> str | None:
        # Driver SQL on the driver's cursor (every turn with working memory reads it); the same
        # expressions SQLAlchemy compiled from the schema: the resource's text read as stored text
        # (``SafeText``), the thread's metadata as JSON text.
        if scope == "resource":
            text = dialect.stored_text_sql(conn, '"workingMemory"')
            row = driver_sql.first(conn, f"SELECT {text} FROM {t.resources.name} WHERE id = ?", (owner,))
            return decode_stored_text(row[0]) if row else None
        row = driver_sql.first(
            conn, f"SELECT {dialect.json_text_sql(conn, 'metadata')} FROM {t.threads.name} WHERE id = ?", (owner,))
        meta = load_json(row[0]) if row else None
        value = meta.get("workingMemory") if isinstance(meta, dict) else None
        if value is None:
            return None
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

    # -- writing ---------------------------------------------------------------------------------
    def write(
        self, opts: WorkingMemoryOptions, *, thread_id: str | None, resource_id: str | None, value: Any,
        author: str = "api", note: str | None = None, expected: str | None | object = ...,
        writes: Sequence[Any] = (), create_thread: bool = False,
    ) -> WorkingMemoryValue:
        """Replace the stored value (Markdown), or set the whole object (schema mode, validated).

        ``expected``: when given, the write happens only if the stored value still equals it —
        the Studio's guard against silently overwriting an agent's concurrent change. ``writes``: staged
        writes committed in the same transaction (``commit_value(conn, value)`` with the value written, when
        they have it, else ``commit(conn)``), such as an idempotency key's outcome; one that raises undoes it.
        ``create_thread``: the model's tool, which makes a missing thread (``_thread_for_tool``).
        """
        scope, owner = self.owner(opts, thread_id, resource_id)
        text = self._serialize(opts, value)
        with _lock_for(f"{scope}-{owner}"), self.store.db.write() as conn:
            if create_thread:
                self._thread_for_tool(conn, thread_id, resource_id)
            self.store.db.lock(conn, locks.owner_key(scope, owner))
            current = self._read(conn, scope, owner)
            if expected is not ... and current != expected:
                raise ConcurrentUpdateError(current)
            self._store(conn, scope, owner, text, opts, thread_id, resource_id)
            self._version(conn, scope, owner, text, opts.mode, author, note)
            written = WorkingMemoryValue(scope, owner, text, opts.mode)  # type: ignore[arg-type]
            for write in writes:
                if hasattr(write, "commit_value"):
                    write.commit_value(conn, written)
                else:
                    write.commit(conn)
        return written

    def merge(
        self, opts: WorkingMemoryOptions, *, thread_id: str | None, resource_id: str | None, patch: Any,
        author: str = "api", strip_optional_nulls: bool = False, create_thread: bool = False,
    ) -> WorkingMemoryValue:
        """Schema mode: read, deep-merge, validate, write — atomically, across threads and processes.
        ``create_thread``: as ``write``'s."""
        if opts.schema is None:
            raise WorkingMemoryError("merge_working_memory needs schema-based working memory (working_memory.schema).")
        update = parse_patch(patch, nulls_delete=not strip_optional_nulls)
        if strip_optional_nulls:
            update = strip_nulls_from_optional(opts.schema, update)
        scope, owner = self.owner(opts, thread_id, resource_id)
        with _lock_for(f"{scope}-{owner}"), self.store.db.write() as conn:
            if create_thread:
                self._thread_for_tool(conn, thread_id, resource_id)
            self.store.db.lock(conn, locks.owner_key(scope, owner))
            text = self._merged(opts, self._read(conn, scope, owner), update)
            self._store(conn, scope, owner, text, opts, thread_id, resource_id)
            self._version(conn, scope, owner, text, "json", author, None)
        return WorkingMemoryValue(scope, owner, text, "json")  # type: ignore[arg-type]

    def _merged(self, opts: WorkingMemoryOptions, current: str | None, update: Any) -> str:
        """``update`` deep-merged onto the stored text, validated against the schema."""
        assert opts.schema is not None
        merged = working_memory_merge(load_stored(current), update)
        problems = validate(opts.schema, merged)
        if problems:
            raise WorkingMemoryError("The merged working memory does not match the schema: " + "; ".join(problems))
        return self._within_limit(opts, _json_text(merged))

    def _serialize(self, opts: WorkingMemoryOptions, value: Any) -> str:
        if opts.schema is not None:
            data = parse_patch(value, whole=True)
            problems = validate(opts.schema, data)
            if problems:
                raise WorkingMemoryError("The working memory does not match the schema: " + "; ".join(problems))
            return self._within_limit(opts, _json_text(data))
        if not isinstance(value, str):
            raise WorkingMemoryError(
                f"Markdown working memory must be a string (its whole text), not {json_kind(value)}. Nothing "
                "changed. Configure working_memory.schema to store objects."
            )
        return self._within_limit(opts, value)

    def _within_limit(self, opts: WorkingMemoryOptions, text: str) -> str:
        """``text`` when it fits ``max_bytes`` and holds no NUL character (``nul_refused``); every write (API,
        Studio, the model's tool, a staged update) passes here before anything is stored."""
        nul_refused(opts, text)
        if self.max_bytes is not None and len(text) * 4 > self.max_bytes:  # a character is at most 4 bytes
            size = len(text.encode("utf-8", "surrogatepass"))
            if size > self.max_bytes:
                raise WorkingMemoryTooLargeError(opts.scope, size, self.max_bytes)
        return text

    def _store(
        self, conn: sa.Connection, scope: str, owner: str, text: str, opts: WorkingMemoryOptions,
        thread_id: str | None, resource_id: str | None,
    ) -> None:
        if scope == "resource":
            if thread_id and resource_id:
                self._check_thread_owner(conn, thread_id, resource_id)
            self.store.memory.update_resource(owner, working_memory=text, conn=conn)
            return
        row = conn.execute(
            sa.select(t.threads.c.resourceId, json_col(t.threads.c.metadata).label("m")).where(t.threads.c.id == owner)
        ).first()
        if row is None:
            raise NotFoundError(f"Thread {owner} not found")
        check_thread_owner(owner, row.resourceId, resource_id)
        meta = load_json(row.m)
        meta = dict(meta) if isinstance(meta, dict) else {}
        meta["workingMemory"] = text
        conn.execute(
            t.threads.update().where(t.threads.c.id == owner).values(metadata=dump_json(meta), updatedAt=iso_now())
        )

    def _thread_for_tool(self, conn: sa.Connection, thread_id: str | None, resource_id: str | None) -> None:
        """The model's tool names a thread that is not stored yet: it is made, owned by ``resource_id``, in the
        transaction of the write (undone with it), as Mastra's tool makes it (``createThread``) and as the save
        of a turn makes it (no title, empty metadata). Without it a thread-scoped update outside a turn's save
        (``Memory.apply_working_memory_tool`` in an application's own loop, before it saved the thread's first
        messages) was refused ("Thread … not found"), and a resource-scoped one claimed no thread. Without a
        resource id nothing is made (no owner to give it). Taken before the owner's lock: threads before
        resources (``locks.in_lock_order``)."""
        if not thread_id or not resource_id:
            return
        self.store.db.lock(conn, locks.thread_key(thread_id))
        if self.store.memory.thread_owner(thread_id, conn) is None:
            self.store.memory.create_thread(thread_id=thread_id, resource_id=resource_id, title="", metadata={},
                                            conn=conn)

    def _check_thread_owner(self, conn: sa.Connection, thread_id: str, resource_id: str) -> None:
        row = conn.execute(sa.select(t.threads.c.resourceId).where(t.threads.c.id == thread_id)).first()
        check_thread_owner(thread_id, row.resourceId if row is not None else None, resource_id)

    def _version(
        self, conn: sa.Connection, scope: str, owner: str, text: str | None, fmt: str, author: str, note: str | None
    ) -> None:
        if not self._has_versions(conn):
            return
        last = conn.execute(
            sa.select(t.wm_versions.c.working_memory)
            .where(t.wm_versions.c.scope == scope, t.wm_versions.c.owner_id == owner)
            .order_by(t.wm_versions.c.id.desc()).limit(1)
        ).first()
        if last is not None and last[0] == text:
            return  # an unchanged write is not a new version
        conn.execute(
            t.wm_versions.insert().values(
                scope=scope, owner_id=owner, working_memory=text, format=fmt, author=author, note=note,
                createdAt=iso_now(self.clock),
            )
        )
        self._prune(conn, scope, owner)

    def _prune(self, conn: sa.Connection, scope: str, owner: str) -> None:
        """Keep the newest ``keep_versions`` versions of this scope and owner (two indexed queries)."""
        if self.keep_versions is None:
            return
        v = t.wm_versions.c
        oldest_kept = conn.execute(
            sa.select(v.id).where(v.scope == scope, v.owner_id == owner)
            .order_by(v.id.desc()).offset(self.keep_versions - 1).limit(1)
        ).scalar()
        if oldest_kept is not None:
            conn.execute(t.wm_versions.delete().where(v.scope == scope, v.owner_id == owner, v.id < oldest_kept))

    def record_version(
        self, conn: sa.Connection, scope: str, owner: str, text: str | None, fmt: str, *, author: str,
        note: str | None = None,
    ) -> None:
        """Add a version row inside the caller's transaction (a value written with other rows, such as
        a forked thread's working memory); nothing when the database keeps no versions."""
        self._version(conn, scope, owner, text, fmt, author, note)

    def store_as_is(
        self, conn: sa.Connection, opts: WorkingMemoryOptions, scope: str, owner: str, text: str, *, author: str,
        note: str | None = None,
    ) -> None:
        """Store ``text`` as it is, with a version, in the caller's transaction: a cloned thread's working memory
        (Mastra copies the stored text; it is not parsed or checked again)."""
        self.store.db.lock(conn, locks.owner_key(scope, owner))
        self._store(conn, scope, owner, text, opts, None, None)
        self._version(conn, scope, owner, text, opts.mode, author, note)

    def _has_versions(self, conn: sa.Connection) -> bool:
        cached = self.store.extensions.get("wm_versions_table")
        if cached is None:
            cached = catalog.has_table(conn, "memory_studio_wm_versions")
            self.store.extensions["wm_versions_table"] = cached
        return bool(cached)

    def versions(self, scope: str, owner_id: str) -> list[Version]:
        with self.store.db.read() as conn:
            if not self._has_versions(conn):
                return []
            rows = conn.execute(
                sa.select(t.wm_versions).where(t.wm_versions.c.scope == scope, t.wm_versions.c.owner_id == owner_id)
                .order_by(t.wm_versions.c.id.desc())
            ).all()
        return [
            Version(r.id, r.scope, r.owner_id, r.working_memory, r.format, r.author, r.note, parse_iso(r.createdAt))
            for r in rows
        ]

    def value_of(
        self, opts: WorkingMemoryOptions, *, thread_id: str | None, resource_id: str | None, text: str | None
    ) -> WorkingMemoryValue:
        """A given text as this scope's value (a rebuilt turn shows the text it recorded)."""
        scope, owner = self.owner(opts, thread_id, resource_id)
        return WorkingMemoryValue(scope, owner, text, opts.mode)  # type: ignore[arg-type]

    def version_in_force(
        self, opts: WorkingMemoryOptions, *, thread_id: str | None, resource_id: str | None, text: str | None
    ) -> int | None:
        """The id of the newest version of this scope when it holds ``text`` (what a turn just read);
        None when there is no such version (no history table, or a write that bypassed it)."""
        if text is None:
            return None
        scope, owner = self.owner(opts, thread_id, resource_id)
        with self.store.db.read() as conn:
            if not self._has_versions(conn):
                return None
            row = conn.execute(
                sa.select(t.wm_versions.c.id, t.wm_versions.c.working_memory)
                .where(t.wm_versions.c.scope == scope, t.wm_versions.c.owner_id == owner)
                .order_by(t.wm_versions.c.id.desc()).limit(1)
            ).first()
        return int(row[0]) if row is not None and row[1] == text else None

    def value_as_of(
        self, opts: WorkingMemoryOptions, *, thread_id: str | None, resource_id: str | None, when: Any
    ) -> WorkingMemoryValue | None:
        """What working memory held at ``when`` (from the version history); None when there is no
        history to answer from (a database without Memory Studio's tables)."""
        scope, owner = self.owner(opts, thread_id, resource_id)
        from core.timeutil import to_iso

        with self.store.db.read() as conn:
            if not self._has_versions(conn):
                return None
            row = conn.execute(
                sa.select(t.wm_versions.c.working_memory)
                .where(t.wm_versions.c.scope == scope, t.wm_versions.c.owner_id == owner,
                       t.wm_versions.c.createdAt <= to_iso(when))
                .order_by(t.wm_versions.c.id.desc()).limit(1)
            ).first()
        return WorkingMemoryValue(scope, owner, row[0] if row else None, opts.mode)  # type: ignore[arg-type]

    def authors_after(
        self, opts: WorkingMemoryOptions, *, thread_id: str | None, resource_id: str | None, when: Any
    ) -> list[str]:
        """Who wrote each version saved after ``when``, oldest first ("studio": by hand in the Studio,
        "agent": the model's tool, "api": the application); empty without a history table."""
        scope, owner = self.owner(opts, thread_id, resource_id)
        from core.timeutil import to_iso

        with self.store.db.read() as conn:
            if not self._has_versions(conn):
                return []
            rows = conn.execute(
                sa.select(t.wm_versions.c.author)
                .where(t.wm_versions.c.scope == scope, t.wm_versions.c.owner_id == owner,
                       t.wm_versions.c.createdAt > to_iso(when))
                .order_by(t.wm_versions.c.id)
            ).all()
        return [str(r[0]) for r in rows]

    # -- the update tool -------------------------------------------------------------------------
    def apply_tool_call(
        self, opts: WorkingMemoryOptions, *, thread_id: str | None, resource_id: str | None, args: Any,
        stage: StagedWorkingMemory | None = None,
    ) -> UpdateResult:
        """Run the model's ``updateWorkingMemory`` call. Refusals come back as results, not exceptions,
        so the model can read them and correct itself.

        With ``stage`` the update is validated now and recorded there; it is written only when the
        stage is committed (with the turn's messages). Without it, it is written at once. With
        ``version="vnext"`` the call is the vNext tool's (``core.working_memory_vnext``).

        A call the options do not offer the tool for (working memory disabled, or ``agent_managed``
        off) is refused: a model may call a tool it was never given (a hallucination, or text in the
        conversation telling it to), and the memory is then the application's alone to write."""
        if not opts.enabled:
            return UpdateResult(False, "Working memory is not enabled for this memory instance, so the model "
                                       "cannot update it. Nothing changed.")
        if not opts.agent_managed:
            return UpdateResult(False, "Working memory is kept by the application here (agent_managed is off), "
                                       "so the model cannot update it. Nothing changed.")
        try:
            if opts.version == "vnext" and opts.schema is None:
                from core import working_memory_vnext

                return working_memory_vnext.apply(self, opts, thread_id=thread_id, resource_id=resource_id,
                                                  args=args, stage=stage)
            if opts.schema is not None:
                payload = args.get("memory", args) if isinstance(args, Mapping) else args
                if isinstance(payload, str):
                    # JSON text wrapped in our prompt's tags, echoed back by the model: the JSON inside.
                    payload = unwrap_own_tags(payload)
                if payload is None:
                    return UpdateResult(True, "No memory data was given; working memory is unchanged.")
                if stage is not None:
                    update = strip_nulls_from_optional(opts.schema, parse_patch(payload, nulls_delete=False))
                    text = stage.add(opts, thread_id, resource_id, "merge", update)
                    return UpdateResult(True, "Working memory updated (merged).", text)
                value = self.merge(
                    opts, thread_id=thread_id, resource_id=resource_id, patch=payload, author="agent",
                    strip_optional_nulls=True, create_thread=True,
                )
                return UpdateResult(True, "Working memory updated (merged).", value.text)
            memory_text = args.get("memory") if isinstance(args, Mapping) else None
            if not isinstance(memory_text, str):
                return UpdateResult(False, "The 'memory' argument must be a Markdown string.")
            # Our prompt's tags echoed back around the memory would be stored, and the next prompt would
            # nest them inside its own: one enclosing pair is dropped (a memory that mentions them stays).
            memory_text = unwrap_own_tags(memory_text)
            if stage is not None:
                current = stage.preview(*self.owner(opts, thread_id, resource_id))
            else:
                current = self.get(opts, thread_id=thread_id, resource_id=resource_id).text
            template = opts.effective_template
            if (
                normalize_ws(memory_text) == normalize_ws(template)
                and current is not None
                and normalize_ws(current) not in ("", normalize_ws(template))
            ):
                return UpdateResult(
                    False, "Refused: that is the empty template and would erase the stored memory. Nothing changed."
                )
            if not memory_text.strip() and current is not None and current.strip():
                # A small model's empty argument is no decision to forget everything.
                return UpdateResult(
                    False, "Refused: an empty memory would erase the stored memory. Nothing changed. Send the whole "
                           "memory, with what it keeps."
                )
            if stage is not None:
                text = stage.add(opts, thread_id, resource_id, "replace", memory_text)
                return UpdateResult(True, "Working memory updated.", text)
            value = self.write(opts, thread_id=thread_id, resource_id=resource_id, value=memory_text, author="agent",
                               create_thread=True)
            return UpdateResult(True, "Working memory updated.", value.text)
        except (WorkingMemoryError, OptionsError, NotFoundError, ThreadOwnershipError) as exc:
            return UpdateResult(False, str(exc))


def _json_text(data: Any) -> str:
    """Schema-mode memory as stored: standard JSON. Python's parser takes ``NaN`` and ``Infinity`` (and
    turns ``1e400`` into infinity) from a model's arguments, but no JSON reader does: Mastra's
    ``JSON.parse`` would fail on the stored text and start the memory afresh. An integer beyond a double's range
    (``integer_beyond_double``, import's rule too) is refused as well: Python keeps its digits, Mastra reads
    Infinity."""
    huge = integer_beyond_double(data)
    if huge is not None:
        raise WorkingMemoryError(
            f"Working memory must be standard JSON a JavaScript reader can read back: the number {huge} is beyond "
            "what a double holds (Mastra reads it as Infinity). Send a smaller number, or the digits as a string. "
            "Nothing changed.")
    try:
        # Compact, as Mastra's ``JSON.stringify`` stores it: the same object is the same text (and the same
        # prompt and tokens) whichever of the two wrote it.
        text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except ValueError:
        raise WorkingMemoryError(
            "Working memory must be standard JSON: NaN and Infinity are not JSON numbers (nor is a number too "
            "large for a double). Send a finite number or a string instead. Nothing changed."
        ) from None
    return text


def tool_definition(opts: WorkingMemoryOptions) -> dict[str, Any]:
    """The update tool in OpenAI function format (``setWorkingMemory`` with state signals)."""
    if opts.version == "vnext" and opts.schema is None:
        from core import working_memory_vnext as vnext

        return {"type": "function", "function": {"name": tool_name(opts), "description": vnext.TOOL_DESCRIPTION,
                                                 "parameters": vnext.tool_parameters()}}
    if opts.schema is not None:
        parameters: dict[str, Any] = {
            "type": "object",
            "description": "The working memory fields to add or change, as JSON.",
            "properties": {"memory": dict(opts.schema)},
            "required": ["memory"],
        }
        # The schema's local refs ("#/$defs/Address") point at its root, which is now "memory": its
        # definitions go to the root of the parameters too, where those refs resolve.
        for defs in ("$defs", "definitions"):
            if isinstance(opts.schema.get(defs), Mapping):
                parameters[defs] = opts.schema[defs]
        description = (
            "Update working memory. Fields you pass are merged into what is stored: include only the "
            "fields to add or change and leave out the rest to keep them. Arrays replace the stored array "
            "entirely, so pass the full array. A null never deletes a field (a field the schema does not "
            "require is kept as stored); to clear a text field, send an empty string."
        )
    else:
        parameters = {
            "type": "object",
            "properties": {
                "memory": {
                    "type": "string",
                    "description": "The complete working memory as Markdown text. Always a string, never an object.",
                }
            },
            "required": ["memory"],
            "additionalProperties": False,
        }
        description = (
            "Replace working memory with new Markdown content. Anything left out is dropped, so send the "
            "whole memory each time. The value of 'memory' is always a string."
        )
    return {"type": "function", "function": {"name": tool_name(opts), "description": description,
                                             "parameters": parameters}}


def instruction(opts: WorkingMemoryOptions, data: str | None, *, read_only: bool) -> str:
    """The system message that shows working memory to the model (our wording, Mastra's structure)."""
    shown = data if data else None
    if read_only:
        return (
            "WORKING MEMORY (READ-ONLY)\n"
            "Below is what is known about the user and this conversation. Use it to answer well.\n\n"
            f"<working_memory_data>\n{shown or 'No working memory has been stored yet.'}\n</working_memory_data>\n\n"
            "Guidelines:\n"
            "1. Draw on this information whenever it helps the user.\n"
            "2. Use it naturally; do not talk about having a memory.\n"
            "3. It cannot be changed in this session.\n\n"
            "Notes:\n"
            "- If the user says something that contradicts it, trust the user for this reply.\n"
            "- Do not invent details that are not stored here."
        )
    fmt = "JSON" if opts.schema is not None else "Markdown"
    name = tool_name(opts)
    lines = [
        "WORKING MEMORY",
        f"You keep notes about the user and this conversation. Save facts worth remembering by calling the {name} tool.",
        "",
        "Guidelines:",
        "1. Save anything that could matter in a later message: names, preferences, goals, decisions, deadlines.",
        "2. Save new information as soon as you learn it, without waiting to be asked.",
        f"3. The memory is {fmt}; keep to that format.",
        "4. Answer naturally and do not mention that you keep notes.",
    ]
    if opts.schema is None and opts.version == "vnext":
        lines += [
            f"5. {name} edits the memory in place: `newMemory` is the new or corrected text; `searchString` is the "
            "stored line it replaces (leave it out to append); `updateReason` says why.",
            "6. Send only what changes, never the whole memory; one line per call is best.",
            "7. Only store what fits the template below.",
            f"8. When nothing new was learned, do not call {name}.",
            "9. Information that is off-topic right now is still worth keeping; do not delete it for that reason.",
        ]
        lines += ["", "<working_memory_template>", opts.effective_template, "</working_memory_template>"]
    elif opts.schema is None:
        lines += [
            f"5. The {name} tool takes one argument, `memory`.",
            "6. `memory` is always a string of Markdown, never an object.",
            "7. Follow the template below; fill in its fields rather than inventing new layouts.",
        ]
        lines += ["", "<working_memory_template>", opts.effective_template, "</working_memory_template>"]
    else:
        assert opts.schema is not None
        shape = json.dumps(empty_object(opts.schema), ensure_ascii=False, separators=(",", ":"))
        lines += ["", "", "", "In JSON mode the memory has this shape (empty values shown):", shape]
    lines += [
        "",
        f"<working_memory_data>\n{shown if shown is not None else 'null'}\n</working_memory_data>",
        "",
        "Notes:",
        "- When something stored changes, update it.",
        "- If unsure whether a detail matters, save it.",
        "- Keep sections that are still empty; they show what to look for.",
    ]
    if opts.schema is None:
        lines += [
            "- Each update sends only the lines that change." if opts.version == "vnext"
            else "- Every update sends the entire memory, including what has not changed.",
            f"- Call {name} whenever relevant information arrives.",
            "- Keep the Markdown structure of the template.",
        ]
    else:
        lines += [
            "- Send only the fields that changed; the rest is kept.",
            f"- Call {name} whenever relevant information arrives.",
            "- Keep the JSON structure of the schema.",
        ]
    return "\n".join(lines)


def hide_working_memory(message_content: dict[str, Any]) -> dict[str, Any] | None:
    """Remove ``updateWorkingMemory`` tool parts and ``<working_memory>`` tags before a message is saved.

    ``setWorkingMemory`` (``use_state_signals``) calls are kept: under that name the tool's calls are
    the conversation's audit record of what the model stored (seed 004), and the model sees its own
    updates in later turns. Returns None when nothing is left (the message is then not saved at all).
    """
    parts = []
    changed = False
    for part in message_content.get("parts") or []:
        if part.get("type") == "tool-invocation":
            inv = part.get("toolInvocation") or {}
            if inv.get("toolName") == TOOL_NAME or inv.get("state") == "partial-call":
                changed = True
                continue
        if part.get("type") == "text" and isinstance(part.get("text"), str) and "<working_memory>" in part["text"]:
            part = {**part, "text": WM_TAG_RE.sub("", part["text"]).strip()}
            changed = True
            if not part["text"]:
                continue
        parts.append(part)
    content_text = message_content.get("content")
    if isinstance(content_text, str) and "<working_memory>" in content_text:
        changed = True  # a client's content string may carry the tags its parts do not (Mastra strips both)
    if not changed:
        return message_content
    if not parts and message_content.get("parts"):
        return None
    out = {**message_content, "parts": parts}
    if isinstance(out.get("content"), str):
        out["content"] = WM_TAG_RE.sub("", out["content"]).strip()
    inv_list = out.get("toolInvocations")
    if isinstance(inv_list, list):
        out["toolInvocations"] = [i for i in inv_list if i.get("toolName") != TOOL_NAME]
    return out
