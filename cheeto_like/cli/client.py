"""``cheeto login``, ``logout``, ``me``, ``usage`` and ``quota …``: the API client, for
people on login nodes (no store access, no sudo).

The API is ``$CHEETO_API_URL``, else the config's ``client.url``. ``login`` asks for
the password on the terminal (or reads one line from stdin with ``--password-stdin``;
never from argv) and keeps the token in ``<XDG state>/cheeto/token`` (0600, directory
0700); the other commands send it.
"""

from __future__ import annotations

import argparse
import getpass
import os
from pathlib import Path
from typing import Any

from ..errors import ConfigError, InvalidInput
from . import args as a
from .app import command, group_help
from .output import esc

group_help("quota", help="your quotas through the API (and, for operators, set them)")


def token_file() -> Path:
    from ..config import xdg_state_home

    return xdg_state_home() / "cheeto" / "token"


def api_url(config: Any) -> str:
    url = os.environ.get("CHEETO_API_URL") or (config.client.url if config.client else None)
    if not url:
        raise ConfigError("no API to talk to: set CHEETO_API_URL or the config's client.url")
    return url


def read_token() -> str:
    path = token_file()
    try:
        token = path.read_text().strip()
    except FileNotFoundError:
        raise InvalidInput("not signed in (run: cheeto login)") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    if not token:
        raise InvalidInput("not signed in (run: cheeto login)")
    return token


def save_token(token: str) -> Path:
    from ..files import write_atomically

    path = token_file()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomically(path, token + "\n", mode=0o600)
    return path


def client(ctx: Any, *, token: str | None = None, anonymous: bool = False) -> Any:
    from ..adapters.cheeto_api import ApiClient

    config = ctx.config
    verify: str | bool = True
    if config.client is not None and config.client.ca_file is not None:
        verify = str(config.client.ca_file)
    timeout = config.client.timeout_seconds if config.client is not None else 30.0
    transport = getattr(ctx, "api_transport", None)  # tests: an in-process app
    return ApiClient(api_url(config), token=None if anonymous else (token or read_token()),
                     timeout=timeout, verify=verify, transport=transport)


@command("login", help="sign in to the API and keep the token (XDG state dir, 0600)")
async def login(args: argparse.Namespace) -> int:
    ctx = args.ctx
    name = args.user or os.environ.get("USER") or getpass.getuser()
    if args.password_stdin:
        password = ctx.stdin.readline().rstrip("\r\n")
    elif ctx.stdin.isatty():
        password = getpass.getpass(f"password for {name}: ")
    else:
        raise InvalidInput("no terminal to ask for the password: use --password-stdin")
    if not password:
        raise InvalidInput("empty password")
    async with client(ctx, anonymous=True) as api:
        answer = await api.call("POST", "/login", json={"username": name,
                                                        "password": password})
    path = save_token(answer["access_token"])
    ctx.out.success(f"signed in as {esc(answer['user'])}; token kept in {esc(str(path))}")
    return 0


@login.args()
def _(parser: a.Parser) -> None:
    a.user(parser, required=False, help="your user name (default $USER)")
    parser.add_argument("--password-stdin", action="store_true",
                        help="read the password from the first line of stdin")


@command("logout", help="revoke the kept token and forget it")
async def logout(args: argparse.Namespace) -> int:
    ctx = args.ctx
    async with client(ctx) as api:
        await api.call("POST", "/logout")
    token_file().unlink(missing_ok=True)
    ctx.out.success("signed out")
    return 0


@command("me", help="who the API knows you as, with your roles")
async def me(args: argparse.Namespace) -> int:
    async with client(args.ctx) as api:
        data = await api.call("GET", "/me")
    shown = dict(data)
    if not args.ctx.out.machine and isinstance(shown.get("token_expires_at"), int | float):
        from datetime import UTC, datetime

        shown["token_expires_at"] = datetime.fromtimestamp(shown["token_expires_at"], UTC)
    args.ctx.out.show(shown, title="me")
    return 0


@me.args()
def _(parser: a.Parser) -> None:
    a.output_format(parser)


def _subject(args: argparse.Namespace, me: str | None) -> dict[str, str | None]:
    if args.user is None and args.account is None:
        return {"user": me, "account": None}
    return {"user": args.user, "account": args.account}


async def _whoami(api: Any) -> str:
    return str((await api.call("GET", "/me"))["name"])


def _subject_args(parser: a.Parser) -> None:
    who = parser.add_mutually_exclusive_group()
    who.add_argument("--user", "-u", metavar="USER", help="a user (default: you)")
    who.add_argument("--account", "-A", metavar="ACCOUNT", help="a Slurm account (group)")


@command("usage", help="usage at a site this period (yours, or a user's or account's)")
async def usage(args: argparse.Namespace) -> int:
    async with client(args.ctx) as api:
        mine = None if (args.user or args.account) else await _whoami(api)
        data = await api.call("GET", f"/usage/{args.site}",
                              params={**_subject(args, mine), "period": args.period})
    total = data["total"]
    args.ctx.out.show(data if args.ctx.out.machine else total,
                      title=f"usage at {data['site']}, {data['start'][:10]} to "
                            f"{data['end'][:10]}")
    return 0


