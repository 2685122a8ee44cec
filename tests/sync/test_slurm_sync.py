"""The Slurm reconciler against a real slurmdbd: converge, repair drift, respect the
deletion cap, keep clusters apart, and drop deactivated users.

Each test uses its own site, whose name is also its Slurm cluster, registered in the
session's slurmdbd; everything else (accounts, users, QOS) is named per test too,
because users and QOS are global in slurmdbd.
"""

from __future__ import annotations

import itertools
import os
import signal
from datetime import timedelta

import pytest

from cheeto_like.adapters.sacctmgr import SAcctMgr
from cheeto_like.errors import ExternalError, GuardTripped
from cheeto_like.models import SyncRun
from cheeto_like.models.fields import utcnow
from cheeto_like.operations import slurm as slurm_ops
from cheeto_like.operations.group_membership import AddGroupMember, AddGroupSlurmer
from cheeto_like.operations.user import AddUserAccess, SetUserStatus
from cheeto_like.sync.slurm.actual import SAcctMgrReader, actual_state
from cheeto_like.sync.slurm.desired import desired_state
from cheeto_like.sync.slurm.plan import plan
from cheeto_like.sync.slurm.run import sync_site
from tests.factories import AUTHOR, make_group, make_site, make_user
from tests.services.slurm import SlurmAccounting

_n = itertools.count(1)


@pytest.fixture
def slurm(slurm_accounting: SlurmAccounting) -> SlurmAccounting:
    return slurm_accounting


@pytest.fixture
def runner(slurm: SlurmAccounting) -> SAcctMgr:
    return SAcctMgr(env=slurm.env, timeout=30)


class Lab:
    """A site with one lab group whose account may run in partition `gpu` under a QOS."""

    def __init__(self, store, slurm: SlurmAccounting, runner: SAcctMgr) -> None:
        self.store, self.slurm, self.runner = store, slurm, runner
        k = next(_n)
        self.site = f"c{k}"
        self.lab = f"lab{k}"
        self.qos = f"lab{k}-gpu-qos"
        self.users: list[str] = []
        self.k = k

    def user(self, i: int) -> str:
        return f"u{self.k}x{i}"

    async def build(self, members: int = 3) -> Lab:
        await make_site(self.store, self.site)
        self.slurm.add_cluster(self.site)
        await make_group(self.store, self.lab)
        await slurm_ops.CreateSlurmPartition.run(self.store, AUTHOR, site=self.site, name="gpu")
        await slurm_ops.ProvisionSlurmAllocation.run(
            self.store, AUTHOR, site=self.site, group=self.lab, partition="gpu",
            group_limits={"cpus": 64, "gpus": 4, "mem": "512G"})
        for i in range(members):
            await self.add_member(i)
        return self

    async def add_member(self, i: int, *, access: tuple[str, ...] = ("login-ssh", "slurm")) -> str:
        name = self.user(i)
        await make_user(self.store, name, site=self.site, access=list(access))
        await AddGroupMember.run(self.store, AUTHOR, group=self.lab, user=name, site=self.site)
        self.users.append(name)
        return name

    async def sync(self, *, apply: bool = True, max_deletions: int | None = 50):
        return await sync_site(self.store, self.site, reader=SAcctMgrReader(self.runner),
                               runner=self.runner, apply=apply, max_deletions=max_deletions,
                               author=AUTHOR)

    def assoc_rows(self) -> set[tuple[str, ...]]:
        out = self.slurm.sacctmgr("-i", "-P", "-n", "show", "assoc", "where",
                                  f"cluster={self.site}",
                                  "format=account,user,partition,qos,defaultqos").stdout
        return {tuple(line.split("|")) for line in out.splitlines() if line.strip()}

    def user_rows(self) -> set[tuple[str, ...]]:
        return {r for r in self.assoc_rows() if r[1] and r[0] != "root"}

    def mgr(self, *args: str) -> None:
        result = self.slurm.sacctmgr("-i", *args, check=False)
        assert result.returncode == 0 and not result.stderr.strip(), result


@pytest.fixture
async def lab(db, slurm, runner) -> Lab:
    return await Lab(db, slurm, runner).build()


