"""``cheeto ng site export puppet-legacy|root-keys|sympa|storage``: raw text on stdout or
into ``-o FILE`` (written atomically), never onto the human stream."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

from ruamel.yaml import YAML

from ...constants import DEFAULT_SYSTEM_EMAIL
from ...files import write_atomically
from ...puppet.yamlio import dumps as puppet_dumps
from ...queries.exports import (
    DEFAULT_SYMPA_IGNORE,
    root_key_blocks,
    root_keys_text,
    storage_export,
    sympa_emails,
    sympa_text,
)
from ...queries.puppet_legacy import site_to_puppet_legacy
from .. import args as a
from ..app import Context, command, group_help
from ..output import esc

group_help("ng", "site", "export", help="write a site's exports (puppet, keys, lists)")


def _emit(ctx: Context, text: str, output: str | None, what: str) -> None:
    if output:
        # 0600 for every export: puppet-legacy carries password hashes, and the others
        # (keys, addresses, the storage map) are nobody else's business either
        write_atomically(Path(output), text, mode=0o600)
        ctx.out.success(f"wrote {esc(what)} to {esc(output)}")
    else:
        ctx.out.write_raw(text)


def storage_yaml(data: dict[str, object]) -> str:
    buffer = io.StringIO()
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.dump(data, buffer)
    return buffer.getvalue()


@command("ng", "site", "export", "puppet-legacy", help="the legacy puppet account YAML",
         store=True, progress="rendering the puppet YAML")
async def export_puppet_legacy(args: argparse.Namespace) -> None:
    _emit(args.ctx, puppet_dumps(await site_to_puppet_legacy(args.site)), args.output,
          "puppet YAML")


@command("ng", "site", "export", "root-keys", help="root's authorized_keys for the site",
         store=True, progress="rendering root keys")
async def export_root_keys(args: argparse.Namespace) -> None:
    _emit(args.ctx, root_keys_text(await root_key_blocks(args.site)), args.output, "root keys")


@command("ng", "site", "export", "sympa", help="the site's mailing-list addresses", store=True,
         progress="rendering Sympa addresses")
async def export_sympa(args: argparse.Namespace) -> None:
    ignore = args.ignore if args.ignore is not None else DEFAULT_SYMPA_IGNORE
    _emit(args.ctx, sympa_text(await sympa_emails(args.site, ignore)), args.output,
          "Sympa addresses")


@command("ng", "site", "export", "storage", help="the file servers' storage YAML", store=True,
         progress="rendering the storage YAML")
async def export_storage(args: argparse.Namespace) -> None:
    _emit(args.ctx, storage_yaml(await storage_export(args.site)), args.output, "storage YAML")


for _handler in (export_puppet_legacy, export_root_keys, export_sympa, export_storage):
    @_handler.args()
    def _(parser: a.Parser) -> None:
        a.site(parser)
        parser.add_argument("--output", "-o", metavar="FILE", help="write here, not stdout")

export_sympa.parser.add_argument(
    "--ignore", nargs="*", metavar="EMAIL",
    help=f"addresses to leave out (default: {DEFAULT_SYSTEM_EMAIL}; give none to keep all)")


@command("ng", "site", "sync-old-puppet",
         help="commit the site's puppet YAML and SSH keys to a puppet clone", store=True)
async def site_sync_old_puppet(args: argparse.Namespace) -> None:
    from ...sync.puppet import sync_puppet

    ctx = args.ctx
    report = await sync_puppet(ctx.require_store(), args.site, args.repo, push=args.push,
                               base=args.base_branch, dry_run=args.dry_run,
                               author=ctx.author, git_timeout=args.timeout)
    if ctx.out.machine:
        ctx.out.write_data({"site": report.site, "dry_run": report.dry_run,
                            "changed": report.changed, "committed": report.committed,
                            "commit": report.commit, "pushed": report.pushed,
                            "run": report.run_id})
        return
    for path in report.changed:
        ctx.out.info(f"  {esc(path)}")
    if report.dry_run:
        ctx.out.info(f"DRY-RUN: {len(report.changed)} file(s) would change")
    elif not report.committed:
        ctx.out.success("nothing changed; no commit")
    else:
        where = "and pushed" if report.pushed else "(not pushed; use --push)"
        ctx.out.success(f"committed {esc(report.commit[:10] if report.commit else '')} "
                        f"{esc(where)}: "
                        f"{len(report.changed)} file(s)")


@site_sync_old_puppet.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    parser.add_argument("repo", help="an existing clone of the puppet repository")
    parser.add_argument("--push", action="store_true", help="push the base branch")
    parser.add_argument("--base-branch", default="main",
                        help="branch of the puppet clone to commit on (default main)")
    parser.add_argument("--dry-run", action="store_true",
                        help="only list the files that would change")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds each git call may take (default 60)")
    a.output_format(parser)
