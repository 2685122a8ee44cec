"""Writing a mapped reference database into the store: check everything, then one
transaction with one History row, or nothing at all.

Each mapped document is looked up by its natural key (the key of its unique index:
a user's name, an account's (group, site), …; History and allocations by id). Already
there with the same content: nothing to do, which makes a second run a no-op. There
with other content, or clashing on another unique field (a uid, a gid, a volume's host
path, a QOS-bucket): a conflict. Any refusal or conflict refuses the whole run.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from beanie.odm.utils.dump import get_dict

from ..models.fields import utcnow
from ..models.history import History
from ..store import Store
from .from_cheeto import TARGET_ORDER, Mapped, Mapping

OP_NAME = "migrate_from_cheeto"
# volatile or bookkeeping fields that do not make two rows different
IGNORED = frozenset({"id", "created_at", "updated_at", "ldap", "revision_id"})
# collections whose rows have no natural key: matched by the id derived from the source
BY_ID = frozenset({"slurm_allocations", "history"})


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


def _key(doc: Any, fields: tuple[str, ...]) -> tuple[Any, ...] | None:
    values = tuple(getattr(doc, f) for f in fields)
    return None if any(v is None for v in values) else values


def natural_key(collection: str, doc: Any) -> tuple[Any, ...]:
    if collection in BY_ID:
        return (doc.id,)
    keys = unique_keys(type(doc))
    return _key(doc, keys[0]) or (doc.id,)


async def plan_import(store: Store, mapping: Mapping, session: Any = None) -> ImportPlan:
    """Compare the mapping with the store: what is new, present, or in conflict."""
    refusals = [r.line() for r in mapping.refusals]
    source_names = _source_names()
    plans: dict[str, CollectionPlan] = {}
    for collection, mapped in mapping.ordered():
        plan = CollectionPlan(source=mapping.source_counts.get(source_names.get(collection, ""),
                                                               len(mapped)))
        plans[collection] = plan
        if not mapped:
            continue
        model = type(mapped[0].doc)
        existing = await model.find({}, session=session).to_list()
        by_key = {natural_key(collection, d): d for d in existing}
        taken: dict[tuple[str, ...], dict[tuple[Any, ...], str]] = defaultdict(dict)
        others = unique_keys(model)
        for doc in existing:
            for fields in others:
                if (k := _key(doc, fields)) is not None:
                    taken[fields][k] = f"{natural_key(collection, doc)}"
        ours: set[tuple[Any, ...]] = set()
        for item in mapped:
            key = natural_key(collection, item.doc)
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
                k = _key(item.doc, fields)
                if k is None or (fields == unique_keys(model)[0] and collection not in BY_ID):
                    continue
                if k in taken[fields]:
                    refusals.append(f"{collection} {label}: {'+'.join(fields)} "
                                    f"{'/'.join(map(str, k))} is already taken by "
                                    f"{taken[fields][k]}")
                    clash = True
            if clash:
                continue
            for fields in others:
                if (k := _key(item.doc, fields)) is not None:
                    taken[fields][k] = label
            plan.new.append(item)
    return ImportPlan(plans, refusals, list(mapping.notes))


def _source_names() -> dict[str, str]:
    """Our collection -> the reference's (the same names, but for the name registry)."""
    return {name: name for name in TARGET_ORDER if name != "names"}


async def write_import(store: Store, mapping: Mapping, *, author: str | None,
                       source: str, op: str = OP_NAME) -> ImportPlan:
    """Plan again inside one transaction and write every new document with one History
    row; nothing at all when the plan refuses anything or has nothing new."""
    async with store.session(transaction=True) as session:
        plan = await plan_import(store, mapping, session=session)
        if not plan.ok or plan.new_count == 0:
            return plan
        for collection in TARGET_ORDER:
            new = plan.collections[collection].new
            if not new:
                continue
            model = type(new[0].doc)
            rows = [get_dict(item.doc, to_db=True) for item in new]
            await model.get_pymongo_collection().insert_many(rows, session=session)
        changes = {"source": source,
                   "imported": {c["collection"]: c["new"] for c in plan.counts() if c["new"]},
                   "present": sum(c.present for c in plan.collections.values())}
        await History(op=op, author=author, changes=changes,
                      timestamp=utcnow()).insert(session=session)
    return plan
