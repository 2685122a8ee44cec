"""The Celery daemon end to end: real RabbitMQ, real slurmdbd, this module's database.

Three workers run as subprocesses for the whole module: the hub (queue ``cheeto``) and
two workers for site ``farm`` (queue ``slurm.farm``; two, so that runs can race). The
test process enqueues through the CLI or the app, and reads ``celery_taskmeta``.

Workers re-read the config file on every run, so a test changes a task's options by
rewriting it (and puts it back).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from cheeto_like.daemon.app import make_app
from cheeto_like.models import SyncLease, SyncRun, User
from cheeto_like.models.fields import utcnow
from cheeto_like.operations import slurm as slurm_ops
from cheeto_like.operations.group_membership import AddGroupMember
from cheeto_like.operations.user import AddUserSshKey, SetUserStatus
from cheeto_like.processes import process_identity
from cheeto_like.queries.exports import sympa_emails, sympa_text
from cheeto_like.queries.sync_runs import live_items
from cheeto_like.store import Store
from tests.conftest import module_database, seed_access_status, wipe
from tests.factories import AUTHOR, ED25519_KEY, make_group, make_site, make_user
from tests.services.ldap import Slapd
from tests.services.rabbitmq import RabbitMQ
from tests.services.slurm import SlurmAccounting
from tests.sync.test_puppet_sync import git

from .celery_harness import (
    HOST,
    DaemonProcess,
    mongo_block,
    node,
    wait_until_consuming,
    write_config,
)

SITE = "farm"
CLUSTER = "dmnfarm"  # the site's Slurm cluster, unique in the session's slurmdbd
LAB = "dmnlab"
HUB = node("cheeto-hub@%h")
SITE_WORKERS = (node("slurm-farm@%h"), node("slurm-farm-b@%h"))
PEOPLE = "dmnpeople"
TIMEOUT = 60


class Daemon:
    """This module's config file, its knobs, and the test process's Celery app."""

    def __init__(self, base: Path, mongo: dict[str, Any], broker: str,
                 ldap: dict[str, Any]) -> None:
        self.base = base
        self.path = base / "config.yaml"
        self.mongo = mongo
        self.broker = broker
        self.ldap = ldap
        self.sympa_dir = base / "sympa"
        self.sympa_dir.mkdir()
        self.delay_file = base / "sacctmgr-write-delay"
        self.sacctmgr = base / "sacctmgr"
        # the real sacctmgr; writes wait DELAY_FILE seconds, so that two runs overlap
        self.sacctmgr.write_text(
            "#!/bin/sh\n"
            f'case " $* " in *" -P "*) ;; *) sleep "$(cat {self.delay_file} 2>/dev/null'
            ' || echo 0)";; esac\nexec sacctmgr "$@"\n')
        self.sacctmgr.chmod(0o755)
        self.repo = base / "puppet"
        self.write()
        self.app: Celery = make_app(self.load())

    def daemon_block(self, **tasks: dict[str, Any] | None) -> dict[str, Any]:
        blocks: dict[str, Any] = {
            "slurm_sync": {"apply": True, "max_deletions": 50, "sacctmgr": str(self.sacctmgr)},
            "sympa": {"output_dir": str(self.sympa_dir)},
            "puppet_sync": {"repo": str(self.repo), "push": True},
            "ldap_sync": {"full": True},
        }
        for name, block in tasks.items():
            if block is None:
                blocks.pop(name, None)
            else:
                blocks[name] = {**blocks.get(name, {}), **block}
        return {"broker_url": self.broker, "sites": [SITE], "task_time_limit": 120,
                "beat_schedule_filename": str(self.base / "beat-schedule"),
                "tasks": blocks}

    def write(self, **tasks: dict[str, Any] | None) -> None:
        write_config(self.path, self.mongo, self.daemon_block(**tasks), ldap=self.ldap)

    def load(self):  # type: ignore[no-untyped-def]
        from cheeto_like.config import load_config

        return load_config(self.path)

    def result(self, task_id: str) -> Any:
        return self.app.AsyncResult(task_id)


@pytest.fixture(scope="module")
def daemon(rabbitmq: RabbitMQ, slapd: Slapd, mongo_config, request,
           tmp_path_factory: pytest.TempPathFactory) -> Daemon:
    base = tmp_path_factory.mktemp("celery")
    ldap = {"servers": [slapd.uri], "searchbase": slapd.suffix,
            "user_base": f"ou={PEOPLE},{slapd.suffix}", "login_dn": slapd.root_dn,
            "password": slapd.root_password, "use_tls": True, "ca_file": str(slapd.ca_file)}
    return Daemon(base, mongo_block(mongo_config, module_database(request)),
                  rabbitmq.vhost_url(module_database(request)),
                  ldap)


@pytest.fixture(scope="module")
async def farm(store: Store, slurm_accounting: SlurmAccounting,
               daemon: Daemon) -> AsyncIterator[Store]:
    """Site farm (cluster dmnfarm) with a lab of two users in partition gpu, a key, and a
    clone of a bare puppet origin."""
    await wipe()
    await seed_access_status()
    await make_site(store, SITE, "farm.hpc.example.org")
    await slurm_ops.SetSiteSlurmCluster.run(store, AUTHOR, site=SITE, cluster_name=CLUSTER)
    slurm_accounting.add_cluster(CLUSTER)
    await make_group(store, LAB)
    await slurm_ops.CreateSlurmPartition.run(store, AUTHOR, site=SITE, name="gpu")
    await slurm_ops.ProvisionSlurmAllocation.run(store, AUTHOR, site=SITE, group=LAB,
                                                 partition="gpu",
                                                 group_limits={"cpus": 8, "mem": "64G"})
    for name in ("dmn0", "dmn1"):
        await make_user(store, name, site=SITE, access=["login-ssh", "slurm"])
        await AddGroupMember.run(store, AUTHOR, group=LAB, user=name, site=SITE)
    await AddUserSshKey.run(store, AUTHOR, name="dmn0", key=ED25519_KEY)
    origin = daemon.base / "origin.git"
    git(daemon.base, "init", "--bare", "-b", "main", str(origin))
    git(daemon.base, "clone", str(origin), str(daemon.repo))
    (daemon.repo / "README").write_text("puppet repo\n")
    git(daemon.repo, "add", ".")
    git(daemon.repo, "commit", "-m", "init")
    git(daemon.repo, "push", "-u", "origin", "main")
    yield store


@pytest.fixture(scope="module")
def workers(daemon: Daemon, farm: Store,
            slurm_accounting: SlurmAccounting) -> Iterator[dict[str, DaemonProcess]]:
    logs = daemon.base
    procs = {
        HUB: DaemonProcess(["worker"], daemon.path, logs / "hub.log"),
        SITE_WORKERS[0]: DaemonProcess(["worker", "--site", SITE], daemon.path,
                                       logs / "site-a.log", env=slurm_accounting.env),
        SITE_WORKERS[1]: DaemonProcess(["worker", "--site", SITE, "--name", "slurm-farm-b@%h"],
                                       daemon.path, logs / "site-b.log",
                                       env=slurm_accounting.env),
    }
    try:
        wait_until_consuming(daemon.app, procs)
        yield procs
    finally:
        for proc in procs.values():
            proc.kill()


def taskmeta(store: Store, task_id: str) -> Any:
    return store.database["celery_taskmeta"].find_one({"_id": task_id})


async def get(daemon: Daemon, task_id: str) -> Any:
    result = daemon.result(task_id)
    await asyncio.to_thread(result.get, timeout=TIMEOUT, interval=0.05, propagate=False)
    return result


async def enqueue(cli, daemon: Daemon, *args: str):  # type: ignore[no-untyped-def]
    return await cli("daemon", "enqueue", *args, "--json", config=daemon.path)


def assoc_users(slurm: SlurmAccounting) -> set[str]:
    out = slurm.sacctmgr("-i", "-P", "-n", "show", "assoc", "where", f"cluster={CLUSTER}",
                         f"account={LAB}", "format=user").stdout
    return {line for line in out.split() if line}


# -- routing and results -------------------------------------------------------------------


async def test_enqueue_slurm_sync_runs_on_the_site_worker_and_lands_in_taskmeta(
        cli, daemon, farm, workers, slurm_accounting):
    r = await enqueue(cli, daemon, "slurm_sync", "--site", SITE, "--wait", "--timeout", "60")
    assert r.code == 0, r.stderr
    [row] = r.json()
    assert (row["task"], row["site"], row["queue"], row["state"]) == \
        ("slurm_sync", SITE, "slurm.farm", "ok")
    assert row["result"]["worker"] in SITE_WORKERS and row["result"]["queue"] == "slurm.farm"
    assert row["result"]["applied"] is True and row["result"]["cluster"] == CLUSTER
    assert assoc_users(slurm_accounting) >= {"dmn0", "dmn1"}
    doc = await taskmeta(farm, row["id"])
    assert doc["status"] == "SUCCESS" and doc["name"] == "cheeto.slurm_sync"
    assert doc["worker"] in SITE_WORKERS and doc["queue"] == "slurm.farm"
    assert doc["args"] == [SITE] and json.loads(doc["result"])["status"] == "ok"
    run = await SyncRun.get(row["result"]["run_id"])
    assert run.status == "ok" and run.author == "cheeto-daemon" and run.apply


async def test_a_bare_delay_reaches_the_site_queue_through_task_routes(daemon, farm, workers):
    sent = daemon.app.tasks["cheeto.slurm_sync"].delay(SITE)
    result = await get(daemon, sent.id)
    assert result.state == "SUCCESS", result.result
    assert result.result["worker"] in SITE_WORKERS
    assert result.result["queue"] == "slurm.farm"
    assert result.result["processes"] == 0  # converged by the previous test


async def test_slurm_sync_forced_onto_the_hub_queue_refuses_to_run(daemon, farm, workers):
    sent = daemon.app.tasks["cheeto.slurm_sync"].apply_async((SITE,), queue="cheeto")
    result = await get(daemon, sent.id)
    assert result.state == "FAILURE" and type(result.result).__name__ == "WrongQueue"
    assert str(result.result) == ("slurm_sync for farm arrived on queue 'cheeto'; it only "
                                  "runs from 'slurm.farm' (on the site's head node)")
    doc = await taskmeta(farm, sent.id)
    assert doc["worker"] == HUB


async def test_hub_tasks_never_run_on_a_site_worker(daemon, farm, workers):
    result = await get(daemon, daemon.app.tasks["cheeto.sympa_export"].delay(SITE).id)
    assert result.state == "SUCCESS", result.result
    assert (result.result["worker"], result.result["queue"]) == (HUB, "cheeto")


# -- at most one run per (task, site) -----------------------------------------------------


async def test_two_workers_racing_on_one_site_make_exactly_one_run(
        daemon, farm, workers, slurm_accounting):
    await make_user(farm, "dmn2", site=SITE, access=["login-ssh", "slurm"])
    await AddGroupMember.run(farm, AUTHOR, group=LAB, user="dmn2", site=SITE)
    runs_before = await SyncRun.find({"target": "slurm", "site": SITE}).count()
    daemon.delay_file.write_text("1.5")  # the run that wins holds the lease >= 1.5 s
    try:
        task = daemon.app.tasks["cheeto.slurm_sync"]
        sent = [task.delay(SITE), task.delay(SITE)]
        results = [await get(daemon, s.id) for s in sent]
    finally:
        daemon.delay_file.unlink()
    assert [r.state for r in results] == ["SUCCESS", "SUCCESS"], [r.result for r in results]
    outcomes = sorted((r.result["status"], r.result["worker"]) for r in results)
    assert [status for status, _ in outcomes] == ["ok", "skipped"]
    assert {worker for _, worker in outcomes} == set(SITE_WORKERS)  # one each, concurrently
    skipped = next(r.result for r in results if r.result["status"] == "skipped")
    assert skipped["reason"].startswith("another task.slurm_sync sync for farm is running "
                                        f"by {HOST}:")
    assert await SyncRun.find({"target": "slurm", "site": SITE}).count() == runs_before + 1
    assert "dmn2" in assoc_users(slurm_accounting)
    assert await SyncLease.count() == 0


@pytest.fixture
def dead_holder() -> str:
    """The lease holder name of a process of this pid namespace that has ended."""
    dead = subprocess.Popen(["sleep", "30"])
    identity = process_identity(dead.pid)
    dead.kill()
    dead.wait()
    return f"{HOST}:{dead.pid}:abcd1234:{identity}"


async def test_a_lease_held_elsewhere_skips_but_a_dead_holders_lease_is_taken_over(
        daemon, farm, workers, dead_holder):
    task = daemon.app.tasks["cheeto.sympa_export"]
    held = SyncLease(id="task.sympa_export:farm", holder="otherhost:4242:abcd1234",
                     expires_at=utcnow() + timedelta(hours=1))
    await held.insert()
    result = await get(daemon, task.delay(SITE).id)
    assert result.result["status"] == "skipped" and "otherhost:4242" in result.result["reason"]
    await held.delete()

    # a process on this host that no longer runs: a worker killed mid-task
    stale = SyncLease(id="task.sympa_export:farm", holder=dead_holder,
                      expires_at=utcnow() + timedelta(hours=1))
    await stale.insert()
    result = await get(daemon, task.delay(SITE).id)
    assert result.result["status"] == "ok", result.result
    assert await SyncLease.count() == 0


async def test_a_worker_killed_mid_task_loses_nothing(daemon, farm, workers,
                                                      slurm_accounting):
    """Late acks: the killed child's message goes back to the queue, and the redelivered
    run clears the dead child's task and reconciler leases instead of being skipped."""
    await make_user(farm, "dmn4", site=SITE, access=["login-ssh", "slurm"])
    await AddGroupMember.run(farm, AUTHOR, group=LAB, user="dmn4", site=SITE)
    daemon.delay_file.write_text("30")  # the first run hangs in its write...
    try:
        sent = daemon.app.tasks["cheeto.slurm_sync"].delay(SITE)
        for _ in range(600):  # ...holding both leases
            leases = {doc.id: doc.holder for doc in await SyncLease.find_all().to_list()}
            if {"task.slurm_sync:farm", "slurm:farm"} <= set(leases):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"the run never took its leases: {leases}")
        holder = leases["task.slurm_sync:farm"]
        assert holder.startswith(f"{HOST}:")
        pid = int(holder.split(":")[1])
    finally:
        daemon.delay_file.unlink()
    os.kill(pid, signal.SIGKILL)  # the pool child, mid-apply
    result = await get(daemon, sent.id)
    assert result.state == "SUCCESS", result.result
    assert result.result["status"] == "ok" and result.result["worker"] in SITE_WORKERS
    assert "dmn4" in assoc_users(slurm_accounting)
    assert await SyncLease.count() == 0
    logs = "".join(workers[name].output() for name in SITE_WORKERS)
    assert "removed the lease task.slurm_sync:farm of" in logs
    assert "removed the lease slurm:farm of" in logs


