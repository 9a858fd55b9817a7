"""``memory-studio prompt`` and the Studio's prompt inspector show the same prompt for every demo thread.

Both ask ``core.agent_configs.agent_for_thread`` which agent's configuration applies and then call
``Memory.assemble``; this pins that they cannot drift apart again (they once chose agents by two
rules, and looked overrides up under two names).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from core import Memory, Message, open_store
from core.cli import main as cli_main
from studio.panes.prompt_inspector import PromptInspectorPane
from studio.selection import Selection

MESSAGE = "What do you remember about me?"


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from core.demo import seed_demo

    path = tmp_path_factory.mktemp("demo-agree") / "memory.db"
    with open_store(path) as store:
        seed_demo(store)
        store.tracer().flush(10)
        # Plus a thread no agent has answered yet, linked to its agent only by metadata (Mastra's
        # playground style): the rule the CLI once lacked.
        Memory(store).create_thread(resource_id="ada", thread_id="ada-new", title="New", metadata={"agent": "chef"})
        Memory(store).save_messages([Message.user("Any ideas for lunch?", thread_id="ada-new", resource_id="ada")])
    return path


def cli_prompt(db: Path, resource: str, thread: str) -> dict[str, Any]:
    out, err = io.StringIO(), io.StringIO()
    code = cli_main(["prompt", "--db", str(db), "--resource", resource, "--thread", thread, "--json", MESSAGE],
                    out=out, err=err)
    assert code == 0, err.getvalue()
    return json.loads(out.getvalue())  # type: ignore[no-any-return]


def test_cli_and_inspector_assemble_the_same_prompt_for_every_demo_thread(
    no_leaked_widgets: None, qtbot: Any, make_session: Any, demo_db: Path,
) -> None:
    with open_store(demo_db, read_only=True, create=False) as store:
        threads = [(s.thread.resource_id, s.thread.id) for s in store.memory.thread_summaries(None)]
    assert len(threads) >= 8  # every demo conversation (the observational-memory one too), and ada-new

    pane = PromptInspectorPane(make_session(demo_db))
    qtbot.addWidget(pane)
    pane.message_edit.setText(MESSAGE)
    seen_processors: set[str] = set()
    for resource, thread in threads:
        with qtbot.waitSignal(pane.assembled, timeout=60_000) as blocker:
            pane.set_selection(Selection(resource, thread))
        studio = json.loads(blocker.args[0].prompt.to_json())
        cli = cli_prompt(demo_db, resource, thread)
        assert pane.agent_combo.currentData() is not None, f"{thread}: the inspector found no agent"
        assert cli["messages"] == studio["messages"], thread
        assert cli["processors"] == studio["processors"], thread
        seen_processors.update(cli["processors"])
    # The comparison covered every memory processor the demo agents run.
    assert {"message-history", "working-memory", "semantic-recall", "observational-memory"} <= seen_processors
