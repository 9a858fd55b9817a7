"""The export file: its name, version, shape, and the checks a file must pass before it is imported.

Version 1 (``{"format": "memory-studio-export", "version": 1, ...}``):

- ``exportedAt``; ``source`` (database, kind ``memory-studio`` | ``mastra``, tool version);
  ``scope`` (``{"kind": "thread" | "resource", "id": ...}``); ``includes`` (which optional parts are in).
- ``resources``: ``{id, workingMemory, metadata, createdAt, updatedAt}``; ``threads``:
  ``{id, resourceId, title, metadata, createdAt, updatedAt}`` (metadata as JSON values).
- ``messages``: ``{id, threadId, resourceId, role, type, createdAt, content}``, ``content`` being the
  stored text exactly (Mastra format 2 as JSON text, or a legacy plain string).
- ``workingMemory``: one entry per owner, ``{scope, ownerId, value, versions: [rows of
  memory_studio_wm_versions]}``. ``value`` repeats the current value for readers; import takes the
  current value from the resource row or the thread's metadata, where it is stored.
- ``observations``: rows of ``mastra_observational_memory``.
- The replay sections (``core.transfer.replay_sections``): ``turns`` (rows of ``memory_studio_turns``),
  ``toolDefinitions`` (``{hash, definition}``) and ``toolSets`` (``{hash, members}``) the records name,
  ``agents`` (rows of ``memory_studio_agents``) and ``configs`` (rows of ``memory_studio_configs``), and
  with ``--with-traces`` ``traces`` (spans, ``SpanRecord.to_json_dict``). Files written before they
  existed simply lack them; the import summary says what that leaves out. ``turnsTable`` names the
  turn table for readers; import never takes a table from a file (``core.transfer.sections`` decides
  what each list writes) and refuses a file whose ``turnsTable`` names any other.
- ``messageVersions`` and ``observationVersions`` (``core.transfer.edit_sections``): the rows of
  ``memory_studio_message_versions`` of the threads and of ``memory_studio_om_versions`` of the observation
  records, so Message History, undo and the replay of turns before an edit work in the copy.

Every row is checked before anything is written (``sections.check_file``): the API's rules for ids,
text and roles, format-2 content, and rows tied to the file's own threads and resources.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, TextIO

from core.message_size import DEFAULT_MAX_MESSAGE_BYTES
from core.stored_text import NumberBeyondDouble, json_double, json_whole
from core.working_memory import DEFAULT_MAX_WORKING_MEMORY_BYTES
from core.transfer import sections
from core.transfer.spool import RowSpool, SpoolPart
from core.transfer.stream_json import HeldTooMuch, load_pieces
from core.transfer.errors import ExportFormatError, ExportWriteError, TransferError
from core.terminal_text import printable
from core.stored_text import json_text

FORMAT = "memory-studio-export"
VERSION = 1
#: The key of each list's rows: a file holds one row per key.
UNIQUE_KEYS = {"resources": ("id",), "threads": ("id",), "messages": ("id",), "observations": ("id",),
               "turns": ("input_message_id",), "agents": ("name",), "toolDefinitions": ("hash",),
               "toolSets": ("hash",), "workingMemory": ("scope", "ownerId")}
LIST_KEYS = ("resources", "threads", "messages", "workingMemory", "observations", "turns", "toolDefinitions",
             "toolSets", "agents", "configs", "traces", "messageVersions", "observationVersions")


class Streamed:
    """A list of the export document that is read while the file is written (``render_chunks``), so
    its rows are never all held at once: the spans of ``--with-traces``. ``rows`` gives the rows anew
    each time it is called; the document's ``counts`` entry of the list is filled in when it has been
    written (``count``: the rows of the last full pass)."""

    def __init__(self, rows: Callable[[], Iterator[Mapping[str, Any]]]) -> None:
        self._rows = rows
        self.count: int | None = None

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        n = 0
        for row in self._rows():
            n += 1
            yield row
        self.count = n


def dumps(data: Mapping[str, Any]) -> str:
    if any(isinstance(v, Streamed) or _holds_spooled(v) for v in data.values()):
        return "".join(_json_chunks(data))
    return json_text(data, ensure_ascii=False, indent=2) + "\n"


def _holds_spooled(value: Any) -> bool:
    """Whether ``value`` is, or holds in one of its rows, a list kept in a spool (a ``RowSpool``: an export's
    messages, observations, turn records, edit history; a ``SpoolPart``: its working-memory versions)."""
    if isinstance(value, (RowSpool, SpoolPart)):
        return True
    if isinstance(value, list):
        return any(isinstance(row, Mapping) and any(isinstance(v, SpoolPart) for v in row.values()) for row in value)
    return isinstance(value, Mapping) and any(isinstance(v, SpoolPart) for v in value.values())


def _spooled_chunks(value: Any, newline: str) -> Iterator[str]:
    """``_nested(value, newline)``, byte for byte, in pieces: a ``SpoolPart`` in it (or in one of its rows) is
    written a row at a time as it is read from its spool, never held whole."""
    if not _holds_spooled(value):
        yield _nested(value, newline)
        return
    inner = newline + "  "
    if isinstance(value, Mapping):
        first = True
        for key, item in value.items():
            yield ("{" if first else ",") + inner + json.dumps(str(key), ensure_ascii=False) + ": "
            yield from _spooled_chunks(item, inner)
            first = False
        yield "{}" if first else newline + "}"
        return
    empty = True
    for row in value:
        yield ("[" if empty else ",") + inner
        yield from _spooled_chunks(row, inner)
        empty = False
    yield "[]" if empty else newline + "]"


def _json_chunks(data: Mapping[str, Any]) -> Iterator[str]:
    """``json.dumps(data, ensure_ascii=False, indent=2) + "\\n"``, byte for byte, in pieces: a value
    nested one level down is its own dump with every line indented two more spaces (a JSON string
    never holds a raw newline), and a ``Streamed`` list is written row by row, as is a spooled one
    (``_spooled_chunks``)."""
    counts = data.get("counts")
    streamed = [k for k, v in data.items() if isinstance(v, Streamed)]
    keys = list(data)
    if streamed and isinstance(counts, dict) and keys.index("counts") < max(keys.index(k) for k in streamed):
        raise ValueError("A streamed list must come before the document's counts.")
    if not data:
        yield "{}\n"
        return
    for i, (key, value) in enumerate(data.items()):
        yield ("{\n  " if i == 0 else ",\n  ") + json.dumps(str(key), ensure_ascii=False) + ": "
        if isinstance(value, Streamed):
            empty = True
            for row in value:
                yield ("[\n    " if empty else ",\n    ") + _nested(row, "\n    ")
                empty = False
            yield "[]" if empty else "\n  ]"
            if isinstance(counts, dict) and key in counts:
                counts[key] = value.count
        else:
            yield from _spooled_chunks(value, "\n  ")
    yield "\n}\n"


def _nested(value: Any, newline: str) -> str:
    return json_text(value, ensure_ascii=False, indent=2).replace("\n", newline)


def render_chunks(data: Mapping[str, Any], fmt: str) -> Iterator[str]:
    """The export as text, in pieces (``write_atomically`` writes them as they come): a ``Streamed``
    list is read while it is written, never held whole, in JSON. A Markdown transcript leaves such
    lists out (it never shows spans)."""
    if fmt == "json":
        return _json_chunks(data)
    return iter([render(data, fmt)])


def render(data: Mapping[str, Any], fmt: str) -> str:
    """The export as text: ``json`` (for import) or ``markdown`` (a transcript to read)."""
    if fmt == "json":
        return dumps(data)
    if fmt == "markdown":
        from core.transfer.markdown import to_markdown

        return to_markdown({k: v for k, v in data.items() if not isinstance(v, Streamed)})
    raise ValueError(f"Unknown export format {fmt!r}; use json or markdown.")


def write_atomically(path: Path, text: str | Iterable[str], *, name: str | None = None) -> None:
    """Write beside the target, then rename: a failed export never leaves half a file behind (nor does
    one whose text, given in pieces, fails halfway). A write
    the system refuses is an ``ExportWriteError`` naming the user's path (the system's error names the
    temporary file beside it) and what to do. ``name``: the path as the user gave it (``shown_path``), which
    every error names; ``path`` by default."""
    shown = name if name is not None else shown_path(path)
    path = path.expanduser()
    if path.is_dir():
        raise ExportWriteError(f"{shown} is a folder; give a file name for the export.")
    if not path.parent.exists() and not any(p.exists() and not p.is_dir() for p in path.parents):
        raise ExportWriteError(f"Cannot write {shown}: the folder {path.parent} does not exist; create it or "
                               "choose another path.")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise ExportWriteError(write_failure(exc, path, shown)) from exc
    pieces = iter([text] if isinstance(text, str) else text)
    reading = False  # an error while the pieces are made (reading the trace store) is not the write's
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            while True:
                reading = True
                piece = next(pieces, None)
                reading = False
                if piece is None:
                    break
                fh.write(piece)
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and not reading:
            raise ExportWriteError(write_failure(exc, path, shown)) from exc
        raise


# A stream's text is held in memory up to this size, past it in a file of the system's temporary folder.
HELD_IN_MEMORY = 8 * 1024 * 1024


def write_whole(out: TextIO, text: Iterable[str], *, held_in_memory: int | None = None) -> None:
    """Write the pieces to a stream (standard output) only once all of them are made: a trace store
    that turns busy halfway leaves nothing there, not half a document. Past ``held_in_memory``
    characters (``HELD_IN_MEMORY``) they wait in a temporary file, not in memory (an export with every
    span of a large resource's runs is gigabytes of JSON), and are copied to the stream in pieces of
    65,536 characters. An error made while the pieces are made (reading the trace store) passes as it is."""
    try:
        held = tempfile.SpooledTemporaryFile(max_size=HELD_IN_MEMORY if held_in_memory is None else held_in_memory,
                                             mode="w+", encoding="utf-8", newline="")
    except OSError as exc:
        raise ExportWriteError(_spool_failure(exc)) from exc
    with held:
        for piece in text:
            try:
                held.write(piece)
            except OSError as exc:  # the temporary folder is full or gone
                raise ExportWriteError(_spool_failure(exc)) from exc
        held.seek(0)
        while chunk := held.read(64 * 1024):
            out.write(chunk)


def _spool_failure(exc: OSError) -> str:
    reason = exc.strerror or str(exc) or type(exc).__name__
    return (f"Cannot hold the export for standard output in the temporary folder ({tempfile.gettempdir()}): "
            f"{reason}. Write it to a file with -o PATH, or free space there (or set TMPDIR to another folder).")


def write_failure(exc: OSError, path: Path, name: str | None = None) -> str:
    """What a failed write of ``path`` means, naming the user's path (``name``, as given) and what to do."""
    shown = name if name is not None else shown_path(path)
    if isinstance(exc, NotADirectoryError) or (isinstance(exc, FileNotFoundError)
                                               and any(p.exists() and not p.is_dir() for p in path.parents)):
        blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), path.parent)
        return f"Cannot write {shown}: {blocker} is a file, not a folder. Choose another folder."
    if isinstance(exc, PermissionError):
        return f"Cannot write {shown}: permission denied. Choose a folder you can write to."
    reason = exc.strerror or str(exc) or type(exc).__name__
    return f"Cannot write {shown}: {reason}. Choose another file name or folder."


