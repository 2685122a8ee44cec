"""Applied operations: one small record per operation, written in its transaction, so a
retry can tell "it already committed" from "it never did".

Why: a commit whose reply is lost (a failover, a dropped connection) leaves the caller
not knowing whether it applied. Re-running a non-idempotent operation (a quota
adjustment, a new request) would apply it twice. ``Operation.run_once`` (and a ``run``
that writes no History row, whose History ``_id`` cannot carry the operation id)
inserts ``{"_id": <operation id>, "op", "author", "at", "at_epoch"}`` *first* in its
transaction; a later attempt with the same id meets a duplicate key (or a write
conflict while the first is still open) and reports the first one's result instead of
applying again. For an ``/api/v1`` POST with an ``Idempotency-Key`` the id is a hash of
the caller and the key (``web/idempotency.py``); such records also hold the request's
``fingerprint`` and the answer (``summary``, JSON text) to replay.

Records expire after ``KEEP_SECONDS`` (a TTL index on ``at`` on MongoDB; the embedded
store keeps TTL indexes without expiring, so the generation compaction also deletes
records past ``at_epoch``). Not a beanie model: raw, like the generations.
"""

from __future__ import annotations

import time
from typing import Any

from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase

COLLECTION = "applied_operations"
KEEP_SECONDS = 24 * 3600
TTL_INDEX = "applied_operations_ttl"


def collection() -> AsyncCollection[dict[str, Any]]:
    """The records' collection, in the database the models are bound to."""
    from .site import Site

    return Site.get_pymongo_collection().database[COLLECTION]


async def ensure_indexes(database: AsyncDatabase[dict[str, Any]]) -> None:
    """The TTL index (at connect, for writers)."""
    await database[COLLECTION].create_index([("at", 1)], name=TTL_INDEX,
                                            expireAfterSeconds=KEEP_SECONDS)


async def prune_expired(now: float | None = None) -> int:
    """Delete records older than ``KEEP_SECONDS`` (what the TTL index does on MongoDB)."""
    cutoff = int((time.time() if now is None else now) - KEEP_SECONDS)
    result = await collection().delete_many({"at_epoch": {"$lt": cutoff}})
    return result.deleted_count
