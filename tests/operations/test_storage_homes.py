"""Home, group and share storages (site defaults, explicit targets, the ``--host`` escape
hatch, mount fallbacks) and re-homing. Every failure leaves no document and no History.
"""

from __future__ import annotations

import pytest

from cheeto_like.errors import AlreadyExists, Conflict, InvalidInput, NotFound
from cheeto_like.models import Storage, StorageVolume
from cheeto_like.models.storage import ZFSConfig
from cheeto_like.operations.group_membership import AddGroupMember, AddGroupSponsor
from cheeto_like.operations.storage import (
    CreateGroupStorage,
    CreateHomeStorage,
    CreateShareStorage,
    RehomeUser,
    SetSiteStorageDefaults,
)
from cheeto_like.queries.storage import get_storage

from ..factories import (
    AUTHOR,
    history,
    home_defaults,
    make_group,
    make_map,
    make_site,
    make_static_mount,
    make_user,
    make_volume,
    snapshot,
)


@pytest.fixture
async def farm(db):
    await make_site(db, "farm")
    await make_user(db, "alice", site="farm")
    return db


async def refused(store, op, exc, match: str, **kwargs) -> None:
    before = await snapshot()
    with pytest.raises(exc, match=match):
        await op.run(store, AUTHOR, **kwargs)
    assert await snapshot() == before


async def vol(name: str) -> StorageVolume:
    found = await StorageVolume.find_one({"name": name, "site": "farm"})
    assert found is not None, f"volume {name} missing"
    return found


async def home_of(user: str = "alice"):
    return await get_storage("farm", user, "home")


# -- homes --------------------------------------------------------------------------------


async def test_home_from_site_defaults(farm):
    await home_defaults(farm)
    storage = await CreateHomeStorage.run(farm, AUTHOR, site="farm", user="alice")
    assert (storage.name, storage.category, storage.owner, storage.group, storage.volume) == (
        "alice", "home", "alice", "alice", "home/alice")
    assert (storage.automount_map, storage.mount_name, storage.static_mount) == (
        "home", "alice", None)
    v = await vol("home/alice")
    assert (v.parent, v.backend, v.host, v.host_path, v.quota) == (
        "home", "zfs", "nas1", "/export/home/alice", "20G")
    assert v.zfs == ZFSConfig()
    r = await home_of()
    assert (r.host_path, r.quota, r.mount_path, r.mount_options) == (
        "/export/home/alice", "20G", "/home/alice", ["nosuid", "rw"])
    [row] = await history("create_home_storage")
    assert row.author == AUTHOR
    assert row.changes == {"site": "farm", "user": "alice", "volume": "home/alice",
                           "host_path": "/export/home/alice", "quota": "20G",
                           "mechanism": "automount:home"}


async def test_home_quota_argument_beats_the_default_and_none_is_allowed(farm):
    await home_defaults(farm, quota=None)
    await make_user(farm, "bob", site="farm")
    await CreateHomeStorage.run(farm, AUTHOR, site="farm", user="alice", quota="50G")
    await CreateHomeStorage.run(farm, AUTHOR, site="farm", user="bob")
    assert (await vol("home/alice")).quota == "50G"
    assert (await vol("home/bob")).quota is None


async def test_home_on_a_static_mount_site(farm):
    await home_defaults(farm, automount_map=None)
    await make_static_mount(farm, "homes", "/home", volume="home", options=["rw", "hard"])
    await SetSiteStorageDefaults.run(farm, AUTHOR, site="farm", home_static_mount="homes")
    storage = await CreateHomeStorage.run(farm, AUTHOR, site="farm", user="alice")
    assert (storage.static_mount, storage.automount_map, storage.mount_name) == (
        "homes", None, "")
    r = await home_of()
    assert (r.mount_path, r.mount_options) == ("/home/alice", ["rw", "hard"])
    assert (await history("create_home_storage"))[-1].changes["mechanism"] == "static:homes"


async def test_home_refused_when_the_site_static_mount_cannot_cover_it(farm):
    await home_defaults(farm, automount_map=None)
    await make_volume(farm, "other", host_path="/export/other")
    await make_static_mount(farm, "homes", "/home", volume="other")
    await SetSiteStorageDefaults.run(farm, AUTHOR, site="farm", home_static_mount="homes")
    await refused(farm, CreateHomeStorage, InvalidInput, "does not cover", site="farm",
                  user="alice")


