"""The Slurm sync against a live one-node cluster: real jobs as real unix users.

Each test asserts on what Slurm does (a job runs, is refused at submit, or pends with
a reason), not only on sacctmgr rows. The session shares one cluster (`slurm_cluster`,
cluster `farm`); every test starts from `reset()` and a fresh database with a site
`farm`, one lab group whose account runs in partition `cpu` under `lab-cpu-qos`.
"""

from __future__ import annotations

import itertools
import os
import subprocess

import pytest

from cheeto_like.adapters.sacctmgr import SAcctMgr
from cheeto_like.adapters.scontrol import SControl
from cheeto_like.operations import slurm as slurm_ops
from cheeto_like.operations.group import RenameGroup
from cheeto_like.operations.group_membership import AddGroupMember, RemoveGroupMember
from cheeto_like.operations.user import RenameUser
from cheeto_like.sync.slurm.actual import Policy, SAcctMgrReader
from cheeto_like.sync.slurm.run import Report, sync_site
from cheeto_like.sync.slurm.why import explain
from tests.factories import AUTHOR, make_group, make_site, make_user
from tests.services.slurm_cluster import SlurmCluster, ensure_unix_user, rename_unix_user

QOS = "lab-cpu-qos"


class Live:
    """A site on the live cluster; see the module docstring."""

    def __init__(self, store, cluster: SlurmCluster) -> None:
        self.store, self.cluster = store, cluster
        self.runner = SAcctMgr(env=cluster.env, timeout=30)

    async def build(self, *members: str) -> Live:
        self.cluster.reset()
        await make_site(self.store, "farm")
        await make_group(self.store, "lab")
        await slurm_ops.CreateSlurmPartition.run(self.store, AUTHOR, site="farm", name="cpu")
        await slurm_ops.ProvisionSlurmAllocation.run(
            self.store, AUTHOR, site="farm", group="lab", partition="cpu",
            group_limits={"cpus": 8})
        for name in members:
            await self.member(name)
        return self

    async def member(self, name: str) -> None:
        ensure_unix_user(name)
        await make_user(self.store, name, site="farm", access=["login-ssh", "slurm"])
        await AddGroupMember.run(self.store, AUTHOR, group="lab", user=name, site="farm")

    async def sync(self, *, apply: bool = True, policy: Policy | None = None) -> Report:
        report = await sync_site(self.store, "farm", reader=SAcctMgrReader(self.runner),
                                 runner=self.runner, apply=apply, author=AUTHOR,
                                 policy=policy)
        if apply:
            assert report.ok, [i.model_dump() for i in report.items if i.outcome != "ok"]
        return report

    def mgr(self, *args: str) -> None:
        result = self.cluster.sacctmgr("-i", *args, check=False)
        assert result.returncode == 0 and not result.stderr.strip(), result

    def submit(self, user: str, *args: str, wrap: str = "sleep 1") -> str:
        sub = self.cluster.submit(user, "-p", "cpu", *args, wrap=wrap)
        assert sub.accepted, sub
        assert sub.job_id is not None
        return sub.job_id


@pytest.fixture
async def live(db, slurm_cluster: SlurmCluster) -> Live:
    return Live(db, slurm_cluster)


def _labels(report: Report) -> list[str]:
    return [b.label for b in report.plan.batches]


# -- 1. rename ---------------------------------------------------------------------------


_pairs = itertools.count(1)


@pytest.fixture(scope="session")
def _renamed_users():
    """Names the rename tests made; deleted only when the session ends, so no later test
    in this session gets a recycled uid (slurmctld keys users by uid)."""
    made: list[str] = []
    yield made
    for name in made:
        subprocess.run(["userdel", name], capture_output=True, check=False)
        subprocess.run(["groupdel", name], capture_output=True, check=False)


@pytest.fixture
def renamed_unix_user(_renamed_users: list[str]):
    """(old, new) unix user names unique to this test and session: `old` exists, `new`
    does not.

    Unique because /etc/passwd is shared by concurrent sessions, and because slurmctld
    keys users by uid: a uid renamed in one test and added under its old name in the
    next is exactly the add-new/delete-old case that leaves DefAccount=(null)."""
    tag = f"{os.getpid() % 100000}x{next(_pairs)}"
    old, new = f"lvo{tag}", f"lvn{tag}"
    ensure_unix_user(old)
    _renamed_users.extend([new, old])
    return old, new


async def test_a_renamed_user_keeps_their_default_account_in_slurmctld(live: Live,
                                                                       renamed_unix_user):
    old, new = renamed_unix_user
    await live.build(old)
    await live.sync()
    first = live.submit(old)  # no -A: the default account
    assert live.cluster.wait_finished(first).account == "lab"

    await RenameUser.run(live.store, AUTHOR, name=old, new_name=new)
    rename_unix_user(old, new)
    report = await live.sync()
    assert _labels(report) == ["rename users"]  # not add-new + delete-old
    assert [str(c) for c in report.plan.batches[0].commands] == [
        f"modify user where name={old} set newname={new}"]

    job = live.submit(new)  # still no -A: slurmctld must know the default account
    state = live.cluster.wait_started(job)
    assert state.account == "lab"
    assert "DefAssoc=Yes" in live.cluster.assoc_mgr(new)
    users = live.cluster.scontrol("show", "assoc_mgr", f"users={new}", "flags=users")
    assert "DefAccount=lab" in users  # add-new + delete-old leaves DefAccount=(null) here
    assert (await live.sync(apply=False)).plan.is_empty
    live.cluster.wait_finished(job)  # usermod refuses to rename a user with processes


