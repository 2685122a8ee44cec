"""The "Me" page: a person's own picture at each site (status, access, groups and
roles, Slurm associations), their jobs at every site with the pending reason in plain
words (from the cluster monitor's last snapshot: the hub never runs squeue), their home
and group storage, their usage against quota as bars (their own and each account they
charge) with a forecast, usage over any date range per day or week (a chart and a CSV
download), and "can I submit?" in the second person with a next step (from the same
code as ``cheeto ng slurm why``, offline: the store's view and the last sync run).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from ...auth import rules
from ...models.fields import utcnow
from ...models.quota import EPOCH, FOREVER
from .charts import quota_bar
from .forecast import forecast, window, words
from .guard import page
from .render import base_path, render
from .session import Refused, require_session
from .tables import Column, Table, read_tables
from .usage_range import Range, csv_response, read_range, series, series_csv

CHART_FALLBACK_DAYS = 30  # a period of "none" charts the last month


def _job_key(job_id: Any) -> Any:
    """Job ids sort as numbers (``9`` before ``10``); array elements as text."""
    text = str(job_id)
    return int(text) if text.isascii() and text.isdigit() else text


def _names(values: Any) -> str:
    return ", ".join(values or ())


SITES = Table("sites", (Column("site", "Site"), Column("status", "Status"),
                        Column("access", "Access", get=lambda r: _names(r["access"]))),
              default_sort="site")
QUOTAS = Table("quotas", (Column("who", "Who", get=lambda r: (
                              f"{0 if r['kind'] == 'user' else 1} {r['name']}")),
                          Column("period", "Period"),
                          Column("cpu", "CPU", numeric=True, search=False,
                                 get=lambda r: r["cpu"].percent),
                          Column("gpu", "GPU", numeric=True, search=False,
                                 get=lambda r: r["gpu"].percent)),
               default_sort="who")
STORAGE = Table("storage", (Column("name", "Storage"), Column("path", "Path"),
                            Column("quota", "Quota")), default_sort="name")
ASSOCIATIONS = Table("associations", (
    Column("account", "Account"), Column("partition", "Partition"),
    Column("qos", "QOS", get=lambda r: _names(r["qos"])),
    Column("via", "Through", get=lambda r: _names(r["via"]))), default_sort="account")


def jobs_table(site: str) -> Table:
    return Table(f"jobs-{site}", (Column("job_id", "Job", get=lambda r: _job_key(r["job_id"])),
                                  Column("plain", "State"),
                                  Column("todo", "What to do", sortable=False)),
                 default_sort="job_id")


def paged(request: Request, context: dict[str, Any]) -> dict[str, Any]:
    """The page's lists as ``tables`` pages (each sorts, searches and pages on the
    server; the range form's values are kept in their links)."""
    params = request.query_params
    user, jobs = context["user"], context["jobs"]
    tables = [SITES, QUOTAS, STORAGE, ASSOCIATIONS, *(jobs_table(s["site"]) for s in jobs)]
    states = read_tables(request, *tables, keep={
        "site": context["site"], **{k: params.get(k) for k in ("from", "to", "by")}},
        path=f"{base_path(request)}/me")
    sites = [{"site": i.site, "status": i.status or user.status,
              "access": list(i.access or user.access)} for i in context["infos"]]
    why = context.get("why")
    return {"site_rows": states["sites"].apply(sites),
            "quotas": states["quotas"].apply(context["quotas"]),
            "storages": states["storage"].apply(context["storages"]),
            "associations": states["associations"].apply(
                why["wanted"]["associations"] if why else []),
            "jobs": [{**s, "jobs": states[f"jobs-{s['site']}"].apply(s["jobs"])}
                     for s in jobs]}


def pick_site(sites: list[str], asked: str | None) -> str | None:
    if asked:
        if asked not in sites:
            raise Refused(f"You are not on site {asked!r}.", 404)
        return asked
    return sites[0] if sites else None


def status_rows(statuses: list[Any]) -> list[dict[str, Any]]:
    """Quota statuses as rows with a CPU and a GPU bar each."""
    return [{"kind": st.kind, "name": st.name, "source": st.source, "period": st.period,
             "start": st.start, "end": st.end, "last": st.end - timedelta(microseconds=1),
             "cpu": quota_bar(st.cpu.used, st.cpu.preallocated, st.cpu.quota),
             "gpu": quota_bar(st.gpu.used, st.gpu.preallocated, st.gpu.quota)}
            for st in statuses]


