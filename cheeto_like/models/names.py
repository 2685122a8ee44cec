"""The name registry: one row per user or group name, unique in the store.

Users and groups share one namespace (a personal group carries its user's name), but
they live in two collections, and MongoDB cannot put one unique index across two
collections. So every operation that creates or renames a user or a group also writes
its row here in the same transaction; the unique index on ``name`` makes two racing
creators of the same name (as a user and as a group, or twice) collide in the store,
where a pre-check in each transaction cannot see the other. A user's row covers their
personal group (``kind`` ``user``).
"""

from __future__ import annotations

from typing import Any, Literal

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import BulkWriteError

from .base import BaseDoc, unique
from .fields import PosixName, new_id, utcnow

NameKind = Literal["user", "group"]


class NameClaim(BaseDoc):
    name: PosixName
    kind: NameKind

    class Settings(BaseDoc.Settings):
        name = "names"
        indexes = [unique("name")]


async def expected_claims(database: AsyncDatabase[dict[str, Any]]) -> dict[str, NameKind]:
    """Every name the registry should hold, from the users and groups collections."""
    wanted: dict[str, NameKind] = {}
    async for doc in database["groups"].find({}, {"name": 1}):
        wanted[doc["name"]] = "group"
    async for doc in database["users"].find({}, {"name": 1}):
        wanted[doc["name"]] = "user"
    return wanted


async def backfill_claims(database: AsyncDatabase[dict[str, Any]]) -> list[str]:
    """Add the rows missing from the registry (stores from before it); returns the names.

    Safe to run while operations write: a row an operation inserts first simply makes
    ours a duplicate, which is skipped.
    """
    present = {doc["name"] async for doc in database["names"].find({}, {"name": 1})}
    missing = {n: k for n, k in (await expected_claims(database)).items() if n not in present}
    if not missing:
        return []
    now = utcnow()
    rows = [{"_id": new_id(), "name": n, "kind": k, "created_at": now, "updated_at": now}
            for n, k in sorted(missing.items())]
    try:
        await database["names"].insert_many(rows, ordered=False)
    except BulkWriteError as exc:
        if any(err.get("code") != 11000 for err in exc.details.get("writeErrors", [])):
            raise
    return sorted(missing)


async def ensure_registry(database: AsyncDatabase[dict[str, Any]]) -> list[str]:
    """Backfill a registry that is empty while users or groups exist (the migration run
    at connect); one query when the registry is in use."""
    if await database["names"].find_one({}, {"_id": 1}) is not None:
        return []
    if (await database["groups"].find_one({}, {"_id": 1}) is None
            and await database["users"].find_one({}, {"_id": 1}) is None):
        return []
    return await backfill_claims(database)
