"""Reading for ``migrate from-slurm-quota``: the slurm-quota database (read-only) and
what the store already holds that the mapping (``from_slurm_quota``) must match.

The database is opened with SQLite's ``mode=ro`` URI, so nothing is ever written to it
(the live plugin may hold it in WAL mode: a read-only connection still sees the WAL),
and read in one read transaction, so the tables agree with each other even while
slurmctld keeps charging. A file that is not a slurm-quota v3 database is one line,
``InvalidInput`` (exit 2).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from ..errors import InvalidInput
from ..models import Group, User
from ..models.auth import RoleGrant
from ..models.base import rows
from ..models.quota import Quota, QuotaAdjustment
from ..models.usage import GpuFactor, UsageCursor
from .from_slurm_quota import Known, Source, Subject

BUSY_SECONDS = 5.0  # as slurm-quota's own connections wait on a locked database

# the v3 schema (slurm-quota's database.py and slurm-quota-migrate): table -> columns read
V3_TABLES: dict[str, tuple[str, ...]] = {
    "users": ("username", "total_consumed_cpu_minutes", "quota_cpu_minutes",
              "total_consumed_gpu_minutes", "quota_gpu_minutes"),
    "accounts": ("account", "total_consumed_cpu_minutes", "quota_cpu_minutes",
                 "total_consumed_gpu_minutes", "quota_gpu_minutes"),
    "jobs_preallocations": ("job_uuid",),
    "gpu_factors": ("gpu_type", "factor"),
    "settings": ("key", "value"),
    "operators": ("username",),
    "managers": ("username",),
    "manager_accounts": ("manager_username", "account"),
}


def _not_v3(path: Path, why: str) -> InvalidInput:
    return InvalidInput(f"{path} is not a slurm-quota v3 database ({why}); a v2 one is "
                        "upgraded by slurm-quota-migrate first")


def read_database(path: Path) -> Source:
    """Every table the import maps, read in one read-only transaction."""
    path = path.expanduser()
    if not path.is_file():
        raise InvalidInput(f"{path}: no such file" if not path.exists() else
                           f"{path}: not a file")
    uri = path.resolve().as_uri() + "?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=BUSY_SECONDS, isolation_level=None)
    except sqlite3.Error as exc:
        raise InvalidInput(f"{path}: cannot open it read-only ({exc})") from None
    try:
        conn.execute("BEGIN")
        return _read(conn, path)
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
            raise InvalidInput(f"{path}: locked for more than {BUSY_SECONDS:g} s; try again"
                               ) from None
        raise _not_v3(path, str(exc)) from None
    finally:
        conn.close()


def _read(conn: sqlite3.Connection, path: Path) -> Source:
    tables = {row[0] for row in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'")}
    for table, wanted in V3_TABLES.items():
        if table not in tables:
            raise _not_v3(path, f"no table {table}")
        have = {row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')}
        missing = [c for c in wanted if c not in have]
        if missing:
            raise _not_v3(path, f"table {table} has no column {', '.join(missing)}")

    def select(table: str) -> list[tuple[Any, ...]]:
        columns = ", ".join(f'"{c}"' for c in V3_TABLES[table])
        return list(conn.execute(f'SELECT {columns} FROM "{table}" ORDER BY 1'))

    users = [Subject(*row) for row in select("users")]
    accounts = [Subject(*row) for row in select("accounts")]
    (preallocations,) = conn.execute('SELECT count(*) FROM "jobs_preallocations"').fetchone()
    return Source(
        users=users, accounts=accounts,
        gpu_factors=[(t, f) for t, f in select("gpu_factors")],
        settings={str(k): v for k, v in select("settings")},
        operators=[u for (u,) in select("operators")],
        managers=[u for (u,) in select("managers")],
        manager_accounts=[(m, a) for m, a in select("manager_accounts")],
        preallocations=int(preallocations))


async def known_state(site: str) -> Known:
    """The store's side, read raw (a site's users can be tens of thousands)."""
    quotas: dict[tuple[str, str], dict[str, Any]] = {}
    for row in await rows(Quota, {"site": site}, "_id", "user", "account", "cpu_minutes",
                          "gpu_minutes", "budget", "period", "carry_over", "follows_defaults"):
        if row.get("user") is not None:
            quotas[("user", row["user"])] = row
        elif row.get("account") is not None:
            quotas[("account", row["account"])] = row
    adjustments = {row["_id"]: row for row in await rows(
        QuotaAdjustment, {"site": site}, "_id", "cpu_minutes", "gpu_minutes", "reason", "at",
        "at_epoch")}
    cursor = await rows(UsageCursor, {"site": site}, "until")
    return Known(
        users=frozenset(r["name"] for r in await rows(User, {}, "name")),
        groups=frozenset(r["name"] for r in await rows(Group, {}, "name")),
        quotas=quotas, adjustments=adjustments,
        factors=await rows(GpuFactor, {"site": site}, "_id", "gpu_type", "factor",
                           "effective_from"),
        grants={(r["user"], r["role"]): r for r in await rows(
            RoleGrant, {}, "_id", "user", "role", "accounts", "granted_by")},
        usage_until=cursor[0].get("until") if cursor else None)
