"""The "Me" page: a person's own picture at each site (status, access, groups and
roles, Slurm associations), their usage against quota as bars (their own and each
account they charge), a chart of their usage over the period, and "why can't I
submit" from the same code as ``cheeto ng slurm why`` (offline: the store's view and
the last sync run, as ``/api/v1/why`` answers).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from ...auth import rules
from ...models.fields import utcnow
from ...models.quota import EPOCH, FOREVER
from .charts import days_between, quota_bar, usage_chart
from .guard import page
from .render import render
from .session import Refused, require_session

CHART_FALLBACK_DAYS = 30  # a period of "none" charts the last month


def pick_site(sites: list[str], asked: str | None) -> str | None:
    if asked:
        if asked not in sites:
            raise Refused(f"you are not on site {asked!r}", 404)
        return asked
    return sites[0] if sites else None


def status_rows(statuses: list[Any]) -> list[dict[str, Any]]:
    """Quota statuses as rows with a CPU and a GPU bar each."""
    return [{"kind": st.kind, "name": st.name, "source": st.source, "period": st.period,
             "start": st.start, "end": st.end,
             "cpu": quota_bar(st.cpu.used, st.cpu.preallocated, st.cpu.quota),
             "gpu": quota_bar(st.gpu.used, st.gpu.preallocated, st.gpu.quota)}
            for st in statuses]


async def usage_over_period(site: str, user: str, start: Any, end: Any) -> dict[str, Any]:
    """CPU and GPU hours per day over the period (the last month when it has none)."""
    from ...queries.usage import usage_report

    if start > EPOCH and end < FOREVER:  # the whole period, days to come included
        lo, hi = start, end
    else:
        hi = utcnow() + timedelta(days=1)
        lo = hi - timedelta(days=CHART_FALLBACK_DAYS)
    report = await usage_report(site, lo, hi, by="day", user=user)
    days = days_between(lo, hi)
    cpu = {r.key or "": r.cpu_minutes / 60 for r in report.rows}
    gpu = {r.key or "": r.gpu_minutes / 60 for r in report.rows}
    return {"cpu": usage_chart(days, cpu), "gpu": usage_chart(days, gpu),
            "start": days[0] if days else "", "end": days[-1] if days else ""}


def add_routes(router: APIRouter) -> None:
    @router.get("/me")
    @page
    async def me(request: Request, site: str | None = None) -> Response:
        from ...queries.quota import quota_status
        from ...queries.user import get_user, user_site_infos
        from ...sync.slurm_why import explain

        session = await require_session(request)
        who = session.who
        if not rules.can(who, rules.ME):
            raise Refused("this page is for people with a user record")
        user = await get_user(who.name)
        infos = await user_site_infos(user.name)
        sites = [i.site for i in infos]
        chosen = pick_site(sites, site)
        context: dict[str, Any] = {"user": user, "infos": infos, "sites": sites,
                                   "site": chosen, "why": None, "quotas": [],
                                   "chart": None}
        if chosen is not None:
            why = await explain(chosen, user.name, runner=None, scontrol=None)
            now = utcnow()
            own = await quota_status(chosen, now, user=user.name)
            accounts = sorted({row["account"] for row in why["accounts"]})
            statuses = list(own)
            for account in accounts:
                if rules.can(who, rules.QUOTA_READ, rules.Target(account=account)):
                    statuses += await quota_status(chosen, now, account=account)
            context |= {"why": why, "quotas": status_rows(statuses),
                        "chart": await usage_over_period(chosen, user.name, own[0].start,
                                                         own[0].end)}
        return render(request, "me.html", session, page="me", **context)
