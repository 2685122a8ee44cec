"""``cheeto ng usage …``: collect finished jobs from sacct, report usage, prune the ledger."""

from __future__ import annotations

import argparse
import csv
import io
from datetime import datetime, timedelta
from typing import Any

from ...errors import InvalidInput
from ...models.fields import utcnow
from ...models.quota import period_window
from ...timeparse import _Clear, parse_when
from .. import args as a
from ..app import command, group_help
from ..output import esc

group_help("ng", "usage", help="the usage ledger: collect jobs from sacct, reports, retention")

REPORT_PERIODS = ("monthly", "quarterly", "yearly", "none")


def when(text: str | None, flag: str) -> datetime | None:
    if text is None:
        return None
    value = parse_when(text)
    if isinstance(value, _Clear):
        raise InvalidInput(f"{flag} needs a time")
    return value


def subject(parser: a.Parser) -> None:
    who = parser.add_mutually_exclusive_group()
    who.add_argument("--user", "-u", metavar="USER", help="one user")
    who.add_argument("--account", "-A", metavar="ACCOUNT", help="one Slurm account (group)")


@command("ng", "usage", "collect", help="read a site's finished jobs from sacct into the ledger",
         store=True)
async def usage_collect(args: argparse.Namespace) -> int:
    from ...adapters.sacct import Sacct
    from ...operations.usage import collect
    from ...queries.site import get_site
    from ...queries.usage import config_seed

    ctx = args.ctx
    name = (await get_site(args.site)).name
    report = await collect(ctx.require_store(), args.site,
                           seed=config_seed(ctx.config.usage, name),
                           sacct=Sacct(binary=args.sacct, timeout=args.timeout),
                           since=when(args.since, "--since"), until=when(args.until, "--until"),
                           overlap=timedelta(minutes=ctx.config.usage.overlap_minutes))
    data = report.as_dict()
    if ctx.out.machine:
        ctx.out.write_data(data)
    else:
        ctx.out.success(f"{esc(report.site)}: {report.counts.seen:d} job(s) read, "
                        f"{report.counts.inserted:d} new, {report.counts.replaced:d} changed, "
                        f"{report.counts.unchanged:d} unchanged "
                        f"({esc(report.since.isoformat())} to {esc(report.until.isoformat())})")
        for line in report.skipped[:20]:
            ctx.out.warn(f"skipped sacct {esc(line)}")
    return 0


@usage_collect.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    parser.add_argument("--since", metavar="WHEN", help=a.when_help(
        "jobs that ended from (default: the last collect minus the overlap)"))
    parser.add_argument("--until", metavar="WHEN", help=a.when_help(
        "jobs that ended up to (default: now)"))
    parser.add_argument("--sacct", default="sacct", metavar="PATH",
                        help="the sacct program (default: sacct on PATH)")
    parser.add_argument("--timeout", type=a.seconds, default=300.0, metavar="SECONDS",
                        help="time limit of the sacct call (default 300)")
    a.output_format(parser)


@command("ng", "usage", "prune", help="delete ledger records of jobs that ended before a time",
         store=True)
async def usage_prune(args: argparse.Namespace) -> int:
    from ...operations.usage import prune_usage

    ctx = args.ctx
    before = when(args.before, "--before")
    assert before is not None
    scope = f"site {args.site}" if args.site else "every site"
    store = ctx.require_store()
    # counted first (a dry run): a prune that would refund quota is refused before asking
    found = await prune_usage(store, ctx.author, before=before, site=args.site,
                              dry_run=True, refund_quota=args.refund_quota)
    refund = (f", {found.refunded:d} of them in quota periods still in force (refunded)"
              if found.refunded else "")
    if not args.dry_run and not ctx.confirm(
            f"Delete the {found.deleted:d} usage record(s) of {scope} that ended before "
            f"{before.isoformat()}{refund}?", force=args.force):
        ctx.out.error("not confirmed (use --force without a terminal)")
        return 2
    done = found if args.dry_run else await prune_usage(
        store, ctx.author, before=before, site=args.site, dry_run=False,
        refund_quota=args.refund_quota, chunk=args.chunk_size)
    verb = "would delete" if args.dry_run else "deleted"
    refund = (f", refunding quota: {done.refunded:d} of them counted in periods still in "
              "force" if done.refunded else "")
    ctx.out.success(f"{esc(verb)} {esc(done.deleted)} usage record(s) of {esc(scope)}"
                    f"{esc(refund)}")
    return 0


