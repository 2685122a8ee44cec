"""Business-day SLA arithmetic (``cheeto_like.sla``): pure, no store."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from cheeto_like.config import Config, RequestsConfig
from cheeto_like.sla import Calendar, format_days, parse_target, sla_state

UTC_CAL = Calendar.of("UTC")
FRI_15 = datetime(2026, 12, 4, 15, 0, tzinfo=UTC)  # a Friday


def at(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_targets_read_days_and_hours():
    assert parse_target("2d") == 2
    assert parse_target("0.5d") == 0.5
    assert parse_target("4h") == pytest.approx(4 / 24)
    assert parse_target(" 3BD ") == 3
    for bad in ("", "2", "two days", "-1d", "0d", "400d", "2w"):
        with pytest.raises(ValueError):
            parse_target(bad)


def test_weekends_do_not_count():
    assert FRI_15.weekday() == 4
    # Friday 15:00 + 2 business days = Tuesday 15:00 (9 h of Friday, Monday, 15 h of Tuesday)
    assert UTC_CAL.add_business_days(FRI_15, 2) == at(2026, 12, 8, 15)
    assert UTC_CAL.business_days_between(FRI_15, at(2026, 12, 8, 15)) == pytest.approx(2)
    # the whole weekend is worth nothing
    assert UTC_CAL.business_days_between(at(2026, 12, 5), at(2026, 12, 7)) == 0
    # filed on Saturday: the clock starts on Monday at midnight
    assert UTC_CAL.add_business_days(at(2026, 12, 5, 10), 1) == at(2026, 12, 8)
    # within one day
    assert UTC_CAL.add_business_days(at(2026, 12, 1, 6), 0.25) == at(2026, 12, 1, 12)


def test_holidays_are_skipped():
    cal = Calendar.of("UTC", holidays=[date(2026, 12, 7)])  # Monday off
    assert cal.add_business_days(FRI_15, 2) == at(2026, 12, 9, 15)
    assert not cal.is_business_day(date(2026, 12, 7))
    assert cal.is_business_day(date(2026, 12, 8))


def test_custom_workdays():
    cal = Calendar.of("UTC", workdays=["sun", "mon", "tue", "wed", "thu"])
    # Friday and Saturday off: Friday 15:00 + 1 day = Sunday 24:00 (Monday midnight)
    assert cal.add_business_days(FRI_15, 1) == at(2026, 12, 7)
    with pytest.raises(ValueError, match="unknown weekday"):
        Calendar.of("UTC", workdays=["mon", "funday"])
    with pytest.raises(ValueError, match="at least one"):
        Calendar.of("UTC", workdays=[])


def test_the_timezone_moves_midnight():
    la = Calendar.of("America/Los_Angeles")
    # Friday 15:00 UTC is 07:00 in Los Angeles: 17/24 of Friday is left there
    assert la.business_days_between(FRI_15, at(2026, 12, 5, 8)) == pytest.approx(17 / 24)
    assert la.add_business_days(FRI_15, 2) == at(2026, 12, 8, 15)
    # Sunday 20:00 UTC is still Sunday in Los Angeles (noon): no time counts
    assert la.business_days_between(at(2026, 12, 6, 20), at(2026, 12, 7, 7)) == 0
    # ... while in UTC it is Monday already
    assert UTC_CAL.business_days_between(at(2026, 12, 6, 20), at(2026, 12, 7, 7)) == \
        pytest.approx(7 / 24)
    with pytest.raises(ValueError, match="unknown timezone"):
        Calendar.of("Mars/Olympus")


def test_a_dst_day_still_counts_as_one_day():
    la = Calendar.of("America/Los_Angeles")
    # 2026-11-02 (Monday) follows the fall-back Sunday; 2026-03-09 (Monday) is a 24 h day
    # after the 23 h spring-forward Sunday. A Friday->Monday target crosses each change.
    fri = datetime(2026, 10, 30, 7, tzinfo=UTC)  # Friday 00:00 in LA (PDT, -7)
    due = la.add_business_days(fri, 2)
    assert due == datetime(2026, 11, 3, 8, tzinfo=UTC)  # Tuesday 00:00 PST (-8)
    assert la.business_days_between(fri, due) == pytest.approx(2)


def test_sla_state_reports_time_left_and_breaches():
    before = sla_state(UTC_CAL, FRI_15, 2, now=at(2026, 12, 7, 15))  # Monday 15:00
    assert not before.breached and before.left_days == pytest.approx(1)
    assert before.age == timedelta(days=3)
    late = sla_state(UTC_CAL, FRI_15, 2, now=at(2026, 12, 9, 3))  # Wednesday 03:00
    assert late.breached and late.left_days == pytest.approx(-0.5)
    assert late.overdue_days == pytest.approx(0.5)
    # a closed request is judged when it closed
    met = sla_state(UTC_CAL, FRI_15, 2, now=at(2027, 1, 1), closed=at(2026, 12, 8, 14))
    assert not met.breached
    assert format_days(1.5) == "1.5bd" and format_days(-0.25) == "-6h"


def test_the_config_validates_the_calendar_and_keeps_default_kinds():
    cfg = RequestsConfig(timezone="Europe/Berlin", holidays=[date(2026, 12, 25)],
                         kinds={"quota": {"sla": "1d", "operator": False}})
    assert cfg.kinds["quota"].sla == "1d" and cfg.kinds["quota"].operator is False
    assert cfg.kinds["storage"].operator is True and cfg.kinds["account"].sla == "2d"
    assert Config().requests.timezone == "UTC"
    for bad in ({"timezone": "Nowhere/Land"}, {"workdays": ["someday"]},
                {"kinds": {"quota": {"sla": "soon"}}}, {"kinds": {"bogus": {}}}):
        with pytest.raises(ValueError):
            RequestsConfig(**bad)