# -- failures are FAILURE ------------------------------------------------------------------


async def test_a_guard_trip_is_a_failure_in_taskmeta(cli, daemon, farm, workers,
                                                     slurm_accounting):
    slurm_accounting.sacctmgr("-i", "add", "user", "dmnx", f"account={LAB}",
                              f"cluster={CLUSTER}", "partition=gpu")  # hand-made drift
    daemon.write(slurm_sync={"max_deletions": 0})
    try:
        r = await enqueue(cli, daemon, "slurm_sync", "--site", SITE, "--wait")
    finally:
        daemon.write()
    assert r.code == 1
    [row] = r.json()
    assert row["state"] == "failed"
    assert row["error"].startswith("GuardTripped: the plan removes 1 Slurm entities")
    assert "more than --max-deletions 0; nothing was changed" in row["error"]
    assert "FAILED" in r.stderr and "1 of 1 run(s) did not succeed" in r.stderr
    doc = await taskmeta(farm, row["id"])
    assert doc["status"] == "FAILURE" and doc["worker"] in SITE_WORKERS
    assert json.loads(doc["result"])["exc_type"] == "GuardTripped"
    assert "dmnx" in assoc_users(slurm_accounting)  # nothing was changed
    run = await SyncRun.find({"target": "slurm", "site": SITE}).sort(
        -SyncRun.started_at).first_or_none()
    assert run.status == "aborted"
    # with the cap back at 50 the next run repairs the drift
    r = await enqueue(cli, daemon, "slurm_sync", "--site", SITE, "--wait")
    assert r.code == 0 and "dmnx" not in assoc_users(slurm_accounting)


