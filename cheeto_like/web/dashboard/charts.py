"""Geometry for the dashboard's server-rendered SVG: quota bars and the usage-over-time
chart. Pure functions (numbers in, shapes out), so the templates only place rectangles
and the page needs no chart library or script.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta

WARN_PERCENT = 80.0


@dataclass(frozen=True)
class Bar:
    """One resource against its quota: ``width`` is the filled share (0-100) of the bar,
    ``level`` ok/warn/full/none (unlimited), ``label`` what the bar says."""

    width: float
    level: str
    label: str
    percent: float | None


def hours(minutes: float) -> str:
    value = minutes / 60
    return f"{value:,.1f} h" if value < 100_000 else f"{value:,.0f} h"


def quota_bar(used: float, preallocated: float, quota: float | None) -> Bar:
    """A bar for ``used`` (+ running jobs' ``preallocated``) minutes of ``quota``."""
    taken = used + preallocated
    if quota is None:
        return Bar(0.0, "none", f"{hours(taken)} used, no limit", None)
    if quota <= 0:
        percent = 0.0 if taken <= 0 else 100.0
    else:
        percent = round(100 * taken / quota, 1)
    level = "full" if percent >= 100 else "warn" if percent >= WARN_PERCENT else "ok"
    return Bar(min(100.0, max(0.0, percent)), level,
               f"{hours(taken)} of {hours(quota)} ({percent:g}%)", percent)


@dataclass(frozen=True)
class Column:
    x: float
    y: float
    width: float
    height: float
    title: str


@dataclass(frozen=True)
class Chart:
    """A column chart of hours per day: ``columns`` in a ``width`` x ``height`` box (the
    plot starts at ``left``), ``peak`` the value at the top line, ``first``/``last``
    the day labels."""

    width: int
    height: int
    left: int
    top: int
    bottom: int
    columns: list[Column]
    peak: str
    first: str
    last: str
    empty: bool


def days_between(start: datetime, end: datetime, cap: int = 400) -> list[str]:
    """The UTC days of [start, end) as YYYY-MM-DD, at most ``cap`` (the latest ones)."""
    first_day: date = start.date()
    last_day: date = (end - timedelta(microseconds=1)).date()
    count = (last_day - first_day).days + 1
    if count > cap:
        first_day = last_day - timedelta(days=cap - 1)
        count = cap
    return [(first_day + timedelta(days=i)).isoformat() for i in range(max(0, count))]


def week_of(day: str) -> str:
    """The Monday (YYYY-MM-DD) of the ISO week ``day`` falls in."""
    when = date.fromisoformat(day)
    return (when - timedelta(days=when.weekday())).isoformat()


def per_week(days: list[str], values: dict[str, float]) -> tuple[list[str], dict[str, float]]:
    """``values`` per day summed into weeks (each labelled by its Monday) over ``days``."""
    weeks = list(dict.fromkeys(week_of(d) for d in days))
    summed: dict[str, float] = {}
    for day, value in values.items():
        if day in days:
            summed[week_of(day)] = summed.get(week_of(day), 0.0) + value
    return weeks, summed


def usage_chart(days: list[str], values: dict[str, float], *, unit: str = "h",
                width: int = 480, height: int = 180, step_name: str = "") -> Chart:
    """Columns for ``values`` (per day or week, already in ``unit``) over ``days``. The
    box is narrow (480; the page shows it at most 640 px wide) so that, scaled down to a
    phone's width, its labels stay readable; ``step_name`` ("week of ") prefixes each
    column's title."""
    left, top, bottom = 48, 10, 24
    plot_w, plot_h = width - left - 4, height - top - bottom
    peak = max([values.get(d, 0.0) for d in days] + [0.0])
    scale = plot_h / peak if peak > 0 else 0.0
    step = plot_w / max(1, len(days))
    gap = 1.0 if step > 3 else 0.0
    columns = []
    for i, day in enumerate(days):
        value = values.get(day, 0.0)
        if value <= 0:
            continue
        h = max(1.0, value * scale)
        columns.append(Column(round(left + i * step, 2), round(top + plot_h - h, 2),
                              round(max(0.5, step - gap), 2), round(h, 2),
                              f"{step_name}{day}: {value:,.2f} {unit}"))
    return Chart(width, height, left, top, bottom, columns, f"{peak:,.1f} {unit}",
                 days[0] if days else "", days[-1] if days else "", not columns)
