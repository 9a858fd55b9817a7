"""Working-memory editing logic, config overrides and diffs, on a real libSQL file (no Qt)."""

from __future__ import annotations

import json

import pytest

from core import ConcurrentUpdateError, Memory, MemoryOptions, Message, WorkingMemoryError, open_store
from studio.logic.diffing import line_diff, normalize_for_diff, stats, unified
from core.agent_configs import save_override, validate_template
from studio.logic.memory_config import parse_schema
from studio.logic.wm_editing import (
    WmDraft,
    WmTarget,
    changed_paths,
    parse_json_object,
    save_wm,
    target_for,
)
from studio.reads import config_state, load_wm
from studio.selection import Selection

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "prefs": {"type": "object", "properties": {"food": {"type": "string"}, "color": {"type": "string"}}},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
}


@pytest.fixture()
def store(tmp_path):
    s = open_store(tmp_path / "memory.db")
    yield s
    s.close()


def test_markdown_draft_dirty_and_template_warning():
    draft = WmDraft(baseline="# User\n- Name: Sam", fmt="markdown", template="# User\n- Name:")
    assert draft.initial_text() == "# User\n- Name: Sam"
    assert not draft.is_dirty("# User\n- Name: Sam")
    assert draft.is_dirty("# User\n- Name: Samuel")
    check = draft.check("# User\n- Name:")
    assert check.ok and "empty template" in check.warnings[0]


def test_json_draft_validates_as_you_type_and_previews_the_merge():
    stored = json.dumps({"name": "Sam", "prefs": {"food": "ramen", "color": "blue"}, "tags": ["a", "b"]})
    draft = WmDraft(baseline=stored, fmt="json", schema=SCHEMA, json_mode="merge")
    bad = draft.check('{"name": ')
    assert not bad.ok and bad.problems[0].startswith("JSON syntax: line 1")
    wrong = draft.check('{"name": 42}')
    assert not wrong.ok and "name" in wrong.problems[0] and "string" in wrong.problems[0]
    good = draft.check('{"prefs": {"color": null}, "tags": ["c"]}')
    assert good.ok
    assert good.preview is not None
    assert good.preview.result == {"name": "Sam", "prefs": {"food": "ramen"}, "tags": ["c"]}
    assert json.loads(good.value or "") == good.preview.result
    assert changed_paths(good.preview.current, good.preview.result) == ["prefs.color (deleted)", "tags"]
    gone = draft.check('{"name": null}')
    assert gone.preview is not None and gone.preview.deleted == ("name",)


def test_json_replace_mode_round_trips_and_is_clean():
    stored = json.dumps({"name": "Sam"})
    draft = WmDraft(baseline=stored, fmt="json", schema=SCHEMA, json_mode="replace")
    assert parse_json_object(draft.initial_text())[0] == {"name": "Sam"}
    assert not draft.is_dirty(draft.initial_text())
    assert draft.is_dirty('{"name": "Samuel"}')
    assert parse_json_object("[1]")[1] is not None


def test_target_follows_scope():
    from core import WorkingMemoryOptions

    res, _ = target_for(Selection("alice", "t1"), WorkingMemoryOptions(enabled=True))
    assert res == WmTarget("resource", "alice", "t1", "alice")
    th, _ = target_for(Selection("alice", "t1"), WorkingMemoryOptions(enabled=True, scope="thread"))
    assert th is not None and th.owner_id == "t1"
    none, why = target_for(Selection("alice", None), WorkingMemoryOptions(enabled=True, scope="thread"))
    assert none is None and "pick a thread" in why


def test_save_detects_a_concurrent_agent_change(store):
    mem = Memory(store, MemoryOptions(working_memory={"enabled": True}), name="assistant")
    mem.create_thread(resource_id="alice", thread_id="t1")
    mem.update_working_memory(thread_id="t1", resource_id="alice", working_memory="v1")
    snap = load_wm(store, Selection("alice", "t1"))
    assert snap.text == "v1" and snap.target is not None
    mem.update_working_memory(thread_id="t1", resource_id="alice", working_memory="v2 by agent")
    with pytest.raises(ConcurrentUpdateError) as err:
        save_wm(store, snap.options, snap.target, "mine", expected=snap.text)
    assert err.value.current == "v2 by agent"
    assert mem.get_working_memory(thread_id="t1", resource_id="alice") == "v2 by agent"
    save_wm(store, snap.options, snap.target, "mine", expected="v2 by agent")
    versions = load_wm(store, Selection("alice", "t1")).versions
    assert [v.text for v in versions] == ["mine", "v2 by agent", "v1"]
    assert versions[0].author == "studio"