def shown_path(path: str | os.PathLike[str]) -> str:
    """A file's path as the user gave it (``./x.json`` stays ``./x.json``, ``~/x.json`` is not expanded, a
    folder keeps its trailing slash), every non-printable character written as its escape: how every error
    and report line about an export or import file names it (``load``, ``import_data``'s ``name``, the
    Studio's dialogs and status bar), so one file is never named two ways."""
    return printable(os.fspath(path))


# What a file starts with when it is one of the files a careless pick lands on instead of an export.
_NOT_AN_EXPORT = (
    (b"\x1f\x8b", "is gzip-compressed. Decompress it first (gunzip), then import the .json file inside"),
    (b"PK\x03\x04", "is a zip archive. Extract the .json file from it first, then import that file"),
    (b"SQLite format 3\x00", "is a SQLite database, not an export file. To copy memory out of it, export it "
                             "first ('memory-studio export --db FILE --resource ID -o FILE.json', or open it in "
                             "the Studio and choose File > Export Resource…), then import that file"),
    (b"\xff\xfe", "is UTF-16 text; import reads UTF-8, as 'memory-studio export' writes it. Save it as UTF-8 "
                  "and import again"),
    (b"\xfe\xff", "is UTF-16 text; import reads UTF-8, as 'memory-studio export' writes it. Save it as UTF-8 "
                  "and import again"),
)
_CHOOSE = "Choose the .json file written by 'memory-studio export'."


