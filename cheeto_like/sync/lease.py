"""At most one run per (target, site) at a time, whoever starts it (DESIGN §4).

A lease is a ``SyncLease`` document with ``_id = "<target>:<site>"``, a holder and an
expiry. Taking it is an insert (the unique ``_id`` decides races); a lease past its
expiry may be replaced, so a crashed holder never blocks the next run for longer than
the TTL. Whole-document writes only: the embedded store mishandles ``$set`` of datetimes.
"""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

from pymongo.errors import DuplicateKeyError

from ..errors import Conflict
from ..models import SyncLease
from ..models.fields import new_id, utcnow
from ..store import Store

DEFAULT_TTL = timedelta(hours=1)


def holder_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{new_id()[:8]}"


@asynccontextmanager
async def lease(store: Store, target: str, site: str, *,
                ttl: timedelta = DEFAULT_TTL) -> AsyncIterator[SyncLease]:
    """Hold the (target, site) lease for the body; ``Conflict`` if someone else has it."""
    key = f"{target}:{site}"
    me = holder_name()
    collection = SyncLease.get_pymongo_collection()
    now = utcnow()
    doc = SyncLease(id=key, holder=me, acquired_at=now, expires_at=now + ttl)
    async with store.exclusive():
        try:
            await collection.insert_one(doc.model_dump(by_alias=True))
        except DuplicateKeyError:
            taken = await collection.find_one_and_replace(
                {"_id": key, "expires_at": {"$lt": now}}, doc.model_dump(by_alias=True))
            if taken is None:
                current = await collection.find_one({"_id": key})
                who = f" by {current['holder']} until {current['expires_at']:%H:%M:%S}" \
                    if current else ""
                raise Conflict(f"another {target} sync for {site} is running{who}") from None
    try:
        yield doc
    finally:
        async with store.exclusive():
            await collection.delete_one({"_id": key, "holder": me})
