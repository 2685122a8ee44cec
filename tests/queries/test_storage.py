"""Storage reads: list filters, lookups, and ``resolve_storages`` hydrating volumes, maps
and static mounts in a constant number of store commands (counted with a pymongo
``CommandListener`` on a second client, as in test_query_count.py)."""

from __future__ import annotations

import pytest

from cheeto_like.errors import InvalidInput, NotFound
from cheeto_like.models import Storage
from cheeto_like.operations.group_membership import AddGroupSponsor
from cheeto_like.operations.storage import (
    CreateGroupStorage,
    CreateHomeStorage,
    CreateShareStorage,
    SetStorageMount,
)
from cheeto_like.queries.storage import (
    find_home_storage,
    get_storage,
    list_map_storages,
    list_site_storages,
    resolve_storages,
)

from ..factories import (
    AUTHOR,
    home_defaults,
    make_group,
    make_map,
    make_site,
    make_static_mount,
    make_user,
    make_volume,
)
from .test_query_count import command_count


@pytest.fixture
async def farm(db):
    """homes of alice and bob (nas1, map home), group storage lab (nas2, static mount),
    share data (nas3, unmounted), and a home at another site."""
    await make_site(db, "farm")
    await make_site(db, "hive")
    await make_user(db, "alice", site="farm")
    await make_user(db, "bob", site="farm")
    await make_group(db, "lab")
    await AddGroupSponsor.run(db, AUTHOR, group="lab", user="alice", site="farm")
    await home_defaults(db)
    for user in ("alice", "bob"):
        await CreateHomeStorage.run(db, AUTHOR, site="farm", user=user)
    await make_volume(db, "group", host="nas2", host_path="/export/group")
    await make_static_mount(db, "groups", "/group", volume="group", options=["rw"])
    await CreateGroupStorage.run(db, AUTHOR, site="farm", group="lab", quota="10T",
                                 parent_volume="group", static_mount="groups")
    await CreateShareStorage.run(db, AUTHOR, site="farm", name="data", owner="bob",
                                 group="lab", host="nas3", quota="1T")
    await home_defaults(db, "hive")
    await CreateHomeStorage.run(db, AUTHOR, site="hive", user="alice")
    return db


def names(found) -> list[tuple[str, str]]:
    return [(r.storage.category, r.storage.name) for r in found]


async def test_list_site_storages_and_filters(farm):
    everything = await list_site_storages("farm")
    assert names(everything) == [("group", "lab"), ("home", "alice"), ("home", "bob"),
                                 ("share", "data")]
    assert names(await list_site_storages("farm", category="home")) == [
        ("home", "alice"), ("home", "bob")]
    assert names(await list_site_storages("farm", owner="alice")) == [
        ("group", "lab"), ("home", "alice")]
    assert names(await list_site_storages("farm", group="lab")) == [
        ("group", "lab"), ("share", "data")]
    assert names(await list_site_storages("farm", host="nas3")) == [("share", "data")]
    assert names(await list_site_storages("farm", host="nas1", owner="bob")) == [
        ("home", "bob")]
    assert names(await list_site_storages("farm", category="share", owner="alice")) == []
    assert names(await list_site_storages("hive")) == [("home", "alice")]
    assert await list_site_storages("nowhere") == []


async def test_resolved_values(farm):
    by_name = {r.storage.name: r for r in await list_site_storages("farm")}
    alice, lab, data = by_name["alice"], by_name["lab"], by_name["data"]
    assert (alice.host, alice.host_path, alice.quota, alice.mount_path, alice.mechanism) == (
        "nas1", "/export/home/alice", "20G", "/home/alice", "automount:home")
    assert alice.mount_options == ["nosuid", "rw"]
    assert (lab.host, lab.quota, lab.mount_path, lab.mount_options, lab.mechanism) == (
        "nas2", "10T", "/group/lab", ["rw"], "static:groups")
    assert lab.static_volume.name == "group"
    assert (data.host_path, data.mount_path, data.mechanism) == ("/share/data", None, "none")
    assert data.is_managed_zfs and data.export_config() == ("", [])
    row = lab.as_dict()
    assert {k: row[k] for k in ("name", "category", "owner", "group", "volume", "host",
                                "host_path", "quota", "mount", "mount_path")} == {
        "name": "lab", "category": "group", "owner": "alice", "group": "lab",
        "volume": "group/lab", "host": "nas2", "host_path": "/export/group/lab",
        "quota": "10T", "mount": "static:groups", "mount_path": "/group/lab"}


async def test_lookups(farm):
    assert (await get_storage("farm", "alice")).storage.category == "home"
    assert (await get_storage("hive", "alice")).storage.site == "hive"
    with pytest.raises(NotFound, match="storage 'zed' does not exist"):
        await get_storage("farm", "zed")
    with pytest.raises(NotFound):
        await get_storage("farm", "alice", "group")
    assert (await find_home_storage("alice", "farm")).volume == "home/alice"
    assert await find_home_storage("alice", "nowhere") is None
    assert [r.storage.name for r in await list_map_storages("farm", "home")] == [
        "alice", "bob"]
    await CreateShareStorage.run(farm, AUTHOR, site="farm", name="alice", owner="alice",
                                 group="lab", host="nas3")
    with pytest.raises(InvalidInput, match="give --category"):
        await get_storage("farm", "alice")
    assert (await get_storage("farm", "alice", "share")).host == "nas3"


async def test_unmountable_and_dangling_records_are_reported(farm):
    # records written around the operations (e.g. migrated data)
    await make_static_mount(farm, "bobs", "/mnt/bob", volume="home", subpath="bob")
    home = await Storage.find_one({"name": "alice", "site": "farm"})
    home.mount_name, home.automount_map, home.static_mount = "", None, "bobs"
    await home.save()
    resolved = await get_storage("farm", "alice")
    with pytest.raises(ValueError, match="does not cover"):
        resolved.mount_path  # noqa: B018
    assert resolved.as_dict()["mount_path"].startswith("(unmountable: ")
    await Storage(name="ghost", site="farm", category="share", owner="bob", group="lab",
                  volume="gone").insert()
    with pytest.raises(NotFound, match="volume 'gone' is missing"):
        await list_site_storages("farm")


async def test_resolve_storages_query_count_does_not_grow(farm, mongo_config):
    await make_map(farm, "share", "/share", options=["ro"])

    async def everything():
        resolved = await list_site_storages("farm")
        return [(r.host_path, r.quota, r.mount_path, r.mount_options) for r in resolved]

    async def resolve_all():
        return await resolve_storages(await Storage.find({"site": "farm"}).to_list())

    small = (await command_count(farm, mongo_config, everything),
             await command_count(farm, mongo_config, resolve_all))
    assert small[0] > 0
    for i in range(12):
        user = f"u{i}"
        await make_user(farm, user, site="farm")
        await CreateHomeStorage.run(farm, AUTHOR, site="farm", user=user)
        await CreateShareStorage.run(farm, AUTHOR, site="farm", name=f"s{i}", owner=user,
                                     group="lab", parent_volume="group",
                                     **({"static_mount": "groups"} if i % 2 else {}))
    await SetStorageMount.run(farm, AUTHOR, site="farm", name="s0", automount_map="share")
    assert len(await list_site_storages("farm")) == 4 + 24
    large = (await command_count(farm, mongo_config, everything),
             await command_count(farm, mongo_config, resolve_all))
    assert small == large, (small, large)
    assert small == (4, 4)  # storages + volumes, maps, mounts of the one site
    assert len(await list_site_storages("farm")) == 28  # re-bound to the module's store
