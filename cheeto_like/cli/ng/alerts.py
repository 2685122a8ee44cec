"""``cheeto ng alerts digest``: e-mail the operators what failed or got stuck."""

from __future__ import annotations

import argparse

from ...operations.notify import send_alert_digest
from .. import args as a
from ..app import command, group_help
from ..output import esc

group_help("ng", "alerts", help="operator alerts (failed or refused syncs, stuck tasks)")


@command("ng", "alerts", "digest", help="send the operator-alert digest (--dry-run: show it)",
         store=True)
async def alerts_digest(args: argparse.Namespace) -> int:
    ctx = args.ctx
    result = await send_alert_digest(ctx.require_store(), ctx.author, ctx.config,
                                     dry_run=args.dry_run)
    digest = result.digest
    if ctx.out.machine:
        ctx.out.write_data({"sent": result.sent, **digest.as_dict()})
    elif not digest.total:
        ctx.out.success("nothing to report")
    else:
        ctx.out.show(digest.as_dict(), title=f"alert digest ({digest.total} problem(s))")
        if result.sent:
            ctx.out.success(f"sent to {esc(', '.join(ctx.config.alerts.to))}")  # type: ignore[union-attr]
    if result.error:
        ctx.out.error(result.error)
        return 1
    return 0


@alerts_digest.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--dry-run", action="store_true", help="show the digest, send nothing")
    a.output_format(parser)
