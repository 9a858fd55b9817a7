"""A chat model reached over the OpenAI chat-completions protocol at any base URL.

One client serves OpenAI itself and the local servers that copy its protocol (Ollama at
``http://localhost:11434/v1``, LM Studio at ``http://localhost:1234/v1``, vLLM, llama.cpp's
``llama-server``). It uses the official ``openai`` package for the wire, but does its own
retrying (the SDK's is switched off; ``core.llm.http.RetryPolicy``, shared with the remote embedder) so
the policy is visible, configurable and counted in the error the user finally sees.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import threading
import time
from dataclasses import replace
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from core.llm.base import CONTEXT_OVERFLOW_HINT, ChatChunk, ChatResult, Message, ModelError, ToolSpec
from core.llm.http import OPENAI_BASE_URL, RetryPolicy, UrlCredentials, openai_client, safe_url
from core.llm.settings import ModelSettings, ModelSettingsError, ToolChoice
from core.llm.keys import DEFAULT_KEYRING_SERVICE, ResolvedKey, Secret, resolve_api_key, where_to_put_key
from core.llm.request_hook import RequestWatch
from core.llm.wire import OPENAI_PYTHON_WIRE, StreamAssembler, request_body, result_from_completion
from core.llm.stopping import CallStop, current_stop
from core.llm.yielding import BackgroundCall, current_call, self_hosted
from core.redaction import MIN_SECRET_LENGTH, PLACEHOLDER_KEYS

if TYPE_CHECKING:
    import openai

_T = TypeVar("_T")

log = logging.getLogger(__name__)


class _Sent:
    """The request bytes of one model call, filled by the client's request hook (``_WATCH``)."""

    __slots__ = ("http", "raw")

    def __init__(self, http: Any) -> None:
        self.http = http  # the httpx client the call goes through: another client's request is not its
        self.raw: bytes | None = None

    def takes(self, http: Any) -> bool:
        return http is self.http

    def sent(self, request: Any, raw: bytes, path: str) -> None:
        self.raw = raw  # a retried call: the last attempt's

    def unread(self) -> None:
        self.raw = None


#: The model call being made in this thread or task (``OpenAICompatibleModel._sending``): a context
#: variable, so calls made at once from several threads or tasks each see their own request only.
_SENDING: contextvars.ContextVar[_Sent | None] = contextvars.ContextVar("memory_studio_llm_sent", default=None)
_WATCH = RequestWatch(_SENDING, ("/chat/completions",),
                      "could not read a model call's request bytes (%s): its record keeps the body as JSON")