def default_range(start: datetime, end: datetime, now: datetime) -> tuple[datetime, datetime]:
    """The quota period (its last day included), else the last month."""
    if start > EPOCH and end < FOREVER:
        return start, end
    hi = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    return hi - timedelta(days=CHART_FALLBACK_DAYS), hi


def ago(then: datetime | None, now: datetime) -> str:
    if then is None:
        return ""
    if then.tzinfo is None:
        then = then.replace(tzinfo=UTC)
    seconds = max(0, int((now - then).total_seconds()))
    if seconds < 120:
        return f"{seconds} seconds ago"
    if seconds < 7200:
        return f"{seconds // 60} minutes ago"
    if seconds < 172800:
        return f"{seconds // 3600} hours ago"
    return f"{seconds // 86400} days ago"


def code_parts(text: str) -> list[tuple[str, bool]]:
    """``"Run `x` now"`` -> text and code pieces (the template puts code in <code>)."""
    return [(part, i % 2 == 1) for i, part in enumerate(text.split("`")) if part]


def requests_link(request: Request) -> str | None:
    """The request form's address, when the dashboard has one."""
    prefix = request.app.state.auth.api.prefix
    routes = getattr(request.app.state, "dashboard_routes", set())
    if ("GET", f"{prefix}/requests/new") in routes:
        return f"{base_path(request)}/requests/new"
    return None


def can_submit_words(why: dict[str, Any], site: str) -> tuple[bool, str, str, str]:
    """(can submit, the answer, the next step, the kind of request that would help),
    said to the person."""
    wanted = why["wanted"]
    if why["can_submit"]:
        account = wanted.get("default_account")
        text = f"You can submit jobs at {site}" + (
            f" (your default account is {account})." if account else ".")
        return True, text, "", ""
    blocked = why["eligibility"]["blocked_by"]
    if blocked:
        said = {"not on the site": f"you are not on {site}",
                "no slurm access": f"you have no Slurm access at {site}",
                "account expired": "your account has expired"}
        reasons = [said.get(r, r.replace("status is", "your status is")) for r in blocked]
        return (False, f"You cannot submit at {site}: " + "; ".join(reasons) + ".",
                "Ask your sponsor or the operators to restore your access, or file an "
                "access request.", "access")
    held = [a for a in (why.get("slurmctld", {}).get("associations") or [])
            if a.get("blocking_limits")]
    if held:
        return (False, f"You cannot submit at {site}: Slurm holds a limit of 0 on your "
                       "association (usually a used-up quota).",
                "See your quota above; ask your sponsor for more, or file a quota request.",
                "quota")
    if not wanted["associations"]:
        return (False, f"You cannot submit at {site} yet: none of your groups has a "
                       "partition there.",
                "Ask your sponsor, or file an access request.", "access")
    return (False, f"You cannot submit at {site} yet: Slurm does not have your "
                   "associations yet.",
            "Nothing to do: the next Slurm sync adds them; ask the operators if it "
            "takes more than an hour.", "")


async def site_jobs(sites: list[str], user: str, now: datetime) -> list[dict[str, Any]]:
    """Per site: the snapshot's age and the person's jobs with plain-word reasons."""
    from ...queries.job_snapshot import jobs_of
    from ...sync.cluster_monitor import plain_reason

    out = []
    for site in sites:
        found = await jobs_of(site, user)
        jobs = []
        for job in found.jobs:
            state, todo = plain_reason(job["job_id"], job.get("state", ""),
                                       job.get("reason", ""), site)
            submitted = job.get("submitted")
            if submitted is not None and submitted.tzinfo is None:
                submitted = submitted.replace(tzinfo=UTC)
            jobs.append({**job, "plain": state, "todo": todo, "todo_parts": code_parts(todo),
                         "submitted": submitted})
        read_at = found.read_at
        if read_at is not None and read_at.tzinfo is None:
            read_at = read_at.replace(tzinfo=UTC)
        out.append({"site": site, "read_at": read_at, "ago": ago(read_at, now),
                    "jobs": jobs})
    return out


async def usage_in(site: str, user: str, rng: Range) -> Any:
    from ...queries.usage import usage_report

    report = await usage_report(site, rng.start, rng.end, by="day", user=user)
    return series(rng, report.rows)


