"""`memory-studio import` and `export` given the wrong file, as a careless or hostile user gives it (session 22):
every error names the file one way, the path as the user gave it, says what is wrong and what to do, and a
refused file leaves the database byte for byte as it was (the database file and its -wal), ours or Mastra's."""

from __future__ import annotations

import copy
import gzip
import hashlib
import io
import json
import os
import sqlite3
import zipfile
from pathlib import Path
from typing import Any, Callable

import pytest

from core import Memory, Message, open_store
from core.cli import main

from .transfer_data import make_mastra_db, seed_source

Maker = Callable[[dict[str, Any], str], "bytes | None"]  # the file's bytes; None: a folder


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def fingerprint(db: Path) -> tuple[str | None, ...]:
    """sha256 of the database and of its -wal: what a refused import must leave as it was."""
    return tuple(hashlib.sha256(p.read_bytes()).hexdigest() if p.exists() else None
                 for p in (db, db.with_name(db.name + "-wal")))


def as_json(data: Any) -> bytes:
    return json.dumps(data, ensure_ascii=False, indent=2).encode()


def changed(edit: Callable[[dict[str, Any]], Any]) -> Maker:
    def make(data: dict[str, Any], _text: str) -> bytes:
        copied = copy.deepcopy(data)
        edit(copied)
        return as_json(copied)
    return make


def to_mallory(data: dict[str, Any]) -> None:
    """The file's first thread, with everything tied to it, moved to another user's resource."""
    thread = data["threads"][0]
    thread["resourceId"] = "mallory"
    for m in data["messages"]:
        if m["threadId"] == thread["id"]:
            m["resourceId"] = "mallory"
    for row in data["observations"]:
        if row.get("threadId") == thread["id"]:
            row["resourceId"] = "mallory"
    for row in data["turns"]:
        if row.get("thread_id") == thread["id"]:
            row["resource_id"] = "mallory"


def new_thread(thread_id: str) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        data["threads"].append({"id": thread_id, "resourceId": "ada", "title": "", "metadata": None,
                                "createdAt": "2026-03-01T09:00:00.000Z", "updatedAt": "2026-03-01T09:00:00.000Z"})
    return edit


