"""Working memory: merge rules, template guard, scopes, tool, instruction text (spec §4 items 28–47)."""

from __future__ import annotations

import json
import threading

import pytest

from core import ConcurrentUpdateError, Memory, MemoryOptions, Message, OptionsError, WorkingMemoryError
from core.working_memory import hide_working_memory, instruction, tool_definition
from core.working_memory_schema import empty_object, strip_nulls_from_optional, working_memory_merge

# Engine behaviour: every test here runs on libSQL and on Postgres.
pytestmark = pytest.mark.backends

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "city": {"type": "string"},
        "tone": {"type": "string"},
        "prefs": {"type": "object", "properties": {"food": {"type": "string"}, "color": {"type": "string"}}},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
}


# -- merge rules ------------------------------------------------------------------------------------
def test_merge_with_null_update_returns_equal_new_object():
    existing = {"name": "Alice", "age": 30}
    merged = working_memory_merge(existing, None)
    assert merged == existing and merged is not existing
    assert working_memory_merge(None, None) == {} and working_memory_merge(None, {}) == {}


def test_null_deletes_and_nested_objects_merge():
    assert working_memory_merge({"name": "Alice", "location": "Seattle", "age": 30}, {"location": None}) == {
        "name": "Alice", "age": 30}
    merged = working_memory_merge({"about": {"name": "A", "location": "NYC"}, "work": "x"}, {"about": {"age": 30}})
    assert merged == {"about": {"name": "A", "location": "NYC", "age": 30}, "work": "x"}
    merged = working_memory_merge({"about": {"location": "NYC", "timezone": "EST"}}, {"about": {"location": None}})
    assert merged == {"about": {"timezone": "EST"}}


def test_arrays_replace_and_type_swaps_take_update():
    assert working_memory_merge({"people": ["A", "B"]}, {"people": ["C"]}) == {"people": ["C"]}
    assert working_memory_merge({"items": [1, 2, 3]}, {"items": []}) == {"items": []}
    assert working_memory_merge({"x": {"a": 1}}, {"x": "s"}) == {"x": "s"}
    assert working_memory_merge({"x": "s"}, {"x": {"a": 1}}) == {"x": {"a": 1}}
    assert working_memory_merge({"x": [1]}, {"x": {"a": 1}}) == {"x": {"a": 1}}
    assert working_memory_merge({"x": {"a": 1}}, {"x": [1]}) == {"x": [1]}


def test_inputs_never_mutated_and_null_in_new_branch_dropped():
    existing = {"a": {"b": 1}}
    update = {"a": {"c": [1, 2]}, "d": None}
    merged = working_memory_merge(existing, update)
    assert existing == {"a": {"b": 1}} and update == {"a": {"c": [1, 2]}, "d": None}
    merged["a"]["c"].append(3)
    assert update["a"]["c"] == [1, 2]
    assert working_memory_merge(None, {"name": "Ada", "role": None}) == {"name": "Ada"}


def test_optional_nulls_are_stripped_for_tool_calls():
    assert strip_nulls_from_optional(SCHEMA, {"prefs": {"color": None}, "tags": ["c"]}) == {"prefs": {}, "tags": ["c"]}


# A schema as Pydantic writes it (``Profile.model_json_schema()``): nested models are local refs.
PYDANTIC_SCHEMA = {
    "$defs": {"Address": {"type": "object", "title": "Address",
                          "properties": {"city": {"type": "string"}, "zip": {"type": "string"}}}},
    "type": "object", "title": "Profile",
    "properties": {"name": {"type": "string"}, "home": {"$ref": "#/$defs/Address"},
                   "work": {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}], "default": None}},
}


def test_a_schema_with_local_refs_is_followed_for_the_tool_the_shape_and_optional_nulls():
    """Refs point at the schema's root; inside the tool's parameters the schema sits under "memory", so
    "#/$defs/Address" resolved nowhere (a provider checking the schema refuses it) and the shape showed
    the nested model as "". Optional nulls are stripped inside referenced models as in inline ones."""
    import jsonschema

    from core.options import WorkingMemoryOptions

    opts = WorkingMemoryOptions(enabled=True, schema=PYDANTIC_SCHEMA)
    params = tool_definition(opts)["function"]["parameters"]
    validator = jsonschema.Draft7Validator(params)
    assert validator.is_valid({"memory": {"home": {"city": "Oslo"}}})
    assert not validator.is_valid({"memory": {"home": {"city": 7}}})  # the ref resolved: its types apply
    assert '{"name":"","home":{"city":"","zip":""},"work":{"city":"","zip":""}}' in instruction(opts, None, read_only=False)
    padded = {"home": {"city": None, "zip": "0150"}, "work": {"city": "Bergen", "zip": None}}
    assert strip_nulls_from_optional(PYDANTIC_SCHEMA, padded) == {"home": {"zip": "0150"}, "work": {"city": "Bergen"}}


# -- facade ------------------------------------------------------------------------------------------
@pytest.fixture
def schema_memory(store):
    return Memory(store, MemoryOptions(working_memory={"enabled": True, "schema": SCHEMA}))


