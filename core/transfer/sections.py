"""Which lists of an export file import reads, the one table each may write, and the rules its rows obey.

An export file is data, never instructions: nothing in it names a table. Each list of the file is a
*section* registered here with the table the importer writes it to; a list that is not registered
is not imported, and a table that is not the table of a registered section is never written
(``writable`` is asked before every write whose table is not spelled out in the importer's SQL).
Bookkeeping tables (migrations, the recall index's state, settings) can never be a section's table.

Every row of every section is checked before anything is written (``check_file``), with the same
rules the API applies: ids without NUL or lone surrogates, text without them, rows that belong to
the file's own threads and resources (a row naming a thread names one of the file's, with that
thread's owner), no ``system`` messages, message content in the stored format within the size
limit. One bad row refuses the whole file with a line naming the row.

A new section (say, tool definitions) registers itself next to the code that imports it:

    register(Section("toolDefinitions", "memory_studio_tools", label="tool definition"))

then its import function writes only through ``writable(section.table)`` (or ``section.table``).
``thread_field``/``resource_field``/``message_field`` name the columns that tie a row to the file's
threads, resources and messages, and ``check`` adds rules of its own (return why a row is refused).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from core.json_kind import json_kind
from core.ids import clipped, id_problem, lone_surrogate
from core.message_size import DEFAULT_MAX_MESSAGE_BYTES
from core.messages import MessageFormatError, normalize_content
from core.observational.records import OMRecord, lookup_key
from core.stored_text import nul_path
from core.timeutil import stored_form_problem
from core.working_memory import DEFAULT_MAX_WORKING_MEMORY_BYTES, NUL_FIX, NUL_HELD, holds_nul
from core.transfer.errors import ExportFormatError, TransferError
from core.terminal_text import printable
from core.transfer.report import register_kind

#: Tables no file may ever write: the schema's journal, the recall index's own state and queue, settings.
BOOKKEEPING_TABLES = frozenset({
    "memory_studio_migrations", "memory_studio_settings", "memory_studio_recall_state", "memory_studio_recall_docs",
    "memory_studio_recall_queue", "sqlite_sequence", "sqlite_master", "sqlite_schema",
})
#: The fields of an observation record that say whose it is (``FileIndex.observations`` keeps only these).
OBSERVATION_OWNERS = ("lookupKey", "threadId", "resourceId")
#: Message roles a file may hold: what the API stores (``system`` never is) and Mastra's legacy ``tool``.
MESSAGE_ROLES = ("user", "assistant", "signal", "tool")

Row = Mapping[str, Any]
RowCheck = Callable[[Row, "FileIndex"], "str | None"]


@dataclass(frozen=True)
class Section:
    """One list of the export file and the one table import writes its rows to."""

    key: str  # the list in the file ("observations")
    table: str | None  # chosen here, never by the file; None: rows checked, written through other sections
    label: str = ""  # one row, in words ("observation row"); the report's kind is ``key``
    id_fields: tuple[str, ...] = ("id",)  # ids, checked like every id the API takes
    thread_field: str | None = None  # names one of the file's threads
    resource_field: str | None = None  # names that thread's owner (or, without a thread, a resource of the file)
    message_field: str | None = None  # names one of the file's messages, of the row's thread
    check: RowCheck | None = None  # further rules: why the row is refused, or None
    rows: Callable[[Mapping[str, Any]], Iterable[Row]] | None = None  # where the rows are (default: the list)
    documents: tuple[str, ...] = ()  # fields stored as JSON documents (Postgres JSONB: no NUL in a string or key)


@dataclass
class FileIndex:
    """What the file holds, for rules that tie rows together."""

    thread_owner: dict[str, str] = field(default_factory=dict)
    resources: set[str] = field(default_factory=set)
    message_thread: dict[str, str] = field(default_factory=dict)
    observations: dict[str, Row] = field(default_factory=dict)  # observation record id -> its OBSERVATION_OWNERS
    max_message_bytes: int | None = DEFAULT_MAX_MESSAGE_BYTES
    max_working_memory_bytes: int | None = DEFAULT_MAX_WORKING_MEMORY_BYTES

    @property
    def owners(self) -> set[str]:
        """Resources the file is about: its resource rows and its threads' owners."""
        return self.resources | set(self.thread_owner.values())


