"""HiPPO handlers' e-mails: sent once, through a real SMTP server, with real account
details; a failing transport never fails the event."""

from __future__ import annotations

import pytest

from cheeto_like.adapters.mail import HippoNotifyTransport, SMTPTransport
from cheeto_like.config import SMTPConfig
from cheeto_like.models import HippoEvent
from cheeto_like.operations.group_membership import AddGroupMember, AddGroupSponsor
from cheeto_like.operations.hippo import process_events
from cheeto_like.operations.notify import Notifier
from tests.factories import AUTHOR, ED25519_KEY_2, history, home_defaults, make_group, make_site
from tests.factories import make_user as factory_user
from tests.services.fake_hippo import account
from tests.services.fixtures_people import hippo_config, mail_config
from tests.services.http_server import free_loopback_port


@pytest.fixture
async def farm(db):
    site = await make_site(db, "farm")
    await home_defaults(db, quota="25G")
    await make_group(db, "lab1", 500001)
    return site


@pytest.fixture
def notifier(db, mailbox):
    return Notifier(db, AUTHOR, SMTPTransport(mail_config(mailbox).smtp,
                                              "hpc-help@ucdavis.edu"))


async def test_account_ready_is_sent_once_with_the_real_details(db, farm, hippo, mailbox,
                                                                notifier, fake_hippo_server):
    config = hippo_config(fake_hippo_server)
    event_id = hippo.add_event("CreateAccount", cluster="farm", groups=["lab1"],
                               accounts=[account("alice", 5001)])
    report = await process_events(db, AUTHOR, config, notifier=notifier)
    assert report.outcomes[0].emails_sent == 1
    [mail] = mailbox.messages
    assert mail.rcpt_tos == ["alice@ucdavis.edu"]
    assert mail.subject == "HPC: Account Ready on Farm"
    text = mail.text()
    assert "ssh alice@farm.example.org" in text and "Your groups on farm: lab1." in text
    assert "/home/alice, with a quota of 25G" in text
    assert (await HippoEvent.find_one(HippoEvent.hippo_id == event_id)).notified_at
    await process_events(db, AUTHOR, config, notifier=notifier)  # still pending upstream
    assert len(mailbox.messages) == 1
    [row] = await history("send_user_email")
    assert row.changes["context"] == {"hippo_event": str(event_id),
                                      "hippo_endpoint": config.base_url}


async def test_a_broken_transport_never_fails_the_event(db, farm, hippo, fake_hippo_server):
    dead = Notifier(db, AUTHOR, SMTPTransport(
        SMTPConfig(host="127.0.0.1", port=free_loopback_port(), timeout_seconds=2),
        "hpc-help@ucdavis.edu"))
    event_id = hippo.add_event("CreateAccount", cluster="farm",
                               accounts=[account("alice", 5001)])
    report = await process_events(db, AUTHOR, hippo_config(fake_hippo_server), notifier=dead,
                                  post_back=True)
    outcome = report.outcomes[0]
    assert (outcome.result, outcome.emails_sent, outcome.emails_failed) == ("complete", 0, 1)
    assert hippo.statuses_posted(event_id) == ["Complete"]
    [row] = await history("send_user_email")
    assert row.changes["sent"] is False


async def test_membership_removal_sponsor_and_key_e_mails(db, farm, hippo, mailbox, notifier,
                                                          fake_hippo_server):
    config = hippo_config(fake_hippo_server)
    await factory_user(db, "alice", site="farm")
    prof = await factory_user(db, "prof", site="farm", fullname="Pat Professor")
    await AddGroupSponsor.run(db, AUTHOR, group="lab1", user="prof", site="farm")
    await AddGroupMember.run(db, AUTHOR, group="lab1", user="alice", site="farm")
    hippo.add_event("RemoveAccountFromGroup", cluster="farm", groups=["lab1"],
                    accounts=[account("alice")])
    hippo.add_event("CreateGroup", cluster="farm", accounts=[account("prof")])
    hippo.add_event("UpdateSshKey", cluster="farm", accounts=[account("alice",
                                                                      key=ED25519_KEY_2)])
    hippo.add_event("AddAccountToGroup", cluster="farm", groups=["profgrp"],
                    accounts=[account("alice")])
    report = await process_events(db, AUTHOR, config, notifier=notifier)
    assert [o.result for o in report.outcomes] == ["complete"] * 4
    by_subject = {m.subject: m for m in mailbox.messages}
    removed = by_subject["HPC: Removed from Group"]
    assert removed.rcpt_tos == ["alice@example.org"]
    assert "removed from the group lab1" in removed.text()
    assert f"Pat Professor ({prof.email})" in removed.text()
    sponsor = by_subject["HPC: New Sponsored Group on Farm"]
    assert sponsor.rcpt_tos == [prof.email] and "profgrp" in sponsor.text()
    assert "HPC: SSH Key Updated" in by_subject
    membership = by_subject["HPC: New Group Membership on Farm"]
    assert "was added to profgrp" in membership.text()


async def test_e_mails_can_go_through_hippo_notify(db, farm, hippo, fake_hippo_server):
    config = hippo_config(fake_hippo_server)
    notifier = Notifier(db, AUTHOR, HippoNotifyTransport(config))
    hippo.add_event("CreateAccount", cluster="farm", accounts=[account("alice", 5001)])
    await process_events(db, AUTHOR, config, notifier=notifier)
    [sent] = hippo.notifications
    assert sent["emails"] == ["alice@ucdavis.edu"]
    assert sent["subject"] == "HPC: Account Ready on Farm"
    assert any("ssh alice@farm.example.org" in p for p in sent["paragraphs"])


async def test_notify_off_in_config_sends_nothing(db, farm, hippo, mailbox, notifier,
                                                  fake_hippo_server):
    hippo.add_event("CreateAccount", cluster="farm", accounts=[account("alice", 5001)])
    await process_events(db, AUTHOR, hippo_config(fake_hippo_server, notify=False),
                         notifier=notifier)
    assert mailbox.messages == []
