"""The ``slurm`` section: what the Slurm reconciler owns and how much it may remove."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from .base import Block, UserPath


class QuotaEnforcement(Block):
    """The submit-time quota check on a site's head node (``ng site enforcement``).

    ``<state_dir>/<site>/`` holds what slurmctld's plugin reads and writes: ``quota.db``
    (the site worker's table: quotas, used minutes, GPU factors), ``reservations.db``
    (the plugin's accepted jobs) and ``spool/`` (one file per finished job, from the
    completion hook). Only ``slurm_user`` (slurmctld's SlurmUser) may read them."""

    # directory of quota.db and reservations.db on the head node
    state_dir: UserPath = Path("/var/lib/cheeto/enforcement")
    # slurmctld's SlurmUser: the only user that may read the state files
    slurm_user: str = Field(default="slurm", min_length=1, max_length=64)
    # a table older than this (the worker stopped) or missing: the plugin follows on_stale
    max_age_seconds: int = Field(default=600, ge=10)
    # table stale or missing: fail_open accepts jobs, fail_closed refuses them
    on_stale: Literal["fail_open", "fail_closed"] = "fail_open"
    # the worker rewrites the table when the store changes (polled this often), after
    # each charge, and at least every refresh_seconds (so max_age means "worker down")
    poll_seconds: float = Field(default=1.0, ge=0.1, le=60)
    # the worker rewrites the table at least this often, in seconds
    refresh_seconds: int = Field(default=60, ge=5)
    # a reservation whose job is neither queued nor running is dropped after this long
    # (a completion the hook missed); younger ones may belong to a job being submitted
    reservation_grace_seconds: int = Field(default=120, ge=10)
    # sites whose head-node worker (``daemon worker --site``) keeps their table
    sites: list[str] = Field(default_factory=list)


class SlurmConfig(Block):
    """How the Slurm reconciler behaves at every site (``ng slurm sync``, the daemon)."""

    # removals (accounts, associations, coordinators, QOS dropped from associations) per
    # site in any 24 hours, across runs (null: no budget); the per-run cap is
    # --max-deletions / the task's max_deletions
    max_deletions_per_day: int | None = Field(default=200, ge=0)
    lease_seconds: float = Field(default=60.0, ge=1)  # renewed while the apply lives
    # users whose associations under the `root` account are left alone; any other user
    # under root can run jobs, so the sync removes them (docs/guides/operator.md, "Syncs")
    root_users: list[str] = Field(default_factory=lambda: ["root"])
    # accounts made outside cheeto that the sync leaves alone (with their users); every
    # other non-root account on the cluster is cheeto's, and one not in the store is deleted
    unmanaged_accounts: list[str] = Field(default_factory=list)

    # the submit-time quota check
    enforcement: QuotaEnforcement = Field(default_factory=lambda: QuotaEnforcement())