SECTIONS: dict[str, Section] = {}


def register(section: Section) -> Section:
    """Make ``section`` importable. Its table must not be a bookkeeping table or another section's."""
    if section.table in BOOKKEEPING_TABLES:
        raise ValueError(f"{section.table} is a bookkeeping table; no export section may write it.")
    for other in SECTIONS.values():
        if section.table is not None and other.table == section.table and other.key != section.key:
            raise ValueError(f"{section.table} is already written by the {other.key!r} section.")
    SECTIONS[section.key] = section
    if section.table is not None:
        register_kind(section.key, section.label or section.key)
    return section


def section(key: str) -> Section:
    return SECTIONS[key]


def writable(table: str) -> str:
    """``table`` when import may write it (a registered section's table), else ``TransferError``."""
    if table in BOOKKEEPING_TABLES or not any(s.table == table for s in SECTIONS.values()):
        raise TransferError(f"Import never writes the table {table!r}: it is not the table of a known export "
                            "section. Nothing was written.")
    return table


# -- the rules ---------------------------------------------------------------------------------------


def check_file(data: Mapping[str, Any], name: str, *, max_message_bytes: int | None = DEFAULT_MAX_MESSAGE_BYTES,
               max_working_memory_bytes: int | None = DEFAULT_MAX_WORKING_MEMORY_BYTES,
               messages: MessageChecks | None = None) -> None:
    """Refuse the file (``ExportFormatError`` naming the row) when any row breaks a rule; reads no database.
    ``messages``: the messages' rules already asked row by row (``MessageChecks``) by a reader that read them (its
    first refusal is raised here, in its place among the sections); else they are read here."""
    if messages is None:
        messages = MessageChecks(data, name, max_message_bytes=max_message_bytes,
                                 max_working_memory_bytes=max_working_memory_bytes)
        for position, row in enumerate(data.get(MESSAGES.key) or []):
            if not messages.check(position, row):
                break
    index = messages.index
    # (what the observation-log versions' rule asks of their records: a record's owners, not its log)
    index.observations = {str(o["id"]): {k: o.get(k) for k in OBSERVATION_OWNERS}
                          for o in data.get("observations", []) if isinstance(o, Mapping)}
    for sec in SECTIONS.values():
        if sec is MESSAGES:
            if messages.refused is not None:
                raise messages.refused
            continue
        rows = sec.rows(data) if sec.rows is not None else data.get(sec.key) or []
        for position, row in enumerate(rows):
            problem = row_problem(sec, row, index)
            if problem is not None:
                raise _refused(name, sec, position, row, problem)


class MessageChecks:
    """``check_file``'s rules for the messages, asked a row at a time by whoever reads them: the messages are read
    from disk (``core.transfer.spool``), and ``format.validate`` asks these in the one pass its own message checks
    make. Notes which thread each message is in (``index.message_thread``) as it checks it: no rule of the messages
    or of a section registered before them asks it (``sections_before_messages_ask_no_message``)."""

    def __init__(self, data: Mapping[str, Any], name: str, *, max_message_bytes: int | None,
                 max_working_memory_bytes: int | None) -> None:
        self.name = name
        self.index = FileIndex(max_message_bytes=max_message_bytes, max_working_memory_bytes=max_working_memory_bytes)
        for thread in data.get("threads", []):
            self.index.thread_owner[thread["id"]] = thread["resourceId"]
        self.index.resources = {r["id"] for r in data.get("resources", [])}
        self.refused: ExportFormatError | None = None  # the first message refused

    def check(self, position: int, row: Any) -> bool:
        """Check message ``position``; False once one is refused (the rest need not be asked)."""
        if self.refused is not None:
            return False
        problem = row_problem(MESSAGES, row, self.index)
        if problem is not None:
            self.refused = _refused(self.name, MESSAGES, position, row, problem)
            return False
        self.index.message_thread[row["id"]] = row["threadId"]
        return True


def _refused(name: str, sec: Section, position: int, row: Any, problem: str) -> ExportFormatError:
    return ExportFormatError(printable(f"{name}: {describe(sec, position, row)} is refused: {problem}. "
                                       "Nothing was imported; fix or remove that row."))


