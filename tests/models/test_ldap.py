"""LDAP bookkeeping: the fingerprint of the projected fields is set on insert, and
``ldap.version`` (and ``modified_at``) move only when a projected field changes
(bookkeeping saves do not re-dirty a record), also across a store round trip;
``needs_sync`` per site; and ``mark_ldap_dirty`` bumps the version and stores a real
datetime."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from cheeto_like.models import Group, Storage, User
from cheeto_like.models.base import LDAPInfo
from cheeto_like.operations.common import mark_ldap_dirty


def new_user(**overrides: object) -> User:
    fields: dict[str, object] = dict(name="alice", email="alice@example.org", uid=1001, gid=1001,
                                     fullname="Alice Liddell", home_directory="/home/alice")
    fields.update(overrides)
    return User(**fields)


async def stored(name: str = "alice") -> User:
    return await User.find_one(User.name == name)


async def test_insert_sets_the_fingerprint(empty_db):
    user = new_user()
    assert user.ldap.fingerprint is None
    await user.insert()
    back = await stored()
    assert back.ldap.fingerprint == user.ldap_fingerprint()
    assert len(back.ldap.fingerprint) == 64
    assert back.ldap.needs_sync("farm")


async def test_bookkeeping_save_does_not_move_modified_at(empty_db):
    await new_user().insert()
    user = await stored()
    before = (user.ldap.fingerprint, user.ldap.modified_at, user.ldap.version)
    assert user.ldap.version > 0
    await asyncio.sleep(0.01)
    user.comments.append("status=active, scope=global, reason=test")
    user.type = "admin"  # not projected into LDAP either
    await user.save()
    after = await stored()
    assert after.comments and after.type == "admin"
    assert (after.ldap.fingerprint, after.ldap.modified_at, after.ldap.version) == before
    assert after.updated_at > user.created_at


async def test_bookkeeping_save_after_round_trip_with_sub_millisecond_expiry(empty_db):
    """The store keeps milliseconds; a fingerprint taken over microseconds would change on
    the first save after reading the record back."""
    await new_user(expires_at=datetime.now(UTC) + timedelta(days=30, microseconds=123)).insert()
    user = await stored()
    before = user.ldap.modified_at
    await asyncio.sleep(0.01)
    user.comments.append("note")
    await user.save()
    assert (await stored()).ldap.modified_at == before


async def test_bookkeeping_save_with_a_naive_expiry(empty_db):
    await new_user(expires_at=datetime(2031, 1, 1, 12, 0)).insert()  # naive means UTC
    user = await stored()
    before = user.ldap.modified_at
    await asyncio.sleep(0.01)
    user.comments.append("note")
    await user.save()
    assert (await stored()).ldap.modified_at == before


async def test_changing_a_projected_field_moves_modified_at(empty_db):
    await new_user().insert()
    for field, value in (("shell", "/bin/zsh"), ("access", ["slurm"]), ("status", "inactive"),
                         ("expires_at", datetime(2031, 1, 1, tzinfo=UTC))):
        user = await stored()
        before = (user.ldap.fingerprint, user.ldap.modified_at, user.ldap.version)
        await asyncio.sleep(0.005)
        setattr(user, field, value)
        await user.save()
        after = await stored()
        assert after.ldap.fingerprint != before[0], field
        assert after.ldap.modified_at > before[1], field
        assert after.ldap.version == before[2] + 1, field  # what decides dirtiness


async def test_group_fingerprint_covers_name_and_gid_only(empty_db):
    await Group(name="lab", gid=5000).insert()
    group = await Group.find_one(Group.name == "lab")
    first = group.ldap.fingerprint
    group.type = "system"
    await group.save()
    assert (await Group.find_one(Group.name == "lab")).ldap.fingerprint == first
    group.gid = 5001
    await group.save()
    assert (await Group.find_one(Group.name == "lab")).ldap.fingerprint != first


async def test_storage_fingerprint_covers_its_own_fields(empty_db):
    await Storage(name="alice", site="farm", category="home", owner="alice", group="alice",
                  volume="home/alice").insert()
    record = await Storage.find_one(Storage.name == "alice")
    first = record.ldap.fingerprint
    record.globus = True  # not projected
    await record.save()
    assert (await Storage.find_one(Storage.name == "alice")).ldap.fingerprint == first
    record.subpath = "alice2"
    await record.save()
    assert (await Storage.find_one(Storage.name == "alice")).ldap.fingerprint != first


def test_needs_sync_is_per_site():
    info = LDAPInfo(version=3, synced_version={"farm": 3, "hive": 2})
    assert not info.needs_sync("farm")
    assert info.needs_sync("hive")
    assert info.needs_sync("never-synced")


async def test_mark_ldap_dirty_stores_a_tz_aware_datetime(empty_db):
    await new_user().insert()
    await new_user(name="bob", uid=1002, gid=1002, email="bob@example.org").insert()
    before = (await stored()).ldap.modified_at
    version = (await stored()).ldap.version
    await asyncio.sleep(0.01)
    async with empty_db.session(transaction=True) as session:
        await mark_ldap_dirty(User, ["alice", "alice", "nobody"], session)
    raw = await User.get_pymongo_collection().find_one({"name": "alice"})
    assert isinstance(raw["ldap"]["modified_at"], datetime)
    alice = await stored()
    assert alice.ldap.modified_at > before
    assert alice.ldap.modified_at.tzinfo is not None
    assert alice.ldap.needs_sync("farm")
    assert alice.ldap.version == version + 1  # once, whatever the repeats in the names
    bob = await stored("bob")
    assert bob.ldap.modified_at < alice.ldap.modified_at
