"""Requests: file, approve, deny, comment, escalate.

The workflow (DESIGN: writes only through operations):

1. ``FileRequest`` checks what the request names exists and numbers it. Its steps come
   from the config: the group's ``sponsor``, then an ``operator`` for kinds that need
   one. A requester who may approve the sponsor step (a sponsor of the group, or a
   manager granted it) has vouched by filing: that step is recorded as approved.
2. ``ApproveRequest`` records one step's approval by the acting person (``author``),
   after checking they may approve it (``queries.request.may_approve``; nobody approves
   the operator step of their own request). The last approval runs the kind's existing
   operations with ``Other.within(self, session, …)`` in the same transaction and
   records each in ``actions``; if one fails, nothing is written: the request stays
   pending, without the approval.
3. ``DenyRequest`` closes it with a reason (the next step's approvers, or an operator).
4. ``CommentRequest`` appends a comment (anyone: the requester answering a question too).
5. ``EscalateRequests`` (the ``request_escalate`` task) stamps ``escalated_epoch`` on
   each request past its SLA, once, and records a ``SyncRun`` (target ``requests``)
   whose ``extra.escalations`` the operator-alert digest reports once each.

The ``*_request`` functions run an operation and then notify (after the commit: an
e-mail never goes out for a change that was rolled back, and a failed send never undoes
the change).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import Field, model_validator
from pymongo.asynchronous.client_session import AsyncClientSession

from ..config import Config
from ..errors import Conflict, InvalidInput, NotAllowed
from ..models import GroupMembership, Request, SyncRun
from ..models.base import select_one
from ..models.fields import FreeText, PosixName, Quota, Shorthand, SiteName, utcnow
from ..models.quota import MAX_MINUTES
from ..models.request import KIND_HELP, Approval, Comment, RequestKind
from ..models.storage import VolumeName
from ..queries.access_status import require_access
from ..queries.group import get_group
from ..queries.request import (
    calendar_of,
    eligible_approvers,
    emails_of,
    get_request,
    may_approve,
    next_number,
    now_epoch,
    request_row,
    steps_for,
)
from ..queries.site import get_site
from ..queries.storage import find_storage
from ..queries.user import find_site_info, get_user
from ..sla import format_days
from ..store import Store
from .base import Once, OpArgs, Operation, Outcome
from .notify import Notifier

log = logging.getLogger(__name__)

ESCALATION_TARGET = "requests"
Minutes = float | None | Literal["keep"]


class FileRequest(Operation):
    op_name = "file_request"

    class Args(OpArgs):
        kind: RequestKind
        site: SiteName
        group: PosixName | None = None
        user: PosixName | None = None
        account: PosixName | None = None  # quota: an account's quota (the group)
        access: list[Shorthand] = Field(default_factory=list)
        cpu_minutes: Minutes = "keep"
        gpu_minutes: Minutes = "keep"
        quota: Quota | None = None  # storage
        parent_volume: VolumeName | None = None
        reason: FreeText | None = Field(default=None, max_length=2000)
        steps: list[Literal["sponsor", "operator"]] = Field(min_length=1)
        created_epoch: int | None = None  # tests: file "in the past"

        @model_validator(mode="after")
        def _kind_fields(self) -> FileRequest.Args:
            k = self.kind
            if k == "quota":
                if (self.user is None) == (self.account is None):
                    raise ValueError("a quota request names exactly one of --user or --account")
                if self.account is not None and self.group not in (None, self.account):
                    raise ValueError("an account's quota is approved by the account's own "
                                     "sponsors; drop --group")
                if self.cpu_minutes == "keep" and self.gpu_minutes == "keep":
                    raise ValueError("a quota request needs --cpu or --gpu")
                for value in (self.cpu_minutes, self.gpu_minutes):
                    if isinstance(value, float) and not 0 <= value <= MAX_MINUTES:
                        raise ValueError(f"a quota is between 0 and {MAX_MINUTES:g} minutes")
            elif self.account is not None or self.cpu_minutes != "keep" \
                    or self.gpu_minutes != "keep":
                raise ValueError(f"--account, --cpu and --gpu go with quota requests, not {k}")
            if k in ("account", "join", "leave", "access") and self.user is None:
                raise ValueError(f"a {k} request needs --user")
            if k == "access" and not self.access:
                raise ValueError("an access request needs --access (e.g. sudo)")
            if k != "access" and self.access:
                raise ValueError("--access goes with access requests")
            if k == "storage":
                if self.quota is None:
                    raise ValueError("a storage request needs --quota")
                if self.user is not None:
                    raise ValueError("a storage request is for a group; drop --user")
            elif self.quota is not None or self.parent_volume is not None:
                raise ValueError("--quota and --parent-volume go with storage requests")
            if self.sponsoring_group is None:
                raise ValueError(f"a {k} request needs --group (whose sponsors approve it)")
            return self

        @property
        def sponsoring_group(self) -> str | None:
            return self.account if self.kind == "quota" and self.account else self.group

    async def execute(self, session: AsyncClientSession) -> Request:
        a = self.args
        requester = self.author
        if not requester:
            raise InvalidInput("a request needs a requester (--author)")
        await get_site(a.site, session)
        group = await get_group(a.sponsoring_group, session)  # type: ignore[arg-type]
        if group.is_special:
            raise InvalidInput(f"{group.name!r} is an {group.type} group, not one with "
                               "sponsors")
        if a.user is not None:
            await get_user(a.user, session)
        if a.kind == "leave" and await select_one(GroupMembership, session, user=a.user,
                                                  group=group.name, site=a.site) is None:
            raise InvalidInput(f"{a.user} is not a member of {group.name} at {a.site}")
        params: dict[str, Any] = {}
        if a.kind == "access":
            params["access"] = await require_access(a.access, session)
        elif a.kind == "quota":
            params |= {k: getattr(a, k) for k in ("cpu_minutes", "gpu_minutes")
                       if getattr(a, k) != "keep"}
            params["subject"] = "user" if a.user else "account"
        elif a.kind == "storage":
            params["quota"] = a.quota
            if a.parent_volume:
                params["parent_volume"] = a.parent_volume
        request = Request(number=await next_number(session), kind=a.kind,
                          requester=requester, user=a.user, group=group.name, site=a.site,
                          params=params, reason=a.reason, steps=list(a.steps),
                          created_epoch=a.created_epoch or now_epoch())
        if "sponsor" in request.steps and await may_approve(requester, request, "sponsor",
                                                            session):
            request.approvals = [Approval(step="sponsor", by=requester,
                                          at_epoch=now_epoch(), note="filed by a sponsor")]
        self.executed = request.next_step is None
        if self.executed:
            await _carry_out(self, request, session)
        await request.insert(session=session)
        self.request = request
        return request

    def describe(self) -> dict[str, Any]:
        r = self.request
        return {"number": r.number, "kind": r.kind, "site": r.site, "group": r.group,
                "user": r.user, "params": r.params, "steps": r.steps,
                "approved": [x.step for x in r.approvals], "status": r.status,
                "actions": r.actions}


class _NumberArgs(OpArgs):
    number: int = Field(ge=1)


class ApproveRequest(Operation):
    op_name = "approve_request"

    class Args(_NumberArgs):
        note: FreeText | None = Field(default=None, max_length=2000)

    async def execute(self, session: AsyncClientSession) -> Request:
        request = await get_request(self.args.number, session)
        step = _open_step(request)
        if not await may_approve(self.author, request, step, session):
            raise NotAllowed(_refusal(self.author, request, step, "approve"))
        request.approvals = [*request.approvals,
                             Approval(step=step, by=self.author or "", at_epoch=now_epoch(),
                                      note=self.args.note)]  # type: ignore[arg-type]
        self.step = step
        if request.next_step is None:
            await _carry_out(self, request, session)
        await request.save(session=session)
        self.request = request
        return request

    def describe(self) -> dict[str, Any]:
        r, note = self.request, self.args.note  # type: ignore[attr-defined]
        return {"number": r.number, "kind": r.kind, "step": self.step, "status": r.status,
                "note": note, "actions": r.actions if r.status == "done" else []}


class DenyRequest(Operation):
    op_name = "deny_request"

    class Args(_NumberArgs):
        reason: FreeText = Field(min_length=1, max_length=2000)

    async def execute(self, session: AsyncClientSession) -> Request:
        request = await get_request(self.args.number, session)
        step = _open_step(request)
        allowed = await may_approve(self.author, request, step, session) or (
            self.author is not None
            and self.author in await eligible_approvers(request, "operator", session))
        if not allowed:
            raise NotAllowed(_refusal(self.author, request, step, "deny"))
        request.status = "denied"
        request.denied_by = self.author
        request.denial_reason = self.args.reason  # type: ignore[attr-defined]
        request.closed_epoch = now_epoch()
        await request.save(session=session)
        self.request = request
        return request

    def describe(self) -> dict[str, Any]:
        return {"number": self.request.number, "kind": self.request.kind,
                "reason": self.args.reason}  # type: ignore[attr-defined]


class CommentRequest(Operation):
    op_name = "comment_request"

    class Args(_NumberArgs):
        text: FreeText = Field(min_length=1, max_length=2000)

    async def execute(self, session: AsyncClientSession) -> Request:
        if not self.author:
            raise InvalidInput("a comment needs an author (--author)")
        request = await get_request(self.args.number, session)
        request.comments = [*request.comments,
                            Comment(by=self.author, at_epoch=now_epoch(),
                                    text=self.args.text)]  # type: ignore[attr-defined]
        await request.save(session=session)
        self.request = request
        return request

    def describe(self) -> dict[str, Any]:
        return {"number": self.request.number, "text": self.args.text}  # type: ignore[attr-defined]


class EscalateRequests(Operation):
    """Stamp the given breached requests as escalated and record them for the digest."""

    op_name = "escalate_requests"

    class Args(OpArgs):
        items: list[dict[str, Any]]  # {number, kind, site, summary, fix}
        at_epoch: int

    async def execute(self, session: AsyncClientSession) -> list[int]:
        a = self.args
        self.numbers: list[int] = []
        escalations = []
        for item in a.items:  # type: ignore[attr-defined]
            request = await get_request(int(item["number"]), session)
            if request.status != "pending" or request.escalated_epoch is not None:
                continue
            request.escalated_epoch = a.at_epoch  # type: ignore[attr-defined]
            await request.save(session=session)
            self.numbers.append(request.number)
            escalations.append({"key": f"request:{request.number}", "kind": "request",
                                "site": request.site, "summary": item["summary"],
                                "fix": item["fix"]})
        if escalations:
            now = utcnow()
            await SyncRun(target=ESCALATION_TARGET, site="all", author=self.author,
                          apply=True, started_at=now, finished_at=now, status="ok",
                          counts={"escalated": len(escalations)},
                          extra={"escalations": escalations}).insert(session=session)
        return self.numbers

    def describe(self) -> dict[str, Any]:
        return {"escalated": self.numbers}


# -- helpers -------------------------------------------------------------------------------


def _open_step(request: Request) -> str:
    if request.status != "pending":
        raise Conflict(f"request {request.number} is already {request.status}")
    step = request.next_step
    assert step is not None  # a pending request always waits for a step
    return step


def _refusal(author: str | None, request: Request, step: str, verb: str) -> str:
    who = author or "(nobody)"
    if step == "operator" and author == request.requester:
        return (f"{who} filed request {request.number} and may not {verb} its operator step "
                "(another operator must)")
    if step == "sponsor":
        return (f"{who} may not {verb} request {request.number}: it waits for a sponsor of "
                f"{request.group} at {request.site} (or a manager of {request.group})")
    return f"{who} may not {verb} request {request.number}: it waits for an operator"


async def _carry_out(parent: Operation, request: Request, session: AsyncClientSession) -> None:
    """Run the kind's operations inside ``parent``'s transaction; record them."""
    from .group_membership import AddGroupMember, RemoveGroupMember
    from .quota import SetQuota
    from .storage import CreateGroupStorage, EditStorage
    from .user import AddUserAccess
    from .user_site import AddSiteUser

    actions: list[dict[str, Any]] = []

    async def run(op: type[Operation], **kwargs: Any) -> None:
        await op.within(parent, session, **kwargs)
        actions.append({"op": op.op_name, "args": kwargs})

    r, p = request, request.params
    if r.kind in ("account", "join"):
        if await find_site_info(r.user, r.site, session) is None:  # type: ignore[arg-type]
            if r.kind == "join":
                raise Conflict(f"{r.user} is not on site {r.site}; file an account request")
            await run(AddSiteUser, user=r.user, site=r.site)
        else:
            actions.append({"op": "add_site_user", "skipped": "already on the site"})
        await run(AddGroupMember, group=r.group, user=r.user, site=r.site)
    elif r.kind == "leave":
        await run(RemoveGroupMember, group=r.group, user=r.user, site=r.site)
    elif r.kind == "access":
        await run(AddUserAccess, name=r.user, access=list(p["access"]), site=r.site)
    elif r.kind == "quota":
        subject = {"user": r.user} if p.get("subject") == "user" else {"account": r.group}
        amounts = {k: p[k] for k in ("cpu_minutes", "gpu_minutes") if k in p}
        await run(SetQuota, site=r.site, **subject, **amounts)
    elif r.kind == "storage":
        existing = await find_storage(r.site, r.group, "group", session)
        if existing is not None:
            await run(EditStorage, site=r.site, name=r.group, category="group",
                      quota=p["quota"])
        else:
            await run(CreateGroupStorage, site=r.site, group=r.group, quota=p["quota"],
                      parent_volume=p.get("parent_volume"))
    request.actions = actions
    request.status = "done"
    request.closed_epoch = now_epoch()


def summary(request: Request) -> str:
    """One line: what the request asks for."""
    p = request.params
    if request.kind == "account":
        return f"an account for {request.user} at {request.site} in {request.group}"
    if request.kind == "join":
        return f"{request.user} joins {request.group} at {request.site}"
    if request.kind == "leave":
        return f"{request.user} leaves {request.group} at {request.site}"
    if request.kind == "access":
        return f"{', '.join(p.get('access', []))} access for {request.user} at {request.site}"
    if request.kind == "quota":
        who = f"user {request.user}" if p.get("subject") == "user" else \
            f"account {request.group}"
        parts = [f"{k.split('_')[0].upper()} {_minutes(p[k])}"
                 for k in ("cpu_minutes", "gpu_minutes") if k in p]
        return f"quota of {who} at {request.site}: {', '.join(parts)}"
    return f"storage for {request.group} at {request.site}: {p.get('quota')}"


def request_detail(request: Request, config: Config,
                   now: datetime | None = None) -> dict[str, Any]:
    """One request as plain data (``ng request show --json`` and ``GET
    /api/v1/requests/{number}`` answer the same shape)."""
    row = request_row(request, config.requests, calendar_of(config.requests),
                      now or datetime.now(UTC))

    def stamp(epoch: int | None) -> datetime | None:
        return datetime.fromtimestamp(epoch, UTC) if epoch else None

    return {
        **row.as_dict(), "summary": summary(request), "reason": request.reason,
        "params": request.params, "steps": list(request.steps),
        "approvals": [{"step": x.step, "by": x.by, "at": stamp(x.at_epoch),
                       "note": x.note} for x in request.approvals],
        "comments": [{"by": c.by, "at": stamp(c.at_epoch), "text": c.text}
                     for c in request.comments],
        "denied_by": request.denied_by, "denial_reason": request.denial_reason,
        "actions": request.actions, "closed": stamp(request.closed_epoch),
        "escalated_at": stamp(request.escalated_epoch)}


def _minutes(value: float | None) -> str:
    return "unlimited" if value is None else f"{value / 60:g}h"


# -- run and notify ------------------------------------------------------------------------


async def file_request(store: Store, author: str | None, config: Config, *,
                       notifier: Notifier | None = None, **kwargs: Any) -> Request:
    steps = steps_for(config.requests, kwargs.get("kind", ""))
    request = await FileRequest.run(store, author, steps=steps, **kwargs)
    await notify(store, config, notifier, request, "done" if request.status == "done"
                 else "filed", author)
    return request


async def file_request_once(store: Store, author: str | None, config: Config, once: Once,
                            *, notifier: Notifier | None = None, **kwargs: Any) -> Outcome:
    """``file_request`` under a client's idempotency key: a retry files nothing and mails
    nobody, and gets the first answer back."""
    steps = steps_for(config.requests, kwargs.get("kind", ""))
    outcome = await FileRequest.run_once(store, author, once, steps=steps, **kwargs)
    if not outcome.replayed:
        request = outcome.result
        await notify(store, config, notifier, request, "done" if request.status == "done"
                     else "filed", author)
    return outcome


async def comment_request_once(store: Store, author: str | None, config: Config,
                               number: int, once: Once, *, text: str,
                               notifier: Notifier | None = None) -> Outcome:
    """``comment_request`` under a client's idempotency key (one comment per key)."""
    outcome = await CommentRequest.run_once(store, author, once, number=number, text=text)
    if not outcome.replayed:
        await notify(store, config, notifier, outcome.result, "comment", author, note=text)
    return outcome


