"""Where the environment asks spans to be exported over OTLP/HTTP (see ``otel_config`` for the
variables): read by ``otel_config`` to decide whether to export, and by ``otel``'s exporter when it
is built without an address.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

ENDPOINT_ENV = "MEMORY_STUDIO_OTEL_ENDPOINT"
TRACES_PATH = "/v1/traces"
_OFF = ("off", "none", "false", "0", "no")


def otel_endpoint_from_env(env: Mapping[str, str] | None = None) -> str | None:
    """The OTLP/HTTP traces URL the environment asks for, or None."""
    env = os.environ if env is None else env
    if str(env.get("OTEL_SDK_DISABLED", "")).strip().lower() == "true":
        return None
    ours = str(env.get(ENDPOINT_ENV, "")).strip()
    if ours.lower() in _OFF:
        return None
    if ours:
        return traces_url(ours)
    full = str(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")).strip()
    if full:
        return full
    base = str(env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "")).strip()
    return traces_url(base) if base else None


def traces_url(endpoint: str) -> str:
    """``http://host:4318`` → ``http://host:4318/v1/traces``; a full traces URL stays as it is."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(
            f"OpenTelemetry endpoint {endpoint!r} is not an http(s) URL; "
            "give one like http://localhost:4318 (OTLP/HTTP)."
        )
    path = parts.path.rstrip("/")
    if path.endswith(TRACES_PATH):
        return endpoint
    if parts.query or parts.fragment:  # the path goes before a query, not after it
        return urlunsplit((parts.scheme, parts.netloc, path + TRACES_PATH, parts.query, ""))
    return endpoint.rstrip("/") + TRACES_PATH


def shown_endpoint(url: str) -> str:
    """``url`` fit for a log line: without a ``user:password@`` (sent as HTTP Basic by the exporter,
    so it is a credential) or a query string (where some collectors take a token)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc and not parts.query:
        return url
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))
