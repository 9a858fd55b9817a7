"""Timestamps in Mastra's on-disk form: ISO-8601, millisecond precision, UTC, ``Z`` suffix.

Sorting these strings as text equals sorting by time, which the storage queries rely on.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Callable, Protocol


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(timezone.utc)


class FixedClock:
    """A clock for tests and demos: starts at ``start`` and advances ``step_ms`` on every call."""

    def __init__(self, start: datetime, step_ms: int = 1000) -> None:
        self._t = start if start.tzinfo else start.replace(tzinfo=timezone.utc)
        self._step_ms = step_ms

    def now(self) -> datetime:
        from datetime import timedelta

        current = self._t
        self._t = current + timedelta(milliseconds=self._step_ms)
        return current


def to_iso(dt: datetime) -> str:
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    elif dt.utcoffset():
        dt = dt.astimezone(timezone.utc)
    # isoformat is several times cheaper than strftime, and this runs for every stored message.
    return dt.replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"


def parse_iso(value: str | datetime | int | float) -> datetime:
    """Parse what Mastra and we write (and epoch milliseconds, which parts carry)."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value / 1000.0, tz=timezone.utc)
    text = value.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    dt = datetime.fromisoformat(text)
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


def to_ms(dt: datetime) -> datetime:
    """Truncate to the millisecond: storage keeps milliseconds, so ordering decisions must too."""
    return dt.replace(microsecond=(dt.microsecond // 1000) * 1000)


def iso_now(clock: Clock | None = None) -> str:
    return to_iso((clock or SystemClock()).now())


def monotonic_iso(previous: str | None, candidate: datetime) -> datetime:
    """Keep messages added in one call at least 1 ms apart so their order survives a round trip."""
    if previous is None:
        return candidate
    prev = parse_iso(previous)
    if candidate <= prev:
        from datetime import timedelta

        return prev + timedelta(milliseconds=1)
    return candidate


NowFn = Callable[[], datetime]
