"""Export a thread or a whole resource: every stored row that makes up its memory, as one JSON document.

Reads only, inside one read transaction (a consistent snapshot even while an agent writes; on
Postgres a ``REPEATABLE READ`` one), so a database opened read-only — a Mastra database included —
can be exported and is left byte-identical.
A thread export carries its resource's row too: resource-scoped working memory and observations are
part of what the thread's prompts were built from.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata as importlib_metadata
from typing import Any, Iterable, Iterator

import sqlalchemy as sa

from core.storage import Store, catalog
from core.storage.memory_store import NotFoundError, load_json
from core.timeutil import Clock, iso_now
from core.transfer import rows as R
from core.transfer.edit_sections import export_versions
from core.transfer.format import FORMAT, VERSION
from core.transfer.replay_sections import export_sections, message_agent, section_counts
from core.transfer.spool import RowSpool, SpoolPart

log = logging.getLogger(__name__)

OM_TABLE = "mastra_observational_memory"
WM_VERSIONS_TABLE = "memory_studio_wm_versions"


@dataclass(frozen=True)
class ExportOptions:
    """What goes into an export besides threads, messages and current working memory (always in)."""

    working_memory_versions: bool = True  # the history of working-memory values
    observations: bool = True  # observational-memory generations
    turns: bool = True  # per-turn records, when the database keeps them, with the tool definitions they name
    agents: bool = True  # the agents' registered configurations and the Studio's overrides of their memories
    traces: bool = False  # every span of the threads' runs (``--with-traces``)


def tool_version() -> str:
    try:
        return importlib_metadata.version("memory-studio")
    except importlib_metadata.PackageNotFoundError:
        return "unknown"


def export_thread(store: Store, thread_id: str, options: ExportOptions | None = None,
                  *, clock: Clock | None = None) -> dict[str, Any]:
    return export_data(store, thread_id=thread_id, options=options, clock=clock)


def export_resource(store: Store, resource_id: str, options: ExportOptions | None = None,
                    *, clock: Clock | None = None) -> dict[str, Any]:
    return export_data(store, resource_id=resource_id, options=options, clock=clock)


def export_data(
    store: Store, *, thread_id: str | None = None, resource_id: str | None = None,
    options: ExportOptions | None = None, clock: Clock | None = None, streamed: bool = False,
) -> dict[str, Any]:
    """The export document of one thread (``thread_id``) or one resource (``resource_id``).

    ``streamed``: nothing that grows with the history is held. The spans (``options.traces``) are a
    ``format.Streamed`` list, read from the trace store while ``format.render_chunks`` writes the file, so the
    store must stay open until then, and ``counts["traces"]`` is filled in once they are written. Every other
    list that grows with the history (messages, observations, turn records, message and observation-log
    versions) is a ``RowSpool``, and each working-memory entry's ``versions`` a ``SpoolPart``: read in the snapshot
    a page at a time (``rows.iter_rows(stream=True)``: a server-side cursor on Postgres) into temporary files
    (deleted with the document, or at once when the export fails), and written from there. Without it, lists."""
    if (thread_id is None) == (resource_id is None):
        raise ValueError("Export needs exactly one of a thread id or a resource id.")
    opts = options or ExportOptions()
    where = store.location.display
    kept = _Kept(streamed)
    try:
        with _snapshot(store) as conn:
            data = _read(conn, store, kept, opts, thread_id=thread_id, resource_id=resource_id, where=where,
                         clock=clock, streamed=streamed)
    except BaseException:
        kept.discard()
        raise
    data["counts"] = {k: len(data[k]) for k in ("resources", "threads", "messages", "observations", "turns")}
    data["counts"]["workingMemoryVersions"] = sum(len(e["versions"]) for e in data["workingMemory"])
    data["counts"].update(section_counts(data))
    data["counts"].update({k: len(data[k]) for k in ("messageVersions", "observationVersions") if k in data})
    log.info("exported %s %s: %s", data["scope"]["kind"], data["scope"]["id"], data["counts"])
    return data


class _Kept:
    """How an export keeps a list that grows with the history: a list, or (``spooled``) a ``RowSpool`` filled as
    the rows are read; ``discard`` deletes every spool made (an export that failed)."""

    def __init__(self, spooled: bool) -> None:
        self.spooled = spooled
        self.spools: list[RowSpool] = []

    def __call__(self, rows: Iterable[dict[str, Any]], what: str) -> list[dict[str, Any]] | RowSpool:
        if not self.spooled:
            return list(rows)
        spool = RowSpool(what, job="export")
        self.spools.append(spool)
        for row in rows:
            spool.append(row, sum(len(v) for v in row.values() if isinstance(v, str)))
        return spool.close()

    def discard(self) -> None:
        for spool in self.spools:
            spool.discard()


def _read(conn: sa.Connection, store: Store, kept: _Kept, opts: ExportOptions, *, thread_id: str | None,
          resource_id: str | None, where: str, clock: Clock | None, streamed: bool) -> dict[str, Any]:
    if thread_id is not None:
        mine = R.ThreadScope(R.Where("id = ?", (thread_id,)))
        threads = _threads(conn, mine)
        if not threads:
            raise NotFoundError(f"Thread {thread_id!r} not found in {where}. "
                                "List the threads with 'memory-studio threads'.")
        owner = threads[0]["resourceId"]
        scope = {"kind": "thread", "id": thread_id}
    else:
        assert resource_id is not None
        owner = resource_id
        mine = R.ThreadScope(R.Where('"resourceId" = ?', (resource_id,)))
        threads = _threads(conn, mine)
        scope = {"kind": "resource", "id": resource_id}
    resources = _resources(conn, owner)
    if not threads and not resources:
        raise NotFoundError(f"Resource {resource_id!r} not found in {where} (no threads, no working memory). "
                            "List the threads and their resources with 'memory-studio threads'.")
    thread_ids = [t["id"] for t in threads]
    answered_by: set[str] = set()  # the agents that answered in the threads (read as the messages pass)
    messages = kept(_messages(conn, mine, answered_by), "messages")
    observed = _observed(conn, owner, mine) if opts.observations else None
    data: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "exportedAt": iso_now(clock),
        "source": {
            "database": where,
            "kind": "memory-studio" if catalog.has_table(conn, "memory_studio_migrations") else "mastra",
            "tool": {"name": "memory-studio", "version": tool_version()},
        },
        "scope": scope,
        "includes": {"workingMemoryVersions": opts.working_memory_versions,
                     "observations": opts.observations, "turns": opts.turns,
                     "toolDefinitions": opts.turns, "agents": opts.agents, "traces": opts.traces},
        "resources": resources,
        "threads": threads,
        "messages": messages,
        "workingMemory": _working_memory(conn, resources, threads, opts.working_memory_versions, kept),
        "observations": kept(R.iter_rows(conn, OM_TABLE, observed.sql, observed.params, stream=True,
                                         order='"lookupKey", "generationCount", "createdAt", id'), "observations")
        if observed is not None else [],
        **export_sections(conn, store, thread_ids=thread_ids, threads=threads, mine=mine,
                          answered_by=answered_by, resource_id=owner, turns=opts.turns, agents=opts.agents,
                          traces=opts.traces, streamed=streamed, kept=kept),
    }
    # The edit history: Message History and undo read it, and turns before an edit replay from it. Only
    # when there is one, so the file of a memory never edited is what it was before these lists existed.
    data.update({k: v for k, v in export_versions(conn, mine, observed, kept).items() if v})
    return data


@contextmanager
def _snapshot(store: Store) -> Iterator[sa.Connection]:
    """One read transaction: every table is read as of the same moment, and nothing is written."""
    with store.db.snapshot() as conn:
        R.forget_columns(conn)
        yield conn


def _meta(value: Any) -> Any:
    return load_json(value)


def _threads(conn: sa.Connection, mine: R.ThreadScope) -> list[dict[str, Any]]:
    rows = R.select_rows(conn, "mastra_threads", mine.threads.sql, mine.threads.params, order='"createdAt", id')
    return [{"id": r["id"], "resourceId": r["resourceId"], "title": r.get("title") or "",
             "metadata": _meta(r.get("metadata")), "createdAt": r["createdAt"], "updatedAt": r["updatedAt"]}
            for r in rows]


def _resources(conn: sa.Connection, resource_id: str) -> list[dict[str, Any]]:
    rows = R.select_rows(conn, "mastra_resources", "id = ?", [resource_id], order="id")
    return [{"id": r["id"], "workingMemory": r.get("workingMemory"), "metadata": _meta(r.get("metadata")),
             "createdAt": r["createdAt"], "updatedAt": r["updatedAt"]} for r in rows]


def _messages(conn: sa.Connection, mine: R.ThreadScope, answered_by: set[str]) -> Iterator[dict[str, Any]]:
    """The threads' messages, oldest first, as they are read; notes in ``answered_by`` the agents that answered."""
    of = mine.rows_of("thread_id")
    for r in R.iter_rows(conn, "mastra_messages", of.sql, of.params, order='"createdAt", id', stream=True):
        content = R.from_json_value(r["content"])
        if isinstance(content, bytes):  # not JSON, not text: keep what can be read rather than fail the export
            content = content.decode("utf-8", errors="replace")
        if r["role"] == "assistant" and (agent := message_agent(content)):
            answered_by.add(agent)
        yield {"id": r["id"], "threadId": r["thread_id"], "resourceId": r.get("resourceId"),
               "role": r["role"], "type": r["type"], "createdAt": r["createdAt"], "content": content}