#: What import holds of rows it keeps in memory, as a multiple of their text's size (measured: 1.14 for a 1.0 GB
#: export held whole; docs/ARCHITECTURE.md, Figures), with a margin.
MEMORY_PER_FILE_BYTE = 1.5
#: The lists of an export kept on disk while import reads them (``core.transfer.spool``): nearly all of a file (its
#: messages, its observation records, each generation holding its whole log, its turn records, which hold each turn's
#: prompt, and the message and observation-log versions, which hold whole rows before and after each edit).
SPOOLED = ("messages", "observations", "turns", "messageVersions", "observationVersions")
#: The lists nested in the rows of a list kept on disk the same way (a ``SpoolPart`` in each row): the working-memory
#: versions inside each ``workingMemory`` entry.
SPOOLED_WITHIN = {"workingMemory": "versions"}
#: The same for a file read whole (one the piece reader does not take, to say what is wrong with it; a pipe):
#: its text and the rows parsed from it (measured: 2.06).
WHOLE_TEXT_PER_FILE_BYTE = 2.5


def available_memory() -> int | None:
    """Bytes of memory this machine can give without swapping (Linux's ``MemAvailable``); None elsewhere."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_fits(size: int, name: str = "the file", available: int | None = None, *, held: int | None = None) -> None:
    """Refuse a file whose import needs more memory than the machine has available (``available``: default
    ``available_memory()``; not known: no check). Import holds every row of the file at once (one transaction
    writes them all), except the rows of its ``SPOOLED`` lists; ``held``: the size of the text of the rows it
    holds, when the file is read in pieces (``load`` refuses it as soon as they pass what fits), else the
    whole file counts."""
    available = available_memory() if available is None else available
    need = int((size if held is None else held) * MEMORY_PER_FILE_BYTE)
    if available is None or need <= available:
        return
    what = (f"import holds all of its rows at once, about {MEMORY_PER_FILE_BYTE:g} times the file's size"
            if held is None else
            f"import holds all of its rows but its messages, turn records and version histories (working-memory, "
            f"message and observation-log versions) at once, and those of its other lists "
            f"passed {_size(held)} of its text, about {MEMORY_PER_FILE_BYTE:g} times that in memory")
    raise ExportFormatError(
        f"{name} is {_size(size)}; importing it needs about {_size(need)} of memory ({what}), and this machine "
        f"has {_size(available)} available. Nothing was imported. Close other programs and import again, or "
        "export the resource's threads one at a time ('memory-studio export --thread ID -o FILE') and import "
        "each file.")


def _check_whole_fits(size: int, name: str, available: int | None = None) -> None:
    """A file the piece reader did not take is read whole to say what is wrong with it: refuse that too when
    it needs more memory than is available, saying the file is not a readable export."""
    available = available_memory() if available is None else available
    if available is None or int(size * WHOLE_TEXT_PER_FILE_BYTE) <= available:
        return
    raise ExportFormatError(
        f"{name} is not an export import can read (not UTF-8 JSON holding one object, cut off, or holding a value "
        f"such as NaN that JSON has not), and at {_size(size)} it is too large to be read whole to say where "
        f"({_size(int(size * WHOLE_TEXT_PER_FILE_BYTE))} of memory; {_size(available)} available). Nothing was "
        "imported. Check it with 'python -m json.tool FILE > /dev/null', or export it again.")


def _size(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check an export file. Every error names it as given (``shown_path``), says what is wrong
    and what to do: a missing file, a folder, a device, an unreadable file, an empty or cut-off one, a
    gzip, zip, SQLite or UTF-16 file, bytes that are not UTF-8, and what ``loads`` refuses."""
    name = shown_path(path)
    p = Path(path).expanduser()
    data: dict[str, Any] | None = None
    try:
        mode = p.stat().st_mode
        if stat.S_ISDIR(mode):
            raise ExportFormatError(f"{name} is a folder. {_CHOOSE}")
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):  # a pipe is read (process substitution); a device never ends
            raise ExportFormatError(f"{name} is not a regular file (a device or a socket). {_CHOOSE}")
        if stat.S_ISREG(mode):
            # In pieces: the text is never held whole beside the rows, and the rows of the SPOOLED lists (its
            # messages, turn records and message and observation-log versions) and the working-memory versions
            # (SPOOLED_WITHIN) are kept on disk, so what is held is the other lists' rows, refused once they pass
            # what fits. A file it does not take (any problem) is read whole below, whose errors say what
            # is wrong; a pipe cannot be read twice, so it is too.
            available = available_memory()
            limit = None if available is None else int(available / MEMORY_PER_FILE_BYTE)
            try:
                with p.open("rb") as fh:
                    data = load_pieces(fh, _not_json, parse_float=json_double, parse_int=json_whole, spool=SPOOLED,
                                       spool_within=SPOOLED_WITHIN, held_limit=limit)
            except HeldTooMuch as exc:
                check_fits(p.stat().st_size, name, available, held=exc.held)
                raise  # (it always refuses: the limit is what fits)
            if data is None:
                _check_whole_fits(p.stat().st_size, name)
        raw = p.read_bytes() if data is None else b""
    except FileNotFoundError:
        raise ExportFormatError(f"{name} does not exist. Check the path of the export file.") from None
    except IsADirectoryError:
        raise ExportFormatError(f"{name} is a folder. {_CHOOSE}") from None
    except PermissionError:
        raise ExportFormatError(f"{name} cannot be read: permission denied. Check the file's permissions "
                                "(it must be readable by you), then import again.") from None
    except OSError as exc:  # a name too long, an input/output error, a folder on the path that is a file
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise ExportFormatError(f"{name} cannot be read: {reason}. Check the path of the export file.") from None
    if data is not None:
        validate(data, name=name)
        return data
    for magic, what in _NOT_AN_EXPORT:
        if raw.startswith(magic):
            raise ExportFormatError(f"{name} {what}.")
    if not raw.strip():
        raise ExportFormatError(f"{name} is empty{'' if not raw else ' (white space only)'}. {_CHOOSE} If this "
                                "copy was cut short, copy or export it again.")
    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark (an editor on Windows) is not content
        del raw  # the bytes are not held while the text is parsed: a copy of the file's size less at the peak
    except UnicodeDecodeError as exc:
        if b"\x00" in raw[:8192]:
            raise ExportFormatError(f"{name} is not a text file (it holds binary data). {_CHOOSE}") from None
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ExportFormatError(
            f"{name} is not valid UTF-8: byte {exc.start + 1:,} (line {line:,}) is 0x{raw[exc.start]:02X}. "
            "'memory-studio export' writes UTF-8; an editor that saved the file in another encoding changed it. "
            "Save it as UTF-8, or export it again.") from None
    return loads(text, name=name)


