"""Ask slurmctld what it holds for a user: ``scontrol show assoc_mgr``.

slurmdbd (what sacctmgr reads) is not what decides a submission: slurmctld keeps its own
copy of associations and users (keyed by uid), and the two can disagree, e.g. after a
user was added under a new name and the old one deleted (``DefAccount=(null)``). ``slurm
why`` shows this copy beside slurmdbd's when the controller is reachable from here.

Output shape (22.05), one record per association and per user::

    ClusterName=farm Account=lab UserName=bob(1001) Partition=cpu Priority=0 ID=4
        ... ParentAccount= Lft=3 DefAssoc=Yes
        GrpJobs=N(0) ... MaxJobs=0(0) MaxSubmitJobs= MaxWallPJ=
    UserName=bob(1001) DefAccount=lab DefWckey=(null) AdminLevel=Not Set
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .process import ProcessResult, run_process

_RECORD = re.compile(r"^ClusterName=(\S+) Account=(\S+) UserName=([^(\s]*)")
_USER = re.compile(r"^UserName=([^(\s]+)\S* DefAccount=(\S+)")
_FIELD = re.compile(r"(\w+)=(\S*)")
# a limit of 0 refuses or holds every job: MaxJobs=0(0)
_BLOCKING = ("GrpJobs", "GrpSubmitJobs", "MaxJobs", "MaxSubmitJobs")


@dataclass(frozen=True)
class CtldAssociation:
    cluster: str
    account: str
    partition: str
    default: bool
    blocking: tuple[str, ...]  # limits set to 0 on this record (``MaxJobs=0``)

    def as_dict(self) -> dict[str, Any]:
        return {"account": self.account, "partition": self.partition,
                "default": self.default, "blocking_limits": list(self.blocking)}


@dataclass(frozen=True)
class CtldUser:
    """What slurmctld holds for one user (empty associations: it knows none)."""

    associations: tuple[CtldAssociation, ...]
    default_account: str | None


def parse_assoc_mgr(text: str, user: str, cluster: str) -> CtldUser:
    """Parse ``scontrol show assoc_mgr users=U flags=assoc,users`` for ``user``."""
    found: list[CtldAssociation] = []
    default: str | None = None
    current: dict[str, str] | None = None
    blocks: list[dict[str, str]] = []
    for line in text.splitlines():
        stripped = line.strip()
        if match := _RECORD.match(stripped):
            current = {"cluster": match[1], "account": match[2], "user": match[3]}
            blocks.append(current)
        elif match := _USER.match(stripped):
            current = None
            if match[1] == user and match[2] != "(null)":
                default = match[2]
        if current is not None:
            for key, value in _FIELD.findall(stripped):
                current.setdefault(key, value)
    for block in blocks:
        if block["user"] != user or block["cluster"] != cluster:
            continue
        zero = tuple(k for k in _BLOCKING if block.get(k, "").startswith("0("))
        found.append(CtldAssociation(block["cluster"], block["account"],
                                     block.get("Partition", ""),
                                     block.get("DefAssoc") == "Yes", zero))
    return CtldUser(tuple(found), default)


@dataclass
class SControl:
    """How to invoke scontrol on this host (the same environment as sacctmgr)."""

    binary: str = "scontrol"
    timeout: float = 30.0
    env: Mapping[str, str] = field(default_factory=dict)

    async def _run(self, *args: str) -> ProcessResult:
        argv = (self.binary, *args)
        outcome = await run_process(argv, time_limit=self.timeout,
                                    env={**os.environ, **self.env},
                                    missing=f"{self.binary} not found (slurm-client)")
        return ProcessResult(argv, *outcome)

    async def reachable(self) -> bool:
        """``scontrol ping`` answers in milliseconds either way, while any other request
        to a controller that is down retries for about 9 s first."""
        result = await self._run("ping")
        return result.ok and "is UP" in result.stdout

    async def assoc_mgr(self, user: str) -> ProcessResult:
        return await self._run("show", "assoc_mgr", f"users={user}", "flags=assoc,users")


LIVE_STATES = frozenset({"PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING",
                         "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING",
                         "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD", "SPECIAL_EXIT"})


async def show_jobs(control: SControl) -> ProcessResult:
    """``scontrol -o show job``: every job slurmctld holds, one line each."""
    return await control._run("-o", "show", "job")
