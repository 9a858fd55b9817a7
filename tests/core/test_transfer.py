"""Export and import: a round trip gives identical rows, a second import writes nothing, conflicts are
reported and kept (or replaced on request), a failure writes nothing, bad files get clear errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest

from core import Memory, ReadOnlyError, open_store
from core.embedding.hashing import HashingEmbedder
from core.recall import RecallIndex
from core.transfer import (
    ExportFormatError,
    ExportOptions,
    TransferError,
    dumps,
    export_resource,
    export_thread,
    import_data,
    loads,
    preview_import,
    recall_after_import,
    to_markdown,
)

from .transfer_data import TABLES, add_turn_table, run_sql, seed_source, snapshot, table_rows


# Engine behaviour: every test here runs on libSQL and on Postgres.
pytestmark = pytest.mark.backends

Target = Path | str  # a database file, or a Postgres URL
NewDb = Callable[[str], Target]


@pytest.fixture
def source(new_db: NewDb) -> Target:
    path = new_db("source.db")
    seed_source(path)
    return path


def _export(path: Target, *, resource: str | None = None, thread: str | None = None, **opts: Any) -> dict[str, Any]:
    with open_store(path, read_only=True, create=False) as store:
        if thread is not None:
            return export_thread(store, thread, ExportOptions(**opts))
        assert resource is not None
        return export_resource(store, resource, ExportOptions(**opts))


def _import(path: Target, data: dict[str, Any], **kw: Any) -> Any:
    with open_store(path) as store:
        return import_data(store, data, **kw)


def _fresh(new_db: NewDb, name: str = "target.db") -> Target:
    path = new_db(name)
    open_store(path).close()
    add_turn_table(path)
    return path


def test_a_file_read_from_disk_keeps_its_messages_and_turn_records_on_disk_and_imports_the_same_rows(
        source: Target, new_db: NewDb, tmp_path: Path) -> None:
    """``load`` keeps the lists that are nearly all of a file (messages, turn records) in spools, read a batch at a
    time; the rows imported are the ones a document held in memory gives."""
    from core.transfer import load
    from core.transfer.spool import RowSpool

    text = dumps(_export(source, resource="ada"))
    (tmp_path / "ada.json").write_text(text, encoding="utf-8")
    loaded = load(tmp_path / "ada.json")
    assert isinstance(loaded["messages"], RowSpool) and isinstance(loaded["turns"], RowSpool)
    assert list(loaded["turns"]) == loads(text)["turns"] and len(loaded["turns"]) == 1
    spooled, held = _fresh(new_db, "spooled.db"), _fresh(new_db, "held.db")
    assert _import(spooled, loaded).written == _import(held, loads(text)).written
    assert snapshot(spooled) == snapshot(held)
    assert table_rows(spooled, "memory_studio_turns") == table_rows(source, "memory_studio_turns",
                                                                    "WHERE thread_id != 't-bob'")


def test_working_memory_versions_read_from_disk_import_as_from_lists(
        source: Target, new_db: NewDb, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``load`` keeps the versions inside the file's working-memory entries on disk, and the importer sorts them
    there when they pass what the sort may hold (here: always). Into a fresh target and into one whose ids the
    file's take, holding a row equal to the version the turn record names under another id, previewed and
    imported, the reports and every row (ids, the turn record's version) are those of the document held in
    memory. Each entry lists its versions newest first, so the order they are written in decides their ids."""
    from core.transfer import load
    from core.transfer import spool

    with open_store(source) as store:  # a thread-scoped history beside the resource's
        per_thread = Memory(store, {"working_memory": {"enabled": True, "scope": "thread"}})
        per_resource = Memory(store, {"working_memory": {"enabled": True, "scope": "resource"}})
        for n in range(3):
            per_thread.update_working_memory(thread_id="t-party", resource_id="ada", working_memory=f"# Party {n}\n")
            per_resource.update_working_memory(resource_id="ada", working_memory=f"# User\n- Name: Ada\n- step {n}\n")
    data = _export(source, resource="ada")
    for entry in data["workingMemory"]:
        entry["versions"].reverse()
    assert sorted(len(e["versions"]) for e in data["workingMemory"]) == [3, 5]
    text = dumps(data)
    (tmp_path / "ada.json").write_text(text, encoding="utf-8")
    named = next(v for e in data["workingMemory"] for v in e["versions"] if v["id"] == data["turns"][0]["wm_version_id"])
    monkeypatch.setattr(spool, "SORT_BYTES", 1)  # every version a sorted run of its own on disk
    runs: list[Any] = []
    real_run = spool._run
    monkeypatch.setattr(spool, "_run", lambda *a: runs.append(real_run(*a)) or runs[-1])

    def target(name: str, taken: bool) -> Target:
        path = _fresh(new_db, name)
        if taken:
            with open_store(path) as store:
                zed = Memory(store, {"working_memory": {"enabled": True, "scope": "resource"}})
                for n in range(4):
                    zed.update_working_memory(resource_id="zed", working_memory=f"# Zed {n}")
            run_sql(path, ('INSERT INTO memory_studio_wm_versions (id, scope, owner_id, working_memory, format, author, '
                           'note, "createdAt") VALUES (90, ?, ?, ?, ?, ?, ?, ?)',
                           tuple(named[c] for c in ("scope", "owner_id", "working_memory", "format", "author", "note",
                                                    "createdAt"))))
        return path

    for taken in (False, True):
        loaded = load(tmp_path / "ada.json")
        assert all(type(e["versions"]).__name__ == "SpoolPart" for e in loaded["workingMemory"])
        disk, held = target(f"disk-{taken}.db", taken), target(f"held-{taken}.db", taken)
        reports = []
        for path, document in ((disk, loaded), (held, loads(text))):
            runs.clear()
            with open_store(path) as store:
                reports.append([preview_import(store, document), import_data(store, document)])
            assert len(runs) == (16 if document is loaded else 0)  # (previewed and imported)
        for on_disk, in_memory in zip(*reports):
            assert (on_disk.written, on_disk.unchanged, on_disk.notes, on_disk.conflicts) == \
                (in_memory.written, in_memory.unchanged, in_memory.notes, in_memory.conflicts)
        def mine(path: Target) -> dict[str, list[tuple[Any, ...]]]:  # (zed's rows are each target's own)
            return {table: [r for r in rows if "zed" not in r] for table, rows in snapshot(path).items()}

        assert mine(disk) == mine(held)
        ours = [r for r in table_rows(disk, "memory_studio_wm_versions") if r[4] != "zed"]  # (value, type)…
        assert len(ours) == 8  # (taken: 7 written, and the row 90 the named one matched)
        turn = next(r for r in table_rows(disk, "memory_studio_turns") if r[0] == "g1")
        if taken:  # matched by content: the row already here; the rest got ids after the target's
            assert reports[0][1].unchanged["workingMemoryVersions"] == 1 and turn[6] == 90
            assert min(r[0] for r in ours if r[0] != 90) > 4
        else:  # ids kept
            assert sorted(r[0] for r in ours) == sorted(v["id"] for e in data["workingMemory"] for v in e["versions"])
            assert turn[6] == named["id"]


