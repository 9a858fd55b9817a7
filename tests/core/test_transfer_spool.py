"""A large import is bounded in memory: the file's messages are kept on disk while it is read (``RowSpool``), checked
and written a chunk at a time, in the one transaction that makes the import all-or-nothing."""

from __future__ import annotations

import io
import json
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core import Memory, Message, open_store
from core.cli import main
from core.transfer import export_data, import_data, preview_import, render
from core.transfer.errors import ExportFormatError
from core.transfer.format import check_fits, load, loads
from core.transfer import spool
from core.transfer.spool import RowSpool, SpoolError, sorted_rows
from core.transfer.stream_json import HeldTooMuch, load_pieces

MESSAGES = 1200  # more than two of the importer's chunks (500)


def _export(tmp_path: Path, *, text_bytes: int = 200, bad_at: int | None = None) -> tuple[Path, dict[str, Any]]:
    """An export of one thread of ``MESSAGES`` messages (``bad_at``: that one's id a new id no client could make)."""
    with open_store(tmp_path / "source.db") as source:
        memory = Memory(source)
        memory.create_thread(thread_id="t1", resource_id="ada")
        memory.save_messages([Message.user(f"{i} " + "x" * text_bytes, thread_id="t1", resource_id="ada")
                              for i in range(MESSAGES)])
        text = render(export_data(source, resource_id="ada"), "json")
    data = json.loads(text)
    if bad_at is not None:
        data["messages"][bad_at]["id"] = "m\u202e1gp.exe"
        text = json.dumps(data, indent=2)
    path = tmp_path / "ada.json"
    path.write_text(text, encoding="utf-8")
    return path, data


def _stored(store: Any) -> list[tuple[Any, ...]]:
    with store.db.read() as conn:
        return [tuple(r) for r in conn.exec_driver_sql(
            'SELECT id, thread_id, content, role, type, "createdAt", "resourceId" FROM mastra_messages ORDER BY id')]


def test_the_messages_are_read_from_disk_and_import_as_before(store, tmp_path):
    path, data = _export(tmp_path)
    loaded = load(path)
    assert isinstance(loaded["messages"], RowSpool) and len(loaded["messages"]) == MESSAGES
    assert list(loaded["messages"]) == data["messages"] and list(loaded["messages"]) == data["messages"]
    assert isinstance(loaded["turns"], RowSpool)  # (the turn records are spooled too: none in this file)
    assert {k: list(v) if isinstance(v, RowSpool) else v for k, v in loaded.items() if k != "messages"} \
        == {k: v for k, v in data.items() if k != "messages"}
    report = import_data(store, loaded)
    assert report.written["messages"] == MESSAGES and len(report.message_ids) == MESSAGES
    assert [(r[0], r[2]) for r in _stored(store)] == sorted((m["id"], m["content"]) for m in data["messages"])
    again = import_data(store, load(path))  # identical rows are left alone, chunk by chunk too
    assert again.written["messages"] == 0 and again.unchanged["messages"] == MESSAGES


def test_a_message_refused_after_chunks_were_written_leaves_nothing_written(store, tmp_path):
    """The messages are written a chunk at a time; one refused in the third chunk (a new id no client could make)
    rolls back the two chunks written before it with the rest of the import: the database is as it was."""
    path, _ = _export(tmp_path, bad_at=MESSAGES - 10)
    before = _stored(store)
    with pytest.raises(ExportFormatError, match=r"message 'm\\u202e1gp.exe' would be new .* Nothing was imported"):
        import_data(store, load(path))
    assert _stored(store) == before
    with store.db.read() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM mastra_threads").scalar() == 0


def _import_traced(store: Any, path: Path) -> tuple[Any, int]:
    """``load`` and ``import_data`` of ``path``: the report, and the most Python held at once (bytes)."""
    tracemalloc.start()
    try:
        return import_data(store, load(path)), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.libsql_only
def test_a_large_import_holds_a_fraction_of_its_messages(store, tmp_path):
    """Every message was held at once (the parsed document, then every row to insert): a file's size in memory at
    least. Now a chunk of them is: what Python allocates at the peak of load and import is a small part of the
    file (10,000 messages of 3 KB: 33 MB of JSON; each message's id and thread are kept for the checks)."""
    small, data = _export(tmp_path)
    preview_import(store, load(small))  # (the modules an import loads are loaded before the count starts)
    first = data["messages"][0]
    content = json.loads(first["content"])
    content["parts"] = [{"type": "text", "text": "y" * 1500}]
    content["content"] = "y" * 1500
    data["messages"] = [dict(first, id=f"m{i:06d}", content=json.dumps(content)) for i in range(10_000)]
    path = tmp_path / "big.json"
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    del data
    size = path.stat().st_size
    report, peak = _import_traced(store, path)
    assert report.written["messages"] == 10_000
    assert size > 30_000_000 and peak < size / 4, (size, peak)


