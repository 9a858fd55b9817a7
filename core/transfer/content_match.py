"""Find a stored row by its content in one pass over its table, not one scan per row imported.

Import matches rows whose integer ids are database-wide (working-memory, message and observation-log versions,
overrides, turn records keyed by an integer) by content: the answer is the lowest key of a row where every column
of the imported row ``IS`` (``IS NOT DISTINCT FROM`` on Postgres) the value the import binds, columns the imported
row lacks matching anything. Asked as one ``SELECT`` per imported row, that scanned the versions already there
(no index serves a comparison of every column): quadratic in their number.

``ContentIndex`` answers the same question. It reads the table once, keeping for each row a 16-byte digest of the
columns whose equality is plain byte equality (``catalog.byte_equal_text_columns``: SQLite's TEXT and BLOB
affinities when the table declares no collation; Postgres ``text`` and ``varchar`` of a deterministic collation),
and the keys of the rows with each digest. A row the database says is equal has equal
bytes in those columns, so its digest is the same: the rows with the imported row's digest are the only ones that
can match, and the database is asked the original question about them alone (``key IN (...)``), so the answer,
the lowest key among equal rows, is the database's own. The columns left out (numbers, JSON, timestamps, columns
with a collation) only make more rows share a digest, never fewer.

An imported row whose value in such a column is not text, a blob or NULL (a number in a text column, which SQLite
converts and Postgres casts) is asked the original way, as is every row of a table without an integer key or
without a column of plain equality. The caller tells the index about each row it writes (``added``; a row whose
digest its values do not give, such a number, is read back as stored); nothing else writes those tables during an
import.
"""

from __future__ import annotations

import bisect
import hashlib
from typing import Any, Mapping

import sqlalchemy as sa

from core.storage import catalog
from core.storage.capabilities import capabilities_of
from core.transfer import rows as R

_PAGE = 500  # rows read per query while the table is indexed, and keys per ``IN`` list
_TEXT, _BLOB, _NULL, _OTHER = b"t", b"b", b"n", b"o"  # a value's class, fed before its bytes
_CLASSES = {"text": _TEXT, "blob": _BLOB, "null": _NULL}  # SQLite's typeof(); a number is _OTHER


