"""A crashed Slurm apply against the real slurmdbd, and the rolling deletion budget.

- A ``cheeto ng slurm sync --apply`` subprocess killed with SIGKILL mid-apply leaves its
  SyncRun showing which commands ran (write-ahead items and steps), the status view
  closes it as ``crashed`` with the steps folded into its items, and the next apply takes
  over within seconds of the (short) lease's expiry and converges the cluster.
- The write-ahead journal is linear: the plan is written once, then each command costs
  one write of two small step documents, whatever the plan's size.
- A held lease is exit 1 (``Busy``), one line, not exit 2.
- Three runs of 40 removals under a budget of 50 a day: the second is refused before any
  write, with one line naming the numbers and ``--allow-deletions``; the override works
  and its removals count too.
- sacctmgr's "Job(s) active" refusal is a pending item, not a failure.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import bson
import pytest
from pymongo import monitoring
from ruamel.yaml import YAML

from cheeto_like.adapters.sacctmgr import Result, SAcctMgr
from cheeto_like.errors import GuardTripped
from cheeto_like.models import SyncLease, SyncRun, SyncStep
from cheeto_like.models.fields import utcnow
from cheeto_like.operations import slurm as slurm_ops
from cheeto_like.operations.group_membership import AddGroupMember
from cheeto_like.operations.user import SetUserStatus
from cheeto_like.queries.sync_runs import live_items, run_items
from cheeto_like.sync.lease import lease
from cheeto_like.sync.runs import RunJournal, close_stale_runs
from cheeto_like.sync.slurm.actual import SAcctMgrReader
from cheeto_like.sync.slurm.plan import Batch, Command, Plan
from cheeto_like.sync.slurm.run import apply_plan, sync_site
from tests.factories import AUTHOR, make_group, make_site, make_user
from tests.queries.test_query_count import listening
from tests.services.slurm import SlurmAccounting

CHEETO = str(Path(sys.executable).with_name("cheeto"))
_n = itertools.count(1)


@pytest.fixture
def slurm_env(slurm_accounting: SlurmAccounting, monkeypatch) -> SlurmAccounting:
    for key, value in slurm_accounting.env.items():
        monkeypatch.setenv(key, value)
    return slurm_accounting


def config_with(cli_config: Path, tmp_path: Path, **slurm: Any) -> Path:
    """The module's CLI config plus a ``slurm:`` block."""
    yaml = YAML(typ="safe")
    data = yaml.load(cli_config.read_text())
    data["slurm"] = slurm
    buffer = io.StringIO()
    yaml.dump(data, buffer)
    path = tmp_path / "config.yaml"
    path.write_text(buffer.getvalue())
    return path


async def seed(store: Any, slurm: SlurmAccounting, *, groups: int = 1, members: int = 1,
               coordinators: bool = False) -> tuple[str, list[str]]:
    """A site (= cluster) with ``groups`` lab accounts of ``members`` users each."""
    k = next(_n)
    site = f"cr{k}"
    await make_site(store, site)
    slurm.add_cluster(site)
    await slurm_ops.CreateSlurmPartition.run(store, AUTHOR, site=site, name="gpu")
    users = []
    for g in range(groups):
        group = f"cr{k}g{g}"
        await make_group(store, group)
        await slurm_ops.ProvisionSlurmAllocation.run(store, AUTHOR, site=site, group=group,
                                                     partition="gpu")
        for m in range(members):
            name = f"cr{k}g{g}u{m}"
            await make_user(store, name, site=site, access=["login-ssh", "slurm"])
            await AddGroupMember.run(store, AUTHOR, group=group, user=name, site=site)
            users.append(name)
        if coordinators:
            await slurm_ops.EditSlurmAccount.run(store, AUTHOR, site=site, group=group,
                                                 coordinators=[f"cr{k}g{g}u0"])
    return site, users


async def latest_run(site: str) -> SyncRun | None:
    return await SyncRun.find({"site": site}).sort(-SyncRun.started_at).first_or_none()


