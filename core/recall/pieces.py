"""Piece vectors: a long message's clauses embedded one by one, for vector-only search.

A message's passage vector (its text with the previous message's, ``passages``) says what the message is
about as a whole; a question about one clause of a long message ("what did she paint last year?") is
closer to that clause than to the whole. Besides its passage row, a message of more than
``CLAUSE_WORDS`` words that cuts into two or more pieces keeps one vector per piece, in a side table of
its own (``memory_studio_recall_pieces_<dim>``) that Mastra and the scans never read. A vector-only
search scans the passage rows as before, then re-scores its best ``RESCORED`` messages (or more, when
more are asked) by their *mixed rows*: for the passage vector ``p`` and a piece vector ``v`` (both of unit
length) the row ``unit(p + v)``, whose cosine with a unit query ``q`` is exact algebra,

    q . unit(p + v) = (q.p + q.v) / sqrt(2 + 2 p.v)        (``mixed_scores``)

so the mixed rows need not be stored: a piece depends on its own message's text alone, and an edit of
the previous message (which changes this message's passage) leaves its pieces right. A message with
pieces scores its best mixed row; one without keeps its passage cosine. Hybrid search keeps the passage
cosines (its answers do not change). Measured on LoCoMo's public split, vector recall@10: USE .5346 ->
.6302 (session 27), e5 .6161 -> .7056 (session 28); docs/ARCHITECTURE.md's Figures.

The cut (``cut``), the same for every language written with spaces and sentence marks:
- a leading speaker label of the text ("Caroline: ", the label ``text.speaker_label`` reads: up to three
  words and a colon at the very start, as a transcript line has) is kept on each piece;
- a trailing bracketed note ("[image: a dog on a beach]", how a transcript carries an attachment's
  description) is a piece of its own;
- the rest (the body) is cut into sentences (after ". ", "! ", "? "); a sentence of more than
  ``CLAUSE_WORDS`` words is also cut at ", ", "; " and " - ", and of those parts only the ones of
  ``MIN_PART_WORDS`` words or more are kept;
- only a body of more than ``CLAUSE_WORDS`` words is cut, and only when it gives two pieces or more (one
  piece would be the message again). Only the first ``text.MAX_EMBED_CHARS`` characters are cut (the
  passage embeds no more), and at most ``MAX_PIECES`` pieces are kept.

Which models write pieces is per model (``MODEL_PIECES``; the store may turn them off for an index:
``setting_key``): on for the USE and e5 models, where they were measured; off for the hashing embedder
(its vectors of a clause say little more than the message's).
"""

from __future__ import annotations

import hashlib
import re
from typing import NamedTuple, Sequence

import numpy as np

from core.recall.text import LABEL_CHARS, MAX_EMBED_CHARS, _LABEL
from core.recall.types import PieceEstimate, PieceRow

CLAUSE_WORDS = 12  # a sentence longer than this is also cut at its clause marks; a shorter body is not cut
MIN_PART_WORDS = 3  # a clause part shorter than this is left out (a bare "yes," or "- wow")
MAX_PIECES = 32  # pieces kept of one message at most (a round cap on one message's embedding cost)
RESCORED = 200  # a vector-only search re-scores at least its best this many messages by their pieces

TABLE_PREFIX = "memory_studio_recall_pieces"

# Models whose indexes write pieces, by model family (the id before "@"), like ``hybrid.MODEL_FUSION``.
MODEL_PIECES: dict[str, bool] = {
    "use-multilingual-v3-q": True,
    "multilingual-e5-small-q4": True,  # (LoCoMo public vector-only .616 -> .706, session 28; Figures)
}

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_CLAUSE_MARK = re.compile(r"[,;]\s+|\s+-\s+")
_NOTE = re.compile(r"\s*(\[[^\W\d_][\w ]{0,30}: [^\[\]]*\])\s*$")