def describe(sec: Section, position: int, row: Any) -> str:
    """``messages[3] (id 'm1')``: where a row is, for a line that names it."""
    key = next((row.get(f) for f in sec.id_fields if isinstance(row, Mapping) and row.get(f) is not None), None)
    return f"{sec.key}[{position}]" + (f" ({sec.id_fields[0]} {key!r})" if key is not None else "")


def row_problem(sec: Section, row: Any, index: FileIndex) -> str | None:
    if not isinstance(row, Mapping):
        return "it is not an object"
    for name in sec.id_fields:
        value = row.get(name)
        if value is not None and (problem := id_problem(value)) is not None:
            return f"its {name} cannot be used: {problem}"
    for key, value in row.items():
        if not isinstance(key, str) or id_problem(key) is not None:
            return f"it has a field named {key!r}, which cannot be a column"
        problem = _text_problem(value, top=True)
        if problem is not None:
            return f"its {key!r} {problem}"
    thread = row.get(sec.thread_field) if sec.thread_field else None
    if sec.thread_field and thread is not None:
        if (problem := id_problem(thread)) is not None:
            return f"its {sec.thread_field} cannot be used: {problem}"
        if thread not in index.thread_owner:
            return f"it names thread {thread!r}, which is not in the file"
    if sec.resource_field and row.get(sec.resource_field) is not None:
        resource = row[sec.resource_field]
        if (problem := id_problem(resource)) is not None:
            return f"its {sec.resource_field} cannot be used: {problem}"
        owner = index.thread_owner.get(thread) if thread is not None else None
        if owner is not None and resource != owner:
            return f"it says resource {resource!r}, but its thread {thread!r} belongs to {owner!r}"
        if owner is None and resource not in index.owners:
            return f"it names resource {resource!r}, which is not in the file"
    if sec.message_field and row.get(sec.message_field) is not None:
        message = row[sec.message_field]
        if index.message_thread.get(message) is None:
            return f"it names message {message!r}, which is not in the file"
        if thread is not None and index.message_thread[message] != thread:
            return f"its message {message!r} is in thread {index.message_thread[message]!r}, not {thread!r}"
    problem = sec.check(row, index) if sec.check is not None else None
    return problem if problem is not None else _document_problem(sec, row)


def _document_problem(sec: Section, row: Mapping[str, Any]) -> str | None:
    """A NUL character in a string or key of a field stored as a JSON document (``Section.documents``): PostgreSQL's
    JSONB takes none, and the import failed there whole in the driver's words ("unsupported Unicode escape
    sequence"), while libSQL kept it; the API refuses it on both (``memory_store.check_json_text``)."""
    for name in sec.documents:
        value = row.get(name)
        if isinstance(value, str):  # JSON text, as an older export may hold it
            try:
                value = json.loads(value)
            except ValueError:
                continue  # (not JSON: the section's rule names it, or the column takes text)
        where = nul_path(value) if value is not None else None
        if where is not None:
            return (f"its {name} holds a NUL character (U+0000) at {clipped(where)}, which PostgreSQL "
                    "stores in no JSON (the API refuses it on every backend); remove it, or write what it stands for "
                    "as text")
    return None


def _text_problem(value: Any, *, top: bool) -> str | None:
    """Text that cannot be stored as it is: a lone surrogate anywhere, a NUL in a value bound as text."""
    if isinstance(value, str):
        if top and "\x00" in value:
            return "holds a NUL character (\\x00), which the database would cut the value at"
        if value.isascii():
            return None  # (a message's content, most of a file: no surrogate, without searching it for one)
    problem = lone_surrogate(value)
    return f"holds {problem}" if problem is not None else None


def times_problem(row: Row, fields: tuple[str, ...]) -> str | None:
    """Why a timestamp of ``row`` cannot be stored as it is (``timeutil.stored_form_problem``), or None. A time
    the readers cannot parse would make every read of it fail: listings of a resource's threads or a thread's
    messages, the registered agents, or every turn of a memory (its newest override); one in another form
    (an offset, no milliseconds) sorts as text in the wrong place; one at the end of Python's range fails
    every turn of its thread (the next is stamped a millisecond after it)."""
    for name in fields:
        value = row.get(name)
        if value is None:
            continue
        if not isinstance(value, str):
            return f"its {name} must be an ISO-8601 time as a string, not {json_kind(value)}"
        if (problem := stored_form_problem(value)) is not None:
            return f"its {name} {value!r} {problem}"
    return None


