"""Hostile and careless import files (issue 17, items 1-3): a file never names the tables it writes,
overwrite respects ownership, and every row obeys the API's rules, or nothing of the file is written."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any, Callable

import pytest

from core import Memory, Message, open_store
from core.cli import main
from core.transfer import (
    ExportFormatError,
    ExportOptions,
    TransferError,
    export_resource,
    import_data,
    preview_import,
)
from core.transfer import sections

from .transfer_data import TABLES, add_turn_table, seed_source, snapshot, table_rows

pytestmark = pytest.mark.backends

NewDb = Callable[[str], "Path | str"]


@pytest.fixture
def exported(new_db: NewDb) -> dict[str, Any]:
    source = new_db("source.db")
    seed_source(source)
    with open_store(source, read_only=True, create=False) as store:
        return export_resource(store, "ada", ExportOptions())


@pytest.fixture
def target(new_db: NewDb) -> "Path | str":
    """A database where mallory and bob already have memory of their own."""
    path = new_db("target.db")
    with open_store(path) as store:
        memory = Memory(store, {"working_memory": {"enabled": True, "scope": "resource"}})
        memory.save_messages([Message.user("mallory's secret", id="m-secret", thread_id="t-mallory",
                                           resource_id="mallory")])
        memory.save_messages([Message.user("bob's note", id="b-note", thread_id="t-bob", resource_id="bob")])
        memory.update_working_memory(resource_id="mallory", working_memory="# Mallory\n- keeps her own notes\n")
    add_turn_table(path)
    return path


def everything(path: "Path | str") -> dict[str, Any]:
    return {**snapshot(path), "migrations": table_rows(path, "memory_studio_migrations")}


def refused(path: "Path | str", data: dict[str, Any], match: str, **kw: Any) -> None:
    before = everything(path)
    with open_store(path) as store, pytest.raises(ExportFormatError, match=match):
        import_data(store, data, **kw)
    assert everything(path) == before  # nothing of a refused file is written


# -- item 1: the file never names a table ---------------------------------------------------------


def test_turns_table_named_by_the_file_is_refused(exported, target):
    thread_row = table_rows(target, "mastra_threads")
    steal = copy.deepcopy(exported)  # "turn records" that are really a thread row, moved to ada
    steal["turnsTable"] = "mastra_threads"
    steal["turns"] = [{"id": "t-mallory", "resourceId": "ada", "title": "mine now", "metadata": None,
                       "createdAt": "2026-01-01T00:00:00.000Z", "updatedAt": "2026-01-01T00:00:00.000Z"}]
    refused(target, steal, r"\"turnsTable\" names 'mastra_threads'")
    refused(target, steal, "turnsTable", overwrite=True)
    fake = copy.deepcopy(exported)
    fake["turnsTable"] = "memory_studio_migrations"
    fake["turns"] = [{"name": "9999_from_the_future", "appliedAt": "2026-01-01T00:00:00.000Z"}]
    refused(target, fake, "memory_studio_migrations")
    assert table_rows(target, "mastra_threads") == thread_row
    with open_store(target) as store:  # still writable: no fake migration made every write fail
        Memory(store).save_messages([Message.user("still fine", thread_id="t-bob", resource_id="bob")])


def test_rows_of_a_known_section_cannot_reach_other_threads(exported, target):
    # Turn records are written only to the turn table, and only for the file's own threads.
    data = copy.deepcopy(exported)
    data["turns"].append({"input_message_id": "b-note", "thread_id": "t-bob", "resource_id": "bob",
                          "wm_version_id": None, "record": "{}", "createdAt": "2026-01-01T00:00:00.000Z"})
    refused(target, data, r"turns\[1\] \(input_message_id 'b-note'\) is refused: it names thread 't-bob', "
                          "which is not in the file")
    data = copy.deepcopy(exported)
    data["turns"][0]["input_message_id"] = "b-note"  # a thread of the file, a message of bob's
    refused(target, data, "it names message 'b-note', which is not in the file")


def test_working_memory_and_observations_stay_with_their_owner(exported, target):
    data = copy.deepcopy(exported)
    data["workingMemory"][0]["versions"][0]["owner_id"] = "mallory"
    refused(target, data, r"workingMemory\[0\] \(ownerId 'ada'\) is refused: its version .* belongs to resource "
                          "'mallory'")
    data = copy.deepcopy(exported)
    data["workingMemory"].append({"scope": "resource", "ownerId": "mallory", "value": "# pwned", "versions": []})
    refused(target, data, "working memory of resource 'mallory', which is not in the file")
    data = copy.deepcopy(exported)
    data["observations"][0]["lookupKey"] = "resource:mallory"
    refused(target, data, "lookupKey 'resource:mallory' is not 'thread:t-groceries'")
    data = copy.deepcopy(exported)
    data["observations"][0].update(scope="resource", lookupKey="resource:mallory", resourceId="mallory",
                                   threadId=None)
    refused(target, data, "names resource 'mallory', which is not in the file")


def test_only_registered_tables_are_writable():
    assert sections.writable("mastra_messages") == "mastra_messages"
    for table in ("memory_studio_migrations", "memory_studio_settings", "sqlite_master", "anything_else"):
        with pytest.raises(TransferError, match="never writes the table"):
            sections.writable(table)
    with pytest.raises(ValueError, match="bookkeeping table"):
        sections.register(sections.Section("evil", "memory_studio_migrations"))
    with pytest.raises(ValueError, match="already written by the 'messages' section"):
        sections.register(sections.Section("moreMessages", "mastra_messages"))
    assert {s.table for s in sections.SECTIONS.values()} - {None} <= set(TABLES)


# -- item 2: overwrite respects ownership --------------------------------------------------------


def test_overwrite_never_moves_a_message_out_of_another_thread(exported, target):
    data = copy.deepcopy(exported)
    data["messages"][0]["id"] = "m-secret"  # ada's file claims mallory's message
    for overwrite in (False, True):
        with open_store(target) as store:
            report = import_data(store, data, overwrite=overwrite)
        conflict = next(c for c in report.conflicts if c.id == "m-secret")
        assert conflict.kind == "messages" and not conflict.replaceable and not conflict.overwritten
        assert "is in thread t-mallory here" in conflict.reason and "never moves" in conflict.reason
        assert "m-secret" not in report.message_ids
    row = next(r for r in table_rows(target, "mastra_messages") if r[0] == "m-secret")
    assert row[2] == "t-mallory" and "mallory's secret" in row[4]


def test_a_message_of_another_resource_than_its_thread_is_refused(exported, target):
    data = copy.deepcopy(exported)
    data["messages"][1]["resourceId"] = "mallory"
    refused(target, data, r"messages\[1\] \(id 'g1'\) is refused: it says resource 'mallory', but its thread "
                          "'t-groceries' belongs to 'ada'", overwrite=True)


def test_overwrite_never_takes_another_threads_turn_record(exported, target, new_db):
    # A record in the target whose key (the input message id) belongs to another thread here.
    with open_store(target) as store:
        Memory(store).save_messages([Message.user("ada? no, bob", id="g1x", thread_id="t-bob", resource_id="bob")])
    from .transfer_data import run_sql

    run_sql(target, ("INSERT INTO memory_studio_turns VALUES ('g1', 't-bob', 'bob', NULL, '{}', ?)",
                     ("2026-01-01T00:00:00.000Z",)))
    with open_store(target) as store:
        report = import_data(store, exported, overwrite=True)
    conflict = next(c for c in report.conflicts if c.kind == "turns")
    assert conflict.id == "g1" and not conflict.replaceable and "thread_id 't-bob'" in conflict.reason
    assert [r[2] for r in table_rows(target, "memory_studio_turns") if r[0] == "g1"] == ["t-bob"]


def test_a_turn_record_never_takes_the_key_of_another_threads_message(exported, target):
    """A record is read by its input message id (``Memory.turn_record``, a fork's recorded working
    memory): one keyed by mallory's message, imported while that message itself was left out (it is in
    mallory's thread here), was read as the record of mallory's turn. (This module's turn table has a
    shape of its own, so the rows are checked, not ``turn_record``.)"""
    data = copy.deepcopy(exported)  # ada's file claims mallory's message and files a turn record under it
    data["messages"][0]["id"] = "m-secret"
    data["turns"][0]["input_message_id"] = "m-secret"
    for overwrite in (False, True):
        with open_store(target) as store:
            report = import_data(store, data, overwrite=overwrite)
        conflict = next(c for c in report.conflicts if c.kind == "turns")
        assert conflict.id == "m-secret" and not conflict.replaceable and not conflict.overwritten
        assert "its input message is in thread t-mallory here" in conflict.reason
        assert report.written["turns"] == 0
        assert "m-secret" not in [r[0] for r in table_rows(target, "memory_studio_turns")]
        # No thread was left out: the summary names what was (it said "1 thread owned by another resource").
        assert "owned by another resource" not in report.summary(), report.summary()
        assert "; 2 rows of another thread here left out" in report.summary(), report.summary()


# -- item 3: the API's rules --------------------------------------------------------------------


DEEP_CONTENT = '{"format": 2, "parts": [{"type": "text", "text": "x", "d": ' + "[" * 100_000 + "]" * 100_000 + "}]}"


def rename_thread(data: dict[str, Any], old: str, new: str) -> None:
    for row in data["threads"]:
        row["id"] = new if row["id"] == old else row["id"]
    for row in [*data["messages"], *data["observations"]]:
        row["threadId"] = new if row.get("threadId") == old else row.get("threadId")


@pytest.mark.parametrize("change, match", [
    (lambda d: d["messages"][0].update(id="g0\x00evil"), r"messages\[0\] \(id 'g0\\x00evil'\) is refused: its id "
                                                           "cannot be used: it contains a NUL"),
    (lambda d: d["messages"][0].update(id="g0\ud800"), "lone surrogate"),
    (lambda d: rename_thread(d, "t-party", "t-party\x00evil"), "is refused: its id cannot be used: it contains a NUL"),
    (lambda d: d["threads"][0].update(resourceId="ada\ud83d"), "lone surrogate"),
    (lambda d: d["threads"][0].update(title="Weekly\ud800"), r"threads\[0\] .* its 'title' holds a lone surrogate"),
    (lambda d: d["messages"][1].update(content="hi\x00there", type="v1"), "holds a NUL character"),
    (lambda d: d["messages"][1].update(role="system"), r"messages\[1\] \(id 'g1'\) is refused: a system message is "
                                                       "never stored"),
    (lambda d: d["messages"][1].update(role="root"), "its role 'root' is not one of"),
    (lambda d: d["messages"][1].update(content='{"format": 2, "parts": [{"type": "text", "text": "x"}'),
     r"messages\[1\] \(id 'g1'\) is refused: its content is not valid JSON"),
    (lambda d: d["messages"][1].update(content='{"format": 3, "parts": []}'), "its content is not format 2"),
    (lambda d: d["messages"][1].update(content='{"hello": "world"}', type="v1"), "content of an unknown shape"),
    (lambda d: d["messages"][1].update(content='[{"type": "text"', type="v1"), "malformed content JSON"),
    (lambda d: d["messages"][1].update(content="not json at all", type="v2"), "its content is not valid JSON"),
    # Nested past Python's parser (the file's own JSON is read, the content is JSON text inside it): the line was
    # "maximum recursion depth exceeded while decoding a JSON array from a unicode string".
    (lambda d: d["messages"][1].update(content=DEEP_CONTENT, type="v2"),
     r"messages\[1\] \(id 'g1'\) is refused: its content nests lists or objects too deeply to be read"),
    (lambda d: d["messages"][1].update(content="[" * 100_000 + "]" * 100_000, type="v1"),
     r"messages\[1\] \(id 'g1'\) is refused: .*nests lists or objects too deeply to be read"),
    (lambda d: d["messages"][1].update(content='{"format": 2, "parts": [{"text": "no type"}]}'),
     'a part without a string "type"'),
    (lambda d: d["messages"][1].update(content=json.dumps({"format": 2, "parts": [{"type": "text",
                                                                                   "text": "x" * 1_100_000}]})),
     "over the message size limit of 1,000,000 bytes"),

    # Stored as the API stores them: metadata a JSON object, working memory text (a list or a number was written
    # as it was; our readers took it as empty, Mastra's JSON.parse of the row failed).
    (lambda d: d["threads"][0].update(metadata=[1, 2]),
     r"threads\[0\] .* its metadata must be a JSON object, not an array \(2 items\)"),
    (lambda d: d["resources"][0].update(metadata="not json"), r"resources\[0\] .* its metadata is text that is not JSON"),
    (lambda d: d["resources"][0].update(metadata='["a"]'),
     r"its metadata must be a JSON object, not an array \(1 item\)"),
    (lambda d: d["resources"][0].update(workingMemory=5),
     r"resources\[0\] .* its workingMemory must be text .* not the number 5"),
    (lambda d: d["resources"][0].update(workingMemory={"name": "Ada"}), "its workingMemory must be text"),

    # Times as they are stored (UTC, milliseconds, Z): the engine orders rows by that text, so a message stamped
    # "14:00+05:00" (09:00 UTC) was taken for the newest of its thread's last messages; and one the engine cannot
    # step a millisecond past (year 9999) made every prompt of its thread fail with Python's OverflowError.
    (lambda d: d["messages"][0].update(createdAt="2026-03-01T14:00:00.000+05:00"),
     r"messages\[0\] .* its createdAt '2026-03-01T14:00:00.000\+05:00' is not in the stored form .* write it as "
     "'2026-03-01T09:00:00.000Z'"),
    (lambda d: d["messages"][0].update(createdAt="2026-03-01"), "write it as '2026-03-01T00:00:00.000Z'"),
    (lambda d: d["threads"][0].update(updatedAt="2026-03-01T09:00:00Z"), "write it as '2026-03-01T09:00:00.000Z'"),
    (lambda d: d["messages"][0].update(createdAt="9999-12-31T23:59:59.999Z"),
     r"its createdAt '9999-12-31T23:59:59.999Z' is outside the times the engine can work with"),
    (lambda d: d["threads"][0].update(createdAt="9999-12-31T23:59:59.999-14:00"), "outside the times"),
    (lambda d: d["resources"][0].update(createdAt="0001-01-01T00:00:00.000Z"), "outside the times"),

    # A working-memory version's columns as the table holds them: the import failed after the checks with
    # "invalid literal for int() with base 10: 'abc'", "datatype mismatch", "NOT NULL constraint failed", or the
    # driver's sentence about lone surrogates for a list, none naming the row.
    (lambda d: d["workingMemory"][0]["versions"][0].update(id="abc"),
     r"workingMemoryVersions\[0\] \(owner_id 'ada'\) is refused: its id must be a whole number from 1 to "),
    (lambda d: d["workingMemory"][0]["versions"][0].update(id=10**30), "its id must be a whole number"),
    (lambda d: d["workingMemory"][0]["versions"][0].update(id=True), "its id must be a whole number"),
    (lambda d: d["workingMemory"][0]["versions"][0].update(format={"a": 1}),
     r"its format must be text, not an object \(1 key\)"),
    (lambda d: d["workingMemory"][0]["versions"][0].update(author=None), "its author must be text, not null"),
    (lambda d: d["workingMemory"][0]["versions"][0].update(note=[1]),
     r"its note must be text or null, not an array \(1 item\)"),
    (lambda d: d["workingMemory"][0]["versions"][0].update(working_memory=5),
     "its working_memory must be text or null, not the number 5"),
    (lambda d: d["turns"][0].update(wm_version_id="x"), r"turns\[0\] .* its wm_version_id must be a whole number"),
    (lambda d: d.update(messageVersions=[{**_version("g1", "t-groceries", "x"), "id": 10**30}]),
     r"messageVersions\[0\] \(message_id 'g1'\) is refused: its id must be a whole number"),
    (lambda d: d.update(configs=[{"id": 10**30, "name": "default", "template": "# Notes", "schema": None,
                                  "author": "studio", "createdAt": "2026-03-01T09:00:00.000Z"}]),
     r"configs\[0\] is refused: its id must be a whole number"),

    # One row per key: a second turn record (agent, tool definition, working memory) of the same key was taken for
    # a row of the target ("differs here"; with overwrite the file's later one won).
    (lambda d: d["turns"].append({**d["turns"][0], "record": "{}"}),
     "turns lists input_message_id 'g1' twice; keep one of them"),
    (lambda d: d["workingMemory"].append({**d["workingMemory"][0], "value": "other", "versions": []}),
     r"workingMemory lists scope/ownerId \('resource', 'ada'\) twice"),
    (lambda d: d["messages"].append(dict(d["messages"][0])), "messages lists id 'g0' twice"),
])
def test_rows_breaking_the_api_rules_refuse_the_file(exported, target, change, match):
    data = copy.deepcopy(exported)
    change(data)
    refused(target, data, match)
    refused(target, data, match, overwrite=True)


NUL_WORDS = (r"is refused: its working memory holds a NUL character \(U\+0000, the escape \\u0000 in JSON\), which "
             r"working memory cannot store \(PostgreSQL stores no NUL in text\); remove it, or write what it stands "
             r"for as text\. Nothing was imported; fix or remove that row\.")


@pytest.mark.parametrize("change, where", [
    # A schema memory's JSON text with the escape: libSQL kept it, and every later merge of ada's memory was refused.
    (lambda d: d["resources"][0].update(workingMemory='{"name": "Ada\\u0000"}'), r"resources\[0\] \(id 'ada'\) "),
    (lambda d: d["resources"][0].update(workingMemory='{"notes": [{"w\\u0000": 1}]}'), r"resources\[0\] \(id 'ada'\) "),
    # Thread-scoped memory lives in the thread's metadata (JSON): the raw character, and the escape in its JSON.
    (lambda d: d["threads"][1].update(metadata={"workingMemory": "# Notes\n- a\x00b\n"}),
     r"threads\[1\] \(id 't-party'\) "),
    (lambda d: d["threads"][1].update(metadata=json.dumps({"workingMemory": '{"a": "\\u0000"}'})),
     r"threads\[1\] \(id 't-party'\) "),
    # A version says which it is: a JSON version's escape (restoring it would be refused).
    (lambda d: d["workingMemory"][0]["versions"][0].update(working_memory='{"a": "\\u0000"}', format="json"),
     r"workingMemoryVersions\[0\] \(owner_id 'ada'\) "),
])
def test_working_memory_holding_a_nul_is_refused_as_the_api_refuses_it(exported, target, change, where):
    data = copy.deepcopy(exported)
    change(data)
    refused(target, data, where + NUL_WORDS)
    refused(target, data, where + NUL_WORDS, overwrite=True)
    with open_store(target) as store:
        with pytest.raises(ExportFormatError, match=NUL_WORDS):
            preview_import(store, data)


@pytest.mark.parametrize("change, where", [
    (lambda d: d["threads"][1].update(metadata={"note": "a\x00b"}), r"threads\[1\] \(id 't-party'\) .* at note"),
    (lambda d: d["threads"][1].update(metadata=json.dumps({"tags": ["x", "y\x00"]})),
     r"threads\[1\] \(id 't-party'\) .* at tags\[1\]"),
    (lambda d: d["threads"][0].update(metadata={"a": {"k\x00": 1}}),
     r"threads\[0\] \(id 't-groceries'\) .* at the key 'k\\x00' of a"),
    (lambda d: d["resources"][0].update(metadata={"profile": [{"city": "\x00"}]}),
     r"resources\[0\] \(id 'ada'\) .* at profile\[0\]\.city"),
    (lambda d: d["observations"][0].update(metadata={"note": "\x00"}), r"observations\[0\] \(id '[^']+'\) .* at note"),
])
def test_a_nul_in_metadata_is_refused_naming_the_field_on_every_backend(exported, target, change, where):
    """Postgres keeps metadata as JSONB, which takes no NUL: the import failed whole in the driver's words
    ("unsupported Unicode escape sequence"); libSQL kept it, so the database could not be exported to Postgres."""
    data = copy.deepcopy(exported)
    change(data)
    prefix, path = where.split(" .* at ")
    words = (prefix + r" is refused: its metadata holds a NUL character \(U\+0000\) at " + path +
             r", which PostgreSQL stores in no JSON .*Nothing was imported; fix or remove that row\.")
    refused(target, data, words)
    refused(target, data, words, overwrite=True)
    # The text "\u0000" (six characters) is no NUL: it imports.
    data = copy.deepcopy(exported)
    data["threads"][1]["metadata"] = {"note": "C strings end at \\u0000"}
    with open_store(target) as store:
        import_data(store, data)
        assert store.memory.get_thread("t-party").metadata["note"] == "C strings end at \\u0000"


@pytest.mark.parametrize("field, value, words", [
    ("generationCount", True, "its generationCount must be a whole number, not true"),
    ("totalTokensObserved", 1.5, "its totalTokensObserved must be a whole number, not the number 1.5"),
    ("pendingMessageTokens", "12", r"its pendingMessageTokens must be a whole number, not a string \(2 characters\)"),
    ("bufferedObservationTokens", False, "its bufferedObservationTokens must be a whole number or null, not false"),
    ("generationCount", 2**31, r"its generationCount is the number 2147483648, beyond an INTEGER column's range "
                               r"\(-2,147,483,648 to 2,147,483,647\)"),
    ("isObserving", "yes", r"its isObserving must be true or false \(or 0 or 1\), not a string \(3 characters\)"),
    ("isReflecting", 2, r"its isReflecting must be true or false \(or 0 or 1\), not the number 2"),
    ("isBufferingObservation", 1.0, r"its isBufferingObservation must be true or false \(or 0 or 1\), not the number"),
])
def test_an_observation_rows_numbers_and_flags_must_be_of_their_columns_type(exported, target, field, value, words):
    """JSON's true passed for a number (``True == 1``): libSQL stored it, Postgres refused the import in the
    driver's words ("column ... is of type integer but expression is of type boolean"); a fraction, text or a
    number beyond Postgres' INTEGER went into libSQL as it was ("integer out of range" on Postgres), and "yes"
    for a flag was true on Postgres, text on libSQL. Refused up front on both, naming the row and the field."""
    data = copy.deepcopy(exported)
    data["observations"][0][field] = value
    refused(target, data, r"observations\[0\] \(id '[^']+'\) is refused: " + words)
    # A libSQL export writes the flags 0 and 1, a Postgres export true and false: both import.
    data = copy.deepcopy(exported)
    data["observations"][0].update(isObserving=0, isReflecting=True, bufferedObservationTokens=None)
    with open_store(target) as store:
        import_data(store, data)


def test_working_memory_text_spelling_the_escape_is_no_nul_and_imports(exported, target):
    """Markdown holding the six characters \\u0000 (no NUL), and a version in Markdown spelling it, import as the API
    writes them; a schema memory without a NUL imports and merges afterwards."""
    data = copy.deepcopy(exported)
    data["resources"][0]["workingMemory"] = '# Notes\n- the escape is written \\u0000 in JSON\n'
    data["workingMemory"][0]["versions"][0]["working_memory"] = '{"a": "\\u0000"}'  # format: markdown
    data["threads"][1]["metadata"] = {"workingMemory": '{"name": "Ada", "note": "\\\\u0000 is the escape"}'}
    with open_store(target) as store:
        import_data(store, data)
        memory = Memory(store, {"working_memory": {"enabled": True, "scope": "resource"}})
        assert memory.get_working_memory(resource_id="ada") == data["resources"][0]["workingMemory"]
        schema = {"type": "object", "properties": {"name": {"type": "string"}, "note": {"type": "string"},
                                                   "city": {"type": "string"}}}
        thread_memory = Memory(store, {"working_memory": {"enabled": True, "scope": "thread", "schema": schema}})
        thread_memory.merge_working_memory(patch={"city": "Paris"}, thread_id="t-party", resource_id="ada")
        assert thread_memory.get_working_memory(thread_id="t-party", resource_id="ada") == {
            "name": "Ada", "note": "\\u0000 is the escape", "city": "Paris"}


def test_legacy_rows_mastra_wrote_still_import(exported, target):
    # A v1 row holding AI SDK "core" parts as a JSON list, and one holding plain text: both readable.
    data = copy.deepcopy(exported)
    data["messages"][1].update(type="v1", role="assistant", content=json.dumps(
        [{"type": "tool-call", "toolCallId": "c1", "toolName": "search", "args": {}}]))
    data["messages"][2].update(type="v1", role="tool", content="plain legacy text")
    with open_store(target) as store:
        report = import_data(store, data)
    assert report.written["messages"] == len(data["messages"])


def test_the_cli_names_the_refused_row(exported, target, tmp_path):
    data = copy.deepcopy(exported)
    data["messages"][2]["role"] = "system"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    before = everything(target)
    out, err = io.StringIO(), io.StringIO()
    assert main(["import", "--db", str(target), str(path), "--overwrite"], out=out, err=err) == 1
    assert "messages[2] (id 'g2') is refused: a system message is never stored" in err.getvalue()
    assert "Traceback" not in err.getvalue() and err.getvalue().count("\n") == 1
    assert everything(target) == before


# -- traces: a file's spans stay with the file's own threads and resources --------------------------


def test_spans_never_reach_another_resources_traces(new_db):
    """A span naming a resource the file is not about would be listed among that resource's traces: the
    file is refused. A span whose trace id is a run of another thread here would join that run: the
    file's spans of that trace are left out, with a line saying so, overwrite or not."""
    from core import MemoryOptions
    from core.agent import Agent
    from core.llm import ScriptedModel
    from core.traces.spans import TraceFilters

    # Each database in a folder of its own: a libSQL file keeps its traces in the folder beside it.
    source, target = new_db("src/source.db"), new_db("dst/target.db")
    for path in (source, target):
        if isinstance(path, Path):
            path.parent.mkdir()

    def turn(path: "Path | str", resource: str, thread: str, text: str) -> str:
        with open_store(path) as store:
            agent = Agent("a", instructions="Be brief.", model=ScriptedModel([f"ok: {text}"]),
                          memory=Memory(store, MemoryOptions(last_messages=4)))
            result = agent.generate(text, memory={"resource": resource, "thread": thread})
            assert store.tracer().flush(10.0)
            assert result.trace_id is not None
            return result.trace_id

    turn(source, "eve", "t-eve", "hello")
    bob_run = turn(target, "bob", "t-bob", "my private talk")
    with open_store(source, read_only=True, create=False) as store:
        data = export_resource(store, "eve", ExportOptions(traces=True))
    span = data["traces"][0]

    claims_bob = copy.deepcopy(data)
    claims_bob["traces"].append({**span, "spanId": "f00d0001", "threadId": None, "resourceId": "bob",
                                 "name": "mcp: 'read_thread'"})
    refused(target, claims_bob, r"traces\[\d+\] \(traceId '[0-9a-f]+'\) is refused: it names resource 'bob', "
                                "which is not in the file")
    wrong_owner = copy.deepcopy(data)
    wrong_owner["traces"][0]["resourceId"] = "bob"
    refused(target, wrong_owner, "it says resource 'bob', but its thread 't-eve' belongs to 'eve'")

    joins_bob = copy.deepcopy(data)
    joins_bob["traces"].append({**span, "spanId": "f00d0002", "traceId": bob_run, "parentSpanId": None,
                                "name": "injected into bob's run"})
    for overwrite in (False, True):
        with open_store(target) as store:
            report = import_data(store, joins_bob, overwrite=overwrite)
            assert store.observability is not None
            bobs = store.observability.get_trace(bob_run)
            eves = store.observability.list_traces(filters=TraceFilters(thread_id="t-eve"))
        assert {s.thread_id for s in bobs} == {"t-bob"} and "f00d0002" not in {s.span_id for s in bobs}
        assert any(f"1 span of trace {bob_run} not imported" in line and "a run of thread 't-bob'" in line
                   for line in report.details()), report.details()
        assert len(eves) == 1  # the file's own run came in


