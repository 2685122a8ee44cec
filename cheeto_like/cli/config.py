"""``cheeto config show|write``."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..config import SKELETON, config_for_display, default_config_path
from ..errors import AlreadyExists
from ..files import output_file_error
from . import args as a
from .app import command, group_help
from .output import esc

group_help("config", help="show or write the configuration")


@command("config", "show", help="show the resolved configuration (secrets masked)")
def config_show(args: argparse.Namespace) -> None:
    ctx = args.ctx
    data = config_for_display(ctx.config)
    data["path"] = str(ctx.config.path) if ctx.config.path else "(none: built-in defaults)"
    ctx.out.show(data, title=f"config (profile {ctx.config.profile})")


@config_show.args()
def _(parser: a.Parser) -> None:
    a.output_format(parser)


@command("config", "write", help="write a commented config skeleton")
def config_write(args: argparse.Namespace) -> None:
    ctx = args.ctx
    path = Path(args.path).expanduser() if args.path else default_config_path()
    if path.exists() and not args.force:
        raise AlreadyExists(f"{path} already exists (use --force to overwrite)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(SKELETON)
    except OSError as exc:
        raise output_file_error(path, exc) from None
    ctx.out.success(f"wrote {esc(path)}")


@config_write.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("path", nargs="?", help="where to write (default: the default config "
                                                 "path)")
    a.force(parser, help="overwrite an existing file")
