"""``cheeto ng ldap …``: project users, groups and automount maps into LDAP.

Syncs write by default (``--dry-run`` previews and writes nothing), as in the reference;
a deletion cap guards every run. ``prune-site`` and ``clear-tree`` only delete, so they
show what they would delete and ask first (``--force`` skips the question).
"""

from __future__ import annotations

import argparse
from typing import Any

from ...config import LDAPConfig
from ...errors import ConfigError, Conflict, GuardTripped, InvalidInput
from ...queries.site import get_site
from ...sync.ldap import run as sync
from ...sync.ldap.plan import KINDS, PRUNE_KINDS
from ...sync.ldap.state import Layout
from .. import args as a
from ..app import command, group_help
from ..output import esc

group_help("ng", "ldap", help="project users, groups and automount maps into LDAP")
group_help("ng", "ldap", "show", help="show what LDAP holds for a user, group or site")

SHOWN_PER_BATCH = 20


def _config(ctx: Any) -> LDAPConfig:
    if ctx.config.ldap is None:
        raise ConfigError(f"no ldap section in the config for profile {ctx.config.profile!r} "
                          "(see `cheeto config write`)")
    return ctx.config.ldap


def _cap(value: int | None) -> int | None:
    return None if value is None or value < 0 else value


def _kinds(text: str, allowed: tuple[str, ...], flag: str) -> frozenset[str]:
    chosen = frozenset(p.strip() for p in text.split(",") if p.strip())
    unknown = sorted(chosen - set(allowed))
    if unknown or not chosen:
        raise InvalidInput(f"{flag} takes a comma-separated subset of {','.join(allowed)} "
                           f"(got {text!r})")
    return chosen


def _render(ctx: Any, report: sync.Report, title: str) -> int:
    out = ctx.out
    if out.machine:
        out.write_data({"mode": "dry-run" if report.dry_run else "applied", **report.as_dict()})
    else:
        planned = report.plan
        mode = "DRY-RUN (nothing written)" if report.dry_run else "APPLIED"
        out.info(f"[bold]{esc(mode)}[/] {esc(title)}: {esc(planned.writes)} write(s), "
                 f"{len(planned.deletions)} deletion(s), {len(planned.removals)} "
                 "removal(s); checked "
                 f"{len(planned.focus.users)} user(s), {len(planned.focus.groups)} group(s), "
                 f"{len(planned.focus.automounts)} automount key(s)")
        outcomes = {item.command: item for item in report.items}
        for batch in planned.batches:
            out.info(f"[cyan]{esc(batch.label)}[/] ({len(batch.changes)})")
            for change in batch.changes[:SHOWN_PER_BATCH]:
                item = outcomes.get(str(change))
                mark = "" if item is None else {
                    "ok": "[green]ok[/] ", "failed": "[red]FAILED[/] ",
                    "skipped": "[yellow]skipped[/] "}.get(item.outcome, "")
                detail = item.detail if item and item.outcome != "ok" else change.why
                out.info(f"  {esc(mark)}{esc(change.op)} {esc(change.dn)} [dim]({esc(detail)})[/]")
            if len(batch.changes) > SHOWN_PER_BATCH:
                out.info(f"  [dim]… and {esc(len(batch.changes) - SHOWN_PER_BATCH)} more[/]")
        for note in planned.notes:
            out.info(f"[dim]note: {esc(note)}[/]")
        if report.guard_exceeded:
            out.warn(f"{len(planned.removals)} removals exceed --max-deletions: an apply "
                     "would be refused")
        if report.unchanged:
            out.success("nothing to do: nothing changed in the store since the site's last run ("
                        "nothing read; --full compares everything)")
        elif planned.is_empty:
            out.success("nothing to do: LDAP matches the store")
        elif not report.dry_run:
            out.info(f"written: {esc(report.writes or {})}; watermarks: {esc(report.watermarked)}"
                     + (f", re-dirtied: {esc(report.redirtied)}" if report.redirtied else "")
                     + f" (run {esc(report.run_id)})")
    if report.failed or report.skipped:
        out.error(f"{len(report.failed)} LDAP write(s) failed"
                  + (f"; {len(report.skipped)} skipped" if report.skipped else ""))
        return 1
    return 0


def _refused(ctx: Any, exc: GuardTripped) -> None:
    if ctx.out.machine:
        ctx.out.write_data({"aborted": True, "error": exc.message,
                            "would_delete": exc.would_delete})
    else:
        ctx.out.table([{"would delete": d} for d in exc.would_delete[:50]],
                      title="Refused: these deletions exceed the cap")


async def _run(args: argparse.Namespace, scope: Any, *, command_name: str, title: str,
               dry_run: bool) -> int:
    ctx = args.ctx
    config = _config(ctx)
    try:
        report = await sync.run(ctx.require_store(), config, args.site, scope=scope,
                                dry_run=dry_run, max_deletions=_cap(args.max_deletions),
                                concurrency=getattr(args, "concurrency", 1),
                                author=ctx.author, command=command_name,
                                allow_deletions=getattr(args, "allow_deletions", None))
    except GuardTripped as exc:
        _refused(ctx, exc)
        raise
    return _render(ctx, report, title)


