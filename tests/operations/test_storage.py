"""Changing existing storages: set-mount transitions, volume subtree set-mounts, edits
(quota, owner, group, Globus) and removal. Every refusal writes nothing.

Volumes, allocations, maps, mounts and site defaults: test_storage_volumes.py; creating
homes, groups and shares, and re-homing: test_storage_homes.py.
"""

from __future__ import annotations

import pytest

from cheeto_like.errors import Conflict, InvalidInput, NotFound
from cheeto_like.models import Storage, StorageVolume
from cheeto_like.models.storage import MountOverrides
from cheeto_like.operations.storage import (
    CreateHomeStorage,
    CreateShareStorage,
    EditStorage,
    RemoveStorage,
    SetStorageMount,
    SetVolumeStorageMounts,
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


async def refused(store, op, exc, match: str, **kwargs) -> None:
    before = await snapshot()
    with pytest.raises(exc, match=match):
        await op.run(store, AUTHOR, **kwargs)
    assert await snapshot() == before


@pytest.fixture
async def farm(db):
    """alice's home on the default ``home`` volume through map ``home``, with overrides."""
    await make_site(db, "farm")
    await make_user(db, "alice", site="farm")
    await home_defaults(db)
    await CreateHomeStorage.run(db, AUTHOR, site="farm", user="alice")
    home = await Storage.find_one({"name": "alice"})
    home.mount_overrides = MountOverrides(add_options=["acl"])
    await home.save()
    await make_static_mount(db, "homes", "/mnt/home", volume="home", options=["hard"])
    return db


async def stored(name: str = "alice") -> Storage:
    found = await Storage.find_one({"name": name, "site": "farm"})
    assert found is not None
    return found


# -- set-mount ----------------------------------------------------------------------------


async def test_automount_to_static_clears_mount_name_and_overrides(farm):
    await SetStorageMount.run(farm, AUTHOR, site="farm", name="alice", static_mount="homes")
    s = await stored()
    assert (s.automount_map, s.static_mount, s.mount_name) == (None, "homes", "")
    assert s.mount_overrides == MountOverrides()
    r = await get_storage("farm", "alice")
    assert (r.mount_path, r.mount_options) == ("/mnt/home/alice", ["hard"])
    [row] = await history("set_storage_mount")
    assert row.changes == {"site": "farm", "storage": "alice", "category": "home",
                           "mechanism": "static:homes"}


async def test_static_back_to_automount_and_mount_names(farm):
    await SetStorageMount.run(farm, AUTHOR, site="farm", name="alice", static_mount="homes")
    await SetStorageMount.run(farm, AUTHOR, site="farm", name="alice", automount_map="home")
    s = await stored()
    assert (s.automount_map, s.static_mount, s.mount_name) == ("home", None, "alice")
    await make_map(farm, "home2", "/home2")
    await SetStorageMount.run(farm, AUTHOR, site="farm", name="alice", automount_map="home2",
                              mount_name="al")
    assert (await get_storage("farm", "alice")).mount_path == "/home2/al"


async def test_automount_to_automount_keeps_overrides(farm):
    await make_map(farm, "home2", "/home2", options=["ro"])
    await SetStorageMount.run(farm, AUTHOR, site="farm", name="alice", automount_map="home2")
    s = await stored()
    assert s.mount_overrides.add_options == ["acl"] and s.mount_name == "alice"
    assert (await get_storage("farm", "alice")).mount_options == ["acl", "ro"]


async def test_no_mount_clears_everything(farm):
    await SetStorageMount.run(farm, AUTHOR, site="farm", name="alice", no_mount=True)
    s = await stored()
    assert (s.automount_map, s.static_mount, s.mount_name) == (None, None, "")
    assert s.mount_overrides == MountOverrides()
    assert (await get_storage("farm", "alice")).mount_path is None
    assert (await history("set_storage_mount"))[-1].changes["mechanism"] == "none"


async def test_static_mount_that_does_not_cover_the_path_is_refused(farm):
    await make_static_mount(farm, "bobs", "/mnt/bob", volume="home", subpath="bob")
    await make_static_mount(farm, "sw", "/cvmfs/sw", spec="sw.example.org", fstype="cvmfs")
    await make_volume(farm, "elsewhere", host="nas2", host_path="/export/home")
    await make_static_mount(farm, "nas2", "/mnt/nas2", volume="elsewhere")
    for mount, why in (("bobs", "does not cover"), ("sw", "not a volume path"),
                       ("nas2", "is on nas2")):
        await refused(farm, SetStorageMount, InvalidInput, why, site="farm", name="alice",
                      static_mount=mount)
    assert (await stored()).automount_map == "home"


async def test_set_mount_argument_and_lookup_errors(farm):
    await refused(farm, SetStorageMount, InvalidInput, "give --automount-map", site="farm",
                  name="alice")
    await refused(farm, SetStorageMount, InvalidInput, "choose one", site="farm",
                  name="alice", automount_map="home", static_mount="homes")
    await refused(farm, SetStorageMount, NotFound, "storage 'bob'", site="farm", name="bob",
                  no_mount=True)
    await refused(farm, SetStorageMount, NotFound, "automount map 'nope'", site="farm",
                  name="alice", automount_map="nope")
    await refused(farm, SetStorageMount, NotFound, "static mount 'nope'", site="farm",
                  name="alice", static_mount="nope")
    await refused(farm, SetStorageMount, InvalidInput, "mount name", site="farm",
                  name="alice", automount_map="home", mount_name="bad name")


async def test_same_name_in_two_categories_needs_a_category(farm):
    await make_group(farm, "lab")
    await CreateShareStorage.run(farm, AUTHOR, site="farm", name="alice", owner="alice",
                                 group="lab", host="nas3", no_mount=True)
    await refused(farm, SetStorageMount, InvalidInput, "give --category", site="farm",
                  name="alice", no_mount=True)
    await SetStorageMount.run(farm, AUTHOR, site="farm", name="alice", category="share",
                              automount_map="home", mount_name="alice-share")
    share = await Storage.find_one({"name": "alice", "category": "share"})
    assert (share.automount_map, share.mount_name) == ("home", "alice-share")
    assert (await Storage.find_one({"name": "alice", "category": "home"})).mount_name == "alice"


# -- volume set-mounts --------------------------------------------------------------------


@pytest.fixture
async def tree(db):
    """data (/export/data) > data/a > data/a/b, plus ``other``; one storage on each."""
    await make_site(db, "farm")
    await make_user(db, "alice", site="farm")
    await make_group(db, "lab")
    await make_volume(db, "data", host_path="/export/data")
    await make_volume(db, "data/a", parent="data")
    await make_volume(db, "data/a/b", parent="data/a")
    await make_volume(db, "other", host_path="/export/other")
    await make_map(db, "share", "/share")
    for name, volume in (("s0", "data"), ("sa", "data/a"), ("sb", "data/a/b"),
                         ("sx", "other")):
        await Storage(name=name, site="farm", category="share", owner="alice", group="lab",
                      volume=volume, automount_map="share", mount_name=name).insert()
    await make_static_mount(db, "amount", "/mnt/a", volume="data/a")
    return db


async def mechanisms() -> dict[str, tuple[str | None, str | None, str]]:
    return {s.name: (s.automount_map, s.static_mount, s.mount_name)
            for s in await Storage.find({"site": "farm"}).to_list()}


async def test_volume_set_mounts_static_over_a_subtree_warns_for_uncovered(tree):
    result = await SetVolumeStorageMounts.run(tree, AUTHOR, site="farm", volume="data",
                                              static_mount="amount")
    assert result["mechanism"] == "static:amount"
    assert result["updated"] == ["sa", "sb"]
    assert len(result["warnings"]) == 1 and "storage 's0'" in result["warnings"][0]
    assert await mechanisms() == {"s0": ("share", None, "s0"), "sa": (None, "amount", ""),
                                  "sb": (None, "amount", ""), "sx": ("share", None, "sx")}
    assert (await get_storage("farm", "sb")).mount_path == "/mnt/a/b"
    [row] = await history("set_volume_storage_mounts")
    assert row.changes == {"site": "farm", "volume": "data", "updated": ["sa", "sb"],
                           "warnings": result["warnings"]}


async def test_volume_set_mounts_automount_and_none(tree):
    await make_map(tree, "data", "/data")
    result = await SetVolumeStorageMounts.run(tree, AUTHOR, site="farm", volume="data/a",
                                              automount_map="data")
    assert (result["updated"], result["warnings"]) == (["sa", "sb"], [])
    assert (await get_storage("farm", "sb")).mount_path == "/data/sb"
    await SetVolumeStorageMounts.run(tree, AUTHOR, site="farm", volume="data", no_mount=True)
    assert await mechanisms() == {"s0": (None, None, ""), "sa": (None, None, ""),
                                  "sb": (None, None, ""), "sx": ("share", None, "sx")}


async def test_volume_set_mounts_errors(tree):
    await refused(tree, SetVolumeStorageMounts, InvalidInput, "give --automount-map",
                  site="farm", volume="data")
    await refused(tree, SetVolumeStorageMounts, NotFound, "volume 'nope'", site="farm",
                  volume="nope", no_mount=True)
    await refused(tree, SetVolumeStorageMounts, NotFound, "static mount 'nope'", site="farm",
                  volume="data", static_mount="nope")


# -- edit ---------------------------------------------------------------------------------


async def test_edit_quota_replaces_the_volume_allocations(farm):
    volume = await StorageVolume.find_one({"name": "home/alice"})
    assert volume.quota == "20G"
    await EditStorage.run(farm, AUTHOR, site="farm", name="alice", quota="45.8T")
    volume = await StorageVolume.find_one({"name": "home/alice"})
    assert [(a.quota, a.comment) for a in volume.allocations] == [("45.8T", "set by edit")]
    assert (await get_storage("farm", "alice")).quota == "45.8T"
    [row] = await history("edit_storage")
    assert row.changes == {"site": "farm", "storage": "alice", "category": "home",
                           "quota": "45.8T", "owner": None, "group": None, "globus": None}


async def test_edit_owner_group_globus(farm):
    await make_user(farm, "bob")
    await make_group(farm, "lab")
    await EditStorage.run(farm, AUTHOR, site="farm", name="alice", owner="bob", group="lab",
                          globus=True)
    s = await stored()
    assert (s.owner, s.group, s.globus) == ("bob", "lab", True)
    await EditStorage.run(farm, AUTHOR, site="farm", name="alice", globus=False)
    s = await stored()
    assert (s.owner, s.group, s.globus) == ("bob", "lab", False)
    assert (await StorageVolume.find_one({"name": "home/alice"})).quota == "20G"


async def test_edit_quota_of_a_subpath_storage_is_refused(farm):
    await make_group(farm, "lab")
    await Storage(name="lab", site="farm", category="group", owner="alice", group="lab",
                  volume="home", subpath="groups/lab").insert()
    await refused(farm, EditStorage, InvalidInput, "no quota of its own", site="farm",
                  name="lab", quota="1T")


async def test_edit_failure_rolls_back_the_quota_change(farm):
    await refused(farm, EditStorage, NotFound, "user 'zed'", site="farm", name="alice",
                  quota="1T", owner="zed")
    await refused(farm, EditStorage, NotFound, "group 'nope'", site="farm", name="alice",
                  quota="1T", group="nope")
    assert (await StorageVolume.find_one({"name": "home/alice"})).quota == "20G"
    await refused(farm, EditStorage, InvalidInput, "invalid quota", site="farm",
                  name="alice", quota="10X")
    await refused(farm, EditStorage, NotFound, "storage 'bob'", site="farm", name="bob",
                  globus=True)


# -- remove -------------------------------------------------------------------------------


async def test_remove_is_refused_while_mounted(farm):
    await refused(farm, RemoveStorage, Conflict, "is mounted", site="farm", name="alice")
    await SetStorageMount.run(farm, AUTHOR, site="farm", name="alice", static_mount="homes")
    await refused(farm, RemoveStorage, Conflict, r"mounted \(static:homes\)", site="farm",
                  name="alice")
    assert await Storage.count() == 1


async def test_remove_with_force_keeps_the_volume(farm):
    await RemoveStorage.run(farm, AUTHOR, site="farm", name="alice", force=True)
    assert await Storage.count() == 0
    assert await StorageVolume.find_one({"name": "home/alice"}) is not None
    [row] = await history("remove_storage")
    assert row.changes == {"site": "farm", "storage": "alice", "category": "home",
                           "volume": "home/alice", "mechanism": "automount:home",
                           "force": True}


async def test_remove_unmounted_needs_no_force(farm):
    await SetStorageMount.run(farm, AUTHOR, site="farm", name="alice", no_mount=True)
    await RemoveStorage.run(farm, AUTHOR, site="farm", name="alice", category="home")
    assert await Storage.count() == 0
    await refused(farm, RemoveStorage, NotFound, "storage 'alice'", site="farm",
                  name="alice")
