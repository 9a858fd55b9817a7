"""Embed every stored message that has no vector from the current model, or whose vector was embedded
from other content than the message has now (``memory-studio reindex``).

Resumable by construction: each batch commits on its own, and the work list is "messages without a
current vector from this model", recomputed on every run. An interrupted run loses at most the batch
in flight and nothing is embedded twice.

"Current" is decided by the passage hash each vector row carries (``passages``): a message edited
since it was embedded, or whose previous message was edited or deleted, hashes differently. A row
written before hashes were kept is compared by the message text it stores.
"""

from __future__ import annotations

from contextlib import closing

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from core.messages import Message
from core.recall.index import INDEXED_ROLES, RecallError, RecallIndex
from core.recall.schema import delete_orphan_rows, quoted, text_of_raw
from core.recall.pieces import cut as cut_pieces, text_hash as piece_hash
from core.recall.text import passage_hash
from core.storage import dialect

if TYPE_CHECKING:  # pragma: no cover
    from core.embedding import Embedder
    from core.storage import Store

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]


@dataclass
class ReindexReport:
    total: int = 0  # messages that needed a vector when the run started
    indexed: int = 0
    skipped: dict[str, str] = field(default_factory=dict)  # e.g. empty text
    failed: dict[str, str] = field(default_factory=dict)
    already_indexed: int = 0  # with a current vector when the run started
    changed: int = 0  # of ``total``: had a vector from this model, embedded from content since changed
    model_id: str = ""
    # ``replace=True``: vectors of other models dropped after a complete run, by model id
    dropped: dict[str, int] = field(default_factory=dict)
    pieces: bool = False  # the index writes piece vectors (``core.recall.pieces``)
    pieces_written: int = 0  # messages (beyond ``indexed``) whose piece vectors were made or replaced
    pieces_dropped: int = 0  # messages whose piece vectors were dropped (pieces off, or the text has none now)
    # The keyword index's catch-up before embedding: its queue is the whole database's (every recall write applies
    # it), so a run for one resource writes other resources' keyword docs too; said, not hidden. Messages whose
    # doc it wrote, by whose they are: the run's resource (or, for a whole-database run, any), other resources',
    # and deleted messages whose doc it dropped.
    resource_id: str | None = None
    keyword_docs: int = 0
    keyword_docs_elsewhere: int = 0
    keyword_docs_dropped: int = 0

    def summary_lines(self, shown: int = 3) -> list[str]:
        """What the run did, in sentences for a person (``memory-studio reindex`` prints them): counts
        first, then skips and failures grouped by reason (the ``shown`` most frequent reasons, with
        one message id each), then the other models' vectors dropped."""
        changed = f", {self.changed:,} of them because their text changed since" if self.changed else ""
        if self.total == 0:
            lines = [f"Nothing new: 0 indexed, all {self.already_indexed:,} message(s) already have a current vector "
                     f"from {self.model_id}."]
        else:
            lines = [f"Embedded {self.indexed:,} of {self.total:,} message(s) with {self.model_id}{changed}; "
                     f"{self.already_indexed:,} already had a current vector."]
        keywords = self.keyword_line(why=True)
        if keywords:
            lines.append(keywords)
        for what, found in (("Skipped", self.skipped), ("Failed", self.failed)):
            if not found:
                continue
            groups = _by_reason(found)
            lines.append(f"{what} {len(found):,}:")
            lines += [f"  {len(ids):,} × {reason} (e.g. message {ids[0]})" for reason, ids in groups[:shown]]
            if len(groups) > shown:
                lines.append(f"  … and {len(groups) - shown:,} other reason(s)")
        if self.failed:
            lines.append("Run `memory-studio reindex` again to retry the failed messages: "
                         "nothing already embedded is embedded twice.")
        if self.pieces_written:
            lines.append(f"Piece vectors: made for {self.pieces_written:,} long message(s) indexed before.")
        if self.pieces_dropped:
            lines.append(f"Piece vectors: dropped for {self.pieces_dropped:,} message(s)"
                         f"{'' if self.pieces else ' (pieces are off for this model in this database)'}.")
        for model_id, n in sorted(self.dropped.items()):
            lines.append(f"Dropped {n:,} vector(s) of {model_id}: the database is now indexed by {self.model_id}.")
        return lines

    def keyword_line(self, *, why: bool = False) -> str | None:
        """What the keyword index's catch-up wrote before a run for one resource embedded, other resources' first
        (the surprise), or None when its queue was empty (a whole-database run, which indexes every resource, says
        nothing of it). ``why``: and why other resources' were written."""
        own, elsewhere, dropped = self.keyword_docs, self.keyword_docs_elsewhere, self.keyword_docs_dropped
        if self.resource_id is None or not (own or elsewhere or dropped):
            return None
        parts = []
        if elsewhere:
            parts += [f"{elsewhere:,} queued message(s) of other resources indexed too", f"{own:,} of this resource's"]
        elif own:
            parts.append(f"{own:,} queued message(s) of this resource indexed")
        if dropped:
            parts.append(f"the docs of {dropped:,} deleted message(s) dropped")
        reason = (" (the queue of recent changes is the whole database's; any recall write applies it)"
                  if why and elsewhere else "")
        return "Keyword index: " + ", ".join(parts) + reason + "."

    def status_line(self) -> str:
        """One line for a status bar (the Studio's): what was embedded, then the keyword catch-up's line; the model,
        skips and failures are in ``summary_lines``."""
        head = (f"Nothing new: 0 embedded, {self.already_indexed:,} already current." if self.total == 0 else
                f"Embedded {self.indexed:,} of {self.total:,} message(s), {self.already_indexed:,} already current.")
        keywords = self.keyword_line()
        return f"{head} {keywords}" if keywords else head


