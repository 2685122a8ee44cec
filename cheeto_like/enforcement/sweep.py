"""Which reservations may go: the agent's sweep, as a pure decision (issue 26).

The completion hook releases a job's reservation after its charge; the sweep catches
what the hook missed, and must never free a reservation whose job is still queued,
running, or ended but not yet charged (that job would count zero times).

Inputs, each from a source a user cannot forge:
- ``squeue -h -a -r -t all -o %A|%i|%u|%T``: every job slurmctld holds (array elements
  one per line), its raw id, its id as sacct prints it, its owner and its state;
- ``scontrol -o show job``: the reservation tags in each job's admin_comment, taken
  from lines that *start* with ``JobId=<raw id>`` (a job name may hold any text, even
  ``JobState=COMPLETED`` or someone's tag, so nothing else on the line is trusted), and
  a tag counts for a job only when its reservation belongs to the job's owner.

Decision per reservation:
- one of its jobs is queued or running: kept;
- its jobs were seen and none is live any more: charge them from sacct first; the
  reservation goes once every one of them is final and in the ledger (asked by its
  own id, or by its raw id: sacct keeps a pending array cancelled whole as one record
  under the array's id, and none under ``120_3``);
- none of its jobs was ever seen and it is older than the grace: it never became a job
  (Slurm refused it after the plugin accepted it, or ``--test-only``): dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..adapters.scontrol import LIVE_STATES
from .layout import TAG

_LINE_ID = re.compile(r"^JobId=(\d+)\s")
_TAG = re.compile(re.escape(TAG) + r"([0-9a-f]{8,64})\b")


@dataclass(frozen=True)
class QueuedJob:
    raw_id: str
    job_id: str  # 123 or 120_3, as sacct prints it
    user: str
    state: str

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES


def parse_queue(text: str) -> list[QueuedJob]:
    jobs = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 4 or not parts[0].isdigit():
            continue
        jobs.append(QueuedJob(*(p.strip() for p in parts)))
    return jobs


def parse_tags(text: str) -> dict[str, set[str]]:
    """raw job id -> every reservation tag on its ``scontrol -o`` line."""
    found: dict[str, set[str]] = {}
    for line in text.splitlines():
        match = _LINE_ID.match(line)
        if match:
            found.setdefault(match[1], set()).update(_TAG.findall(line))
    return found


Seen = tuple[str, str]  # (sacct's job id, raw job id)


@dataclass
class SweepPlan:
    keep: set[str] = field(default_factory=set)
    # reservation id -> its jobs, to charge before it may go (``ready``)
    charge: dict[str, set[Seen]] = field(default_factory=dict)
    drop: list[str] = field(default_factory=list)

    def ready(self, complete: set[str]) -> list[str]:
        """The reservations all of whose jobs are final and charged (by either id)."""
        return [rid for rid, jobs in self.charge.items()
                if all(job in complete or raw in complete for job, raw in jobs)]

    def ids(self) -> list[str]:
        return sorted({i for jobs in self.charge.values() for pair in jobs for i in pair})


def plan_sweep(reservations: Iterable[tuple[str, str, int]], queue: list[QueuedJob],
               tags: Mapping[str, set[str]], seen: dict[str, set[Seen]], *, now: float,
               grace: float) -> SweepPlan:
    """``reservations``: (id, user, created epoch). ``seen`` (reservation id -> job ids
    ever seen holding it) is updated in place: the agent keeps it between sweeps, so a
    job that left slurmctld (MinJobAge) is still known to be charged first."""
    owner = {rid: user for rid, user, _ in reservations}
    live: set[str] = set()
    for job in queue:
        for rid in tags.get(job.raw_id, ()):
            if owner.get(rid) != job.user:
                continue  # a tag in someone else's job text, or of a gone reservation
            seen.setdefault(rid, set()).add((job.job_id, job.raw_id))
            if job.live:
                live.add(rid)
    plan = SweepPlan()
    for rid, _, created in reservations:
        if rid in live:
            plan.keep.add(rid)
        elif rid in seen:
            plan.charge[rid] = set(seen[rid])
        elif created < now - grace:
            plan.drop.append(rid)
        else:
            plan.keep.add(rid)
    for rid in [r for r in seen if r not in owner]:
        del seen[rid]  # released or dropped since
    return plan
