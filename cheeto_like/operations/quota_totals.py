"""Keep the running quota totals (``models.quota_totals``) in step with the ledger.

Every ledger write (``operations.usage.ingest``: ``ng usage collect`` and the quota
agent's charge; ``PruneUsage``) collects the difference it makes in a ``Deltas`` and
applies it with ``apply`` in the same transaction: one unordered ``bulk_write`` of
``$inc`` upserts by ``_id``, one per (subject, bucket) the write touched. On a replica
set two transactions that charge the same subject's month conflict on that one
document and one of them is retried whole (``in_transaction``); writes of different
sites or subjects never touch the same document.

The upserts match the subject's name beside the ``_id``: after a rename the document of
the old name carries the new one (``models/references.py``), and an upsert for someone
who took the old name then collides on the ``_id`` (E11000). ``rekey`` moves such
documents to the ``_id`` of the name they carry, and the write is retried.

``rebuild`` (``cheeto ng quota rebuild-totals``) recomputes a site's totals from its
ledger (one streamed read), compares them with what is stored, and writes the
differences: each subject whose figures differ is re-read *inside* a transaction (its
ledger records and its totals) before it is corrected, so a collect running at the
same time is either seen whole or conflicts and retries; never half counted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pymongo import DeleteOne, UpdateOne
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.errors import BulkWriteError, DuplicateKeyError, PyMongoError

from ..models.base import iter_rows
from ..models.fields import utcnow
from ..models.quota_totals import (
    ALL,
    KINDS,
    MINUTE_UNITS,
    MONEY_UNITS,
    QuotaTotal,
    QuotaTotalsMark,
    minute_units,
    money_units,
    month_of,
    subject_name,
    total_id,
)
from ..models.usage import UsageRecord
from ..store import MAJORITY, Store, commit_with_retry
from .base import backoff

RETRY_SECONDS = 120.0
LEDGER_FIELDS = ("user", "account", "end_epoch", "cpu_minutes", "gpu_minutes", "cost")
SUMS = ("cpu", "gpu", "money", "jobs")

Key = tuple[str, str, str, str]  # site, kind, name, bucket


@dataclass
class Deltas:
    """The change a ledger write makes to the totals: (site, kind, name, bucket) ->
    [cpu, gpu, money, jobs] in units. ``add`` a record with +1 (written) or -1 (the
    version it replaced, or a deleted one)."""

    sums: dict[Key, list[int]] = field(default_factory=dict)

    def add(self, site: str, record: dict[str, Any], sign: int) -> None:
        values = (sign * minute_units(record.get("cpu_minutes")),
                  sign * minute_units(record.get("gpu_minutes")),
                  sign * money_units(record.get("cost")), sign)
        month = month_of(int(record["end_epoch"]))
        for kind in KINDS:
            name = str(record.get(kind) or "")
            for bucket in (month, ALL):
                slot = self.sums.setdefault((site, kind, name, bucket), [0, 0, 0, 0])
                for i, value in enumerate(values):
                    slot[i] += value

    def changes(self) -> dict[Key, list[int]]:
        """What to write: the keys whose sums moved (a replace that changed nothing the
        totals count, say a new state, cancels out)."""
        return {key: sums for key, sums in self.sums.items() if any(sums)}

    def __bool__(self) -> bool:
        return bool(self.changes())


def _update(key: Key, sums: list[int], now: Any) -> UpdateOne:
    site, kind, name, bucket = key
    return UpdateOne(
        {"_id": total_id(*key), kind: name},
        {"$inc": dict(zip(SUMS, sums, strict=True)),
         "$set": {"site": site, "kind": kind, "user": name if kind == "user" else None,
                  "account": name if kind == "account" else None, "bucket": bucket,
                  "site_bucket": f"{site}/{bucket}", "updated_at": now}},
        upsert=True)


async def apply(deltas: Deltas, session: AsyncClientSession) -> int:
    """Write ``deltas`` inside the caller's transaction; returns the documents touched.
    A rename collision (E11000 on a total's ``_id``) is raised as ``Renamed``."""
    changes = deltas.changes()
    if not changes:
        return 0
    now = utcnow()
    collection = QuotaTotal.get_pymongo_collection()
    try:
        await collection.bulk_write([_update(key, sums, now) for key, sums in changes.items()],
                                    ordered=False, session=session)
    except BulkWriteError as exc:
        if any(e.get("code") == 11000 for e in exc.details.get("writeErrors", [])):
            raise Renamed(sorted({key[0] for key in changes})) from exc
        raise
    return len(changes)


class Again(Exception):
    """Run the transaction again: it met a write it must see first (a ledger record
    another charge inserted after this one looked: E11000 on ``key``)."""


class Renamed(Again):
    """A total's ``_id`` belongs to a renamed subject (see the module docstring)."""

    def __init__(self, sites: list[str]) -> None:
        super().__init__(f"quota totals of renamed subjects at {', '.join(sites)}")
        self.sites = sites


async def in_transaction[T](store: Store,
                            body: Callable[[AsyncClientSession], Awaitable[T]], *,
                            session: AsyncClientSession | None = None) -> T:
    """Run ``body`` in a transaction, again from the start after a transient error (a
    write conflict with another charge of the same subject) or a rename collision,
    as ``Operation.run`` does. ``session``: a session the caller holds (a
    non-transactional operation's), which already holds the store's lock."""
    deadline = time.monotonic() + RETRY_SECONDS
    retry = 0
    while True:
        try:
            if session is not None:
                return await _on_session(session, body, deadline)
            async with store.session(transaction=True) as own:
                return await body(own)
        except Again as exc:
            retry += 1
            if retry > 5:
                raise
            for site in exc.sites if isinstance(exc, Renamed) else ():
                await rekey(store, site, session=session)
        except PyMongoError as exc:
            if not exc.has_error_label("TransientTransactionError"):
                raise
            retry += 1
            pause = backoff(retry)
            if time.monotonic() + pause >= deadline:
                raise
            await asyncio.sleep(pause)


async def _on_session[T](session: AsyncClientSession,
                         body: Callable[[AsyncClientSession], Awaitable[T]],
                         deadline: float) -> T:
    """One transaction on a session the caller holds (``Store.session``'s steps)."""
    await session.start_transaction(write_concern=MAJORITY)
    try:
        result = await body(session)
    except BaseException:
        if session.in_transaction:
            await session.abort_transaction()
        raise
    await commit_with_retry(session, deadline)
    return result


async def rekey(store: Store, site: str, *, session: AsyncClientSession | None = None,
                ) -> int:
    """Move every total of ``site`` whose ``_id`` was made from a name it no longer
    carries (a rename) to the ``_id`` of the name it carries, adding into what is
    there; returns how many moved. One transaction; deletes first, so a chain of
    renames settles in one pass."""
    async def body(session: AsyncClientSession) -> int:
        moved = Deltas()
        deletes = []
        async for doc in iter_rows(QuotaTotal, {"site": site}, "_id", "kind", "user",
                                   "account", "bucket", *SUMS, session=session):
            name = subject_name(doc)
            if doc["_id"] == total_id(site, doc["kind"], name, doc["bucket"]):
                continue
            deletes.append(DeleteOne({"_id": doc["_id"]}))
            slot = moved.sums.setdefault((site, doc["kind"], name, doc["bucket"]),
                                         [0, 0, 0, 0])
            for i, what in enumerate(SUMS):
                slot[i] += int(doc.get(what) or 0)
        if not deletes:
            return 0
        collection = QuotaTotal.get_pymongo_collection()
        await collection.bulk_write(deletes, ordered=True, session=session)
        now = utcnow()
        await collection.bulk_write([_update(key, sums, now) for key, sums in
                                     moved.sums.items()], ordered=False, session=session)
        return len(deletes)

    if session is not None:
        return await _on_session(session, body, time.monotonic() + RETRY_SECONDS)
    async with store.session(transaction=True) as own:
        return await body(own)


# -- rebuild -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fix:
    """One (subject, bucket) whose stored totals differed from the ledger's."""

    kind: str
    name: str
    bucket: str
    stored: tuple[int, int, int, int]
    ledger: tuple[int, int, int, int]

    def as_dict(self) -> dict[str, Any]:
        def show(sums: tuple[int, int, int, int]) -> dict[str, Any]:
            return {"cpu_minutes": sums[0] / MINUTE_UNITS,
                    "gpu_minutes": sums[1] / MINUTE_UNITS,
                    "money": sums[2] / MONEY_UNITS, "jobs": sums[3]}
        return {"kind": self.kind, "name": self.name, "bucket": self.bucket,
                "stored": show(self.stored), "ledger": show(self.ledger)}


@dataclass
class Rebuilt:
    site: str
    records: int = 0
    buckets: int = 0  # (subject, bucket) totals the ledger gives
    fixes: list[Fix] = field(default_factory=list)
    dry_run: bool = False
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"site": self.site, "records": self.records, "buckets": self.buckets,
                "changed": len(self.fixes), "dry_run": self.dry_run,
                "seconds": round(self.seconds, 3),
                "changes": [f.as_dict() for f in self.fixes]}