def _by_reason(per_message: dict[str, str]) -> list[tuple[str, list[str]]]:
    """Message ids grouped by reason, the most frequent reason first (then alphabetically)."""
    groups: dict[str, list[str]] = {}
    for mid, reason in per_message.items():
        groups.setdefault(reason, []).append(mid)
    return sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))


def reindex(
    store: "Store",
    embedder: "Embedder",
    resource_id: str | None = None,
    progress: Progress | None = None,
    batch_size: int = 64,
    replace: bool = False,
    pieces: str | None = None,
) -> ReindexReport:
    """Embed what has no current vector from ``embedder``'s model.

    ``replace``: the model replaces the database's other models (``memory-studio reindex --model``):
    once every message has a vector from it (no failure, the whole database rather than one resource),
    the other models' vectors are dropped (``core.recall.models.drop_other_models``).
    ``pieces``: "on" / "off" / "default" sets this model's piece vectors for the database
    (``RecallIndex.set_pieces``) first; None keeps the setting. Then every message with a current vector
    gets the pieces it lacks (or holds of another text), or, with pieces off, loses them.
    """
    if pieces not in (None, "on", "off", "default"):
        raise ValueError(f"pieces must be 'on', 'off' or 'default', not {pieces!r}")
    if replace and resource_id is not None:
        raise ValueError("replace=True re-embeds the whole database; it cannot be limited to one resource")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    index = RecallIndex.for_store(store, embedder)
    index.check()
    if not index.writable:
        raise RecallError(f"{store.location.display} is open read-only; reindexing needs writes.")
    index.ensure_tables()
    if pieces is not None:
        index.set_pieces(None if pieces == "default" else pieces == "on")
    touched: dict[str, str | None] = {}
    index.sync_keywords(limit=10**9, touched=touched)
    orphans = 0
    if index.has_fts and store.capabilities.full_text == "fts5":
        with store.db.write() as conn:  # (keyword rows no message holds: ``schema.delete_orphan_rows``)
            orphans = delete_orphan_rows(conn)
    todo, already = _work_list(index, resource_id)
    changed, piece_work, piece_drops = _changed(index, resource_id)
    if changed:
        todo = [*todo, *changed]
        already -= len(changed)
    report = ReindexReport(total=len(todo), already_indexed=already, changed=len(changed), model_id=index.model_id,
                           pieces=index.pieces, resource_id=resource_id)
    report.keyword_docs_dropped += orphans
    for owner in touched.values():
        if owner is None:
            report.keyword_docs_dropped += 1
        elif resource_id is None or owner == resource_id:
            report.keyword_docs += 1
        else:
            report.keyword_docs_elsewhere += 1
    done = 0
    if progress is not None:
        progress(0, len(todo))
    chunks = [todo[start : start + batch_size] for start in range(0, len(todo), batch_size)]
    # Pipelined: the next chunk is embedded while this one is written (``RecallIndex.index_batches``).
    # Closed on the way out, so an interruption (``progress`` raising) waits for the chunk staged
    # ahead instead of leaving it running.
    with closing(index.index_batches(_load(store, ids, report) for ids in chunks)) as results:
        for ids, result in zip(chunks, results):
            report.indexed += len(result.indexed)
            report.skipped.update(result.skipped)
            report.failed.update(result.failed)
            done += len(ids)
            if progress is not None:
                progress(done, len(todo))
    if piece_work:
        redone = set(todo)  # (their pieces were written with their passages)
        work = [mid for mid in piece_work if mid not in redone]
        written, failed = index.index_pieces(work, batch_size)
        report.failed.update(failed)
        drops = sum(1 for mid in work if mid in piece_drops and mid not in failed)
        report.pieces_dropped = drops
        report.pieces_written = written - drops
    if replace and not report.failed:
        from core.recall.models import drop_other_models

        report.dropped = dict(drop_other_models(store, index.model_id))
    return report


