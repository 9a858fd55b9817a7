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
