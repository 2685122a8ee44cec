"""``cheeto ng iam …``: UC Davis IAM sync, the stored IAM state, and reaping."""

from __future__ import annotations

import argparse
from typing import Any

from ...adapters.iam import IAMClient
from ...config import Config, IAMConfig
from ...constants import IAM_SYNCABLE_USER_TYPES
from ...errors import ConfigError, InvalidInput
from ...models.fields import utcnow
from ...operations.iam import (
    IAMSettings,
    reap_offboarded_users,
    sync_all_users_iam,
    sync_user_iam,
)
from ...operations.notify import Notifier, notifier_from_config
from ...queries.iam import find_reapable_users, iam_state
from ...queries.user import get_user
from .. import args as a
from ..app import Context, command, group_help
from ..output import esc

group_help("ng", "iam", help="UC Davis IAM: sync identity facts, offboard and reap")


def iam_config(config: Config) -> IAMConfig:
    if config.ucdiam is None:
        raise ConfigError("this needs the ucdiam section in the config (base_url, api_key)")
    return config.ucdiam


def _settings(args: argparse.Namespace, config: IAMConfig) -> IAMSettings:
    return IAMSettings.from_config(config, grace_days=args.grace_days,
                                   expiry_offset_days=args.expiry_offset_days)


def _notifier(ctx: Context, wanted: bool) -> Notifier | None:
    if not wanted:
        return None
    if ctx.config.mail is None:
        raise ConfigError("--notify needs the mail section in the config")
    return notifier_from_config(ctx.require_store(), ctx.author, ctx.config)


def _timing_args(parser: a.Parser) -> None:
    parser.add_argument("--grace-days", type=int, metavar="N",
                        help="days missing before offboarding (default: ucdiam.grace_days)")
    parser.add_argument("--expiry-offset-days", type=int, metavar="N",
                        help="days from offboarding to deactivation "
                             "(default: ucdiam.expiry_offset_days)")
    parser.add_argument("--notify", action="store_true",
                        help="e-mail users who start offboarding or are restored")


@command("ng", "iam", "sync", help="sync one user with IAM", store=True)
async def iam_sync(args: argparse.Namespace) -> None:
    ctx = args.ctx
    config = iam_config(ctx.config)
    notifier = _notifier(ctx, args.notify)
    async with IAMClient(config) as client:
        result = await sync_user_iam(ctx.require_store(), ctx.author, client, args.user,
                                     settings=_settings(args, config))
    if notifier is not None:
        from ...operations.iam import notify_outcome

        tally: dict[str, int] = {"notified_offboarding": 0, "notified_restored": 0,
                                 "notify_error": 0}
        await notify_outcome(notifier, result, tally)
    ctx.out.show(result.as_dict(), title=f"IAM sync of {result.username}: {result.outcome}")


@iam_sync.args()
def _(parser: a.Parser) -> None:
    a.user(parser)
    _timing_args(parser)
    a.output_format(parser)


@command("ng", "iam", "sync-all", help="sync every user and admin account with IAM",
         store=True, progress="IAM sync")
async def iam_sync_all(args: argparse.Namespace) -> int:
    ctx = args.ctx
    config = iam_config(ctx.config)
    notifier = _notifier(ctx, args.notify)
    async with IAMClient(config) as client:
        report = await sync_all_users_iam(
            ctx.require_store(), ctx.author, client, settings=_settings(args, config),
            types=args.type, max_users=args.max_users, concurrency=args.concurrency,
            include_inactive=args.include_inactive, notifier=notifier)
    rows = [{"outcome": k, "count": v} for k, v in report.tally.items() if v]
    if ctx.out.machine:
        ctx.out.write_data({"run": report.run_id, "tally": report.tally,
                            "errors": report.errors,
                            "changes": [r.as_dict() for r in report.results
                                        if r.outcome != "hit" or r.refreshed]})
    else:
        ctx.out.table(rows, title=f"IAM sync (run {report.run_id})",
                      columns=["outcome", "count"])
        for user, error in sorted(report.errors.items()):
            ctx.out.warn(f"{esc(user)}: {esc(error)}")
    return 1 if report.tally["error"] else 0


@iam_sync_all.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--type", action="append", choices=IAM_SYNCABLE_USER_TYPES,
                        help="only this user type (repeatable; default: user and admin)")
    parser.add_argument("--max-users", type=int, metavar="N", help="stop after N users")
    parser.add_argument("--concurrency", type=int, default=1,
                        help="IAM conversations at a time (default 1)")
    parser.add_argument("--include-inactive", action="store_true",
                        help="also query inactive and disabled users (never revived)")
    _timing_args(parser)
    a.output_format(parser)


