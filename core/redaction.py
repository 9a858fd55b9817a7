"""Keeping API keys out of traces and log lines.

Two nets. The literal values of the keys this process uses: every place that resolves a key wraps
it in ``Secret``, which registers it here, so a key is caught in any text whatever its shape (a
server that echoes it in a 401 body, a model that copies it into tool arguments). And the usual
key shapes (``sk-…``, ``Bearer …``, ``api_key=…``, GitHub/Hugging Face/Google/AWS tokens, and our own
tokens files' ``mst_…``) for keys this process never saw. ``redact_text`` applies both; the tracer runs it over every span before
export, and ``SecretLogFilter`` over every record of the ``core`` loggers.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any

REDACTED = "[REDACTED]"
#: Shorter values are not registered: redacting "right" or "unused" everywhere would mangle ordinary
#: text, and real provider keys are far longer. Short keys are still caught by shape in headers and
#: ``api_key=`` text.
MIN_SECRET_LENGTH = 8
#: Values local servers document as "any key will do": public, and often also a provider's name,
#: which must stay readable in traces.
PLACEHOLDER_KEYS = frozenset({"ollama", "lm-studio", "lmstudio", "not-needed", "sk-no-key-required", "empty",
                              "none", "dummy", "placeholder", "no-key-configured", "llama.cpp", "vllm"})

# Each shape starts with a literal, so ``re`` finds candidates with a fast substring search (an
# alternation or a leading ``\b`` would make it try every position: 10x slower on a long prompt).
# The word boundary before the match is checked in ``_bounded`` instead.
# Each pattern is paired with a literal every match contains: text without it (most text) skips it.
_SHAPES = tuple((literal, re.compile(p)) for literal, p in (
    ("sk-", r"sk-[A-Za-z0-9_-]{6,}"),  # OpenAI (sk-, sk-proj-), Anthropic (sk-ant-), OpenRouter (sk-or-)
    ("Bearer", r"Bearer\s+[A-Za-z0-9._~+/=-]{3,}"),  # an Authorization header's scheme: short tokens too
    ("_", r"gh[pousr]_[A-Za-z0-9]{20,}"),  # GitHub
    ("hf_", r"hf_[A-Za-z0-9]{20,}"),  # Hugging Face
    ("gsk_", r"gsk_[A-Za-z0-9]{20,}"),  # Groq
    ("xai-", r"xai-[A-Za-z0-9]{20,}"),  # xAI
    ("AIza", r"AIza[0-9A-Za-z_-]{30,}"),  # Google
    ("AKIA", r"AKIA[0-9A-Z]{16}"),  # AWS access key id
    ("mst_", r"mst_[A-Za-z0-9_-]{20,}"),  # ours: a tokens file's token (the process holds only its hash)
))
_ANY_CASE_BEARER = re.compile(r"(?i)bearer\s+[A-Za-z0-9._~+/=-]{8,}")
# ``api_key=abc``, ``"x-api-key": "abc"``, ``Authorization: xyz``: the name stays, the value goes.
# The names, grouped under a word they contain: most text has none of these words, and the named
# pattern (which cannot start with a literal) then never runs.
_NAME_GROUPS = (
    ("key", ("api_key", "api-key", "apikey", "secret_key", "secret-key")),
    ("token", ("access_token", "access-token", "auth_token", "auth-token")),
    ("secret", ("client_secret", "client-secret")),
    ("passw", ("passw",)),
    ("authorization", ("authorization",)),
)
_NAMED = re.compile(
    r"(?i)\b((?:x-)?api[_-]?key|access[_-]?token|auth[_-]?token|client[_-]?secret|secret[_-]?key|password"
    r"|passwd|authorization)([\"']?\s*[:=]\s*[\"']?)([^\s\"',;}&]+)"
)

_lock = threading.Lock()
_secrets: tuple[str, ...] = ()  # longest first, so a key that contains another is replaced whole


def register_secret(value: str | None) -> None:
    """Remember a key this process uses, so its literal value is redacted wherever it appears."""
    global _secrets
    if (not isinstance(value, str) or len(value) < MIN_SECRET_LENGTH or value.lower() in PLACEHOLDER_KEYS
            or value in _secrets):
        return
    with _lock:
        _secrets = tuple(sorted({*_secrets, value}, key=len, reverse=True))


def _bounded(match: re.Match[str]) -> str:
    start = match.start()
    if start and (match.string[start - 1].isalnum() or match.string[start - 1] == "_"):
        return match.group(0)  # inside a word ("task-based"): not a key
    return REDACTED


#: Texts already redacted, with the registered keys they were redacted against: a span repeats most
#: of the last one's texts (the prompt's history, instructions, tool schemas), so an agent turn looks
#: ~70 texts up instead of scanning them again. An entry counts only while ``_secrets`` is the very
#: tuple it was made with (registering a key makes a new tuple), so no text misses a new key. Plain
#: ``str`` only (a subclass keeps its own object when nothing changes), and short texts only, so the
#: cache stays small (at most ``DONE_ENTRIES`` x ``DONE_CHARS`` characters).
_done: dict[str, tuple[tuple[str, ...], str]] = {}
DONE_ENTRIES = 2048
DONE_CHARS = 8192


def redact_text(text: str) -> str:
    """``text`` with registered keys and key-shaped substrings replaced by ``[REDACTED]``."""
    secrets = _secrets
    if type(text) is not str or len(text) > DONE_CHARS:
        return _redact_text(text, secrets)
    done = _done.get(text)
    if done is not None and done[0] is secrets:
        return done[1]
    clean = _redact_text(text, secrets)
    if len(_done) >= DONE_ENTRIES:
        try:
            del _done[next(iter(_done))]
        except (KeyError, StopIteration, RuntimeError):  # another thread evicted it first
            pass
    _done[text] = (secrets, clean)
    return clean


def _redact_text(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    for literal, shape in _SHAPES:
        if literal in text:
            text = shape.sub(_bounded, text)
    low = text.lower()
    if "bearer" in low:
        text = _ANY_CASE_BEARER.sub(_bounded, text)
    if _names_present(low):
        text = _NAMED.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    return text


def _names_present(low: str) -> bool:
    for word, names in _NAME_GROUPS:
        if word in low:
            for name in names:
                if name in low:
                    return True
    return False


def redact_value(value: Any) -> Any:
    """A string redacted; any other object is returned as is unless its text holds a secret (then
    the redacted text stands in for it, since it would be written as text anyway)."""
    if isinstance(value, str):
        return redact_text(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    try:
        text = str(value)
    except Exception:  # noqa: BLE001 - an object that cannot print itself holds nothing we could leak
        return value
    clean = redact_text(text)
    return value if clean == text else clean


class SecretLogFilter(logging.Filter):
    """Redacts a record's message, exception text and stack before any handler formats it."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is the logging module's to report
            return True
        clean = redact_text(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            formatted = logging.Formatter().formatException(record.exc_info)
            if redact_text(formatted) != formatted:
                record.exc_text = redact_text(formatted)  # formatters use exc_text when it is set
        elif record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        if record.stack_info:
            record.stack_info = redact_text(record.stack_info)
        return True


_FILTER = SecretLogFilter()
_installed = False


def install_log_redaction() -> None:
    """Put ``SecretLogFilter`` on the ``core`` logger and on every record its descendants create.

    A filter on a logger only sees records logged to that very logger, not those propagating up
    from ``core.agent`` and friends, so the record factory applies it to those as it makes them.
    Records of other libraries are left untouched.
    """
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
    logging.getLogger("core").addFilter(_FILTER)
    previous = logging.getLogRecordFactory()

    def make_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        if record.name.startswith("core."):
            _FILTER.filter(record)
        return record

    logging.setLogRecordFactory(make_record)


install_log_redaction()

__all__ = ["REDACTED", "SecretLogFilter", "install_log_redaction", "redact_text", "redact_value",
           "register_secret"]
