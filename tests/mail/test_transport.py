"""E-mail transports against real servers (aiosmtpd, the fake HiPPO) and the recorded
sends: every send is in History, and a failed send never raises."""

from __future__ import annotations

import pytest

from cheeto_like.adapters.mail import (
    DisabledTransport,
    HippoNotifyTransport,
    MailError,
    SMTPTransport,
    transport_from_config,
)
from cheeto_like.config import Config, MailConfig, SMTPConfig
from cheeto_like.errors import ConfigError
from cheeto_like.notifications import render
from cheeto_like.operations.notify import Notifier, SendUserEmail, notifier_from_config
from tests.factories import AUTHOR, history
from tests.services.fixtures_people import hippo_config, mail_config
from tests.services.http_server import Fault, free_loopback_port
from tests.services.smtp_sink import PASSWORD, USERNAME


def restored(to=("alice@ucdavis.edu",), cc=()):
    return render("account_restored", list(to), cc=list(cc), username="alice")


async def test_smtp_delivers_text_and_html_to_every_recipient(mailbox):
    transport = SMTPTransport(mail_config(mailbox).smtp, "hpc-help@ucdavis.edu",
                              reply_to="help@ucdavis.edu")
    await transport.send(restored(cc=["sponsor@ucdavis.edu"]))
    [got] = mailbox.messages
    assert got.mail_from == "hpc-help@ucdavis.edu"
    assert sorted(got.rcpt_tos) == ["alice@ucdavis.edu", "sponsor@ucdavis.edu"]
    assert got.subject == "HPC: Account Restored"
    assert got.message["To"] == "alice@ucdavis.edu"
    assert got.message["Cc"] == "sponsor@ucdavis.edu"
    assert got.message["Reply-To"] == "help@ucdavis.edu"
    assert "your HPC account alice is no" in got.text()
    assert "<strong>alice</strong>" in got.html()


async def test_smtp_starttls_and_login(smtp_tls_server):
    smtp_tls_server.clear()
    config = SMTPConfig(host="127.0.0.1", port=smtp_tls_server.port, starttls=True,
                        username=USERNAME, password=PASSWORD,
                        ca_file=smtp_tls_server.ca_file, timeout_seconds=5)
    await SMTPTransport(config, "hpc-help@ucdavis.edu").send(restored())
    assert [m.subject for m in smtp_tls_server.messages] == ["HPC: Account Restored"]
    wrong = SMTPConfig.model_validate(config.model_dump() | {"password": "nope"})
    with pytest.raises(MailError, match="SMTPAuthenticationError"):
        await SMTPTransport(wrong, "hpc-help@ucdavis.edu").send(restored())
    untrusted = SMTPConfig(host="127.0.0.1", port=smtp_tls_server.port, starttls=True,
                           username=USERNAME, password=PASSWORD, timeout_seconds=5)
    with pytest.raises(MailError, match="CERTIFICATE_VERIFY_FAILED"):
        await SMTPTransport(untrusted, "hpc-help@ucdavis.edu").send(restored())
    plain = SMTPConfig(host="127.0.0.1", port=smtp_tls_server.port, timeout_seconds=5)
    with pytest.raises(MailError, match="530"):  # the server insists on STARTTLS
        await SMTPTransport(plain, "hpc-help@ucdavis.edu").send(restored())
    assert len(smtp_tls_server.messages) == 1


def test_smtp_config_refuses_a_password_in_clear():
    with pytest.raises(ValueError, match="password in clear"):
        SMTPConfig(username="u", password="p")
    with pytest.raises(ValueError, match="not both"):
        SMTPConfig(ssl=True, starttls=True)
    assert SMTPConfig(username="u", password="p", allow_plain_auth=True).username == "u"


