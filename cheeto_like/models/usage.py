"""The usage ledger: one record per finished Slurm job, charged in CPU- and GPU-minutes.

Charging (issue 13): CPU-minutes = allocated CPUs x elapsed; GPU-minutes = the sum over
GPU types of count x elapsed x the site's factor for that type *at the job's start*
(``default`` when a type has no factor of its own, 1.0 when not even that exists).
Factors are versioned (``GpuFactor.effective_from``), so a new factor charges jobs that
start after it and never rewrites what was already charged.

A job is counted in the period its *end* falls in, like slurm-quota's completion charge.
Besides the datetimes every record keeps ``end_epoch`` (seconds) and ``day`` (UTC date):
the embedded store compares datetimes wrongly inside an aggregation ``$match`` and cannot
group on a compound ``_id``, so reports match on the integer and group on the string
(tests/test_store_conformance.py pins both shapes).
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
