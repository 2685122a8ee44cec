"""Usage collection against the live one-node cluster: real jobs (plain, array, typed GPU)
run as a real unix user, then the real ``sacct`` is read into the ledger.

Shows: the collected totals equal an independent sum over ``sacct`` for the same window;
a second collect writes 0 records; the typed GPU factor in force at the job's start
applies; the CLI (``ng usage collect``) and the watermark; ``ng quota show`` reads the
running jobs' reservation from the real ``squeue``.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from cheeto_like.adapters.sacct import Sacct
from cheeto_like.adapters.squeue import Squeue
from cheeto_like.models import UsageCursor, UsageRecord
from cheeto_like.models.fields import utcnow
from cheeto_like.operations.quota import SetGpuFactor
from cheeto_like.operations.usage import collect
from cheeto_like.queries.quota import quota_status, reservations
from cheeto_like.queries.usage import factor_table
from tests.factories import AUTHOR, make_site, make_user
from tests.services.fixtures_people import mail_config, mailbox, smtp_server  # noqa: F401
from tests.services.slurm_cluster import SlurmCluster, ensure_unix_user

USER = "usagealice"


@pytest.fixture
async def farm(db, slurm_cluster: SlurmCluster):
    slurm_cluster.reset()
    ensure_unix_user(USER)
    slurm_cluster.sacctmgr("-i", "add", "account", "lab", "cluster=farm")
    slurm_cluster.sacctmgr("-i", "add", "user", USER, "account=lab", "cluster=farm")
    await make_site(db, "farm")
    return db


def run_jobs(cluster: SlurmCluster) -> list[str]:
    """A plain 2-CPU job, a 2-task array and a job on one a100; all run to the end."""
    ids = []
    for args in (["-p", "cpu", "-c", "2"], ["-p", "cpu", "--array=1-2"],
                 ["-p", "gpu", "--gres=gpu:a100:1"]):
        sub = cluster.submit(USER, "-A", "lab", *args, wrap="sleep 2")
        assert sub.accepted, sub
        ids.append(sub.job_id)
    for job_id in ids:
        cluster.wait_finished(job_id, timeout=60)
    return ids


def independent_totals(cluster: SlurmCluster, since: str, until: str) -> tuple[int, float]:
    """Jobs and CPU-minutes summed straight from sacct's own output (cpu= x ElapsedRaw)."""
    out = cluster.sacct("-X", "-P", "-n", "-a", "--clusters=farm", "-S", since, "-E", until,
                        "--state=CD,F,TO,CA,NF,OOM,PR,DL,BF",
                        "--format=JobID,ElapsedRaw,AllocTRES")
    jobs, cpu_seconds = 0, 0
    for line in filter(None, out.splitlines()):
        _, elapsed, tres = line.split("|")
        cpus = dict(t.split("=", 1) for t in tres.split(",") if "=" in t).get("cpu", "0")
        jobs += 1
        cpu_seconds += int(cpus) * int(elapsed)
    return jobs, cpu_seconds / 60


