"""The jobs a site's cluster listed at the cluster monitor's last run, for the "Me" page
(the hub never runs ``squeue``: the monitor does, on the site's head node).

One ``JobSnapshot`` per site (``_id`` the site) says which snapshot is current and when it
was read; its jobs are ``SnapshotJob`` rows (``_id`` ``<site>:<snapshot>:<job id>``), one
per job, never a list on the header (10k+ queued jobs would pass 16 MiB). A run inserts
its rows in bounded batches, then points the header at them, then deletes the site's
older rows: readers follow the header, so they see one whole snapshot, and the
collection holds about one snapshot per site.
"""

from __future__ import annotations

from datetime import datetime

from beanie import Document
from pydantic import ConfigDict, Field

from .base import index


class JobSnapshot(Document):
    id: str  # type: ignore[assignment]  # the site
    snapshot: str
    cluster: str
    read_at: datetime
    jobs: int = 0

    model_config = ConfigDict(defer_build=True)  # built on first use (models/base.py)

    class Settings:
        name = "job_snapshots"


class SnapshotJob(Document):
    id: str  # type: ignore[assignment]  # <site>:<snapshot>:<job id>
    site: str
    snapshot: str
    job_id: str
    # Slurm's names as squeue printed them (a copy replaced every run, not a reference
    # to the store's users and groups: a rename shows at the next run)
    slurm_user: str
    slurm_account: str = ""
    partition: str = ""
    state: str = ""
    submitted: datetime | None = None
    cpus: int = 0
    gpus: int = 0
    nodes: int = 0
    node_list: str = ""
    qos: str = ""
    reason: str = ""
    gres: list[str] = Field(default_factory=list)

    model_config = ConfigDict(defer_build=True)  # built on first use (models/base.py)

    class Settings:
        name = "snapshot_jobs"
        # (site, snapshot, slurm_user): one person's jobs of the current snapshot, and
        # (by its prefix) the older snapshots' rows to drop
        indexes = [index("site", "snapshot", "slurm_user")]
