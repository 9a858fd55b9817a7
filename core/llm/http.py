"""HTTP set-up and the retry policy for every client of an OpenAI-protocol server.

Chat models (``OpenAICompatibleModel``) and remote embedders (``OpenAIEmbedder``) both talk to
servers that copy OpenAI's protocol, through the official ``openai`` package. They build their
client here, with the SDK's own retries switched off, and retry through one ``RetryPolicy`` so the
rule is visible, configurable and the same for both. Each caller still words its own errors.
"""

from __future__ import annotations

import base64
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import unquote, urlsplit, urlunsplit

from core.llm.keys import ResolvedKey, Secret
from core.redaction import MIN_SECRET_LENGTH

if TYPE_CHECKING:
    import openai

logger = logging.getLogger(__name__)

OPENAI_BASE_URL = "https://api.openai.com/v1"
#: Sent when no key is configured: local servers ignore it, and the SDK insists on one.
NO_KEY_PLACEHOLDER = "no-key-configured"

_T = TypeVar("_T")


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to wait before trying a failed request again.

    Retries cover 408, 409, 429 and 5xx answers and refused connections, with exponential
    backoff (``initial_delay * 2**n``, capped at ``max_delay``, shortened by up to
    ``jitter`` so clients that failed together don't retry together). A ``Retry-After``
    header is obeyed up to ``max_retry_after`` seconds; longer than that, we give up at once
    rather than freeze the caller. Timeouts are retried only if ``retry_timeouts``: a chat model
    too slow once (typically a local one loading its weights) is usually too slow again, and
    retrying would multiply the wait.
    """

    max_retries: int = 2
    initial_delay: float = 0.5
    max_delay: float = 8.0
    jitter: float = 0.25
    max_retry_after: float = 60.0
    retry_timeouts: bool = False

    def delay(self, retry_number: int, retry_after: float | None = None) -> float:
        if retry_after is not None:
            return max(0.0, retry_after)
        base = min(self.initial_delay * (2.0 ** retry_number), self.max_delay)
        return base * (1.0 - self.jitter * random.random())

    def is_retryable(self, exc: BaseException) -> bool:
        """Whether this failure of the ``openai`` client may succeed if the request is sent again."""
        import openai

        if isinstance(exc, openai.APIStatusError):
            return is_retryable_status(exc.status_code, exc.response.headers)
        if isinstance(exc, openai.APITimeoutError):  # a subclass of APIConnectionError: test it first
            return self.retry_timeouts
        return isinstance(exc, openai.APIConnectionError)

    def call(
        self,
        send: Callable[[], _T],
        *,
        error: Callable[[openai.OpenAIError, int], Exception],
        wait_too_long: Callable[[openai.OpenAIError, int, float], Exception],
        sleep: Callable[[float], None] = time.sleep,
    ) -> _T:
        """``send()``, retried under this policy; a final failure raises ``error(exc, attempts)``.

        ``wait_too_long(exc, attempts, seconds)`` is raised instead when the server asks for a
        longer wait than ``max_retry_after``.
        """
        import openai

        attempt = 0
        while True:
            attempt += 1
            try:
                return send()
            except openai.OpenAIError as exc:
                if not self.is_retryable(exc) or attempt > self.max_retries:
                    raise error(exc, attempt) from exc
                wait = retry_after(exc.response.headers) if isinstance(exc, openai.APIStatusError) else None
                if wait is not None and wait > self.max_retry_after:
                    raise wait_too_long(exc, attempt, wait) from exc
                pause = self.delay(attempt - 1, wait)
                logger.info("request failed (%s); retry %d of %d in %.2fs",
                            type(exc).__name__, attempt, self.max_retries, pause)
                sleep(pause)


def retry_after(headers: Mapping[str, str]) -> float | None:
    """The ``Retry-After`` header in seconds, or None (absent, or an HTTP date)."""
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None  # an HTTP date; rare from these servers, fall back to backoff


def is_retryable_status(status: int, headers: Mapping[str, str]) -> bool:
    # The same non-standard header the OpenAI SDK honours: lets a server veto retries.
    verdict = headers.get("x-should-retry")
    if verdict in ("true", "false"):
        return verdict == "true"
    return status in (408, 409, 429) or status >= 500


class UrlCredentials:
    """The ``user:password@`` a base URL may carry, kept out of every message and trace.

    The HTTP client sends them as ``Authorization: Basic <base64(user:password)>``, and a server may
    echo that header (or the password) back in an error body. So each form (the user, the password,
    both joined, percent-decoded or not, and the Basic token) is registered as a secret: traces and
    log lines redact it wherever it appears, and ``scrub`` removes it from a message.
    """

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        raw_user, _, raw_password = parts.netloc.rpartition("@")[0].partition(":")
        user, password = unquote(raw_user), unquote(raw_password)
        forms: set[str] = set()
        if user or password:
            forms |= {f"{user}:{password}", f"{raw_user}:{raw_password}",
                      base64.b64encode(f"{user}:{password}".encode("utf-8")).decode("ascii")}
            # A password alone only when it is long enough not to be an ordinary word (as keys).
            forms |= {p for p in (password, raw_password) if len(p) >= MIN_SECRET_LENGTH}
        # Longest first, so a form that contains another is replaced whole; kept as Secrets, which
        # register themselves for redaction.
        self._secrets = [Secret(v) for v in sorted(forms, key=len, reverse=True)]

    def __bool__(self) -> bool:
        return bool(self._secrets)

    @staticmethod
    def basic_header(url: str) -> dict[str, str]:
        """The ``Authorization: Basic`` header a URL's credentials stand for (empty without any)."""
        parts = urlsplit(url)
        if "@" not in parts.netloc:
            return {}
        user, _, password = parts.netloc.rpartition("@")[0].partition(":")
        token = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode("utf-8")).decode("ascii")
        return {"Authorization": f"Basic {token}"}

    def scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret.reveal(), "***")
        return text


def safe_url(url: str) -> str:
    """``url`` without credentials or query string, fit for display and traces."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address keeps its brackets (else the port reads as part of it)
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))


def openai_client(
    base_url: str, key: ResolvedKey, *, timeout: float, default_headers: Mapping[str, str] | None = None,
) -> openai.OpenAI:
    """An ``openai.OpenAI`` client for ``base_url`` with the SDK's retries off (``RetryPolicy`` retries)."""
    # Deferred import: the SDK takes about a second to load, and the Studio should not pay
    # that at start-up when no real model is configured.
    import openai

    # Credentials in the URL become the Basic header they stand for (as the HTTP client would make
    # it), and the URL the client keeps, and logs with every request, holds none.
    headers = {**UrlCredentials.basic_header(base_url), **dict(default_headers or {})}
    return openai.OpenAI(
        api_key=key.secret.reveal() if key.secret else NO_KEY_PLACEHOLDER,
        base_url=_without_credentials(base_url).rstrip("/"),
        timeout=timeout,
        max_retries=0,
        default_headers=headers,
    )


def _without_credentials(url: str) -> str:
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, parts.query, parts.fragment))


__all__ = [
    "NO_KEY_PLACEHOLDER",
    "OPENAI_BASE_URL",
    "RetryPolicy",
    "is_retryable_status",
    "openai_client",
    "retry_after",
    "safe_url",
]