class ContentIndex:
    """The rows of ``table`` by content, for ``find``: the lowest ``key`` (an integer column, or ``rowid``) of a
    row holding exactly ``content``, as ``SELECT key … WHERE col IS ? AND … ORDER BY 1 LIMIT 1`` answers."""

    def __init__(self, conn: sa.Connection, table: str, key: str) -> None:
        self.conn = conn
        self.table = table
        self.key = key
        self._pick = "rowid" if key == "rowid" else R.quote(key)
        self._plain = catalog.byte_equal_text_columns(conn, table)
        self._digests: dict[tuple[str, ...], dict[bytes, int | list[int]] | None] = {}  # by the columns digested
        self._asked: tuple[Any, dict[str, Any], tuple[str, ...], bytes | None] = (None, {}, (), None)

    def find(self, content: Mapping[str, Any]) -> int | None:
        bound = R.bind_values(self.conn, self.table, content)
        values = dict(zip(content, bound))
        digested = tuple(sorted(c for c in content if c in self._plain))
        digest = _digest([values[c] for c in digested], self._strict) if digested else None
        self._asked = (content, values, digested, digest)  # what ``added`` is told next, mostly
        rows = self._rows(digested) if digest is not None else None
        if rows is None or digest is None:  # asked the way it always was: a scan
            return self._ask(content, bound, None)
        found = rows.get(digest)
        if found is None:
            return None
        keys = [found] if isinstance(found, int) else found
        for start in range(0, len(keys), _PAGE):  # ascending: the first page with a match holds the lowest
            hit = self._ask(content, bound, keys[start:start + _PAGE])
            if hit is not None:
                return hit
        return None

    def added(self, key: int, content: Mapping[str, Any]) -> None:
        """``content`` was written under ``key`` (the rows already read from the table now include it). The mapping
        ``find`` was last asked about, unchanged, is not bound and digested again."""
        asked, values, asked_columns, asked_digest = self._asked
        if asked is not content:
            values = dict(zip(content, R.bind_values(self.conn, self.table, content)))
        for digested, rows in self._digests.items():
            if rows is None:
                continue
            if asked is content and digested == asked_columns:
                digest = asked_digest
            else:
                digest = _digest([values[c] for c in digested], self._strict) if set(digested) <= set(values) else None
            if digest is None:  # a number the database converted, or a column written as its default: read it back
                record = self.conn.exec_driver_sql(f"{self._select(digested)} WHERE {self._pick} = ?", (key,)).first()
                digest = _stored_digest(record[1:], self._strict) if record is not None else None
            if digest is not None:
                _put(rows, digest, key)

    @property
    def _strict(self) -> bool:
        return capabilities_of(self.conn).strict_column_types

    def _ask(self, content: Mapping[str, Any], bound: tuple[Any, ...], keys: list[int] | None) -> int | None:
        where = " AND ".join(R.same_value_sql(self.conn, k) for k in content)
        params: tuple[Any, ...] = bound
        if keys is not None:
            where = f"{self._pick} IN ({','.join('?' * len(keys))}) AND {where}"
            params = (*keys, *bound)
        row = self.conn.exec_driver_sql(
            f"SELECT {self._pick} FROM {R.quote(self.table)} WHERE {where} ORDER BY 1 LIMIT 1", params).first()
        return int(row[0]) if row else None

    def _select(self, digested: tuple[str, ...]) -> str:
        columns = ", ".join(_stored_value_sql(c, self._strict) for c in digested)
        return f"SELECT {self._pick}, {columns} FROM {R.quote(self.table)}"

    def _rows(self, digested: tuple[str, ...]) -> dict[bytes, int | list[int]] | None:
        """Digest of the ``digested`` columns -> the keys of the rows with it, ascending (the table read once, a
        page at a time in key order); None when a key is not an integer (then every row is asked with a scan)."""
        if digested in self._digests:
            return self._digests[digested]
        strict = self._strict
        head = self._select(digested)
        tail = f" ORDER BY {self._pick} LIMIT {_PAGE}"
        rows: dict[bytes, int | list[int]] | None = {}
        page = list(self.conn.exec_driver_sql(head + tail))
        while page and rows is not None:
            for record in page:
                key = record[0]
                if not isinstance(key, int) or isinstance(key, bool):
                    rows = None
                    break
                _put(rows, _stored_digest(record[1:], strict), key)
            if rows is None or len(page) < _PAGE:
                break
            page = list(self.conn.exec_driver_sql(f"{head} WHERE {self._pick} > ?{tail}", (page[-1][0],)))
        self._digests[digested] = rows
        return rows


def _put(rows: dict[bytes, int | list[int]], digest: bytes, key: int) -> None:
    have = rows.get(digest)
    if have is None:
        rows[digest] = key
    elif isinstance(have, int):
        rows[digest] = sorted((have, key))
    else:
        bisect.insort(have, key)


def _stored_value_sql(column: str, strict: bool) -> str:
    q = R.quote(column)
    if strict:
        return q
    # The stored class and bytes: text read as its bytes (the driver cannot read text that is not UTF-8).
    return f"typeof({q}), CAST({q} AS BLOB)"


def _stored_digest(values: Any, strict: bool) -> bytes:
    """The digest of a stored row's plain columns (as ``_stored_value_sql`` reads them)."""
    h = hashlib.blake2b(digest_size=16)
    if strict:  # Postgres text columns: str or None
        for value in values:
            if value is None:
                _feed(h, _NULL, b"")
            elif isinstance(value, str):
                _feed(h, _TEXT, value.encode("utf-8", "surrogatepass"))
            else:
                _feed(h, _OTHER, str(value).encode("utf-8", "surrogatepass"))
        return h.digest()
    for kind, raw in zip(values[::2], values[1::2]):  # SQLite: (storage class, bytes) of each column
        _feed(h, _CLASSES.get(kind, _OTHER), b"" if raw is None else bytes(raw))
    return h.digest()


def _digest(bound: list[Any], strict: bool) -> bytes | None:
    """The digest of an imported row's bound values in the plain columns, as the stored row equal to it has; None
    when one of them is a value the database would convert (a number), or bytes where Postgres has text."""
    h = hashlib.blake2b(digest_size=16)
    for value in bound:
        if value is None:
            _feed(h, _NULL, b"")
        elif isinstance(value, str):
            _feed(h, _TEXT, value.encode("utf-8", "surrogatepass"))
        elif isinstance(value, bytes) and not strict:
            _feed(h, _BLOB, value)
        else:
            return None
    return h.digest()


def _feed(h: Any, tag: bytes, data: bytes) -> None:
    h.update(tag)
    h.update(len(data).to_bytes(8, "big"))
    h.update(data)


__all__ = ["ContentIndex"]
