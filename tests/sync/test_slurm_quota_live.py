"""Quota enforcement by Slurm itself, on the live one-node cluster with real jobs.

The Slurm sync writes ``GrpTRESMins=cpu=0`` (``gres/gpu=0``) on the rows of a user or an
account that has used its quota (sync/slurm/quota.py). Each test asserts on what
slurmctld does: a new job is refused at submit (or, queued before, pends) with
``AssocGrpCPUMinutesLimit`` / ``AssocGrpGRESMinutes`` while others run, a running job is
not killed, and a credit or a higher quota lets held jobs start after the next sync. The
cluster runs with ``AccountingStorageEnforce=…,safe`` as the README asks of a site
(without ``safe`` slurmctld kills running jobs of a blocked association;
docs/sacctmgr-notes.md §12).
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest

from cheeto_like.adapters.sacct import Sacct
from cheeto_like.adapters.sacctmgr import SAcctMgr
from cheeto_like.models.fields import utcnow
from cheeto_like.operations import slurm as slurm_ops
from cheeto_like.operations.group_membership import AddGroupMember
from cheeto_like.operations.quota import AdjustUsage, SetQuota
from cheeto_like.operations.usage import collect
from cheeto_like.sync.slurm.actual import SAcctMgrReader
from cheeto_like.sync.slurm.run import Report, sync_site
from cheeto_like.sync.slurm.why import explain
from tests.factories import AUTHOR, make_group, make_site, make_user
from tests.services.slurm_cluster import SlurmCluster, ensure_unix_user

CPU_HELD = "AssocGrpCPUMinutesLimit"
GPU_HELD = "AssocGrpGRESMinutes"


class Site:
    """Site ``farm`` with groups whose accounts run in partitions cpu and gpu."""

    def __init__(self, store, cluster: SlurmCluster) -> None:
        self.store, self.cluster = store, cluster
        self.runner = SAcctMgr(env=cluster.env, timeout=30)

    async def build(self, groups: dict[str, list[str]]) -> Site:
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
        await self.sync()
        return self

    async def sync(self) -> Report:
        report = await sync_site(self.store, "farm", reader=SAcctMgrReader(self.runner),
                                 runner=self.runner, apply=True, author=AUTHOR)
        assert report.ok, [i.model_dump() for i in report.items if i.outcome != "ok"]
        return report

    async def quiet(self) -> None:
        """A second sync plans nothing."""
        again = await self.sync()
        assert again.plan.batches == (), [b.commands for b in again.plan.batches]

    def submit(self, user: str, account: str, *args: str, wrap: str = "sleep 1") -> str:
        sub = self.cluster.submit(user, "-A", account, "-p", "cpu", *args, wrap=wrap)
        assert sub.accepted, sub
        assert sub.job_id is not None
        return sub.job_id

    def refused_or_held(self, user: str, account: str, *args: str, partition: str = "cpu",
                        reason: str = CPU_HELD) -> str | None:
        """Submit a job the quota blocks: slurmctld refuses it at submit with the reason
        (the association has Slurm usage already) or takes it and holds it with the
        reason (no usage yet). The held job's id, or None when refused."""
        sub = self.cluster.submit(user, "-A", account, "-p", partition, *args)
        if not sub.accepted:
            assert f"error: {reason}" in sub.stderr, sub
            return None
        assert sub.job_id is not None
        self.held(sub.job_id, reason)
        return sub.job_id

    def held(self, job_id: str, reason: str = CPU_HELD) -> None:
        state = self.cluster.wait_pending_reason(job_id)
        assert state.reason == reason, state
        assert self.cluster.stays_pending(job_id, 2.0).reason == reason

    def limits(self) -> dict[tuple[str, str, str], str]:
        """(account, user, partition) -> GrpTRESMins as slurmdbd has it (set rows only)."""
        out = self.cluster.sacctmgr("-i", "-P", "-n", "show", "assoc", "where", "cluster=farm",
                                    "WOPLimits", "format=account,user,partition,grptresmins"
                                    ).stdout
        return {(a, u, p): v for a, u, p, v in (ln.split("|") for ln in out.splitlines() if ln)
                if v}


