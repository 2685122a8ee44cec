"""``cheeto ng site …``"""

from __future__ import annotations

import argparse
from typing import Any

from ...errors import Conflict
from ...models import Site
from ...operations.site import (
    AddSiteAlias,
    AddStickyGroup,
    CreateSite,
    RemoveSite,
    RemoveSiteAlias,
    RemoveStickyGroup,
)
from ...operations.slurm import (
    AddStickySlurmAccount,
    ClearSiteDefaultSlurmAccount,
    RemoveStickySlurmAccount,
    SetSiteDefaultSlurmAccount,
    SetSiteSlurmCluster,
    SetSiteSlurmMode,
)
from ...queries.site import count_site_dependents, get_site, list_sites
from .. import args as a
from ..app import command, group_help
from ..output import esc

group_help("ng", "site", "alias", help="alternative names of a site")
group_help("ng", "site", "sticky", help="groups every user on a site belongs to")
group_help("ng", "site", "sticky", "add", help="make something sticky at a site")
group_help("ng", "site", "sticky", "remove", help="stop something being sticky at a site")
group_help("ng", "site", "slurm", help="the site's Slurm settings")


def site_data(site: Site) -> dict[str, Any]:
    return {
        "name": site.name, "fqdn": site.fqdn, "aliases": site.aliases,
        "sticky_groups": site.group.sticky,
        "slurm": {"cluster_name": site.cluster_name, "sticky_accounts": site.slurm.sticky,
                  "default_account": site.slurm.default_account,
                  "mode": site.slurm.mode.replace("_", "-")},
        "storage": site.storage.model_dump(),
        "created_at": site.created_at, "updated_at": site.updated_at,
    }


@command("ng", "site", "new", help="create a site", store=True)
async def site_new(args: argparse.Namespace) -> None:
    ctx = args.ctx
    site = await CreateSite.run(ctx.store, ctx.author, name=args.site, fqdn=args.fqdn)
    ctx.out.success(f"created site [bold]{esc(site.name)}[/] ({esc(site.fqdn)})")


@site_new.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    parser.add_argument("--fqdn", required=True, help="fully qualified domain name")


@command("ng", "site", "list", help="list sites", store=True)
async def site_list(args: argparse.Namespace) -> None:
    sites = await list_sites()
    rows = [{"name": s.name, "fqdn": s.fqdn, "aliases": s.aliases} for s in sites]
    args.ctx.out.table(rows, title=f"Sites (count={len(rows)})",
                       data=[site_data(s) for s in sites])


@site_list.args()
def _(parser: a.Parser) -> None:
    a.output_format(parser)


@command("ng", "site", "show", help="show one site", store=True)
async def site_show(args: argparse.Namespace) -> None:
    site = await get_site(args.site)
    args.ctx.out.show(site_data(site), title=f"site {site.name}")


@site_show.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    a.output_format(parser)


@command("ng", "site", "remove", help="remove a site and everything that lives only there",
         store=True, aliases=["rm"])
async def site_remove(args: argparse.Namespace) -> None:
    """Always lists what goes (the site, its fqdn and aliases, dependent records) and asks:
    an alias is a name other systems may still use even when nothing depends on it."""
    ctx = args.ctx
    site = await get_site(args.site)
    counts = await count_site_dependents(site.name)
    rows: list[dict[str, Any]] = [
        {"record": "site", "count": 1, "names": f"{site.name} ({site.fqdn})"}]
    if site.aliases:
        rows.append({"record": "alias", "count": len(site.aliases),
                     "names": ", ".join(site.aliases)})
    rows += [{"record": k, "count": v, "names": ""} for k, v in counts.items() if v]
    ctx.out.table(rows, title=f"Removing site {site.name} deletes")
    summary = ", ".join(f"{r['record']}={r['count']}" for r in rows[1:]) or "no dependents"
    if not ctx.confirm(f"Delete site {site.name} and these records?", force=args.force):
        raise Conflict(f"not removing site {site.name!r} ({summary}); "
                       "confirm on a terminal or pass --force")
    deleted = await RemoveSite.run(ctx.store, ctx.author, name=site.name)
    ctx.out.success(f"removed site [bold]{esc(site.name)}[/] "
                    f"({esc(sum(deleted.values()))} dependent records deleted)")


@site_remove.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    a.force(parser, help="delete without asking")


@command("ng", "site", "alias", "add", help="add an alias to a site", store=True)
async def site_alias_add(args: argparse.Namespace) -> None:
    ctx = args.ctx
    await AddSiteAlias.run(ctx.store, ctx.author, site=args.site, alias=args.alias)
    ctx.out.success(f"site [bold]{esc(args.site)}[/] answers to alias {esc(args.alias)}")


@command("ng", "site", "alias", "remove", help="remove an alias from a site", store=True,
         aliases=["rm"])
async def site_alias_remove(args: argparse.Namespace) -> None:
    ctx = args.ctx
    await RemoveSiteAlias.run(ctx.store, ctx.author, site=args.site, alias=args.alias)
    ctx.out.success(f"site [bold]{esc(args.site)}[/] no longer has alias {esc(args.alias)}")


