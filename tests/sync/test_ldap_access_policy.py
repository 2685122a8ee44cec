"""LDAP access groups and system users' root keys follow ``queries.access_policy``
against a real slapd (issue 23): a reaped user leaves every access group, an offboarding
one keeps ordinary access but not sudo/root-ssh, a grant to an inactive user is recorded
but exported nowhere (and the CLI says so), and an expiry passing with no write is
noticed by the next incremental run."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from cheeto_like.models import UserSiteInfo
from cheeto_like.operations.iam import ReapOffboardedUsers
from cheeto_like.operations.user import AddUserAccess, SetUserStatus
from tests.factories import AUTHOR, ED25519_KEY, make_user, reload_user
from tests.services.ldap import Slapd
from tests.sync.ldap_lab import Lab

ACCESS = ["login-ssh", "compute-ssh", "slurm", "sudo", "root-ssh"]
GROUPS = {"login-ssh": "login-ssh-users", "compute-ssh": "compute-ssh-users",
          "slurm": "slurm-users", "sudo": "sudo-users", "root-ssh": "root-ssh-users"}


async def expire(name: str, when: datetime) -> None:
    """Set a user's expiry past the operations' checks (a test shortcut)."""
    user = await reload_user(name)
    user.expires_at = when
    await user.save()


def holding(lab: Lab, user: str) -> set[str]:
    """The access groups of the site listing ``user`` (memberUid and member agree)."""
    found = set()
    for access, group in GROUPS.items():
        entry = lab.entry(lab.group_dn(group))
        assert entry is not None, group
        uids = set(entry.get("memberUid", []))
        dns = {d.lower() for d in entry.get("member", [])}
        assert (user in uids) == (lab.user_dn(user).lower() in dns)
        if user in uids:
            found.add(access)
    return found


async def test_status_decides_the_access_groups(db, slapd: Slapd, cli):
    lab = Lab(db, slapd)
    await lab.make_sites()
    ann, ben, cat = lab.name("ann"), lab.name("ben"), lab.name("cat")
    await make_user(db, ann, site=lab.site, access=ACCESS)
    await make_user(db, ben, site=lab.site, access=ACCESS)
    await make_user(db, cat, site=lab.site, access=["login-ssh"])
    assert (await lab.sync()).ok
    assert holding(lab, ann) == holding(lab, ben) == set(ACCESS)

    # offboarding (globally): ordinary access stays, privileged goes; at the site: same
    await SetUserStatus.run(db, AUTHOR, name=ann, status="offboarding", reason="leaving")
    await SetUserStatus.run(db, AUTHOR, name=ben, status="offboarding", reason="leaving",
                            site=lab.site)
    assert (await lab.sync()).ok  # incremental
    ordinary = {"login-ssh", "compute-ssh", "slurm"}
    assert holding(lab, ann) == holding(lab, ben) == ordinary
    assert ben in lab.members("offboarding-users")  # status groups list by status

    # the reap (offboarding past expiry -> inactive): no access group at all
    await expire(ann, datetime.now(UTC) - timedelta(days=1))
    report = await ReapOffboardedUsers.run(db, AUTHOR, now=datetime.now(UTC))
    assert ann in [u.name for u in report]
    assert (await lab.sync()).ok
    assert holding(lab, ann) == set()
    assert ann in lab.members("inactive-users")
    assert (await reload_user(ann)).access == ACCESS  # the record keeps its list

    # disabled at the site: nothing there either
    await SetUserStatus.run(db, AUTHOR, name=ben, status="disabled", reason="x",
                            site=lab.site)
    assert (await lab.sync()).ok
    assert holding(lab, ben) == set()

    # a grant to an inactive user: recorded, exported nowhere, and the CLI says so
    await SetUserStatus.run(db, AUTHOR, name=cat, status="inactive", reason="left")
    r = await cli("ng", "user", "add", "access", "-u", cat, "-a", "sudo")
    assert r.code == 0, r.stderr
    warning = [line for line in r.stderr.splitlines() if "warning:" in line]
    assert warning == ["warning: sudo has no effect while the user is inactive"]
    assert "sudo" in (await reload_user(cat)).access
    assert (await lab.sync()).ok
    assert holding(lab, cat) == set()
    assert not (await lab.sync(full=True)).plan.changes  # --full agrees: nothing to do

    # reactivation brings the recorded access back
    await SetUserStatus.run(db, AUTHOR, name=cat, status="active", reason="back")
    r = await cli("ng", "user", "add", "access", "-u", cat, "-a", "compute-ssh")
    assert r.code == 0 and "warning:" not in r.stderr, r.stderr
    assert (await lab.sync()).ok
    assert holding(lab, cat) == {"login-ssh", "sudo", "compute-ssh"}


async def test_an_expiry_passing_is_noticed_by_the_next_incremental_run(db, slapd: Slapd):
    """No write happens when an expiry passes: the site's mark knows the soonest one
    ahead, so an unchanged fingerprint does not skip the run past it, and the records
    whose expiry passed since they were covered are dirty."""
    lab = Lab(db, slapd)
    await lab.make_sites()
    dee, eve = lab.name("dee"), lab.name("eve")
    svc, root = lab.name("svc"), lab.name("root")
    await make_user(db, dee, site=lab.site, access=["login-ssh", "slurm"])
    await make_user(db, eve, site=lab.site, access=["login-ssh"])
    await make_user(db, svc, site=lab.site, type="system")
    await make_user(db, root, site=lab.site, type="admin", ssh_key=ED25519_KEY,
                    access=["login-ssh", "root-ssh"])
    passing = datetime.now(UTC) + timedelta(seconds=3)
    # dee expires through her site record, root through his user record
    usi = await UserSiteInfo.find_one({"user": dee, "site": lab.site})
    assert usi is not None
    usi.expires_at = passing
    await usi.save()
    await expire(root, passing)
    assert (await lab.sync()).ok
    assert holding(lab, dee) == {"login-ssh", "slurm"}
    assert holding(lab, root) == {"login-ssh", "root-ssh"}
    svc_entry = lab.entry(lab.user_dn(svc))
    assert svc_entry is not None and svc_entry.get("sshPublicKey") == [
        f'environment="REMOTE_SSH_USER={root}" {ED25519_KEY}']
    assert (await lab.sync()).unchanged  # before the expiry: nothing to read

    await asyncio.sleep(max(0.0, (passing - datetime.now(UTC)).total_seconds()) + 0.2)
    report = await lab.sync()
    assert report.ok and not report.unchanged
    assert holding(lab, dee) == set() and holding(lab, root) == set()
    assert holding(lab, eve) == {"login-ssh"}
    svc_entry = lab.entry(lab.user_dn(svc))
    assert svc_entry is not None and not svc_entry.get("sshPublicKey")
    # the next run has nothing left to notice
    assert (await lab.sync()).unchanged
    assert not (await lab.sync(full=True)).plan.changes


async def test_an_inactive_admin_leaves_the_system_users_root_keys(db, slapd: Slapd):
    lab = Lab(db, slapd)
    await lab.make_sites()
    svc, root = lab.name("svc"), lab.name("root")
    await make_user(db, svc, site=lab.site, type="system")
    await make_user(db, root, site=lab.site, type="admin", ssh_key=ED25519_KEY,
                    access=["root-ssh"])
    assert (await lab.sync()).ok
    assert lab.entry(lab.user_dn(svc))["sshPublicKey"]  # type: ignore[index]
    await SetUserStatus.run(db, AUTHOR, name=root, status="inactive", reason="left",
                            site=lab.site)
    report = await lab.sync()  # incremental: the admin's change dirties the system user
    assert report.ok and f"user {svc}" in {c.label for c in report.plan.changes}
    assert not lab.entry(lab.user_dn(svc)).get("sshPublicKey")  # type: ignore[union-attr]
    await AddUserAccess.run(db, AUTHOR, name=root, access=["sudo"])
    await SetUserStatus.run(db, AUTHOR, name=root, reset=True, reason="back",
                            site=lab.site)
    assert (await lab.sync()).ok
    assert lab.entry(lab.user_dn(svc))["sshPublicKey"]  # type: ignore[index]
