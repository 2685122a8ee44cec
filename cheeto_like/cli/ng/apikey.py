"""``cheeto ng apikey …``: machine API keys (create, list, rotate, revoke, audit).

A new or rotated key's secret is printed once, on stdout (nothing else goes there), so
``cheeto ng apikey create … > key.txt`` captures exactly the key. The store keeps a
SHA-256 fingerprint and the first characters only.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from ...models.auth import SCOPES
from ...timeparse import parse_duration
from .. import args as a
from ..app import command, group_help
from ..output import esc

group_help("ng", "apikey", help="machine API keys: create, list, rotate, revoke, audit")


def _days(text: str | None, flag: str) -> float | None:
    if text is None:
        return None
    from ...errors import InvalidInput

    seconds = parse_duration(text).total_seconds()
    if seconds <= 0:
        raise InvalidInput(f"{flag} must be longer than 0")
    return seconds / 86400


def _when(epoch: int | None) -> str | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC).strftime(
        "%Y-%m-%d %H:%M")


def _print_secret(args: argparse.Namespace, key: Any, secret: str, verb: str) -> None:
    ctx = args.ctx
    ctx.out.write_raw(secret + "\n")
    ctx.out.success(f"{esc(verb)} API key {esc(key.name)} ({esc(key.prefix)}…, scopes "
                    f"{esc(', '.join(key.scopes))}); the key is printed above, once: "
                    "store it now")


@command("ng", "apikey", "create", help="create an API key and print it once", store=True)
async def apikey_create(args: argparse.Namespace) -> int:
    from ...operations.auth import CreateApiKey

    made = await CreateApiKey.run(args.ctx.require_store(), args.ctx.author, name=args.name,
                                  scopes=args.scope,
                                  expires_in_days=_days(args.expires_in, "--expires-in"))
    _print_secret(args, made.key, made.secret, "created")
    return 0


@apikey_create.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--name", required=True, help="what the key is for (unique)")
    parser.add_argument("--scope", action="append", required=True, choices=SCOPES,
                        help="what it may do (repeat for several)")
    parser.add_argument("--expires-in", metavar="DURATION",
                        help="lifetime, e.g. 90d or 12w (default: no expiry)")


@command("ng", "apikey", "list", help="list API keys (prefixes, scopes, last use)", store=True)
async def apikey_list(args: argparse.Namespace) -> int:
    from ...queries.auth import list_api_keys

    rows = await list_api_keys(include_revoked=args.all)
    table = [{"name": r["name"], "prefix": r["prefix"], "scopes": ", ".join(r["scopes"]),
              "state": r["state"], "rotated": _when(r["rotated_epoch"]),
              "expires": _when(r["expires_epoch"]), "last used": _when(r["last_used_epoch"]),
              "old key until": _when(r["previous_valid_until"])} for r in rows]
    args.ctx.out.table(table, title=f"API keys ({len(rows)})", data=rows,
                       columns=["name", "prefix", "scopes", "state", "rotated", "expires",
                                "last used", "old key until"])
    return 0


@apikey_list.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--all", action="store_true", help="include revoked keys")
    a.output_format(parser)


@command("ng", "apikey", "rotate",
         help="give a key a new secret; the old one works for an overlap window", store=True)
async def apikey_rotate(args: argparse.Namespace) -> int:
    from ...operations.auth import RotateApiKey

    api = args.ctx.config.api
    overlap = args.overlap_hours if args.overlap_hours is not None else (
        api.key_overlap_hours if api is not None else 24.0)
    made = await RotateApiKey.run(args.ctx.require_store(), args.ctx.author, name=args.name,
                                  overlap_hours=overlap,
                                  expires_in_days=_days(args.expires_in, "--expires-in"))
    _print_secret(args, made.key, made.secret, "rotated")
    if made.key.previous_valid_until:
        args.ctx.out.info(f"the old key works until {esc(_when(made.key.previous_valid_until))}"
                          " UTC")
    return 0


@apikey_rotate.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--name", required=True, help="the key to rotate")
    parser.add_argument("--overlap-hours", type=float, metavar="HOURS",
                        help="how long the old key keeps working (default "
                             "api.key_overlap_hours, 24)")
    parser.add_argument("--expires-in", metavar="DURATION",
                        help="a new lifetime from now, e.g. 90d (default: unchanged)")


@command("ng", "apikey", "revoke", help="revoke an API key now", store=True)
async def apikey_revoke(args: argparse.Namespace) -> int:
    from ...errors import Conflict
    from ...operations.auth import RevokeApiKey

    ctx = args.ctx
    if not ctx.confirm(f"Revoke API key {args.name}? Clients using it stop working.",
                       force=args.force):
        raise Conflict(f"not revoking API key {args.name!r}; confirm on a terminal or "
                       "pass --force")
    key = await RevokeApiKey.run(ctx.require_store(), ctx.author, name=args.name)
    ctx.out.success(f"revoked API key {esc(key.name)} ({esc(key.prefix)}…)")
    return 0


@apikey_revoke.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--name", required=True, help="the key to revoke")
    a.force(parser)


@command("ng", "apikey", "audit",
         help="keys past the rotation policy, unused, never used or expired", store=True)
async def apikey_audit(args: argparse.Namespace) -> int:
    from ...queries.auth import audit_api_keys

    api = args.ctx.config.api
    rotation = args.rotation_days or (api.key_rotation_days if api is not None else 90)
    grace = api.key_new_grace_days if api is not None else 7
    found = await audit_api_keys(rotation_days=rotation, unused_days=args.unused_days,
                                 grace_days=grace)
    rows = [f.as_dict() for f in found]
    args.ctx.out.table(rows, title=f"API key audit ({len(rows)} finding(s); rotation policy "
                       f"{rotation} days, unused after {args.unused_days})", data=rows,
                       columns=["name", "prefix", "problem", "detail"])
    return 1 if rows and args.fail else 0


@apikey_audit.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("--rotation-days", type=int, metavar="DAYS",
                        help="rotation policy (default api.key_rotation_days, 90)")
    parser.add_argument("--unused-days", type=int, default=30, metavar="DAYS",
                        help="flag keys unused for this many days (default 30)")
    parser.add_argument("--fail", action="store_true",
                        help="exit 1 when there is a finding (for cron/monitoring)")
    a.output_format(parser)
