"""OpenAIEmbedder against the loopback OpenAI-protocol server (and one deliberately broken server)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from core.embedding import CachedEmbedder, Embedder, EmbeddingServiceError, OpenAIEmbedder
from core.llm.http import RetryPolicy
from core.llm.loopback import LoopbackServer, hash_embedding


@pytest.fixture()
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer(embedding_dimensions=24, require_api_key="sk-test") as srv:
        yield srv


def embedder(server: LoopbackServer, **kwargs: Any) -> OpenAIEmbedder:
    kwargs.setdefault("api_key", "sk-test")
    kwargs.setdefault("max_retries", 0)
    return OpenAIEmbedder(server.base_url, "loopback-embed", **kwargs)


def embedding_bodies(server: LoopbackServer) -> list[dict[str, Any]]:
    return [r.body for r in server.requests if r.path.endswith("/embeddings")]


def test_vectors_match_the_server_in_input_order(server: LoopbackServer) -> None:
    emb = embedder(server)
    texts = ["peanut allergy", "a", "the weather in Lisbon is warm", "peanut butter"]
    vecs = emb.embed(texts)
    assert vecs.shape == (4, 24) and vecs.dtype == np.float32
    expected = np.array([hash_embedding(t, 24) for t in texts], dtype=np.float32)
    np.testing.assert_allclose(vecs, expected, atol=1e-6)
    assert isinstance(emb, Embedder)
    assert emb.dim == 24


def test_texts_are_sent_in_batches(server: LoopbackServer) -> None:
    emb = embedder(server, batch_size=3, dim=24)
    texts = [f"message {'x' * i}" for i in range(7)]
    vecs = emb.embed(texts)
    bodies = embedding_bodies(server)
    assert [len(b["input"]) for b in bodies] == [3, 3, 1]
    assert all(b["model"] == "loopback-embed" and b["encoding_format"] == "float" for b in bodies)
    np.testing.assert_allclose(vecs[5], hash_embedding(texts[5], 24), atol=1e-6)


def test_dimension_is_learned_from_the_first_response(server: LoopbackServer) -> None:
    emb = embedder(server, batch_size=2)
    vecs = emb.embed(["a b", "c d", "e f", "g h", "i"])
    assert vecs.shape == (5, 24)
    assert emb.dim == 24
    assert len(embedding_bodies(server)) == 3  # no extra probe request


def test_prefixes_reach_the_server_and_change_the_model_id(server: LoopbackServer) -> None:
    plain = embedder(server)
    prefixed = embedder(server, query_prefix="query: ", passage_prefix="passage: ")
    assert plain.model_id == "openai:loopback-embed@127.0.0.1"
    assert prefixed.model_id.startswith(plain.model_id + "+p")
    prefixed.embed(["hello"], "query")
    assert embedding_bodies(server)[-1]["input"] == ["query: hello"]
    assert prefixed.kind_sensitive and not plain.kind_sensitive


def test_a_cache_in_front_avoids_repeat_requests(server: LoopbackServer) -> None:
    cache = CachedEmbedder(embedder(server, dim=24))
    cache.embed(["one", "two"])
    cache.embed(["two", "one"], "query")
    assert len(embedding_bodies(server)) == 1


def test_server_errors_name_the_endpoint_and_the_status(server: LoopbackServer) -> None:
    emb = embedder(server)
    server.fail_next(1, 503, message="overloaded")
    with pytest.raises(EmbeddingServiceError) as info:
        emb.embed(["hello"])
    message = str(info.value)
    assert f"{server.base_url}/embeddings" in message
    assert "503" in message and "loopback-embed" in message


def test_a_wrong_api_key_says_where_keys_go(server: LoopbackServer) -> None:
    emb = embedder(server, api_key="sk-wrong", api_key_env="MEMORY_STUDIO_TEST_EMBED_KEY")
    with pytest.raises(EmbeddingServiceError, match="401") as info:
        emb.check()
    assert "MEMORY_STUDIO_TEST_EMBED_KEY" in str(info.value)


def test_a_timeout_names_the_endpoint(server: LoopbackServer) -> None:
    emb = embedder(server, timeout=0.2, dim=24)
    server.stall_next(1)
    try:
        with pytest.raises(EmbeddingServiceError, match="timed out") as info:
            emb.embed(["hello"])
    finally:
        server.release()
    assert server.base_url in str(info.value)


def test_an_unreachable_endpoint_names_the_url() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago and has no listener now
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    emb = OpenAIEmbedder(f"http://127.0.0.1:{port}/v1", "m", api_key="k", max_retries=0, timeout=5)
    with pytest.raises(EmbeddingServiceError, match=f"127.0.0.1:{port}/v1/embeddings"):
        emb.embed(["hello"])


class _ShortHandler(BaseHTTPRequestHandler):
    """Answers every embeddings request with one vector fewer than asked for."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        data = [{"object": "embedding", "index": i, "embedding": [1.0, 0.0]} for i in range(len(body["input"]) - 1)]
        payload = json.dumps({"object": "list", "data": data, "model": "m",
                              "usage": {"prompt_tokens": 0, "total_tokens": 0}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def test_a_short_answer_is_an_error_not_a_misaligned_result() -> None:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _ShortHandler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        emb = OpenAIEmbedder(f"http://127.0.0.1:{httpd.server_address[1]}/v1", "m", api_key="k", max_retries=0)
        with pytest.raises(EmbeddingServiceError, match="returned 1 embeddings for 2 inputs"):
            emb.embed(["a", "b"])
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def test_a_dimension_mismatch_is_reported(server: LoopbackServer) -> None:
    emb = embedder(server, dim=32)
    with pytest.raises(EmbeddingServiceError, match="24-d embeddings; this embedder expects 32-d"):
        emb.embed(["hello"])


def test_a_server_hiccup_is_retried_under_the_chat_models_policy(server: LoopbackServer) -> None:
    sleeps: list[float] = []
    emb = embedder(server, retry=RetryPolicy(max_retries=2, initial_delay=0.001), sleep=sleeps.append)
    server.fail_next(1, 503)
    vecs = emb.embed(["peanut allergy"])
    np.testing.assert_allclose(vecs[0], hash_embedding("peanut allergy", 24), atol=1e-6)
    assert len(embedding_bodies(server)) == 2 and len(sleeps) == 1

    server.fail_next(1, 429, retry_after=0.01)
    emb.embed(["again"])
    assert sleeps[-1] == 0.01  # the server's Retry-After was obeyed, as for chat models


def test_retries_are_counted_and_then_the_error_names_the_endpoint(server: LoopbackServer) -> None:
    sleeps: list[float] = []
    emb = embedder(server, retry=RetryPolicy(max_retries=1, initial_delay=0.0), sleep=sleeps.append, dim=24)
    server.fail_next(2, 500)
    with pytest.raises(EmbeddingServiceError, match="HTTP 500") as info:
        emb.embed(["hello"])
    assert server.base_url in str(info.value)
    assert len(embedding_bodies(server)) == 2 and len(sleeps) == 1


def test_a_refused_answer_is_not_retried(server: LoopbackServer) -> None:
    sleeps: list[float] = []
    emb = OpenAIEmbedder(server.base_url, "loopback-embed", api_key="wrong", sleep=sleeps.append)
    with pytest.raises(EmbeddingServiceError, match="HTTP 401.*Check the API key"):
        emb.embed(["hello"])
    assert sleeps == [] and len(embedding_bodies(server)) == 1


def test_a_retry_after_beyond_the_limit_gives_up_at_once(server: LoopbackServer) -> None:
    sleeps: list[float] = []
    emb = embedder(server, retry=RetryPolicy(max_retries=3, max_retry_after=5), sleep=sleeps.append, dim=24)
    server.fail_next(1, 429, retry_after=120)
    with pytest.raises(EmbeddingServiceError, match="asked to wait 120 s, longer than the 5 s we wait"):
        emb.embed(["hello"])
    assert sleeps == []