def set_in(key: str, index: int, field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        data[key][index][field] = value
    return edit


def deep(data: dict[str, Any], text: str) -> bytes:
    return (text.rstrip()[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n").encode()


def sqlite_file(_data: dict[str, Any], _text: str) -> bytes:
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE notes (body TEXT)")
    return con.serialize()


def zipped(_data: dict[str, Any], text: str) -> bytes:
    held = io.BytesIO()
    with zipfile.ZipFile(held, "w") as archive:
        archive.writestr("ada.json", text)
    return held.getvalue()


def bad_byte(_data: dict[str, Any], text: str) -> bytes:
    raw = text.encode()
    return raw[:200] + b"\xff" + raw[200:]


CASES: list[tuple[str, Maker, str]] = [
    # (the file; what the error must say, besides naming it first)
    ("cut-off", lambda _d, text: text[: len(text) // 2].encode(), "ends before its JSON does"),
    ("cut-off-in-a-string", lambda _d, text: text[: text.index('"content"') + 20].encode(), "ends before its JSON does"),
    ("empty", lambda _d, _t: b"", "is empty"),
    ("white-space", lambda _d, _t: b"\n  \n", "is empty"),
    ("folder", lambda _d, _t: None, "is a folder"),
    ("json-array", lambda data, _t: as_json([data]), "is not a Memory Studio export"),
    ("csv", lambda _d, _t: b"id,content\nm1,hello\n", "is not JSON"),
    ("gzip", lambda _d, text: gzip.compress(text.encode()), "is gzip-compressed. Decompress it first"),
    ("zip", zipped, "is a zip archive. Extract the .json file"),
    ("sqlite", sqlite_file, "is a SQLite database, not an export file. To copy memory out of it, export it first"),
    ("utf-16", lambda _d, text: text.encode("utf-16"), "is UTF-16 text; import reads UTF-8"),
    ("invalid-utf-8", bad_byte, "is not valid UTF-8: byte 201 (line"),
    ("binary", lambda _d, _t: b"\x00\x01\xfe\xff" * 64, "is not a text file"),
    ("newer-version", changed(lambda d: d.update(version=2)), "Upgrade Memory Studio to import it"),
    ("duplicate-ids", changed(lambda d: d["messages"].append(dict(d["messages"][0]))), "twice; keep one of them"),
    ("duplicate-version-ids", changed(lambda d: d["workingMemory"][0]["versions"].append(
        {**d["workingMemory"][0]["versions"][0], "working_memory": "# Another\n"})), "version id 1 twice"),
    ("nul-byte", changed(set_in("threads", 0, "title", "a\x00b")), "holds a NUL character"),
    ("huge-field", changed(set_in("messages", 0, "content", "x" * 1_100_000)), "over the message size limit"),
    ("deep-nesting", deep, "nests lists or objects too deeply"),
    ("nan", lambda _d, text: text.replace('"metadata": {', '"metadata": {"score": NaN, ', 1).encode(),
     "holds NaN, which is not JSON"),
    ("infinity", lambda _d, text: text.replace('"version": 1', '"version": -Infinity', 1).encode(),
     "holds -Infinity, which is not JSON"),
    # A number beyond a double's range was read as inf and stored as null (the file said 1e400), where the
    # literals NaN and Infinity were refused (session 26).
    ("number-beyond-a-double", lambda _d, text: text.replace('"metadata": {', '"metadata": {"score": 1e400, ', 1).encode(),
     "holds the number 1e400, beyond what a double holds"),
    ("whole-number-beyond-a-double", lambda _d, text: text.replace(
        '"metadata": {', '"metadata": {"score": -1' + "0" * 400 + ", ", 1).encode(), "digits), beyond what a double holds"),
    ("time-out-of-range", changed(set_in("messages", 0, "createdAt", "99999-01-01T00:00:00.000Z")),
     "is not an ISO-8601 time"),
    ("message-of-another-resource", changed(set_in("messages", 0, "resourceId", "mallory")), "belongs to 'ada'"),
    # refused inside the import's transaction, where the errors said "the file" / "The file's ..." (session 22)
    ("second-resource", changed(to_mallory), "belongs to resource 'mallory', but the file is the export of"),
    ("new-id-with-an-escape", changed(new_thread("t-\x1b[31m")), "cannot be a new id"),
    ("newer-columns", changed(set_in("observations", 0, "newcol", 1)), "the file comes from a newer schema"),
]


@pytest.fixture(scope="module")
def export_text(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("source")
    seed_source(folder / "source.db")
    code, _out, err = run("export", "--db", str(folder / "source.db"), "--resource", "ada",
                          "-o", str(folder / "ada.json"))
    assert code == 0, err
    return (folder / "ada.json").read_text(encoding="utf-8")


def ours(db: Path) -> None:
    with open_store(db) as store:
        Memory(store).save_messages([Message.user("bob's note", id="b-note", thread_id="t-bob-own",
                                                  resource_id="bob")])


@pytest.mark.parametrize("kind", ["ours", "mastra"])
@pytest.mark.parametrize("case,make,says", CASES, ids=[c[0] for c in CASES])
def test_a_refused_file_is_named_as_given_says_what_to_do_and_changes_no_byte(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, export_text: str, kind: str, case: str, make: Maker,
        says: str) -> None:
    db = tmp_path / "target.db"
    ours(db) if kind == "ours" else make_mastra_db(db)
    (tmp_path / "files").mkdir()
    content = make(json.loads(export_text), export_text)
    if content is None:
        (tmp_path / "files" / "ada").mkdir()
        given = "./files/ada/"
    else:
        (tmp_path / "files" / "ada.json").write_bytes(content)
        given = "./files/ada.json"
    monkeypatch.chdir(tmp_path)
    before = fingerprint(db)
    for dry_run in ((), ("--dry-run",)):
        code, out, err = run("import", "--db", str(db), given, *dry_run)
        assert code == 1 and out == "", (case, err)
        # the path as given, first, every time: not "the file", not "files/ada.json", not the folder without its "/"
        assert err.startswith(f"error: {given} ") or err.startswith(f"error: {given}: "), err
        assert "the file:" not in err and "The file's" not in err
        assert says in err, err
        assert err.count("\n") == 1 and "Traceback" not in err  # one line
    assert fingerprint(db) == before


def test_a_device_is_refused_without_reading_it(tmp_path: Path) -> None:
    """/dev/zero never ends: reading it would fill the memory. A device is refused by what it is."""
    db = tmp_path / "target.db"
    ours(db)
    before = fingerprint(db)
    for device in ("/dev/zero", "/dev/null"):
        if not os.path.exists(device):
            pytest.skip(f"no {device} here")
        code, _out, err = run("import", "--db", str(db), device)
        assert code == 1 and err.startswith(f"error: {device} is not a regular file"), err
    assert fingerprint(db) == before


def test_ids_already_here_with_other_content_are_kept_and_reported(tmp_path: Path, export_text: str) -> None:
    """Not an error: the target's rows stay as they are unless --overwrite, and the report names each."""
    db = tmp_path / "target.db"
    dump = tmp_path / "ada.json"
    dump.write_text(export_text, encoding="utf-8")
    assert run("import", "--db", str(db), str(dump))[0] == 0
    data = json.loads(export_text)
    data["threads"][0]["title"] = "Renamed in the file"
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data), encoding="utf-8")
    before = fingerprint(db)
    code, out, err = run("import", "--db", str(db), str(edited))
    assert code == 0 and "1 row that differs kept as it is (overwrite replaces it)" in out
    assert f"thread {data['threads'][0]['id']}: differs here (title)" in err
    assert fingerprint(db) == before


def test_export_errors_name_the_output_as_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seed_source(tmp_path / "source.db")
    (tmp_path / "out").mkdir()
    monkeypatch.chdir(tmp_path)
    for given, says in (("./missing/ada.json", "Cannot write ./missing/ada.json: the folder missing does not exist"),
                        ("./out/", "./out/ is a folder; give a file name for the export")):
        code, out, err = run("export", "--db", "source.db", "--resource", "ada", "-o", given)
        assert code == 1 and out == "" and err.startswith(f"error: {says}"), err
    assert list((tmp_path / "out").iterdir()) == []
