"""Read finished jobs from ``sacct`` and parse them into frozen records.

Why these flags (``sacct(1)``, Slurm 22.05):
- ``-X`` (allocations only): one line per job, not per step; the allocation's AllocTRES is
  what the job held, which is what we charge.
- ``-P -n``: ``|``-separated, no header; ``--format`` names every column, so a site's
  ``SACCT_FORMAT`` never changes what we parse.
- ``-a``: every user's jobs (sacct shows only the caller's own without it).
- ``--clusters C``: only this site's cluster, even when slurmdbd serves several.
- ``-S/-E`` with ``--state`` of finished states: jobs that ended in the window. sacct can
  return jobs whose end lies a few minutes outside it; the ledger's upsert is idempotent,
  so that only means a job is seen twice, never charged twice.
- ``--noconvert``: memory stays in the unit Slurm recorded (``2048M``, not ``2G``).
- The environment pins ``TZ=UTC`` and ``SLURM_TIME_FORMAT`` to ISO 8601, so the times we
  pass and read are UTC whatever the head node's zone or the admin's preferences.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ..errors import ExternalError
from .process import ProcessResult, run_process

DEFAULT_TIMEOUT_S = 300.0
FIELDS: tuple[str, ...] = ("JobID", "Cluster", "User", "Account", "Partition", "QOS",
                           "State", "Start", "End", "ElapsedRaw", "AllocTRES")
# every state a job can end in (sacct's short codes); PENDING/RUNNING/REQUEUED are not final
FINISHED_STATES: tuple[str, ...] = ("CA", "CD", "DL", "F", "NF", "OOM", "PR", "TO", "BF")
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"
UNKNOWN_TIMES = frozenset({"", "unknown", "none", "n/a"})

# 123, 123_4 (array task), 123+1 (het component); sacct also prints 123_[1-5] for an
# array that has not started, which is never a finished job
JOB_ID_RE = re.compile(r"^(?P<job>\d+)(?:_(?P<task>\d+))?(?:\+(?P<het>\d+))?$")
# the elements of an array that never started, as one record (123_[4-11]): cancelled
# while pending, they used nothing and are nobody's charge
NEVER_RAN_RE = re.compile(r"^\d+_\[[^|]*\]\|")
MEM_UNITS_MB = {"K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2, "P": 1024.0**3}
MEM_RE = re.compile(r"^(?P<n>\d+(?:\.\d+)?)(?P<unit>[KMGTP]?)$", re.IGNORECASE)


class SacctParseError(ValueError):
    """One line sacct printed that we cannot read (the message says which field)."""


@dataclass(frozen=True)
class AllocTRES:
    """The part of AllocTRES we charge: CPUs, memory (MB) and GPUs by type.

    ``gpus`` maps a type to its count; ``None`` is the type of GPUs Slurm recorded without
    one (``gres/gpu=2`` alone, or more untyped than the typed entries add up to)."""

    cpus: int = 0
    mem_mb: int | None = None
    gpus: tuple[tuple[str | None, int], ...] = ()

    @property
    def gpu_count(self) -> int:
        return sum(n for _, n in self.gpus)


@dataclass(frozen=True)
class SacctJob:
    cluster: str
    job_id: str  # as sacct prints it: 123, 123_4, 123+1
    user: str
    account: str
    partition: str
    qos: str
    state: str  # the first word: "CANCELLED by 0" -> CANCELLED
    start: datetime | None  # None: the job never started (cancelled while pending)
    end: datetime
    elapsed_s: int
    tres: AllocTRES = field(default_factory=AllocTRES)

    @property
    def array_job(self) -> str:
        return JOB_ID_RE.match(self.job_id)["job"]  # type: ignore[index]


@dataclass(frozen=True)
class ParsedOutput:
    jobs: tuple[SacctJob, ...]
    skipped: tuple[str, ...]  # one line per unreadable row: "line 3: bad JobID '…'"


def parse_time(text: str, what: str) -> datetime | None:
    """A time as sacct prints it under our environment (ISO, UTC), or an epoch; None for
    Unknown/None (a job that never started)."""
    value = text.strip()
    if value.lower() in UNKNOWN_TIMES:
        return None
    if value.isdigit():
        return datetime.fromtimestamp(int(value), UTC)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise SacctParseError(f"bad {what} time {value!r}") from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def parse_mem_mb(text: str) -> int:
    m = MEM_RE.match(text.strip())
    if m is None:
        raise SacctParseError(f"bad memory {text!r}")
    return round(float(m["n"]) * MEM_UNITS_MB[(m["unit"] or "M").upper()])


def parse_tres(text: str) -> AllocTRES:
    """``billing=4,cpu=4,gres/gpu:a100=2,gres/gpu=2,mem=4000M,node=1`` -> AllocTRES.

    Typed entries are the breakdown of the untyped total, so the untyped entry only adds
    GPUs when it exceeds their sum. Other TRES (billing, node, energy, licenses,
    gres/gpumem…) are not charged and are ignored."""
    cpus, mem = 0, None
    typed: dict[str, int] = {}
    untyped = 0
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep:
            raise SacctParseError(f"bad AllocTRES entry {item!r}")
        if name == "cpu":
            cpus = _count(value, item)
        elif name == "mem":
            mem = parse_mem_mb(value)
        elif name == "gres/gpu":
            untyped = _count(value, item)
        elif name.startswith("gres/gpu:"):
            kind = name.removeprefix("gres/gpu:")
            if not kind:
                raise SacctParseError(f"bad AllocTRES entry {item!r}")
            typed[kind] = typed.get(kind, 0) + _count(value, item)
    gpus: list[tuple[str | None, int]] = sorted(typed.items())
    rest = untyped - sum(typed.values())
    if rest > 0:
        gpus.append((None, rest))
    return AllocTRES(cpus=cpus, mem_mb=mem, gpus=tuple((k, n) for k, n in gpus if n))


def _count(value: str, item: str) -> int:
    if not value.isdigit():
        raise SacctParseError(f"bad count in AllocTRES entry {item!r}")
    return int(value)


def parse_line(line: str) -> SacctJob:
    parts = line.split("|")
    if len(parts) != len(FIELDS):
        raise SacctParseError(f"{len(parts)} fields, expected {len(FIELDS)}")
    row = dict(zip(FIELDS, parts, strict=True))
    job_id = row["JobID"].strip()
    if not JOB_ID_RE.match(job_id):
        raise SacctParseError(f"bad JobID {job_id!r}")
    end = parse_time(row["End"], "End")
    if end is None:
        raise SacctParseError(f"job {job_id} has no End time (not finished)")
    elapsed = row["ElapsedRaw"].strip()
    if not elapsed.isdigit():
        raise SacctParseError(f"bad ElapsedRaw {elapsed!r}")
    user = row["User"].strip()
    if not user:
        raise SacctParseError(f"job {job_id} has no User")
    return SacctJob(
        cluster=row["Cluster"].strip(), job_id=job_id, user=user,
        account=row["Account"].strip(), partition=row["Partition"].strip(),
        qos=row["QOS"].strip(), state=(row["State"].split() or ["UNKNOWN"])[0],
        start=parse_time(row["Start"], "Start"), end=end, elapsed_s=int(elapsed),
        tres=parse_tres(row["AllocTRES"]))


def parse_output(text: str) -> ParsedOutput:
    """Every line of ``sacct -P -n --format=<FIELDS>``; unreadable lines are reported,
    not fatal, so one odd record does not stop a site's accounting."""
    jobs: list[SacctJob] = []
    skipped: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or NEVER_RAN_RE.match(line):
            continue
        try:
            jobs.append(parse_line(line))
        except SacctParseError as exc:
            skipped.append(f"line {number}: {exc}")
    return ParsedOutput(tuple(jobs), tuple(skipped))


