"""The ``slurm`` section: what the Slurm reconciler owns and how much it may remove."""

from __future__ import annotations

from pydantic import Field

from .base import Block


class SlurmConfig(Block):
    """How the Slurm reconciler behaves at every site (``ng slurm sync``, the daemon)."""

    # removals (accounts, associations, coordinators, QOS dropped from associations) per
    # site in any 24 hours, across runs (null: no budget); the per-run cap is
    # --max-deletions / the task's max_deletions
    max_deletions_per_day: int | None = Field(default=200, ge=0)
    lease_seconds: float = Field(default=60.0, ge=1)  # renewed while the apply lives
    # users whose associations under the `root` account are left alone; any other user
    # under root can run jobs, so the sync removes them (README "Slurm")
    root_users: list[str] = Field(default_factory=lambda: ["root"])
    # accounts made outside cheeto that the sync leaves alone (with their users); every
    # other non-root account on the cluster is cheeto's, and one not in the store is deleted
    unmanaged_accounts: list[str] = Field(default_factory=list)
