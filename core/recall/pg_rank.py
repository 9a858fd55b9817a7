"""Postgres's keyword list answered in process: ``@@`` and ``ts_rank`` over ``tsvector`` docs kept in memory.

``pg_keywords.search_sql`` asks the server for ``ts_rank('{0, 0, w, 1}', d.terms, q)`` of every doc of
the scope whose ``terms @@ q``, best first, ties by message id. ``TsIndex`` holds the same docs (each
lexeme with its stored positions and weights, read back from ``terms::text``) and returns the same
rows: the same matching docs, the same ``real`` rank to the bit, the same order.

What it reproduces, from Postgres's ``tsvector_op.c`` and ``tsrank.c``:

- matching: ``TS_execute`` over the query tree (``|``, ``&``, ``!``), a phrase (``<->``, ``<N>``) by
  ``TS_phrase_execute``'s rules on positions (the match width, the offsets of each side, negation,
  a lexeme stored without positions being only a "maybe", which a phrase reads as no);
- ranking: ``calc_rank`` picks ``calc_rank_and`` when the query's top operator is ``&`` or a phrase,
  else ``calc_rank_or``, over the query's operands sorted by their bytes with repeats removed
  (``SortAndUniqItems``). The arithmetic keeps C's types: ``float`` for the per-lexeme sums,
  ``double`` where a ``double`` constant or ``sqrt`` / ``exp`` enters, rounded back to ``float`` where C
  assigns to one. Double rounding through ``double`` is exact for a single ``+ - * / sqrt`` of
  ``float`` values (53 >= 2 * 24 + 2 bits), so each ``float`` operation is computed as a ``double``
  one and rounded.

``calc_rank_or``'s part for one lexeme of one doc depends on the doc alone (its positions' weights), so
it is computed when the doc is put; a search then adds, for each query lexeme in sorted order, that
part over every doc holding it (``float`` accumulator, ``double`` addition, as C does), one numpy step
per lexeme. ``calc_rank_and`` (a query that is one phrase of two or more lexemes, e.g. a CJK bigram
alone) lists every matching doc's position pairs in C's loop order and folds them together, one numpy
step per pair index. A phrase of operands joined by ``<N>`` / ``&`` is matched over (doc, position)
pairs in numpy; other phrases (with ``!`` or ``|`` inside) one doc at a time.

Not answered: prefix operands (``:*``, ``Unsupported``; the engine's queries, ``phraseto_tsquery`` of
each term OR-ed, never have one) and ``search_sql``'s ``until`` (it needs the messages' times): the
caller runs the statement for those. Not thread-safe: the caller serialises puts, drops and searches.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Union

import numpy as np
import sqlalchemy as sa

from core.errors import MemoryStudioError
from core.recall.keyword import CONTEXT_WEIGHT
from core.recall.pg_keywords import CONFIG, _unquote
from core.recall.tables import DOCS_TABLE

# -- the SQL a caller runs -------------------------------------------------------------------------

# Every doc as (message id, thread id, resource id, tsvector text); add a WHERE to read some.
LOAD_SQL = f"SELECT message_id, thread_id, resource_id, terms::text FROM {DOCS_TABLE}"


def query_sql(quoted: Sequence[str], config: str = CONFIG) -> tuple[str, list[object]]:
    """The statement whose one value is the text of ``search_sql``'s query for these selected (quoted)
    terms: the same ``tsquery`` expression, cast to text (parse it with ``parse_tsquery``)."""
    terms = [_unquote(t) for t in quoted]
    expr = " || ".join([f"phraseto_tsquery('{config}', ?)"] * len(terms)) or "''::tsquery"
    return f"SELECT ({expr})::text", list(terms)


class Unsupported(MemoryStudioError, ValueError):
    """A query this module does not answer (a prefix operand): run the statement instead."""


# -- tsquery ---------------------------------------------------------------------------------------

_POS_BITS = 14
_POS_MASK = (1 << _POS_BITS) - 1  # WordEntryPos: weight in the top 2 bits (A = 3 ... D = 0), position below
MAXENTRYPOS = 1 << _POS_BITS
_WEIGHT_OF = {"A": 3, "B": 2, "C": 1, "D": 0}


@dataclass(frozen=True)
class Operand:
    lexeme: str
    weight: int = 0  # bitmask of accepted weights (1 << class); 0: any
    prefix: bool = False


@dataclass(frozen=True)
class Op:
    kind: str  # "|", "&", "!", "<>" (phrase)
    left: "Node"  # for "!": its operand
    right: "Node | None" = None
    distance: int = 0  # phrase only


Node = Union[Operand, Op]


@dataclass(frozen=True)
class TsQuery:
    """A parsed ``tsquery``; ``root`` None for the empty query (which matches nothing)."""

    root: Node | None
    operands: tuple[str, ...]  # the distinct operand lexemes, by their UTF-8 bytes (``SortAndUniqItems``)
    has_prefix: bool

    @property
    def rank_and(self) -> bool:
        """``calc_rank`` uses ``calc_rank_and`` (top operator ``&`` or a phrase, two lexemes or more)."""
        return isinstance(self.root, Op) and self.root.kind in ("&", "<>") and len(self.operands) >= 2


_TOKEN = re.compile(r"\s*(?:(\()|(\))|(!)|(\|)|(&)|<(-|\d+)>|'((?:[^'\\]|''|\\.)*)'(?::([*A-Da-d]+))?)")


def parse_tsquery(text: str) -> TsQuery:
    """Postgres's ``tsquery`` text output (quoted operands with ``''`` and ``\\`` escapes, optional
    ``:*`` and weights; ``!``, ``<->``, ``<N>``, ``&``, ``|`` from tightest to loosest, left to right;
    parentheses) as a tree. An empty text is the empty query."""
    tokens: list[tuple[str, object]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"not a tsquery: {text!r} at {pos}")
        pos = m.end()
        if m.group(1):
            tokens.append(("(", None))
        elif m.group(2):
            tokens.append((")", None))
        elif m.group(3):
            tokens.append(("!", None))
        elif m.group(4):
            tokens.append(("|", None))
        elif m.group(5):
            tokens.append(("&", None))
        elif m.group(6) is not None:
            tokens.append(("<>", 1 if m.group(6) == "-" else int(m.group(6))))
        else:
            lexeme = re.sub(r"''|\\(.)", lambda e: e.group(1) if e.group(1) is not None else "'", m.group(7))
            flags = (m.group(8) or "").upper()
            weight = 0
            for letter in flags.replace("*", ""):
                weight |= 1 << _WEIGHT_OF[letter]
            tokens.append(("val", Operand(lexeme, weight, "*" in flags)))
    if not tokens:
        return TsQuery(None, (), False)
    at = 0

    def peek() -> str | None:
        return tokens[at][0] if at < len(tokens) else None

    def take() -> tuple[str, object]:
        nonlocal at
        at += 1
        return tokens[at - 1]

    def unary() -> Node:
        kind, value = take()
        if kind == "!":
            return Op("!", unary())
        if kind == "(":
            node = binary(0)
            if take()[0] != ")":
                raise ValueError(f"unbalanced parentheses in {text!r}")
            return node
        if kind == "val":
            assert isinstance(value, Operand)
            return value
        raise ValueError(f"unexpected {kind!r} in {text!r}")

    levels = ("|", "&", "<>")

    def binary(level: int) -> Node:
        if level == len(levels):
            return unary()
        node = binary(level + 1)
        while peek() == levels[level]:
            _kind, value = take()
            right = binary(level + 1)
            node = Op(levels[level], node, right, int(value) if isinstance(value, int) else 0)
        return node

    root = binary(0)
    if at != len(tokens):
        raise ValueError(f"trailing tokens in {text!r}")
    seen: dict[str, None] = {}
    prefix = False

    def walk(node: Node) -> None:
        nonlocal prefix
        if isinstance(node, Operand):
            seen[node.lexeme] = None
            prefix = prefix or node.prefix
        else:
            walk(node.left)
            if node.right is not None:
                walk(node.right)

    walk(root)
    return TsQuery(root, tuple(sorted(seen, key=lambda s: s.encode("utf-8"))), prefix)


# -- tsvector text ----------------------------------------------------------------------------------

_LEXEME = re.compile(r"'((?:[^'\\]|''|\\.)*)'(?::([0-9A-D,]+))?")
_UNESCAPE = re.compile(r"''|\\(.)")


def _unescape(s: str) -> str:
    if "'" not in s and "\\" not in s:
        return s
    return _UNESCAPE.sub(lambda e: e.group(1) if e.group(1) is not None else "'", s)


_POSITIONS: dict[str, tuple[int, ...]] = {}


def _positions(spec: str) -> tuple[int, ...]:
    """"1A,3,16383B" as WordEntryPos values (weight << 14 | position), kept as stored."""
    known = _POSITIONS.get(spec)
    if known is None:
        out = []
        for part in spec.split(","):
            letter = part[-1]
            if letter.isdigit():
                out.append(int(part))
            else:
                out.append(_WEIGHT_OF[letter] << _POS_BITS | int(part[:-1]))
        known = tuple(out)
        if len(_POSITIONS) < 100_000:
            _POSITIONS[spec] = known
    return known


def parse_tsvector(text: str) -> list[tuple[str, tuple[int, ...]]]:
    """Postgres's ``tsvector`` text output as (lexeme, its WordEntryPos values; empty: no positions)."""
    return [(_unescape(lex), _positions(spec) if spec else ()) for lex, spec in _LEXEME.findall(text)]


