"""Quota threshold notices through a real SMTP server: once per threshold per period, to
the user or to the account's sponsors; a jump past several thresholds is one e-mail."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cheeto_like.config import Config
from cheeto_like.errors import ConfigError
from cheeto_like.models import History, QuotaNotice
from cheeto_like.operations.group_membership import AddGroupSponsor
from cheeto_like.operations.quota import SetQuota
from cheeto_like.operations.quota_notify import send_quota_notices
from cheeto_like.operations.usage import ingest
from cheeto_like.queries.usage import factor_table
from tests.factories import AUTHOR, make_group, make_site, make_user
from tests.operations.test_usage import job
from tests.services.fixtures_people import mail_config

NOW = datetime(2026, 11, 25, 12, tzinfo=UTC)
DAY = datetime(2026, 11, 10, tzinfo=UTC)


@pytest.fixture
async def farm(db):
    await make_site(db, "farm")
    await make_user(db, "alice", email="alice@example.org")
    await make_user(db, "prof", email="prof@example.org")
    await make_group(db, "lab")
    await AddGroupSponsor.run(db, AUTHOR, group="lab", user="prof", site="farm")
    return db


@pytest.fixture
def config(mailbox):
    return Config(mail=mail_config(mailbox))


async def use(store, job_id: str, minutes: int) -> None:
    """``minutes`` of 2 CPUs by alice in account lab (2 x minutes CPU-minutes)."""
    await ingest(store, "farm", [job(job_id, "alice", "lab", start=DAY, minutes=minutes)],
                 await factor_table("farm"))


async def test_a_user_is_told_once_per_threshold_per_period(farm, config, mailbox):
    await SetQuota.run(farm, AUTHOR, site="farm", user="alice", cpu_minutes=200.0,
                       period="monthly")
    await use(farm, "1", 76)  # 152 of 200: 76 %
    report = await send_quota_notices(farm, AUTHOR, config, "farm", now=NOW)
    assert [(s["name"], s["threshold"]) for s in report.sent] == [("alice", 75)]
    [mail] = mailbox.to("alice@example.org")
    assert "75%" in mail.subject and "76.0%" in mail.text() and "CPU" in mail.text()

    again = await send_quota_notices(farm, AUTHOR, config, "farm", now=NOW)
    assert again.due == [] and len(mailbox.messages) == 1

    await use(farm, "2", 30)  # 212 of 200: past 90 and 100 at once
    jump = await send_quota_notices(farm, AUTHOR, config, "farm", now=NOW)
    assert [s["threshold"] for s in jump.sent] == [100]
    assert len(mailbox.to("alice@example.org")) == 2
    assert sorted(n.threshold for n in await QuotaNotice.find({}).to_list()) == [75, 90, 100]
    assert await History.find({"op": "send_user_email"}).count() == 2

    next_month = await send_quota_notices(farm, AUTHOR, config, "farm",
                                          now=NOW + timedelta(days=10))
    assert next_month.due == []  # December: nothing used yet


async def test_an_account_notice_goes_to_its_sponsors(farm, config, mailbox):
    await SetQuota.run(farm, AUTHOR, site="farm", account="lab", cpu_minutes=100.0)
    await use(farm, "1", 50)  # 100 %
    report = await send_quota_notices(farm, AUTHOR, config, "farm", now=NOW)
    assert [(s["kind"], s["to"]) for s in report.sent] == [("account", ["prof@example.org"])]
    [mail] = mailbox.to("prof@example.org")
    assert "lab" in mail.subject and "which you sponsor" in mail.text()


async def test_dry_run_sends_and_records_nothing_and_mail_is_required(farm, config, mailbox):
    await SetQuota.run(farm, AUTHOR, site="farm", user="alice", cpu_minutes=10.0)
    await use(farm, "1", 10)
    report = await send_quota_notices(farm, AUTHOR, config, "farm", now=NOW, dry_run=True)
    assert [d.as_dict()["threshold"] for d in report.due] == [100]
    assert mailbox.messages == [] and await QuotaNotice.count() == 0
    with pytest.raises(ConfigError, match="mail section"):
        await send_quota_notices(farm, AUTHOR, Config(), "farm", now=NOW)


async def test_a_subject_without_an_address_is_reported_and_retried(farm, config, mailbox):
    await make_group(farm, "orphans")
    await SetQuota.run(farm, AUTHOR, site="farm", account="orphans", cpu_minutes=1.0)
    await ingest(farm, "farm", [job("9", "alice", "orphans", start=DAY)],
                 await factor_table("farm"))
    report = await send_quota_notices(farm, AUTHOR, config, "farm", now=NOW)
    assert [(f["name"], f["why"]) for f in report.failed] == [("orphans", "no address")]
    assert await QuotaNotice.count() == 0  # tried again next run