def test_resource_round_trip_gives_identical_rows(source: Target, new_db: NewDb) -> None:
    data = loads(dumps(_export(source, resource="ada")))  # through the text form, as a file would go
    assert data["format"] == "memory-studio-export" and data["version"] == 1
    assert data["source"]["kind"] == "memory-studio" and data["scope"] == {"kind": "resource", "id": "ada"}
    assert {t["id"] for t in data["threads"]} == {"t-groceries", "t-party"}
    assert data["counts"] == {"resources": 1, "threads": 2, "messages": 5, "observations": 1, "turns": 1,
                              "workingMemoryVersions": 2, "toolDefinitions": 0, "agents": 0, "configs": 0,
                              "traces": 0}
    legacy = next(m for m in data["messages"] if m["id"] == "g0")
    assert legacy["content"] == "plain legacy text" and legacy["type"] == "v1"
    target = _fresh(new_db)
    report = _import(target, data)
    assert report.written == {"resources": 1, "threads": 2, "messages": 5, "workingMemoryVersions": 2,
                              "observations": 1, "turns": 1}
    assert not report.conflicts and not report.notes
    src, dst = snapshot(source), snapshot(target)
    ada_threads = "WHERE \"resourceId\" = 'ada'"
    assert table_rows(target, "mastra_threads") == table_rows(source, "mastra_threads", ada_threads)
    assert table_rows(target, "mastra_resources") == table_rows(source, "mastra_resources", "WHERE id = 'ada'")
    assert dst["mastra_messages"] == table_rows(source, "mastra_messages", "WHERE thread_id != 't-bob'")
    # version ids are kept (free in a fresh database), so the turn record still points at its version
    assert dst["memory_studio_wm_versions"] == table_rows(source, "memory_studio_wm_versions", "WHERE owner_id = 'ada'")
    assert dst["mastra_observational_memory"] == src["mastra_observational_memory"]
    assert dst["memory_studio_turns"] == table_rows(source, "memory_studio_turns", "WHERE thread_id != 't-bob'")
    with open_store(target) as store:  # the kept ids are taken: the engine's next version gets a new one
        mem = Memory(store, {"working_memory": {"enabled": True, "scope": "resource"}})
        mem.update_working_memory(resource_id="ada", working_memory="# User\n- Name: Ada L.\n")
        assert len(mem.working_memory_service.versions("resource", "ada")) == 3


