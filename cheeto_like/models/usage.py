"""The usage ledger: one record per finished Slurm job, charged in CPU- and GPU-minutes.

Charging (issue 13): CPU-minutes = allocated CPUs x elapsed; GPU-minutes = the sum over
GPU types of count x elapsed x the site's factor for that type *at the job's start*
(``default`` when a type has no factor of its own, 1.0 when not even that exists).
Factors are versioned (``GpuFactor.effective_from``), so a new factor charges jobs that
start after it and never rewrites what was already charged.

Money (issue 28): a job's ``cost`` = CPU-hours x ``cpu_hour`` + GPU-hours (after the GPU
factors) x ``gpu_hour`` of its partition's rate (``*`` for partitions without one) *at
the job's start*. Rates are versioned like factors (``UsageRate.effective_from``, never
backdated); the config's ``usage.rates`` card is the version in force since the epoch
(the seed, ``RateTable.build(seed=…)``), so stored versions take over from their start.
A record keeps its cost (``None``: no rate applied), its fingerprint covers it (only
when priced, so records from before rates keep their fingerprints), and a rate change
never rewrites a job that started before it.

A job is counted in the period its *end* falls in, like slurm-quota's completion charge.
Besides the datetimes every record keeps ``end_epoch`` (seconds) and ``day`` (UTC date):
the embedded store compares datetimes wrongly inside an aggregation ``$match`` and cannot
group on a compound ``_id``, so reports match on the integer and group on the string
(tests/test_store_conformance*.py pins both shapes).
"""

from __future__ import annotations

import hashlib
import json
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field

from .base import BaseDoc, Embedded, index, unique
from .fields import SiteName

DEFAULT_GPU_TYPE = "default"
UNTYPED = "untyped"  # the type of GPUs Slurm recorded without one (charged at ``default``)


class GpuUse(Embedded):
    """One GPU type of one job (``untyped`` for GPUs Slurm recorded without a type)."""

    type: str
    count: int = Field(ge=0)
    factor: float = Field(ge=0)
    minutes: float = Field(ge=0)


class UsageRecord(BaseDoc):
    """One finished job as sacct reported it, with its charge. ``key`` is unique:
    site, cluster and job id, so a re-collect replaces the record instead of adding one."""

    key: str
    site: SiteName
    cluster: str
    job_id: str
    user: str
    account: str
    partition: str = ""
    qos: str = ""
    state: str = ""
    start: datetime | None = None
    end: datetime
    end_epoch: int
    day: str  # YYYY-MM-DD of ``end`` in UTC
    elapsed_s: int = Field(ge=0)
    cpus: int = Field(ge=0)
    mem_mb: int | None = None
    gpus: list[GpuUse] = Field(default_factory=list)
    cpu_minutes: float = Field(ge=0)
    gpu_minutes: float = Field(ge=0)
    cost: float | None = Field(default=None, ge=0)  # the site's currency; None: unpriced
    fingerprint: str

    class Settings(BaseDoc.Settings):
        name = "usage_records"
        # the ledger's sums match (site, end_epoch range[, user | account]): a compound
        # index per shape, so MongoDB reads one site's period, not every site's ledger
        indexes = [unique("key"), index("site"), index("user"), index("account"),
                   index("end_epoch"), index("site", "end_epoch"),
                   index("site", "user", "end_epoch"), index("site", "account", "end_epoch")]


class UsageCursor(BaseDoc):
    """A site's collection watermark: jobs that ended before ``until`` were collected.
    The next run starts ``overlap`` before it, for records slurmdbd received late."""

    site: SiteName
    cluster: str
    until: datetime
    last_run_at: datetime
    last: dict[str, Any] = Field(default_factory=dict)

    class Settings(BaseDoc.Settings):
        name = "usage_cursors"
        indexes = [unique("site")]


class GpuFactor(BaseDoc):
    """The charge factor of a GPU type at a site from ``effective_from`` on (until the
    next version of the same type). ``gpu_type`` ``default`` covers types without one."""

    site: SiteName
    gpu_type: str
    factor: float = Field(ge=0, le=1000)
    effective_from: datetime

    class Settings(BaseDoc.Settings):
        name = "gpu_factors"
        indexes = [index("site"), unique("site", "gpu_type", "effective_from")]


ANY_PARTITION = "*"


class UsageRate(BaseDoc):
    """The price per normalised hour of a partition (``*``: every partition without a rate
    of its own) at a site from ``effective_from`` on, until the next version of the same
    partition; in the site's currency (``usage.currency``)."""

    site: SiteName
    partition: str
    cpu_hour: float = Field(ge=0, le=1e9)
    gpu_hour: float = Field(ge=0, le=1e9)
    effective_from: datetime

    class Settings(BaseDoc.Settings):
        name = "usage_rates"
        indexes = [index("site"), unique("site", "partition", "effective_from")]


# -- charging (pure) ----------------------------------------------------------------------


