"""``cheeto ng request …``: the request queue (accounts, group joins, access grants, quota
increases, storage), its approvals and its SLA.

``--author`` is the acting person: whoever files, approves, denies or comments.
"""

from __future__ import annotations

import argparse
from typing import Any

from ...errors import InvalidInput
from ...models.quota import parse_amount
from ...models.request import KIND_HELP, REQUEST_KINDS, REQUEST_STATUSES
from .. import args as a
from ..app import command, group_help
from ..output import esc

group_help("ng", "request", help="requests: file, list (--triage), show, approve, deny, comment")

QUEUE_COLUMNS = ["id", "kind", "status", "site", "group", "user", "next_step", "age", "left",
                 "breached"]


def _notifier(args: argparse.Namespace) -> Any:
    from ...operations.notify import notifier_from_config

    ctx = args.ctx
    if args.no_notify or ctx.config.mail is None:
        return None
    return notifier_from_config(ctx.require_store(), ctx.author, ctx.config)


def _amount(text: str | None, flag: str) -> Any:
    if text is None:
        return "keep"
    try:
        return parse_amount(text)
    except ValueError as exc:
        raise InvalidInput(f"{flag}: {exc}") from None


def _access(values: list[str] | None) -> list[str]:
    return [part.strip() for value in values or [] for part in value.split(",")
            if part.strip()]


def _no_notify(parser: a.Parser) -> None:
    parser.add_argument("--no-notify", action="store_true",
                        help="send no e-mails (they are still recorded as not sent)")


def _number(parser: a.Parser) -> None:
    parser.add_argument("number", type=int, help="the request's number")


async def _machine(args: argparse.Namespace, number: int) -> bool:
    """With --json/--yaml, print the request (after the change) and say so."""
    from ...queries.request import get_request

    ctx = args.ctx
    if ctx.out.machine:
        ctx.out.write_data(await _detail(ctx, await get_request(number)))
    return bool(ctx.out.machine)


async def _detail(ctx: Any, request: Any) -> dict[str, Any]:
    from ...operations.request import request_detail

    return request_detail(request, ctx.config)


@command("ng", "request", "new", help="file a request (its group's sponsor approves, then an "
                                      "operator where the kind needs one)", store=True)
async def request_new(args: argparse.Namespace) -> int:
    from ...operations.request import file_request, summary

    ctx = args.ctx
    request = await file_request(
        ctx.require_store(), ctx.author, ctx.config, notifier=_notifier(args),
        kind=args.kind, site=args.site, group=args.group, user=args.user,
        account=args.account, access=_access(args.access),
        cpu_minutes=_amount(args.cpu, "--cpu"), gpu_minutes=_amount(args.gpu, "--gpu"),
        quota=args.quota, parent_volume=args.parent_volume, reason=args.reason)
    state = "done" if request.status == "done" else f"waiting for the {request.next_step}"
    if not await _machine(args, request.number):
        ctx.out.success(f"request {esc(request.number)} filed ({esc(summary(request))}): "
                        f"{esc(state)}")
    return 0


@request_new.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("kind", choices=REQUEST_KINDS,
                        help="; ".join(f"{k}: {v}" for k, v in KIND_HELP.items()))
    a.site(parser)
    a.group(parser, required=False,
            help="the group whose sponsors approve (account, join, access, storage; a "
                 "user's quota)")
    a.user(parser, required=False, help="the person it is for (account, join, access, a "
                                        "user's quota)")
    parser.add_argument("--account", metavar="GROUP",
                        help="quota: the Slurm account (group) whose quota is asked for")
    parser.add_argument("--access", action="append", metavar="SHORTHAND",
                        help="access: what to grant at the site (sudo, login-ssh, …; "
                             "repeat or comma-separate)")
    parser.add_argument("--cpu", metavar="Q",
                        help="quota: CPU minutes asked for (600m, 10h or unlimited)")
    parser.add_argument("--gpu", metavar="Q",
                        help="quota: GPU minutes asked for (600m, 10h or unlimited)")
    parser.add_argument("--quota", metavar="SIZE",
                        help="storage: the size asked for (e.g. 2T); a bigger quota when the "
                             "group has storage at the site")
    parser.add_argument("--parent-volume", metavar="VOLUME",
                        help="storage: the volume a new group storage goes under")
    parser.add_argument("--reason", metavar="TEXT", help="why it is needed (for the approvers)")
    _no_notify(parser)
    a.output_format(parser)


@command("ng", "request", "list", help="the request queue with age, time left and breaches "
                                       "(HiPPO's account requests included)", store=True)
async def request_list(args: argparse.Namespace) -> None:
    from ...queries.request import check_kind, request_queue
    from ...queries.site import get_site
    from ...queries.user import get_user

    ctx = args.ctx
    check_kind(args.kind)
    # as /api/v1/requests: a site or user the store does not know is an error, not an empty
    # queue (a group may be one HiPPO has yet to create, so it is not checked)
    site = (await get_site(args.site)).name if args.site is not None else None
    if args.user is not None:
        await get_user(args.user)
    rows = await request_queue(ctx.config.requests,
                               status=None if args.status == "all" else args.status,
                               kind=args.kind, site=site, group=args.group,
                               user=args.user, breached=args.breached,
                               include_hippo=not args.no_hippo, triage=args.triage,
                               limit=args.limit)
    data = [_queue_dict(r) for r in rows]
    breached = sum(1 for r in rows if r.open_breach)
    title = f"requests (count={len(rows)}, breached={breached})"
    ctx.out.table(data, title=title + (" — triage order" if args.triage else ""),
                  columns=QUEUE_COLUMNS)