def loads(text: str, *, name: str = "the file") -> dict[str, Any]:
    try:
        data = json.loads(text, parse_constant=_not_json, parse_float=json_double, parse_int=json_whole)
    except NumberBeyondDouble as exc:
        raise ExportFormatError(
            f"{name} holds the number {exc.number}, beyond what a double holds: Mastra (and any JavaScript reader) "
            "reads it as Infinity, which JSON cannot store, and it would be kept as null. 'memory-studio export' "
            "never writes one. Replace it (with a smaller number, or the digits as a string) and import again."
        ) from None
    except _NotJson as exc:
        raise ExportFormatError(
            f"{name} holds {exc.args[0]}, which is not JSON: 'memory-studio export' never writes it, and Mastra "
            "cannot read such a value back from the database. Replace it (with null, or a number) and import again."
        ) from None
    except json.JSONDecodeError as exc:
        if _cut_off(text, exc):
            raise ExportFormatError(
                f"{name} ends before its JSON does ({exc.msg} at line {exc.lineno}, column {exc.colno}): it was "
                "cut off, perhaps by a copy or download that did not finish. Nothing was imported; copy or export "
                "it again."
            ) from None
        raise ExportFormatError(
            f"{name} is not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}). "
            "Import reads the JSON export; a Markdown transcript cannot be imported."
        ) from None
    except RecursionError:  # Python's parser gives up on lists or objects nested about a thousand deep
        raise ExportFormatError(
            f"{name} nests lists or objects too deeply to be read; 'memory-studio export' never writes such a "
            "file. Choose the .json file it wrote."
        ) from None
    except ValueError as exc:  # a number Python will not read (an integer of more than 4,300 digits)
        raise ExportFormatError(
            f"{name} holds a value that cannot be read ({exc.args[0].split(';')[0] if exc.args else exc}); "
            "'memory-studio export' never writes one. Choose the .json file it wrote."
        ) from None
    validate(data, name=name)
    return data  # type: ignore[no-any-return]


