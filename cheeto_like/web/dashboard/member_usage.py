"""Sponsors' and managers' view of usage per member of their accounts over a range (the
accounts page's table and its CSV): hours charged to each account, by user."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from .usage_range import Range


def month_so_far(now: datetime) -> tuple[datetime, datetime]:
    """The default range of members' usage: this month up to today, both included."""
    first = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return first, now.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)


async def member_usage(site: str, accounts: list[str], members: dict[str, list[str]],
                       rng: Range) -> dict[str, list[dict[str, Any]]]:
    """Per account: hours charged to it by each member (and by anyone else who charged
    it in the range, ``member`` False), busiest first; one aggregation per account."""
    from ...queries.usage import usage_report

    out: dict[str, list[dict[str, Any]]] = {}
    for account in accounts:
        report = await usage_report(site, rng.start, rng.end, by="user", account=account)
        found = {r.key or "": r for r in report.rows}
        listed = set(members.get(account, []))
        rows = []
        for name in sorted(listed | set(found)):
            r = found.get(name)
            rows.append({"name": name, "member": name in listed,
                         "jobs": r.jobs if r else 0,
                         "cpu_h": round(r.cpu_minutes / 60, 2) if r else 0.0,
                         "gpu_h": round(r.gpu_minutes / 60, 2) if r else 0.0})
        rows.sort(key=lambda x: (-(x["cpu_h"] + x["gpu_h"]), x["name"]))
        out[account] = rows
    return out


def members_of(views: list[dict[str, Any]]) -> dict[str, list[str]]:
    return {v["name"]: [m["name"] for m in v["members"]] for v in views}
