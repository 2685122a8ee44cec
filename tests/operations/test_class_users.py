"""Class accounts: one all-or-nothing batch per course (users, personal groups, site
memberships, optional course-group edges and homes), a contiguous uid block in the class
band that must end below the lab-group band, passwords returned once and never recorded.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from cheeto_like.constants import CLASS_USER_BAND, LAB_GROUP_BAND, SPECIAL_GID_START
from cheeto_like.credentials import verify_password
from cheeto_like.errors import AlreadyExists, Conflict, InvalidInput, NotFound
from cheeto_like.models import (
    Group,
    GroupMembership,
    History,
    Storage,
    StorageVolume,
    User,
    UserSiteInfo,
)
from cheeto_like.operations.class_users import CreateClassUsers, free_block
from cheeto_like.operations.storage import SetSiteStorageDefaults
from cheeto_like.queries.storage import list_site_storages

from ..factories import (
    AUTHOR,
    history,
    home_defaults,
    make_group,
    make_site,
    make_static_mount,
    make_user,
    make_volume,
    snapshot,
)

SOON = datetime.now(UTC) + timedelta(days=120)


@pytest.fixture
async def farm(db):
    await make_site(db, "farm")
    await home_defaults(db)
    await make_group(db, "cs101", gid=70_000)
    return db


async def batch(store, prefix: str = "cs", count: int = 3, **kwargs):
    kwargs.setdefault("email", "ta@example.org")
    kwargs.setdefault("expires_at", SOON)
    return await CreateClassUsers.run(store, AUTHOR, site="farm", prefix=prefix, count=count,
                                      **kwargs)


async def refused(store, exc, match: str, **kwargs) -> None:
    """The batch fails with ``exc`` and writes nothing at all (no document, no History)."""
    before = await snapshot()
    with pytest.raises(exc, match=match):
        await batch(store, **kwargs)
    assert await snapshot() == before


def class_uids(users: list[User]) -> list[int]:
    return [u.uid for u in users]


# -- the happy path -----------------------------------------------------------------------


async def test_batch_creates_everything(farm):
    created = await batch(farm, "cs101", 3, group="cs101")
    names = ["cs101-1", "cs101-2", "cs101-3"]
    assert [u.name for u, _ in created] == names
    passwords = [p for _, p in created]
    assert len(set(passwords)) == 3 and all(passwords)

    users = {u.name: u for u in await User.find({"type": "class"}).to_list()}
    assert sorted(users) == names
    for name, password in zip(names, passwords, strict=True):
        user = users[name]
        assert user.password.startswith("$y$")
        assert verify_password(password, user.password)
        assert (user.type, user.status, user.access) == ("class", "active",
                                                         ["login-ssh", "slurm"])
        assert (user.fullname, user.email) == (name, "ta@example.org")
        assert abs(user.expires_at - SOON) < timedelta(milliseconds=2)
        assert user.gid == user.uid
    assert not verify_password(passwords[0], users[names[1]].password)

    personal = {g.name: g for g in await Group.find({"type": "user"}).to_list()}
    assert all(personal[n].gid == users[n].uid for n in names)
    assert sorted(u.user for u in await UserSiteInfo.find({"site": "farm"}).to_list()) == names
    edges = await GroupMembership.find({"group": "cs101"}).to_list()
    assert sorted((e.user, e.roles) for e in edges) == [(n, ["member"]) for n in names]

    homes = await list_site_storages("farm", category="home")
    assert [h.storage.name for h in homes] == names
    for home in homes:
        name = home.storage.name
        assert (home.storage.owner, home.storage.group) == (name, name)
        assert (home.volume.name, home.volume.parent, home.quota) == (
            f"home/{name}", "home", "20G")
        assert (home.host_path, home.mount_path) == (f"/export/home/{name}", f"/home/{name}")


async def test_history_names_the_users_but_holds_no_password(farm):
    created = await batch(farm, "cs", 2)
    [row] = await history("create_class_users")
    names = ["cs-1", "cs-2"]
    assert row.author == AUTHOR
    assert row.changes["users"] == names
    assert row.changes["base_uid"] == created[0][0].uid
    assert (row.changes["count"], row.changes["has_passwords"]) == (2, True)
    assert row.changes["home_mechanism"] == "automount:home"
    assert row.changes["access"] == ["login-ssh", "slurm"]
    # the composed operations wrote no rows of their own
    assert await history("create_user") == [] and await history("create_home_storage") == []
    text = json.dumps([r.changes for r in await History.find({}).to_list()], default=str)
    for _, password in created:
        assert password not in text
    assert "$y$" not in text


async def test_new_members_make_the_course_group_ldap_dirty(farm):
    group = await Group.find_one({"name": "cs101"})
    group.ldap.synced["farm"] = datetime.now(UTC)  # as if just synced
    group.ldap.synced_version["farm"] = group.ldap.version
    await group.save()
    assert not (await Group.find_one({"name": "cs101"})).ldap.needs_sync("farm")
    await batch(farm, "cs101", 1, group="cs101")
    assert (await Group.find_one({"name": "cs101"})).ldap.needs_sync("farm")


async def test_options_access_and_no_group(farm):
    await batch(farm, "bio", 1, access=["ondemand"], email="prof@example.org")
    users = await User.find({"type": "class"}).to_list()
    assert {tuple(u.access) for u in users} == {("ondemand",)}
    assert {u.email for u in users} == {"prof@example.org"}
    assert await GroupMembership.count() == 0


@pytest.mark.parametrize(("count", "first", "last"), [
    (1, "p-1", "p-1"), (9, "p-1", "p-9"), (10, "p-01", "p-10"), (100, "p-001", "p-100"),
    (1000, "p-0001", "p-1000"), (2000, "p-0001", "p-2000"),
])
def test_names_are_zero_padded_to_the_width_of_count(count, first, last):
    args = CreateClassUsers.parse_args(site="farm", prefix="p", count=count,
                                       email="t@example.org", expires_at=SOON)
    names = args.names()
    assert (len(names), names[0], names[-1]) == (count, first, last)
    assert len(set(names)) == count


# -- uids ---------------------------------------------------------------------------------


async def test_uid_blocks_are_contiguous_and_sequential(farm):
    first = [u for u, _ in await batch(farm, "aa", 2)]
    second = [u for u, _ in await batch(farm, "bb", 1)]
    start = CLASS_USER_BAND.start
    assert class_uids(first) == [start, start + 1]
    assert class_uids(second) == [start + 2]
    [a, b] = await history("create_class_users")
    assert (a.changes["base_uid"], b.changes["base_uid"]) == (start, start + 2)
    assert await free_block(5, None) == start + 3


async def test_ids_outside_the_class_band_are_ignored(farm):
    await make_user(farm, "sys", uid=4_000_000_123)  # system band
    await make_user(farm, "shared", uid=2_500_000_000)  # shared band
    users = [u for u, _ in await batch(farm, "cs", 1)]
    assert class_uids(users) == [CLASS_USER_BAND.start]


async def test_access_and_status_groups_inside_the_band_are_stepped_over(farm):
    specials = await Group.find({"type": {"$in": ["access", "status"]}}).to_list()
    gids = sorted(g.gid for g in specials)
    assert gids == list(range(SPECIAL_GID_START, SPECIAL_GID_START + len(gids)))
    await make_user(farm, "last", uid=SPECIAL_GID_START - 2)
    assert await free_block(1, None) == SPECIAL_GID_START - 1  # fits below the specials
    users = [u for u, _ in await batch(farm, "cs", 2)]  # would overlap: stepped over
    after = SPECIAL_GID_START + len(gids)
    assert class_uids(users) == [after, after + 1]
    assert await free_block(2, None) == after + 2


async def test_a_block_that_would_cross_into_the_lab_band_is_refused(farm):
    await make_user(farm, "edge", uid=LAB_GROUP_BAND.start - 2)
    await refused(farm, Conflict, "would cross into the lab-group band", count=2)
    [user] = [u for u, _ in await batch(farm, "cs", 1)]  # exactly fits
    assert user.uid == LAB_GROUP_BAND.start - 1
    await refused(farm, Conflict, "lab-group band", prefix="more", count=1)


# -- failures roll back the whole batch -----------------------------------------------------


async def test_unknown_site_group_or_access(farm):
    before = await snapshot()
    with pytest.raises(NotFound, match="site 'hive'"):
        await CreateClassUsers.run(farm, AUTHOR, site="hive", prefix="cs", count=2,
                                   email="t@example.org", expires_at=SOON)
    assert await snapshot() == before
    await refused(farm, NotFound, "group 'nope'", group="nope")
    await refused(farm, InvalidInput, "access or status group", group="slurm-users")
    await refused(farm, NotFound, "unknown access type", access=["teleport"])


async def test_missing_home_defaults_writes_nothing(db):
    await make_site(db, "farm")
    await refused(db, Conflict, "no default home volume", count=3)


async def test_a_home_failure_midway_rolls_back_the_whole_batch(farm):
    """The third user's home volume name is taken: users 1 and 2 (with groups, site
    memberships, edges and homes) were already written and must all disappear."""
    await make_volume(farm, "home/cs-3", host_path="/leftover/cs-3")
    await refused(farm, AlreadyExists, "volume 'home/cs-3' already exists", count=3,
                  group="cs101")
    assert await User.find({"type": "class"}).count() == 0
    assert await Storage.count() == 0
    assert await StorageVolume.find({"parent": "home"}).count() == 0


async def test_a_home_mount_that_cannot_cover_rolls_back(farm):
    await make_volume(farm, "elsewhere", host_path="/elsewhere")
    await make_static_mount(farm, "homes", "/home2", volume="elsewhere")
    await SetSiteStorageDefaults.run(farm, AUTHOR, site="farm", home_static_mount="homes")
    await refused(farm, InvalidInput, "does not cover", count=2)


async def test_name_collisions_roll_back(farm):
    await make_user(farm, "cs-2")
    await refused(farm, AlreadyExists, "already taken: cs-2", count=3)
    await make_group(farm, "lab-3")
    await refused(farm, AlreadyExists, "already taken: lab-3", prefix="lab", count=3)


# -- argument validation --------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"count": 0}, "count"),
    ({"count": -1}, "count"),
    ({"count": 2001}, "less than or equal to 2000"),  # MAX_CLASS_BATCH
    ({"expires_at": datetime.now(UTC) - timedelta(minutes=1)}, "in the future"),
    ({"expires_at": datetime(2020, 1, 1)}, "in the future"),  # naive: taken as UTC
    ({"prefix": "CS"}, "prefix"),
    ({"prefix": "1cs"}, "prefix"),
    ({"prefix": "cs_101"}, "prefix"),
    ({"prefix": ""}, "prefix"),
    ({"prefix": "x" * 29, "count": 100}, "longer than 32"),  # 29 + '-' + 3 digits
    ({"email": "nobody"}, "e-mail"),
])
async def test_arguments_are_checked_before_any_write(farm, kwargs, match):
    await refused(farm, InvalidInput, match, **kwargs)


async def test_names_of_exactly_32_characters_are_fine(farm):
    created = await batch(farm, "x" * 30, 1)  # 30 + '-' + 1 digit
    assert [len(u.name) for u, _ in created] == [32]
    args = CreateClassUsers.parse_args(site="farm", prefix="x" * 28, count=100,
                                       email="t@example.org", expires_at=SOON)
    assert len(args.names()[-1]) == 32


async def test_naive_expiry_in_the_future_is_utc(farm):
    naive = (datetime.now(UTC) + timedelta(days=3)).replace(tzinfo=None, microsecond=0)
    [(user, _)] = await batch(farm, "n", 1, expires_at=naive)
    assert user.expires_at == naive.replace(tzinfo=UTC)
