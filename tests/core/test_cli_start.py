"""How much ``memory-studio`` loads before a command runs.

Building the parser used to import SQLAlchemy, the memory engine, the transfer and check machinery and
the gateway (0.7-0.9 s of CPU), so ``where``, ``vacuum`` or ``--help`` spent most of their time starting.
Each command now imports its own machinery when it runs; these tests look at ``sys.modules`` in a fresh
interpreter (no timing).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import textwrap
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from core import cli
from core.cli import build_parser, main as cli_main

ROOT = Path(__file__).resolve().parents[2]

# What no command needs in order to be parsed: the database layer, numpy, DuckDB, the engine, and each
# command's own machinery.
HEAVY = ("sqlalchemy", "numpy", "duckdb", "jsonschema", "core.memory", "core.agent_configs", "core.assembly",
         "core.transfer.export", "core.transfer.importer", "core.checks.model", "core.checks.runner",
         "core.gateway.guard", "core.gateway.cli", "core.gateway.tokens", "core.edits.forget",
         "core.storage.memory_store", "asyncio")

LOADED = """
import json, sys
{code}
heavy = {heavy!r}
print(json.dumps(sorted(m for m in sys.modules if any(m == h or m.startswith(h + ".") for h in heavy))))
"""


def loaded_after(code: str) -> list[str]:
    script = LOADED.format(code=textwrap.dedent(code), heavy=HEAVY)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout.splitlines()[-1]))


def test_building_the_parser_loads_no_command_machinery() -> None:
    assert loaded_after("import core.cli; core.cli.build_parser()") == []


def test_help_and_where_load_no_command_machinery(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    loaded = loaded_after(f"""
        import contextlib, io
        from core.cli import main
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                main(["--help"])
            except SystemExit:
                pass
        assert main(["where", "--db", {str(db)!r}], out=io.StringIO()) == 0
    """)
    assert loaded == []


def test_a_command_still_loads_what_it_runs(tmp_path: Path) -> None:
    # The check above could pass by looking at the wrong names: `threads` does need the database layer.
    db = tmp_path / "memory.db"
    loaded = loaded_after(f"""
        import io
        from core.cli import main
        main(["demo", "--db", {str(db)!r}], out=io.StringIO())
    """)
    assert "sqlalchemy" in loaded and "core.memory" in loaded


def reference_subparsers() -> dict[str, argparse.ArgumentParser]:
    """``serve``, ``mcp`` and ``tokens`` built by their own modules, as ``build_parser`` did before it filled
    them late."""
    from core.gateway.cli import add_serve_parser
    from core.gateway.tokens_cli import add_tokens_parser
    from core.mcp_server.cli import add_mcp_parser

    parser = cli._Parser(prog="memory-studio")
    sub = parser.add_subparsers(dest="command", parser_class=cli._Parser)
    add_serve_parser(sub)
    add_mcp_parser(sub, lambda p: p.add_argument("--db", help="database path (default: $MEMORY_STUDIO_DB, else "
                                                              "<project>/.temp/memory.db; `memory-studio where` "
                                                              "shows which)"))
    add_tokens_parser(sub)
    helps = {a.dest: a.help for a in sub._choices_actions}
    # the one-line helps `memory-studio --help` lists
    assert helps == {"serve": cli.SERVE_HELP, "mcp": cli.MCP_HELP, "tokens": cli.TOKENS_HELP}
    return dict(sub.choices)


@pytest.mark.parametrize("argv", [["serve"], ["mcp"], ["tokens"], ["tokens", "new"]])
def test_a_command_filled_in_late_has_the_help_and_flags_its_module_gives(argv: list[str]) -> None:
    reference = reference_subparsers()[argv[0]]
    for word in argv[1:]:  # a command's own subcommand (`tokens new`)
        reference = next(a for a in reference._actions if isinstance(a, argparse._SubParsersAction)).choices[word]
    out = io.StringIO()
    with pytest.raises(SystemExit), redirect_stdout(out):
        build_parser().parse_args([*argv, "--help"])
    assert out.getvalue() == reference.format_help()


def test_a_command_filled_in_late_parses_its_flags() -> None:
    args = build_parser().parse_args(["serve", "--model", "ollama/llama3.1", "--port", "0"])
    assert (args.command, args.model, args.port) == ("serve", "ollama/llama3.1", 0)
    args = build_parser().parse_args(["mcp", "--resource", "ada", "--db", "x.db"])
    assert (args.command, args.resource, args.db) == ("mcp", "ada", "x.db")
    args = build_parser().parse_args(["tokens", "new", "--name", "app", "--resource", "ada"])
    assert (args.command, args.tokens_action, args.name, args.resource) == ("tokens", "new", "app", ["ada"])
    err = io.StringIO()
    assert cli_main(["serve", "--model", "a/b", "--prot", "1"], out=io.StringIO(), err=err) == 2
    assert "(did you mean --port?)" in err.getvalue()


def test_an_expected_error_is_still_one_line(tmp_path: Path) -> None:
    # The error classes `main` reports without a traceback are imported only when one reaches it.
    err = io.StringIO()
    assert cli_main(["threads", "--db", str(tmp_path)], out=io.StringIO(), err=err) == 1
    assert err.getvalue().startswith("error: ") and err.getvalue().count("\n") == 1