async def approve_request(store: Store, author: str | None, config: Config, number: int, *,
                          note: str | None = None,
                          notifier: Notifier | None = None) -> Request:
    request = await ApproveRequest.run(store, author, number=number, note=note)
    event = "done" if request.status == "done" else "approved"
    await notify(store, config, notifier, request, event, author, note=note)
    return request


async def deny_request(store: Store, author: str | None, config: Config, number: int, *,
                       reason: str, notifier: Notifier | None = None) -> Request:
    request = await DenyRequest.run(store, author, number=number, reason=reason)
    await notify(store, config, notifier, request, "denied", author, note=reason)
    return request


async def comment_request(store: Store, author: str | None, config: Config, number: int, *,
                          text: str, notifier: Notifier | None = None) -> Request:
    request = await CommentRequest.run(store, author, number=number, text=text)
    await notify(store, config, notifier, request, "comment", author, note=text)
    return request


async def escalate_breaches(store: Store, author: str | None, config: Config, *,
                            now: datetime | None = None) -> list[int]:
    """Escalate every open request past its SLA that was not escalated yet."""
    from ..queries.request import breaches_to_escalate

    now = now or datetime.now(UTC)
    found = await breaches_to_escalate(config.requests, now)
    if not found:
        return []
    items = [{"number": r.number, "summary": (
        f"request {r.number} ({r.kind}: {summary(r)}) is {format_days(s.overdue_days)} past "
        f"its SLA, waiting for the {r.next_step}"),
        "fix": f"cheeto ng request show {r.number}"} for r, s in found]
    return await EscalateRequests.run(store, author, items=items,
                                      at_epoch=int(now.timestamp()))


