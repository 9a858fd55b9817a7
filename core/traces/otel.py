"""OpenTelemetry export: our spans sent over OTLP/HTTP to Phoenix, Langfuse, Jaeger or any collector.

``OTelSpanExporter`` is a ``SpanExporter`` (``core.traces.tracer``) like the DuckDB one, and the two
compose (``CompositeSpanExporter``), so a fleet can keep local trace files and a shared backend::

    tracer = Tracer(CompositeSpanExporter([DuckDBSpanExporter(path), OTelSpanExporter("http://collector:4318")]))

or, with no code, ``MEMORY_STUDIO_OTEL_ENDPOINT=http://collector:4318`` (see ``otel_config``).

Our tracer already gives every span OpenTelemetry-sized ids and a parent, so each ended record is
turned into an SDK ``ReadableSpan`` with those same ids and handed to the official SDK's
``BatchSpanProcessor`` and ``OTLPSpanExporter``. ``export`` only converts and enqueues; the SDK's
worker thread does the network I/O, so a slow or dead collector never holds up a turn: a failed
batch is dropped (traces are derived data) and logged, once when failures start and then at most
once a minute (the SDK's own lines for retries and failed batches too: each kind at most once a
minute). The tracer has redacted secrets before any exporter sees the record.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export import SpanExporter as SdkSpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.semconv.attributes import exception_attributes, service_attributes
from opentelemetry.trace import SpanContext, Status, StatusCode, TraceFlags

from core.traces.otel_env import otel_endpoint_from_env, shown_endpoint, traces_url
from core.traces.otel_genai import DEFAULT_MAX_ATTRIBUTE_CHARS, describe_span
from core.timeutil import as_utc
from core.traces.spans import SpanRecord

log = logging.getLogger(__name__)

_SCOPE = InstrumentationScope("memory-studio")
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_FAILURE_LOG_EVERY_S = 60.0
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass
class OTelStats:
    exported: int = 0  # handed to export()
    sent: int = 0  # accepted by the backend
    failed: int = 0  # in batches the backend did not accept (dropped)
    unconvertible: int = 0  # records that could not be turned into OpenTelemetry spans (dropped)
    last_error: str | None = None


class OTelSpanExporter:
    """A ``SpanExporter`` that sends spans to an OTLP/HTTP endpoint in the background.

    ``endpoint``: a base URL (``/v1/traces`` is appended) or a full traces URL; default: the
    environment (``MEMORY_STUDIO_OTEL_ENDPOINT``, ``OTEL_EXPORTER_OTLP_*``). ``headers`` are added
    to every request (``OTEL_EXPORTER_OTLP_HEADERS`` is read too). ``capture_content=False`` leaves
    messages, tool arguments and span inputs/outputs out. ``sdk_exporter`` replaces the OTLP/HTTP
    exporter with any OpenTelemetry SDK exporter.
    """

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 10.0,
        capture_content: bool = True,
        max_attribute_chars: int = DEFAULT_MAX_ATTRIBUTE_CHARS,
        max_queue_size: int = 4096,
        max_export_batch_size: int = 128,
        schedule_delay_ms: float = 1000.0,
        sdk_exporter: SdkSpanExporter | None = None,
    ) -> None:
        if sdk_exporter is None:
            url = traces_url(endpoint) if endpoint else otel_endpoint_from_env()
            if url is None:
                raise ValueError(
                    "OTelSpanExporter needs an endpoint: pass one (http://localhost:4318) or set "
                    "MEMORY_STUDIO_OTEL_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT."
                )
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            sdk_exporter = OTLPSpanExporter(endpoint=url, headers=dict(headers) if headers else None,
                                            timeout=timeout_s)
            _quiet_sdk_failures()
            self.endpoint: str = shown_endpoint(url)  # what logs and stats show; the SDK keeps the URL
        else:
            self.endpoint = endpoint or type(sdk_exporter).__name__
        self.capture_content = capture_content
        self.max_attribute_chars = max_attribute_chars
        self.stats = OTelStats()
        self._reporter = _ReportingExporter(sdk_exporter, self.endpoint, self.stats)
        self._processor = BatchSpanProcessor(
            self._reporter, max_queue_size=max_queue_size, max_export_batch_size=max_export_batch_size,
            schedule_delay_millis=schedule_delay_ms,
        )
        self._resources: dict[tuple[str | None, str | None], Resource] = {}
        self._closed = False
        atexit.register(self._at_exit)

    # -- SpanExporter --------------------------------------------------------------------------

    def export(self, spans: Sequence[SpanRecord]) -> None:
        if self._closed:
            return
        for record in spans:
            self.stats.exported += 1
            try:
                readable = self.to_readable_span(record)
            except Exception as exc:  # noqa: BLE001 - one odd record must not stop the others
                self.stats.unconvertible += 1
                self.stats.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("span %r could not be converted for OpenTelemetry and was skipped: %s",
                            record.name, self.stats.last_error)
                continue
            self._processor.on_end(readable)

    def flush(self, timeout: float | None = None) -> bool:
        """Send what is queued; True when it was sent (or dropped after failing) within ``timeout``.

        The SDK's flush blocks until the batch is out, ignoring its own timeout argument, so it runs
        on a helper thread and this call waits at most ``timeout`` (default 5 s).
        """
        if self._closed:
            return True
        return _bounded(self._processor.force_flush, 5.0 if timeout is None else timeout, "otel-flush")

    def shutdown(self, timeout: float | None = 2.0) -> None:
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self._at_exit)
        _bounded(self._processor.shutdown, 2.0 if timeout is None else timeout, "otel-shutdown")

    # -- conversion ----------------------------------------------------------------------------

    def to_readable_span(self, record: SpanRecord) -> ReadableSpan:
        """``record`` as the SDK's finished span: same ids, parent, times; GenAI attributes."""
        name, kind, attributes = describe_span(record, capture_content=self.capture_content,
                                               max_chars=self.max_attribute_chars)
        trace_id = _otel_id(record.trace_id, 128)
        context = SpanContext(trace_id, _otel_id(record.span_id, 64), is_remote=False, trace_flags=_SAMPLED)
        parent = None
        if record.parent_span_id:
            parent = SpanContext(trace_id, _otel_id(record.parent_span_id, 64), is_remote=False,
                                 trace_flags=_SAMPLED)
        start = _ns(record.started_at)
        end = _ns(record.ended_at) if record.ended_at is not None else start
        status = Status(StatusCode.UNSET)
        events: list[Event] = []
        if isinstance(record.error, Mapping):
            message = str(record.error.get("message") or "error")
            status = Status(StatusCode.ERROR, message)
            details = record.error.get("details")
            stack = details.get("stack") if isinstance(details, Mapping) else None
            event_attrs = {exception_attributes.EXCEPTION_TYPE: str(record.error.get("name") or "Error"),
                           exception_attributes.EXCEPTION_MESSAGE: message}
            if stack:
                event_attrs[exception_attributes.EXCEPTION_STACKTRACE] = str(stack)
            events.append(Event("exception", event_attrs, timestamp=end))
        return ReadableSpan(
            name=name, context=context, parent=parent, resource=self._resource(record), attributes=attributes,
            events=events, kind=kind, status=status, start_time=start, end_time=end,
            instrumentation_scope=_SCOPE,
        )

    def _resource(self, record: SpanRecord) -> Resource:
        key = (record.service_name, record.environment)
        resource = self._resources.get(key)
        if resource is None:
            attrs: dict[str, str] = {}
            # OTEL_SERVICE_NAME, when set, names the service (Resource.create reads it); else ours.
            if not os.environ.get("OTEL_SERVICE_NAME"):
                attrs[service_attributes.SERVICE_NAME] = record.service_name or "memory-studio"
            if record.environment:
                attrs["deployment.environment.name"] = record.environment
            resource = self._resources[key] = Resource.create(attrs)
        return resource

    def _at_exit(self) -> None:
        self.shutdown(1.0)


