"""Programmes (issue 28 item 3): a group kind with dates; members get its end as their
default expiry (an explicit one wins); moving the end moves the defaulted expiries; at
the end the reap sends members offboarding with the configured grace, then reaps them;
``ng program show`` lists members, usage and quota; bad dates are exit 2, nothing
written."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cheeto_like.config.offboarding import OffboardingConfig
from cheeto_like.errors import InvalidInput
from cheeto_like.models import Group, History
from cheeto_like.models.fields import utcnow
from cheeto_like.operations.expiry import SetUserExpiry
from cheeto_like.operations.group_membership import AddGroupMember, AddGroupSponsor
from cheeto_like.operations.iam import reap_offboarded_users
from cheeto_like.operations.program import CreateProgram
from cheeto_like.queries.access_policy import as_utc

from ..factories import AUTHOR, history, make_site, make_user, reload_user


@pytest.fixture
async def cohort(db):
    await make_site(db, "farm")
    for name in ("alice", "bob", "carol", "prof"):
        await make_user(db, name, site="farm", status="active")
    return db


def day(n: float):
    return (utcnow() + timedelta(days=n)).replace(microsecond=0)


async def test_new_show_and_default_expiry(cli, cohort):
    r = await cli("ng", "program", "new", "-g", "fellows26", "--start", "-10d",
                  "--end", "+90d")
    assert r.code == 0, r.stderr
    group = await Group.find_one(Group.name == "fellows26")
    assert group.type == "program" and group.starts_at < group.ends_at
    await SetUserExpiry.run(cohort, AUTHOR, user="bob", expires_at=day(400))  # explicit
    for user in ("alice", "bob"):
        r = await cli("ng", "group", "add", "member", "-g", "fellows26", "-u", user,
                      "-s", "farm")
        assert r.code == 0, r.stderr
    await AddGroupSponsor.run(cohort, AUTHOR, group="fellows26", user="prof", site="farm")
    assert as_utc((await reload_user("alice")).expires_at) == as_utc(group.ends_at)
    assert as_utc((await reload_user("bob")).expires_at) > as_utc(group.ends_at)  # wins
    assert (await reload_user("prof")).expires_at is None  # sponsors do not expire
    add = (await history("add_group_member"))[0]
    assert "expires_at_from_program" in add.changes
    r = await cli("ng", "program", "show", "-g", "fellows26", "--json")
    assert r.code == 0, r.stderr
    shown = r.json()
    assert [m["user"] for m in shown["members"]] == ["alice", "bob"]
    assert shown["members"][0]["cpu_hours"] == 0 and shown["budget"][0]["site"] == "farm"
    r = await cli("ng", "program", "show", "-g", "fellows26", "-s", "farm")
    assert r.code == 0 and "alice" in r.stderr
    r = await cli("ng", "program", "show", "-g", "alice")  # a personal group
    assert r.code == 2 and "not a programme" in r.stderr


async def test_edit_moves_defaulted_expiries_only(cli, cohort):
    await CreateProgram.run(cohort, AUTHOR, name="cohort", starts_at=day(-1), ends_at=day(30))
    await SetUserExpiry.run(cohort, AUTHOR, user="bob", expires_at=day(10))
    for user in ("alice", "bob"):
        await AddGroupMember.run(cohort, AUTHOR, group="cohort", user=user, site="farm")
    r = await cli("ng", "program", "edit", "-g", "cohort", "--end", "+60d")
    assert r.code == 0, r.stderr
    group = await Group.find_one(Group.name == "cohort")
    assert as_utc((await reload_user("alice")).expires_at) == as_utc(group.ends_at)
    assert as_utc((await reload_user("bob")).expires_at) < day(11)
    assert (await history("edit_program"))[-1].changes["members_moved"] == ["alice"]


@pytest.mark.parametrize("argv", [
    ("new", "-g", "p1", "--start", "+10d", "--end", "+5d"),     # end before start
    ("new", "-g", "p1", "--start", "2026-02-30", "--end", "+5d"),
    ("new", "-g", "p1", "--start", "soon", "--end", "+5d"),
    ("new", "-g", "p1", "--start", "clear", "--end", "+5d"),
    ("new", "-g", "alice", "--start", "-1d", "--end", "+5d"),   # a user's name
    ("edit", "-g", "p0", "--end", "-400d"),                      # before its start
    ("edit", "-g", "p0"),                                        # nothing to change
    ("edit", "-g", "p0", "--end", "31.12.2030"),
    ("edit", "-g", "alice", "--end", "+5d"),                     # not a programme
])
async def test_bad_dates_write_nothing(cli, cohort, argv):
    await CreateProgram.run(cohort, AUTHOR, name="p0", starts_at=day(-1), ends_at=day(30))
    before = await History.find_all().count()
    groups = await Group.find_all().count()
    r = await cli("ng", "program", *argv)
    assert r.code == 2, (r.code, r.stderr)
    assert await History.find_all().count() == before
    assert await Group.find_all().count() == groups
    assert as_utc((await Group.find_one(Group.name == "p0")).ends_at) > day(29)


async def test_ended_programme_takes_no_members(cohort):
    await CreateProgram.run(cohort, AUTHOR, name="old", starts_at=day(-30), ends_at=day(-1))
    with pytest.raises(InvalidInput, match="ended"):
        await AddGroupMember.run(cohort, AUTHOR, group="old", user="alice", site="farm")


async def test_end_sends_members_offboarding_then_reap_after_grace(cohort):
    await CreateProgram.run(cohort, AUTHOR, name="c1", starts_at=day(-30), ends_at=day(5))
    await SetUserExpiry.run(cohort, AUTHOR, user="carol", expires_at=day(300))
    for user in ("alice", "bob", "carol"):
        await AddGroupMember.run(cohort, AUTHOR, group="c1", user=user, site="farm")
    policy = OffboardingConfig(program_grace_days=14)
    # before the end: nothing
    report = await reap_offboarded_users(cohort, AUTHOR, now=day(1), offboarding=policy)
    assert report.programs_ended == {} and report.users == []
    # dry run after the end: named, nothing written
    report = await reap_offboarded_users(cohort, AUTHOR, now=day(6), dry_run=True,
                                         offboarding=policy)
    assert report.programs_ended == {"c1": ["alice", "bob"]}
    assert (await reload_user("alice")).status == "active"
    report = await reap_offboarded_users(cohort, AUTHOR, now=day(6), offboarding=policy)
    assert report.programs_ended == {"c1": ["alice", "bob"]} and report.users == []
    alice = await reload_user("alice")
    assert alice.status == "offboarding" and as_utc(alice.expires_at) > day(18)
    assert (await reload_user("carol")).status == "active"  # her own expiry wins
    assert (await history("end_programs"))[-1].changes["offboarded"] == {
        "c1": ["alice", "bob"]}
    # a second run changes nothing; after the grace the reap deactivates them
    report = await reap_offboarded_users(cohort, AUTHOR, now=day(7), offboarding=policy)
    assert report.programs_ended == {} and len(await history("end_programs")) == 1
    report = await reap_offboarded_users(cohort, AUTHOR, now=day(20), offboarding=policy)
    assert report.users == ["alice", "bob"]
    assert (await reload_user("bob")).status == "inactive"