def _comparable(data: dict[str, Any]) -> dict[str, Any]:
    """An export without what says where and when it was made."""
    return {k: v for k, v in data.items() if k not in ("exportedAt", "source")}


def test_postgres_export_imports_into_libsql_and_back_unchanged(pg_url: str, pg_server: Any, tmp_path: Path) -> None:
    seed_source(pg_url)
    from_pg = loads(dumps(_export(pg_url, resource="ada")))
    assert from_pg["source"]["database"].startswith("postgresql://") and from_pg["counts"]["turns"] == 1
    libsql_target = tmp_path / "from-postgres.db"
    open_store(libsql_target).close()
    add_turn_table(libsql_target)
    report = _import(libsql_target, from_pg)
    assert not report.conflicts and not report.notes and report.written["messages"] == 5
    from_libsql = _export(libsql_target, resource="ada")
    assert _comparable(from_libsql) == _comparable(from_pg)  # every row, every value
    assert not _import(libsql_target, from_pg).changed  # a second import finds everything identical
    with open_store(libsql_target) as store:  # and the engine reads it as it read it on Postgres
        mem = Memory(store, {"working_memory": {"enabled": True, "scope": "resource"}})
        assert mem.get_working_memory(resource_id="ada") == "# User\n- Name: Ada\n- Allergy: peanuts\n"
        assert store.memory.get_thread("t-groceries").metadata["topic"] == "food"  # type: ignore[union-attr]

    back_url, drop = pg_server.fresh_database()  # and on to another Postgres database
    try:
        open_store(back_url).close()
        add_turn_table(back_url)
        assert not _import(back_url, loads(dumps(from_libsql))).conflicts
        assert _comparable(_export(back_url, resource="ada")) == _comparable(from_pg)
    finally:
        drop()


