"""Requests on the web: people file them and follow them, sponsors add and remove their
groups' members.

- ``/requests``: your requests (the ones you filed and those for you), with their state,
  whose turn it is and the last word; ``/requests/new?kind=…``: the form of one kind
  (quota, access, join, account, storage), each with its amount or target and a reason,
  names picked from suggestions (``<datalist>``); ``/requests/{n}``: one request's
  history (filed, approvals, comments, what was carried out, a denial), with a comment
  form for the people it concerns and its group's sponsors.
- ``/members?account=…``: a sponsor's or manager's group at a site, its members with a
  "remove" button each and an "add" form. Both are requests (``join``/``leave``) filed by
  the sponsor, so a sponsor's own filing counts as the sponsor's approval: where the
  site's policy (``requests.kinds``) has no operator step the change is made at once,
  otherwise it waits for an operator.

Every form runs the same operation as ``cheeto ng request new`` / ``comment`` (through
``operations.request``'s ``file_request``/``comment_request``: the History author is the
signed-in person, e-mails go out after the commit), checks CSRF and the API's rule
(``REQUEST_FILE``/``REQUEST_READ``/``REQUEST_COMMENT``) first, answers post/redirect/get,
and on bad input re-renders with the error next to its field (422).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ...auth import rules
from ...auth.principal import Principal
from ...errors import CheetoError, NotFound
from ...models import Request as RequestDoc
from .forms import FormErrors, Reader
from .guard import page
from .render import base_path, may_see_accounts, render
from .session import Refused, Session, check_csrf, first, read_form, require_session
from .tables import Column, Table, TableState, read_params, read_tables

WEB_KINDS = ("quota", "access", "join", "account", "storage")
KIND_TITLES = {"quota": "More compute time (a CPU/GPU quota)",
               "access": "An access grant (e.g. sudo)",
               "join": "Join a group", "account": "An account at another site",
               "storage": "Group storage (new, or more space)"}
MINE = Table("mine", (Column("number", "#", numeric=True), Column("asked", "You asked for"),
                      Column("state", "State"), Column("turn", "Whose turn"),
                      Column("last", "Last word",
                             get=lambda r: r["denial"] or r["last_comment"])),
             default_sort="number", default_dir="desc", per_page=25)
MEMBERS = Table("members", (Column("name", "Member"), Column("role", "Role"),
                            Column("", "Remove", sortable=False, search=False)),
                default_sort="name", per_page=50)
ACTION_WORDS = {"set_quota": "the quota is set", "add_group_member": "added to the group",
                "remove_group_member": "removed from the group",
                "add_site_user": "put on the site", "add_user_access": "access granted",
                "create_group_storage": "the storage is made",
                "edit_storage": "the storage quota is changed"}
PAGE_NOTICES = {"comment": "Comment added.", "approve": "Request approved.",
                "deny": "Request denied."}
STATE_WORDS = {"pending": "waiting", "done": "done", "denied": "denied"}
SUGGESTIONS_MAX = 2000  # names offered in a <datalist>; beyond that, typed
FIELD_OF = {"cpu_minutes": "cpu", "gpu_minutes": "gpu", "quota": "quota", "reason": "reason",
            "group": "group", "account": "group", "access": "access", "site": "site",
            "user": "user", "text": "text", "parent_volume": "quota"}


def _redirect(request: Request, path: str) -> Response:
    return RedirectResponse(f"{base_path(request)}{path}", status_code=303,
                            headers={"Cache-Control": "no-store"})


def _config(request: Request) -> Any:
    return request.app.state.auth.config


def _notifier(request: Request, who: Principal) -> Any:
    from ..api_requests import _notifier as api_notifier

    return api_notifier(request, who)


def stamp(epoch: int | None) -> str:
    if not epoch:
        return ""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M UTC")


def hours(minutes: float | None) -> str:
    return "unlimited" if minutes is None else f"{minutes / 60:g} h"


def asked(r: RequestDoc, me: str) -> str:
    """What the request asks for, in words, to ``me`` ("you" when it is for them)."""
    p = r.params
    for_you = r.user == me
    who = "you" if for_you else (r.user or "")
    if r.kind == "account":
        return f"an account at {r.site} in {r.group} for {who}"
    if r.kind == "join":
        return (f"to join {r.group} at {r.site}" if for_you
                else f"{who} to join {r.group} at {r.site}")
    if r.kind == "leave":
        return (f"to leave {r.group} at {r.site}" if for_you
                else f"{who} removed from {r.group} at {r.site}")
    if r.kind == "access":
        return f"{', '.join(p.get('access', []))} access at {r.site} for {who}"
    if r.kind == "quota":
        amounts = [f"{res.upper()} {hours(p[f'{res}_minutes'])}" for res in ("cpu", "gpu")
                   if f"{res}_minutes" in p]
        subject = who if p.get("subject") == "user" else f"account {r.group}"
        return f"a quota of {', '.join(amounts)} for {subject} at {r.site}"
    return f"{p.get('quota')} of storage for {r.group} at {r.site}"


def turn(r: RequestDoc) -> str:
    """Whose turn it is, in words."""
    if r.status == "done":
        return "nobody: it has been carried out"
    if r.status == "denied":
        return "nobody: it was denied"
    if r.next_step == "sponsor":
        return f"a sponsor of {r.group} at {r.site} (or its manager)"
    return "an operator"


def view(r: RequestDoc, me: str) -> dict[str, Any]:
    """One request as the templates show it."""
    events: list[dict[str, Any]] = [{"at": r.created_epoch, "by": r.requester,
                                     "what": "filed it", "text": r.reason or ""}]
    events += [{"at": a.at_epoch, "by": a.by, "what": f"approved the {a.step} step",
                "text": a.note or ""} for a in r.approvals]
    events += [{"at": c.at_epoch, "by": c.by, "what": "commented", "text": c.text}
               for c in r.comments]
    if r.status == "denied":
        events.append({"at": r.closed_epoch or 0, "by": r.denied_by or "",
                       "what": "denied it", "text": r.denial_reason or ""})
    elif r.status == "done":
        done = [ACTION_WORDS.get(a["op"], a["op"].replace("_", " ")) for a in r.actions
                if "skipped" not in a]
        events.append({"at": r.closed_epoch or 0, "by": "cheeto",
                       "what": "carried it out" + (f" ({'; '.join(done)})" if done else ""),
                       "text": ""})
    events.sort(key=lambda e: e["at"])
    for e in events:
        e["when"] = stamp(e["at"])
        e["by"] = "you" if e["by"] == me else e["by"]
    last = r.comments[-1] if r.comments else None
    return {"number": r.number, "kind": r.kind, "status": r.status,
            "state": STATE_WORDS[r.status], "asked": asked(r, me), "reason": r.reason or "",
            "turn": turn(r), "next_step": r.next_step or "", "site": r.site,
            "last_step": bool(r.next_step) and r.steps[-1] == r.next_step,
            "group": r.group, "user": r.user or "",
            "requester": "you" if r.requester == me else r.requester,
            "filed": stamp(r.created_epoch), "closed": stamp(r.closed_epoch),
            "comments": len(r.comments),
            "last_comment": f"{last.by}: {last.text}" if last else "",
            "denial": r.denial_reason or "", "events": events}


async def my_requests(me: str) -> list[RequestDoc]:
    """Requests ``me`` filed or that are for them, newest first (two indexed reads)."""
    from ...models.base import select

    found = {r.number: r for r in await select(RequestDoc, None, requester=me)}
    found |= {r.number: r for r in await select(RequestDoc, None, user=me)}
    return sorted(found.values(), key=lambda r: -r.number)


def user_session(session: Session) -> Principal:
    who = session.who
    if not rules.can(who, rules.ME):
        raise Refused("requests are filed by people with a user record; ask an operator to "
                      "file this one for you")
    return who


# -- the forms' suggestions ----------------------------------------------------------------


async def group_names(types: tuple[str, ...] = ("group", "class", "program", "admin", "system"),
                      ) -> list[str]:
    """Every group one may ask to join (not access/status or personal groups): projected
    names, capped."""
    from ...models import Group
    from ...models.base import columns

    found = await columns(Group, {"type": {"$in": list(types)}}, "name")
    return sorted(row["name"] for row in found)[:SUGGESTIONS_MAX]


async def site_users(site: str) -> list[str]:
    from ...models import UserSiteInfo
    from ...models.base import columns

    found = await columns(UserSiteInfo, {"site": site}, "user")
    return sorted(row["user"] for row in found)[:SUGGESTIONS_MAX]


async def form_context(who: Principal, kind: str) -> dict[str, Any]:
    from ...queries.access_status import access_groups
    from ...queries.site import list_sites
    from ...queries.user import user_sites

    mine = sorted(who.member_of | who.managed)
    own_sites = sorted(await user_sites(who.name))
    all_sites = [s.name for s in await list_sites()]
    return {"kind": kind, "kinds": WEB_KINDS, "titles": KIND_TITLES,
            "sites": all_sites if kind == "account" else own_sites,
            "groups": await group_names() if kind in ("join", "account") else mine,
            "my_groups": mine,
            "accesses": sorted(await access_groups()) if kind == "access" else []}


def read_hours(read: Reader, name: str) -> Any:
    """An amount in hours (``12``, ``12.5``), or the operator's grammar (``600m``, ``10h``,
    ``unlimited``); empty: not asked for."""
    value = first(read.fields, name)
    if value.replace(".", "", 1).isdigit():
        value += "h"
    read.fields = {**read.fields, name: [value]}
    amount = read.amount(name)
    if name in read.errors:
        read.errors[name] = (f"{first(read.fields, name)!r} is not a number of hours: "
                             "write e.g. 500 or 12.5, or unlimited")
    return amount


def as_field_errors(exc: CheetoError) -> FormErrors:
    message = exc.message
    head, _, rest = message.partition(": ")
    if rest and head in FIELD_OF:
        return FormErrors({FIELD_OF[head]: rest})
    if isinstance(exc, NotFound):
        for word, field in (("site", "site"), ("group", "group"), ("user", "user")):
            if message.startswith(word):
                return FormErrors({field: message})
    return FormErrors({"form": message})


async def file_from_form(request: Request, who: Principal,
                         fields: dict[str, list[str]]) -> RequestDoc:
    """Read a request form and file it; bad input: ``FormErrors``."""
    from ...operations.request import file_request

    read = Reader(fields)
    kind = read.choice("kind", WEB_KINDS)
    site = read.name("site")
    group = read.name("group")
    reason = read.text("reason", max_length=2000)
    args: dict[str, Any] = {"kind": kind, "site": site, "reason": reason}
    if kind == "quota":
        subject = read.choice("subject", ("me", "account"))
        cpu, gpu = read_hours(read, "cpu"), read_hours(read, "gpu")
        if cpu == "keep" and gpu == "keep" and not read.errors.keys() & {"cpu", "gpu"}:
            read.errors["cpu"] = "give the CPU hours you need, the GPU hours, or both"
        args |= {"cpu_minutes": cpu, "gpu_minutes": gpu}
        args |= ({"user": who.name, "group": group} if subject == "me"
                 else {"account": group})
    elif kind == "access":
        from ...queries.access_status import access_groups

        chosen = [v.strip() for v in fields.get("access", []) if v.strip()]
        known = await access_groups()
        if not chosen:
            read.errors["access"] = "pick the access you need"
        elif unknown := [c for c in chosen if c not in known]:
            read.errors["access"] = (f"there is no {', '.join(unknown)} access here; pick "
                                     "from the list")
        args |= {"user": who.name, "group": group, "access": chosen}
    elif kind == "storage":
        size = read.text("quota", max_length=32)
        args |= {"group": group, "quota": size or None}
    else:  # join, account
        args |= {"user": who.name, "group": group}
    read.done()
    target = rules.Target(user=args.get("user"), account=group)
    if not rules.can(who, rules.REQUEST_FILE, target):
        raise FormErrors({"group": f"you can ask for this only for a group you belong to; "
                                   f"{group} is not one of yours (ask its sponsor)"})
    try:
        return await file_request(request.app.state.store, who.author, _config(request),
                                  notifier=_notifier(request, who), **args)
    except CheetoError as exc:
        raise as_field_errors(exc) from None


async def decide_here(request: Request, number: int, action: str) -> Response:
    """Approve or deny from the request's own page (the Accounts page's checks: the
    API's ``REQUEST_DECIDE``, then the operation's own step check), back to the page."""
    from ...operations.request import approve_request, deny_request
    from ...queries.request import get_request
    from ..api_requests import request_target

    session = await require_session(request)
    fields = await read_form(request)
    check_csrf(fields, session.csrf)
    who = session.who
    if not 0 < number < 2**31:
        raise Refused(f"there is no request {number}", 404)
    found = await get_request(number)
    if not rules.can(who, rules.REQUEST_DECIDE,
                     request_target(found.requester, found.user, found.group)):
        raise Refused(f"request {number} waits for a sponsor of {found.group} or an "
                      "operator, not for you: you can comment on it instead")
    read = Reader(fields)
    note = read.text("note", required=action == "deny", max_length=2000)
    step = first(fields, "step")
    if step != (found.next_step or "closed"):  # a stale page: never decide another step
        read.errors["form"] = (f"request {number} has moved on since you opened it (it is "
                               f"{view(found, who.name)['state']}, waiting for "
                               f"{turn(found)}): look again, then decide")
    if read.errors:
        errors = {f"{action}-note": "a reason is required" if not note else
                  read.errors["note"]} if "note" in read.errors else {}
        return render(request, "request.html", session, status=422, page="requests",
                      r=view(found, who.name), may_comment=True,
                      may_decide=found.status == "pending", errors=errors,
                      failure=read.errors.get("form") or f"The request was not {action}d.")
    store, config, notifier = request.app.state.store, _config(request), _notifier(
        request, who)
    if action == "approve":
        await approve_request(store, who.author, config, number, note=note or None,
                              notifier=notifier)
    else:
        await deny_request(store, who.author, config, number, reason=note,
                           notifier=notifier)
    return _redirect(request, f"/requests/{number}?done={action}")


# -- the members page ----------------------------------------------------------------------


async def members_context(site: str, account: str, state: TableState) -> dict[str, Any]:
    from ...queries.group import get_group, group_members_at_site

    await get_group(account)
    roster = await group_members_at_site(account, site)
    rows = [{"name": m, "role": "sponsor" if m in roster.sponsors else "member"}
            for m in roster.members]
    return {"members": state.apply(rows), "suggest": await site_users(site)}


def may_manage(who: Principal, account: str) -> bool:
    """Sponsors and managers of the group; operators and admins (who may list every
    group and decide any request)."""
    return account in who.managed or (
        rules.can(who, rules.GROUP_LIST)
        and rules.can(who, rules.REQUEST_DECIDE, rules.Target(account=account)))


async def change_member(request: Request, adding: bool) -> Response:
    """Add or remove a member: a ``join``/``leave`` request filed by the sponsor."""
    from ...operations.request import file_request
    from .sites import site_names

    session = await require_session(request)
    fields = await read_form(request)
    check_csrf(fields, session.csrf)
    who = session.who
    if not may_see_accounts(who):  # the page's own gate, before anything is read
        raise Refused("changing a group's members is for its sponsors and managers: ask "
                      "one of them")
    read = Reader(fields)
    account, site = read.name("account"), read.name("site")
    user = read.name("m_user")
    reason = read.text("m_reason", required=False, max_length=2000)
    if read.errors.keys() & {"account", "site"}:
        raise Refused("the form names no group or site: open the group from the Accounts "
                      "page and try again", 422)
    if not may_manage(who, account):
        raise Refused(f"you do not sponsor or manage {account}: ask one of its sponsors "
                      "to change its members")
    try:
        read.done()
        kind = "join" if adding else "leave"
        try:
            made = await file_request(
                request.app.state.store, who.author, _config(request),
                notifier=_notifier(request, who), kind=kind, site=site, group=account,
                user=user, reason=reason or ("added" if adding else "removed") + " by "
                + who.name)
        except CheetoError as exc:
            errors = as_field_errors(exc).errors
            raise FormErrors({"m_user": errors.get("user") or errors.get("form")
                              or next(iter(errors.values()))}) from None
    except FormErrors as exc:
        sites = await site_names()
        return render(request, "members.html", session, status=422, page="accounts",
                      account=account, site=site, sites=sites,
                      errors={f"{'add' if adding else 'remove'}-{k}": v
                              for k, v in exc.errors.items()},
                      values={"m_user": user, "m_reason": reason},
                      failure="Nothing was changed: see the marked field.",
                      **await members_context(site, account, read_params(
                          {}, [MEMBERS], keep={"account": account, "site": site},
                          path=f"{base_path(request)}/members")["members"]))
    state = "done" if made.status == "done" else "waiting"
    return _redirect(request, f"/members?account={quote(account)}&site={quote(site)}"
                              f"&done={kind}-{state}&n={made.number}")


MEMBER_NOTICES = {"join-done": "Member added.", "leave-done": "Member removed.",
                  "join-waiting": "Request {n} filed: the member is added once it is "
                                  "approved (follow it under Requests).",
                  "leave-waiting": "Request {n} filed: the member is removed once it is "
                                   "approved (follow it under Requests)."}


def add_routes(router: APIRouter) -> None:
    @router.get("/requests")
    @page
    async def requests_page(request: Request, done: str | None = None,
                            n: int | None = None) -> Response:
        session = await require_session(request)
        who = user_session(session)
        states = read_tables(request, MINE)
        mine = states["mine"].apply(view(r, who.name) for r in await my_requests(who.name))
        notice = ""
        if done == "filed" and n:
            notice = f"Request {n} filed: you can follow it here."
        elif done == "done" and n:
            notice = f"Request {n} filed and carried out at once."
        return render(request, "requests.html", session, page="requests", mine=mine,
                      notice=notice, kinds=WEB_KINDS, titles=KIND_TITLES)

    @router.get("/requests/new")
    @page
    async def request_form(request: Request, kind: str = "quota") -> Response:
        session = await require_session(request)
        who = user_session(session)
        if kind not in WEB_KINDS:
            raise Refused(f"there is no {kind!r} request; pick one of "
                          f"{', '.join(WEB_KINDS)}", 404)
        return render(request, "request_new.html", session, page="requests", errors={},
                      values={}, **await form_context(who, kind))

    @router.post("/requests/new")
    @page
    async def request_file(request: Request) -> Response:
        session = await require_session(request)
        fields = await read_form(request)
        check_csrf(fields, session.csrf)
        who = user_session(session)
        kind = first(fields, "kind")
        kind = kind if kind in WEB_KINDS else "quota"
        try:
            made = await file_from_form(request, who, fields)
        except FormErrors as exc:
            values = {k: v[0] for k, v in fields.items() if k != "csrf" and v}
            values["access"] = fields.get("access", [])  # type: ignore[assignment]
            failure = exc.errors.get("form") or "Nothing was filed: see the marked fields."
            return render(request, "request_new.html", session, status=422,
                          page="requests", errors=exc.errors, values=values,
                          failure=failure, **await form_context(who, kind))
        state = "done" if made.status == "done" else "filed"
        return _redirect(request, f"/requests?done={state}&n={made.number}")

    @router.get("/requests/{number}")
    @page
    async def request_page(request: Request, number: int, done: str | None = None,
                           ) -> Response:
        from ...queries.request import get_request, may_approve
        from ..api_requests import request_target

        session = await require_session(request)
        who = session.who
        if not 0 < number < 2**31:
            raise Refused(f"there is no request {number}", 404)
        found = await get_request(number)
        target = request_target(found.requester, found.user, found.group)
        if not rules.can(who, rules.REQUEST_READ, target):
            raise Refused(f"request {number} is not yours nor for a group you sponsor: "
                          "open your own from the Requests page")
        step = found.next_step
        may_decide = bool(step) and rules.can(who, rules.REQUEST_DECIDE, target) and (
            await may_approve(who.name, found, step or ""))
        return render(request, "request.html", session, page="requests",
                      r=view(found, who.name),
                      may_comment=rules.can(who, rules.REQUEST_COMMENT, target),
                      may_decide=may_decide, errors={},
                      notice=PAGE_NOTICES.get(done or "", ""))

    @router.post("/requests/{number}/comment")
    @page
    async def request_comment(request: Request, number: int) -> Response:
        from ...operations.request import comment_request
        from ...queries.request import get_request
        from ..api_requests import request_target

        session = await require_session(request)
        fields = await read_form(request)
        check_csrf(fields, session.csrf)
        who = session.who
        if not 0 < number < 2**31:
            raise Refused(f"there is no request {number}", 404)
        found = await get_request(number)
        target = request_target(found.requester, found.user, found.group)
        if not rules.can(who, rules.REQUEST_COMMENT, target):
            raise Refused(f"you may not comment on request {number}: it is not yours nor "
                          "for a group you sponsor")
        read = Reader(fields)
        text = read.text("text", max_length=2000)
        if read.errors:
            return render(request, "request.html", session, status=422, page="requests",
                          r=view(found, who.name), may_comment=True, may_decide=False,
                          errors=read.errors, failure="The comment was not added.")
        await comment_request(request.app.state.store, who.author, _config(request), number,
                              text=text, notifier=_notifier(request, who))
        return _redirect(request, f"/requests/{number}?done=comment")

    for action in ("approve", "deny"):
        def make(action: str = action) -> Any:
            @page
            async def handler(request: Request, number: int) -> Response:
                return await decide_here(request, number, action)
            return handler

        router.add_api_route(f"/requests/{{number}}/{action}", make(), methods=["POST"],
                             name=f"dashboard-request-page-{action}")

    @router.get("/members")
    @page
    async def members_page(request: Request, account: str = "", site: str | None = None,
                           done: str | None = None, n: int | None = None) -> Response:
        from .sites import choose, site_names

        session = await require_session(request)
        who = session.who
        if not may_see_accounts(who):
            raise Refused("this page is for sponsors and managers of a group: ask one of "
                          "them to change its members")
        account = account or min(who.managed, default="")
        if not account or len(account) > 64:
            raise Refused("name a group: open it from the Accounts page", 400)
        if not may_manage(who, account):
            raise Refused(f"you do not sponsor or manage {account}: ask one of its sponsors "
                          "to change its members")
        sites = await site_names()
        chosen = choose(sites, site)
        if chosen is None:
            raise Refused("there are no sites yet", 404)
        notice = MEMBER_NOTICES.get(done or "", "").format(n=n)
        state = read_tables(request, MEMBERS, keep={"account": account, "site": chosen})
        return render(request, "members.html", session, page="accounts", account=account,
                      site=chosen, sites=sites, errors={}, values={}, notice=notice,
                      **await members_context(chosen, account, state["members"]))

    @router.post("/members/add")
    @page
    async def member_add(request: Request) -> Response:
        return await change_member(request, True)

    @router.post("/members/remove")
    @page
    async def member_remove(request: Request) -> Response:
        return await change_member(request, False)
