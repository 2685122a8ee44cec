"""Group operations: explicit-gid creation, the id-band groups, sponsor groups, the
rename cascade (and the refusal to rename a personal group on its own), and seeding the
access/status groups."""

from __future__ import annotations

import pytest

from cheeto_like.constants import (
    ACCESS_GROUP_NAMES,
    CLASS_GROUP_BAND,
    LAB_GROUP_BAND,
    SPECIAL_GID_START,
    STATUS_GROUP_NAMES,
    SYSTEM_GROUP_BAND,
)
from cheeto_like.errors import AlreadyExists, Conflict, InvalidInput, NotFound
from cheeto_like.models import (
    Group,
    GroupMembership,
    HippoEvent,
    Site,
    SlurmAccount,
    SlurmAssociation,
    Storage,
    User,
)
from cheeto_like.operations.group import (
    CreateClassGroup,
    CreateGroup,
    CreateGroupFromSponsor,
    CreateLabGroup,
    CreateSystemGroup,
    RenameGroup,
    SeedAccessStatusGroups,
)
from cheeto_like.operations.group_membership import AddGroupMember, AddGroupSlurmer
from cheeto_like.operations.site import AddStickyGroup

from ..factories import AUTHOR, history, make_group, make_site, make_user, snapshot


async def group(name: str) -> Group:
    found = await Group.find_one(Group.name == name)
    assert found is not None, name
    return found


# -- CreateGroup -----------------------------------------------------------------------------


async def test_create_group(db):
    created = await CreateGroup.run(db, AUTHOR, name="lab", gid=6000)
    stored = await group("lab")
    assert (stored.id, stored.gid, stored.type, stored.shorthand) == (created.id, 6000, "group",
                                                                      None)
    [row] = await history("create_group")
    assert row.changes == {"group": "lab", "gid": 6000, "type": "group"}


@pytest.mark.parametrize("kind", ["system", "admin", "class"])
async def test_create_group_of_another_creatable_type(db, kind):
    await CreateGroup.run(db, AUTHOR, name="lab", gid=6000, type=kind)
    assert (await group("lab")).type == kind


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"name": "lab", "gid": 6001}, AlreadyExists, "group 'lab' already exists"),
    ({"name": "lab2", "gid": 6000}, AlreadyExists, "gid 6000 is already used by group 'lab'"),
    ({"name": "alice", "gid": 6002}, AlreadyExists, "group 'alice' already exists"),
    ({"name": "sudo-users", "gid": 6003}, AlreadyExists, "group 'sudo-users' already exists"),
    ({"name": "x", "gid": 6004, "type": "user"}, InvalidInput, "type"),
    ({"name": "x", "gid": 6004, "type": "access"}, InvalidInput, "type"),
    ({"name": "x", "gid": -1}, InvalidInput, "outside"),
    ({"name": "x", "gid": 4_294_967_296}, InvalidInput, "outside"),
    ({"name": "g" * 33, "gid": 6004}, InvalidInput, "longer than 32"),
])
async def test_create_group_refusals_write_nothing(db, kwargs, error, message):
    await make_group(db, "lab", gid=6000)
    await make_user(db, "alice", uid=5000)
    before = await snapshot()
    with pytest.raises(error, match=message):
        await CreateGroup.run(db, AUTHOR, **kwargs)
    assert await snapshot() == before


# -- band groups -----------------------------------------------------------------------------


@pytest.mark.parametrize(("op", "band", "kind", "label"), [
    (CreateSystemGroup, SYSTEM_GROUP_BAND, "system", "system"),
    (CreateClassGroup, CLASS_GROUP_BAND, "class", "class"),
    (CreateLabGroup, LAB_GROUP_BAND, "group", "lab"),
])
async def test_band_groups_count_up_from_the_band_start(db, op, band, kind, label):
    first = await op.run(db, AUTHOR, name="g1")
    second = await op.run(db, AUTHOR, name="g2")
    assert (first.gid, second.gid) == (band.start, band.start + 1)
    assert first.type == kind
    assert (await history(op.op_name))[0].changes == {"group": "g1", "gid": band.start,
                                                      "type": label}


async def test_band_allocation_skips_a_users_uid_in_the_band(db):
    await make_user(db, "classy", uid=CLASS_GROUP_BAND.start + 4, type="class")
    created = await CreateClassGroup.run(db, AUTHOR, name="course")
    assert created.gid == CLASS_GROUP_BAND.start + 5


