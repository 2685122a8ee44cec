"""The centre's own words (issue 28, item 1): with a neutral config no notice names an
institution; the centre's name, helpdesk and docs come from ``mail.centre``; a site's
``mail.templates_dir`` replaces bodies and subjects, and a broken one is one config error."""

from __future__ import annotations

import re
from typing import Any

import pytest
from ruamel.yaml import YAML

from cheeto_like.config import Config
from cheeto_like.errors import ConfigError
from cheeto_like.notifications import KINDS, Templates
from cheeto_like.operations.notify import notifier_from_config
from tests.factories import AUTHOR, history
from tests.mail.test_templates import VARIABLES
from tests.services.fixtures_people import mail_config

INSTITUTION = re.compile(r"UCD|UC Davis|ucdavis|HPCCF", re.IGNORECASE)


def _neutral(value: Any) -> Any:
    """The test variables with every address and host at example.org."""
    if isinstance(value, str):
        return value.replace("ucdavis.edu", "example.org")
    if isinstance(value, dict):
        return {k: _neutral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_neutral(v) for v in value]
    return value


def neutral_config(mailbox, **mail: Any) -> Config:
    return Config(mail=mail_config(mailbox, from_address="hpc@example.org", **mail))


async def test_no_notice_names_an_institution_with_a_neutral_config(db, mailbox):
    notifier = notifier_from_config(db, AUTHOR, neutral_config(mailbox))
    for kind in sorted(KINDS):
        assert await notifier.send(kind, ["alice@example.org"], **_neutral(VARIABLES[kind]))
    assert len(mailbox.messages) == len(KINDS)
    for got in mailbox.messages:
        for part in (got.subject, got.text(), got.html(), got.mail_from,
                     got.message.as_string()):
            assert not INSTITUTION.search(part), (got.subject, part)
    subjects = {got.subject for got in mailbox.messages}
    assert "HPC: Account Restored" in subjects
    assert "HPC: Account Ready on Farm" in subjects
    assert {got.mail_from for got in mailbox.messages} == {"hpc@example.org"}
    rows = await history("send_user_email")
    assert len(rows) == len(KINDS)
    for row in rows:
        assert not INSTITUTION.search(f"{row.changes}"), row.changes


async def test_the_centre_block_names_the_centre_and_its_helpdesk(db, mailbox):
    config = neutral_config(mailbox, centre={
        "name": "Fellowship Compute", "short_name": "FC", "helpdesk": "help@fc.example.org",
        "docs_url": "https://docs.fc.example.org"})
    assert config.mail is not None and config.mail.from_address == "hpc@example.org"
    notifier = notifier_from_config(db, AUTHOR, config)
    await notifier.send("account_ready", ["alice@example.org"],
                        **_neutral(VARIABLES["account_ready"]))
    await notifier.send("account_deactivated", ["alice@example.org"], username="alice")
    ready, gone = mailbox.messages
    assert ready.subject == "FC: Account Ready on Farm"
    assert "https://docs.fc.example.org" in ready.text()
    assert "mailto:help@fc.example.org" in ready.html()
    assert gone.subject == "FC: Account Deactivated"
    assert "Your Fellowship Compute account alice has been deactivated" in \
        " ".join(gone.text().split())
    # without a helpdesk the notices say whom to ask, with no address
    notifier = notifier_from_config(db, AUTHOR, neutral_config(mailbox))
    await notifier.send("account_deactivated", ["alice@example.org"], username="alice")
    assert "ask the HPC support team" in " ".join(mailbox.messages[-1].text().split())
    assert "mailto:" not in mailbox.messages[-1].html()


def test_the_old_support_address_and_docs_url_keys_fill_the_centre_block():
    mail = Config(mail={"support_address": "help@old.example.org",
                        "docs_url": "https://docs.old.example.org"}).mail
    assert mail is not None
    assert mail.centre.helpdesk == "help@old.example.org"
    assert mail.centre.docs_url == "https://docs.old.example.org"
    assert mail.from_address == "help@old.example.org"