async def test_empty_cluster_converges_in_one_apply_then_plans_nothing(lab: Lab):
    report = await lab.sync()
    assert report.ok, [i.model_dump() for i in report.failed]
    assert lab.user_rows() == {(lab.lab, u, "gpu", lab.qos, lab.qos) for u in lab.users}
    # one process added all three users' associations
    adds = [i for i in report.items if i.batch == "add associations"]
    assert len(adds) == 1 and len(adds[0].targets) == 3
    second = await lab.sync()
    assert second.plan.is_empty, second.plan.as_dict()
    runs = await SyncRun.find({"site": lab.site}).sort(+SyncRun.started_at).to_list()
    assert [r.status for r in runs] == ["ok", "ok"]
    assert runs[0].counts["processes"] == report.plan.processes


async def test_a_dry_run_stores_its_plan_as_planned_items(lab: Lab):
    """The runs page's commands and drift read a run's items: a dry run keeps the
    commands an apply would run (before, it stored none: "0 command(s)")."""
    from cheeto_like.queries.sync_runs import run_items

    dry = await lab.sync(apply=False)
    assert lab.user_rows() == set()  # nothing ran
    items = await run_items(dry.run_id)
    commands = [str(c) for b in dry.plan.batches for c in b.commands]
    assert [i.command for i in items] == commands and commands
    assert {i.outcome for i in items} == {"planned"}
    run = await SyncRun.get(dry.run_id)
    assert run.apply is False and run.counts["processes"] == len(commands)


async def test_qos_limits_and_account_rows_match_the_store(lab: Lab):
    await lab.sync()
    qos = lab.slurm.sacctmgr("-i", "-P", "-n", "show", "qos", "where", f"name={lab.qos}",
                             "format=name,description,grptres,flags").stdout.strip()
    assert qos == f"{lab.qos}|cheeto:{lab.site}|cpu=64,gres/gpu=4,mem=512G|DenyOnLimit"
    await slurm_ops.EditSlurmAccount.run(lab.store, AUTHOR, site=lab.site, group=lab.lab,
                                         max_user_jobs=5, max_job_length="7-0")
    report = await lab.sync()
    assert [b.label for b in report.plan.batches] == ["modify accounts"]
    assert (lab.lab, "", "", "normal", "") in lab.assoc_rows()
    rows = lab.slurm.sacctmgr("-i", "-P", "-n", "show", "assoc", "where",
                              f"cluster={lab.site}", "user=", f"account={lab.lab}",
                              "format=maxjobs,maxwall").stdout.split()
    assert rows == ["5|7-00:00:00"]
    assert (await lab.sync()).plan.is_empty


async def test_drift_made_by_hand_is_repaired_in_one_apply(lab: Lab):
    await lab.sync()
    extra_qos = f"{lab.qos}-x"
    lab.mgr("remove", "user", "where", f"name={lab.users[0]}", f"account={lab.lab}",
            "partition=gpu", f"cluster={lab.site}")                       # deleted association
    lab.mgr("modify", "qos", "where", f"name={lab.qos}", "set", "GrpTRES=cpu=1,node=2")
    lab.mgr("add", "account", f"stray{lab.k}", f"cluster={lab.site}")       # should not exist
    lab.mgr("add", "user", lab.users[1], f"account=stray{lab.k}", "partition=cpu",
            f"cluster={lab.site}")                                           # stray association
    lab.mgr("modify", "user", "where", f"name={lab.users[1]}", f"cluster={lab.site}", "set",
            f"defaultaccount=stray{lab.k}")                                   # changed default
    lab.mgr("add", "qos", extra_qos, f"Description=cheeto:{lab.site}")      # stale owned QOS
    drifted = await lab.sync(apply=False)
    assert not drifted.plan.is_empty
    report = await lab.sync()
    assert report.ok, [i.model_dump() for i in report.failed]
    assert lab.user_rows() == {(lab.lab, u, "gpu", lab.qos, lab.qos) for u in lab.users}
    qos = lab.slurm.sacctmgr("-i", "-P", "-n", "show", "qos", "where", f"name={lab.qos}",
                             "format=grptres").stdout.strip()
    assert qos == "cpu=64,gres/gpu=4,mem=512G"
    names = lab.slurm.sacctmgr("-i", "-P", "-n", "show", "qos", "format=name").stdout.split()
    assert extra_qos not in names
    defaults = lab.slurm.sacctmgr("-i", "-P", "-n", "show", "user", "where",
                                  f"cluster={lab.site}", "format=user,defaultaccount").stdout
    assert f"{lab.users[1]}|{lab.lab}" in defaults.split()
    assert (await lab.sync()).plan.is_empty


