"""Quota thresholds in the operator digest, through a real SMTP server: the users and
accounts told about a threshold since the last digest are listed once, with the highest
threshold passed (100 %: their new jobs are held in Slurm)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cheeto_like.config import AlertsConfig, Config
from cheeto_like.operations.group_membership import AddGroupSponsor
from cheeto_like.operations.notify import send_alert_digest
from cheeto_like.operations.quota import AdjustUsage, SetQuota
from cheeto_like.operations.quota_notify import send_quota_notices
from tests.factories import AUTHOR, make_group, make_site, make_user
from tests.services.fixtures_people import mail_config

NOW = datetime(2026, 11, 25, 12, tzinfo=UTC)
HOUR = timedelta(hours=1)


@pytest.fixture(autouse=True)
async def no_taskmeta(db):
    await db.database["celery_taskmeta"].delete_many({})


@pytest.fixture
def config(mailbox):
    return Config(mail=mail_config(mailbox),
                  alerts=AlertsConfig(to=["hpc-ops@example.org"], stuck_after_minutes=60))


async def test_thresholds_passed_go_into_the_digest_once(db, config, mailbox):
    await make_site(db, "farm")
    await make_user(db, "alice", email="alice@example.org")
    await make_user(db, "prof", email="prof@example.org")
    await make_group(db, "lab")
    await AddGroupSponsor.run(db, AUTHOR, group="lab", user="prof", site="farm")
    await SetQuota.run(db, AUTHOR, site="farm", user="alice", cpu_minutes=100,
                       period="monthly")
    await SetQuota.run(db, AUTHOR, site="farm", account="lab", gpu_minutes=60,
                       period="monthly")
    at = NOW - 2 * HOUR
    await AdjustUsage.run(db, AUTHOR, site="farm", user="alice", cpu_minutes=80,
                          reason="usage", at=at)
    await AdjustUsage.run(db, AUTHOR, site="farm", account="lab", gpu_minutes=75,
                          reason="usage", at=at)
    sent = await send_quota_notices(db, AUTHOR, config, "farm", now=NOW - HOUR)
    assert len(sent.sent) == 2
    before = len(mailbox.messages)

    result = await send_alert_digest(db, AUTHOR, config, now=NOW)
    assert result.sent and result.digest.counts()["quota_thresholds"] == 2
    digest = mailbox.messages[before:]
    assert [m.rcpt_tos for m in digest] == [["hpc-ops@example.org"]]
    text = digest[0].text()
    assert "Quota thresholds passed" in text
    assert ("farm account lab: GPU 125.0% of its quota (threshold 100%, period from "
            "2026-11-01), new jobs held by Slurm after the next sync; told "
            "prof@example.org") in text
    assert "farm user alice: CPU 80.0% of its quota (threshold 75%" in text
    assert "alice: CPU 80.0% of its quota (threshold 75%, period from 2026-11-01), new" \
        not in text  # 80 % holds nothing

    # nothing new: no digest; alice passing 90 % later: only that is reported
    again = await send_alert_digest(db, AUTHOR, config, now=NOW + HOUR)
    assert not again.sent and again.digest.total == 0
    await AdjustUsage.run(db, AUTHOR, site="farm", user="alice", cpu_minutes=15,
                          reason="usage", at=NOW + HOUR)
    await send_quota_notices(db, AUTHOR, config, "farm", now=NOW + 2 * HOUR)
    third = await send_alert_digest(db, AUTHOR, config, now=NOW + 3 * HOUR)
    assert third.sent and [(t.name, t.threshold) for t in third.digest.quota_thresholds] == [
        ("alice", 90)]
    assert "lab" not in mailbox.messages[-1].text().split("Quota thresholds passed")[1]