def format_time(when: datetime) -> str:
    return when.astimezone(UTC).strftime(TIME_FORMAT)


@dataclass
class Sacct:
    """How to invoke sacct on this host (the site's head node)."""

    binary: str = "sacct"
    timeout: float = DEFAULT_TIMEOUT_S
    env: Mapping[str, str] = field(default_factory=dict)

    def _env(self) -> dict[str, str]:
        return {**os.environ, **self.env, "TZ": "UTC", "SLURM_TIME_FORMAT": TIME_FORMAT}

    def argv(self, cluster: str, since: datetime, until: datetime) -> list[str]:
        path = shutil.which(self.binary, path=self._env().get("PATH")) or self.binary
        return [path, "-X", "-P", "-n", "-a", "--noconvert", f"--clusters={cluster}",
                f"--format={','.join(FIELDS)}", f"--state={','.join(FINISHED_STATES)}",
                f"--starttime={format_time(since)}", f"--endtime={format_time(until)}"]

    async def run(self, cluster: str, since: datetime, until: datetime) -> ProcessResult:
        argv = self.argv(cluster, since, until)
        outcome = await run_process(argv, time_limit=self.timeout, env=self._env(),
                                    missing=f"{self.binary} not found; is slurm-client "
                                            "installed on this host?")
        return ProcessResult(tuple(argv), *outcome)

    async def finished_jobs(self, cluster: str, since: datetime,
                            until: datetime) -> ParsedOutput:
        """The jobs of ``cluster`` that ended in [since, until]; a failed call raises
        (a partial read would look like a quiet period)."""
        result = await self.run(cluster, since, until)
        if not result.ok:
            raise ExternalError(f"sacct for cluster {cluster} failed ({result.summary()})",
                                transient=result.timed_out)
        return parse_output(result.stdout)