class _NotJson(ExportFormatError):
    """A constant Python's parser takes and JSON has not (``NaN``, ``Infinity``, ``-Infinity``)."""


def _not_json(constant: str) -> Any:
    raise _NotJson(constant)


def _cut_off(text: str, exc: json.JSONDecodeError) -> bool:
    """Whether a JSON object's text stops before it ends: the parser ran out at its end, or in a string
    that no line break closes (an export is indented, one value a line, its strings never span lines)."""
    if not text.lstrip().startswith("{"):
        return False
    end = len(text.rstrip())
    return exc.pos >= end or (exc.msg.startswith("Unterminated string") and "\n" not in text[exc.pos:].rstrip())


def validate(data: Any, *, name: str = "the file", max_message_bytes: int | None = DEFAULT_MAX_MESSAGE_BYTES,
             max_working_memory_bytes: int | None = DEFAULT_MAX_WORKING_MEMORY_BYTES) -> None:
    """Raise ``ExportFormatError`` naming the first problem; nothing is read from a database.

    A document whose lists are read from disk (``RowSpool``: ``load`` makes one) is checked once for given limits:
    ``load`` and then ``import_data`` (or ``preview_import``) would otherwise read all its messages again for the
    same checks. What passed is remembered on its spools (``_passed``): the limits, which spool is under which key,
    and a digest of everything else in the document; a spool's rows never change after it is written (every read of
    it is checked against the digests it took), so a document that changed in any way since is checked again."""
    spools = _spools(data)
    passed = _passed(data, spools, max_message_bytes, max_working_memory_bytes)
    if passed is not None and all(s.checked == passed for _key, s in spools):
        return
    _validate(data, name, max_message_bytes, max_working_memory_bytes)
    if passed is not None:
        for _key, spool in spools:
            spool.checked = passed


