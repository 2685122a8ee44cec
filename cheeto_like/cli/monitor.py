"""``cheeto monitor power``: append ``<ISO time>, <watts>`` lines, one per interval.

The reference's loop, with what it lacked: a failed reading is a warning on stderr and
the loop goes on (BMCs hiccup); a missing ipmitool ends it at once; Ctrl-C ends it with
exit 0; ``--count`` stops after that many readings (scripts, tests).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import UTC, datetime
from typing import TextIO

from ..errors import ExternalError
from ..files import output_file_error
from . import args as a
from .app import command, group_help
from .output import esc

group_help("monitor", help="watch hardware from the command line")


@command("monitor", "power", help="poll the node's DCMI power reading through ipmitool")
async def monitor_power(args: argparse.Namespace) -> int:
    from ..adapters.ipmi import power_reading

    ctx = args.ctx
    out: TextIO
    if args.output in (None, "-", "/dev/stdout"):
        out = args._cheeto_stdout
        close = False
    else:
        try:
            out = await asyncio.to_thread(_open_append, args.output)
        except OSError as exc:
            raise output_file_error(args.output, exc) from None
        close = True
    taken = 0
    try:
        while args.count is None or taken < args.count:
            started = time.monotonic()
            try:
                watts = await power_reading(ipmitool=args.ipmitool, sudo=args.sudo)
            except ExternalError as exc:
                if not exc.transient:
                    raise
                ctx.out.warn(f"no reading: {esc(exc)}")
            else:
                stamp = datetime.now(UTC).isoformat(timespec="seconds")
                out.write(f"{stamp}, {watts:g}\n")
                out.flush()
            taken += 1
            if args.count is not None and taken >= args.count:
                break
            await asyncio.sleep(max(0.0, args.interval - (time.monotonic() - started)))
    except (KeyboardInterrupt, asyncio.CancelledError):
        return 0
    finally:
        if close:
            out.close()
    return 0


def _open_append(path: str) -> TextIO:
    """Append, never truncate: a restarted monitor continues the same log."""
    return open(path, "a", encoding="utf-8")  # the caller closes it


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid interval {text!r}") from None
    if not 0.05 <= value <= 86400:
        raise argparse.ArgumentTypeError(f"interval must be 0.05-86400 seconds, not {text}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid count {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"count must be at least 1, not {value}")
    return value


@monitor_power.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="append readings to FILE (default: standard output)")
    parser.add_argument("--interval", type=_interval, default=5.0, metavar="SECONDS",
                        help="seconds between readings (default 5)")
    parser.add_argument("--count", type=_count, metavar="N",
                        help="stop after N readings (default: until Ctrl-C)")
    parser.add_argument("--sudo", action="store_true",
                        help="run ipmitool through sudo -n (never prompts)")
    parser.add_argument("--ipmitool", default="ipmitool", metavar="PATH",
                        help="the ipmitool program (default: ipmitool on PATH)")
