"""One person's jobs from the cluster monitor's last snapshot of each site
(``models.job_snapshot``): two small reads per site, the header then the rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..models.base import rows
from ..models.job_snapshot import JobSnapshot, SnapshotJob

JOB_FIELDS = ("job_id", "slurm_account", "partition", "state", "submitted", "cpus", "gpus",
              "nodes", "node_list", "qos", "reason")


@dataclass(frozen=True)
class SiteJobs:
    site: str
    read_at: datetime | None  # None: the monitor never published a snapshot here
    jobs: list[dict[str, Any]] = field(default_factory=list)


async def jobs_of(site: str, user: str) -> SiteJobs:
    """``user``'s jobs at ``site`` as the last snapshot saw them (oldest first)."""
    head = await JobSnapshot.get_pymongo_collection().find_one({"_id": site})
    if head is None:
        return SiteJobs(site, None)
    found = await rows(SnapshotJob, {"site": site, "snapshot": head["snapshot"],
                                     "slurm_user": user}, *JOB_FIELDS)
    found.sort(key=lambda r: (_number(r.get("job_id", "")), r.get("job_id", "")))
    return SiteJobs(site, head["read_at"], found)


def _number(job_id: str) -> int:
    head = job_id.split("_", 1)[0]
    return int(head) if head.isdigit() else 0
