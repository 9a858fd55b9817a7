"""Read spans that Mastra itself wrote into a libSQL/SQLite database.

Mastra stores every jsonb span column as an SQLite JSONB blob (``jsonb(?)``), which the SQLite
bundled with Python 3.11 cannot decode. ``libsql_experimental`` bundles SQLite 3.45, so each
jsonb column is selected through ``json(col)`` and arrives as JSON text. Timestamps are ISO text.
Nothing here writes: the database belongs to Mastra.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import libsql_experimental as libsql

from core.traces.locking import StoreBusy, StoreMissing, observed_database_reader
from core.storage import reading
from core.storage.catalog import has_table
from core.timeutil import to_iso
from core.traces.spans import SPANS_TABLE
from core.traces.reader import DEFAULT_READ_BUDGET_S, SpanReader


class LibSQLSpanReader(SpanReader):
    """The same read API as ``DuckDBObservabilityStore`` over a Mastra ``mastra_ai_spans`` table."""

    def __init__(
        self, path: str | os.PathLike[str], *, read_budget_s: float = DEFAULT_READ_BUDGET_S
    ) -> None:
        super().__init__(read_budget_s)
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"LibSQLSpanReader({str(self.path)!r})"

    def _read_connection(self) -> AbstractContextManager[Any]:
        return self._connect()

    @contextmanager
    def _connect(self) -> Iterator[Any]:
        # Checked first because connecting to a missing path would create an empty database.
        if not self.path.exists():
            raise StoreMissing(str(self.path))
        # Mastra runs in WAL mode, so reads rarely wait (a checkpoint in progress); a file in a rollback
        # journal mode waits while another process holds its EXCLUSIVE lock. Either wait is a read's of
        # the memory database (``core.storage.reading``): not in SQLite's busy handler, which keeps the
        # GIL (the Studio's UI thread stood still), but retried with the GIL free, up to the read budget.
        con = reading.WaitingConnection(libsql.connect(str(self.path)), budget_s=self.read_budget_s)
        try:
            con.set_busy_timeout(0)
            con.reading = True
            yield observed_database_reader(con, self.path)  # (the SQL Log lists its reads)
        finally:
            con.close()

    @contextmanager
    def _statements(self) -> Iterator[None]:
        # The lock is met by a statement (opening the file reads nothing), also one of a ``reading`` block.
        start = time.monotonic()
        try:
            yield
        except ValueError as exc:  # libsql_experimental reports SQLite errors as ValueError
            if reading.is_busy(exc):
                raise StoreBusy(self.path, time.monotonic() - start) from exc
            raise

    def _ts_param(self, value: datetime) -> object:
        return to_iso(value)  # ISO-ms-Z text sorts the same way as the instants

    def _select_column(self, column: str, kind: str, alias: str = "") -> str:
        ref = f'{alias + "." if alias else ""}"{column}"'
        return f"json({ref})" if kind == "json" else ref

    def _error_present(self, alias: str) -> str:
        # A JSON null stored as a blob is not SQL NULL but still means "no error".
        return f"({alias}.\"error\" IS NOT NULL AND json({alias}.\"error\") <> 'null')"

    def _table_exists(self, con: Any) -> bool:
        return has_table(con, SPANS_TABLE)
