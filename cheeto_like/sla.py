"""Business-day arithmetic for request SLAs: pure functions, no I/O, no heavy imports.

Why a module of its own: the config validates SLA targets with ``parse_target`` and the
request queries compute deadlines with it, and neither may import the models.

The model: a calendar (a timezone, the weekdays that are workdays, a list of holidays)
splits time into local days; a *business day* is a local day that is a workday and not a
holiday. The business time between two instants is the sum, over the business days they
span, of the fraction of each day that lies between them, so a 23- or 25-hour day at a
DST change still counts as one day. A target of ``2d`` is reached when two business days
of business time have passed: a request filed on Friday at 15:00 is due on Tuesday at
15:00 (Friday's last 9 hours, all of Monday, Tuesday's first 15 hours).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

UTC_ZONE = ZoneInfo("UTC")
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
DEFAULT_WORKDAYS = ("mon", "tue", "wed", "thu", "fri")
_TARGET = re.compile(r"^\s*(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>d|bd|h|bh)\s*$", re.IGNORECASE)
MAX_TARGET_DAYS = 365.0
# a calendar with no business day for this long is refused (it would never be due)
MAX_SCAN_DAYS = 3 * 366


def parse_target(text: str) -> float:
    """``2d`` (business days) or ``4h`` (business hours, 24 to a day) -> days."""
    m = _TARGET.match(text)
    if m is None:
        raise ValueError(f"cannot read SLA target {text!r} (examples: 2d, 0.5d, 4h)")
    days = float(m["n"]) / (24 if m["unit"].lower() in ("h", "bh") else 1)
    if not 0 < days <= MAX_TARGET_DAYS:
        raise ValueError(f"SLA target {text!r} must be more than 0 and at most "
                         f"{MAX_TARGET_DAYS:g} days")
    return days


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown timezone {name!r} (an IANA name such as "
                         "America/Los_Angeles)") from None


@dataclass(frozen=True)
class Calendar:
    tz: ZoneInfo = UTC_ZONE
    workdays: frozenset[int] = frozenset(range(5))  # date.weekday(): Monday is 0
    holidays: frozenset[date] = frozenset()

    @classmethod
    def of(cls, tz: str = "UTC", workdays: tuple[str, ...] | list[str] = DEFAULT_WORKDAYS,
           holidays: tuple[date, ...] | list[date] = ()) -> Calendar:
        unknown = [d for d in workdays if d.lower() not in WEEKDAYS]
        if unknown:
            raise ValueError(f"unknown weekday(s) {', '.join(unknown)} (use {', '.join(WEEKDAYS)})")
        if not workdays:
            raise ValueError("a calendar needs at least one workday")
        return cls(zone(tz), frozenset(WEEKDAYS.index(d.lower()) for d in workdays),
                   frozenset(holidays))

    def is_business_day(self, day: date) -> bool:
        return day.weekday() in self.workdays and day not in self.holidays

    def _day_bounds(self, day: date) -> tuple[datetime, datetime]:
        """The UTC instants where local ``day`` starts and ends."""
        start = datetime.combine(day, time(), self.tz).astimezone(UTC)
        end = datetime.combine(day + timedelta(days=1), time(), self.tz).astimezone(UTC)
        return start, end

    def business_days_between(self, start: datetime, end: datetime) -> float:
        """Business time from ``start`` to ``end`` in days (0 when ``end`` is not later)."""
        start, end = _utc(start), _utc(end)
        if end <= start:
            return 0.0
        total = 0.0
        day = start.astimezone(self.tz).date()
        last = end.astimezone(self.tz).date()
        while day <= last:
            if self.is_business_day(day):
                lo, hi = self._day_bounds(day)
                overlap = (min(hi, end) - max(lo, start)).total_seconds()
                if overlap > 0:
                    total += overlap / (hi - lo).total_seconds()
            day += timedelta(days=1)
        return total

    def add_business_days(self, start: datetime, days: float) -> datetime:
        """The instant at which ``days`` of business time have passed since ``start``."""
        if days <= 0:
            return _utc(start)
        start = _utc(start)
        left = days
        day = start.astimezone(self.tz).date()
        for _ in range(MAX_SCAN_DAYS + int(days * 7) + 7):
            if self.is_business_day(day):
                lo, hi = self._day_bounds(day)
                begin = max(lo, start)
                if begin < hi:
                    length = (hi - lo).total_seconds()
                    available = (hi - begin).total_seconds() / length
                    if available >= left:
                        return begin + timedelta(seconds=left * length)
                    left -= available
            day += timedelta(days=1)
        raise ValueError("the calendar has no business day within three years")


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


@dataclass(frozen=True)
class SlaState:
    """Where one request stands: ``age`` is wall-clock time since it was filed; ``left``
    the business days until it is due (negative once breached)."""

    target_days: float
    due: datetime
    age: timedelta
    left_days: float
    breached: bool

    @property
    def overdue_days(self) -> float:
        return max(0.0, -self.left_days)


def sla_state(calendar: Calendar, created: datetime, target_days: float,
              now: datetime, closed: datetime | None = None) -> SlaState:
    """The SLA of a request filed at ``created``; a closed one is judged at ``closed``."""
    at = _utc(closed) if closed is not None else _utc(now)
    due = calendar.add_business_days(created, target_days)
    if at <= due:
        left = calendar.business_days_between(at, due)
    else:
        left = -calendar.business_days_between(due, at)
    return SlaState(target_days, due, at - _utc(created), left, at > due)


def format_days(days: float) -> str:
    """``1.5bd`` for business days, ``3h`` below one business day (human output)."""
    sign = "-" if days < 0 else ""
    days = abs(days)
    if days < 1:
        return f"{sign}{days * 24:.0f}h"
    return f"{sign}{days:.1f}bd"


def format_age(age: timedelta) -> str:
    seconds = max(0, int(age.total_seconds()))
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d{(seconds % 86400) // 3600}h"
