"""``cheeto ng quota …``: CPU/GPU-minute quotas, site defaults, adjustments, GPU factors.

Amounts are minutes (``600m`` or ``600``), hours (``10h``) or ``unlimited``; adjustments
are signed (``--cpu -10h`` credits ten hours back, ``+10h`` debits them).
"""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any

from ...errors import InvalidInput
from ...models.fields import utcnow
from ...models.quota import PERIODS, parse_amount, parse_money
from .. import args as a
from ..app import command, group_help
from ..output import esc
from .usage import subject, when

group_help("ng", "quota", help="CPU/GPU-minute quotas per user and account, GPU factors")
group_help("ng", "quota", "defaults", help="a site's quotas for users and accounts without one")
group_help("ng", "quota", "gpu-factor", help="GPU-type charge factors, versioned in time")

AMOUNT_HELP = "minutes (600m or 600), hours (10h) or unlimited"
MONEY_HELP = ("an amount in the site's currency (500USD or 500; usage.currency), or "
              "unlimited; charged through the rate card (ng usage rate)")


def amount(text: str | None, flag: str, *, signed: bool = False) -> Any:
    if text is None:
        return "keep" if not signed else 0.0
    try:
        return parse_amount(text, signed=signed)
    except ValueError as exc:
        raise InvalidInput(f"{flag}: {exc}") from None


def money(text: str | None, flag: str, currency: str, *, signed: bool = False) -> Any:
    """``500USD`` / ``unlimited`` (``--budget``) in the site's currency; another is refused."""
    if text is None:
        return "keep" if not signed else 0.0
    try:
        return parse_money(text, currency, signed=signed)
    except ValueError as exc:
        raise InvalidInput(f"{flag}: {exc}") from None


def _money(value: float | None, currency: str) -> str:
    return "none" if value is None else f"{value:.2f} {currency}"


def _minutes(value: float | None) -> str:
    if value is None:
        return "unlimited"
    return f"{value:g} min ({value / 60:.2f} h)"


def period_args(parser: a.Parser) -> None:
    parser.add_argument("--period", choices=PERIODS,
                        help="none, monthly, quarterly, yearly (calendar, UTC) or explicit "
                             "(with --start/--end)")
    parser.add_argument("--start", metavar="WHEN", help=a.when_help("an explicit period's start"))
    parser.add_argument("--end", metavar="WHEN", help=a.when_help("an explicit period's end"))
    carry = parser.add_mutually_exclusive_group()
    carry.add_argument("--carry-over", dest="carry_over", action="store_true", default=None,
                       help="add the unused part of the previous period's quota")
    carry.add_argument("--no-carry-over", dest="carry_over", action="store_false",
                       help="do not carry unused quota over")


def period_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {"period": args.period or "keep", "start": when(args.start, "--start"),
            "end": when(args.end, "--end"), "carry_over": args.carry_over}


@command("ng", "quota", "set", help="set a user's or an account's quota at a site", store=True)
async def quota_set(args: argparse.Namespace) -> int:
    from ...operations.quota import SetQuota

    ctx = args.ctx
    _need_subject(args)
    quota = await SetQuota.run(ctx.require_store(), ctx.author, site=args.site, user=args.user,
                               account=args.account, cpu_minutes=amount(args.cpu, "--cpu"),
                               gpu_minutes=amount(args.gpu, "--gpu"),
                               budget=money(args.budget, "--budget", ctx.config.usage.currency),
                               **period_kwargs(args))

    def note(what: str) -> str:  # not set on the quota: follows the site's defaults
        return " (site default)" if quota.follows(what) else ""

    ctx.out.success(f"quota of {esc(_who(args))} at {esc(args.site)}: CPU "
                    f"{esc(_minutes(quota.cpu_minutes) + note('cpu'))}, GPU "
                    f"{esc(_minutes(quota.gpu_minutes) + note('gpu'))}, budget "
                    f"{esc(_money(quota.budget, ctx.config.usage.currency) + note('budget'))}"
                    f", period {esc(quota.period + note('period'))}")
    return 0


@quota_set.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    subject(parser)
    parser.add_argument("--cpu", metavar="Q", help=f"CPU-minute quota: {AMOUNT_HELP}")
    parser.add_argument("--gpu", metavar="Q", help=f"GPU-minute quota: {AMOUNT_HELP}")
    parser.add_argument("--budget", metavar="MONEY", help=f"budget in money: {MONEY_HELP}")
    period_args(parser)


def _need_subject(args: argparse.Namespace) -> None:
    if args.user is None and args.account is None:
        raise InvalidInput("give --user or --account")


def _who(args: argparse.Namespace) -> str:
    return f"user {args.user}" if args.user is not None else f"account {args.account}"