@usage.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    _subject_args(parser)
    parser.add_argument("--period", choices=("monthly", "quarterly", "yearly", "none"),
                        default="monthly", help="the calendar period (default monthly)")
    a.output_format(parser)


@command("quota", "show", help="used, quota and percent at a site (yours by default)")
async def quota_show(args: argparse.Namespace) -> int:
    async with client(args.ctx) as api:
        mine = None if (args.user or args.account) else await _whoami(api)
        data = await api.call("GET", f"/quotas/{args.site}", params=_subject(args, mine))
    rows = [_quota_row(r) for r in data["items"]]
    args.ctx.out.table(rows, title=f"quotas at {args.site} (hours)", data=data["items"],
                       columns=["kind", "name", "period", "cpu used", "cpu prealloc",
                                "cpu quota", "cpu %", "gpu used", "gpu prealloc", "gpu quota",
                                "gpu %"])
    return 0


def _limit_text(minutes: float | None) -> str:
    """A quota as set: ``unlimited``, not ``None min``."""
    return "unlimited" if minutes is None else f"{minutes:g} min ({minutes / 60:.1f}h)"


def _hours(minutes: float | None) -> str:
    """Minutes as hours, as ``ng quota show`` words it: no quota is ``unlimited``."""
    return "unlimited" if minutes is None else f"{minutes / 60:.1f}h"


def _quota_row(item: dict[str, Any]) -> dict[str, str]:
    """One subject of /quotas in hours, with preallocated (queued and running jobs) and
    ``unlimited``/``-`` rather than ``(none)`` for what has no limit."""
    row = {"kind": item["kind"], "name": item["name"],
           "period": item["period"] if item["period"] == "none" or not item.get("start")
           else f"{item['period']} {str(item['start'])[:10]}.."}
    for resource in ("cpu", "gpu"):
        r = item[f"{resource}_minutes"]
        row |= {f"{resource} used": _hours(r.get("used") or 0.0),
                f"{resource} prealloc": _hours(r.get("preallocated") or 0.0),
                f"{resource} quota": _hours(r.get("quota")),
                f"{resource} %": "-" if r.get("percent") is None else f"{r['percent']:.1f}"}
    return row


@quota_show.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    _subject_args(parser)
    a.output_format(parser)


def _amount(text: str | None, flag: str, *, signed: bool = False) -> Any:
    from ..models.quota import parse_amount

    try:
        return parse_amount(text, signed=signed) if text is not None else None
    except ValueError as exc:
        raise InvalidInput(f"{flag}: {exc}") from None


@command("quota", "set", help="set a user's or an account's quota (operators)")
async def quota_set(args: argparse.Namespace) -> int:
    if args.user is None and args.account is None:
        raise InvalidInput("give --user or --account")
    body: dict[str, Any] = {}
    if args.cpu is not None:
        body["cpu_minutes"] = _amount(args.cpu, "--cpu")
    if args.gpu is not None:
        body["gpu_minutes"] = _amount(args.gpu, "--gpu")
    if not body:
        raise InvalidInput("give --cpu and/or --gpu")
    kind, name = ("users", args.user) if args.user else ("accounts", args.account)
    async with client(args.ctx) as api:
        data = await api.call("PUT", f"/quotas/{args.site}/{kind}/{name}", json=body)
    given = ", ".join(f"{label} {_limit_text(data[key])}"
                      for label, key in (("CPU", "cpu_minutes"), ("GPU", "gpu_minutes"))
                      if key in body)  # what was not given keeps its value (or default)
    args.ctx.out.success(f"quota of {esc(name)} at {esc(args.site)}: {esc(given)}")
    return 0


@quota_set.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    _subject_args(parser)
    parser.add_argument("--cpu", metavar="Q", help="CPU minutes (600m, 10h or unlimited)")
    parser.add_argument("--gpu", metavar="Q", help="GPU minutes (600m, 10h or unlimited)")


@command("quota", "adjust", help="credit (-) or debit (+) usage, with a reason (operators)")
async def quota_adjust(args: argparse.Namespace) -> int:
    if args.user is None and args.account is None:
        raise InvalidInput("give --user or --account")
    body = {"user": args.user, "account": args.account, "reason": args.reason,
            "cpu_minutes": _amount(args.cpu, "--cpu", signed=True) or 0.0,
            "gpu_minutes": _amount(args.gpu, "--gpu", signed=True) or 0.0}
    async with client(args.ctx) as api:
        data = await api.call("POST", f"/adjustments/{args.site}", json=body)
    args.ctx.out.success(f"adjusted {esc(args.user or args.account)} at {esc(args.site)}: "
                         f"CPU {data['cpu_minutes']:+g} min, GPU {data['gpu_minutes']:+g} min")
    return 0


@quota_adjust.args()
def _(parser: a.Parser) -> None:
    a.site(parser)
    _subject_args(parser)
    parser.add_argument("--cpu", metavar="±Q", help="signed CPU amount: -10h credits")
    parser.add_argument("--gpu", metavar="±Q", help="signed GPU amount: -10h credits")
    parser.add_argument("--reason", required=True, help="why (recorded with the adjustment)")