class OpenAICompatibleModel:
    """A ``ChatModel`` backed by an OpenAI-compatible ``/chat/completions`` endpoint.

    The API key comes from ``api_key`` (for programmatic use), else the environment
    variable ``api_key_env``, else the OS keyring (``keyring_service`` / ``keyring_username``,
    the user defaulting to ``api_key_env``). It is never shown by ``repr``, ``describe()``
    or error messages. ``environ`` and ``sleep`` exist so tests can supply their own.
    """

    #: How a body goes on the wire (the ``openai`` client's key order and JSON settings): a turn record
    #: names it, so Replay can give the exact bytes the server received (``core.llm.wire.wire_bytes``).
    wire_form = OPENAI_PYTHON_WIRE
    #: A background call goes out on a connection of its own, which a turn's call shuts down to stop it
    #: (``StoppableModel``, ``core.llm.yielding``).
    stops_background_calls = True

    def __init__(
        self,
        model: str,
        *,
        base_url: str = OPENAI_BASE_URL,
        api_key: str | Secret | None = None,
        api_key_env: str | None = "OPENAI_API_KEY",
        keyring_service: str | None = DEFAULT_KEYRING_SERVICE,
        keyring_username: str | None = None,
        provider: str | None = None,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        stream_usage: bool = True,
        default_headers: Mapping[str, str] | None = None,
        environ: Mapping[str, str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        context_window: int | None = None,
        self_hosted: bool | None = None,
        context_window_env: str | None = None,
    ) -> None:
        if self_hosted is not None and not isinstance(self_hosted, bool):
            raise ModelSettingsError(f"self_hosted must be True, False or None (decided from the base URL), "
                                     f"got {self_hosted!r}.")
        #: Whether the server is self-hosted (one slot, a new connection costs nothing: calls may be cut short by
        #: shutting their connection); None: decided from the base URL (``core.llm.yielding.self_hosted``).
        self.self_hosted = self_hosted
        if context_window is not None and (
                not isinstance(context_window, int) or isinstance(context_window, bool) or context_window < 1):
            raise ModelSettingsError(f"context_window must be a positive number of tokens, got {context_window!r}.")
        #: The server's context size in tokens (llama.cpp ``--ctx-size``, vLLM ``--max-model-len``,
        #: Ollama ``num_ctx``); None: unknown. The agent fits every prompt into it.
        self.context_window = context_window
        #: The variable giving a model built from its name its window (``<PROVIDER>_CONTEXT_WINDOW``, set by
        #: ``resolve_model``), which the overflow advice names; None for a model built here with its base URL.
        self.context_window_env = context_window_env
        self.model = model
        self._credentials = UrlCredentials(base_url)  # a user:password@ in the URL never shows anywhere
        self.base_url = safe_url(base_url)
        self.provider = provider or ("openai" if self.base_url == OPENAI_BASE_URL else "openai-compatible")
        self.model_id = f"{self.provider}/{model}"
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.stream_usage = stream_usage
        self._sleep = sleep
        self._key_places = where_to_put_key(api_key_env, keyring_service, keyring_username)
        self._key: ResolvedKey = resolve_api_key(
            explicit=api_key, env_var=api_key_env, keyring_service=keyring_service,
            keyring_username=keyring_username, environ=environ)
        self._client = openai_client(base_url, self._key, timeout=timeout, default_headers=default_headers)
        self._http = _WATCH.watch(self._client)  # the httpx client its requests go through, hooked
        self._own_connections: tuple[Any, Any] | None = None  # made by ``_interruptible`` when first needed
        if self._http is None:
            log.info("the OpenAI client has no httpx request hooks: turn records keep no bytes hash")

    # -- identity -------------------------------------------------------------------------

    @property
    def api_key_source(self) -> str:
        return self._key.source

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "provider": self.provider, "model": self.model, "model_id": self.model_id,
            "base_url": self.base_url, "api_key_source": self._key.source,
            "timeout": self.timeout, "max_retries": self.retry.max_retries, "scripted": False,
        }
        if self.context_window is not None:
            info["context_window"] = self.context_window
        if self.self_hosted is not None:
            info["self_hosted"] = self.self_hosted
        if self._key.note:
            info["api_key_note"] = self._key.note
        return info

    def __repr__(self) -> str:
        return (f"OpenAICompatibleModel(model_id={self.model_id!r}, base_url={self.base_url!r}, "
                f"api_key_source={self._key.source!r})")

    def close(self) -> None:
        self._client.close()
        if self._own_connections is not None:
            self._own_connections[0].close()

    def __enter__(self) -> OpenAICompatibleModel:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- requests ---------------------------------------------------------------------------

    def generate(
        self,
        messages: list[Message],
        *,
        tools: list[ToolSpec] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout: float | None = None,
        settings: ModelSettings | None = None,
        tool_choice: ToolChoice | None = None,
    ) -> ChatResult:
        body = self._body(messages, tools, temperature, max_tokens, settings, tool_choice)
        wait = self.timeout if timeout is None else timeout
        endpoint = f"{self.base_url}/chat/completions"
        background, stop = current_call(), current_stop()
        client, http = self._client_for(background, stop)
        with self._sending(http) as sent:
            response = self._with_retries(
                lambda: client.chat.completions.create(**body, timeout=wait),
                endpoint=endpoint, timeout=wait, uncapped=not _caps_length(body), background=background, stop=stop)
        if stop is not None:
            stop.check(self.model_id)  # a hosted API's reply that came all the same: nobody reads it
        result = result_from_completion(self._completion_dict(response, endpoint), model_id=self.model_id)
        return replace(result, sent=sent.raw)

    def _client_for(self, background: BackgroundCall | None, stop: CallStop | None) -> tuple[Any, Any]:
        """The OpenAI client a call goes out on, and its watched ``httpx`` client. A background call that may give
        way to a turn (``core.llm.yielding``), or a turn's call that may be stopped (``core.llm.stopping``) to a
        self-hosted server (where a new connection costs nothing) or whose stop says ``hosted_too``, goes out on a
        connection of its own, which is shut down to stop it; any other call on the pooled client."""
        if background is not None or (stop is not None and (stop.hosted_too or self_hosted(self))):
            return self._interruptible()
        return self._client, self._http

    def _interruptible(self) -> tuple[Any, Any]:
        """This model's client for calls that may be interrupted: no connection is kept or reused (each
        request's own is known to its call, through the ``trace`` extension), so shutting a call's
        connection down stops that call only."""
        with _YIELDING_LOCK:
            if self._own_connections is None:
                import openai

                limits = type(openai.DEFAULT_CONNECTION_LIMITS)(max_connections=100, max_keepalive_connections=0)
                http = openai.DefaultHttpxClient(limits=limits, event_hooks={"request": [_attach_connection]})
                client = self._client.with_options(http_client=http)
                self._own_connections = (client, _WATCH.watch(client))
            return self._own_connections

    @contextmanager
    def _sending(self, http: Any) -> Iterator[_Sent]:
        """While a model call is made through ``http``: its request's bytes as the client sends them
        (``ChatResult.sent``, read by the request hook ``_WATCH`` added; None when it could not be added or read)."""
        sent = _Sent(http)
        token = _SENDING.set(sent if http is not None else None)
        try:
            yield sent
        finally:
            _SENDING.reset(token)

    def _completion_dict(self, response: Any, endpoint: str) -> dict[str, Any]:
        # A proxy's login page or a web server's index answers 200 too; the SDK then hands back the
        # body as a plain string (or list) instead of a completion.
        to_dict = getattr(response, "to_dict", None)
        if to_dict is None:
            raise self._bad_reply(f"the reply is not a JSON chat completion (got {_preview(response)})",
                                  endpoint)
        data = to_dict(mode="json", warnings=False)
        if not isinstance(data, dict) or not data.get("choices"):
            raise self._bad_reply(f"the reply has no choices (got {_preview(data)})", endpoint)
        return data

    def _bad_reply(self, detail: str, endpoint: str, *, hint: str = "", method: str = "POST") -> ModelError:
        return ModelError(
            self._scrub(detail), model_id=self.model_id, endpoint=endpoint, status=200, method=method,
            hint=hint or (f"check that the base URL {self.base_url} is the server's OpenAI-compatible API "
                          "(it usually ends in /v1), not a web page or a proxy in front of it"))

    def stream(
        self,
        messages: list[Message],
        *,
        tools: list[ToolSpec] | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout: float | None = None,
        settings: ModelSettings | None = None,
        tool_choice: ToolChoice | None = None,
    ) -> Iterator[ChatChunk]:
        """Open the stream now (retrying as ``generate`` does), then yield as chunks arrive.

        Once the first byte has arrived a failure is not retried: text already shown to the
        user cannot be taken back.
        """
        body = self._body(messages, tools, temperature, max_tokens, settings, tool_choice)
        body.update(self.transport(streaming=True))
        wait = self.timeout if timeout is None else timeout
        endpoint = f"{self.base_url}/chat/completions"
        stop = current_stop()
        client, http = self._client_for(None, stop)
        with self._sending(http) as sent:
            sdk_stream = self._with_retries(
                lambda: client.chat.completions.create(**body, timeout=wait),
                endpoint=endpoint, timeout=wait, stop=stop)
        return self._iterate(sdk_stream, endpoint, wait, sent.raw, stop)

    def _iterate(self, sdk_stream: Any, endpoint: str, wait: float, sent: bytes | None = None,
                 stop: CallStop | None = None) -> Iterator[ChatChunk]:
        import openai

        assembler = StreamAssembler(model_id=self.model_id)
        try:
            for event in sdk_stream:
                if stop is not None:
                    stop.check(self.model_id)
                to_dict = getattr(event, "to_dict", None)
                if to_dict is None:
                    raise self._bad_reply(f"a stream event is not a JSON chunk (got {_preview(event)})", endpoint)
                chunk = assembler.feed(to_dict(mode="json", warnings=False))
                if chunk is not None:
                    yield chunk
        except Exception as exc:
            if stop is not None:
                # Its connection was shut down to stop it (httpx's read error is not wrapped by the SDK here): not
                # the server failing.
                stop.check(self.model_id)
            if isinstance(exc, json.JSONDecodeError):
                raise self._bad_reply(f"a stream event is not valid JSON ({exc.msg})", endpoint) from exc
            if isinstance(exc, openai.OpenAIError):
                raise self._error(exc, endpoint=endpoint, attempts=1, timeout=wait) from exc
            raise
        finally:
            sdk_stream.close()
        if stop is not None:
            stop.check(self.model_id)  # the stream that ended because its connection was shut down
        if not assembler.finished:
            # A cut connection looks like a short reply; handing it on as complete would store a
            # truncated answer as if the model had said it.
            raise self._bad_reply(
                f"the stream ended before the model finished (no finish_reason after "
                f"{assembler.chunk_count} chunk(s)); the partial reply was discarded", endpoint,
                hint="the server or a proxy closed the connection early; check the server's log "
                     "(it may have crashed or run out of memory) and try again")
        yield ChatChunk(result=replace(assembler.result(), sent=sent))

    def list_models(self, *, timeout: float | None = None) -> list[str]:
        """The model names the server offers (``GET /models``)."""
        wait = self.timeout if timeout is None else timeout
        page = self._with_retries(lambda: self._client.models.list(timeout=wait),
                                  endpoint=f"{self.base_url}/models", timeout=wait, method="GET")
        return [item.id for item in page.data]

    def request_body(
        self, messages: list[Message], *, tools: list[ToolSpec] | None = None, temperature: float | None = None,
        max_tokens: int | None = None, settings: ModelSettings | None = None, tool_choice: ToolChoice | None = None,
        **_ignored: Any,
    ) -> dict[str, Any]:
        """The JSON body the server receives for these arguments (without ``stream`` /
        ``stream_options``): what a turn record keeps and a re-run sends again."""
        # ``max_tokens`` rather than ``max_completion_tokens``: every local server knows it.
        wire = (settings or ModelSettings()).merged(ModelSettings(temperature=temperature, max_tokens=max_tokens))
        return request_body(self.model, messages, tools=tools, tool_choice=tool_choice, settings=wire)

    def transport(self, *, streaming: bool) -> dict[str, Any]:
        """The keys that only say how the reply travels (``stream``, ``stream_options``), as sent."""
        if not streaming:
            return {}
        return {"stream": True, **({"stream_options": {"include_usage": True}} if self.stream_usage else {})}

    def _body(self, messages: list[Message], tools: list[ToolSpec] | None, temperature: float | None,
              max_tokens: int | None, settings: ModelSettings | None = None,
              tool_choice: ToolChoice | None = None) -> dict[str, Any]:
        """``request_body`` as the SDK's ``create`` takes it."""
        body = self.request_body(messages, tools=tools, temperature=temperature, max_tokens=max_tokens,
                                 settings=settings, tool_choice=tool_choice)
        if "top_k" in body:
            # Not an OpenAI parameter, so the SDK has no argument for it; local servers read it.
            body["extra_body"] = {"top_k": body.pop("top_k")}
        return body

    def _with_retries(self, call: Callable[[], _T], *, endpoint: str, timeout: float,
                      method: str = "POST", uncapped: bool = False, background: BackgroundCall | None = None,
                      stop: CallStop | None = None) -> _T:
        def error(exc: openai.OpenAIError, attempts: int) -> ModelError:
            return self._error(exc, endpoint=endpoint, attempts=attempts, timeout=timeout, method=method,
                               uncapped=uncapped)

        def wait_too_long(exc: openai.OpenAIError, attempts: int, seconds: float) -> ModelError:
            failed = error(exc, attempts)
            return ModelError(
                failed.detail, model_id=self.model_id, endpoint=endpoint, status=failed.status,
                attempts=attempts, method=method,
                hint=(f"the server asked to wait {seconds:g}s, longer than the "
                      f"{self.retry.max_retry_after:g}s we wait; try again later"),
            )

        def interrupted() -> None:
            if background is not None and background.cancelled:
                raise background.yielded(self.model_id, endpoint)
            if stop is not None:
                stop.check(self.model_id)

        def checked() -> _T:
            interrupted()
            try:
                return call()
            except Exception as exc:
                # A connection shut down because a turn needed the server, or because nobody waits for the
                # reply any more: not a failure, not retried here.
                try:
                    interrupted()
                except ModelError as why:
                    raise why from exc
                if not isinstance(exc, json.JSONDecodeError):
                    raise
                # The SDK parses a body labelled JSON itself; an HTML page or a cut-off body fails there.
                raise self._bad_reply(f"the reply is not valid JSON ({exc.msg} at position {exc.pos})",
                                      endpoint, method=method) from exc

        return self.retry.call(checked, error=error, wait_too_long=wait_too_long, sleep=self._sleep)

    def _error(self, exc: Exception, *, endpoint: str, attempts: int, timeout: float,
               method: str = "POST", uncapped: bool = False) -> ModelError:
        """Translate an SDK exception into a ``ModelError`` that says what to do. ``uncapped``: the
        request set no reply length, so a timeout may be a reply that never ends (a small local model
        left without ``max_tokens`` often writes until its context is full)."""
        import openai

        status: int | None = None
        retryable = self.retry.is_retryable(exc)
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            detail = self._scrub(_error_detail(exc))
            hint = self._context_hint(exc, detail) or self._status_hint(status)
        elif isinstance(exc, openai.APITimeoutError):
            detail = f"no response within {timeout:g}s"
            hint = ("raise the timeout (the model's timeout=...; memory-studio serve --model takes --model-timeout): "
                    "a local server may still be loading the model; or check that the server is responding")
            if uncapped:
                hint += ("; the request set no max_tokens, and a small local model may write until its "
                         "context is full: cap the reply (model_settings={'max_tokens': 512}; memory-studio "
                         "serve --model: --max-tokens 512)")
        elif isinstance(exc, openai.APIConnectionError) and _dropped(exc.__cause__):
            # Connected, and the server closed the connection before its reply ended: not a wrong address.
            detail = ("the server closed the connection before its reply was complete "
                      f"({self._scrub(str(exc.__cause__))})")
            hint = (f"the server at {self.base_url} took the request, then dropped it: check its logs (it may have "
                    "crashed, run out of memory or restarted), or a proxy between here and there")
        elif isinstance(exc, openai.APIConnectionError):
            detail = f"could not connect ({self._scrub(str(exc.__cause__ or exc))})"
            hint = f"check that the server at {self.base_url} is running and the base URL is right"
        else:
            detail = self._scrub(str(exc))
            hint = "the server's reply did not follow the OpenAI protocol"
        return ModelError(detail, model_id=self.model_id, endpoint=endpoint, status=status,
                          hint=hint, attempts=attempts, retryable=retryable, method=method)

    def _status_hint(self, status: int) -> str:
        if status in (401, 403):
            return (f"the server rejected the API key (source: {self._key.source}); "
                    f"to use another, {self._key_places}")
        if status == 404:
            return (f"check the model name {self.model!r} and the base URL; "
                    f"GET {self.base_url}/models lists what this server offers")
        if status in (400, 422):
            return "the server rejected the request; check the model supports these parameters and tools"
        if status == 429:
            return "rate limited: wait and try again, or lower the request rate"
        if status >= 500:
            return "the server failed; check its logs, or try again later"
        return ""

    def _context_hint(self, exc: openai.APIStatusError, detail: str) -> str:
        """The hint for a prompt the server found longer than its context, naming the context size."""
        body: dict[str, Any] = exc.body if isinstance(exc.body, dict) else {}
        nested = body.get("error")
        inner: dict[str, Any] = nested if isinstance(nested, dict) else body
        code = str(inner.get("code") or "") + " " + str(inner.get("type") or "")
        if not (_CONTEXT_OVERFLOW.search(detail) or "context_length_exceeded" in code
                or "exceed_context_size" in code):
            return ""
        size = inner.get("n_ctx") or _number_after(_CONTEXT_SIZE, detail)
        if size:
            where = f"the server's context is {int(size):,} tokens"
        elif self.context_window:
            where = f"the context window given here is {self.context_window:,} tokens"
        else:
            where = "the server's context size is not known here"
        if size and self.context_window and self.context_window <= int(size):
            # We fitted the prompt, but the server's tokenizer counted more than ours did.
            smaller = int(self.context_window * 0.85)
            fix = (f"the server counts more tokens than the engine's o200k_base estimate; give a smaller "
                   f"context_window (now {self.context_window:,}, e.g. {smaller:,}) to leave more room "
                   f"(memory-studio serve --model: --context-window {smaller}){self._named_window(smaller)}")
        elif size:
            fix = (f"give the model context_window={int(size)} (memory-studio serve --model: --context-window "
                   f"{int(size)}){self._named_window(int(size))} so the agent drops old memory to fit before "
                   "sending")
        else:
            fix = ("set context_window to the server's context size (llama.cpp --ctx-size, vLLM --max-model-len, "
                   "Ollama num_ctx; memory-studio serve --model: --context-window)"
                   f"{self._named_window(None)} so the agent drops old memory to fit before sending")
        return f"{CONTEXT_OVERFLOW_HINT}: {where}; {fix}, or lower max_tokens in model_settings"

    def _named_window(self, tokens: int | None) -> str:
        """Where a model given by its name (``Agent(model="llamacpp/…")``) takes its context window: the provider's
        ``<PROVIDER>_CONTEXT_WINDOW`` (``core.llm.providers``); nothing for a model built with its base URL."""
        if not self.context_window_env:
            return ""
        return (f", or set {self.context_window_env}={tokens if tokens is not None else 'N'} where the model is "
                f"given by its name '{self.model_id}'")

    def _scrub(self, text: str) -> str:
        # Some providers echo the key back in auth errors; never let it reach a message.
        secret = self._key.secret.reveal() if self._key.secret else ""
        # A key too short to be a real one ("x", "1234") or one a local server documents as "any key
        # will do" ("ollama") is not hidden, as in traces (``core.redaction``): replacing every "x" or
        # "ollama" would garble the server's own message ("e***ceeds the available conte***t size").
        if secret and len(secret) >= MIN_SECRET_LENGTH and secret.lower() not in PLACEHOLDER_KEYS:
            text = text.replace(secret, "***")
        text = self._credentials.scrub(text)
        return text if len(text) <= 400 else text[:400] + "…"