@command("ng", "quota", "remove", help="remove a quota (the site's defaults apply again)",
         store=True, aliases=["rm"])
async def quota_remove(args: argparse.Namespace) -> int:
    from ...operations.quota import RemoveQuota

    ctx = args.ctx
    _need_subject(args)
    await RemoveQuota.run(ctx.require_store(), ctx.author, site=args.site, user=args.user,
                          account=args.account)
    ctx.out.success(f"removed the quota of {esc(_who(args))} at {esc(args.site)}")
    return 0


@quota_remove.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    subject(parser)


@command("ng", "quota", "adjust", help="credit (-) or debit (+) usage, with a reason",
         store=True)
async def quota_adjust(args: argparse.Namespace) -> int:
    from ...operations.quota import AdjustUsage

    ctx = args.ctx
    _need_subject(args)
    adj = await AdjustUsage.run(ctx.require_store(), ctx.author, site=args.site,
                                user=args.user, account=args.account,
                                cpu_minutes=amount(args.cpu, "--cpu", signed=True),
                                gpu_minutes=amount(args.gpu, "--gpu", signed=True),
                                money=money(args.budget, "--budget",
                                            ctx.config.usage.currency, signed=True),
                                reason=args.reason)
    ctx.out.success(f"adjusted the usage of {esc(_who(args))} at {esc(args.site)}: CPU "
                    f"{adj.cpu_minutes:+g} min, GPU {adj.gpu_minutes:+g} min, money "
                    f"{adj.money:+.2f} {esc(ctx.config.usage.currency)}")
    return 0


@quota_adjust.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    subject(parser)
    parser.add_argument("--cpu", metavar="±Q", help="signed CPU amount: -10h credits, +90m debits")
    parser.add_argument("--gpu", metavar="±Q", help="signed GPU amount: -10h credits, +90m debits")
    parser.add_argument("--budget", metavar="±MONEY",
                        help="signed money against a budget: -50USD credits, +20USD debits")
    parser.add_argument("--reason", required=True, help="why (recorded with the adjustment)")


@command("ng", "quota", "show", help="used, preallocated, quota and percent at a site",
         store=True)
async def quota_show(args: argparse.Namespace) -> int:
    from ...adapters.squeue import Squeue
    from ...errors import ExternalError
    from ...queries.quota import (
        NO_RESERVATIONS,
        Reserved,
        check_subject,
        quota_status,
        reservations,
    )
    from ...queries.site import get_site
    from ...queries.usage import factor_table

    ctx = args.ctx
    site = await get_site(args.site)
    await check_subject(site.name, user=args.user, account=args.account)  # not a typo
    now = utcnow()
    reserved = NO_RESERVATIONS
    if not args.no_squeue:
        try:
            jobs = await Squeue(binary=args.squeue).reserving(site.cluster_name)
            reserved = reservations(jobs, await factor_table(site.name), now)
        except ExternalError as exc:
            reserved = Reserved({}, {}, known=False, note=exc.message)
    rows = await quota_status(site.name, now, user=args.user, account=args.account,
                              reserved=reserved)
    currency = ctx.config.usage.currency
    data = {"site": site.name, "currency": currency, "preallocated_known": reserved.known,
            "preallocated_note": reserved.note, "subjects": [r.as_dict() for r in rows]}
    table = [_row(r) for r in rows]
    columns = ["kind", "name", "source", "period", "cpu used", "cpu prealloc", "cpu quota",
               "cpu %", "gpu used", "gpu prealloc", "gpu quota", "gpu %"]
    if any(r.budget.quota is not None or r.budget.used for r in rows):
        columns += [f"spent {currency}", f"budget {currency}", "budget %"]
        for row, status in zip(table, rows, strict=True):
            row.update(_budget_cells(status, currency))
    ctx.out.table(table, title=f"quotas at {site.name}", data=data, columns=columns)
    if not reserved.known and not ctx.out.machine:
        ctx.out.warn("preallocated is 0: queued and running jobs unknown "
                     f"({esc(reserved.note)})")
    return 0


