"""The times admins type: relative offsets (with month-end clamping), ISO 8601 (naive
means UTC), the words that clear an expiry, and one readable error for anything else."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from cheeto_like.errors import InvalidInput
from cheeto_like.timeparse import CLEAR, parse_when

NOW = datetime(2025, 8, 31, 15, 30, tzinfo=UTC)


@pytest.mark.parametrize(("text", "expected"), [
    ("+30d", NOW + timedelta(days=30)),
    ("+1day", NOW + timedelta(days=1)),
    ("-7d", NOW - timedelta(days=7)),
    ("+2w", NOW + timedelta(weeks=2)),
    ("+12h", NOW + timedelta(hours=12)),
    ("+5min", NOW + timedelta(minutes=5)),
    ("+5m", NOW + timedelta(minutes=5)),
    ("+5 minutes", NOW + timedelta(minutes=5)),
    ("+30D", NOW + timedelta(days=30)),
    ("  +3d  ", NOW + timedelta(days=3)),
    ("+0d", NOW),
])
def test_relative_offsets(text, expected):
    assert parse_when(text, now=NOW) == expected


@pytest.mark.parametrize(("now", "text", "expected"), [
    (datetime(2025, 8, 31, tzinfo=UTC), "+6mo", datetime(2026, 2, 28, tzinfo=UTC)),
    (datetime(2023, 8, 31, tzinfo=UTC), "+6mo", datetime(2024, 2, 29, tzinfo=UTC)),
    (datetime(2025, 1, 31, tzinfo=UTC), "+1mo", datetime(2025, 2, 28, tzinfo=UTC)),
    (datetime(2025, 3, 31, tzinfo=UTC), "-1mo", datetime(2025, 2, 28, tzinfo=UTC)),
    (datetime(2025, 1, 31, tzinfo=UTC), "+3months", datetime(2025, 4, 30, tzinfo=UTC)),
    (datetime(2025, 1, 15, tzinfo=UTC), "+1mo", datetime(2025, 2, 15, tzinfo=UTC)),
    (datetime(2025, 11, 30, tzinfo=UTC), "+2mo", datetime(2026, 1, 30, tzinfo=UTC)),
    (datetime(2024, 2, 29, tzinfo=UTC), "+1y", datetime(2025, 2, 28, tzinfo=UTC)),
    (datetime(2024, 2, 29, tzinfo=UTC), "+4y", datetime(2028, 2, 29, tzinfo=UTC)),
])
def test_months_and_years_clamp_to_the_end_of_the_month(now, text, expected):
    assert parse_when(text, now=now) == expected


def test_relative_offsets_default_to_now_in_utc():
    before = datetime.now(UTC)
    parsed = parse_when("+1d")
    assert parsed.tzinfo is not None
    assert before + timedelta(days=1) <= parsed <= datetime.now(UTC) + timedelta(days=1)


@pytest.mark.parametrize(("text", "expected"), [
    ("2026-12-31", datetime(2026, 12, 31, tzinfo=UTC)),
    ("2026-12-31T17:00", datetime(2026, 12, 31, 17, 0, tzinfo=UTC)),
    ("2026-12-31 17:00:05", datetime(2026, 12, 31, 17, 0, 5, tzinfo=UTC)),
    ("2026-12-31T17:00Z", datetime(2026, 12, 31, 17, 0, tzinfo=UTC)),
    ("2026-12-31T17:00-08:00", datetime(2027, 1, 1, 1, 0, tzinfo=UTC)),
])
def test_iso_times_become_utc(text, expected):
    parsed = parse_when(text, now=NOW)
    assert parsed == expected
    assert parsed.utcoffset() == timedelta(0)
    assert parsed.tzinfo == UTC


def test_iso_with_offset_keeps_the_instant():
    pacific = timezone(timedelta(hours=-8))
    parsed = parse_when("2026-01-01T00:00-08:00")
    assert parsed == datetime(2026, 1, 1, tzinfo=pacific)


@pytest.mark.parametrize("text", ["clear", "CLEAR", " none ", "null", "None"])
def test_clear_words(text):
    assert parse_when(text) is CLEAR


def test_clear_is_falsy_and_readable():
    assert not CLEAR
    assert repr(CLEAR) == "CLEAR"


@pytest.mark.parametrize("text", ["tomorrow", "+30", "30d", "+30x", "+d", "", "   ",
                                  "2026-13-01", "31/12/2026", "+1.5d", "++1d", "+5s"])
def test_junk_is_invalid_input_with_a_hint(text):
    with pytest.raises(InvalidInput) as info:
        parse_when(text, now=NOW)
    message = str(info.value)
    assert message.startswith("cannot read time")
    assert "+30d" in message and "clear" in message
    assert "\n" not in message
