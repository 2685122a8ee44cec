"""Charge finished jobs the completion hook reported, within seconds of their end.

The hook drops ``<spool>/<jobid>.job`` (JOBID, ARRAYJOBID, ARRAYTASKID, …) for every
job that ends. The worker reads sacct's allocation record of those jobs (the same
record and parser as ``ng usage collect``, so AllocTRES with typed GPUs, and the same
idempotent upsert by job id: a job charged here and collected later is one record),
and learns each job's reservation id from its admin_comment. slurmdbd receives a job's
end a moment after the hook runs, so a job sacct cannot call finished yet stays in the
spool for the next pass; after ``GIVE_UP`` the file is dropped and the scheduled
collect (which re-reads a window) charges the job, while the reservation sweep frees
its reservation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..adapters.sacct import Sacct, by_ids
from ..operations.usage import IngestCounts, ingest
from ..queries.usage import factor_table, rate_table
from ..store import Store
from .layout import TAG

log = logging.getLogger(__name__)

GIVE_UP_SECONDS = 600.0
NO_VAL = "4294967294"


@dataclass(frozen=True)
class SpoolEntry:
    path: Path
    job_id: str  # as sacct prints it: 123, or 120_3 for an array element
    age: float


def read_spool(spool: Path, *, now: float | None = None) -> list[SpoolEntry]:
    """Every complete hook file (``*.job``; the hook's ``.tmp`` files are skipped), the
    oldest first. A file that is not the hook's is logged and removed."""
    at = now if now is not None else time.time()
    entries = []
    for path in sorted(spool.glob("*.job")):
        try:
            text = path.read_text(errors="replace")[:4096]
            age = at - path.stat().st_mtime
        except FileNotFoundError:
            continue
        fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
        job = fields.get("JOBID", "")
        array_job, task = fields.get("ARRAYJOBID", ""), fields.get("ARRAYTASKID", "")
        if not job.isdigit():
            log.warning("quota agent: %s is not a completion record; removed", path.name)
            path.unlink(missing_ok=True)
            continue
        if array_job.isdigit() and array_job != "0" and task.isdigit() and task != NO_VAL:
            job = f"{array_job}_{task}"
        entries.append(SpoolEntry(path, job, age))
    entries.sort(key=lambda e: -e.age)
    return entries


def reservation_of(comment: str) -> str | None:
    """The reservation id the plugin put in a job's admin_comment."""
    for word in comment.split():
        if word.startswith(TAG) and all(c in "0123456789abcdef" for c in word[len(TAG):]):
            return word[len(TAG):] or None
    return None


@dataclass
class Charged:
    jobs: list[str] = field(default_factory=list)
    counts: IngestCounts = field(default_factory=IngestCounts)
    # (reservation id, job id) of every finished job: released after the table moves
    releases: list[tuple[str, str]] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    done: list[Path] = field(default_factory=list)


def _base(job_id: str) -> str:
    return job_id.split("_", 1)[0].split("+", 1)[0]


@dataclass
class Ledgered:
    """``charge_jobs``: what sacct had, charged; which asked ids are complete."""

    jobs: list[str] = field(default_factory=list)  # ids whose record was written
    counts: IngestCounts = field(default_factory=IngestCounts)
    releases: list[tuple[str, str]] = field(default_factory=list)
    complete: set[str] = field(default_factory=set)


async def charge_jobs(store: Store, site: str, cluster: str, ids: list[str], sacct: Sacct,
                      *, ages: Mapping[str, float] | None = None,
                      give_up: float = GIVE_UP_SECONDS,
                      seed: Mapping[str, tuple[float, float]] | None = None) -> Ledgered:
    """Charge every finished job of ``ids`` (``123``, ``120_3``, or an array's own id
    ``120`` for all its elements) from sacct's records. An id is *complete* when sacct
    calls every record under it final and each is in the ledger: only then may its
    reservation go (a job whose end slurmdbd has not received yet waits)."""
    out = Ledgered()
    if not ids:
        return out
    ages = ages or {}
    factors = await factor_table(site)
    rates = await rate_table(site, seed)
    tagged = await by_ids(sacct, cluster, ids)
    finished = {job.job_id: job for job in tagged.jobs if job.cluster in (cluster, "")}
    held_back: set[str] = set()
    if rates:
        # slurmdbd fills a short job's Partition a few seconds after its end (measured on
        # 22.05, docs/quota-enforcement.md): priced now it would cost nothing, so it waits
        # for the next pass (until ``give_up``: then charged as it is, and a later
        # collect replaces the record once sacct has the partition)
        for job_id, job in list(finished.items()):
            age = ages.get(job_id, ages.get(_base(job_id), 0.0))
            if not job.partition and age <= give_up:
                held_back.add(job_id)
                del finished[job_id]
    counts = await ingest(store, site, finished.values(), factors, rates=rates)
    out.counts = counts
    written = counts.inserted + counts.replaced
    for job_id, job in finished.items():
        if written:
            out.jobs.append(job.job_id)
        if (rid := reservation_of(tagged.comments.get(job_id, ""))) is not None:
            out.releases.append((rid, job_id))
    pending_bases = {_base(j) for j in (*tagged.unfinished, *held_back)}
    for asked in ids:
        if asked in finished or asked in tagged.never_ran:
            out.complete.add(asked)
        elif "_" not in asked and asked not in pending_bases and any(
                _base(j) == asked for j in (*finished, *tagged.never_ran)):
            out.complete.add(asked)  # every element of the array is final and charged
    return out


async def charge_spool(store: Store, site: str, cluster: str, entries: list[SpoolEntry],
                       sacct: Sacct, *, give_up: float = GIVE_UP_SECONDS,
                       batch: int = 200,
                       seed: Mapping[str, tuple[float, float]] | None = None) -> Charged:
    """Charge the jobs of ``entries`` that sacct calls finished. Files are *not*
    removed here: the caller removes ``done`` once the table shows the charge. ``seed``:
    the config's rate card (``queries.usage.config_seed``), as ``collect`` prices."""
    out = Charged()
    for start in range(0, len(entries), batch):
        part = entries[start:start + batch]
        ledgered = await charge_jobs(store, site, cluster, [e.job_id for e in part], sacct,
                                     ages={e.job_id: e.age for e in part},
                                     give_up=give_up, seed=seed)
        for name in ("seen", "inserted", "replaced", "unchanged", "queries"):
            setattr(out.counts, name, getattr(out.counts, name)
                    + getattr(ledgered.counts, name))
        out.jobs.extend(ledgered.jobs)
        out.releases.extend(ledgered.releases)
        for entry in part:
            if entry.job_id in ledgered.complete:
                out.done.append(entry.path)
            elif entry.age > give_up:
                out.dropped.append(entry.job_id)
                out.done.append(entry.path)
            else:
                out.waiting.append(entry.job_id)
    return out
