"""The sponsor / manager page: the accounts a person manages (a manager grant or a
sponsorship), each with its members' usage, quota and status at a site, and the pending
requests for those groups. Operators and admins may open any account (``?account=``).
Each account is checked with ``rules.can(GROUP_READ)``, as ``/api/v1/groups/{name}``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from ...auth import rules
from ...models import User
from ...models.fields import utcnow
from .charts import quota_bar
from .guard import page
from .render import may_see_accounts, render
from .session import Refused, require_session


async def site_names() -> list[str]:
    from ...queries.site import list_sites

    return sorted(s.name for s in await list_sites())


def choose(sites: list[str], asked: str | None) -> str | None:
    if asked:
        if asked not in sites:
            raise Refused(f"site {asked!r} does not exist", 404)
        return asked
    return sites[0] if sites else None


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


async def pending_for(request: Request, accounts: list[str]) -> list[Any]:
    from ...queries.request import request_queue

    config = request.app.state.auth.config
    wanted = set(accounts)
    rows = await request_queue(config.requests, status="pending", include_hippo=False)
    return [r for r in rows if r.group is not None and r.group in wanted]


def add_routes(router: APIRouter) -> None:
    @router.get("/accounts")
    @page
    async def accounts_page(request: Request, site: str | None = None,
                            account: str | None = None) -> Response:
        session = await require_session(request)
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
        views = await account_views(chosen, accounts) if chosen else []
        pending = await pending_for(request, accounts) if accounts else []
        return render(request, "accounts.html", session, page="accounts", sites=sites,
                      site=chosen, views=views, pending=pending, account=account or "",
                      can_pick=rules.can(who, rules.GROUP_LIST))
