"""``cheeto ng slurm …``: partitions, QOS, allocations, accounts, associations.

TRES flags take ``cpus=N gpus=N mem=10G`` (any order, any subset; ``-1`` or ``inf`` is
unlimited), as one quoted argument or as several words.
"""

from __future__ import annotations

import argparse
from typing import Any

from ...errors import InvalidInput
from ...models import SlurmAllocation, SlurmQOS
from ...models.fields import utcnow
from ...models.slurm import SlurmTRES
from ...operations import slurm as ops
from ...queries.site import get_site
from ...queries.slurm import (
    find_allocation,
    get_account,
    get_qos,
    group_slurm_at_site,
    list_associations,
    list_partitions,
    list_qos,
    qos_allocations,
    qos_limits,
    require_filter_names,
)
from .. import args as a
from ..app import command, group_help
from ..output import esc

group_help("ng", "slurm", help="Slurm accounting: partitions, QOS, accounts, associations, sync")
group_help("ng", "slurm", "partition", help="partitions (names Slurm jobs run in)")
group_help("ng", "slurm", "qos", help="quality-of-service records and their limits")
group_help("ng", "slurm", "association", help="which account may use which partition/QOS",
           aliases=["assoc"])
group_help("ng", "slurm", "allocation", help="TRES grants summed into QOS limits",
           aliases=["alloc"])
group_help("ng", "slurm", "account", help="group accounts: limits and coordinators")


def parse_tres(words: list[str] | str | None, flag: str) -> SlurmTRES | None:
    if words is None:
        return None
    text = " ".join(words) if isinstance(words, list) else words
    try:
        return SlurmTRES.parse(text)
    except ValueError as exc:
        raise InvalidInput(f"{flag}: {exc}") from None


def _tres_flag(parser: a.Parser, flag: str, help: str, *, required: bool = False) -> None:
    parser.add_argument(flag, nargs="+", metavar="K=V", required=required,
                        help=f"{help} (cpus=N gpus=N mem=SIZE; -1 or inf = unlimited)")


def _alloc_row(alloc: SlurmAllocation) -> dict[str, Any]:
    now = utcnow()
    return {"id": alloc.id, "qos": alloc.qos, "bucket": alloc.bucket,
            "tres": alloc.tres.model_dump(), "comment": alloc.comment,
            "expires_at": alloc.expires_at,
            "expired": alloc.expires_at is not None and alloc.expires_at <= now,
            "provisioned_at": alloc.provisioned_at}


def _qos_data(qos: SlurmQOS, allocations: list[SlurmAllocation]) -> dict[str, Any]:
    limits = qos_limits(qos, allocations)
    return {"name": qos.name, "site": qos.site, "priority": qos.priority, "flags": qos.flags,
            "group_limits": limits.group.compact(), "user_limits": limits.user.compact(),
            "job_limits": limits.job.compact(),
            "allocations": [_alloc_row(x) for x in allocations if x.qos == qos.name]}


# -- partitions ---------------------------------------------------------------------------


@command("ng", "slurm", "partition", "new", help="create a partition at a site", store=True)
async def partition_new(args: argparse.Namespace) -> None:
    ctx = args.ctx
    await ops.CreateSlurmPartition.run(ctx.store, ctx.author, site=args.site, name=args.name)
    ctx.out.success(f"created partition [bold]{esc(args.name)}[/] at {esc(args.site)}")


@partition_new.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    parser.add_argument("--name", "-n", required=True, help="partition name")


@command("ng", "slurm", "partition", "remove", help="remove a partition", store=True,
         aliases=["rm"])
async def partition_remove(args: argparse.Namespace) -> None:
    ctx = args.ctx
    removed = await ops.RemoveSlurmPartition.run(ctx.store, ctx.author, site=args.site,
                                                 name=args.name, force=args.force)
    ctx.out.success(f"removed partition [bold]{esc(args.name)}[/] at {esc(args.site)}"
                    + (f" and {esc(removed)} association(s)" if removed else ""))


@partition_remove.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    parser.add_argument("--name", "-n", required=True, help="partition name")
    a.force(parser, help="also remove the associations that use it")


