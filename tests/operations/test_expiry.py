"""Expiries after creation (issue 28 item 2): ``ng user expire`` and ``ng group expire``
set or clear them with a History row, bad input writes nothing (exit 2), a group's
2,000 members change in one transaction under a 60 s lifetime, and the reap's dry run
and the audit name offboarding users who have no expiry."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cheeto_like.models import GroupMembership, History, User
from cheeto_like.models.fields import utcnow
from cheeto_like.operations.expiry import SetGroupExpiry, SetUserExpiry
from cheeto_like.operations.group_membership import AddGroupMember
from cheeto_like.sync.audit import run_audit

from ..factories import (
    AUTHOR,
    history,
    make_group,
    make_site,
    make_user,
    reload_user,
    transaction_lifetime,
)


@pytest.fixture
async def people(db):
    await make_site(db, "farm")
    await make_site(db, "hive")
    for name in ("alice", "bob", "carol"):
        await make_user(db, name, site="farm", status="active")
    await make_group(db, "lab")
    await AddGroupMember.run(db, AUTHOR, group="lab", user="alice", site="farm")
    await AddGroupMember.run(db, AUTHOR, group="lab", user="bob", site="hive")
    return db


async def test_user_expire_set_and_clear(cli, people):
    r = await cli("ng", "user", "expire", "-u", "alice", "--at", "2031-01-02")
    assert r.code == 0, r.stderr
    alice = await reload_user("alice")
    assert alice.expires_at.year == 2031 and alice.expires_at.day == 2
    row = (await history("set_user_expiry"))[-1]
    assert row.changes["user"] == "alice" and row.changes["changed"] is True
    r = await cli("ng", "user", "expire", "-u", "alice", "--clear")
    assert r.code == 0 and "never" in r.stderr, r.stderr
    assert (await reload_user("alice")).expires_at is None
    assert len(await history("set_user_expiry")) == 2


@pytest.mark.parametrize("argv", [
    ("-u", "alice", "--at", "31/12/2031"),        # not a date
    ("-u", "alice", "--at", "clear"),             # clear is --clear here
    ("-u", "alice", "--at", "2031-13-40"),
    ("-u", "nobody", "--at", "+30d"),
    ("-u", "alice"),                              # neither
    ("-u", "alice", "--at", "+1d", "--clear"),    # both
])
async def test_user_expire_bad_input_writes_nothing(cli, people, argv):
    before = await History.find_all().count()
    r = await cli("ng", "user", "expire", *argv)
    assert r.code == 2, (r.code, r.stderr)
    assert "Traceback" not in r.stderr
    assert (await reload_user("alice")).expires_at is None
    assert await History.find_all().count() == before


async def test_user_expiry_args_refuse_both_or_neither():
    with pytest.raises(ValueError):
        SetUserExpiry.Args(user="alice")
    with pytest.raises(ValueError):
        SetUserExpiry.Args(user="alice", expires_at=utcnow(), clear=True)


async def test_group_expire_every_member_or_one_site(cli, people):
    r = await cli("ng", "group", "expire", "-g", "lab", "-s", "farm", "--at", "2032-06-01")
    assert r.code == 0, r.stderr
    assert (await reload_user("alice")).expires_at.year == 2032
    assert (await reload_user("bob")).expires_at is None  # bob is a member at hive
    r = await cli("ng", "group", "expire", "-g", "lab", "--at", "2033-06-01")
    assert r.code == 0, r.stderr
    assert {(await reload_user(n)).expires_at.year for n in ("alice", "bob")} == {2033}
    assert (await reload_user("carol")).expires_at is None  # not a member
    rows = await history("set_group_expiry")
    assert rows[-1].changes["changed"] == ["alice", "bob"] and rows[-1].changes["members"] == 2
    r = await cli("ng", "group", "expire", "-g", "lab", "--clear")
    assert r.code == 0 and (await reload_user("bob")).expires_at is None
    for argv, message in ((("-g", "nolab", "--at", "+1d"), "does not exist"),
                          (("-g", "lab", "--at", "yesterday-ish"), ""),
                          (("-g", "active-users", "--at", "+1d"), "status group")):
        before = await History.find_all().count()
        r = await cli("ng", "group", "expire", *argv)
        assert r.code == 2 and message in r.stderr, r.stderr
        assert await History.find_all().count() == before


async def test_group_of_2000_members_in_one_transaction(people):
    """One transaction, one History row, under a 60 s transaction lifetime."""
    now = utcnow()
    users = [User(name=f"m{i:04d}", email=f"m{i}@example.org", uid=5_000_000 + i,
                  gid=5_000_000 + i, fullname="Member", status="active",
                  home_directory=f"/home/m{i:04d}") for i in range(2000)]
    await User.insert_many(users)
    await GroupMembership.insert_many([
        GroupMembership(user=u.name, group="lab", site="farm", roles=["member"])
        for u in users])
    async with transaction_lifetime(people, 60):
        changed = await SetGroupExpiry.run(people, AUTHOR, group="lab",
                                           expires_at=now + timedelta(days=10))
    assert len(changed) == 2002  # and alice, bob
    assert len(await history("set_group_expiry")) == 1
    rows = await User.get_pymongo_collection().find(
        {"name": {"$in": ["m0000", "m1999"]}}, {"expires_at": 1}).to_list()
    assert all(r["expires_at"] is not None and not isinstance(r["expires_at"], str)
               for r in rows)


async def test_reap_dry_run_and_audit_name_offboarding_without_expiry(cli, people):
    alice = await reload_user("alice")
    alice.status = "offboarding"
    await alice.save()
    r = await cli("ng", "iam", "reap", "--dry-run")
    assert r.code == 0, r.stderr
    assert "no expiry" in r.stderr and "alice" in r.stderr
    r = await cli("ng", "iam", "reap", "--dry-run", "--json")
    assert r.json()["without_expiry"] == ["alice"] and r.json()["due"] == []
    report = await run_audit(people, author=AUTHOR)
    found = [f for f in report.findings if f.kind == "offboarding_without_expiry"]
    assert [f.object for f in found] == ["alice"]
    assert "ng user expire -u alice" in found[0].fix
    await SetUserExpiry.run(people, AUTHOR, user="alice", expires_at=utcnow() - timedelta(1))
    r = await cli("ng", "iam", "reap", "--dry-run", "--json")
    assert r.json()["without_expiry"] == [] and [d["user"] for d in r.json()["due"]] == ["alice"]
    report = await run_audit(people, author=AUTHOR)
    assert not [f for f in report.findings if f.kind == "offboarding_without_expiry"]