def _resource_rule(row: Row, index: FileIndex) -> str | None:
    value = row.get("workingMemory")  # stored as text: Markdown, or a schema memory's JSON text
    if value is not None and not isinstance(value, str):
        return f"its workingMemory must be text (Markdown, or JSON text for a schema), not {json_kind(value)}"
    return times_problem(row, ("createdAt", "updatedAt")) or _metadata_problem(row.get("metadata")) \
        or _working_memory_problem(value, index)


def _thread_rule(row: Row, index: FileIndex) -> str | None:
    if row.get("title") is not None and not isinstance(row.get("title"), str):
        return f"its title must be text, not {json_kind(row.get('title'))}"
    metadata = row.get("metadata")  # thread-scoped working memory is kept in the thread's metadata
    problem = times_problem(row, ("createdAt", "updatedAt")) or _metadata_problem(metadata)
    if problem is not None:
        return problem
    if isinstance(metadata, str):  # JSON text (an older export's form), as the importer parses it
        metadata = json.loads(metadata)
    value = metadata.get("workingMemory") if isinstance(metadata, Mapping) else None
    return _working_memory_problem(value, index)


def _metadata_problem(value: Any) -> str | None:
    """Metadata as the API stores it: a JSON object (or none). Mastra parses it on every read of the row, and
    our readers take anything else as empty, so the stored value would be lost at the next write."""
    if isinstance(value, str):  # JSON text, as an older export may hold it
        try:
            value = json.loads(value)
        except ValueError:
            return "its metadata is text that is not JSON (metadata must be a JSON object)"
    if value is not None and not isinstance(value, Mapping):
        return f"its metadata must be a JSON object, not {json_kind(value)}"
    return None


def _working_memory_problem(value: Any, index: FileIndex) -> str | None:
    """A current working memory the API would not write: over its size limit, or holding a NUL (``nul_problem``)."""
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if (problem := nul_problem(text, as_json=True)) is not None:
        return problem
    if index.max_working_memory_bytes is None:
        return None
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > index.max_working_memory_bytes:
        return (f"its working memory is {size:,} bytes, over the working-memory size limit of "
                f"{index.max_working_memory_bytes:,} bytes (every later prompt of its owner would carry it)")
    return None


def nul_problem(text: Any, *, as_json: bool) -> str | None:
    """Working memory holding a NUL, refused as every write of the API refuses it (``working_memory.holds_nul``): in
    Postgres the import failed whole with the driver's words; in libSQL the value was kept, and then every later
    merge of a schema memory was refused. A current value is looked at as JSON too (``as_json``): the file does not
    say whether its memory has a schema, and the target's may (a Markdown memory that is itself JSON text with the
    escape is refused with it); a version says which (its ``format``)."""
    if isinstance(text, str) and holds_nul(text, as_json=as_json):
        return f"its working memory {NUL_HELD}; {NUL_FIX[0].lower()}{NUL_FIX[1:-1]}"
    return None


def _message_rule(row: Row, index: FileIndex) -> str | None:
    if (problem := times_problem(row, ("createdAt",))) is not None:
        return problem
    role = row.get("role")
    if role == "system":
        return "a system message is never stored (instructions are the agent's, not the thread's)"
    if role not in MESSAGE_ROLES:
        return f"its role {role!r} is not one of {', '.join(MESSAGE_ROLES)}"
    content = row.get("content")
    if not isinstance(content, str):
        return "its content must be the stored text (a string)"
    size = len(content.encode("utf-8"))
    if index.max_message_bytes is not None and size > index.max_message_bytes:
        return f"its content is {size:,} bytes, over the message size limit of {index.max_message_bytes:,} bytes"
    if row.get("type") == "v2":
        return _format2_problem(content)
    try:
        normalize_content(content, message_id=str(row.get("id")))
    except MessageFormatError as exc:
        return str(exc)
    return None


