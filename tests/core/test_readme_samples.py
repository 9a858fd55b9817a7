"""The README's and DEPLOYMENT.md's code samples, run as a user runs them: copied into a script of their own
project, offline. And what the docs name is what the code has: each command's flags, the serve table, the
variables and extras, the links."""

from __future__ import annotations

import argparse
import io
import os
import re
import shlex
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path
from typing import Any, Iterator

import pytest

from core import Memory, MemoryOptions, OptionsError, open_store
from core.cli import build_parser
from core.cli import main as cli_main
from core.llm import LoopbackServer, ScriptedModel
from core.llm.providers import PROVIDERS

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


# ---------------------------------------------------------------------------------------------------------------
# The other samples a user copies: the memory checks' worked example, the Mastra port, the Agents SDK session
# and DEPLOYMENT.md's agents module with its OpenAI client. Each runs as written, with the hosted model it names
# replaced by the loopback server (offline); what is adapted is said beside it.


def doc_section(doc: str, heading: str) -> str:
    """The text under the heading ``heading`` of ``doc`` (a path under the repository), to the next heading of
    the same or a higher level."""
    lines = (ROOT / doc).read_text(encoding="utf-8").split("\n")
    for start, line in enumerate(lines):
        match = re.match(r"(#+) (.*)$", line)
        if match and match.group(2) == heading:
            level = len(match.group(1))
            break
    else:
        raise AssertionError(f"no heading {heading!r} in {doc}")
    body: list[str] = []
    fenced = False
    for line in lines[start + 1:]:
        fenced ^= line.startswith("```")
        heading_match = None if fenced else re.match(r"(#+) ", line)
        if heading_match and len(heading_match.group(1)) <= level:
            break
        body.append(line)
    return "\n".join(body)