async def test_a_sync_whose_commands_fail_is_a_failure_after_recording_its_run(
        cli, daemon, farm, workers, slurm_accounting):
    await make_user(farm, "dmn3", site=SITE, access=["login-ssh", "slurm"])
    await AddGroupMember.run(farm, AUTHOR, group=LAB, user="dmn3", site=SITE)
    daemon.write(slurm_sync={"timeout_seconds": 0.5})
    daemon.delay_file.write_text("2")  # a write that hangs past the timeout is killed
    try:
        r = await enqueue(cli, daemon, "slurm_sync", "--site", SITE, "--wait")
    finally:
        daemon.delay_file.unlink()
        daemon.write()
    assert r.code == 1
    [row] = r.json()
    assert row["state"] == "failed"
    assert row["error"].startswith("SyncFailed: slurm_sync farm: 1 sacctmgr command(s) "
                                   "failed, 0 skipped (SyncRun ")
    assert "add user dmn3" in row["error"] and "timed out after" in row["error"]
    doc = await taskmeta(farm, row["id"])
    assert doc["status"] == "FAILURE" and json.loads(doc["result"])["exc_type"] == "SyncFailed"
    run = await SyncRun.find({"target": "slurm", "site": SITE}).sort(
        -SyncRun.started_at).first_or_none()
    assert run.status == "failed" and run.error == "1 command(s) failed, 0 skipped"
    assert [i.outcome for i in await live_items(run)] == ["failed"]
    assert "dmn3" not in assoc_users(slurm_accounting)
    r = await enqueue(cli, daemon, "slurm_sync", "--site", SITE, "--wait")
    assert r.code == 0 and "dmn3" in assoc_users(slurm_accounting)


