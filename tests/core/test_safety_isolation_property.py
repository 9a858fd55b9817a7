"""Property: no sequence of public calls hands one resource's data to another (issue 9, item 4).

Random sequences of every public Memory call (threads, mixed and hostile batches, working memory in
both scopes, recall, search, assemble, agent turns with the working-memory tool, observational
memory, deletes) run over three resources. Every message a resource writes carries that resource's
marker word and a shared word, so lexical recall really is tempted across resources; whatever is
handed back to a resource (messages, hits, prompts, working memory, observations) must carry no
other resource's marker. Derandomised (tests/conftest.py) and bounded, so it runs in seconds.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import sqlalchemy as sa
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from core import (
    AlreadyExistsError,
    InvalidArgumentError,
    Memory,
    MemoryOptions,
    Message,
    NotFoundError,
    ThreadOwnershipError,
    open_store,
)
from core.agent import Agent
from core.embedding import HashingEmbedder
from core.llm import ScriptedModel, ScriptedReply, tool_call
from core.storage import schema as t
from core.timeutil import FixedClock
from core.tokens import EstimatingTokenizer

RESOURCES = ("r1", "r2", "r3")
HOSTILE_RESOURCES = ("r1\x00evil", "r2\ud800")
THREADS = ("t1", "t2", "t3", "t4")
HOSTILE_THREADS = ("t1\x00x",)
MARK = {"r1": "alphamark", "r2": "bravomark", "r3": "charliemark"}
WORDS = ("bicycle", "garden", "invoice")
TEMPLATE = "# User\n- Note:\n"
SCHEMA = {"type": "object", "properties": {"note": {"type": "string"}}}
REFUSED = (InvalidArgumentError, ThreadOwnershipError)

resources = st.sampled_from(RESOURCES)
any_resource = st.sampled_from(RESOURCES + HOSTILE_RESOURCES)
threads = st.sampled_from(THREADS)
any_thread = st.sampled_from(THREADS + HOSTILE_THREADS)
words = st.sampled_from(WORDS)


def foreign(text: str, resource: str) -> list[str]:
    """Markers of resources other than ``resource`` found in ``text``."""
    return [MARK[o] for o in RESOURCES if o != resource and MARK[o] in text]


def hostile(*ids: str) -> bool:
    return any(i in HOSTILE_RESOURCES or i in HOSTILE_THREADS for i in ids)


def observer(messages, tools):  # noqa: ANN001 - the Responder signature
    """Writes down every marker it was shown: a leak into its prompt becomes a leak in the log."""
    seen = sorted({m for m in MARK.values() for msg in messages if m in str(msg.get("content"))})
    return ("<observations>\nDate: Jan 2, 2025\n* 🔴 (09:00) User mentioned " + " ".join(seen or ["nothing"])
            + "\n</observations>\n<current-task>\nPrimary: " + " ".join(seen) + "\n</current-task>")


class Isolation(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.store = open_store(":memory:")
        clock = FixedClock(datetime(2025, 1, 2, 9, 0, tzinfo=timezone.utc), step_ms=1000)
        self.mem = Memory(self.store, MemoryOptions(
            last_messages=6, working_memory={"enabled": True, "template": TEMPLATE},
            semantic_recall={"enabled": True, "scope": "resource", "top_k": 5, "mode": "hybrid"},
        ), embedder=HashingEmbedder(), clock=clock)
        self.thread_wm = Memory(self.store, MemoryOptions(
            working_memory={"enabled": True, "scope": "thread", "schema": SCHEMA}), name="thread-wm", clock=clock)
        self.om = Memory(self.store, MemoryOptions(observational_memory={
            "enabled": True, "message_tokens": 20, "observation_tokens": 10_000}),
            name="om", observer_model=ScriptedModel(observer, name="observer"), tokenizer=EstimatingTokenizer(),
            clock=clock)
        self.owner: dict[str, str] = {}  # thread -> resource, as the engine must see it
        self.msg_owner: dict[str, str] = {}  # message id -> resource
        self.msg_thread: dict[str, str] = {}

    def teardown(self) -> None:
        self.store.close()

    # -- helpers ---------------------------------------------------------------------------------
    def _written(self, ids: list[str]) -> list[Message]:
        with self.store.db.read() as conn:
            marks = ",".join("?" * len(ids))
            rows = conn.exec_driver_sql(f"SELECT id FROM mastra_messages WHERE id IN ({marks})", tuple(ids)).all()
        return rows

    def _remember(self, saved: list[Message], resource: str) -> None:
        for m in saved:
            self.msg_owner[m.id] = resource
            self.msg_thread[m.id] = m.thread_id or ""

    def _check_messages(self, msgs: list[Message], resource: str) -> None:
        for m in msgs:
            assert self.msg_owner.get(m.id, resource) == resource, (m.id, m.text, resource)
            assert not foreign(json.dumps(m.content, ensure_ascii=False), resource), (m.text, resource)

    def _refusal_expected(self, resource: str, thread: str) -> bool:
        return thread in self.owner and self.owner[thread] != resource

    # -- threads ---------------------------------------------------------------------------------
    @rule(resource=any_resource, thread=any_thread)
    def create_thread(self, resource: str, thread: str) -> None:
        try:
            self.mem.create_thread(resource_id=resource, thread_id=thread)
        except InvalidArgumentError:
            assert hostile(resource, thread)
            return
        except AlreadyExistsError:
            assert thread in self.owner
            return
        assert not hostile(resource, thread) and thread not in self.owner
        self.owner[thread] = resource

    @rule(thread=threads)
    def delete_thread(self, thread: str) -> None:
        self.mem.delete_thread(thread)
        self.owner.pop(thread, None)
        for mid in [m for m, th in self.msg_thread.items() if th == thread]:
            self.msg_owner.pop(mid)
            self.msg_thread.pop(mid)

    # -- messages --------------------------------------------------------------------------------
    @rule(batch=st.lists(st.tuples(any_resource, any_thread, words, st.booleans()), min_size=1, max_size=4))
    def save_messages(self, batch: list[tuple[str, str, str, bool]]) -> None:
        msgs = []
        for resource, thread, word, is_user in batch:
            text = f"{MARK.get(resource, 'hostilemark')} {word}"
            msg = Message.user(text) if is_user else Message.assistant(text)
            msg.thread_id, msg.resource_id = thread, resource  # hostile ids get past construction this way
            msgs.append(msg)
        owners = dict(self.owner)
        conflict = False
        for resource, thread, _, _ in batch:
            if owners.setdefault(thread, resource) != resource:
                conflict = True
        try:
            saved = self.mem.save_messages(msgs)
        except REFUSED as exc:
            bad_ids = hostile(*(i for r, th, _, _ in batch for i in (r, th)))
            assert isinstance(exc, InvalidArgumentError) if bad_ids else conflict
            assert self._written([m.id for m in msgs]) == []  # refused whole
            for _, thread, _, _ in batch:
                if thread not in self.owner and not hostile(thread):
                    assert self.mem.get_thread(thread) is None
            return
        assert not conflict and not hostile(*(i for r, th, _, _ in batch for i in (r, th)))
        self.owner = owners
        for m in saved:
            self._remember([m], m.resource_id or "")

    @rule(resource=any_resource, thread=threads)
    def recall(self, resource: str, thread: str) -> None:
        try:
            result = self.mem.recall(thread_id=thread, resource_id=resource, per_page=False)
        except InvalidArgumentError:
            assert hostile(resource)
            return
        except ThreadOwnershipError:
            assert self._refusal_expected(resource, thread)
            return
        except NotFoundError:
            assert thread not in self.owner
            return
        assert not self._refusal_expected(resource, thread)
        self._check_messages(result.messages, resource)

    @rule(resource=any_resource, other=resources, word=words)
    def search(self, resource: str, other: str, word: str) -> None:
        try:
            hits = self.mem.search(f"{MARK[other]} {word}", resource_id=resource)
        except InvalidArgumentError:
            assert hostile(resource)
            return
        for hit in hits:
            assert self.msg_owner.get(hit.message_id) == resource, (hit, resource)

    @rule(resource=any_resource, thread=threads, other=resources, word=words)
    def assemble(self, resource: str, thread: str, other: str, word: str) -> None:
        try:
            prompt = self.mem.assemble(thread_id=thread, resource_id=resource, input=f"{MARK[other]} {word}")
        except InvalidArgumentError:
            assert hostile(resource)
            return
        except ThreadOwnershipError:
            assert self._refusal_expected(resource, thread)
            return
        assert not self._refusal_expected(resource, thread)
        shown = " ".join(str(m.get("content")) for m in prompt.messages[:-1])  # all but the input
        assert not foreign(shown, resource), shown

    # -- working memory --------------------------------------------------------------------------
    @rule(resource=any_resource, thread=st.none() | threads)
    def update_working_memory(self, resource: str, thread: str | None) -> None:
        try:
            self.mem.update_working_memory(resource_id=resource, thread_id=thread,
                                           working_memory=f"# User\n- Note: {MARK.get(resource, 'x')}\n")
        except InvalidArgumentError:
            assert hostile(resource)
            return
        except ThreadOwnershipError:
            assert thread is not None and self._refusal_expected(resource, thread)
            return
        assert not (thread is not None and self._refusal_expected(resource, thread))

    @rule(resource=any_resource, thread=st.none() | threads)
    def get_working_memory(self, resource: str, thread: str | None) -> None:
        try:
            value = self.mem.get_working_memory(resource_id=resource, thread_id=thread)
        except InvalidArgumentError:
            assert hostile(resource)
            return
        except ThreadOwnershipError:
            assert thread is not None and self._refusal_expected(resource, thread)
            return
        assert not foreign(str(value), resource)

    @rule(resource=any_resource, thread=threads)
    def thread_working_memory(self, resource: str, thread: str) -> None:
        try:
            self.thread_wm.merge_working_memory(thread_id=thread, resource_id=resource,
                                                patch={"note": MARK.get(resource, "x")})
        except InvalidArgumentError:
            assert hostile(resource)
        except ThreadOwnershipError:
            assert self._refusal_expected(resource, thread)
        except NotFoundError:
            assert thread not in self.owner
        try:
            value = self.thread_wm.get_working_memory(thread_id=thread, resource_id=resource)
        except InvalidArgumentError:
            assert hostile(resource)
            return
        except ThreadOwnershipError:
            assert self._refusal_expected(resource, thread)
            return
        assert not self._refusal_expected(resource, thread)
        assert not foreign(json.dumps(value), resource)

    # -- agent turns -----------------------------------------------------------------------------
    def _turn(self, memory: Memory, resource: str, thread: str, word: str, replies: list) -> None:
        model = ScriptedModel(replies)
        agent = Agent("helper", instructions="Be brief.", model=model, memory=memory, tracer=False)
        try:
            result = agent.generate(f"{MARK[resource]} {word}", memory={"resource": resource, "thread": thread})
        except ThreadOwnershipError:
            assert self._refusal_expected(resource, thread)
            assert model.requests == []
            return
        assert not self._refusal_expected(resource, thread)
        for request in model.requests:
            sent = " ".join(str(m.get("content")) for m in request.messages)
            assert not foreign(sent, resource), sent
        self.owner.setdefault(thread, resource)
        self._remember(result.saved, resource)

    @rule(resource=resources, thread=threads, word=words, update=st.booleans())
    def agent_turn(self, resource: str, thread: str, word: str, update: bool) -> None:
        replies: list = [f"ok {MARK[resource]}"]
        if update:
            note = f"# User\n- Note: {MARK[resource]} {word}\n"
            replies.insert(0, ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": note}),)))
        self._turn(self.mem, resource, thread, word, replies)

    @rule(resource=resources, thread=threads, word=words)
    def observational_turn(self, resource: str, thread: str, word: str) -> None:
        self._turn(self.om, resource, thread, word, [f"noted {MARK[resource]} {word} " * 3])

    # -- what every resource can see -------------------------------------------------------------
    @invariant()
    def threads_and_observations_stay_with_their_owner(self) -> None:
        for resource in RESOURCES:
            for thread in self.mem.list_threads(resource_id=resource):
                assert self.owner.get(thread.id) == resource
                assert not foreign(json.dumps(thread.metadata or {}, ensure_ascii=False), resource)
        with self.store.db.read() as conn:
            rows = conn.execute(sa.select(t.observational_memory.c.threadId, t.observational_memory.c.resourceId,
                                          t.observational_memory.c.activeObservations)).all()
        for thread_id, resource_id, log in rows:
            owner = self.owner.get(thread_id or "", resource_id)
            if owner is None:
                continue  # the thread was deleted; its log is no one's to read
            assert not foreign(log or "", owner), (owner, log)


TestIsolation = Isolation.TestCase
TestIsolation.settings = settings(max_examples=20, stateful_step_count=12, deadline=None)
