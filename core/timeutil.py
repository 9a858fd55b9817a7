"""Timestamps in Mastra's on-disk form: ISO-8601, millisecond precision, UTC, ``Z`` suffix.

Sorting these strings as text equals sorting by time, which the storage queries rely on. This is the
one module that formats and parses timestamps: the memory store, the trace store and the Studio all
use it, so a value written by one reads back the same in the others.

Dates written into a prompt use the English names below, never ``strftime``'s ``%a`` / ``%b`` / ``%p``,
which follow the process's locale (Qt sets it from the environment when the Studio starts): the text a
model gets, and its rebuild in another process, must not depend on where it was made.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Protocol


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


def as_utc(dt: datetime) -> datetime:
    """``dt`` in UTC; a naive value is taken to be UTC already (what we and Mastra store)."""
    return dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt.astimezone(timezone.utc)


def to_iso(dt: datetime) -> str:
    """``2025-01-02T03:04:05.000Z``, as JavaScript's ``toISOString()`` writes it (truncated to ms)."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    elif dt.utcoffset():
        dt = dt.astimezone(timezone.utc)
    # isoformat is several times cheaper than strftime, and this runs for every stored message.
    return dt.replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"


def parse_iso(value: str | datetime | int | float) -> datetime:
    """Parse what Mastra and we write (and epoch milliseconds, which parts carry).

    A naive result is taken to be UTC. Text that is not ISO-8601 raises ``ValueError``.
    """
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value / 1000.0, tz=timezone.utc)
    text = str(value).strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    dt = datetime.fromisoformat(text)
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


#: The times the engine can work with. It stamps a new turn a millisecond after its thread's newest message
#: and rebuilds a turn from a millisecond before its input, so the first and last day Python holds stay free.
EARLIEST = datetime(1, 1, 2, tzinfo=timezone.utc)
LATEST = datetime(9999, 12, 30, 23, 59, 59, 999000, tzinfo=timezone.utc)


_OUT_OF_RANGE = (f"is outside the times the engine can work with ({EARLIEST.date().isoformat()} to "
                 f"{LATEST.date().isoformat()} UTC)")


def range_problem(dt: datetime) -> str | None:
    """Why ``dt`` (aware, or naive UTC) is outside the times the engine can work with, or None."""
    at = dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)
    return None if EARLIEST <= at <= LATEST else _OUT_OF_RANGE


def stored_form_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored as a timestamp as it is (None: it can). Stored times are ``to_iso``'s
    text, between EARLIEST and LATEST: the storage queries order and compare them as text, and the
    engine steps from them by a millisecond."""
    try:
        dt = parse_iso(text)
        canonical = to_iso(dt)  # converting an offset to UTC can leave Python's range
    except OverflowError:
        return _OUT_OF_RANGE
    except ValueError:
        return "is not an ISO-8601 time (like 2026-01-31T09:30:00.000Z)"
    if (problem := range_problem(dt)) is not None:
        return problem
    if canonical != text:
        return (f"is not in the stored form (UTC with milliseconds and Z: rows are ordered by this text); "
                f"write it as {canonical!r}")
    return None


def parse_optional_iso(value: object) -> datetime | None:
    """``parse_iso`` for a nullable column: ``None`` stays ``None``."""
    if value is None:
        return None
    if isinstance(value, (str, datetime, int, float)):
        return parse_iso(value)
    return parse_iso(str(value))


def to_ms(dt: datetime) -> datetime:
    """Truncate to the millisecond: storage keeps milliseconds, so ordering decisions must too."""
    return dt.replace(microsecond=(dt.microsecond // 1000) * 1000)


def utc_now_ms() -> datetime:
    """Now in UTC, truncated to milliseconds: what ISO-ms text can hold."""
    return to_ms(datetime.now(timezone.utc))


def iso_now(clock: Clock | None = None) -> str:
    return to_iso((clock or SystemClock()).now())


MONTH_NAMES = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
WEEKDAY_NAMES = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTH_NUMBERS = {name.lower(): i for i, name in enumerate(MONTH_NAMES, start=1)}


def month_name(dt: datetime) -> str:
    """``Dec``: what ``strftime("%b")`` gives under the C locale, under any locale."""
    return MONTH_NAMES[dt.month - 1]


def weekday_name(dt: datetime) -> str:
    """``Sat``: ``strftime("%a")`` under the C locale."""
    return WEEKDAY_NAMES[dt.weekday()]


def month_number(name: str) -> int | None:
    """1–12 for an English month name or its first three letters, any case (``strptime("%b")`` under the C
    locale, as JavaScript's date parser reads the first three letters); None for anything else."""
    return _MONTH_NUMBERS.get(name[:3].lower())


def clock_12h(dt: datetime) -> str:
    """``3:04 PM``: the 12-hour time without a leading zero, AM/PM in English."""
    return f"{dt.hour % 12 or 12}:{dt.minute:02d} {'AM' if dt.hour < 12 else 'PM'}"
