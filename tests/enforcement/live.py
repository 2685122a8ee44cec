"""A site ``farm`` on the live cluster with the submit-time check installed (as `ng site
enforcement install` does it: the harness calls the same function), for the
enforcement tests. Not a test module: the tests import ``QuotaSite``."""

from __future__ import annotations

import asyncio
import io
import sqlite3
import time
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from cheeto_like.adapters.sacct import Sacct
from cheeto_like.adapters.sacctmgr import SAcctMgr
from cheeto_like.adapters.scontrol import SControl
from cheeto_like.adapters.squeue import Squeue
from cheeto_like.config import load_config
from cheeto_like.daemon.quota_agent import QuotaAgent
from cheeto_like.enforcement import table as qtable
from cheeto_like.operations import slurm as slurm_ops
from cheeto_like.operations.group_membership import AddGroupMember
from cheeto_like.sync.slurm.actual import SAcctMgrReader
from cheeto_like.sync.slurm.run import sync_site
from tests.factories import AUTHOR, make_group, make_site, make_user
from tests.services.slurm_cluster import SlurmCluster, Submitted, ensure_unix_user

QUOTA_REFUSAL = "job refused: it would exceed a quota"


def write_config(path: Path, cli_config: Path, cluster: SlurmCluster, **settings: Any) -> Path:
    """The module's CLI config plus ``slurm.enforcement`` for the cluster's state dir."""
    data = YAML(typ="safe").load(cli_config.read_text())
    block = cluster.enforcement_settings(**settings).model_dump(mode="json")
    data["slurm"] = {"enforcement": block}
    buffer = io.StringIO()
    YAML(typ="safe").dump(data, buffer)
    path.write_text(buffer.getvalue())
    return path


class QuotaSite:
    """Groups whose accounts run in partitions cpu and gpu, users in them, synced."""

    def __init__(self, store: Any, cluster: SlurmCluster, config_path: Path) -> None:
        self.store, self.cluster, self.config_path = store, cluster, config_path
        self.runner = SAcctMgr(env=cluster.env, timeout=30)

    async def build(self, groups: dict[str, list[str]]) -> QuotaSite:
        self.cluster.reset()
        await make_site(self.store, "farm")
        for partition in ("cpu", "gpu"):
            await slurm_ops.CreateSlurmPartition.run(self.store, AUTHOR, site="farm",
                                                     name=partition)
        for group, members in groups.items():
            await make_group(self.store, group)
            for partition in ("cpu", "gpu"):
                await slurm_ops.ProvisionSlurmAllocation.run(
                    self.store, AUTHOR, site="farm", group=group, partition=partition,
                    group_limits={"cpus": 8})
            for name in members:
                ensure_unix_user(name)
                await make_user(self.store, name, site="farm", access=["login-ssh", "slurm"])
                await AddGroupMember.run(self.store, AUTHOR, group=group, user=name,
                                         site="farm")
        report = await sync_site(self.store, "farm", reader=SAcctMgrReader(self.runner),
                                 runner=self.runner, apply=True, author=AUTHOR)
        assert report.ok, [i.model_dump() for i in report.items if i.outcome != "ok"]
        return self

    def agent(self) -> QuotaAgent:
        """The site worker's loop, in this process (the same code the daemon runs)."""
        config = load_config(self.config_path)
        return QuotaAgent(self.store, config, "farm", self.cluster.enforcement,
                          sacct=Sacct(env=self.cluster.env, timeout=60),
                          scontrol=SControl(env=self.cluster.env),
                          squeue=Squeue(env=self.cluster.env), sync_blocks=False)

    async def refresh(self) -> None:
        """One agent pass that rewrites the table (as after a quota change)."""
        await self.agent().one_pass()

    def submit(self, user: str, account: str, *args: str, partition: str = "cpu",
               wrap: str = "sleep 1") -> Submitted:
        return self.cluster.submit(user, "-A", account, "-p", partition, *args, wrap=wrap)

    def accepted(self, user: str, account: str, *args: str, **kw: Any) -> str:
        sub = self.submit(user, account, *args, **kw)
        assert sub.accepted, sub
        assert sub.job_id is not None
        return sub.job_id

    def refused(self, user: str, account: str, *args: str, **kw: Any) -> str:
        sub = self.submit(user, account, *args, **kw)
        assert not sub.accepted, sub
        return sub.stderr

    def reservations(self) -> list[tuple[str, str, float, float, int]]:
        path = self.cluster.enforcement.reservations
        if not path.is_file():
            return []
        with qtable.reservations(path) as db:
            return [(r.user, r.account, round(r.cpu, 3), round(r.gpu, 3), r.count)
                    for r in qtable.list_reservations(db)]

    def table_meta(self) -> dict[str, str]:
        return qtable.read_meta(self.cluster.enforcement.table)

    def table_subjects(self) -> dict[tuple[str, str], tuple[Any, ...]]:
        path = self.cluster.enforcement.table
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            rows = db.execute("SELECT kind, name, cpu_quota, gpu_quota, cpu_used, gpu_used "
                              "FROM subjects").fetchall()
        return {(r[0], r[1]): tuple(r[2:]) for r in rows}


async def wait_for(predicate: Any, seconds: float, what: str, interval: float = 0.3) -> Any:
    deadline = time.monotonic() + seconds
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if asyncio.iscoroutine(last):
            last = await last
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {seconds} s waiting for {what} (last: {last!r})")
