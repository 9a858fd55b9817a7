"""The default database is anchored on the calling code's project, not the working directory
(issue 9, item 22): an agent started outside its project tree writes the file the Studio reads."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from core.cli import main as cli_main
from core.storage.paths import caller_file, resolve_db_path

AGENT = textwrap.dedent("""
    import json
    from core import Memory, Message

    memory = Memory()  # no store given: open_store() picks the file
    memory.save_messages([Message.user("hello", thread_id="t", resource_id="r")])
    where = memory.store.location
    print(json.dumps({"path": str(where.path), "how": where.how, "reason": where.reason}))
    memory.store.close()
""")


def _project(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    return folder


def _run(script: Path, cwd: Path, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MEMORY_STUDIO_DB"}
    env["XDG_DATA_HOME"] = str(tmp_path / "xdg")  # the user data folder, kept inside the test
    done = subprocess.run([sys.executable, str(script)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_an_agent_started_outside_its_project_writes_its_projects_file(tmp_path):
    project = _project(tmp_path / "project")
    script = project / "agents" / "agent.py"
    script.parent.mkdir()
    script.write_text(AGENT)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = _run(script, elsewhere, tmp_path)
    assert result["path"] == str(project / ".temp" / "memory.db") and result["how"] == "caller"
    assert str(script) in result["reason"] and str(project) in result["reason"]
    assert not (tmp_path / "xdg").exists()
    # Started from inside the project, it is the same file.
    assert _run(script, project / "agents", tmp_path)["path"] == result["path"]


def test_installed_code_is_not_a_project_so_the_working_directory_decides(tmp_path):
    vendored = _project(tmp_path / "vendor") / "lib" / "python3.11" / "site-packages" / "pkg" / "agent.py"
    vendored.parent.mkdir(parents=True)
    vendored.write_text(AGENT)
    work = _project(tmp_path / "work")
    result = _run(vendored, work, tmp_path)
    assert result["path"] == str(work / ".temp" / "memory.db") and result["how"] == "project"


def test_resolution_order_with_a_caller(tmp_path):
    caller_project = _project(tmp_path / "a")
    cwd_project = _project(tmp_path / "b")
    caller = caller_project / "run.py"
    env_file = tmp_path / "env.db"
    assert resolve_db_path(None, env={"MEMORY_STUDIO_DB": str(env_file)}, cwd=cwd_project,
                           caller=caller).how == "environment"
    chosen = resolve_db_path(None, env={}, cwd=cwd_project, caller=caller)
    assert chosen.path == caller_project / ".temp" / "memory.db" and chosen.how == "caller"
    loose = tmp_path / "loose" / "run.py"  # no project above the caller: the working directory decides
    assert resolve_db_path(None, env={}, cwd=cwd_project, caller=loose).how == "project"
    assert resolve_db_path(None, env={}, cwd=Path("/"), caller=loose).how == "user-data"
    assert resolve_db_path(str(env_file), env={}, caller=caller).how == "explicit"


def test_the_caller_is_the_first_frame_outside_the_engine():
    assert caller_file() == Path(__file__).resolve()


def test_where_prints_the_file_and_why(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMORY_STUDIO_DB", str(tmp_path / "env.db"))
    out = io.StringIO()
    assert cli_main(["where"], out=out, err=io.StringIO()) == 0
    text = out.getvalue()
    assert text.splitlines()[0] == str(tmp_path / "env.db")
    assert "MEMORY_STUDIO_DB is set" in text and "observability.duckdb" in text
    out = io.StringIO()
    assert cli_main(["where", "--db", str(tmp_path / "x.db")], out=out, err=io.StringIO()) == 0
    assert "given explicitly" in out.getvalue()