def test_a_spool_that_cannot_be_written_says_where_and_imports_nothing(tmp_path, monkeypatch):
    path, _ = _export(tmp_path)
    not_a_folder = tmp_path / "tmp-is-a-file"
    not_a_folder.write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(not_a_folder))  # TMPDIR pointing at a file
    with pytest.raises(SpoolError) as caught:
        load(path)
    message = str(caught.value)
    assert str(not_a_folder) in message and "Nothing was imported" in message and "TMPDIR" in message
    out, err = io.StringIO(), io.StringIO()
    assert main(["import", "--db", str(tmp_path / "target.db"), str(path)], out=out, err=err) == 1
    assert "TMPDIR" in err.getvalue() and not (tmp_path / "target.db").exists()


def test_the_rows_held_in_memory_are_refused_once_they_pass_what_fits(tmp_path):
    """The messages are on disk; every other list is held. Their text is counted as it is read, and a file whose
    held rows pass what fits is refused then, naming what is held; the messages never count."""
    path, _ = _export(tmp_path)
    with path.open("rb") as fh:
        assert load_pieces(fh, lambda c: c, spool=("messages",), held_limit=2000) is not None  # one thread, one resource
    with path.open("rb") as fh, pytest.raises(HeldTooMuch):
        load_pieces(fh, lambda c: c, held_limit=2000)  # the messages held: past it
    with pytest.raises(ExportFormatError) as caught:
        check_fits(20_000_000_000, "big.json", available=2_000_000_000, held=1_500_000_000)
    message = str(caught.value)
    assert "big.json is 20.0 GB" in message
    assert ("all of its rows but its messages, turn records and version histories (working-memory, message and "
            "observation-log versions) at once") in message
    assert "1.5 GB of its text" in message and "about 2.2 GB of memory" in message and "Nothing was imported" in message
    check_fits(20_000_000_000, "big.json", available=2_000_000_000, held=1_000_000_000)  # fits: no error


def test_no_section_checked_before_the_messages_names_a_message():
    """``check_file`` notes each message's thread as it checks the messages (read once from disk): a section
    checked before them that named a message would find none."""
    import core.transfer.importer  # noqa: F401 - every section registered
    from core.transfer.sections import sections_before_messages_ask_no_message

    assert sections_before_messages_ask_no_message()


def test_a_loaded_file_is_checked_once_and_again_whenever_it_changed(store, tmp_path, monkeypatch):
    """load checks every row, and import_data does not read the messages again for the same checks; a document
    changed since (any value beside the spooled rows), or checked for other limits, is checked again."""
    from core.transfer import sections

    path, _ = _export(tmp_path)
    checks: list[int] = []
    real = sections.check_file
    monkeypatch.setattr(sections, "check_file", lambda data, name, **kw: (checks.append(1), real(data, name, **kw)))
    loaded = load(path)
    assert len(checks) == 1
    report = preview_import(store, loaded)
    assert len(checks) == 1 and report.written["messages"] == MESSAGES

    changed = load(path)
    changed["threads"][0]["title"] = "a\x00b"  # a value the checks refuse, put in after load checked the file
    with pytest.raises(ExportFormatError, match=r"threads\[0\] \(id 't1'\) is refused: its 'title' holds a NUL"):
        import_data(store, changed)
    changed["threads"][0]["title"] = None
    changed["threads"][0][1] = "x"  # written out as JSON, the same as a field "1", which passes; a field must be text
    with pytest.raises(ExportFormatError, match=r"has a field named 1, which cannot be a column"):
        import_data(store, changed)
    with pytest.raises(ExportFormatError, match=r"messages\[0\] .* is refused: its content is .* bytes, over the "
                                                r"message size limit of 100 bytes"):
        import_data(store, load(path), max_message_bytes=100)  # other limits: checked for those
    assert _stored(store) == []
    assert import_data(store, loaded).written["messages"] == MESSAGES


