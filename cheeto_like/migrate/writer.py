"""Writing a mapped reference database into the store: check everything first, then
write it in short chunks that a re-run resumes, with one History row at the end.

**Check** (``plan_import``, outside any transaction). Each mapped document is looked up
by its natural key (the key of its unique index: a user's name, an account's (group,
site), …; History and allocations by id). Already there with the same content: nothing
to do, which makes a second run a no-op. There with other content, or clashing on
another unique field (a uid, a gid, a volume's host path, a QOS-bucket): a conflict.
Any refusal or conflict refuses the whole run before its first write. The store is read
with a cursor (``chunk`` documents a batch), no session: only the keys of every
document are kept, and a model is built only for the documents the mapping names.

**Write** (``write_import``). The new documents go in ``WRITE_ORDER``: the name
registry's rows first (they reserve every user and group name the import creates, so an
operation creating one meanwhile is refused; and a connect's registry backfill, which
runs only on an empty registry, never fills in a personal group's name as a group's
while its user is still to come), then ``TARGET_ORDER`` (references point backwards),
``chunk`` documents (and at most ``CHUNK_BYTES`` of BSON) per transaction, so
no transaction comes near MongoDB's 60 s ``transactionLifetimeLimitSeconds`` or its
cache limit, whatever the source's size. Before the first chunk the import sets a
record in ``migrations`` (``_id`` = the import's op; source, author, start, planned and
written counts); each chunk updates its counts in its own transaction; the History row
and the record's removal are the last transaction.

**All-or-nothing as the user sees it**: an unfinished import is always visible and is
finished by running the same command again. Ids are ``uuid5`` of the source, so the re-run
plans the chunks that committed as present and writes the rest; its History row counts
every run's rows. Until then ``migrate from-cheeto``, ``db status`` and ``db check``
say "an import was interrupted: run the same command again to finish it", and the
outward syncs (LDAP, Slurm, puppet) refuse to start (``sync.lease``), so half an import
never reaches another system; the import, in turn, does not start while one of them
holds its lease. A record names its source: another source is refused until the
interrupted import is finished.

Why a record and not staging collections plus a switch (as ``db restore`` does): an
import merges into collections that already hold data and that operations keep writing,
so there is no collection to swap in; the merge itself would again be one transaction
over everything, or chunks. What stays visible between chunks is a prefix in dependency
order (names, sites, groups, users, …), never a row whose references are missing. A write
refused mid-way (someone created a clashing user after the check) stops the run; the
record stays, and the re-run's check names the clash.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import bson
from beanie.odm.utils.dump import get_dict
from pymongo.errors import BulkWriteError, DuplicateKeyError, PyMongoError

from .. import progress
from ..errors import Busy, Conflict, ExternalError
from ..models import SyncLease
from ..models.fields import utcnow
from ..models.history import History
from ..models.sync import epoch_ms
from ..queries.imports import describe, records, unfinished_import
from ..store import Store
from .from_cheeto import TARGET_ORDER, Mapped, Mapping

OP_NAME = "migrate_from_cheeto"
# volatile or bookkeeping fields that do not make two rows different
IGNORED = frozenset({"id", "created_at", "updated_at", "ldap", "revision_id"})
# collections whose rows have no natural key: matched by the id derived from the source
BY_ID = frozenset({"slurm_allocations", "history"})
WRITE_ORDER = ("names", *(c for c in TARGET_ORDER if c != "names"))
CHUNK = 500  # documents per write transaction (and per read batch of the check)
CHUNK_BYTES = 4 * 1024 * 1024  # and at most this much BSON per transaction
# leases whose holders write outward: an import neither starts under them nor lets them
# start before it is finished (sync.lease checks the other side)
OUTWARD_TARGETS = ("ldap", "slurm", "puppet")
CHUNK_ATTEMPTS = 5  # a chunk's transaction retried on TransientTransactionError


@dataclass
class CollectionPlan:
    source: int = 0
    new: list[Mapped] = field(default_factory=list)
    present: int = 0


@dataclass
class ImportPlan:
    collections: dict[str, CollectionPlan]
    refusals: list[str]
    notes: list[str]
    # an earlier run of this import that did not finish (its record), when there is one
    interrupted: dict[str, Any] | None = None
    chunks: int = 0  # transactions this run wrote
    finished: bool = False  # this run wrote the History row

    @property
    def ok(self) -> bool:
        return not self.refusals

    @property
    def new_count(self) -> int:
        return sum(len(c.new) for c in self.collections.values())

    def counts(self) -> list[dict[str, Any]]:
        return [{"collection": name, "source": c.source, "new": len(c.new),
                 "present": c.present} for name, c in self.collections.items()]


def _norm(value: Any) -> Any:
    """Comparable form: datetimes as UTC to the millisecond (what the store keeps)."""
    if isinstance(value, datetime):
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        return value.replace(microsecond=value.microsecond // 1000 * 1000)
    if isinstance(value, dict):
        return {k: _norm(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_norm(v) for v in value]
    return value


def content(doc: Any) -> dict[str, Any]:
    return _norm(doc.model_dump(exclude=set(IGNORED)))


def unique_keys(model: type[Any]) -> list[tuple[str, ...]]:
    keys = []
    for idx in getattr(model.Settings, "indexes", []):
        spec = idx.document
        if spec.get("unique"):
            keys.append(tuple(spec["key"].keys()))
    return keys


def _key(row: dict[str, Any], fields: tuple[str, ...]) -> tuple[Any, ...] | None:
    """A unique key's values in a stored (raw) row; None when a part is missing (a
    sparse index does not hold such rows)."""
    values = tuple(row.get(f) for f in fields)
    return None if any(v is None for v in values) else values


def _natural(collection: str, row: dict[str, Any], keys: list[tuple[str, ...]]
             ) -> tuple[Any, ...]:
    if collection in BY_ID or not keys:
        return (row["_id"],)
    return _key(row, keys[0]) or (row["_id"],)


def natural_key(collection: str, doc: Any) -> tuple[Any, ...]:
    """The key a mapped document is matched by (its stored form's, so both sides of the
    comparison are the store's values)."""
    return _natural(collection, get_dict(doc, to_db=True), unique_keys(type(doc)))


async def plan_import(store: Store, mapping: Mapping, session: Any = None, *,
                      chunk: int = CHUNK) -> ImportPlan:
    """Compare the mapping with the store: what is new, present, or in conflict. Reads
    each collection with a cursor (``chunk`` a batch), keeping only keys."""
    refusals = [r.line() for r in mapping.refusals]
    source_names = _source_names()
    plans: dict[str, CollectionPlan] = {}
    for collection, mapped in mapping.ordered():
        plan = CollectionPlan(source=mapping.source_counts.get(
            source_names.get(collection, collection), len(mapped)))
        plans[collection] = plan
        if not mapped:
            continue
        model = type(mapped[0].doc)
        others = unique_keys(model)
        rows = [get_dict(item.doc, to_db=True) for item in mapped]
        wanted = {_natural(collection, row, others) for row in rows}
        by_key: dict[tuple[Any, ...], Any] = {}
        taken: dict[tuple[str, ...], dict[tuple[Any, ...], str]] = defaultdict(dict)
        cursor = model.get_pymongo_collection().find({}, session=session, batch_size=chunk)
        async for stored in cursor:
            key = _natural(collection, stored, others)
            if key in wanted:
                by_key[key] = model.model_validate(stored)
            for fields in others:
                if (k := _key(stored, fields)) is not None:
                    taken[fields][k] = f"{key}"
        ours: set[tuple[Any, ...]] = set()
        for item, row in zip(mapped, rows, strict=True):
            key = _natural(collection, row, others)
            label = "/".join(str(k) for k in key)
            if key in ours:
                refusals.append(f"{collection} {label}: appears more than once in the source")
                continue
            ours.add(key)
            old = by_key.get(key)
            if old is not None:
                if content(old) == content(item.doc):
                    plan.present += 1
                else:
                    diff = sorted(k for k, v in content(item.doc).items()
                                  if content(old).get(k) != v)
                    refusals.append(f"{collection} {label}: already in the store with other "
                                    f"values ({', '.join(diff)})")
                continue
            clash = False
            for fields in others:
                k = _key(row, fields)
                if k is None or (fields == others[0] and collection not in BY_ID):
                    continue
                if k in taken[fields]:
                    refusals.append(f"{collection} {label}: {'+'.join(fields)} "
                                    f"{'/'.join(map(str, k))} is already taken by "
                                    f"{taken[fields][k]}")
                    clash = True
            if clash:
                continue
            for fields in others:
                if (k := _key(row, fields)) is not None:
                    taken[fields][k] = label
            plan.new.append(item)
    return ImportPlan(plans, refusals, list(mapping.notes))


def _source_names() -> dict[str, str]:
    """Our collection -> the reference's (the same names, but for the name registry)."""
    return {name: name for name in TARGET_ORDER if name != "names"}


def _holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


async def _refuse_under_outward_leases(store: Store) -> None:
    """Busy while a sync that writes outward holds its lease: it may be reading the
    store right now, and would see part of the import."""
    now = epoch_ms(utcnow())
    for lease in await SyncLease.get_pymongo_collection().find(
            {"expires_ms": {"$gt": now}}).to_list():
        target = str(lease["_id"]).split(":", 1)[0]
        if target in OUTWARD_TARGETS:
            raise Busy(f"a {target} sync is running ({lease['_id']}, held by "
                       f"{lease.get('holder')}): import when it ends")


def _chunks(plan: ImportPlan, size: int, max_bytes: int
            ) -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """The new rows in ``WRITE_ORDER`` (the name registry first, then the mapping's
    order), at most ``size`` documents and ``max_bytes`` of BSON a chunk (a chunk may
    span collections; one document over the byte cap goes alone, and the store refuses
    it past 16 MiB)."""
    batch: list[tuple[str, dict[str, Any]]] = []
    used = 0
    order = [c for c in ("names",) if c in plan.collections]
    for collection in [*order, *(c for c in plan.collections if c != "names")]:
        for item in plan.collections[collection].new:
            row = get_dict(item.doc, to_db=True)
            length = len(bson.encode(row))
            if batch and (len(batch) >= size or used + length > max_bytes):
                yield batch
                batch, used = [], 0
            batch.append((collection, row))
            used += length
    if batch:
        yield batch


def _by_collection(batch: Iterable[tuple[str, dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for collection, row in batch:
        out[collection].append(row)
    return out


async def _write_chunk(store: Store, op: str, batch: list[tuple[str, dict[str, Any]]],
                       written: dict[str, int], models: dict[str, Any]) -> None:
    """One chunk and the counts it adds to the record: one short transaction (retried
    on a transient error: it wrote nothing then, and its ids are fixed)."""
    grouped = _by_collection(batch)
    after = dict(written)
    for collection, rows in grouped.items():
        after[collection] = after.get(collection, 0) + len(rows)
    for attempt in range(CHUNK_ATTEMPTS):
        try:
            async with store.session(transaction=True) as session:
                for collection, rows in grouped.items():
                    await models[collection].get_pymongo_collection().insert_many(
                        rows, session=session)
                await records(store).update_one(
                    {"_id": op}, {"$set": {f"written.{c}": after[c] for c in grouped}},
                    session=session)
            break
        except PyMongoError as exc:
            if not exc.has_error_label("TransientTransactionError") or \
                    attempt == CHUNK_ATTEMPTS - 1:
                raise
            await asyncio.sleep(random.random() * 0.05 * 2 ** attempt)
    written.update(after)


async def write_import(store: Store, mapping: Mapping, *, author: str | None,
                       source: str, op: str = OP_NAME, chunk: int = CHUNK,
                       chunk_bytes: int = CHUNK_BYTES) -> ImportPlan:
    """Check the whole mapping, then write its new documents in chunks with one History
    row at the end (the module docstring says how a re-run resumes). Nothing at all
    when the check refuses anything, or when nothing is new and no run is unfinished."""
    record = await unfinished_import(store, op)
    if record is not None and record.get("source") != source:
        raise Conflict(f"{describe(record)} (this run imports from {source}; nothing was "
                       "written)")
    plan = await plan_import(store, mapping, chunk=chunk)
    plan.interrupted = record
    if not plan.ok or (plan.new_count == 0 and record is None):
        return plan
    models = {c: type(p.new[0].doc) for c, p in plan.collections.items() if p.new}
    written: dict[str, int] = {str(k): int(v) for k, v in
                               ((record or {}).get("written") or {}).items()}
    if record is None:
        record = {"_id": op, "source": source, "author": author, "started_at": utcnow(),
                  "holder": _holder(), "runs": 1, "chunks": 0, "planned": plan.new_count,
                  "written": {}}
        try:
            await records(store).insert_one(record)
        except DuplicateKeyError:
            raise Busy(f"another {op} import started just now; run this one again when "
                       "it ends") from None
        try:
            await _refuse_under_outward_leases(store)
        except Busy:
            await records(store).delete_one({"_id": op, "holder": record["holder"]})
            raise
    else:
        await _refuse_under_outward_leases(store)
        plan.notes.insert(0, f"resumed an interrupted import ({sum(written.values())} "
                             "documents were written before)")
        await records(store).update_one(
            {"_id": op}, {"$set": {"holder": _holder(), "runs": int(record.get("runs", 1)) + 1,
                                   "planned": sum(written.values()) + plan.new_count}})
    chunks = int(record.get("chunks", 0))
    progress.begin(plan.new_count, "importing documents")
    try:
        for batch in _chunks(plan, chunk, chunk_bytes):
            await _write_chunk(store, op, batch, written, models)
            chunks += 1
            plan.chunks += 1
            progress.advance(len(batch))
    except (DuplicateKeyError, BulkWriteError) as exc:
        if isinstance(exc, BulkWriteError) and any(
                e.get("code") != 11000 for e in exc.details.get("writeErrors", [])):
            raise ExternalError(f"import stopped: {_first_line(exc)}; "
                                f"{describe(await _record(store, op))}") from None
        raise Conflict(f"a row the check found free was taken while importing "
                       f"({_first_line(exc)}); {describe(await _record(store, op))}, "
                       "which lists the clash") from None
    except PyMongoError as exc:
        raise ExternalError(f"import stopped: {_first_line(exc)}; "
                            f"{describe(await _record(store, op))}", transient=True) from None
    before = sum(written.values()) - plan.new_count  # written by earlier runs
    changes = {"source": source, "imported": {c: n for c, n in written.items() if n},
               "present": sum(c.present for c in plan.collections.values()) - before,
               "chunks": chunks, "runs": int(record.get("runs", 1)) + (
                   1 if plan.interrupted is not None else 0)}
    async with store.session(transaction=True) as session:
        await History(op=op, author=author, changes=changes,
                      timestamp=utcnow()).insert(session=session)
        await records(store).delete_one({"_id": op}, session=session)
    plan.finished = True
    return plan


async def _record(store: Store, op: str) -> dict[str, Any]:
    return await unfinished_import(store, op) or {"_id": op}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