@command("ng", "slurm", "partition", "show", help="list a site's partitions", store=True,
         aliases=["list"])
async def partition_show(args: argparse.Namespace) -> None:
    await get_site(args.site)
    partitions = await list_partitions(args.site)
    assocs = await list_associations(args.site, account=args.group)
    rows = []
    for p in partitions:
        if args.name and p.name != args.name:
            continue
        using = sorted({x.account for x in assocs if x.partition == p.name})
        if args.group and not using:
            continue
        rows.append({"name": p.name, "site": p.site, "accounts": using})
    args.ctx.out.table(rows, title=f"Partitions at {args.site} (count={len(rows)})",
                       columns=["name", "accounts"])


@partition_show.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    parser.add_argument("--name", "-n", help="only this partition")
    a.group(parser, required=False, help="only partitions this group's account uses")
    a.output_format(parser)


# -- QOS ----------------------------------------------------------------------------------


@command("ng", "slurm", "qos", "new", help="create a QOS with initial limits", store=True)
async def qos_new(args: argparse.Namespace) -> None:
    ctx = args.ctx
    await ops.CreateSlurmQOS.run(
        ctx.store, ctx.author, site=args.site, name=args.name, priority=args.priority,
        flags=args.flags, comment=args.comment,
        group_limits=parse_tres(args.group_limits, "--group-limits"),
        user_limits=parse_tres(args.user_limits, "--user-limits"),
        job_limits=parse_tres(args.job_limits, "--job-limits"))
    ctx.out.success(f"created QOS [bold]{esc(args.name)}[/] at {esc(args.site)}")


@qos_new.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    parser.add_argument("--name", "-n", required=True, help="QOS name")
    parser.add_argument("--priority", type=int, default=0, help="QOS priority (default 0)")
    parser.add_argument("--flags", nargs="*", metavar="FLAG", help="default: DenyOnLimit")
    _tres_flag(parser, "--group-limits", "limits for the whole account (GrpTRES)")
    _tres_flag(parser, "--user-limits", "limits per user (MaxTRESPerUser)")
    _tres_flag(parser, "--job-limits", "limits per job (MaxTRESPerJob)")
    parser.add_argument("--comment", default="initial allocation",
                        help="comment of the initial allocation")


@command("ng", "slurm", "qos", "edit", help="change a QOS's priority or flags", store=True)
async def qos_edit(args: argparse.Namespace) -> None:
    ctx = args.ctx
    if args.priority is None and args.flags is None:
        raise InvalidInput("nothing to change: give --priority and/or --flags")
    await ops.EditSlurmQOS.run(ctx.store, ctx.author, site=args.site, name=args.name,
                               priority=args.priority, flags=args.flags)
    ctx.out.success(f"updated QOS [bold]{esc(args.name)}[/] at {esc(args.site)}")


@qos_edit.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    parser.add_argument("--name", "-n", required=True, help="QOS name")
    parser.add_argument("--priority", type=int, help="new QOS priority")
    parser.add_argument("--flags", nargs="*", metavar="FLAG", help="replace the flags")


@command("ng", "slurm", "qos", "remove", help="remove a QOS and its allocations", store=True,
         aliases=["rm"])
async def qos_remove(args: argparse.Namespace) -> None:
    ctx = args.ctx
    touched = await ops.RemoveSlurmQOS.run(ctx.store, ctx.author, site=args.site,
                                           name=args.name, force=args.force)
    ctx.out.success(f"removed QOS [bold]{esc(args.name)}[/] at {esc(args.site)}"
                    + (f" (taken out of {esc(touched)} association(s))" if touched else ""))


@qos_remove.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    parser.add_argument("--name", "-n", required=True, help="QOS name")
    a.force(parser, help="also take it out of the associations that use it")


@command("ng", "slurm", "qos", "show", help="show a site's QOS and their summed limits",
         store=True, aliases=["list"])