def test_a_spool_changed_on_disk_is_refused_and_nothing_is_written(store, tmp_path):
    """The rows import read and checked are the ones it writes: a spool whose bytes changed after load (another
    program writing in the temporary folder) is refused when read, here after two chunks were written, and the
    import leaves the database as it was."""
    path, _ = _export(tmp_path)
    loaded = load(path)
    spooled = Path(loaded["messages"]._path)
    raw = bytearray(spooled.read_bytes())
    raw[-20] ^= 1  # in the last batch (rows 1024 on): after the importer's first two chunks
    spooled.write_bytes(bytes(raw))
    with pytest.raises(SpoolError, match=r"changed \(its bytes are not the ones import wrote\).* Nothing was imported"):
        import_data(store, loaded)
    assert _stored(store) == []
    spooled.unlink()
    with pytest.raises(SpoolError, match=r"changed \(it cannot be opened: No such file or directory\)"):
        list(loaded["messages"])


def test_a_message_refused_by_the_rules_asked_in_validates_pass_is_raised_in_its_place(tmp_path):
    """validate asks check_file's message rules in its own pass over the messages; a refusal found there is raised
    where check_file always raised it: after validate's own checks and the sections before the messages, before
    the sections after them."""
    path, data = _export(tmp_path)
    data["messages"][5]["role"] = "system"

    def refusal(change: Any) -> str:
        changed = json.loads(json.dumps(data))
        change(changed)
        path.write_text(json.dumps(changed), encoding="utf-8")
        with pytest.raises(ExportFormatError) as caught:
            load(path)
        return str(caught.value)

    first = refusal(lambda d: None)
    assert "messages[5] (id " in first and "a system message is never stored" in first
    no_id = [{"scope": "thread"}]
    assert 'every observation row needs a string "id"' in refusal(lambda d: d.update(observations=no_id))
    assert "threads[0] (id 't1') is refused: its 'title' holds a NUL" in refusal(
        lambda d: d["threads"][0].update(title="a\x00b"))
    assert "messages[5] (id " in refusal(lambda d: d.update(observations=[{"id": "o1", "scope": "nowhere"}]))


# -- version histories: spooled and sorted on disk --------------------------------------------------------------
@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["2026-03-01T09:00:00.000Z", "2026-03-01T08:00:00.000Z", "None", ""]),
                          st.integers(0, 5), st.text(max_size=30)), max_size=60),
       st.integers(1, 400))
def test_sorted_rows_gives_exactly_what_sorted_gives_and_leaves_no_run_behind(rows, held_bytes):
    """However few bytes it may hold (down to one row per run on disk), the order is ``sorted``'s, ties in file
    order included (the ``n`` field tells rows with equal keys apart)."""
    data = [{"createdAt": t, "id": i, "n": n, "text": text} for n, (t, i, text) in enumerate(rows)]

    def key(r: dict[str, Any]) -> tuple[str, int]:
        return r["createdAt"], r["id"]

    with tempfile.TemporaryDirectory() as folder:
        before, tempfile.tempdir = tempfile.tempdir, folder
        try:
            assert list(sorted_rows(iter(data), key, held_bytes=held_bytes)) == sorted(data, key=key)
            assert list(Path(folder).iterdir()) == []  # every run was deleted
        finally:
            tempfile.tempdir = before


def _versioned_db(path: Path, resource: str, edits: int) -> None:
    """A database with a thread of ``resource`` whose first message was edited ``edits`` times (version ids
    1..edits)."""
    with open_store(path) as store:
        memory = Memory(store)
        memory.create_thread(thread_id=f"t-{resource}", resource_id=resource)
        memory.save_messages([Message.user(f"{resource} {i}", thread_id=f"t-{resource}", resource_id=resource)
                              for i in range(3)])
        first = memory.recall(thread_id=f"t-{resource}", per_page=False).messages[0]
        for n in range(edits):
            memory.edit_message(first.id, resource_id=resource, text=f"{resource} edit {n}")


def _versions(path: Path) -> list[tuple[Any, ...]]:
    with open_store(path) as store, store.db.read() as conn:
        return [tuple(r) for r in conn.exec_driver_sql(
            'SELECT id, message_id, thread_id, resource_id, op, author, before_row, after_row, note, "createdAt" '
            "FROM memory_studio_message_versions ORDER BY id")]


