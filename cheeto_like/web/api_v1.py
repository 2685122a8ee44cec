"""``/api/v1``: one API for the CLI client and the web, over the same queries and
operations as ``cheeto ng``.

Every route authenticates (``web.deps``) and asks ``auth.rules.can`` before it reads or
writes; writes run operations with the authenticated principal as the History author
(no route takes an author). Lists take ``limit``/``offset`` and answer
``{"items", "total", "limit", "offset"}``. Errors are RFC 9457 problem details
(``web.problems``). ``ROUTE_ACTIONS`` names what each route is about, for the
authorisation matrix test.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Query, Request, Response
from fastapi import Path as PathParam
from fastapi.exceptions import HTTPException
from pydantic import BaseModel, ConfigDict, Field

from ..auth import rules
from ..auth.login import LoginFailed, authenticate, valid_name
from ..auth.principal import Principal, subject_of
from ..errors import InvalidInput
from ..models import GroupMembership, SyncRun, User
from ..models.auth import GrantedRole, Scope
from ..models.base import select
from ..models.fields import utcnow
from ..models.quota import Period, period_window
from .api_requests import add_request_routes
from .client_address import client_address
from .deps import Auth, CurrentPrincipal, authorize, get_auth
from .idempotency import IdempotencyKey, run_keyed
from .problems import responses

log = logging.getLogger("cheeto_like.api")

NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
KEY_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$"
Name = Annotated[str, PathParam(pattern=NAME, max_length=64)]
SiteP = Annotated[str, PathParam(pattern=NAME, max_length=64, description="site name")]
Limit = Annotated[int, Query(ge=1, le=1000, description="page size")]
Offset = Annotated[int, Query(ge=0, le=10_000_000, description="items to skip")]
OptName = Annotated[str | None, Query(pattern=NAME, max_length=64)]
READ_ERRORS = responses(400, 401, 403, 404, 422, 503)
WRITE_ERRORS = responses(400, 401, 403, 404, 409, 422, 503)


def page(items: list[Any], limit: int, offset: int) -> dict[str, Any]:
    """A page of a short list computed whole (a site's quotas, roles, keys)."""
    return paged(items[offset:offset + limit], len(items), limit, offset)


def paged(items: list[Any], total: int, limit: int, offset: int) -> dict[str, Any]:
    """A page the store cut (``skip``/``limit``) and counted: what long lists use."""
    return {"items": items, "total": total, "limit": limit, "offset": offset}


def user_view(user: User) -> dict[str, Any]:
    """A user without secrets (never the password hash)."""
    return {"name": user.name, "fullname": user.fullname, "email": user.email,
            "uid": user.uid, "gid": user.gid, "type": user.type, "status": user.status,
            "access": list(user.access), "shell": user.shell,
            "home_directory": user.home_directory, "expires_at": user.expires_at}


USER_FIELDS = ("name", "fullname", "email", "uid", "gid", "type", "status", "access",
               "shell", "home_directory", "expires_at")
# what a stored row leaves out reads as the model's default (as a model would load it)
_USER_DEFAULTS = {f: User.model_fields[f].get_default(call_default_factory=True)
                  for f in USER_FIELDS if not User.model_fields[f].is_required()}


def user_row_view(row: dict[str, Any]) -> dict[str, Any]:
    """``user_view`` of a raw projected row (``queries.user.page_user_rows``): the same
    fields and values, without building the model."""
    view = {f: row.get(f, _USER_DEFAULTS.get(f)) for f in USER_FIELDS}
    view["access"] = list(view["access"] or ())
    return view


async def user_target(name: str) -> rules.Target:
    edges = await select(GroupMembership, None, user=name)
    return rules.Target(user=name, accounts=frozenset(e.group for e in edges))


def subject_target(user: str | None, account: str | None) -> rules.Target:
    if user is not None and account is not None:
        raise InvalidInput("give user or account, not both")
    return rules.Target(user=user, account=account)


async def subject_allowed(who: Principal, action: str, user: str | None,
                          account: str | None, site: str | None = None) -> None:
    subject_target(user, account)  # both: bad input, before anything is read
    if user is not None:
        authorize(who, action, await user_target(user), site)
    else:
        authorize(who, action, subject_target(user, account), site)


def default_subject(who: Principal, action: str, user: str | None,
                    account: str | None) -> str | None:
    """Without ``user`` and ``account`` a person who may not read the whole site is
    answered about themselves (the pages' twin: ``/usage/farm`` is "my usage"); those who
    may (operators, read keys) keep the site-wide answer."""
    if (user is None and account is None and who.kind == "user"
            and not rules.can(who, action)):
        return who.name
    return user


class Login(BaseModel):
    model_config = ConfigDict(extra="forbid")
    username: str = Field(min_length=1, max_length=64)
    password: str = Field(min_length=1, max_length=1024)


class TokenOut(BaseModel):
    access_token: str
    token_type: str = "bearer"
    expires_at: int
    user: str


class QuotaIn(BaseModel):
    """Omitted fields keep their value; ``null`` means unlimited (``budget``: none). A
    budget is money in the site's currency (the config's ``usage.currency``)."""

    model_config = ConfigDict(extra="forbid")
    cpu_minutes: float | None = Field(default=None, ge=0, le=1e12)
    gpu_minutes: float | None = Field(default=None, ge=0, le=1e12)
    budget: float | None = Field(default=None, ge=0, le=1e12)
    period: Period | None = None
    start: datetime | None = None
    end: datetime | None = None
    carry_over: bool | None = None


class DefaultsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user_cpu_minutes: float | None = Field(default=None, ge=0, le=1e12)
    user_gpu_minutes: float | None = Field(default=None, ge=0, le=1e12)
    account_cpu_minutes: float | None = Field(default=None, ge=0, le=1e12)
    account_gpu_minutes: float | None = Field(default=None, ge=0, le=1e12)
    user_budget: float | None = Field(default=None, ge=0, le=1e12)
    account_budget: float | None = Field(default=None, ge=0, le=1e12)
    period: Period | None = None
    start: datetime | None = None
    end: datetime | None = None
    carry_over: bool | None = None


class AdjustmentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user: str | None = Field(default=None, pattern=NAME)
    account: str | None = Field(default=None, pattern=NAME)
    cpu_minutes: float = Field(default=0.0, ge=-1e12, le=1e12)
    gpu_minutes: float = Field(default=0.0, ge=-1e12, le=1e12)
    money: float = Field(default=0.0, ge=-1e12, le=1e12)  # against a budget
    reason: str = Field(min_length=1, max_length=500)


class FactorIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    factor: float = Field(ge=0, le=1000)
    effective_from: datetime | None = None


class RoleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user: str = Field(pattern=NAME)
    role: GrantedRole
    accounts: list[Annotated[str, Field(pattern=NAME)]] = Field(default_factory=list,
                                                                 max_length=1000)


class KeyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=KEY_NAME)
    scopes: list[Scope] = Field(min_length=1, max_length=3)
    expires_in_days: float | None = Field(default=None, gt=0, le=3650)


class RotateIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    overlap_hours: float | None = Field(default=None, ge=0, le=720)
    expires_in_days: float | None = Field(default=None, gt=0, le=3650)


def _kept(model: BaseModel, field: str) -> Any:
    """An operation's "keep" for a field the body left out."""
    return getattr(model, field) if field in model.model_fields_set else "keep"


def _period(model: QuotaIn | DefaultsIn) -> dict[str, Any]:
    return {"period": model.period or "keep", "start": model.start, "end": model.end,
            "carry_over": model.carry_over}


def build_router(prefix: str) -> APIRouter:
    """The ``/api/v1`` routes (under the API's ``prefix``)."""
    router = APIRouter(prefix=f"{prefix}/api/v1", tags=["v1"])

    def store_of(request: Request) -> Any:
        return request.app.state.store

    # -- identity --------------------------------------------------------------------

    @router.post("/login", response_model=TokenOut, summary="sign in: a signed token",
                 responses=responses(400, 401, 422, 429, 503), tags=["identity"])
    async def login(request: Request, body: Login,
                    auth: Annotated[Auth, Depends(get_auth)]) -> TokenOut:
        address = client_address(request, auth.trusted_proxies)
        database = store_of(request).database
        wait = await auth.limiter.retry_after(database, body.username, address)
        if wait > 0:
            log.info("sign-in limited for %s from %s (%.0f s)", repr(body.username)
                     if valid_name(body.username) else "(not a user name)", address, wait)
            raise HTTPException(429, "too many failed sign-ins; try again later",
                                headers={"Retry-After": str(int(wait) + 1)})
        try:
            name = await authenticate(auth.config, body.username, body.password)
        except LoginFailed:
            await auth.limiter.failed(database, body.username, address)
            # a name that is not a valid login may be a password typed in the wrong box
            shown = repr(body.username) if valid_name(body.username) else "(not a user name)"
            log.info("sign-in refused for %s from %s", shown, address)
            raise HTTPException(401, "invalid user name or password") from None
        await auth.limiter.succeeded(database, body.username, address)
        token, claims = auth.issuer.issue(await subject_of(name))
        log.info("signed in: %s from %s (jti %s)", name, address, claims.jti)
        return TokenOut(access_token=token, expires_at=claims.exp, user=name)

    @router.post("/logout", status_code=204, summary="revoke the token of this request",
                 responses=responses(400, 401, 422, 503), tags=["identity"])
    async def logout(request: Request, who: CurrentPrincipal) -> Response:
        from ..operations.auth import RevokeToken

        if who.token_id is None or who.token_exp is None:
            raise HTTPException(422, "only a signed-in person's token can be revoked")
        await RevokeToken.run(store_of(request), who.author, skip_history=True,
                              jti=who.token_id, exp_epoch=who.token_exp, user=who.name)
        return Response(status_code=204)

    @router.get("/me", summary="who is asking, with their roles", responses=READ_ERRORS,
                tags=["identity"])
    async def me(who: CurrentPrincipal) -> dict[str, Any]:
        if who.kind == "user":
            authorize(who, rules.ME)
        return {"name": who.name, "kind": who.kind, "role": who.role,
                "roles": sorted(who.roles), "managed_accounts": sorted(who.managed),
                "member_of": sorted(who.member_of), "scopes": sorted(who.scopes),
                "token_expires_at": who.token_exp}

    # -- people and places -----------------------------------------------------------

    @router.get("/users", summary="users (filter by site, group, status)",
                responses=READ_ERRORS, tags=["directory"])
    async def users(who: CurrentPrincipal, limit: Limit = 100, offset: Offset = 0,
                    site: OptName = None, group: OptName = None,
                    status: OptName = None) -> dict[str, Any]:
        from ..queries.user import page_user_rows

        authorize(who, rules.USER_LIST)
        found, total = await page_user_rows(limit=limit, offset=offset, fields=USER_FIELDS,
                                            site=site, group=group, status=status)
        return paged([user_row_view(row) for row in found], total, limit, offset)

    @router.get("/users/{name}", summary="one user", responses=READ_ERRORS,
                tags=["directory"])
    async def user(who: CurrentPrincipal, name: Name) -> dict[str, Any]:
        from ..queries.user import get_user, user_sites

        authorize(who, rules.USER_READ, await user_target(name))
        found = await get_user(name)
        return {**user_view(found), "sites": sorted(await user_sites(found.name))}

    @router.get("/users/{name}/slurm/{site}", summary="a user's Slurm associations at a site",
                responses=READ_ERRORS, tags=["slurm"])
    async def user_slurm(who: CurrentPrincipal, name: Name, site: SiteP) -> dict[str, Any]:
        from ..queries.slurm import user_slurm_at_site
        from ..queries.user import get_user

        authorize(who, rules.USER_READ, await user_target(name))
        await get_user(name)
        reach = await user_slurm_at_site(name, site)
        return {"user": name, "site": site, "accounts": [r.as_dict() for r in reach]}

    @router.get("/why/{site}/{user}", summary="why a user can or cannot submit at a site",
                responses=READ_ERRORS, tags=["slurm"])
    async def why(who: CurrentPrincipal, site: SiteP, user: Name) -> dict[str, Any]:
        from ..sync.slurm.why import explain

        authorize(who, rules.USER_READ, await user_target(user))
        return await explain(site, user, runner=None, scontrol=None)

    @router.get("/groups", summary="groups (those you may see)", responses=READ_ERRORS,
                tags=["directory"])
    async def groups(who: CurrentPrincipal, limit: Limit = 100, offset: Offset = 0,
                     site: OptName = None, member: OptName = None,
                     type: Annotated[str | None, Query(pattern=r"^[a-z]{1,16}$")] = None,
                     ) -> dict[str, Any]:
        from ..queries.group import page_groups

        visible = rules.visible_accounts(who)
        if who.kind != "user" and visible is not None:  # a key without api:read
            authorize(who, rules.GROUP_LIST)
        rows, total = await page_groups(limit=limit, offset=offset, type=type, site=site,
                                        member=member, among=visible)
        return paged(rows, total, limit, offset)

    @router.get("/groups/{name}", summary="one group and its members",
                responses=READ_ERRORS, tags=["directory"])
    async def group(who: CurrentPrincipal, name: Name) -> dict[str, Any]:
        from ..queries.group import get_group, group_members_anywhere

        authorize(who, rules.GROUP_READ, rules.Target(account=name))
        found = await get_group(name)
        edges = await select(GroupMembership, None, group=found.name)
        sponsors = sorted({e.user for e in edges if "sponsor" in e.roles})
        return {"name": found.name, "gid": found.gid, "type": found.type,
                "members": sorted(await group_members_anywhere(found.name)),
                "sponsors": sponsors}

    @router.get("/sites", summary="sites", responses=READ_ERRORS, tags=["directory"])
    async def sites(who: CurrentPrincipal, limit: Limit = 100,
                    offset: Offset = 0) -> dict[str, Any]:
        from ..queries.site import list_sites

        authorize(who, rules.SITE_READ)
        rows = [{"name": s.name, "fqdn": s.fqdn, "aliases": list(s.aliases),
                 "cluster": s.cluster_name} for s in await list_sites()]
        return page(sorted(rows, key=lambda r: r["name"]), limit, offset)

    @router.get("/sites/{site}", summary="one site", responses=READ_ERRORS,
                tags=["directory"])
    async def site_one(who: CurrentPrincipal, site: SiteP) -> dict[str, Any]:
        from ..queries.site import get_site

        authorize(who, rules.SITE_READ)
        s = await get_site(site)
        return {"name": s.name, "fqdn": s.fqdn, "aliases": list(s.aliases),
                "cluster": s.cluster_name}

    # -- usage and quotas ------------------------------------------------------------

    @router.get("/usage/{site}", summary="usage over a period (jobs that ended in it)",
                responses=READ_ERRORS, tags=["usage"])
    async def usage(who: CurrentPrincipal, site: SiteP, user: OptName = None,
                    account: OptName = None,
                    period: Literal["monthly", "quarterly", "yearly", "none"] = "monthly",
                    start: datetime | None = None, end: datetime | None = None,
                    by: Literal["user", "account", "partition", "gpu-type",
                                "day"] | None = None,
                    ) -> dict[str, Any]:
        from ..queries.site import get_site
        from ..queries.usage import usage_report

        user = default_subject(who, rules.USAGE_READ, user, account)
        await subject_allowed(who, rules.USAGE_READ, user, account, site)
        found = await get_site(site)
        if (start is None) != (end is None):
            raise InvalidInput("start and end go together")
        # a time without an offset is UTC, as the CLI reads one (mixing the two would raise)
        start, end = (t.replace(tzinfo=UTC) if t is not None and t.tzinfo is None else t
                      for t in (start, end))
        if start is not None and end is not None:
            if end <= start:
                raise InvalidInput("end must come after start")
            lo, hi = start, end
        else:
            lo, hi = period_window(period, utcnow())
        report = await usage_report(found.name, lo, hi, by=by, user=user, account=account)
        return {"site": found.name, "start": lo, "end": hi, "by": by, "user": user,
                "account": account, "rows": report.table(),
                "total": report.total.as_dict(None, report.priced)}

    @router.get("/quotas/{site}", summary="used, quota and percent (one subject or all)",
                responses=READ_ERRORS, tags=["quota"])
    async def quotas(who: CurrentPrincipal, site: SiteP, user: OptName = None,
                     account: OptName = None, limit: Limit = 100,
                     offset: Offset = 0) -> dict[str, Any]:
        from ..queries.quota import check_subject, quota_status
        from ..queries.site import get_site

        user = default_subject(who, rules.QUOTA_READ, user, account)
        await subject_allowed(who, rules.QUOTA_READ, user, account, site)
        found = await get_site(site)
        await check_subject(found.name, user=user, account=account)  # a typo: 404
        rows = await quota_status(found.name, utcnow(), user=user, account=account)
        return page([r.as_dict() for r in rows], limit, offset)

    async def set_quota(request: Request, who: Principal, site: str, body: QuotaIn,
                        **subject: str) -> dict[str, Any]:
        from ..operations.quota import SetQuota

        authorize(who, rules.QUOTA_WRITE)
        q = await SetQuota.run(store_of(request), who.author, site=site, **subject,
                               cpu_minutes=_kept(body, "cpu_minutes"),
                               gpu_minutes=_kept(body, "gpu_minutes"),
                               budget=_kept(body, "budget"), **_period(body))
        return {"site": q.site, "user": q.user, "account": q.account,
                "cpu_minutes": q.cpu_minutes, "gpu_minutes": q.gpu_minutes,
                "budget": q.budget, "period": q.period, "carry_over": q.carry_over}

    @router.put("/quotas/{site}/users/{name}", summary="set a user's quota",
                responses=WRITE_ERRORS, tags=["quota"])
    async def quota_user(request: Request, who: CurrentPrincipal, site: SiteP, name: Name,
                         body: QuotaIn) -> dict[str, Any]:
        return await set_quota(request, who, site, body, user=name)

    @router.put("/quotas/{site}/accounts/{name}", summary="set an account's quota",
                responses=WRITE_ERRORS, tags=["quota"])
    async def quota_account(request: Request, who: CurrentPrincipal, site: SiteP,
                            name: Name, body: QuotaIn) -> dict[str, Any]:
        return await set_quota(request, who, site, body, account=name)

    async def remove_quota(request: Request, who: Principal, site: str,
                           **subject: str) -> Response:
        from ..operations.quota import RemoveQuota

        authorize(who, rules.QUOTA_WRITE)
        await RemoveQuota.run(store_of(request), who.author, site=site, **subject)
        return Response(status_code=204)

    @router.delete("/quotas/{site}/users/{name}", status_code=204,
                   summary="remove a user's quota (the defaults apply)",
                   responses=WRITE_ERRORS, tags=["quota"])
    async def quota_user_rm(request: Request, who: CurrentPrincipal, site: SiteP,
                            name: Name) -> Response:
        return await remove_quota(request, who, site, user=name)

    @router.delete("/quotas/{site}/accounts/{name}", status_code=204,
                   summary="remove an account's quota (the defaults apply)",
                   responses=WRITE_ERRORS, tags=["quota"])
    async def quota_account_rm(request: Request, who: CurrentPrincipal, site: SiteP,
                               name: Name) -> Response:
        return await remove_quota(request, who, site, account=name)

    @router.get("/adjustments/{site}", summary="usage adjustments at a site",
                responses=READ_ERRORS, tags=["quota"])
    async def adjustments(who: CurrentPrincipal, site: SiteP, user: OptName = None,
                          account: OptName = None, limit: Limit = 100,
                          offset: Offset = 0) -> dict[str, Any]:
        from ..models import QuotaAdjustment
        from ..models.base import count
        from ..queries.site import get_site

        user = default_subject(who, rules.QUOTA_READ, user, account)
        await subject_allowed(who, rules.QUOTA_READ, user, account, site)
        found = await get_site(site)
        # one document, not ``$and``: the embedded store answers ``$and`` in Python
        where: dict[str, Any] = {"site": found.name}
        if user is not None:
            where["user"] = user
        elif account is not None:
            where["account"] = account
        total = await count(QuotaAdjustment, where)
        # ``_id`` breaks ties (whole seconds): pages neither repeat nor skip a row
        rows = await QuotaAdjustment.find(where).sort(
            [("at_epoch", -1), ("_id", 1)]).skip(offset).limit(limit).to_list()
        return paged([{"user": a.user, "account": a.account, "cpu_minutes": a.cpu_minutes,
                       "gpu_minutes": a.gpu_minutes, "reason": a.reason, "at": a.at}
                      for a in rows], total, limit, offset)

    @router.post("/adjustments/{site}", status_code=201,
                 summary="credit (-) or debit (+) usage, with a reason",
                 responses=WRITE_ERRORS, tags=["quota"])
    async def adjust(request: Request, who: CurrentPrincipal, site: SiteP,
                     body: AdjustmentIn, key: IdempotencyKey = None) -> dict[str, Any]:
        from ..operations.quota import AdjustUsage

        authorize(who, rules.QUOTA_WRITE)
        return await run_keyed(
            AdjustUsage, store_of(request), who, key, f"adjust:{site}", body,
            lambda a: {"user": a.user, "account": a.account, "cpu_minutes": a.cpu_minutes,
                       "gpu_minutes": a.gpu_minutes, "money": a.money, "reason": a.reason,
                       "at": a.at},
            site=site, user=body.user, account=body.account, cpu_minutes=body.cpu_minutes,
            gpu_minutes=body.gpu_minutes, money=body.money, reason=body.reason)

    @router.get("/defaults/{site}", summary="a site's default quotas",
                responses=READ_ERRORS, tags=["quota"])
    async def defaults(who: CurrentPrincipal, site: SiteP) -> dict[str, Any]:
        from ..models import QuotaDefaults
        from ..queries.site import get_site

        authorize(who, rules.SETTINGS_READ)
        found = await get_site(site)
        d = await QuotaDefaults.find_one({"site": found.name})
        return _defaults_view(found.name, d)

    @router.put("/defaults/{site}", summary="set a site's default quotas",
                responses=WRITE_ERRORS, tags=["quota"])
    async def defaults_set(request: Request, who: CurrentPrincipal, site: SiteP,
                           body: DefaultsIn) -> dict[str, Any]:
        from ..operations.quota import SetQuotaDefaults

        authorize(who, rules.QUOTA_WRITE)
        fields = ("user_cpu_minutes", "user_gpu_minutes", "account_cpu_minutes",
                  "account_gpu_minutes", "user_budget", "account_budget")
        d = await SetQuotaDefaults.run(store_of(request), who.author, site=site,
                                       **{f: _kept(body, f) for f in fields}, **_period(body))
        return _defaults_view(d.site, d)

    @router.get("/gpu-factors/{site}", summary="GPU charge factors, versioned in time",
                responses=READ_ERRORS, tags=["quota"])
    async def factors(who: CurrentPrincipal, site: SiteP) -> dict[str, Any]:
        from ..queries.site import get_site
        from ..queries.usage import list_factors

        authorize(who, rules.SETTINGS_READ)
        found = await get_site(site)
        rows = [{"type": f.gpu_type, "factor": f.factor, "effective_from": f.effective_from}
                for f in await list_factors(found.name)]
        return {"site": found.name, "items": rows}

    @router.put("/gpu-factors/{site}/{gpu_type}", summary="a GPU type's factor from a time on",
                responses=WRITE_ERRORS, tags=["quota"])
    async def factor_set(request: Request, who: CurrentPrincipal, site: SiteP,
                         gpu_type: Annotated[str, PathParam(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]"
                                                                    r"{0,63}$")],
                         body: FactorIn) -> dict[str, Any]:
        from ..operations.quota import SetGpuFactor

        authorize(who, rules.QUOTA_WRITE)
        f = await SetGpuFactor.run(store_of(request), who.author, site=site, gpu_type=gpu_type,
                                   factor=body.factor, effective_from=body.effective_from)
        return {"site": f.site, "type": f.gpu_type, "factor": f.factor,
                "effective_from": f.effective_from}

    # -- roles and keys --------------------------------------------------------------

    @router.get("/roles", summary="role grants (and sponsors, managers implicitly)",
                responses=READ_ERRORS, tags=["admin"])
    async def roles(who: CurrentPrincipal, user: OptName = None, limit: Limit = 100,
                    offset: Offset = 0) -> dict[str, Any]:
        from ..queries.auth import list_roles

        authorize(who, rules.ROLE_READ)
        return page(await list_roles(user), limit, offset)

    @router.post("/roles", status_code=201, summary="grant a role",
                 responses=WRITE_ERRORS, tags=["admin"])
    async def role_grant(request: Request, who: CurrentPrincipal,
                         body: RoleIn) -> dict[str, Any]:
        from ..operations.auth import GrantRole

        authorize(who, rules.ROLE_WRITE)
        g = await GrantRole.run(store_of(request), who.author, user=body.user, role=body.role,
                                accounts=body.accounts)
        return {"user": g.user, "role": g.role, "accounts": list(g.accounts)}

    @router.delete("/roles/{user}/{role}", status_code=204,
                   summary="revoke a role (or, for a manager, some of its accounts)",
                   responses=WRITE_ERRORS, tags=["admin"])
    async def role_revoke(request: Request, who: CurrentPrincipal, user: Name,
                          role: GrantedRole,
                          account: Annotated[list[Annotated[str, Query(pattern=NAME)]] | None,
                                             Query(max_length=1000)] = None) -> Response:
        from ..operations.auth import RevokeRole

        authorize(who, rules.ROLE_WRITE)
        await RevokeRole.run(store_of(request), who.author, user=user, role=role,
                             accounts=account or [])
        return Response(status_code=204)

    @router.post("/users/{name}/tokens/revoke", status_code=204,
                 summary="end every token and dashboard session of a user",
                 responses=WRITE_ERRORS, tags=["admin"])
    async def user_tokens_revoke(request: Request, who: CurrentPrincipal,
                                 name: Name) -> Response:
        from ..operations.auth import RevokeUserTokens

        authorize(who, rules.TOKENS_REVOKE)
        await RevokeUserTokens.run(store_of(request), who.author, user=name)
        return Response(status_code=204)

    @router.get("/api-keys", summary="API keys (never their secrets)",
                responses=READ_ERRORS, tags=["admin"])
    async def keys(who: CurrentPrincipal, include_revoked: bool = False, limit: Limit = 100,
                   offset: Offset = 0) -> dict[str, Any]:
        from ..queries.auth import list_api_keys

        authorize(who, rules.KEY_READ)
        return page(await list_api_keys(include_revoked=include_revoked), limit, offset)

    @router.get("/api-keys/audit", summary="keys past rotation, unused, never used, expired",
                responses=READ_ERRORS, tags=["admin"])
    async def keys_audit(request: Request, who: CurrentPrincipal,
                         unused_days: Annotated[int, Query(ge=1, le=3650)] = 30,
                         ) -> dict[str, Any]:
        from ..queries.auth import audit_api_keys

        authorize(who, rules.KEY_READ)
        auth: Auth = request.app.state.auth
        found = await audit_api_keys(rotation_days=auth.api.key_rotation_days,
                                     unused_days=unused_days,
                                     grace_days=auth.api.key_new_grace_days)
        return {"items": [f.as_dict() for f in found]}

    @router.post("/api-keys", status_code=201, summary="create a key (its secret shown once)",
                 responses=WRITE_ERRORS, tags=["admin"])
    async def key_create(request: Request, who: CurrentPrincipal,
                         body: KeyIn) -> dict[str, Any]:
        from ..operations.auth import CreateApiKey
        from ..queries.auth import key_view

        authorize(who, rules.KEY_WRITE)
        made = await CreateApiKey.run(store_of(request), who.author, name=body.name,
                                      scopes=body.scopes, expires_in_days=body.expires_in_days)
        return {**key_view(made.key), "secret": made.secret}

    @router.post("/api-keys/{name}/rotate", summary="a new secret; the old one works for "
                 "the overlap window", responses=WRITE_ERRORS, tags=["admin"])
    async def key_rotate(request: Request, who: CurrentPrincipal,
                         name: Annotated[str, PathParam(pattern=KEY_NAME)],
                         body: Annotated[RotateIn | None, Body()] = None) -> dict[str, Any]:
        from ..operations.auth import RotateApiKey
        from ..queries.auth import key_view

        authorize(who, rules.KEY_WRITE)
        auth: Auth = request.app.state.auth
        body = body or RotateIn()
        overlap = body.overlap_hours if body.overlap_hours is not None else (
            auth.api.key_overlap_hours)
        made = await RotateApiKey.run(store_of(request), who.author, name=name,
                                      overlap_hours=overlap,
                                      expires_in_days=body.expires_in_days)
        return {**key_view(made.key), "secret": made.secret}

    @router.delete("/api-keys/{name}", status_code=204, summary="revoke a key now",
                   responses=WRITE_ERRORS, tags=["admin"])
    async def key_revoke(request: Request, who: CurrentPrincipal,
                         name: Annotated[str, PathParam(pattern=KEY_NAME)]) -> Response:
        from ..operations.auth import RevokeApiKey

        authorize(who, rules.KEY_WRITE)
        await RevokeApiKey.run(store_of(request), who.author, name=name)
        return Response(status_code=204)

    add_request_routes(router)  # /requests (web/api_requests.py)

    # -- sync runs -------------------------------------------------------------------

    @router.get("/sync-runs", summary="reconciler runs, newest first",
                responses=READ_ERRORS, tags=["sync"])
    async def sync_runs(who: CurrentPrincipal, site: OptName = None,
                        target: Annotated[str | None, Query(pattern=r"^[a-z]{1,16}$")] = None,
                        limit: Limit = 50, offset: Offset = 0) -> dict[str, Any]:
        authorize(who, rules.SYNC_READ)
        where = {k: v for k, v in (("site", site), ("target", target)) if v is not None}
        from ..models.base import count

        total = await count(SyncRun, where)
        runs = await SyncRun.find(where).sort(-SyncRun.started_at).skip(offset).limit(
            limit).to_list()
        items = [{"id": r.id, "target": r.target, "site": r.site, "author": r.author,
                  "apply": r.apply, "status": r.status, "started_at": r.started_at,
                  "finished_at": r.finished_at, "duration_s": r.duration_s,
                  "counts": r.counts, "error": r.error} for r in runs]
        return {"items": items, "total": total, "limit": limit, "offset": offset}

    return router