@usage_prune.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--before", required=True, metavar="WHEN",
                        help=a.when_help("delete jobs that ended before"))
    a.site(parser, required=False, help="only this site (default: every site)")
    parser.add_argument("--dry-run", action="store_true", help="only count them")
    parser.add_argument("--refund-quota", action="store_true",
                        help="prune records that count in a quota period still in force "
                        "(refused without it: their users' and accounts' used would fall)")
    parser.add_argument("--chunk-size", type=a.chunk_size, default=2000, metavar="N",
                        help="records per delete (default 2000; each delete is its own "
                        "short write, a rerun finishes an interrupted prune)")
    a.force(parser)


def report_window(args: argparse.Namespace) -> tuple[datetime, datetime, str]:
    start, end = when(args.start, "--start"), when(args.end, "--end")
    if start is not None or end is not None:
        if start is None or end is None:
            raise InvalidInput("--start and --end go together")
        if end <= start:
            raise InvalidInput("--end must come after --start")
        return start, end, "explicit"
    period = args.period or "monthly"
    lo, hi = period_window(period, utcnow())
    return lo, hi, period


@command("ng", "usage", "report", help="usage of a site, a user or an account over a period",
         store=True)
async def usage_report(args: argparse.Namespace) -> int:
    from ...queries.site import get_site
    from ...queries.usage import Rate, list_rates
    from ...queries.usage import usage_report as build

    ctx = args.ctx
    site = await get_site(args.site)
    start, end, period = report_window(args)
    card = ctx.config.usage.rates.get(site.name) or {}
    # priced when the config or the store has rates: records carry the cost of their
    # start (issue 28); records from before that are priced with the config's card
    stored = bool(await list_rates(site.name))
    rates = ({p: Rate(r.cpu_hour, r.gpu_hour) for p, r in card.items()}
             if (card or stored) and not args.no_cost else None)
    report = await build(site.name, start, end, by=args.by, user=args.user,
                         account=args.account, rates=rates, stored_costs=True)
    rows = report.table()
    if args.csv:
        ctx.out.write_raw(csv_text(site.name, start, end, report.columns(), rows))
        return 0
    data: dict[str, Any] = {"site": site.name, "period": period, "start": start, "end": end,
                            "by": args.by, "user": args.user, "account": args.account,
                            "currency": ctx.config.usage.currency if rates else None,
                            "rows": rows,
                            "total": report.total.as_dict(None, report.priced)}
    if ctx.out.machine:
        ctx.out.write_data(data)
        return 0
    who = f" user {args.user}" if args.user else f" account {args.account}" if args.account else ""
    ctx.out.table(rows, title=f"usage at {site.name}{who}, {start:%Y-%m-%d} to {end:%Y-%m-%d}"
                  f" (jobs ended; {report.total.jobs} job(s))",
                  columns=report.columns(), data=data)
    unpriced = sorted(report.total.unpriced_partitions)
    if unpriced:
        ctx.out.warn(f"no rate for partition(s) {esc(', '.join(unpriced))}: not in the cost")
    return 0


CSV_PREFIX = ("site", "start", "end")


