"""The quota forecast's arithmetic and words (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cheeto_like.web.dashboard.forecast import Forecast, forecast, window, words

NOW = datetime(2026, 12, 15, 12, tzinfo=UTC)
START = datetime(2026, 12, 1, tzinfo=UTC)
END = datetime(2027, 1, 1, tzinfo=UTC)


def test_window_is_the_last_14_days_or_the_period_so_far() -> None:
    assert window(NOW, None) == (NOW - timedelta(days=14), NOW)
    assert window(NOW, START) == (NOW - timedelta(days=14), NOW)
    late = datetime(2026, 12, 10, tzinfo=UTC)
    assert window(NOW, late) == (late, NOW)


def test_runs_out_at_the_recent_rate() -> None:
    # 10 days of 60 minutes a day; 300 of 600 used: 300 left, 5 days to go
    got = forecast(used=300, quota=600, recent=600, window_start=NOW - timedelta(days=10),
                   now=NOW, period_end=END)
    assert got == Forecast("runs_out", 60.0, NOW + timedelta(days=5), 10.0)
    text = words(got, "CPU", END)
    assert "runs out on 2026-12-20 12:00 UTC" in text and "1.0 h a day" in text


def test_lasts_the_period_when_the_day_falls_after_it() -> None:
    got = forecast(used=100, quota=60000, recent=140, window_start=NOW - timedelta(days=14),
                   now=NOW, period_end=END)
    assert got is not None and got.state == "lasts" and got.when is None
    assert "lasts the period (the period ends 2027-01-01 00:00 UTC)" in words(got, "CPU", END)


def test_no_period_end_always_gives_a_day() -> None:
    got = forecast(used=0, quota=1440, recent=1440, window_start=NOW - timedelta(days=1),
                   now=NOW, period_end=None)
    assert got is not None and got.state == "runs_out"
    assert got.when == NOW + timedelta(days=1)


def test_no_quota_no_forecast() -> None:
    assert forecast(used=10, quota=None, recent=10, window_start=START, now=NOW,
                    period_end=END) is None
    assert "no quota" in words(None, "GPU", END)


def test_used_up_and_idle() -> None:
    out = forecast(used=700, quota=600, recent=0, window_start=START, now=NOW, period_end=END)
    assert out is not None and out.state == "out"
    assert words(out, "CPU", END) == "Your CPU quota is used up."
    idle = forecast(used=10, quota=600, recent=0, window_start=START, now=NOW, period_end=END)
    assert idle is not None and idle.state == "idle" and idle.when is None
    assert "will not run out" in words(idle, "GPU", END)


def test_a_period_begun_an_hour_ago_counts_as_a_day() -> None:
    got = forecast(used=60, quota=600, recent=60, window_start=NOW - timedelta(hours=1),
                   now=NOW, period_end=END)
    assert got is not None and got.per_day == 60.0 and got.window_days == 1.0
    assert got.when == NOW + timedelta(days=9)


def test_the_window_is_worded_in_tenths_of_a_day() -> None:
    got = forecast(used=0, quota=6000, recent=600, window_start=NOW - timedelta(hours=116),
                   now=NOW, period_end=END)
    assert "over the last 4.8 days" in words(got, "CPU", END)
    one = forecast(used=0, quota=6000, recent=60, window_start=NOW - timedelta(hours=2),
                   now=NOW, period_end=END)
    assert "over the last 1 day)" in words(one, "CPU", END)