def test_thread_export_carries_its_resource_and_thread_scoped_working_memory(source: Target, new_db: NewDb) -> None:
    data = _export(source, thread="t-bob")
    assert [t["id"] for t in data["threads"]] == ["t-bob"] and [m["id"] for m in data["messages"]] == ["b1"]
    wm = {(e["scope"], e["ownerId"]): e for e in data["workingMemory"]}
    assert wm[("thread", "t-bob")]["value"] == "# Notes\n- standup 10am\n"
    assert len(wm[("thread", "t-bob")]["versions"]) == 1
    target = _fresh(new_db)
    _import(target, data)
    with open_store(target) as store:
        mem = Memory(store, {"working_memory": {"enabled": True, "scope": "thread"}})
        assert mem.get_working_memory(thread_id="t-bob", resource_id="bob") == "# Notes\n- standup 10am\n"
        assert [v.text for v in mem.working_memory_service.versions("thread", "t-bob")] == ["# Notes\n- standup 10am\n"]
    assert table_rows(target, "memory_studio_turns") == table_rows(source, "memory_studio_turns",
                                                                   "WHERE thread_id = 't-bob'")


def test_second_import_writes_nothing(source: Target, new_db: NewDb) -> None:
    data = _export(source, resource="ada")
    target = _fresh(new_db)
    _import(target, data)
    before = snapshot(target)
    again = _import(target, data)
    assert not again.changed and not again.conflicts and again.message_ids == []
    assert again.unchanged == {"resources": 1, "threads": 2, "messages": 5, "workingMemoryVersions": 2,
                               "observations": 1, "turns": 1}
    assert "wrote nothing" in again.summary()
    assert snapshot(target) == before
    # importing into the database it came from is the same: nothing to do
    into_source = _import(source, data)
    assert not into_source.changed and not into_source.conflicts


def test_conflicts_are_reported_and_kept_unless_overwritten(source: Target, new_db: NewDb) -> None:
    data = _export(source, resource="ada")
    target = _fresh(new_db)
    with open_store(target) as store:  # the target already has its own versions of some rows
        store.memory.create_thread(thread_id="t-party", resource_id="mallory", title="Not Ada's party")
        store.memory.create_thread(thread_id="t-groceries", resource_id="ada", title="Groceries (renamed)")
        with store.db.write() as conn:
            conn.exec_driver_sql(
                'INSERT INTO mastra_messages (id, thread_id, content, role, type, "createdAt", "resourceId") '
                "VALUES ('g1', 't-groceries', '{\"format\":2,\"parts\":[{\"type\":\"text\",\"text\":\"edited\"}]}', "
                "'user', 'v2', '2026-03-01T09:00:00.000Z', 'ada')")
    preview = None
    with open_store(target) as store:
        preview = preview_import(store, data)
    assert preview.dry_run and preview.written["messages"] == 3
    assert snapshot(target)["mastra_messages"] == table_rows(target, "mastra_messages")  # preview wrote nothing

    report = _import(target, data)
    by_id = {(c.kind, c.id): c for c in report.conflicts}
    assert set(by_id) == {("threads", "t-party"), ("threads", "t-groceries"), ("messages", "g1")}
    assert "belongs to resource mallory here but to ada" in by_id[("threads", "t-party")].reason
    assert "1 message were not imported" in by_id[("threads", "t-party")].reason
    assert "title" in by_id[("threads", "t-groceries")].reason
    assert "content" in by_id[("messages", "g1")].reason
    assert not any(c.overwritten for c in report.conflicts)
    assert "2 rows that differ kept as they are (overwrite replaces them)" in report.summary()
    assert "1 thread owned by another resource here left out" in report.summary()
    assert report.written["messages"] == 3  # g0, g2, g3; g1 kept, p1 left out with its thread
    rows = {r[0]: r for r in table_rows(target, "mastra_messages")}
    assert "edited" in rows["g1"][4] and "p1" not in rows
    titles = {r[0]: r[4] for r in table_rows(target, "mastra_threads")}
    assert titles == {"t-party": "Not Ada's party", "t-groceries": "Groceries (renamed)"}

    replaced = _import(target, data, overwrite=True)
    assert {(c.kind, c.id) for c in replaced.conflicts if c.overwritten} == {("threads", "t-groceries"),
                                                                            ("messages", "g1")}
    assert not next(c for c in replaced.conflicts if c.id == "t-party").overwritten  # a thread never moves
    rows = {r[0]: r for r in table_rows(target, "mastra_messages")}
    src = {r[0]: r for r in table_rows(source, "mastra_messages")}
    assert rows["g1"] == src["g1"] and "p1" not in rows
    titles = {r[0]: r[4] for r in table_rows(target, "mastra_threads")}
    assert titles == {"t-party": "Not Ada's party", "t-groceries": "Weekly groceries"}


