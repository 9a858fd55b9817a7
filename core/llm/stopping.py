"""Stopping a turn's model call once nobody waits for its reply.

The gateway runs a turn for an HTTP client; when that client closes its connection (its timeout ran out,
it was interrupted) nobody will read the reply, and a local server with one slot (llama.cpp
``n_parallel=1``) would go on generating it while later turns queue. ``CallStop`` is the turn's signal:
``stop(reason)``, from any thread, marks it and shuts down the connection of the model call in flight
(llama.cpp and Ollama stop generating when their client's connection closes), and the call raises
``CallStopped``. The agent arms it around its model calls and around the opening of the turn (``armed``),
where observational memory may call its observer or reflector in the turn (synchronously): such a call is
cut as the turn's own is, and raises ``CallStopped`` naming it (``during``); nothing of it is written (no
observation, no back-off: a stop is not the model's failure). Background memory calls never answer to it; a
turn past ``block_after`` waiting for one does: the stop wakes the wait (``waking``) and the turn raises
``CallStopped`` (``waiting``) at once, the background call going on for the next turn.

A connection is shut only where the call has one of its own: ``OpenAICompatibleModel`` sends an armed call
to a self-hosted server (on this machine or a private network, by address or by what its name resolves to:
``yielding.self_hosted``, where a new connection costs nothing) on a connection not kept for reuse. An armed
call to a hosted API keeps its pooled connection (``CallStop(hosted_too=True)`` gives it one of its own too: the
Studio's Stop, where a person waits): streamed, it stops at its next chunk; plain, its reply is waited for and
thrown away. A model that is not an ``OpenAICompatibleModel`` is never interrupted; the agent still stops before
its next call and before the save. A delegation (a sub-agent called as a tool) runs its model calls under its
supervisor's stop.
"""

from __future__ import annotations

import contextvars
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from core.llm.base import ModelError


class Interruptible:
    """Connections of model calls that another thread may shut down, once, saying why."""

    def __init__(self) -> None:
        self._sockets: list[socket.socket] = []
        self._wakers: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._why: str | None = None

    @property
    def interrupted_by(self) -> str | None:
        return self._why

    def attach(self, sock: socket.socket) -> None:
        """A connection a call of this one's goes out on: shut down at once when already interrupted."""
        with self._lock:
            self._sockets.append(sock)
            late = self._why is not None
        if late:
            shut(sock)

    @contextmanager
    def waking(self, wake: Callable[[], None]) -> Iterator[None]:
        """Within the block, an interruption also calls ``wake`` (from the interrupting thread): a wait that
        is not a connection (a turn waiting for background memory work) looks again and ends."""
        with self._lock:
            self._wakers.append(wake)
        try:
            yield
        finally:
            with self._lock:
                self._wakers.remove(wake)

    def interrupt(self, why: str) -> bool:
        """Mark this interrupted (``why``), shut its connections down and wake its waits; False when it
        already was."""
        with self._lock:
            if self._why is not None:
                return False
            self._why = why
            sockets = list(self._sockets)
            wakers = list(self._wakers)
        for sock in sockets:
            shut(sock)
        for wake in wakers:
            wake()
        return True


def shut(sock: socket.socket) -> None:
    # shutdown (not close) wakes the thread blocked reading the reply and sends the server a FIN.
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed: nothing to stop


class CallStopped(ModelError):
    """A turn's model call was stopped because nobody waits for its reply any more (``reason``). The turn
    saves nothing; not a failure of the model, and not retried."""

    def __init__(self, reason: str, *, model_id: str, during: str | None = None, waiting: bool = False) -> None:
        self.reason = reason
        # What the turn was doing when it was stopped, where that was not its own model call: "observer",
        # "reflector (level 1)" (observational memory working in the turn). None: the turn's model call.
        self.during = during
        # True: the turn was waiting for ``during`` running in the background (past ``block_after``); that
        # call goes on (it is memory's, not the turn's) and what it writes is used by the next turn.
        self.waiting = waiting
        super().__init__(f"the call was stopped: {reason}; nothing of this turn was saved", model_id=model_id)


class CallStop(Interruptible):
    """One turn's stop signal (see the module doc). ``hosted_too``: a hosted API's call is cut at once as well
    (on a connection of its own, a new TLS handshake per call), not at its next chunk."""

    def __init__(self, *, hosted_too: bool = False) -> None:
        super().__init__()
        self.hosted_too = hosted_too

    @property
    def stopped(self) -> bool:
        return self._why is not None

    @property
    def reason(self) -> str | None:
        return self._why

    def stop(self, reason: str) -> bool:
        """Stop the turn's model calls (the one in flight, and every later one); False when already stopped."""
        return self.interrupt(reason)

    def check(self, model_id: str) -> None:
        """Raise ``CallStopped`` once stopped."""
        if self._why is not None:
            raise CallStopped(self._why, model_id=model_id)


@contextmanager
def armed(stop: CallStop | None) -> Iterator[None]:
    """The block's model calls answer to ``stop`` (``current_stop``); None: to nothing."""
    token = _ARMED.set(stop)
    try:
        yield
    finally:
        _ARMED.reset(token)


def current_stop() -> CallStop | None:
    """The stop the model call being made in this thread answers to, if any (``armed``)."""
    return _ARMED.get()


_ARMED: contextvars.ContextVar[CallStop | None] = contextvars.ContextVar("memory_studio_call_stop", default=None)

__all__ = ["CallStop", "CallStopped", "Interruptible", "armed", "current_stop", "shut"]