async def test_a_site_template_and_subject_replace_the_built_in_ones(db, mailbox, tmp_path):
    site = tmp_path / "notices"
    site.mkdir()
    (site / "account-restored.md.j2").write_text(
        "Welcome back to {{ centre }}, **{{ username }}**. Your scholarship continues.\n")
    (site / "subjects.yaml").write_text(
        "account_restored: '[{{ centre_short }}] {{ username }} is back'\n")
    config = neutral_config(mailbox, templates_dir=str(site), centre={
        "name": "Fellowship Compute", "short_name": "FC"})
    notifier = notifier_from_config(db, AUTHOR, config)
    assert await notifier.send("account_restored", ["alice@example.org"], username="alice")
    assert await notifier.send("account_deactivated", ["alice@example.org"], username="alice")
    restored, deactivated = mailbox.messages
    assert restored.subject == "[FC] alice is back"
    assert "Welcome back to Fellowship Compute, alice. Your scholarship continues." in \
        restored.text()
    assert "<strong>alice</strong>" in restored.html()
    assert deactivated.subject == "FC: Account Deactivated"  # not overridden: built in


@pytest.mark.parametrize(("files", "message"), [
    (None, "not a directory"),
    ({"account-restored.md.j2": "Hello {% if %}\n"}, r"account-restored\.md\.j2 line 1"),
    ({"welcome.md.j2": "hi\n"}, r"welcome\.md\.j2 replaces no built-in template"),
    ({".account-restored.md.j2.swp": "x", "account-ready.md.j2": "{% endif %}"},
     r"account-ready\.md\.j2 line 1"),
    ({"subjects.yaml": "account_restord: x\n"}, "unknown kind 'account_restord'"),
    ({"subjects.yaml": "account_restored: '{{ oops'\n"}, "subjects.yaml: account_restored"),
    ({"subjects.yaml": "[1, 2\n"}, "subjects.yaml"),
    ({"subjects.yaml": "- a\n"}, "must map kinds to subjects"),
])
def test_a_broken_override_is_one_config_error(tmp_path, files, message):
    site = tmp_path / "notices"
    if files is not None:
        site.mkdir()
        for name, text in files.items():
            (site / name).write_text(text)
    with pytest.raises(ConfigError, match=message) as caught:
        Templates.load(site)
    assert "\n" not in str(caught.value) and "mail.templates_dir" in str(caught.value)


async def test_the_cli_says_a_broken_override_in_one_line(cli, people_cli_config, tmp_path):
    site = tmp_path / "notices"
    site.mkdir()
    (site / "account-deactivated.md.j2").write_text("Bye {{ username\n")
    yaml = YAML(typ="safe")
    data = yaml.load(people_cli_config.read_text())
    data["mail"]["templates_dir"] = str(site)
    config = tmp_path / "broken.yaml"
    with config.open("w") as out:
        yaml.dump(data, out)
    r = await cli("ng", "iam", "reap", "--force", "--notify", config=config)
    assert r.code == 2, r.stderr
    assert "account-deactivated.md.j2 line 1" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


async def test_system_accounts_take_the_centre_s_helpdesk_and_name(cli, db, cli_config,
                                                                   tmp_path):
    r = await cli("ng", "user", "new", "system", "-u", "svc1")
    assert r.code == 0, r.stderr
    r = await cli("ng", "user", "show", "-u", "svc1", "--json")
    assert (r.json()["email"], r.json()["fullname"]) == ("root@localhost.localdomain",
                                                         "HPC svc1")
    yaml = YAML(typ="safe")
    data = yaml.load(cli_config.read_text())
    data["mail"] = {"centre": {"short_name": "FC", "helpdesk": "help@fc.example.org"}}
    config = tmp_path / "centre.yaml"
    with config.open("w") as out:
        yaml.dump(data, out)
    r = await cli("ng", "user", "new", "system", "-u", "svc2", config=config)
    assert r.code == 0, r.stderr
    r = await cli("ng", "user", "show", "-u", "svc2", "--json", config=config)
    assert (r.json()["email"], r.json()["fullname"]) == ("help@fc.example.org", "FC svc2")
    r = await cli("ng", "user", "list", config=config)
    assert not INSTITUTION.search(r.stderr + r.stdout)
