"""``cheeto ng history``: the audit log."""

from __future__ import annotations

import argparse
from datetime import datetime

from ...errors import InvalidInput
from ...operations import operation_names
from ...queries.history import find_history
from ...timeparse import _Clear, parse_when
from .. import args as a
from ..app import command


def _time(text: str | None, flag: str) -> datetime | None:
    if text is None:
        return None
    value = parse_when(text)
    if isinstance(value, _Clear):
        raise InvalidInput(f"{flag} needs a time")
    return value


@command("ng", "history", help="show the audit log, newest first", store=True)
async def history(args: argparse.Namespace) -> None:
    if args.op and args.op not in operation_names():
        raise InvalidInput(f"unknown operation {args.op!r}")
    rows = await find_history(op=args.op, author=args.author_filter,
                              since=_time(args.since, "--since"),
                              until=_time(args.until, "--until"), limit=args.limit)
    data = [{"timestamp": h.timestamp, "op": h.op, "author": h.author, "changes": h.changes}
            for h in rows]
    table = [{"timestamp": h.timestamp.strftime("%Y-%m-%d %H:%M:%S"), "operation": h.op,
              "author": h.author,
              "changes": ", ".join(f"{k}={v}" for k, v in h.changes.items())} for h in rows]
    args.ctx.out.table(table, title=f"History (count={len(rows)})", data=data,
                       columns=["timestamp", "operation", "author", "changes"])


@history.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--user", "-u", dest="author_filter", metavar="AUTHOR",
                        help="only operations by this author")
    parser.add_argument("--op", metavar="OPNAME", help="only this operation (e.g. create_user)")
    parser.add_argument("--since", metavar="WHEN",
                        help=a.when_help("only entries at or after this time"))
    parser.add_argument("--until", metavar="WHEN",
                        help=a.when_help("only entries before this time"))
    parser.add_argument("--limit", "-n", type=int, default=50, help="at most N rows (default 50)")
    a.output_format(parser)