def test_observations_never_take_the_place_of_the_targets_own(exported, target):
    """The newest record of a lookup key is the one its agent reads: a file's record for a key the target
    keeps observations of its own for would have become current (or been hidden), replacing what the
    agent sees without --overwrite. Such rows are left out, with a line saying so; a record the target
    already shares with the file (imported before) is matched by id as usual."""
    from core.observational.records import lookup_key
    from core.observational.store import Cursor, Observation, commit_observation, current_record

    key = lookup_key("thread", thread_id="t-groceries", resource_id="ada")
    data = copy.deepcopy(exported)
    for row in data["observations"]:  # exported after the target's own record was made
        row["createdAt"] = "2099-01-01T00:00:00.000Z"
    with open_store(target) as store:
        Memory(store).create_thread(thread_id="t-groceries", resource_id="ada", title="Weekly groceries",
                                    metadata={"topic": "food"})
        commit_observation(store, record=None, key=key, scope="thread", thread_id="t-groceries", resource_id="ada",
                           config={"messageTokens": 100}, obs=Observation(
                               active_observations="* 🔴 (10:00) Ada moved to Oslo", observation_tokens=9,
                               observed_ids=[], tokens_observed=40, pending_after=0,
                               cursor=Cursor("2026-03-01T10:01:00.000Z", "x"), current_task=None))
    for overwrite in (False, True):
        with open_store(target) as store:
            report = import_data(store, data, overwrite=overwrite)
            current = current_record(store, key)
        assert current is not None and current.active_observations == "* 🔴 (10:00) Ada moved to Oslo"
        assert report.written["observations"] == 0
        assert any(f"1 observational-memory row of {key} not imported" in line and "of its own" in line
                   for line in report.details()), report.details()
    assert len([r for r in table_rows(target, "mastra_observational_memory")]) == 1

    # Into a database without observations of its own the record comes in, and a second import matches it.
    elsewhere = copy.deepcopy(exported)
    for row in elsewhere["observations"]:
        row.update(lookupKey=lookup_key("thread", thread_id="t-party", resource_id="ada"), threadId="t-party")
    with open_store(target) as store:
        first, second = import_data(store, elsewhere), import_data(store, elsewhere)
    assert first.written["observations"] == 1 and second.written["observations"] == 0
    assert second.unchanged["observations"] == 1


