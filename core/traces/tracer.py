"""Tracing for agent runs: spans with parents, timings, errors, exported as ``mastra_ai_spans`` rows.

Usage::

    tracer = Tracer(DuckDBSpanExporter(".temp/observability.duckdb"))
    with tracer.start_span("agent run: support", SpanType.AGENT_RUN, thread_id=t, resource_id=r):
        with tracer.start_span("memory: recall", SpanType.MEMORY_OPERATION,
                               attributes={"operationType": "recall"}) as span:
            span.end(output={"messages": 12})

A span opened with ``with`` becomes the current span (a ``ContextVar``, so threads and asyncio
tasks each see their own), and spans started inside it get it as parent, inheriting trace, thread,
resource and run ids. A span is exported once, when it ends; secrets are redacted first.
"""

from __future__ import annotations

import copy
import logging
import os
import random
import re
import secrets
import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar, Token
from dataclasses import MISSING
from dataclasses import fields as dataclass_fields
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Protocol, Union, runtime_checkable

from core.redaction import REDACTED, redact_text, redact_value
from core.traces.spans import COLUMNS, SpanRecord, SpanType

if TYPE_CHECKING:  # pragma: no cover
    from core.traces.exporter import DuckDBSpanExporter, ExporterStats

log = logging.getLogger(__name__)


def __getattr__(name: str) -> Any:
    # The DuckDB exporter is re-exported lazily: importing the engine (which holds a tracer on every
    # processor context) must not pay for importing DuckDB when no trace file is written.
    if name in ("DuckDBSpanExporter", "ExporterStats"):
        from core.traces import exporter

        return getattr(exporter, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "DuckDBSpanExporter",
    "ExporterStats",
    "InMemorySpanExporter",
    "LiveSpanExporter",
    "NOOP_TRACER",
    "NoopSpan",
    "NoopTracer",
    "REDACTED",
    "Span",
    "SpanExporter",
    "SpanRecord",
    "SpanTracer",
    "SpanType",
    "TracedSpan",
    "StrictClock",
    "Tracer",
    "current_span",
    "redact_secrets",
    "tracing_disabled",
]

# ----------------------------------------------------------------------------------------------
# Redaction


_SECRET_KEY_PARTS = ("apikey", "authorization", "password", "passwd", "secret", "cookie", "privatekey")


@lru_cache(maxsize=4096)  # the same few dozen keys recur in every span
def is_secret_key(key: str) -> bool:
    """``api_key``, ``Authorization``, ``x-auth-token``, ``clientSecret``... but not token counts.

    A key is a credential when it names a token in the singular (``access_token``, ``token``);
    counts are plural or qualified (``prompt_tokens``, ``maxTokens``, ``token_count``, ``usage``).
    """
    norm = re.sub(r"[^a-z0-9]", "", key.lower())
    return any(part in norm for part in _SECRET_KEY_PARTS) or norm.endswith("token")


def redact_secrets(value: Any) -> Any:
    """A copy of ``value`` with secret-named keys, the keys in use and key-shaped strings replaced
    (``core.redaction``): in messages, tool arguments, error messages and stacks alike."""
    # The exact types a span holds come first: most of a span is None, strings, numbers and plain
    # dicts and lists, and an ``isinstance`` against the ``Mapping`` ABC is slow.
    kind = type(value)
    if value is None or kind is bool or kind is int or kind is float:
        return value
    if kind is str:
        return redact_text(value)
    if kind is dict:
        return _redact_dict(value)
    if kind is list:
        return [redact_text(v) if type(v) is str else _redact_dict(v) if type(v) is dict else redact_secrets(v)
                for v in value]
    if isinstance(value, Mapping):
        return {
            k: REDACTED if isinstance(k, str) and is_secret_key(k) else redact_secrets(v)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact_secrets(v) for v in value]
    return redact_value(value)