def code_blocks(section: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", section, re.S | re.M)


def cli(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli_main(list(argv), out=out, err=err)
    return code, out.getvalue() + err.getvalue()


def test_the_memory_checks_worked_example_prints_what_the_readme_shows(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # The README shows a console session on the demo data; every line of it, exit code included, is what the
    # commands print today (only the database's folder differs). The CI recipe below it runs as written.
    section = doc_section("README.md", "Memory checks in CI")
    checks, = (block for block in code_blocks(section, "json") if "the allergy reaches the party" in block)
    console, = code_blocks(section, "console")
    ci, = code_blocks(section, "sh")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MEMORY_STUDIO_EMBEDDER", raising=False)  # the README's figures are the default model's
    (tmp_path / "checks.json").write_text(checks, encoding="utf-8")
    assert cli("demo", "--db", "demo.db")[0] == 0

    sessions = re.split(r"^\$ ", console, flags=re.M)[1:]
    assert len(sessions) == 3
    code = None
    for session in sessions:
        command, _, shown = session.partition("\n")
        expected = shown.replace("/home/me/project/demo.db", str(tmp_path / "demo.db"))
        if command == "echo $?":
            assert f"{code}\n" == expected
            continue
        argv = shlex.split(command)
        assert argv[0] == "memory-studio"
        code, printed = cli(*argv[1:])
        assert printed == expected, command
    assert code == 1 and (tmp_path / "report.xml").is_file()

    lines = [line for line in ci.splitlines() if line.strip()]
    assert len(lines) == 3
    shell = subprocess.run(["bash", "-ec", lines[0]], cwd=tmp_path, capture_output=True, text=True)
    assert shell.returncode == 0, shell.stderr
    for line in lines[1:]:
        argv = shlex.split(line, comments=True)
        assert argv[0] == "memory-studio"
        code, printed = cli(*argv[1:])
        assert code == 0, printed
    assert printed.splitlines()[-1] == "3 passed, 0 failed, 0 could not run"
    assert (tmp_path / "memory-checks.xml").is_file()


def test_the_porting_from_mastra_sample_reads_mastras_options() -> None:
    section = doc_section("README.md", "Porting from Mastra")
    sample = code_blocks(section, "python")[0]
    names: dict[str, Any] = {"MemoryOptions": MemoryOptions}  # the sample's one name it does not import
    exec(sample, names)
    options = names["options"]
    assert options.last_messages == 20 and options.generate_title
    assert options.semantic_recall.top_k == 3 and options.semantic_recall.scope == "resource"
    assert options.observational_memory.message_tokens == 20_000
    assert options.observational_memory.observer_model == "openai/gpt-4o-mini"
    assert MemoryOptions.from_mastra(options.to_mastra()) == options  # "back to Mastra's shape"
    # "A key that is neither Mastra's nor ours is refused with the nearest known name"
    quoted = re.search(r'"(Unknown Mastra memory option .*?) …"', " ".join(section.split()))
    assert quoted is not None and '`"semanticRecall": {"topk": 3}`' in section
    with pytest.raises(OptionsError) as refused:
        MemoryOptions.from_mastra({"semanticRecall": {"topk": 3}})
    assert str(refused.value).startswith(quoted.group(1))


def test_the_agents_sdk_sample_runs_in_a_script_both_ways(tmp_path: Path) -> None:
    # The README's session sample, in the script its next paragraph describes: the lines in `async def main()`
    # under asyncio.run, then the same call with Runner.run_sync. Adapted: the SDK's own OpenAI client goes to
    # the loopback server (OPENAI_BASE_URL) over Chat Completions, which the loopback speaks, without the
    # SDK's tracing upload.
    sample = readme_python_block("With the OpenAI Agents SDK")
    assert sample.count("result = await Runner.run(") == 1
    project = tmp_path / "myapp"
    project.mkdir()
    (project / "pyproject.toml").write_text('[project]\nname = "myapp"\nversion = "0"\n')
    script = "\n".join([
        "import asyncio",
        "from agents import set_default_openai_api, set_tracing_disabled",
        "set_default_openai_api('chat_completions')",
        "set_tracing_disabled(True)",
        "async def main():",
        textwrap.indent(sample, "    "),
        "    print(result.final_output)",
        "asyncio.run(main())",
        sample.replace("result = await Runner.run(", "result = Runner.run_sync("),
        "print(result.final_output)",
    ])
    (project / "session.py").write_text(script)
    with LoopbackServer(ScriptedModel(["Rice and beans.", "Still rice and beans."])) as server:
        env = {k: v for k, v in os.environ.items() if k != "MEMORY_STUDIO_DB"}
        env.update(PYTHONPATH=str(ROOT), OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="sk-loopback")
        run = subprocess.run([sys.executable, "session.py"], cwd=project, env=env, capture_output=True, text=True,
                             timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-2:] == ["Rice and beans.", "Still rice and beans."]
    store = open_store(project / ".temp" / "memory.db", read_only=True)
    try:
        texts = [m.text for m in Memory(store).recall(thread_id="groceries", resource_id="ada").messages]
    finally:
        store.close()
    assert texts == ["What can I eat?", "Rice and beans.", "What can I eat?", "Still rice and beans."]


def test_the_deployment_agents_module_serves_the_openai_client_sample(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # DEPLOYMENT.md: the agents module, the serve command beside it and the OpenAI client sample, as written.
    # Adapted: the module's database path (/srv/agents/ is not writable here), its hosted model's base URL (the
    # loopback server) and the port (0: a free one, as the table says).
    section = doc_section("docs/DEPLOYMENT.md", "Serving agents: `memory-studio serve`")
    module, client_sample = code_blocks(section, "python")[:2]
    command, = code_blocks(section, "sh")[:1]
    package = tmp_path / "myapp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    with LoopbackServer(ScriptedModel(["It left the depot today.", "It arrives tomorrow."])) as model_server:
        assert module.count('open_store("/srv/agents/memory.db")') == 1
        assert module.count('OpenAICompatibleModel("gpt-4o-mini")') == 1
        (package / "agents.py").write_text(
            module.replace('open_store("/srv/agents/memory.db")', f'open_store({str(tmp_path / "agents.db")!r})')
            .replace('OpenAICompatibleModel("gpt-4o-mini")',
                     f'OpenAICompatibleModel("gpt-4o-mini", base_url="{model_server.base_url}", api_key="sk-x")'))
        words = shlex.split(command.replace("--port 8787", "--port 0"))
        assignment, program, *flags = words
        assert program == "memory-studio" and assignment.startswith("MEMORY_STUDIO_GATEWAY_TOKEN=")
        name, _, token = assignment.partition("=")
        env = {k: v for k, v in os.environ.items() if k != "MEMORY_STUDIO_DB"}
        env.update({name: token, "PYTHONPATH": str(ROOT)})  # run "from the folder that holds myapp/"
        with subprocess.Popen([sys.executable, "-m", "studio.cli", *flags, "--log-level", "warning"], cwd=tmp_path,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as gateway:
            try:
                assert gateway.stdout is not None and gateway.stderr is not None
                line = gateway.stdout.readline()  # printed once the socket listens
                assert " on http://127.0.0.1:" in line, gateway.stderr.read()
                url = line.split(" on ", 1)[1].split(" ", 1)[0]
                assert client_sample.count('base_url="http://127.0.0.1:8787/v1", api_key="change-me"') == 1
                assert token == "change-me"
                exec(client_sample.replace("http://127.0.0.1:8787", url), {})
            finally:
                gateway.terminate()
                gateway.communicate(timeout=60)
    printed = capsys.readouterr().out
    assert printed.startswith("It left the depot today. CompletionUsage(")
    assert printed.endswith("It arrives tomorrow.")
    store = open_store(tmp_path / "agents.db", read_only=True)
    try:
        thread = Memory(store).get_thread("order-4711")
        texts = [m.text for m in Memory(store).recall(thread_id="order-4711", resource_id="customer-42").messages]
    finally:
        store.close()
    assert thread is not None and thread.resource_id == "customer-42"
    assert texts == ["My order has not arrived.", "It left the depot today.", "Any news?", "It arrives tomorrow."]


def test_the_opentelemetry_sample_writes_its_traces_beside_the_database_wherever_it_starts(tmp_path: Path) -> None:
    # DEPLOYMENT.md's "compose exporters yourself" sample, in a module of a project, started from another folder (a
    # service manager's working directory). It wrote `.temp/observability.duckdb` under that folder, where neither
    # the Studio nor `memory-studio traces` look. Adapted: the collector's address (an OTLP receiver here), and the
    # model and a turn added around it (the sample leaves `model` to the reader).
    from tests.core.test_traces_otel import Receiver

    sample = code_blocks(doc_section("docs/DEPLOYMENT.md", "OpenTelemetry export"), "python")[0]
    project, elsewhere = tmp_path / "myapp", tmp_path / "service-cwd"
    (project / "app").mkdir(parents=True)
    elsewhere.mkdir()
    (project / "pyproject.toml").write_text('[project]\nname = "myapp"\nversion = "0"\n')
    receiver = Receiver()
    try:
        assert sample.count('"http://collector:4318"') == 1
        script = project / "app" / "traced.py"
        script.write_text("from core.llm import ScriptedModel\nmodel = ScriptedModel(['Hello Ada.'])\n"
                          + sample.replace('"http://collector:4318"', repr(receiver.url))
                          + "agent.generate('Hi, I am Ada', memory={'resource': 'ada', 'thread': 't1'})\n"
                            "assert tracer.flush(30)\nstore.close()\n")
        env = {k: v for k, v in os.environ.items() if k != "MEMORY_STUDIO_DB" and not k.startswith("OTEL_")}
        env["PYTHONPATH"] = str(ROOT)
        done = subprocess.run([sys.executable, str(script)], cwd=elsewhere, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        sent = {span.trace_id.hex() for _resource, span in receiver.spans()}
    finally:
        receiver.close()
    assert not (elsewhere / ".temp").exists()
    import duckdb

    beside = project / ".temp" / "observability.duckdb"  # where `memory-studio where` says the traces are
    with duckdb.connect(str(beside), read_only=True) as con:
        written = {row[0] for row in con.execute('SELECT DISTINCT "traceId" FROM mastra_ai_spans').fetchall()}
    assert len(written) == 1 and written == sent


#: Python blocks of the docs no test runs, and why: each other block is run above, as a user runs it.
NOT_RUN = {("README.md", "Running on PostgreSQL"): "one call's fragment (`messages=[...]`) in a paragraph"}
RUN = {("README.md", "The engine in 20 lines"), ("README.md", "With the OpenAI Agents SDK"),
       ("README.md", "Porting from Mastra"), ("docs/DEPLOYMENT.md", "Serving agents: `memory-studio serve`"),
       ("docs/DEPLOYMENT.md", "OpenAI-compatible chat"), ("docs/DEPLOYMENT.md", "OpenTelemetry export")}


def test_every_python_sample_of_the_docs_is_run_by_a_test() -> None:
    # The OpenTelemetry sample was never run, so its path relative to the working directory went unseen.
    found = set()
    for doc in ("README.md", "docs/DEPLOYMENT.md"):
        heading = ""
        for line in (ROOT / doc).read_text(encoding="utf-8").split("\n"):
            match = re.match(r"#+ (.*)$", line)
            if match:
                heading = match.group(1)
            elif line.startswith("```python"):
                found.add((doc, heading))
    assert found - set(NOT_RUN) == RUN


def command_parsers() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every `memory-studio` subcommand's parser (``("tokens", "new")``…), filled as when it is the one run."""
    top = build_parser()
    parsers: dict[tuple[str, ...], argparse.ArgumentParser] = {(): top}

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                fill_later = getattr(action, "fill_later", {})
                for name, sub in action.choices.items():
                    if name in fill_later:
                        fill_later.pop(name)(sub)
                    parsers[path + (name,)] = sub
                    walk(sub, path + (name,))

    walk(top, ())
    return parsers


def option_strings(parser: argparse.ArgumentParser) -> set[str]:
    return {name for action in parser._actions for name in action.option_strings}


def command_lines(parsers: dict[tuple[str, ...], argparse.ArgumentParser]
                  ) -> Iterator[tuple[str, str, tuple[str, ...], str]]:
    """Each `memory-studio …` command in README.md and DEPLOYMENT.md (code blocks and inline code, continued lines
    joined): (the doc, the line, the subcommand's path as far as the parsers know it, what follows it)."""
    for doc in ("README.md", "docs/DEPLOYMENT.md"):
        text = (ROOT / doc).read_text(encoding="utf-8")
        for snippet in code_blocks(text, "(?:sh|bash|console)") + re.findall(r"`(memory-studio [^`]+)`", text):
            for line in snippet.replace("\\\n", " ").splitlines():
                for match in re.finditer(r"memory-studio((?: (?!--)[a-z]+(?![\w./-]))*)((?: [^#]*)?)", line):
                    path: tuple[str, ...] = ()
                    for word in match.group(1).split():
                        if path + (word,) in parsers:
                            path += (word,)
                    yield doc, line, path, match.group(2)


def test_every_flag_the_docs_give_a_command_is_one_it_takes() -> None:
    # Each `memory-studio …` command in README.md and DEPLOYMENT.md (code blocks and inline code): its flags are
    # the parser's. The app's own flags (`memory-studio --db …` opens the Studio) are studio.cli's, read from its
    # --help (the parser lives inside its main).
    parsers = command_parsers()
    app_help = subprocess.run([sys.executable, "-m", "studio.cli", "--help"], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert app_help.returncode == 0, app_help.stderr
    app_flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", app_help.stdout))
    checked: list[tuple[tuple[str, ...], str]] = []
    wrong: list[str] = []
    for doc, line, path, rest in command_lines(parsers):
        known = option_strings(parsers[path]) if path else app_flags
        for flag in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", rest):
            checked.append((path, flag))
            if flag not in known:
                wrong.append(f"{doc}: memory-studio {' '.join(path)} {flag}  ({line.strip()[:90]})")
    assert not wrong, "\n".join(wrong)
    assert (("serve",), "--om-message-tokens") in checked and (("tokens", "new"), "--resource") in checked
    assert ((), "--self-check") in checked and (("import",), "--with-configs") in checked


def test_every_option_of_every_command_is_named_in_the_docs() -> None:
    # The other way round from the test above: each option a subcommand's parser takes (``--help`` shows it) is named
    # in README.md or DEPLOYMENT.md for that command, in a `memory-studio <command> …` line (code or inline), or in a
    # paragraph (or a table) that names the command too; `--db` by the README's "Every command takes `--db`" (the
    # test below holds that to the parsers), serve's by DEPLOYMENT's table of them (the test after this one).
    # `prompt --no-recall`, `models --force`, `export --no-turns`, `import --no-index` and `test -q` were in none.
    parsers = command_parsers()
    docs = {doc: (ROOT / doc).read_text(encoding="utf-8") for doc in ("README.md", "docs/DEPLOYMENT.md")}
    in_lines = {(path, flag) for _doc, _line, path, rest in command_lines(parsers)
                for flag in re.findall(r"(?<![\w-])(--?[a-zA-Z][a-z-]*)", rest)}
    paragraphs = [p for text in docs.values() for p in text.split("\n\n")]

    def in_a_paragraph(command: str, option: str) -> bool:
        said = re.compile(rf"memory-studio {re.escape(command)}(?![\w-])|`{re.escape(command)}[` ]"
                          rf"|(?<![\w-]){re.escape(command)} --")
        return any(said.search(p) and re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", p) for p in paragraphs)

    missing = []
    for path, parser in parsers.items():
        if not path or path == ("serve",):
            continue
        for action in parser._actions:
            options = [o for o in action.option_strings if o not in ("-h", "--help")]
            if not options or "--db" in options:
                continue
            if not any((path, o) in in_lines or in_a_paragraph(" ".join(path), o) for o in options):
                missing.append(f"memory-studio {' '.join(path)} {'/'.join(options)}")
    assert not missing, "options no doc names (README's command list, or DEPLOYMENT beside their command): " + \
        ", ".join(missing)
    assert (("test",), "-q") in in_lines and (("export",), "--no-turns") in in_lines  # (short options count too)


def test_deployments_serve_table_lists_every_serve_flag() -> None:
    section = doc_section("docs/DEPLOYMENT.md", "Serving agents: `memory-studio serve`")
    table = section.split("| option | default | what it does |", 1)[1].split("\n\n", 1)[0]
    documented = {flag for row in table.splitlines() for flag in
                  re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", row.split(" | ")[0])}
    flags = option_strings(command_parsers()[("serve",)]) - {"-h", "--help"}
    assert documented == flags


def test_deployments_serve_table_gives_each_flags_default_as_serve_has_it() -> None:
    # The table's default column is what a user relies on without passing the flag: each row of flags whose
    # default is a value (`127.0.0.1`, 16, none) has the parser's; a row whose default is words is left out.
    section = doc_section("docs/DEPLOYMENT.md", "Serving agents: `memory-studio serve`")
    table = section.split("| option | default | what it does |", 1)[1].split("\n\n", 1)[0]
    defaults = {action.dest: action.default for action in command_parsers()[("serve",)]._actions}
    compared, wrong = [], []
    for row in table.splitlines()[1:]:
        option, default = row.strip("| ").split(" | ")[:2]
        flags = re.findall(r"(?<![\w-])--([a-z][a-z-]*)", option)
        values = [re.sub(r"\s*\(.*\)$", "", value).strip("`") for value in default.split(", ")]
        if default.startswith("(") or any(" " in value for value in values):
            continue
        if len(values) == 1:
            values *= len(flags)
        for flag, value in zip(flags, values, strict=True):
            actual = defaults[flag.replace("-", "_")]
            compared.append(flag)
            if value == "none" and not actual or value != "none" and str(actual).removesuffix(".0") == value:
                continue
            wrong.append(f"--{flag}: the table says {value}, serve has {actual!r}")
    assert not wrong, "\n".join(wrong)
    assert {"host", "port", "max-body-mb", "default-resource", "idempotency-ttl", "log-level", "token"} <= set(compared)


def github_anchor(heading: str) -> str:
    """The fragment GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_docs_links_and_named_files_exist() -> None:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken: list[str] = []
    checked = 0
    for doc in docs:
        text = doc.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, fragment = target.partition("#")
            file = (doc.parent / path).resolve() if path else doc
            checked += 1
            if not file.exists():
                broken.append(f"{doc.name}: {target} (no such file)")
            elif fragment and file.suffix == ".md":
                headings = re.findall(r"^#+ (.*)$", file.read_text(encoding="utf-8"), re.M)
                if fragment not in {github_anchor(h) for h in headings}:
                    broken.append(f"{doc.name}: {target} (no such heading)")
    for doc in (ROOT / "README.md", ROOT / "docs" / "DEPLOYMENT.md"):  # and the files they name in code spans
        text = doc.read_text(encoding="utf-8")
        for named in re.findall(r"`((?:core|studio|bench|tests|packaging|tools|docs)/[\w./-]*)`", text):
            checked += 1
            if not (ROOT / named).exists():
                broken.append(f"{doc.name}: {named} (no such file)")
    assert not broken, "\n".join(broken)
    assert checked > 30


def test_every_variable_and_extra_the_docs_name_exists() -> None:
    # A variable a user sets from the docs must be one the code reads (a misspelt one is silently ignored), and
    # each `pip install 'memory-studio[extra]'` must name an extra pyproject.toml has.
    text = "\n".join(path.read_text(encoding="utf-8") for path in (ROOT / "README.md", ROOT / "docs" / "DEPLOYMENT.md"))
    source = "\n".join(path.read_text(encoding="utf-8") for folder in ("core", "studio")
                       for path in (ROOT / folder).rglob("*.py"))
    ours = set(re.findall(r"\b(MEMORY_STUDIO_[A-Z0-9_]*[A-Z0-9])\b", text))
    assert {"MEMORY_STUDIO_DB", "MEMORY_STUDIO_GATEWAY_TOKENS_FILE", "MEMORY_STUDIO_PG_POOL_SIZE"} <= ours
    assert not {name for name in ours if f'"{name}"' not in source}, "named in the docs, read nowhere"
    per_provider = {p.base_url_env for p in PROVIDERS.values()} | {p.context_window_env for p in PROVIDERS.values()}
    per_provider |= {p.key_env for p in PROVIDERS.values() if p.key_env}
    named = set(re.findall(r"\b([A-Z][A-Z0-9_]*_(?:BASE_URL|CONTEXT_WINDOW|API_KEY))\b", text))
    assert {"LLAMACPP_CONTEXT_WINDOW", "OLLAMA_BASE_URL", "GROQ_API_KEY"} <= named
    assert named <= per_provider
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    wanted = set(re.findall(r"memory-studio\[([a-z-]+)\]", text))
    assert wanted and wanted <= extras


def test_the_readmes_command_list_has_every_subcommand_and_only_those() -> None:
    # The README's list under "Command line" is where a user looks for what the CLI can do: each subcommand (a
    # nested one such as `tokens check` too, and each word a command takes as its action, `models install`) is
    # on it, and each line starts with a command the CLI has.
    block, = code_blocks(doc_section("README.md", "Command line"), "sh")
    listed = [shlex.split(line.split("  #", 1)[0]) for line in block.splitlines() if line.strip()]
    assert all(argv[0] == "memory-studio" for argv in listed)
    parsers = command_parsers()
    wanted = {path for path in parsers if path}
    for path, parser in parsers.items():
        for action in parser._actions:
            if not action.option_strings and action.choices and not isinstance(action, argparse._SubParsersAction):
                wanted |= {path + (choice,) for choice in action.choices}
    missing = sorted(" ".join(path) for path in wanted
                     if not any(argv[1:2] == [path[0]] and set(path[1:]) <= set(argv[2:]) for argv in listed))
    assert not missing, "not on the README's command list: " + ", ".join(missing)
    app_help = subprocess.run([sys.executable, "-m", "studio.cli", "--help"], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    app_flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", app_help.stdout.split("options:", 1)[1])) - {"--help"}
    assert {"--db", "--allow-writes", "--no-demo", "--self-check"} <= app_flags
    studio_lines = [{word.strip("[]") for word in argv[1:]} for argv in listed if argv[1].startswith("-")]
    unlisted = sorted(flag for flag in app_flags if not any(flag in words for words in studio_lines))
    assert not unlisted, "the Studio's flags not on the README's command list: " + ", ".join(unlisted)
    unknown = [" ".join(argv) for argv in listed if not argv[1].startswith("-") and (argv[1],) not in parsers]
    assert not unknown, unknown
    assert ("tokens", "check") in wanted and ("models", "status") in wanted and ("traces", "prune") in wanted
    # `memory-studio --help` lists the subcommands from core.cli.COMMANDS, a tuple apart from the parser
    from core.cli import COMMANDS
    assert sorted(COMMANDS) == sorted(path[0] for path in parsers if len(path) == 1)
    assert "Subcommands: " + ", ".join(COMMANDS) + "." in " ".join(app_help.stdout.split())


def test_every_variable_the_code_reads_is_in_the_docs() -> None:
    # The other way round from the test above: a `MEMORY_STUDIO_*` variable the engine or the Studio reads is one a
    # user can find in README.md or DEPLOYMENT.md (an undocumented one is a setting nobody knows to set).
    text = "\n".join(path.read_text(encoding="utf-8") for path in (ROOT / "README.md", ROOT / "docs" / "DEPLOYMENT.md"))
    read = {name for folder in ("core", "studio") for path in (ROOT / folder).rglob("*.py")
            for name in re.findall(r"[\"'](MEMORY_STUDIO_[A-Z0-9_]*[A-Z0-9])[\"']", path.read_text(encoding="utf-8"))}
    assert {"MEMORY_STUDIO_DB", "MEMORY_STUDIO_TRACES_KEEP_MB", "MEMORY_STUDIO_OTEL_CAPTURE_CONTENT"} <= read
    assert not sorted(name for name in read if not re.search(rf"\b{name}\b", text)), "read by the code, in no doc"


def test_every_command_takes_db_but_those_the_readme_names(tmp_path: Path) -> None:
    # "Every command takes `--db` (except `models` …; `tokens` …; and `serve` takes it only with `--model`)".
    assert "Every command takes `--db` (except `models`" in (ROOT / "README.md").read_text(encoding="utf-8")
    without = {path[0] for path, parser in command_parsers().items() if path and "--db" not in option_strings(parser)}
    assert without == {"models", "tokens"}
    code, printed = cli("serve", "--agents", "myapp.agents:agents", "--db", str(tmp_path / "x.db"))
    assert code == 1 and "--db goes with --model only" in printed and not (tmp_path / "x.db").exists()
