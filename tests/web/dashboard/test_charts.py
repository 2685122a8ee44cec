"""The dashboard's SVG geometry (pure functions)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cheeto_like.web.dashboard.charts import days_between, quota_bar, usage_chart


@pytest.mark.parametrize(("used", "pre", "quota", "width", "level"), [
    (30, 0, 60, 50.0, "ok"),
    (48, 0, 60, 80.0, "warn"),
    (90, 0, 60, 100.0, "full"),  # over quota: a full bar, the label says 150%
    (0, 0, 0, 0.0, "ok"),
    (1, 0, 0, 100.0, "full"),
    (10, 20, 60, 50.0, "ok"),  # running jobs' minutes count
    (10, 0, None, 0.0, "none"),
])
def test_quota_bar(used: float, pre: float, quota: float | None, width: float,
                   level: str) -> None:
    bar = quota_bar(used, pre, quota)
    assert (bar.width, bar.level) == (width, level)


def test_quota_bar_labels() -> None:
    assert quota_bar(90, 0, 60).label == "1.5 h of 1.0 h (150%)"
    assert quota_bar(600, 0, None).label == "10.0 h used, no limit"


def test_days_between() -> None:
    days = days_between(datetime(2026, 12, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC))
    assert (len(days), days[0], days[-1]) == (31, "2026-12-01", "2026-12-31")
    capped = days_between(datetime(2000, 1, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC),
                          cap=10)
    assert (len(capped), capped[-1]) == (10, "2026-12-31")


def test_usage_chart() -> None:
    days = ["2026-12-01", "2026-12-02", "2026-12-03", "2026-12-04"]
    chart = usage_chart(days, {"2026-12-02": 10.0, "2026-12-04": 5.0}, width=448, height=134)
    assert not chart.empty and chart.peak == "10.0 h"
    tall, short = chart.columns
    assert tall.height == 100.0 and short.height == 50.0  # plot height 134-10-24
    assert tall.y + tall.height == short.y + short.height == 110  # one baseline
    assert tall.x < short.x and tall.title == "2026-12-02: 10.00 h"
    assert usage_chart(days, {}).empty


def test_per_week_sums_days_into_their_monday() -> None:
    from cheeto_like.web.dashboard.charts import per_week, week_of

    assert week_of("2026-12-06") == "2026-11-30" and week_of("2026-12-07") == "2026-12-07"
    days = days_between(datetime(2026, 12, 1, tzinfo=UTC), datetime(2026, 12, 15, tzinfo=UTC))
    weeks, values = per_week(days, {"2026-12-01": 1.0, "2026-12-06": 2.0, "2026-12-08": 4.0,
                                    "2027-01-01": 9.0})  # outside the days: left out
    assert weeks == ["2026-11-30", "2026-12-07", "2026-12-14"]
    assert values == {"2026-11-30": 3.0, "2026-12-07": 4.0}
    chart = usage_chart(weeks, values, step_name="week of ")
    assert chart.columns[0].title == "week of 2026-11-30: 3.00 h"
