"""Writes to the usage ledger: collect finished jobs from sacct, prune old records.

Collecting is a sync, not an admin change: like the reconcilers it records its outcome
(in the site's ``UsageCursor``), not a History row per run, which scheduled runs would
grow without bound. It is an upsert by ``UsageRecord.key`` that compares fingerprints:
an unchanged re-collect writes nothing; a job whose record changed (requeued, or its
charge changed) is replaced in place, never doubled. Chunks commit one by one; a run
that dies half-way leaves whole chunks, and the next (idempotent) run finishes the job.

The watermark is the ``until`` of the last run; the next run starts ``overlap`` earlier,
for jobs whose record reached slurmdbd late (slurmctld queues them while slurmdbd is down).

Pruning is an admin decision with History (``PruneUsage``), refused where it would refund
quota still in force unless asked to (``refund_quota``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import Field
from pymongo import ReplaceOne
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.errors import BulkWriteError

from ..adapters.sacct import Sacct, SacctJob
from ..errors import InvalidInput
from ..models.base import select_one
from ..models.fields import SiteName, new_id, utcnow
from ..models.quota import EPOCH
from ..models.usage import (
    FactorTable,
    RateTable,
    UsageCursor,
    UsageRecord,
    charge_gpu_dicts,
    cpu_minutes,
    fingerprint,
    price,
    record_key,
)
from ..queries.quota import InForce, usage_in_force
from ..queries.site import get_site, list_sites
from ..queries.usage import factor_table, rate_table
from ..store import Store
from .base import OpArgs, Operation
from .quota_totals import (
    LEDGER_FIELDS,
    Again,
    Deltas,
    apply,
    in_transaction,
    mark_if_new,
    needs_mark,
)

DEFAULT_OVERLAP = timedelta(hours=1)
FIRST_LOOKBACK = timedelta(days=30)  # a site's first collect without --since
CHUNK = 2000


@dataclass
class IngestCounts:
    seen: int = 0
    inserted: int = 0
    replaced: int = 0
    unchanged: int = 0
    queries: int = 0  # store round trips (reads and writes), for the benchmark

    @property
    def written(self) -> int:
        return self.inserted + self.replaced


@dataclass
class CollectReport:
    site: str
    cluster: str
    since: datetime
    until: datetime
    counts: IngestCounts
    skipped: tuple[str, ...] = ()
    seconds: float = 0.0
    other_clusters: int = 0  # rows sacct returned for another cluster (ignored)

    def as_dict(self) -> dict[str, Any]:
        return {"site": self.site, "cluster": self.cluster, "since": self.since,
                "until": self.until, "seen": self.counts.seen,
                "inserted": self.counts.inserted, "replaced": self.counts.replaced,
                "unchanged": self.counts.unchanged, "skipped": len(self.skipped),
                "skipped_lines": list(self.skipped[:20]),
                "other_clusters": self.other_clusters, "seconds": round(self.seconds, 3)}


def record_content(site: str, job: SacctJob, factors: FactorTable,
                   rates: RateTable | None = None) -> dict[str, Any]:
    """The charged content of one sacct job (what its fingerprint covers). ``cost`` is in
    it only when a rate applies (``models.usage.price`` at the job's start), so records
    of a site without rates keep the fingerprints they had before money existed."""
    started = job.start or job.end
    gpus = charge_gpu_dicts(job.tres.gpus, job.elapsed_s, started, factors)
    content: dict[str, Any] = {
        "site": site, "cluster": job.cluster, "job_id": job.job_id, "user": job.user,
        "account": job.account, "partition": job.partition, "qos": job.qos,
        "state": job.state, "start": job.start, "end": job.end,
        "end_epoch": int(job.end.timestamp()), "day": job.end.astimezone(UTC).date().isoformat(),
        "elapsed_s": job.elapsed_s, "cpus": job.tres.cpus, "mem_mb": job.tres.mem_mb,
        "gpus": gpus,
        "cpu_minutes": cpu_minutes(job.tres.cpus, job.elapsed_s),
        "gpu_minutes": round(sum(g["minutes"] for g in gpus), 4)}
    if rates:
        cost = price(content["cpu_minutes"], content["gpu_minutes"],
                     rates.rate(job.partition, started))
        if cost is not None:
            content["cost"] = cost
    return content


def build_record(site: str, job: SacctJob, factors: FactorTable,
                 content: dict[str, Any] | None = None,
                 rates: RateTable | None = None) -> dict[str, Any]:
    """The ledger document (as stored, validated) of one sacct job."""
    content = content or record_content(site, job, factors, rates)
    record = UsageRecord(key=record_key(site, job.cluster, job.job_id),
                         fingerprint=fingerprint(content), **content)
    return record.model_dump(by_alias=True)


def ledger_doc(key: str, content: dict[str, Any], print_: str, now: datetime,
               ) -> dict[str, Any]:
    """The document ``build_record`` stores, built without a model: the content comes
    from ``record_content`` (typed by construction), and validating 100k models was a
    third of a collect's time. ``tests/operations/test_usage_totals.py`` pins it equal
    to ``build_record``'s."""
    return {"_id": new_id(), "created_at": now, "updated_at": now, "key": key,
            **content, "cost": content.get("cost"), "fingerprint": print_}


_LOOKUP = {"_id": 1, "key": 1, "fingerprint": 1, "created_at": 1, "user": 1, "account": 1,
           "end_epoch": 1, "cpu_minutes": 1, "gpu_minutes": 1, "cost": 1}


async def _write_chunk(site: str, built: dict[str, tuple[dict[str, Any], str]],
                       session: AsyncClientSession, *, mark: bool = False) -> IngestCounts:
    """One chunk in one transaction: read what the ledger holds for its keys, insert
    the new records, replace the changed ones and move the quota totals by the
    difference (``operations.quota_totals``). Read inside the transaction, so on a
    replica set a concurrent charge of the same job conflicts instead of being
    subtracted from a version it did not see."""
    counts = IngestCounts()
    if mark:
        await mark_if_new(site, session)
    collection = UsageRecord.get_pymongo_collection()
    existing = {doc["key"]: doc async for doc in collection.find(
        {"key": {"$in": list(built)}}, _LOOKUP, session=session, batch_size=len(built))}
    counts.queries += 1
    now = utcnow()
    inserts: list[dict[str, Any]] = []
    replaces: list[ReplaceOne[dict[str, Any]]] = []
    deltas = Deltas()
    for key, (content, print_) in built.items():
        old = existing.get(key)
        if old is not None and old.get("fingerprint") == print_:
            counts.unchanged += 1  # the common re-collect case: nothing written
            continue
        doc = ledger_doc(key, content, print_, now)
        deltas.add(site, doc, +1)
        if old is None:
            inserts.append(doc)
            continue
        deltas.add(site, old, -1)
        doc["_id"], doc["created_at"] = old["_id"], old.get("created_at", now)
        replaces.append(ReplaceOne({"_id": doc["_id"]}, doc))
    if inserts:
        try:
            await collection.insert_many(inserts, ordered=False, session=session)
        except BulkWriteError as exc:  # another charge inserted one of them meanwhile
            if any(e.get("code") == 11000 for e in exc.details.get("writeErrors", [])):
                raise Again(str(exc)) from exc
            raise
        counts.queries += 1
    if replaces:
        await collection.bulk_write(replaces, ordered=False, session=session)
        counts.queries += 1
    if await apply(deltas, session):
        counts.queries += 1
    counts.inserted, counts.replaced = len(inserts), len(replaces)
    return counts


async def ingest(store: Store, site: str, jobs: Iterable[SacctJob], factors: FactorTable,
                 *, chunk: int = CHUNK, rates: RateTable | None = None) -> IngestCounts:
    """Upsert ``jobs`` into the ledger by key, and the quota totals by the difference;
    returns what was written. The charge (content, fingerprint) is computed before each
    chunk's transaction opens; the transaction only reads, compares and writes."""
    by_key: dict[str, SacctJob] = {}
    for job in jobs:
        by_key[record_key(site, job.cluster, job.job_id)] = job
    counts = IngestCounts(seen=len(by_key))
    # by subject: a chunk then moves the totals of few subjects (a 2,000-job chunk of a
    # year's jobs in sacct's order touched ~3,600 totals documents; by user, ~900), so
    # each transaction writes less and two charges of one site conflict less
    keys = sorted(by_key, key=lambda k: (by_key[k].user, by_key[k].account, k))
    mark = bool(keys) and await needs_mark(site)
    for start in range(0, len(keys), chunk):
        built = {}
        for key in keys[start:start + chunk]:
            content = record_content(site, by_key[key], factors, rates)
            built[key] = (content, fingerprint(content))
        done = await in_transaction(store, lambda session, b=built, m=mark: _write_chunk(
            site, b, session, mark=m))  # type: ignore[misc]
        mark = False
        for name in ("inserted", "replaced", "unchanged", "queries"):
            setattr(counts, name, getattr(counts, name) + getattr(done, name))
    return counts


async def collect(store: Store, site: str, *, sacct: Sacct, since: datetime | None = None,
                  until: datetime | None = None, overlap: timedelta = DEFAULT_OVERLAP,
                  seed: Mapping[str, tuple[float, float]] | None = None) -> CollectReport:
    """Read the jobs of ``site``'s cluster that ended in the window and upsert them.

    The window is [since, until]: ``since`` defaults to the watermark minus ``overlap``
    (a first run looks back ``FIRST_LOOKBACK``), ``until`` to now. The watermark moves
    to ``until`` afterwards (never backwards). ``seed``: the config's rate card of the
    site (``queries.usage.config_seed``), in force since the epoch under the stored
    versions (``queries.usage.rate_table``)."""
    started = time.monotonic()
    record = await get_site(site)
    cluster = record.cluster_name
    cursor = await select_one(UsageCursor, None, site=record.name)
    until = (until or utcnow()).astimezone(UTC)
    if since is None:
        since = cursor.until - overlap if cursor else until - FIRST_LOOKBACK
    since = since.astimezone(UTC)
    if since >= until:
        raise InvalidInput(f"the window is empty: --since {since.isoformat()} is not before "
                           f"{until.isoformat()}")
    parsed = await sacct.finished_jobs(cluster, since, until)
    ours = [job for job in parsed.jobs if job.cluster in (cluster, "")]
    factors = await factor_table(record.name)
    rates = await rate_table(record.name, seed)
    counts = await ingest(store, record.name, ours, factors, rates=rates)
    report = CollectReport(site=record.name, cluster=cluster, since=since, until=until,
                           counts=counts, skipped=parsed.skipped,
                           other_clusters=len(parsed.jobs) - len(ours),
                           seconds=time.monotonic() - started)
    await _move_watermark(store, cursor, record.name, cluster, until, report)
    return report


async def _move_watermark(store: Store, cursor: UsageCursor | None, site: str, cluster: str,
                          until: datetime, report: CollectReport) -> None:
    summary = report.as_dict()
    async with store.session(transaction=True) as session:
        if cursor is None:
            await UsageCursor(site=site, cluster=cluster, until=until, last_run_at=utcnow(),
                              last=summary).insert(session=session)
            return
        cursor.until = max(cursor.until.astimezone(UTC), until)
        cursor.cluster, cursor.last_run_at, cursor.last = cluster, utcnow(), summary
        await cursor.save(session=session)


@dataclass(frozen=True)
class Pruned:
    """What a prune deleted (or, dry, would delete), and how many of those records
    counted in quota periods still in force (``refunded``: only with ``refund_quota``)."""

    deleted: int
    refunded: int = 0
    in_force: tuple[InForce, ...] = ()


def refusal(in_force: Iterable[InForce], before: datetime) -> str:
    """One line: which site's records, from which period on, and the way past it."""
    parts = []
    for f in in_force:
        since = ("period none, all time" if f.start is None or f.start <= EPOCH
                 else f"period from {f.start:%Y-%m-%d}")
        parts.append(f"{f.records} at site {f.site}, {since}")
    return (f"refusing to prune: usage records that ended before {before.isoformat()} count "
            f"in quota periods still in force ({'; '.join(parts)}); deleting them would "
            "refund that quota (give --refund-quota to prune anyway, or an earlier --before)")


class PruneUsage(Operation):
    """Delete a site's (or every site's) ledger records of jobs that ended before
    ``before``; ``dry_run`` only counts them.

    Refused (``InvalidInput``, nothing deleted, a dry run too) when some of them count in
    a quota period still in force at their site (``queries.quota.usage_in_force``: the
    current period of every quota or default that sets a limit, from the previous one's
    start with carry-over): deleting them would lower *used* and hand that quota back.
    ``refund_quota`` prunes anyway, and the History row says how many were refunded.

    Not one transaction: a million ledger rows would outlive a replica set's 60 s
    ``transactionLifetimeLimitSeconds`` and its cache. The records go ``chunk`` at a time
    in ``_id`` order (find the next ids past the last one, delete those ids, the cut
    re-checked in the delete's filter), each delete its own short write, and one History
    row summarises the run. Resumable by nature: an interrupted prune leaves only
    records that are past the cut anyway, and a rerun deletes the rest (its row counts
    what that run deleted)."""

    op_name = "prune_usage"
    transactional = False

    class Args(OpArgs):
        before: datetime
        site: SiteName | None = None
        dry_run: bool = False
        refund_quota: bool = False
        chunk: int = Field(default=CHUNK, ge=1, le=100_000)

    async def execute(self, session: AsyncClientSession) -> Pruned:
        now = utcnow()
        if self.args.before > now:
            raise InvalidInput("--before is in the future: that would delete jobs still "
                               "being charged")
        if self.args.site is not None:
            sites = [(await get_site(self.args.site, session)).name]
        else:
            sites = sorted(s.name for s in await list_sites(session))
        self.deleted, self.chunks = 0, 0
        in_force = tuple(f for f in [await usage_in_force(site, self.args.before, now, session)
                                     for site in sites] if f.records)
        self.refunded = sum(f.records for f in in_force)
        if in_force and not self.args.refund_quota:
            raise InvalidInput(refusal(in_force, self.args.before))
        where: dict[str, Any] = {"end_epoch": {"$lt": int(self.args.before.timestamp())}}
        if self.args.site is not None:
            where["site"] = self.args.site
        collection = UsageRecord.get_pymongo_collection()
        if self.args.dry_run:
            self.deleted = await collection.count_documents(where, session=session)
            return Pruned(self.deleted, self.refunded, in_force)
        last: str | None = None
        while True:
            page = dict(where) if last is None else {**where, "_id": {"$gt": last}}
            ids = [doc["_id"] async for doc in collection.find(
                page, {"_id": 1}, session=session).sort("_id", 1).limit(self.args.chunk)]
            if not ids:
                break
            self.deleted += await in_transaction(
                self.store, lambda s, chunk=ids: _delete_chunk(where, chunk, s),
                session=session)
            self.chunks += 1
            last = ids[-1]
        return Pruned(self.deleted, self.refunded, in_force)

    def describe(self) -> dict[str, Any]:
        return {"site": self.args.site, "before": self.args.before.isoformat(),
                "deleted": self.deleted, "dry_run": self.args.dry_run,
                "chunks": getattr(self, "chunks", 0),
                "refund_quota": self.args.refund_quota,
                "refunded": getattr(self, "refunded", 0)}


async def _delete_chunk(where: dict[str, Any], ids: list[str],
                        session: AsyncClientSession) -> int:
    """Delete one chunk of records and take them off the quota totals, in one
    transaction (the records re-read in it: what is deleted is what is subtracted)."""
    match = {"_id": {"$in": ids}, **where}
    collection = UsageRecord.get_pymongo_collection()
    deltas = Deltas()
    async for row in collection.find(match, {"site": 1, **dict.fromkeys(LEDGER_FIELDS, 1)},
                                     session=session, batch_size=len(ids)):
        deltas.add(str(row["site"]), row, -1)
    result = await collection.delete_many(match, session=session)
    await apply(deltas, session)
    return result.deleted_count


async def prune_usage(store: Store, author: str | None, *, before: datetime,
                      site: str | None, dry_run: bool, refund_quota: bool = False,
                      chunk: int = CHUNK) -> Pruned:
    """A dry run counts without a History row (nothing changed)."""
    return await PruneUsage.run(store, author, skip_history=dry_run, before=before, site=site,
                                dry_run=dry_run, refund_quota=refund_quota, chunk=chunk)


async def prune(store: Store, author: str | None, *, before: datetime, site: str | None,
                dry_run: bool, refund_quota: bool = False, chunk: int = CHUNK) -> int:
    """``prune_usage``'s count of records deleted (or, dry, to delete)."""
    return (await prune_usage(store, author, before=before, site=site, dry_run=dry_run,
                              refund_quota=refund_quota, chunk=chunk)).deleted