def _common(parser: a.Parser, *, cap: int = 50, budget: bool = True) -> None:
    parser.add_argument("--dry-run", action="store_true",
                        help="show what would change; write nothing (LDAP or store)")
    parser.add_argument("--max-deletions", type=int, default=cap,
                        help=f"refuse a run removing more entries or member/key values "
                             f"(default {cap}; -1: no cap)")
    if budget:
        parser.add_argument("--allow-deletions", type=int, metavar="N",
                            help="let this run remove up to N even past the site's daily "
                                 "budget (ldap.max_deletions_per_day); review it first")
    a.output_format(parser)


@command("ng", "ldap", "bootstrap", help="create a site's OUs, automount maps and access and "
                                         "status groups (idempotent)", store=True)
async def ldap_bootstrap(args: argparse.Namespace) -> int:
    config = _config(args.ctx)
    return await _run(args, sync.scope_for(config, bootstrap=True), command_name="bootstrap",
                      title=f"bootstrap {args.site}", dry_run=args.dry_run)


@ldap_bootstrap.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    _common(parser)


@command("ng", "ldap", "sync-site", help="sync a site's users, groups and automount maps "
                                         "(incremental unless --full)", store=True,
         progress="LDAP sync")
async def ldap_sync_site(args: argparse.Namespace) -> int:
    config = _config(args.ctx)
    kinds = set(_kinds(args.scope, (*KINDS, "prune"), "--scope"))
    if args.no_prune:
        kinds.discard("prune")
    if args.concurrency < 1:
        raise InvalidInput("--concurrency must be at least 1")
    scope = sync.scope_for(config, kinds=frozenset(kinds), full=args.full, force=args.force)
    return await _run(args, scope, command_name="sync-site", title=f"sync {args.site}",
                      dry_run=args.dry_run)


@ldap_sync_site.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    parser.add_argument("--full", action="store_true",
                        help="compare every record, not only those changed since the last "
                             "sync (repairs drift made by hand)")
    parser.add_argument("--force", action="store_true",
                        help="delete and re-add every entry compared (counts as deletions)")
    parser.add_argument("--concurrency", type=int, default=8,
                        help="LDAP writes in flight at once (default 8; within the "
                             "ldap section's pool_max_connections)")
    parser.add_argument("--scope", default="users,groups,automounts,prune",
                        help="what to sync: a subset of users,groups,automounts,prune")
    parser.add_argument("--no-prune", action="store_true",
                        help="do not delete entries the store no longer has")
    _common(parser)


@command("ng", "ldap", "sync-user", help="sync one user's entry and memberships at a site",
         store=True)
async def ldap_sync_user(args: argparse.Namespace) -> int:
    config = _config(args.ctx)
    scope = sync.scope_for(config, kinds=frozenset({"users"}), full=args.full,
                           force=args.force, only_users=frozenset({args.user}))
    return await _run(args, scope, command_name="sync-user",
                      title=f"sync user {args.user} at {args.site}", dry_run=args.dry_run)


@ldap_sync_user.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    a.user(parser)
    parser.add_argument("--full", action="store_true", help="compare even if unchanged")
    parser.add_argument("--force", action="store_true", help="delete and re-add the entry")
    _common(parser)


@command("ng", "ldap", "sync-group", help="sync one group's entry and members at a site",
         store=True)
async def ldap_sync_group(args: argparse.Namespace) -> int:
    config = _config(args.ctx)
    scope = sync.scope_for(config, kinds=frozenset({"groups"}), full=args.full,
                           force=args.force, only_groups=frozenset({args.group}))
    return await _run(args, scope, command_name="sync-group",
                      title=f"sync group {args.group} at {args.site}", dry_run=args.dry_run)


@ldap_sync_group.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    a.group(parser)
    parser.add_argument("--full", action="store_true", help="compare even if unchanged")
    parser.add_argument("--force", action="store_true", help="delete and re-add the entry")
    _common(parser)


@command("ng", "ldap", "prune-site", help="delete a site's LDAP entries the store no longer "
                                          "has (asks first)", store=True)
async def ldap_prune_site(args: argparse.Namespace) -> int:
    ctx = args.ctx
    config = _config(ctx)
    prune = _kinds(args.scope, PRUNE_KINDS, "--scope")
    scope = sync.scope_for(config, kinds=frozenset({"prune"}), prune=prune)
    cap = _cap(args.max_deletions)
    preview = await sync.run(ctx.require_store(), config, args.site, scope=scope, dry_run=True,
                             max_deletions=cap, author=ctx.author, command="prune-site")
    deletions = preview.plan.deletions
    if args.dry_run or not deletions:
        return _render(ctx, preview, f"prune {args.site}")
    if not ctx.out.machine:
        ctx.out.table([{"delete": dn} for dn in deletions[:25]],
                      title=f"{len(deletions)} entries to delete at {args.site}"
                            + (" (first 25)" if len(deletions) > 25 else ""))
    if cap is not None and len(deletions) > cap:
        exc = GuardTripped(f"the prune deletes {len(deletions)} LDAP entries, more than "
                           f"--max-deletions {cap}; nothing was changed", would_delete=deletions)
        _refused(ctx, exc)
        raise exc
    if not ctx.confirm(f"Delete these {len(deletions)} entries?", force=args.force):
        raise Conflict("not confirmed; pass --force to prune without asking")
    return await _run(args, scope, command_name="prune-site", title=f"prune {args.site}",
                      dry_run=False)