# -- the arithmetic of tsrank.c ---------------------------------------------------------------------

_F32 = struct.Struct("f")


def f32(x: float) -> float:
    """``x`` rounded to ``float`` (as C's assignment to a ``float``)."""
    return float(_F32.unpack(_F32.pack(x))[0])


_RANK_OR_DIVISOR = 1.64493406685  # pi^2 / 6, a double constant in calc_rank_or
_WORD_DISTANCE = [0.0] + [f32(1.0 / (1.005 + 0.05 * math.exp(f32(float(d)) / 1.5 - 2))) for d in range(1, 101)]
_FAR = f32(1e-30)
_WORD_DISTANCE_F32 = np.array(_WORD_DISTANCE + [_FAR], dtype=np.float32)  # by min(distance, 101)
_FOLD_STEPS = 64  # calc_rank_and: docs with more position pairs than this are folded one at a time


def _weights(context_weight: float) -> tuple[float, float, float, float]:
    """The ``'{0, 0, w, 1}'`` array of ``search_sql`` as ``float`` values, by weight class D, C, B, A."""
    return (0.0, 0.0, f32(float(context_weight)), 1.0)


def rank_or_part(w: Sequence[float], positions: Sequence[int]) -> float:
    """``calc_rank_or``'s ``float`` term for one lexeme of one doc (before the division by pi^2 / 6):
    ``wjm + resj - wjm / (jm + 1)^2`` over the lexeme's positions (none: one position of weight D)."""
    resj, wjm, jm = 0.0, -1.0, 0
    for j, wep in enumerate(positions or (0,)):
        wj = w[wep >> _POS_BITS]
        resj = f32(resj + f32(wj / float((j + 1) * (j + 1))))
        if wj > wjm:
            wjm, jm = wj, j
    return f32(f32(wjm + resj) - f32(wjm / float((jm + 1) * (jm + 1))))