# -- the edit history: versions are read by message id, wherever the message is ------------------------


def _version(message_id: str, thread: str, text: str, resource: str = "ada") -> dict[str, Any]:
    def row(body: str) -> str:
        return json.dumps({"id": message_id, "thread_id": thread, "content": body, "role": "user", "type": "v1",
                           "createdAt": "2026-03-01T09:00:00.000Z", "resourceId": resource})

    return {"id": 1, "message_id": message_id, "thread_id": thread, "resource_id": resource, "op": "edit",
            "author": "api", "before_row": row(text), "after_row": row("after"), "note": None,
            "createdAt": "2026-03-02T09:00:00.000Z"}


def test_a_version_never_reaches_another_threads_message(exported, target):
    """A message version is read by message id (Message History, undo, the replay of turns before an
    edit): one naming bob's message would have rewritten what bob's turns were shown to have seen."""
    from core.edits.messages import version_rows

    data = copy.deepcopy(exported)  # a version of bob's message, filed under ada's thread
    data["messageVersions"] = [_version("b-note", "t-groceries", "bob said: my PIN is 1234")]
    for overwrite in (False, True):
        with open_store(target) as store:
            report = import_data(store, data, overwrite=overwrite)
            assert version_rows(store, ["b-note"]) == {}
        assert report.written.get("messageVersions", 0) == 0
        assert any("1 message version not imported: its message is in another thread" in line
                   for line in report.details()), report.details()

    bad = copy.deepcopy(exported)
    bad["messageVersions"] = [_version("g1", "t-party", "moved")]  # g1 is t-groceries' in the file
    refused(target, bad, r"messageVersions\[0\] \(message_id 'g1'\) is refused: its message 'g1' is in thread "
                         "'t-groceries' of the file, not 't-party'")
    bad = copy.deepcopy(exported)
    bad["messageVersions"] = [{**_version("g1", "t-groceries", "x"),
                               "before_row": json.dumps({"id": "m-secret", "thread_id": "t-mallory", "content": "x",
                                                         "role": "user", "resourceId": "mallory"})}]
    refused(target, bad, "its before_row is message 'm-secret' of thread 't-mallory', not the version's message 'g1'")
    bad = copy.deepcopy(exported)
    bad["messageVersions"] = [_version("g1", "t-groceries", "x", resource="mallory")]
    refused(target, bad, "it says resource 'mallory', but its thread 't-groceries' belongs to 'ada'")
    bad = copy.deepcopy(exported)
    bad["observationVersions"] = [{"id": 1, "record_id": "om-of-someone", "lookup_key": "resource:mallory",
                                   "thread_id": None, "resource_id": "mallory", "op": "edit", "author": "api",
                                   "line_before": "a", "line_after": "b", "before_text": "a", "after_text": "b",
                                   "note": None, "createdAt": "2026-03-02T09:00:00.000Z"}]
    refused(target, bad, "it is a version of observation record 'om-of-someone', which is not in the file")