def _work_list(index: RecallIndex, resource_id: str | None) -> tuple[list[str], int]:
    assert index.info is not None
    table = quoted(index.info.name)
    roles = ",".join(f"'{r}'" for r in INDEXED_ROLES)
    scope = ""
    params: list[object] = []
    if resource_id is not None:
        scope = 'AND coalesce(m."resourceId", t."resourceId") = ?'
        params.append(resource_id)
    base = (
        f"FROM mastra_messages m LEFT JOIN mastra_threads t ON t.id = m.thread_id "
        f"WHERE m.role IN ({roles}) {scope}"
    )
    have = f"EXISTS (SELECT 1 FROM {table} v WHERE v.vector_id = m.id AND v.model_id = ?)"
    with index.store.db.read() as conn:
        todo = [
            r[0]
            for r in conn.exec_driver_sql(
                f'SELECT m.id {base} AND NOT {have} ORDER BY m."createdAt", m.id', (*params, index.model_id)
            )
        ]
        already = int(conn.exec_driver_sql(f"SELECT count(*) {base} AND {have}", (*params, index.model_id)).scalar() or 0)
    return todo, already


def _changed(index: RecallIndex, resource_id: str | None) -> tuple[list[str], list[str], set[str]]:
    """Messages with a vector from this model whose passage (text and previous message) has changed
    since, in thread order; of the others, those whose piece vectors do not match their text now and
    the pieces setting (``pieces.cut``: missing, of another text, or there to be dropped), and which of
    these only lose theirs. One streamed read of the scope's messages, hashes compared per 500."""
    assert index.info is not None
    table = quoted(index.info.name)
    roles = ",".join(f"'{r}'" for r in INDEXED_ROLES)
    scope, params = "", [index.model_id]
    if resource_id is not None:
        scope = 'AND coalesce(m."resourceId", t."resourceId") = ?'
        params.append(resource_id)
    with index.store.db.read() as conn:
        rows = conn.exec_driver_sql(
            f"SELECT m.id, m.thread_id, {dialect.stored_text_sql(conn, 'm.content')}, "
            f"EXISTS (SELECT 1 FROM {table} v WHERE v.vector_id = m.id AND v.model_id = ?) "
            f"FROM mastra_messages m LEFT JOIN mastra_threads t ON t.id = m.thread_id WHERE m.role IN ({roles}) {scope} "
            'ORDER BY m.thread_id, m."createdAt", m.id',
            tuple(params),
        )
        thread, context = None, ""
        pending: list[tuple[str, str, str]] = []
        for mid, thread_id, raw, has in rows:
            if thread_id != thread:
                thread, context = thread_id, ""
            text = text_of_raw(raw)
            if has and text.strip():
                pending.append((mid, passage_hash(context, text), text))
            context = text
    out: list[str] = []
    work: list[str] = []
    drops: set[str] = set()
    for start in range(0, len(pending), 500):
        batch = pending[start : start + 500]
        with index.store.db.read() as conn:
            _docs, held = index.indexed_state(conn, [mid for mid, _, _ in batch])
            have = index.vectors.piece_hashes(conn, [mid for mid, _, _ in batch])
        stale = {mid for mid, digest, text in batch if (state := held.get(mid)) is not None and state.stale(digest, text)}
        out.extend(mid for mid, _, _ in batch if mid in stale)
        for mid, _, text in batch:
            if mid in stale:
                continue
            digest = have.get(mid)
            wanted = index.pieces and bool(cut_pieces(text).spans)
            if wanted and digest != piece_hash(text):
                work.append(mid)
            elif not wanted and digest is not None:
                work.append(mid)
                drops.add(mid)
    return out, work, drops


def _load(store: "Store", ids: list[str], report: ReindexReport) -> list[Message]:
    found = store.memory.get_messages(ids)  # a malformed row is skipped there, so the others still get indexed
    for bad in found.unreadable:
        log.warning("reindex skipped message %s: %s", bad.id, bad.error)
        report.failed[bad.id] = bad.error
    return list(found)
