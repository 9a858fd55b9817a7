"""Memory checks (issue 21 item 3): pinned facts about stored turns' prompts, tested offline.

A check rebuilds its turn exactly as replay does; a what-if (``--options``) merged over the recorded
options can break it (the allergy recalled with recall on is gone with recall off); the command
prints the relevant part of the prompt for a failure, writes JUnit, exits 0 / 1 / 2 (bad file), and
runs over an export imported into a temporary database, as CI would with a fixture.
"""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from core import Agent, Memory, MemoryOptions, open_store
from core.checks import Check, CheckFileError, CheckRunner, add_check, load_checks, parse_checks
from core.cli import main
from core.embedding import HashingEmbedder
from core.llm import ScriptedModel, ScriptedReply, tool_call

TEMPLATE = "# Diner\n- Name:\n- Allergies:\n"
DESSERT = "Any dessert ideas?"


def _seed(path: Path) -> None:
    """Ada mentions her peanut allergy in one thread, then asks for dessert in another: only recall
    (resource scope) brings the allergy into the dessert turn's prompt."""
    with open_store(path) as store:
        memory = Memory(store, MemoryOptions(last_messages=4, semantic_recall={"top_k": 2, "scope": "resource"},
                                             working_memory={"enabled": True, "template": TEMPLATE}),
                        embedder=HashingEmbedder(), name="chef")
        model = ScriptedModel([
            ScriptedReply(tool_calls=(tool_call("updateWorkingMemory", {"memory": "# Diner\n- Name: Ada\n- Allergies:\n"}),)),
            "Hi Ada.", "Noted, no peanuts: my peanut allergy list is updated.", "Try a mango sorbet.",
        ])
        agent = Agent("chef", instructions="You cook.", model=model, memory=memory, tracer=False)
        agent.generate("Hi, I'm Ada.", memory={"resource": "ada", "thread": "intro"})
        agent.generate("I am allergic to peanuts, remember the peanut allergy.", memory={"resource": "ada", "thread": "intro"})
        agent.generate(DESSERT, memory={"resource": "ada", "thread": "food"})


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "memory.db"
    _seed(path)
    return path


