"""How the Studio writes a date: one format everywhere, the relative form on hover (no Qt).

Every pane shows a point in time as ``format_datetime`` (``2026-03-01 10:00:05``, local time), a column
with little room as ``format_day`` (``10:00`` today, ``Mar 1`` this year, else ``2025-03-01``), and its
tooltip is ``date_tooltip`` (``3 minutes ago · 2026-03-01 09:00:05 UTC``). Stored timestamps are UTC
(ISO-8601 with ``Z``); unreadable ones are shown as they are rather than dropped.
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


MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")  # (not the locale's)


def format_day(value: datetime | str | None, now: datetime | None = None, tz: tzinfo | None = None) -> str:
    """The short form, for a column with little room (the thread tree's Latest): ``HH:MM`` today, ``Sep 14``
    earlier this year, ``YYYY-MM-DD`` before, in local time (or ``tz``); ``—`` when missing, raw text when
    unreadable. Its tooltip (``date_tooltip``) keeps the exact time."""
    when = to_datetime(value)
    if when is None:
        return format_datetime(value, tz)
    zone = tz or DISPLAY_TZ
    local = when.astimezone(zone)
    today = (now or datetime.now(timezone.utc)).astimezone(zone).date()
    if local.date() == today:
        return local.strftime("%H:%M")
    if local.year == today.year and local.date() < today:
        return f"{MONTHS[local.month - 1]} {local.day}"
    return local.strftime("%Y-%m-%d")


def day_samples(oldest: datetime | str | None, now: datetime | None = None, tz: tzinfo | None = None) -> list[str]:
    """Texts as wide as the widest ``format_day`` can write for dates no older than ``oldest`` (the older the
    date, the wider its form): what a column of them is sized by without formatting every one."""
    form = format_day(oldest, now, tz)
    if form in (MISSING, "") or ":" in form:
        return ["00:00"]
    if "-" in form:
        return ["0000-00-00"]
    return [f"{month} 00" for month in MONTHS]


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


__all__ = ["MISSING", "MONTHS", "date_tooltip", "day_samples", "format_datetime", "format_day", "relative_time",
           "to_datetime"]
