"""What ``cheeto ng role …`` (on the store) and ``cheeto role …`` (through the API) print
and take: one module, so an admin on a login node and one on the hub see the same lines
and the same table, and type the same options. Free of the models (the API client
commands import it), so each side passes its own list of roles.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import args as a
from .output import Output, esc


def role_options(parser: a.Parser, roles: Sequence[str], *, account_help: str) -> None:
    a.user(parser)
    parser.add_argument("--role", required=True, choices=list(roles), help="the role")
    parser.add_argument("--account", "-A", action="append", metavar="ACCOUNT",
                        help=account_help)


GRANT_ACCOUNT_HELP = "a Slurm account (group) a manager may read (repeat)"
REVOKE_ACCOUNT_HELP = "only these accounts of a manager (repeat)"


def granted(out: Output, user: str, role: str, accounts: Sequence[str]) -> None:
    where = f" of {', '.join(accounts)}" if accounts else ""
    out.success(f"{esc(user)} is {esc(role)}{esc(where)}")


def revoked(out: Output, user: str, role: str, still_manages: Sequence[str] | None) -> None:
    """``still_manages``: the accounts a manager keeps after a partial revoke (None: the
    role is gone)."""
    if still_manages is None:
        out.success(f"{esc(user)} is no longer {esc(role)}")
    else:
        out.success(f"{esc(user)} manages {esc(', '.join(still_manages))}")


def roles_table(out: Output, rows: list[dict[str, Any]]) -> None:
    table = [{**r, "accounts": ", ".join(r["accounts"])} for r in rows]
    out.table(table, title=f"roles ({len(rows)})", data=rows,
              columns=["user", "role", "accounts", "via"])


def list_options(parser: a.Parser) -> None:
    a.user(parser, required=False, help="only this user")
    a.output_format(parser)
