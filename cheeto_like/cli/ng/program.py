"""``cheeto ng program …``: programmes (cohorts): groups with a start and an end date
(``operations/program.py``, ``queries/program.py``)."""

from __future__ import annotations

import argparse
from datetime import datetime

from .. import args as a
from ..app import command, group_help
from ..output import esc

group_help("ng", "program", help="programmes (cohorts): groups with start and end dates")


def _date(text: str | None, flag: str) -> datetime | None:
    return a.future_or_none(text, flag)


@command("ng", "program", "new", help="create a programme (a group with start and end dates)",
         store=True)
async def program_new(args: argparse.Namespace) -> None:
    from ...operations.program import CreateProgram

    ctx = args.ctx
    group = await CreateProgram.run(ctx.store, ctx.author, name=args.group,
                                    starts_at=_date(args.start, "--start"),
                                    ends_at=_date(args.end, "--end"), gid=args.gid)
    ctx.out.success(f"created programme [bold]{esc(group.name)}[/] (gid={esc(group.gid)}, "
                    f"{esc(f'{group.starts_at:%Y-%m-%d}')} .. "
                    f"{esc(f'{group.ends_at:%Y-%m-%d}')})")


@program_new.args()
def _(parser: a.Parser) -> None:
    a.group(parser, help="programme (group) name")
    parser.add_argument("--start", required=True, metavar="WHEN",
                        help=a.when_help("when the programme starts"))
    parser.add_argument("--end", required=True, metavar="WHEN",
                        help=a.when_help("when it ends (members' default expiry)"))
    parser.add_argument("--gid", type=int, help="gid (default: the next free lab-band gid)")


@command("ng", "program", "edit",
         help="change a programme's dates (members on the old end follow the new one)",
         store=True)
async def program_edit(args: argparse.Namespace) -> None:
    from ...operations.program import EditProgram

    ctx = args.ctx
    group = await EditProgram.run(ctx.store, ctx.author, name=args.group,
                                  starts_at=_date(args.start, "--start"),
                                  ends_at=_date(args.end, "--end"))
    ctx.out.success(f"programme {esc(group.name)}: {esc(f'{group.starts_at:%Y-%m-%d}')} .. "
                    f"{esc(f'{group.ends_at:%Y-%m-%d}')}")


@program_edit.args()
def _(parser: a.Parser) -> None:
    a.group(parser, help="programme (group) name")
    parser.add_argument("--start", metavar="WHEN", help=a.when_help("the new start"))
    parser.add_argument("--end", metavar="WHEN", help=a.when_help("the new end"))


@command("ng", "program", "show",
         help="show a programme: members, their usage since it started, its quota",
         store=True)
async def program_show(args: argparse.Namespace) -> None:
    from ...models.fields import utcnow
    from ...queries.program import program_view

    ctx = args.ctx
    view = await program_view(args.group, args.site, utcnow())
    if ctx.out.machine:
        ctx.out.write_data({**view.summary(), "members": view.members})
        return
    ctx.out.show(view.summary(), title=f"Programme {view.name}")
    ctx.out.table(view.members, title=f"Members (count={len(view.members)})",
                  columns=["user", "site", "status", "expires_at", "cpu_hours", "gpu_hours"])


@program_show.args()
def _(parser: a.Parser) -> None:
    a.group(parser, help="programme (group) name")
    a.site(parser, required=False, help="only the members at this site")
    a.output_format(parser)