async def test_guard_trip_leaves_slurmdbd_untouched(lab: Lab):
    await lab.sync()
    before = lab.assoc_rows()
    for user in lab.users:
        await SetUserStatus.run(lab.store, AUTHOR, name=user, status="inactive", reason="test")
    with pytest.raises(GuardTripped) as trip:
        await lab.sync(max_deletions=2)
    assert len(trip.value.would_delete) == 3
    assert lab.assoc_rows() == before
    run = await SyncRun.find({"site": lab.site}).sort(-SyncRun.started_at).first_or_none()
    assert run.status == "aborted" and len(run.extra["would_delete"]) == 3
    # a dry run over the cap just shows the plan
    dry = await lab.sync(apply=False, max_deletions=2)
    assert len(dry.plan.deletions) == 3


async def test_deactivated_user_loses_associations_on_next_sync(lab: Lab):
    await lab.sync()
    gone = lab.users[0]
    await SetUserStatus.run(lab.store, AUTHOR, name=gone, status="disabled", reason="left")
    report = await lab.sync()
    assert report.ok
    assert {r[1] for r in lab.user_rows()} == set(lab.users[1:])
    # offboarding users keep their access until the reaper deactivates them
    await SetUserStatus.run(lab.store, AUTHOR, name=lab.users[1], status="offboarding",
                            reason="leaving")
    assert (await lab.sync()).plan.is_empty


async def test_user_losing_every_association_with_two_partitions(lab: Lab):
    """A leaver with a default and a non-default row: deleted in two calls, no refusal."""
    await slurm_ops.CreateSlurmPartition.run(lab.store, AUTHOR, site=lab.site, name="cpu")
    await slurm_ops.CreateSlurmAssociation.run(lab.store, AUTHOR, site=lab.site, group=lab.lab,
                                               partition="cpu", qos=lab.qos)
    await lab.sync()
    await SetUserStatus.run(lab.store, AUTHOR, name=lab.users[2], status="inactive",
                            reason="gone")
    report = await lab.sync()
    assert report.ok, [i.model_dump() for i in report.failed]
    assert lab.users[2] not in {r[1] for r in lab.user_rows()}


async def test_two_clusters_in_one_slurmdbd_stay_isolated(db, slurm, runner):
    one = await Lab(db, slurm, runner).build(members=2)
    two = await Lab(db, slurm, runner).build(members=2)
    await one.sync()
    await two.sync()
    one_rows, two_rows = one.assoc_rows(), two.assoc_rows()
    await SetUserStatus.run(db, AUTHOR, name=one.users[0], status="inactive", reason="x")
    await slurm_ops.RemoveSlurmQOS.run(db, AUTHOR, site=one.site, name=one.qos, force=True)
    report = await one.sync()
    assert report.ok
    assert one.user_rows() == set()
    assert two.assoc_rows() == two_rows and one_rows != one.assoc_rows()
    assert (await two.sync()).plan.is_empty


async def test_other_clusters_qos_is_never_touched(db, slurm, runner):
    one = await Lab(db, slurm, runner).build(members=1)
    two = await Lab(db, slurm, runner).build(members=1)
    await two.sync()
    # site one wants a QOS with the same name as site two's
    await slurm_ops.CreateSlurmQOS.run(db, AUTHOR, site=one.site, name=two.qos, priority=7)
    report = await one.sync()
    assert any("managed by cluster" in c for c in report.plan.conflicts)
    prio = slurm.sacctmgr("-i", "-P", "-n", "show", "qos", "where", f"name={two.qos}",
                          "format=priority,description").stdout.strip()
    assert prio == f"0|cheeto:{two.site}"


async def test_several_qos_on_one_partition_and_coordinators(lab: Lab):
    hi = f"{lab.qos}-hi"
    await slurm_ops.CreateSlurmQOS.run(lab.store, AUTHOR, site=lab.site, name=hi, priority=100)
    await slurm_ops.CreateSlurmAssociation.run(lab.store, AUTHOR, site=lab.site, group=lab.lab,
                                               partition="gpu", qos=hi)
    await slurm_ops.EditSlurmAccount.run(lab.store, AUTHOR, site=lab.site, group=lab.lab,
                                         coordinators=[lab.users[0]])
    report = await lab.sync()
    assert report.ok, [i.model_dump() for i in report.failed]
    qos_list = ",".join(sorted([lab.qos, hi]))
    assert lab.user_rows() == {(lab.lab, u, "gpu", qos_list, lab.qos) for u in lab.users}
    coords = lab.slurm.sacctmgr("-i", "-P", "-n", "show", "account", lab.lab, "withcoord",
                                "format=account,coordinators").stdout.strip()
    assert coords == f"{lab.lab}|{lab.users[0]}"
    await slurm_ops.EditSlurmAccount.run(lab.store, AUTHOR, site=lab.site, group=lab.lab,
                                         coordinators=[])
    assert (await lab.sync()).ok
    coords = lab.slurm.sacctmgr("-i", "-P", "-n", "show", "account", lab.lab, "withcoord",
                                "format=account,coordinators").stdout.strip()
    assert coords == f"{lab.lab}|"
    assert (await lab.sync()).plan.is_empty


