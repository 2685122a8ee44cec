"""``cheeto ng slurm sync`` and ``cheeto ng slurm why``."""

from __future__ import annotations

import argparse
from datetime import timedelta
from pathlib import Path
from typing import Any

from ...adapters.sacctmgr import SAcctMgr
from ...adapters.scontrol import SControl
from ...errors import GuardTripped, InvalidInput
from ...sync.slurm.actual import READS, DumpReader, Policy, SAcctMgrReader
from ...sync.slurm.run import sync_site
from ...sync.slurm.why import explain
from .. import args as a
from ..app import command
from ..output import esc


def _runner(args: argparse.Namespace) -> SAcctMgr:
    return SAcctMgr(binary=args.sacctmgr, sudo=args.sudo, timeout=args.timeout)


def _dump_reader(args: argparse.Namespace) -> DumpReader | None:
    files = {what: getattr(args, f"from_{what}_dump") for what in READS}
    given = {what: path for what, path in files.items() if path}
    if not given:
        return None
    if args.apply:
        raise InvalidInput("--from-*-dump is an offline preview and cannot be combined with "
                           "--apply")
    texts = {}
    for what, path in given.items():
        try:
            texts[what] = Path(path).read_text()
        except OSError as exc:
            raise InvalidInput(f"cannot read {path}: {exc.strerror}") from None
    return DumpReader(texts)


_MARKS = {"ok": "[green]ok[/] ", "failed": "[red]FAILED[/] ", "pending": "[yellow]pending[/] ",
          "skipped": "[yellow]skipped[/] "}


def _command_markup(cmd: Any, item: Any) -> str:
    """One planned command as markup: its outcome's mark (ours), the command and the
    detail escaped (the mark was escaped too once, so a pipe showed `[green]ok[/]`)."""
    mark = "" if item is None else _MARKS.get(item.outcome, "")
    detail = f" [dim]({esc(item.detail)})[/]" if item and item.outcome != "ok" else ""
    return f"  {mark}sacctmgr -i {esc(cmd)}{detail}"


def _render_plan(ctx: Any, report: Any, mode: str) -> None:
    out = ctx.out
    planned = report.plan
    out.info(f"[bold]{esc(mode)}[/] cluster {esc(planned.cluster)}: {esc(planned.processes)} "
             f"sacctmgr "
             f"process(es), {esc(sum(planned.counts.values()))} change(s), "
             f"{len(planned.deletions)} deletion(s)")
    outcomes = {item.command: item for item in report.items}
    for batch in planned.batches:
        out.info(f"[cyan]{esc(batch.label)}[/] ({esc(batch.items)})")
        for cmd in batch.commands:
            out.info(_command_markup(cmd, outcomes.get(str(cmd))))
    for conflict in planned.conflicts:
        out.warn(esc(conflict))
    for note in planned.notes:
        out.info(f"[dim]note: {esc(note)}[/]")
    if planned.is_empty:
        out.success("nothing to do: every quota block is in place" if planned.quota_only
                    else "nothing to do: slurmdbd matches the store")


@command("ng", "slurm", "sync", help="reconcile a site's Slurm accounting (dry run unless "
                                     "--apply)", store=True, progress="Slurm sync")
