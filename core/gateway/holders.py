"""Who holds an idempotency key while its request runs, and whether that holder has stopped.

A running key's row (``memory_studio_idempotency``) has a ``holder`` and a ``locked_until`` that the holder
pushes forward every third of its lease. ``locked_until`` alone cannot tell a live holder from one whose process
died: it says when the key frees, not when it was last renewed, and gateways of a fleet may run with another
``--idempotency-lease``. So the holder's id also records its lease and its process:
``<uuid>.<lease ms>.<boot id>:<pid namespace>:<pid>:<start time>`` (the process part empty where there is no
``/proc``). Kept in the ``holder`` text rather than new columns: a migration would make every older gateway of
the fleet refuse to write the database ("written by a newer Memory Studio") from its next start, and older
gateways only ever compare a holder with their own (they write a bare ``uuid4().hex``, read as ``Holder`` with
no lease and no process).

From it, ``Holder.renewed_ago`` (``locked_until`` minus the lease), and ``Holder.process_gone``: True only when
the holder ran on this host's kernel since its boot and in this pid namespace, and its process has ended (no
such pid, a zombie, or the pid now another process's). A holder on another host or container is never proven
gone: its key frees when its lease runs out.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from functools import lru_cache


def _number(text: str) -> bool:
    """Whether ``text`` is a number ``int`` reads: ASCII digits only (``str.isdigit`` also takes "²", which ``int``
    refuses: a stored holder holding one answered 500 until its key expired)."""
    return text.isascii() and text.isdigit()


@lru_cache(maxsize=1)
def _this_kernel() -> tuple[str, str] | None:
    """This host's boot id and this process's pid namespace, or None where Linux's ``/proc`` has neither."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.read().strip()
        namespace = os.readlink("/proc/self/ns/pid").removeprefix("pid:[").rstrip("]")
    except OSError:
        return None
    return (boot, namespace) if boot and _number(namespace) else None


def _start_time(pid: int) -> tuple[str, str] | None:
    """The state and start time (clock ticks since boot) of process ``pid`` from ``/proc``; None if unreadable."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # after the command's name, which may hold spaces and parentheses
    return (fields[0], fields[19]) if len(fields) > 19 else None


def _process_mark() -> str:
    kernel = _this_kernel()
    started = _start_time(os.getpid()) if kernel is not None else None
    if kernel is None or started is None:
        return ""
    return f"{kernel[0]}:{kernel[1]}:{os.getpid()}:{started[1]}"


@dataclass(frozen=True)
class Holder:
    """A holder id as stored: ``lease_ms`` and ``process`` are None for one written by an older gateway."""

    text: str
    lease_ms: int | None = None
    process: str | None = None

    @classmethod
    def new(cls, lease_seconds: float) -> Holder:
        """A holder for a request of this process, whose lease is ``lease_seconds``."""
        lease_ms = int(lease_seconds * 1000)
        process = _process_mark()
        return cls(f"{uuid.uuid4().hex}.{lease_ms}.{process}", lease_ms, process)

    @classmethod
    def parse(cls, text: str | None) -> Holder:
        parts = (text or "").split(".", 2)
        if len(parts) != 3 or not _number(parts[1]):
            return cls(text or "")
        return cls(text or "", int(parts[1]), parts[2])

    def renewed_ago(self, locked_until_ms: int, now_ms: int) -> float | None:
        """Seconds since the holder last took or renewed its lease (None: its lease is unknown)."""
        if self.lease_ms is None:
            return None
        return max(0.0, (now_ms - (locked_until_ms - self.lease_ms)) / 1000)

    def process_gone(self) -> bool:
        """Whether the holder's process has provably ended (see the module); False whenever that cannot be known."""
        kernel = _this_kernel()
        parts = (self.process or "").split(":")
        if kernel is None or len(parts) != 4 or (parts[0], parts[1]) != kernel or not _number(parts[2]):
            return False  # another host, container or boot, or a holder that did not say: not provable here
        pid = int(parts[2])
        if pid <= 0 or pid == os.getpid():
            return False  # this process: its own requests renew while they run
        try:
            os.kill(pid, 0)  # (not hidden from other users as /proc may be: it says whether the pid exists)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass  # it exists, another user's
        except OSError:
            return False
        started = _start_time(pid)
        if started is None:
            return False  # exists, but its /proc entry is hidden from us: it may be the holder
        state, start = started
        return state in ("Z", "X") or start != parts[3]  # a zombie has ended; another start time is another process


__all__ = ["Holder"]
