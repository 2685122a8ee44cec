"""``ng cluster status|stalled`` on the live one-node cluster: real jobs held by a real
limit and by a really drained node, judged from what sinfo and squeue say."""

from __future__ import annotations

import json

import pytest

from cheeto_like.adapters.sinfo import Sinfo
from cheeto_like.adapters.squeue import Squeue
from cheeto_like.operations.quota import AdjustUsage, SetQuota
from cheeto_like.sync.cluster_monitor import judge, read_snapshot
from tests.factories import AUTHOR, make_site, make_user
from tests.services.slurm_cluster import SlurmCluster, ensure_unix_user


@pytest.fixture
async def farm(db, slurm_cluster: SlurmCluster, monkeypatch):
    """Site ``farm`` on the live cluster; the CLI finds Slurm through the environment."""
    slurm_cluster.reset()
    for key, value in slurm_cluster.env.items():
        monkeypatch.setenv(key, value)
    await make_site(db, "farm")
    slurm_cluster.sacctmgr("-i", "add", "account", "mlab", "cluster=farm")
    for user in ("mon1", "mon2"):
        ensure_unix_user(user)
        slurm_cluster.sacctmgr("-i", "add", "user", user, "account=mlab", "cluster=farm")
    yield slurm_cluster
    slurm_cluster.cancel_all()


def _submit(cluster: SlurmCluster, user: str, *args: str) -> str:
    sub = cluster.submit(user, "-A", "mlab", *args, wrap="sleep 60")
    assert sub.accepted and sub.job_id, sub
    return sub.job_id


async def test_limit_held_job_is_stalled_with_its_fix(cli, db, farm):
    await make_user(db, "mon1", site="farm", access=["login-ssh", "slurm"])
    await SetQuota.run(db, AUTHOR, site="farm", user="mon1", cpu_minutes=10)
    await AdjustUsage.run(db, AUTHOR, site="farm", user="mon1", cpu_minutes=30,
                          reason="used up")
    farm.sacctmgr("-i", "modify", "user", "mon1", "set", "maxjobs=1")
    first = _submit(farm, "mon1", "-p", "cpu")
    farm.wait_started(first)
    held = _submit(farm, "mon1", "-p", "cpu")
    assert farm.wait_pending_reason(held).reason == "AssocMaxJobsLimit"

    r = await cli("ng", "cluster", "stalled", "-s", "farm", "--pending-over", "0s", "--json")
    assert r.code == 0, r.stderr
    data = json.loads(r.stdout)
    jobs = {j["job_id"]: j for j in data["jobs"]}
    assert first not in jobs  # running, not stalled
    job = jobs[held]
    assert job["kind"] == "limit" and job["user"] == "mon1" and job["account"] == "mlab"
    assert job["reason"] == "AssocMaxJobsLimit"
    assert "cheeto ng slurm why -s farm -u mon1" in job["fix"]
    assert "cheeto ng quota show -s farm -u mon1" in job["fix"]
    assert "the user mon1 is over its cpu quota" in job["fix"]
    assert job["quota"] == {"user": {"name": "mon1", "cpu_percent": 300.0, "gpu_percent": None,
                                     "over": ["cpu"]}}
    assert data["nodes"] == []

    # younger than the threshold: not (yet) stalled
    r = await cli("ng", "cluster", "stalled", "-s", "farm", "--pending-over", "24h", "--json")
    assert r.code == 0 and json.loads(r.stdout)["jobs"] == []

    r = await cli("ng", "cluster", "status", "-s", "farm", "--json")
    assert r.code == 0, r.stderr
    status = json.loads(r.stdout)
    assert status["cluster"] == "farm"
    assert status["totals"]["running_jobs"] == 1 and status["totals"]["pending_jobs"] == 1
    assert status["totals"]["gpus"] == 2 and status["totals"]["gpus_in_use"] == 0
    parts = {p["partition"]: p for p in status["partitions"]}
    assert set(parts) == {"cpu", "gpu"} and parts["cpu"]["default"] is True
    assert parts["cpu"]["running_jobs"] == 1 and parts["cpu"]["pending_jobs"] == 1

    r = await cli("ng", "cluster", "stalled", "-s", "farm", "--pending-over", "0s")
    assert r.code == 0 and held in r.stderr and "AssocMaxJobsLimit" in r.stderr


async def test_gpus_in_use_come_from_typed_gres(cli, farm):
    job = _submit(farm, "mon2", "-p", "gpu", "--gres=gpu:a100:1")
    farm.wait_started(job)
    r = await cli("ng", "cluster", "status", "-s", "farm", "--json")
    status = json.loads(r.stdout)
    assert status["totals"]["gpus_in_use"] == 1
    assert {p["partition"]: p["gpus_in_use"] for p in status["partitions"]}["gpu"] == 1