async def qos_show(args: argparse.Namespace) -> None:
    await get_site(args.site)
    if args.name:
        qoses = [await get_qos(args.site, args.name)]
    else:
        qoses = await list_qos(args.site)
    allocations = await qos_allocations(args.site)
    data = [_qos_data(q, allocations) for q in qoses]
    if args.name:
        args.ctx.out.show(data[0], title=f"QOS {args.name} at {args.site}")
        return
    args.ctx.out.table(data, title=f"QOS at {args.site} (count={len(data)})",
                       columns=["name", "priority", "flags", "group_limits", "user_limits",
                                "job_limits"])


@qos_show.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    parser.add_argument("--name", "-n", help="only this QOS")
    a.output_format(parser)


# -- allocations --------------------------------------------------------------------------


@command("ng", "slurm", "allocation", "add", help="grant TRES to a QOS bucket", store=True)
async def allocation_add(args: argparse.Namespace) -> None:
    ctx = args.ctx
    alloc = await ops.AddQOSAllocation.run(
        ctx.store, ctx.author, site=args.site, qos=args.qos, bucket=args.field,
        tres=parse_tres(args.tres, "--tres"), comment=args.comment,
        expires_at=a.future_or_none(args.expires_at, "--expires-at"),
        provisioned_at=a.future_or_none(args.provisioned_at, "--provisioned-at"))
    ctx.out.success(f"added allocation {esc(alloc.id)} to QOS [bold]{esc(args.qos)}[/] "
                    f"({esc(args.field)})")


@allocation_add.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    parser.add_argument("--qos", required=True, help="the QOS whose limits the allocation adds to")
    parser.add_argument("--field", required=True, choices=["group_limits", "user_limits",
                                                           "job_limits"],
                        help="which limits it adds to")
    _tres_flag(parser, "--tres", "what to grant", required=True)
    parser.add_argument("--comment", default="", help="why it was granted")
    parser.add_argument("--expires-at", metavar="WHEN", help=a.when_help("when the grant ends"))
    parser.add_argument("--provisioned-at", metavar="WHEN",
                        help=a.when_help("when it was provisioned"))


@command("ng", "slurm", "allocation", "edit", help="change an allocation", store=True)
async def allocation_edit(args: argparse.Namespace) -> None:
    ctx = args.ctx
    expires = a.when(args.expires_at)
    provisioned = a.when(args.provisioned_at)
    await ops.EditSlurmAllocation.run(
        ctx.store, ctx.author, allocation_id=args.id, tres=parse_tres(args.tres, "--tres"),
        comment=args.comment,
        expires_at=expires or None, clear_expires_at=args.expires_at is not None and not expires,
        provisioned_at=provisioned or None,
        clear_provisioned_at=args.provisioned_at is not None and not provisioned)
    ctx.out.success(f"updated allocation {esc(args.id)}")


@allocation_edit.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--id", required=True, help="allocation id (see `allocation show`)")
    _tres_flag(parser, "--tres", "replace the TRES")
    parser.add_argument("--comment", help="replace the comment")
    parser.add_argument("--expires-at", metavar="WHEN",
                        help=a.when_help("when the grant ends", clear=True))
    parser.add_argument("--provisioned-at", metavar="WHEN",
                        help=a.when_help("when it was provisioned", clear=True))


@command("ng", "slurm", "allocation", "remove", help="remove an allocation", store=True,
         aliases=["rm"])
async def allocation_remove(args: argparse.Namespace) -> None:
    ctx = args.ctx
    alloc = await ops.RemoveSlurmAllocation.run(ctx.store, ctx.author, allocation_id=args.id)
    ctx.out.success(f"removed allocation {esc(alloc.id)} from QOS {esc(alloc.qos)}")


@allocation_remove.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--id", required=True, help="allocation id (see `allocation show`)")


@command("ng", "slurm", "allocation", "show", help="list allocations", store=True,
         aliases=["list"])