@pytest.fixture
def md_memory(store):
    return Memory(store, MemoryOptions(working_memory={"enabled": True, "template": "# User\n- Name:\n- City:\n"}))


def test_schema_tool_call_merges_with_and_without_wrapper(schema_memory):
    m = schema_memory
    m.update_working_memory(resource_id="u", working_memory={"name": "A"})
    result = m.apply_working_memory_tool(thread_id=None, resource_id="u", args={"memory": {"tone": "warm"}})
    assert result.success
    assert m.get_working_memory(resource_id="u") == {"name": "A", "tone": "warm"}
    assert m.apply_working_memory_tool(thread_id=None, resource_id="u", args={"name": "Grace", "age": 42}).success
    assert m.get_working_memory(resource_id="u") == {"name": "Grace", "tone": "warm", "age": 42}


def test_schema_tool_wrong_type_is_refused_and_nothing_written(schema_memory):
    m = schema_memory
    m.update_working_memory(resource_id="u", working_memory={"name": "A"})
    result = m.apply_working_memory_tool(thread_id=None, resource_id="u", args={"memory": {"age": "old"}})
    assert not result.success and "age" in result.message
    assert m.get_working_memory(resource_id="u") == {"name": "A"}


def test_optional_null_from_tool_does_not_delete(schema_memory):
    m = schema_memory
    m.update_working_memory(resource_id="u", working_memory={"prefs": {"food": "rice", "color": "blue"}, "tags": ["a", "b"]})
    m.apply_working_memory_tool(thread_id=None, resource_id="u", args={"memory": {"prefs": {"color": None}, "tags": ["c"]}})
    assert m.get_working_memory(resource_id="u") == {"prefs": {"food": "rice", "color": "blue"}, "tags": ["c"]}


def test_the_schema_tool_never_tells_the_model_that_null_deletes(schema_memory):
    """Mastra #14424: the tool description promised null-deletes that the tool (which drops a null for a
    field the schema does not require, #20992) never makes, so a model "deleted" a field and believed it."""
    m = schema_memory
    description = m.working_memory_tool()["function"]["description"]
    m.update_working_memory(resource_id="u", working_memory={"name": "Ada", "city": "Oslo"})
    assert m.apply_working_memory_tool(thread_id=None, resource_id="u", args={"memory": {"city": None}}).success
    assert m.get_working_memory(resource_id="u") == {"name": "Ada", "city": "Oslo"}  # what the tool does
    lowered = description.lower()
    assert "null to delete" not in lowered and "null deletes" not in lowered
    assert "null never deletes" in lowered and "empty string" in lowered  # what it says instead
    assert m.apply_working_memory_tool(thread_id=None, resource_id="u", args={"memory": {"city": ""}}).success
    assert m.get_working_memory(resource_id="u") == {"name": "Ada", "city": ""}  # and that advice works


@pytest.mark.parametrize("raw", ['{"memory": {"score": NaN, "name": "Bo"}}', '{"memory": {"score": Infinity}}',
                                 '{"score": 1e400}', '{"memory": {"extra": {"x": -Infinity}}}'])
def test_non_json_numbers_from_a_model_are_refused(store, raw):
    """Python's JSON parser takes NaN / Infinity in a model's tool arguments (and 1e400 as infinity), and
    JSON Schema's "number" accepts them; stored, no JSON reader (Mastra's JSON.parse) could read the
    memory back. Refused, with the stored value kept."""
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "score": {"type": "number"}}}
    memory = Memory(store, MemoryOptions(working_memory={"enabled": True, "schema": schema}))
    memory.update_working_memory(resource_id="u", working_memory={"name": "Ada", "score": 2.5})
    result = memory.apply_working_memory_tool(thread_id=None, resource_id="u", args=json.loads(raw))
    assert not result.success and "NaN and Infinity are not JSON numbers" in result.message
    assert memory.get_working_memory(resource_id="u") == {"name": "Ada", "score": 2.5}
    with pytest.raises(WorkingMemoryError, match="standard JSON"):
        memory.update_working_memory(resource_id="u", working_memory={"name": "Ada", "score": float("nan")})
    with pytest.raises(WorkingMemoryError, match="standard JSON"):
        memory.merge_working_memory(resource_id="u", patch='{"score": -Infinity}')
    assert memory.get_working_memory(resource_id="u") == {"name": "Ada", "score": 2.5}