async def test_job_on_a_drained_node_is_stalled_with_the_node(cli, farm):
    farm.scontrol("update", "nodename=localhost", "state=drain", "reason=test")
    try:
        job = _submit(farm, "mon2", "-p", "gpu", "--gres=gpu:a100:1")
        reason = farm.wait_pending_reason(job).reason
        assert "ReqNodeNotAvail" in reason or "DRAINED" in reason, reason

        r = await cli("ng", "cluster", "stalled", "-s", "farm", "--pending-over", "0s",
                      "--down-over", "0s", "--json")
        assert r.code == 0, r.stderr
        data = json.loads(r.stdout)
        stalled = {j["job_id"]: j for j in data["jobs"]}[job]
        assert stalled["kind"] == "nodes" and stalled["nodes"] == ["localhost"]
        assert "state=resume" in stalled["fix"]
        node = {n["node"]: n for n in data["nodes"]}["localhost"]
        assert node["state"].startswith("drain") and node["reason"] == "test"
        assert node["since"] is not None and node["by"] == "root"
        assert node["partitions"] == ["cpu", "gpu"]

        # a node drained a moment ago is not "down too long" at the default hour
        r = await cli("ng", "cluster", "stalled", "-s", "farm", "--pending-over", "0s",
                      "--json")
        assert json.loads(r.stdout)["nodes"] == []

        r = await cli("ng", "cluster", "status", "-s", "farm", "--json")
        assert json.loads(r.stdout)["totals"]["nodes_unavailable"] == 1
    finally:
        farm.scontrol("update", "nodename=localhost", "state=resume")


async def test_snapshot_judges_nothing_on_a_quiet_cluster(farm):
    snap = await read_snapshot("farm", sinfo=Sinfo(), squeue=Squeue())
    from datetime import timedelta

    stalled = judge(snap, pending_over=timedelta(0), down_over=timedelta(0))
    assert stalled.jobs == [] and stalled.nodes == []
    assert {r.partition for r in snap.nodes} == {"cpu", "gpu"}


async def test_bad_threshold_and_missing_program_are_one_line(cli, farm):
    r = await cli("ng", "cluster", "stalled", "-s", "farm", "--pending-over", "soon")
    assert r.code == 2 and "duration" in r.stderr and "Traceback" not in r.stderr
    r = await cli("ng", "cluster", "status", "-s", "farm", "--sinfo", "/nonexistent/sinfo")
    assert r.code == 1 and "sinfo not found" in r.stderr
    r = await cli("ng", "cluster", "status", "-s", "nowhere")
    assert r.code == 2


async def test_a_dependency_that_can_never_be_met_is_stalled(cli, farm):
    failed = farm.submit("mon2", "-A", "mlab", "-p", "cpu", wrap="false").job_id
    farm.wait_finished(failed)
    waiting = _submit(farm, "mon2", "-p", "cpu", f"--dependency=afterok:{failed}")
    assert farm.wait_pending_reason(waiting).reason == "DependencyNeverSatisfied"
    r = await cli("ng", "cluster", "stalled", "-s", "farm", "--pending-over", "0s", "--json")
    [job] = [j for j in json.loads(r.stdout)["jobs"] if j["job_id"] == waiting]
    assert job["kind"] == "dependency" and f"scancel {waiting}" in job["fix"]


async def test_a_qos_limit_holds_a_job_and_it_is_stalled_with_its_fix(cli, farm):
    """A QOS limit (not an association's): ``MaxJobsPerUser=1`` on the job's QOS."""
    farm.sacctmgr("-i", "add", "qos", "onejob", "maxjobsperuser=1")
    farm.sacctmgr("-i", "modify", "user", "mon2", "set", "qos=normal,onejob")
    first = _submit(farm, "mon2", "-p", "cpu", "--qos", "onejob")
    farm.wait_started(first)
    held = _submit(farm, "mon2", "-p", "cpu", "--qos", "onejob")
    assert farm.wait_pending_reason(held).reason == "QOSMaxJobsPerUserLimit"

    r = await cli("ng", "cluster", "stalled", "-s", "farm", "--pending-over", "0s", "--json")
    assert r.code == 0, r.stderr
    jobs = {j["job_id"]: j for j in json.loads(r.stdout)["jobs"]}
    assert first not in jobs
    job = jobs[held]
    assert job["kind"] == "limit" and job["qos"] == "onejob"
    assert job["reason"] == "QOSMaxJobsPerUserLimit"
    assert "held by QOSMaxJobsPerUserLimit (account mlab, QOS onejob)" in job["fix"]
    assert "cheeto ng slurm why -s farm -u mon2" in job["fix"]


