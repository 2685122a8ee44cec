"""The cluster monitor and audit tasks: in the task table, their bodies on the live
cluster and the real store, their findings in the operator digest once each, and one
``cluster_monitor`` run through RabbitMQ on a real site worker."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest

from cheeto_like.config import (
    AlertsConfig,
    AuditConfig,
    AuditTask,
    ClusterMonitorTask,
    Config,
)
from cheeto_like.daemon.config import TASKS
from cheeto_like.daemon.jobs_audit import AuditUndelivered, audit_body
from cheeto_like.daemon.tasks import FUNCTIONS, _cluster_monitor
from cheeto_like.models import AuditRun, SyncRun
from cheeto_like.models.fields import utcnow
from cheeto_like.operations.notify import send_alert_digest
from tests.audit.conftest import chat, chat_server  # noqa: F401
from tests.conftest import module_database
from tests.factories import AUTHOR, make_site, make_user
from tests.services.fixtures_people import mail_config, mailbox, smtp_server  # noqa: F401
from tests.services.rabbitmq import RabbitMQ
from tests.services.slurm_cluster import SlurmCluster, ensure_unix_user

from .celery_harness import DaemonProcess, mongo_block, node, wait_until_consuming, write_config


def test_the_tasks_are_in_the_table():
    monitor, audit = TASKS["cluster_monitor"], TASKS["audit"]
    assert monitor.on_site_queue and monitor.per_site and monitor.queue("farm") == "slurm.farm"
    assert not audit.per_site and audit.needs == ("audit",) and audit.queue(None) == "cheeto"
    assert {"cluster_monitor", "audit"} <= set(FUNCTIONS)


def test_beat_schedules_the_monitor_per_site_and_the_audit_weekly():
    from cheeto_like.config import DaemonConfig, DaemonTasks
    from cheeto_like.daemon.schedule import build_beat_schedule

    config = Config(audit=AuditConfig(to=["sec@example.org"]), daemon=DaemonConfig(
        sites=["farm", "peloton"], tasks=DaemonTasks(
            cluster_monitor=ClusterMonitorTask(schedule=1800),
            audit=AuditTask(schedule="0 6 * * 1"))))
    entries = build_beat_schedule(config).entries
    assert entries["cluster-monitor-farm"]["args"] == ("farm",)
    assert entries["cluster-monitor-peloton"]["options"]["queue"] == "slurm.peloton"
    assert entries["weekly-audit"]["task"] == "cheeto.audit"
    assert entries["weekly-audit"]["options"]["queue"] == "cheeto"
    # without the audit section the task is disabled, and says why
    plan = build_beat_schedule(config.model_copy(update={"audit": None}))
    assert "weekly-audit" not in plan.entries
    assert any("needs the audit section" in note for note in plan.notes)


@pytest.fixture
async def held(db, slurm_cluster: SlurmCluster, monkeypatch):
    """Site farm on the live cluster with one job held by MaxJobs=1."""
    slurm_cluster.reset()
    for key, value in slurm_cluster.env.items():
        monkeypatch.setenv(key, value)
    await make_site(db, "farm")
    slurm_cluster.sacctmgr("-i", "add", "account", "tlab", "cluster=farm")
    ensure_unix_user("tmon")
    slurm_cluster.sacctmgr("-i", "add", "user", "tmon", "account=tlab", "cluster=farm",
                           "maxjobs=1")
    first = slurm_cluster.submit("tmon", "-A", "tlab", wrap="sleep 60").job_id
    slurm_cluster.wait_started(first)
    job = slurm_cluster.submit("tmon", "-A", "tlab", wrap="sleep 60").job_id
    assert slurm_cluster.wait_pending_reason(job).reason == "AssocMaxJobsLimit"
    yield job
    slurm_cluster.cancel_all()


async def test_monitor_runs_feed_the_operator_digest_once(db, held, mailbox):  # noqa: F811
    block = ClusterMonitorTask(pending_over_hours=0, down_over_hours=0)
    summary = await _cluster_monitor(db, Config(), block, "farm", AUTHOR)
    assert summary["stalled_jobs"] == [held] and summary["down_nodes"] == []
    run = await SyncRun.get(summary["run_id"])
    assert run.target == "cluster" and run.counts == {"stalled_jobs": 1, "down_nodes": 0}
    [escalation] = run.extra["escalations"]
    assert escalation["key"] == f"job:farm:{held}:limit"

    config = Config(mail=mail_config(mailbox), alerts=AlertsConfig(to=["ops@example.org"]))
    result = await send_alert_digest(db, AUTHOR, config)
    assert result.sent and result.digest.counts()["escalations"] == 1
    [mail] = mailbox.messages
    text = mail.text()
    assert "Needs a look" in text and f"job {held} of tmon" in text
    assert "AssocMaxJobsLimit" in text and "cheeto ng slurm why -s farm -u tmon" in text

    # the next monitor run sees the same job: the next digest does not repeat it
    await _cluster_monitor(db, Config(), block, "farm", AUTHOR)
    again = await send_alert_digest(db, AUTHOR, config, now=utcnow() + timedelta(seconds=1))
    assert again.digest.escalations == [] and not again.sent
    assert len(mailbox.messages) == 1


async def test_audit_body_delivers_or_fails(db, chat):  # noqa: F811
    await make_site(db, "farm")
    await make_user(db, "tsudo", site="farm", access=["login-ssh", "sudo"])
    config = Config(audit=AuditConfig(webhook_url=chat.url("hook")))
    summary = await audit_body(db, config, AuditTask(slurm=False, ldap=False), "*", AUTHOR)
    assert summary["delivered"] == {"webhook": "sent"}
    assert summary["counts"]["info"] == 1  # tsudo on the review list
    assert "privileged" in chat.messages[0][1]["text"]
    assert (await AuditRun.get(summary["run_id"])).delivered == {"webhook": "sent"}

    chat.fail_next(503)
    with pytest.raises(AuditUndelivered, match="digest not delivered"):
        await audit_body(db, config, AuditTask(slurm=False, ldap=False), "*", AUTHOR)


async def test_cluster_monitor_runs_through_rabbitmq_on_the_site_worker(
        db, held, rabbitmq: RabbitMQ, mongo_config, request, tmp_path):
    from cheeto_like.config import load_config
    from cheeto_like.daemon.app import make_app

    path = write_config(
        tmp_path / "config.yaml", mongo_block(mongo_config, module_database(request)),
        {"broker_url": rabbitmq.vhost_url(module_database(request)), "sites": ["farm"],
         "task_time_limit": 60,
         "tasks": {"slurm_sync": {"apply": False},  # a site worker needs its block
                   "cluster_monitor": {"pending_over_hours": 0, "down_over_hours": 0}}})
    app = make_app(load_config(path))
    name = node("slurm-farm-mon@%h")
    worker = DaemonProcess(["worker", "--site", "farm", "--name", "slurm-farm-mon@%h"], path,
                           tmp_path / "worker.log")
    try:
        wait_until_consuming(app, {name: worker})
        result = app.send_task("cheeto.cluster_monitor", args=["farm"], queue="slurm.farm")
        outcome = await asyncio.to_thread(result.get, timeout=60, interval=0.1)
    finally:
        worker.kill()
    assert outcome["status"] == "ok" and outcome["queue"] == "slurm.farm"
    assert outcome["stalled_jobs"] == [held]
    run = await SyncRun.get(outcome["run_id"])
    assert run.target == "cluster" and run.site == "farm"
    # the queue as the "Me" page reads it (the hub never runs squeue)
    from cheeto_like.queries.job_snapshot import jobs_of

    mine = await jobs_of("farm", "tmon")
    assert held in [j["job_id"] for j in mine.jobs] and len(mine.jobs) == 2
    assert outcome["snapshot"]


async def test_audit_and_request_escalation_run_through_rabbitmq_on_the_hub_worker(
        db, chat, rabbitmq: RabbitMQ, mongo_config, request, tmp_path):  # noqa: F811
    """The two hub tasks beat sends (``weekly-audit``, ``request-escalate``), sent by name
    to the ``cheeto`` queue of the session's broker and run by a real ``cheeto daemon
    worker`` process: the audit's digest reaches the chat webhook and its run is kept; a
    request past its SLA is escalated once, and a second run escalates nothing."""
    from cheeto_like.config import load_config
    from cheeto_like.daemon.app import make_app
    from cheeto_like.models import Request
    from cheeto_like.operations.group_membership import AddGroupSponsor
    from cheeto_like.operations.request import file_request
    from tests.factories import make_group

    await make_site(db, "farm")
    for name in ("alice", "bob"):
        await make_user(db, name, site="farm")
    await make_user(db, "tsudo", site="farm", access=["login-ssh", "sudo"])
    await make_group(db, "lab")
    await AddGroupSponsor.run(db, AUTHOR, group="lab", user="bob", site="farm")
    late = await file_request(db, "alice", Config(), kind="join", site="farm", group="lab",
                              user="alice", created_epoch=int(time.time()) - 10 * 86400)

    path = write_config(
        tmp_path / "config.yaml", mongo_block(mongo_config, module_database(request)),
        {"broker_url": rabbitmq.vhost_url(module_database(request)), "sites": [],
         "task_time_limit": 60,
         "tasks": {"audit": {"slurm": False, "ldap": False}, "requests": {}}})
    with path.open("a") as config_file:  # a section without profiles
        config_file.write(f"audit:\n  webhook_url: {chat.url('hook')}\n")
    app = make_app(load_config(path))
    name = node("hub-audit@%h")
    worker = DaemonProcess(["worker", "--name", "hub-audit@%h"], path, tmp_path / "worker.log")
    try:
        wait_until_consuming(app, {name: worker})
        audited = app.send_task("cheeto.audit", queue="cheeto")
        escalated = app.send_task("cheeto.request_escalate", queue="cheeto")
        audit_out = await asyncio.to_thread(audited.get, timeout=90, interval=0.1)
        first = await asyncio.to_thread(escalated.get, timeout=90, interval=0.1)
        again = await asyncio.to_thread(
            app.send_task("cheeto.request_escalate", queue="cheeto").get,
            timeout=90, interval=0.1)
    finally:
        worker.kill()

    assert audit_out["status"] == "ok" and audit_out["queue"] == "cheeto"
    assert audit_out["worker"] == name
    assert audit_out["delivered"] == {"webhook": "sent"}
    [(token, body)] = chat.messages
    assert token == "hook" and "tsudo" in body["text"]
    assert (await AuditRun.get(audit_out["run_id"])).delivered == {"webhook": "sent"}

    assert first["status"] == "ok" and first["escalated"] == [late.number]
    assert again["status"] == "ok" and again["escalated"] == []
    stored = await Request.find_one({"number": late.number})
    assert stored is not None and stored.escalated_epoch is not None
