"""Reads over the usage ledger: GPU factors and aggregated usage reports.

Reports aggregate in the store (``$match`` + ``$group`` on one field): the number of
queries never grows with the number of jobs (one, or 1 + the partitions with a rate
card). Matches use ``end_epoch`` (an integer) because the embedded store compares
datetimes wrongly inside ``$match``; groups are on a single field because it runs a
``$concat`` or document key in Python.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pymongo.asynchronous.client_session import AsyncClientSession

from ..models.usage import (
    FactorTable,
    GpuFactor,
    RateTable,
    UsageCursor,
    UsageRate,
    UsageRecord,
)

REPORT_BY: tuple[str, ...] = ("user", "account", "partition", "gpu-type", "day")
_FIELD = {"user": "$user", "account": "$account", "partition": "$partition",
          "day": "$day", "gpu-type": "$gpus.type"}
BATCH = 10_000  # result rows per round trip: a report's groups come back in one or two


@dataclass(frozen=True)
class Rate:
    """Price per normalised hour: CPU-hours and GPU-hours (after GPU factors)."""

    cpu_hour: float = 0.0
    gpu_hour: float = 0.0


@dataclass
class ReportRow:
    key: str | None
    jobs: int = 0
    cpu_minutes: float = 0.0
    gpu_minutes: float = 0.0
    cost: float = 0.0
    unpriced_partitions: set[str] = field(default_factory=set)

    def as_dict(self, by: str | None, priced: bool) -> dict[str, Any]:
        row: dict[str, Any] = {by or "scope": self.key if by else "total",
                               "jobs": self.jobs,
                               "cpu_minutes": round(self.cpu_minutes, 2),
                               "gpu_minutes": round(self.gpu_minutes, 2),
                               "cpu_hours": round(self.cpu_minutes / 60, 2),
                               "gpu_hours": round(self.gpu_minutes / 60, 2)}
        if priced:
            row["cost"] = round(self.cost, 2)
        return row


@dataclass
class UsageReport:
    site: str
    start: datetime
    end: datetime
    by: str | None
    rows: list[ReportRow]
    total: ReportRow
    priced: bool
    queries: int

    def table(self) -> list[dict[str, Any]]:
        return [r.as_dict(self.by, self.priced) for r in self.rows]

    def columns(self) -> list[str]:
        first = self.by or "scope"
        return [first, "jobs", "cpu_minutes", "gpu_minutes", "cpu_hours", "gpu_hours",
                *(["cost"] if self.priced else [])]


async def list_factors(site: str, session: AsyncClientSession | None = None,
                       ) -> list[GpuFactor]:
    found = await GpuFactor.find({"site": site}, session=session).to_list()
    return sorted(found, key=lambda f: (f.gpu_type, f.effective_from))


async def factor_table(site: str, session: AsyncClientSession | None = None) -> FactorTable:
    return FactorTable.build((f.gpu_type, f.effective_from, f.factor)
                             for f in await list_factors(site, session))


def config_seed(usage: Any, site: str) -> dict[str, tuple[float, float]]:
    """The config's rate card of ``site`` (``usage.rates``: the seed, in force since the
    epoch beneath the stored versions) as partition -> (cpu_hour, gpu_hour)."""
    card = usage.rates.get(site) or {}
    return {part: (r.cpu_hour, r.gpu_hour) for part, r in card.items()}


async def list_rates(site: str, session: AsyncClientSession | None = None,
                     ) -> list[UsageRate]:
    found = await UsageRate.find({"site": site}, session=session).to_list()
    return sorted(found, key=lambda r: (r.partition, r.effective_from))


async def rate_table(site: str, seed: Mapping[str, tuple[float, float]] | None = None,
                     session: AsyncClientSession | None = None) -> RateTable:
    """The site's stored rate versions over the config's ``seed`` (one query)."""
    return RateTable.build(((r.partition, r.effective_from, r.cpu_hour, r.gpu_hour)
                            for r in await list_rates(site, session)), seed)


async def cursor_of(site: str) -> UsageCursor | None:
    return await UsageCursor.find_one({"site": site})


def ledger_match(site: str, start: datetime, end: datetime, *, user: str | None = None,
                 account: str | None = None) -> dict[str, Any]:
    """Jobs of ``site`` that ended in [start, end)."""
    where: dict[str, Any] = {"site": site, "end_epoch": {"$gte": int(start.timestamp()),
                                                         "$lt": int(end.timestamp())}}
    if user is not None:
        where["user"] = user
    if account is not None:
        where["account"] = account
    return where


async def usage_report(site: str, start: datetime, end: datetime, *, by: str | None = None,
                       user: str | None = None, account: str | None = None,
                       rates: Mapping[str, Rate] | None = None,
                       stored_costs: bool = False) -> UsageReport:
    """Usage of ``site`` (optionally one user or account) in [start, end), grouped by
    ``by``. ``rates`` maps a partition (or ``*`` for the rest) to its prices; without
    it the report has no cost column.

    Without a rate card this is one aggregation. With one, a cost needs the minutes of
    each (group, partition): one aggregation by partition, then one per partition found
    (grouping on a ``$concat`` key would be one query, but the embedded store runs such
    a group in Python, about 6x slower). Either way the count does not grow with jobs.

    ``stored_costs`` (issue 28): a record priced at its collect (``UsageRecord.cost``, the
    rate at the job's start) counts its stored cost, and only the records without one are
    priced here with ``rates`` (the config's card; ``{}``: none): the same aggregations
    again over the priced records (``cost >= 0``), the remainder by subtraction. Not for
    ``gpu-type`` rows (a job's cost is not split by GPU type)."""
    match = ledger_match(site, start, end, user=user, account=account)
    priced = rates is not None
    parts, queries = await _parts(match, by, priced)
    stored: dict[tuple[str | None, str | None], dict[str, Any]] = {}
    if priced and stored_costs and by != "gpu-type":
        stored, more = await _parts({**match, "cost": {"$gte": 0}}, by, priced)
        queries += more
    rows: dict[str | None, ReportRow] = {}
    total = ReportRow(key=None)
    for (key, partition), doc in parts.items():
        row = rows.setdefault(key, ReportRow(key=key))
        done = stored.get((key, partition))
        rest = doc if done is None else {
            name: float(doc[name] or 0) - float(done[name] or 0)
            for name in ("jobs", "cpu_minutes", "gpu_minutes")}
        cost = _cost(rest, partition, rates) if float(rest["jobs"] or 0) > 0 else 0.0
        paid = float(done.get("cost") or 0) if done is not None else 0.0
        for target in (row, total):
            target.jobs += int(doc["jobs"])
            target.cpu_minutes += float(doc["cpu_minutes"] or 0)
            target.gpu_minutes += float(doc["gpu_minutes"] or 0)
            target.cost += (cost or 0.0) + paid
            if priced and cost is None and partition is not None:
                target.unpriced_partitions.add(partition)
    ordered = [rows[k] for k in sorted(rows, key=lambda k: (k is None, k or ""))]
    if by is None:
        ordered = [total] if total.jobs else []
    return UsageReport(site=site, start=start, end=end, by=by, rows=ordered, total=total,
                       priced=priced, queries=queries)


async def _parts(match: dict[str, Any], by: str | None, priced: bool,
                 ) -> tuple[dict[tuple[str | None, str | None], dict[str, Any]], int]:
    """The sums of ``match`` per (group, partition) and how many queries it took."""
    if by is None or by == "partition" or not priced:
        raw = await _aggregate(match, by or "partition")
        queries = 1
        parts = {(_key(doc["_id"]) if by else None,
                  _key(doc["_id"]) if by in (None, "partition") else None): doc for doc in raw}
    else:
        partitions = [_key(doc["_id"]) for doc in await _aggregate(match, "partition")]
        queries = 1 + len(partitions)
        parts = {}
        for partition in partitions:
            for doc in await _aggregate({**match, "partition": partition}, by):
                parts[(_key(doc["_id"]), partition)] = doc
    return parts, queries


async def _aggregate(match: dict[str, Any], by: str) -> list[dict[str, Any]]:
    """One ``$match`` + ``$group`` on a single field (``gpu-type``: after ``$unwind``)."""
    pipeline: list[dict[str, Any]] = [{"$match": match}]
    if by == "gpu-type":
        pipeline.append({"$unwind": "$gpus"})
        sums = {"jobs": {"$sum": 1}, "cpu_minutes": {"$sum": 0},
                "gpu_minutes": {"$sum": "$gpus.minutes"}}
    else:
        sums = {"jobs": {"$sum": 1}, "cpu_minutes": {"$sum": "$cpu_minutes"},
                "gpu_minutes": {"$sum": "$gpu_minutes"}, "cost": {"$sum": "$cost"}}
    pipeline.append({"$group": {"_id": _FIELD[by], **sums}})
    collection = UsageRecord.get_pymongo_collection()
    return await (await collection.aggregate(pipeline, batchSize=BATCH)).to_list()


def _key(group_id: Any) -> str:
    return "" if group_id is None else str(group_id)


def _cost(doc: Mapping[str, Any], partition: str | None,
          rates: Mapping[str, Rate] | None) -> float | None:
    if rates is None or partition is None:
        return None
    rate = rates.get(partition) or rates.get("*")
    if rate is None:
        return None
    return (float(doc["cpu_minutes"] or 0) / 60 * rate.cpu_hour
            + float(doc["gpu_minutes"] or 0) / 60 * rate.gpu_hour)


async def used_by(site: str, start: datetime, end: datetime, kind: str,
                  names: list[str] | None = None,
                  ) -> dict[str, tuple[float, float, float]]:
    """(CPU-minutes, GPU-minutes, money) per user (``kind`` user) or account in
    [start, end): one aggregation. Money is the sum of the records' ``cost`` (unpriced
    records count 0). ``names`` with one entry narrows the match to it."""
    where = ledger_match(site, start, end)
    if names is not None and len(names) == 1:
        where[kind] = names[0]
    pipeline = [{"$match": where},
                {"$group": {"_id": f"${kind}", "cpu": {"$sum": "$cpu_minutes"},
                            "gpu": {"$sum": "$gpu_minutes"}, "cost": {"$sum": "$cost"}}}]
    collection = UsageRecord.get_pymongo_collection()
    raw = await (await collection.aggregate(pipeline, batchSize=BATCH)).to_list()
    return {str(d["_id"]): (float(d["cpu"] or 0), float(d["gpu"] or 0),
                            float(d.get("cost") or 0)) for d in raw
            if names is None or str(d["_id"]) in names}
