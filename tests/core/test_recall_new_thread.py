"""``Memory.recall`` on a thread not stored yet (Mastra's ``recall``: "No thread found with id …" unless recall
is resource-scoped): with resource-scoped semantic recall a new conversation still searches the user's
memory, and has no messages of its own; otherwise, or without a resource, the thread must exist."""

from __future__ import annotations

import pytest

from core import HashingEmbedder, Memory, MemoryOptions, Message, NotFoundError


def _memory(store, semantic_recall):
    memory = Memory(store, MemoryOptions(semantic_recall=semantic_recall), embedder=HashingEmbedder())
    memory.save_messages([Message.user("I love green tea", thread_id="old", resource_id="ada"),
                          Message.user("Bob's secret is 42", thread_id="bobs", resource_id="bob")])
    return memory


def test_resource_scoped_recall_on_a_new_thread_searches_the_users_memory(store):
    memory = _memory(store, True)
    found = memory.recall(thread_id="new-thread", resource_id="ada", vector_search_string="green tea")
    assert [m.text for m in found.messages] == ["I love green tea"]  # the resource's, never bob's
    page = memory.recall(thread_id="new-thread", resource_id="ada")
    assert page.messages == [] and page.total == 0 and not page.has_more
    assert memory.get_thread("new-thread") is None  # looking creates nothing


@pytest.mark.parametrize("semantic_recall", [False, {"enabled": True, "scope": "thread"}])
def test_otherwise_a_thread_that_does_not_exist_is_refused(store, semantic_recall):
    memory = _memory(store, semantic_recall)
    with pytest.raises(NotFoundError, match="No thread found with id new-thread"):
        memory.recall(thread_id="new-thread", resource_id="ada")


def test_without_a_resource_a_new_thread_is_refused_even_with_resource_scope(store):
    memory = _memory(store, True)
    with pytest.raises(NotFoundError, match="No thread found with id new-thread"):
        memory.recall(thread_id="new-thread", vector_search_string="green tea")


def test_the_gateway_still_answers_404_for_the_messages_of_a_thread_not_stored(store):
    import http.client
    import json

    from core.agent import Agent
    from core.gateway import GatewayServer, create_app
    from core.llm import ScriptedModel

    agent = Agent("chat", instructions="I", model=ScriptedModel(["ok"]), memory=_memory(store, True), tracer=False)
    with GatewayServer(create_app([agent])) as server:
        conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=60)
        conn.request("GET", "/api/memory/threads/new-thread/messages?resourceId=ada")
        response = conn.getresponse()
        status, data = response.status, json.loads(response.read())
        conn.close()
    assert status == 404 and data["error"]["type"] == "not_found_error"
