"""Request e-mails through a real SMTP server: approvers are told when a request waits for
them, the requester when it is done or denied; an escalated breach reaches the
operator-alert digest once."""

from __future__ import annotations

import time

import pytest

from cheeto_like.config import AlertsConfig, Config
from cheeto_like.models import RoleGrant
from cheeto_like.operations.group_membership import AddGroupSponsor
from cheeto_like.operations.notify import notifier_from_config, send_alert_digest
from cheeto_like.operations.request import (
    approve_request,
    comment_request,
    deny_request,
    escalate_breaches,
    file_request,
)
from tests.factories import history, make_group, make_site, make_user
from tests.services.fixtures_people import mail_config


@pytest.fixture
def config(mailbox):
    return Config(mail=mail_config(mailbox), alerts=AlertsConfig(to=["hpc-ops@example.org"]))


@pytest.fixture
async def lab(db):
    await db.database["celery_taskmeta"].delete_many({})
    await make_site(db, "farm")
    for name in ("alice", "bob", "carol"):
        await make_user(db, name, site="farm")
    await make_group(db, "lab")
    await AddGroupSponsor.run(db, "tester", group="lab", user="bob", site="farm")
    await RoleGrant(user="carol", role="operator").insert()
    return db


def notifier(db, config, author):
    return notifier_from_config(db, author, config)


async def test_each_step_tells_the_people_concerned(lab, config, mailbox):
    request = await file_request(lab, "alice", config, notifier=notifier(lab, config, "alice"),
                                 kind="access", site="farm", group="lab", user="alice",
                                 access=["sudo"], reason="runs the lab's containers")
    [filed] = mailbox.messages
    assert filed.rcpt_tos == ["bob@example.org"]  # the sponsor; alice is not cc'd (she acted)
    assert filed.subject == f"HPC: request {request.number} (access) filed"
    text = filed.text()
    assert "alice filed request 1: sudo access for alice at farm" in text
    assert "needs your approval as its sponsor" in text
    assert "runs the lab's containers" in text

    await approve_request(lab, "bob", config, request.number,
                          notifier=notifier(lab, config, "bob"))
    waiting = mailbox.messages[-1]
    assert sorted(waiting.rcpt_tos) == ["alice@example.org", "carol@example.org"]
    assert "now needs the operator's approval" in waiting.text()

    await approve_request(lab, "carol", config, request.number,
                          notifier=notifier(lab, config, "carol"))
    done = mailbox.messages[-1]
    assert done.subject == "HPC: request 1 (access) approved and done"
    assert sorted(done.rcpt_tos) == ["alice@example.org", "bob@example.org"]
    assert "add_user_access(name=alice, access=['sudo'], site=farm)" in done.text()
    sends = await history("send_user_email")
    assert [r.changes["email_type"] for r in sends] == ["request_update"] * 3
    assert all(r.changes["sent"] for r in sends)


async def test_a_denial_tells_the_requester_why(lab, config, mailbox):
    request = await file_request(lab, "alice", config, kind="join", site="farm", group="lab",
                                 user="alice")  # no notifier: nothing sent
    assert mailbox.messages == []
    await comment_request(lab, "bob", config, request.number, text="which project?",
                          notifier=notifier(lab, config, "bob"))
    assert mailbox.messages[-1].rcpt_tos == ["alice@example.org"]
    assert "Comment: which project?" in mailbox.messages[-1].text()
    await deny_request(lab, "bob", config, request.number, reason="not in my lab",
                       notifier=notifier(lab, config, "bob"))
    denied = mailbox.messages[-1]
    assert denied.rcpt_tos == ["alice@example.org"]
    assert denied.subject == "HPC: request 1 (join) denied"
    assert "Reason: not in my lab" in denied.text()


async def test_an_escalated_breach_is_in_the_next_digest_once(lab, config, mailbox):
    old = await file_request(lab, "alice", config, kind="join", site="farm", group="lab",
                             user="alice", created_epoch=int(time.time()) - 10 * 86400)
    assert await escalate_breaches(lab, "beat", config) == [old.number]
    first = await send_alert_digest(lab, "beat", config)
    assert first.sent and first.digest.counts()["escalations"] == 1
    text = mailbox.messages[-1].text()
    assert f"request {old.number} (join: alice joins lab at farm)" in text
    assert f"cheeto ng request show {old.number}" in text
    assert await escalate_breaches(lab, "beat", config) == []  # once per breach
    again = await send_alert_digest(lab, "beat", config)
    assert not again.sent and again.digest.total == 0