_CURW: dict[tuple[float, ...], list[list[list[float]]]] = {}


def _curw_table(w: Sequence[float]) -> list[list[list[float]]]:
    """calc_rank_and's ``curw`` by the two positions' weight classes and min(distance, 101), for these
    weights: ``sqrt(wpos * wpos * word_distance(dist))`` with C's ``float`` products."""
    key = tuple(w)
    table = _CURW.get(key)
    if table is None:
        wd = _WORD_DISTANCE + [_FAR]
        table = [[[f32(math.sqrt(f32(f32(w[a] * w[b]) * wd[d]))) for d in range(102)] for b in range(4)]
                 for a in range(4)]
        _CURW[key] = table
    return table


def rank_and(w: Sequence[float], lexemes: Sequence[tuple[int, ...] | None]) -> float:
    """``calc_rank_and`` (before ``calc_rank``'s floor) of one doc: ``lexemes`` are the positions of the
    query's sorted distinct operands in it (None: not in the doc; empty: stored without positions)."""
    posnull = MAXENTRYPOS - 1  # a lexeme without positions: one at MAXENTRYPOS - 1, weight D
    table = _curw_table(w)
    pack, unpack = _F32.pack, _F32.unpack
    res = -1.0
    seen: list[tuple[tuple[int, ...], bool]] = []
    for found in lexemes:
        if found is None:
            continue
        null_i = not found
        post = (posnull,) if null_i else found
        for ct, null_k in seen:
            either = null_i or null_k
            for wl in post:
                pl = wl & _POS_MASK
                row = table[wl >> _POS_BITS]
                for wp in ct:
                    dist = pl - (wp & _POS_MASK)
                    if dist < 0:
                        dist = -dist
                    if dist or either:
                        # a distance of 0 (a lexeme without positions) counts as MAXENTRYPOS: over 100
                        curw = row[wp >> _POS_BITS][dist if 0 < dist <= 100 else 101]
                        res = curw if res < 0 else unpack(pack(1.0 - (1.0 - res) * (1.0 - curw)))[0]
        seen.append((post, null_i))
    return res


def ts_rank(w: Sequence[float], doc: dict[str, tuple[int, ...]], query: TsQuery) -> float:
    """``ts_rank(weights, doc, query)`` (``calc_rank``, no normalisation) of one doc, as the ``real``
    value: ``w`` are the weights by class D, C, B, A as ``float`` values; ``doc`` maps each lexeme to its
    WordEntryPos values (``parse_tsvector``). ``TsIndex`` computes the same for many docs at once."""
    if not doc or query.root is None:
        return 0.0
    if query.rank_and:
        res = rank_and(w, [doc.get(lex) for lex in query.operands])
    else:
        res = 0.0
        for lexeme in query.operands:
            found = doc.get(lexeme)
            if found is not None:
                res = f32(res + rank_or_part(w, found) / _RANK_OR_DIVISOR)
        res = f32(res / float(len(query.operands))) if query.operands else res
    return f32(1e-20) if res < 0 else res


# -- one doc's phrase matching, as TS_phrase_execute ------------------------------------------------

_NO, _YES, _MAYBE = 0, 1, 2
_INT_MAX = 2**31 - 1


class _Phrase:
    __slots__ = ("pos", "negate", "width")

    def __init__(self) -> None:
        self.pos: list[int] = []
        self.negate = False
        self.width = 0


def _phrase_output(data: _Phrase | None, ldata: _Phrase, rdata: _Phrase, emit: int, loff: int, roff: int) -> int:
    li = ri = 0
    lp, rp = ldata.pos, rdata.pos
    while li < len(lp) or ri < len(rp):
        if li < len(lp):
            lpos = lp[li] + loff
        else:
            if not emit & 2:
                break
            lpos = _INT_MAX
        if ri < len(rp):
            rpos = rp[ri] + roff
        else:
            if not emit & 1:
                break
            rpos = _INT_MAX
        out = 0
        if lpos < rpos:
            if emit & 1:
                out = lpos
            li += 1
        elif lpos == rpos:
            if emit & 4:
                out = rpos
            li += 1
            ri += 1
        else:
            if emit & 2:
                out = rpos
            ri += 1
        if out > 0:
            if data is None:
                return _YES
            data.pos.append(out)
    return _YES if data is not None and data.pos else _NO


