"""``cheeto token issue``: a signed API token, made offline with the API's key (its key
file, or the store-kept key with ``api.jwt_key: store``; for sites without directory
sign-in, and for services that act as a person). It never makes a key file: the API
creates it at its first start, and one made here would sign tokens the API refuses.
``cheeto token revoke --user U``: end every token and dashboard session of U (their
token version moves; ``operations.auth.RevokeUserTokens``).

The token goes to stdout and nowhere else (not the log, not History), so
``TOKEN=$(cheeto token issue -u alice)`` captures exactly it. Whoever can read the key
file (or the store) can do this for anyone: it is the API's admin secret.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from ..timeparse import parse_duration
from . import args as a
from .app import command, group_help
from .output import esc

group_help("token", help="signed API tokens: issue offline, revoke a person's")


@command("token", "issue", help="issue a signed token for a user (printed on stdout)",
         store=True)
async def token_issue(args: argparse.Namespace) -> int:
    from ..auth.principal import may_sign_in, subject
    from ..auth.tokens import TokenIssuer
    from ..errors import InvalidInput
    from ..queries.user import get_user

    ctx = args.ctx
    user = await get_user(args.user)
    if not may_sign_in(user):
        raise InvalidInput(f"{user.name} is {user.status}, not active: no token")
    # the API's own key, never a new one: a file key made here would sign tokens the API
    # (on another host, or not started yet) refuses
    issuer = await TokenIssuer.load(ctx.config.api, ctx.require_store(), create=False)
    ttl = parse_duration(args.ttl).total_seconds() if args.ttl is not None else None
    token, claims = issuer.issue(subject(user), ttl)
    ctx.out.write_raw(token + "\n")
    until = datetime.fromtimestamp(claims.exp, UTC).strftime("%Y-%m-%d %H:%M UTC")
    ctx.out.info(f"token for {esc(user.name)}, valid until {esc(until)}")
    return 0


@token_issue.args()
def _(parser: a.Parser) -> None:
    a.user(parser, help="who the token signs in")
    parser.add_argument("--ttl", metavar="DURATION",
                        help="lifetime, e.g. 8h or 7d (default api.token_ttl_hours, 8h)")


@command("token", "revoke", help="end every token and dashboard session of a user",
         store=True)
async def token_revoke(args: argparse.Namespace) -> int:
    from ..operations.auth import RevokeUserTokens

    ctx = args.ctx
    await RevokeUserTokens.run(ctx.store, ctx.author, user=args.user)
    ctx.out.success(f"every token and dashboard session of [bold]{esc(args.user)}[/] "
                    "issued until now is refused from now on")
    return 0


@token_revoke.args()
def _(parser: a.Parser) -> None:
    a.user(parser, help="whose tokens and sessions end")


@command("token", "init-key", help="make the API's token key where the config keeps it "
                                   "(its file, or the store), once", store=True)
async def token_init_key(args: argparse.Namespace) -> int:
    """What ``daemon api`` does at its first start, on purpose: for a key file to copy to
    every API host, or before ``token issue`` on a host whose API has not started yet. An
    existing key is kept (and checked), never replaced."""
    from ..auth.tokens import describe_key, key_file, load_or_create_key, load_store_key

    ctx = args.ctx
    api = ctx.config.api
    where = describe_key(api)
    if where == "store":
        await load_store_key(ctx.require_store())
        ctx.out.success("the token key is in the store (collection token_keys): every API "
                        "process and `cheeto token issue` with this config use it")
        return 0
    path = key_file(api)
    existed = path.is_file()
    load_or_create_key(path, create=True)
    state = "is already" if existed else "was made (0600)"
    ctx.out.success(esc(f"the token key {state} at {path}; with several API hosts, copy this "
                        "file to each and set api.jwt_key_file (or use api.jwt_key: store)"))
    return 0


@token_init_key.args()
def _(parser: a.Parser) -> None:
    pass