def test_message_versions_are_read_from_disk_sorted_there_and_stored_as_from_a_list(tmp_path, monkeypatch):
    """A file's message versions are spooled and, when they do not fit what the sort may hold, sorted on disk: the
    target gets exactly the rows it gets from the same document held as lists, oldest first. The file lists them
    newest first and the target already has versions 1..3, so the ids given to those that collide depend on the
    order they are written in."""
    _versioned_db(tmp_path / "source.db", "ada", 8)
    with open_store(tmp_path / "source.db") as source:
        data = json.loads(render(export_data(source, resource_id="ada"), "json"))
    data["messageVersions"].reverse()
    assert len(data["messageVersions"]) == 8
    path = tmp_path / "ada.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    for name in ("from_list.db", "from_disk.db"):
        _versioned_db(tmp_path / name, "bob", 3)
    with open_store(tmp_path / "from_list.db") as target:
        assert import_data(target, json.loads(path.read_text(encoding="utf-8"))).written["messageVersions"] == 8
    monkeypatch.setattr(spool, "SORT_BYTES", 1)  # every version a run of its own on disk
    made: list[RowSpool] = []
    monkeypatch.setattr(spool, "_run", lambda *a: made.append(real_run(*a)) or made[-1])
    loaded = load(path)
    assert isinstance(loaded["messageVersions"], RowSpool)
    with open_store(tmp_path / "from_disk.db") as target:
        assert import_data(target, loaded).written["messageVersions"] == 8
    assert len(made) == 8
    mine = [r for r in _versions(tmp_path / "from_disk.db") if r[2] == "t-ada"]  # (each target's own: bob's)
    assert mine == [r for r in _versions(tmp_path / "from_list.db") if r[2] == "t-ada"]
    assert min(r[0] for r in mine) == 4  # (1..3 were taken: ids were given in the order the rows were written)
    # by id: the edits in the order they were made
    assert [json.loads(json.loads(r[7])["content"])["content"] for r in mine] == [f"ada edit {n}" for n in range(8)]


real_run = spool._run


def test_a_sorted_run_changed_on_disk_is_refused(monkeypatch):
    """The runs of the sort on disk are spools: one another program changes before the merge reads it is
    ``SpoolError`` (the import's transaction then rolls back, as for the file's spools), and every run is deleted."""
    made: list[RowSpool] = []
    monkeypatch.setattr(spool, "_run", lambda *a: made.append(real_run(*a)) or made[-1])
    monkeypatch.setattr(spool, "RUN_RECORD_BYTES", 1)  # a record per row: the merge reads each run a row at a time
    rows = [{"createdAt": f"2026-03-01T09:00:{n % 60:02d}.000Z", "id": n, "text": "x" * 2000} for n in range(300)]
    ordered = sorted_rows(iter(rows), lambda r: (r["createdAt"], r["id"]), "messageVersions", held_bytes=40_000)
    assert next(ordered) == rows[0]  # every run is written before the first row comes
    assert len(made) > 2
    with open(made[-1]._path, "r+b") as fh:
        fh.seek(-10, 2)  # (its last record, past what the merge has read: a run is 40 KB, read 8 KB at a time)
        fh.write(b"\x00")
    with pytest.raises(SpoolError, match="that file changed .* Nothing was imported"):
        list(ordered)
    assert not any(Path(run._folder).exists() for run in made)


@pytest.mark.parametrize("spoil, says", [
    (lambda v: v[3].update(op="bogus"), r"messageVersions\[3\] \(message_id '.*'\) is refused: its op 'bogus'"),
    (lambda v: v[5].update(thread_id="t-elsewhere"), r"messageVersions\[5\] .* is refused: it names thread"),
    (lambda v: v[7].update(message_id="m-other"), r"messageVersions\[7\] .* its before_row is message .* not the "),
])
def test_message_versions_read_from_disk_are_refused_as_from_text(tmp_path, spoil, says):
    """Spooled, the versions are checked by the same rules in the same order: the same message as ``loads``."""
    _versioned_db(tmp_path / "source.db", "ada", 8)
    with open_store(tmp_path / "source.db") as source:
        data = json.loads(render(export_data(source, resource_id="ada"), "json"))
    spoil(data["messageVersions"])
    path = tmp_path / "ada.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ExportFormatError, match=says) as from_disk:
        loaded = load(path)
        assert isinstance(loaded["messageVersions"], RowSpool)  # (only when the file passes)
        with open_store(tmp_path / "target.db") as target:
            import_data(target, loaded)
    with pytest.raises(ExportFormatError) as from_text:
        loaded = loads(path.read_text(encoding="utf-8"), name=str(path))
        with open_store(tmp_path / "target2.db") as target:
            import_data(target, loaded, name=str(path))
    assert str(from_disk.value) == str(from_text.value)


