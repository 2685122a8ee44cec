"""Slurm accounting as we want it: partitions, QOS with their allocations, accounts and
group-level associations. Per-user sacctmgr associations are derived at sync time.

References are names at the same site: an account is named by its group, an association
names its account (group), partition and QOS list.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, ValidationError, field_validator, model_validator

from ..constants import SLURM_QOS_VALID_FLAGS
from ..validation import describe_validation_error
from .base import BaseDoc, Embedded, Expirable, index, unique
from .fields import INT64_MAX, PosixName, Quota, SiteName, parse_quota_mb

SLURM_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
Bucket = Literal["group_limits", "user_limits", "job_limits"]
UNLIMITED = ("-1", "inf", "infinite", "unlimited", "")


def _slurm_name(value: str) -> str:
    if not SLURM_NAME_RE.fullmatch(value):
        raise ValueError(f"{value!r} is not a valid Slurm name (lowercase letters, digits,"
                         " '_', '.', '-')")
    return value


def _qos_flag(value: str) -> str:
    if value not in SLURM_QOS_VALID_FLAGS:
        raise ValueError(f"QOS flag {value!r} is not one of {', '.join(SLURM_QOS_VALID_FLAGS)}")
    return value


SlurmName = Annotated[str, AfterValidator(_slurm_name)]
QOSFlag = Annotated[str, AfterValidator(_qos_flag)]


def _unlimited_to_none(value: object) -> object:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value == -1:
        return None
    if isinstance(value, str) and value.strip().lower() in UNLIMITED:
        return None
    return value


class SlurmTRES(Embedded):
    """A TRES bundle; None means unlimited. ``mem`` keeps the admin's unit (``1T``)."""

    cpus: int | None = Field(default=None, ge=0, le=INT64_MAX)
    gpus: int | None = Field(default=None, ge=0, le=INT64_MAX)
    mem: Quota | None = None

    @field_validator("cpus", "gpus", "mem", mode="before")
    @classmethod
    def _normalise_unlimited(cls, value: object) -> object:
        return _unlimited_to_none(value)

    @property
    def mem_mb(self) -> int | None:
        """Memory in whole megabytes, truncated like sacctmgr does."""
        return None if self.mem is None else int(parse_quota_mb(self.mem))

    @classmethod
    def parse(cls, text: str) -> SlurmTRES:
        """Parse the CLI syntax ``cpus=N gpus=N mem=10G`` (any order, any subset).

        ``-1`` or ``inf`` mean unlimited. Unknown keys and repeated keys are errors, so a
        typo never silently becomes "unlimited".
        """
        values: dict[str, str] = {}
        for token in text.replace(",", " ").split():
            key, sep, val = token.partition("=")
            key = key.strip().lower()
            if not sep or key not in ("cpus", "gpus", "mem"):
                raise ValueError(f"invalid TRES {token!r}: expected cpus=N, gpus=N or mem=SIZE")
            if key in values:
                raise ValueError(f"TRES {key} given twice in {text!r}")
            values[key] = val.strip()
        if not values:
            raise ValueError(f"empty TRES string {text!r}")
        try:
            return cls.model_validate(values)
        except ValidationError as exc:  # one line naming the key, not pydantic's report
            raise ValueError(f"invalid TRES {text!r}: {describe_validation_error(exc)}") from None


class SlurmAllocation(BaseDoc, Expirable):
    """One grant of TRES to one bucket of one QOS; a bucket's limit is the sum of its
    unexpired allocations."""

    site: SiteName
    qos: SlurmName
    bucket: Bucket
    tres: SlurmTRES = Field(default_factory=SlurmTRES)
    comment: str = ""  # checked in the operations' Args (FreeText)

    class Settings(BaseDoc.Settings):
        name = "slurm_allocations"
        indexes = [index("site", "qos")]


WALLTIME_MAX_MINUTES = 2**32 - 2  # sacctmgr stores minutes in 32 bits; 2**32-1 is INFINITE
_WALL = re.compile(r"^(?:(?P<days>\d+)-)?(?P<a>\d+)(?::(?P<b>\d+))?(?::(?P<c>\d+))?$")


