"""An idempotency key's holder: what its id records (its lease, its process) and when its process is provably gone.
Real processes: a child Python process makes its own holder id, then is killed (a zombie, then reaped)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from core.gateway.holders import Holder

pytestmark = pytest.mark.skipif(not Path("/proc/sys/kernel/random/boot_id").exists(), reason="Linux's /proc")

CHILD = ("import sys; from core.gateway.holders import Holder; "
         "print(Holder.new(60).text, flush=True); sys.stdin.read()")


def child_holder() -> tuple[subprocess.Popen[str], Holder]:
    """A child process that made its holder id (as a gateway's request does) and waits until told to end."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert proc.stdout is not None
    return proc, Holder.parse(proc.stdout.readline().strip())


def test_a_holder_records_its_lease_and_the_time_since_it_renewed():
    held = Holder.parse(Holder.new(60).text)
    assert held.lease_ms == 60_000
    assert held.renewed_ago(locked_until_ms=1_000_000, now_ms=1_000_000 - 60_000 + 7_500) == 7.5
    assert not held.process_gone()  # this process's own


def test_a_killed_process_is_gone_as_a_zombie_and_once_reaped():
    proc, held = child_holder()
    try:
        assert held.lease_ms == 60_000 and held.process and held.process.split(":")[2] == str(proc.pid)
        assert not held.process_gone()  # running
        os.kill(proc.pid, signal.SIGKILL)
        # Not reaped yet: a zombie, its pid still taken.
        deadline = time.monotonic() + 60
        while Path(f"/proc/{proc.pid}/stat").read_text().rpartition(")")[2].split()[0] not in ("Z", "X"):
            assert time.monotonic() < deadline, "the killed child never became a zombie"
            time.sleep(0.01)
        assert held.process_gone()
    finally:
        proc.kill()
        proc.wait(60)
    assert held.process_gone()  # reaped: no such process


def test_a_process_that_is_not_provably_the_holders_is_not_gone():
    proc, held = child_holder()
    try:
        boot, namespace, pid, started = (held.process or "").split(":")
        lease_part = f"{uuid.uuid4().hex}.60000"
        # Its pid now another process's (another start time): the holder's process has ended.
        assert Holder.parse(f"{lease_part}.{boot}:{namespace}:{pid}:{int(started) + 1}").process_gone()
        # A holder on another host (another boot id) or in another pid namespace: never provable here.
        assert not Holder.parse(f"{lease_part}.{uuid.uuid4()}:{namespace}:{pid}:{started}").process_gone()
        assert not Holder.parse(f"{lease_part}.{boot}:1:{pid}:{started}").process_gone()
        # One that did not say (no /proc where it ran), or written by an older gateway (a bare uuid).
        assert not Holder.parse(f"{lease_part}.").process_gone()
        older = Holder.parse(uuid.uuid4().hex)
        assert older.lease_ms is None and older.renewed_ago(1_000, 500) is None and not older.process_gone()
    finally:
        proc.kill()
        proc.wait(60)


@pytest.mark.parametrize("lease, pid", [("6²000", "1"), ("60000", "²"), ("60000", "١")])
def test_a_holder_with_digits_int_does_not_read_is_read_as_an_unknown_one(lease: str, pid: str):
    """A holder's numbers are ASCII digits: "²" (``str.isdigit`` takes it, ``int`` refuses it: the key answered 500
    until it expired) or an Arabic-Indic digit (``int`` reads it as another pid) in a stored row is a holder whose
    lease or process is unknown, never an error nor a process looked up."""
    boot, namespace, _pid, start = (Holder.new(60).process or "").split(":")
    held = Holder.parse(f"0a1b.{lease}.{boot}:{namespace}:{pid}:{start}")
    held.renewed_ago(locked_until_ms=1_000_000, now_ms=1_000_000)
    assert not held.process_gone()