def _redact_dict(value: dict[Any, Any]) -> dict[Any, Any]:
    """``redact_secrets`` of a plain dict, with its commonest values (text, None, numbers, nested
    dicts) handled here rather than by a call each: a model call's span holds the whole prompt."""
    out: dict[Any, Any] = {}
    for k, v in value.items():
        if isinstance(k, str) and is_secret_key(k):
            out[k] = REDACTED
            continue
        kind = type(v)
        if kind is str:
            out[k] = redact_text(v)
        elif v is None or kind is int or kind is bool or kind is float:
            out[k] = v
        elif kind is dict:
            out[k] = _redact_dict(v)
        else:
            out[k] = redact_secrets(v)
    return out


# ----------------------------------------------------------------------------------------------
# Exporters


class SpanExporter(Protocol):
    """Where ended spans go. ``export`` must not block on I/O: agent runs call it inline."""

    def export(self, spans: Sequence[SpanRecord]) -> None: ...

    def flush(self, timeout: float | None = None) -> bool: ...

    def shutdown(self, timeout: float | None = None) -> None: ...


@runtime_checkable
class LiveSpanExporter(Protocol):
    """An exporter that also shows spans while they run (``DuckDBSpanExporter``): told of each span as
    it starts, it may ask the span for a snapshot (``Span.snapshot``) until the span ends and is
    exported. ``span_started`` must be as cheap as ``export``: agent runs call it inline."""

    def span_started(self, span: Span) -> None: ...


class InMemorySpanExporter:
    """Keeps every exported span in a list; for tests and for in-process inspection."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.spans: list[SpanRecord] = []

    def export(self, spans: Sequence[SpanRecord]) -> None:
        with self._lock:
            self.spans.extend(spans)

    def flush(self, timeout: float | None = None) -> bool:
        return True

    def shutdown(self, timeout: float | None = None) -> None:
        return None

    def clear(self) -> None:
        with self._lock:
            self.spans.clear()

    def by_name(self, name: str) -> list[SpanRecord]:
        return [s for s in self.spans if s.name == name]


# ----------------------------------------------------------------------------------------------
# Spans

_current: ContextVar[Span | None] = ContextVar("memory_studio_current_span", default=None)
_UNSET: Any = object()


def current_span() -> Span | None:
    return _current.get()


class Span:
    """A span being recorded. Use as a context manager, or call ``end()`` yourself."""

    def __init__(self, tracer: Tracer, record: SpanRecord | dict[str, Any]) -> None:
        """``record``: the span's values, as a ``SpanRecord`` or as a dict of every one of its fields."""
        self._tracer = tracer
        self._lock = threading.Lock()
        # A plain dataclass: its fields are its __dict__.
        self._fields: dict[str, Any] = dict(record) if isinstance(record, dict) else dict(vars(record))
        self._ended = False
        self._tokens: list[Token[Span | None]] = []

    # identity, read by children
    @property
    def trace_id(self) -> str:
        return str(self._fields["trace_id"])

    @property
    def span_id(self) -> str:
        return str(self._fields["span_id"])

    @property
    def parent_span_id(self) -> str | None:
        return self._fields["parent_span_id"]  # type: ignore[no-any-return]

    @property
    def name(self) -> str:
        return str(self._fields["name"])

    def field(self, attr: str) -> Any:
        return self._fields[attr]

    def set_attributes(self, attributes: Mapping[str, Any]) -> Span:
        with self._lock:
            merged = dict(self._fields["attributes"] or {})
            merged.update(attributes)
            self._fields["attributes"] = merged
        return self

    def set_output(self, value: Any) -> Span:
        self._fields["output"] = value
        return self

    def set_input(self, value: Any) -> Span:
        """Replace the span's input (for spans whose input is known only once they end)."""
        self._fields["input"] = value
        return self

    def record_error(self, error: BaseException | str) -> Span:
        if isinstance(error, BaseException):
            stack = "".join(traceback.format_exception(error))[-4000:]
            info = {"message": str(error), "name": type(error).__name__, "details": {"stack": stack}}
        else:
            info = {"message": error}
        self._fields["error"] = info
        return self

    def end(
        self,
        output: Any = _UNSET,
        attributes: Mapping[str, Any] | None = None,
        error: BaseException | str | None = None,
    ) -> SpanRecord | None:
        """Finish and export; a second call does nothing and returns None."""
        with self._lock:
            if self._ended:
                return None
            self._ended = True
        if output is not _UNSET:
            self._fields["output"] = output
        if attributes:
            merged = dict(self._fields["attributes"] or {})
            merged.update(attributes)
            self._fields["attributes"] = merged
        if error is not None:
            self.record_error(error)
        now = self._tracer.clock()
        self._fields["ended_at"] = now
        self._fields["updated_at"] = now
        return self._tracer._finish(self)

    def to_record(self) -> SpanRecord:
        return SpanRecord(**self._fields)

    @property
    def ended(self) -> bool:
        return self._ended

    def snapshot(self) -> SpanRecord:
        """The span as it stands, redacted as its end will be, with no end time: what a running row
        shows. May be called from another thread while the span runs."""
        return self._tracer._redacted(dict(self._fields))

    def __enter__(self) -> Span:
        self._tokens.append(_current.set(self))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]:
        try:
            if exc is not None and not self._ended:
                self.record_error(exc)
            self.end()
        finally:
            if self._tokens:
                _current.reset(self._tokens.pop())
        return False  # never swallow the error: tracing observes, it does not decide