@dataclass(frozen=True)
class FactorTable:
    """Every factor version of a site, by type, oldest first."""

    versions: Mapping[str, tuple[tuple[datetime, float], ...]]

    @classmethod
    def build(cls, factors: Iterable[tuple[str, datetime, float]]) -> FactorTable:
        by_type: dict[str, list[tuple[datetime, float]]] = {}
        for kind, since, factor in factors:
            by_type.setdefault(kind, []).append((_utc(since), factor))
        return cls({k: tuple(sorted(v)) for k, v in by_type.items()})

    def _lookup(self, kind: str, when: datetime) -> float | None:
        versions = self.versions.get(kind)
        if not versions:
            return None
        at = bisect_right([since for since, _ in versions], when)
        return versions[at - 1][1] if at else None

    def factor(self, kind: str | None, when: datetime) -> float:
        when = _utc(when)
        if kind is not None and (found := self._lookup(kind, when)) is not None:
            return found
        found = self._lookup(DEFAULT_GPU_TYPE, when)
        return 1.0 if found is None else found


@dataclass(frozen=True)
class RateTable:
    """Every rate version of a site by partition, oldest first: (since, cpu_hour,
    gpu_hour). Empty: the site has no rate card (nothing is priced)."""

    versions: Mapping[str, tuple[tuple[datetime, float, float], ...]]

    @classmethod
    def build(cls, rates: Iterable[tuple[str, datetime, float, float]],
              seed: Mapping[str, tuple[float, float]] | None = None) -> RateTable:
        """``rates``: (partition, since, cpu_hour, gpu_hour) from the store; ``seed``:
        the config's card (partition -> (cpu_hour, gpu_hour)), in force since the epoch."""
        by_part: dict[str, list[tuple[datetime, float, float]]] = {}
        for part, (cpu, gpu) in (seed or {}).items():
            by_part.setdefault(part, []).append((datetime(1970, 1, 1, tzinfo=UTC), cpu, gpu))
        for part, since, cpu, gpu in rates:
            by_part.setdefault(part, []).append((_utc(since), cpu, gpu))
        return cls({k: tuple(sorted(v)) for k, v in by_part.items()})

    def __bool__(self) -> bool:
        return bool(self.versions)

    def _lookup(self, partition: str, when: datetime) -> tuple[float, float] | None:
        versions = self.versions.get(partition)
        if not versions:
            return None
        at = bisect_right([since for since, _, _ in versions], when)
        return versions[at - 1][1:] if at else None

    def rate(self, partition: str | None, when: datetime) -> tuple[float, float] | None:
        """(cpu_hour, gpu_hour) of ``partition`` at ``when``; None: not priced."""
        when = _utc(when)
        if partition and (found := self._lookup(partition, when)) is not None:
            return found
        return self._lookup(ANY_PARTITION, when)

    def in_force(self, when: datetime) -> dict[str, tuple[float, float]]:
        """Every partition's rate at ``when`` (the plugin's table)."""
        out = {}
        for part in self.versions:
            found = self._lookup(part, _utc(when))
            if found is not None:
                out[part] = found
        return out


def price(cpu_min: float, gpu_min: float, rate: tuple[float, float] | None) -> float | None:
    """A job's cost: CPU-hours x cpu_hour + GPU-hours (after factors) x gpu_hour."""
    if rate is None:
        return None
    return round(cpu_min / 60 * rate[0] + gpu_min / 60 * rate[1], 6)


def _utc(when: datetime) -> datetime:
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def charge_gpus(gpus: Iterable[tuple[str | None, int]], elapsed_s: int, started: datetime,
                factors: FactorTable) -> list[GpuUse]:
    minutes = elapsed_s / 60
    uses = []
    for kind, count in gpus:
        factor = factors.factor(kind, started)
        uses.append(GpuUse(type=kind or UNTYPED, count=count, factor=factor,
                           minutes=round(count * minutes * factor, 4)))
    return uses


def charge_gpu_dicts(gpus: Iterable[tuple[str | None, int]], elapsed_s: int,
                     started: datetime, factors: FactorTable) -> list[dict[str, Any]]:
    """``charge_gpus`` as the stored dicts (``GpuUse.model_dump()``), without a model
    per GPU type: the collect's hot path (pinned equal by tests/operations/
    test_quota_totals.py)."""
    minutes = elapsed_s / 60
    out = []
    for kind, count in gpus:
        factor = float(factors.factor(kind, started))
        out.append({"type": kind or UNTYPED, "count": count, "factor": factor,
                    "minutes": round(count * minutes * factor, 4)})
    return out


def cpu_minutes(cpus: int, elapsed_s: int) -> float:
    return round(cpus * elapsed_s / 60, 4)


def fingerprint(content: Mapping[str, Any]) -> str:
    """A stable hash of a record's content: an unchanged re-collect compares equal and
    writes nothing; a requeued job (new times, new TRES) differs and is replaced."""
    blob = json.dumps(content, sort_keys=True, default=_plain)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return int(_utc(value).timestamp())
    if isinstance(value, BaseModel):
        return value.model_dump()
    return str(value)


def record_key(site: str, cluster: str, job_id: str) -> str:
    return f"{site}/{cluster}/{job_id}"