def test_an_integer_beyond_a_double_is_refused_as_import_refuses_it(store):
    """An integer of 4,000 digits (a model's tool call, an MCP client's update, an in-process caller) was stored
    whole: Mastra reads it as Infinity. Refused by import's rule (``stored_text.number_beyond_double``), naming it."""
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "score": {"type": "number"}}}
    memory = Memory(store, MemoryOptions(working_memory={"enabled": True, "schema": schema}))
    memory.update_working_memory(resource_id="u", working_memory={"name": "Ada", "score": 2.5})
    huge = int("1" + "0" * 4000)
    result = memory.apply_working_memory_tool(thread_id=None, resource_id="u",
                                              args=json.loads('{"memory": {"score": 1%s}}' % ("0" * 4000)))
    assert not result.success and "10000000000000000000…(4,001 digits) is beyond what a double" in result.message
    for call in (lambda: memory.update_working_memory(resource_id="u", working_memory={"name": "Ada", "score": huge}),
                 lambda: memory.merge_working_memory(resource_id="u", patch={"score": -huge}),
                 lambda: memory.update_working_memory(resource_id="u", working_memory={"name": "Ada",
                                                                                         "score": 10 ** 20_000})):
        with pytest.raises(WorkingMemoryError, match="beyond what a double holds"):
            call()
    assert memory.get_working_memory(resource_id="u") == {"name": "Ada", "score": 2.5}
    memory.update_working_memory(resource_id="u", working_memory={"name": "Ada", "score": 10 ** 307})
    assert memory.get_working_memory(resource_id="u")["score"] == 10 ** 307


def test_merge_working_memory_api(schema_memory):
    m = schema_memory
    m.update_working_memory(resource_id="u", working_memory={"name": "A", "tone": "calm"})
    assert m.merge_working_memory(resource_id="u", patch='{"city":"Oslo","tone":null}') == {"name": "A", "city": "Oslo"}
    assert m.merge_working_memory(resource_id="u", patch={"city": "Bergen"})["city"] == "Bergen"


@pytest.mark.parametrize("bad", [[1, 2], "not json", 42, '"a string"'])
def test_non_object_patch_is_refused(schema_memory, bad):
    schema_memory.update_working_memory(resource_id="u", working_memory={"name": "A"})
    with pytest.raises(WorkingMemoryError):
        schema_memory.merge_working_memory(resource_id="u", patch=bad)
    assert schema_memory.get_working_memory(resource_id="u") == {"name": "A"}


# The model's refusal never says a null deletes: its nulls are dropped, as its tool description says.
UPDATE_NOT_AN_OBJECT = ('The JSON working-memory update must be an object of the fields to change, such as '
                        '{{"name": "Ada"}} (a field left out is kept), not {came}. Nothing changed.')


def test_the_models_json_update_that_is_not_an_object_is_named_in_json_words(schema_memory):
    """The model's updateWorkingMemory tool with a memory that is no JSON object (an array, a number, the text null)
    was told "A working-memory patch must be a JSON object, got list" (NoneType for the text null): Python's type
    names, which the model never sent. The scripted model's calls run through a real turn (staged), and the refusal
    the model reads says what came in JSON's words and what to send; nothing is written. Arguments that are not an
    object at all are named the same way."""
    from core import Agent
    from core.llm import ScriptedModel, ScriptedReply, tool_call

    m = schema_memory
    m.update_working_memory(resource_id="u", working_memory={"name": "Ada"})
    calls = (tool_call("updateWorkingMemory", {"memory": [1, 2]}), tool_call("updateWorkingMemory", {"memory": 5}),
             tool_call("updateWorkingMemory", {"memory": "null"}), tool_call("updateWorkingMemory", {"memory": '"Bo"'}),
             tool_call("updateWorkingMemory", "[1]"))
    model = ScriptedModel([ScriptedReply(tool_calls=calls), "Noted."])
    reply = Agent("a", instructions="Help.", model=model, memory=m, tracer=False).generate(
        "hi", memory={"resource": "u", "thread": "t"})
    told = [json.loads(msg["content"]) for msg in model.requests[-1].messages if msg["role"] == "tool"]
    assert [t.get("message", t.get("error")) for t in told] == [
        UPDATE_NOT_AN_OBJECT.format(came="an array (2 items)"), UPDATE_NOT_AN_OBJECT.format(came="the number 5"),
        UPDATE_NOT_AN_OBJECT.format(came="JSON text that reads as null"),
        UPDATE_NOT_AN_OBJECT.format(came="JSON text that reads as a string (2 characters)"),
        "Your arguments for updateWorkingMemory could not be read (tool arguments must be a JSON object of argument "
        "names and values, not an array (1 item)). Send them again as a JSON object."]
    assert reply.text == "Noted." and m.get_working_memory(resource_id="u") == {"name": "Ada"}


def test_a_whole_value_of_the_wrong_kind_is_named_in_json_words(schema_memory, md_memory, store):
    """Setting the whole working memory (the API, the gateway's PUT, the Studio's save) to a value of the wrong kind
    said "got NoneType" / "got dict"; it now names what came as JSON does, and nothing is written."""
    schema_memory.update_working_memory(resource_id="u", working_memory={"name": "Ada"})
    with pytest.raises(WorkingMemoryError) as refused:
        schema_memory.update_working_memory(resource_id="u", working_memory=None)
    assert str(refused.value) == ('The JSON working memory must be an object of all its fields, such as '
                                  '{"name": "Ada"}, not null. Nothing changed.')
    with pytest.raises(WorkingMemoryError) as refused:
        schema_memory.update_working_memory(resource_id="u", working_memory="[]")
    assert "not JSON text that reads as an array (0 items). Nothing changed." in str(refused.value)
    with pytest.raises(WorkingMemoryError) as refused:
        md_memory.update_working_memory(resource_id="v", working_memory={"name": "Ada"})
    assert str(refused.value) == ("Markdown working memory must be a string (its whole text), not an object (1 key). "
                                  "Nothing changed. Configure working_memory.schema to store objects.")
    assert schema_memory.get_working_memory(resource_id="u") == {"name": "Ada"}
    assert md_memory.get_working_memory(resource_id="v") is None