def _queue_dict(row: Any) -> dict[str, Any]:
    """A queue row; an ended request shows no time left and no breach (issue 28)."""
    data = row.as_dict()
    if row.ended:
        data |= {"left": None, "left_days": None, "breached": None}
    return data


@request_list.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--status", choices=(*REQUEST_STATUSES, "all"), default="pending",
                        help="which requests (default: pending)")
    parser.add_argument("--kind", choices=(*REQUEST_KINDS, "group"),
                        help="only this kind (group: HiPPO's new groups)")
    a.site(parser, required=False, help="only requests at this site")
    a.group(parser, required=False, help="only requests for this group")
    a.user(parser, required=False, help="only requests for this user")
    parser.add_argument("--breached", action="store_true", help="only those past their SLA")
    parser.add_argument("--triage", action="store_true",
                        help="oldest breach first, then by kind and age")
    parser.add_argument("--no-hippo", action="store_true",
                        help="leave out HiPPO's account requests")
    parser.add_argument("--limit", "-n", type=int, help="at most this many rows")
    a.output_format(parser)


@command("ng", "request", "show", help="show one request: approvals, comments, what it did",
         store=True)
async def request_show(args: argparse.Namespace) -> None:
    from ...queries.request import get_request

    ctx = args.ctx
    request = await get_request(args.number)
    data = await _detail(ctx, request)
    if not ctx.out.machine:  # the raw numbers are for scripts
        data = {k: v for k, v in data.items() if k not in ("age_s", "left_days")}
    ctx.out.show(data, title=f"request {request.number}")


@request_show.args()
def _(parser: a.Parser) -> None:
    _number(parser)
    a.output_format(parser)


@command("ng", "request", "approve", help="approve a request's next step (the last one runs it)",
         store=True)
async def request_approve(args: argparse.Namespace) -> int:
    from ...operations.request import approve_request

    ctx = args.ctx
    request = await approve_request(ctx.require_store(), ctx.author, ctx.config, args.number,
                                    note=args.note, notifier=_notifier(args))
    if await _machine(args, request.number):
        return 0
    if request.status == "done":
        ctx.out.success(f"request {esc(request.number)} approved and done "
                        f"({esc(len(request.actions))} action(s))")
    else:
        ctx.out.success(f"request {esc(request.number)} approved; waiting for the "
                        f"{esc(request.next_step)}")
    return 0


@request_approve.args()
def _(parser: a.Parser) -> None:
    _number(parser)
    parser.add_argument("--note", metavar="TEXT", help="a note kept with the approval")
    _no_notify(parser)
    a.output_format(parser)


@command("ng", "request", "deny", help="deny a request, with a reason", store=True)
async def request_deny(args: argparse.Namespace) -> int:
    from ...operations.request import deny_request

    ctx = args.ctx
    request = await deny_request(ctx.require_store(), ctx.author, ctx.config, args.number,
                                 reason=args.reason, notifier=_notifier(args))
    if not await _machine(args, request.number):
        ctx.out.success(f"request {esc(request.number)} denied")
    return 0


@request_deny.args()
def _(parser: a.Parser) -> None:
    _number(parser)
    parser.add_argument("--reason", required=True, metavar="TEXT",
                        help="why (the requester is told)")
    _no_notify(parser)
    a.output_format(parser)


@command("ng", "request", "comment", help="add a comment to a request", store=True)
async def request_comment(args: argparse.Namespace) -> int:
    from ...operations.request import comment_request

    ctx = args.ctx
    request = await comment_request(ctx.require_store(), ctx.author, ctx.config, args.number,
                                    text=args.text, notifier=_notifier(args))
    if not await _machine(args, request.number):
        ctx.out.success(f"comment added to request {esc(request.number)}")
    return 0


@request_comment.args()
def _(parser: a.Parser) -> None:
    _number(parser)
    parser.add_argument("--text", "-m", required=True, metavar="TEXT",
                        help="the comment (the requester and approvers are told)")
    _no_notify(parser)
    a.output_format(parser)


@command("ng", "request", "escalate", help="escalate requests past their SLA to the operator "
                                           "digest, once each (what the beat task runs)",
         store=True)
async def request_escalate(args: argparse.Namespace) -> int:
    from ...operations.request import escalate_breaches

    ctx = args.ctx
    numbers = await escalate_breaches(ctx.require_store(), ctx.author, ctx.config)
    if ctx.out.machine:
        ctx.out.write_data({"escalated": numbers})
    elif numbers:
        ctx.out.success(f"escalated request(s) {esc(', '.join(map(str, numbers)))}")
    else:
        ctx.out.info("nothing new to escalate")
    return 0


@request_escalate.args()
def _(parser: a.Parser) -> None:
    a.output_format(parser)