async def test_a_run_that_finds_its_block_disabled_fails_with_the_reason(daemon, farm,
                                                                         workers):
    daemon.write(sympa={"enabled": False})
    try:
        result = await get(daemon, daemon.app.tasks["cheeto.sympa_export"].delay(SITE).id)
    finally:
        daemon.write()
    assert result.state == "FAILURE"
    assert type(result.result).__name__ == "TaskDisabled"
    assert str(result.result) == ("task sympa_export is disabled: daemon.tasks.sympa has "
                                  "enabled: false")


async def test_an_unknown_site_sent_directly_fails_cleanly(daemon, farm, workers):
    result = await get(daemon, daemon.app.tasks["cheeto.sympa_export"].delay("nowhere").id)
    assert result.state == "FAILURE" and type(result.result).__name__ == "NotFound"


# -- the hub's tasks ------------------------------------------------------------------------


async def test_sympa_export_writes_the_file_atomically(cli, daemon, farm, workers):
    target = daemon.sympa_dir / f"{SITE}.txt"
    target.write_text("stale@example.org\n")
    before = target.stat().st_ino
    r = await enqueue(cli, daemon, "sympa_export", "--wait")  # sites from daemon.sites
    assert r.code == 0, r.stderr
    [row] = r.json()
    emails = await sympa_emails(SITE)
    assert row["result"]["path"] == str(target) and row["result"]["emails"] == len(emails)
    assert target.read_text() == sympa_text(emails)
    assert "dmn0@example.org\n" in target.read_text()
    assert target.stat().st_ino != before  # renamed over, never rewritten in place
    assert oct(target.stat().st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in daemon.sympa_dir.iterdir()) == [f"{SITE}.txt"]


