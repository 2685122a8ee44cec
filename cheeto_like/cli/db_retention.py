"""``cheeto db prune-retention``: the retention pass (``operations.retention``) by hand."""

from __future__ import annotations

import argparse

from ..operations.retention import prune
from . import args as a
from .app import command
from .output import esc

COLUMNS = ["collection", "kept_days", "cutoff", "deleted", "ttl_days"]


@command("db", "prune-retention", help="delete bookkeeping older than the retention "
         "section's days (sync runs, audits, quota notices, task results) and set the TTL "
         "indexes", store=True)
async def db_prune_retention(args: argparse.Namespace) -> None:
    ctx = args.ctx
    retention = ctx.config.retention
    report = await prune(ctx.store, retention, dry_run=args.dry_run)
    from ..operations.retention import DAY, RULES, days_of

    rows = []
    for rule in RULES:
        seconds = report.indexes.get(rule.collection)
        rows.append({"collection": rule.collection, "kept_days": days_of(rule, retention),
                     "cutoff": report.cutoffs.get(rule.collection, ""),
                     "deleted": report.deleted.get(rule.collection, 0),
                     "ttl_days": None if seconds is None else int(seconds) // DAY})
    verb = "would delete" if args.dry_run else "deleted"
    ctx.out.table(rows, title=f"retention ({verb})", columns=COLUMNS, data=report.as_dict())
    if not ctx.out.machine:
        total = sum(report.deleted.values())
        note = " (dry run: nothing changed)" if args.dry_run else ""
        ctx.out.success(f"{esc(verb)} {esc(total)} document(s){esc(note)}")


@db_prune_retention.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--dry-run", action="store_true",
                        help="count what would go; change nothing (indexes included)")
    a.output_format(parser)
