"""Traces: agent-run spans, the tracer that records them, and the stores they are written to.

- ``tracer``: ``Tracer`` / ``Span`` with context-var parenting and secret redaction, and the
  in-memory exporter.
- ``spans``: the span record (Mastra's ``mastra_ai_spans`` row) and the read-side value types.
- ``store``: the DuckDB trace file beside the memory database, with retention.
- ``exporter``: the background writer that queues spans and writes them in batches (spilling to
  JSONL when the queue is full).
- ``locking``: short-lived DuckDB connections with cross-process lock retry.
- ``reader`` / ``libsql_reader``: reading traces back, from DuckDB or from a Mastra database's
  ``mastra_ai_spans`` table.
- ``pg_store``: on Postgres, spans in the database's own ``mastra_ai_spans`` table (Mastra's PgStore
  layout), written by the same exporter, read by the same API, with the same retention.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any


def is_broken_trace_file_error(exc: BaseException) -> bool:
    """Whether ``exc`` is DuckDB saying the trace file is not (or no longer) a usable DuckDB database: empty,
    truncated, overwritten or failing its checksums. Such a file holds traces only; the next traced write
    sets it aside and starts a new one. A lock conflict or a permission error is not such a file.

    For readers outside the engine (the Studio's Traces pane), which tell the user what to do about it
    without importing the engine's recovery machinery."""
    from core.traces.recovery import is_broken_file_error

    return is_broken_file_error(exc)


def observe_trace_statements(observer: Callable[[Path, str, Any, bool, bool], None]) -> Callable[[], None]:
    """Tell ``observer`` of each statement this process runs on a DuckDB trace file from now on, and on a
    database's own spans table (a Mastra database's, read on a connection of its own): (file, statement,
    parameters, whether the connection is read-only, whether the file is the memory database itself), before it
    runs, on the thread that runs it.
    Returns the call that stops it. For the Studio's SQL Log (``core.traces.locking.observe_statements``)."""
    from core.traces.locking import observe_statements

    return observe_statements(observer)


__all__ = ["is_broken_trace_file_error", "observe_trace_statements"]
