"""``cheeto ng site adopt``: store records that reproduce a running cluster.

Reads slurmdbd and/or the directory with the reconcilers' readers, maps what they hold
(``migrate/adopt.py``) and writes it in one transaction with one History row (or
nothing, listing every refusal). Afterwards the first ``ng slurm sync`` and ``ng ldap
sync-site`` have nothing to do, except what the report's notes announce. Taking over
slurmdbd's QOS means tagging them ``Description=cheeto:<cluster>`` (how the reconciler
knows its own); after a successful write, untagged adopted QOS are tagged, and nothing
else is written to slurmdbd.
"""

from __future__ import annotations

import argparse
from typing import Any

from ...errors import Conflict, ExternalError, InvalidInput
from .. import args as a
from ..app import command
from ..output import esc

OP_NAME = "adopt_site"


@command("ng", "site", "adopt", help="create the store records that reproduce a running "
                                     "cluster (slurmdbd, the directory)", store=True)
async def site_adopt(args: argparse.Namespace) -> int:
    from ...adapters.sacctmgr import SAcctMgr
    from ...migrate.adopt import adopt
    from ...migrate.adopt_read import known_records, read_directory, read_slurm
    from ...migrate.writer import plan_import, write_import
    from ...queries.site import get_site
    from ...sync.slurm.actual import Policy
    from ...sync.slurm.state import owner_tag
    from .ldap import _config

    ctx = args.ctx
    if not (args.from_slurm or args.from_ldap):
        raise InvalidInput("say what to adopt: --from-slurm and/or --from-ldap")
    site = await get_site(args.site)
    runner = SAcctMgr(binary=args.sacctmgr, sudo=args.sudo, timeout=args.timeout)
    slurm = None
    if args.from_slurm:
        slurm = await read_slurm(runner, site.cluster_name, Policy.of(
            ctx.config.slurm.root_users, ctx.config.slurm.unmanaged_accounts))
    directory = await read_directory(_config(ctx), site.name) if args.from_ldap else None
    mapping = adopt(site.name, slurm=slurm, directory=directory, known=await known_records())
    sources = [s for s, on in (("slurmdbd", args.from_slurm), ("ldap", args.from_ldap)) if on]
    source = f"{' + '.join(sources)} for site {site.name}"
    if args.dry_run:
        plan = await plan_import(ctx.store, mapping)
    else:
        plan = await write_import(ctx.store, mapping, author=ctx.author, source=source,
                                  op=OP_NAME)
    untagged = sorted(q.name for q in (slurm.qos.values() if slurm else ())
                      if q.owner is None and any(d.doc.name == q.name
                                                 for d in mapping.docs.get("slurm_qos", [])))
    claimed: list[str] = []
    if plan.ok and not args.dry_run and untagged:
        for name in untagged:
            result = await runner.run(["modify", "qos", "where", f"name={name}", "set",
                                       f"Description={owner_tag(site.cluster_name)}"],
                                      write=True)
            if not result.ok:
                raise ExternalError(f"tagging QOS {name} failed ({result.summary()}); the "
                                    "store records are written, re-run adopt to tag it")
            claimed.append(name)
    report: dict[str, Any] = {
        "site": site.name, "source": source, "dry_run": args.dry_run,
        "collections": plan.counts(), "refused": plan.refusals, "notes": plan.notes,
        "qos_to_tag" if args.dry_run else "qos_tagged": untagged if args.dry_run else claimed,
        "written": not args.dry_run and plan.ok and plan.new_count > 0}
    if ctx.out.machine:
        ctx.out.write_data(report)
    else:
        ctx.out.table([c for c in plan.counts() if c["new"] or c["present"]],
                      title=f"adopt {source}", columns=["collection", "new", "present"])
        for note in plan.notes:
            ctx.out.warn(f"{esc(note)}")
        for line in plan.refusals:
            ctx.out.warn(f"refused: {esc(line)}")
        if untagged:
            verb = "would tag" if args.dry_run else "tagged"
            ctx.out.info(f"{esc(verb)} QOS {esc(', '.join(untagged))} as cheeto:"
                         f"{esc(site.cluster_name)} (taking them over)")
    if not plan.ok:
        raise Conflict(f"{len(plan.refusals)} refusal(s): nothing was written")
    if args.dry_run:
        ctx.out.info(f"dry run: {esc(plan.new_count)} record(s) would be written")
    elif plan.new_count == 0:
        ctx.out.info("nothing to adopt: the store already holds all of it")
    else:
        ctx.out.success(f"adopted {esc(plan.new_count)} record(s) in one transaction")
    return 0


@site_adopt.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    parser.add_argument("--from-slurm", action="store_true",
                        help="read slurmdbd: accounts, users, QOS, associations, limits, "
                             "coordinators")
    parser.add_argument("--from-ldap", action="store_true",
                        help="read the directory: users, groups and members, SSH keys, "
                             "automount maps")
    parser.add_argument("--dry-run", action="store_true",
                        help="show what would be created and every conflict; write nothing")
    parser.add_argument("--sacctmgr", metavar="PATH", default="sacctmgr",
                        help="the sacctmgr to run: a name on PATH or a path")
    parser.add_argument("--sudo", action="store_true", help="run sacctmgr via sudo -n")
    parser.add_argument("--timeout", type=a.seconds, default=60.0, metavar="SECONDS",
                        help="seconds each sacctmgr call may take (default 60)")
    a.output_format(parser)
