"""``cheeto daemon quota-agent``: the head node's quota table, kept by a loop.

The site worker (``daemon worker --site S``) starts this same loop as a child process
when S is in ``slurm.enforcement.sites``; run it alone under systemd where the worker
runs elsewhere, or with ``--once`` to do one pass (charge the spool, write the table).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from pathlib import Path

from .. import errors
from . import args as a
from .app import command

log = logging.getLogger(__name__)


@command("daemon", "quota-agent",
         help="keep a site's quota table on its head node: charge finished jobs, "
              "release reservations (the site worker starts it)")
async def daemon_quota_agent(args: argparse.Namespace) -> int:
    from .. import metrics
    from ..store import connect

    ctx = args.ctx
    # started by a site worker serving metrics: record into its directory (before the
    # store connects, so its commands are timed too)
    metrics.join("site_worker")
    # as the daemon's tasks connect: never start an embedded store of its own, and wait
    # out a replica set's election (30 s) rather than fail every pass during one
    ctx.store = await connect(ctx.config.mongo, autostart=False, long_running=True)
    return await _serve(args)  # the runtime closes ctx.store


async def _serve(args: argparse.Namespace) -> int:
    from ..adapters.sacct import Sacct
    from ..adapters.scontrol import SControl
    from ..adapters.squeue import Squeue
    from ..daemon.quota_agent import QuotaAgent
    from ..enforcement.layout import layout
    from ..queries.site import get_site

    ctx = args.ctx
    site = await get_site(args.site)
    settings = ctx.config.slurm.enforcement
    where = layout(settings, site.name, Path(args.slurm_conf or "/etc/slurm/slurm.conf"))
    if not where.state.is_dir():
        raise errors.InvalidInput(f"{where.state} does not exist: run `cheeto ng site "
                                  f"enforcement install -s {site.name}` first")
    agent = QuotaAgent(ctx.store, ctx.config, site.name, where,
                       sacct=Sacct(timeout=args.timeout), scontrol=SControl(timeout=args.timeout),
                       squeue=Squeue(timeout=args.timeout), sync_blocks=not args.no_blocks)
    if args.once:
        report = await agent.one_pass()
        if ctx.out.machine:
            ctx.out.write_data(report.as_dict())
        else:
            ctx.out.show(report.as_dict(), title=f"quota agent {site.name}: one pass")
        return 0
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info("quota agent %s: table %s, spool %s", site.name, where.table, where.spool)
    await agent.run(stop=stop)
    return 0


@daemon_quota_agent.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    parser.add_argument("--once", action="store_true",
                        help="do one pass and print what it did, then exit")
    parser.add_argument("--no-blocks", action="store_true",
                        help="never run the Slurm sync when the out-of-quota set changes")
    parser.add_argument("--slurm-conf", metavar="PATH",
                        help="slurm.conf of the site (only names the plugin's directory)")
    parser.add_argument("--timeout", type=a.seconds, default=30.0,
                        help="seconds each sacct/scontrol call may take (default 30)")
    a.output_format(parser)