class Cut(NamedTuple):
    """A message's pieces: the label kept on each (``""``: none) and each piece's span in the text."""

    label: str
    spans: list[tuple[int, int]]

    def texts(self, text: str) -> list[str]:
        """What is embedded for each piece: the label, then the piece."""
        return [self.label + text[a:b] for a, b in self.spans]


def table_name(dim: int) -> str:
    """The side table of a vector dimension's pieces (one per ``memory_messages_<dim>``)."""
    return f"{TABLE_PREFIX}_{int(dim)}"


def pieces_for(model_id: str | None) -> bool:
    """Whether an index of ``model_id``'s vectors writes (and a vector search reads) pieces by default."""
    return MODEL_PIECES.get((model_id or "").split("@", 1)[0], False)


def setting_key(model_id: str) -> str:
    """The recall state key that turns a model's pieces off (value 0) or on (1) for one database."""
    return f"pieces:{model_id}"


def text_hash(text: str) -> str:
    """A short digest of a message's recall text: pieces cut from another text are stale."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


def _words(text: str) -> int:
    return len(text.split())


def _split(text: str, start: int, end: int, mark: re.Pattern[str]) -> list[tuple[int, int]]:
    """The spans of ``text[start:end]`` between the matches of ``mark`` (empty ones left out)."""
    out: list[tuple[int, int]] = []
    at = start
    for m in mark.finditer(text, start, end):
        if m.start() > at:
            out.append((at, m.start()))
        at = m.end()
    if end > at:
        out.append((at, end))
    return out


def _label_end(text: str) -> int:
    found = _LABEL.match(text[:LABEL_CHARS])
    return found.end() if found is not None else 0


def label_of(text: str) -> str:
    """The speaker label a message's pieces carry (``"Caroline: "``; ``""``: none)."""
    return text[:_label_end(text)].lstrip()


def cut(text: str) -> Cut:
    """A message's pieces (``Cut.spans`` empty: it has none): see the module's docstring."""
    head = text[:MAX_EMBED_CHARS]
    label_end = _label_end(head)
    body_end = len(head)
    note: tuple[int, int] | None = None
    tail = _NOTE.search(head, label_end)
    if tail is not None and tail.start() > label_end:
        note = (tail.start(1), tail.end(1))
        body_end = tail.start()
    # (the body without its surrounding white space, as ``str.strip`` gives it)
    start = label_end
    while start < body_end and head[start].isspace():
        start += 1
    end = body_end
    while end > start and head[end - 1].isspace():
        end -= 1
    if _words(head[start:end]) <= CLAUSE_WORDS:
        return Cut("", [])
    spans: list[tuple[int, int]] = []
    for a, b in _split(head, start, end, _SENTENCE_END):
        if _words(head[a:b]) > CLAUSE_WORDS:
            spans += [(x, y) for x, y in _split(head, a, b, _CLAUSE_MARK) if _words(head[x:y]) >= MIN_PART_WORDS]
        else:
            spans.append((a, b))
    if note is not None:
        spans.append(note)
    if len(spans) < 2:
        return Cut("", [])
    label = head[:label_end].lstrip() if label_end else ""
    return Cut(label, spans[:MAX_PIECES])


def split_vectors(vectors: np.ndarray, cuts: Sequence[Cut]) -> list[np.ndarray]:
    """Each cut's piece vectors from ``vectors`` holding them one after another, in the cuts' order (an embed
    call of the pieces' texts, ``Cut.texts`` message by message)."""
    out: list[np.ndarray] = []
    at = 0
    for c in cuts:
        out.append(vectors[at:at + len(c.spans)])
        at += len(c.spans)
    return out


def rows_of(message_id: str, thread_id: str | None, resource_id: str | None, text: str, cut: Cut,
            vectors: np.ndarray) -> list[PieceRow] | None:
    """A message's piece rows from its recall ``text``, its ``cut`` and its pieces' vectors (in order); None when
    a vector is not finite (an embedder's fault: the message gets no pieces from it)."""
    if not np.isfinite(vectors).all():
        return None
    digest = text_hash(text)
    return [PieceRow(message_id, thread_id, resource_id or None, j, a, b, digest, vectors[j])
            for j, (a, b) in enumerate(cut.spans)]


