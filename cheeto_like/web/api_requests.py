"""``/api/v1/requests``: the request queue (issue 16) over the same queries and
operations as ``cheeto ng request``.

Who may do what is ``auth.rules`` (``REQUEST_*``): a person sees the requests they filed
or that are for them and those of the groups they manage; operators see all. A route
loads the request, checks the rule (403) and only then answers or writes; which *step*
the person may approve is the operation's own check (``NotAllowed``, also a 403), so
the API and the CLI refuse the same people. The acting person (the History author, the
requester of a new request) is the signed-in person, never a body field. E-mails go out
as from the CLI (when the config has a ``mail`` block), after the commit.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Query, Request
from fastapi import Path as PathParam
from pydantic import BaseModel, ConfigDict, Field

from ..auth import rules
from ..auth.principal import Principal
from ..errors import InvalidInput
from ..models import Request as RequestDoc
from ..models.request import RequestKind
from .deps import CurrentPrincipal, authorize, get_auth
from .idempotency import IdempotencyKey, keyed
from .problems import responses

NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
OptName = Annotated[str | None, Query(pattern=NAME, max_length=64)]
Number = Annotated[int, PathParam(ge=1, le=2**31 - 1, description="the request's number")]
Limit = Annotated[int, Query(ge=1, le=1000, description="page size")]
Offset = Annotated[int, Query(ge=0, le=10_000_000, description="items to skip")]
READ_ERRORS = responses(400, 401, 403, 404, 422, 503)
WRITE_ERRORS = responses(400, 401, 403, 404, 409, 422, 503)
Minutes = float | None
QueueKind = Literal["account", "join", "leave", "access", "quota", "storage", "group"]


class RequestIn(BaseModel):
    """A new request. ``user`` defaults to the signed-in person for the kinds that are
    for a person (account, join, leave, access). Quotas are minutes (``null``: unlimited);
    ``quota`` is a storage size (``2T``)."""

    model_config = ConfigDict(extra="forbid")
    kind: RequestKind
    site: str = Field(pattern=NAME)
    group: str | None = Field(default=None, pattern=NAME)
    user: str | None = Field(default=None, pattern=NAME)
    account: str | None = Field(default=None, pattern=NAME)
    access: list[Annotated[str, Field(pattern=NAME)]] = Field(default_factory=list,
                                                              max_length=32)
    cpu_minutes: Minutes = Field(default=None, ge=0, le=1e12)
    gpu_minutes: Minutes = Field(default=None, ge=0, le=1e12)
    quota: str | None = Field(default=None, max_length=32)
    parent_volume: str | None = Field(default=None, pattern=NAME)
    reason: str | None = Field(default=None, max_length=2000)


class ApproveIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    note: str | None = Field(default=None, max_length=2000)


class DenyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(min_length=1, max_length=2000)


class CommentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(min_length=1, max_length=2000)


def request_target(requester: str | None, user: str | None,
                   group: str | None) -> rules.Target:
    return rules.Target(people=frozenset(p for p in (requester, user) if p), account=group)


def row_visible(who: Principal, row: Any) -> bool:
    """A queue row: HiPPO's name several groups (``"a, b"``); any one of them will do."""
    groups = (row.group or "").split(", ") if row.group else [None]
    return any(rules.can(who, rules.REQUEST_READ, request_target(row.requester, row.user, g))
               for g in groups)


async def load(who: Principal, number: int, action: str) -> RequestDoc:
    from ..queries.request import get_request

    found = await get_request(number)
    authorize(who, action, request_target(found.requester, found.user, found.group))
    return found


def _notifier(request: Request, who: Principal) -> Any:
    from ..operations.notify import notifier_from_config

    config = get_auth(request).config
    if config.mail is None:
        return None
    return notifier_from_config(request.app.state.store, who.author, config)


