"""The IAM state machine, the all-users driver, creation from IAM and the reaper, against
the fake IAM (real HTTP) and the SMTP sink (real SMTP)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cheeto_like.adapters.http import HttpAuthError
from cheeto_like.adapters.iam import IAMClient, IAMTransientError
from cheeto_like.adapters.mail import SMTPTransport
from cheeto_like.config import IAMRefresh
from cheeto_like.errors import AlreadyExists, InvalidInput, NotFound
from cheeto_like.models import History, SyncRun, User
from cheeto_like.operations.iam import (
    IAMSettings,
    create_user_from_iam,
    plan_miss,
    reap_offboarded_users,
    sync_all_users_iam,
    sync_user_iam,
)
from cheeto_like.operations.notify import Notifier
from cheeto_like.operations.user import CreateSystemUser, SetUserStatus
from cheeto_like.queries.iam import find_reapable_users, iam_state
from tests.factories import AUTHOR, history, make_site, make_user, reload_user, site_info
from tests.services.fake_iam import appointment
from tests.services.fixtures_people import iam_config, mail_config
from tests.services.http_server import Fault

T0 = datetime(2025, 3, 1, 3, 0, tzinfo=UTC)
DAY = timedelta(days=1)
SETTINGS = IAMSettings(grace_days=2, expiry_offset_days=30)


@pytest.fixture
async def client(fake_iam_server, iam):
    async with IAMClient(iam_config(fake_iam_server)) as c:
        yield c


@pytest.fixture
async def alice(db, iam):
    """Alice is on farm with a per-site status override; IAM knows her."""
    await make_site(db, "farm")
    user = await make_user(db, "alice", site="farm", email="alice@old.example.org",
                           fullname="A. Old Name")
    await SetUserStatus.run(db, AUTHOR, name="alice", status="disabled", site="farm",
                            reason="test override")
    iam.add_person("1000001", "alice", mothra_id="00012345", name="Alice Aggie",
                   types=("staff",), appointments=[appointment("0100")])
    iam.divisions["0100"] = {"orgOId": "0100", "deptOfficialName": "Engineering",
                             "deptCode": "007"}
    return user


@pytest.fixture
def notifier(db, mailbox):
    return Notifier(db, AUTHOR, SMTPTransport(mail_config(mailbox).smtp,
                                              "hpc-help@ucdavis.edu"))


async def sync(db, client, name="alice", *, at, settings=SETTINGS):
    return await sync_user_iam(db, AUTHOR, client, name, settings=settings, now=at)


# -- hits -----------------------------------------------------------------------------------


async def test_a_hit_stores_the_snapshot_and_refreshes_email_and_name(db, client, alice):
    result = await sync(db, client, at=T0)
    assert (result.outcome, result.iam_id, result.resolved_by) == ("hit", "1000001",
                                                                   "username")
    user = await reload_user("alice")
    assert user.email == "alice@ucdavis.edu" and user.fullname == "Alice Aggie"
    info = user.iam
    assert info.iam_status == "present" and info.first_missing_at is None
    assert info.person.mothra_id == 12345 and info.person.user_types == ["staff"]
    [assoc] = info.person.associations
    assert (assoc.org_name, assoc.org_code, assoc.dept_code) == ("Engineering", "007",
                                                                 "030250")
    [row] = await history("sync_user_iam")
    assert row.changes["refreshed"]["email"] == {"from": "alice@old.example.org",
                                                 "to": "alice@ucdavis.edu"}


async def test_an_unchanged_hit_adds_no_history_row(db, client, alice):
    await sync(db, client, at=T0)
    await sync(db, client, at=T0 + DAY)
    assert len(await history("sync_user_iam")) == 1
    assert (await reload_user("alice")).iam.iam_synced_at == T0 + DAY
    assert (await sync(db, client, at=T0 + 2 * DAY)).resolved_by == "cached"


async def test_refresh_is_configurable_per_field(db, client, alice):
    settings = IAMSettings(refresh=IAMRefresh(email=False, fullname=True))
    await sync(db, client, at=T0, settings=settings)
    user = await reload_user("alice")
    assert user.email == "alice@old.example.org" and user.fullname == "Alice Aggie"


async def test_name_refresh_renames_the_user_when_enabled(db, client, iam, alice):
    iam.people["1000001"]["userId"] = "aaggie"
    iam.people["1000001"]["campusEmail"] = "alice@old.example.org"  # resolved by e-mail
    settings = IAMSettings(refresh=IAMRefresh(name=True))
    result = await sync(db, client, at=T0, settings=settings)
    assert result.username == "aaggie" and result.resolved_by == "email"
    assert await User.find_one(User.name == "alice") is None
    assert (await reload_user("aaggie")).iam.person.iam_id == "1000001"


async def test_an_invalid_iam_value_is_ignored_not_fatal(db, client, iam, alice):
    iam.people["1000001"]["campusEmail"] = "not an address"
    iam.people["1000001"]["dFullName"] = "Alice New"
    result = await sync(db, client, at=T0)
    assert result.outcome == "hit" and result.refreshed == {
        "fullname": {"from": "A. Old Name", "to": "Alice New"}}


async def test_system_accounts_are_never_synced(db, client, alice):
    await CreateSystemUser.run(db, AUTHOR, name="svc")
    with pytest.raises(InvalidInput, match="system account"):
        await sync(db, client, "svc", at=T0)


# -- the lifecycle -------------------------------------------------------------------------------


async def test_hit_miss_grace_offboarding_reap_with_emails(db, client, iam, alice, notifier,
                                                           mailbox):
    async def all_users(at):
        return await sync_all_users_iam(db, AUTHOR, client, settings=SETTINGS, now=at,
                                        notifier=notifier)

    assert (await all_users(T0)).tally["hit"] == 1
    iam.remove_person("1000001")
    t1 = T0 + DAY
    assert (await all_users(t1)).tally["miss_first"] == 1
    user = await reload_user("alice")
    assert user.status == "active" and user.iam.first_missing_at == t1
    assert (await all_users(t1 + DAY)).tally["miss_within_grace"] == 1
    report = await all_users(t1 + 2 * DAY)
    assert report.tally["miss_offboarding"] == 1 and report.tally["notified_offboarding"] == 1
    user = await reload_user("alice")
    assert user.status == "offboarding" and user.expires_at == t1 + 32 * DAY
    assert (await site_info("alice", "farm")).status is None  # override cleared
    [warning] = mailbox.to("alice@ucdavis.edu")
    assert warning.subject == "HPC: Account Scheduled for Deactivation"
    assert "alice" in warning.text() and "April 03, 2025" in warning.text()
    assert warning.mail_from == "hpc-help@ucdavis.edu"
    assert (await all_users(t1 + 3 * DAY)).tally["miss_already_expiring"] == 1

    early = await reap_offboarded_users(db, AUTHOR, now=t1 + 10 * DAY, dry_run=True)
    assert early.users == []
    due = t1 + 33 * DAY
    preview = await reap_offboarded_users(db, AUTHOR, now=due, dry_run=True)
    assert preview.users == ["alice"]
    assert (await reload_user("alice")).status == "offboarding"  # a dry run changes nothing
    reaped = await reap_offboarded_users(db, AUTHOR, now=due, notifier=notifier)
    assert reaped.users == preview.users and reaped.notified == 1
    assert (await reload_user("alice")).status == "inactive"
    [row] = await history("reap_offboarded_users")
    assert row.changes["reaped"] == ["alice"]
    deactivated = mailbox.to("alice@ucdavis.edu")[-1]
    assert deactivated.subject == "HPC: Account Deactivated"
    sends = await history("send_user_email")
    assert [r.changes["email_type"] for r in sends] == ["offboarding_warning",
                                                        "account_deactivated"]
    assert all(r.changes["sent"] for r in sends)

    # back in IAM after the reap: never resurrected (and not even asked by default)
    iam.add_person("1000001", "alice")
    late = await all_users(due + DAY)
    assert late.tally["skipped_inactive"] == 1 and late.tally["hit"] == 0
    result = await sync(db, client, at=due + DAY)
    assert result.outcome == "hit" and (await reload_user("alice")).status == "inactive"


async def test_a_restore_before_the_reap(db, client, iam, alice, notifier, mailbox):
    iam.remove_person("1000001")
    settings = IAMSettings(grace_days=0, expiry_offset_days=30)
    first = await sync(db, client, at=T0, settings=settings)
    assert first.outcome == "miss_offboarding"  # grace 0: the first miss offboards
    iam.add_person("1000001", "alice", name="Alice Aggie")
    report = await sync_all_users_iam(db, AUTHOR, client, settings=settings,
                                      now=T0 + 5 * DAY, notifier=notifier)
    assert report.tally["hit_restored"] == 1 and report.tally["notified_restored"] == 1
    user = await reload_user("alice")
    assert user.status == "active" and user.expires_at is None
    assert user.iam.iam_status == "present" and user.iam.first_missing_at is None
    assert (await reap_offboarded_users(db, AUTHOR, now=T0 + 40 * DAY)).users == []
    [restored] = mailbox.to("alice@ucdavis.edu")
    assert restored.subject == "HPC: Account Restored"


async def test_a_user_who_is_not_active_is_never_offboarded(db, client, iam, alice):
    await SetUserStatus.run(db, AUTHOR, name="alice", status="disabled", reason="test")
    iam.remove_person("1000001")
    settings = IAMSettings(grace_days=0)
    assert (await sync(db, client, at=T0, settings=settings)).outcome == "miss_not_active"
    assert (await reload_user("alice")).status == "disabled"


async def test_a_transient_iam_error_writes_nothing_and_is_tallied(db, client, iam, alice):
    await make_user(db, "bob")
    iam.add_person("1000002", "bob")
    iam.faults.add("kerberos", Fault(status=500), times=3)  # alice: all three attempts
    before = (await reload_user("alice")).model_dump(exclude={"revision_id"})
    report = await sync_all_users_iam(db, AUTHOR, client, settings=SETTINGS, now=T0)
    assert report.tally["transient_error"] == 1 and report.tally["hit"] == 1
    assert "HTTP 500" in report.errors["alice"]
    assert (await reload_user("alice")).model_dump(exclude={"revision_id"}) == before
    assert [r.changes["user"] for r in await history("sync_user_iam")] == ["bob"]
    run = await SyncRun.find_one(SyncRun.target == "iam")
    assert run.status == "ok" and run.counts == {"hit": 1, "transient_error": 1}


async def test_a_timeout_and_a_non_json_answer_are_transient(db, client, iam, alice):
    iam.faults.add("person", Fault(delay=1.0), times=3)
    with pytest.raises(IAMTransientError, match="timed out"):
        await sync(db, client, at=T0)
    assert (await reload_user("alice")).iam is None  # nothing was written
    iam.faults.add("person", Fault(malformed=True))  # a 200 that is not JSON: no retry
    report = await sync_all_users_iam(db, AUTHOR, client, settings=SETTINGS, now=T0)
    assert report.tally["transient_error"] == 1
    assert "not JSON" in report.errors["alice"]


async def test_sync_all_types_concurrency_and_inactive(db, client, iam):
    await make_site(db, "farm")
    for i in range(6):
        await make_user(db, f"u{i}")
        iam.add_person(f"20000{i}", f"u{i}")
    await make_user(db, "boss", type="admin")
    await make_user(db, "gone", status="inactive")
    await CreateSystemUser.run(db, AUTHOR, name="svc")
    report = await sync_all_users_iam(db, AUTHOR, client, settings=SETTINGS, now=T0,
                                      concurrency=4)
    assert report.tally["hit"] == 6 and report.tally["miss_first"] == 1  # boss
    assert report.tally["skipped_inactive"] == 1
    assert sorted(r.username for r in report.results) == ["boss", *[f"u{i}" for i in range(6)]]
    admins = await sync_all_users_iam(db, AUTHOR, client, settings=SETTINGS, now=T0,
                                      types=["admin"])
    assert [r.username for r in admins.results] == ["boss"]
    capped = await sync_all_users_iam(db, AUTHOR, client, settings=SETTINGS, now=T0,
                                      max_users=2, include_inactive=True)
    assert [r.username for r in capped.results] == ["boss", "gone"]
    with pytest.raises(InvalidInput, match="not system"):
        await sync_all_users_iam(db, AUTHOR, client, settings=SETTINGS, types=["system"])


async def test_a_refused_key_stops_the_whole_run(db, fake_iam_server, iam, alice):
    async with IAMClient(iam_config(fake_iam_server, api_key="nope")) as bad:
        with pytest.raises(HttpAuthError):
            await sync_all_users_iam(db, AUTHOR, bad, settings=SETTINGS, now=T0)
    run = await SyncRun.find_one(SyncRun.target == "iam")
    assert run.status == "failed" and "401" in run.error
    assert await History.find(History.op == "sync_user_iam").count() == 0


async def test_a_failed_notification_never_blocks_the_state_change(db, client, iam, alice):
    broken = Notifier(db, AUTHOR, SMTPTransport(
        mail_config(type("Dead", (), {"port": 9})()).smtp, "hpc-help@ucdavis.edu"))
    iam.remove_person("1000001")
    report = await sync_all_users_iam(db, AUTHOR, client, now=T0, notifier=broken,
                                      settings=IAMSettings(grace_days=0))
    assert report.tally["miss_offboarding"] == 1 and report.tally["notify_error"] == 1
    assert (await reload_user("alice")).status == "offboarding"
    [send] = await history("send_user_email")
    assert send.changes["sent"] is False and "SMTP 127.0.0.1:9" in send.changes["error"]


async def test_iam_state_projects_the_grace_end(db, client, iam, alice):
    iam.remove_person("1000001")
    await sync(db, client, at=T0)
    state = iam_state(await reload_user("alice"), grace_days=2, expiry_offset_days=30,
                      now=T0 + DAY)
    assert state["grace_ends_at"] == T0 + 2 * DAY
    assert "offboarding from 2025-03-03" in state["next"]


# -- the pure rules ----------------------------------------------------------------------------


def _user(**fields) -> User:
    return User(name="x", email="x@example.org", uid=1, gid=1, fullname="X Y",
                home_directory="/home/x", status="active", **fields)


async def test_plan_miss_rules(store):  # store: beanie must be bound to build a User
    from cheeto_like.models.iam import UCDIAMInfo

    fresh = _user()
    assert plan_miss(fresh, T0, 3).outcome == "miss_first"
    assert plan_miss(fresh, T0, 0).outcome == "miss_offboarding"
    streak = _user(iam=UCDIAMInfo(iam_status="missing", first_missing_at=T0))
    assert plan_miss(streak, T0 + 2 * DAY, 3).outcome == "miss_within_grace"
    assert plan_miss(streak, T0 + 3 * DAY, 3).offboard
    expiring = _user(iam=streak.iam, expires_at=T0 + 90 * DAY)
    assert plan_miss(expiring, T0 + 3 * DAY, 3).outcome == "miss_already_expiring"
    nightly = timedelta(hours=23, minutes=55)  # the next night's run, a bit early
    assert plan_miss(streak, T0 + nightly, 1).offboard
    assert plan_miss(streak, T0 + timedelta(hours=12), 1).outcome == "miss_within_grace"
    stale_present = _user(iam=UCDIAMInfo(iam_status="present", first_missing_at=T0))
    assert plan_miss(stale_present, T0 + 9 * DAY, 3).outcome == "miss_first"


# -- creation from IAM -----------------------------------------------------------------------


async def test_create_user_from_iam_by_login_and_by_email(db, client, iam):
    iam.add_person("1000001", "alice", mothra_id="00012345", name="Alice Aggie")
    iam.add_person("1000002", "bob", mothra_id="222", name="Bob Aggie", email="")
    user, result = await create_user_from_iam(db, AUTHOR, client, "alice",
                                              settings=SETTINGS, now=T0)
    assert (user.name, user.uid, user.gid, user.email, user.fullname) == (
        "alice", 12345, 12345, "alice@ucdavis.edu", "Alice Aggie")
    assert result.outcome == "hit" and user.iam.person.iam_id == "1000001"
    iam.people["1000002"]["campusEmail"] = "Bob.Aggie@ucdavis.edu"
    bob, _ = await create_user_from_iam(db, AUTHOR, client, "bob.aggie@ucdavis.edu",
                                        settings=SETTINGS, now=T0)
    assert bob.name == "bob" and bob.email == "Bob.Aggie@ucdavis.edu"
    with pytest.raises(AlreadyExists):
        await create_user_from_iam(db, AUTHOR, client, "alice", settings=SETTINGS)
    with pytest.raises(NotFound, match="no person with login 'ghost'"):
        await create_user_from_iam(db, AUTHOR, client, "ghost", settings=SETTINGS)
    iam.add_person("1000003", "carl", mothra_id="", name="Carl")
    with pytest.raises(InvalidInput, match="no numeric mothraId"):
        await create_user_from_iam(db, AUTHOR, client, "carl", settings=SETTINGS)
    assert await User.find_one(User.name == "carl") is None


async def test_reap_dry_run_lists_exactly_whom_the_reap_deactivates(db):
    await make_site(db, "farm")
    for name, days, status in (("due1", -1, "offboarding"), ("due2", 0, "offboarding"),
                               ("later", 1, "offboarding"), ("active", -5, "active")):
        await make_user(db, name, status=status, expires_at=T0 + days * DAY)
    await make_user(db, "noexpiry", status="offboarding")
    preview = [u.name for u in await find_reapable_users(T0)]
    assert preview == ["due1", "due2"]
    report = await reap_offboarded_users(db, AUTHOR, now=T0)
    assert report.users == preview
    assert {u.name: u.status for u in await User.find_all().to_list()} == {
        "due1": "inactive", "due2": "inactive", "later": "offboarding", "active": "active",
        "noexpiry": "offboarding"}
    assert (await reap_offboarded_users(db, AUTHOR, now=T0)).users == []
    assert len(await history("reap_offboarded_users")) == 1  # an empty reap writes nothing
