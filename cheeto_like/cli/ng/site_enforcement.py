"""``cheeto ng site enforcement show|install``: the submit-time quota check of a site.

``install`` runs on the site's head node as root: it writes slurmctld's Lua plugin and
the completion hook beside ``slurm.conf`` and makes the state directory for
slurmctld's user; it never edits ``slurm.conf`` itself (puppet or the admin owns it),
so it prints the lines that must be there and says which of them the running
slurmctld lacks.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ...enforcement.layout import conf_lines, layout
from ...errors import InvalidInput
from .. import args as a
from ..app import command, group_help
from ..output import esc

group_help("ng", "site", "enforcement",
           help="the submit-time quota check: slurmctld's plugin, the completion hook")

FILES = ("lua", "hook", "conf")


def _slurm_conf(args: argparse.Namespace) -> Path:
    given = args.slurm_conf or os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
    return Path(given).expanduser().absolute()


def _common(parser: a.Parser) -> None:
    a.site(parser)
    parser.add_argument("--slurm-conf", metavar="PATH",
                        help="slurm.conf of the site's slurmctld (default $SLURM_CONF, else "
                             "/etc/slurm/slurm.conf); the plugin goes beside it")


async def _live_problems(ctx: object, site: str, where_hook: Path) -> list[str] | None:
    from ...adapters.scontrol import SControl
    from ...enforcement.render import missing_settings, parse_show_config
    from ...errors import ExternalError

    control = SControl(timeout=10)
    try:  # ping first: any other request to an absent controller retries for ~9 s
        if not await control.reachable():
            return None
        result = await control._run("show", "config")
    except ExternalError:  # no scontrol on this host
        return None
    if not result.ok:
        return None
    return missing_settings(parse_show_config(result.stdout), where_hook)


@command("ng", "site", "enforcement", "show",
         help="the plugin's and hook's files, modes and slurm.conf lines (or one file's "
              "text with --file)", store=True)
async def enforcement_show(args: argparse.Namespace) -> int:
    from ...enforcement.render import render_hook, render_lua
    from ...queries.site import get_site

    ctx = args.ctx
    site = await get_site(args.site)
    settings = ctx.config.slurm.enforcement
    where = layout(settings, site.name, _slurm_conf(args))
    if args.file:
        text = {"lua": lambda: render_lua(settings, where), "hook": lambda: render_hook(where),
                "conf": lambda: "\n".join(conf_lines(where)) + "\n"}[args.file]()
        ctx.out.write_raw(text)
        return 0
    data = {"site": site.name, "files": where.files(), "slurm_conf_lines": conf_lines(where),
            "on_stale": settings.on_stale, "max_age_seconds": settings.max_age_seconds,
            "agent_runs_on_worker": site.name in settings.sites}
    if ctx.out.machine:
        ctx.out.write_data(data)
        return 0
    ctx.out.table(where.files(), title=f"quota enforcement at {site.name}",
                  columns=["path", "mode", "owner", "purpose"])
    ctx.out.info("slurm.conf must say:")
    for line in conf_lines(where):  # one call each: esc() shows a newline as \n
        ctx.out.info(f"  {esc(line)}")
    ctx.out.info(f"on a missing or stale table (older than {esc(settings.max_age_seconds)} "
                 f"s): {esc(settings.on_stale)}")
    return 0


@enforcement_show.args()
def _(parser: a.Parser) -> None:
    _common(parser)
    parser.add_argument("--file", choices=FILES,
                        help="print one file's text to stdout: the Lua plugin, the hook, or "
                             "the slurm.conf lines")
    a.output_format(parser)


@command("ng", "site", "enforcement", "install",
         help="write the plugin and the hook beside slurm.conf and the state directory "
              "(run on the head node as root)", store=True)
async def enforcement_install(args: argparse.Namespace) -> int:
    from ...enforcement.render import install
    from ...queries.site import get_site

    ctx = args.ctx
    site = await get_site(args.site)
    settings = ctx.config.slurm.enforcement
    conf = _slurm_conf(args)
    if not conf.is_file():
        raise InvalidInput(f"{conf} is not a file (give --slurm-conf PATH)")
    where = layout(settings, site.name, conf)
    steps = install(settings, where, dry_run=args.dry_run, force=args.force)
    if ctx.out.machine:
        ctx.out.write_data({"site": site.name, "dry_run": args.dry_run,
                            "steps": [s.as_dict() for s in steps],
                            "slurm_conf_lines": conf_lines(where)})
        return 0
    verb = "would" if args.dry_run else "did"
    ctx.out.table([s.as_dict() for s in steps],
                  title=f"quota enforcement at {site.name}: what install {verb} do",
                  columns=["path", "action"])
    ctx.out.info("slurm.conf must say (then restart slurmctld: JobCompType needs a "
                 "restart):")
    for line in conf_lines(where):
        ctx.out.info(f"  {esc(line)}")
    problems = await _live_problems(ctx, site.name, where.hook)
    if problems is None:
        ctx.out.warn("no slurmctld answers here (`scontrol ping`): cannot say what the "
                     "running one lacks")
    for line in problems or []:
        ctx.out.warn(f"the running slurmctld: {esc(line)}")
    if site.name not in settings.sites:
        ctx.out.warn(f"{esc(site.name)} is not in slurm.enforcement.sites: the site "
                     "worker will not keep its table (or run `cheeto daemon quota-agent "
                     f"-s {esc(site.name)}`)")
    return 0


@enforcement_install.args()
def _(parser: a.Parser) -> None:
    _common(parser)
    parser.add_argument("--dry-run", "-n", action="store_true",
                        help="say what would be written, write nothing")
    parser.add_argument("--force", action="store_true",
                        help="replace a job_submit.lua or hook that cheeto did not write "
                             "(the site's own checks in it are lost)")
    a.output_format(parser)
