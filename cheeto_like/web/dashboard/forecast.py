""""At this rate your quota runs out on …": the arithmetic, pure (numbers and times in, a
small answer out), so the page only words it.

The rate is the usage over a recent window (the last ``WINDOW_DAYS`` days, or the period
so far when it began more recently; at least one day, so the first hours of a period do
not look like a flood). What is left of the quota at that rate gives the day it runs out;
a day at or after the period's end means it lasts the period.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

WINDOW_DAYS = 14


@dataclass(frozen=True)
class Forecast:
    # out: used up already; runs_out: at this rate, on ``when``; lasts: not within the
    # period (or, without a period end, never at a zero rate); idle: no recent use
    state: str
    per_day: float  # minutes per day over the window
    when: datetime | None = None
    window_days: float = 0.0


def window(now: datetime, period_start: datetime | None,
           days: int = WINDOW_DAYS) -> tuple[datetime, datetime]:
    """The recent window the rate is read over: [start, now)."""
    start = now - timedelta(days=days)
    if period_start is not None and period_start > start:
        start = period_start
    return start, now


def forecast(*, used: float, quota: float | None, recent: float, window_start: datetime,
             now: datetime, period_end: datetime | None) -> Forecast | None:
    """``used`` of ``quota`` minutes so far; ``recent`` minutes used in
    [``window_start``, ``now``). None without a quota (nothing to run out of)."""
    if quota is None:
        return None
    days = max(1.0, (now - window_start).total_seconds() / 86400)
    per_day = max(0.0, recent) / days
    if used >= quota:
        return Forecast("out", per_day, now, days)
    if per_day <= 0:
        return Forecast("idle", 0.0, None, days)
    when = now + timedelta(days=(quota - used) / per_day)
    if period_end is not None and when >= period_end:
        return Forecast("lasts", per_day, None, days)
    return Forecast("runs_out", per_day, when, days)


def words(result: Forecast | None, resource: str, period_end: datetime | None) -> str:
    """One sentence in the second person ("At this rate your CPU quota runs out on …")."""
    if result is None:
        return f"Your {resource} use has no quota, so it cannot run out."
    days = round(result.window_days, 1)
    rate = f"{result.per_day / 60:,.1f} h a day over the last {days:g} day" + \
        ("s" if days != 1 else "")
    end = f" (the period ends {period_end:%Y-%m-%d %H:%M} UTC)" if period_end else ""
    if result.state == "out":
        return f"Your {resource} quota is used up."
    if result.state == "idle":
        return f"You used no {resource} time lately, so your {resource} quota will not run out."
    if result.state == "lasts":
        return (f"At this rate ({rate}) your {resource} quota lasts the period{end}.")
    assert result.when is not None
    return (f"At this rate ({rate}) your {resource} quota runs out on "
            f"{result.when:%Y-%m-%d %H:%M} UTC{end}.")