async def test_home_falls_back_to_a_map_named_home(farm):
    await home_defaults(farm, automount_map=None)
    await make_user(farm, "bob", site="farm")
    await CreateHomeStorage.run(farm, AUTHOR, site="farm", user="alice")
    assert (await home_of()).mechanism == "none"  # no map, no mount
    await make_map(farm, "home", "/home")
    await CreateHomeStorage.run(farm, AUTHOR, site="farm", user="bob")
    r = await home_of("bob")
    assert (r.mechanism, r.mount_path) == ("automount:home", "/home/bob")


async def test_explicit_mount_choices_beat_the_site_defaults(farm):
    await home_defaults(farm)
    await make_map(farm, "home2", "/home2")
    await make_static_mount(farm, "homes", "/h", volume="home")
    for user in ("bob", "carol", "dave"):
        await make_user(farm, user, site="farm")
    await CreateHomeStorage.run(farm, AUTHOR, site="farm", user="alice", automount_map="home2")
    await CreateHomeStorage.run(farm, AUTHOR, site="farm", user="bob", static_mount="homes")
    await CreateHomeStorage.run(farm, AUTHOR, site="farm", user="carol", no_mount=True)
    await CreateHomeStorage.run(farm, AUTHOR, site="farm", user="dave", parent_volume="home",
                                quota="1G")
    assert (await home_of("alice")).mount_path == "/home2/alice"
    assert (await home_of("bob")).mount_path == "/h/bob"
    assert (await home_of("carol")).mount_path is None
    assert (await home_of("dave")).mechanism == "automount:home"
    await refused(farm, CreateHomeStorage, InvalidInput, "choose one", site="farm",
                  user="alice", automount_map="home", no_mount=True)


async def test_home_on_an_explicit_parent_volume(farm):
    await home_defaults(farm)
    await make_volume(farm, "fast", host="nas2", host_path="/fast")
    await CreateHomeStorage.run(farm, AUTHOR, site="farm", user="alice", parent_volume="fast")
    v = await vol("fast/alice")
    assert (v.host, v.host_path, v.parent, v.quota) == ("nas2", "/fast/alice", "fast", "20G")


async def test_home_host_escape_hatch(farm):
    await home_defaults(farm)
    await make_user(farm, "bob", site="farm")
    await CreateHomeStorage.run(farm, AUTHOR, site="farm", user="alice", host="nas9")
    v = await vol("home/alice")
    assert (v.host, v.host_path, v.parent, v.backend, v.quota) == (
        "nas9", "/home/alice", None, "zfs", "20G")
    await CreateHomeStorage.run(farm, AUTHOR, site="farm", user="bob", host="nas9",
                                host_path="/tank/bob/")
    assert (await vol("home/bob")).host_path == "/tank/bob"
    assert (await home_of("bob")).mount_path == "/home/bob"  # mount from the site default


async def test_home_without_defaults_is_refused(farm):
    await refused(farm, CreateHomeStorage, InvalidInput, "no parent volume", site="farm",
                  user="alice")


async def test_home_errors_write_nothing(farm):
    await home_defaults(farm)
    await CreateHomeStorage.run(farm, AUTHOR, site="farm", user="alice")
    await refused(farm, CreateHomeStorage, AlreadyExists, "already has a home", site="farm",
                  user="alice")
    await refused(farm, CreateHomeStorage, NotFound, "user 'zed'", site="farm", user="zed")
    await refused(farm, CreateHomeStorage, NotFound, "site 'hive'", site="hive", user="alice")
    await make_user(farm, "bob", site="farm")
    await refused(farm, CreateHomeStorage, NotFound, "volume 'nope'", site="farm",
                  user="bob", parent_volume="nope")
    await refused(farm, CreateHomeStorage, NotFound, "automount map 'nope'", site="farm",
                  user="bob", automount_map="nope")
    await refused(farm, CreateHomeStorage, InvalidInput, "not both", site="farm",
                  user="bob", parent_volume="home", host="nas2")
    await refused(farm, CreateHomeStorage, InvalidInput, "--path goes with --host",
                  site="farm", user="bob", host_path="/x")
    for quota in ("10X", "-5G"):
        await refused(farm, CreateHomeStorage, InvalidInput, "invalid quota", site="farm",
                      user="bob", quota=quota)
    # the volume name is taken (a leftover record): refused before anything is written
    await make_volume(farm, "home/bob", host_path="/leftover/bob")
    await refused(farm, CreateHomeStorage, AlreadyExists, "volume 'home/bob' already exists",
                  site="farm", user="bob")
    # the path is taken by another volume
    await make_user(farm, "carol", site="farm")
    await make_volume(farm, "carol-old", host_path="/export/home/carol")
    await refused(farm, CreateHomeStorage, AlreadyExists, "already lives at", site="farm",
                  user="carol")