def _with_new_thread(data: dict[str, Any], thread_id: str, *, resource_id: str = "ada",
                     message_id: str = "fresh-m1") -> dict[str, Any]:
    """``data`` and one more thread of one message, copied from the file's first ones."""
    data = copy.deepcopy(data)
    data["threads"].append({**data["threads"][0], "id": thread_id, "resourceId": resource_id})
    data["messages"].append({**data["messages"][0], "id": message_id, "threadId": thread_id,
                             "resourceId": resource_id})
    return data


@pytest.mark.parametrize("change, match", [
    (lambda d: _with_new_thread(d, "fresh\x1b]0;owned\x07"),
     r"thread 'fresh\\x1b\]0;owned\\x07' would be new .* its id cannot be a new id: it contains a control "
     r"character \(U\+001B\)"),
    (lambda d: _with_new_thread(d, "fresh", message_id="m\u202e1gp.exe"),
     r"message 'm\\u202e1gp.exe' would be new .* a character that is not printable \(U\+202E\)"),
    (lambda d: _with_new_thread(d, "t" * 300), r"thread 't{60}…' would be new .* it is 300 characters long"),
    (lambda d: _with_new_thread(d, "fresh", resource_id="ev\x1b[8mil"),
     r"thread 'fresh' would be new .* its resourceId cannot be a new id: it contains a control character"),
    # A thread without an owner: every ownership check let it through, so the gateway handed it to anyone.
    (lambda d: _with_new_thread(d, "fresh", resource_id=""),
     r"thread 'fresh' would be new .* its resourceId cannot be a new id: it is empty"),
    (lambda d: {**d, "resources": [*d["resources"], {**d["resources"][0], "id": "eve\u200b"}]},
     r"resource 'eve\\u200b' would be new .* not printable \(U\+200B\)"),
])
def test_new_ids_an_api_client_could_not_create_refuse_the_file(exported, target, tmp_path, change, match):
    """A file's new thread, resource or message took any id but NUL and lone surrogates: an escape sequence
    (which the command line and the Studio print), a bidirectional override, 300 characters, ids that the
    gateway's chat route and the MCP server refuse to create. The file is refused naming the row (import,
    preview and the command line); nothing is written."""
    data = change(exported)
    refused(target, data, match)
    refused(target, data, match, overwrite=True)
    before = everything(target)
    with open_store(target, read_only=True) as store, pytest.raises(ExportFormatError, match=match):
        preview_import(store, data)
    path = tmp_path / "new-ids.json"
    path.write_text(json.dumps(data))
    out, err = io.StringIO(), io.StringIO()
    assert main(["import", "--db", str(target), str(path)], out=out, err=err) == 1
    assert "Nothing was imported" in err.getvalue() and "\x1b" not in err.getvalue() + out.getvalue()
    assert everything(target) == before