EVENT_WORDS = {"filed": "filed", "approved": "approved, waiting for the next step",
               "done": "approved and done", "denied": "denied", "comment": "has a new comment"}


async def notify(store: Store, config: Config, notifier: Notifier | None, request: Request,
                 event: str, actor: str | None, *, note: str | None = None) -> bool:
    """Tell the requester (and the person it is for) and the approvers concerned. Never
    raises: the change is committed whatever happens to the e-mail."""
    if notifier is None:
        return False
    try:
        step = request.next_step
        waiting = await eligible_approvers(request, step) if step else set()
        approved = {a.by for a in request.approvals}
        people = {request.requester, *([request.user] if request.user else [])}
        if event in ("filed", "approved"):
            to_names, cc_names = waiting, people | approved
        elif event == "comment":
            to_names, cc_names = people | waiting | approved, set()
        else:  # done, denied
            to_names, cc_names = people, approved | ({request.denied_by}
                                                     if request.denied_by else set())
        to_names.discard(actor or "")
        cc_names.discard(actor or "")
        emails = await emails_of(to_names | cc_names)
        to = [emails[n] for n in sorted(to_names) if n in emails]
        cc = [emails[n] for n in sorted(cc_names - to_names) if n in emails]
        if not to and step == "operator" and config.alerts is not None:
            to = list(config.alerts.to)  # no operator has a user record: the ops list
        if not to:
            to, cc = cc, []
        if not to:
            return False
        row = request_row(request, config.requests, calendar_of(config.requests), utcnow())
        return await notifier.send(
            "request_update", to, cc=cc, context={"request": str(request.number)},
            number=request.number, request_kind=request.kind, kind_help=KIND_HELP[request.kind],
            event=event, event_words=EVENT_WORDS[event], actor=actor or "someone",
            summary=summary(request), reason=request.reason or "", note=note or "",
            next_step=step or "", status=request.status,
            due=row.sla.due.strftime("%Y-%m-%d %H:%M UTC"),
            actions=[_action_line(x) for x in request.actions])
    except Exception as exc:  # the change stands; the e-mail is best effort
        log.error("could not notify about request %s: %s: %s", request.number,
                  type(exc).__name__, exc)
        return False


def _action_line(action: dict[str, Any]) -> str:
    if "skipped" in action:
        return f"{action['op']}: skipped ({action['skipped']})"
    args = ", ".join(f"{k}={v}" for k, v in action.get("args", {}).items())
    return f"{action['op']}({args})"