def _spools(data: Any) -> list[tuple[str, RowSpool]]:
    """The spools a document's rows are read from, under their keys: its ``RowSpool`` lists, and those holding the
    ``SpoolPart`` lists of the rows of a ``SPOOLED_WITHIN`` list."""
    if type(data) is not dict:
        return []
    found = [(key, value) for key, value in data.items() if isinstance(value, RowSpool)]
    for key, inner in SPOOLED_WITHIN.items():
        rows = data.get(key)
        for row in rows if type(rows) is list else []:
            part = row.get(inner) if type(row) is dict else None
            if isinstance(part, SpoolPart) and all(part.spool is not spool for _key, spool in found):
                found.append((key, part.spool))
    return found


def _passed(data: Any, spools: list[tuple[str, RowSpool]], max_message_bytes: int | None,
            max_working_memory_bytes: int | None) -> tuple[Any, ...] | None:
    """What a document holding ``RowSpool`` lists (``spools``) passes ``validate`` as: the limits, which spool is under
    which key, and the SHA-256 of the ``repr`` of the rest (exact for the values a file holds: ``1``, ``1.0``,
    ``True`` and ``"1"`` differ, a key's type too; a ``SpoolPart`` names its spool and records). None for another
    document (it is checked every time)."""
    if not spools:
        return None
    ids = tuple((key, id(spool)) for key, spool in spools)
    try:
        rest = repr([(key, value) for key, value in data.items() if not isinstance(value, RowSpool)])
    except (ValueError, RecursionError):  # an integer too long to write out, values nested too deep
        return None
    digest = hashlib.sha256(rest.encode("utf-8", "surrogatepass")).digest()
    return max_message_bytes, max_working_memory_bytes, ids, digest


