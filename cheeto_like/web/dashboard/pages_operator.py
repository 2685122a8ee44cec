"""The operator's pages. ``/operator``: set quotas, a site's defaults and GPU factors, and
adjust consumption (each form runs the same operation as ``cheeto ng quota …``, with the
signed-in person as the History author; the name inputs suggest the site's users and
accounts), the users and accounts with a quota of their own and the site's accounts,
fullest first. ``/operator/history``: History, newest first, filtered by author,
operation, subject and days. ``/operator/runs``: sync runs with each command's outcome
and their counts, the drift the latest runs left (planned, pending or failed commands)
and the last audit's findings. Every table sorts, searches and pages on the server
(``tables``): History and runs in the store, the rest in Python.

Forms post, then redirect back with a fixed notice (post/redirect/get: a reload does not
repeat an adjustment); a refusal re-renders the page with the error next to its field
(status 422) and the values kept.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ...errors import CheetoError
from ...models.fields import utcnow
from .charts import quota_bar
from .forms import NAME, PERIOD_CHOICES, FormErrors, Reader, operation_errors
from .guard import page
from .render import base_path, may_operate, render
from .session import Session, check_csrf, first, read_form, require_session
from .sites import choose, site_names
from .tables import Column, Table, TableState, read_tables

NOTICES = {"quota": "Quota saved.", "defaults": "Default quotas saved.",
           "factor": "GPU factor saved.", "adjust": "Adjustment recorded."}
RUNS_SHOWN = 20
COMMANDS_SHOWN = 200  # commands listed under a run (its counts cover them all)
NAME_SUGGESTIONS = 2000  # names in a <datalist> at most (a bigger site: those in play)


def _fullest(row: dict[str, Any]) -> float | None:
    percents = [p for p in (row["cpu_pct"], row["gpu_pct"]) if p is not None]
    return max(percents) if percents else None


_QUOTA_COLUMNS = (Column("cpu_pct", "CPU", numeric=True, search=False),
                  Column("gpu_pct", "GPU", numeric=True, search=False),
                  Column("fullest", "Fullest", numeric=True, search=False),
                  Column("state", "State"))
OWN_QUOTAS = Table("quotas", (Column("kind", "For"), Column("name", "Name"),
                              Column("period", "Period"), *_QUOTA_COLUMNS),
                   default_sort="fullest", default_dir="desc")
ACCOUNTS = Table("accounts", (Column("name", "Account"), Column("source", "Quota"),
                              *_QUOTA_COLUMNS),
                 default_sort="fullest", default_dir="desc")
FACTORS = Table("factors", (Column("gpu_type", "Type"),
                            Column("factor", "Factor", numeric=True, search=False),
                            Column("effective_from", "From", search=False)),
                default_sort="gpu_type", per_page=50, searchable=False)
OPERATOR_TABLES = (OWN_QUOTAS, ACCOUNTS, FACTORS)
HISTORY = Table("history", (
    Column("timestamp", "When", search=False), Column("op", "Operation"),
    Column("author", "By"),
    Column("subject", "Subject", sortable=False,
           search_fields=tuple(f"changes.{f}" for f in ("user", "group", "account",
                                                         "name", "site"))),
    Column("changes", "Changes", sortable=False, search=False)),
    default_sort="timestamp", default_dir="desc", per_page=50, tiebreak="_id")
RUNS = Table("runs", (Column("started_at", "Started", search=False),
                      Column("target", "Target"), Column("site", "Site"),
                      Column("apply", "Mode", search=False), Column("status", "Status"),
                      Column("counts", "Counts", sortable=False, search=False),
                      Column("author", "By")),
             default_sort="started_at", default_dir="desc", per_page=RUNS_SHOWN,
             tiebreak="_id")
DRIFT = Table("drift", (Column("target", "Target"), Column("site", "Site"),
                        Column("outcome", "Outcome"), Column("batch", "Batch"),
                        Column("command", "Command"), Column("detail", "Detail")),
              default_sort="target", per_page=50)
FINDINGS = Table("findings", (Column("rank", "Severity", numeric=True, search=False),
                              Column("kind", "Kind"), Column("site", "Site"),
                              Column("object", "Object"), Column("detail", "Detail"),
                              Column("fix", "Fix", sortable=False)),
                 default_sort="rank", default_dir="desc", per_page=50)
RUNS_TABLES = (RUNS, DRIFT, FINDINGS)


async def operator_session(request: Request) -> Session:
    from .session import Refused

    session = await require_session(request)
    if not may_operate(session.who):
        raise Refused("this page is for operators and admins")
    return session


def quota_rows(statuses: list[Any]) -> list[dict[str, Any]]:
    """Quota statuses as table rows: bars, percents, the fuller of the two, blocked."""
    rows = []
    for st in statuses:
        row = {"kind": st.kind, "name": st.name, "source": st.source, "period": st.period,
               "cpu": quota_bar(st.cpu.used, st.cpu.preallocated, st.cpu.quota),
               "gpu": quota_bar(st.gpu.used, st.gpu.preallocated, st.gpu.quota),
               "cpu_pct": st.cpu.percent, "gpu_pct": st.gpu.percent}
        row["fullest"] = _fullest(row)
        row["state"] = "blocked" if row["fullest"] is not None and row["fullest"] >= 100 \
            else ""
        rows.append(row)
    return rows


async def subject_names(site: str, accounts: list[str], statuses: list[Any]) -> list[str]:
    """What the name inputs suggest: the site's users and accounts (a site with more
    than ``NAME_SUGGESTIONS``: the accounts and the subjects with a quota or usage).
    One projected read, no model per user."""
    from ...models import UserSiteInfo
    from ...models.base import count, rows

    names = set(accounts) | {st.name for st in statuses}
    if await count(UserSiteInfo, {"site": site}) <= NAME_SUGGESTIONS:
        names |= {r["user"] for r in await rows(UserSiteInfo, {"site": site}, "user")}
    return sorted(names)[:NAME_SUGGESTIONS]


async def operator_context(site: str, states: dict[str, TableState]) -> dict[str, Any]:
    """The site's quota statuses (one ``quota_status``: every subject with a quota or
    usage, and every Slurm account), as the own-quota and the accounts tables."""
    from ...models import QuotaDefaults
    from ...queries.quota import quota_status
    from ...queries.slurm import list_accounts
    from ...queries.usage import list_factors

    accounts = [a.group for a in await list_accounts(site)]
    statuses = await quota_status(site, utcnow(), also=[("account", a) for a in accounts])
    rows = quota_rows(statuses)
    own = [r for r in rows if r["source"] == "own"]
    listed = set(accounts)
    account_rows = [r for r in rows if r["kind"] == "account"
                    and (r["name"] in listed or r["source"] != "none")]
    factors = [{"gpu_type": f.gpu_type, "factor": f.factor,
                "effective_from": f.effective_from} for f in await list_factors(site)]
    return {"defaults": await QuotaDefaults.find_one({"site": site}),
            "quotas": states["quotas"].apply(own),
            "summary": states["accounts"].apply(account_rows),
            "factors": states["factors"].apply(factors),
            "names": await subject_names(site, accounts, statuses),
            "gpu_types": sorted({f["gpu_type"] for f in factors})}


async def show_operator(request: Request, session: Session, site: str | None, *,
                        status: int = 200, errors: dict[str, str] | None = None,
                        values: dict[str, str] | None = None, form: str = "",
                        notice: str = "") -> Response:
    sites = await site_names()
    chosen = choose(sites, site)
    states = read_tables(request, *OPERATOR_TABLES, keep={"site": chosen},
                         path=f"{base_path(request)}/operator")
    context = await operator_context(chosen, states) if chosen else {
        "defaults": None, "quotas": None, "summary": None, "factors": None, "names": [],
        "gpu_types": []}
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


def run_counts(run: dict[str, Any], summary: Any) -> dict[str, Any]:
    """What a run's line says: its stored counts (a reconciler's plan counts, zeros left
    out) and its commands by outcome (``queries.sync_runs.RunSummary``)."""
    counts = {k: v for k, v in (run.get("counts") or {}).items() if v}
    return {"counts": dict(sorted(counts.items())), "outcomes": summary.outcomes,
            "commands": summary.total, "cmds": summary.first}


async def latest_runs(site: str | None) -> list[dict[str, Any]]:
    """The newest run of each (target, site) (a running one too: its steps say how far
    it got): one ``$group`` for the pairs, then one indexed query per pair ((target,
    site, -started_at)): as many as targets x sites, never as many as runs."""
    from ...models import SyncRun

    match: dict[str, Any] = {"site": site} if site else {}
    collection = SyncRun.get_pymongo_collection()
    # sites per target (the embedded store groups by one field, not by a document)
    cursor = await collection.aggregate([
        {"$match": match}, {"$group": {"_id": "$target", "sites": {"$addToSet": "$site"}}}])
    pairs = sorted((g["_id"], s) for g in await cursor.to_list() for s in g["sites"])
    latest = []
    for target, where in pairs:
        found = await collection.find(
            {**match, "target": target, "site": where},
            {"_id": 1, "target": 1, "site": 1, "status": 1, "apply": 1}).sort(
            [("started_at", -1), ("_id", -1)]).limit(1).to_list()
        latest += found
    return latest


async def runs_context(site: str | None, states: dict[str, TableState]) -> dict[str, Any]:
    """One page of runs (sorted, searched and paged in the store), each with its counts
    and its first ``COMMANDS_SHOWN`` commands; the drift of the latest run of each
    target; the last audit's findings. Whatever the number of runs or of their items,
    a fixed number of queries (one per target and site for the latest runs)."""
    from types import SimpleNamespace

    from ...models import AuditRun, SyncRun
    from ...queries.audit import run_findings, severity_rank
    from ...queries.sync_runs import drift_rows, run_summaries

    where = {"site": site} if site else {}
    page = await states["runs"].query(SyncRun, where, "_id", "target", "site", "author",
                                      "apply", "started_at", "finished_at", "status",
                                      "counts", "error")
    summaries = await run_summaries(
        [SimpleNamespace(id=str(r["_id"]), status=r["status"]) for r in page.rows],
        shown=COMMANDS_SHOWN)
    for row in page.rows:
        row |= run_counts(row, summaries[str(row["_id"])])
    latest = {str(r["_id"]): r for r in await latest_runs(site)}
    drift = [{**d, "target": latest[d["run"]]["target"], "site": latest[d["run"]]["site"]}
             for d in await drift_rows([SimpleNamespace(id=i, status=r["status"])
                                        for i, r in latest.items()])]
    audits = await AuditRun.find({}).sort(-AuditRun.started_ms).limit(1).to_list()
    audit = audits[0] if audits else None
    findings = [{**f, "rank": severity_rank(f["severity"])
                 if f.get("severity") in ("info", "low", "medium", "high", "critical") else -1}
                for f in ((await run_findings(audit))[0] if audit else [])
                if site is None or f.get("site") in (None, site)]
    return {"runs": page, "drift": states["drift"].apply(drift), "audit": audit,
            "findings": states["findings"].apply(findings), "shown": COMMANDS_SHOWN}


async def show_history(request: Request, session: Session) -> Response:
    """History with the filter form's values: a bad value is the field's error (422)
    and the filter it names is left out."""
    from ...models import History
    from ...operations import operation_names
    from ...queries.history import history_match, subject_of

    params = request.query_params
    values = {k: params.get(k, "").strip() for k in ("author", "op", "subject", "since",
                                                     "until")}
    errors: dict[str, str] = {}
    known_ops = sorted(operation_names())
    for name in ("author", "subject"):
        if values[name] and not NAME.fullmatch(values[name]):
            errors[name] = "not a valid name (letters, digits, . _ -)"
    if values["op"] and not NAME.fullmatch(values["op"]):
        errors["op"] = "not an operation name"
    days: dict[str, datetime | None] = {"since": None, "until": None}
    for name in days:
        if values[name]:
            try:
                day = datetime.strptime(values[name], "%Y-%m-%d").replace(tzinfo=UTC)
            except ValueError:
                errors[name] = "a day as YYYY-MM-DD"
                continue
            days[name] = day if name == "since" else day + timedelta(days=1, microseconds=-1)
    if days["since"] and days["until"] and days["since"] > days["until"]:
        errors["until"] = "before the first day"
        days["until"] = None
    states = read_tables(request, HISTORY, keep=values)
    match = history_match(**{k: (values[k] or None) if k not in errors else None
                             for k in ("author", "op", "subject")},
                          since=days["since"], until=days["until"])
    page = await states["history"].query(History, match, "_id", "timestamp", "op",
                                         "author", "changes")
    for row in page.rows:
        row["subject"] = subject_of(row.get("changes"))
        row["summary"] = change_summary(row.get("changes"))
    return render(request, "history.html", session, status=422 if errors else 200,
                  page="history", history=page, values=values, errors=errors, ops=known_ops,
                  failure="Not filtered: see the marked fields." if errors else "")


def change_summary(changes: dict[str, Any] | None, limit: int = 240) -> str:
    """``key=value`` pairs of a History row's changes, cut at ``limit`` characters."""
    parts = []
    for key, value in (changes or {}).items():
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        parts.append(f"{key}={text}")
    out = ", ".join(parts)
    return out if len(out) <= limit else out[:limit - 1] + "…"


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
        states = read_tables(request, *RUNS_TABLES, keep={"site": chosen})
        return render(request, "runs.html", session, page="runs", sites=sites,
                      site=chosen, **await runs_context(chosen, states))

    @router.get("/operator/history")
    @page
    async def history(request: Request) -> Response:
        session = await operator_session(request)
        return await show_history(request, session)