for _handler in (site_alias_add, site_alias_remove):
    @_handler.args()
    def _(parser: a.Parser) -> None:
        a.site(parser)
        parser.add_argument("alias", help="the alias (a short name or a host name)")


@command("ng", "site", "sticky", "add", "group", help="make every user on the site a member",
         store=True)
async def site_sticky_add_group(args: argparse.Namespace) -> None:
    ctx = args.ctx
    await AddStickyGroup.run(ctx.store, ctx.author, site=args.site, group=args.group)
    ctx.out.success(f"group [bold]{esc(args.group)}[/] is sticky at {esc(args.site)}")


@command("ng", "site", "sticky", "remove", "group", help="stop a group being sticky",
         store=True)
async def site_sticky_remove_group(args: argparse.Namespace) -> None:
    ctx = args.ctx
    await RemoveStickyGroup.run(ctx.store, ctx.author, site=args.site, group=args.group)
    ctx.out.success(f"group [bold]{esc(args.group)}[/] is no longer sticky at {esc(args.site)}")


for _handler in (site_sticky_add_group, site_sticky_remove_group):
    @_handler.args()
    def _(parser: a.Parser) -> None:
        a.site(parser)
        a.group(parser)


@command("ng", "site", "sticky", "add", "slurm",
         help="give every Slurm-eligible user on the site this account", store=True)
async def site_sticky_add_slurm(args: argparse.Namespace) -> None:
    ctx = args.ctx
    await AddStickySlurmAccount.run(ctx.store, ctx.author, site=args.site, group=args.group,
                                    default=args.default)
    ctx.out.success(f"Slurm account [bold]{esc(args.group)}[/] is sticky at {esc(args.site)}"
                    + (" (and the default)" if args.default else ""))


@site_sticky_add_slurm.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    a.group(parser, help="the account's group")
    parser.add_argument("--default", action="store_true", help="also make it the default")


@command("ng", "site", "sticky", "remove", "slurm", help="stop a Slurm account being sticky",
         store=True)
async def site_sticky_remove_slurm(args: argparse.Namespace) -> None:
    ctx = args.ctx
    await RemoveStickySlurmAccount.run(ctx.store, ctx.author, site=args.site, group=args.group,
                                       clear_default=args.clear_default)
    ctx.out.success(f"Slurm account [bold]{esc(args.group)}[/] is no longer sticky at "
                    f"{esc(args.site)}")


@site_sticky_remove_slurm.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    a.group(parser, help="the account's group")
    parser.add_argument("--clear-default", action="store_true",
                        help="allow removing the default account (clears the default)")


@command("ng", "site", "slurm", "set-default", help="set the site's default Slurm account",
         store=True)
async def site_slurm_set_default(args: argparse.Namespace) -> None:
    ctx = args.ctx
    await SetSiteDefaultSlurmAccount.run(ctx.store, ctx.author, site=args.site,
                                         group=args.group)
    ctx.out.success(f"default Slurm account at {esc(args.site)} is [bold]{esc(args.group)}[/]")


@site_slurm_set_default.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    a.group(parser, help="the account's group")


@command("ng", "site", "slurm", "clear-default", help="clear the site's default Slurm account",
         store=True)
async def site_slurm_clear_default(args: argparse.Namespace) -> None:
    ctx = args.ctx
    await ClearSiteDefaultSlurmAccount.run(ctx.store, ctx.author, site=args.site)
    ctx.out.success(f"{esc(args.site)} has no default Slurm account")


@site_slurm_clear_default.args()
def _(parser: a.Parser) -> None:
    a.site(parser)


@command("ng", "site", "slurm", "set-cluster",
         help="set the Slurm ClusterName the site syncs to (default: the site name)", store=True)
async def site_slurm_set_cluster(args: argparse.Namespace) -> None:
    ctx = args.ctx
    await SetSiteSlurmCluster.run(ctx.store, ctx.author, site=args.site,
                                  cluster_name=args.cluster_name)
    ctx.out.success(f"{esc(args.site)} syncs to Slurm cluster "
                    f"[bold]{esc(args.cluster_name or args.site)}[/]")


@site_slurm_set_cluster.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    parser.add_argument("--cluster-name", help="omit to reset to the site name")


@command("ng", "site", "slurm", "set-mode",
         help="how the Slurm sync treats the cluster: managed, or quota-only", store=True)
async def site_slurm_set_mode(args: argparse.Namespace) -> None:
    ctx = args.ctx
    await SetSiteSlurmMode.run(ctx.store, ctx.author, site=args.site,
                               mode=args.slurm_mode.replace("-", "_"))
    what = ("leaves accounts and associations alone and only enforces quotas"
            if args.slurm_mode == "quota-only" else "manages accounts and associations")
    ctx.out.success(f"the Slurm sync at {esc(args.site)} {esc(what)} "
                    f"([bold]{esc(args.slurm_mode)}[/])")


@site_slurm_set_mode.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    parser.add_argument("--slurm-mode", required=True, choices=("managed", "quota-only"),
                        help="managed: the store's accounts, associations and limits; "
                             "quota-only (a slurm-quota site): leave accounts and "
                             "associations as found, only block users and accounts out "
                             "of quota (defaults apply to names the store does not hold)")