def _format2_problem(content: str) -> str | None:
    try:
        value = json.loads(content)
    except ValueError as exc:
        return f"its content is not valid JSON ({exc})"
    except RecursionError:  # (the file itself parsed: the content is JSON text inside it)
        return "its content nests lists or objects too deeply to be read"
    if not isinstance(value, dict) or value.get("format") != 2 or not isinstance(value.get("parts"), list):
        return 'its content is not format 2 (a JSON object with "format": 2 and a "parts" list)'
    for part in value["parts"]:
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            return "its content has a part without a string \"type\""
        # Every prompt that holds the message reads the call from it (core/prompt.py).
        if part["type"] == "tool-invocation" and not isinstance(part.get("toolInvocation") or {}, dict):
            return "its content has a tool-invocation part whose \"toolInvocation\" is not an object"
    return None


def _observation_rule(row: Row, index: FileIndex) -> str | None:
    scope = row.get("scope")
    if scope not in ("thread", "resource"):
        return f"its scope {scope!r} is not thread or resource"
    if scope == "thread" and row.get("threadId") is None:
        return "a thread-scoped row needs a threadId"
    if scope == "resource" and row.get("resourceId") is None:
        return "a resource-scoped row needs a resourceId"
    expected = lookup_key(scope, thread_id=row.get("threadId"), resource_id=row.get("resourceId"))
    # Absent, the table's NOT NULL refuses it; present, it must be the row's own key (another key
    # would put these observations into someone else's memory).
    if row.get("lookupKey") is not None and row.get("lookupKey") != expected:
        return f"its lookupKey {row.get('lookupKey')!r} is not {expected!r}, the key of its own scope"
    # The record is read on every turn of its owner: it must read as the engine reads it.
    if (problem := times_problem(row, ("createdAt", "updatedAt", "lastObservedAt", "lastReflectionAt"))) is not None:
        return problem
    if (problem := _typed_problem(row, _OM_INTEGERS, _OM_FLAGS)) is not None:
        return problem
    try:
        OMRecord.from_row({"lookupKey": expected, "createdAt": None, "updatedAt": None, **row})
    except (TypeError, ValueError) as exc:
        return f"it cannot be read as an observation record ({exc})"
    return None


#: An observation row's integer columns (each: whether it may be null) and its flags (BOOLEAN in Postgres).
_OM_INTEGERS = {"generationCount": False, "pendingMessageTokens": False, "totalTokensObserved": False,
                "observationTokenCount": False, "lastBufferedAtTokens": False, "bufferedObservationTokens": True,
                "bufferedReflectionTokens": True, "bufferedReflectionInputTokens": True,
                "reflectedObservationLineCount": True}
_OM_FLAGS = ("isObserving", "isReflecting", "isBufferingObservation", "isBufferingReflection")
#: Postgres' INTEGER range, which every integer column of Mastra's tables has there.
_INTEGER_RANGE = (-(2**31), 2**31 - 1)


def _typed_problem(row: Row, integers: Mapping[str, bool], flags: tuple[str, ...]) -> str | None:
    """Why a number or flag column of ``row`` would not be stored as the column's type on both backends: JSON's
    true for a number (``True == 1`` in Python: libSQL stored it as 1, Postgres refused the import in the driver's
    words), a fraction or text for a number (libSQL kept 1.5 or "12" in an INTEGER column), a number beyond
    Postgres' INTEGER ("integer out of range"), text for a flag ("yes", which Postgres reads as true). A flag is
    true or false, or 0 or 1 as a libSQL export writes it. ``integers``: name → whether it may be null (absent: the
    table's NOT NULL answers, as for any column)."""
    low, high = _INTEGER_RANGE
    for name, nullable in integers.items():
        if name not in row or (row[name] is None and nullable):
            continue
        value = row[name]
        if not isinstance(value, int) or isinstance(value, bool):
            return f"its {name} must be a whole number{' or null' if nullable else ''}, not {json_kind(value)}"
        if not low <= value <= high:
            return f"its {name} is {json_kind(value)}, beyond an INTEGER column's range ({low:,} to {high:,})"
    for name in flags:
        value = row.get(name, False)
        if type(value) not in (bool, int) or value not in (0, 1):
            return f"its {name} must be true or false (or 0 or 1), not {json_kind(value)}"
    return None