async def forecasts(site: str, user: str, own: Any, now: datetime) -> list[dict[str, Any]]:
    """"At this rate your quota runs out on …" for CPU and GPU (none without a quota)."""
    from ...queries.usage import usage_report

    period_start = own.start if own.start > EPOCH else None
    period_end = own.end if own.end < FOREVER else None
    lo, hi = window(now, period_start)
    recent = (await usage_report(site, lo, hi, user=user)).total
    out = []
    for resource, status, minutes in (("CPU", own.cpu, recent.cpu_minutes),
                                      ("GPU", own.gpu, recent.gpu_minutes)):
        if status.quota is None:
            continue
        result = forecast(used=status.used, quota=status.quota, recent=minutes,
                          window_start=lo, now=now, period_end=period_end)
        out.append({"resource": resource.lower(), "state": result.state if result else "",
                    "text": words(result, resource, period_end)})
    return out


async def storages(site: str, user: str, groups: list[str]) -> list[dict[str, Any]]:
    from ...queries.storage import person_storages

    out = []
    for r in await person_storages(site, user, groups):
        try:
            path: str | None = r.mount_path
        except ValueError:
            path = None
        out.append({"name": r.storage.name, "category": r.storage.category,
                    "group": r.storage.group, "quota": r.quota or "no quota",
                    "path": path or r.host_path, "host": r.host})
    return out


async def me_context(request: Request, site: str | None, start: str | None,
                     end: str | None, by: str | None) -> tuple[Any, dict[str, Any]]:
    from ...queries.quota import quota_status
    from ...queries.user import get_user, user_site_infos

    session = await require_session(request)
    who = session.who
    if not rules.can(who, rules.ME):
        raise Refused("This page is for people with a user record.")
    user = await get_user(who.name)
    infos = await user_site_infos(user.name)
    sites = [i.site for i in infos]
    chosen = pick_site(sites, site)
    now = utcnow()
    context: dict[str, Any] = {"user": user, "infos": infos, "sites": sites,
                               "site": chosen, "why": None, "quotas": [], "chart": None,
                               "range": None, "errors": {}, "forecasts": [],
                               "storages": [], "requests_new": requests_link(request),
                               "now": now}
    if chosen is None:
        return session, context
    own = (await quota_status(chosen, now, user=user.name))[0]
    lo, hi = default_range(own.start, own.end, now)
    rng = read_range(start, end, by, default_start=lo, default_end=hi)
    context |= {"range": rng, "errors": rng.errors, "own": own}
    return session, context


def add_routes(router: APIRouter) -> None:
    @router.get("/me")
    @page
    async def me(request: Request, site: str | None = None,
                 by: str | None = None) -> Response:
        from ...queries.quota import quota_status
        from ...sync.slurm.why import explain

        session, context = await me_context(request, site, request.query_params.get("from"),
                                            request.query_params.get("to"), by)
        who, user, chosen, now = session.who, context["user"], context["site"], context["now"]
        context["jobs"] = await site_jobs(context["sites"], user.name, now)
        if chosen is not None:
            why = await explain(chosen, user.name, runner=None, scontrol=None)
            own = context["own"]
            accounts = sorted({row["account"] for row in why["accounts"]})
            statuses = [own]
            for account in accounts:
                if rules.can(who, rules.QUOTA_READ, rules.Target(account=account)):
                    statuses += await quota_status(chosen, now, account=account)
            ok, answer, step, kind = can_submit_words(why, chosen)
            context |= {"why": why, "can": ok, "answer": answer, "next_step": step,
                        "request_kind": kind,
                        "quotas": status_rows(statuses),
                        "chart": await usage_in(chosen, user.name, context["range"]),
                        "forecasts": await forecasts(chosen, user.name, own, now),
                        "storages": await storages(chosen, user.name,
                                                   [g["group"] for g in why["groups"]])}
        context |= paged(request, context)
        status = 422 if context["errors"] else 200
        return render(request, "me.html", session, status=status, page="me", **context)

    @router.get("/me/usage.csv")
    @page
    async def me_csv(request: Request, site: str | None = None, by: str | None = None,
                     ) -> Response:
        _, context = await me_context(request, site, request.query_params.get("from"),
                                      request.query_params.get("to"), by)
        chosen, rng = context["site"], context["range"]
        if chosen is None or rng is None:
            raise Refused("You are not on any site yet.", 404)
        if rng.errors:
            raise Refused("; ".join(f"{k}: {v}" for k, v in rng.errors.items()), 422)
        data = await usage_in(chosen, context["user"].name, rng)
        name = f"usage-{context['user'].name}-{chosen}-{rng.first}-{rng.last}-{rng.by}.csv"
        return csv_response([rng.by if rng.by == "day" else "week_of", "jobs", "cpu_hours",
                             "gpu_hours"], series_csv(data, rng.by), name)