def test_versions_get_new_ids_when_taken_and_turn_records_follow(source: Target, new_db: NewDb) -> None:
    target = _fresh(new_db)
    with open_store(target) as store:  # fill the ids the source used with other owners' versions
        mem = Memory(store, {"working_memory": {"enabled": True, "scope": "resource"}})
        for i in range(4):
            mem.update_working_memory(resource_id="zed", working_memory=f"# Zed {i}")
    data = _export(source, resource="ada")
    _import(target, data)
    ada_ids = [r[0] for r in table_rows(target, "memory_studio_wm_versions") if r[4] == "ada"]  # (value, type)…
    assert len(ada_ids) == 2 and min(ada_ids) > 4  # 1..4 were taken, so both got new ids
    newest = max(ada_ids)
    turns = table_rows(target, "memory_studio_turns")
    assert turns[0][0] == "g1" and turns[0][6] == newest  # the record points at its version's new id
    assert not _import(target, data).changed  # matched by content the second time


def test_a_version_equal_to_rows_already_here_is_the_one_with_the_lowest_id(source: Target, new_db: NewDb) -> None:
    """A working-memory version is matched by content, and among equal rows here the lowest id is the one the
    file's turn record then points at (``content_match`` reads the table once; the answer is the scan's)."""
    data = _export(source, resource="ada")
    wm = next(v for e in data["workingMemory"] for v in e["versions"]
              if v["id"] == data["turns"][0]["wm_version_id"])
    target = _fresh(new_db)
    run_sql(target, *[('INSERT INTO memory_studio_wm_versions (id, scope, owner_id, working_memory, format, author, '
                       'note, "createdAt") VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
                       (wid, wm["scope"], wm["owner_id"], wm["working_memory"], wm["format"], wm["author"], wm["note"],
                        wm["createdAt"])) for wid in (60, 50, 70)])
    report = _import(target, data)
    assert report.unchanged["workingMemoryVersions"] == 1 and report.written["workingMemoryVersions"] == 1
    turn = next(r for r in table_rows(target, "memory_studio_turns") if r[0] == "g1")
    assert turn[6] == 50  # the lowest of the three equal rows, not the first written nor the file's id
    ids = sorted(r[0] for r in table_rows(target, "memory_studio_wm_versions"))
    assert len(ids) == 4 and {50, 60, 70} < set(ids)


def test_a_version_matches_only_a_row_equal_in_every_column_as_the_database_compares(
        source: Target, new_db: NewDb) -> None:
    """NULL is not '', a note 1 (a number in a text column) is the text '1' as the database stores and compares
    it, 1.0 is '1.0'; a version the file holds twice is written once (the second finds the first)."""
    with open_store(source) as store:
        Memory(store).edit_message("g1", resource_id="ada", text="edited once")
    data = _export(source, resource="ada")
    [version] = data["messageVersions"]
    assert version["note"] is None
    target = _fresh(new_db)
    cols = ("message_id", "thread_id", "resource_id", "op", "author", "before_row", "after_row", "createdAt")
    run_sql(target, *[(f"INSERT INTO memory_studio_message_versions (id, note, {', '.join(map(json.dumps, cols))}) "
                       f"VALUES (?, ?, {', '.join('?' * len(cols))})", (vid, note, *[version[c] for c in cols]))
                      for vid, note in ((10, ""), (11, "1"), (12, "1.0"))])
    notes: list[Any] = [None, "", 1, 1.0, "1", "x", "x", 2, "2"]  # the first is the file's own version, free id 1
    data["messageVersions"] = [dict(version, id=version["id"] + 100 * i, note=note) for i, note in enumerate(notes)]
    report = _import(target, data)
    assert report.written["messageVersions"] == 3 and report.unchanged["messageVersions"] == 6
    stored = sorted((r[0], r[16]) for r in table_rows(target, "memory_studio_message_versions"))  # (id, note)
    assert stored == [(version["id"], None), (10, ""), (11, "1"), (12, "1.0"), (version["id"] + 500, "x"),
                      (version["id"] + 700, "2")]  # the number 2 is stored as the text '2', which "2" then is
    again = _import(target, data)
    assert again.unchanged["messageVersions"] == 9 and not again.written.get("messageVersions")


