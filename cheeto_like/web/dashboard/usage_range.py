"""Usage over a date range, shared by "Me" and the accounts page: the range read from a
GET form (``from``/``to`` as YYYY-MM-DD, both days included; ``by`` day or week), the
per-day or per-week series for a chart, and CSV answers (``text/csv`` with a filename)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from starlette.responses import Response

from .charts import Chart, days_between, per_week, usage_chart
from .render import PAGE_HEADERS

MAX_DAYS = 400  # the longest range a page or a CSV covers
STEPS = ("day", "week")


@dataclass(frozen=True)
class Range:
    start: datetime  # the first day's 00:00 UTC
    end: datetime  # the day after the last one, 00:00 UTC
    by: str
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def first(self) -> str:
        return self.start.date().isoformat()

    @property
    def last(self) -> str:
        return (self.end - timedelta(days=1)).date().isoformat()

    def query(self) -> str:
        return f"from={self.first}&to={self.last}&by={self.by}"


def _day(text: str | None) -> date | None:
    value = (text or "").strip()
    if not value:
        return None
    try:
        return date.fromisoformat(value) if len(value) == 10 else None
    except ValueError:
        return None


def midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def read_range(start: str | None, end: str | None, by: str | None, *,
               default_start: datetime, default_end: datetime) -> Range:
    """The range asked for, or the default (``[default_start, default_end)``) for what is
    missing; a field that cannot be read keeps the default and says why in ``errors``."""
    errors: dict[str, str] = {}
    first = default_start.date()
    last = (default_end - timedelta(microseconds=1)).date()
    for name, text in (("from", start), ("to", end)):
        if text and text.strip():
            day = _day(text)
            if day is None:
                errors[name] = "a date as YYYY-MM-DD"
            elif name == "from":
                first = day
            else:
                last = day
    if last < first:
        errors["to"] = "must be on or after the first day"
        first, last = default_start.date(), (default_end - timedelta(microseconds=1)).date()
    if (last - first).days + 1 > MAX_DAYS:
        errors["from"] = f"at most {MAX_DAYS} days at once"
        first = last - timedelta(days=MAX_DAYS - 1)
    step = by if by in STEPS else "day"
    if by and by not in STEPS:
        errors["by"] = "day or week"
    return Range(midnight(first), midnight(last) + timedelta(days=1), step, errors)


@dataclass(frozen=True)
class Series:
    """Hours per step (day or week) over a range: the labels, the values, the charts."""

    labels: list[str]
    cpu: dict[str, float]
    gpu: dict[str, float]
    jobs: dict[str, int]
    cpu_chart: Chart
    gpu_chart: Chart


def series(rng: Range, rows: Iterable[Any]) -> Series:
    """``rows`` of a by-day usage report (``key`` a day, minutes) into hours per step."""
    days = days_between(rng.start, rng.end, cap=MAX_DAYS)
    cpu = {r.key or "": r.cpu_minutes / 60 for r in rows}
    gpu: dict[str, float] = {}
    jobs: dict[str, int] = {}
    for r in rows:
        gpu[r.key or ""] = r.gpu_minutes / 60
        jobs[r.key or ""] = r.jobs
    labels = days
    if rng.by == "week":
        labels, cpu = per_week(days, cpu)
        _, gpu = per_week(days, gpu)
        _, summed = per_week(days, {k: float(v) for k, v in jobs.items()})
        jobs = {k: int(v) for k, v in summed.items()}
    else:
        cpu = {k: v for k, v in cpu.items() if k in days}
    step = "week of " if rng.by == "week" else ""
    return Series(labels, cpu, gpu, jobs, usage_chart(labels, cpu, step_name=step),
                  usage_chart(labels, gpu, step_name=step))


def _cell(value: Any) -> Any:
    """A spreadsheet never runs a cell as a formula (CSV injection)."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def csv_response(header: Sequence[str], rows: Iterable[Sequence[Any]], filename: str) -> Response:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([_cell(v) for v in row])
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in filename)
    return Response(out.getvalue(), media_type="text/csv; charset=utf-8",
                    headers={**PAGE_HEADERS,
                             "Content-Disposition": f'attachment; filename="{safe}"'})


def series_csv(s: Series, step: str) -> list[list[Any]]:
    return [[label, s.jobs.get(label, 0), round(s.cpu.get(label, 0.0), 2),
             round(s.gpu.get(label, 0.0), 2)] for label in s.labels]