def csv_text(site: str, start: datetime, end: datetime, columns: list[str],
             rows: list[dict[str, Any]]) -> str:
    """``site,start,end,<by or scope>,jobs,cpu_minutes,gpu_minutes,cpu_hours,gpu_hours
    [,cost]``: one header line, then one line per group (the columns:
    docs/guides/operator.md)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([*CSV_PREFIX, *columns])
    for row in rows:
        writer.writerow([site, start.isoformat(), end.isoformat(),
                         *(row.get(c) for c in columns)])
    return buffer.getvalue()


@usage_report.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    subject(parser)
    parser.add_argument("--period", choices=REPORT_PERIODS,
                        help="the current calendar period (UTC; default monthly)")
    parser.add_argument("--start", metavar="WHEN", help=a.when_help("an explicit start"))
    parser.add_argument("--end", metavar="WHEN", help=a.when_help("an explicit end"))
    parser.add_argument("--by", choices=("user", "account", "partition", "gpu-type", "day"),
                        help="one row per user, account, partition, GPU type or day")
    parser.add_argument("--no-cost", action="store_true",
                        help="leave out the cost columns even if the config has a rate card")
    fmt = parser.add_mutually_exclusive_group()
    fmt.add_argument("--yaml", action="store_true", help="print YAML on stdout")
    fmt.add_argument("--json", action="store_true", help="print JSON on stdout")
    fmt.add_argument("--csv", action="store_true", help="print CSV on stdout (one line per group)")


@command("ng", "usage", "summary",
         help="the platform summary: every account's usage, quota and percent at a site",
         store=True)
async def usage_summary(args: argparse.Namespace) -> int:
    from ...models import SlurmAccount
    from ...queries.quota import platform_summary, summary_columns
    from ...queries.site import get_site
    from ...queries.usage import config_seed, rate_table

    ctx = args.ctx
    site = await get_site(args.site)
    names = [a.group for a in await SlurmAccount.find({"site": site.name}).to_list()]
    found = await platform_summary(site.name, utcnow(), names)
    # the money columns when the site has a rate card (stored or in the config) or budgets
    priced = bool(await rate_table(site.name, config_seed(ctx.config.usage, site.name)))
    columns = summary_columns(priced or any(r.budget is not None for r in found))
    rows = [{k: v for k, v in r.as_dict().items() if k in columns} for r in found]
    if args.csv:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=["site", *columns],
                                lineterminator="\n")
        writer.writeheader()
        writer.writerows({"site": site.name, **row} for row in rows)
        ctx.out.write_raw(buffer.getvalue())
        return 0
    money = "cost" in columns
    data = {"site": site.name, "currency": ctx.config.usage.currency if money else None,
            "accounts": rows}
    if ctx.out.machine:
        ctx.out.write_data(data)
        return 0
    unit = f"; cost and budget in {ctx.config.usage.currency}" if money else ""
    ctx.out.table(rows, title=f"accounts at {site.name}, fullest first (hours{unit}; jobs "
                  "ended in each account's quota period)", columns=columns, data=data)
    return 0


@usage_summary.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    fmt = parser.add_mutually_exclusive_group()
    fmt.add_argument("--yaml", action="store_true", help="print YAML on stdout")
    fmt.add_argument("--json", action="store_true", help="print JSON on stdout")
    fmt.add_argument("--csv", action="store_true", help="print CSV on stdout (one line per group)")


group_help("ng", "usage", "rate", help="the rate card: prices per partition, versioned in time")


@command("ng", "usage", "rate", "set",
         help="price a partition's CPU- and GPU-hours from now (or --from) on", store=True)
async def rate_set(args: argparse.Namespace) -> int:
    from ...operations.quota import SetUsageRate

    ctx = args.ctx
    r = await SetUsageRate.run(ctx.require_store(), ctx.author, site=args.site,
                               partition=args.partition, cpu_hour=args.cpu_hour,
                               gpu_hour=args.gpu_hour,
                               effective_from=when(args.since, "--from"))
    currency = ctx.config.usage.currency
    ctx.out.success(f"partition {esc(r.partition)} at {esc(r.site)}: {r.cpu_hour:g} "
                    f"{esc(currency)} per CPU-hour, {r.gpu_hour:g} {esc(currency)} per "
                    f"GPU-hour from {esc(r.effective_from.isoformat())}")
    return 0


@rate_set.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    parser.add_argument("--partition", required=True, metavar="NAME",
                        help="the partition, or '*' for every partition without a rate")
    parser.add_argument("--cpu-hour", required=True, type=float, metavar="PRICE",
                        help="price of one CPU-hour in the site's currency (usage.currency)")
    parser.add_argument("--gpu-hour", required=True, type=float, metavar="PRICE",
                        help="price of one GPU-hour (after GPU factors)")
    parser.add_argument("--from", dest="since", metavar="WHEN",
                        help=a.when_help("effective from (default now; never in the past)"))


@command("ng", "usage", "rate", "list", help="list a site's rates and their history",
         store=True)
async def rate_list(args: argparse.Namespace) -> int:
    from ...queries.site import get_site
    from ...queries.usage import config_seed, list_rates

    ctx = args.ctx
    site = await get_site(args.site)
    now = utcnow()
    rows: list[dict[str, Any]] = [
        {"partition": part, "cpu_hour": cpu, "gpu_hour": gpu, "effective_from": None,
         "source": "config"}
        for part, (cpu, gpu) in sorted(config_seed(ctx.config.usage, site.name).items())]
    rows += [{"partition": r.partition, "cpu_hour": r.cpu_hour, "gpu_hour": r.gpu_hour,
              "effective_from": r.effective_from,
              "source": "store" if r.effective_from <= now else "store (future)"}
             for r in await list_rates(site.name)]
    ctx.out.table(rows, title=f"rates at {site.name} in {ctx.config.usage.currency} per hour "
                  "(config: since the epoch, under the stored versions)",
                  columns=["partition", "cpu_hour", "gpu_hour", "effective_from", "source"])
    return 0


@rate_list.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    a.output_format(parser)
