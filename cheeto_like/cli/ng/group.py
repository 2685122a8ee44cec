"""``cheeto ng group …``"""

from __future__ import annotations

import argparse
from typing import Any

from ...constants import SPECIAL_GID_START
from ...models import Group
from ...operations import group as ops
from ...operations import group_membership as membership
from ...queries.group import get_group, group_members_at_site, list_groups
from ...queries.site import get_site, list_sites
from ...queries.slurm import group_slurm_at_site
from .. import args as a
from ..app import command, group_help
from ..output import esc

group_help("ng", "group", help="groups: create, membership roles, show, list")
group_help("ng", "group", "new", help="create groups")
group_help("ng", "group", "add", help="give a user a role in a group at a site")
group_help("ng", "group", "remove", help="take a role away")


def group_row(group: Group) -> dict[str, Any]:
    return {"name": group.name, "gid": group.gid, "type": group.type,
            "shorthand": group.shorthand}


@command("ng", "group", "new", "generic", help="create a group with an explicit gid",
         store=True)
async def group_new_generic(args: argparse.Namespace) -> None:
    ctx = args.ctx
    group = await ops.CreateGroup.run(ctx.store, ctx.author, name=args.group, gid=args.gid,
                                      type=args.type)
    ctx.out.success(f"created group [bold]{esc(group.name)}[/] (gid={esc(group.gid)}, "
                    f"type={esc(group.type)})")


@group_new_generic.args()
def _(parser: a.Parser) -> None:
    a.group(parser)
    parser.add_argument("--gid", type=int, required=True, help="the group's gid")
    parser.add_argument("--type", default="group", choices=["group", "system", "admin", "class"],
                        help="group type (default group)")


def _band_command(kind: str, op: type[ops.Operation], help: str) -> None:
    @command("ng", "group", "new", kind, help=help, store=True)
    async def handler(args: argparse.Namespace) -> None:
        ctx = args.ctx
        group = await op.run(ctx.store, ctx.author, name=args.group)
        ctx.out.success(f"created {esc(kind)} group [bold]{esc(group.name)}[/] "
                        f"(gid={esc(group.gid)})")

    @handler.args()
    def _(parser: a.Parser) -> None:
        a.group(parser)


_band_command("system", ops.CreateSystemGroup, "create a system group (gid from the system band)")
_band_command("class", ops.CreateClassGroup, "create a class group (gid from the class band)")
_band_command("lab", ops.CreateLabGroup, "create a lab group (gid from the lab band)")


@command("ng", "group", "new", "from-sponsor", help="create <sponsor>grp sponsored by a user",
         store=True)
async def group_new_from_sponsor(args: argparse.Namespace) -> None:
    ctx = args.ctx
    group = await ops.CreateGroupFromSponsor.run(ctx.store, ctx.author, sponsor=args.user,
                                                 site=args.site)
    ctx.out.success(f"created group [bold]{esc(group.name)}[/] (gid={esc(group.gid)}) sponsored by "
                    f"{esc(args.user)} at {esc(args.site)}")


@group_new_from_sponsor.args()
def _(parser: a.Parser) -> None:
    a.user(parser, help="the sponsor")
    a.site(parser)


ROLE_OPS = {
    ("add", "member"): membership.AddGroupMember,
    ("remove", "member"): membership.RemoveGroupMember,
    ("add", "sponsor"): membership.AddGroupSponsor,
    ("remove", "sponsor"): membership.RemoveGroupSponsor,
    ("add", "sudoer"): membership.AddGroupSudoer,
    ("remove", "sudoer"): membership.RemoveGroupSudoer,
    ("add", "slurmer"): membership.AddGroupSlurmer,
    ("remove", "slurmer"): membership.RemoveGroupSlurmer,
}


def _role_command(verb: str, role: str) -> None:
    op = ROLE_OPS[(verb, role)]
    help = f"{'give' if verb == 'add' else 'take away'} the {role} role at a site"

    @command("ng", "group", verb, role, help=help, store=True)
    async def handler(args: argparse.Namespace) -> None:
        ctx = args.ctx
        await op.run(ctx.store, ctx.author, group=args.group, user=args.user, site=args.site)
        prep = "is now" if verb == "add" else "is no longer"
        ctx.out.success(f"[bold]{esc(args.user)}[/] {esc(prep)} {esc(role)} of "
                        f"{esc(args.group)} at {esc(args.site)}")

    @handler.args()
    def _(parser: a.Parser) -> None:
        a.group(parser)
        a.user(parser)
        a.site(parser)


for _verb, _role in ROLE_OPS:
    _role_command(_verb, _role)


@command("ng", "group", "rename", help="rename a group and every reference to it", store=True)
async def group_rename(args: argparse.Namespace) -> None:
    ctx = args.ctx
    await ops.RenameGroup.run(ctx.store, ctx.author, name=args.group, new_name=args.new_name)
    ctx.out.success(f"renamed group [bold]{esc(args.group)}[/] to [bold]{esc(args.new_name)}[/]")


@group_rename.args()
def _(parser: a.Parser) -> None:
    a.group(parser, help="current name")
    parser.add_argument("--new-name", "--to", required=True, dest="new_name",
                        help="the group's new name")


@command("ng", "group", "show", help="show a group (with -s: its roster at that site)",
         store=True)
async def group_show(args: argparse.Namespace) -> None:
    group = await get_group(args.group)
    data: dict[str, Any] = group_row(group) | {"created_at": group.created_at,
                                               "updated_at": group.updated_at}
    sites = [await get_site(args.site)] if args.site else await list_sites()
    sticky_at = [s.name for s in sites if group.name in s.group.sticky]
    data["sticky_at"] = sticky_at
    if args.site:
        roster = await group_members_at_site(group.name, args.site)
        slurm = await group_slurm_at_site(group.name, args.site)
        data["site"] = {"name": args.site} | roster.as_dict() | {
            "slurm": slurm.as_dict() if slurm else None}
    args.ctx.out.show(data, title=f"group {group.name}")


@group_show.args()
def _(parser: a.Parser) -> None:
    a.group(parser)
    a.site(parser, required=False, help="show members, sponsors, sudoers, slurmers there")
    a.output_format(parser)


@command("ng", "group", "list", help="list groups matching filters", store=True)
async def group_list(args: argparse.Namespace) -> None:
    groups = await list_groups(type=args.type, site=args.site, member=args.member)
    rows = [group_row(g) for g in groups]
    args.ctx.out.table(rows, title=f"Groups (count={len(rows)})",
                       columns=["name", "gid", "type", "shorthand"])


@group_list.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--type", help="only groups of this type")
    a.site(parser, required=False, help="only groups with roles or stickiness at this site")
    parser.add_argument("--member", metavar="USER", help="only groups this user is a member of")
    a.output_format(parser)


@command("ng", "group", "seed-access-status",
         help="create the access and status groups that are missing", store=True)
async def group_seed_access_status(args: argparse.Namespace) -> None:
    ctx = args.ctx
    outcome = await ops.SeedAccessStatusGroups.run(ctx.store, ctx.author,
                                                   gid_start=args.gid_start)
    rows = [{"group": name, "outcome": result} for name, result in outcome.items()]
    ctx.out.table(rows, title="Access and status groups", columns=["group", "outcome"])


@group_seed_access_status.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--gid-start", type=int, default=SPECIAL_GID_START,
                        help=f"first gid to try (default {SPECIAL_GID_START})")
    a.output_format(parser)
