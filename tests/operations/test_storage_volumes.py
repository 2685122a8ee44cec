"""Volumes (nested, with exact allocations), automount maps, static mounts and the site's
storage defaults. Every failure leaves no document and no History row.

Homes, groups, shares and re-homing: test_storage_homes.py; mount changes, edits and
removal: test_storage.py.
"""

from __future__ import annotations

import pytest

from cheeto_like.errors import AlreadyExists, InvalidInput, NotFound
from cheeto_like.models import AutomountMap, Site, StaticMount, StorageVolume
from cheeto_like.models.storage import NFSExportConfig, QuobyteConfig, ZFSConfig
from cheeto_like.operations.storage import (
    AddVolumeAllocation,
    CreateAutomountMap,
    CreateStaticMount,
    CreateStorageVolume,
    EditVolumeAllocation,
    RemoveVolumeAllocation,
    SetSiteStorageDefaults,
)

from ..factories import (
    AUTHOR,
    history,
    make_map,
    make_site,
    make_static_mount,
    make_volume,
    snapshot,
)


@pytest.fixture
async def farm(db):
    await make_site(db, "farm")
    return db


async def volume(name: str, site: str = "farm") -> StorageVolume:
    found = await StorageVolume.find_one({"name": name, "site": site})
    assert found is not None, f"volume {name} missing"
    return found


async def refused(store, op, exc, match: str, **kwargs) -> None:
    """``op`` fails with ``exc`` and writes nothing at all (no document, no History)."""
    before = await snapshot()
    with pytest.raises(exc, match=match):
        await op.run(store, AUTHOR, **kwargs)
    assert await snapshot() == before


# -- volumes ----------------------------------------------------------------------------


async def test_create_root_zfs_volume(farm):
    v = await CreateStorageVolume.run(farm, AUTHOR, site="farm", name="home", backend="zfs",
                                      host="nas1", host_path="/export/home/", quota="10T",
                                      export_options="rw,no_root_squash",
                                      export_ranges=["10.0.0.0/8"])
    stored = await volume("home")
    assert stored.host_path == "/export/home" and stored.parent is None
    assert stored.zfs == ZFSConfig() and stored.quobyte is None
    assert stored.quota == "10T"
    assert [(a.quota, a.comment) for a in stored.allocations] == [("10T", "initial allocation")]
    assert stored.nfs_export == NFSExportConfig(export_options="rw,no_root_squash",
                                                export_ranges=["10.0.0.0/8"])
    assert v.id == stored.id
    [row] = await history("create_storage_volume")
    assert row.author == AUTHOR
    assert row.changes == {"site": "farm", "volume": "home", "backend": "zfs", "host": "nas1",
                           "host_path": "/export/home", "parent": None, "quota": "10T"}


async def test_quobyte_volume_without_quota_or_exports(farm):
    await make_volume(farm, "scratch", backend="quobyte", host="qb1")
    stored = await volume("scratch")
    assert stored.quobyte == QuobyteConfig() and stored.zfs is None
    assert stored.allocations == [] and stored.quota is None
    assert stored.nfs_export is None


async def test_child_volume_inherits_host_and_backend(farm):
    await make_volume(farm, "data", backend="quobyte", host="qb1", host_path="/data")
    await make_volume(farm, "data/lab", parent="data", quota="2T")
    child = await volume("data/lab")
    assert (child.backend, child.host, child.host_path, child.parent) == (
        "quobyte", "qb1", "/data/lab", "data")
    assert child.quobyte == QuobyteConfig() and child.quota == "2T"
    await CreateStorageVolume.run(farm, AUTHOR, site="farm", name="deep", parent="data/lab",
                                  host_path="/data/lab/x/y", host="qb1", backend="quobyte")
    assert (await volume("deep")).host_path == "/data/lab/x/y"
    assert (await history("create_storage_volume"))[-1].changes["parent"] == "data/lab"