def walltime_minutes(text: str | int | None) -> int | None:
    """A Slurm time limit in whole minutes (seconds round up); None means unlimited.

    Accepts every Slurm spelling: ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``,
    ``D-H:M:S``, plus ``-1``/``UNLIMITED``/empty for "no limit". ``7-0``, ``168:00:00``
    and ``10080`` are the same week, which is why limits are compared in minutes.
    """
    if text is None:
        return None
    if isinstance(text, int) and not isinstance(text, bool):
        return None if text < 0 else text
    value = str(text).strip()
    if value.lower() in UNLIMITED or value.lower() == "partition_limit":
        return None
    m = _WALL.fullmatch(value)
    if m is None:
        raise ValueError(f"invalid time limit {value!r}: use minutes, H:M:S or D-H:M:S")
    days = int(m["days"] or 0)
    parts = [int(p) for p in (m["a"], m["b"], m["c"]) if p is not None]
    if m["days"] is not None:  # D-H[:M[:S]]
        hours, minutes, seconds = [*parts, 0, 0][:3]
    elif len(parts) == 1:  # M
        hours, minutes, seconds = 0, parts[0], 0
    elif len(parts) == 2:  # M:S
        hours, minutes, seconds = 0, parts[0], parts[1]
    else:  # H:M:S
        hours, minutes, seconds = parts
    total_seconds = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    minutes_total = -(-total_seconds // 60)
    if minutes_total > WALLTIME_MAX_MINUTES:
        raise ValueError(f"time limit {value!r} is longer than Slurm allows")
    return minutes_total


def _walltime(value: str) -> str:
    walltime_minutes(value)
    return value.strip()


WallTime = Annotated[str, AfterValidator(_walltime)]


class SlurmAccountLimits(Embedded):
    """Per-account limits; -1 means unlimited. ``max_job_length`` is a Slurm time string."""

    max_user_jobs: int = Field(default=-1, ge=-1, le=INT64_MAX)
    max_group_jobs: int = Field(default=-1, ge=-1, le=INT64_MAX)
    max_submit_jobs: int = Field(default=-1, ge=-1, le=INT64_MAX)
    max_job_length: WallTime = "-1"

    @property
    def max_job_minutes(self) -> int | None:
        return walltime_minutes(self.max_job_length)


class SlurmAccount(BaseDoc):
    """A Slurm account at one site; its Slurm name is its group's name."""

    group: PosixName
    site: SiteName
    limits: SlurmAccountLimits = Field(default_factory=SlurmAccountLimits)
    coordinators: list[PosixName] = Field(default_factory=list)

    @field_validator("coordinators")
    @classmethod
    def _dedupe(cls, value: list[str]) -> list[str]:
        return sorted(set(value))

    class Settings(BaseDoc.Settings):
        name = "slurm_accounts"
        indexes = [unique("group", "site"), index("site"), index("coordinators")]


class SlurmPartition(BaseDoc):
    name: SlurmName
    site: SiteName

    class Settings(BaseDoc.Settings):
        name = "slurm_partitions"
        indexes = [unique("name", "site"), index("site")]


class SlurmQOS(BaseDoc):
    name: SlurmName
    site: SiteName
    priority: int = Field(default=0, ge=0, le=2**32 - 1)  # sacctmgr: 32 bits
    flags: list[QOSFlag] = Field(default_factory=lambda: ["DenyOnLimit"])

    @field_validator("flags")
    @classmethod
    def _dedupe(cls, value: list[str]) -> list[str]:
        return sorted(set(value))

    class Settings(BaseDoc.Settings):
        name = "slurm_qos"
        indexes = [unique("name", "site"), index("site")]


class SlurmAssociation(BaseDoc):
    """Members of ``account``'s group may run in ``partition`` under these QOS.

    One row per (site, account, partition); several QOS are a list with one default, so
    two QOS on the same account and partition can never collide silently.
    """

    site: SiteName
    account: PosixName
    partition: SlurmName
    qos: list[SlurmName] = Field(min_length=1)
    default_qos: SlurmName | None = None

    @field_validator("qos")
    @classmethod
    def _dedupe(cls, value: list[str]) -> list[str]:
        return sorted(set(value))

    @model_validator(mode="after")
    def _default_in_list(self) -> SlurmAssociation:
        if self.default_qos is None:
            self.default_qos = self.qos[0]
        elif self.default_qos not in self.qos:
            raise ValueError(f"default QOS {self.default_qos!r} is not in {self.qos}")
        return self

    class Settings(BaseDoc.Settings):
        name = "slurm_associations"
        indexes = [unique("site", "account", "partition"), index("site", "qos")]


@dataclass(frozen=True)
class TRESTotal:
    """Summed TRES of a bucket: None is unlimited; memory is whole megabytes."""

    cpus: int | None = None
    gpus: int | None = None
    mem_mb: int | None = None

    @classmethod
    def of(cls, allocations: Iterable[SlurmAllocation], now: datetime) -> TRESTotal:
        """Sum the unexpired allocations; a field no allocation sets stays unlimited."""
        cpus = gpus = None
        mem: Decimal | None = None
        for alloc in allocations:
            if alloc.expires_at is not None and alloc.expires_at <= now:
                continue
            tres = alloc.tres
            if tres.cpus is not None:
                cpus = (cpus or 0) + tres.cpus
            if tres.gpus is not None:
                gpus = (gpus or 0) + tres.gpus
            if tres.mem is not None:
                mem = (mem or Decimal(0)) + parse_quota_mb(tres.mem)
        return cls(cpus, gpus, None if mem is None else int(mem))

    def as_slurm(self) -> dict[str, int]:
        """The TRES keys sacctmgr uses; unlimited keys are left out."""
        pairs = (("cpu", self.cpus), ("mem", self.mem_mb), ("gres/gpu", self.gpus))
        return {key: value for key, value in pairs if value is not None}

    def compact(self) -> str:
        """``128c/8g/1024M``-style summary for tables; ∞ for unlimited."""
        def show(value: int | None, unit: str) -> str:
            return "∞" if value is None else f"{value}{unit}"
        return f"{show(self.cpus, 'c')}/{show(self.gpus, 'g')}/{show(self.mem_mb, 'M')}"
