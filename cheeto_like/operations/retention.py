"""Retention of bookkeeping collections: TTL indexes, and a pass that deletes in chunks.

Scheduled runs write bookkeeping without bound (a ``SyncRun`` per sync, 1M a year at 10
sites; an ``AuditRun`` per audit; Celery's results), and nothing deleted it (issue 24).
The ``retention`` config section says how many days each kind is kept; this module
applies it two ways:

- a TTL index (``expireAfterSeconds``) on the datetime each rule names, so MongoDB's TTL
  monitor deletes what is past it (about once a minute). An existing index on that key
  (Celery's ``date_done_1``, one made by an earlier setting) gets the new
  ``expireAfterSeconds`` by ``collMod``; a setting turned off (``null``) turns the TTL
  index back into a plain one. The embedded store (nx-27017 over neosqlite) keeps TTL
  indexes too, with no monitor: it deletes expired documents lazily, before each read
  of the collection.
- a pass (``prune``: ``cheeto db prune-retention``, the daemon's ``retention`` task) that
  deletes what is past the setting ``CHUNK`` documents at a time (bounded deletes, no
  long lock on the embedded store, no huge oplog entry), with each deleted run's items,
  steps and findings (``cascade``: the TTL monitor deletes no related documents; those
  carry their run's ``started_at`` and expire with it anyway), then makes the indexes
  match. ``dry_run`` only counts.

Quota notices are kept by the *end* of the period they were sent in (``period_end``),
never by when they were sent: ``quota_notify`` sends a threshold once per (subject,
resource, threshold, period start), so a notice deleted while its period runs would be
sent again. A period that never ends (``none``) ends in 9999; notices from before the
field have none, and a TTL index and the pass both leave a document without the field.

Bookkeeping, not an operation: no History row (a daily pass would fill History with
nothing but itself), no generation bump (nothing shown by the API's caches changes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pymongo.errors import OperationFailure

from ..config import RetentionConfig
from ..models.fields import utcnow
from ..store import Store

CHUNK = 1000  # documents per delete (and per cascade's ``$in``)
DAY = 86_400
INDEX_PREFIX = "retention_"
# MongoDB's answers to "an index on these keys exists with other options / another name"
OPTION_CONFLICTS = {85, 86}


@dataclass(frozen=True)
class Rule:
    """Documents of ``collection`` whose ``field`` (a datetime) is older than the days of
    ``setting`` go; ``cascade`` collections lose the documents whose ``run`` is theirs."""

    collection: str
    field: str
    setting: str
    cascade: tuple[str, ...] = ()


RULES: tuple[Rule, ...] = (
    Rule("sync_runs", "started_at", "sync_runs_days", cascade=("sync_items", "sync_steps")),
    Rule("sync_items", "started_at", "sync_runs_days"),
    Rule("audit_runs", "started_at", "audit_runs_days", cascade=("audit_findings",)),
    Rule("audit_findings", "started_at", "audit_runs_days"),
    Rule("quota_notices", "period_end", "quota_notices_days"),
    Rule("celery_taskmeta", "date_done", "task_results_days"),
    Rule("history", "timestamp", "history_days"),
)


def days_of(rule: Rule, config: RetentionConfig) -> int | None:
    value = getattr(config, rule.setting)
    return int(value) if value is not None else None


@dataclass
class RetentionReport:
    """What a pass deleted (or, dry, would delete) per collection, and the TTL index each
    rule's collection ended with (seconds; None: no TTL)."""

    dry_run: bool
    cutoffs: dict[str, str] = field(default_factory=dict)  # collection -> ISO cutoff
    deleted: dict[str, int] = field(default_factory=dict)
    indexes: dict[str, int | None] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "cutoffs": self.cutoffs, "deleted": self.deleted,
                "indexes": self.indexes}


def _key_of(info: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(k, v) for k, v in dict(info["key"]).items()]


async def ttl_index(store: Store, rule: Rule) -> dict[str, Any] | None:
    """The index on ``rule.field`` alone, ascending (the key a TTL index has), or None."""
    collection = store.database[rule.collection]
    async for info in await collection.list_indexes():
        key = _key_of(info)
        if len(key) == 1 and key[0][0] == rule.field and key[0][1] in (1, 1.0):
            return dict(info)
    return None


async def apply_index(store: Store, rule: Rule, days: int | None) -> int | None:
    """Make ``rule``'s TTL index say ``days`` (None: no TTL); returns the seconds it has
    after. Idempotent: an index already right is left alone."""
    collection = store.database[rule.collection]
    found = await ttl_index(store, rule)
    current = found.get("expireAfterSeconds") if found else None
    if days is None:
        if found is not None and current is not None:  # a TTL cannot be unset: rebuild
            async with store.exclusive():
                await collection.drop_index(found["name"])
                await collection.create_index([(rule.field, 1)], name=found["name"])
        return None
    seconds = days * DAY
    if found is not None and current is not None and int(current) == seconds:
        return seconds
    async with store.exclusive():
        try:
            await collection.create_index([(rule.field, 1)], name=INDEX_PREFIX + rule.field,
                                          expireAfterSeconds=seconds)
        except OperationFailure as exc:
            if exc.code not in OPTION_CONFLICTS:
                raise
            # an index on the key exists (another name, or other options): change it
            await store.database.command({"collMod": rule.collection, "index": {
                "keyPattern": {rule.field: 1}, "expireAfterSeconds": seconds}})
    after = await ttl_index(store, rule)
    return int(after["expireAfterSeconds"]) if after and \
        after.get("expireAfterSeconds") is not None else None


async def _delete_older(store: Store, rule: Rule, cutoff: datetime) -> dict[str, int]:
    """Delete ``rule``'s documents older than ``cutoff``, ``CHUNK`` at a time by ``_id``,
    with their cascade; returns how many went per collection."""
    collection = store.database[rule.collection]
    where = {rule.field: {"$lt": cutoff}}
    counts = dict.fromkeys((rule.collection, *rule.cascade), 0)
    while True:
        ids = [doc["_id"] async for doc in collection.find(where, {"_id": 1}).limit(CHUNK)]
        if not ids:
            return counts
        async with store.exclusive():
            done = await collection.delete_many({"_id": {"$in": ids}})
            for other in rule.cascade:
                gone = await store.database[other].delete_many({"run": {"$in": ids}})
                counts[other] += gone.deleted_count
        counts[rule.collection] += done.deleted_count
        if done.deleted_count == 0:  # nothing matched twice: never loop on it
            return counts


async def prune(store: Store, config: RetentionConfig, *, dry_run: bool = False,
                now: datetime | None = None) -> RetentionReport:
    """One retention pass over every rule (see the module doc). ``dry_run`` counts what
    would go and changes nothing, indexes included."""
    now = now or utcnow()
    report = RetentionReport(dry_run=dry_run)
    for rule in RULES:
        days = days_of(rule, config)
        if days is not None:
            cutoff = now - timedelta(days=days)
            report.cutoffs[rule.collection] = cutoff.isoformat()
            if dry_run:
                report.deleted[rule.collection] = await store.database[
                    rule.collection].count_documents({rule.field: {"$lt": cutoff}})
            else:
                for name, count in (await _delete_older(store, rule, cutoff)).items():
                    report.deleted[name] = report.deleted.get(name, 0) + count
        if dry_run:
            found = await ttl_index(store, rule)
            report.indexes[rule.collection] = found.get("expireAfterSeconds") \
                if found else None
        else:
            # after the deletes: on the embedded store a TTL index deletes on every read,
            # so the counts above are what this pass did
            report.indexes[rule.collection] = await apply_index(store, rule, days)
    return report