class Tracer:
    """Creates spans and hands ended ones, redacted, to an exporter."""

    def __init__(
        self,
        exporter: SpanExporter | None = None,
        *,
        service_name: str | None = "memory-studio",
        environment: str | None = None,
        clock: Callable[[], datetime] | None = None,
        id_factory: Callable[[Literal["trace", "span"]], str] | None = None,
        redactor: Callable[[Any], Any] = redact_secrets,
    ) -> None:
        self.exporter: SpanExporter = exporter or InMemorySpanExporter()
        self.service_name = service_name
        self.environment = environment
        self.clock: Callable[[], datetime] = clock or StrictClock()
        self._new_id = id_factory or _random_id
        self._redact = redactor
        # Asked once: an exporter that shows running spans is told of each span as it starts.
        self._started: Callable[[Span], None] | None = \
            self.exporter.span_started if isinstance(self.exporter, LiveSpanExporter) else None

    def telling(self, on_start: Callable[[Span], None]) -> Tracer:
        """This tracer (the same exporter, clock, ids and redaction), also calling ``on_start`` with each span
        it starts, inline on the thread that starts it, before the span's work: for a caller showing what
        a run is doing while it runs (Studio Chat: observational memory observing before the reply).
        ``on_start`` must be cheap; what it raises is logged, never the run's failure."""
        told = copy.copy(self)
        exporter_told = self._started

        def started(span: Span) -> None:
            if exporter_told is not None:
                exporter_told(span)
            try:
                on_start(span)
            except Exception:  # noqa: BLE001 - whoever listens must never fail an agent run
                log.warning("a listener of span %r's start failed", span.name, exc_info=True)

        told._started = started
        return told

    def start_span(
        self,
        name: str,
        span_type: SpanType | str,
        parent: Span | NoopSpan | None = None,
        *,
        new_trace: bool = False,
        attributes: Mapping[str, Any] | None = None,
        input: Any = None,
        metadata: Mapping[str, Any] | None = None,
        thread_id: str | None = None,
        resource_id: str | None = None,
        run_id: str | None = None,
        entity_type: str | None = None,
        entity_id: str | None = None,
        entity_name: str | None = None,
        is_event: bool = False,
    ) -> Span:
        """Start a span; its parent is ``parent``, else the current span, unless ``new_trace``."""
        if parent is None and not new_trace:
            parent = _current.get()
        if isinstance(parent, NoopSpan):
            parent = None
        now = self.clock()
        # The row's values as a dict (what the span keeps until it ends): one SpanRecord, at the end.
        record = dict(_SPAN_TEMPLATE)
        if parent is not None:
            inherited = parent._fields  # a child takes its trace, parent, root and ids from its parent
            record.update(
                trace_id=str(inherited["trace_id"]),
                parent_span_id=str(inherited["span_id"]),
                parent_entity_type=inherited["entity_type"],
                parent_entity_id=inherited["entity_id"],
                parent_entity_name=inherited["entity_name"],
                root_entity_type=inherited["root_entity_type"],
                root_entity_id=inherited["root_entity_id"],
                root_entity_name=inherited["root_entity_name"],
                user_id=inherited["user_id"],
                resource_id=resource_id or inherited["resource_id"],
                run_id=run_id or inherited["run_id"],
                session_id=inherited["session_id"],
                thread_id=thread_id or inherited["thread_id"],
            )
            if not record["trace_id"]:
                record["trace_id"] = self._new_id("trace")
        else:
            record.update(
                trace_id=self._new_id("trace"),
                parent_span_id=None,
                parent_entity_type=None,
                parent_entity_id=None,
                parent_entity_name=None,
                root_entity_type=entity_type,
                root_entity_id=entity_id,
                root_entity_name=entity_name,
                user_id=None,
                resource_id=resource_id or None,
                run_id=run_id or None,
                session_id=None,
                thread_id=thread_id or None,
            )
        record.update(
            span_id=self._new_id("span"),
            name=name,
            span_type=span_type.value if isinstance(span_type, SpanType) else str(span_type),
            started_at=now,
            is_event=is_event,
            entity_type=entity_type,
            entity_id=entity_id,
            entity_name=entity_name,
            environment=self.environment,
            service_name=self.service_name,
            metadata=dict(metadata) if metadata else None,
            attributes=dict(attributes) if attributes else None,
            input=input,
            created_at=now,
        )
        span = Span(self, record)
        if self._started is not None:
            try:
                self._started(span)
            except Exception:  # noqa: BLE001 - a broken exporter must never fail an agent run
                log.warning("span %r start was not passed on to the exporter", name, exc_info=True)
        return span

    def memory_operation(self, operation_type: str, **kwargs: Any) -> Span:
        """``memory: <operation>`` span with ``attributes.operationType``, as Mastra names them."""
        attributes = {"operationType": operation_type, **dict(kwargs.pop("attributes", None) or {})}
        return self.start_span(
            f"memory: {operation_type}", SpanType.MEMORY_OPERATION, attributes=attributes, **kwargs
        )

    def current_span(self) -> Span | None:
        return _current.get()

    def flush(self, timeout: float | None = None) -> bool:
        return self.exporter.flush(timeout)

    def shutdown(self, timeout: float | None = None) -> None:
        self.exporter.shutdown(timeout)

    def _redacted(self, values: dict[str, Any]) -> SpanRecord:
        redact = self._redact
        values["name"] = redact(values["name"])
        for attr in _JSON_ATTRS:
            if values[attr] is not None or redact is not redact_secrets:  # ours keeps None as None
                values[attr] = redact(values[attr])
        return _span_record(values)

    def _finish(self, span: Span) -> SpanRecord:
        record = self._redacted(dict(span._fields))
        try:
            self.exporter.export([record])
        except Exception:  # noqa: BLE001 - a broken exporter must never fail an agent run
            log.warning("span %r (trace %s) was not exported", record.name, record.trace_id, exc_info=True)
        return record