def test_slurm_cannot_rename_an_account(slurm_cluster: SlurmCluster):
    """So a group rename adds the new account and deletes the old (sacctmgr-notes §11)."""
    slurm_cluster.reset()
    slurm_cluster.sacctmgr("-i", "add", "account", "lvold", "cluster=farm")
    result = slurm_cluster.sacctmgr("-i", "modify", "account", "where", "name=lvold", "set",
                                    "name=lvnew", check=False)
    assert result.returncode == 1 and "Can't modify the name of an account" in result.stderr


# -- 2. limits set by hand ---------------------------------------------------------------


async def test_a_hand_set_maxjobs_on_a_user_association_is_cleared(live: Live):
    await live.build("lvbob")
    await live.sync()
    live.mgr("modify", "user", "where", "name=lvbob", "account=lab", "cluster=farm", "set",
             "MaxJobs=0")
    job = live.submit("lvbob", "-A", "lab")
    held = live.cluster.wait_pending_reason(job)
    assert held.reason == "AssocMaxJobsLimit"

    dry = await live.sync(apply=False)
    assert [str(c) for b in dry.plan.batches for c in b.commands] == [
        "modify user where name=lvbob account=lab partition=cpu cluster=farm set MaxJobs=-1"]
    await live.sync()
    assert live.cluster.wait_started(job).state in {"RUNNING", "COMPLETING", "COMPLETED"}
    assert (await live.sync(apply=False)).plan.is_empty


async def test_hand_set_limits_on_an_owned_qos_are_cleared(live: Live):
    await live.build("lvbob")
    await live.sync()
    live.mgr("modify", "qos", "where", f"name={QOS}", "set", "MaxWall=1", "GrpJobs=1")
    refused = live.cluster.submit("lvbob", "-p", "cpu", "-A", "lab", "--time=5")
    assert not refused.accepted and "QOSMaxWallDurationPerJobLimit" in refused.stderr
    running = live.submit("lvbob", "-A", "lab", wrap="sleep 30")
    live.cluster.wait_started(running)
    second = live.submit("lvbob", "-A", "lab")
    assert live.cluster.wait_pending_reason(second).reason == "QOSGrpJobsLimit"

    dry = await live.sync(apply=False)
    assert [str(c) for b in dry.plan.batches for c in b.commands] == [
        f"modify qos where name={QOS} set GrpJobs=-1 MaxWall=-1"]
    await live.sync()
    assert live.cluster.wait_started(second).state in {"RUNNING", "COMPLETING", "COMPLETED"}
    assert live.cluster.submit("lvbob", "-p", "cpu", "-A", "lab", "--time=5").accepted
    assert (await live.sync(apply=False)).plan.is_empty
    live.cluster.cancel_all()


# -- 3. associations under root ----------------------------------------------------------


async def test_a_hand_made_user_under_root_is_removed(live: Live):
    await live.build("lvbob")
    await live.sync()
    ensure_unix_user("lvdave")  # not in the store at all
    live.mgr("add", "user", "lvdave", "account=root", "cluster=farm")
    job = live.submit("lvdave", "-A", "root")
    live.cluster.wait_finished(job)  # dave can run jobs

    report = await live.sync()
    assert report.plan.deletions == ["lvdave@root/"]
    refused = live.cluster.submit("lvdave", "-p", "cpu", "-A", "root")
    assert not refused.accepted and "Invalid account" in refused.stderr
    # root itself (slurm.root_users) is left alone
    assert "root|root" in live.cluster.sacctmgr(
        "-i", "-P", "-n", "show", "assoc", "where", "cluster=farm", "account=root",
        "format=account,user").stdout


async def test_root_users_from_the_config_are_left_alone(live: Live):
    await live.build()
    await live.sync()
    ensure_unix_user("lvadmin")
    live.mgr("add", "user", "lvadmin", "account=root", "cluster=farm")
    policy = Policy.of(["root", "lvadmin"], [])
    assert (await live.sync(apply=False, policy=policy)).plan.is_empty
    live.cluster.wait_finished(live.submit("lvadmin", "-A", "root"))


# -- 7. unmanaged accounts, running jobs -------------------------------------------------


async def test_unmanaged_accounts_are_left_alone_and_others_are_deleted(live: Live):
    await live.build("lvbob")
    live.mgr("add", "account", "lvext", "cluster=farm")
    live.mgr("add", "user", "lvbob", "account=lvext", "cluster=farm")
    policy = Policy.of(["root"], ["lvext"])
    report = await live.sync(policy=policy)
    assert report.plan.deletions == []
    live.cluster.wait_finished(live.submit("lvbob", "-A", "lvext"))
    report = await live.sync()  # without the list: cheeto owns every non-root account
    assert sorted(report.plan.deletions) == ["account lvext", "lvbob@lvext/"]
    refused = live.cluster.submit("lvbob", "-p", "cpu", "-A", "lvext")
    assert not refused.accepted


