"""``cheeto ng iam …``, ``cheeto ng user new iam`` and ``cheeto ng alerts digest`` end
to end through the real entry point, the fake IAM and the SMTP sink."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cheeto_like.models import History, SyncRun, User
from cheeto_like.models.fields import utcnow
from tests.factories import make_site, make_user, reload_user


@pytest.fixture
async def people(db, iam):
    await make_site(db, "farm")
    await make_user(db, "alice", site="farm")
    await make_user(db, "bob", site="farm")
    iam.add_person("1000001", "alice", mothra_id="111")


async def test_sync_one_user_and_show(cli, people, people_cli_config):
    r = await cli("ng", "iam", "sync", "-u", "alice", "--json", config=people_cli_config)
    assert r.code == 0, r.stderr
    assert r.json()["outcome"] == "hit" and r.json()["iam_id"] == "1000001"
    r = await cli("ng", "iam", "show", "-u", "alice", "--yaml", config=people_cli_config)
    shown = r.yaml()
    assert shown["iam"]["iam_status"] == "present" and shown["next"] == "present in IAM"
    r = await cli("ng", "iam", "sync", "-u", "nobody", config=people_cli_config)
    assert r.code == 2 and "user 'nobody' does not exist" in r.stderr


async def test_sync_all_with_notify_then_reap_dry_run_and_reap(cli, people, iam, mailbox,
                                                               people_cli_config):
    r = await cli("ng", "iam", "sync-all", "--concurrency", "2", "--notify", "--grace-days",
                  "0", "--expiry-offset-days", "0", "--json", config=people_cli_config)
    assert r.code == 0, r.stderr
    data = r.json()
    assert data["tally"]["hit"] == 1 and data["tally"]["miss_offboarding"] == 1  # bob
    assert data["tally"]["notified_offboarding"] == 1
    assert [m.rcpt_tos for m in mailbox.messages] == [["bob@example.org"]]
    bob = await reload_user("bob")
    assert bob.status == "offboarding" and bob.expires_at <= utcnow() + timedelta(seconds=5)

    r = await cli("ng", "iam", "reap", "--dry-run", "--json", config=people_cli_config)
    assert r.code == 0 and [u["user"] for u in r.json()["due"]] == ["bob"]
    assert (await reload_user("bob")).status == "offboarding"
    r = await cli("ng", "iam", "reap", config=people_cli_config)  # no terminal, no --force
    assert r.code == 2 and "not confirmed" in r.stderr
    assert (await reload_user("bob")).status == "offboarding"
    r = await cli("ng", "iam", "reap", "--force", "--notify", "--json",
                  config=people_cli_config)
    assert r.code == 0, r.stderr
    assert r.json() == {"reaped": ["bob"], "notified": 1, "notify_errors": 0}
    assert (await reload_user("bob")).status == "inactive"
    assert mailbox.messages[-1].subject == "HPC: Account Deactivated"
    r = await cli("ng", "iam", "reap", "--dry-run", config=people_cli_config)
    assert r.code == 0 and "count=0" in r.stderr


async def test_sync_all_human_output_lists_transient_errors(cli, people, iam,
                                                            people_cli_config):
    from tests.services.http_server import Fault

    iam.faults.add("kerberos", Fault(status=503), times=3)
    r = await cli("ng", "iam", "sync-all", "--type", "user", "--grace-days", "5",
                  config=people_cli_config)
    assert r.code == 0, r.stderr
    assert "transient_error" in r.stderr and "HTTP 503" in r.stderr
    assert (await SyncRun.find_one(SyncRun.target == "iam")).counts["transient_error"] == 1


async def test_user_new_iam(cli, db, iam, people_cli_config):
    iam.add_person("1000009", "zed", mothra_id="00099", name="Zed Aggie")
    r = await cli("ng", "user", "new", "iam", "zed@ucdavis.edu", "--access", "login-ssh",
                  config=people_cli_config)
    assert r.code == 0, r.stderr
    assert "created user zed (uid=99" in r.stderr
    user = await reload_user("zed")
    assert user.access == ["login-ssh"] and user.iam.person.iam_id == "1000009"
    assert [h.op for h in await History.find_all().sort(+History.timestamp).to_list()] == [
        "create_user", "sync_user_iam"]
    r = await cli("ng", "user", "new", "iam", "ghost", config=people_cli_config)
    assert r.code == 2 and "IAM has no person with login 'ghost'" in r.stderr
    r = await cli("ng", "user", "new", "iam", "zed", config=people_cli_config)
    assert r.code == 2 and "already exists" in r.stderr
    assert await User.count() == 1


async def test_alerts_digest(cli, db, mailbox, people_cli_config):
    r = await cli("ng", "alerts", "digest", config=people_cli_config)
    assert r.code == 0 and "nothing to report" in r.stderr
    run = SyncRun(target="slurm", site="farm", status="failed", error="boom",
                  finished_at=utcnow())
    await run.insert()
    r = await cli("ng", "alerts", "digest", "--dry-run", "--json", config=people_cli_config)
    assert r.code == 0 and r.json()["counts"]["sync_failures"] == 1 and r.json()["sent"] is False
    assert mailbox.messages == []
    r = await cli("ng", "alerts", "digest", config=people_cli_config)
    assert r.code == 0, r.stderr
    assert [m.rcpt_tos for m in mailbox.messages] == [["hpc-ops@example.org"]]


async def test_missing_sections_are_one_line_errors(cli, db):
    for argv in (("ng", "iam", "sync", "-u", "x"), ("ng", "user", "new", "iam", "x"),
                 ("ng", "alerts", "digest")):
        r = await cli(*argv)
        assert r.code == 2 and len(r.error_lines) == 1, (argv, r.stderr)