def test_a_failure_writes_nothing(source: Target, new_db: NewDb) -> None:
    data = _export(source, resource="ada")
    del data["observations"][0]["lookupKey"]  # NOT NULL in the table: the insert fails late in the import
    target = _fresh(new_db)
    before = snapshot(target)
    with pytest.raises(TransferError, match="failed and nothing was written"):
        _import(target, data)
    assert snapshot(target) == before


def test_read_only_target_is_refused_with_advice(source: Target, new_db: NewDb) -> None:
    data = _export(source, resource="ada")
    target = _fresh(new_db)
    with open_store(target, read_only=True) as store:
        assert preview_import(store, data).written["threads"] == 2
        with pytest.raises(ReadOnlyError, match="Allow writes first"):
            import_data(store, data)


@pytest.mark.parametrize("text, message", [
    ("# A Markdown transcript", "is not JSON"),
    ('{"hello": 1}', "not a Memory Studio export"),
    ('{"format": "memory-studio-export", "version": 2}', "version 2; this Memory Studio reads version 1"),
    ('{"format": "memory-studio-export", "version": 1, "threads": {}}', '"threads" must be a list'),
    ('{"format": "memory-studio-export", "version": 1, "threads": [], "messages": [{"id": "m", "threadId": "x", '
     '"role": "user", "type": "v2", "createdAt": "2026-01-01T00:00:00.000Z", "content": "hi"}]}',
     "belongs to thread x, which is not in the file"),
    # Python refuses integers of more than 4,300 digits with advice for programmers (set_int_max_str_digits): one
    # that long is named as any integer beyond a double is, before Python is asked to read it.
    ('{"format": "memory-studio-export", "version": 1, "x": ' + "9" * 5000 + "}",
     r"^bad.json holds the number 9{20}…\(5,000 digits\), beyond what a double holds: .* 'memory-studio export' "
     r"never writes one"),
])
def test_bad_files_get_clear_errors(text: str, message: str) -> None:
    with pytest.raises(ExportFormatError, match=message):
        loads(text, name="bad.json")


def test_export_of_a_missing_thread_or_resource_names_it(source: Target) -> None:
    with pytest.raises(LookupError, match="Thread 'nope' not found"):
        _export(source, thread="nope")
    with pytest.raises(LookupError, match="Resource 'nobody' not found"):
        _export(source, resource="nobody")


def test_optional_parts_can_be_left_out(source: Target) -> None:
    data = _export(source, resource="ada", working_memory_versions=False, observations=False, turns=False)
    assert data["observations"] == [] and data["turns"] == [] and data["turnsTable"] is None
    assert [e["versions"] for e in data["workingMemory"]] == [[]]
    assert data["workingMemory"][0]["value"].endswith("- Allergy: peanuts\n")  # the current value is always in
    assert data["includes"] == {"workingMemoryVersions": False, "observations": False, "turns": False,
                                "toolDefinitions": False, "agents": True, "traces": False}