def commands(report: Report) -> list[str]:
    return [str(c) for b in report.plan.batches for c in b.commands]


@pytest.fixture
async def site(db, slurm_cluster: SlurmCluster):
    made = Site(db, slurm_cluster)
    yield made
    slurm_cluster.cancel_all()  # no blocked job of this test pends into the next one


async def collect_until(site: Site, since, jobs: int, within: float = 30.0) -> None:
    """Collect from sacct until ``jobs`` finished jobs are in the ledger (``sacct -S``
    lists a job a moment after it ends)."""
    sacct = Sacct(env=site.cluster.env, timeout=60)
    deadline = time.monotonic() + within
    seen = 0
    while time.monotonic() < deadline:
        report = await collect(site.store, "farm", sacct=sacct, since=since)
        seen += report.counts.inserted
        if seen >= jobs:
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"only {seen} of {jobs} job(s) collected")


async def test_a_user_over_quota_is_held_others_run_running_jobs_live_on(site: Site, cli):
    await site.build({"lab": ["qtover", "qtother"]})
    cluster = site.cluster
    # 0.05 CPU-minutes (3 CPU-seconds); one 4-second job puts qtover past it
    await SetQuota.run(site.store, AUTHOR, site="farm", user="qtover", cpu_minutes=0.05)
    await site.quiet()  # nothing used yet: nothing to block
    since = utcnow() - timedelta(minutes=1)
    first = site.submit("qtover", "lab", wrap="sleep 4")
    assert cluster.wait_finished(first).state == "COMPLETED"
    running = site.submit("qtover", "lab", wrap="sleep 36")  # runs across the block
    cluster.wait_started(running)
    await collect_until(site, since, 1)

    report = await site.sync()
    assert commands(report) == [
        f"modify user where name=qtover account=lab partition={p} cluster=farm set "
        "GrpTRESMins=cpu=0" for p in ("cpu", "gpu")]
    assert any("user qtover is out of quota" in n for n in report.plan.notes)
    assert site.limits() == {("lab", "qtover", "cpu"): "cpu=0", ("lab", "qtover", "gpu"): "cpu=0"}
    await site.quiet()

    held = site.refused_or_held("qtover", "lab")
    why = await explain("farm", "qtover", runner=site.runner)  # slurmdbd's view
    assert why["slurmdbd"]["can_submit"] is False
    assert why["slurmdbd"]["associations"][0]["blocking_limits"] == [
        "GrpTRESMins=cpu=0 (out of quota)"]
    # the wanted view counts the quota block too (it said "can submit" beside slurmdbd's no)
    assert why["wanted"]["can_submit"] is False
    assert any("user qtover is out of quota" in b for b in why["wanted"]["quota_blocks"])
    assert "next sync clears it" not in why["summary"]
    offline = await explain("farm", "qtover", runner=None)
    assert offline["can_submit"] is False and "out of quota" in offline["summary"]
    r = await cli("ng", "slurm", "why", "-s", "farm", "-u", "qtover", "--offline")
    assert r.code == 0, r.stderr
    assert "qos=" in r.stderr and "['" not in r.stderr and "None" not in r.stderr
    other = site.submit("qtother", "lab")  # the other user of the same account runs
    assert cluster.wait_finished(other).state == "COMPLETED"
    # slurmctld checks running jobs against GrpTRESMins every 30 s; with `safe` it never
    # times them out, so the job that was running when the block came runs to its end
    assert cluster.wait_finished(running, timeout=60).state == "COMPLETED"
    assert held is None or cluster.job(held).state == "PENDING"
    assert site.refused_or_held("qtover", "lab") is None  # usage: refused at submit now

    r = await cli("ng", "quota", "adjust", "-s", "farm", "--user", "qtover", "--cpu", "-10h",
                  "--reason", "credit after the test job")
    assert r.code == 0, r.stderr
    report = await site.sync()
    assert commands(report) == [
        f"modify user where name=qtover account=lab partition={p} cluster=farm set "
        "GrpTRESMins=cpu=-1" for p in ("cpu", "gpu")]
    if held is not None:
        cluster.wait_started(held)
    assert cluster.wait_finished(site.submit("qtover", "lab")).state == "COMPLETED"
    assert site.limits() == {}
    await site.quiet()