async def allocation_show(args: argparse.Namespace) -> None:
    if args.id:
        rows = [_alloc_row(await find_allocation(args.id))]
    else:
        if not args.site:
            raise InvalidInput("give --site (or --id)")
        await get_site(args.site)
        await require_filter_names(args.site, account=args.group, partition=args.partition,
                                   qos=args.qos)
        qos_names: set[str] | None = None
        if args.group or args.partition:
            assocs = await list_associations(args.site, account=args.group,
                                             partition=args.partition)
            qos_names = {q for x in assocs for q in x.qos}
        allocations = await qos_allocations(args.site, args.qos)
        rows = [_alloc_row(x) for x in allocations
                if (qos_names is None or x.qos in qos_names)
                and (args.field is None or x.bucket == args.field)]
    args.ctx.out.table(rows, title=f"Allocations (count={len(rows)})",
                       columns=["id", "qos", "bucket", "tres", "comment", "expires_at",
                                "expired"])


@allocation_show.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--id", help="only this allocation")
    a.site(parser, required=False)
    a.group(parser, required=False, help="only QOS this group's associations use")
    parser.add_argument("--partition", help="only allocations of QOS used in this partition")
    parser.add_argument("--qos", help="only allocations of this QOS")
    parser.add_argument("--field", choices=["group_limits", "user_limits", "job_limits"],
                        help="only allocations adding to these limits")
    a.output_format(parser)


# -- accounts -----------------------------------------------------------------------------


def _account_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {"site": args.site, "group": args.group, "max_user_jobs": args.max_user_jobs,
            "max_group_jobs": args.max_group_jobs, "max_submit_jobs": args.max_submit_jobs,
            "max_job_length": args.max_job_length, "coordinators": args.coordinator}


@command("ng", "slurm", "account", "new", help="create a group's Slurm account", store=True)
async def account_new(args: argparse.Namespace) -> None:
    ctx = args.ctx
    await ops.CreateSlurmAccount.run(ctx.store, ctx.author, **_account_kwargs(args))
    ctx.out.success(f"created Slurm account [bold]{esc(args.group)}[/] at {esc(args.site)}")


@command("ng", "slurm", "account", "edit", help="change an account's limits or coordinators",
         store=True)
async def account_edit(args: argparse.Namespace) -> None:
    ctx = args.ctx
    kwargs = _account_kwargs(args)
    if args.clear_coordinators:
        kwargs["coordinators"] = []
    await ops.EditSlurmAccount.run(ctx.store, ctx.author, **kwargs)
    ctx.out.success(f"updated Slurm account [bold]{esc(args.group)}[/] at {esc(args.site)}")


for _handler in (account_new, account_edit):
    @_handler.args()
    def _(parser: a.Parser) -> None:
        a.site(parser)
        a.group(parser)
        parser.add_argument("--max-user-jobs", type=int, help="-1 = unlimited")
        parser.add_argument("--max-group-jobs", type=int, help="-1 = unlimited")
        parser.add_argument("--max-submit-jobs", type=int, help="-1 = unlimited")
        parser.add_argument("--max-job-length", metavar="TIME",
                            help="minutes, H:M:S or D-H:M:S; -1 = unlimited")
        parser.add_argument("--coordinator", action="append", metavar="USER",
                            help="repeatable; replaces the list")

account_edit.parser.add_argument("--clear-coordinators", action="store_true",
                                 help="remove every coordinator")


@command("ng", "slurm", "account", "remove", help="remove a group's Slurm account",
         store=True, aliases=["rm"])
async def account_remove(args: argparse.Namespace) -> None:
    ctx = args.ctx
    await ops.RemoveSlurmAccount.run(ctx.store, ctx.author, site=args.site, group=args.group,
                                     force=args.force)
    ctx.out.success(f"removed Slurm account [bold]{esc(args.group)}[/] at {esc(args.site)}")


@account_remove.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    a.group(parser)
    a.force(parser, help="also remove its associations and sticky entry")


@command("ng", "slurm", "account", "show", help="show a group's account and associations",
         store=True)
async def account_show(args: argparse.Namespace) -> None:
    await get_account(args.site, args.group)
    found = await group_slurm_at_site(args.group, args.site)
    assert found is not None
    args.ctx.out.show({"site": args.site} | found.as_dict(),
                      title=f"Slurm account {args.group} at {args.site}")