#: The integer ids a table's key can hold (SQLite's and Postgres' BIGINT range, the rowid's positive half).
MAX_INTEGER_ID = 2**63 - 1


def integer_id_problem(row: Row, name: str) -> str | None:
    """Why ``row[name]`` cannot be an integer id as the tables keep it (absent or null is allowed)."""
    value = row.get(name)
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_INTEGER_ID):
        return None
    return f"its {name} must be a whole number from 1 to {MAX_INTEGER_ID:,} (or null), not {value!r:.40}"


def text_problem(row: Row, required: tuple[str, ...] = (), optional: tuple[str, ...] = ()) -> str | None:
    """Why a column of ``row`` that the table keeps as text is not text (``optional`` ones may be null)."""
    for name in (*required, *optional):
        value = row.get(name)
        if not isinstance(value, str) and not (value is None and name in optional):
            return f"its {name} must be text{' or null' if name in optional else ''}, not {json_kind(value)}"
    return None


def _version_rule(row: Row, index: FileIndex) -> str | None:
    # The table's columns, as the importer binds them (it sorts the rows by id and keeps a free id).
    return integer_id_problem(row, "id") or text_problem(row, ("format", "author"), ("working_memory", "note")) \
        or times_problem(row, ("createdAt",)) or nul_problem(row.get("working_memory"), as_json=row["format"] == "json")


def _working_memory_entry_rule(row: Row, index: FileIndex) -> str | None:
    scope, owner = row.get("scope"), row.get("ownerId")
    if scope == "thread" and owner not in index.thread_owner:
        return f"it is the working memory of thread {owner!r}, which is not in the file"
    if scope == "resource" and owner not in index.owners:
        return f"it is the working memory of resource {owner!r}, which is not in the file"
    for version in row.get("versions") or []:
        if not isinstance(version, Mapping):
            return "one of its versions is not an object"
        if version.get("scope") != scope or version.get("owner_id") != owner:
            return (f"its version {version.get('id')!r} belongs to {version.get('scope')} "
                    f"{version.get('owner_id')!r}, not to this entry's {scope} {owner!r}")
    return None


def _version_rows(data: Mapping[str, Any]) -> Iterator[Row]:
    # (read as they are checked: a file's may be on disk, a ``SpoolPart`` in each entry)
    return (v for entry in data.get("workingMemory") or [] if isinstance(entry, Mapping)
            for v in entry.get("versions") or [] if isinstance(v, Mapping))


RESOURCES = register(Section("resources", "mastra_resources", "resource", check=_resource_rule,
                             documents=("metadata",)))
THREADS = register(Section("threads", "mastra_threads", "thread", id_fields=("id", "resourceId"),
                           check=_thread_rule, documents=("metadata",)))
MESSAGES = register(Section("messages", "mastra_messages", "message", thread_field="threadId",
                            resource_field="resourceId", check=_message_rule))


def sections_before_messages_ask_no_message() -> bool:
    """``check_file`` notes the messages' threads as it checks them: true while no section checked before (or as)
    them names a message (``message_field``); a test keeps it so."""
    before = list(SECTIONS.values())[:list(SECTIONS.values()).index(MESSAGES) + 1]
    return not any(s.message_field for s in before)
# The current values are written with their resources and threads; the entries are checked here.
WORKING_MEMORY = register(Section("workingMemory", None, "working-memory value",
                                  id_fields=("ownerId",), check=_working_memory_entry_rule))
WM_VERSIONS = register(Section("workingMemoryVersions", "memory_studio_wm_versions", "working-memory version",
                               id_fields=("owner_id",), rows=_version_rows, check=_version_rule))
OBSERVATIONS = register(Section("observations", "mastra_observational_memory", "observation row",
                                thread_field="threadId", resource_field="resourceId", check=_observation_rule,
                                documents=("observedMessageIds", "bufferedMessageIds", "bufferedObservationChunks",
                                           "metadata")))
TURNS = register(Section("turns", "memory_studio_turns", "turn record", id_fields=("input_message_id",),
                         thread_field="thread_id", resource_field="resource_id", message_field="input_message_id"))