async def test_reap_runs_on_the_hub_as_a_singleton(cli, daemon, farm, workers):
    """The people tasks (issue 7) share the frame: a singleton on the hub queue."""
    r = await enqueue(cli, daemon, "reap", "--wait")
    assert r.code == 2 and "reap" in r.stderr  # no block: disabled
    await make_user(farm, "dmnleaver", site=SITE)
    await SetUserStatus.run(farm, AUTHOR, name="dmnleaver", status="offboarding", reason="x")
    await User.get_pymongo_collection().update_one(
        {"name": "dmnleaver"}, {"$currentDate": {"expires_at": True}})
    daemon.write(reap={"notify": False})
    try:
        r = await enqueue(cli, daemon, "reap", "--wait")
        assert r.code == 0, r.stderr
        [row] = r.json()
        assert row["result"]["worker"] == HUB and row["result"]["site"] is None
        assert (await User.find_one(User.name == "dmnleaver")).status == "inactive"
    finally:
        daemon.write()


async def test_request_escalate_runs_on_the_hub_and_escalates_once(cli, daemon, farm, workers):
    """Issue 16: the beat task stamps each request past its SLA once, on the hub."""
    import time

    from cheeto_like.models import Request
    from cheeto_like.operations.request import FileRequest

    old = await FileRequest.run(farm, "dmn1", kind="join", site=SITE, group=LAB, user="dmn1",
                                steps=["sponsor"], created_epoch=int(time.time()) - 9 * 86400)
    daemon.write(requests={})
    try:
        r = await enqueue(cli, daemon, "request_escalate", "--wait")
        assert r.code == 0, r.stderr
        [row] = r.json()
        assert row["result"]["worker"] == HUB and row["result"]["escalated"] == [old.number]
        assert (await Request.find_one({"number": old.number})).escalated_epoch is not None
        r = await enqueue(cli, daemon, "request_escalate", "--wait")
        assert r.code == 0 and r.json()[0]["result"]["escalated"] == []
        [run] = await SyncRun.find({"target": "requests"}).to_list()
        assert run.extra["escalations"][0]["key"] == f"request:{old.number}"
    finally:
        daemon.write()