def test_merge_requires_schema_mode(md_memory):
    with pytest.raises(WorkingMemoryError, match="schema"):
        md_memory.merge_working_memory(resource_id="u", patch={"a": 1})


def test_schema_violation_rejected_with_clear_message(schema_memory):
    with pytest.raises(WorkingMemoryError, match="age"):
        schema_memory.update_working_memory(resource_id="u", working_memory={"age": "thirty"})
    assert schema_memory.get_working_memory(resource_id="u") is None


def test_template_and_schema_never_both():
    with pytest.raises(OptionsError, match="not both"):
        MemoryOptions(working_memory={"enabled": True, "template": "# x", "schema": SCHEMA})


@pytest.mark.parametrize("bad", [{"type": "array"}, {"type": "object", "properties": 5}, "not a schema"])
def test_invalid_schema_rejected(bad):
    with pytest.raises((OptionsError, WorkingMemoryError)):
        MemoryOptions(working_memory={"enabled": True, "schema": bad})


def test_resource_scope_is_shared_across_threads(md_memory):
    m = md_memory
    m.create_thread(resource_id="u", thread_id="t1")
    m.create_thread(resource_id="u", thread_id="t2")
    m.update_working_memory(thread_id="t1", resource_id="u", working_memory="# User\n- Name: Ada\n")
    assert m.get_working_memory(thread_id="t2", resource_id="u") == "# User\n- Name: Ada\n"
    prompt = m.assemble(thread_id="t2", resource_id="u", input="hi")
    assert "- Name: Ada" in prompt.fragments_from("working-memory")[0].text


def test_markdown_template_guard(md_memory):
    m = md_memory
    m.update_working_memory(resource_id="u", working_memory="# User\n- Name: Ada\n- City:\n")
    result = m.apply_working_memory_tool(thread_id=None, resource_id="u", args={"memory": "# User\n- Name:\n  - City:"})
    assert not result.success and "template" in result.message
    assert m.get_working_memory(resource_id="u") == "# User\n- Name: Ada\n- City:\n"
    assert m.apply_working_memory_tool(thread_id=None, resource_id="u", args={"memory": "# User\n- Name: Bo\n"}).success
    assert m.get_working_memory(resource_id="u") == "# User\n- Name: Bo\n"
    assert not m.apply_working_memory_tool(thread_id=None, resource_id="u", args={"memory": {"x": 1}}).success


