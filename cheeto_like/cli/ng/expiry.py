"""``cheeto ng user expire`` / ``ng group expire``: set or clear expiries after creation
(``operations/expiry.py``)."""

from __future__ import annotations

import argparse
from datetime import datetime

from .. import args as a
from ..app import command
from ..output import esc


def _expiry_args(parser: a.Parser, what: str) -> None:
    choice = parser.add_mutually_exclusive_group(required=True)
    choice.add_argument("--at", metavar="WHEN", help=a.when_help(f"when {what} expire"))
    choice.add_argument("--clear", action="store_true", help=f"{what} no longer expire")


def _when(args: argparse.Namespace) -> dict[str, datetime | bool | None]:
    if args.clear:
        return {"clear": True}
    return {"expires_at": a.future_or_none(args.at, "--at")}


@command("ng", "user", "expire", help="set or clear a user's expiry (--at WHEN | --clear)",
         store=True)
async def user_expire(args: argparse.Namespace) -> None:
    from ...operations.expiry import SetUserExpiry

    ctx = args.ctx
    user = await SetUserExpiry.run(ctx.store, ctx.author, user=args.user, **_when(args))
    when = f"{user.expires_at:%Y-%m-%d %H:%M} UTC" if user.expires_at else "never"
    ctx.out.success(f"{esc(user.name)} ({esc(user.status)}) expires: {esc(when)}")


@user_expire.args()
def _(parser: a.Parser) -> None:
    a.user(parser)
    _expiry_args(parser, "the account")


@command("ng", "group", "expire",
         help="set or clear the expiry of every member of a group (--at WHEN | --clear)",
         store=True)
async def group_expire(args: argparse.Namespace) -> None:
    from ...operations.expiry import SetGroupExpiry

    ctx = args.ctx
    changed = await SetGroupExpiry.run(ctx.store, ctx.author, group=args.group,
                                       site=args.site, **_when(args))
    ctx.out.success(f"{len(changed)} member(s) of {esc(args.group)} changed"
                    + (f": {esc(', '.join(changed))}" if 0 < len(changed) <= 20 else ""))


@group_expire.args()
def _(parser: a.Parser) -> None:
    a.group(parser)
    a.site(parser, required=False, help="only the members at this site")
    _expiry_args(parser, "the members' accounts")