@pytest.mark.parametrize("path", ["/elsewhere/lab", "/data", "/data-old/lab", "/"])
async def test_child_volume_outside_its_parent_is_refused(farm, path):
    await make_volume(farm, "data", host_path="/data")
    await refused(farm, CreateStorageVolume, InvalidInput, "not inside parent", site="farm",
                  name="lab", parent="data", host_path=path)


async def test_child_volume_cannot_change_host_or_backend(farm):
    await make_volume(farm, "data", host_path="/data")
    await refused(farm, CreateStorageVolume, InvalidInput, "lives on nas1", site="farm",
                  name="lab", parent="data", host="nas2")
    await refused(farm, CreateStorageVolume, InvalidInput, "must use zfs", site="farm",
                  name="lab", parent="data", backend="quobyte")


async def test_duplicate_volume_name_is_refused(farm):
    await make_volume(farm, "home", host_path="/export/home")
    await refused(farm, CreateStorageVolume, AlreadyExists, "already exists", site="farm",
                  name="home", backend="zfs", host="nas2", host_path="/other")


async def test_duplicate_host_and_path_is_refused(farm):
    await make_volume(farm, "home", host_path="/export/home")
    await refused(farm, CreateStorageVolume, AlreadyExists, "'home' already lives at "
                  "nas1:/export/home", site="farm", name="home2", backend="zfs", host="nas1",
                  host_path="/export/home/")
    await make_volume(farm, "home-nas2", host="nas2", host_path="/export/home")  # other host
    await make_site(farm, "hive")
    await make_volume(farm, "home", site="hive", host_path="/export/home")  # other site


async def test_volume_argument_and_reference_errors(farm):
    await refused(farm, CreateStorageVolume, InvalidInput, "needs --backend, --host",
                  site="farm", name="home", host="nas1")
    await refused(farm, CreateStorageVolume, NotFound, "volume 'nope' does not exist",
                  site="farm", name="lab", parent="nope")
    await refused(farm, CreateStorageVolume, NotFound, "site 'hive'", site="hive",
                  name="home", backend="zfs", host="nas1", host_path="/h")
    for quota in ("10X", "-5G"):
        await refused(farm, CreateStorageVolume, InvalidInput, "invalid quota", site="farm",
                      name="home", backend="zfs", host="nas1", host_path="/h", quota=quota)
    await refused(farm, CreateStorageVolume, InvalidInput, "must be absolute", site="farm",
                  name="home", backend="zfs", host="nas1", host_path="export/home")
    await refused(farm, CreateStorageVolume, InvalidInput, "backend", site="farm",
                  name="home", backend="lustre", host="nas1", host_path="/h")


# -- allocations --------------------------------------------------------------------------


async def test_allocations_add_edit_remove(farm):
    await make_volume(farm, "lab", quota="40T")
    await AddVolumeAllocation.run(farm, AUTHOR, site="farm", volume="lab", quota="5.8t",
                                  comment="grant 2")
    assert (await volume("lab")).quota == "45.8T"
    assert (await history("add_volume_allocation"))[-1].changes == {
        "site": "farm", "volume": "lab", "quota": "5.8T", "total": "45.8T"}

    await EditVolumeAllocation.run(farm, AUTHOR, site="farm", volume="lab", index=1,
                                   quota="819.2G")
    v = await volume("lab")
    assert [(a.quota, a.comment) for a in v.allocations] == [
        ("40T", "initial allocation"), ("819.2G", "grant 2")]  # comment kept
    assert v.quota == "40.8T"
    await EditVolumeAllocation.run(farm, AUTHOR, site="farm", volume="lab", index=0,
                                   quota="45T", comment="renewed")
    v = await volume("lab")
    assert v.allocations[0].comment == "renewed" and v.quota == "45.8T"
    assert (await history("edit_volume_allocation"))[-1].changes == {
        "site": "farm", "volume": "lab", "index": 0, "quota": "45T", "total": "45.8T"}

    await RemoveVolumeAllocation.run(farm, AUTHOR, site="farm", volume="lab", index=0)
    v = await volume("lab")
    assert [a.quota for a in v.allocations] == ["819.2G"] and v.quota == "819.2G"
    assert (await history("remove_volume_allocation"))[-1].changes == {
        "site": "farm", "volume": "lab", "index": 0, "removed": "45T", "total": "819.2G"}

    await RemoveVolumeAllocation.run(farm, AUTHOR, site="farm", volume="lab", index=0)
    v = await volume("lab")
    assert v.allocations == [] and v.quota is None  # removing the last: no quota
    assert (await history("remove_volume_allocation"))[-1].changes["total"] is None


