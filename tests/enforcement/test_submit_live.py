"""The submit-time quota check on the live cluster: real jobs of real unix users.

slurmctld runs the plugin that `ng site enforcement install` writes (the harness calls
the same function and puts `ng site enforcement show`'s slurm.conf lines in its
slurm.conf); the table comes from the site worker's loop (in-process here, or the real
`cheeto daemon quota-agent` process for the completion path). Each test asserts on what
sbatch and scontrol answer and on what the ledger then holds.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cheeto_like.enforcement import table as qtable
from cheeto_like.operations.quota import AdjustUsage, SetGpuFactor, SetQuota, SetQuotaDefaults
from tests.factories import AUTHOR
from tests.services.slurm_cluster import SlurmCluster

from .live import QUOTA_REFUSAL, QuotaSite, wait_for, write_config


@pytest.fixture
async def qsite(db, slurm_cluster: SlurmCluster, cli_config: Path, tmp_path: Path):
    config = write_config(tmp_path / "config.yaml", cli_config, slurm_cluster)
    made = QuotaSite(db, slurm_cluster, config)
    yield made
    slurm_cluster.cancel_all()
    slurm_cluster.clear_enforcement_state()


def quota_of(result, user: str) -> dict:
    data = json.loads(result.stdout)
    [row] = [s for s in data["subjects"] if s["name"] == user]
    return row["cpu_minutes"]


class AgentProcess:
    """`cheeto daemon quota-agent -s farm` as its own process, as the site worker runs it."""

    def __init__(self, qsite: QuotaSite, log: Path) -> None:
        env = {**os.environ, **qsite.cluster.env}
        env.pop("CHEETO_CONFIG", None)
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cheeto_like", "daemon", "quota-agent", "-s", "farm",
             "--no-blocks", "--slurm-conf", str(qsite.cluster.slurm_conf),
             "--config", str(qsite.config_path)],
            env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)

    def stop(self) -> str:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.log.read_text()


async def test_eight_parallel_jobs_never_overrun_and_are_charged_at_their_end(qsite, cli,
                                                                            tmp_path):
    """The trial of issue 26: a 2 CPU-minute quota, 8 one-minute jobs submitted at once."""
    await qsite.build({"lab": ["qteight"]})
    await SetQuota.run(qsite.store, AUTHOR, site="farm", user="qteight", cpu_minutes=2)
    agent = AgentProcess(qsite, tmp_path / "agent.log")
    try:
        await wait_for(lambda: ("user", "qteight") in (
            qsite.table_subjects() if qsite.cluster.enforcement.table.is_file() else {}),
            20, "the agent's first table")
        subs = await asyncio.gather(*(asyncio.to_thread(
            qsite.submit, "qteight", "lab", "-n1", wrap="sleep 20") for _ in range(8)))
        accepted = [s.job_id for s in subs if s.accepted]
        refused = [s.stderr for s in subs if not s.accepted]
        assert len(accepted) == 2, subs
        assert len(refused) == 6
        for message in refused:
            assert QUOTA_REFUSAL in message
            assert "user qteight at farm: CPU quota 2.0 min" in message
            assert "reserved by your queued and running jobs 2.0" in message
            assert "cheeto quota show" in message
        assert sorted(qsite.reservations()) == [("qteight", "lab", 1.0, 0.0, 1)] * 2
        for job in accepted:  # nothing is killed: both run to their end
            assert qsite.cluster.wait_finished(job, timeout=60).state == "COMPLETED"
        ended = time.monotonic()

        async def charged() -> float | None:
            r = await cli("ng", "quota", "show", "-s", "farm", "--user", "qteight", "--json",
                          "--no-squeue")
            used = quota_of(r, "qteight")["used"]
            return used if used > 0.6 else None

        used = await wait_for(charged, 10, "the hook's charge in the ledger")
        assert time.monotonic() - ended < 10
        assert used <= 2.0  # charged at most the quota (2 x ~20 s)
        await wait_for(lambda: qsite.reservations() == [], 10, "the reservations' release")
        # the ledger has both jobs, charged once each, without any `ng usage collect`
        r = await cli("ng", "usage", "report", "-s", "farm", "--user", "qteight", "--json")
        assert r.code == 0, r.stderr
        assert json.loads(r.stdout)["rows"][0]["jobs"] == 2, r.stdout

        # used ~0.67: one more one-minute job fits, a second one does not
        qsite.accepted("qteight", "lab", "--hold")
        stderr = qsite.refused("qteight", "lab", "--hold")
        assert "(" in stderr and "min short)" in stderr
        # a credit lets the next submission in at once (the agent polls the store)
        before = qsite.table_meta()["fingerprint"]
        r = await cli("ng", "quota", "adjust", "-s", "farm", "--user", "qteight", "--cpu",
                      "-10m", "--reason", "credit for the trial")
        assert r.code == 0, r.stderr
        await wait_for(lambda: qsite.table_meta()["fingerprint"] != before, 5,
                       "the table after the credit")
        qsite.accepted("qteight", "lab", "--hold")
    finally:
        log = agent.stop()
    assert "Traceback" not in log, log


async def test_arrays_count_by_elements_and_time_limit_raises_are_checked(qsite):
    await qsite.build({"lab": ["qtarray"]})
    await SetQuota.run(qsite.store, AUTHOR, site="farm", user="qtarray", cpu_minutes=3)
    await qsite.refresh()
    # 0,4,8,12: four elements of one minute (%2 bounds how many run at once, not how many)
    stderr = qsite.refused("qtarray", "lab", "--array=0-15:4%2", "--hold")
    assert "this job 4.0" in stderr and "CPU quota 3.0 min" in stderr
    # --time=UNLIMITED reserves the partition's MaxTime (60 minutes), not its default
    assert "this job 60.0" in qsite.cluster.submit(
        "qtarray", "-A", "lab", "-p", "cpu", "--time=UNLIMITED", "--hold").stderr
    assert qsite.reservations() == []
    await SetQuota.run(qsite.store, AUTHOR, site="farm", user="qtarray", cpu_minutes=5)
    await qsite.refresh()
    qsite.accepted("qtarray", "lab", "--array=0-15:4%2", "--hold")
    assert qsite.reservations() == [("qtarray", "lab", 4.0, 0.0, 4)]
    single = qsite.accepted("qtarray", "lab", "--hold")  # 4 + 1 = 5: fits exactly
    # raising its time limit past the quota is refused; within it, allowed
    raised = qsite.cluster._client(["scontrol", "update", f"jobid={single}", "TimeLimit=10"],
                                   check=False)
    assert raised.returncode != 0, raised
    # scontrol shows only "Unspecified error" (the plugin's message reaches sbatch, not
    # scontrol update): the controller's log says it was the quota
    log = (qsite.cluster.base / "log" / "slurmctld.log").read_text()
    assert f"refused a change of job {single}: job refused: it would exceed a quota" in log
    assert "TimeLimit=00:01:00" in qsite.cluster.scontrol("show", "job", single)
    await SetQuota.run(qsite.store, AUTHOR, site="farm", user="qtarray", cpu_minutes=8)
    await qsite.refresh()
    ok = qsite.cluster._client(["scontrol", "update", f"jobid={single}", "TimeLimit=4"],
                               check=False)
    assert ok.returncode == 0, ok
    assert sorted(qsite.reservations()) == [("qtarray", "lab", 4.0, 0.0, 1),
                                            ("qtarray", "lab", 4.0, 0.0, 4)]


async def test_typed_gpus_are_charged_with_their_factor(qsite):
    await qsite.build({"lab": ["qtgpu"]})
    await SetGpuFactor.run(qsite.store, AUTHOR, site="farm", gpu_type="a100", factor=2.0)
    await SetQuota.run(qsite.store, AUTHOR, site="farm", user="qtgpu", gpu_minutes=3)
    await qsite.refresh()
    qsite.accepted("qtgpu", "lab", "--gres=gpu:a100:1", "--hold", partition="gpu")
    assert qsite.reservations() == [("qtgpu", "lab", 1.0, 2.0, 1)]
    stderr = qsite.refused("qtgpu", "lab", "--gres=gpu:a100:1", "--hold", partition="gpu")
    assert "GPU quota 3.0 min" in stderr and "this job 2.0" in stderr
    qsite.accepted("qtgpu", "lab", "--gres=gpu:t4:1", "--hold", partition="gpu")  # factor 1
    qsite.accepted("qtgpu", "lab", "--hold")  # a CPU job needs no GPU minutes


async def test_user_and_account_quotas_and_the_defaults_hold_together(qsite):
    await qsite.build({"lab": ["qtuone", "qtutwo"], "other": ["qtdef"]})
    await SetQuota.run(qsite.store, AUTHOR, site="farm", account="lab", cpu_minutes=2)
    await SetQuota.run(qsite.store, AUTHOR, site="farm", user="qtuone", cpu_minutes=10)
    await SetQuotaDefaults.run(qsite.store, AUTHOR, site="farm", user_cpu_minutes=1)
    await AdjustUsage.run(qsite.store, AUTHOR, site="farm", user="qtutwo", cpu_minutes=-5,
                          reason="a credit below zero stays at zero")
    await qsite.refresh()
    qsite.accepted("qtuone", "lab", "--hold")
    qsite.accepted("qtutwo", "lab", "--hold")
    stderr = qsite.refused("qtuone", "lab", "--hold")  # the account is full, not the user
    assert "account lab at farm: CPU quota 2.0 min" in stderr
    assert "user qtuone" not in stderr
    # Slurm takes -A LAB as lab: so does the check
    assert "account lab at farm" in qsite.refused("qtuone", "LAB", "--hold")
    # qtdef has no quota of its own: the site's default user quota applies
    qsite.accepted("qtdef", "other", "--hold")
    stderr = qsite.refused("qtdef", "other", "--hold")
    assert "user qtdef at farm: CPU quota 1.0 min (the site's default)" in stderr


async def test_a_stale_or_missing_table_fails_open_or_closed_as_configured(qsite):
    await qsite.build({"lab": ["qtstale"]})
    await SetQuota.run(qsite.store, AUTHOR, site="farm", user="qtstale", cpu_minutes=0)
    await qsite.refresh()
    where = qsite.cluster.enforcement
    assert "CPU quota 0.0 min" in qsite.refused("qtstale", "lab", "--hold")
    # the worker stopped 100 s ago: older than max_age
    await asyncio.sleep(1.1)  # slurmctld reloads the plugin when its mtime (seconds) moves
    qsite.cluster.install_enforcement(on_stale="fail_open", max_age_seconds=30)
    qtable.touch_table(where.table, now=time.time() - 100)
    qsite.accepted("qtstale", "lab", "--hold")  # fail_open: accepted, logged
    await asyncio.sleep(1.1)
    qsite.cluster.install_enforcement(on_stale="fail_closed", max_age_seconds=30)
    stderr = qsite.refused("qtstale", "lab", "--hold")
    assert "the quota check cannot run (the quota table is 10" in stderr
    assert "s old (more than 30 s)" in stderr
    where.table.unlink()
    assert "the quota table is missing" in qsite.refused("qtstale", "lab", "--hold")
    await asyncio.sleep(1.1)
    qsite.cluster.install_enforcement(on_stale="fail_open", max_age_seconds=30)
    qsite.accepted("qtstale", "lab", "--hold")
    log = (qsite.cluster.base / "log" / "slurmctld.log").read_text()
    assert "cheeto quota: the quota table is missing: accepting (on_stale fail_open)" in log


async def test_the_agent_moves_the_backstop_when_someone_runs_out(qsite, monkeypatch):
    """A debit (or a lowered quota) puts a user out: the agent's next pass runs the
    site's Slurm sync, which writes the zero GrpTRESMins; a credit lifts it again."""
    from ruamel.yaml import YAML

    from cheeto_like.config import load_config
    from cheeto_like.daemon.quota_agent import QuotaAgent

    await qsite.build({"lab": ["qtblock"]})
    for key, value in qsite.cluster.env.items():
        monkeypatch.setenv(key, value)
    data = YAML(typ="safe").load(qsite.config_path.read_text())
    data["daemon"] = {"default": {"tasks": {"slurm_sync": {"max_deletions": 0}}}}
    YAML(typ="safe").dump(data, qsite.config_path)
    await SetQuota.run(qsite.store, AUTHOR, site="farm", user="qtblock", cpu_minutes=10)
    agent = QuotaAgent(qsite.store, load_config(qsite.config_path), "farm",
                       qsite.cluster.enforcement)
    assert not (await agent.one_pass()).blocks_synced  # the first pass only learns the set

    def limits() -> set[str]:
        out = qsite.cluster.sacctmgr("-i", "-P", "-n", "show", "assoc", "where",
                                     "users=qtblock", "format=grptresmins").stdout
        return {line for line in out.splitlines() if line}

    assert limits() == set()
    await AdjustUsage.run(qsite.store, AUTHOR, site="farm", user="qtblock", cpu_minutes=20,
                          reason="debit: usage from the old system")
    assert (await agent.one_pass()).blocks_synced
    assert limits() == {"cpu=0"}
    assert "CPU quota 10.0 min" in qsite.refused("qtblock", "lab", "--hold")
    await AdjustUsage.run(qsite.store, AUTHOR, site="farm", user="qtblock", cpu_minutes=-20,
                          reason="credit")
    assert (await agent.one_pass()).blocks_synced
    assert limits() == set()
    qsite.accepted("qtblock", "lab", "--hold")