async def outcomes(run: SyncRun) -> list[str]:
    """As they stand: a running run's outcomes are in its step documents."""
    return [i.outcome for i in await live_items(run)]


async def test_a_killed_apply_is_closed_as_crashed_and_the_next_one_takes_over(
        db, slurm_env, cli, cli_config, tmp_path):
    site, _ = await seed(db, slurm_env, groups=16, coordinators=True)
    ttl = 3
    config = config_with(cli_config, tmp_path, lease_seconds=ttl)
    log = tmp_path / "apply.log"
    # the real sacctmgr, each write 0.3 s late: the apply is still running when the test
    # has seen three commands done, however fast slurmdbd answers (on a quick machine
    # the whole apply once ended before the kill)
    slow = tmp_path / "slow-sacctmgr"
    slow.write_text('#!/bin/sh\ncase " $* " in *" show "*|*" list "*) ;; *) sleep 0.3 ;; esac\n'
                    'exec sacctmgr "$@"\n')
    slow.chmod(0o755)
    with log.open("wb") as sink:
        proc = await asyncio.create_subprocess_exec(
            CHEETO, "ng", "slurm", "sync", "-s", site, "--apply", "--config", str(config),
            "--sacctmgr", str(slow),
            stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        run = None
        while time.monotonic() < deadline:  # kill once a few commands are recorded done
            run = await latest_run(site)
            if run is not None and (await outcomes(run)).count("ok") >= 3:
                break
            assert proc.returncode is None, log.read_text()
            await asyncio.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        await asyncio.wait_for(proc.wait(), 10)
        killed_at = time.monotonic()
    finally:
        if proc.returncode is None:  # pragma: no cover - never leave it running
            proc.kill()
            await proc.wait()
    run = await SyncRun.get(run.id)
    assert run.status == "running" and run.lease == f"slurm:{site}"
    assert {i.outcome for i in await run_items(run.id)} == {"planned"}  # written once
    items = await live_items(run)
    done = [i for i in items if i.outcome == "ok"]
    assert len(done) >= 3 and "planned" in await outcomes(run)  # killed before the end
    # at most one command was in flight; everything before it is recorded done
    started = [n for n, i in enumerate(items) if i.outcome == "started"]
    assert len(started) <= 1
    if started:
        assert all(i.outcome == "ok" for i in items[:started[0]])
    # what the record says ran did run: each recorded coordinator exists in slurmdbd
    for item in done:
        if item.batch == "add coordinators":
            account = item.command.split("account=")[1].split()[0]
            shown = slurm_env.sacctmgr("-i", "-P", "-n", "show", "account", account,
                                       "withcoord", "format=coordinators").stdout.strip()
            assert shown, item.command

    # the status view sees the holder is gone and closes the run
    r = await cli("daemon", "status", "--json")
    assert r.code == 0, r.stderr
    row = next(row for row in r.json() if row["task"] == "slurm_sync" and row["site"] == site)
    assert row["state"] == "crashed"
    crashed = await SyncRun.get(run.id)
    assert crashed.status == "crashed" and crashed.finished_at is not None
    # the record is kept: the steps are folded into the run's items, then dropped
    assert [i.outcome for i in await run_items(crashed.id)] == [i.outcome for i in items]
    assert await SyncStep.find({"run": run.id}).count() == 0

    # the next apply waits only for the short lease to expire, then converges
    left = (await SyncLease.get(f"slurm:{site}")).expires_at
    assert (left - utcnow()).total_seconds() <= ttl
    await asyncio.sleep(max((left - utcnow()).total_seconds(), 0) + 0.05)
    r = await cli("ng", "slurm", "sync", "-s", site, "--apply", config=config)
    assert r.code == 0, r.stderr
    assert time.monotonic() - killed_at < ttl + 30
    r = await cli("ng", "slurm", "sync", "-s", site, "--json", config=config)
    assert r.json()["processes"] == 0
    assert await SyncLease.get(f"slurm:{site}") is None
    statuses = [r.status for r in await SyncRun.find({"site": site}).sort(
        +SyncRun.started_at).to_list()]
    assert statuses == ["crashed", "ok", "ok"]


async def test_a_held_lease_is_exit_1_with_one_line(db, slurm_env, cli):
    site, _ = await seed(db, slurm_env)
    async with lease(db, "slurm", site) as held:
        r = await cli("ng", "slurm", "sync", "-s", site, "--apply")
    assert r.code == 1
    assert len(r.error_lines) == 1 and "another slurm sync" in r.stderr
    assert held.holder in r.stderr and "Traceback" not in r.stderr
    run = await latest_run(site)
    assert run.status == "failed" and "another slurm sync" in run.error
    # a dry run needs no lease
    async with lease(db, "slurm", site):
        assert (await cli("ng", "slurm", "sync", "-s", site)).code == 0


async def test_a_run_left_running_by_a_dead_holder_is_closed_by_the_next_apply(db, slurm_env):
    site, _ = await seed(db, slurm_env)
    dead = await asyncio.create_subprocess_exec("true")
    await dead.wait()
    ghost = SyncRun(target="slurm", site=site, apply=True, holder=f"{os.uname().nodename}:"
                    f"{dead.pid}:gone", lease=f"slurm:{site}")
    await ghost.insert()
    runner = SAcctMgr(env=slurm_env.env, timeout=30)
    report = await sync_site(db, site, reader=SAcctMgrReader(runner), runner=runner, apply=True)
    assert report.ok
    closed = await SyncRun.get(ghost.id)
    assert closed.status == "crashed" and "crashed" in closed.error


async def test_three_runs_of_40_removals_under_a_budget_of_50(db, slurm_env, cli, cli_config,
                                                              tmp_path):
    site, users = await seed(db, slurm_env, members=120)
    runner = SAcctMgr(env=slurm_env.env, timeout=60)

    async def apply(**kw: Any):
        return await sync_site(db, site, reader=SAcctMgrReader(runner), runner=runner,
                               apply=True, max_deletions=50, per_day=50, author=AUTHOR, **kw)

    async def leave(names: list[str]) -> None:
        for name in names:
            await SetUserStatus.run(db, AUTHOR, name=name, status="inactive", reason="t")

    assert (await apply()).ok
    await leave(users[:40])
    first = await apply()
    assert first.ok and len(first.plan.removals) == 40
    assert (await latest_run(site)).counts["removed"] == 40

    await leave(users[40:80])
    rows_before = slurm_env.sacctmgr("-i", "-P", "-n", "show", "assoc", "where",
                                     f"cluster={site}", "format=user").stdout
    config = config_with(cli_config, tmp_path, max_deletions_per_day=50)
    r = await cli("ng", "slurm", "sync", "-s", site, "--apply", config=config)
    assert r.code == 1
    refusal = [line for line in r.error_lines if "daily budget" in line]
    assert len(refusal) == 1
    assert ("removes 40 Slurm entities but only 10 of" in refusal[0]
            and "budget of 50 remain (40 removed in the last 24 h)" in refusal[0]
            and "--allow-deletions 40" in refusal[0])
    assert slurm_env.sacctmgr("-i", "-P", "-n", "show", "assoc", "where", f"cluster={site}",
                              "format=user").stdout == rows_before  # nothing written
    refused = await latest_run(site)
    assert refused.status == "aborted" and refused.extra["would_delete"][:1] == [
        f"{users[40]}@{site}g0/gpu".replace(f"{site}g0", users[40].rsplit("u", 1)[0])]

    # the reviewed override goes ahead, and counts
    second = await apply(allow_deletions=40)
    assert second.ok
    assert (await latest_run(site)).extra["budget"] == {"per_day": 50, "used": 40, "left": 10}
    await leave(users[80:120])
    with pytest.raises(GuardTripped, match=r"only 0 of .* remain \(80 removed"):
        await apply()
    users_left = {line for line in slurm_env.sacctmgr(
        "-i", "-P", "-n", "show", "assoc", "where", f"cluster={site}",
        "format=user").stdout.split() if line}
    assert users_left & set(users) == set(users[80:])
    # a dry run still plans (and shows) everything
    runner_dry = await sync_site(db, site, reader=SAcctMgrReader(runner), runner=runner)
    assert len(runner_dry.plan.removals) == 40


def running_job(slurm: SlurmAccounting, cluster: str, user: str, job_id: int) -> None:
    """A job row in slurmdbd's own table, as slurmctld records a running job (state 1):
    slurmdbd then refuses to remove its association, exactly as on a live cluster."""
    assoc = slurm.sql(f"select id_assoc from {cluster}_assoc_table where user='{user}' "
                      "and deleted=0").split()[0]
    slurm.sql("set session sql_mode=''; insert into "
              f"{cluster}_job_table (id_assoc, id_job, state, time_submit, time_start, "
              f"time_end) values ({assoc}, {job_id}, 1, unix_timestamp(), unix_timestamp(), 0)")


def job_ends(slurm: SlurmAccounting, cluster: str, job_id: int) -> None:
    slurm.sql(f"update {cluster}_job_table set state=3, time_end=unix_timestamp() "
              f"where id_job={job_id}")


async def test_job_s_active_is_pending_not_failed(db, slurm_env):
    site, users = await seed(db, slurm_env, members=2)
    runner = SAcctMgr(env=slurm_env.env, timeout=30)

    async def apply():
        return await sync_site(db, site, reader=SAcctMgrReader(runner), runner=runner,
                               apply=True)

    assert (await apply()).ok
    running_job(slurm_env, site, users[0], 4242)
    await SetUserStatus.run(db, AUTHOR, name=users[0], status="inactive", reason="t")
    report = await apply()
    assert report.ok and [i.outcome for i in report.items] == ["pending"]
    assert "running jobs" in report.items[0].detail and "Job(s) active" in report.items[0].detail
    run = await latest_run(site)
    assert run.status == "ok" and run.counts["pending"] == 1 and run.counts["removed"] == 0
    assert users[0] in slurm_env.sacctmgr("-i", "-P", "-n", "show", "assoc", "where",
                                          f"cluster={site}", "format=user").stdout
    # once the job ends, the next run removes it
    job_ends(slurm_env, site, 4242)
    again = await apply()
    assert again.ok and [i.outcome for i in again.items] == ["ok"]
    assert users[0] not in slurm_env.sacctmgr("-i", "-P", "-n", "show", "assoc", "where",
                                              f"cluster={site}", "format=user").stdout


def test_the_jobs_active_classifier():
    def result(code: int, err: str) -> Result:
        return Result(("sacctmgr",), code, "", err, 0.1)

    assert result(1, " Error with request: Job(s) active, cancel job(s) before remove").jobs_active
    assert result(0, "Job(s) active, cancel job(s) before remove").jobs_active  # exit 0 too
    assert not result(1, "Nothing deleted").jobs_active
    assert not result(0, "").jobs_active


class Updates(monitoring.CommandListener):
    """Every ``update`` command: (collection, its statements); ``insert``s in ``inserts``."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, list[dict[str, Any]]]] = []
        self.inserts: list[tuple[str, list[dict[str, Any]]]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "update":
            self.seen.append((event.command["update"], list(event.command["updates"])))
        elif event.command_name == "insert":
            self.inserts.append((event.command["insert"], list(event.command["documents"])))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


class AllOk:
    async def run(self, args: Any, *, write: bool) -> Result:
        return Result(tuple(args), 0, "", "", 0.0)


async def test_write_ahead_writes_the_plan_once_then_two_small_steps_per_command(
        db, mongo_config):
    n, deletes = 200, 20
    planned = Plan("c", (
        Batch("add accounts", "add", tuple(
            Command(("add", "account", f"a{k}"), (f"account a{k}",)) for k in range(n - deletes))),
        Batch("delete accounts", "delete", tuple(
            Command(("delete", "account", f"d{k}"), (f"account d{k}",))
            for k in range(deletes)))))
    run = SyncRun(target="slurm", site="steps", apply=True)
    await run.insert()
    journal = RunJournal(db, run)
    async with listening(db, mongo_config, Updates()) as updates:
        items = await apply_plan(planned, AllOk(), max_deletions=None, journal=journal)
        live = await live_items(await SyncRun.get(run.id))
        await journal.discard_steps()
    assert [i.outcome for i in items] == ["ok"] * n
    assert [i.removals for i in items] == [0] * (n - deletes) + [1] * deletes
    assert [i.outcome for i in live] == ["ok"] * n  # the running run reads its steps
    assert await SyncStep.find({"run": run.id}).count() == 0

    plan_writes = [u for c, u in updates.seen if c == "sync_runs"]
    item_writes = [u for c, u in updates.inserts if c == "sync_items"]
    step_writes = [u for c, u in updates.seen if c == "sync_steps"]
    # the plan: its items inserted once (one batch of n), the run's counts set once
    assert len(item_writes) == 1 and len(item_writes[0]) == n
    assert len(plan_writes) == 1 and "items" not in plan_writes[0][0]["u"]["$set"]
    assert [u for c, u in updates.seen if c == "sync_items"] == []  # nothing rewritten
    # one write per command (+ the last outcome): it closes the previous step and starts
    # the next, two documents that carry none of the other items
    assert len(step_writes) == n + 1
    carried = [[(s["u"]["$set"]["index"], s["u"]["$set"]["outcome"]) for s in w]
               for w in step_writes]
    assert carried[0] == [(0, "started")] and carried[n] == [(n - 1, "ok")]
    assert all(carried[k] == [(k - 1, "ok"), (k, "started")] for k in range(1, n))
    assert all(set(s["u"]["$set"]) == {"run", "index", "outcome", "detail"} and s["upsert"]
               for w in step_writes for s in w)
    sizes = [len(bson.encode({"updates": w})) for w in step_writes[1:n]]
    plan_size = len(bson.encode({"documents": item_writes[0]}))
    assert max(sizes) - min(sizes) <= 8  # only the indexes' digits differ
    assert max(sizes) * 50 < plan_size


async def test_a_cancelled_apply_saves_its_outcomes_so_far_and_drops_its_steps(db, slurm_env):
    """Cancelled while a command runs (the task, not the process: a Celery revoke), the
    run's last save keeps what ran and what was in flight, drops the steps, and the run
    is then closed as ``crashed`` with the in-flight command named."""
    site, _ = await seed(db, slurm_env, groups=2, coordinators=True)
    reached = asyncio.Event()

    class HangsOnThird(SAcctMgr):
        writes = 0

        async def run(self, args: Any, *, write: bool) -> Result:
            if write:
                HangsOnThird.writes += 1
                if HangsOnThird.writes == 3:
                    reached.set()
                    await asyncio.Event().wait()
            return await super().run(args, write=write)

    runner = HangsOnThird(env=slurm_env.env, timeout=30)
    task = asyncio.create_task(sync_site(db, site, reader=SAcctMgrReader(runner),
                                         runner=runner, apply=True))
    await asyncio.wait_for(reached.wait(), 60)
    run = await latest_run(site)
    assert (await outcomes(run))[:3] == ["ok", "ok", "started"]
    assert await SyncStep.find({"run": run.id}).count() == 3
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    saved = await SyncRun.get(run.id)
    assert saved.status == "running"
    kept = await run_items(saved.id)
    assert [i.outcome for i in kept][:3] == ["ok", "ok", "started"]
    assert {i.outcome for i in kept[3:]} == {"planned"}
    assert await SyncStep.find({"run": run.id}).count() == 0
    assert await close_stale_runs(db, target="slurm", site=site) == [run.id]  # released
    crashed = await SyncRun.get(run.id)
    assert crashed.status == "crashed" and f"in flight: {kept[2].command}" in crashed.error
    assert [i.outcome for i in await run_items(crashed.id)] == [i.outcome for i in kept]