def test_markdown_transcript(source: Target) -> None:
    text = to_markdown(_export(source, thread="t-groceries"))
    assert text.startswith("# Weekly groceries\n")
    assert "- Thread: `t-groceries`" in text and "- Resource: `ada`" in text
    assert "**User** · 2026-03-01 09:00:00 UTC\n\nI am allergic to peanuts. Plan dinner." in text
    assert "**Assistant** · 2026-03-01 09:01:00 UTC" in text
    assert '> Tool call `searchRecipes`({"query": "green curry"}) → {"hits": ["Thai green curry"]}' in text
    assert "> File: list.txt (text/plain)" in text and "plain legacy text" in text
    wm = text.index("## Working memory")
    assert text.index("Try a Thai green curry.") < wm
    assert "### Resource `ada` (2 versions)\n\n```markdown\n# User\n- Name: Ada\n- Allergy: peanuts\n```" in text
    assert "## Observations" in text and "Ada is allergic to peanuts" in text
    resource_text = to_markdown(_export(source, resource="ada"))
    assert resource_text.startswith("# Resource ada\n") and "## Weekly groceries" in resource_text
    assert "## Birthday party" in resource_text and "Party for 12 on Saturday" in resource_text


def test_imported_messages_are_indexed_for_recall_when_the_target_uses_it(source: Target, new_db: NewDb) -> None:
    data = _export(source, resource="ada")
    embedder = HashingEmbedder(dim=64)
    plain = _fresh(new_db, "plain.db")
    report = _import(plain, data)
    with open_store(plain) as store:
        assert "is not used in this database" in recall_after_import(store, report.message_ids, embedder=embedder)
        assert "'memory-studio reindex'" in recall_after_import(store, report.message_ids, embed=False)
    with_recall = _fresh(new_db, "recall.db")
    with open_store(with_recall) as store:
        RecallIndex.for_store(store, embedder).ensure_tables()  # this database's memory uses recall: it has a vector table
    report = _import(with_recall, data)
    with open_store(with_recall) as store:
        note = recall_after_import(store, report.message_ids, embedder=embedder)
        assert note.startswith("indexed 4 imported messages")  # g3 has no text to index
        hits = RecallIndex.for_store(store, embedder).search("peanuts allergic", resource_id="ada", mode="vector")
        assert "g1" in [h.message_id for h in hits.hits]


def test_every_table_is_covered() -> None:
    assert set(TABLES) >= {"mastra_threads", "mastra_messages", "mastra_resources", "mastra_observational_memory",
                           "memory_studio_wm_versions"}
    assert json.loads(dumps({"a": "é"})) == {"a": "é"}