# -- group storages -----------------------------------------------------------------------


@pytest.fixture
async def lab(farm):
    await make_group(farm, "lab")
    await AddGroupSponsor.run(farm, AUTHOR, group="lab", user="alice", site="farm")
    await make_volume(farm, "group", host_path="/export/group")
    return farm


async def test_group_storage_defaults_to_the_sponsor_and_the_group_map(lab):
    await make_map(lab, "group", "/group", options=["rw"])
    storage = await CreateGroupStorage.run(lab, AUTHOR, site="farm", group="lab",
                                           quota="10T", parent_volume="group")
    assert (storage.name, storage.category, storage.owner, storage.group, storage.volume) == (
        "lab", "group", "alice", "lab", "group/lab")
    assert (storage.automount_map, storage.mount_name, storage.globus) == ("group", "lab", False)
    r = await get_storage("farm", "lab", "group")
    assert (r.host_path, r.quota, r.mount_path) == ("/export/group/lab", "10T", "/group/lab")
    [row] = await history("create_group_storage")
    assert row.changes == {"site": "farm", "group": "lab", "owner": "alice",
                           "volume": "group/lab", "quota": "10T",
                           "mechanism": "automount:group"}


async def test_group_storage_without_a_group_map_is_unmounted(lab):
    await CreateGroupStorage.run(lab, AUTHOR, site="farm", group="lab", quota="1T",
                                 parent_volume="group", globus=True)
    r = await get_storage("farm", "lab", "group")
    assert (r.mechanism, r.storage.globus) == ("none", True)


async def test_group_storage_explicit_owner_and_host(lab):
    await make_user(lab, "bob", site="farm")
    await CreateGroupStorage.run(lab, AUTHOR, site="farm", group="lab", quota="1T",
                                 owner="bob", host="nas7")
    v = await vol("group/lab")
    assert (v.host, v.host_path, v.parent, v.quota) == ("nas7", "/group/lab", None, "1T")
    assert (await get_storage("farm", "lab", "group")).storage.owner == "bob"


async def test_group_storage_needs_an_owner_when_sponsors_are_not_one(farm):
    await make_group(farm, "lab")
    await make_volume(farm, "group", host_path="/export/group")
    await refused(farm, CreateGroupStorage, InvalidInput, "0 sponsors", site="farm",
                  group="lab", quota="1T", parent_volume="group")
    await AddGroupMember.run(farm, AUTHOR, group="lab", user="alice", site="farm")
    await refused(farm, CreateGroupStorage, InvalidInput, "0 sponsors", site="farm",
                  group="lab", quota="1T", parent_volume="group")
    await make_user(farm, "bob", site="farm")
    for user in ("alice", "bob"):
        await AddGroupSponsor.run(farm, AUTHOR, group="lab", user=user, site="farm")
    await refused(farm, CreateGroupStorage, InvalidInput, "2 sponsors", site="farm",
                  group="lab", quota="1T", parent_volume="group")
    await CreateGroupStorage.run(farm, AUTHOR, site="farm", group="lab", quota="1T",
                                 parent_volume="group", owner="bob")


async def test_group_storage_errors_write_nothing(lab):
    await refused(lab, CreateGroupStorage, InvalidInput, "--parent-volume or --host",
                  site="farm", group="lab", quota="1T")
    await refused(lab, CreateGroupStorage, InvalidInput, "quota", site="farm", group="lab",
                  parent_volume="group")
    await refused(lab, CreateGroupStorage, InvalidInput, "invalid quota", site="farm",
                  group="lab", parent_volume="group", quota="-5G")
    await refused(lab, CreateGroupStorage, NotFound, "group 'nope'", site="farm",
                  group="nope", quota="1T", parent_volume="group")
    await refused(lab, CreateGroupStorage, NotFound, "user 'zed'", site="farm",
                  group="lab", quota="1T", parent_volume="group", owner="zed")
    await CreateGroupStorage.run(lab, AUTHOR, site="farm", group="lab", quota="1T",
                                 parent_volume="group")
    await refused(lab, CreateGroupStorage, AlreadyExists, "already has a group storage",
                  site="farm", group="lab", quota="1T", parent_volume="group")


# -- shares -------------------------------------------------------------------------------


