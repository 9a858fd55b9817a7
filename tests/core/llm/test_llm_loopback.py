"""The loopback server as seen by the official OpenAI client, plus its test switches."""

from __future__ import annotations

import math

import openai
import pytest

from core.llm import LoopbackServer, ScriptedModel, hash_embedding


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b))


def test_listens_on_loopback_only_and_stops_cleanly() -> None:
    server = LoopbackServer().start()
    try:
        assert server.base_url.startswith("http://127.0.0.1:")
        assert server._httpd is not None and server._httpd.server_address[0] == "127.0.0.1"
    finally:
        server.stop()
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.port


def test_hash_embedding_is_deterministic_normalised_and_word_sensitive() -> None:
    a = hash_embedding("The cat sat on the mat", 64)
    assert a == hash_embedding("The cat sat on the mat", 64)
    assert len(a) == 64
    assert math.isclose(sum(v * v for v in a), 1.0, rel_tol=1e-9)
    related = hash_embedding("a cat on a mat", 64)
    unrelated = hash_embedding("quarterly revenue forecast", 64)
    assert cosine(a, related) > cosine(a, unrelated)
    assert math.isclose(sum(v * v for v in hash_embedding("", 8)), 1.0)


@pytest.mark.parametrize("encoding", ["float", None])
def test_embeddings_through_the_official_client(encoding: str | None) -> None:
    # With no encoding_format the SDK asks for base64 and decodes it itself.
    options = {"encoding_format": encoding} if encoding else {}
    with LoopbackServer(embedding_dimensions=32) as server:
        client = openai.OpenAI(api_key="unused", base_url=server.base_url, max_retries=0)
        response = client.embeddings.create(model="loopback-embed", input=["hello world", "goodbye"],
                                            **options)  # type: ignore[arg-type]
        client.close()
    assert server.requests[0].body["encoding_format"] == (encoding or "base64")
    vectors = [item.embedding for item in response.data]
    assert [len(v) for v in vectors] == [32, 32]
    for vector, text in zip(vectors, ["hello world", "goodbye"]):
        assert all(math.isclose(x, y, abs_tol=1e-6) for x, y in zip(vector, hash_embedding(text, 32)))
    assert response.usage.prompt_tokens == 3
    assert server.requests[0].body["input"] == ["hello world", "goodbye"]


def test_embedding_dimensions_can_be_requested() -> None:
    with LoopbackServer() as server:
        client = openai.OpenAI(api_key="unused", base_url=server.base_url, max_retries=0)
        response = client.embeddings.create(model="e", input="hi", dimensions=16, encoding_format="float")
        client.close()
    assert len(response.data[0].embedding) == 16


def test_injected_failures_are_consumed_in_order() -> None:
    with LoopbackServer(ScriptedModel(["ok"])) as server:
        server.fail_next(1, 503)
        client = openai.OpenAI(api_key="unused", base_url=server.base_url, max_retries=0)
        with pytest.raises(openai.InternalServerError):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        client.close()
    assert reply.choices[0].message.content == "ok"
    assert [r.path for r in server.requests] == ["/v1/chat/completions"] * 2


def test_unknown_route_is_a_404() -> None:
    with LoopbackServer() as server:
        client = openai.OpenAI(api_key="unused", base_url=server.base_url, max_retries=0)
        with pytest.raises(openai.NotFoundError):
            client.completions.create(model="m", prompt="legacy endpoint")
        client.close()


def test_exhausted_script_is_a_non_retryable_server_error() -> None:
    with LoopbackServer([]) as server:
        client = openai.OpenAI(api_key="unused", base_url=server.base_url, max_retries=3)
        with pytest.raises(openai.InternalServerError, match="script has 0 replies"):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        client.close()
    assert len(server.requests) == 1  # x-should-retry: false stopped the SDK's own retries
