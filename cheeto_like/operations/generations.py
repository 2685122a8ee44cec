"""Moving the data generations (``models/generation.py``).

``mark_writes`` are inserted inside an operation's transaction (``Operation._run``
only, in the one command that also inserts its History row; an operation says which
sites it touches through ``Operation.touched_sites()``): one mark per key, never an
update of a shared document, so concurrent operations do not conflict on it.
``compact`` folds marks into their bases outside any operation, in a short transaction
of its own (the API's generation poll at most every ``COMPACT_EVERY_S``, and
about one operation in ``COMPACT_ODDS`` after its commit), and prunes expired
applied-operation records (``models/applied.py``) the embedded store's TTL index does
not expire.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.errors import PyMongoError

from ..models.applied import prune_expired
from ..models.fields import utcnow
from ..models.generation import ALL, BASE_PREFIX, COLLECTION, base_id, collection, site_key
from ..queries.generations import all_generations
from ..store import Write

if TYPE_CHECKING:
    from ..store import Store

log = logging.getLogger(__name__)

COMPACT_EVERY_S = 30.0  # the API poll's compactions, at most this often per process
COMPACT_ODDS = 256  # about one operation in this many compacts after its commit (~6 commands)
COMPACT_BATCH = 5000  # documents read per compaction (the rest wait for the next one)
_last_compaction = 0.0


def keys_for(sites: Iterable[str] | None) -> list[str]:
    return [ALL] if sites is None else sorted({site_key(s) for s in sites})


def mark_writes(sites: Iterable[str] | None) -> list[Write]:
    """The inserts of one mark for each named site, or for every site when ``sites`` is
    None (the operation may reach any site): fresh documents, so they never conflict.
    ``Operation._run`` sends them with its History row in one command
    (``Store.write_together``). No site (``RevokeUserTokens``): none."""
    now = utcnow()
    return [Write(COLLECTION, {"_id": uuid.uuid4().hex, "key": key, "n": 1, "at": now})
            for key in keys_for(sites)]



@asynccontextmanager
async def _transaction(store: Store | None) -> AsyncIterator[AsyncClientSession]:
    if store is not None:
        async with store.session(transaction=True) as session:
            yield session
        return
    from pymongo import WriteConcern

    client = collection().database.client
    async with client.start_session() as session:
        await session.start_transaction(write_concern=WriteConcern("majority"))
        try:
            yield session
        except BaseException:
            if session.in_transaction:
                await session.abort_transaction()
            raise
        await session.commit_transaction()


async def compact(store: Store | None = None, *, batch: int = COMPACT_BATCH) -> int:
    """Fold up to ``batch`` marks into their bases in one transaction; returns how many.

    The sums do not change (each base grows by what its deleted marks held), so readers
    see the same generations before and after. A second compactor running at the same
    time conflicts on the bases and one of them gives up (the next round folds the
    rest); operations are never in the way, they only insert.
    """
    global _last_compaction
    _last_compaction = time.monotonic()
    coll = collection()
    async with _transaction(store) as session:
        found = await coll.find({}, {"key": 1, "n": 1}, session=session).limit(
            batch).to_list()
        folded: dict[str, int] = {}
        gone: list[Any] = []
        for doc in found:
            doc_id, key = doc["_id"], doc.get("key")
            if isinstance(doc_id, str) and doc_id.startswith(BASE_PREFIX):
                continue
            gone.append(doc_id)
            if isinstance(key, str):  # without a key: a counter from before the marks
                folded[key] = folded.get(key, 0) + int(doc.get("n") or 0)
        if not gone:
            return 0
        for key, n in sorted(folded.items()):
            await coll.update_one({"_id": base_id(key)}, {"$inc": {"n": n},
                                                          "$set": {"key": key}},
                                  upsert=True, session=session)
        await coll.delete_many({"_id": {"$in": gone}}, session=session)
    return len(gone)


async def compact_quietly(store: Store | None = None) -> int:
    """``compact``, a failure only logged: it is housekeeping, never anyone's error."""
    try:
        folded = await compact(store)
        await prune_expired()
        return folded
    except PyMongoError as exc:
        log.debug("generation compaction skipped: %s", exc)
        return 0


async def after_commit(store: Store) -> None:
    """Called by ``Operation.run`` after a commit: now and then, a compaction, so the
    marks stay few when no API polls them."""
    if random.randrange(COMPACT_ODDS) == 0:
        await compact_quietly(store)


async def poll_generations() -> dict[str, int]:
    """The API's generation read (``web/app.py`` ExportCache): the generations, with
    a compaction first at most every ``COMPACT_EVERY_S``."""
    if time.monotonic() - _last_compaction >= COMPACT_EVERY_S:
        await compact_quietly()
    return await all_generations()