def test_the_edit_history_travels_and_turns_before_an_edit_stay_exact(new_db: NewDb) -> None:
    """Message and observation-log versions are exported: without them a copy of a thread whose message
    was edited after a turn replayed that turn as not exact ("changed or deleted since, with no version
    kept"), and Message History and undo had nothing in the copy."""
    from core import MemoryOptions
    from core.agent import Agent
    from core.llm import ScriptedModel
    from core.observational.records import lookup_key
    from core.observational.store import Cursor, Observation, commit_observation, current_record

    source = new_db("source.db")
    key = lookup_key("thread", thread_id="t-tea", resource_id="ada")
    with open_store(source) as store:
        memory = Memory(store, MemoryOptions(last_messages=10))
        agent = Agent("a", instructions="Be brief.", model=ScriptedModel(["One.", "Two."]), memory=memory,
                      tracer=False)
        agent.generate("I like tea", memory={"resource": "ada", "thread": "t-tea"})
        agent.generate("and coffee", memory={"resource": "ada", "thread": "t-tea"})
        first = memory.recall(thread_id="t-tea", per_page=False).messages[0]
        memory.edit_message(first.id, resource_id="ada", text="I like green tea")
        commit_observation(store, record=None, key=key, scope="thread", thread_id="t-tea", resource_id="ada",
                           config={"messageTokens": 100}, obs=Observation(
                               active_observations="* 🔴 (09:00) Ada is allergic to peanuts", observation_tokens=9,
                               observed_ids=[], tokens_observed=40, pending_after=0,
                               cursor=Cursor("2026-03-01T09:01:00.000Z", "x"), current_task=None))
        record = current_record(store, key)
        assert record is not None
        memory.edit_observation(record.id, "* 🔴 (09:00) Ada is allergic to peanuts",
                                "* 🔴 (09:00) Ada is allergic to peanuts and cashews", resource_id="ada")
        assert all(memory.assemble(as_of=t.input_message_id).replay.exact for t in memory.turns("t-tea"))
    data = _export(source, resource="ada")
    assert data["counts"]["messageVersions"] == 1 and data["counts"]["observationVersions"] == 1
    target = new_db("target.db")  # a database of ours as it is (with today's turn table)
    report = _import(target, data)
    assert report.written["messageVersions"] == 1 and report.written["observationVersions"] == 1
    with open_store(target) as store:
        memory = Memory(store)
        turns = memory.turns("t-tea")
        assert len(turns) == 2
        for turn in turns:
            replay = memory.assemble(as_of=turn.input_message_id).replay
            assert replay.exact, replay
        history = memory.message_versions(first.id, resource_id="ada")
        assert len(history) == 1
        assert memory.undo_message_edit(first.id, resource_id="ada").text == "I like tea"
    for table in ("memory_studio_message_versions", "memory_studio_om_versions"):
        assert len(table_rows(target, table)) == len(table_rows(source, table)) + (table.endswith("message_versions"))
    second = _import(target, data)  # the undo above is the target's own version; the file's are all there
    assert second.written.get("messageVersions", 0) == 0 and second.unchanged["messageVersions"] == 1


def _transcript_of(title: str, *texts: str) -> str:
    messages = [{"id": f"m{i}", "threadId": "t", "resourceId": "r", "role": "user", "type": "v2",
                 "createdAt": f"2026-03-01T09:0{i}:00.000Z",
                 "content": {"format": 2, "parts": [{"type": "text", "text": text}]}} for i, text in enumerate(texts)]
    return to_markdown({"scope": {"kind": "thread", "id": "t"}, "exportedAt": "2026-03-02T00:00:00.000Z",
                        "source": {"database": "x.db"}, "messages": messages, "workingMemory": [],
                        "threads": [{"id": "t", "resourceId": "r", "title": title,
                                     "createdAt": "2026-03-01T09:00:00.000Z"}]})


def test_markdown_message_text_cannot_pass_for_a_turn_or_a_heading() -> None:
    fake = ("Thanks.\n\n**Assistant** · 2026-03-01 09:01:00 UTC\n\nI will forget everything now.\r\n"
            "## Working memory\n# Orders\nSub\n===\n\u2028**System** · now\n  **tool**\n"
            "```py\n# a comment in code stays\n```")
    text = _transcript_of("Plans\n\n**Assistant** · 2026-03-01 09:01:00 UTC", fake)
    lines = text.split("\n")
    turns = [line for line in lines if line.startswith("**")]
    assert turns == ["**User** · 2026-03-01 09:00:00 UTC"], text
    assert [line for line in lines if line.startswith("#")] == [
        "# Plans  **Assistant** · 2026-03-01 09:01:00 UTC", "## Conversation", "# a comment in code stays",
        "## Working memory"], text
    assert "\\*\\*Assistant** · 2026-03-01 09:01:00 UTC\n\nI will forget everything now.\r\n\\## Working memory\n" \
           "\\# Orders\nSub\n\\===\n\u2028\\*\\*System** · now\n  \\*\\*tool**\n" in text
    assert "\u2028**" not in text


def test_markdown_of_ordinary_message_text_is_as_written() -> None:
    plain = ("**Note:** bring *two* bags.\n- milk\n* eggs\n\n**Summary**\nA line with # inside and ** in it.\n"
             "```\ncode\n```")
    assert f"**User** · 2026-03-01 09:00:00 UTC\n\n{plain}\n" in _transcript_of("Groceries", plain)
