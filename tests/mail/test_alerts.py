"""The operator-alert digest: failed and refused sync runs, failed and stuck daemon tasks,
mailed once to the operators through a real SMTP server."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from cheeto_like.config import AlertsConfig, Config
from cheeto_like.errors import ConfigError
from cheeto_like.models import SyncLease, SyncRun
from cheeto_like.operations.notify import send_alert_digest
from tests.factories import AUTHOR, history
from tests.services.fixtures_people import mail_config

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


@pytest.fixture(autouse=True)
async def no_taskmeta(db):
    """``db`` wipes the models' collections; the result backend's is ours to empty."""
    await db.database["celery_taskmeta"].delete_many({})


@pytest.fixture
def config(mailbox):
    return Config(mail=mail_config(mailbox),
                  alerts=AlertsConfig(to=["hpc-ops@example.org"], stuck_after_minutes=60))


async def run(target, site, status, *, started, error=None, finished=True):
    doc = SyncRun(target=target, site=site, status=status, started_at=started,
                  finished_at=started + timedelta(minutes=1) if finished else None,
                  error=error)
    await doc.insert()
    return doc


async def taskmeta(db, task_id, status, *, done, name="cheeto.ldap_sync", args=("farm",),
                   result=None):
    await db.database["celery_taskmeta"].insert_one({
        "_id": task_id, "status": status, "date_done": done, "name": name, "args": list(args),
        "result": json.dumps(result), "traceback": None})


async def test_the_digest_reports_each_kind_of_problem_once(db, config, mailbox):
    await run("slurm", "farm", "failed", started=NOW - 2 * HOUR, error="3 command(s) failed")
    await run("ldap", "farm", "aborted", started=NOW - 3 * HOUR,
              error="the plan deletes 80 entries, more than 50")
    await run("puppet", "farm", "ok", started=NOW - HOUR)
    stuck = await run("ldap", "peloton", "running", started=NOW - 5 * HOUR, finished=False)
    await SyncLease(id="task.slurm_sync:farm", holder="hub:123:abc",
                    acquired_at=NOW - 4 * HOUR, expires_at=NOW + HOUR).insert()
    await SyncLease(id="slurm:peloton", holder="hub:9:x",  # held 5 minutes: fine
                    acquired_at=NOW - timedelta(minutes=5), expires_at=NOW + HOUR).insert()
    await taskmeta(db, "t-failed", "FAILURE", done=NOW - HOUR, result={
        "exc_type": "SyncFailed", "exc_message": ["ldap_sync farm: 2 LDAP write(s) failed"]})
    await taskmeta(db, "t-slow", "SUCCESS", done=NOW - HOUR, name="cheeto.iam_sync", args=(),
                   result={"status": "ok", "duration_s": 7200})
    await taskmeta(db, "t-fine", "SUCCESS", done=NOW - HOUR, result={"duration_s": 3})

    result = await send_alert_digest(db, AUTHOR, config, now=NOW)
    assert result.sent and result.recorded
    digest = result.digest
    assert digest.counts() == {"sync_failures": 1, "guard_trips": 1, "failed_tasks": 1,
                               "stuck_tasks": 3, "escalations": 0,
                               "quota_thresholds": 0}
    [mail] = mailbox.messages
    assert mail.rcpt_tos == ["hpc-ops@example.org"]
    assert mail.subject == "[cheeto] 6 problem(s) need attention"
    text = mail.text()
    assert "slurm farm at 2025-03-01 10:00: 3 command(s) failed" in text
    assert "more than 50" in text
    assert "cheeto.ldap_sync(farm) t-failed" in text and "SyncFailed: ldap_sync farm" in text
    assert f"ldap sync peloton {stuck.id} (running)" in text
    assert "lease task.slurm_sync:farm" in text and "held by hub:123:abc" in text
    assert "cheeto.iam_sync t-slow (took 120 min)" in text
    assert "slurm:peloton" not in text and "t-fine" not in text and "puppet" not in text
    [row] = await history("send_user_email")
    assert row.changes["email_type"] == "operator_alert" and row.changes["sent"] is True
    recorded = await SyncRun.find_one(SyncRun.target == "alerts")
    assert recorded.status == "ok" and recorded.counts["stuck_tasks"] == 3

    # nothing new: nothing sent (the stuck run and lease were reported already)
    later = NOW + timedelta(minutes=30)
    again = await send_alert_digest(db, AUTHOR, config, now=later)
    assert not again.sent and again.digest.total == 0
    assert len(mailbox.messages) == 1
    # a new failure: only it is reported
    await run("slurm", "farm", "failed", started=later, error="new trouble")
    third = await send_alert_digest(db, AUTHOR, config, now=later + timedelta(minutes=10))
    assert third.sent and third.digest.counts()["sync_failures"] == 1
    assert "new trouble" in mailbox.messages[-1].text()
    assert "3 command(s) failed" not in mailbox.messages[-1].text()


async def test_a_digest_that_could_not_be_sent_is_repeated(db, mailbox):
    from cheeto_like.config import MailConfig, SMTPConfig
    from tests.services.http_server import free_loopback_port

    dead = Config(mail=MailConfig(from_address="hpc@example.org",
                                  smtp=SMTPConfig(host="127.0.0.1", port=free_loopback_port(),
                                                  timeout_seconds=2)),
                  alerts=AlertsConfig(to=["hpc-ops@example.org"]))
    await run("slurm", "farm", "failed", started=NOW - HOUR, error="boom")
    first = await send_alert_digest(db, AUTHOR, dead, now=NOW)
    assert not first.sent and first.error and not first.recorded
    live = Config(mail=mail_config(mailbox), alerts=AlertsConfig(to=["hpc-ops@example.org"]))
    second = await send_alert_digest(db, AUTHOR, live, now=NOW + HOUR)
    assert second.sent and "boom" in mailbox.messages[0].text()


async def test_dry_run_and_missing_section(db, config, mailbox):
    await run("slurm", "farm", "failed", started=NOW - HOUR, error="boom")
    preview = await send_alert_digest(db, AUTHOR, config, now=NOW, dry_run=True)
    assert preview.digest.total == 1 and not preview.sent
    assert mailbox.messages == [] and await SyncRun.find_one(SyncRun.target == "alerts") is None
    with pytest.raises(ConfigError, match="alerts section"):
        await send_alert_digest(db, AUTHOR, Config(), now=NOW)


async def test_the_first_digest_looks_back_only_so_far(db, config, mailbox):
    await run("slurm", "farm", "failed", started=NOW - 48 * HOUR, error="ancient")
    result = await send_alert_digest(db, AUTHOR, config, now=NOW)
    assert result.digest.total == 0 and mailbox.messages == []