def test_override_is_validated_versioned_and_used_on_the_next_turn(store):
    assert validate_template("   ")
    assert validate_template('{"a": 1}')
    assert parse_schema("{")[1][0].startswith("line 1")
    assert parse_schema('{"type": "string"}')[1]
    with pytest.raises(WorkingMemoryError):
        save_override(store, "assistant", template="")
    agent = Memory(store, MemoryOptions(working_memory={"enabled": True}), name="assistant")
    agent.create_thread(resource_id="alice", thread_id="t1")
    agent.register("travel-agent")
    save_override(store, "assistant", template="# Trip\n- Destination:")
    prompt = agent.assemble(thread_id="t1", resource_id="alice", input=[Message.user("hi")])
    assert "- Destination:" in prompt.fragments_from("working-memory")[0].text
    save_override(store, "assistant", schema=SCHEMA)
    state = config_state(store, "assistant")
    assert [v.kind for v in state.versions] == ["schema", "template"]
    assert agent.effective_options().working_memory.mode == "json"
    snap = load_wm(store, Selection("alice", "t1"))
    assert snap.agent is not None and snap.memory_name == "assistant"
    assert snap.fmt == "json" and snap.config is not None and snap.config.current is not None


def test_line_diff_and_json_normalisation():
    lines = line_diff("a\nb\nc", "a\nB\nc\nd")
    assert [(ln.kind, ln.text) for ln in lines] == [
        ("equal", "a"), ("delete", "b"), ("insert", "B"), ("equal", "c"), ("insert", "d")
    ]
    assert stats(lines).label() == "+2 −1"
    assert stats(line_diff("x", "x")).unchanged
    assert normalize_for_diff('{"b":1,"a":2}', "json") == normalize_for_diff('{"a": 2, "b": 1}', "json")
    assert "+d" in unified("a", "a\nd")


def test_patch_between_is_the_inverse_of_the_merge() -> None:
    from core.working_memory_schema import working_memory_merge
    from studio.logic.wm_editing import patch_between

    before = {"name": "Bob", "prefs": {"food": "ramen", "color": "blue"}, "tags": ["a"], "gone": 1}
    after = {"name": "Robert", "prefs": {"food": "ramen", "size": "L"}, "tags": ["a", "b"], "new": {"x": 1}}
    patch = patch_between(before, after)
    assert patch == {"name": "Robert", "prefs": {"color": None, "size": "L"}, "tags": ["a", "b"], "new": {"x": 1},
                     "gone": None}
    assert working_memory_merge(before, patch) == after
    assert patch_between(after, after) == {}


def test_switching_json_mode_keeps_an_unsaved_edit() -> None:
    import json

    from studio.logic.wm_editing import WmDraft, switch_json_mode

    stored = json.dumps({"name": "Bob", "city": "Oslo"})
    draft = WmDraft(stored, "json", json_mode="replace")
    text, converted = switch_json_mode(draft, json.dumps({"name": "Robert", "city": "Oslo"}), "merge")
    assert converted and json.loads(text) == {"name": "Robert"} and draft.json_mode == "merge"
    text, converted = switch_json_mode(draft, text, "replace")
    assert converted and json.loads(text) == {"name": "Robert", "city": "Oslo"}
    text, converted = switch_json_mode(draft, '{"name": ', "merge")  # not JSON yet: kept as typed
    assert not converted and text == '{"name": ' and draft.json_mode == "merge"
    clean = WmDraft(stored, "json", json_mode="replace")
    assert switch_json_mode(clean, clean.initial_text(), "merge") == ("{\n  \n}", True)  # nothing to carry
