"""Whether spans also go to an OpenTelemetry backend, decided by the environment.

Read without importing OpenTelemetry, so a process that does not export never pays for it:

- ``MEMORY_STUDIO_OTEL_ENDPOINT``: the backend's OTLP/HTTP address. A base URL
  (``http://localhost:4318``) gets ``/v1/traces`` appended; a URL that already ends in
  ``/v1/traces`` is used as it is. ``off`` turns export off even when the standard variables are set.
- otherwise the standard ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (used as it is) or
  ``OTEL_EXPORTER_OTLP_ENDPOINT`` (``/v1/traces`` appended), as every OpenTelemetry SDK reads them;
- ``OTEL_SDK_DISABLED=true`` turns export off.

Headers (a Langfuse key, a Honeycomb team) come from ``OTEL_EXPORTER_OTLP_HEADERS`` as usual.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from core.traces.otel_env import _OFF, ENDPOINT_ENV as ENDPOINT_ENV, TRACES_PATH as TRACES_PATH
from core.traces.otel_env import otel_endpoint_from_env as otel_endpoint_from_env, traces_url as traces_url
from core.traces.otel_env import shown_endpoint

if TYPE_CHECKING:  # pragma: no cover
    from core.traces.tracer import SpanExporter

log = logging.getLogger(__name__)

CAPTURE_CONTENT_ENV = "MEMORY_STUDIO_OTEL_CAPTURE_CONTENT"
INSTALL_HINT = "pip install 'memory-studio[otel]'"


def capture_content_from_env(env: Mapping[str, str] | None = None) -> bool:
    """Messages and tool arguments go into spans unless ``MEMORY_STUDIO_OTEL_CAPTURE_CONTENT=off``."""
    env = os.environ if env is None else env
    return str(env.get(CAPTURE_CONTENT_ENV, "")).strip().lower() not in _OFF


def with_env_exporters(exporter: SpanExporter, env: Mapping[str, str] | None = None) -> SpanExporter:
    """``exporter``, plus an ``OTelSpanExporter`` when the environment names an endpoint.

    Never raises: this runs when the first traced turn starts, and a tracing mistake must not fail a
    turn. A bad setting or a missing package leaves one log line and keeps ``exporter`` alone.
    """
    try:
        endpoint = otel_endpoint_from_env(env)
    except ValueError as exc:
        log.warning("OpenTelemetry export is off: %s", exc)
        return exporter
    if endpoint is None:
        return exporter
    try:
        from core.traces.otel import OTelSpanExporter
    except ImportError as exc:
        log.warning("%s is set but OpenTelemetry is not installed (%s): spans are not exported there. "
                    "Install it with: %s", ENDPOINT_ENV, exc, INSTALL_HINT)
        return exporter
    from core.traces.composite import CompositeSpanExporter

    otel: Any = OTelSpanExporter(endpoint, capture_content=capture_content_from_env(env))
    log.info("spans also go to OpenTelemetry at %s", shown_endpoint(endpoint))
    return CompositeSpanExporter([exporter, otel])