@pytest.mark.parametrize("blank", ["", "   \n\n", "\t"])
def test_a_blank_memory_from_the_model_does_not_erase_the_stored_one(md_memory, blank):
    """Regression (a small model's update calls, SmolLM2-135M): ``{"memory": ""}`` replaced the stored
    memory with nothing and the model was told "Working memory updated."; the empty-template guard
    caught only the template. A blank memory is refused like the template, in a turn (staged) too."""
    from core import Agent
    from core.llm import ScriptedModel, ScriptedReply, tool_call

    m = md_memory
    stored = "# User\n- Name: Ada\n- City: Lisbon\n"
    m.update_working_memory(resource_id="u", working_memory=stored)
    result = m.apply_working_memory_tool(thread_id=None, resource_id="u", args={"memory": blank})
    assert not result.success and "erase" in result.message and "Nothing changed" in result.message
    assert m.get_working_memory(resource_id="u") == stored

    model = ScriptedModel([ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": blank}),)), "Noted."])
    agent = Agent("a", instructions="Help.", model=model, memory=m, tracer=False)
    reply = agent.generate("hi", memory={"resource": "u", "thread": "t"})
    assert reply.text == "Noted."
    told = next(msg for msg in model.requests[-1].messages if msg["role"] == "tool")
    assert "erase" in told["content"]
    assert m.get_working_memory(resource_id="u") == stored
    # With nothing stored yet there is nothing to erase: a blank memory is written as before.
    assert m.apply_working_memory_tool(thread_id=None, resource_id="v", args={"memory": blank}).success


@pytest.mark.parametrize("tag", ["working_memory", "working_memory_data"])
def test_our_own_tags_echoed_around_the_models_memory_are_not_stored(md_memory, schema_memory, tag):
    """Regression (a small model's update calls, SmolLM2-135M): a Markdown memory the model wrapped in
    ``<working_memory>…</working_memory>`` (our prompt's tags, echoed back) was stored with them, so
    the next prompt showed the tags nested inside its own ``<working_memory_data>``; in schema mode the
    same wrapping around JSON text was refused as "not valid JSON". One enclosing pair is dropped;
    text that only mentions a tag, or a nested pair, stays as written."""
    from core import Agent
    from core.llm import ScriptedModel, ScriptedReply, tool_call

    m = md_memory
    m.update_working_memory(resource_id="u", working_memory="# User\n- Name: Bo\n")
    wrapped = f"<{tag}>\n# User\n- Name: Ada\n- City: Lisbon\n</{tag}>\n"
    assert m.apply_working_memory_tool(thread_id=None, resource_id="u", args={"memory": wrapped}).success
    assert m.get_working_memory(resource_id="u") == "# User\n- Name: Ada\n- City: Lisbon"
    # In a turn (the update is staged and written with the turn's messages), and in the next prompt.
    model = ScriptedModel([ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {
        "memory": f"<{tag}># User\n- Name: Cy\n</{tag}>"}),)), "Noted.", "Hello."])
    agent = Agent("a", instructions="Help.", model=model, memory=m, tracer=False)
    agent.generate("I am Cy.", memory={"resource": "u", "thread": "t"})
    assert m.get_working_memory(resource_id="u") == "# User\n- Name: Cy"
    agent.generate("hi", memory={"resource": "u", "thread": "t"})
    system = "\n".join(msg["content"] for msg in model.requests[-1].messages if msg["role"] == "system")
    assert "<working_memory_data>\n# User\n- Name: Cy\n</working_memory_data>" in system
    assert system.count(f"<{tag}>") == (1 if tag == "working_memory_data" else 0)

    # Only one enclosing pair goes; a memory that merely mentions the tag, or holds two elements, stays.
    kept = [
        "# User\n- Asked what <working_memory> means\n",
        f"<{tag}>a</{tag}>\n<{tag}>b</{tag}>",
        f"<{tag}>unclosed\n# User",
        f"Notes:\n<{tag}>x</{tag}>",
    ]
    for text in kept:
        assert m.apply_working_memory_tool(thread_id=None, resource_id="u", args={"memory": text}).success
        assert m.get_working_memory(resource_id="u") == text
    nested = f"<{tag}><{tag}>x</{tag}></{tag}>"
    assert m.apply_working_memory_tool(thread_id=None, resource_id="u", args={"memory": nested}).success
    assert m.get_working_memory(resource_id="u") == f"<{tag}>x</{tag}>"
    # An empty pair is an empty memory: refused, the stored one kept.
    result = m.apply_working_memory_tool(thread_id=None, resource_id="u", args={"memory": f"<{tag}>\n</{tag}>"})
    assert not result.success and "erase" in result.message
    assert m.get_working_memory(resource_id="u") == f"<{tag}>x</{tag}>"

    # Schema mode: JSON text wrapped in the tags is the JSON inside, merged as usual.
    s = schema_memory
    s.update_working_memory(resource_id="s", working_memory={"city": "Porto"})
    result = s.apply_working_memory_tool(thread_id=None, resource_id="s",
                                         args={"memory": f"<{tag}>{{\"name\": \"Ada\"}}</{tag}>"})
    assert result.success, result.message
    assert s.get_working_memory(resource_id="s") == {"city": "Porto", "name": "Ada"}
    # A tag inside a field's value is the user's data, kept.
    assert s.apply_working_memory_tool(thread_id=None, resource_id="s",
                                       args={"memory": {"tone": f"<{tag}>calm</{tag}>"}}).success
    assert s.get_working_memory(resource_id="s")["tone"] == f"<{tag}>calm</{tag}>"


def test_concurrent_updates_never_corrupt(md_memory):
    m = md_memory
    values = ["# User\n- Name: Bob\n", "# User\n- Name: Charlie\n"]
    errors: list[BaseException] = []

    def write(v: str) -> None:
        try:
            for _ in range(10):
                m.update_working_memory(resource_id="u", working_memory=v)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(v,)) for v in values]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert m.get_working_memory(resource_id="u") in values


def test_concurrent_merges_lose_no_field(schema_memory):
    m = schema_memory
    fields = [f"f{i}" for i in range(8)]
    schema_less = Memory(m.store, MemoryOptions(working_memory={"enabled": True, "schema": {
        "type": "object", "properties": {f: {"type": "string"} for f in fields}}}))

    def merge(f: str) -> None:
        schema_less.merge_working_memory(resource_id="u", patch={f: "x"})

    threads = [threading.Thread(target=merge, args=(f,)) for f in fields]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert schema_less.get_working_memory(resource_id="u") == {f: "x" for f in fields}


def test_thread_scope_stored_in_thread_metadata(store):
    m = Memory(store, MemoryOptions(working_memory={"enabled": True, "scope": "thread"}))
    m.create_thread(resource_id="u", thread_id="t", metadata={"custom": True})
    m.update_working_memory(thread_id="t", resource_id="u", working_memory="# notes")
    assert m.get_thread("t").metadata == {"custom": True, "workingMemory": "# notes"}
    with pytest.raises(LookupError, match="Thread missing not found"):
        m.update_working_memory(thread_id="missing", resource_id="u", working_memory="x")