async def test_allocation_errors_write_nothing(farm):
    await make_volume(farm, "lab", quota="1T")
    for op, extra in ((RemoveVolumeAllocation, {}), (EditVolumeAllocation, {"quota": "2T"})):
        await refused(farm, op, InvalidInput, "index 1 is out of range", site="farm",
                      volume="lab", index=1, **extra)
        await refused(farm, op, InvalidInput, "index", site="farm", volume="lab", index=-1,
                      **extra)
        await refused(farm, op, NotFound, "volume 'nope'", site="farm", volume="nope",
                      index=0, **extra)
    for quota in ("10X", "-5G", "1.5"):
        await refused(farm, AddVolumeAllocation, InvalidInput, "invalid quota", site="farm",
                      volume="lab", quota=quota)
        await refused(farm, EditVolumeAllocation, InvalidInput, "invalid quota", site="farm",
                      volume="lab", index=0, quota=quota)
    await refused(farm, AddVolumeAllocation, NotFound, "volume 'nope'", site="farm",
                  volume="nope", quota="1T")
    await make_volume(farm, "empty")
    await refused(farm, RemoveVolumeAllocation, InvalidInput, "0 allocation", site="farm",
                  volume="empty", index=0)
    assert (await volume("lab")).quota == "1T"


# -- automount maps and static mounts -----------------------------------------------------


async def test_create_automount_map(farm):
    await CreateAutomountMap.run(farm, AUTHOR, site="farm", name="home", prefix="/home/",
                                 options=["rw", "nosuid"])
    m = await AutomountMap.find_one({"name": "home"})
    assert (m.site, m.prefix, m.options) == ("farm", "/home", ["rw", "nosuid"])
    [row] = await history("create_automount_map")
    assert row.changes == {"site": "farm", "map": "home", "prefix": "/home",
                           "options": ["rw", "nosuid"]}
    await refused(farm, CreateAutomountMap, AlreadyExists, "already exists", site="farm",
                  name="home", prefix="/other")
    await refused(farm, CreateAutomountMap, InvalidInput, "absolute", site="farm",
                  name="group", prefix="group")
    await refused(farm, CreateAutomountMap, NotFound, "site 'hive'", site="hive",
                  name="home", prefix="/home")


async def test_create_static_mounts(farm):
    await make_volume(farm, "home", host_path="/export/home")
    await CreateStaticMount.run(farm, AUTHOR, site="farm", name="homes", fstype="nfs4",
                                mount_path="/home", volume="home", subpath="/users/",
                                options=["rw", "hard"])
    m = await StaticMount.find_one({"name": "homes"})
    assert (m.volume, m.subpath, m.spec, m.mount_path, m.options) == (
        "home", "users", "", "/home", ["rw", "hard"])
    assert (await history("create_static_mount"))[-1].changes == {
        "site": "farm", "mount": "homes", "fstype": "nfs4", "mount_path": "/home",
        "volume": "home", "subpath": "users", "spec": ""}
    await make_static_mount(farm, "sw", "/cvmfs/sw", spec="sw.example.org", fstype="cvmfs")
    assert (await StaticMount.find_one({"name": "sw"})).volume is None