async def test_band_allocation_ignores_ids_above_the_band(db):
    await make_group(db, "above", gid=SYSTEM_GROUP_BAND.stop + 10)
    created = await CreateSystemGroup.run(db, AUTHOR, name="sys")
    assert created.gid == SYSTEM_GROUP_BAND.start


async def test_exhausted_band_is_a_conflict(db):
    await make_group(db, "last", gid=LAB_GROUP_BAND.stop - 1)
    before = await snapshot()
    with pytest.raises(Conflict, match="no free id left"):
        await CreateLabGroup.run(db, AUTHOR, name="lab")
    assert await snapshot() == before


async def test_band_group_name_clash_writes_nothing(db):
    await make_group(db, "lab")
    with pytest.raises(AlreadyExists):
        await CreateSystemGroup.run(db, AUTHOR, name="lab")
    assert await history("create_system_group") == []


# -- CreateGroupFromSponsor ------------------------------------------------------------------


async def test_group_from_sponsor(db):
    await make_site(db, "farm")
    sponsor = await make_user(db, "pat", uid=12345, site="farm")
    created = await CreateGroupFromSponsor.run(db, AUTHOR, sponsor="pat", site="farm")
    assert (created.name, created.gid, created.type) == ("patgrp", 100_012_345, "group")
    [edge] = await GroupMembership.find_all().to_list()
    assert (edge.user, edge.group, edge.site, edge.roles) == ("pat", "patgrp", "farm",
                                                             ["member", "sponsor"])
    personal = await group("pat")
    assert (personal.gid, personal.type) == (sponsor.uid, "user")
    [row] = await history("create_group_from_sponsor")
    assert row.changes == {"group": "patgrp", "gid": 100_012_345, "sponsor": "pat",
                           "site": "farm"}


async def test_group_from_sponsor_twice_is_already_exists(db):
    await make_site(db, "farm")
    await make_user(db, "pat", site="farm")
    await CreateGroupFromSponsor.run(db, AUTHOR, sponsor="pat", site="farm")
    before = await snapshot()
    with pytest.raises(AlreadyExists):
        await CreateGroupFromSponsor.run(db, AUTHOR, sponsor="pat", site="farm")
    assert await snapshot() == before


@pytest.mark.parametrize(("sponsor", "site", "error", "message"), [
    ("ghost", "farm", NotFound, "user 'ghost'"),
    ("pat", "nope", NotFound, "site 'nope'"),
    ("p" * 30, "farm", InvalidInput, "would exceed 32 characters"),
    ("big", "farm", InvalidInput, "too large"),
])
async def test_group_from_sponsor_refusals(db, sponsor, site, error, message):
    await make_site(db, "farm")
    await make_user(db, "pat")
    await make_user(db, "p" * 30)
    await make_user(db, "big", uid=4_200_000_000)
    before = await snapshot()
    with pytest.raises(error, match=message):
        await CreateGroupFromSponsor.run(db, AUTHOR, sponsor=sponsor, site=site)
    assert await snapshot() == before


# -- RenameGroup -----------------------------------------------------------------------------


async def build_lab(db) -> None:
    await make_site(db, "farm")
    await make_site(db, "hive")
    await make_user(db, "alice", site="farm")
    await make_user(db, "bob", site="farm")
    await make_group(db, "lab")
    await make_group(db, "other")
    await AddGroupMember.run(db, AUTHOR, group="lab", user="alice", site="farm")
    await AddGroupSlurmer.run(db, AUTHOR, group="lab", user="bob", site="farm")
    await AddGroupMember.run(db, AUTHOR, group="other", user="bob", site="farm")
    await AddStickyGroup.run(db, AUTHOR, site="farm", group="lab")
    await AddStickyGroup.run(db, AUTHOR, site="farm", group="other")
    await AddStickyGroup.run(db, AUTHOR, site="hive", group="lab")
    for site in ("farm", "hive"):
        await SlurmAccount(group="lab", site=site).insert()
        await SlurmAssociation(site=site, account="lab", partition="high",
                               qos=["lab-high"]).insert()
    farm = await Site.find_one(Site.name == "farm")
    farm.slurm.sticky = ["other", "lab"]
    farm.slurm.default_account = "lab"
    await farm.save()
    await Storage(name="lab", site="farm", category="group", owner="alice", group="lab",
                  volume="group/lab").insert()
    await HippoEvent(hippo_id=7, hippo_endpoint="https://hippo", action="AddAccountToGroup",
                     target_groupnames=["lab"], target_groups=["other", "lab"]).insert()