# -- working-memory versions: inside their entries, kept on disk ----------------------------------------------------
def _wm_export(tmp_path: Path, versions: int = 6, *, text_bytes: int = 40) -> tuple[Path, dict[str, Any]]:
    """An export of ada whose resource working memory has ``versions`` versions and whose thread t1's has 3, each
    entry's listed newest first (so the import has to sort them)."""
    with open_store(tmp_path / "wm-source.db") as source:
        memory = Memory(source, {"working_memory": {"enabled": True, "scope": "resource"}})
        per_thread = Memory(source, {"working_memory": {"enabled": True, "scope": "thread"}})
        memory.create_thread(thread_id="t1", resource_id="ada")
        memory.save_messages([Message.user("hello", thread_id="t1", resource_id="ada")])
        for n in range(versions):
            memory.update_working_memory(resource_id="ada", working_memory=f"# Ada {n}\n" + "x" * text_bytes)
        for n in range(3):
            per_thread.update_working_memory(thread_id="t1", resource_id="ada", working_memory=f"# Thread {n}\n")
        data = json.loads(render(export_data(source, resource_id="ada"), "json"))
    for entry in data["workingMemory"]:
        entry["versions"].reverse()
    assert sorted(len(e["versions"]) for e in data["workingMemory"]) == sorted([3, versions])
    path = tmp_path / "wm.json"
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path, data


