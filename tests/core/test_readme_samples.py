"""The README's code samples, run as a user runs them: copied into a script of their own project."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from core import Memory, open_store
from core.llm import LoopbackServer, ScriptedModel

ROOT = Path(__file__).resolve().parents[2]


def readme_python_block(heading: str) -> str:
    """The first ```python block under the README heading ``heading``."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split(f"\n## {heading}\n", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None, f"no python block under {heading!r}"
    return match.group(1)


def run_script(script: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MEMORY_STUDIO_DB"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, str(script)], cwd=script.parent, env=env, capture_output=True,
                          text=True, timeout=300)


def test_the_engine_in_20_lines_runs_again_on_the_file_it_wrote(tmp_path: Path) -> None:
    # A user runs the sample, then runs it again: the second run used to stop at create_thread
    # (AlreadyExistsError: the thread the first run stored is still in .temp/memory.db).
    project = tmp_path / "myapp"
    project.mkdir()
    (project / "pyproject.toml").write_text('[project]\nname = "myapp"\nversion = "0"\n')
    code = readme_python_block("The engine in 20 lines")
    with LoopbackServer(ScriptedModel(["Rice, beans and no peanuts.", "Still no peanuts."])) as server:
        assert code.count('base_url="http://localhost:11434/v1"') == 1
        script = project / "engine.py"
        script.write_text(code.replace('base_url="http://localhost:11434/v1"', f'base_url="{server.base_url}"'))
        first = run_script(script)
        assert first.returncode == 0, first.stderr
        second = run_script(script)
        assert second.returncode == 0, second.stderr
    assert first.stdout.splitlines()[-1] == "Rice, beans and no peanuts."
    assert second.stdout.splitlines()[-1] == "Still no peanuts."
    store = open_store(project / ".temp" / "memory.db", read_only=True)
    try:
        texts = [m.text for m in Memory(store).recall(thread_id="groceries", resource_id="ada").messages]
    finally:
        store.close()
    assert texts == ["I'm allergic to peanuts", "What can I eat?", "Rice, beans and no peanuts.",
                     "What can I eat?", "Still no peanuts."]