async def test_rename_group_cascades_everywhere(db):
    await build_lab(db)
    await RenameGroup.run(db, AUTHOR, name="lab", new_name="bio-lab")
    assert await Group.find_one(Group.name == "lab") is None
    renamed = await group("bio-lab")
    assert renamed.gid and renamed.type == "group"
    edges = {(e.user, e.group): e.roles for e in await GroupMembership.find_all().to_list()}
    assert edges == {("alice", "bio-lab"): ["member"], ("bob", "bio-lab"): ["slurmer"],
                     ("bob", "other"): ["member"]}
    assert {a.group for a in await SlurmAccount.find_all().to_list()} == {"bio-lab"}
    assert {a.account for a in await SlurmAssociation.find_all().to_list()} == {"bio-lab"}
    farm = await Site.find_one(Site.name == "farm")
    assert farm.group.sticky == ["bio-lab", "other"]
    assert (farm.slurm.sticky, farm.slurm.default_account) == (["other", "bio-lab"], "bio-lab")
    assert (await Site.find_one(Site.name == "hive")).group.sticky == ["bio-lab"]
    storage = await Storage.find_one(Storage.category == "group")
    assert (storage.name, storage.group, storage.owner) == ("lab", "bio-lab", "alice")
    event = await HippoEvent.find_one(HippoEvent.hippo_id == 7)
    assert (event.target_groups, event.target_groupnames) == (["other", "bio-lab"], ["lab"])
    [row] = await history("rename_group")
    assert row.changes == {"group": "lab", "new_name": "bio-lab", "references": {
        "group_membership.group": 2, "slurm_accounts.group": 2,
        "slurm_associations.account": 2, "sites.group.sticky": 2, "sites.slurm.sticky": 1,
        "sites.slurm.default_account": 1, "storages.group": 1,
        "hippo_events.target_groups": 1}}


async def test_rename_group_moves_its_ldap_fingerprint(db):
    await make_group(db, "lab")
    before = await group("lab")
    await RenameGroup.run(db, AUTHOR, name="lab", new_name="lab2")
    after = await group("lab2")
    assert after.ldap.fingerprint != before.ldap.fingerprint
    assert after.ldap.modified_at > before.ldap.modified_at


async def test_renaming_a_personal_group_alone_is_refused(db):
    await make_user(db, "alice")
    with pytest.raises(Conflict, match="personal group; rename its user instead"):
        await RenameGroup.run(db, AUTHOR, name="alice", new_name="alicia")
    assert (await group("alice")).type == "user"
    assert await history("rename_group") == []


@pytest.mark.parametrize(("new_name", "error", "message"), [
    ("other", AlreadyExists, "group 'other' already exists"),
    ("alice", AlreadyExists, "group 'alice' already exists"),
    ("sudo-users", AlreadyExists, "group 'sudo-users' already exists"),
    ("lab", InvalidInput, "same as the old one"),
    ("Lab", InvalidInput, "POSIX"),
])
async def test_rename_group_refusals_change_nothing(db, new_name, error, message):
    await build_lab(db)
    snapshot = {m: await m.get_pymongo_collection().find({}).sort("_id").to_list()
                for m in (Group, GroupMembership, SlurmAccount, SlurmAssociation, Site, Storage,
                          HippoEvent)}
    with pytest.raises(error, match=message):
        await RenameGroup.run(db, AUTHOR, name="lab", new_name=new_name)
    for model, docs in snapshot.items():
        assert await model.get_pymongo_collection().find({}).sort("_id").to_list() == docs
    assert await history("rename_group") == []


async def insert_user_without_personal_group(name: str) -> None:
    await User(name=name, email=f"{name}@example.org", uid=1, gid=1, fullname="Carol",
               home_directory=f"/home/{name}").insert()


async def test_group_names_must_not_clash_with_user_names(db):
    await make_group(db, "lab")
    await insert_user_without_personal_group("carol")
    with pytest.raises(AlreadyExists, match="a user named 'carol' exists"):
        await RenameGroup.run(db, AUTHOR, name="lab", new_name="carol")
    with pytest.raises(AlreadyExists, match="a user named 'carol' exists"):
        await CreateGroup.run(db, AUTHOR, name="carol", gid=6000)
    assert await Group.find_one(Group.name == "carol") is None