def wait_in_sacct(cluster: SlurmCluster, job_ids: list[str], timeout: float = 30.0) -> None:
    """slurmctld hands finished jobs to slurmdbd a moment later."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = cluster.sacct("-X", "-P", "-n", "-a", "-j", ",".join(job_ids),
                            "--format=JobID,State")
        done = [ln for ln in out.splitlines() if ln.split("|")[1:2] == ["COMPLETED"]]
        if len(done) >= len(job_ids) + 1:  # the array has two tasks
            return
        time.sleep(0.5)
    raise AssertionError(f"sacct did not show {job_ids} as completed: {out}")


async def test_collect_equals_sacct_and_a_second_collect_writes_nothing(
        farm, slurm_cluster):
    cluster = slurm_cluster
    await SetGpuFactor.run(farm, AUTHOR, site="farm", gpu_type="a100", factor=2.5)
    # not before the farm fixture's reset(): jobs of earlier live modules are in sacct too
    since = max(utcnow() - timedelta(minutes=1), cluster.quiet_since)
    ids = run_jobs(cluster)
    wait_in_sacct(cluster, ids)
    until = utcnow() + timedelta(seconds=5)
    sacct = Sacct(env=cluster.env, timeout=60)

    report = await collect(farm, "farm", sacct=sacct, since=since, until=until)
    assert report.skipped == () and report.counts.inserted == 4  # 1 + 2 array tasks + 1

    fmt = "%Y-%m-%dT%H:%M:%S"
    jobs, cpu_minutes = independent_totals(cluster, since.strftime(fmt), until.strftime(fmt))
    rows = await UsageRecord.find({"site": "farm"}).to_list()
    assert len(rows) == jobs == 4
    assert sum(r.cpu_minutes for r in rows) == pytest.approx(cpu_minutes, abs=0.01)
    arrays = sorted(r.job_id for r in rows if "_" in r.job_id)
    assert len(arrays) == 2 and arrays[0].endswith("_1") and arrays[1].endswith("_2")
    assert {r.user for r in rows} == {USER} and {r.account for r in rows} == {"lab"}

    [gpu_job] = [r for r in rows if r.gpus]
    assert [(g.type, g.count, g.factor) for g in gpu_job.gpus] == [("a100", 1, 2.5)]
    assert gpu_job.gpu_minutes == pytest.approx(gpu_job.elapsed_s / 60 * 2.5, abs=0.01)
    assert gpu_job.partition == "gpu"

    again = await collect(farm, "farm", sacct=sacct, since=since, until=until)
    assert (again.counts.inserted, again.counts.replaced, again.counts.unchanged) == (0, 0, 4)
    assert await UsageRecord.count() == 4


async def test_cli_collect_moves_the_watermark_and_quota_show_reads_squeue(
        farm, slurm_cluster, cli, monkeypatch):
    cluster = slurm_cluster
    for key, value in cluster.env.items():
        monkeypatch.setenv(key, value)
    ids = run_jobs(cluster)
    wait_in_sacct(cluster, ids)
    r = await cli("ng", "usage", "collect", "-s", "farm", "--since", "-10min", "--json")
    assert r.code == 0, r.stderr
    assert r.json()["inserted"] >= 4
    cursor = await UsageCursor.find_one({"site": "farm"})
    assert cursor is not None and cursor.cluster == "farm"
    before = {(x.job_id, x.cluster) for x in await UsageRecord.find({"site": "farm"}).to_list()}
    r = await cli("ng", "usage", "collect", "-s", "farm", "--json")  # from the watermark
    assert r.code == 0, r.stderr
    after = await UsageRecord.find({"site": "farm"}).to_list()
    assert len(after) == len({(x.job_id, x.cluster) for x in after})  # no job twice
    # the shared cluster's earlier jobs (cancelled when this module reset it) may reach
    # slurmdbd after the first collect: only those may be new, never this test's jobs
    late = [x.job_id for x in after if (x.job_id, x.cluster) not in before]
    assert r.json()["inserted"] == len(late) and r.json()["replaced"] == 0
    assert not {j.split("_")[0] for j in late} & set(ids)

    running = cluster.submit(USER, "-A", "lab", "-p", "cpu", "-c", "2", wrap="sleep 30")
    assert running.accepted
    cluster.wait_started(running.job_id)
    # a held array of 12 one-minute elements: pending, and reserved element by element
    array = cluster.submit(USER, "-A", "lab", "-p", "cpu", "--array=0-11", "--hold")
    assert array.accepted, array
    try:
        jobs = await Squeue(env=cluster.env).reserving("farm")
        mine = [j for j in jobs if j.job_id == running.job_id]
        assert mine and mine[0].cpus == 2 and mine[0].limit_minutes == 1.0  # --time=1
        reserved = reservations(jobs, await factor_table("farm"), utcnow())
        [status] = await quota_status("farm", utcnow(), user=USER, reserved=reserved)
        assert status.cpu.preallocated == 2.0 + 12.0 and status.cpu.used > 0
        # the command reads the same running job from the real squeue
        r = await cli("ng", "quota", "show", "-s", "farm", "--user", USER, "--json")
        assert r.code == 0, r.stderr
        data = r.json()
        assert data["preallocated_known"] is True
        [shown] = data["subjects"]
        # 2 CPUs x --time=1 running, 12 pending elements x 1 CPU x --time=1
        assert shown["cpu_minutes"]["preallocated"] == 14.0
        assert shown["cpu_minutes"]["used"] == pytest.approx(status.cpu.used, abs=0.01)
    finally:
        cluster.cancel_all()


async def test_the_daemon_task_body_collects_and_returns_a_json_summary(
        farm, slurm_cluster, monkeypatch):
    import json

    from cheeto_like.config import Config, UsageCollectTask
    from cheeto_like.daemon.tasks import _usage

    for key, value in slurm_cluster.env.items():
        monkeypatch.setenv(key, value)
    summary = await _usage(farm, Config(), UsageCollectTask(), "farm", AUTHOR)
    assert summary["site"] == "farm" and summary["cluster"] == "farm"
    assert summary["skipped"] == 0
    json.dumps(summary)  # Celery stores it as JSON
    cursor = await UsageCursor.find_one({"site": "farm"})
    assert cursor is not None and cursor.last["seen"] == summary["seen"]


async def test_the_daemon_task_sends_the_threshold_notice_after_collecting(
        farm, slurm_cluster, monkeypatch, mailbox):  # noqa: F811
    """``usage_collect`` with ``notify`` (the default) and a ``mail`` section: the job just
    collected puts the user past 100 % of a tiny quota, so the user is told, once."""
    from cheeto_like.config import Config, UsageCollectTask
    from cheeto_like.daemon.tasks import _usage
    from cheeto_like.operations.quota import SetQuota

    await make_user(farm, USER, email=f"{USER}@example.org")
    await SetQuota.run(farm, AUTHOR, site="farm", user=USER, cpu_minutes=0.01,
                       period="monthly")
    for key, value in slurm_cluster.env.items():
        monkeypatch.setenv(key, value)
    ids = run_jobs(slurm_cluster)
    wait_in_sacct(slurm_cluster, ids)
    config = Config(mail=mail_config(mailbox))
    summary = await _usage(farm, config, UsageCollectTask(), "farm", AUTHOR)
    assert summary["inserted"] >= 4
    assert (summary["notices_sent"], summary["notices_failed"]) == (1, 0)
    [mail] = mailbox.to(f"{USER}@example.org")
    assert "100%" in mail.subject and "CPU" in mail.text()
    again = await _usage(farm, config, UsageCollectTask(), "farm", AUTHOR)
    assert again["notices_sent"] == 0 and len(mailbox.messages) == 1