async def slurm_sync(args: argparse.Namespace) -> int:
    ctx = args.ctx
    dump = _dump_reader(args)
    runner = _runner(args)
    reader = dump or SAcctMgrReader(runner)
    max_deletions = None if args.max_deletions is not None and args.max_deletions < 0 \
        else args.max_deletions
    try:
        report = await sync_site(
            ctx.require_store(), args.site, reader=reader, runner=runner, apply=args.apply,
            max_deletions=max_deletions, author=ctx.author,
            per_day=ctx.config.slurm.max_deletions_per_day,
            allow_deletions=args.allow_deletions,
            lease_ttl=timedelta(seconds=ctx.config.slurm.lease_seconds),
            policy=Policy.of(ctx.config.slurm.root_users, ctx.config.slurm.unmanaged_accounts),
            dump_commands=Path(args.dump_commands) if args.dump_commands else None,
            offline=dump is not None)
    except GuardTripped as exc:
        if ctx.out.machine:
            ctx.out.write_data({"aborted": True, "error": exc.message,
                                "would_delete": exc.would_delete})
        else:
            ctx.out.table([{"would delete": d} for d in exc.would_delete],
                          title="Refused: these removals exceed the cap or budget")
        raise
    mode = "APPLIED" if args.apply else (
        "DRY-RUN (offline, diffed against dumps)" if dump else "DRY-RUN (use --apply)")
    if ctx.out.machine:
        ctx.out.write_data({"mode": mode, "run": report.run_id, **report.plan.as_dict(),
                            "tally": report.tally(),
                            "items": [i.model_dump() for i in report.items]})
    else:
        _render_plan(ctx, report, mode)
        if args.apply:
            tally = report.tally()
            ok = sum(t["ok"] for t in tally.values())
            ctx.out.info(f"applied: {esc(ok)} ok, {len(report.failed)} failed, "
                         f"{len(report.pending)} pending, {len(report.skipped)} skipped "
                         f"(run {esc(report.run_id)})")
    for item in report.pending:
        ctx.out.warn(f"pending (retried next run): {esc(item.command)}: {esc(item.detail)}")
    if dump is None:
        from ...enforcement.check import live_warnings

        for line in await live_warnings(args.site, ctx.config.slurm.enforcement):
            ctx.out.warn(esc(line))
    if report.failed or report.skipped:
        ctx.out.error(f"{len(report.failed)} sacctmgr command(s) failed"
                      + (f"; {len(report.skipped)} skipped" if report.skipped else ""))
        return 1
    return 0


def _sacctmgr_flag(parser: a.Parser) -> None:
    parser.add_argument("--sacctmgr", metavar="PATH", default="sacctmgr",
                        help="the sacctmgr to run: a name on PATH or a path (default "
                             "sacctmgr), like the daemon's slurm_sync.sacctmgr")


@slurm_sync.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    parser.add_argument("--apply", action="store_true", help="execute the plan")
    parser.add_argument("--sudo", action="store_true", help="run sacctmgr via sudo -n")
    _sacctmgr_flag(parser)
    parser.add_argument("--max-deletions", type=int, default=50,
                        help="refuse to apply a plan deleting more (default 50; -1: no cap)")
    parser.add_argument("--allow-deletions", type=int, metavar="N",
                        help="let this run remove up to N even past the site's daily "
                             "budget (slurm.max_deletions_per_day); review the plan first")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds each sacctmgr call may take (default 60)")
    parser.add_argument("--dump-commands", metavar="FILE",
                        help="also write every planned command to FILE")
    for what, produce in READS.items():
        parser.add_argument(f"--from-{what}-dump", metavar="FILE",
                            help=f"offline: read {what} from FILE (made with: sacctmgr -i -P -n "
                                 f"{' '.join(produce('CLUSTER'))})")
    a.output_format(parser)


@command("ng", "slurm", "why", help="explain whether a user can submit at a site, and why",
         store=True)
async def slurm_why(args: argparse.Namespace) -> None:
    ctx = args.ctx
    runner = None if args.offline else SAcctMgr(binary=args.sacctmgr, sudo=args.sudo,
                                                timeout=args.timeout)
    scontrol = None if args.offline or args.no_slurmctld else SControl(
        binary=args.scontrol, timeout=args.timeout)
    data = await explain(args.site, args.user, runner=runner, scontrol=scontrol)
    ctx.out.show(data, title=f"why: {args.user} at {args.site}")


@slurm_why.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    a.user(parser)
    parser.add_argument("--offline", action="store_true",
                        help="ask neither slurmdbd nor slurmctld what they hold now")
    parser.add_argument("--no-slurmctld", action="store_true",
                        help="do not ask slurmctld (scontrol show assoc_mgr)")
    parser.add_argument("--sudo", action="store_true", help="run sacctmgr via sudo -n")
    _sacctmgr_flag(parser)
    parser.add_argument("--scontrol", metavar="PATH", default="scontrol",
                        help="the scontrol to run (default scontrol on PATH)")
    parser.add_argument("--timeout", type=float, default=30.0,
                        help="seconds to wait for sacctmgr (default 30)")
    a.output_format(parser)
