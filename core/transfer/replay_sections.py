"""The parts of an export that make its turns replay exactly in another database (issue 16).

A turn record names stored rows; to rebuild every model call of a turn elsewhere, the copy needs:

- ``turns``: the threads' rows of ``memory_studio_turns`` (every column as stored);
- ``toolDefinitions`` / ``toolSets``: the tool definitions those records' calls offered, by hash
  (``core.replay.tools``), and the sets that list them;
- ``agents`` / ``configs``: the registered configurations of the agents that answered in the threads
  (or are named by them) and the Studio's template/schema overrides of their memories, so the
  Studio picks the same configuration for the thread (``core.agent_configs.agent_for_thread``);
- ``traces`` (``--with-traces`` only): every span of the threads' runs, so Open Trace works there.

The tables are this module's choice, never the file's: a file only holds rows. Each list is a section
of ``core.transfer.sections`` (registered below, with the rules its rows obey: every row is checked
before anything is written); the turn records are its ``turns`` section, imported by the importer.
Rows of tables the target lacks are left out with a note. What the file
does not carry (traces exported without the flag, tool definitions of records written by an older
version) is said in the import summary (``ImportReport.left_out``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Sequence

import sqlalchemy as sa

from core.agent_configs import IMPORTED_PROCESS
from core.replay import tools as tool_defs
from core.replay.store import set_keys
from core.storage import catalog, schema
from core.traces.reader import iter_chunks
from core.transfer import rows as R
from core.transfer import sections as S
from core.transfer.errors import TransferError
from core.transfer.format import Streamed
from core.transfer.report import register_kind

if TYPE_CHECKING:  # pragma: no cover
    from core.storage import Store
    from core.transfer.importer import _Importer
    from core.transfer.spool import Keep
    from core.transfer.report import ImportReport

log = logging.getLogger(__name__)

TURNS = schema.turns.name
AGENTS = schema.agent_registry.name
CONFIGS = schema.memory_configs.name
DEFS = schema.TOOL_DEFS_TABLE
SETS = schema.TOOL_SETS_TABLE
_AGENT_KEYS = ("agent", "agentName", "agentId")  # thread metadata naming its agent (core.agent_configs)
SECTION_KEYS = ("toolDefinitions", "toolSets", "agents", "configs", "traces")
THREAD_CHUNK = 200  # threads whose runs one keyset listing pages through
TRACE_PAGE = 5000  # runs per page of that listing
TRACE_BATCH = 500  # runs whose spans one query reads


# -- export ------------------------------------------------------------------------------------------
def has_turn_records(conn: sa.Connection) -> bool:
    """Whether this database keeps turn records (what an export can carry)."""
    return catalog.has_table(conn, TURNS)


def export_sections(conn: sa.Connection, store: "Store", *, thread_ids: list[str], threads: list[dict[str, Any]],
                    mine: R.ThreadScope, answered_by: set[str], resource_id: str, turns: bool, agents: bool,
                    traces: bool, streamed: bool = False, kept: "Keep" = lambda rows, _what: list(rows),
                    ) -> dict[str, Any]:
    """The replay sections of an export, read inside the export's snapshot (traces from the trace
    store beside it; ``streamed``: as a ``Streamed`` list, read while the file is written). ``answered_by``: the
    agents that answered in the threads' messages (``message_agent``); ``kept``: how the turn records are kept
    (a list, or a spool)."""
    keys: set[str] = set()  # the tool sets the turn records name (read as they pass)
    turn_rows = kept(_turn_rows(conn, mine, keys), "turn records") if turns else []
    defs, sets = tool_defs.read_rows(conn, sorted(keys))
    agent_rows, config_rows = _agents(conn, threads, answered_by, resource_id) if agents else ([], [])
    owners = {str(t["id"]): str(t["resourceId"]) for t in threads}
    return {
        "turnsTable": TURNS if turns and catalog.has_table(conn, TURNS) else None,  # for readers before issue 16
        "turns": turn_rows,
        "toolDefinitions": [{"hash": k, "definition": v} for k, v in sorted(defs.items())],
        "toolSets": [{"hash": k, "members": v} for k, v in sorted(sets.items())],
        "agents": agent_rows,
        "configs": config_rows,
        "traces": (Streamed(lambda: iter_trace_spans(store, list(thread_ids), owners=owners)) if streamed
                   else export_traces(store, thread_ids, owners=owners)) if traces else [],
    }


def section_counts(data: Mapping[str, Any]) -> dict[str, int]:
    return {"toolDefinitions": len(data.get("toolDefinitions") or []), "agents": len(data.get("agents") or []),
            "configs": len(data.get("configs") or []), "traces": _count(data.get("traces"))}


def _count(rows: Any) -> int:
    # A streamed list's count is known once it has been written: the writer fills it in.
    return rows.count or 0 if isinstance(rows, Streamed) else len(rows or [])


def _turn_rows(conn: sa.Connection, mine: R.ThreadScope, keys: set[str]) -> Iterator[dict[str, Any]]:
    """The threads' turn records as they are read; notes in ``keys`` the tool sets they name."""
    if not catalog.has_table(conn, TURNS):
        return
    of = mine.rows_of("thread_id")
    for row in R.iter_rows(conn, TURNS, of.sql, of.params, order='"createdAt", input_message_id', stream=True):
        keys.update(_set_keys(row.get("record")))
        yield row