async def test_ldap_sync_projects_the_site_into_the_directory(cli, daemon, farm, workers,
                                                              slapd):
    r = await enqueue(cli, daemon, "ldap_sync", "--site", SITE, "--wait")
    assert r.code == 0, r.stderr
    [row] = r.json()
    assert row["result"]["worker"] == HUB and row["result"]["writes"] > 0
    people = slapd.ldapsearch(f"ou={PEOPLE},{slapd.suffix}", "(uid=dmn0)", "uid")
    assert "uid: dmn0" in people
    assert "cn: dmnlab" in slapd.ldapsearch(f"ou=groups,ou={SITE},{slapd.suffix}",
                                           "(cn=dmnlab)", "cn")
    run = await SyncRun.get(row["result"]["run_id"])
    assert run.status == "ok" and run.author == "cheeto-daemon" and run.extra["full"] is True
    again = (await enqueue(cli, daemon, "ldap_sync", "--site", SITE, "--wait")).json()[0]
    assert again["state"] == "ok" and again["result"]["writes"] == 0


async def test_puppet_sync_commits_and_pushes_to_the_origin(cli, daemon, farm, workers):
    r = await enqueue(cli, daemon, "puppet_sync", "--site", SITE, "--wait")
    assert r.code == 0, r.stderr
    [row] = r.json()
    result = row["result"]
    assert result["committed"] and result["pushed"] and row["result"]["worker"] == HUB
    assert "keys/dmn0.pub" in result["changed"]
    assert git(daemon.repo, "rev-parse", "HEAD") == git(daemon.repo, "rev-parse",
                                                        "origin/main") == result["commit"]
    assert (daemon.repo / "domains/farm.hpc.example.org/merged/all.yaml").exists()
    run = await SyncRun.get(result["run_id"])
    assert run.status == "ok" and run.author == "cheeto-daemon"