def ledger_sums(site: str, rows: Iterable[dict[str, Any]]) -> dict[Key, list[int]]:
    """The totals ``rows`` (ledger records of ``site``) give, zero buckets left out."""
    deltas = Deltas()
    for row in rows:
        deltas.add(site, row, +1)
    return deltas.changes()


async def stored_sums(site: str, session: AsyncClientSession | None = None,
                      where: dict[str, Any] | None = None) -> dict[Key, list[int]]:
    """The totals stored for ``site`` by the name each carries (zero ones left out)."""
    out: dict[Key, list[int]] = {}
    async for doc in iter_rows(QuotaTotal, where or {"site": site}, "site", "kind", "user",
                               "account", "bucket", *SUMS, session=session):
        if doc.get("site") != site:
            continue
        key = (site, str(doc["kind"]), subject_name(doc), str(doc["bucket"]))
        slot = out.setdefault(key, [0, 0, 0, 0])
        for i, what in enumerate(SUMS):
            slot[i] += int(doc.get(what) or 0)
    return {key: sums for key, sums in out.items() if any(sums)}


async def rebuild(store: Store, site: str, *, dry_run: bool = False) -> Rebuilt:
    """Recompute ``site``'s totals from its ledger and correct what differs (``dry_run``:
    only report it), then mark the site built (quota status reads the totals from then
    on). Renamed documents are moved first (``rekey``)."""
    started = time.monotonic()
    out = Rebuilt(site, dry_run=dry_run)
    if not dry_run:
        await rekey(store, site)
    rows = [row async for row in iter_rows(UsageRecord, {"site": site}, *LEDGER_FIELDS)]
    out.records = len(rows)
    wanted = ledger_sums(site, rows)
    out.buckets = len(wanted)
    stored = await stored_sums(site)
    suspects = sorted({key[1:3] for key in set(wanted) | set(stored)
                       if wanted.get(key) != stored.get(key)})
    if dry_run:
        out.fixes = _fixes(wanted, stored)
    else:
        for kind, name in suspects:
            out.fixes.extend(await in_transaction(
                store, lambda session, k=kind, n=name: _fix_subject(site, k, n, session)))
        async with store.session(transaction=True) as session:
            await _mark(site, out.records, session)
    out.seconds = time.monotonic() - started
    return out