def _working_memory(conn: sa.Connection, resources: list[dict[str, Any]], threads: list[dict[str, Any]],
                    with_versions: bool, kept: _Kept) -> list[dict[str, Any]]:
    """Each owner's working memory and its versions: a list, or (``kept.spooled``) a ``SpoolPart`` of one spool
    for them all, so a long history is never all held (it was ~3 times over: as rows, then as the JSON text of
    the whole list)."""
    has_versions = with_versions and catalog.has_table(conn, WM_VERSIONS_TABLE)
    spool = None
    if kept.spooled and has_versions:
        spool = RowSpool("working-memory versions", job="export")
        kept.spools.append(spool)
    out = []
    owners: list[tuple[str, str, Any]] = [("resource", r["id"], r.get("workingMemory")) for r in resources]
    for t in threads:
        meta = t.get("metadata")
        owners.append(("thread", t["id"], meta.get("workingMemory") if isinstance(meta, dict) else None))
    for scope, owner, value in owners:
        rows = (R.iter_rows(conn, WM_VERSIONS_TABLE, "scope = ? AND owner_id = ?", [scope, owner], order="id",
                            stream=True) if has_versions else iter(()))
        versions: list[dict[str, Any]] | SpoolPart
        if spool is None:
            versions = list(rows)
        else:
            mark = spool.mark()
            for row in rows:
                spool.append(row, len(row.get("working_memory") or ""))
            versions = spool.part(mark)
        if value is None and not versions:
            continue
        out.append({"scope": scope, "ownerId": owner, "value": value, "versions": versions})
    if spool is not None:
        spool.close()
    return out


def _observed(conn: sa.Connection, resource_id: str, mine: R.ThreadScope) -> R.Where | None:
    """The observation records of the export (its resource's, its threads'); None: the database keeps none."""
    if not catalog.has_table(conn, OM_TABLE):
        return None
    of = mine.rows_of("threadId")
    return R.Where(f"(scope = 'resource' AND \"resourceId\" = ?) OR {of.sql}", (resource_id, *of.params))