def test_rows_another_tool_wrote_with_such_ids_still_import(new_db):
    """The rule is for ids an import would create: a database whose rows have such ids (another tool wrote
    them) exports and imports into itself as before (identical rows are left alone), and takes a new thread
    of such a resource it already knows."""
    path = new_db("legacy.db")
    with open_store(path) as store:
        Memory(store).save_messages([Message.user("old", id="m\x1b[31m", thread_id="legacy\x1b[31m",
                                                  resource_id="ada\x1b[1m")])
        data = export_resource(store, "ada\x1b[1m", ExportOptions())
        report = import_data(store, data)
    assert report.conflicts == [] and report.written.get("threads", 0) == 0
    assert report.unchanged["threads"] == 1 and report.unchanged["messages"] == 1
    # A new thread (with a printable id) of that resource, which the target knows, is imported too.
    with open_store(path) as store:
        report = import_data(store, _with_new_thread(data, "fresh", resource_id="ada\x1b[1m"))
        assert report.written["threads"] == 1 and store.memory.get_thread("fresh").resource_id == "ada\x1b[1m"


def test_a_refused_request_for_anothers_thread_never_reaches_that_threads_export(new_db, tmp_path):
    """A gateway request naming bob's thread for mallory is refused (403), but its run is traced under the
    thread it named, with mallory's message as its input: `export --resource bob --with-traces` carried
    mallory's text in bob's file, and the file could not be imported anywhere ("it says resource 'mallory',
    but its thread 't-bob' belongs to 'bob'"), so one such request broke every backup of bob's memory with
    traces. The export now leaves such runs out; the trace store keeps them (the Traces pane shows the attempt)."""
    import openai

    from core import MemoryOptions
    from core.agent import Agent
    from core.gateway import GatewayServer, create_app
    from core.llm import ScriptedModel

    path = new_db("gw/memory.db")
    if isinstance(path, Path):
        path.parent.mkdir()
    with open_store(path) as store:
        memory = Memory(store, MemoryOptions(last_messages=10))
        memory.save_messages([Message.user("bob's own note", thread_id="t-bob", resource_id="bob")])
        agent = Agent("chat", instructions="Chat.", model=ScriptedModel(["ok"] * 5), memory=memory)
        with GatewayServer(create_app([agent], token="")) as server:
            client = openai.OpenAI(base_url=server.base_url, api_key="-", max_retries=0, timeout=60)
            with pytest.raises(openai.PermissionDeniedError):
                client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "MALLORY-PROBE"}],
                                               metadata={"thread_id": "t-bob", "resource_id": "mallory"})
            client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "bob again"}],
                                           metadata={"thread_id": "t-bob", "resource_id": "bob"})
        assert store.tracer().flush(30)
        assert store.observability is not None
        assert any(r.resource_id == "mallory" for r in store.observability.list_traces(limit=10))  # kept there
    exported = tmp_path / "bob.json"
    out, err = io.StringIO(), io.StringIO()
    assert main(["export", "--db", str(path), "--resource", "bob", "--with-traces", "-o", str(exported)],
                out=out, err=err) == 0, err.getvalue()
    text = exported.read_text()
    assert "MALLORY-PROBE" not in text and "mallory" not in text
    data = json.loads(text)
    assert data["traces"] and {s["resourceId"] for s in data["traces"]} == {"bob"}
    fresh = new_db("fresh/memory.db")
    if isinstance(fresh, Path):
        fresh.parent.mkdir()
    with open_store(fresh) as store:
        report = import_data(store, data)
    assert report.written["threads"] == 1 and report.written["traces"] == len(data["traces"])