class _ReportingExporter(SdkSpanExporter):
    """Wraps the SDK exporter to count results and log a dead endpoint without flooding the log."""

    def __init__(self, inner: SdkSpanExporter, endpoint: str, stats: OTelStats) -> None:
        self.inner = inner
        self.endpoint = endpoint
        self.stats = stats
        self._failing_since: float | None = None
        self._last_log = 0.0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception as exc:  # noqa: BLE001 - the SDK's worker would log it anyway; count it here
            self.stats.last_error = f"{type(exc).__name__}: {exc}"
            result = SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            self.stats.sent += len(spans)
            if self._failing_since is not None:
                log.warning("OpenTelemetry export to %s works again", self.endpoint)
                self._failing_since = None
            return result
        self.stats.failed += len(spans)
        now = time.monotonic()
        if self._failing_since is None or now - self._last_log >= _FAILURE_LOG_EVERY_S:
            self._failing_since = self._failing_since or now
            self._last_log = now
            log.warning("OpenTelemetry export to %s failed: %d spans dropped (%d so far); is the collector "
                        "running and the endpoint right? Agent runs are not affected.",
                        self.endpoint, len(spans), self.stats.failed)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class _OncePerInterval(logging.Filter):
    """Lets each kind of the OTLP exporter's failure line through once per ``_FAILURE_LOG_EVERY_S``.

    The SDK logs every retry and every failed batch (about one line a second with a dead collector
    and steady traffic); ``_ReportingExporter`` already says when export starts and stops failing.
    The first line of each kind still shows the SDK's own cause (refused, 401, timeout)."""

    KINDS = ("Transient error", "Failed to export")

    def __init__(self) -> None:
        super().__init__()
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        kind = next((k for k in self.KINDS if str(record.msg).startswith(k)), None)
        if kind is None:
            return True
        now = time.monotonic()
        with self._lock:
            last = self._last.get(kind)
            if last is not None and now - last < _FAILURE_LOG_EVERY_S:
                return False
            self._last[kind] = now
        return True


_SDK_LOGGER = "opentelemetry.exporter.otlp.proto.http.trace_exporter"
_SDK_FILTER = _OncePerInterval()


def _quiet_sdk_failures() -> None:
    sdk_log = logging.getLogger(_SDK_LOGGER)
    if _SDK_FILTER not in sdk_log.filters:
        sdk_log.addFilter(_SDK_FILTER)


def _bounded(fn: Any, timeout: float, name: str) -> bool:
    """Run ``fn`` on a daemon thread and wait at most ``timeout``; True if it finished."""
    done = threading.Event()

    def run() -> None:
        try:
            fn()
        except Exception:  # noqa: BLE001
            log.exception("OpenTelemetry %s failed", name)
        finally:
            done.set()

    threading.Thread(target=run, name=name, daemon=True).start()
    return done.wait(max(timeout, 0.0))


def _otel_id(value: str | None, bits: int) -> int:
    """Our hex ids as OpenTelemetry ints; any other id text maps to a stable hash (never zero)."""
    text = str(value or "")
    width = bits // 4
    if len(text) == width:
        try:
            number = int(text, 16)
        except ValueError:
            number = 0
        if number:
            return number
    digest = int.from_bytes(hashlib.sha256(text.encode()).digest()[: bits // 8], "big")
    return digest or 1


def _ns(value: datetime) -> int:
    return (as_utc(value) - _EPOCH) // timedelta(microseconds=1) * 1_000
