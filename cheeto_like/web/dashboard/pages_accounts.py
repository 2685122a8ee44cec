"""The sponsor / manager page: the accounts a person manages (a manager grant or a
sponsorship), each with its members' usage, quota and status at a site, and the pending
requests for those groups. Operators and admins may open any account (``?account=``).
Each account is checked with ``rules.can(GROUP_READ)``, as ``/api/v1/groups/{name}``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ...auth import rules
from ...models import Request as RequestDoc
from ...models import User
from ...models.fields import utcnow
from .charts import quota_bar
from .guard import page
from .member_usage import member_usage, members_of, month_so_far, usage_pages
from .render import base_path, may_see_accounts, render
from .session import Refused, Session, check_csrf, first, read_form, require_session
from .sites import choose, site_names
from .tables import Column, Table, read_tables
from .usage_range import csv_response, read_range


def _number(text: Any) -> Any:
    return int(text) if str(text).isascii() and str(text).isdigit() else str(text)


PENDING = Table("pending", (
    Column("id", "#", numeric=True, get=lambda p: _number(p["row"].id)),
    Column("kind", "Kind", get=lambda p: p["row"].kind),
    Column("asked", "Asks for, and why", sortable=False,
           get=lambda p: f"{p['view'].get('asked', '')} {p['view'].get('reason') or ''}"),
    Column("requester", "Requested by", get=lambda p: p["row"].requester),
    Column("next_step", "Next step", get=lambda p: p["row"].next_step),
    Column("age", "Age", numeric=True, search=False,
           get=lambda p: p["row"].as_dict()["age_s"]),
    Column("", "Decide")), default_sort="id")


def members_table(account: str) -> Table:
    return Table(f"members-{account}", (
        Column("name", "Member"), Column("status", "Status"),
        Column("cpu", "CPU", numeric=True, search=False, get=lambda r: r["cpu"].percent),
        Column("gpu", "GPU", numeric=True, search=False, get=lambda r: r["gpu"].percent),
        Column("used_h", "Used (h)", numeric=True, search=False),
        Column("source", "Quota")), default_sort="used_h", default_dir="desc",
        tiebreak="name")


async def account_views(site: str, accounts: list[str]) -> list[dict[str, Any]]:
    """Per account: members (with status and their own usage bars) and the account's bars.
    A fixed number of queries: members per account, one user read, one quota status."""
    from ...queries.group import get_group, group_members_anywhere
    from ...queries.quota import quota_status

    members: dict[str, list[str]] = {}
    for account in accounts:
        await get_group(account)
        members[account] = sorted(await group_members_anywhere(account))
    everyone = sorted({m for names in members.values() for m in names})
    users = {u.name: u for u in await User.find({"name": {"$in": everyone}}).to_list()}
    also = [("user", m) for m in everyone] + [("account", a) for a in accounts]
    statuses = {(st.kind, st.name): st for st in await quota_status(site, utcnow(), also=also)}

    def bars(kind: str, name: str) -> dict[str, Any]:
        st = statuses.get((kind, name))
        if st is None:
            return {"cpu": quota_bar(0, 0, None), "gpu": quota_bar(0, 0, None),
                    "source": "none", "used_h": 0.0}
        return {"cpu": quota_bar(st.cpu.used, st.cpu.preallocated, st.cpu.quota),
                "gpu": quota_bar(st.gpu.used, st.gpu.preallocated, st.gpu.quota),
                "source": st.source, "used_h": round((st.cpu.used + st.gpu.used) / 60, 2)}

    views = []
    for account in accounts:
        rows = [{"name": m, "status": users[m].status if m in users else "unknown",
                 **bars("user", m)} for m in members[account]]
        rows.sort(key=lambda r: (-r["used_h"], r["name"]))
        views.append({"name": account, "bars": bars("account", account), "members": rows})
    return views


async def pending_for(request: Request, accounts: list[str],
                      me: str = "") -> list[Any]:
    """The pending requests of these groups, each with what it asks and why (the
    request's own words, its comments): ``{"row": QueueRow, "view": …}``."""
    from ...queries.request import request_queue
    from .pages_requests import view

    config = request.app.state.auth.config
    wanted = set(accounts)
    rows = await request_queue(config.requests, status="pending", include_hippo=False)
    rows = [r for r in rows if r.group is not None and r.group in wanted]
    numbers = [int(r.id) for r in rows]
    docs = {d.number: d for d in await RequestDoc.find(
        {"number": {"$in": numbers}}).to_list()} if numbers else {}
    return [{"row": r, "view": view(docs[int(r.id)], me)} for r in rows
            if int(r.id) in docs]


async def show_accounts(request: Request, session: Session, site: str | None,
                        account: str | None, *, status: int = 200, notice: str = "",
                        failure: str = "", errors: dict[str, str] | None = None) -> Response:
    who = session.who
    if not may_see_accounts(who):
        raise Refused("this page is for sponsors, managers and operators")
    if account:
        if len(account) > 64 or not rules.can(who, rules.GROUP_READ,
                                             rules.Target(account=account)):
            raise Refused(f"you may not see account {account!r}")
        accounts = [account]
    else:
        accounts = sorted(who.managed)
    sites = await site_names()
    chosen = choose(sites, site)
    for name in accounts:  # the same check as the API's, per account shown
        if not rules.can(who, rules.GROUP_READ, rules.Target(account=name)):
            raise Refused(f"you may not see account {name!r}")
    errors = dict(errors or {})
    if account and not await _group_exists(account):  # a typo: the picker's own error
        errors["account"] = f"there is no account named {account!r}"
        accounts = []
        status = 404 if status == 200 else status
    views = await account_views(chosen, accounts) if chosen else []
    pending = await pending_for(request, accounts, who.name) if accounts else []
    lo, hi = month_so_far(utcnow())
    rng = read_range(request.query_params.get("from"), request.query_params.get("to"), None,
                     default_start=lo, default_end=hi)
    readable = [a for a in accounts
                if rules.can(who, rules.USAGE_READ, rules.Target(account=a))]
    usage = await member_usage(chosen, readable, members_of(views), rng) if chosen else {}
    status = 422 if rng.errors and status == 200 else status
    keep = {"site": chosen, "account": account or None, "from": rng.first, "to": rng.last}
    states = read_tables(request, PENDING, *(members_table(v["name"]) for v in views),
                         keep=keep, path=f"{base_path(request)}/accounts",
                         others=[f"usage-{a}" for a in usage])
    for view in views:
        view["page"] = states[f"members-{view['name']}"].apply(view["members"])
    can_pick = rules.can(who, rules.GROUP_LIST)
    return render(request, "accounts.html", session, status=status, page="accounts",
                  usage_range=rng, range_errors=rng.errors,
                  member_usage=usage_pages(request, usage, keep),
                  sites=sites, site=chosen, views=views,
                  pending=states["pending"].apply(pending),
                  account=account or "", can_pick=can_pick,
                  account_names=await _account_names(chosen) if can_pick and chosen else [],
                  notice=notice, failure=failure, errors=errors)


async def _group_exists(name: str) -> bool:
    from ...models import Group

    return await Group.get_pymongo_collection().find_one({"name": name},
                                                         {"_id": 1}) is not None


async def _account_names(site: str) -> list[str]:
    """The picker's suggestions: the site's Slurm accounts (a projected read)."""
    from ...models import SlurmAccount
    from ...models.base import rows

    return sorted({r["group"] for r in await rows(SlurmAccount, {"site": site}, "group")})


DECIDED = {"approve": "Request approved.", "deny": "Request denied."}


async def decide(request: Request, action: str) -> Response:
    """Approve or deny from the pending list: the API's check (``REQUEST_DECIDE`` on the
    request's group and people), then the operation's own (which step this person may
    approve), with the signed-in person as the author and the notifier told."""
    from ...errors import CheetoError
    from ...operations.request import approve_request, deny_request
    from ...queries.request import get_request
    from ..api_requests import _notifier, request_target

    session = await require_session(request)
    fields = await read_form(request)
    check_csrf(fields, session.csrf)
    if not may_see_accounts(session.who):  # the page's own gate, before anything is read
        raise Refused("deciding requests is for sponsors, managers and operators")
    site = first(fields, "site") or None
    if len(site or "") > 64:
        site = None
    text = first(fields, "q_number")
    if not text.isdigit() or not 0 < int(text) < 2**31:
        return await show_accounts(request, session, site, None, status=422,
                                   failure="not a request number")
    number = int(text)
    reason = first(fields, "q_reason").strip()
    if action == "deny" and not reason:
        return await show_accounts(request, session, site, None, status=422,
                                   errors={f"q_reason-{number}": "a reason is required"})
    if len(reason) > 2000:
        return await show_accounts(request, session, site, None, status=422,
                                   errors={f"q_reason-{number}": "at most 2000 characters"})
    who = session.who
    config = request.app.state.auth.config
    try:
        found = await get_request(number)
        if not rules.can(who, rules.REQUEST_DECIDE,
                         request_target(found.requester, found.user, found.group)):
            raise Refused(f"you may not decide request {number}")
        if action == "approve":
            await approve_request(request.app.state.store, who.author, config, number,
                                  notifier=_notifier(request, who))
        else:
            await deny_request(request.app.state.store, who.author, config, number,
                               reason=reason or "", notifier=_notifier(request, who))
    except CheetoError as exc:
        return await show_accounts(request, session, site, None, status=exc.http_status,
                                   failure=f"request {number}: {exc.message}")
    query = f"?site={quote(site)}&done={action}" if site else f"?done={action}"
    return RedirectResponse(f"{base_path(request)}/accounts{query}", status_code=303,
                            headers={"Cache-Control": "no-store"})


async def usage_csv(request: Request, site: str | None, account: str | None) -> Response:
    """Hours per member of one account over the range, as CSV (``USAGE_READ`` on it)."""
    session = await require_session(request)
    who = session.who
    if not may_see_accounts(who):
        raise Refused("Members' usage is for sponsors, managers and operators.")
    if not account or len(account) > 64:
        raise Refused("Name the account (account=…).", 422)
    if not rules.can(who, rules.USAGE_READ, rules.Target(account=account)):
        raise Refused(f"You may not see the usage of account {account!r}.")
    chosen = choose(await site_names(), site)
    if chosen is None:
        raise Refused("There is no site yet.", 404)
    lo, hi = month_so_far(utcnow())
    rng = read_range(request.query_params.get("from"), request.query_params.get("to"), None,
                     default_start=lo, default_end=hi)
    if rng.errors:
        raise Refused("; ".join(f"{k}: {v}" for k, v in rng.errors.items()), 422)
    views = await account_views(chosen, [account])
    rows = (await member_usage(chosen, [account], members_of(views), rng))[account]
    return csv_response(
        ["user", "member", "jobs", "cpu_hours", "gpu_hours"],
        ([r["name"], "yes" if r["member"] else "no", r["jobs"], r["cpu_h"], r["gpu_h"]]
         for r in rows),
        f"usage-{account}-{chosen}-{rng.first}-{rng.last}.csv")


def add_routes(router: APIRouter) -> None:
    @router.get("/accounts/usage.csv")
    @page
    async def accounts_csv(request: Request, site: str | None = None,
                           account: str | None = None) -> Response:
        return await usage_csv(request, site, account)

    @router.get("/accounts")
    @page
    async def accounts_page(request: Request, site: str | None = None,
                            account: str | None = None, done: str | None = None) -> Response:
        session = await require_session(request)
        return await show_accounts(request, session, site, account,
                                   notice=DECIDED.get(done or "", ""))

    for action in ("approve", "deny"):
        def make(action: str = action) -> Any:
            @page
            async def handler(request: Request) -> Response:
                return await decide(request, action)
            return handler

        router.add_api_route(f"/accounts/requests/{action}", make(), methods=["POST"],
                             name=f"dashboard-request-{action}")