def test_resource_scope_without_resource_id_is_refused(md_memory):
    with pytest.raises(WorkingMemoryError, match="no resource id"):
        md_memory.get_working_memory(thread_id="t")


def test_disabled_working_memory_is_refused(store):
    with pytest.raises(WorkingMemoryError, match="not enabled"):
        Memory(store).update_working_memory(resource_id="u", working_memory="x")


@pytest.mark.parametrize("wm", [{"enabled": False}, {"enabled": True, "agent_managed": False},
                                {"enabled": True, "agent_managed": False, "schema": SCHEMA},
                                {"enabled": True, "agent_managed": False, "version": "vnext"}])
def test_a_tool_call_the_model_was_not_offered_writes_nothing(store, wm):
    """A model can call updateWorkingMemory although the tool was not offered (hallucinated, or told to
    by text in the conversation); with working memory off or kept by the application it must not write."""
    from core import Agent
    from core.llm import ScriptedModel
    from core.llm.scripted import ScriptedReply, tool_call

    if "schema" in wm:
        args: dict[str, str] = {"name": "Mallory"}
    elif wm.get("version") == "vnext":
        args = {"newMemory": "- Role: admin"}
    else:
        args = {"memory": "# User\n- Role: admin"}
    model = ScriptedModel([ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", args),)), "done"])
    agent = Agent(name="wm-agent", instructions="Be brief.", model=model,
                  memory=Memory(store, MemoryOptions(working_memory=wm)))
    result = agent.generate("hi", memory={"thread": "t", "resource": "u"})
    assert model.requests[0].tools in (None, [])  # not offered
    assert result.tool_results[0]["result"]["success"] is False
    assert "cannot update it" in result.tool_results[0]["result"]["message"]
    reader = Memory(store, MemoryOptions(working_memory={"enabled": True}))
    assert reader.get_working_memory(thread_id="t", resource_id="u") is None


def test_a_staged_update_a_concurrent_change_made_invalid_does_not_lose_the_turn(store):
    """The model's merge is validated when it calls the tool and written with the turn's messages. If
    another writer's change meanwhile makes it invalid for the schema (here: age needs name, and name
    was deleted), the update is left out and the other writer's value stands; the turn's messages
    are still saved (the whole turn used to fail with the schema error)."""
    from core import Agent
    from core.llm import ScriptedModel
    from core.llm.scripted import ScriptedReply, tool_call

    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "dependencies": {"age": ["name"]}}
    mem = Memory(store, MemoryOptions(working_memory={"enabled": True, "schema": schema}))
    mem.update_working_memory(resource_id="u", working_memory={"name": "Ada"})
    calls = []

    def respond(messages, tools):
        calls.append(1)
        if len(calls) == 1:
            return ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": {"age": 36}}),))
        mem.merge_working_memory(resource_id="u", patch={"name": None})  # another thread of the user, meanwhile
        return "Noted."

    agent = Agent(name="wm-race", instructions="Be brief.", model=ScriptedModel(respond), memory=mem)
    result = agent.generate("I am 36.", memory={"thread": "t", "resource": "u"})
    assert result.tool_results[0]["result"]["success"] is True and result.text == "Noted."
    assert [m.text for m in mem.recall(thread_id="t", resource_id="u").messages] == ["I am 36.", "Noted."]
    assert mem.get_working_memory(resource_id="u") == {}


def test_initial_working_memory_from_thread_metadata(store):
    m = Memory(store, MemoryOptions(working_memory={"enabled": True}))
    m.create_thread(resource_id="u", thread_id="t", metadata={"workingMemory": "# Patient\n- Blood type: O+"})
    assert m.get_working_memory(thread_id="t", resource_id="u") == "# Patient\n- Blood type: O+"
    thread_scope = Memory(store, MemoryOptions(working_memory={"enabled": True, "scope": "thread"}))
    thread_scope.create_thread(resource_id="u", thread_id="t2", metadata={"workingMemory": "# T2"})
    assert thread_scope.get_working_memory(thread_id="t2", resource_id="u") == "# T2"


def test_invalid_initial_schema_memory_writes_nothing(schema_memory):
    with pytest.raises(WorkingMemoryError):
        schema_memory.create_thread(resource_id="u", thread_id="t", metadata={"workingMemory": {"age": "x"}})
    assert schema_memory.get_thread("t") is None


def test_read_only_shows_data_without_tool(md_memory):
    m = md_memory
    m.update_working_memory(resource_id="u", working_memory="# User\n- Name: Ada\n")
    prompt = m.assemble(thread_id="t", resource_id="u", input="hi", options={"read_only": True})
    text = prompt.fragments_from("working-memory")[0].text
    assert "READ-ONLY" in text and "- Name: Ada" in text
    assert prompt.tools == []
    assert m.working_memory_tool({"read_only": True}) is None


def test_thread_scope_without_a_thread_id_shows_no_memory_offers_no_tool_and_says_why(store):
    # Mastra shows its instruction with empty data and offers the tool here, whose every call then fails ("Thread
    # ID is required"): we show neither (ARCHITECTURE, "Where we differ from Mastra on purpose").
    m = Memory(store, MemoryOptions(working_memory={"enabled": True, "scope": "thread"}))
    m.create_thread(resource_id="u", thread_id="t")
    m.update_working_memory(thread_id="t", resource_id="u", working_memory="# Notes\n- kept in t\n")
    without = m.assemble(thread_id=None, resource_id="u", input="hi")
    assert without.fragments_from("working-memory") == [] and without.tools == []
    assert not any("working_memory" in str(message.get("content")) for message in without.messages)
    assert without.skipped["working-memory"].startswith("working memory is thread-scoped and this call gives no "
                                                         "thread id")
    assert "Give the call a thread id, or set working_memory.scope to 'resource'" in without.skipped["working-memory"]
    state = Memory(store, MemoryOptions(working_memory={"enabled": True, "scope": "thread", "use_state_signals": True}))
    assert state.assemble(thread_id=None, resource_id="u", input="hi").tools == []
    # A model that calls the tool anyway is told why nothing was written.
    refused = m.apply_working_memory_tool(thread_id=None, resource_id="u", args={"memory": "# Notes\n- x\n"})
    assert not refused.success and "needs a thread id" in refused.message
    with_thread = m.assemble(thread_id="t", resource_id="u", input="hi")
    assert "- kept in t" in with_thread.fragments_from("working-memory")[0].text
    assert [tool["function"]["name"] for tool in with_thread.tools] == ["updateWorkingMemory"]


@pytest.mark.parametrize("scope", ["thread", "resource"])
@pytest.mark.parametrize("kind", ["markdown", "schema", "vnext"])
def test_the_models_tool_makes_the_thread_it_names_when_it_is_not_stored(store, scope, kind):
    """As Mastra's tool (``createThread`` when the thread is missing): outside a turn's save (a direct call, a
    session's tool before its first items are saved) a thread-scoped update was refused "Thread new not found",
    and a resource-scoped one claimed no thread, which another resource could then take."""
    wm: dict = {"enabled": True, "scope": scope}
    args: dict = {"memory": "# Notes\n- likes tea\n"}
    if kind == "schema":
        wm["schema"], args = SCHEMA, {"memory": {"name": "Ada"}}
    if kind == "vnext":
        wm["version"], args = "vnext", {"newMemory": "- likes tea", "updateReason": "append-new-memory"}
    m = Memory(store, MemoryOptions(working_memory=wm))
    result = m.apply_working_memory_tool(thread_id="new", resource_id="u", args=args)
    assert result.success, result.message
    thread = m.get_thread("new")
    assert thread is not None and thread.resource_id == "u" and thread.title == ""
    stored = m.get_working_memory(thread_id="new", resource_id="u")
    assert stored == {"name": "Ada"} if kind == "schema" else "likes tea" in stored
    assert ("workingMemory" in thread.metadata) == (scope == "thread")
    with pytest.raises(Exception, match="belongs to resource"):  # the thread is u's from then on
        m.save_messages([Message.user("mine now", thread_id="new", resource_id="bob")])
    m.save_messages([Message.user("hello", thread_id="new", resource_id="u")])
    # Refused updates make nothing (the thread is made in the write's own transaction), nor does a call naming no
    # resource (no owner to give the thread).
    bad = {"memory": {"age": "old"}} if kind == "schema" else {"memory": 5} if kind == "markdown" else {
        "newMemory": "x", "updateReason": "clarify-existing-memory"}
    assert not m.apply_working_memory_tool(thread_id="other", resource_id="u", args=bad).success
    assert not m.apply_working_memory_tool(thread_id="third", resource_id=None, args=args).success
    assert m.get_thread("other") is None and m.get_thread("third") is None


def test_the_apis_thread_scoped_write_still_needs_a_stored_thread(store):
    # Mastra's Memory.updateWorkingMemory throws "Thread … not found" (only its tool makes the thread): the API,
    # the gateway and MCP write into threads that exist.
    m = Memory(store, MemoryOptions(working_memory={"enabled": True, "scope": "thread"}))
    with pytest.raises(Exception, match="Thread new not found"):
        m.update_working_memory(thread_id="new", resource_id="u", working_memory="# Notes\n")
    assert m.get_thread("new") is None


def test_instruction_structure_markdown_and_json():
    from core.options import WorkingMemoryOptions

    md = instruction(WorkingMemoryOptions(enabled=True, template="# T\n- a:"), None, read_only=False)
    assert "<working_memory_template>\n# T\n- a:\n</working_memory_template>" in md
    assert "<working_memory_data>\nnull\n</working_memory_data>" in md
    js = instruction(WorkingMemoryOptions(enabled=True, schema={
        "type": "object", "properties": {"name": {"type": "string"},
                                         "prefs": {"type": "object", "properties": {"food": {"type": "string"},
                                                                                    "color": {"type": "string"}}},
                                         "tags": {"type": "array"}}}), None, read_only=False)
    assert '{"name":"","prefs":{"food":"","color":""},"tags":[]}' in js
    assert "<working_memory_template>" not in js and "JSON" in js


def test_tool_definitions():
    from core.options import WorkingMemoryOptions

    md = tool_definition(WorkingMemoryOptions(enabled=True))
    assert md["function"]["name"] == "updateWorkingMemory"
    assert md["function"]["parameters"]["properties"]["memory"]["type"] == "string"
    assert md["function"]["parameters"]["required"] == ["memory"]
    js = tool_definition(WorkingMemoryOptions(enabled=True, schema=SCHEMA))
    assert js["function"]["parameters"]["properties"]["memory"] == SCHEMA
    assert empty_object(SCHEMA)["tags"] == []


def test_persisted_messages_hide_working_memory(store):
    m = Memory(store, MemoryOptions(working_memory={"enabled": True}))
    from core.messages import tool_invocation_part

    assistant = Message.assistant("Hello <working_memory>secret</working_memory> world", parts=[
        tool_invocation_part("c1", "updateWorkingMemory", {"memory": "x"}, {"success": True})],
        thread_id="t", resource_id="u")
    only_tool = Message.assistant("", parts=[tool_invocation_part("c2", "updateWorkingMemory", {"memory": "y"})],
                                  thread_id="t", resource_id="u")
    saved = m.save_messages([Message.user("hi", thread_id="t", resource_id="u"), assistant, only_tool])
    assert [s.text for s in saved] == ["hi", "Hello  world"]
    stored = m.recall(thread_id="t").messages[-1]
    assert [p["type"] for p in stored.parts] == ["text"]
    assert "working_memory" not in json.dumps(stored.content)
    assert hide_working_memory({"parts": [{"type": "text", "text": "plain"}]}) == {"parts": [{"type": "text", "text": "plain"}]}
    # The tags in the content string alone (a client that wrote its own parts) are stripped too.
    only_content = {"format": 2, "parts": [{"type": "text", "text": "Hi"}],
                    "content": "Hi <working_memory>secret</working_memory>"}
    assert hide_working_memory(only_content) == {"format": 2, "parts": [{"type": "text", "text": "Hi"}], "content": "Hi"}
    client = Message.assistant("Hi", thread_id="t", resource_id="u")
    client.content["content"] = only_content["content"]
    m.save_messages([client])
    assert "secret" not in json.dumps(m.recall(thread_id="t").messages[-1].content)


def test_versions_are_kept_and_concurrent_studio_write_is_detected(md_memory):
    m = md_memory
    svc = m.working_memory_service
    opts = m.effective_options().working_memory
    m.update_working_memory(resource_id="u", working_memory="v1")
    m.update_working_memory(resource_id="u", working_memory="v2")
    versions = svc.versions("resource", "u")
    assert [v.text for v in versions] == ["v2", "v1"]
    with pytest.raises(ConcurrentUpdateError) as info:
        svc.write(opts, thread_id=None, resource_id="u", value="studio edit", author="studio", expected="v1")
    assert info.value.current == "v2"
    assert m.get_working_memory(resource_id="u") == "v2"


def test_template_override_takes_effect_next_turn(store):
    import sqlalchemy as sa

    from core.storage import schema as t
    from core.timeutil import iso_now

    m = Memory(store, MemoryOptions(working_memory={"enabled": True, "template": "# Old"}), name="agent-x")
    assert "# Old" in m.assemble(resource_id="u", input="hi").fragments_from("working-memory")[0].text
    with store.db.write() as conn:
        conn.execute(sa.insert(t.memory_configs).values(name="agent-x", template="# New template", author="studio",
                                                        createdAt=iso_now()))
    assert "# New template" in m.assemble(resource_id="u", input="hi").fragments_from("working-memory")[0].text


def test_replayed_turn_shows_working_memory_as_it_was(store):
    from datetime import datetime, timezone

    from core.timeutil import FixedClock

    clock = FixedClock(datetime(2026, 5, 1, tzinfo=timezone.utc), step_ms=60_000)
    m = Memory(store, MemoryOptions(working_memory={"enabled": True, "template": "# U\n- Name:\n"}), clock=clock)
    m.update_working_memory(resource_id="u", working_memory="# U\n- Name: Old\n")
    first = Message.user("first", thread_id="t", resource_id="u", created_at=clock.now())
    m.save_messages([first])
    m.update_working_memory(resource_id="u", working_memory="# U\n- Name: New\n")
    replay = m.assemble(thread_id="t", resource_id="u", as_of=first.id)
    text = replay.fragments_from("working-memory")[0].text
    assert "- Name: Old" in text and "New" not in text
    assert "New" in m.assemble(thread_id="t", resource_id="u", input="now").fragments_from("working-memory")[0].text