async def test_a_send_is_recorded_in_history(db, mailbox):
    notifier = Notifier(db, AUTHOR, SMTPTransport(mail_config(mailbox).smtp,
                                                  "hpc-help@ucdavis.edu"))
    assert await notifier.send("account_restored", ["alice@ucdavis.edu"], username="alice",
                               context={"why": "test"})
    [row] = await history("send_user_email")
    assert row.author == AUTHOR
    assert row.changes | {"body": "…"} == {
        "email_type": "account_restored", "subject": "HPC: Account Restored",
        "header": "Your HPC account has been restored", "to": ["alice@ucdavis.edu"],
        "cc": [], "body": "…", "transport": "smtp", "sent": True, "error": None,
        "context": {"why": "test"}}
    assert "alice" in row.changes["body"]


async def test_a_failed_send_is_recorded_and_never_raises(db):
    dead = SMTPConfig(host="127.0.0.1", port=free_loopback_port(), timeout_seconds=2)
    notifier = Notifier(db, AUTHOR, SMTPTransport(dead, "hpc-help@ucdavis.edu"))
    assert await notifier.send("account_restored", ["alice@ucdavis.edu"],
                               username="alice") is False
    assert (notifier.sent, notifier.failed) == (0, 1)
    [row] = await history("send_user_email")
    assert row.changes["sent"] is False and "ConnectionRefusedError" in row.changes["error"]


async def test_a_template_problem_is_logged_not_raised(db, mailbox):
    notifier = Notifier(db, AUTHOR, SMTPTransport(mail_config(mailbox).smtp,
                                                  "hpc-help@ucdavis.edu"))
    assert await notifier.send("account_ready", ["alice@ucdavis.edu"]) is False  # no vars
    assert await notifier.send("account_restored", [], username="alice") is False
    assert mailbox.messages == [] and await history("send_user_email") == []


async def test_no_transport_and_a_disabled_transport_record_not_sent(db):
    email = restored()
    assert await SendUserEmail.run(db, AUTHOR, email=email, transport=None) is False
    assert await SendUserEmail.run(db, AUTHOR, email=email,
                                   transport=DisabledTransport()) is False
    rows = await history("send_user_email")
    assert [r.changes["transport"] for r in rows] == ["none", "disabled"]
    assert "no mail transport" in rows[0].changes["error"]
    assert "mail.enabled: false" in rows[1].changes["error"]


async def test_the_hippo_notify_transport(db, fake_hippo_server, hippo):
    transport = HippoNotifyTransport(hippo_config(fake_hippo_server))
    await transport.send(restored(cc=["boss@ucdavis.edu"]))
    [sent] = hippo.notifications
    assert sent["emails"] == ["alice@ucdavis.edu"] and sent["ccEmails"] == ["boss@ucdavis.edu"]
    assert sent["subject"] == "HPC: Account Restored"
    assert sent["header"] == "Your HPC account has been restored"
    assert sent["paragraphs"][0].startswith("<p>Your institution's directory lists you again")
    hippo.faults.add("notify", Fault(status=500), times=3)
    with pytest.raises(MailError, match="HTTP 500"):
        await transport.send(restored())


def test_the_transport_is_chosen_by_config(fake_hippo_server):
    assert transport_from_config(Config()) is None
    with pytest.raises(ConfigError, match="set from_address"):
        transport_from_config(Config(mail=MailConfig()))
    smtp = transport_from_config(Config(mail=MailConfig(centre={"helpdesk": "h@x.org"})))
    assert isinstance(smtp, SMTPTransport) and smtp.from_address == "h@x.org"
    assert isinstance(transport_from_config(Config(mail=MailConfig(enabled=False))),
                      DisabledTransport)
    with pytest.raises(ConfigError, match="no hippo section"):
        transport_from_config(Config(mail=MailConfig(transport="hippo")))
    hippo_mail = Config(mail=MailConfig(transport="hippo"),
                        hippo=hippo_config(fake_hippo_server))
    assert isinstance(transport_from_config(hippo_mail), HippoNotifyTransport)


async def test_notifier_from_config_uses_the_links(db, mailbox):
    config = Config(mail=mail_config(mailbox, support_address="help@hpc.example.org",
                                     docs_url="https://docs.example.org"))
    notifier = notifier_from_config(db, AUTHOR, config)
    await notifier.send("account_deactivated", ["alice@ucdavis.edu"], username="alice")
    [got] = mailbox.messages
    assert "help@hpc.example.org" in got.text()
