"""``cheeto ng user new iam IDENTIFIER``: create an account from UC Davis IAM."""

from __future__ import annotations

import argparse

from ...adapters.iam import IAMClient
from ...credentials import generate_password
from ...operations.iam import IAMSettings, create_user_from_iam
from .. import args as a
from ..app import command
from ..output import esc
from .iam import iam_config


@command("ng", "user", "new", "iam",
         help="create a user from IAM (login name or e-mail): uid = mothra id", store=True)
async def user_new_iam(args: argparse.Namespace) -> None:
    ctx = args.ctx
    config = iam_config(ctx.config)
    password = generate_password() if args.password else None
    async with IAMClient(config) as client:
        user, result = await create_user_from_iam(
            ctx.require_store(), ctx.author, client, args.identifier,
            settings=IAMSettings.from_config(config), user_type=args.type,
            access=args.access or [], password=password)
    ctx.out.success(f"created user [bold]{esc(user.name)}[/] (uid={esc(user.uid)}, "
                    f"{esc(user.email)}) from "
                    f"IAM person {esc(result.iam_id)}")
    if password:
        ctx.out.info(f"generated password for [bold]{esc(user.name)}[/] (shown once, on stdout):")
        ctx.out.write_raw(password + "\n")


@user_new_iam.args()
def _(parser: a.Parser) -> None:
    parser.add_argument("identifier", metavar="IDENTIFIER",
                        help="a UC Davis login name, or an e-mail address")
    parser.add_argument("--type", default="user", choices=["user", "admin"],
                        help="user type (default user)")
    parser.add_argument("--access", "-a", nargs="+", metavar="ACCESS",
                        help="global access (login-ssh, slurm, …)")
    parser.add_argument("--password", action="store_true",
                        help="generate a random password and print it once")
