"""The offboarding policy per site (issue 28 item 4, config ``offboarding``): the reap
deletes key records and a site's group roles and gives the user's own storage records
an expiry, as each site's policy says (records only: nothing on disk); its dry run shows
it per user and site and changes nothing; the audit finds a reaped user who still holds
what the policy removes; a bad policy is a config error (exit 2)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from cheeto_like.config.offboarding import OffboardingConfig, SiteOffboarding
from cheeto_like.models import GroupMembership, SshKey, Storage
from cheeto_like.models.fields import utcnow
from cheeto_like.operations.expiry import SetUserExpiry
from cheeto_like.operations.group_membership import AddGroupMember, AddGroupSponsor
from cheeto_like.operations.iam import reap_offboarded_users
from cheeto_like.operations.storage import CreateHomeStorage
from cheeto_like.operations.user import AddUserSshKey
from cheeto_like.queries.access_policy import as_utc
from cheeto_like.sync.audit import run_audit

from ..factories import (
    AUTHOR,
    ED25519_KEY,
    ED25519_KEY_2,
    history,
    home_defaults,
    make_group,
    make_site,
    make_user,
    put_on_site,
    reload_user,
)

POLICY = {"program_grace_days": 7,
          "sites": {"farm": {"ssh_keys": "remove", "memberships": "remove",
                             "storage": "remove", "storage_after_days": 30}}}


@pytest.fixture
async def leaving(db):
    await make_site(db, "farm")
    await make_site(db, "hive")
    await home_defaults(db, "farm")
    await make_user(db, "alice", site="farm", status="active")
    await make_user(db, "keeper", site="hive", status="active")
    await put_on_site(db, "alice", "hive")
    await AddUserSshKey.run(db, AUTHOR, name="alice", key=ED25519_KEY)
    await AddUserSshKey.run(db, AUTHOR, name="keeper", key=ED25519_KEY_2)
    await make_group(db, "lab")
    for site in ("farm", "hive"):
        await AddGroupMember.run(db, AUTHOR, group="lab", user="alice", site=site)
    await AddGroupSponsor.run(db, AUTHOR, group="lab", user="alice", site="farm")
    await CreateHomeStorage.run(db, AUTHOR, site="farm", user="alice")
    alice = await reload_user("alice")
    alice.status = "offboarding"
    await alice.save()
    await SetUserExpiry.run(db, AUTHOR, user="alice", expires_at=utcnow() - timedelta(hours=1))
    return db


def policy_config(cli_config: Path, tmp_path: Path, policy: dict) -> Path:
    data = YAML(typ="safe").load(cli_config.read_text())
    data["offboarding"] = policy
    path = tmp_path / "config.yaml"
    with path.open("w") as fh:
        YAML(typ="safe").dump(data, fh)
    return path


async def edges() -> set[tuple[str, str, str]]:
    return {(e.user, e.group, e.site) for e in await GroupMembership.find_all().to_list()}


async def test_dry_run_shows_policy_and_changes_nothing(cli, leaving, cli_config, tmp_path):
    config = policy_config(cli_config, tmp_path, POLICY)
    r = await cli("ng", "iam", "reap", "--dry-run", "--json", config=config)
    assert r.code == 0, r.stderr
    rows = {row["site"]: row for row in r.json()["policy"]}
    assert rows["farm"]["ssh_keys"] == "remove 1 key(s)"
    assert rows["farm"]["memberships"] == "remove 1: lab"
    assert rows["farm"]["storage"].startswith("remove: 1 record(s) (alice)")
    assert "no data deleted" in rows["farm"]["storage"]
    assert rows["hive"]["memberships"] == "keep 1"
    assert "another site removes them" in rows["hive"]["ssh_keys"]
    r = await cli("ng", "iam", "reap", "--dry-run", config=config)
    assert r.code == 0 and "Offboarding policy" in r.stderr
    assert (await reload_user("alice")).status == "offboarding"
    assert await SshKey.find(SshKey.user == "alice").count() == 1
    assert ("alice", "lab", "farm") in await edges()


async def test_reap_applies_each_sites_policy(cli, leaving, cli_config, tmp_path):
    config = policy_config(cli_config, tmp_path, POLICY)
    r = await cli("ng", "iam", "reap", "--force", "--json", config=config)
    assert r.code == 0, r.stderr
    assert r.json()["reaped"] == ["alice"]
    assert (await reload_user("alice")).status == "inactive"
    assert await SshKey.find(SshKey.user == "alice").count() == 0
    assert await SshKey.find(SshKey.user == "keeper").count() == 1
    assert {e for e in await edges() if e[0] == "alice"} == {("alice", "lab", "hive")}
    home = await Storage.find_one(Storage.owner == "alice")
    assert home is not None  # the record stays; only its expiry is set
    assert utcnow() + timedelta(days=29) < as_utc(home.expires_at) < utcnow() + timedelta(31)
    done = (await history("reap_offboarded_users"))[-1].changes["policy_applied"]["alice"]
    assert done["ssh_keys_removed"] == 1 and "farm" in done["memberships_removed"]
    assert done["storage_expires"]["farm"]["records"] == ["alice"]
    # the audit is clean for alice now, and finds what comes back
    report = await run_audit(leaving, author=AUTHOR,
                             offboarding=OffboardingConfig.model_validate(POLICY))
    assert not [f for f in report.findings if f.kind == "offboarding_policy_unmet"]
    await AddUserSshKey.run(leaving, AUTHOR, name="alice", key=ED25519_KEY)
    await GroupMembership(user="alice", group="lab", site="farm", roles=["member"]).insert()
    report = await run_audit(leaving, author=AUTHOR,
                             offboarding=OffboardingConfig.model_validate(POLICY))
    found = [f for f in report.findings if f.kind == "offboarding_policy_unmet"]
    assert [(f.site, f.object) for f in found] == [("farm", "alice")]
    assert "1 SSH key(s)" in found[0].detail and "lab" in found[0].detail


async def test_default_policy_keeps_everything(leaving):
    report = await reap_offboarded_users(leaving, AUTHOR)
    assert report.users == ["alice"]
    assert await SshKey.find(SshKey.user == "alice").count() == 1
    assert ("alice", "lab", "farm") in await edges()
    assert (await Storage.find_one(Storage.owner == "alice")).expires_at is None
    assert "policy_applied" in (await history("reap_offboarded_users"))[-1].changes


async def test_archive_policy_sets_expiry_and_says_by_hand(leaving):
    policy = OffboardingConfig(sites={"farm": SiteOffboarding(storage="archive",
                                                              storage_after_days=0)})
    dry = await reap_offboarded_users(leaving, AUTHOR, dry_run=True, offboarding=policy)
    farm = next(r for r in dry.policy if r["site"] == "farm")
    assert "archive by hand" in farm["storage"]
    await reap_offboarded_users(leaving, AUTHOR, offboarding=policy)
    home = await Storage.find_one(Storage.owner == "alice")
    assert as_utc(home.expires_at) <= utcnow() + timedelta(minutes=1)


@pytest.mark.parametrize("policy", [
    {"sites": {"farm": {"storage": "shred"}}},
    {"sites": {"farm": {"storage_after_days": -1}}},
    {"default": {"ssh_keys": "maybe"}},
    {"program_grace_days": "soon"},
    {"sites": {"farm": {"slurm": "keep"}}},
])
async def test_bad_policy_is_a_config_error(cli, leaving, cli_config, tmp_path, policy):
    config = policy_config(cli_config, tmp_path, policy)
    r = await cli("ng", "iam", "reap", "--dry-run", config=config)
    assert r.code == 2 and "offboarding" in r.stderr, r.stderr
    assert (await reload_user("alice")).status == "offboarding"