def _dropped(cause: BaseException | None) -> bool:
    """Whether a connection error is a server that took the request and closed without a reply ("Server
    disconnected without sending a response.", a reset while reading), not one never reached. Told by the
    transport's class names (``RemoteProtocolError``, ``ReadError``), which httpx and the httpx2 the SDK now
    ships share, so no transport library is imported here."""
    return cause is not None and any(k.__name__ in ("RemoteProtocolError", "ReadError") for k in type(cause).__mro__)


_YIELDING_LOCK = threading.Lock()


def _attach_connection(request: Any) -> None:
    """The request hook of the client for calls that may be interrupted: the call's connections are handed to
    its background call (a turn's call shuts them down) and to its turn's stop (the gateway shuts them down when
    the client leaves) as they open (``connect_tcp``, then ``start_tls`` for HTTPS)."""
    holders = [h for h in (current_call(), current_stop()) if h is not None]
    if not holders:
        return

    def trace(event: str, info: dict[str, Any]) -> None:
        if event in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
            stream = info.get("return_value")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if sock is not None:
                for holder in holders:
                    holder.attach(sock)

    request.extensions["trace"] = trace


def _caps_length(body: dict[str, Any]) -> bool:
    """Whether a request body limits the reply's length."""
    return body.get("max_tokens") is not None


def _preview(value: Any) -> str:
    """What a reply was, in a few words: its type and its first characters."""
    text = " ".join(str(value).split())
    return f"{type(value).__name__} {text[:80]!r}{'…' if len(text) > 80 else ''}"
# llama.cpp: "exceeds the available context size"; vLLM and OpenAI: "maximum context length".
_CONTEXT_OVERFLOW = re.compile(r"(?i)exceeds? the available context size|maximum context length|context length exceeded"
                               r"|context_length_exceeded")
_CONTEXT_SIZE = re.compile(r"(?i)(?:maximum context length is|available context size \(|context size of|n_ctx[=: ]+)"
                           r"\s*(\d+)")


def _number_after(pattern: re.Pattern[str], text: str) -> int | None:
    match = pattern.search(text)
    return int(match.group(1)) if match else None


def _error_detail(exc: openai.APIStatusError) -> str:
    # The SDK has already unwrapped {"error": {...}}; servers that don't nest still vary.
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error")
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if body.get("message"):
            return str(body["message"])
        if isinstance(inner, str) and inner:
            return inner
    if isinstance(body, str) and body:
        return body
    return exc.message
