"""User queries: the effective status/access rules (with and without site overrides),
lookups, ``find_users`` with every filter (globally and at a site, AND/OR, limit, unknown
names), per-site views and redundant site statuses."""

from __future__ import annotations

import pytest

from cheeto_like.errors import InvalidInput, NotFound
from cheeto_like.models import User, UserSiteInfo
from cheeto_like.operations.user import AddUserAccess, AddUserSshKey, SetUserStatus
from cheeto_like.operations.user_site import AddSiteUser
from cheeto_like.queries.user import (
    effective_access,
    effective_status,
    find_redundant_site_statuses,
    find_user,
    get_user,
    list_user_ssh_keys,
    user_active_sites,
    user_site_overrides,
    user_sites,
)

from ..factories import (
    AUTHOR,
    ED25519_KEY,
    ED25519_KEY_2,
    make_site,
    make_user,
    reload_user,
)


def names(users: list[User]) -> list[str]:
    return [u.name for u in users]


def user(status: str | None = "active", access: list[str] | None = None) -> User:
    return User(name="alice", email="a@example.org", uid=1, gid=1, fullname="A B",
                home_directory="/home/alice", status=status, access=access or [])


# -- effective rules (pure) ------------------------------------------------------------------


def test_effective_status_without_site_record_is_global(store):
    assert effective_status(user("inactive"), None) == "inactive"


def test_effective_status_override_wins(store):
    usi = UserSiteInfo(user="alice", site="farm", status="disabled")
    assert effective_status(user("active"), usi) == "disabled"


def test_effective_status_none_override_falls_back(store):
    usi = UserSiteInfo(user="alice", site="farm")
    assert effective_status(user("offboarding"), usi) == "offboarding"


def test_effective_access_without_site_record_is_global(store):
    assert effective_access(user(access=["slurm"]), None) == ["slurm"]


def test_effective_access_empty_override_falls_back(store):
    usi = UserSiteInfo(user="alice", site="farm", access=[])
    assert effective_access(user(access=["slurm"]), usi) == ["slurm"]


def test_effective_access_non_empty_override_replaces(store):
    usi = UserSiteInfo(user="alice", site="farm", access=["sudo"])
    assert effective_access(user(access=["slurm", "login-ssh"]), usi) == ["sudo"]


# -- lookups ---------------------------------------------------------------------------------


async def test_get_user_and_find_user(db):
    await make_user(db, "alice", uid=5000, email="alice@example.org")
    await make_user(db, "bob", uid=5001, email="shared@example.org")
    await make_user(db, "carol", uid=5002, email="shared@example.org")
    assert (await get_user("alice")).uid == 5000
    assert (await find_user(name="alice")).uid == 5000
    assert (await find_user(uid=5001)).name == "bob"
    assert (await find_user(email="alice@example.org")).name == "alice"
    with pytest.raises(NotFound, match="user 'ghost' does not exist"):
        await get_user("ghost")
    with pytest.raises(NotFound, match="no user with uid 1"):
        await find_user(uid=1)
    with pytest.raises(InvalidInput, match="several users"):
        await find_user(email="shared@example.org")
    with pytest.raises(InvalidInput, match="exactly one"):
        await find_user(name="alice", uid=5000)
    with pytest.raises(InvalidInput, match="exactly one"):
        await find_user()


async def test_list_user_ssh_keys_oldest_first(db):
    await make_user(db, "alice", ssh_key=ED25519_KEY)
    await AddUserSshKey.run(db, AUTHOR, name="alice", key=ED25519_KEY_2)
    assert [k.key for k in await list_user_ssh_keys("alice")] == [ED25519_KEY, ED25519_KEY_2]
    assert await list_user_ssh_keys("bob") == []


async def test_user_sites_active_sites_and_overrides(db):
    for name in ("farm", "hive", "peak"):
        await make_site(db, name)
    await make_user(db, "alice", access=["slurm"])
    for name in ("peak", "farm", "hive"):
        await AddSiteUser.run(db, AUTHOR, user="alice", site=name)
    await SetUserStatus.run(db, AUTHOR, name="alice", status="inactive", site="hive",
                            reason="r")
    await AddUserAccess.run(db, AUTHOR, name="alice", access=["sudo"], site="peak")
    alice = await reload_user("alice")
    assert await user_sites("alice") == ["farm", "hive", "peak"]
    assert await user_active_sites(alice) == ["farm", "peak"]
    rows = [o.as_dict() for o in await user_site_overrides(alice)]
    assert rows == [
        {"site": "farm", "status_override": None, "access_override": [],
         "effective_status": "active", "effective_access": ["slurm"]},
        {"site": "hive", "status_override": "inactive", "access_override": [],
         "effective_status": "inactive", "effective_access": ["slurm"]},
        {"site": "peak", "status_override": None, "access_override": ["slurm", "sudo"],
         "effective_status": "active", "effective_access": ["slurm", "sudo"]},
    ]


async def test_overrides_are_empty_without_sites(db):
    await make_user(db, "alice")
    alice = await reload_user("alice")
    assert await user_site_overrides(alice) == [] and await user_active_sites(alice) == []


# -- redundant site statuses -----------------------------------------------------------------


async def test_find_redundant_site_statuses(db):
    await make_site(db, "farm")
    await make_site(db, "hive")
    await make_user(db, "alice", site="farm")
    await make_user(db, "bob", site="farm")
    await AddSiteUser.run(db, AUTHOR, user="alice", site="hive")
    for name, site, status in (("alice", "hive", "active"), ("alice", "farm", "inactive"),
                               ("bob", "farm", "active")):
        usi = await UserSiteInfo.find_one(UserSiteInfo.user == name, UserSiteInfo.site == site)
        usi.status = status  # written directly: the operations never store redundant ones
        await usi.save()
    rows = await find_redundant_site_statuses()
    assert sorted((u.name, s.site, s.status) for u, s in rows) == [
        ("alice", "hive", "active"), ("bob", "farm", "active")]
