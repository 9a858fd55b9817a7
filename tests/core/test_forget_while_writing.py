"""``forget`` while the user's agents keep writing: the check afterwards tells rows that were there when the forget
committed (it failed to remove them: exit 1) from rows those agents wrote since (not a failure, said plainly).

Before, every row naming the resource counted as left: an agent's next turn (its turn record, keyword docs,
working-memory versions of a new thread) made the command say "STILL NAMING IT" and exit 1, though nothing of
what was forgotten was left. The writer here is another connection (another thread, as another process would),
and it writes at a fixed point: after the forget's commit, before its check (``check=``), never by timing.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable, Sequence

import pytest

from core import Agent, Memory, MemoryOptions, open_store
from core.edits.forget import forget_resource
from core.edits.forget_check import AtCommit, CheckResult, check_after_forget
from core.embedding import HashingEmbedder
from core.llm import ScriptedModel, ScriptedReply, tool_call

pytestmark = pytest.mark.backends

R = "adawriting5c1"  # (one word: the keyword index's vocabulary lists it as a term of what names it)
OTHER = "bob-untouched-2"
TEMPLATE = "# User\n- Name:\n- Note:\n"


def _turns(db: Path | str, thread: str, resource: str = R, text: str = "KIWI-0042") -> None:
    """An agent of ``resource`` running two turns on ``thread`` on its own connection (a running process):
    messages, recall (vectors, keyword docs), working memory (its versions), turn records."""
    store = open_store(db)
    try:
        memory = Memory(store, MemoryOptions(last_messages=6, semantic_recall={"top_k": 2, "scope": "resource"},
                                             working_memory={"enabled": True, "template": TEMPLATE, "scope": "thread"}),
                        embedder=HashingEmbedder(), name="main")
        model = ScriptedModel([
            ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": f"# User\n- Name: Ada\n- Note: {text}\n"}),)),
            f"Noted {text}.",
            f"Still {text}.",
        ])
        agent = Agent("main", instructions="Be brief.", model=model, memory=memory)
        agent.generate(f"Remember {text}.", memory={"resource": resource, "thread": thread})
        agent.generate("And again?", memory={"resource": resource, "thread": thread})
    finally:
        store.close()


def _in_another_thread(job: Callable[[], None]) -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            job()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            errors.append(exc)

    writer = threading.Thread(target=run)
    writer.start()
    writer.join()
    if errors:
        raise errors[0]


def _written_after_commit(job: Callable[[], None]) -> Callable[[Any, Sequence[str], AtCommit], CheckResult]:
    """The forget's check, with ``job`` run by another connection once the forget has committed."""
    def check(store: Any, values: Sequence[str], committed: AtCommit) -> CheckResult:
        _in_another_thread(job)
        return check_after_forget(store, values, committed)
    return check


def test_rows_the_users_agents_write_after_the_forget_are_reported_apart_not_as_left(db_path: Path | str) -> None:
    _turns(db_path, f"{R}-t1")
    _turns(db_path, f"{OTHER}-t1", resource=OTHER)
    with open_store(db_path) as store:
        # Another of the user's agents goes on writing once the forget committed: the same thread again (its id
        # comes back) and a new one.
        report = forget_resource(store, R, check=_written_after_commit(
            lambda: (_turns(db_path, f"{R}-t1"), _turns(db_path, f"{R}-t9", text=f"{R} HERE"))))
        assert report.removed["messages"] > 0 and report.complete
        assert report.leftovers == {}, "nothing of what was forgotten is left"
        since = report.written_since
        for table in ("mastra_messages", "mastra_threads", "memory_studio_turns", "memory_studio_wm_versions",
                      "memory_studio_fts_vocab"):  # (libSQL's keyword docs are their FTS5 rows: ``0031``)
            if table.startswith("memory_studio_fts") and not store.capabilities.implicit_rowid:
                continue  # (Postgres keeps keyword terms in the messages' own tsvector)
            assert since.get(table, 0) > 0, f"the agent's new rows in {table} are reported: {since}"
        lines = "\n".join(report.summary_lines())
        assert "STILL NAMING IT" not in lines
        assert "written since the forget committed: " in lines and "mastra_threads (2)" in lines
        total = sum(since.values())
        assert f"note: {total:,} rows written since by running agents — not a failure; stop them and run forget again " \
               "to remove those too" in lines
        # What they wrote is the user's: forget again removes it, and then nothing is found at all.
        again = forget_resource(store, R)
        assert again.removed["threads"] == 2 and again.leftovers == {} and again.written_since == {}
        assert Memory(store).list_threads(resource_id=OTHER).total == 1


def _notes(conn: Any) -> None:
    conn.exec_driver_sql("CREATE TABLE app_notes (id INTEGER PRIMARY KEY, body TEXT)")


