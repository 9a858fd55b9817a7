"""One date format in the Studio, with the relative form on hover (``studio.logic.dates``)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from studio.logic import dates
from studio.logic.dates import date_tooltip, format_datetime, format_day, relative_time

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
STUDIO = Path(__file__).resolve().parents[2] / "studio"


@pytest.fixture(autouse=True)
def _utc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dates, "DISPLAY_TZ", timezone.utc)


def test_one_format_for_datetimes_and_stored_text() -> None:
    assert format_datetime(NOW) == "2026-03-01 12:00:00"
    assert format_datetime("2026-03-01T12:00:00.250Z") == "2026-03-01 12:00:00"
    assert format_datetime(datetime(2026, 3, 1, 12, 0)) == "2026-03-01 12:00:00"  # naive: stored UTC
    assert format_datetime(NOW, timezone(timedelta(hours=2))) == "2026-03-01 14:00:00"
    assert format_datetime(None) == "—" and format_datetime("last tuesday") == "last tuesday"


@pytest.mark.parametrize("delta, text", [
    (timedelta(seconds=10), "just now"), (timedelta(minutes=1), "1 minute ago"),
    (timedelta(minutes=5), "5 minutes ago"), (timedelta(hours=3), "3 hours ago"),
    (timedelta(days=2), "2 days ago"), (timedelta(days=65), "2 months ago"),
    (timedelta(days=800), "2 years ago"), (-timedelta(hours=2), "in 2 hours"),
])
def test_relative_form(delta: timedelta, text: str) -> None:
    assert relative_time(NOW - delta, NOW) == text


def test_the_short_form_is_the_time_today_the_month_and_day_this_year_and_the_date_before() -> None:
    assert format_day("2026-03-01T09:05:59Z", NOW) == "09:05"
    assert format_day("2026-02-28T23:59:00Z", NOW) == "Feb 28" and format_day("2026-01-01T00:00:00Z", NOW) == "Jan 1"
    assert format_day("2025-12-31T23:59:00Z", NOW) == "2025-12-31"
    assert format_day("2026-03-02T00:00:00Z", NOW) == "2026-03-02"  # (a clock ahead: its date, not "today")
    # "today" is the display zone's: 23:30 UTC on Feb 28 is 01:30 on Mar 1 two hours east
    assert format_day("2026-02-28T23:30:00Z", NOW, timezone(timedelta(hours=2))) == "01:30"
    assert format_day(None, NOW) == "—" and format_day("last tuesday", NOW) == "last tuesday"


def test_a_day_columns_samples_are_as_wide_as_any_date_no_older_than_its_oldest() -> None:
    assert dates.day_samples("2026-03-01T01:00:00Z", NOW) == ["00:00"]
    assert dates.day_samples(None, NOW) == ["00:00"]
    samples = dates.day_samples("2026-01-05T00:00:00Z", NOW)
    shown = {format_day(NOW - timedelta(days=d), NOW) for d in range(1, 59)}  # Jan 1 .. Feb 28
    assert {s.split(" ")[0] for s in shown} <= {s.split(" ")[0] for s in samples}  # every month's name, and
    assert max(len(s) for s in shown) <= min(len(s) for s in samples)  # two digits of day: none narrower
    assert dates.day_samples("2024-07-01T00:00:00Z", NOW) == ["0000-00-00"]


def test_hover_text_has_the_relative_form_and_the_exact_utc_time() -> None:
    assert date_tooltip(NOW - timedelta(minutes=3), NOW) == "3 minutes ago · 2026-03-01 11:57:00.000 UTC"
    assert date_tooltip(None) == "" and "unreadable" in date_tooltip("soon")


def test_no_pane_formats_dates_on_its_own() -> None:
    """Every date goes through studio.logic.dates: no other strftime of a date in the Studio."""
    offenders = []
    for path in STUDIO.rglob("*.py"):
        if path.name == "dates.py":
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if re.search(r"strftime\(\s*[\"'][^\"']*%[Ymdb]", line):
                offenders.append(f"{path.relative_to(STUDIO)}:{n}: {line.strip()}")
    assert offenders == []
