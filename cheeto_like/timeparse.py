"""Parse the times admins type: ISO 8601, relative offsets, and "clear".

``+30d``, ``+6mo``, ``+1y``, ``+2w``, ``+12h``, ``+5min`` (a bare ``m`` is minutes) are
offsets from now (``-7d`` looks back); naive ISO times are taken as UTC;
``clear``/``none``/``null`` mean "remove the expiry".
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Final

from .errors import InvalidInput


class _Clear:
    """Sentinel: the admin asked to remove a time, as opposed to not giving one."""

    def __repr__(self) -> str:
        return "CLEAR"

    def __bool__(self) -> bool:
        return False


CLEAR: Final = _Clear()
_RELATIVE = re.compile(r"^(?P<sign>[+-])(?P<n>\d+)\s*"
                       r"(?P<unit>y|yr|years?|mo|months?|w|weeks?|d|days?|"
                       r"h|hours?|m|min|mins|minutes?)$", re.IGNORECASE)


def _add_months(base: datetime, months: int) -> datetime:
    month_index = base.month - 1 + months
    year, month = base.year + month_index // 12, month_index % 12 + 1
    for day in range(base.day, 27, -1):  # clamp 31 Jan + 1mo to the end of February
        try:
            return base.replace(year=year, month=month, day=day)
        except ValueError:
            continue
    return base.replace(year=year, month=month, day=min(base.day, 28))


def parse_when(text: str, *, now: datetime | None = None) -> datetime | _Clear:
    value = text.strip()
    if value.lower() in ("clear", "none", "null"):
        return CLEAR
    now = now or datetime.now(UTC)
    if m := _RELATIVE.fullmatch(value):
        try:
            return _relative(now, m)
        except (OverflowError, ValueError):  # past year 9999 (or before year 1)
            raise InvalidInput(f"time {text!r} is out of range (years 1 to 9999)") from None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInput(f"cannot read time {text!r}: use ISO 8601 (2026-12-31 or "
                           "2026-12-31T17:00), a relative +30d/+6mo/+1y/+2w/+12h/+5min, "
                           "or 'clear'") from None
    try:
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    except (OverflowError, ValueError):  # e.g. 0001-01-01T00:00+01:00 is before year 1 in UTC
        raise InvalidInput(f"time {text!r} is out of range (years 1 to 9999)") from None


def _relative(now: datetime, m: re.Match[str]) -> datetime:
    if len(m["n"]) > 12:  # more than any calendar holds; also keeps int() cheap
        raise OverflowError(m["n"])
    n, unit = int(m["n"]) * (1 if m["sign"] == "+" else -1), m["unit"].lower()
    if unit.startswith("y"):
        return _add_months(now, 12 * n)
    if unit.startswith("mo"):
        return _add_months(now, n)
    if unit.startswith("w"):
        return now + timedelta(weeks=n)
    if unit.startswith("d"):
        return now + timedelta(days=n)
    if unit.startswith("h"):
        return now + timedelta(hours=n)
    return now + timedelta(minutes=n)


_DURATION = re.compile(r"^(?P<n>\d{1,9})\s*(?P<unit>s|sec|secs|seconds?|m|min|mins|minutes?|"
                       r"h|hours?|d|days?|w|weeks?)$", re.IGNORECASE)
MAX_DURATION_SECONDS = 3650 * 86400
_DURATION_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> timedelta:
    """``0s``, ``90min`` (a bare ``m`` is minutes), ``24h``, ``2d``, ``1w`` -> a timedelta
    (thresholds such as ``--pending-over``; never negative)."""
    m = _DURATION.fullmatch(text.strip())
    if m is None:
        raise InvalidInput(f"cannot read duration {text!r}: use a number and a unit, "
                           "e.g. 0s, 90min, 24h, 2d, 1w")
    unit = m["unit"].lower()
    key = "m" if unit.startswith("m") else unit[0]
    seconds = int(m["n"]) * _DURATION_SECONDS[key]
    if seconds > MAX_DURATION_SECONDS:
        raise InvalidInput(f"duration {text!r} is longer than 10 years")
    return timedelta(seconds=seconds)
