"""The operator's pages. ``/operator``: set quotas, a site's defaults and GPU factors, and
adjust consumption (each form runs the same operation as ``cheeto ng quota …``, with the
signed-in person as the History author), and the site's accounts sorted by percent
used. ``/operator/runs``: recent sync runs with each command's outcome, the drift the
latest runs left (planned, pending or failed commands) and the last audit's findings.

Forms post, then redirect back with a fixed notice (post/redirect/get: a reload does not
repeat an adjustment); a refusal re-renders the page with the error next to its field
(status 422) and the values kept.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ...errors import CheetoError
from ...models.fields import utcnow
from .charts import quota_bar
from .forms import PERIOD_CHOICES, FormErrors, Reader, operation_errors
from .guard import page
from .pages_accounts import choose, site_names
from .render import base_path, may_operate, render
from .session import Session, check_csrf, first, read_form, require_session

NOTICES = {"quota": "Quota saved.", "defaults": "Default quotas saved.",
           "factor": "GPU factor saved.", "adjust": "Adjustment recorded."}
RUNS_SHOWN = 20


async def operator_session(request: Request) -> Session:
    from .session import Refused

    session = await require_session(request)
    if not may_operate(session.who):
        raise Refused("this page is for operators and admins")
    return session


async def operator_context(site: str) -> dict[str, Any]:
    from ...models import QuotaDefaults
    from ...queries.quota import platform_summary
    from ...queries.slurm import list_accounts
    from ...queries.usage import list_factors

    accounts = [a.group for a in await list_accounts(site)]
    summary = await platform_summary(site, utcnow(), accounts)
    rows = [{"row": r,
             "cpu": quota_bar(r.cpu_used_h * 60, 0,
                              None if r.cpu_quota_h is None else r.cpu_quota_h * 60),
             "gpu": quota_bar(r.gpu_used_h * 60, 0,
                              None if r.gpu_quota_h is None else r.gpu_quota_h * 60)}
            for r in summary]
    return {"defaults": await QuotaDefaults.find_one({"site": site}),
            "factors": await list_factors(site), "summary": rows}


async def show_operator(request: Request, session: Session, site: str | None, *,
                        status: int = 200, errors: dict[str, str] | None = None,
                        values: dict[str, str] | None = None, form: str = "",
                        notice: str = "") -> Response:
    sites = await site_names()
    chosen = choose(sites, site)
    context = await operator_context(chosen) if chosen else {"defaults": None,
                                                               "factors": [], "summary": []}
    failure = (errors or {}).get("form", "") or (
        "The form was not saved: see the marked fields." if errors else "")
    return render(request, "operator.html", session, status=status, page="operator",
                  sites=sites, site=chosen, errors=errors or {}, values=values or {},
                  form=form, notice=notice, failure=failure, periods=PERIOD_CHOICES,
                  **context)


def _subject(kind: str, name: str) -> dict[str, str | None]:
    return {"user": name, "account": None} if kind == "user" else {"user": None,
                                                                    "account": name}


async def _save(request: Request, form: str) -> Response:
    from ...operations.quota import AdjustUsage, SetGpuFactor, SetQuota, SetQuotaDefaults

    session = await operator_session(request)
    fields = await read_form(request)
    check_csrf(fields, session.csrf)
    site = first(fields, "site")
    values = {k: v[0] for k, v in fields.items() if k not in ("csrf",)}
    store, author = request.app.state.store, session.who.author
    read = Reader(fields)
    try:
        site = read.name("site")
        if form == "quota":
            kind = read.choice("q_kind", ("user", "account"))
            name = read.name("q_name")
            cpu, gpu = read.amount("q_cpu"), read.amount("q_gpu")
            period = read.choice("q_period", PERIOD_CHOICES)
            read.done()
            try:
                await SetQuota.run(store, author, site=site, **_subject(kind, name),
                                   cpu_minutes=cpu, gpu_minutes=gpu, period=period)
            except CheetoError as exc:
                raise operation_errors(exc, {"cpu_minutes": "q_cpu", "gpu_minutes": "q_gpu",
                                             "period": "q_period", "user": "q_name",
                                             "account": "q_name"}, "q_name") from None
        elif form == "defaults":
            amounts = {f"{who}_{res}_minutes": read.amount(f"d_{who}_{res}")
                       for who in ("user", "account") for res in ("cpu", "gpu")}
            period = read.choice("d_period", PERIOD_CHOICES)
            read.done()
            try:
                await SetQuotaDefaults.run(store, author, site=site, period=period, **amounts)
            except CheetoError as exc:
                raise operation_errors(exc, {f"{w}_{r}_minutes": f"d_{w}_{r}"
                                             for w in ("user", "account")
                                             for r in ("cpu", "gpu")}) from None
        elif form == "factor":
            gpu_type = read.name("f_type")
            factor = read.number("f_factor", 0, 1000)
            read.done()
            try:
                await SetGpuFactor.run(store, author, site=site, gpu_type=gpu_type,
                                       factor=factor)
            except CheetoError as exc:
                raise operation_errors(exc, {"gpu_type": "f_type",
                                             "factor": "f_factor"}) from None
        else:
            kind = read.choice("a_kind", ("user", "account"))
            name = read.name("a_name")
            cpu, gpu = read.amount("a_cpu", signed=True), read.amount("a_gpu", signed=True)
            reason = read.text("a_reason")
            read.done()
            try:
                await AdjustUsage.run(store, author, site=site, **_subject(kind, name),
                                      cpu_minutes=cpu, gpu_minutes=gpu, reason=reason)
            except CheetoError as exc:
                raise operation_errors(exc, {"cpu_minutes": "a_cpu", "gpu_minutes": "a_gpu",
                                             "reason": "a_reason", "user": "a_name",
                                             "account": "a_name"}, "a_name") from None
    except FormErrors as exc:
        return await show_operator(request, session, site or None, status=422,
                                   errors=exc.errors, values=values, form=form)
    return RedirectResponse(f"{base_path(request)}/operator?site={quote(site)}&done={form}",
                            status_code=303, headers={"Cache-Control": "no-store"})


async def runs_context(site: str | None) -> dict[str, Any]:
    from ...models import AuditRun, SyncRun
    from ...queries.audit import run_findings
    from ...queries.sync_runs import ShownRun, items_of_runs

    where = {"site": site} if site else {}
    found = await SyncRun.find(where).sort(-SyncRun.started_at).limit(RUNS_SHOWN).to_list()
    items = await items_of_runs(found)  # their own documents: two queries for the page
    runs = [ShownRun(run, items[run.id]) for run in found]
    latest: dict[tuple[str, str], Any] = {}
    for run in runs:
        latest.setdefault((run.target, run.site), run)
    drift = [{"target": t, "site": s, "run": r.id, "apply": r.apply, "item": i}
             for (t, s), r in sorted(latest.items())
             for i in r.items if i.outcome in ("planned", "pending", "failed")]
    audits = await AuditRun.find({}).sort(-AuditRun.started_ms).limit(1).to_list()
    audit = audits[0] if audits else None
    findings = [f for f in ((await run_findings(audit))[0] if audit else [])
                if site is None or f.get("site") in (None, site)]
    return {"runs": runs, "drift": drift, "audit": audit, "findings": findings}


def add_routes(router: APIRouter) -> None:
    @router.get("/operator")
    @page
    async def operator(request: Request, site: str | None = None,
                       done: str | None = None) -> Response:
        session = await operator_session(request)
        return await show_operator(request, session, site,
                                   notice=NOTICES.get(done or "", ""))

    @router.post("/operator/quota")
    @page
    async def quota(request: Request) -> Response:
        return await _save(request, "quota")

    @router.post("/operator/defaults")
    @page
    async def defaults(request: Request) -> Response:
        return await _save(request, "defaults")

    @router.post("/operator/gpu-factor")
    @page
    async def factor(request: Request) -> Response:
        return await _save(request, "factor")

    @router.post("/operator/adjust")
    @page
    async def adjust(request: Request) -> Response:
        return await _save(request, "adjust")

    @router.get("/operator/runs")
    @page
    async def runs(request: Request, site: str | None = None) -> Response:
        session = await operator_session(request)
        sites = await site_names()
        chosen = choose(sites, site) if site else None
        return render(request, "runs.html", session, page="runs", sites=sites,
                      site=chosen, **await runs_context(chosen))