def _write(tmp_path: Path, checks: Any, name: str = "checks.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(checks), encoding="utf-8")
    return path


CHECKS = [
    {"name": "allergy reaches dessert", "thread": "food", "resource": "ada", "input": DESSERT,
     "prompt_contains": "peanut"},
    {"name": "name in working memory", "thread": "food", "turn": 1, "working_memory_contains": "Name: Ada"},
    {"name": "the allergy is recalled", "thread": "food", "turn": -1, "recalled": "allergic to peanuts"},
    {"name": "small prompt", "thread": "food", "turn": 1, "max_tokens": 5000,
     "prompt_excludes": ["mango sorbet", "You are a pirate"]},
]


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_checks_pass_then_a_what_if_without_recall_breaks_one(tmp_path: Path, db: Path) -> None:
    checks = _write(tmp_path, CHECKS)
    code, out, _err = run("test", str(checks), "--db", str(db))
    assert code == 0, out
    assert out.count("PASS") == 4 and "4 passed, 0 failed" in out

    junit = tmp_path / "report.xml"
    code, out, _err = run("test", str(checks), "--db", str(db), "--options", '{"semantic_recall": false}',
                          "--junit", str(junit))
    assert code == 1
    assert "FAIL  allergy reaches dessert" in out and "FAIL  the allergy is recalled" in out
    assert "PASS  name in working memory" in out
    # The relevant part of the prompt: what is in it, and why recall added nothing.
    assert "the prompt does not contain 'peanut'" in out and "(semantic recall is off in these options)" in out
    assert "recall added nothing" in out
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "4" and suite.get("failures") == "2" and suite.get("errors") == "0"
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert cases["allergy reaches dessert"].find("failure") is not None
    failure = cases["allergy reaches dessert"].find("failure")
    assert failure is not None and failure.get("type") == "prompt_contains" and "food" in (failure.text or "")
    assert cases["name in working memory"].find("failure") is None


def test_a_failing_excludes_check_shows_where_the_text_is(tmp_path: Path, db: Path) -> None:
    checks = _write(tmp_path, [{"name": "never the allergy", "thread": "food", "turn": 1, "prompt_excludes": "peanut"}])
    code, out, _err = run("test", str(checks), "--db", str(db))
    assert code == 1 and "the prompt contains 'peanut'" in out
    assert "»peanut«" in out and "semantic-recall" in out


def test_a_check_that_cannot_run_is_an_error_and_exits_1(tmp_path: Path, db: Path) -> None:
    checks = _write(tmp_path, [
        {"name": "no such thread", "thread": "nope", "turn": 1, "prompt_contains": "x"},
        {"name": "no such input", "thread": "food", "input": "Something never said", "prompt_contains": "x"},
        {"name": "wrong owner", "thread": "food", "resource": "bob", "turn": 1, "prompt_contains": "x"},
        {"name": "turn out of range", "thread": "food", "turn": 9, "prompt_contains": "x"},
    ])
    junit = tmp_path / "r.xml"
    code, out, _err = run("test", str(checks), "--db", str(db), "--junit", str(junit))
    assert code == 1 and out.count("ERROR") == 4 and "0 passed, 0 failed, 4 could not run" in out
    assert "belongs to resource 'ada'" in out and "has 1 turn(s)" in out
    assert ET.parse(junit).getroot().get("errors") == "4"


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    ('{"name": "x"}', "a list of checks"),
    ('[{"name": "x", "thread": "food", "turn": 1, "prompt_contain": "typo"}]', "unknown key"),
    ('[{"thread": "food", "turn": 1, "prompt_contains": "x"}]', "needs a 'name'"),
    ('[{"name": "x", "thread": "food", "prompt_contains": "x"}]', "either 'input'"),
    ('[{"name": "x", "thread": "food", "turn": 1}]', "nothing to check"),
    ('[{"name": "x", "thread": "food", "turn": 0, "max_tokens": 5}]', "whole number"),
    ('[{"name": "x", "thread": "food", "turn": 1, "max_tokens": 5}, {"name": "x", "thread": "food", "turn": 1, '
     '"max_tokens": 9}]', "two checks are named"),
])
def test_a_bad_checks_file_exits_2_and_says_what_is_wrong(tmp_path: Path, db: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    code, out, err = run("test", str(path), "--db", str(db))
    assert code == 2 and message in err and str(path) in err


def test_bad_options_and_a_missing_file_exit_2(tmp_path: Path, db: Path) -> None:
    checks = _write(tmp_path, CHECKS)
    code, _out, err = run("test", str(checks), "--db", str(db), "--options", "{oops")
    assert code == 2 and "--options is not valid JSON" in err
    code, _out, err = run("test", str(checks), "--db", str(db), "--options", '{"no_such_option": 1}')
    assert code == 2 and "no_such_option" in err
    code, _out, err = run("test", str(tmp_path / "missing.json"), "--db", str(db))
    assert code == 2 and "no such checks file" in err


def test_checks_run_over_an_imported_export(tmp_path: Path, db: Path) -> None:
    export = tmp_path / "fixture.json"
    code, _out, err = run("export", "--db", str(db), "--resource", "ada", "-o", str(export))
    assert code == 0, err
    checks = _write(tmp_path, CHECKS)
    code, out, _err = run("test", str(checks), "--export", str(export))
    assert code == 0 and "4 passed" in out and "(imported)" in out
    code, out, _err = run("test", str(checks), "--export", str(export), "--options", '{"semantic_recall": false}')
    assert code == 1 and "FAIL  the allergy is recalled" in out


def test_yaml_checks_file(tmp_path: Path, db: Path) -> None:
    path = tmp_path / "checks.yaml"
    path.write_text("- name: allergy reaches dessert\n  thread: food\n  input: Any dessert ideas?\n"
                    "  prompt_contains: peanut\n", encoding="utf-8")
    code, out, _err = run("test", str(path), "--db", str(db))
    assert code == 0 and "PASS  allergy reaches dessert" in out


def test_runner_what_if_and_rebuild_are_replays(db: Path) -> None:
    """The runner's prompt is the replayed one (recorded, matching), and a what-if that changes recall's
    options searches again with the embedder it is given."""
    checks = parse_checks(CHECKS)
    with open_store(db, read_only=True) as store:
        results = CheckRunner(store).run_all(checks)
        assert [r.status for r in results] == ["pass"] * 4
        assert all(r.replay == "recorded (matches its record)" and r.turn_number == 1 for r in results)
        wider = CheckRunner(store, options={"semantic_recall": {"top_k": 1}}, embedder=HashingEmbedder())
        assert wider.run(checks[0]).status == "pass"
        assert store.db.write_transactions == 0  # checks never write


def test_pinned_checks_are_appended_with_unique_names(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "checks.json"
    first = add_check(path, Check("keep the allergy", "food", resource="ada", input=DESSERT, prompt_contains=("peanut",)))
    second = add_check(path, Check("keep the allergy", "food", turn=2, prompt_excludes=("satay",)))
    assert (first.name, second.name) == ("keep the allergy", "keep the allergy (2)")
    loaded = load_checks(path)
    assert [c.to_dict() for c in loaded] == [first.to_dict(), second.to_dict()]
    assert json.loads(path.read_text())[1] == {"name": "keep the allergy (2)", "thread": "food", "turn": 2,
                                               "prompt_excludes": "satay"}
    with pytest.raises(CheckFileError):
        add_check(path, Check("", "food", turn=1, prompt_contains=("x",)))
