"""Charging and quota arithmetic (pure): GPU factors in time, periods, amounts."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cheeto_like.models.quota import (
    EPOCH,
    FOREVER,
    Quota,
    parse_amount,
    period_window,
    previous_window,
)
from cheeto_like.models.usage import FactorTable, charge_gpus, cpu_minutes

T0 = datetime(2026, 11, 1, tzinfo=UTC)
T1 = datetime(2026, 11, 15, tzinfo=UTC)


def table() -> FactorTable:
    return FactorTable.build([("a100", T0, 2.0), ("a100", T1, 3.0), ("default", T0, 0.5)])


def test_the_factor_in_force_at_the_job_start_applies():
    factors = table()
    assert factors.factor("a100", datetime(2026, 11, 10, tzinfo=UTC)) == 2.0
    assert factors.factor("a100", T1) == 3.0  # from effective_from on, inclusive
    assert factors.factor("a100", datetime(2026, 10, 1, tzinfo=UTC)) == 1.0  # before any


def test_types_without_a_factor_and_untyped_gpus_use_default_else_one():
    factors = table()
    assert factors.factor("t4", T1) == 0.5
    assert factors.factor(None, T1) == 0.5
    assert FactorTable.build([]).factor("t4", T1) == 1.0


def test_gpu_minutes_are_count_times_elapsed_times_factor_per_type():
    uses = charge_gpus([("a100", 2), (None, 1)], 1800, datetime(2026, 11, 20, tzinfo=UTC),
                       table())
    assert [(u.type, u.count, u.factor, u.minutes) for u in uses] == [
        ("a100", 2, 3.0, 180.0), ("untyped", 1, 0.5, 15.0)]


def test_cpu_minutes_are_cpus_times_elapsed():
    assert cpu_minutes(4, 90) == 6.0
    assert cpu_minutes(0, 1000) == 0.0


@pytest.mark.parametrize(("text", "minutes"), [
    ("600m", 600.0), ("600", 600.0), ("10h", 600.0), ("1.5h", 90.0), ("90 min", 90.0),
    ("unlimited", None), ("UNLIMITED", None), ("-1", None)])
def test_amounts(text, minutes):
    assert parse_amount(text) == minutes


@pytest.mark.parametrize(("text", "minutes"), [("-10h", -600.0), ("+90m", 90.0), ("5", 5.0)])
def test_signed_amounts(text, minutes):
    assert parse_amount(text, signed=True) == minutes


@pytest.mark.parametrize("text", ["-10h", "10d", "lots", "", "1e9h", "99999999999999"])
def test_bad_quota_amounts_are_refused(text):
    with pytest.raises(ValueError):
        parse_amount(text)


def test_an_adjustment_cannot_be_unlimited():
    with pytest.raises(ValueError):
        parse_amount("unlimited", signed=True)


@pytest.mark.parametrize(("period", "start", "end"), [
    ("monthly", datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)),
    ("quarterly", datetime(2026, 10, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC)),
    ("yearly", datetime(2026, 1, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC)),
    ("none", EPOCH, FOREVER),
])
def test_calendar_periods_hold_now(period, start, end):
    assert period_window(period, datetime(2026, 11, 30, 23, 59, tzinfo=UTC)) == (start, end)


def test_the_previous_period_of_january_is_december():
    window = period_window("monthly", datetime(2027, 1, 5, tzinfo=UTC))
    assert previous_window("monthly", window) == (datetime(2026, 12, 1, tzinfo=UTC),
                                                  datetime(2027, 1, 1, tzinfo=UTC))
    assert previous_window("none", window) is None


def test_a_quota_names_exactly_one_subject_and_explicit_periods_need_dates():
    with pytest.raises(ValueError, match="exactly one"):
        Quota(site="farm")
    with pytest.raises(ValueError, match="explicit period needs"):
        Quota(site="farm", user="alice", period="explicit")
    with pytest.raises(ValueError, match="carry-over needs a repeating period"):
        Quota(site="farm", user="alice", carry_over=True)
    with pytest.raises(ValueError, match="end after it starts"):
        Quota(site="farm", user="alice", period="explicit", period_start=T1,
              period_end=T0)