@ldap_prune_site.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    parser.add_argument("--scope", default="users,groups,automounts",
                        help="what to prune: a subset of users,groups,automounts")
    a.force(parser, help="delete without asking")
    _common(parser)


@command("ng", "ldap", "clear-tree", help="delete every entry under a base DN (asks first; "
                                          "for rebuilding a test directory)", store=True)
async def ldap_clear_tree(args: argparse.Namespace) -> int:
    ctx = args.ctx
    config = _config(ctx)
    if args.site and args.base:
        raise InvalidInput("give --base or --site, not both")
    if args.site:
        site = await get_site(args.site)
        base, label = Layout.for_site(config, site.name).site_dn, site.name
    else:
        base, label = args.base or config.searchbase, "*"
    exclude = [e.strip() for e in args.exclude.split(";")] if args.exclude is not None \
        else [f"ou=Services,{config.searchbase}"]
    cap = _cap(args.max_deletions)
    store = ctx.require_store()
    preview = await sync.clear_tree(store, config, base=base, exclude=exclude,
                                    max_deletions=cap, dry_run=True, author=ctx.author,
                                    label=label)
    dns = preview.dns
    if ctx.out.machine and (args.dry_run or not dns):
        ctx.out.write_data({"base": base, "dry_run": True, "deletions": dns})
        return 0
    ctx.out.table([{"delete": dn} for dn in dns[:25]],
                  title=f"{len(dns)} entries under {base}"
                        + (" (first 25)" if len(dns) > 25 else ""))
    if args.dry_run or not dns:
        if not dns:
            ctx.out.success(f"nothing under {esc(base)}")
        return 0
    if preview.guard_exceeded:
        raise GuardTripped(f"clearing {base} deletes {len(dns)} entries, more than "
                           f"--max-deletions {cap}; nothing was changed", would_delete=dns)
    if not ctx.confirm(f"Delete all {len(dns)} entries under {base}?", force=args.force):
        raise Conflict("not confirmed; pass --force to clear without asking")
    report = await sync.clear_tree(store, config, base=base, exclude=exclude,
                                   max_deletions=cap, author=ctx.author, label=label)
    if ctx.out.machine:
        ctx.out.write_data({"base": base, "dry_run": False, "deletions": report.dns,
                            "failed": [i.model_dump() for i in report.failed]})
    if report.failed:
        ctx.out.error(f"{len(report.failed)} deletion(s) failed under {base}")
        return 1
    ctx.out.success(f"deleted {len(report.dns)} entries under {esc(base)}")
    return 0


@ldap_clear_tree.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--base", help="the base DN (default: the config's searchbase)")
    a.site(parser, required=False, help="clear this site's OU instead of a base")
    parser.add_argument("--exclude", metavar="DN;DN",
                        help="subtrees to keep, separated by ';' (default "
                             "ou=Services,<searchbase>; '' keeps nothing)")
    a.force(parser, help="delete without asking")
    _common(parser, cap=200, budget=False)


@command("ng", "ldap", "show", "user", help="a user's LDAP entry and sync state", store=True)
async def ldap_show_user(args: argparse.Namespace) -> None:
    ctx = args.ctx
    data = await sync.describe_user(_config(ctx), args.user, args.site)
    ctx.out.show(data, title=f"LDAP user {args.user}")


@ldap_show_user.args()
def _(parser: a.Parser) -> None:
    a.user(parser)
    a.site(parser, required=False, help="also show what a sync at this site would change")
    a.output_format(parser)


@command("ng", "ldap", "show", "group", help="a group's LDAP entry at a site", store=True)
async def ldap_show_group(args: argparse.Namespace) -> None:
    ctx = args.ctx
    data = await sync.describe_group(_config(ctx), args.group, args.site)
    ctx.out.show(data, title=f"LDAP group {args.group} at {args.site}")


@ldap_show_group.args()
def _(parser: a.Parser) -> None:
    a.group(parser)
    a.site(parser)
    a.output_format(parser)


@command("ng", "ldap", "show", "site", help="a site's LDAP layout, sizes, dirty records and "
                                            "last run", store=True)
async def ldap_show_site(args: argparse.Namespace) -> None:
    ctx = args.ctx
    data = await sync.describe_site(_config(ctx), args.site)
    ctx.out.show(data, title=f"LDAP at {args.site}")


@ldap_show_site.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    a.output_format(parser)