def _validate(data: Any, name: str, max_message_bytes: int | None, max_working_memory_bytes: int | None) -> None:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ExportFormatError(
            f"{name} is not a Memory Studio export (expected \"format\": \"{FORMAT}\"). "
            "Export a thread or resource with 'memory-studio export' first."
        )
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ExportFormatError(f"{name} has no valid \"version\"; it was not written by 'memory-studio export'.")
    if version > VERSION:
        raise ExportFormatError(
            f"{name} is export format version {version}; this Memory Studio reads version {VERSION}. "
            "Upgrade Memory Studio to import it."
        )
    if version < 1:
        raise ExportFormatError(f"{name} has an unknown export format version {version}.")
    for key in LIST_KEYS:
        if not isinstance(data.get(key, []), (list, RowSpool)):
            raise ExportFormatError(f"{name}: \"{key}\" must be a list.")
    _require(data, "resources", ("id", "createdAt"), name)
    _require(data, "threads", ("id", "resourceId", "createdAt"), name)
    # The messages (nearly all of a file, read from disk: ``SPOOLED``) are read once for their three checks and
    # ``check_file``'s rules (``checks``), whose problems are raised in the order the checks have always been made.
    checks = sections.MessageChecks(data, name, max_message_bytes=max_message_bytes,
                                    max_working_memory_bytes=max_working_memory_bytes)
    required, twice, orphan = _message_problems(data, name, checks)
    if required is not None:
        raise required
    for key, fields in UNIQUE_KEYS.items():
        if key == "messages":
            if twice is not None:
                raise twice
            continue
        problem = _repeated(data.get(key, []), key, fields, name)
        if problem is not None:
            raise problem
    if orphan is not None:
        raise orphan
    for entry in data.get("workingMemory", []):
        if not isinstance(entry, dict) or entry.get("scope") not in ("resource", "thread") \
                or not isinstance(entry.get("ownerId"), str) \
                or not isinstance(entry.get("versions", []), (list, SpoolPart)):
            raise ExportFormatError(f"{name}: a \"workingMemory\" entry needs scope, ownerId and a versions list.")
    # Version ids are the database's, one id a version: a turn record names the version its prompt had by id, so a
    # second version under an id would take the first one's place in every record that names it.
    version_ids: set[int] = set()
    for entry in data.get("workingMemory", []):
        for v in entry.get("versions", []):
            vid = v.get("id") if isinstance(v, dict) else None
            if isinstance(vid, int) and not isinstance(vid, bool):
                if vid in version_ids:
                    raise ExportFormatError(
                        f"{name}: \"workingMemory\" lists working-memory version id {vid} twice; a turn record names "
                        "its version by id, so keep one of them. Nothing was imported.")
                version_ids.add(vid)
    for row in data.get("observations", []):
        if not isinstance(row, dict) or not isinstance(row.get("id"), str):
            raise ExportFormatError(f"{name}: every observation row needs a string \"id\".")
    named = data.get("turnsTable")
    if named is not None and named != sections.TURNS.table:
        raise ExportFormatError(
            f"{name}: \"turnsTable\" names {named!r}; import writes turn records only to {sections.TURNS.table} "
            "and never writes a table a file names. Remove \"turnsTable\" (or set it to null) to import the file.")
    sections.check_file(data, name, max_message_bytes=max_message_bytes,
                        max_working_memory_bytes=max_working_memory_bytes, messages=checks)