@dataclass(frozen=True)
class TaggedJobs:
    """``Sacct.by_ids``: finished jobs with their admin comments; the ids sacct listed
    but cannot call finished yet (slurmdbd gets a job's end a moment after the
    completion hook runs); and the array elements that ended without ever starting
    (one ``123_[4-7]`` record: final, nothing to charge)."""

    jobs: tuple[SacctJob, ...]
    comments: Mapping[str, str]
    unfinished: tuple[str, ...]
    never_ran: frozenset[str] = frozenset()


_RANGE_ID = re.compile(r"^(?P<job>\d+)_\[(?P<spec>[^\]]*)\]$")
NOT_FINAL = ("RUNNING", "PENDING", "REQUEUED", "SUSPENDED", "COMPLETING", "RESIZING")


def array_elements(job_id: str) -> list[str]:
    """``123_[0-6:2,9%2]`` -> 123_0, 123_2, 123_4, 123_6, 123_9 (sacct's and squeue's
    range notation; [] for anything else)."""
    match = _RANGE_ID.match(job_id)
    if match is None:
        return []
    found = []
    for item in match["spec"].split("%")[0].split(","):
        first, _, rest = item.partition("-")
        last, _, step = rest.partition(":")
        if not first.isdigit() or (rest and not last.isdigit()) or (step and not step.isdigit()):
            return []
        stop = int(last) if rest else int(first)
        found += [f"{match['job']}_{n}" for n in range(int(first), stop + 1, int(step or 1))]
    return found


def parse_tagged(text: str) -> TaggedJobs:
    """Lines of ``FIELDS`` + ``AdminComment`` (last: it is free text and may hold ``|``)."""
    jobs: list[SacctJob] = []
    comments: dict[str, str] = {}
    unfinished: list[str] = []
    never_ran: set[str] = set()
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", len(FIELDS))
        if len(parts) != len(FIELDS) + 1:
            continue
        state = (parts[FIELDS.index("State")].split() or ["UNKNOWN"])[0]
        if elements := array_elements(parts[0].strip()):
            (unfinished.extend if state in NOT_FINAL else never_ran.update)(elements)
            continue
        try:
            job = parse_line("|".join(parts[:len(FIELDS)]))
        except SacctParseError:
            unfinished.append(parts[0].strip())
            continue
        if job.state in NOT_FINAL:
            unfinished.append(job.job_id)
            continue
        jobs.append(job)
        comments[job.job_id] = parts[-1]
    return TaggedJobs(tuple(jobs), comments, tuple(unfinished), frozenset(never_ran))


async def by_ids(sacct: Sacct, cluster: str, ids: list[str]) -> TaggedJobs:
    """The allocation records of ``ids`` (``123`` or ``123_4``), any state."""
    env = sacct._env()
    path = shutil.which(sacct.binary, path=env.get("PATH")) or sacct.binary
    argv = [path, "-X", "-P", "-n", "-a", "--noconvert", f"--clusters={cluster}",
            f"--format={','.join((*FIELDS, 'AdminComment'))}", f"--jobs={','.join(ids)}"]
    outcome = await run_process(argv, time_limit=sacct.timeout, env=env,
                                missing=f"{sacct.binary} not found; is slurm-client "
                                        "installed on this host?")
    result = ProcessResult(tuple(argv), *outcome)
    if not result.ok:
        raise ExternalError(f"sacct --jobs for cluster {cluster} failed ({result.summary()})",
                            transient=True)
    return parse_tagged(result.stdout)