@account_show.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    a.group(parser)
    a.output_format(parser)


# -- associations -------------------------------------------------------------------------


@command("ng", "slurm", "association", "new", help="let an account use a partition and QOS",
         store=True)
async def association_new(args: argparse.Namespace) -> None:
    ctx = args.ctx
    await ops.CreateSlurmAssociation.run(ctx.store, ctx.author, site=args.site,
                                         group=args.group, partition=args.partition,
                                         qos=args.qos, default=args.default)
    ctx.out.success(f"[bold]{esc(args.group)}[/] may use {esc(args.partition)} under "
                    f"{esc(args.qos)} "
                    f"at {esc(args.site)}")


@association_new.args()
def _(parser: a.Parser) -> None:
    a.group(parser)
    a.site(parser)
    parser.add_argument("--partition", required=True, help="the partition the account may use")
    parser.add_argument("--qos", required=True, help="the QOS it runs under there")
    parser.add_argument("--default", action="store_true",
                        help="make this the default QOS of the association")


@command("ng", "slurm", "association", "remove", help="remove associations (or one QOS)",
         store=True, aliases=["rm"])
async def association_remove(args: argparse.Namespace) -> None:
    ctx = args.ctx
    count = await ops.RemoveSlurmAssociation.run(ctx.store, ctx.author, site=args.site,
                                                 group=args.group, partition=args.partition,
                                                 qos=args.qos)
    ctx.out.success(f"removed {esc(count)} association(s) of [bold]{esc(args.group)}[/] at "
                    f"{esc(args.site)}")


@association_remove.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    a.group(parser)
    parser.add_argument("--partition", help="only associations in this partition")
    parser.add_argument("--qos", help="only take this QOS out of the associations")


@command("ng", "slurm", "association", "show", help="list a site's associations", store=True,
         aliases=["list"])
async def association_show(args: argparse.Namespace) -> None:
    await get_site(args.site)
    await require_filter_names(args.site, account=args.group, partition=args.partition,
                               qos=args.qos)
    found = await list_associations(args.site, account=args.group, partition=args.partition,
                                    qos=args.qos)
    rows = [{"account": x.account, "partition": x.partition, "qos": x.qos,
             "default_qos": x.default_qos} for x in found]
    args.ctx.out.table(rows, title=f"Associations at {args.site} (count={len(rows)})",
                       columns=["account", "partition", "qos", "default_qos"])


@association_show.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    a.group(parser, required=False)
    parser.add_argument("--partition", help="only associations in this partition")
    parser.add_argument("--qos", help="only associations with this QOS")
    a.output_format(parser)


# -- provision ----------------------------------------------------------------------------


@command("ng", "slurm", "provision",
         help="create whatever is missing for a group to run in a partition", store=True)
async def provision(args: argparse.Namespace) -> None:
    ctx = args.ctx
    assoc = await ops.ProvisionSlurmAllocation.run(
        ctx.store, ctx.author, site=args.site, group=args.group, partition=args.partition,
        qos=args.qos, group_limits=parse_tres(args.group_limits, "--group-limits"),
        comment=args.comment, priority=args.priority, flags=args.flags)
    ctx.out.success(f"[bold]{esc(args.group)}[/] can run in {esc(args.partition)} at "
                    f"{esc(args.site)} "
                    f"(QOS {esc(', '.join(assoc.qos))})")


@provision.args()
def _(parser: a.Parser) -> None:
    a.group(parser)
    a.site(parser)
    parser.add_argument("--partition", required=True, help="the partition the group should run in")
    parser.add_argument("--qos", help="default <group>-<partition>-qos")
    _tres_flag(parser, "--group-limits", "initial group limits of a new QOS")
    parser.add_argument("--comment", default="initial allocation",
                        help="comment of a new QOS's initial allocation")
    parser.add_argument("--priority", type=int, default=0, help="priority of a new QOS (default 0)")
    parser.add_argument("--flags", nargs="*", metavar="FLAG",
                        help="flags of a new QOS (default DenyOnLimit)")