@pytest.mark.parametrize("change, match", [
    # A thread of bob's, who has memory in the target: his resource-scoped recall would find its messages.
    (lambda d: _with_new_thread(d, "t-planted", resource_id="bob", message_id="m-planted"),
     r"threads\[\d\] \(id 't-planted'\) belongs to resource 'bob', but the file is the export of resource 'ada'"),
    # A new resource beside the file's own: a user the target does not know yet.
    (lambda d: _with_new_thread(d, "t-eve", resource_id="eve"),
     r"threads\[\d\] \(id 't-eve'\) belongs to resource 'eve', but the file is the export of resource 'ada'"),
    # Bob's resource row (his working memory, his metadata) riding along with ada's.
    (lambda d: {**d, "resources": [*d["resources"], {**d["resources"][0], "id": "bob", "workingMemory": "# Bob\n"}]},
     r"resources\[1\] belongs to resource 'bob', but the file is the export of resource 'ada'"),
    # The scope rewritten to name another user than the rows are about.
    (lambda d: {**d, "scope": {"kind": "resource", "id": "bob"}},
     r"resources\[0\] belongs to resource 'ada', but the file is the export of resource 'bob'"),
    (lambda d: {**d, "scope": {"kind": "thread", "id": "t-nowhere"}},
     r"the export of thread 't-nowhere', which it does not hold"),
    # No scope at all: the rows still belong to one resource.
    (lambda d: _with_new_thread({k: v for k, v in d.items() if k != "scope"}, "t-planted", resource_id="bob"),
     r"belongs to resource 'bob', but the file is about resource 'ada'"),
])
def test_a_file_never_writes_into_a_resource_other_than_the_one_it_exports(exported, target, tmp_path, change, match):
    """A file that says it is the export of resource ada (the Studio's confirmation reads "Import resource
    ada from …") carried a thread of bob's: it was imported into bob's memory, where his resource-scoped recall
    found its messages, and the report named no resource. An export is one resource's memory; a file naming
    another is refused, naming the row (import, overwrite, preview and the command line); nothing is written."""
    data = change(exported)
    refused(target, data, match)
    refused(target, data, match, overwrite=True)
    with open_store(target, read_only=True) as store, pytest.raises(ExportFormatError, match=match):
        preview_import(store, data)
    path = tmp_path / "two-resources.json"
    path.write_text(json.dumps(data))
    out, err = io.StringIO(), io.StringIO()
    assert main(["import", "--db", str(target), str(path)], out=out, err=err) == 1
    assert "Nothing was imported; export each resource to a file of its own" in err.getvalue() \
        or "which it does not hold" in err.getvalue()

