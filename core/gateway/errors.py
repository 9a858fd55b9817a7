"""Every error the gateway returns, as OpenAI-style JSON with the right HTTP status.

``{"error": {"message", "type", "code", "param"}}`` is what OpenAI clients parse: the official
``openai`` package turns it into ``NotFoundError``, ``PermissionDeniedError`` and so on, with our
message. One function, ``classify``, decides the status of every exception, so the chat route,
the memory API and the streaming path always agree.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from core.context_window import ContextWindowError
from core.errors import MemoryStudioError
from core.llm.base import ModelError
from core.llm.stopping import CallStopped
from core.message_size import MessageTooLargeError
from core.messages import MessageFormatError
from core.scopes import ScopeConflictError, ThreadOwnershipError
from core.storage import (
    AlreadyExistsError,
    InvalidArgumentError,
    InvalidValueError,
    NotFoundError,
    ReadOnlyError,
    StorageError,
    StorageUnavailableError,
)
from core.working_memory import ConcurrentUpdateError, WorkingMemoryTooLargeError
from core.working_memory_schema import WorkingMemoryError

log = logging.getLogger(__name__)


class GatewayError(MemoryStudioError):
    """An error the gateway raises itself, already knowing its status and OpenAI error type."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 code: str | None = None, param: str | None = None, retry: bool | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        """``retry``: whether a client should send the request again by itself (the ``x-should-retry``
        header, which OpenAI's SDKs obey before their own rule of retrying 5xx); None: their rule.
        ``headers``: more headers of the reply (a 412's ``ETag``)."""
        super().__init__(message)
        self.headers = dict(headers or {})
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param
        self.retry = retry


def bad_request(message: str, *, param: str | None = None, code: str = "invalid_request") -> GatewayError:
    return GatewayError(400, message, code=code, param=param)


@dataclass(frozen=True)
class ErrorReply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


def classify(exc: BaseException) -> ErrorReply:
    """The HTTP status and OpenAI-style body for ``exc``. Unknown errors are logged, never shown."""
    reply = known(exc)
    if reply is not None:
        if operators_storage_error(exc):
            # Logged here, where the answer is made, once: ``known`` is asked by other places too (the idempotency
            # key's keeping), and the client's answer holds none of this text (``storage_message``).
            log.warning("a request met a storage error (answered %d): %s", reply.status, exc)
        elif isinstance(exc, ModelError) and not isinstance(exc, CallStopped):
            # The client gets the 502, but most of what it says is for whoever runs the gateway to fix (the model
            # server down, its context or timeout flags); a stopped call is a client that left, logged where seen.
            log.warning("a model call failed (answered %d): %s", reply.status, exc)
        return reply
    log.error("unexpected error while serving a request", exc_info=exc)
    return _reply(500, "The gateway failed on this request; its log has the details.", "server_error", "internal")


def known(exc: BaseException) -> ErrorReply | None:
    """``classify`` for the errors it recognises; None for the rest (a 500), without logging (``classify`` logs)."""
    if isinstance(exc, GatewayError):
        reply = _reply(exc.status, exc.message, exc.type, exc.code, exc.param)
        reply.headers.update(exc.headers)
        if exc.retry is not None:
            reply.headers["x-should-retry"] = "true" if exc.retry else "false"
        return reply
    if isinstance(exc, ThreadOwnershipError):  # (the owner not named: the caller may be another user)
        return _reply(403, exc.without_owner(), "permission_error", "thread_ownership")
    if isinstance(exc, ReadOnlyError):
        return _reply(403, storage_message(exc), "permission_error", "read_only")
    if isinstance(exc, ModelError):
        # The upstream model failed: a bad gateway, not a bad request. The message names the
        # endpoint and status and never holds a key (ModelError's own guarantee).
        reply = _reply(502, str(exc), "api_error", "model_error")
        if getattr(exc, "tools_run", None):
            # Tools had run (``TurnFailedError``): a retry runs them again, which is the client's choice to
            # make knowingly, not its SDK's to make silently (their default retries a 5xx twice).
            reply.headers["x-should-retry"] = "false"
        return reply
    if isinstance(exc, StorageUnavailableError):
        # The database server is restarting or unreachable: retryable, and nothing was committed.
        return _reply(503, storage_message(exc), "api_error", "storage_unavailable")
    if isinstance(exc, ConcurrentUpdateError):
        return _reply(409, str(exc), "invalid_request_error", "conflict")
    if isinstance(exc, NotFoundError):
        return _reply(404, str(exc), "not_found_error", "not_found")
    # Client mistakes: a 4xx with the reason, never a 500 (issue 17).
    if isinstance(exc, (MessageTooLargeError, WorkingMemoryTooLargeError)):
        return _reply(413, str(exc), "invalid_request_error", "too_large")
    if isinstance(exc, ContextWindowError):
        return _reply(400, str(exc), "invalid_request_error", "context_length_exceeded")
    if isinstance(exc, InvalidValueError):
        return _reply(400, storage_message(exc), "invalid_request_error", "invalid_request")
    if isinstance(exc, (ScopeConflictError, InvalidArgumentError, WorkingMemoryError, MessageFormatError)):
        return _reply(400, str(exc), "invalid_request_error", "invalid_request")
    return None


def operators_storage_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a storage error written for the server's operator (the database busy, read-only, full,
    damaged, unreachable), which a client gets as ``storage_message``; the storage errors about the request itself
    (a thread not found, an argument refused, a row already there) say what the client sent, and keep their text."""
    return isinstance(exc, StorageError) and not isinstance(exc, (NotFoundError, InvalidArgumentError,
                                                                  AlreadyExistsError))


def storage_message(exc: StorageError) -> str:
    """What a client is told of a storage failure: what happened and what it can do, never the storage error's own
    text, which is written for the server's operator (it names the database file and folder, or the Postgres server,
    database and role) and goes to the server's log instead, once, by whoever answers (``classify``, the MCP
    server's ``_call``): this function logs nothing, as several places ask it about one error."""
    if isinstance(exc, StorageUnavailableError):
        return ("The server's database is busy or could not be reached, so nothing of this request was saved. Send "
                "it again in a moment.")
    if isinstance(exc, ReadOnlyError):
        return ("The server's database takes no writes at the moment (it is open read-only, or it cannot be "
                "written), so nothing was written; reading still works. The server's log says why, for its operator.")
    if isinstance(exc, InvalidValueError):
        return ("A value of this request could not be stored: the database accepts text only when it can be encoded "
                "as UTF-8 (a lone surrogate such as \\ud800 cannot). Nothing was written.")
    return ("The server's database failed on this call, so nothing of it was saved. The server's log says why, for "
            "its operator.")


def _reply(status: int, message: str, type: str, code: str | None, param: str | None = None) -> ErrorReply:
    return ErrorReply(status, {"error": {"message": message, "type": type, "code": code, "param": param}})