def _as_lists(value: Any) -> Any:
    """A loaded document with every spool and part read into a list."""
    if isinstance(value, (RowSpool, spool.SpoolPart)):
        return [_as_lists(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_lists(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_lists(v) for v in value]
    return value


def test_the_versions_in_working_memory_entries_are_parsed_as_json_loads_makes_them(tmp_path, monkeypatch):
    """Each ``workingMemory`` entry is parsed key by key and its ``versions`` list kept in a spool shared by the
    entries: read back, every value is the one ``json.loads`` makes, at every piece boundary; a row that is not an
    object, a ``versions`` that is not a list, a list of that name elsewhere are left as they are; a key given twice
    keeps its last value in its first place, as ``json`` does. A file it does not take leaves no spool behind."""
    from core.transfer.format import _not_json

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    text = ('{"format": "memory-studio-export", "workingMemory": ['
            '{"scope": "resource", "ownerId": "ada", "value": "é", "versions": [{"id": 1, "n": 1e21, '
            '"s": "é \\" 😀 \\ud83d\\ude00", "l": [1, [2, {"versions": [3]}]], "f": -0.5}, {"id": 2}]}, '
            '{"versions": [{"id": 3}], "scope": "thread", "ownerId": "t", "versions": [{"id": 4}, {"id": 5}]}, '
            '{"scope": "thread", "ownerId": "u", "versions": []}, {}, '
            '"an entry", 7, null, [{"versions": [1]}], {"versions": "not a list", "x": {"versions": [6]}}], '
            '"other": [{"versions": [8]}], "versions": [9]}')
    raw = text.encode("utf-8")
    want = json.loads(text)
    for chunk in (1, 2, 3, 5, 64, 1 << 20):
        got = load_pieces(io.BytesIO(raw), _not_json, chunk, spool_within={"workingMemory": "versions"})
        assert got is not None
        entries = got["workingMemory"]
        assert [type(e.get("versions")).__name__ if isinstance(e, dict) else None for e in entries] == \
            ["SpoolPart", "SpoolPart", "SpoolPart", "NoneType", None, None, None, None, "str"]
        assert _as_lists(got) == want and [list(e) for e in entries[:2]] == [list(e) for e in want["workingMemory"][:2]]
        assert len(entries[1]["versions"]) == 2 and not entries[2]["versions"]
        assert got["other"] == [{"versions": [8]}] and got["versions"] == [9]  # not an entry's: held as it was
    spoolers = [p for p in tmp_path.iterdir() if p.name.startswith("memory-studio-import-")]
    del got, entries
    import gc

    gc.collect()
    assert all(not p.exists() for p in spoolers)  # (deleted with the document)
    broken = [raw[:raw.index(b'{"id": 2}') + 4], raw.replace(b'"f": -0.5', b'"f": NaN'),
              raw.replace(b'{"id": 4}, {"id": 5}', b'{"id": 4} {"id": 5}'), raw.replace(b'"ownerId": "t",', b'"ownerId" "t",'),
              raw.replace(b'{"id": 2}]}', b'{"id": 2}]')]
    for bad in broken:
        for chunk in (1, 7, 1 << 20):
            assert load_pieces(io.BytesIO(bad), _not_json, chunk, spool_within={"workingMemory": "versions"}) is None
            assert [p.name for p in tmp_path.iterdir() if p.name.startswith("memory-studio-import-")] == []


def test_working_memory_versions_kept_on_disk_are_not_counted_as_held(tmp_path):
    """The held-rows limit counts what stays in memory: an entry's value and keys, not its versions on disk."""
    path, _ = _wm_export(tmp_path, versions=40, text_bytes=2000)
    assert path.stat().st_size > 80_000
    within = {"workingMemory": "versions"}
    with path.open("rb") as fh:
        assert load_pieces(fh, lambda c: c, spool=("messages",), spool_within=within, held_limit=10_000) is not None
    with path.open("rb") as fh, pytest.raises(HeldTooMuch):
        load_pieces(fh, lambda c: c, spool=("messages",), held_limit=10_000)  # the versions held: past it


def test_working_memory_versions_are_read_from_disk_sorted_there_and_stored_as_from_a_list(tmp_path, monkeypatch):
    """``load`` keeps each entry's versions on disk (a ``SpoolPart`` of one spool); past what the sort may hold they
    are sorted on disk, one run a version here: previewed and imported into a target whose ids 1..3 are taken, the
    report and the rows are exactly those the document held in memory gives, ids in the order of the edits."""
    path, data = _wm_export(tmp_path)
    loaded = load(path)
    assert all(isinstance(e["versions"], spool.SpoolPart) for e in loaded["workingMemory"])
    assert _as_lists(loaded["workingMemory"]) == data["workingMemory"]
    for name in ("from_list.db", "from_disk.db"):
        with open_store(tmp_path / name) as target:
            taken = Memory(target, {"working_memory": {"enabled": True, "scope": "resource"}})
            for n in range(3):
                taken.update_working_memory(resource_id="bob", working_memory=f"# Bob {n}\n")
    with open_store(tmp_path / "from_list.db") as target:
        from_list = [preview_import(target, json.loads(path.read_text(encoding="utf-8"))),
                     import_data(target, json.loads(path.read_text(encoding="utf-8")))]
    monkeypatch.setattr(spool, "SORT_BYTES", 1)
    made: list[RowSpool] = []
    monkeypatch.setattr(spool, "_run", lambda *a: made.append(real_run(*a)) or made[-1])
    with open_store(tmp_path / "from_disk.db") as target:
        from_disk = [preview_import(target, loaded), import_data(target, loaded)]
    assert len(made) == 2 * 9  # previewed and imported: every version a run of its own on disk
    for disk, held in zip(from_disk, from_list):
        assert (disk.written, disk.unchanged, disk.notes, disk.conflicts) == \
            (held.written, held.unchanged, held.notes, held.conflicts)
    assert from_disk[1].written["workingMemoryVersions"] == 9

    def versions(name: str) -> list[tuple[Any, ...]]:
        with open_store(tmp_path / name) as store, store.db.read() as conn:
            return [tuple(r) for r in conn.exec_driver_sql("SELECT * FROM memory_studio_wm_versions ORDER BY id")]

    mine = [r for r in versions("from_disk.db") if r[2] != "bob"]  # (each target's own: bob's)
    assert mine == [r for r in versions("from_list.db") if r[2] != "bob"] and len(mine) == 9
    ada = [r for r in mine if r[2] == "ada"]
    assert min(r[0] for r in ada) == 4 and [r[3].split("\n")[0] for r in ada] == [f"# Ada {n}" for n in range(6)]
    with open_store(tmp_path / "from_disk.db") as target:
        again = import_data(target, load(path))  # matched by content, from disk too
    assert again.unchanged["workingMemoryVersions"] == 9 and not again.written.get("workingMemoryVersions")


def _spoil_wm(data: dict[str, Any], change: Any) -> None:
    resource = next(e for e in data["workingMemory"] if e["scope"] == "resource")
    thread = next(e for e in data["workingMemory"] if e["scope"] == "thread")
    change(resource, thread)


@pytest.mark.parametrize("change, says", [
    (lambda r, t: r["versions"][2].update(id="abc"),
     r"workingMemoryVersions\[2\] \(owner_id 'ada'\) is refused: its id must be a whole number"),
    (lambda r, t: t["versions"][1].update(createdAt="last week"), r"workingMemoryVersions\[\d\] \(owner_id 't1'\) is "
                                                                  r"refused: its createdAt 'last week'"),
    (lambda r, t: t["versions"].append("a version"), r"workingMemory\[\d\] \(ownerId 't1'\) is refused: one of its "
                                                     "versions is not an object"),
    (lambda r, t: r["versions"][4].update(owner_id="mallory"),
     r"workingMemory\[\d\] \(ownerId 'ada'\) is refused: its version .* belongs to resource 'mallory'"),
    (lambda r, t: t["versions"].append(dict(r["versions"][0])), r"lists working-memory version id \d+ twice"),
    (lambda r, t: r.update(versions="none"), 'a "workingMemory" entry needs scope, ownerId and a versions list'),
])
def test_working_memory_versions_read_from_disk_are_refused_as_from_text(tmp_path, change, says):
    """Kept on disk, the versions are checked by the same rules in the same order, each refusal naming the row where
    it is in the file: the same message as ``loads`` gives, and nothing is written."""
    path, data = _wm_export(tmp_path)
    _spoil_wm(data, change)
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ExportFormatError, match=says) as from_disk:
        load(path)
    with pytest.raises(ExportFormatError) as from_text:
        loads(path.read_text(encoding="utf-8"), name=str(path))
    assert str(from_disk.value) == str(from_text.value)
    assert main(["import", "--db", str(tmp_path / "target.db"), str(path)], out=io.StringIO(), err=io.StringIO()) == 1
    assert not (tmp_path / "target.db").exists()


def test_a_loaded_file_whose_working_memory_versions_changed_is_checked_again(store, tmp_path, monkeypatch):
    """A loaded document is checked once, its versions on disk included; one whose entries were given each other's
    versions since (the same spool, other records) is checked again, and refused."""
    from core.transfer import sections

    path, _ = _wm_export(tmp_path)
    checks: list[int] = []
    real = sections.check_file
    monkeypatch.setattr(sections, "check_file", lambda data, name, **kw: (checks.append(1), real(data, name, **kw)))
    loaded = load(path)
    preview_import(store, loaded)
    assert len(checks) == 1
    resource, thread = loaded["workingMemory"]
    resource["versions"], thread["versions"] = thread["versions"], resource["versions"]
    with pytest.raises(ExportFormatError, match=r"workingMemory\[0\] \(ownerId 'ada'\) is refused: its version \d+ "
                                                r"belongs to thread 't1', not to this entry's resource 'ada'"):
        import_data(store, loaded)
    assert len(checks) == 2
    resource["versions"], thread["versions"] = thread["versions"], resource["versions"]  # as it was when it passed
    assert import_data(store, loaded).written["workingMemoryVersions"] == 9 and len(checks) == 2


def test_a_working_memory_spool_changed_on_disk_is_refused_and_nothing_is_written(store, tmp_path):
    path, _ = _wm_export(tmp_path)
    loaded = load(path)
    shared = loaded["workingMemory"][1]["versions"].spool
    raw = bytearray(Path(shared._path).read_bytes())
    raw[-20] ^= 1  # in the thread's versions
    Path(shared._path).write_bytes(bytes(raw))
    with pytest.raises(SpoolError, match=r"workingMemory versions in .* changed \(its bytes are not the ones import "
                                         r"wrote\).* Nothing was imported"):
        import_data(store, loaded)
    with store.db.read() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM memory_studio_wm_versions").scalar() == 0
        assert conn.exec_driver_sql("SELECT count(*) FROM mastra_threads").scalar() == 0


def test_a_large_working_memory_history_is_imported_holding_a_fraction_of_it(store, tmp_path, monkeypatch):
    """Every version was held at once (in its entry, then in the list the importer sorted): the history's size in
    memory at least. Now a batch of them is, and the sort holds what it may (here 2 MB, as 32 MB is past a history
    of 32 MB); Python's peak over load and import is a small part of the file (4,000 versions of 8 KB)."""
    small, data = _wm_export(tmp_path)
    preview_import(store, load(small))  # (the modules an import loads are loaded before the count starts)
    entry = data["workingMemory"][0]
    first = entry["versions"][0]
    entry["versions"] = [dict(first, id=n + 1, working_memory=f"# Ada {n}\n" + "y" * 8000,
                              createdAt=f"2026-01-01T00:{n * 7 % 60:02d}:{n % 60:02d}.{n % 1000:03d}Z")
                         for n in range(4000)]
    data["workingMemory"][1]["versions"] = []
    path = tmp_path / "big.json"
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    del data, entry
    size = path.stat().st_size
    monkeypatch.setattr(spool, "SORT_BYTES", 2 << 20)
    monkeypatch.setattr(spool, "RUN_RECORD_BYTES", 64 << 10)
    report, peak = _import_traced(store, path)
    assert report.written["workingMemoryVersions"] == 4000
    assert size > 30_000_000 and peak < size / 4, (size, peak)


def _export_file(store: Any, path: Path, *, streamed: bool) -> tuple[dict[str, Any], int]:
    """Export ada as 'memory-studio export --output' writes it (a fixed clock: files to compare byte for byte), and
    the most Python held at once (bytes) while it read and wrote."""
    from datetime import datetime, timezone

    from core.timeutil import FixedClock
    from core.transfer import render_chunks, write_atomically

    tracemalloc.start()
    try:
        data = export_data(store, resource_id="ada", streamed=streamed,
                           clock=FixedClock(datetime(2026, 1, 1, tzinfo=timezone.utc)))
        write_atomically(path, render_chunks(data, "json"))
        return data, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_large_working_memory_history_is_exported_holding_a_fraction_of_it(store, tmp_path):
    """Export held every version of an owner's working memory at once, as rows and then as the JSON text of the whole
    list (~3 times the history). Now they go to a spool as they are read, in the one snapshot, and are written from
    there: the file is byte for byte what it was (the whole document dumped at once), and Python's peak is a small
    part of it (4,000 versions of 8 KB)."""
    small, data = _wm_export(tmp_path)
    entry = data["workingMemory"][0]
    first = entry["versions"][0]
    entry["versions"] = [dict(first, id=n + 1000, working_memory=f"# Ada {n}\n" + "y" * 8000,
                              createdAt=f"2026-01-01T00:{n // 60 % 60:02d}:{n % 60:02d}.{n % 1000:03d}Z")
                         for n in range(4000)]
    path = tmp_path / "big.json"
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    del data, entry
    import_data(store, load(path))
    _export_file(store, tmp_path / "warm.json", streamed=True)  # (the modules an export loads, loaded before the count)
    whole, _ = _export_file(store, tmp_path / "whole.json", streamed=False)  # every version held: as before
    assert isinstance(whole["workingMemory"][0]["versions"], list)
    streamed, peak = _export_file(store, tmp_path / "streamed.json", streamed=True)
    parts = {e["ownerId"]: e["versions"] for e in streamed["workingMemory"]}
    assert all(isinstance(p, spool.SpoolPart) for p in parts.values()) and len(parts["ada"]) == 4000
    assert streamed["counts"]["workingMemoryVersions"] == whole["counts"]["workingMemoryVersions"] == 4003
    text = (tmp_path / "streamed.json").read_bytes()
    assert text == (tmp_path / "whole.json").read_bytes()
    assert text == (render(whole, "json")).encode("utf-8")  # (what json.dumps of the whole document writes)
    assert len(text) > 30_000_000 and peak < len(text) / 4, (len(text), peak)


def test_an_export_whose_spool_cannot_be_written_says_where_and_writes_nothing(tmp_path, monkeypatch):
    """Every list of a JSON export that grows with the history is spooled (the messages first): a temporary folder
    that cannot take them fails the export with what to do, the versions left out or not; a Markdown transcript
    spools nothing, and once TMPDIR is a folder the JSON export is written."""
    _, data = _wm_export(tmp_path)
    not_a_folder = tmp_path / "tmp-is-a-file"
    not_a_folder.write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(not_a_folder))  # TMPDIR pointing at a file
    out, err = io.StringIO(), io.StringIO()
    target = tmp_path / "ada.json"
    for versions in ([], ["--no-versions"]):
        err = io.StringIO()
        assert main(["export", "--db", str(tmp_path / "wm-source.db"), "--resource", "ada", *versions,
                     "--output", str(target)], out=out, err=err) == 1
        said = err.getvalue()
        assert str(not_a_folder) in said and "Export keeps the messages" in said, said
        assert "Nothing was written" in said and "TMPDIR" in said and "export again" in said
        assert "import" not in said.lower() and not target.exists()
    assert main(["export", "--db", str(tmp_path / "wm-source.db"), "--resource", "ada", "--format", "markdown",
                 "--output", str(tmp_path / "ada.md")], out=out, err=err) == 0
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    assert main(["export", "--db", str(tmp_path / "wm-source.db"), "--resource", "ada", "--output", str(target)],
                out=out, err=err) == 0
    assert json.loads(target.read_text(encoding="utf-8"))["counts"]["workingMemoryVersions"] == 9
    assert not list(folder.iterdir())  # the spools went with the document
