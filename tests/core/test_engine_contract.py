"""The seams of the engine: the processor contract, the no-op tracer, one ownership rule, one
exception root (docs/ARCHITECTURE.md, "Engine ↔ processor contract")."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
from datetime import datetime, timezone

import pytest

import core
import core.processors
from core import (
    Memory,
    MemoryOptions,
    MemoryServices,
    MemoryStudioError,
    Message,
    MessageList,
    ProcessorContext,
    RequestContext,
    ThreadOwnershipError,
)
from core.assembly import TurnAssembler
from core.llm import ScriptedModel
from core.options import (
    InputFilterOptions,
    MessageHistoryOptions,
    ObservationalMemoryOptions,
    SemanticRecallOptions,
    WorkingMemoryOptions,
)
from core.processors import BaseProcessor, MessageHistory, ObservationalMemory
from core.timeutil import FixedClock
from core.tokens import default_tokenizer
from core.traces.tracer import InMemorySpanExporter, NoopTracer, Tracer
from core.working_memory import WorkingMemoryService

BUILT_INS = {
    "memory-input-filter": ("MemoryInputFilter", InputFilterOptions),
    "working-memory": ("WorkingMemory", WorkingMemoryOptions),
    "message-history": ("MessageHistory", MessageHistoryOptions),
    "semantic-recall": ("SemanticRecall", SemanticRecallOptions),
    "observational-memory": ("ObservationalMemory", ObservationalMemoryOptions),
}


def core_modules() -> list[str]:
    return [m.name for m in pkgutil.walk_packages(core.__path__, "core.")]


# -- the processor contract ----------------------------------------------------------------------

def test_processors_module_exports_every_processor_and_its_options() -> None:
    for name in core.processors.__all__:
        assert getattr(core.processors, name) is not None, name
    for pid, (cls_name, options_type) in BUILT_INS.items():
        cls = getattr(core.processors, cls_name)
        assert cls.id == pid
        assert cls_name in core.processors.__all__ and options_type.__name__ in core.processors.__all__
        assert getattr(core.processors, options_type.__name__) is options_type
        # One options type per processor, taken by its constructor.
        assert inspect.signature(cls).parameters["options"].annotation in (
            f"{options_type.__name__} | None", options_type | None)


@pytest.mark.parametrize("options_type", [t for _, t in BUILT_INS.values()], ids=lambda t: t.__name__)
def test_every_options_field_has_a_documented_default(options_type: type) -> None:
    options = options_type()  # every field has a default
    doc = inspect.getdoc(options_type) or ""
    assert doc, f"{options_type.__name__} has no docstring"
    for f in dataclasses.fields(options_type):
        assert f"``{f.name}``" in doc, f"{options_type.__name__}.{f.name} is not documented"
    assert dataclasses.is_dataclass(options)


def test_processors_get_typed_services_not_the_facade(store) -> None:
    seen: list[ProcessorContext] = []

    class Spy(BaseProcessor):
        id = "spy"

        def process_input(self, ctx: ProcessorContext) -> None:
            seen.append(ctx)

    clock = FixedClock(datetime(2026, 1, 1, tzinfo=timezone.utc))
    mem = Memory(store, processors=[Spy()], clock=clock)
    mem.assemble(thread_id="t", resource_id="u", input="hi")
    (ctx,) = seen
    assert isinstance(ctx.services, MemoryServices)
    assert not hasattr(ctx, "memory")
    assert ctx.services.store is store and ctx.store is store
    assert ctx.services.clock is clock and ctx.services.working_memory is mem.working_memory_service
    assert ctx.services.recall_index is None  # semantic recall is off
    assert not isinstance(mem, TurnAssembler) and isinstance(mem.assembler, TurnAssembler)


def test_a_processor_runs_on_services_built_without_a_memory(store) -> None:
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    store.memory.create_thread(thread_id="t", resource_id="u")
    store.memory.save_messages([Message.user(f"m{i}", thread_id="t", resource_id="u", created_at=t0.replace(minute=i))
                                for i in range(3)])
    saved: list[Message] = []

    def save(messages):  # what the facade would persist; here only recorded
        saved.extend(messages)
        return list(messages)

    services = MemoryServices(store=store, tokenizer=default_tokenizer(), working_memory=WorkingMemoryService(store),
                              save_messages=save)
    request = RequestContext(thread_id="t", resource_id="u", options=MemoryOptions())
    ctx = ProcessorContext(request=request, messages=MessageList(thread_id="t", resource_id="u"), services=services)
    history = MessageHistory(MessageHistoryOptions(last_messages=2))
    history.process_input(ctx)
    assert [m.text for m in ctx.messages.messages("memory")] == ["m1", "m2"]
    assert ctx.notes["message-history"] == {"loaded": 2, "limit": 2}
    ctx.messages.add(Message.user("new", thread_id="t", resource_id="u"), "input")
    ctx.live = True
    history.process_output(ctx)
    assert [m.text for m in saved] == ["new"] and ctx.saved == saved


def test_last_messages_still_sets_the_history_options() -> None:
    assert MemoryOptions(last_messages=3).message_history == MessageHistoryOptions(last_messages=3)
    assert MemoryOptions(last_messages=False).message_history.limit == 0
    assert MemoryOptions().message_history.limit == 10


def test_observational_options_reach_the_observer(store) -> None:
    observer = ScriptedModel(["* 🔴 (09:00) User likes tea.\n"], name="observer")
    om = {"message_tokens": 1, "observation_tokens": 100_000, "observer_temperature": 0.7}
    mem = Memory(store, MemoryOptions(observational_memory=om), observer_model=observer)
    mem.save_messages([Message.user("I like tea", thread_id="t", resource_id="u")])
    ctx = mem.new_context(mem.request_context(thread_id="t", resource_id="u"))
    ctx.live = True
    mem.prepare_input(ctx, input="hello")
    mem.run_input(ctx)
    assert [r.temperature for r in observer.requests] == [0.7]
    with pytest.raises(core.OptionsError, match="max_compression_level"):
        ObservationalMemoryOptions(max_compression_level=9)
    # A processor built with its own options uses them instead of the turn's.
    assert ObservationalMemory(ObservationalMemoryOptions(observer_temperature=0.1)).options.observer_temperature == 0.1


# -- tracing --------------------------------------------------------------------------------------

def test_memory_without_a_tracer_holds_the_noop_tracer(store) -> None:
    mem = Memory(store)
    assert isinstance(mem.tracer, NoopTracer)
    assert mem.new_context(mem.request_context(thread_id=None, resource_id=None)).tracer is mem.tracer
    assert mem.turn_tracer() is store.tracer()  # agent turns still go to the trace file by default


def test_processor_spans_go_to_the_memory_tracer(store) -> None:
    exporter = InMemorySpanExporter()
    mem = Memory(store, tracer=Tracer(exporter))
    mem.assemble(thread_id="t", resource_id="u", input="hi")
    assert [s.name for s in exporter.spans] == ["processor: memory-input-filter (input)",
                                                "processor: message-history (input)"]


# -- one ownership rule ---------------------------------------------------------------------------

def test_every_ownership_check_raises_the_same_error(store) -> None:
    mem = Memory(store, MemoryOptions(working_memory={"enabled": True, "scope": "thread"}))
    mem.create_thread(resource_id="owner", thread_id="t")
    service = mem.working_memory_service
    opts = mem.options.working_memory
    calls = [
        lambda: mem.request_context(thread_id="t", resource_id="intruder"),
        lambda: mem.recall(thread_id="t", resource_id="intruder"),
        lambda: mem.thread_message_ids(thread_id="t", resource_id="intruder"),
        lambda: mem.save_messages([Message.user("x", thread_id="t", resource_id="intruder")]),
        lambda: mem.update_working_memory(thread_id="t", resource_id="intruder", working_memory="# x"),
        lambda: service.write(opts, thread_id="t", resource_id="intruder", value="# x"),
        lambda: service.write(WorkingMemoryOptions(enabled=True), thread_id="t", resource_id="intruder",
                              value="# x"),  # resource scope, through a thread of another resource
    ]
    for call in calls:
        with pytest.raises(ThreadOwnershipError, match='belongs to resource "owner"'):
            call()
    # The model's update tool gets the refusal as a result, as before.
    result = service.apply_tool_call(opts, thread_id="t", resource_id="intruder", args={"memory": "# x"})
    assert not result.success and 'belongs to resource "owner"' in result.message
    assert mem.get_working_memory(thread_id="t", resource_id="owner") is None


def test_a_threads_message_ids_are_its_stored_messages_and_nothing_else(store) -> None:
    """``thread_message_ids``: what ``recall(per_page=False)`` lists, by id, without reading them; checked
    like ``recall``."""
    from core.storage import NotFoundError

    mem = Memory(store)
    mem.save_messages([Message.user(f"m{i}", thread_id="t", resource_id="r") for i in range(3)]
                      + [Message.user("elsewhere", thread_id="other", resource_id="r")])
    mem.create_thread(resource_id="r", thread_id="empty")
    listed = mem.recall(thread_id="t", resource_id="r", per_page=False).messages
    assert mem.thread_message_ids(thread_id="t", resource_id="r") == {m.id for m in listed} and len(listed) == 3
    assert mem.thread_message_ids(thread_id="t") == {m.id for m in listed}
    assert mem.thread_message_ids(thread_id="empty", resource_id="r") == frozenset()
    with pytest.raises(NotFoundError, match="No thread found with id missing"):
        mem.thread_message_ids(thread_id="missing", resource_id="r")


# -- one exception root ---------------------------------------------------------------------------

def test_every_engine_exception_subclasses_the_root() -> None:
    found = []
    for name in core_modules():
        module = importlib.import_module(name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == name and issubclass(cls, BaseException):
                found.append(cls)
                assert issubclass(cls, MemoryStudioError), f"{name}.{cls.__name__} is not a MemoryStudioError"
    assert len(found) >= 25  # the walk did reach every module


def test_errors_keep_their_builtin_kinds_and_are_exported() -> None:
    assert "MemoryStudioError" in core.__all__
    for name in ("RecallError", "ModelError", "ModelNotInstalledError", "OpenAICompatibleModel", "ScriptedModel",
                 "OpenAIEmbedder", "HashingEmbedder", "LoopbackServer"):
        assert name in core.__all__ and getattr(core, name) is not None
    assert issubclass(core.ThreadOwnershipError, PermissionError)
    assert issubclass(core.NotFoundError, LookupError)
    assert issubclass(core.OptionsError, ValueError) and issubclass(core.InvalidArgumentError, ValueError)
    assert issubclass(core.StorageError, RuntimeError) and issubclass(core.RecallError, RuntimeError)
