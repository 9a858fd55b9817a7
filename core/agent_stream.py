"""Streaming an agent turn: the events ``Agent.stream`` yields, and the iterator that yields them.

A streamed turn runs the same code as ``Agent.generate`` (one generator of events; ``generate``
drains it), so it assembles the same prompt, runs the same tools and output processors and leaves
the same trace. Events arrive as the model produces them: ``text-delta`` pieces, then for each tool
call a ``tool-call`` (complete, once the model's step ends) and a ``tool-result`` (after it ran), and
last ``finish``, which carries the ``AgentResult``.

The turn is saved once, after the model's last step and before ``finish`` is yielded. A consumer
that stops early (``close()``, leaving a ``with`` block, or dropping the stream) abandons the turn:
nothing is saved, the model's HTTP stream is closed, and the trace records the run as stopped.
Tools that already ran are not undone; a working-memory update is staged with the turn, so it is dropped too.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from core.agent_errors import AgentError
from core.llm.base import Usage

if TYPE_CHECKING:  # pragma: no cover
    from core.agent import AgentResult

log = logging.getLogger(__name__)

__all__ = ["AgentStream", "StreamEvent", "StreamEventKind"]

StreamEventKind = Literal["text-delta", "tool-call", "tool-result", "finish"]


@dataclass(frozen=True)
class StreamEvent:
    """One event of a streamed turn.

    ``text-delta``: ``text`` is the next piece of the reply. ``tool-call``: ``tool_call_id``,
    ``tool_name`` and ``args`` of a call about to run. ``tool-result``: the same ids and the tool's
    ``output``. ``finish``: ``finish_reason``, ``usage``, the whole ``text`` and the ``result``.
    """

    kind: StreamEventKind
    text: str = ""
    tool_call_id: str | None = None
    tool_name: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    output: Any = None
    finish_reason: str | None = None
    usage: Usage | None = None
    result: "AgentResult | None" = None


class AgentStream:
    """The events of one streamed turn; iterate it, or use it as a context manager.

    Each step of the turn runs in a context of its own, so the turn's current span never leaks into
    the consumer's code between events (and spans the consumer starts are not parented under it).
    Errors (a foreign thread, a prompt over the context window, a failed model call) are raised from
    the iteration, as ``generate`` raises them.
    """

    def __init__(self, events: Generator[StreamEvent, None, "AgentResult"]) -> None:
        self._events = events
        self._context = contextvars.copy_context()
        self._result: AgentResult | None = None
        self._done = False

    def __iter__(self) -> AgentStream:
        return self

    def __next__(self) -> StreamEvent:
        if self._done:
            raise StopIteration
        try:
            return self._context.run(next, self._events)
        except StopIteration as stop:
            self._done = True
            self._result = stop.value
            raise StopIteration from None
        except BaseException:
            self._done = True
            raise

    def text_stream(self) -> Iterator[str]:
        """Only the reply's text, piece by piece (the other events still happen)."""
        for event in self:
            if event.kind == "text-delta":
                yield event.text

    def collect(self) -> "AgentResult":
        """Run the turn to its end and return its result."""
        for _ in self:
            pass
        return self.result

    @property
    def completed(self) -> bool:
        return self._result is not None

    @property
    def result(self) -> "AgentResult":
        if self._result is None:
            raise AgentError("The stream has not finished: iterate it to the end (or call collect()) first.")
        return self._result

    def close(self) -> None:
        """Stop the turn if it is still running; nothing of it is saved. Safe to call twice."""
        if self._done:
            return
        self._done = True
        self._context.run(self._events.close)

    def __enter__(self) -> AgentStream:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - a finaliser must not raise; leave a line in the log
            log.warning("closing an abandoned agent stream failed", exc_info=True)