def mixed_scores(q_p: float | np.ndarray, q_v: np.ndarray, p_v: np.ndarray) -> np.ndarray:
    """The cosines of a unit query with mixed rows ``unit(p + v_j)``, from the query's cosine with the
    passage vector (``q_p``: one for a message's pieces, or one per piece when the pieces are of several
    messages), with each piece (``q_v``) and the passage's with each piece (``p_v``); all vectors of unit
    length. A piece opposite its passage (``p.v = -1``, a zero row) scores -1."""
    q_v = np.asarray(q_v, dtype=np.float64)
    q_p = np.broadcast_to(np.asarray(q_p, dtype=np.float64), q_v.shape)
    norm = np.sqrt(np.maximum(2.0 + 2.0 * np.asarray(p_v, dtype=np.float64), 0.0))
    out = np.full(q_v.shape, -1.0)
    ok = norm > 1e-9
    out[ok] = (q_p[ok] + q_v[ok]) / norm[ok]
    return out


def passage_dots(vectors: np.ndarray, passages: np.ndarray) -> np.ndarray:
    """``p . v`` of each piece row of ``vectors`` with the passage row beside it in ``passages`` (float32
    arrays of one shape), summed in float64: the one formula a vector search's scoring uses
    (``search._with_pieces``)."""
    dots: np.ndarray = np.einsum("ij,ij->i", vectors, passages, dtype=np.float64)
    return dots


_BY_ROW: dict[int, bool] = {}


def dots_by_row(dim: int) -> bool:
    """Whether ``passage_dots`` gives each row the same bits whatever rows are computed with it, so one
    message's dots computed at its read (``MessagePieces.passage_dots``, kept by libSQL's cache) are, to
    the bit, those of the search's stacked rows. Checked once per dimension on random rows, every row of
    stacks of many sizes against the same rows computed a few at a time; where it does not hold, the
    search computes them stacked (as before the cache kept them)."""
    known = _BY_ROW.get(dim)
    if known is None:
        rng = np.random.default_rng(dim)
        known = True
        for n in (1, 2, 3, 7, 16, 33, 200, 1001, 4099):
            a = rng.standard_normal((n, dim), dtype=np.float32)
            b = rng.standard_normal((n, dim), dtype=np.float32)
            whole = passage_dots(a, b)
            at = 0
            while at < n and known:
                k = int(rng.integers(1, 34))
                known = np.array_equal(passage_dots(a[at:at + k].copy(), b[at:at + k].copy()), whole[at:at + k])
                at += k
            if not known:
                break
        _BY_ROW[dim] = known
    return known


def rows_alone(dim: int) -> bool:
    """Whether a float32 matrix-vector product (``matrix @ q``, BLAS) gives a row the same bits whatever
    the other rows hold, for the same shape and the row at the same place: then a search that read only
    some messages' pieces scores them exactly as it would with all of them, by leaving the others' rows
    zero (``search._with_pieces``). (BLAS does not give a row the same bits in a matrix of another shape:
    on OpenBLAS 1-3 % of rows differ by an ulp.) Checked once per dimension on random rows; where it
    does not hold, a search reads every re-scored message's pieces."""
    known = _ALONE.get(dim)
    if known is None:
        rng = np.random.default_rng(dim + 1)
        known = True
        for n in (1, 2, 3, 5, 8, 17, 64, 199, 200, 883, 1500):
            full = rng.standard_normal((n, dim), dtype=np.float32)
            q = rng.standard_normal(dim, dtype=np.float32)
            some = rng.random(n) < 0.3
            padded = np.zeros_like(full)
            padded[some] = full[some]
            known = np.array_equal((padded @ q)[some], (full @ q)[some])
            if not known:
                break
        _ALONE[dim] = known
    return known