def _pending_on_drained_node(cluster: SlurmCluster, *args: str) -> str:
    """A job that cannot start yet (the node is drained), so its association or QOS can
    be taken away while it waits; the node is resumed before returning."""
    cluster.scontrol("update", "nodename=localhost", "state=drain", "reason=hold-for-test")
    try:
        job = cluster.submit("mon2", *args, wrap="sleep 60").job_id
        assert job, "sbatch refused the job"
        cluster.wait_pending_reason(job)
    finally:
        cluster.scontrol("update", "nodename=localhost", "state=resume")
    return job


async def test_a_job_whose_association_was_removed_is_stalled_as_invalid_account(cli, farm):
    """Removing a user's association under a pending job (sacctmgr allows it; slurmctld
    logs "held 1 jobs") leaves the job pending with ``InvalidAccount`` for good."""
    farm.sacctmgr("-i", "add", "account", "oldlab", "cluster=farm")
    farm.sacctmgr("-i", "add", "user", "mon2", "account=oldlab", "cluster=farm")
    job = _pending_on_drained_node(farm, "-A", "oldlab", "-p", "cpu")
    farm.sacctmgr("-i", "remove", "user", "mon2", "account=oldlab", "cluster=farm")
    farm.wait_job(job, "PENDING")
    state = farm.job(job)
    for _ in range(100):  # the node is back: the scheduler re-judges the job
        if state.reason == "InvalidAccount":
            break
        farm.stays_pending(job, 0.2)
        state = farm.job(job)
    assert state.reason == "InvalidAccount", state

    r = await cli("ng", "cluster", "stalled", "-s", "farm", "--pending-over", "0s", "--json")
    assert r.code == 0, r.stderr
    stalled = {j["job_id"]: j for j in json.loads(r.stdout)["jobs"]}[job]
    assert stalled["kind"] == "invalid" and stalled["account"] == "oldlab"
    assert stalled["reason"] == "InvalidAccount"
    assert "does not let mon2 use account oldlab" in stalled["fix"]
    assert "cheeto ng slurm sync -s farm --apply" in stalled["fix"]


async def test_a_job_whose_qos_was_taken_away_is_stalled_as_invalid_qos(cli, farm):
    farm.sacctmgr("-i", "add", "qos", "gone")
    farm.sacctmgr("-i", "modify", "user", "mon2", "set", "qos=normal,gone")
    job = _pending_on_drained_node(farm, "-A", "mlab", "-p", "cpu", "--qos", "gone")
    farm.sacctmgr("-i", "modify", "user", "mon2", "set", "qos-=gone")
    state = farm.job(job)
    for _ in range(100):
        if state.reason == "InvalidQOS":
            break
        farm.stays_pending(job, 0.2)
        state = farm.job(job)
    assert state.reason == "InvalidQOS", state

    r = await cli("ng", "cluster", "stalled", "-s", "farm", "--pending-over", "0s", "--json")
    assert r.code == 0, r.stderr
    stalled = {j["job_id"]: j for j in json.loads(r.stdout)["jobs"]}[job]
    assert stalled["kind"] == "invalid" and stalled["qos"] == "gone"
    assert "does not let mon2 use account mlab / QOS gone" in stalled["fix"]


async def test_user_and_admin_held_jobs_are_stalled_with_who_holds_them(cli, farm):
    """``sbatch --hold`` is the owner's hold (JobHeldUser); ``scontrol hold`` as root an
    administrator's (JobHeldAdmin): both are listed with the release command."""
    mine = _submit(farm, "mon1", "-p", "cpu", "--hold")
    theirs = _submit(farm, "mon2", "-p", "cpu", "--begin=now+1hour")
    farm.scontrol("hold", theirs)
    assert farm.wait_pending_reason(mine).reason == "JobHeldUser"
    assert farm.wait_pending_reason(theirs).reason == "JobHeldAdmin"

    r = await cli("ng", "cluster", "stalled", "-s", "farm", "--pending-over", "0s", "--json")
    assert r.code == 0, r.stderr
    jobs = {j["job_id"]: j for j in json.loads(r.stdout)["jobs"]}
    assert jobs[mine]["kind"] == "held" and jobs[mine]["held_by"] == "user mon1"
    assert f"scontrol release {mine}" in jobs[mine]["fix"]
    assert jobs[theirs]["kind"] == "held" and jobs[theirs]["held_by"] == "admin"
    assert f"scontrol release {theirs}" in jobs[theirs]["fix"]
    assert "administrator" in jobs[theirs]["fix"]

    r = await cli("ng", "cluster", "stalled", "-s", "farm", "--pending-over", "0s")
    assert r.code == 0 and "user mon1" in r.stderr and f"scontrol release {mine}" in r.stderr

    farm.scontrol("release", mine)  # released: no longer stalled (it may run or wait)
    r = await cli("ng", "cluster", "stalled", "-s", "farm", "--pending-over", "0s", "--json")
    held = [j for j in json.loads(r.stdout)["jobs"] if j["kind"] == "held"]
    assert [j["job_id"] for j in held] == [theirs]
