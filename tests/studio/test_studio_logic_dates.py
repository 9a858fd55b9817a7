"""One date format in the Studio, with the relative form on hover (``studio.logic.dates``)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from studio.logic import dates
from studio.logic.dates import date_tooltip, format_datetime, relative_time

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
