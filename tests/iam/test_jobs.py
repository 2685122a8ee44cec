"""The daemon job bodies for hippo_process, iam_sync, reap and the alert digest, called
as the daemon calls them (store, config, author, options)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cheeto_like.config import AlertsConfig, Config
from cheeto_like.daemon.jobs_people import (
    HippoTask,
    IAMSyncTask,
    JobFailed,
    ReapTask,
    alert_digest_job,
    hippo_process_job,
    iam_sync_job,
    reap_body,
    reap_job,
)
from cheeto_like.errors import ConfigError
from cheeto_like.models import SyncRun
from cheeto_like.models.fields import utcnow
from tests.factories import AUTHOR, make_site, make_user, reload_user
from tests.services.fake_hippo import account
from tests.services.fixtures_people import hippo_config, iam_config, mail_config


@pytest.fixture
def config(fake_hippo_server, fake_iam_server, mailbox):
    return Config(hippo=hippo_config(fake_hippo_server),
                  ucdiam=iam_config(fake_iam_server, grace_days=0),
                  mail=mail_config(mailbox), alerts=AlertsConfig(to=["ops@example.org"]))


async def test_hippo_process_job_posts_back_by_default(db, hippo, config, mailbox):
    await make_site(db, "farm")
    good = hippo.add_event("CreateAccount", cluster="farm", accounts=[account("alice", 77)])
    summary = await hippo_process_job(db, config, AUTHOR)
    assert summary["tally"] == {"complete": 1, "posted_back": 1, "emails_sent": 1}
    assert hippo.statuses_posted(good) == ["Complete"]
    hippo.add_event("Nope", accounts=[account("bob")])
    with pytest.raises(JobFailed, match=r"1 event\(s\) failed .*unknown action 'Nope'"):
        await hippo_process_job(db, config, AUTHOR, HippoTask(notify=False))


async def test_iam_sync_job_and_reap_job(db, iam, config, mailbox):
    await make_user(db, "alice")
    await make_user(db, "bob")
    iam.add_person("1", "alice")
    summary = await iam_sync_job(db, config, AUTHOR, IAMSyncTask(concurrency=2))
    assert summary["tally"] == {"hit": 1, "miss_offboarding": 1, "notified_offboarding": 1}
    assert await reap_job(db, config, AUTHOR) == {"reaped": [], "notified": 0,
                                                  "notify_errors": 0}
    bob = await reload_user("bob")
    bob.expires_at = utcnow() - timedelta(minutes=1)
    await bob.save()
    done = await reap_body(db, config, ReapTask(notify=False), "all", AUTHOR)
    assert done == {"reaped": ["bob"], "notified": 0, "notify_errors": 0}
    assert len(mailbox.messages) == 1  # only the offboarding warning


async def test_iam_sync_job_fails_when_iam_cannot_answer(db, iam, config):
    from tests.services.http_server import Fault

    await make_user(db, "alice")
    iam.faults.add("kerberos", Fault(status=500), times=3)
    with pytest.raises(JobFailed, match="1 transient"):
        await iam_sync_job(db, config, AUTHOR, IAMSyncTask(notify=False))
    assert (await SyncRun.find_one(SyncRun.target == "iam")).status == "failed"


async def test_jobs_need_their_sections(db):
    with pytest.raises(ConfigError, match="hippo section"):
        await hippo_process_job(db, Config(), AUTHOR)
    with pytest.raises(ConfigError, match="ucdiam section"):
        await iam_sync_job(db, Config(), AUTHOR)
    with pytest.raises(ConfigError, match="alerts section"):
        await alert_digest_job(db, Config(), AUTHOR)


async def test_alert_digest_job(db, config, mailbox):
    assert await alert_digest_job(db, config, AUTHOR) == {
        "sent": False, "sync_failures": 0, "guard_trips": 0, "failed_tasks": 0,
        "stuck_tasks": 0, "escalations": 0, "quota_thresholds": 0}
    await SyncRun(target="ldap", site="farm", status="aborted", error="cap",
                  finished_at=utcnow()).insert()
    result = await alert_digest_job(db, config, AUTHOR)
    assert result["sent"] and result["guard_trips"] == 1
    assert mailbox.messages[-1].rcpt_tos == ["ops@example.org"]