def _defaults_view(site: str, d: Any) -> dict[str, Any]:
    if d is None:
        return {"site": site, "user_cpu_minutes": None, "user_gpu_minutes": None,
                "account_cpu_minutes": None, "account_gpu_minutes": None,
                "user_budget": None, "account_budget": None, "period": "none",
                "carry_over": False, "set": False}
    return {"site": site, "user_cpu_minutes": d.user_cpu_minutes,
            "user_gpu_minutes": d.user_gpu_minutes,
            "account_cpu_minutes": d.account_cpu_minutes,
            "account_gpu_minutes": d.account_gpu_minutes, "user_budget": d.user_budget,
            "account_budget": d.account_budget, "period": d.period,
            "period_start": d.period_start, "period_end": d.period_end,
            "carry_over": d.carry_over, "set": True}


def install_v1(app: Any, config: Any, *, issuer: Any = None) -> None:
    """Mount ``/api/v1`` on the API app: routes, problem details, the auth state, and the
    key-use recorder's flush task (started and stopped with the app). ``issuer``: the
    token issuer ``daemon api`` loaded at start (a store-kept key needs the store);
    default: from the config's key file."""
    from .bodylimit import BodyLimit
    from .deps import Auth
    from .problems import install

    api_prefix = (config.api.prefix if config.api is not None else "")
    auth = Auth(config, issuer=issuer)
    app.state.auth = auth
    app.include_router(build_router(api_prefix))
    install(app, f"{api_prefix}/api/v1")
    # outermost of the middleware so far: a large body is refused before anything reads it
    app.add_middleware(BodyLimit, prefix=f"{api_prefix}/api/v1",
                       max_bytes=auth.api.max_body_bytes)
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(running: Any) -> AsyncIterator[Any]:
        async with inner(running) as state:
            auth.recorder.start()
            try:
                yield state
            finally:
                await auth.recorder.close()

    app.router.lifespan_context = lifespan