def check_one_resource(data: Mapping[str, Any], name: str = "the file") -> None:
    """An export is the memory of one resource: the resource its ``scope`` names (a thread export: that
    thread's owner). A file whose resources or threads name another resource would write into that
    user's memory (a new thread there, which their resource-scoped recall finds, their resource row),
    while the import's confirmation names the file's scope; such a file is refused, naming the row. The
    importer asks it once the file's resources and threads have passed the rule for new ids (a new thread
    of an owner no client could create is refused for that first)."""
    scope = data.get("scope")
    expected: str | None = None
    said = ""
    if scope is not None:
        if not isinstance(scope, dict) or scope.get("kind") not in ("thread", "resource") \
                or not isinstance(scope.get("id"), str):
            raise ExportFormatError(f'{name}: "scope" must be {{"kind": "thread" or "resource", "id": "..."}} as '
                                    "'memory-studio export' writes it. Nothing was imported.")
        if scope["kind"] == "resource":
            expected, said = scope["id"], f"the export of resource {scope['id']!r}"
        else:
            expected = next((t["resourceId"] for t in data.get("threads", []) if t["id"] == scope["id"]), None)
            if expected is None:
                raise ExportFormatError(printable(
                    f"{name} is the export of thread {scope['id']!r}, which it does not hold. Nothing was imported; "
                    "choose the file 'memory-studio export' wrote."))
            said = f"the export of thread {scope['id']!r} of resource {expected!r}"
    named = [(f"resources[{i}]", r["id"]) for i, r in enumerate(data.get("resources", []))]
    named += [(f"threads[{i}] (id {t['id']!r})", t["resourceId"]) for i, t in enumerate(data.get("threads", []))]
    for where, owner in named:
        if expected is None:
            expected, said = owner, f"about resource {owner!r} (its {where})"
        elif owner != expected:
            raise ExportFormatError(printable(
                f"{name}: {where} belongs to resource {owner!r}, but the file is {said}. An export holds the memory "
                f"of one resource; importing this one would write into the memory of resource {owner!r}. Nothing was "
                "imported; export each resource to a file of its own."))


def _require(data: Mapping[str, Any], key: str, fields: tuple[str, ...], name: str) -> None:
    for i, item in enumerate(data.get(key, [])):
        problem = _missing(item, i, key, fields, name)
        if problem is not None:
            raise problem


def _missing(item: Any, i: int, key: str, fields: tuple[str, ...], name: str) -> ExportFormatError | None:
    """Why row ``i`` of list ``key`` lacks what every such row has, or None."""
    if not isinstance(item, dict):
        return ExportFormatError(f"{name}: {key}[{i}] is not an object.")
    for f in fields:
        if not isinstance(item.get(f), str) or (f == "id" and not item[f]):
            return ExportFormatError(f"{name}: {key}[{i}] needs a string \"{f}\".")
    return None


class _Once:
    """The first row whose key (``fields``) an earlier row of the list had (one row per key: a second one would be
    matched against the first as if it were the target's row)."""

    def __init__(self, key: str, fields: tuple[str, ...], name: str) -> None:
        self.key, self.fields, self.name = key, fields, name
        self.seen: set[Any] = set()

    def repeated(self, item: Any) -> ExportFormatError | None:
        values = tuple(item.get(f) for f in self.fields) if isinstance(item, dict) else ()
        if not all(isinstance(v, str) for v in values) or not values:
            return None  # the section's rules say what is wrong with it
        if values in self.seen:
            shown = repr(values[0]) if len(values) == 1 else repr(values)
            return ExportFormatError(printable(f"{self.name}: {self.key} lists {'/'.join(self.fields)} {shown} twice; "
                                               "keep one of them. Nothing was imported."))
        self.seen.add(values)
        return None


def _repeated(rows: Any, key: str, fields: tuple[str, ...], name: str) -> ExportFormatError | None:
    once = _Once(key, fields, name)
    return next((p for p in map(once.repeated, rows) if p is not None), None)


_MESSAGE_FIELDS = ("id", "threadId", "role", "type", "createdAt", "content")


def _message_problems(data: Mapping[str, Any], name: str,
                      checks: sections.MessageChecks) -> tuple[ExportFormatError | None, ...]:
    """In one pass over the messages: the first lacking a field (then nothing else is asked), the first id listed
    twice, the first of a thread the file does not hold; and ``check_file``'s rules (``checks``, raised later in
    their place)."""
    thread_ids = {t["id"] for t in data.get("threads", [])}
    once = _Once("messages", UNIQUE_KEYS["messages"], name)
    twice: ExportFormatError | None = None
    orphan: ExportFormatError | None = None
    for i, m in enumerate(data.get("messages", [])):
        missing = _missing(m, i, "messages", _MESSAGE_FIELDS, name)
        if missing is not None:
            return missing, None, None
        if twice is None:
            twice = once.repeated(m)
        if orphan is None and m["threadId"] not in thread_ids:
            orphan = ExportFormatError(printable(f"{name}: message {m['id']} belongs to thread {m['threadId']}, "
                                                 "which is not in the file."))
        checks.check(i, m)
    return None, twice, orphan