# -- 4. why reads what Slurm holds -------------------------------------------------------


async def _why(live: Live, user: str) -> dict:
    return await explain("farm", user, runner=live.runner,
                         scontrol=SControl(env=live.cluster.env, timeout=30))


async def test_why_judges_from_what_slurm_holds_not_from_the_wanted_state(live: Live):
    await live.build("lvbob")
    await live.sync()
    await RemoveGroupMember.run(live.store, AUTHOR, group="lab", user="lvbob", site="farm")
    why = await _why(live, "lvbob")  # no sync yet: Slurm still lets him run
    assert why["wanted"]["can_submit"] is False
    assert why["slurmdbd"]["can_submit"] is True
    assert why["slurmctld"] == {"checked": True, "can_submit": True, "default_account": "lab",
                                "associations": [{"account": "lab", "partition": "cpu",
                                                  "default": True, "blocking_limits": []}]}
    assert why["can_submit"] is True and why["verdict_from"] == "slurmctld"
    assert "the next sync removes it" in why["summary"]
    live.cluster.wait_started(live.submit("lvbob", "-A", "lab"))  # and indeed his job runs

    live.cluster.cancel_all()
    await live.sync()
    why = await _why(live, "lvbob")
    assert why["can_submit"] is False and why["slurmctld"]["associations"] == []
    assert not live.cluster.submit("lvbob", "-p", "cpu", "-A", "lab").accepted


async def test_why_sees_a_limit_of_zero_and_names_a_renamed_user(live: Live,
                                                                 renamed_unix_user):
    old, new = renamed_unix_user
    await live.build(old)
    await live.sync()
    live.mgr("modify", "user", "where", f"name={old}", "account=lab", "cluster=farm", "set",
             "MaxSubmitJobs=0")
    why = await _why(live, old)
    assert why["wanted"]["can_submit"] is True and why["can_submit"] is False
    assert why["slurmctld"]["associations"][0]["blocking_limits"] == ["MaxSubmitJobs"]
    assert "limit of 0" in why["summary"]
    assert not live.cluster.submit(old, "-p", "cpu", "-A", "lab").accepted

    await RenameUser.run(live.store, AUTHOR, name=old, new_name=new)
    rename_unix_user(old, new)
    await live.sync()
    why = await _why(live, old)  # asked by the old name
    assert why["user"] == new and why["renamed"] == {"asked_for": old, "now": new}
    assert why["can_submit"] is True and why["slurmctld"]["default_account"] == "lab"
    live.cluster.wait_finished(live.submit(new))


async def test_a_removal_refused_for_running_jobs_is_pending_then_done(live: Live):
    await live.build("lvbob", "lvcarl")
    await live.sync()
    job = live.submit("lvbob", "-A", "lab", wrap="sleep 60")
    live.cluster.wait_started(job)
    await RemoveGroupMember.run(live.store, AUTHOR, group="lab", user="lvbob", site="farm")
    report = await live.sync()  # ok: a pending item does not fail the run
    (item,) = [i for i in report.items if i.batch.startswith("delete")]
    assert item.outcome == "pending" and "Job(s) active" in item.detail
    assert report.failed == [] and report.pending == [item]
    assert live.cluster.job(job).state == "RUNNING"  # nothing was cut short

    live.cluster.cancel_all()
    live.cluster.wait_finished(job)
    report = await live.sync()
    assert report.plan.deletions == ["lvbob@lab/cpu"] and report.pending == []
    assert not live.cluster.submit("lvbob", "-p", "cpu", "-A", "lab").accepted


async def test_a_group_rename_moves_account_qos_and_coordinators(live: Live):
    await live.build("lvbob")
    await slurm_ops.EditSlurmAccount.run(live.store, AUTHOR, site="farm", group="lab",
                                         coordinators=["lvbob"])
    await live.sync()
    await RenameGroup.run(live.store, AUTHOR, name="lab", new_name="lvbiolab")
    report = await live.sync()
    assert report.pending == []
    mgr = live.cluster.sacctmgr
    accounts = mgr("-i", "-P", "-n", "show", "assoc", "where", "cluster=farm",
                   "format=account,user,qos").stdout.split()
    assert "lvbiolab|lvbob|lvbiolab-cpu-qos" in accounts
    assert not any(row.startswith("lab|") for row in accounts)
    qos = mgr("-i", "-P", "-n", "show", "qos", "format=name").stdout.split()
    assert "lvbiolab-cpu-qos" in qos and QOS not in qos
    coord = mgr("-i", "-P", "-n", "show", "account", "withcoord",
                "format=account,coordinators").stdout.split()
    assert "lvbiolab|lvbob" in coord
    job = live.submit("lvbob")  # the new account is bob's default now
    assert live.cluster.wait_started(job).account == "lvbiolab"
    assert (await live.sync(apply=False)).plan.is_empty
    live.cluster.wait_finished(job)