def _phrase_execute(node: Node, doc: dict[str, tuple[int, ...]], data: _Phrase | None) -> int:
    """``TS_phrase_execute`` on one doc (lexeme -> its WordEntryPos values, empty: no positions)."""
    if isinstance(node, Operand):
        found = doc.get(node.lexeme)
        if found is None:
            return _NO
        if not found:
            return _MAYBE if data is not None else _YES
        if data is None:
            return _YES if not node.weight or any(node.weight & (1 << (p >> _POS_BITS)) for p in found) else _NO
        if node.weight:
            data.pos = [p & _POS_MASK for p in found if node.weight & (1 << (p >> _POS_BITS))]
        else:
            data.pos = [p & _POS_MASK for p in found]
        return _YES if data.pos else _NO
    assert data is not None or node.kind == "<>"
    if node.kind == "!":
        assert data is not None
        got = _phrase_execute(node.left, doc, data)
        if got == _NO:
            data.negate = True
            return _YES
        if got == _YES:
            if data.pos:
                data.negate = not data.negate
                return _YES
            data.negate = False
            return _NO
        return _MAYBE
    assert node.right is not None
    ldata, rdata = _Phrase(), _Phrase()
    if node.kind in ("<>", "&"):
        lmatch = _phrase_execute(node.left, doc, ldata)
        if lmatch == _NO:
            return _NO
        rmatch = _phrase_execute(node.right, doc, rdata)
        if rmatch == _NO:
            return _NO
        if _MAYBE in (lmatch, rmatch):
            return _MAYBE
        if node.kind == "<>":
            loff, roff = node.distance + rdata.width, 0
            if data is not None:
                data.width = node.distance + ldata.width + rdata.width
        else:
            maxwidth = max(ldata.width, rdata.width)
            loff, roff = maxwidth - ldata.width, maxwidth - rdata.width
            if data is not None:
                data.width = maxwidth
        if ldata.negate and rdata.negate:
            _phrase_output(data, ldata, rdata, 7, loff, roff)
            if data is not None:
                data.negate = True
            return _YES
        if ldata.negate:
            return _phrase_output(data, ldata, rdata, 2, loff, roff)
        if rdata.negate:
            return _phrase_output(data, ldata, rdata, 1, loff, roff)
        return _phrase_output(data, ldata, rdata, 4, loff, roff)
    # "|"
    assert data is not None
    lmatch = _phrase_execute(node.left, doc, ldata)
    rmatch = _phrase_execute(node.right, doc, rdata)
    if lmatch == _NO and rmatch == _NO:
        return _NO
    if _MAYBE in (lmatch, rmatch):
        return _MAYBE
    if lmatch == _NO:
        ldata.width = 0
    if rmatch == _NO:
        rdata.width = 0
    maxwidth = max(ldata.width, rdata.width)
    loff, roff = maxwidth - ldata.width, maxwidth - rdata.width
    data.width = maxwidth
    if ldata.negate and rdata.negate:
        _phrase_output(data, ldata, rdata, 4, loff, roff)
        data.negate = True
        return _YES
    if ldata.negate:
        _phrase_output(data, ldata, rdata, 1, loff, roff)
        data.negate = True
        return _YES
    if rdata.negate:
        _phrase_output(data, ldata, rdata, 2, loff, roff)
        data.negate = True
        return _YES
    return _phrase_output(data, ldata, rdata, 7, loff, roff)


def matches(query: TsQuery, doc: dict[str, tuple[int, ...]]) -> bool:
    """``doc @@ query`` for one doc (``TS_execute``; a phrase's "maybe" is no)."""
    def run(node: Node) -> bool:
        if isinstance(node, Operand):
            return _phrase_execute(node, doc, None) == _YES
        if node.kind == "!":
            return not run(node.left)
        if node.kind == "<>":
            return _phrase_execute(node, doc, None) == _YES
        assert node.right is not None
        if node.kind == "&":
            return run(node.left) and run(node.right)
        return run(node.left) or run(node.right)
    return query.root is not None and run(query.root)


# -- the index --------------------------------------------------------------------------------------

_KEY_SHIFT = 1 << 32  # a (doc, position) pair as one int64: slot * 2^32 + position (offsets stay below 2^32)


class _Postings:
    """One lexeme's docs, in slot order (appends only: a doc put again gets a new slot)."""

    __slots__ = ("slots", "parts", "starts", "pos", "_pending")

    def __init__(self) -> None:
        self.slots = np.empty(0, dtype=np.int64)
        self.parts = np.empty(0, dtype=np.float64)  # calc_rank_or's term / (pi^2 / 6), as C's double
        self.starts = np.zeros(1, dtype=np.int64)  # positions of posting i: pos[starts[i]:starts[i + 1]]
        self.pos = np.empty(0, dtype=np.int64)  # WordEntryPos values
        self._pending: list[tuple[int, float, tuple[int, ...]]] = []

    def add(self, slot: int, part: float, positions: tuple[int, ...]) -> None:
        self._pending.append((slot, part, positions))

    def flush(self) -> None:
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        slots = np.array([p[0] for p in pending], dtype=np.int64)
        parts = np.array([p[1] for p in pending], dtype=np.float64)
        ends = np.cumsum([len(p[2]) for p in pending], dtype=np.int64)
        pos = np.array([x for p in pending for x in p[2]], dtype=np.int64)
        if not len(self.slots):
            self.slots, self.parts, self.pos = slots, parts, pos
            self.starts = np.concatenate([self.starts, ends])
            return
        self.slots = np.concatenate([self.slots, slots])
        self.parts = np.concatenate([self.parts, parts])
        self.starts = np.concatenate([self.starts, self.starts[-1] + ends])
        self.pos = np.concatenate([self.pos, pos])

    def keep(self, alive: np.ndarray, remap: np.ndarray) -> None:
        """Only the postings of live slots, renumbered (``TsIndex._compact``)."""
        self.flush()
        keep = alive[self.slots]
        counts = np.diff(self.starts)
        self.pos = self.pos[np.repeat(keep, counts)]
        self.starts = np.concatenate([[0], np.cumsum(counts[keep])]).astype(np.int64)
        self.slots = remap[self.slots[keep]]
        self.parts = self.parts[keep]

    def rows_of(self, slots: np.ndarray) -> np.ndarray:
        """Places of these slots (each must have a posting)."""
        return np.searchsorted(self.slots, slots)


