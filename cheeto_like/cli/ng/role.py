"""``cheeto ng role …``: who is a manager (of which accounts), operator or admin.

Everyone who can sign in is a user; sponsors manage their own groups without a grant
(``list`` shows them with ``via sponsor``).
"""

from __future__ import annotations

import argparse

from ...models.auth import GRANTED_ROLES
from .. import args as a
from ..app import command, group_help
from ..role_output import (
    GRANT_ACCOUNT_HELP,
    REVOKE_ACCOUNT_HELP,
    granted,
    list_options,
    revoked,
    role_options,
    roles_table,
)

group_help("ng", "role", help="API roles: manager (of accounts), operator, admin")


@command("ng", "role", "grant", help="grant a role (a manager gets --account …)", store=True)
async def role_grant(args: argparse.Namespace) -> int:
    from ...operations.auth import GrantRole

    grant = await GrantRole.run(args.ctx.require_store(), args.ctx.author, user=args.user,
                                role=args.role, accounts=args.account or [])
    granted(args.ctx.out, grant.user, grant.role, grant.accounts)
    return 0


@role_grant.args()
def _(parser: a.Parser) -> None:
    role_options(parser, GRANTED_ROLES, account_help=GRANT_ACCOUNT_HELP)


@command("ng", "role", "revoke",
         help="revoke a role (for a manager, --account revokes only those)", store=True)
async def role_revoke(args: argparse.Namespace) -> int:
    from ...operations.auth import RevokeRole

    left = await RevokeRole.run(args.ctx.require_store(), args.ctx.author, user=args.user,
                                role=args.role, accounts=args.account or [])
    revoked(args.ctx.out, args.user, args.role, None if left is None else left.accounts)
    return 0


@role_revoke.args()
def _(parser: a.Parser) -> None:
    role_options(parser, GRANTED_ROLES, account_help=REVOKE_ACCOUNT_HELP)


@command("ng", "role", "list", help="list role grants and sponsors (managers implicitly)",
         store=True)
async def role_list(args: argparse.Namespace) -> int:
    from ...queries.auth import list_roles
    from ...queries.user import get_user

    if args.user is not None:
        await get_user(args.user)
    rows = await list_roles(args.user)
    roles_table(args.ctx.out, rows)
    return 0


@role_list.args()
def _(parser: a.Parser) -> None:
    list_options(parser)
