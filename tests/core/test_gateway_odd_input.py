"""Odd input to the gateway's memory API, against a real server on libSQL and Postgres.

Found by session 31's attack on the untrusted surfaces: a NUL character in working memory (500 on Postgres, kept on
libSQL), a query parameter sent twice with two values (the last one used, where a proxy in front may have checked
the first), a page number Python reads and nobody else does ("1_0", "١٢"), and an integer of more than 4,300 digits
(refused in Python's words, telling the client to call ``sys.set_int_max_str_digits``).
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest

from core import Memory, MemoryOptions
from core.agent import Agent
from core.gateway import GatewayServer, create_app
from core.gateway.guard import GuardPolicy
from core.gateway.tokens import TokensFile, entry_for, new_token
from core.llm import ScriptedModel

pytestmark = pytest.mark.backends

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "note": {"type": "string"}}}


@pytest.fixture
def tokens() -> dict[str, str]:
    return {"alice": new_token(), "bob": new_token(), "desk": new_token()}


@pytest.fixture
def server(store, tokens) -> Iterator[GatewayServer]:
    markdown = Memory(store, MemoryOptions(working_memory={"enabled": True, "scope": "resource"}))
    forms = Memory(store, MemoryOptions(working_memory={"enabled": True, "scope": "thread", "schema": SCHEMA}))
    agents = [Agent("chat", instructions="Chat.", model=ScriptedModel(["ok"] * 5), memory=markdown, tracer=False),
              Agent("forms", instructions="Forms.", model=ScriptedModel(["ok"] * 5), memory=forms, tracer=False)]
    file = TokensFile(None, (entry_for("alice-app", ["alice"], tokens["alice"]),
                             entry_for("bob-app", ["bob"], tokens["bob"]),
                             entry_for("desk", ["alice", "bob"], tokens["desk"])))
    with GatewayServer(create_app(agents, policy=GuardPolicy(tokens=file))) as served:
        yield served


def call(server: GatewayServer, token: str, method: str, path: str, body: Any = None, *,
         raw: str | None = None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=60)
    data = raw.encode() if raw is not None else None if body is None else json.dumps(body).encode()
    conn.request(method, path, data, {"content-type": "application/json", "authorization": f"Bearer {token}"})
    response = conn.getresponse()
    status, answer = response.status, json.loads(response.read())
    conn.close()
    return status, answer


def _chat(server: GatewayServer, token: str, agent: str, thread: str, resource: str) -> None:
    status, answer = call(server, token, "POST", "/v1/chat/completions", {
        "model": agent, "messages": [{"role": "user", "content": "hi"}],
        "metadata": {"thread_id": thread, "resource_id": resource}})
    assert status == 200, answer


def test_working_memory_with_a_nul_character_is_refused_on_every_backend(server, tokens):
    """Postgres stores no NUL in text or JSON: the PUT was a 500 ("The gateway failed on this request") there, while
    libSQL kept it, so a value written on one could not be imported into the other. Refused on both now, saying
    what to do, and nothing changed."""
    alice = tokens["alice"]
    markdown = "/api/memory/threads/t1/working-memory?resourceId=alice&agentId=chat"
    assert call(server, alice, "PUT", markdown, {"workingMemory": "# Alice\n- likes: tea\n"})[0] == 200
    _chat(server, alice, "forms", "f1", "alice")
    schema = "/api/memory/threads/f1/working-memory?resourceId=alice&agentId=forms"
    assert call(server, alice, "PUT", schema, {"workingMemory": {"name": "Alice"}})[0] == 200

    for path, sent in ((markdown, "# Alice\n- likes: t\u0000ea\n"), (schema, {"name": "Al\u0000ice"}),
                       (schema, {"na\u0000me": "Alice"})):
        status, answer = call(server, alice, "PUT", path, {"workingMemory": sent})
        assert (status, answer["error"]["code"]) == (400, "invalid_request"), answer
        assert answer["error"]["message"].startswith("The working memory holds a NUL character (U+0000")
        assert answer["error"]["message"].endswith("Nothing changed.")
    assert call(server, alice, "GET", markdown)[1]["workingMemory"] == "# Alice\n- likes: tea\n"
    assert call(server, alice, "GET", schema)[1]["workingMemory"] == {"name": "Alice"}
    # The text "\u0000" (a backslash and five characters) is no NUL, and is kept as written.
    assert call(server, alice, "PUT", schema, {"workingMemory": {"note": "C strings end at \\u0000"}})[0] == 200
    assert call(server, alice, "GET", schema)[1]["workingMemory"]["note"] == "C strings end at \\u0000"


@pytest.mark.parametrize("query, param", [
    ("resourceId=alice&resourceId=bob", "resourceId"),
    ("resourceId=bob&resourceId=alice", "resourceId"),
    ("resourceId=alice&agentId=chat&agentId=forms", "agentId"),
    ("resourceId=alice&perPage=5&perPage=500", "perPage"),
    ("resourceId=alice&page=0&page=1", "page"),
])
def test_a_query_parameter_sent_twice_with_two_values_is_refused(server, tokens, query, param):
    """Starlette read the last copy: ``?resourceId=bob&resourceId=alice`` listed alice's threads, where a proxy or
    access log in front may have read (and checked) bob. As a header sent twice is refused, so is this."""
    for token in (tokens["alice"], tokens["desk"]):
        paged = param in ("page", "perPage")  # (working memory has no pages)
        for path in ("/api/memory/threads", "/api/memory/threads/t1/messages",
                     *(() if paged else ("/api/memory/threads/t1/working-memory",))):
            status, answer = call(server, token, "GET", f"{path}?{query}")
            assert (status, answer["error"]["param"]) == (400, param), (path, answer)
            assert answer["error"]["message"] == (f"The {param} query parameter was sent 2 times with different "
                                                  "values; send it once. Nothing was run.")
    # The same value twice is one value.
    assert call(server, tokens["alice"], "GET", "/api/memory/threads?resourceId=alice&resourceId=alice")[0] == 200


@pytest.mark.parametrize("sent", ["1_0", "%201", "%D9%A1%D9%A2", "%EF%BC%91", "0x10", "1e2", "+5"])
def test_a_page_number_is_read_as_digits_0_to_9_only(server, tokens, sent):
    """``int`` took "1_0" as 10, " 1" as 1 and Arabic-Indic "١٢" as 12; a proxy, a log or another server reads
    them otherwise, or not as a number."""
    status, answer = call(server, tokens["alice"], "GET", f"/api/memory/threads?resourceId=alice&perPage={sent}")
    assert (status, answer["error"]["param"]) == (400, "perPage"), answer
    assert answer["error"]["message"].startswith("perPage must be a whole number written in the digits 0-9, got ")


def test_a_page_number_of_thousands_of_digits_is_out_of_range(server, tokens):
    status, answer = call(server, tokens["alice"], "GET", "/api/memory/threads?resourceId=alice&page=" + "9" * 5000)
    assert status == 400 and answer["error"]["message"].startswith("page must be between 0 and 1000000, got '99")
    assert call(server, tokens["alice"], "GET", "/api/memory/threads?resourceId=alice&page=-0")[0] == 200


def test_an_integer_of_more_than_4300_digits_is_named_as_any_number_beyond_a_double(server, tokens):
    """Python reads no integer of more than 4,300 digits: the gateway answered "The request body is not valid JSON
    (Exceeds the limit (4300 digits) for integer string conversion ...; use sys.set_int_max_str_digits() to increase
    the limit)", which no client can do. It is now refused as 1e400 and a 400-digit integer are."""
    path = "/api/memory/threads/t1/working-memory?resourceId=alice&agentId=chat"
    for body in ('{"workingMemory": "x", "n": %s}' % ("9" * 5000), '{"workingMemory": -%s}' % ("1" * 100_000)):
        status, answer = call(server, tokens["alice"], "PUT", path, raw=body)
        assert (status, answer["error"]["code"]) == (400, "number_out_of_range"), answer
        assert "beyond what a double holds" in answer["error"]["message"] and "digits)" in answer["error"]["message"]
        assert "sys.set_int_max_str_digits" not in answer["error"]["message"]
