"""Budget threshold notices through a real SMTP server (issue 28 item 5): the same
thresholds as minutes, once per threshold per period, the amounts in the site's currency."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cheeto_like.config import Config
from cheeto_like.config.usage import UsageConfig
from cheeto_like.models import QuotaNotice
from cheeto_like.models.fields import utcnow
from cheeto_like.models.usage import RateTable
from cheeto_like.operations.group_membership import AddGroupSponsor
from cheeto_like.operations.quota import SetQuota
from cheeto_like.operations.quota_notify import send_quota_notices
from cheeto_like.operations.usage import ingest
from cheeto_like.queries.usage import factor_table
from tests.factories import AUTHOR, make_group, make_site, make_user
from tests.operations.test_usage import job
from tests.services.fixtures_people import mail_config


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
    return Config(mail=mail_config(mailbox), usage=UsageConfig(currency="EUR"))


async def spend(store, job_id: str, minutes: int) -> None:
    """2 CPUs for ``minutes`` at 1.0 per CPU-hour in account lab: minutes / 30 EUR."""
    await ingest(store, "farm", [job(job_id, "alice", "lab",
                                     start=utcnow() - timedelta(hours=4), minutes=minutes)],
                 await factor_table("farm"), rates=RateTable.build([], seed={"*": (1.0, 0.0)}))


async def test_sponsors_hear_once_per_budget_threshold_in_the_sites_currency(farm, config,
                                                                            mailbox):
    await SetQuota.run(farm, AUTHOR, site="farm", account="lab", budget=10.0)
    await spend(farm, "1", 240)  # 8.00 of 10.00 EUR: 80 %
    report = await send_quota_notices(farm, AUTHOR, config, "farm", now=utcnow())
    assert [(s["name"], s["resource"], s["threshold"]) for s in report.sent] == [
        ("lab", "budget", 75)]
    [mail] = mailbox.to("prof@example.org")
    assert "75%" in mail.subject and "BUDGET" in mail.subject
    assert "8.00 of 10.00 EUR" in mail.text() and "-hours" not in mail.text()
    again = await send_quota_notices(farm, AUTHOR, config, "farm", now=utcnow())
    assert again.due == []
    await spend(farm, "2", 90)  # 11.00: past 90 and 100 at once, one e-mail
    jump = await send_quota_notices(farm, AUTHOR, config, "farm", now=utcnow())
    assert [s["threshold"] for s in jump.sent] == [100]
    assert "11.00 of 10.00 EUR" in mailbox.to("prof@example.org")[-1].text()
    assert sorted(n.threshold for n in await QuotaNotice.find({"resource": "budget"})
                  .to_list()) == [75, 90, 100]
