"""``cheeto ng role …``: who is a manager (of which accounts), operator or admin.

Everyone who can sign in is a user; sponsors manage their own groups without a grant
(``list`` shows them with ``via sponsor``).
"""

from __future__ import annotations

import argparse

from ...models.auth import GRANTED_ROLES
from .. import args as a
from ..app import command, group_help
from ..output import esc

group_help("ng", "role", help="API roles: manager (of accounts), operator, admin")


@command("ng", "role", "grant", help="grant a role (a manager gets --account …)", store=True)
async def role_grant(args: argparse.Namespace) -> int:
    from ...operations.auth import GrantRole

    grant = await GrantRole.run(args.ctx.require_store(), args.ctx.author, user=args.user,
                                role=args.role, accounts=args.account or [])
    where = f" of {', '.join(grant.accounts)}" if grant.accounts else ""
    args.ctx.out.success(f"{esc(grant.user)} is {esc(grant.role)}{esc(where)}")
    return 0


@role_grant.args()
def _(parser: a.Parser) -> None:
    a.user(parser)
    parser.add_argument("--role", required=True, choices=GRANTED_ROLES, help="the role")
    parser.add_argument("--account", "-A", action="append", metavar="ACCOUNT",
                        help="a Slurm account (group) a manager may read (repeat)")


@command("ng", "role", "revoke",
         help="revoke a role (for a manager, --account revokes only those)", store=True)
async def role_revoke(args: argparse.Namespace) -> int:
    from ...operations.auth import RevokeRole

    left = await RevokeRole.run(args.ctx.require_store(), args.ctx.author, user=args.user,
                                role=args.role, accounts=args.account or [])
    if left is None:
        args.ctx.out.success(f"{esc(args.user)} is no longer {esc(args.role)}")
    else:
        args.ctx.out.success(f"{esc(args.user)} manages {esc(', '.join(left.accounts))}")
    return 0


@role_revoke.args()
def _(parser: a.Parser) -> None:
    a.user(parser)
    parser.add_argument("--role", required=True, choices=GRANTED_ROLES, help="the role")
    parser.add_argument("--account", "-A", action="append", metavar="ACCOUNT",
                        help="only these accounts of a manager (repeat)")


@command("ng", "role", "list", help="list role grants and sponsors (managers implicitly)",
         store=True)
async def role_list(args: argparse.Namespace) -> int:
    from ...queries.auth import list_roles
    from ...queries.user import get_user

    if args.user is not None:
        await get_user(args.user)
    rows = await list_roles(args.user)
    table = [{**r, "accounts": ", ".join(r["accounts"])} for r in rows]
    args.ctx.out.table(table, title=f"roles ({len(rows)})", data=rows,
                       columns=["user", "role", "accounts", "via"])
    return 0


@role_list.args()
def _(parser: a.Parser) -> None:
    a.user(parser, required=False, help="only this user")
    a.output_format(parser)
