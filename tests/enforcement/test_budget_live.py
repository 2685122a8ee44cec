"""Budgets in money at submit time on the live cluster (issue 28 item 5): slurmctld's
plugin prices each request by the rates in the quota table (the partition's, '*' for
the rest) and refuses a job when money spent + reserved + its cost passes a budget, with
the amounts and the currency; reservations keep each job's cost, and a reservations file
from before budgets gets its cost column from the plugin itself."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from cheeto_like.config import load_config
from cheeto_like.daemon.quota_agent import QuotaAgent
from cheeto_like.enforcement import table as qtable
from cheeto_like.models import UsageRecord
from cheeto_like.operations.quota import AdjustUsage, SetQuota, SetUsageRate
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


def costs(qsite: QuotaSite) -> list[tuple[str, str, float, int]]:
    with qtable.reservations(qsite.cluster.enforcement.reservations) as db:
        return sorted((r.user, r.account, round(r.cost, 3), r.count)
                      for r in qtable.list_reservations(db))


async def rates(qsite: QuotaSite) -> None:
    """cpu: 1.00 per CPU-hour; every other partition ('*', so gpu): 0.50 per CPU-hour and
    10.00 per GPU-hour."""
    await SetUsageRate.run(qsite.store, AUTHOR, site="farm", partition="cpu", cpu_hour=1.0,
                           gpu_hour=0.0)
    await SetUsageRate.run(qsite.store, AUTHOR, site="farm", partition="*", cpu_hour=0.5,
                           gpu_hour=10.0)


async def test_an_account_budget_refuses_what_it_cannot_pay_with_amount_and_currency(qsite):
    await qsite.build({"lab": ["qtbudget"]})
    await rates(qsite)
    await SetQuota.run(qsite.store, AUTHOR, site="farm", account="lab", budget=5.0)
    await qsite.refresh()
    with contextlib.closing(sqlite3.connect(qsite.cluster.enforcement.table)) as db:
        assert sorted(db.execute("SELECT * FROM rates").fetchall()) == [
            ("*", 0.5, 10.0), ("cpu", 1.0, 0.0)]
        assert db.execute("SELECT budget, money_used FROM subjects WHERE name = 'lab'"
                          ).fetchall() == [(5.0, 0.0)]
    assert qsite.table_meta()["currency"] == "USD"
    qsite.accepted("qtbudget", "lab", "--time=60", "-n1", "--hold")  # 1.00
    qsite.accepted("qtbudget", "lab", "--time=60", "-n2", "--hold")  # 2.00
    assert costs(qsite) == [("qtbudget", "lab", 1.0, 1), ("qtbudget", "lab", 2.0, 1)]
    stderr = qsite.refused("qtbudget", "lab", "--time=60", "-n3", "--hold")  # 3 + 3 > 5
    assert QUOTA_REFUSAL in stderr
    assert ("account lab at farm: budget 5.00 USD, spent 0.00 + reserved by your queued "
            "and running jobs 3.00 + this job 3.00 = 6.00 (1.00 USD short)") in stderr
    qsite.accepted("qtbudget", "lab", "--time=60", "-n2", "--hold")  # 3 + 2 = 5: fits
    # the gpu partition at the '*' rate: 0.5 CPU-hour x 0.5 + 0.5 GPU-hour x 10 = 5.25
    await SetQuota.run(qsite.store, AUTHOR, site="farm", account="lab", budget=10.0)
    await qsite.refresh()
    stderr = qsite.refused("qtbudget", "lab", "--time=30", "--gres=gpu:t4:1", "--hold",
                           partition="gpu")
    assert "this job 5.25 = 10.25 (0.25 USD short)" in stderr
    # a debit in money counts as spent; the minutes (no quota) never refuse
    await SetQuota.run(qsite.store, AUTHOR, site="farm", account="lab", budget=20.0)
    await AdjustUsage.run(qsite.store, AUTHOR, site="farm", account="lab", money=9.0,
                          reason="a storage bill")
    await qsite.refresh()
    stderr = qsite.refused("qtbudget", "lab", "--time=60", "--gres=gpu:t4:1", "--hold",
                           partition="gpu")
    assert "spent 9.00 + reserved by your queued and running jobs 5.00" in stderr
    qsite.accepted("qtbudget", "lab", "--time=30", "--gres=gpu:t4:1", "--hold",
                   partition="gpu")


async def test_a_user_budget_and_minutes_are_each_checked_and_unpriced_jobs_pass(qsite):
    await qsite.build({"lab": ["qtbuser"]})
    await SetQuota.run(qsite.store, AUTHOR, site="farm", user="qtbuser", budget=1.0,
                       cpu_minutes=100)
    await qsite.refresh()
    # no rates yet: a job costs nothing, only the minutes count
    qsite.accepted("qtbuser", "lab", "--time=60", "-n1", "--hold")
    stderr = qsite.refused("qtbuser", "lab", "--time=60", "-n1", "--hold")
    assert "CPU quota 100.0 min" in stderr and "budget 1.00" not in stderr
    await rates(qsite)
    await SetQuota.run(qsite.store, AUTHOR, site="farm", user="qtbuser", cpu_minutes=1000)
    await qsite.refresh()
    stderr = qsite.refused("qtbuser", "lab", "--time=40", "-n2", "--hold")  # 1.33 > 1.00
    assert "user qtbuser at farm: budget 1.00 USD" in stderr and "this job 1.33" in stderr
    assert "CPU quota" not in stderr
    qsite.accepted("qtbuser", "lab", "--time=30", "-n1", "--hold")  # 0.50
    stderr = qsite.refused("qtbuser", "lab", "--time=20", "-n2", "--hold")  # 0.50 + 0.67
    assert "reserved by your queued and running jobs 0.50 + this job 0.67" in stderr


async def test_a_reservations_file_from_before_budgets_is_altered_by_the_plugin(qsite):
    await qsite.build({"lab": ["qtbold"]})
    await rates(qsite)
    await SetQuota.run(qsite.store, AUTHOR, site="farm", account="lab", budget=2.0)
    await qsite.refresh()
    path = qsite.cluster.enforcement.reservations
    for made in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        made.unlink(missing_ok=True)  # the agent's pass made a new one: an old one instead
    with contextlib.closing(sqlite3.connect(path)) as old:
        old.execute("CREATE TABLE reservations (id TEXT PRIMARY KEY, user TEXT NOT NULL,"
                    " account TEXT NOT NULL, cpu_each REAL NOT NULL, gpu_each REAL NOT NULL,"
                    " count INTEGER NOT NULL, created INTEGER NOT NULL)")
        old.execute("INSERT INTO reservations VALUES ('ab', 'qtbold', 'lab', 5.0, 0.0, 1, 1)")
        old.commit()
    path.chmod(0o600)
    qsite.accepted("qtbold", "lab", "--time=60", "-n1", "--hold")  # 0 (old row) + 1.00
    with contextlib.closing(sqlite3.connect(path)) as db:
        columns = [row[1] for row in db.execute("PRAGMA table_info(reservations)")]
    assert "cost_each" in columns
    assert costs(qsite) == [("qtbold", "lab", 0.0, 1), ("qtbold", "lab", 1.0, 1)]
    assert "budget 2.00 USD" in qsite.refused("qtbold", "lab", "--time=90", "-n1", "--hold")


async def test_a_finished_job_is_charged_its_cost_and_a_spent_budget_blocks_in_slurm(
        qsite, monkeypatch):
    """End to end: the hook's charge prices the job at its start (cost on the record, in
    the table's money used, its reservation released); a spent budget makes the agent's
    Slurm sync write both zeros, and a credit lifts them."""
    await qsite.build({"lab": ["qtbrun"]})
    for key, value in qsite.cluster.env.items():
        monkeypatch.setenv(key, value)
    data = YAML(typ="safe").load(qsite.config_path.read_text())
    data["daemon"] = {"default": {"tasks": {"slurm_sync": {"max_deletions": 0}}}}
    YAML(typ="safe").dump(data, qsite.config_path)
    # 3600 per CPU-hour: one per CPU-second, so a short job costs its elapsed seconds
    await SetUsageRate.run(qsite.store, AUTHOR, site="farm", partition="cpu", cpu_hour=3600,
                           gpu_hour=0)
    await SetQuota.run(qsite.store, AUTHOR, site="farm", account="lab", budget=1000.0)
    agent = QuotaAgent(qsite.store, load_config(qsite.config_path), "farm",
                       qsite.cluster.enforcement)
    await agent.one_pass()
    job = qsite.accepted("qtbrun", "lab", "-n1", wrap="sleep 2")
    assert costs(qsite) == [("qtbrun", "lab", 60.0, 1)]  # 1 CPU x 1 min at 60 per minute
    assert qsite.cluster.wait_finished(job, timeout=60).state == "COMPLETED"

    async def charged() -> UsageRecord | None:
        await agent.one_pass()
        return await UsageRecord.find_one({"job_id": job})

    record = await wait_for(charged, 30, "the hook's charge")
    assert record.cost == pytest.approx(record.cpus * record.elapsed_s, abs=0.01)
    assert record.cost > 0
    await wait_for(lambda: costs(qsite) == [], 15, "the reservation's release",
                   interval=0.5)
    with contextlib.closing(sqlite3.connect(qsite.cluster.enforcement.table)) as db:
        [(spent,)] = db.execute("SELECT money_used FROM subjects WHERE name = 'lab'")
    assert spent == pytest.approx(record.cost)

    def limits() -> set[str]:
        out = qsite.cluster.sacctmgr("-i", "-P", "-n", "show", "assoc", "where",
                                     "accounts=lab", "format=user,grptresmins").stdout
        # the account's own row (no user) carries an account's block
        return {line.split("|", 1)[1] for line in out.splitlines()
                if line.startswith("|") and line.split("|", 1)[1]}

    assert limits() == set()
    await AdjustUsage.run(qsite.store, AUTHOR, site="farm", account="lab", money=1000.0,
                          reason="debit: the old system's bill")
    assert (await agent.one_pass()).blocks_synced
    assert limits() == {"cpu=0,gres/gpu=0"}
    stderr = qsite.refused("qtbrun", "lab", "--hold")
    assert "budget 1000.00 USD" in stderr
    await AdjustUsage.run(qsite.store, AUTHOR, site="farm", account="lab", money=-1000.0,
                          reason="credit")
    assert (await agent.one_pass()).blocks_synced
    assert limits() == set()
    qsite.accepted("qtbrun", "lab", "--hold")


async def test_raising_a_time_limit_past_the_budget_is_refused(qsite):
    await qsite.build({"lab": ["qtbmod"]})
    await rates(qsite)
    await SetQuota.run(qsite.store, AUTHOR, site="farm", account="lab", budget=2.0)
    await qsite.refresh()
    job = qsite.accepted("qtbmod", "lab", "--time=60", "-n1", "--hold")  # 1.00
    raised = qsite.cluster._client(["scontrol", "update", f"jobid={job}", "TimeLimit=180"],
                                   check=False)  # 3.00 > 2.00
    assert raised.returncode != 0, raised
    assert "TimeLimit=01:00:00" in qsite.cluster.scontrol("show", "job", job)
    ok = qsite.cluster._client(["scontrol", "update", f"jobid={job}", "TimeLimit=120"],
                               check=False)  # 2.00: fits exactly
    assert ok.returncode == 0, ok
    assert costs(qsite) == [("qtbmod", "lab", 2.0, 1)]