async def test_rename_unknown_group(db):
    with pytest.raises(NotFound, match="group 'ghost'"):
        await RenameGroup.run(db, AUTHOR, name="ghost", new_name="spirit")


# -- SeedAccessStatusGroups ------------------------------------------------------------------


def seeded_names() -> list[str]:
    return [*ACCESS_GROUP_NAMES.values(), *STATUS_GROUP_NAMES.values()]


async def test_seed_creates_access_and_status_groups_from_the_default_gid(empty_db):
    outcome = await SeedAccessStatusGroups.run(empty_db, AUTHOR)
    assert outcome == dict.fromkeys(seeded_names(), "created")
    groups = await Group.find_all().sort(+Group.gid).to_list()
    assert [g.gid for g in groups] == list(range(SPECIAL_GID_START, SPECIAL_GID_START + 10))
    assert SPECIAL_GID_START == 3_333_333_000
    sudo = await group("sudo-users")
    assert (sudo.type, sudo.shorthand) == ("access", "sudo")
    active = await group("active-users")
    assert (active.type, active.shorthand) == ("status", "active")
    [row] = await history("seed_access_status_groups")
    assert row.changes == {"gid_start": SPECIAL_GID_START, "outcome": outcome}


async def test_seed_is_idempotent(empty_db):
    await SeedAccessStatusGroups.run(empty_db, AUTHOR)
    before = await Group.find_all().sort(+Group.gid).to_list()
    outcome = await SeedAccessStatusGroups.run(empty_db, AUTHOR, gid_start=9000)
    assert outcome == dict.fromkeys(seeded_names(), "already_exists")
    after = await Group.find_all().sort(+Group.gid).to_list()
    assert [(g.id, g.gid) for g in after] == [(g.id, g.gid) for g in before]


async def test_seed_skips_gids_in_use_by_groups_or_users(empty_db):
    await Group(name="squatter", gid=9001).insert()
    await User(name="uidsquat", email="u@example.org", uid=9003, gid=9003, fullname="U",
               home_directory="/home/uidsquat").insert()
    await SeedAccessStatusGroups.run(empty_db, AUTHOR, gid_start=9000)
    special = await Group.find({"type": {"$in": ["access", "status"]}}).sort(+Group.gid).to_list()
    assert [g.gid for g in special] == [9000, 9002, 9004, 9005, 9006, 9007, 9008, 9009, 9010,
                                        9011]


async def test_seed_fills_in_only_the_missing_ones(empty_db):
    await Group(name="sudo-users", gid=9000, type="access", shorthand="sudo").insert()
    outcome = await SeedAccessStatusGroups.run(empty_db, AUTHOR, gid_start=9000)
    assert outcome["sudo-users"] == "already_exists"
    assert outcome["login-ssh-users"] == "created"
    assert await Group.find(Group.type == "access").count() == len(ACCESS_GROUP_NAMES)


async def test_seed_with_custom_mappings(empty_db):
    outcome = await SeedAccessStatusGroups.run(empty_db, AUTHOR, gid_start=9000,
                                               access_groups={"gpu": "gpu-users"},
                                               status_groups={"active": "active-users"})
    assert outcome == {"gpu-users": "created", "active-users": "created"}


async def test_seed_refuses_a_plain_group_holding_a_seed_name(empty_db):
    await Group(name="sudo-users", gid=1).insert()
    with pytest.raises(Conflict, match="'sudo-users' already exists as a group group"):
        await SeedAccessStatusGroups.run(empty_db, AUTHOR)
    assert await Group.count() == 1
    assert await history() == []


async def test_a_collision_inside_the_cascade_rolls_back_the_whole_rename(db):
    """A stale Slurm account already naming the new group makes the cascade hit the
    (group, site) unique index after the group itself was renamed."""
    await build_lab(db)
    await SlurmAccount(group="bio-lab", site="farm").insert()
    snapshot_before = {m: await m.get_pymongo_collection().find({}).sort("_id").to_list()
                       for m in (Group, GroupMembership, SlurmAccount, Site)}
    with pytest.raises(AlreadyExists, match="Slurm account"):
        await RenameGroup.run(db, AUTHOR, name="lab", new_name="bio-lab")
    for model, docs in snapshot_before.items():
        assert await model.get_pymongo_collection().find({}).sort("_id").to_list() == docs
    assert await history("rename_group") == []