class StrictClock:
    """UTC now, microseconds, never repeating: siblings started in the same tick keep their order.

    The tree view sorts siblings by start time, and a coarse clock (or a fast loop) would give
    equal stamps; bumping by one microsecond is far below anything a person reads off a timeline.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = datetime.min.replace(tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        with self._lock:
            now = datetime.now(timezone.utc)
            if now <= self._last:
                now = self._last + timedelta(microseconds=1)
            self._last = now
            return now


_JSON_ATTRS = tuple(attr for _, attr, kind in COLUMNS if kind == "json")
#: Every SpanRecord field with its default (those without one are always given by ``start_span``).
_SPAN_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclass_fields(SpanRecord)
                                  if f.default is not MISSING}
#: Every field in field order (those without a default are set by ``start_span``): a span's dict keeps
#: this order, so its ``SpanRecord`` takes the dict as it is.
_SPAN_TEMPLATE: dict[str, Any] = {f.name: _SPAN_DEFAULTS.get(f.name) for f in dataclass_fields(SpanRecord)}


_FIELD_NAMES = tuple(f.name for f in dataclass_fields(SpanRecord))


def _span_record(values: dict[str, Any]) -> SpanRecord:
    """``SpanRecord(**values)`` for a dict holding exactly its fields (what a span keeps), built without
    the frozen dataclass's ``__init__``: that sets each of its 42 fields through
    ``object.__setattr__`` (~10 µs a span, eight spans a turn). Same fields, same order, no
    ``__post_init__`` to skip (a test compares the two)."""
    if len(values) != len(_FIELD_NAMES):
        return SpanRecord(**values)  # a missing or unknown field: the dataclass's own error
    record = object.__new__(SpanRecord)
    if tuple(values) == _FIELD_NAMES:  # a span started here: its dict is laid out in field order already
        record.__dict__.update(values)
        return record
    try:
        record.__dict__.update({name: values[name] for name in _FIELD_NAMES})
    except KeyError:
        return SpanRecord(**values)
    return record


def _random_id(kind: Literal["trace", "span"]) -> str:
    # OpenTelemetry-sized ids, as Mastra uses: 32 hex for a trace, 16 for a span. From a generator
    # seeded by the OS once per process (and again in a forked child): ids need to be unique, not
    # secret, and asking the OS for every id cost a system call each (11 per agent turn).
    return f"{_ids.getrandbits(128 if kind == 'trace' else 64):0{32 if kind == 'trace' else 16}x}"


_ids = random.Random(secrets.randbits(128))


def _reseed_ids() -> None:
    _ids.seed(secrets.randbits(128))


os.register_at_fork(after_in_child=_reseed_ids)


class NoopSpan:
    """Accepts every Span call and records nothing; what ``NoopTracer`` hands out."""

    trace_id = ""
    span_id = ""
    parent_span_id: str | None = None
    name = ""

    def set_attributes(self, attributes: Mapping[str, Any]) -> NoopSpan:
        return self

    def set_output(self, value: Any) -> NoopSpan:
        return self

    def set_input(self, value: Any) -> NoopSpan:
        return self

    def record_error(self, error: BaseException | str) -> NoopSpan:
        return self

    def end(self, output: Any = None, attributes: Any = None, error: Any = None) -> None:
        return None

    def field(self, attr: str) -> Any:
        return None

    def __enter__(self) -> NoopSpan:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        return False


class NoopTracer:
    """Tracing switched off: same calls as ``Tracer``, no spans, no exporter, no cost."""

    _SPAN = NoopSpan()

    def start_span(self, name: str, span_type: SpanType | str, parent: Any = None, **_: Any) -> NoopSpan:
        return self._SPAN

    def memory_operation(self, operation_type: str, **_: Any) -> NoopSpan:
        return self._SPAN

    def current_span(self) -> None:
        return None

    def flush(self, timeout: float | None = None) -> bool:
        return True

    def shutdown(self, timeout: float | None = None) -> None:
        return None


_TRACING_OFF = ("off", "0", "false", "no")
_TRACING_ON = ("", "on", "1", "true", "yes")
_told_tracing: set[str] = set()  # values of the variable already warned about (once a process each)


def tracing_disabled() -> bool:
    """``$MEMORY_STUDIO_TRACING`` is ``off`` (or ``0``/``false``/``no``): runs record no spans. Any value
    that is neither off nor on (``on``/``1``/``true``/``yes``, or unset) leaves tracing on and says so
    once in the log, so a typo (``of``, ``disabled``) does not pass for "off" unnoticed."""
    value = os.environ.get("MEMORY_STUDIO_TRACING", "").strip().lower()
    if value in _TRACING_OFF:
        return True
    if value not in _TRACING_ON and value not in _told_tracing:
        _told_tracing.add(value)
        log.warning("MEMORY_STUDIO_TRACING=%r is neither off (off, 0, false, no) nor on (on, 1, true, yes); "
                    "tracing stays on. Set it to off to record no spans.", os.environ.get("MEMORY_STUDIO_TRACING"))
    return False


#: The tracer every engine component holds: a real one, or the no-op stand-in when tracing is off,
#: so code that records spans never asks whether tracing is on.
SpanTracer = Union[Tracer, NoopTracer]
#: What ``SpanTracer.start_span`` hands out; use it with ``with``.
TracedSpan = Union[Span, NoopSpan]
#: One shared no-op tracer (it holds no state).
NOOP_TRACER = NoopTracer()
