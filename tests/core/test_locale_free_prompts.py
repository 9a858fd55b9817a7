"""The prompt text the engine builds is the same under any locale: a recall block from other threads, the
observer's message history and the observation log's date headers, built in a process whose ``LC_TIME``
is German (as Qt leaves the Studio's on a German desktop), equal those built under the C locale."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

BUILD = textwrap.dedent("""
    import json, locale, sys
    from datetime import datetime, timezone
    locale.setlocale(locale.LC_ALL, "")  # what QCoreApplication does on Unix
    from core import Message
    from core.observational.context import optimize_chunk
    from core.observational.observer import format_history
    from core.processors.semantic_recall import format_other_threads

    at = datetime(2026, 12, 5, 15, 4, tzinfo=timezone.utc)
    msgs = [Message.user("I like tea", thread_id="a", resource_id="r", created_at=at),
            Message.assistant("Noted.", thread_id="a", resource_id="r", created_at=at.replace(hour=9))]
    log = "Date: Dec 5, 2026\\n* 🔴 (15:04) User likes tea"
    print(json.dumps({"lc_time": locale.setlocale(locale.LC_TIME), "recall": format_other_threads(msgs),
                      "observer": format_history(msgs),
                      "context": optimize_chunk(log, datetime(2026, 12, 19, tzinfo=timezone.utc))}))
""")


def _build(env: dict[str, str]) -> dict[str, str]:
    done = subprocess.run([sys.executable, "-c", BUILD], env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def german(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment whose locale is German: compiled into a folder of the test's own (``LOCPATH``)."""
    if shutil.which("localedef") is None:
        pytest.skip("localedef is not installed, so no German locale can be made for this test")
    where = tmp_path_factory.mktemp("locales")
    made = subprocess.run(["localedef", "-i", "de_DE", "-f", "UTF-8", str(where / "de_DE.UTF-8")],
                          capture_output=True, text=True)
    if not (where / "de_DE.UTF-8").exists():
        pytest.skip(f"no German locale could be made here: {made.stderr.strip()[:200]}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LC_")}
    return {**env, "LOCPATH": str(where), "LANG": "de_DE.UTF-8"}


def test_prompt_text_is_the_same_under_a_german_locale(german: dict[str, str]) -> None:
    plain = {k: v for k, v in os.environ.items() if not k.startswith("LC_")}
    c = _build({**plain, "LANG": "C.UTF-8"})
    de = _build(german)
    assert de["lc_time"].startswith("de_DE")  # the locale really was German
    assert "Sat 05 Dec 2026" in c["recall"] and "3:04 PM" in c["recall"]
    assert "Dec 5 2026:" in c["observer"] and "9:04 AM" in c["observer"]
    assert "Date: Dec 5, 2026 (2 weeks ago)" in c["context"]
    assert {k: de[k] for k in ("recall", "observer", "context")} == {k: c[k] for k in ("recall", "observer", "context")}
