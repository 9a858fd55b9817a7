"""Several span exporters behind one, so the DuckDB file and an OpenTelemetry backend both get spans.

One exporter failing never stops the others, and never reaches the agent run that produced the span.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from core.traces.spans import SpanRecord
from core.traces.tracer import LiveSpanExporter

if TYPE_CHECKING:  # pragma: no cover
    from core.traces.tracer import Span, SpanExporter

log = logging.getLogger(__name__)


class CompositeSpanExporter:
    """A ``SpanExporter`` that hands every span to each of ``exporters``, in order."""

    def __init__(self, exporters: Sequence[SpanExporter]) -> None:
        if not exporters:
            raise ValueError("CompositeSpanExporter needs at least one exporter.")
        self.exporters: tuple[SpanExporter, ...] = tuple(exporters)
        # Only those that show running spans hear of starts (an OpenTelemetry exporter takes ended spans).
        self._live = tuple(e for e in self.exporters if isinstance(e, LiveSpanExporter))

    def span_started(self, span: Span) -> None:
        for exporter in self._live:
            try:
                exporter.span_started(span)
            except Exception:  # noqa: BLE001 - one broken exporter must not starve the others
                log.exception("span exporter %s failed on a span's start", type(exporter).__name__)

    def export(self, spans: Sequence[SpanRecord]) -> None:
        for exporter in self.exporters:
            try:
                exporter.export(spans)
            except Exception:  # noqa: BLE001 - one broken exporter must not starve the others
                log.exception("span exporter %s failed; the other exporters still got the spans",
                              type(exporter).__name__)

    def flush(self, timeout: float | None = None) -> bool:
        """Flush each exporter; ``timeout`` bounds the whole call, not each exporter."""
        deadline = None if timeout is None else time.monotonic() + timeout
        done = True
        for exporter in self.exporters:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            try:
                done = exporter.flush(left) and done
            except Exception:  # noqa: BLE001
                log.exception("flushing span exporter %s failed", type(exporter).__name__)
                done = False
        return done

    def shutdown(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        for exporter in self.exporters:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            try:
                exporter.shutdown(left)
            except Exception:  # noqa: BLE001
                log.exception("shutting down span exporter %s failed", type(exporter).__name__)

    def __repr__(self) -> str:
        return f"CompositeSpanExporter({', '.join(type(e).__name__ for e in self.exporters)})"
