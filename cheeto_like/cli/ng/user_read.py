"""``cheeto ng user show`` and ``cheeto ng user list``: the user commands that only read.

Apart from ``ng user``'s other commands (``user.py``) because a command's start-up pays
for its whole module: those import the write operations and their argument models
(~30 ms), which a read never runs (issue 31). They connect with ``store="read"`` (no
index creation at connect, ``cli/app.py``).
"""

from __future__ import annotations

import argparse
from typing import Any

from ...constants import USER_STATUSES
from ...credentials import parse_ssh_key
from ...errors import InvalidInput
from ...models import SshKey, User
from ...queries.group import user_groups_at_site
from ...queries.site import get_site
from ...queries.slurm import user_slurm_at_site
from ...queries.user import (
    effective_access,
    effective_status,
    find_site_info,
    find_user,
    find_users,
    list_user_ssh_keys,
    site_infos_for,
    user_site_overrides,
)
from .. import args as a
from ..app import command


def ssh_key_data(key: SshKey) -> dict[str, Any]:
    try:
        parsed = parse_ssh_key(key.key)
        return {"id": key.id, "type": parsed.type, "fingerprint": parsed.fingerprint,
                "comment": parsed.comment}
    except InvalidInput:
        return {"id": key.id, "type": "?", "fingerprint": "(unparseable)", "comment": ""}


def user_row(user: User) -> dict[str, Any]:
    return {"name": user.name, "uid": user.uid, "email": user.email,
            "fullname": user.fullname, "type": user.type, "status": user.status,
            "access": user.access}


def user_data(user: User) -> dict[str, Any]:
    data = user_row(user) | {
        "gid": user.gid, "surname": user.ldap_surname, "shell": user.shell,
        "home_directory": user.home_directory, "has_password": user.password is not None,
        "expires_at": user.expires_at, "comments": user.comments,
        "created_at": user.created_at, "updated_at": user.updated_at,
    }
    if user.iam is not None:
        data["iam"] = user.iam.model_dump()
    return data



async def _site_view(user: User, site: str) -> dict[str, Any]:
    await get_site(site)
    usi = await find_site_info(user.name, site)
    if usi is None:
        return {"on_site": False}
    groups = await user_groups_at_site(user.name, site)
    reach = await user_slurm_at_site(user.name, site)
    return {
        "on_site": True,
        "status_override": usi.status, "effective_status": effective_status(user, usi),
        "access_override": usi.access, "effective_access": effective_access(user, usi),
        "expires_at": usi.expires_at,
        "groups": [{"group": r.group.name, "gid": r.group.gid, "roles": list(r.roles)}
                   for r in groups],
        "slurm": [r.as_dict() for r in reach],
    }


@command("ng", "user", "show", help="show a user (with -s: their state at that site)",
         store="read")
async def user_show(args: argparse.Namespace) -> None:
    ctx = args.ctx
    user = await find_user(name=args.user, uid=args.uid, email=args.email)
    data = user_data(user)
    data["ssh_keys"] = [ssh_key_data(k) for k in await list_user_ssh_keys(user.name)]
    if args.site:
        data["site"] = {"name": args.site} | await _site_view(user, args.site)
    else:
        data["sites"] = [o.as_dict() for o in await user_site_overrides(user)]
    ctx.out.show(data, title=f"user {user.name}")


@user_show.args()
def _(parser: a.Parser) -> None:
    who = parser.add_mutually_exclusive_group(required=True)
    who.add_argument("--user", "-u", metavar="USER", help="user name")
    who.add_argument("--uid", type=int, help="find the user by uid")
    who.add_argument("--email", help="find the user by e-mail address")
    a.site(parser, required=False, help="show the user's state at this site")
    a.output_format(parser)


@command("ng", "user", "list", help="list users matching filters", store="read")
async def user_list(args: argparse.Namespace) -> None:
    users = await find_users(status=args.status, access=args.access, type=args.type,
                             site=args.site, group=args.group, operator=args.operator,
                             limit=args.limit)
    rows = [user_data(u) if args.long else user_row(u) for u in users]
    if args.site:  # show what holds at that site, not the global defaults
        infos = await site_infos_for(args.site, [u.name for u in users])
        for row, user in zip(rows, users, strict=True):
            row["status"] = effective_status(user, infos.get(user.name))
            row["access"] = effective_access(user, infos.get(user.name))
    columns = None if args.long else ["name", "uid", "email", "fullname", "type", "status",
                                      "access"]
    filters = ", ".join(f"{k}={v}" for k, v in (("site", args.site), ("status", args.status),
                                                ("access", args.access), ("type", args.type),
                                                ("group", args.group)) if v)
    title = f"Users (count={len(rows)}, operator={args.operator}{', ' if filters else ''}" \
            f"{filters})"
    args.ctx.out.table(rows, title=title, columns=columns)


@user_list.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--status", choices=USER_STATUSES, help="only users with this status")
    parser.add_argument("--access", help="only users with this access")
    parser.add_argument("--type", help="only users of this type")
    a.site(parser, required=False, help="only users on this site (site-effective filters)")
    a.group(parser, required=False, help="only members of this group")
    parser.add_argument("--operator", choices=["AND", "OR"], default="AND",
                        type=str.upper, help="how filters combine (default AND)")
    parser.add_argument("--limit", type=int, help="at most this many users")
    parser.add_argument("--long", "-l", action="store_true", help="all fields")
    a.output_format(parser)