async def test_an_account_over_quota_holds_every_member_until_its_quota_is_raised(site: Site):
    await site.build({"lab": ["qtann", "qtbob"], "other": ["qtcid"]})
    # jobs queued before the account runs out (held by the user, released afterwards)
    jobs = [site.submit(user, "lab", "--hold") for user in ("qtann", "qtbob")]
    await SetQuota.run(site.store, AUTHOR, site="farm", account="lab", cpu_minutes=1)
    await AdjustUsage.run(site.store, AUTHOR, site="farm", account="lab", cpu_minutes=5,
                          reason="debit: usage from the old system")
    report = await site.sync()
    assert commands(report) == [
        "modify account where name=lab cluster=farm set MaxJobs=-1 GrpJobs=-1 MaxSubmit=-1 "
        "MaxWall=-1 GrpTRESMins=cpu=0"]
    assert any("account lab is out of quota" in n for n in report.plan.notes)
    await site.quiet()
    site.cluster.scontrol("release", ",".join(jobs))
    for job in jobs:  # queued jobs wait with the reason; new ones are refused with it
        site.held(job)
    for user in ("qtann", "qtbob"):
        assert site.refused_or_held(user, "lab") is None
    assert site.cluster.wait_finished(site.submit("qtcid", "other")).state == "COMPLETED"

    # drift: the block removed by hand and a foreign limit on a member's row are repaired.
    # The queued jobs are held by hand meanwhile: without the block they would start
    # (and, on a slow machine, finish) before the repairing sync.
    site.cluster.scontrol("hold", ",".join(jobs))
    mgr = site.cluster.sacctmgr
    mgr("-i", "modify", "account", "where", "name=lab", "cluster=farm", "set",
             "GrpTRESMins=cpu=-1")
    mgr("-i", "modify", "user", "where", "name=qtann", "account=lab", "partition=cpu",
             "cluster=farm", "set", "GrpTRESMins=cpu=500,mem=100")
    report = await site.sync()
    assert sorted(commands(report)) == sorted([
        "modify account where name=lab cluster=farm set MaxJobs=-1 GrpJobs=-1 MaxSubmit=-1 "
        "MaxWall=-1 GrpTRESMins=cpu=0",
        "modify user where name=qtann account=lab partition=cpu cluster=farm set "
        "GrpTRESMins=cpu=-1,mem=-1"])
    assert site.limits() == {("lab", "", ""): "cpu=0"}
    await site.quiet()
    site.cluster.scontrol("release", ",".join(jobs))
    for job in jobs:  # the repaired block holds them again
        site.held(job)

    await SetQuota.run(site.store, AUTHOR, site="farm", account="lab", cpu_minutes=600)
    await site.sync()
    for job in jobs:
        site.cluster.wait_started(job)
    await site.quiet()


async def test_out_of_gpu_minutes_holds_gpu_jobs_only(site: Site):
    await site.build({"lab": ["qtgpu"]})
    await SetQuota.run(site.store, AUTHOR, site="farm", user="qtgpu", gpu_minutes=60)
    await AdjustUsage.run(site.store, AUTHOR, site="farm", user="qtgpu", gpu_minutes=60,
                          reason="debit")
    report = await site.sync()
    assert all(c.endswith("GrpTRESMins=gres/gpu=0") for c in commands(report))
    assert site.refused_or_held("qtgpu", "lab", "--gres=gpu:1", partition="gpu",
                                reason=GPU_HELD) is None
    assert site.cluster.wait_finished(site.submit("qtgpu", "lab")).state == "COMPLETED"
    await site.quiet()
