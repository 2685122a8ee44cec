"""Queued and running jobs from ``squeue``: what their owners have reserved but not been
charged yet.

A job is charged when it ends (the ledger reads finished jobs only), so a quota report
adds its *reservation*: CPUs (and GPUs) x the job's time limit, the most it can be
charged, the same figure the submit-time check reserves. Pending jobs count too (they
were accepted against the quota), and ``-r`` lists a pending array one line per element,
so an array of 12 reserves 12 times. ``-h`` (no header), ``-a`` (every partition), ``-t
PD,R,S,CG``, ``-o`` with ``|`` between explicit fields: user, account, CPUs, time limit,
GRES per node, node count, job id.

``Squeue.jobs`` lists every job in the queue for the cluster monitor: running and
pending, with the pending reason (last, as it is free text) and the submit time as epoch
seconds (``SLURM_TIME_FORMAT=%s``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ..errors import ExternalError
from .process import run_process

FORMAT = "%u|%a|%C|%l|%b|%D|%i"
_GPU_RE = re.compile(r"^(?:gres[:/])?gpu(?::(?P<type>[^:=]+))?(?:[:=](?P<n>\d+))?$")


@dataclass(frozen=True)
class RunningJob:
    job_id: str
    user: str
    account: str
    cpus: int
    limit_minutes: float | None  # None: UNLIMITED (no bound to reserve)
    gpus: tuple[tuple[str | None, int], ...] = ()


def parse_limit(text: str) -> float | None:
    """``[days-]hours:minutes:seconds`` (or ``minutes:seconds``, ``minutes``) -> minutes."""
    value = text.strip()
    if value.upper() in ("UNLIMITED", "INFINITE", "NOT_SET", "INVALID", ""):
        return None
    days = 0
    if "-" in value:
        head, value = value.split("-", 1)
        days = int(head)
        parts = [int(p) for p in value.split(":")]  # days-hours[:minutes[:seconds]]
        parts += [0] * (3 - len(parts))
    else:
        parts = [int(p) for p in value.split(":")]  # minutes, m:s or h:m:s
        parts = {1: [0, parts[0], 0], 2: [0, *parts]}.get(len(parts), parts)
    if len(parts) != 3:
        raise ValueError(f"bad time limit {text!r}")
    hours, minutes, seconds = parts
    return days * 1440 + hours * 60 + minutes + seconds / 60


def parse_gres(text: str, nodes: int) -> tuple[tuple[str | None, int], ...]:
    """``gres:gpu:a100:2`` / ``gres/gpu:a100=2`` / ``gpu:2`` per node, times the nodes."""
    found: list[tuple[str | None, int]] = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        m = _GPU_RE.match(item)
        if m is None:
            continue
        kind, count = m["type"], int(m["n"] or 1)
        if kind is not None and kind.isdigit() and m["n"] is None:
            kind, count = None, int(kind)
        found.append((kind, count * max(nodes, 1)))
    return tuple(found)


def parse_output(text: str) -> list[RunningJob]:
    jobs = []
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) != 7 or not parts[2].strip().isdigit():
            continue
        user, account, cpus, limit, gres, nodes, job_id = (p.strip() for p in parts)
        try:
            minutes = parse_limit(limit)
        except ValueError:
            minutes = None
        jobs.append(RunningJob(job_id=job_id, user=user, account=account, cpus=int(cpus),
                               limit_minutes=minutes,
                               gpus=parse_gres(gres, int(nodes) if nodes.isdigit() else 1)))
    return jobs


QUEUE_FORMAT = "%i|%u|%a|%P|%T|%V|%b|%D|%C|%N|%q|%r"
_QUEUE_FIELDS = 12


@dataclass(frozen=True)
class QueuedJob:
    """A job as ``squeue`` lists it (any state); ``reason`` is Slurm's, e.g.
    ``AssocMaxJobsLimit`` or ``ReqNodeNotAvail, UnavailableNodes:n[01-02]``."""

    job_id: str
    user: str
    account: str
    partition: str
    state: str
    submitted: datetime | None
    gpus: tuple[tuple[str | None, int], ...]
    nodes: int
    cpus: int
    node_list: str
    qos: str
    reason: str

    @property
    def gpu_count(self) -> int:
        return sum(n for _, n in self.gpus)


def _epoch(text: str) -> datetime | None:
    value = text.strip()
    return datetime.fromtimestamp(int(value), UTC) if value.isdigit() else None


def parse_queue(text: str) -> list[QueuedJob]:
    jobs = []
    for line in text.splitlines():
        parts = line.split("|", _QUEUE_FIELDS - 1)
        if len(parts) != _QUEUE_FIELDS or not parts[8].strip().isdigit():
            continue  # a "CLUSTER: name" banner or a malformed line
        (job_id, user, account, partition, state, submitted, gres, nodes, cpus, node_list,
         qos, reason) = (p.strip() for p in parts)
        count = int(nodes) if nodes.isdigit() else 1
        jobs.append(QueuedJob(
            job_id=job_id, user=user, account=account, partition=partition, state=state,
            submitted=_epoch(submitted),
            gpus=parse_gres(gres if gres not in ("N/A", "(null)") else "", count),
            nodes=count, cpus=int(cpus), node_list=node_list, qos=qos,
            reason="" if reason in ("None", "(null)") else reason))
    return jobs


@dataclass
class Squeue:
    binary: str = "squeue"
    timeout: float = 30.0
    env: Mapping[str, str] = field(default_factory=dict)

    async def reserving(self, cluster: str) -> list[RunningJob]:
        """Every job that holds a reservation: pending (array elements one by one),
        running, suspended, completing."""
        argv = [self.binary, "-h", "-a", "-r", "-t", "PD,R,S,CG", f"--clusters={cluster}",
                "-o", FORMAT]
        code, out, err, _ = await run_process(
            argv, time_limit=self.timeout, env={**os.environ, **self.env},
            missing=f"{self.binary} not found")
        if code != 0:
            detail = (err.strip().splitlines() or ["timed out" if code is None else ""])[0]
            raise ExternalError(f"squeue failed: {detail}")
        return parse_output(out)

    async def jobs(self, cluster: str) -> list[QueuedJob]:
        """Every job slurmctld still lists (pending, running, completing, ...)."""
        argv = [self.binary, "-h", "-a", f"--clusters={cluster}", "-o", QUEUE_FORMAT]
        code, out, err, _ = await run_process(
            argv, time_limit=self.timeout,
            env={**os.environ, **self.env, "SLURM_TIME_FORMAT": "%s"},
            missing=f"{self.binary} not found")
        if code != 0:
            detail = (err.strip().splitlines() or ["timed out" if code is None else ""])[0]
            raise ExternalError(f"squeue failed: {detail}")
        return parse_queue(out)


IDS_FORMAT = "%A|%i|%u|%T"


async def every_job(squeue: Squeue, cluster: str) -> str:
    """``squeue -h -a -r -t all -o %A|%i|%u|%T``: every job slurmctld holds, array
    elements one per line (the quota agent's sweep; ``enforcement.sweep.parse_queue``)."""
    argv = [squeue.binary, "-h", "-a", "-r", "-t", "all", f"--clusters={cluster}", "-o",
            IDS_FORMAT]
    code, out, err, _ = await run_process(argv, time_limit=squeue.timeout,
                                          env={**os.environ, **squeue.env},
                                          missing=f"{squeue.binary} not found")
    if code != 0:
        detail = (err.strip().splitlines() or ["timed out" if code is None else ""])[0]
        raise ExternalError(f"squeue failed: {detail}")
    return out