def _row(status: Any) -> dict[str, Any]:
    def fmt(value: float | None) -> str:
        return "unlimited" if value is None else f"{value:.1f}"

    def limit(usage: Any) -> str:
        """A quota of its own that follows the site's default for this resource says so."""
        return fmt(usage.quota) + (" (default)" if status.source == "own"
                                   and usage.source == "default" else "")

    def pct(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    return {"kind": status.kind, "name": status.name, "source": status.source,
            "period": f"{status.period} {status.start:%Y-%m-%d}.." if status.period != "none"
            else "none",
            "cpu used": fmt(status.cpu.used), "cpu prealloc": fmt(status.cpu.preallocated),
            "cpu quota": limit(status.cpu), "cpu %": pct(status.cpu.percent),
            "gpu used": fmt(status.gpu.used), "gpu prealloc": fmt(status.gpu.preallocated),
            "gpu quota": limit(status.gpu), "gpu %": pct(status.gpu.percent)}


def _budget_cells(status: Any, currency: str) -> dict[str, str]:
    b = status.budget
    own = " (default)" if status.source == "own" and b.source == "default" else ""
    return {f"spent {currency}": f"{b.used:.2f}",
            f"budget {currency}": ("none" if b.quota is None else f"{b.quota:.2f}") + own,
            "budget %": "-" if b.percent is None else f"{b.percent:.1f}"}


@quota_show.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    subject(parser)
    parser.add_argument("--squeue", default="squeue", metavar="PATH",
                        help="the squeue program for queued and running jobs (default: squeue "
                             "on PATH)")
    parser.add_argument("--no-squeue", action="store_true",
                        help="do not ask squeue (preallocated shows 0)")
    a.output_format(parser)


@command("ng", "quota", "defaults", "set", help="set a site's default quotas", store=True)
async def defaults_set(args: argparse.Namespace) -> int:
    from ...operations.quota import SetQuotaDefaults

    ctx = args.ctx
    d = await SetQuotaDefaults.run(
        ctx.require_store(), ctx.author, site=args.site,
        user_cpu_minutes=amount(args.user_cpu, "--user-cpu"),
        user_gpu_minutes=amount(args.user_gpu, "--user-gpu"),
        account_cpu_minutes=amount(args.account_cpu, "--account-cpu"),
        account_gpu_minutes=amount(args.account_gpu, "--account-gpu"),
        user_budget=money(args.user_budget, "--user-budget", ctx.config.usage.currency),
        account_budget=money(args.account_budget, "--account-budget",
                             ctx.config.usage.currency), **period_kwargs(args))
    currency = ctx.config.usage.currency
    ctx.out.success(f"defaults at {esc(d.site)}: users CPU {esc(_minutes(d.user_cpu_minutes))}"
                    f" GPU {esc(_minutes(d.user_gpu_minutes))} budget "
                    f"{esc(_money(d.user_budget, currency))}; accounts CPU "
                    f"{esc(_minutes(d.account_cpu_minutes))} GPU "
                    f"{esc(_minutes(d.account_gpu_minutes))} budget "
                    f"{esc(_money(d.account_budget, currency))}; period {esc(d.period)}")
    return 0


@defaults_set.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    for kind in ("user", "account"):
        for res in ("cpu", "gpu"):
            parser.add_argument(f"--{kind}-{res}", metavar="Q",
                                help=f"{res.upper()}-minute quota of a {kind} without one: "
                                     f"{AMOUNT_HELP}")
        parser.add_argument(f"--{kind}-budget", metavar="MONEY",
                            help=f"budget of a {kind} without one: {MONEY_HELP}")
    period_args(parser)


@command("ng", "quota", "defaults", "show", help="show a site's default quotas", store=True)
async def defaults_show(args: argparse.Namespace) -> int:
    from ...models.quota import QuotaDefaults
    from ...queries.site import get_site

    ctx = args.ctx
    site = await get_site(args.site)
    d = await QuotaDefaults.find_one({"site": site.name})
    data: dict[str, Any] = {"site": site.name}
    if d is None:
        data.update({"user_cpu_minutes": None, "user_gpu_minutes": None,
                     "account_cpu_minutes": None, "account_gpu_minutes": None,
                     "user_budget": None, "account_budget": None,
                     "period": "none", "carry_over": False, "set": False})
    else:
        data.update({"user_cpu_minutes": d.user_cpu_minutes,
                     "user_gpu_minutes": d.user_gpu_minutes,
                     "account_cpu_minutes": d.account_cpu_minutes,
                     "account_gpu_minutes": d.account_gpu_minutes,
                     "user_budget": d.user_budget, "account_budget": d.account_budget,
                     "period": d.period,
                     "period_start": d.period_start, "period_end": d.period_end,
                     "carry_over": d.carry_over, "set": True})
    data["currency"] = ctx.config.usage.currency
    ctx.out.show(data, title=f"default quotas at {site.name} (minutes; budgets in "
                 f"{ctx.config.usage.currency}; none = unlimited)")
    return 0


@defaults_show.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    a.output_format(parser)


@command("ng", "quota", "gpu-factor", "set",
         help="charge a GPU type at a factor from now (or --from) on", store=True)
async def factor_set(args: argparse.Namespace) -> int:
    from ...operations.quota import SetGpuFactor

    ctx = args.ctx
    f = await SetGpuFactor.run(ctx.require_store(), ctx.author, site=args.site,
                               gpu_type=args.type, factor=args.factor,
                               effective_from=when(args.since, "--from"))
    ctx.out.success(f"GPU type {esc(f.gpu_type)} at {esc(f.site)}: factor {f.factor:g} from "
                    f"{esc(f.effective_from.isoformat())}")
    return 0


@factor_set.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    parser.add_argument("--type", required=True, metavar="TYPE",
                        help="GPU type as Slurm names it (a100), or 'default' for the rest")
    parser.add_argument("--factor", required=True, type=float, help="charge factor (1 = plain)")
    parser.add_argument("--from", dest="since", metavar="WHEN",
                        help=a.when_help("effective from (default now; never in the past)"))


@command("ng", "quota", "gpu-factor", "list", help="list a site's GPU factors and their history",
         store=True)
async def factor_list(args: argparse.Namespace) -> int:
    from ...queries.site import get_site
    from ...queries.usage import list_factors

    ctx = args.ctx
    site = await get_site(args.site)
    now = utcnow()
    factors = await list_factors(site.name)
    current: dict[str, datetime] = {}
    for f in factors:
        if f.effective_from <= now:
            current[f.gpu_type] = f.effective_from
    rows = [{"type": f.gpu_type, "factor": f.factor, "effective_from": f.effective_from,
             "current": current.get(f.gpu_type) == f.effective_from} for f in factors]
    ctx.out.table(rows, title=f"GPU factors at {site.name} (types without one: default, "
                  "else 1.0)", columns=["type", "factor", "effective_from", "current"])
    return 0


@factor_list.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    a.output_format(parser)


@command("ng", "quota", "notify",
         help="send the quota threshold notices that are due (once per threshold per period)",
         store=True)
async def quota_notify(args: argparse.Namespace) -> int:
    from ...operations.quota_notify import send_quota_notices
    from ...queries.site import get_site

    ctx = args.ctx
    site = await get_site(args.site)
    report = await send_quota_notices(ctx.require_store(), ctx.author, ctx.config, site.name,
                                      dry_run=args.dry_run,
                                      thresholds=ctx.config.usage.thresholds)
    rows = [d.as_dict() for d in report.due]
    if ctx.out.machine:
        ctx.out.write_data(report.as_dict())
    elif not rows:
        ctx.out.success("no notice is due")
    else:
        ctx.out.table(rows, title=f"quota notices due at {site.name}",
                      columns=["kind", "name", "resource", "threshold", "percent"])
        if not args.dry_run:
            ctx.out.success(f"sent {len(report.sent)} notice(s)")
    for failed in report.failed:
        ctx.out.warn(f"not sent to {esc(failed['kind'])} {esc(failed['name'])}: "
                     f"{esc(failed['why'])}")
    return 1 if report.failed else 0


@quota_notify.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    parser.add_argument("--dry-run", action="store_true", help="list what is due, send nothing")
    a.output_format(parser)


@command("ng", "quota", "rebuild-totals",
         help="recompute a site's running quota totals from its usage ledger", store=True)
async def quota_rebuild_totals(args: argparse.Namespace) -> int:
    from ...operations.quota_totals import rebuild
    from ...queries.site import get_site

    ctx = args.ctx
    site = await get_site(args.site)
    report = await rebuild(ctx.require_store(), site.name, dry_run=args.dry_run)
    if ctx.out.machine:
        ctx.out.write_data(report.as_dict())
        return 0
    rows = [{"kind": f.kind, "name": f.name, "bucket": f.bucket,
             "cpu stored": f"{f.as_dict()['stored']['cpu_minutes']:.4f}",
             "cpu ledger": f"{f.as_dict()['ledger']['cpu_minutes']:.4f}",
             "gpu stored": f"{f.as_dict()['stored']['gpu_minutes']:.4f}",
             "gpu ledger": f"{f.as_dict()['ledger']['gpu_minutes']:.4f}",
             "money stored": f"{f.as_dict()['stored']['money']:.6f}",
             "money ledger": f"{f.as_dict()['ledger']['money']:.6f}",
             "jobs stored": f.stored[3], "jobs ledger": f.ledger[3]} for f in report.fixes]
    verb = "would correct" if args.dry_run else "corrected"
    if rows:
        ctx.out.table(rows, title=f"quota totals at {site.name}: {verb} {len(rows)}")
    ctx.out.success(f"{esc(site.name)}: {report.records:d} ledger record(s), "
                    f"{report.buckets:d} total(s); {esc(verb)} {len(rows):d}"
                    + ("" if args.dry_run else "; quota status reads the totals"))
    return 0


@quota_rebuild_totals.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    parser.add_argument("--dry-run", action="store_true",
                        help="only list the totals that differ from the ledger")
    a.output_format(parser)