def add_request_routes(router: APIRouter) -> None:
    """The queue's routes, on the ``/api/v1`` router."""

    def config_of(request: Request) -> Any:
        return get_auth(request).config

    @router.get("/requests", summary="the request queue (yours, your groups'; operators: all)",
                responses=READ_ERRORS, tags=["requests"])
    async def requests(request: Request, who: CurrentPrincipal,
                       status: Literal["pending", "done", "denied", "all"] = "pending",
                       kind: QueueKind | None = None,
                       site: OptName = None, group: OptName = None, user: OptName = None,
                       breached: bool = False,
                       triage: Annotated[bool, Query(description="oldest breach first, then "
                                                     "by kind and age")] = False,
                       hippo: Annotated[bool, Query(description="include HiPPO's account "
                                                    "requests")] = True,
                       limit: Limit = 100, offset: Offset = 0) -> dict[str, Any]:
        from ..queries.request import request_queue
        from ..queries.site import get_site
        from ..queries.user import get_user

        authorize(who, rules.REQUEST_LIST)
        if site is not None:
            site = (await get_site(site)).name
        if user is not None:
            await get_user(user)
        rows = await request_queue(config_of(request).requests,
                                   status=None if status == "all" else status, kind=kind,
                                   site=site, group=group, user=user, breached=breached,
                                   include_hippo=hippo, triage=triage)
        if not rules.can(who, rules.REQUEST_READ):  # not everything: the rows one may see
            rows = [r for r in rows if row_visible(who, r)]
        items = [r.as_dict() for r in rows]
        return {"items": items[offset:offset + limit], "total": len(items), "limit": limit,
                "offset": offset,
                "breached": sum(1 for r in rows if r.sla.breached)}

    @router.post("/requests", status_code=201, summary="file a request (you are the requester)",
                 responses=WRITE_ERRORS, tags=["requests"])
    async def request_new(request: Request, who: CurrentPrincipal,
                          body: RequestIn, key: IdempotencyKey = None) -> dict[str, Any]:
        from ..operations.request import file_request, file_request_once, request_detail

        user = body.user
        if user is None and (body.kind in ("account", "join", "leave", "access")
                             or (body.kind == "quota" and body.account is None)):
            user = who.name
        sponsoring = body.account if body.kind == "quota" and body.account else body.group
        if sponsoring is None:
            raise InvalidInput(f"a {body.kind} request needs group (whose sponsors approve it)")
        authorize(who, rules.REQUEST_FILE, rules.Target(user=user, account=sponsoring))
        amounts = {k: getattr(body, k) if k in body.model_fields_set else "keep"
                   for k in ("cpu_minutes", "gpu_minutes")}
        config = config_of(request)
        store, notifier = request.app.state.store, _notifier(request, who)
        fields = dict(kind=body.kind, site=body.site, group=body.group, user=user,
                      account=body.account, access=body.access, quota=body.quota,
                      parent_volume=body.parent_volume, reason=body.reason, **amounts)
        return await keyed(
            key, who, "request:new", body, lambda made: request_detail(made, config),
            lambda: file_request(store, who.author, config, notifier=notifier, **fields),
            lambda once: file_request_once(store, who.author, config, once,
                                           notifier=notifier, **fields))

    @router.get("/requests/{number}", summary="one request: approvals, comments, what it did",
                responses=READ_ERRORS, tags=["requests"])
    async def request_show(request: Request, who: CurrentPrincipal,
                           number: Number) -> dict[str, Any]:
        from ..operations.request import request_detail

        return request_detail(await load(who, number, rules.REQUEST_READ), config_of(request))

    @router.post("/requests/{number}/approve",
                 summary="approve the next step (the last one carries the request out)",
                 responses=WRITE_ERRORS, tags=["requests"])
    async def request_approve(request: Request, who: CurrentPrincipal, number: Number,
                              body: Annotated[ApproveIn | None, Body()] = None,
                              ) -> dict[str, Any]:
        from ..operations.request import approve_request, request_detail

        await load(who, number, rules.REQUEST_DECIDE)
        config = config_of(request)
        done = await approve_request(request.app.state.store, who.author, config, number,
                                     note=(body or ApproveIn()).note,
                                     notifier=_notifier(request, who))
        return request_detail(done, config)

    @router.post("/requests/{number}/deny", summary="deny a request (a reason is required)",
                 responses=WRITE_ERRORS, tags=["requests"])
    async def request_deny(request: Request, who: CurrentPrincipal, number: Number,
                           body: DenyIn) -> dict[str, Any]:
        from ..operations.request import deny_request, request_detail

        await load(who, number, rules.REQUEST_DECIDE)
        config = config_of(request)
        denied = await deny_request(request.app.state.store, who.author, config, number,
                                    reason=body.reason, notifier=_notifier(request, who))
        return request_detail(denied, config)

    @router.post("/requests/{number}/comments", status_code=201, summary="add a comment",
                 responses=WRITE_ERRORS, tags=["requests"])
    async def request_comment(request: Request, who: CurrentPrincipal, number: Number,
                              body: CommentIn, key: IdempotencyKey = None) -> dict[str, Any]:
        from ..operations.request import comment_request, comment_request_once, request_detail

        await load(who, number, rules.REQUEST_COMMENT)
        config = config_of(request)
        store, notifier = request.app.state.store, _notifier(request, who)
        return await keyed(
            key, who, f"request:{number}:comment", body,
            lambda commented: request_detail(commented, config),
            lambda: comment_request(store, who.author, config, number, text=body.text,
                                    notifier=notifier),
            lambda once: comment_request_once(store, who.author, config, number, once,
                                              text=body.text, notifier=notifier))