_ALONE: dict[int, bool] = {}

_U = 2.0 ** -24  # float32's unit roundoff


def bounds(dim: int, score: np.ndarray, least: np.ndarray, off: np.ndarray) -> np.ndarray:
    """How far from a server's estimate (``PieceEstimate``) each message's best mixed row can be as the
    search computes it, from what the server computed over its rows, each vector divided by its length
    (a zero one by 1): ``score`` its best mixed row, ``least`` the least ``2 + 2 p.v`` of its pieces, ``off``
    the most a vector the search uses as it is (``vector_table.unit_rows``: within its tolerance of unit
    length, counted with a margin) is off 1. NaN (not computed): infinite.

    The search computes q.p and q.v in float32 and p.v in float64 over float32 rows, those off unit length
    by more than the tolerance scaled to it; the server sums float32 products in its own order. Each of
    the three dot products then differs by at most ``e = 2.02 gamma + 8u + 1.001 off``: ``gamma = dim u /
    (1 - dim u)`` is the float32 dot product's error bound for vectors of length about 1 in any summation
    order, once each side; ``u``, float32's roundoff, for a scaled row's rounding; ``off`` for a row the
    search does not scale. For N = q.p + q.v and D = sqrt(2 + 2 p.v) (``mixed_scores``), |N| <= 2.01 and
    D^2 moves by at most 2e, so a mixed row moves by at most 2e/D' + 2.01e/D'^3, D' = sqrt(least - 2e), and
    a message's best row by at most as much; doubled here for what the first-order reasoning leaves out.
    A piece almost opposite its passage (D' < 0.1): infinite."""
    gamma = dim * _U / (1 - dim * _U)
    e = 2.02 * gamma + 8 * _U + 1.001 * np.asarray(off, dtype=np.float64)
    low = np.asarray(least, dtype=np.float64) - 2 * e
    ok = np.isfinite(score) & np.isfinite(low) & (low >= 0.01)
    d = np.sqrt(np.where(ok, low, 1.0))
    return np.where(ok, 2 * (2 * e / d + 2.01 * e / d ** 3) + 1e-12, np.inf)


def must_read(scan: Sequence[float], estimates: Sequence[PieceEstimate | None], depth: int) -> list[int]:
    """Which of a vector search's re-scored messages (``scan``: their scan cosines, in the scan's order;
    ``estimates``: each one's ``PieceEstimate``, None for a message scored by its passage alone) must be read to
    know its exact score: those that could be among the best ``depth`` by their bounds. The ``depth``-th
    best lower bound (a message without pieces: its scan cosine, exact) is at most the ``depth``-th best
    score, so a message whose upper bound is under it cannot be among the best ``depth`` nor tie with them."""
    if depth < 1:
        return []
    if len(scan) <= depth:
        return [i for i, e in enumerate(estimates) if e is not None]
    lows = [s if e is None else e.score - e.bound for s, e in zip(scan, estimates)]
    cut = sorted(lows, reverse=True)[depth - 1]
    return [i for i, e in enumerate(estimates) if e is not None and not e.score + e.bound < cut]


class Best(NamedTuple):
    """A message's score by its pieces: its best mixed row's cosine, which piece, of how many."""

    score: float
    piece: int
    pieces: int


def best_mixed(qvec: np.ndarray, passage: np.ndarray, vectors: np.ndarray) -> Best:
    """A message's best mixed row for the query ``qvec`` (unit): ``mixed_scores`` over its pieces."""
    q_p = float(np.dot(passage.astype(np.float64), qvec.astype(np.float64)))
    scores = mixed_scores(q_p, vectors.astype(np.float64) @ qvec.astype(np.float64),
                          vectors.astype(np.float64) @ passage.astype(np.float64))
    j = int(np.argmax(scores))
    return Best(float(scores[j]), j, len(scores))
