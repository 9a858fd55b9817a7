"""Real `memory-studio serve` processes for the gateway's multi-process tests (idempotency across processes and
across a crash): start them on one database, talk to them with the official ``openai`` client, read what they
stored."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openai

from core import open_store
from core.storage.schema import IDEMPOTENCY_TABLE

#: ``start(*flags, env={...})``: a started process's base URL and the process.
Run = Callable[..., tuple[str, "subprocess.Popen[str]"]]


@contextmanager
def serve_processes(folder: Path, module: str, source: str, db: Path | str) -> Iterator[Run]:
    """``module`` (``source``, which defines ``agents()`` over the database in ``GW_FLEET_DB``) written in
    ``folder``; each ``start`` runs one `serve` process of its agents on ``db`` (extra environment in ``env``),
    waits until it listens and returns its URL. Every process is stopped afterwards."""
    (folder / f"{module}.py").write_text(source)
    procs: list[subprocess.Popen[str]] = []

    def start(*flags: str, env: Mapping[str, str] | None = None) -> tuple[str, subprocess.Popen[str]]:
        environment = {**os.environ, "GW_FLEET_DB": str(db), **(env or {})}
        environment.pop("MEMORY_STUDIO_GATEWAY_TOKEN", None)
        proc = subprocess.Popen(
            [sys.executable, "-m", "studio.cli", "serve", "--agents", f"{module}:agents", "--port", "0",
             "--log-level", "warning", *flags],
            cwd=folder, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline()  # printed once the socket listens
        assert "memory-studio gateway: 1 agent(s) (echo) on http://127.0.0.1:" in line, proc.stderr.read()
        return line.split(" on ", 1)[1].split(" ", 1)[0], proc

    try:
        yield start
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            proc.wait(60)
            assert proc.stdout is not None and proc.stderr is not None
            proc.stdout.close()
            proc.stderr.close()


def client(url: str, **kwargs: object) -> openai.OpenAI:
    """The official client on a started process, retrying nothing by itself (the tests send the retries)."""
    return openai.OpenAI(base_url=f"{url}/v1", api_key="-", **{"max_retries": 0, "timeout": 120, **kwargs})


def retry_until_taken(url: str, request: Mapping[str, Any], deadline: float, why: str) -> Any:
    """Send ``request`` (a chat completion's arguments) to the process at ``url`` again while it answers 409
    ``idempotency_key_in_use`` (another process holds the key), until ``deadline`` (``time.monotonic()``);
    the raw response of the first other answer. ``why``: the failure's message when the deadline passes."""
    while True:
        try:
            return client(url).chat.completions.with_raw_response.create(**request)
        except openai.ConflictError as exc:
            assert exc.code == "idempotency_key_in_use"
            assert time.monotonic() < deadline, why
            time.sleep(0.2)


def key_rows(db: Path | str) -> list[tuple[object, ...]]:
    """Each idempotency key's (key, state, thread) as stored."""
    store = open_store(db)
    try:
        with store.db.read() as conn:
            return [tuple(r) for r in conn.exec_driver_sql(f"SELECT idem_key, state, thread_id FROM {IDEMPOTENCY_TABLE}")]
    finally:
        store.close()


def thread_messages(db: Path | str, thread: str) -> list[tuple[str, str]]:
    """A thread's stored (role, content), oldest first."""
    store = open_store(db)
    try:
        with store.db.read() as conn:
            return [tuple(r) for r in conn.exec_driver_sql(
                'SELECT role, content FROM mastra_messages WHERE thread_id = ? ORDER BY "createdAt"', (thread,))]
    finally:
        store.close()