def _set_keys(raw: Any) -> set[str]:
    try:
        return set_keys(json.loads(raw)) if isinstance(raw, str) else set()
    except ValueError:
        return set()


def _agents(conn: sa.Connection, threads: list[dict[str, Any]], answered_by: set[str],
            resource_id: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The registered configurations that can apply to these threads (the agents that answered in
    them, that their metadata names or that share the resource's name; all of them when none
    does, as the only registered agent then applies) and the overrides of their memories."""
    if not catalog.has_table(conn, AGENTS):
        return [], []
    everyone = R.select_rows(conn, AGENTS, order="name")
    named = {resource_id}
    for t in threads:
        meta = t.get("metadata")
        if isinstance(meta, dict):
            named.update(str(meta[k]) for k in _AGENT_KEYS if isinstance(meta.get(k), str))
    named.update(answered_by)
    chosen = [a for a in everyone if a["name"] in named] or everyone
    memory_names = sorted({_memory_name(a) for a in chosen})
    configs: list[dict[str, Any]] = []
    if memory_names and catalog.has_table(conn, CONFIGS):
        clause, params = R.in_clause(memory_names)
        configs = R.select_rows(conn, CONFIGS, f"name IN {clause}", params, order="id")
    return chosen, configs


def message_agent(content: Any) -> str | None:
    """The agent an assistant message's stored content names (``metadata.agent``), or None."""
    try:
        data = json.loads(content) if isinstance(content, str) else content
    except ValueError:
        return None
    meta = data.get("metadata") if isinstance(data, dict) else None
    agent = meta.get("agent") if isinstance(meta, dict) else None
    return agent if isinstance(agent, str) else None


def _memory_name(agent_row: Mapping[str, Any]) -> str:
    try:
        config = json.loads(agent_row.get("config") or "{}")
    except ValueError:
        config = {}
    name = config.get("name") if isinstance(config, dict) else None
    return str(name or agent_row["name"])


def export_traces(store: "Store", thread_ids: Sequence[str], *,
                  owners: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Every span of every run of these threads (``iter_trace_spans``), as one list."""
    return list(iter_trace_spans(store, thread_ids, owners=owners))


def iter_trace_spans(store: "Store", thread_ids: Sequence[str], *, owners: Mapping[str, str] | None = None,
                     thread_chunk: int = THREAD_CHUNK, page: int = TRACE_PAGE,
                     batch_size: int | None = None) -> Iterator[dict[str, Any]]:
    """Every span of every run of these threads (``SpanRecord.to_json_dict``), read as it is used: the
    threads in the order given, each thread's runs as the Traces list shows them (newest first), a run
    of two of the threads under the first, each run's spans in tree order (``get_trace``'s).

    The runs of ``thread_chunk`` threads are listed by keyset pages of ``page`` runs and their spans
    read ``batch_size`` runs per query (``TRACE_BATCH``), so only one batch of spans is held at a time. A
    busy trace store raises ``TransferError`` (nothing of a file is kept: ``format.write_atomically``; nothing
    reaches standard output: ``format.write_whole``).

    ``owners`` (thread id -> its resource): a run with a span naming one of these threads for another
    resource is that resource's, not the thread's, and is left out: a gateway request or MCP call that
    named someone else's thread is refused, but its run (with the caller's message as input) is traced
    under the thread it named."""
    batch_size = TRACE_BATCH if batch_size is None else batch_size
    reader = store.observability
    if reader is None:
        return
    seen: set[str] = set()
    batch: list[str] = []
    for chunk in iter_chunks(list(thread_ids), thread_chunk):
        runs: dict[str, list[str]] = {}
        after = None
        while True:
            keys = reader.thread_trace_keys(chunk, limit=page, after=after)
            _not_busy(keys.busy, store)
            for key in keys:
                runs.setdefault(key.thread_id, []).append(key.trace_id)
            if len(keys) < page:
                break
            after = keys[-1]
        for tid in chunk:
            for trace_id in runs.get(tid, ()):
                if trace_id in seen:
                    continue
                seen.add(trace_id)
                batch.append(trace_id)
                if len(batch) == batch_size:
                    yield from _batch_spans(store, batch, owners)
                    batch = []
    if batch:
        yield from _batch_spans(store, batch, owners)


def _batch_spans(store: "Store", trace_ids: list[str], owners: Mapping[str, str] | None) -> Iterator[dict[str, Any]]:
    assert store.observability is not None
    spans = store.observability.get_traces(trace_ids)
    _not_busy(spans.busy, store)
    if owners is None:
        return (s.to_json_dict() for s in spans)
    anothers = {s.trace_id for s in spans if s.thread_id is not None and s.thread_id in owners
                and s.resource_id is not None and s.resource_id != owners[s.thread_id]}
    if anothers:
        log.info("export: %d run(s) of another resource naming an exported thread left out", len(anothers))
    return (s.to_json_dict() for s in spans if s.trace_id not in anothers)


def _not_busy(busy: bool, store: "Store") -> None:
    if busy:
        raise TransferError(f"The trace store of {store.location.display} is busy (an agent is writing "
                            "traces); export again in a moment, or export without --with-traces.")


# -- the sections and their rules ----------------------------------------------------------------------
def _definition_rule(row: S.Row, index: S.FileIndex) -> str | None:
    text = row.get("definition")
    if not isinstance(text, str) or row.get("hash") != tool_defs.key_of(text):
        return "its definition does not hash to its \"hash\" (the file was changed by hand); export it again"
    try:
        json.loads(text)
    except ValueError:
        return "its definition is not JSON"
    return None


def _set_rule(row: S.Row, index: S.FileIndex) -> str | None:
    members = row.get("members")
    if not isinstance(members, list) or not all(isinstance(m, str) for m in members) \
            or row.get("hash") != tool_defs.key_of(",".join(members)):
        return "its members do not hash to its \"hash\" (the file was changed by hand); export it again"
    return None


def _agent_rule(row: S.Row, index: S.FileIndex) -> str | None:
    from core.agent_configs import AgentConfig
    from core.errors import MemoryStudioError

    if not isinstance(row.get("name"), str) or not row["name"] or not isinstance(row.get("config"), str):
        return "it needs a string name and config"
    try:
        config = json.loads(row["config"])
    except ValueError:
        return "its config is not JSON"
    # Read back as the engine reads it (every listing of agents parses the time; `memory-studio mcp`
    # builds the only agent's options at start), so one row cannot stop them all.
    if (problem := S.times_problem(row, ("updatedAt",))) is not None:
        return problem
    try:
        AgentConfig(row["name"], config if isinstance(config, dict) else {}, None, None).memory_options()
    except (MemoryStudioError, TypeError, ValueError) as exc:
        return f"its memory options cannot be used ({exc})"
    return None


def _config_rule(row: S.Row, index: S.FileIndex) -> str | None:
    if not all(isinstance(row.get(k), str) for k in ("name", "author", "createdAt")):
        return "it needs a string name, author and createdAt"
    if (problem := S.integer_id_problem(row, "id")) is not None:
        return problem
    # The newest override of a memory is read, time included, and applied on every turn of every agent
    # using it (and when an agent is made): a time or a template/schema the engine refuses stops them all.
    if (problem := S.times_problem(row, ("createdAt",))) is not None:
        return problem
    from core.agent_configs import effective_options
    from core.errors import MemoryStudioError
    from core.options import MemoryOptions

    template, schema = row.get("template"), row.get("schema")
    if template is not None and not isinstance(template, str):
        return "its template must be text"
    if schema is not None and not isinstance(schema, str):
        return "its schema must be JSON text"
    try:
        schema = json.loads(schema) if schema is not None else None
    except ValueError:
        schema = None  # the engine ignores an unreadable schema (and logs it), as it ignores this one
    try:
        effective_options(MemoryOptions(working_memory={"enabled": True}), {"template": template, "schema": schema})
    except (MemoryStudioError, TypeError, ValueError) as exc:
        return f"its working-memory {'schema' if schema is not None else 'template'} cannot be used ({exc})"
    return None


def _turn_rule(row: S.Row, index: S.FileIndex) -> str | None:
    if not all(isinstance(row.get(c), str) for c in ("input_message_id", "thread_id", "record", "createdAt")):
        return "it needs a string input_message_id, thread_id, record and createdAt"
    return S.integer_id_problem(row, "wm_version_id") or S.times_problem(row, ("createdAt",))


def _span_rule(row: S.Row, index: S.FileIndex) -> str | None:
    from core.traces.spans import SpanRecord

    if not isinstance(row.get("traceId"), str) or not isinstance(row.get("spanId"), str):
        return "it needs a string traceId and spanId"
    # Spans are written after the database's transaction: one that cannot be read must refuse the file
    # here, before anything is written, not fail the import halfway.
    try:
        SpanRecord.from_json_dict(row)
    except (TypeError, ValueError) as exc:
        return f"it cannot be read as a span ({exc})"
    return None


S.register(S.Section("toolDefinitions", DEFS, "tool definition", id_fields=("hash",), check=_definition_rule))
S.register(S.Section("toolSets", SETS, "tool set", id_fields=("hash",), check=_set_rule))
S.register(S.Section("agents", AGENTS, "agent configuration", id_fields=("name",), check=_agent_rule))
S.register(S.Section("configs", CONFIGS, "override", id_fields=(), check=_config_rule))
# Spans go to the trace store beside the database (``import_traces``), never to a table of it.
# A span's resource is its thread's owner, or (a span of no thread) a resource of the file: a span naming
# another resource would show in that resource's traces.
S.register(S.Section("traces", None, "span", id_fields=("traceId", "spanId"), thread_field="threadId",
                     resource_field="resourceId", check=_span_rule))
register_kind("traces", "span")
# The turn records' section is the importer's (``sections.TURNS``); a record's own fields must be text.
S.register(replace(S.TURNS, check=_turn_rule))


# -- import --------------------------------------------------------------------------------------------
def import_sections(imp: "_Importer") -> None:
    """Write the tool definitions and the agents' configurations inside the import's transaction (the
    importer writes the turn records; traces come after it: ``import_traces``)."""
    data, report = imp.data, imp.report
    _import_tools(imp, data.get("toolDefinitions") or [], data.get("toolSets") or [])
    _import_agents(imp, data.get("agents") or [], data.get("configs") or [])
    report.left_out.extend(left_out(data))


def left_out(data: Mapping[str, Any]) -> list[str]:
    """What the file does not carry that a replay elsewhere would use."""
    out: list[str] = []
    raw = data.get("includes")
    includes: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    if not includes.get("traces"):
        out.append("traces: the file was exported without --with-traces, so Open Trace finds nothing for these "
                   "turns here")
    have = {r.get("hash") for r in data.get("toolSets") or []}
    missing = sum(1 for r in data.get("turns") or [] if _set_keys(r.get("record")) - have)
    if missing:
        out.append(f"tool definitions of {missing} turn record{'s' if missing != 1 else ''}: the file does not hold "
                   "them (exported by an older Memory Studio), so those turns replay with their tools unknown")
    if "agents" not in data:
        out.append("the agents' registered configurations and the Studio's overrides (exported by an older Memory "
                   "Studio): the Studio previews these threads with this database's agents")
    return out


def _import_tools(imp: "_Importer", definitions: list[Mapping[str, Any]], sets: list[Mapping[str, Any]]) -> None:
    if not definitions and not sets:
        return
    report = imp.report
    if not catalog.has_table(imp.conn, SETS):
        report.notes.append(
            f"{len(definitions)} tool definition{'s' if len(definitions) != 1 else ''} not imported: "
            f"{report.target} has no {SETS} table. Run 'memory-studio migrate' on it first, so its turns replay "
            "with their tools.")
        return
    defs = {str(r["hash"]): str(r["definition"]) for r in definitions}
    members = {str(r["hash"]): [str(m) for m in r["members"]] for r in sets}
    new_defs = _missing(imp.conn, DEFS, defs)
    new_sets = _missing(imp.conn, SETS, members)
    if not report.dry_run:
        for table in (DEFS, SETS):
            S.writable(table)
        tool_defs.write_rows(imp.conn, {k: defs[k] for k in new_defs}, {k: members[k] for k in new_sets})
    imp._wrote("toolDefinitions", len(new_defs))
    imp._same("toolDefinitions", len(defs) - len(new_defs))


def _missing(conn: sa.Connection, table: str, keys: Iterable[str]) -> list[str]:
    wanted = sorted(set(keys))
    have: set[str] = set()
    for start in range(0, len(wanted), 500):
        clause, params = R.in_clause(wanted[start:start + 500])
        have.update(r[0] for r in conn.exec_driver_sql(f"SELECT hash FROM {table} WHERE hash IN {clause}",
                                                             tuple(params)))
    return [k for k in wanted if k not in have]


def _import_agents(imp: "_Importer", agents: list[Mapping[str, Any]], configs: list[Mapping[str, Any]]) -> None:
    if configs and not imp.with_configs:
        # A file's override would set the working-memory template or schema of a memory here that has none of
        # its own: what every user of that memory is asked to keep. A file from elsewhere never does that
        # unless the operator asks for it.
        names = sorted({str(r.get("name")) for r in configs})
        imp.report.notes.append(
            f"{len(configs)} memory override{'s' if len(configs) != 1 else ''} ({', '.join(map(repr, names))}) not "
            "imported: an override sets the working-memory template or schema every user of that memory gets. "
            "Import with --with-configs (in the Studio: “Also take the file's memory overrides”) to take them.")
        configs = []
    if not agents and not configs:
        return
    report = imp.report
    if not catalog.has_table(imp.conn, AGENTS) or not catalog.has_table(imp.conn, CONFIGS):
        report.notes.append(
            f"{len(agents)} agent configuration{'s' if len(agents) != 1 else ''} and {len(configs)} override"
            f"{'s' if len(configs) != 1 else ''} not imported: {report.target} has no {AGENTS} table (a database "
            "Mastra wrote). Run 'memory-studio migrate' on it first.")
        return
    imp._check_columns(AGENTS, agents, "agent configurations")
    imp._check_columns(CONFIGS, configs, "overrides")
    for row in agents:
        # The time and process of the registration say nothing about the configuration itself. A row
        # written here is marked imported: a replay reads it, but no server takes it up unless named
        # (``memory-studio mcp`` without ``--agent`` serves only a registration of its own database's agents).
        imp._upsert_by_key(AGENTS, ["name"], {**row, "process": IMPORTED_PROCESS}, "agents",
                           ignore=("updatedAt", "process"))
    cols = {c[0] for c in R.columns(imp.conn, CONFIGS)}
    # The newest override of a memory is the one its agents run with: a file never replaces overrides
    # the target has of its own for that memory (unless overwrite), it only fills a memory without any.
    own = {str(r[0]) for r in imp.conn.exec_driver_sql(f"SELECT DISTINCT name FROM {CONFIGS}")}
    kept: dict[str, int] = {}
    for row in sorted(configs, key=lambda r: (str(r.get("createdAt")), int(r.get("id") or 0))):
        content = {k: v for k, v in row.items() if k != "id" and k in cols}
        if imp._find_by_content(CONFIGS, content, "id") is not None:
            imp._same("configs")
            continue
        if row["name"] in own and not imp.overwrite:
            kept[row["name"]] = kept.get(row["name"], 0) + 1
            continue
        imp._insert_keeping_id(CONFIGS, "id", row.get("id"), content)
        imp._wrote("configs")
    for name, n in sorted(kept.items()):
        imp.report.notes.append(
            f"{n} override{'s' if n != 1 else ''} of memory {name!r} not imported: {imp.report.target} has overrides "
            "of its own for that memory, and an imported one would become the one its agents run with. Import with "
            "--overwrite to take the file's.")


def import_traces(store: "Store", data: Mapping[str, Any], report: "ImportReport", blocked: set[str]) -> None:
    """Write the file's spans into the target's trace store (after the import's transaction: spans
    live beside the database). A span already stored is left alone; spans of threads that were left
    out (owned by another resource here) are left out too, and so are the spans of a trace whose id is
    a run of another thread or resource here (they would join that run)."""
    from core.traces.spans import SpanRecord

    wanted = [s for s in data.get("traces") or [] if s.get("threadId") not in blocked]
    if not wanted:
        return
    obs = store.observability
    if obs is None:
        report.notes.append(f"{len(wanted)} span{'s' if len(wanted) != 1 else ''} not imported: "
                            f"{report.target} keeps no traces (an in-memory database).")
        return
    # The spans are this process's first for the database (tracing off, say): settle where they go
    # before reading what is stored there, and say so when it is not the folder's shared file.
    where = obs.claim()
    if where is not None:
        report.notes.append(f"Traces: {where}.")
    records = [SpanRecord.from_json_dict(s) for s in wanted]
    threads = {t["id"] for t in data.get("threads") or []}
    owners = {r["id"] for r in data.get("resources") or []} | {t["resourceId"] for t in data.get("threads") or []}
    stored: set[tuple[str, str]] = set()
    foreign: dict[str, str] = {}  # trace id -> whose run it is here, for traces the file may not add to
    for trace_id in sorted({r.trace_id for r in records}):
        found = obs.get_trace(trace_id)
        if found.busy:
            report.notes.append(f"{len(records)} span{'s' if len(records) != 1 else ''} not imported: the trace store "
                                f"of {report.target} is busy (an agent is writing traces). Import the file again "
                                "later: only the spans will be added.")
            return
        stored.update((s.trace_id, s.span_id) for s in found)
        # A trace id already used here by a run of another thread or resource: the file's spans would join
        # that run (shown in its trace, counted in its resource's traces), so none of them is added.
        other = next((s for s in found if (s.thread_id is not None and s.thread_id not in threads)
                      or (s.resource_id is not None and s.resource_id not in owners)), None)
        if other is not None:
            foreign[trace_id] = (f"thread {other.thread_id!r}" if other.thread_id is not None and
                                 other.thread_id not in threads else f"resource {other.resource_id!r}")
    new = [r for r in records if (r.trace_id, r.span_id) not in stored and r.trace_id not in foreign]
    for trace_id, whose in sorted(foreign.items()):
        n = sum(1 for r in records if r.trace_id == trace_id and (r.trace_id, r.span_id) not in stored)
        if n:
            report.notes.append(
                f"{n} span{'s' if n != 1 else ''} of trace {trace_id} not imported: that trace id is a run of {whose} "
                f"in {report.target}, and a file never adds spans to another thread's or resource's run "
                "(not even with overwrite).")
    if new and not report.dry_run:
        obs.write_spans(new)
    report.written["traces"] = report.written.get("traces", 0) + len(new)
    report.unchanged["traces"] = report.unchanged.get("traces", 0) + len(records) - len(new)


__all__ = ["SECTION_KEYS", "export_sections", "has_turn_records", "export_traces", "import_sections", "import_traces",
           "iter_trace_spans", "left_out", "section_counts"]
