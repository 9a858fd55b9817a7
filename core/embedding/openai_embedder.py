"""Embeddings from any server speaking OpenAI's ``POST /v1/embeddings`` (OpenAI, vLLM, llama.cpp, Ollama…).

Every failure is re-raised as ``EmbeddingServiceError`` naming the endpoint and model, because the
user needs to know *which* server to fix, not which Python class failed. The API key is looked up on
first use (explicit, then the environment variable, then the OS keyring, via ``core.llm.keys``);
local servers need none, so a missing key is not an error until the server says 401. The client and
the retry policy are the chat model's (``core.llm.http``), except that a timeout is retried: one
embedding request is small, so a slow answer is more likely a passing hiccup than a model loading.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import numpy as np

from core.embedding.base import (
    DEFAULT_BATCH_SIZE,
    EmbeddingServiceError,
    Kind,
    Vectors,
    check_call,
    embed_in_batches,
    empty,
    l2_normalise,
)
from core.llm.http import RetryPolicy, UrlCredentials, openai_client, safe_url
from core.llm.keys import resolve_api_key, where_to_put_key

if TYPE_CHECKING:
    import openai

_PROBE_TEXT = "dimension probe"


class OpenAIEmbedder:
    """Remote embeddings, batched (``batch_size`` texts per request), rows L2-normalised on arrival.

    ``dim`` may be given (then every response is checked against it) or left ``None``; it is then
    learned from the first response, and reading ``dim`` before any embedding costs one small request.
    ``query_prefix``/``passage_prefix`` serve instruction-trained models (e5: ``"query: "``,
    ``"passage: "``); with neither set, queries and passages embed identically. ``retry`` replaces the
    default policy (``max_retries`` retries, timeouts included); ``sleep`` exists for tests.
    """

    semantic = True

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str | None = "OPENAI_API_KEY",
        api_key: str | None = None,
        dim: int | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        timeout: float = 30.0,
        max_retries: int = 2,
        query_prefix: str = "",
        passage_prefix: str = "",
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}")
        # A user:password@ in the URL goes to the HTTP client only: shown nowhere, redacted in traces.
        self._url = base_url.rstrip("/")
        self._credentials = UrlCredentials(base_url)
        self.base_url = safe_url(base_url)
        self.model = model
        self.endpoint = f"{self.base_url}/embeddings"
        self.batch_size = batch_size
        self.timeout = timeout
        self.retry = retry or RetryPolicy(max_retries=max_retries, retry_timeouts=True)
        self.max_retries = self.retry.max_retries
        self._sleep = sleep
        self._api_key = api_key
        self._api_key_env = api_key_env
        self._prefixes: dict[Kind, str] = {"query": query_prefix, "passage": passage_prefix}
        self.kind_sensitive = query_prefix != passage_prefix
        self._dim = dim
        self._client: openai.OpenAI | None = None
        self._lock = threading.Lock()
        self.model_id: str = _model_id(model, self.base_url, query_prefix, passage_prefix)

    @property
    def dim(self) -> int:
        if self._dim is None:
            self.check()
        assert self._dim is not None  # check() either learned it or raised
        return self._dim

    def check(self) -> None:
        """One tiny request: fails now, with the endpoint in the message, rather than mid-conversation."""
        self._request([_PROBE_TEXT])

    def embed(self, texts: Sequence[str], kind: Kind = "passage") -> Vectors:
        check_call(texts, kind)
        if not texts:
            return empty(self.dim)
        prefix = self._prefixes[kind]
        # OpenAI rejects empty strings in `input`; a single space embeds "nothing" without failing the batch.
        prepared = [(prefix + t) or " " for t in texts]
        if self._dim is None:
            # The first batch tells us the dimension; the rest are checked against it.
            first = self._request(prepared[: self.batch_size])
            if len(prepared) <= self.batch_size:
                return first
            rest = embed_in_batches(prepared[self.batch_size :], self.batch_size, self.dim, self._request)
            return np.concatenate([first, rest])
        return embed_in_batches(prepared, self.batch_size, self._dim, self._request)

    def _request(self, batch: list[str]) -> Vectors:
        import openai

        client = self._get_client()
        where = f"{self.endpoint} (model {self.model!r})"

        def error(exc: openai.OpenAIError, attempts: int) -> EmbeddingServiceError:
            failure = describe(exc, attempts)
            return EmbeddingServiceError(self._credentials.scrub(str(failure)))

        def describe(exc: openai.OpenAIError, _attempts: int) -> EmbeddingServiceError:
            if isinstance(exc, openai.APIStatusError):
                hint = ""
                if exc.status_code in (401, 403):
                    hint = f" Check the API key: {where_to_put_key(self._api_key_env, 'memory-studio', None)}."
                return EmbeddingServiceError(
                    f"Embedding request to {where} failed: HTTP {exc.status_code}: {exc.message}.{hint}")
            if isinstance(exc, openai.APITimeoutError):
                return EmbeddingServiceError(f"Embedding request to {where} timed out after {self.timeout:g} s")
            if isinstance(exc, openai.APIConnectionError):
                return EmbeddingServiceError(f"Cannot reach the embeddings endpoint {where}: {exc}")
            return EmbeddingServiceError(f"Embedding request to {where} failed: {exc}")

        def wait_too_long(exc: openai.OpenAIError, attempts: int, seconds: float) -> EmbeddingServiceError:
            return EmbeddingServiceError(
                f"{error(exc, attempts)} The server asked to wait {seconds:g} s, longer than the "
                f"{self.retry.max_retry_after:g} s we wait; try again later.")

        response = self.retry.call(
            lambda: client.embeddings.create(model=self.model, input=batch, encoding_format="float"),
            error=error, wait_too_long=wait_too_long, sleep=self._sleep)
        return self._rows(response, len(batch), where)

    def _rows(self, response: object, expected: int, where: str) -> Vectors:
        data = getattr(response, "data", None)
        if not isinstance(data, list) or len(data) != expected:
            got = len(data) if isinstance(data, list) else "no"
            raise EmbeddingServiceError(f"{where} returned {got} embeddings for {expected} inputs")
        # The spec lets servers answer out of order; `index` says which input each row belongs to.
        ordered = sorted(data, key=lambda item: int(getattr(item, "index", 0)))
        vectors = [getattr(item, "embedding", None) for item in ordered]
        if not all(isinstance(v, list) and v for v in vectors):
            raise EmbeddingServiceError(f"{where} returned an embedding that is not a list of numbers")
        sizes = {len(v) for v in vectors if isinstance(v, list)}
        if len(sizes) != 1:
            raise EmbeddingServiceError(f"{where} returned embeddings of mixed sizes {sorted(sizes)}")
        size = sizes.pop()
        with self._lock:
            if self._dim is None:
                self._dim = size
        if size != self._dim:
            raise EmbeddingServiceError(f"{where} returned {size}-d embeddings; this embedder expects {self._dim}-d")
        arr = np.asarray(vectors, dtype=np.float32)
        if not np.isfinite(arr).all():
            raise EmbeddingServiceError(f"{where} returned non-finite numbers in an embedding")
        return l2_normalise(arr)

    def _get_client(self) -> openai.OpenAI:
        if self._client is None:
            with self._lock:
                if self._client is None:
                    key = resolve_api_key(explicit=self._api_key, env_var=self._api_key_env)
                    self._client = openai_client(self._url, key, timeout=self.timeout)
        return self._client

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(endpoint={self.endpoint!r}, model={self.model!r})"


def _model_id(model: str, base_url: str, query_prefix: str, passage_prefix: str) -> str:
    # The host, not the port: a local server restarted on another port still serves the same vectors.
    host = urlsplit(base_url).hostname or base_url
    model_id = f"openai:{model}@{host}"
    if query_prefix or passage_prefix:
        digest = hashlib.sha256(f"{query_prefix}\0{passage_prefix}".encode()).hexdigest()[:6]
        model_id += f"+p{digest}"
    return model_id