def test_a_row_left_at_the_commit_stays_a_failure_even_when_an_agent_updates_it_since(db_path: Path | str) -> None:
    """Another program's table naming a thread in a column forget does not know: forget cannot remove its row,
    which is a real failure, also when a writer updates that row after the commit (its text changes, it is not
    new) and adds a new row naming the thread (that one is new)."""
    thread = f"{R}-t1"
    with open_store(db_path) as store:
        Memory(store).create_thread(resource_id=R, thread_id=thread)
        with store.db.write() as conn:
            _notes(conn)
            conn.exec_driver_sql("INSERT INTO app_notes (id, body) VALUES (?, ?)", (7, f'{{"thread": "{thread}"}}'))
            conn.exec_driver_sql("INSERT INTO app_notes (id, body) VALUES (?, ?)", (8, '{"thread": "another"}'))

        def writer() -> None:
            with open_store(db_path) as other, other.db.write() as conn:
                conn.exec_driver_sql("UPDATE app_notes SET body = body || ' (seen)' WHERE id = 7")
                conn.exec_driver_sql("INSERT INTO app_notes (id, body) VALUES (?, ?)", (9, f'{{"thread": "{thread}"}}'))

        report = forget_resource(store, R, check=_written_after_commit(writer))
    assert report.leftovers == {"app_notes": 1}, "the row there at the commit is left, updated or not"
    assert report.written_since == {"app_notes": 1}, "the row written after it is new"
    lines = "\n".join(report.summary_lines())
    assert "STILL NAMING IT: app_notes (1)" in lines and "written since the forget committed: app_notes (1)" in lines


def test_the_command_exits_0_when_only_rows_written_since_name_the_resource() -> None:
    """The command line's exit: 1 for a row left, 0 when the only rows naming it came after (the report's
    ``leftovers`` decide it; rows written since are said, not counted as failure)."""
    from core.edits import commands
    from core.edits.forget import ForgetReport

    ok = ForgetReport(R, [R], [], removed={"threads": 1}, written_since={"memory_studio_turns": 2})
    bad = ForgetReport(R, [R], [], removed={"threads": 1}, leftovers={"app_notes": 1}, written_since={"x": 1})
    assert commands.exit_code(ok) == 0 and commands.exit_code(bad) == 1
    assert "2 rows written since by running agents" in "\n".join(ok.summary_lines())


def test_postgres_a_row_another_session_commits_before_the_forget_commits_counts_as_left(
        db_path: Path | str, backend: str) -> None:
    """Postgres runs writers beside the forget's transaction: a thread of the resource another session commits
    while the forget is still open was there when the forget committed, so it is a row left (a failure), not one
    written since; one committed after the commit is written since."""
    if backend != "postgres":
        pytest.skip("a libSQL file has one writer: the forget holds it from its first read to its commit")
    from core.edits.forget_check import at_commit

    ids = [R, f"{R}-t1", f"{R}-t2", f"{R}-t3"]

    def new_thread(thread: str) -> Callable[[], None]:
        def make() -> None:
            with open_store(db_path) as other:
                Memory(other).create_thread(resource_id=R, thread_id=thread)
        return make

    with open_store(db_path) as store:
        Memory(store).create_thread(resource_id=R, thread_id=f"{R}-t1")
        with store.db.write() as conn:
            conn.exec_driver_sql('DELETE FROM mastra_threads WHERE "resourceId" = ?', (R,))
            _in_another_thread(new_thread(f"{R}-t2"))  # committed while the forget's transaction is open
            committed = at_commit(conn, ids)
        _in_another_thread(new_thread(f"{R}-t3"))  # after its commit
        result = check_after_forget(store, ids, committed)
    assert result.left == {"mastra_threads": 1} and result.since == {"mastra_threads": 1}


@pytest.mark.libsql_only
def test_the_trace_file_tells_spans_left_from_spans_written_since(db_path: Path | str) -> None:
    """The trace file beside a libSQL database (DuckDB) is checked too, by what it held when its forget held it:
    a span naming the thread only in its input (another trace, which forget does not take) is left; a run the
    user's agent traced after the forget is written since."""
    from datetime import datetime, timezone

    from core.traces.spans import SpanRecord

    thread = f"{R}-t1"
    at = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)

    def run(trace: str, **fields: Any) -> SpanRecord:
        return SpanRecord(trace_id=trace, span_id=f"{trace}-root", name="agent run: 'main'", span_type="agent_run",
                          entity_name="main", started_at=at, ended_at=at, **fields)

    with open_store(db_path) as store:
        Memory(store).create_thread(resource_id=R, thread_id=thread)
        store.observability.write_spans([
            run("gone", thread_id=thread, resource_id=R),
            run("quotes-it", thread_id="another", resource_id=OTHER, input={"asked about": thread}),
            run("kept", thread_id="another", resource_id=OTHER)])

        def writer() -> None:
            with open_store(db_path) as other:
                other.observability.write_spans([run("new", thread_id=f"{R}-t9", resource_id=R)])

        report = forget_resource(store, R, check=_written_after_commit(writer))
        name = f"traces ({store.observability.path.name})"
    assert report.removed[name] == 1 and report.complete
    assert report.leftovers == {name: 1} and report.written_since == {name: 1}
