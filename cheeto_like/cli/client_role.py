"""``cheeto role grant|revoke|list``: role grants through the API, for admins on login
nodes (no store access): the client side of ``cheeto ng role`` (``/api/v1/roles``).

A refusal (a 403: "alice may not role:write") or bad input the API rejects is one plain
line and exit 2, as for every client command (``adapters/cheeto_api.ApiRefused``).
"""

from __future__ import annotations

import argparse
from typing import Any
from urllib.parse import quote

from . import args as a
from .app import command, group_help
from .client import client
from .role_output import (
    GRANT_ACCOUNT_HELP,
    REVOKE_ACCOUNT_HELP,
    granted,
    list_options,
    revoked,
    role_options,
    roles_table,
)

group_help("role", help="API roles through the API: grant, revoke, list (admins)")

# models.auth.GRANTED_ROLES (not imported: the client stays free of the models)
ROLES = ("manager", "operator", "admin")
PAGE = 1000  # the API's largest page


async def _roles(api: Any, user: str | None) -> list[dict[str, Any]]:
    """Every grant (and sponsor) the API lists, page by page."""
    rows: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": PAGE} | ({"user": user} if user else {})
    while True:
        data = await api.call("GET", "/roles", params=params | {"offset": len(rows)})
        rows += data["items"]
        if not data["items"] or len(rows) >= data["total"]:
            return rows


@command("role", "grant", help="grant a role through the API (a manager gets --account …)")
async def role_grant(args: argparse.Namespace) -> int:
    body = {"user": args.user, "role": args.role, "accounts": args.account or []}
    async with client(args.ctx) as api:
        grant = await api.call("POST", "/roles", json=body)
    granted(args.ctx.out, grant["user"], grant["role"], grant["accounts"])
    return 0


@role_grant.args()
def _(parser: a.Parser) -> None:
    role_options(parser, ROLES, account_help=GRANT_ACCOUNT_HELP)


@command("role", "revoke",
         help="revoke a role through the API (for a manager, --account revokes only those)")
async def role_revoke(args: argparse.Namespace) -> int:
    path = f"/roles/{quote(args.user, safe='')}/{args.role}"
    async with client(args.ctx) as api:
        await api.call("DELETE", path, params={"account": args.account or []})
        left = [r for r in await _roles(api, args.user)
                if r["role"] == args.role and r.get("via") == "grant"] \
            if args.account else []
    revoked(args.ctx.out, args.user, args.role, left[0]["accounts"] if left else None)
    return 0


@role_revoke.args()
def _(parser: a.Parser) -> None:
    role_options(parser, ROLES, account_help=REVOKE_ACCOUNT_HELP)


@command("role", "list",
         help="list role grants and sponsors through the API (managers implicitly)")
async def role_list(args: argparse.Namespace) -> int:
    async with client(args.ctx) as api:
        rows = await _roles(api, args.user)
    roles_table(args.ctx.out, rows)
    return 0


@role_list.args()
def _(parser: a.Parser) -> None:
    list_options(parser)