@command("ng", "iam", "show", help="show a user's stored IAM state (no IAM request)",
         store=True)
async def iam_show(args: argparse.Namespace) -> None:
    ctx = args.ctx
    user = await get_user(args.user)
    config = ctx.config.ucdiam
    data = iam_state(user, grace_days=config.grace_days if config else 1,
                     expiry_offset_days=config.expiry_offset_days if config else 30,
                     now=utcnow())
    ctx.out.show(data, title=f"IAM state of {user.name}")


@iam_show.args()
def _(parser: a.Parser) -> None:
    a.user(parser)
    a.output_format(parser)


def _reap_rows(users: list[Any]) -> list[dict[str, Any]]:
    return [{"user": u.name, "email": u.email, "expires_at": u.expires_at} for u in users]


POLICY_COLUMNS = ["user", "site", "ssh_keys", "memberships", "storage", "slurm"]


def _reap_preview(ctx: Context, report: Any, due: list[Any], dry_run: bool) -> None:
    """What the reap does: programmes ending, whom it deactivates, the offboarding
    policy per user and site, and the offboarding users it never reaps."""
    tag = " [dry run]" if dry_run else ""
    if report.programs_ended:
        rows = [{"program": p, "members": len(u), "users": ", ".join(u)}
                for p, u in sorted(report.programs_ended.items())]
        ctx.out.table(rows, title=f"Programmes ended: members go offboarding{tag}",
                      columns=["program", "members", "users"])
    ctx.out.table(_reap_rows(due), title=f"Users due for deactivation (count={len(due)})"
                  + tag, columns=["user", "email", "expires_at"])
    if report.policy:
        ctx.out.table(report.policy, title=f"Offboarding policy (config offboarding){tag}",
                      columns=POLICY_COLUMNS)
    if report.without_expiry:
        ctx.out.warn(f"{len(report.without_expiry)} offboarding user(s) have no expiry and "
                     f"are never reaped: {esc(', '.join(report.without_expiry))} (set one: "
                     "cheeto ng user expire -u USER --at WHEN)")


@command("ng", "iam", "reap", help="deactivate offboarding users whose expiry has passed "
                                   "(--dry-run: list them)", store=True)
async def iam_reap(args: argparse.Namespace) -> None:
    ctx = args.ctx
    notifier = None if args.dry_run else _notifier(ctx, args.notify)
    now = utcnow()
    store = ctx.require_store()
    offboarding = ctx.config.offboarding
    preview = await reap_offboarded_users(store, ctx.author, now=now, dry_run=True,
                                          offboarding=offboarding)
    due = await find_reapable_users(now)
    if args.dry_run:
        if ctx.out.machine:
            ctx.out.write_data({"due": _reap_rows(due), "programs_ended":
                                preview.programs_ended, "policy": preview.policy,
                                "without_expiry": preview.without_expiry})
        else:
            _reap_preview(ctx, preview, due, True)
        return
    if not due and not preview.programs_ended:
        if not ctx.out.machine:
            _reap_preview(ctx, preview, due, False)
        return
    if not ctx.out.machine:
        _reap_preview(ctx, preview, due, False)
    if not ctx.confirm(f"End {len(preview.programs_ended)} programme(s), deactivate "
                       f"{len(due)} user(s) and apply the offboarding policy?",
                       force=args.force):
        raise InvalidInput("not confirmed (use --force without a terminal)")
    report = await reap_offboarded_users(store, ctx.author, now=now, notifier=notifier,
                                         offboarding=offboarding)
    if ctx.out.machine:
        data: dict[str, Any] = {"reaped": report.users, "notified": report.notified,
                                "notify_errors": report.notify_errors}
        for key in ("programs_ended", "without_expiry"):
            if getattr(report, key):
                data[key] = getattr(report, key)
        ctx.out.write_data(data)
    else:
        ctx.out.success(f"deactivated {len(report.users)} user(s): "
                        f"{esc(', '.join(report.users) or 'none')}")


@iam_reap.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--dry-run", action="store_true",
                        help="list exactly whom a real reap would deactivate")
    parser.add_argument("--notify", action="store_true", help="e-mail the deactivated users")
    a.force(parser)
    a.output_format(parser)