# -- beat, status, shutdown -----------------------------------------------------------------


async def test_beat_sends_interval_ticks_that_the_hub_runs(daemon, farm, workers):
    daemon.write(sympa={"schedule": 1})
    started = utcnow()
    beat = DaemonProcess(["beat", "--pidfile", str(daemon.base / "beat.pid")], daemon.path,
                         daemon.base / "beat.log")
    try:
        for _ in range(300):
            if await farm.database["celery_taskmeta"].find_one(
                    {"name": "cheeto.sympa_export", "date_done": {"$gte": started}}):
                break
            assert beat.proc.poll() is None, beat.output()
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"no beat tick ran within 30 s\n{beat.output()}")
        # a second beat with the same pidfile refuses to start
        second = DaemonProcess(["beat", "--pidfile", str(daemon.base / "beat.pid")],
                               daemon.path, daemon.base / "beat2.log")
        assert await asyncio.to_thread(second.proc.wait, 60) == 2
        assert f"error: beat is already running (pid {beat.proc.pid}, pidfile " in \
            second.output()
    finally:
        code = beat.interrupt()
        daemon.write()
    output = beat.output()
    assert code == 0, output
    assert "sympa-export-farm -> cheeto cheeto.sympa_export every 0:00:01" in output
    assert "task slurm_sync has no schedule; it runs only when enqueued" in output
    assert "Traceback" not in output
    assert not (daemon.base / "beat.pid").exists()


async def test_status_shows_the_last_run_of_each_task_and_site(cli, daemon, farm, workers):
    r = await cli("daemon", "status", "--json", config=daemon.path)
    assert r.code == 0, r.stderr
    rows = {(row["task"], row["site"]): row for row in r.json()}
    assert set(rows) >= {("slurm_sync", SITE), ("sympa_export", SITE), ("puppet_sync", SITE),
                         ("ldap_sync", SITE), ("sympa_export", "nowhere")}
    slurm = rows[("slurm_sync", SITE)]
    assert (slurm["state"], slurm["source"]) == ("ok", "celery")
    assert slurm["by"] in SITE_WORKERS and slurm["duration_s"] > 0 and slurm["when"]
    assert rows[("sympa_export", "nowhere")]["state"] == "failed"
    assert rows[("sympa_export", "nowhere")]["error"].startswith("NotFound: ")
    human = await cli("daemon", "status", config=daemon.path)
    assert "Last run of each (task, site)" in human.stderr and "slurm_sync" in human.stderr


async def test_workers_shut_down_cleanly_on_ctrl_c(workers):
    before = {name: len(proc.output()) for name, proc in workers.items()}
    for proc in workers.values():
        proc.proc.send_signal(signal.SIGINT)  # all at once: each waits for its pool
    for name, proc in workers.items():
        code = await asyncio.to_thread(proc.interrupt, send=False)
        shutdown = proc.output()[before[name]:]
        assert code == 0, f"{name}:\n{proc.output()}"
        assert "Warm shutdown" in shutdown and "Traceback" not in shutdown, shutdown
    assert "Traceback" not in workers[HUB].output()
    assert f"worker {HUB} consuming cheeto" in workers[HUB].output()
    assert f"worker {SITE_WORKERS[0]} consuming slurm.farm" in \
        workers[SITE_WORKERS[0]].output()