async def test_static_mount_errors_write_nothing(farm):
    await make_volume(farm, "home", host_path="/export/home")
    await make_static_mount(farm, "homes", "/home", volume="home")
    base = {"site": "farm", "fstype": "nfs"}
    await refused(farm, CreateStaticMount, InvalidInput, "exactly one", name="x",
                  mount_path="/x", **base)
    await refused(farm, CreateStaticMount, InvalidInput, "exactly one", name="x",
                  mount_path="/x", volume="home", spec="s", **base)
    await refused(farm, CreateStaticMount, InvalidInput, "subpath needs a volume", name="x",
                  mount_path="/x", spec="s", subpath="a", **base)
    await refused(farm, CreateStaticMount, NotFound, "volume 'nope'", name="x",
                  mount_path="/x", volume="nope", **base)
    await refused(farm, CreateStaticMount, AlreadyExists, "already exists", name="homes",
                  mount_path="/x", volume="home", **base)
    await refused(farm, CreateStaticMount, AlreadyExists, "already static mount 'homes'",
                  name="x", mount_path="/home/", volume="home", **base)
    await refused(farm, CreateStaticMount, InvalidInput, "fstype", name="x",
                  mount_path="/x", volume="home", site="farm", fstype="cifs")


# -- site storage defaults ----------------------------------------------------------------


async def defaults() -> dict:
    return (await Site.find_one({"name": "farm"})).storage.model_dump()


async def test_site_storage_defaults_change_only_given_fields(farm):
    await make_volume(farm, "home", host_path="/export/home")
    await make_map(farm, "home", "/home")
    await make_static_mount(farm, "homes", "/home", volume="home")
    await SetSiteStorageDefaults.run(farm, AUTHOR, site="farm", home_volume="home",
                                     home_quota="20g")
    assert await defaults() == {"default_home_volume": "home", "default_home_quota": "20G",
                                "home_automount_map": None, "home_static_mount": None}
    assert (await history("set_site_storage_defaults"))[-1].changes == {
        "site": "farm", "default_home_volume": "home", "default_home_quota": "20G",
        "home_automount_map": None, "home_static_mount": None}

    await SetSiteStorageDefaults.run(farm, AUTHOR, site="farm", home_automount_map="home")
    assert await defaults() == {"default_home_volume": "home", "default_home_quota": "20G",
                                "home_automount_map": "home", "home_static_mount": None}
    # setting one mechanism clears the other, both ways
    await SetSiteStorageDefaults.run(farm, AUTHOR, site="farm", home_static_mount="homes")
    assert (await defaults())["home_automount_map"] is None
    assert (await defaults())["home_static_mount"] == "homes"
    await SetSiteStorageDefaults.run(farm, AUTHOR, site="farm", home_automount_map="home")
    assert (await defaults())["home_static_mount"] is None

    await SetSiteStorageDefaults.run(farm, AUTHOR, site="farm", clear=["home_mount",
                                                                        "home_quota"])
    assert await defaults() == {"default_home_volume": "home", "default_home_quota": None,
                                "home_automount_map": None, "home_static_mount": None}
    await SetSiteStorageDefaults.run(farm, AUTHOR, site="farm", clear=["home_volume"])
    assert (await defaults())["default_home_volume"] is None


async def test_site_storage_defaults_errors_write_nothing(farm):
    await make_map(farm, "home", "/home")
    await refused(farm, SetSiteStorageDefaults, InvalidInput, "at least one", site="farm")
    await refused(farm, SetSiteStorageDefaults, InvalidInput, "not both", site="farm",
                  home_automount_map="home", home_static_mount="homes")
    await refused(farm, SetSiteStorageDefaults, NotFound, "volume 'nope'", site="farm",
                  home_volume="nope")
    await refused(farm, SetSiteStorageDefaults, NotFound, "automount map 'nope'",
                  site="farm", home_automount_map="nope")
    await refused(farm, SetSiteStorageDefaults, NotFound, "static mount 'nope'",
                  site="farm", home_static_mount="nope")
    await refused(farm, SetSiteStorageDefaults, InvalidInput, "invalid quota", site="farm",
                  home_quota="10X")
    await refused(farm, SetSiteStorageDefaults, NotFound, "site 'hive'", site="hive",
                  home_quota="1G")