async def test_the_live_cluster_is_configured_as_install_says(qsite, cli, monkeypatch):
    from cheeto_like.enforcement.check import live_warnings

    await qsite.build({"lab": ["qtconf"]})
    await SetQuota.run(qsite.store, AUTHOR, site="farm", user="qtconf", cpu_minutes=10)
    settings = qsite.cluster.enforcement_settings()
    assert await live_warnings("farm", settings, env=qsite.cluster.env) == []
    for key, value in qsite.cluster.env.items():
        monkeypatch.setenv(key, value)
    r = await cli("ng", "cluster", "status", "-s", "farm", config=qsite.config_path)
    assert r.code == 0, r.stderr
    assert "enforcement at farm" not in r.stderr
    # the hook's path comes from slurm.conf's directory, not from the state directory
    other = qsite.cluster.enforcement_settings(state_dir=qsite.cluster.base / "elsewhere")
    assert await live_warnings("farm", other, env=qsite.cluster.env) == []


async def test_the_sweep_charges_what_the_hook_missed_and_drops_what_never_ran(qsite):
    await qsite.build({"lab": ["qtsweep"]})
    await SetQuota.run(qsite.store, AUTHOR, site="farm", user="qtsweep", cpu_minutes=50)
    agent = qsite.agent()
    await agent.one_pass()
    where = qsite.cluster.enforcement
    kept = qsite.accepted("qtsweep", "lab", "--hold")                # queued: kept
    cancelled = qsite.accepted("qtsweep", "lab", "--array=0-3", "--hold")
    test_only = qsite.submit("qtsweep", "lab", "--test-only")        # never a job
    assert test_only.returncode == 0, test_only
    assert len(qsite.reservations()) == 3
    for path in where.spool.glob("*"):
        path.unlink()  # as if the hook had missed every completion
    qsite.cluster._client(["scancel", cancelled])
    with qtable.reservations(where.reservations) as db:  # all older than the grace
        db.execute("UPDATE reservations SET created = created - 1000")

    async def swept() -> bool:
        agent._swept_at = 0
        report = await agent.one_pass()
        for path in where.spool.glob("*"):
            path.unlink()
        assert report.error is None, report
        return qsite.reservations() == [("qtsweep", "lab", 1.0, 0.0, 1)]

    await wait_for(swept, 30, "the sweep to keep only the queued job's reservation")
    assert qsite.cluster.job(kept).state == "PENDING"
