"""How the Studio writes a date: one format everywhere, the relative form on hover (no Qt).

Every pane shows a point in time as ``format_datetime`` (``2026-03-01 10:00:05``, local time), and
its tooltip is ``date_tooltip`` (``3 minutes ago · 2026-03-01 09:00:05 UTC``). Stored timestamps are
UTC (ISO-8601 with ``Z``); unreadable ones are shown as they are rather than dropped.
"""

from __future__ import annotations

from datetime import datetime, timezone, tzinfo

from core.timeutil import parse_iso

MISSING = "—"
DISPLAY_TZ: tzinfo | None = None  # None: the computer's local zone (tests pin it)


def to_datetime(value: datetime | str | None) -> datetime | None:
    """A datetime from a stored value (naive values are UTC, as the store writes them)."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = parse_iso(value)
        except ValueError:
            return None
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


def format_datetime(value: datetime | str | None, tz: tzinfo | None = None) -> str:
    """``YYYY-MM-DD HH:MM:SS`` in local time (or ``tz``); ``—`` when missing, raw text when unreadable."""
    when = to_datetime(value)
    if when is None:
        return MISSING if value in (None, "") else str(value)
    return when.astimezone(tz or DISPLAY_TZ).strftime("%Y-%m-%d %H:%M:%S")


def relative_time(value: datetime | str | None, now: datetime | None = None) -> str:
    """``just now``, ``5 minutes ago``, ``in 2 hours``, ``3 days ago`` … (empty when unknown)."""
    when = to_datetime(value)
    if when is None:
        return ""
    now = now or datetime.now(timezone.utc)
    seconds = (now - when).total_seconds()
    future = seconds < 0
    seconds = abs(seconds)
    if seconds < 45:
        return "just now"
    # (below this many seconds, count in units of this size): minutes, hours, days, months, years
    steps = ((3600, 60, "minute"), (86_400, 3600, "hour"), (30 * 86_400, 86_400, "day"),
             (365 * 86_400, 30 * 86_400, "month"), (float("inf"), 365 * 86_400, "year"))
    _limit, size, unit = next(step for step in steps if seconds < step[0])
    count = max(1, round(seconds / size))
    text = f"{count} {unit}{'s' if count != 1 else ''}"
    return f"in {text}" if future else f"{text} ago"


def date_tooltip(value: datetime | str | None, now: datetime | None = None) -> str:
    """What hovering a date shows: how long ago, and the exact UTC time."""
    when = to_datetime(value)
    if when is None:
        return "" if value in (None, "") else f"unreadable timestamp: {value}"
    utc = when.astimezone(timezone.utc)
    exact = utc.strftime("%Y-%m-%d %H:%M:%S") + f".{utc.microsecond // 1000:03d} UTC"
    return f"{relative_time(when, now)} · {exact}"


__all__ = ["MISSING", "date_tooltip", "format_datetime", "relative_time", "to_datetime"]
