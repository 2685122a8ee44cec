"""``cheeto nocloud render``: cloud-init NoCloud seed directories from host templates."""

from __future__ import annotations

import argparse
from pathlib import Path

from .. import nocloud
from . import args as a
from .app import command, group_help
from .output import esc

group_help("nocloud", help="cloud-init NoCloud seeds for provisioning nodes")


@command("nocloud", "render", help="render every host template of a site into NoCloud seeds")
def nocloud_render(args: argparse.Namespace) -> None:
    ctx = args.ctx
    hosts = nocloud.render(args.site_dir, authorized_keys=args.authorized_keys,
                           output_dir=args.output_dir, config_basename=args.config_basename)
    names = ", ".join(h.hostname for h in hosts)
    ctx.out.success(f"rendered {len(hosts)} host{esc('s' if len(hosts) != 1 else '')} into "
                    f"{esc(str(args.output_dir))}/: {esc(names)}")


@nocloud_render.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--site-dir", type=Path, required=True, metavar="DIR",
                        help="the site's template directory (with hosts/*.j2)")
    parser.add_argument("--authorized-keys", "-k", type=Path, metavar="FILE",
                        default=nocloud.DEFAULT_AUTHORIZED_KEYS,
                        help=f"root's authorized keys (default {nocloud.DEFAULT_AUTHORIZED_KEYS})")
    parser.add_argument("--output-dir", "-o", type=Path, metavar="DIR",
                        default=nocloud.DEFAULT_OUTPUT_DIR,
                        help=f"where the seeds go, created if missing "
                             f"(default {nocloud.DEFAULT_OUTPUT_DIR})")
    parser.add_argument("--config-basename", metavar="NAME",
                        default=nocloud.DEFAULT_CONFIG_BASENAME,
                        help="config file name in the site and its parent "
                             f"(default {nocloud.DEFAULT_CONFIG_BASENAME})")
