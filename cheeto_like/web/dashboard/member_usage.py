"""Sponsors' and managers' view of usage per member of their accounts over a range (the
accounts page's table and its CSV): hours charged to each account, by user."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from starlette.requests import Request

from .tables import PARAMS, Column, Page, Table, read_params
from .usage_range import Range

COLUMNS = (Column("name", "User"), Column("jobs", "Jobs", numeric=True, search=False),
           Column("cpu_h", "CPU hours", numeric=True, search=False),
           Column("gpu_h", "GPU hours", numeric=True, search=False))


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


def usage_pages(request: Request, usage: dict[str, list[dict[str, Any]]],
                keep: dict[str, str | None]) -> dict[str, Page]:
    """Each account's member table sorted, searched and paged on the server
    (``tables.py``: ``?t=usage-<account>&sort=…``). The query string's table parameters
    are read only when ``t`` names one of these tables (another table of the page
    leaves them at their first page)."""
    if not usage:
        return {}
    tables = {a: Table(f"usage-{a}", COLUMNS, default_sort="cpu_h", default_dir="desc",
                       per_page=25, tiebreak="name") for a in usage}
    params = request.query_params
    mine = params.get("t", "") in {t.name for t in tables.values()}
    asked = {k: params.getlist(k) for k in PARAMS if k in params} if mine else {}
    states = read_params(asked, list(tables.values()), keep=keep, path=request.url.path)
    return {a: states[t.name].apply(usage[a]) for a, t in tables.items()}
