"""``cheeto ng cluster status|stalled``: a look at a site's live cluster (sinfo, squeue).

Both read the cluster where the command runs (a head node, or anywhere ``SLURM_CONF``
points at the site's slurmctld); ``stalled`` adds the store's quota state for jobs held
by a limit.
"""

from __future__ import annotations

import argparse
from typing import Any

from ...adapters.sinfo import Sinfo
from ...adapters.squeue import Squeue
from ...models.fields import utcnow
from ...sync.cluster_monitor import attach_quota, judge, read_snapshot, status_data
from ...timeparse import parse_duration
from .. import args as a
from ..app import command, group_help
from ..output import esc

group_help("ng", "cluster", help="the live cluster: partitions, nodes, jobs, stalled work")


def _programs(parser: a.Parser) -> None:
    parser.add_argument("--sinfo", default="sinfo", metavar="PATH",
                        help="the sinfo program (default: sinfo on PATH)")
    parser.add_argument("--squeue", default="squeue", metavar="PATH",
                        help="the squeue program (default: squeue on PATH)")
    parser.add_argument("--timeout", type=a.seconds, default=30.0,
                        help="seconds each sinfo/squeue call may take (default 30)")


def _readers(args: argparse.Namespace) -> dict[str, Any]:
    return {"sinfo": Sinfo(binary=args.sinfo, timeout=args.timeout),
            "squeue": Squeue(binary=args.squeue, timeout=args.timeout)}


@command("ng", "cluster", "status",
         help="partitions, nodes, running and pending jobs and GPUs in use", store=True)
async def cluster_status(args: argparse.Namespace) -> int:
    ctx = args.ctx
    snap = await read_snapshot(args.site, **_readers(args))
    data = status_data(snap)
    totals = data["totals"]
    ctx.out.table(data["partitions"], data=data,
                  title=f"cluster {snap.cluster} ({snap.site}): {totals['nodes']} node(s), "
                        f"{totals['running_jobs']} running, {totals['pending_jobs']} pending, "
                        f"GPUs {totals['gpus_in_use']}/{totals['gpus']} in use",
                  columns=["partition", "available", "nodes", "node_states", "cpus", "gpus",
                           "running_jobs", "pending_jobs", "gpus_in_use"])
    from ...enforcement.check import live_warnings

    for line in await live_warnings(snap.site, ctx.config.slurm.enforcement):
        ctx.out.warn(esc(line))
    return 0


@cluster_status.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    _programs(parser)
    a.output_format(parser)


@command("ng", "cluster", "stalled",
         help="pending jobs that will not start by themselves, and nodes down too long",
         store=True)
async def cluster_stalled(args: argparse.Namespace) -> int:
    ctx = args.ctx
    pending_over = parse_duration(args.pending_over)
    down_over = parse_duration(args.down_over)
    snap = await read_snapshot(args.site, **_readers(args))
    stalled = judge(snap, pending_over=pending_over, down_over=down_over)
    await attach_quota(stalled, utcnow())
    if ctx.out.machine:
        ctx.out.write_data(stalled.as_dict())
        return 0
    if not stalled.jobs and not stalled.nodes:
        ctx.out.success(f"nothing stalled on {esc(snap.cluster)} (pending over "
                        f"{esc(args.pending_over)}, down over {esc(args.down_over)})")
        return 0
    if stalled.jobs:
        ctx.out.table([{"job": j.job_id, "user": j.user, "account": j.account,
                        "partition": j.partition, "pending": j.pending_seconds,
                        "reason": j.reason, "held_by": j.held_by or "",
                        "fix": j.fix} for j in stalled.jobs],
                      title=f"stalled jobs on {snap.cluster} ({len(stalled.jobs)})")
    if stalled.nodes:
        ctx.out.table([{"node": n.node, "state": n.state, "reason": n.reason,
                        "since": n.since, "fix": n.fix} for n in stalled.nodes],
                      title=f"nodes down or drained on {snap.cluster} ({len(stalled.nodes)})")
    return 0


@cluster_stalled.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    parser.add_argument("--pending-over", default="24h", metavar="DURATION",
                        help="report jobs pending longer than this (default 24h; 0s: all)")
    parser.add_argument("--down-over", default="1h", metavar="DURATION",
                        help="report nodes down or drained longer than this (default 1h)")
    _programs(parser)
    a.output_format(parser)