Row = tuple[str, "str | None", "str | None", float]


class TsIndex:
    """The keyword docs of one database (``pg_keywords``' docs table) in memory, searched as
    ``search_sql`` searches them. Not thread-safe: the caller serialises puts, drops and searches."""

    def __init__(self, context_weight: float | None = None, *,
                 weights: tuple[float, float, float, float] | None = None) -> None:
        """``context_weight``: ``search_sql``'s (its default too); ``weights``: any ``ts_rank`` weight
        array instead, as ``float`` values by class D, C, B, A."""
        self.weights = weights if weights is not None else _weights(
            CONTEXT_WEIGHT if context_weight is None else context_weight)
        self._reset()

    def _reset(self) -> None:
        self._parts: dict[tuple[int, ...], float] = {}  # a lexeme's positions -> rank_or_part / (pi^2/6)
        self._by_classes: dict[tuple[int, ...], float] = {}  # the same by the positions' weight classes
        self._postings: dict[str, _Postings] = {}
        self._slot_of: dict[str, int] = {}
        self._mids: list[str] = []
        # per slot: still held (False: dropped or replaced), its lexemes' count (a doc's positions are
        # kept in the postings only: ``_doc_of``)
        self._live: list[bool] = []
        self._sizes: list[int] = []
        self._tids: list[str | None] = []
        self._rids: list[str | None] = []
        self._codes: dict[str | None, int] = {None: -1}
        self._alive = np.zeros(0, dtype=bool)
        self._thread = np.zeros(0, dtype=np.int64)
        self._resource = np.zeros(0, dtype=np.int64)
        # the message ids as a numpy text array: ties broken in numpy (its order of text is code point
        # order; Postgres text holds no NUL, which numpy would drop from an id's end)
        self._mid_arr = np.zeros(0, dtype="U1")
        self._grown = 0  # slots put since the arrays above were last extended
        self._dead = 0

    def __len__(self) -> int:
        return len(self._slot_of)

    # -- writing ---------------------------------------------------------------------------------
    def load(self, conn: sa.Connection) -> int:
        """Replace everything by the docs table's rows (``LOAD_SQL``). Returns the docs read."""
        self._reset()
        rows = conn.exec_driver_sql(LOAD_SQL).all()
        self.put(rows)
        for post in self._postings.values():  # as arrays now, not as pending tuples until searched
            post.flush()
        return len(rows)

    def put(self, rows: Iterable[Sequence[object]]) -> None:
        """Put or replace docs: (message id, thread id, resource id, ``terms::text``) rows."""
        for mid, tid, rid, terms in rows:
            self.put_doc(str(mid), tid if tid is None else str(tid), rid if rid is None else str(rid),
                         parse_tsvector(str(terms)))

    def put_doc(self, message_id: str, thread_id: str | None, resource_id: str | None,
                lexemes: Iterable[tuple[str, tuple[int, ...]]]) -> None:
        """Put or replace one doc: its lexemes with their WordEntryPos values (weight << 14 | position;
        empty: stored without positions), as ``parse_tsvector`` gives them."""
        self.drop([message_id])
        slot = len(self._mids)
        doc = dict(lexemes)
        self._slot_of[message_id] = slot
        self._mids.append(message_id)
        self._live.append(True)
        self._sizes.append(len(doc))
        self._tids.append(thread_id)
        self._rids.append(resource_id)
        for code in (thread_id, resource_id):
            if code not in self._codes:
                self._codes[code] = len(self._codes)
        self._grown += 1
        parts = self._parts
        for lexeme, positions in doc.items():
            part = parts.get(positions)
            if part is None:
                part = self._part_of(positions)
            post = self._postings.get(lexeme)
            if post is None:
                post = self._postings[lexeme] = _Postings()
            post.add(slot, part, positions)

    def _part_of(self, positions: tuple[int, ...]) -> float:
        """``rank_or_part`` / (pi^2 / 6) of a lexeme's positions, kept by the positions and by their
        weight classes (what it depends on)."""
        classes = tuple(p >> _POS_BITS for p in positions)
        part = self._by_classes.get(classes)
        if part is None:
            if len(self._by_classes) > 100_000:
                self._by_classes.clear()
            part = self._by_classes[classes] = rank_or_part(self.weights, positions) / _RANK_OR_DIVISOR
        if len(self._parts) > 200_000:
            self._parts.clear()
        self._parts[positions] = part
        return part

    def drop(self, message_ids: Iterable[str]) -> None:
        """Remove docs (ids not held are ignored)."""
        for mid in message_ids:
            slot = self._slot_of.pop(mid, None)
            if slot is None:
                continue
            self._live[slot] = False
            self._dead += 1
            if slot < len(self._alive):
                self._alive[slot] = False
        if self._dead > max(64, len(self._slot_of)):
            self._compact()

    def _sync(self) -> None:
        """Extend the per-slot arrays by the slots put since."""
        if not self._grown:
            return
        start = len(self._alive)
        new = range(start, len(self._mids))
        self._alive = np.concatenate([self._alive, np.array(self._live[start:], dtype=bool)])
        self._thread = np.concatenate([self._thread, np.fromiter((self._codes[self._tids[s]] for s in new),
                                                                 dtype=np.int64)])
        self._resource = np.concatenate([self._resource, np.fromiter((self._codes[self._rids[s]] for s in new),
                                                                     dtype=np.int64)])
        self._mid_arr = np.concatenate([self._mid_arr, np.array(self._mids[start:], dtype=str)])
        self._grown = 0

    def _compact(self) -> None:
        """Drop the slots of removed docs (postings, per-slot arrays), renumbering the rest."""
        self._sync()
        alive = self._alive
        remap = np.cumsum(alive) - 1
        for lexeme in list(self._postings):
            post = self._postings[lexeme]
            post.keep(alive, remap)
            if not len(post.slots):
                del self._postings[lexeme]
        keep = np.flatnonzero(alive).tolist()
        self._mids = [self._mids[s] for s in keep]
        self._live = [True] * len(keep)
        self._sizes = [self._sizes[s] for s in keep]
        self._tids = [self._tids[s] for s in keep]
        self._rids = [self._rids[s] for s in keep]
        self._slot_of = {mid: i for i, mid in enumerate(self._mids)}
        self._alive = alive[alive]
        self._thread = self._thread[alive]
        self._resource = self._resource[alive]
        self._mid_arr = self._mid_arr[alive]
        self._dead = 0

    # -- searching -------------------------------------------------------------------------------
    def _posting(self, lexeme: str) -> _Postings | None:
        post = self._postings.get(lexeme)
        if post is not None:
            post.flush()
        return post

    def _has(self, node: Operand, n: int) -> np.ndarray:
        """Docs where the operand is (``checkcondition_str`` without positions wanted)."""
        mask = np.zeros(n, dtype=bool)
        post = self._posting(node.lexeme)
        if post is None or not len(post.slots):
            return mask
        if not node.weight:
            mask[post.slots] = True
            return mask
        counts = np.diff(post.starts)
        ok = np.concatenate([[0], np.cumsum((node.weight & (1 << (post.pos >> _POS_BITS))) != 0)])
        hits = ok[post.starts[1:]] - ok[post.starts[:-1]]
        hits = np.where(counts > 0, hits, 1)  # no positions: the weight is not checked
        mask[post.slots[hits > 0]] = True
        return mask

    def _matches(self, node: Node, n: int) -> np.ndarray:
        """``TS_execute`` over every slot."""
        if isinstance(node, Operand):
            return self._has(node, n)
        if node.kind == "!":
            return ~self._matches(node.left, n)
        if node.kind == "<>":
            return self._phrase(node, n)
        assert node.right is not None
        left, right = self._matches(node.left, n), self._matches(node.right, n)
        both: np.ndarray = left & right if node.kind == "&" else left | right
        return both

    def _phrase(self, node: Op, n: int) -> np.ndarray:
        """Docs a top phrase matches: by numpy over (doc, position) pairs when the phrase is of operands
        joined by ``<N>`` and ``&`` only and its docs store positions; one doc at a time otherwise."""
        operands: list[Operand] = []
        simple = _collect(node, operands)
        if simple:
            cand = np.ones(n, dtype=bool)
            for operand in operands:
                cand &= self._has(operand, n)
        else:
            cand = np.ones(n, dtype=bool) if _has_not(node) else np.zeros(n, dtype=bool)
            if not cand.any():
                for operand in operands:
                    cand |= self._has(operand, n)
        cand &= self._alive[:n]
        slots = np.flatnonzero(cand)
        out = np.zeros(n, dtype=bool)
        if not len(slots):
            return out
        if simple:
            nopos = np.zeros(len(slots), dtype=bool)
            rows: dict[str, np.ndarray] = {}
            for operand in operands:
                post = self._posting(operand.lexeme)
                assert post is not None
                at = rows[operand.lexeme] = post.rows_of(slots)
                nopos |= post.starts[at + 1] == post.starts[at]
            if nopos.any():
                keep = ~nopos
                rows = {lex: at[keep] for lex, at in rows.items()}
            keys, _width = self._keys(node, slots[~nopos], rows)
            out[keys // _KEY_SHIFT] = True
            slow = slots[nopos]
        else:
            slow = slots
        lexemes = [operand.lexeme for operand in operands]
        for slot in slow.tolist():
            if _phrase_execute(node, self._doc_of(slot, lexemes), None) == _YES:
                out[slot] = True
        return out

    def _doc_of(self, slot: int, lexemes: Iterable[str]) -> dict[str, tuple[int, ...]]:
        """These lexemes of one doc, with their WordEntryPos values (absent: not in the doc)."""
        out: dict[str, tuple[int, ...]] = {}
        for lexeme in lexemes:
            post = self._posting(lexeme)
            if post is None:
                continue
            at = int(np.searchsorted(post.slots, slot))
            if at < len(post.slots) and post.slots[at] == slot:
                out[lexeme] = tuple(post.pos[post.starts[at]:post.starts[at + 1]].tolist())
        return out

    def _keys(self, node: Node, slots: np.ndarray, rows: dict[str, np.ndarray]) -> tuple[np.ndarray, int]:
        """(sorted distinct slot * 2^32 + position of each match end, the match width) of a simple
        phrase part over docs that hold all its operands, with positions (``rows``: each operand's
        postings of those docs)."""
        if isinstance(node, Operand):
            post = self._postings[node.lexeme]
            at = rows[node.lexeme]
            begin, end = post.starts[at], post.starts[at + 1]
            counts = end - begin
            total = int(counts.sum())
            at = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(begin, counts)
            pos = post.pos[at]
            owner = np.repeat(slots, counts)
            if node.weight:
                ok = (node.weight & (1 << (pos >> _POS_BITS))) != 0
                pos, owner = pos[ok], owner[ok]
            # sorted and distinct already: slots ascending, a lexeme's stored positions too (Postgres
            # sorts them and drops repeats as it builds a tsvector)
            return owner * _KEY_SHIFT + (pos & _POS_MASK), 0
        assert node.right is not None
        left, lwidth = self._keys(node.left, slots, rows)
        right, rwidth = self._keys(node.right, slots, rows)
        if node.kind == "<>":
            loff, roff, width = node.distance + rwidth, 0, node.distance + lwidth + rwidth
        else:
            width = max(lwidth, rwidth)
            loff, roff = width - lwidth, width - rwidth
        return np.intersect1d(left + loff, right + roff, assume_unique=True), width

    def search(self, query: TsQuery, *, resource_id: str | None = None, thread_id: str | None = None,
               limit: int, exclude_thread: str | None = None) -> list[Row]:
        """``search_sql``'s rows for this query: (message id, thread id, resource id, rank), best first,
        ties by message id in code point order. The rank is the ``real`` Postgres computes, as the
        Python float psycopg gives for it. ``exclude_thread``: no doc of that thread."""
        if query.has_prefix:
            raise Unsupported("prefix operands are not answered in process")
        if query.root is None or limit <= 0:
            return []
        self._sync()
        n = len(self._mids)
        matched = self._matches(query.root, n) & self._alive
        if resource_id is not None:
            matched &= self._resource == self._codes.get(resource_id, -2)
        if thread_id is not None:
            matched &= self._thread == self._codes.get(thread_id, -2)
        if exclude_thread is not None:
            matched &= self._thread != self._codes.get(exclude_thread, -2)
        slots = np.flatnonzero(matched)
        if not len(slots):
            return []
        scores = self._rank(query, slots, n)
        return self._best(slots, scores, limit)

    def rank(self, query: TsQuery, message_ids: Sequence[str]) -> np.ndarray:
        """``ts_rank`` of these held docs (matching or not), as float32: what the server computes for
        them with this index's weights."""
        if query.has_prefix:
            raise Unsupported("prefix operands are not answered in process")
        self._sync()
        slots = np.array([self._slot_of[mid] for mid in message_ids], dtype=np.int64)
        if query.root is None or not len(slots):
            return np.zeros(len(slots), dtype=np.float32)
        scores = self._rank(query, slots, len(self._mids))
        empty = np.fromiter((not self._sizes[int(s)] for s in slots), dtype=bool, count=len(slots))
        return np.where(empty, np.float32(0), scores).astype(np.float32)  # calc_rank: an empty doc is 0

    def _rank(self, query: TsQuery, slots: np.ndarray, n: int) -> np.ndarray:
        """``calc_rank`` (no normalisation) of these docs, as float32."""
        if query.rank_and:
            return self._rank_and(query, slots)
        acc = np.zeros(n, dtype=np.float32)  # calc_rank_or's float: each double sum rounded back
        for lexeme in query.operands:
            post = self._posting(lexeme)
            if post is None or not len(post.slots):
                continue
            acc[post.slots] = (acc[post.slots] + post.parts).astype(np.float32)
        scores = acc[slots] / np.float32(len(query.operands))
        return np.where(scores < 0, np.float32(1e-20), scores).astype(np.float32)

    def _rank_and(self, query: TsQuery, slots: np.ndarray) -> np.ndarray:
        """``calc_rank_and`` of these docs, as float32 (with ``calc_rank``'s floor). Each doc's pairs of
        positions, in C's loop order (operand i, each earlier operand k, i's positions, k's), are listed
        for all docs at once; the fold ``res = 1 - (1 - res)(1 - curw)``, rounded to float at each pair,
        then runs one numpy step per pair index over every doc that has that many pairs. A doc with more
        than ``_FOLD_STEPS`` pairs, or with an operand stored without positions, is folded alone
        (``rank_and``)."""
        docs = len(slots)
        found: list[tuple[_Postings, np.ndarray, np.ndarray]] = []  # per operand: postings, rows (-1: none), count
        for lexeme in query.operands:
            post = self._posting(lexeme)
            if post is None or not len(post.slots):
                continue
            at = np.minimum(np.searchsorted(post.slots, slots), len(post.slots) - 1)
            rows = np.where(post.slots[at] == slots, at, -1)
            counts = np.where(rows >= 0, post.starts[rows + 1] - post.starts[np.maximum(rows, 0)], 0)
            found.append((post, rows, counts))
        pairs = np.zeros(docs, dtype=np.int64)
        alone = np.zeros(docs, dtype=bool)
        for i, (_post, rows, counts) in enumerate(found):
            alone |= (rows >= 0) & (counts == 0)
            for _kpost, _krows, kcounts in found[:i]:
                pairs += counts * kcounts
        alone |= pairs > _FOLD_STEPS
        fast = ~alone
        doc_parts, curw_parts = [], []
        for i, (post, rows, counts) in enumerate(found):
            for kpost, krows, kcounts in found[:i]:
                both = np.flatnonzero(fast & (rows >= 0) & (krows >= 0))
                per = counts[both] * kcounts[both]
                total = int(per.sum())
                if not total:
                    continue
                owner = np.repeat(both, per)
                t = np.arange(total) - np.repeat(np.cumsum(per) - per, per)
                width = kcounts[owner]
                wl = post.pos[post.starts[rows[owner]] + t // width]
                wp = kpost.pos[kpost.starts[krows[owner]] + t % width]
                dist = np.abs((wl & _POS_MASK) - (wp & _POS_MASK))
                keep = dist != 0
                owner, wl, wp, dist = owner[keep], wl[keep], wp[keep], dist[keep]
                w = np.asarray(self.weights, dtype=np.float32)
                prod = (w[wl >> _POS_BITS] * w[wp >> _POS_BITS]) * _WORD_DISTANCE_F32[np.minimum(dist, 101)]
                doc_parts.append(owner)
                curw_parts.append(np.sqrt(prod.astype(np.float64)).astype(np.float32).astype(np.float64))
        res = np.full(docs, -1.0)
        owner = np.concatenate(doc_parts) if doc_parts else np.empty(0, dtype=np.int64)
        if len(owner):
            curw = np.concatenate(curw_parts)
            if len(doc_parts) > 1:  # one block is in doc order already
                order = np.argsort(owner, kind="stable")  # by doc, each doc's pairs still in C's order
                owner, curw = owner[order], curw[order]
            first = np.concatenate([[True], owner[1:] != owner[:-1]])
            if first.all():  # one pair a doc (two lexemes found once each): one step
                by_step, bounds = np.arange(len(owner)), np.array([0, len(owner)])
            else:
                step = np.arange(len(owner)) - np.maximum.accumulate(np.where(first, np.arange(len(owner)), 0))
                by_step = np.argsort(step, kind="stable")
                bounds = np.searchsorted(step[by_step], np.arange(int(step.max()) + 2))
            for t in range(len(bounds) - 1):
                take = by_step[bounds[t]:bounds[t + 1]]
                d, c = owner[take], curw[take]
                cur = res[d]
                folded = (1.0 - (1.0 - cur) * (1.0 - c)).astype(np.float32).astype(np.float64)
                res[d] = np.where(cur < 0, c, folded)
        for i in np.flatnonzero(alone).tolist():
            doc = self._doc_of(int(slots[i]), query.operands)
            res[i] = rank_and(self.weights, [doc.get(lex) for lex in query.operands])
        return np.where(res < 0, 1e-20, res).astype(np.float32)  # C's 1e-20f

    def _best(self, slots: np.ndarray, scores: np.ndarray, limit: int) -> list[Row]:
        """The best ``limit`` by rank, then message id (code point order, as ``COLLATE "C"``)."""
        if len(slots) > limit:
            kth = np.partition(scores, len(scores) - limit)[len(scores) - limit]
            above = scores > kth
            ties = np.flatnonzero(scores == kth)
            need = limit - int(above.sum())
            if need < len(ties):
                ties = ties[np.argsort(self._mid_arr[slots[ties]], kind="stable")[:need]]
            pick = np.concatenate([np.flatnonzero(above), ties])
            slots, scores = slots[pick], scores[pick]
        values = scores.tolist()
        order = sorted(range(len(values)), key=lambda i: (-values[i], self._mids[int(slots[i])]))
        out: list[Row] = []
        for i in order:
            slot = int(slots[i])
            out.append((self._mids[slot], self._tids[slot], self._rids[slot], _as_psycopg(values[i])))
        return out


_AS_READ: dict[float, float] = {}


def _as_psycopg(value: float) -> float:
    """A ``real`` as psycopg reads it: the shortest decimal that gives back the float, as a Python float."""
    got = _AS_READ.get(value)
    if got is None:
        got = float(str(np.float32(value)))
        if len(_AS_READ) > 100_000:
            _AS_READ.clear()
        _AS_READ[value] = got
    return got


def _collect(node: Node, operands: list[Operand]) -> bool:
    """Gather a phrase's operands; True when it is made of operands, ``<N>`` and ``&`` only."""
    if isinstance(node, Operand):
        operands.append(node)
        return True
    if node.kind == "!":
        _collect(node.left, operands)
        return False
    assert node.right is not None
    left = _collect(node.left, operands)
    right = _collect(node.right, operands)
    return left and right and node.kind in ("<>", "&")


def _has_not(node: Node) -> bool:
    if isinstance(node, Operand):
        return False
    return node.kind == "!" or _has_not(node.left) or (node.right is not None and _has_not(node.right))