def _fixes(wanted: dict[Key, list[int]], stored: dict[Key, list[int]]) -> list[Fix]:
    zero = [0, 0, 0, 0]
    return [Fix(key[1], key[2], key[3], tuple(stored.get(key, zero)),  # type: ignore[arg-type]
                tuple(wanted.get(key, zero)))  # type: ignore[arg-type]
            for key in sorted(set(wanted) | set(stored))
            if wanted.get(key) != stored.get(key)]


async def _fix_subject(site: str, kind: str, name: str,
                       session: AsyncClientSession) -> list[Fix]:
    """Inside one transaction: the subject's ledger records and totals at ``site``, and
    the ``$inc`` that makes the totals equal the records."""
    rows = [row async for row in iter_rows(UsageRecord, {kind: name}, "site", *LEDGER_FIELDS,
                                           session=session) if row.get("site") == site]
    wanted = {key: sums for key, sums in ledger_sums(site, rows).items() if key[1] == kind}
    stored = await stored_sums(site, session, {kind: name})
    stored = {key: sums for key, sums in stored.items() if key[1] == kind}
    fixes = _fixes(wanted, stored)
    correction = Deltas()
    for fix in fixes:
        correction.sums[(site, kind, name, fix.bucket)] = [
            w - s for w, s in zip(fix.ledger, fix.stored, strict=True)]
    await apply(correction, session)
    return fixes


async def needs_mark(site: str) -> bool:
    """``site`` has no totals mark yet (read outside any transaction, once per collect)."""
    return await QuotaTotalsMark.get_pymongo_collection().find_one(
        {"site": site}, {"_id": 1}) is None


async def mark_if_new(site: str, session: AsyncClientSession) -> bool:
    """Mark ``site``'s totals built when it has no ledger record yet (a new site, or a
    new store): its totals are then complete from its first charge on. A site whose
    ledger predates the totals stays unmarked (quota status sums its ledger) until
    ``rebuild`` marks it. Called in a charge's transaction, before its writes."""
    marks = QuotaTotalsMark.get_pymongo_collection()
    if await marks.find_one({"site": site}, {"_id": 1}, session=session) is not None:
        return False
    if await UsageRecord.get_pymongo_collection().find_one(
            {"site": site}, {"_id": 1}, session=session) is not None:
        return False
    try:
        await _mark(site, 0, session)
    except DuplicateKeyError as exc:  # another first charge marked it meanwhile
        raise Again(str(exc)) from exc
    return True


async def _mark(site: str, records: int, session: AsyncClientSession) -> None:
    collection = QuotaTotalsMark.get_pymongo_collection()
    found = await collection.find_one({"site": site}, {"_id": 1}, session=session)
    doc = QuotaTotalsMark(site=site, built_at=utcnow(), records=records).model_dump(
        by_alias=True)
    if found is None:
        await collection.insert_one(doc, session=session)
    else:
        doc["_id"] = found["_id"]
        await collection.replace_one({"_id": found["_id"]}, doc, session=session)