async def test_share_storage(lab):
    await make_map(lab, "share", "/share")
    await make_volume(lab, "shares", host_path="/export/share")
    storage = await CreateShareStorage.run(lab, AUTHOR, site="farm", name="datasets",
                                           owner="alice", group="lab",
                                           parent_volume="shares", quota="100T", globus=True)
    assert (storage.category, storage.owner, storage.group, storage.volume, storage.globus) \
        == ("share", "alice", "lab", "shares/datasets", True)
    r = await get_storage("farm", "datasets", "share")
    assert (r.quota, r.mount_path, r.host_path) == (
        "100T", "/share/datasets", "/export/share/datasets")
    [row] = await history("create_share_storage")
    assert row.changes == {"site": "farm", "share": "datasets", "owner": "alice",
                           "group": "lab", "volume": "shares/datasets", "quota": "100T",
                           "mechanism": "automount:share"}
    await CreateShareStorage.run(lab, AUTHOR, site="farm", name="refs", owner="alice",
                                 group="lab", host="nas3", no_mount=True)
    v = await vol("share/refs")
    assert (v.host, v.host_path, v.quota) == ("nas3", "/share/refs", None)
    assert (await get_storage("farm", "refs")).mechanism == "none"


async def test_share_errors_write_nothing(lab):
    await make_volume(lab, "shares", host_path="/export/share")
    base = {"site": "farm", "owner": "alice", "group": "lab"}
    await refused(lab, CreateShareStorage, InvalidInput, "--parent-volume or --host",
                  name="datasets", **base)
    await refused(lab, CreateShareStorage, NotFound, "user 'zed'", name="datasets",
                  parent_volume="shares", site="farm", owner="zed", group="lab")
    await refused(lab, CreateShareStorage, NotFound, "group 'nope'", name="datasets",
                  parent_volume="shares", site="farm", owner="alice", group="nope")
    await refused(lab, CreateShareStorage, InvalidInput, "storage name", name="bad name",
                  parent_volume="shares", **base)
    await CreateShareStorage.run(lab, AUTHOR, name="datasets", parent_volume="shares", **base)
    await refused(lab, CreateShareStorage, AlreadyExists, "already exists", name="datasets",
                  parent_volume="shares", **base)


# -- re-homing ----------------------------------------------------------------------------


async def test_rehome_moves_the_record_to_the_default(farm):
    await home_defaults(farm, volume="oldhome")
    await CreateHomeStorage.run(farm, AUTHOR, site="farm", user="alice")
    await make_volume(farm, "home", host="nas2", host_path="/export/home")
    await SetSiteStorageDefaults.run(farm, AUTHOR, site="farm", home_volume="home",
                                     home_quota="30G")
    storage = await RehomeUser.run(farm, AUTHOR, site="farm", user="alice")
    assert storage.volume == "home/alice"
    homes = await Storage.find({"owner": "alice", "category": "home"}).to_list()
    assert [h.volume for h in homes] == ["home/alice"]
    r = await home_of()
    assert (r.host, r.host_path, r.quota, r.mount_path) == (
        "nas2", "/export/home/alice", "30G", "/home/alice")
    assert await vol("oldhome/alice")  # the old volume record stays
    [row] = await history("rehome_user")
    assert row.changes == {"site": "farm", "user": "alice", "old_volume": "oldhome/alice",
                           "new_volume": "home/alice", "mechanism": "automount:home"}
    assert len(await history("create_home_storage")) == 1  # composed: no row of its own


async def test_rehome_errors_keep_the_home(farm):
    await refused(farm, RehomeUser, NotFound, "has no home", site="farm", user="alice")
    await home_defaults(farm)
    await CreateHomeStorage.run(farm, AUTHOR, site="farm", user="alice")
    await refused(farm, RehomeUser, Conflict, "already under 'home'", site="farm",
                  user="alice")
    await SetSiteStorageDefaults.run(farm, AUTHOR, site="farm", clear=["home_volume"])
    await refused(farm, RehomeUser, Conflict, "no default home volume", site="farm",
                  user="alice")
    assert (await home_of()).volume.name == "home/alice"


async def test_failed_rehome_rolls_back_the_deleted_record(farm):
    """A home made with the --host escape hatch is volume ``home/<user>``, the same name
    the default ``home`` volume's child would get: the re-home fails after deleting the
    record, and the transaction restores it."""
    await home_defaults(farm)
    await CreateHomeStorage.run(farm, AUTHOR, site="farm", user="alice", host="nas9")
    await refused(farm, RehomeUser, AlreadyExists, "volume 'home/alice' already exists",
                  site="farm", user="alice")
    assert (await home_of()).host == "nas9"