async def test_expired_allocation_does_not_count(lab: Lab):
    await slurm_ops.AddQOSAllocation.run(lab.store, AUTHOR, site=lab.site, qos=lab.qos,
                                         bucket="group_limits", tres={"cpus": 100},
                                         expires_at=utcnow() - timedelta(days=1))
    desired = await desired_state(lab.site)
    assert dict(desired.qos[lab.qos].group)["cpu"] == 64


async def test_slurmers_sticky_accounts_and_site_default(lab: Lab):
    other = await lab.add_member(9)
    slurmer = lab.user(10)
    await make_user(lab.store, slurmer, site=lab.site, access=["slurm"])
    await AddGroupSlurmer.run(lab.store, AUTHOR, group=lab.lab, user=slurmer, site=lab.site)
    common = f"common{lab.k}"
    await make_group(lab.store, common)
    await slurm_ops.ProvisionSlurmAllocation.run(lab.store, AUTHOR, site=lab.site,
                                                 group=common, partition="gpu")
    await slurm_ops.SetSiteDefaultSlurmAccount.run(lab.store, AUTHOR, site=lab.site,
                                                   group=common)
    no_slurm = lab.user(11)
    await make_user(lab.store, no_slurm, site=lab.site, access=["login-ssh"])
    report = await lab.sync()
    assert report.ok, [i.model_dump() for i in report.failed]
    users = {r[1] for r in lab.user_rows() if r[0] == common}
    assert users == {*lab.users, slurmer}
    assert no_slurm not in {r[1] for r in lab.user_rows()}
    defaults = lab.slurm.sacctmgr("-i", "-P", "-n", "show", "user", "where",
                                  f"cluster={lab.site}", "format=user,defaultaccount").stdout
    assert f"{other}|{common}" in defaults.split()
    await AddUserAccess.run(lab.store, AUTHOR, name=no_slurm, access=["slurm"])
    report = await lab.sync()
    # the site default is added first, so it becomes the new user's default by itself
    assert [b.label for b in report.plan.batches] == ["add associations"]
    defaults = lab.slurm.sacctmgr("-i", "-P", "-n", "show", "user", "where",
                                  f"cluster={lab.site}", "format=user,defaultaccount").stdout
    assert f"{no_slurm}|{common}" in defaults.split()
    assert (await lab.sync()).plan.is_empty


async def test_a_hanging_sacctmgr_is_killed_at_the_timeout(lab: Lab, slurm):
    desired = await desired_state(lab.site)
    actual = await actual_state(SAcctMgrReader(lab.runner), lab.site)
    planned = plan(desired, actual)
    assert not planned.is_empty
    from cheeto_like.sync.slurm.run import apply_plan

    os.kill(slurm.slurmdbd_pid, signal.SIGSTOP)
    try:
        items = await apply_plan(planned, SAcctMgr(env=slurm.env, timeout=1.0),
                                 max_deletions=None)
    finally:
        os.kill(slurm.slurmdbd_pid, signal.SIGCONT)
    assert items and items[0].outcome == "failed"
    assert "timed out" in items[0].detail
    assert (await lab.sync()).ok


async def test_unknown_cluster_and_missing_binary_are_clear_errors(db, slurm, runner):
    await make_site(db, "nocluster")
    with pytest.raises(ExternalError, match="does not know cluster 'nocluster'"):
        await sync_site(db, "nocluster", reader=SAcctMgrReader(runner), runner=runner)
    missing = SAcctMgr(binary="sacctmgr-does-not-exist", env=slurm.env)
    with pytest.raises(ExternalError, match="not found on PATH"):
        await sync_site(db, "nocluster", reader=SAcctMgrReader(missing), runner=missing)
