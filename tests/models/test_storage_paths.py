"""Storage path math and exclusivity rules (pure: no store I/O beyond beanie's binding).

Host path = volume path + subpath; a quota only for whole-volume storages (exact Decimal
sums); mount options and mount paths for both mechanisms; device specs; the validators
that keep a volume's backend settings, a static mount's source and a storage's mount
mechanism unambiguous. Ends with the reference's "legacy Farm" acid test.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from pydantic import ValidationError

from cheeto_like.models import AutomountMap, StaticMount, Storage, StorageVolume
from cheeto_like.models.fields import parse_quota_mb
from cheeto_like.models.storage import (
    MountOverrides,
    QuobyteConfig,
    StorageAllocation,
    ZFSConfig,
    device_spec,
    format_quota,
    mount_options,
    mount_path,
    static_mount_root,
    storage_host_path,
    storage_quota,
)


@pytest.fixture(autouse=True)
def _bound(store):
    """Documents can only be built once beanie is bound to a database."""


def vol(name: str = "home", *quotas: str, host: str = "nas1", path: str = "/export/home",
        backend: str = "zfs", **kw: object) -> StorageVolume:
    kw.setdefault("zfs" if backend == "zfs" else "quobyte",
                  ZFSConfig() if backend == "zfs" else QuobyteConfig())
    return StorageVolume(name=name, site="farm", backend=backend, host=host, host_path=path,
                         allocations=[StorageAllocation(quota=q) for q in quotas], **kw)


def sto(name: str = "alice", volume: str = "home", **kw: object) -> Storage:
    kw.setdefault("category", "home")
    return Storage(name=name, site="farm", owner="alice", group="alice", volume=volume, **kw)


def amap(name: str = "home", prefix: str = "/home", options: list[str] | None = None
         ) -> AutomountMap:
    return AutomountMap(name=name, site="farm", prefix=prefix, options=options or [])


def static(name: str = "homes", mount: str = "/home", *, volume: str | None = "home",
           subpath: str = "", spec: str = "", fstype: str = "nfs",
           options: list[str] | None = None) -> StaticMount:
    return StaticMount(name=name, site="farm", fstype=fstype, volume=volume, subpath=subpath,
                       spec=spec, mount_path=mount, options=options or [])


# -- host path and quota ----------------------------------------------------------------


def test_host_path_is_volume_path_plus_subpath():
    v = vol(path="/export/data/")
    assert storage_host_path(sto(), v) == "/export/data"
    assert storage_host_path(sto(subpath="home/alice"), v) == "/export/data/home/alice"
    assert storage_host_path(sto(subpath="/home/alice/"), v) == "/export/data/home/alice"


@pytest.mark.parametrize("dot", [".", "./", "/./", " . "])
def test_a_dot_subpath_is_the_volume_itself(dot):
    v = vol("home", "1T")
    s = sto(subpath=dot)
    assert s.subpath == ""
    assert (storage_host_path(s, v), storage_quota(s, v)) == ("/export/home", "1T")
    assert static(subpath=dot).subpath == ""


def test_subpath_must_stay_inside_the_volume():
    with pytest.raises(ValidationError, match=r"\.\."):
        sto(subpath="home/../../etc")


def test_quota_only_for_whole_volume_storages():
    v = vol("home", "1T")
    assert storage_quota(sto(), v) == "1T"
    assert storage_quota(sto(subpath="alice"), v) is None
    assert storage_quota(sto(), vol("home")) is None  # no allocations, no quota


@pytest.mark.parametrize(("quotas", "total"), [
    (("45.8T",), "45.8T"),
    (("40T", "5.8T"), "45.8T"),
    (("45T", "819.2G"), "45.8T"),       # mixed units, exact
    (("1T", "512G", "512M"), "1536.5G"),  # not exact in T to 3 places
    (("1.1T", "2.2T"), "3.3T"),         # binary floats would give 3.3000000000000003
    (("500G", "500G", "24G"), "1T"),
    (("0.5P", "512T"), "1P"),
    (("100M", "0.5G"), "612M"),
])
def test_quota_is_an_exact_decimal_sum(quotas, total):
    v = vol("v", *quotas)
    assert v.quota == total
    assert isinstance(v.quota_mb, Decimal)
    assert v.quota_mb == sum(parse_quota_mb(q) for q in quotas)


def test_format_quota_round_trips_through_parse():
    for text in ("45.8T", "1.5P", "307.2G", "1G", "7M"):
        assert format_quota(parse_quota_mb(text)) == text


@pytest.mark.parametrize("bad", ["10X", "-5G", "5", "G", "1.2.3T", "1 T", "", "10GB"])
def test_bad_quotas_are_refused(bad):
    with pytest.raises(ValidationError, match="invalid quota"):
        StorageAllocation(quota=bad)


def test_quota_units_are_case_insensitive_and_stored_upper():
    assert StorageAllocation(quota=" 1.5t ").quota == "1.5T"


# -- mount options ----------------------------------------------------------------------


def test_static_mount_options_win():
    s = sto(static_mount="homes")
    m = static(options=["rw", "hard"])
    assert mount_options(s, None, m) == ["rw", "hard"]


def test_explicit_override_options_replace_the_maps():
    s = sto(automount_map="home", mount_overrides=MountOverrides(
        options=["ro", "soft"], add_options=["x"], remove_options=["ro"]))
    assert mount_options(s, amap(options=["rw", "nosuid"]), None) == ["ro", "soft"]


def test_automount_options_are_sorted_map_minus_remove_plus_add():
    s = sto(automount_map="home", mount_overrides=MountOverrides(
        add_options=["vers=4.2", "acl"], remove_options=["nosuid", "absent"]))
    m = amap(options=["rw", "nosuid", "fstype=nfs", "hard"])
    assert mount_options(s, m, None) == ["acl", "fstype=nfs", "hard", "rw", "vers=4.2"]
    assert mount_options(sto(automount_map="home"), m, None) == sorted(m.options)


def test_unmounted_storage_has_no_options_and_no_mount_path():
    s = sto()
    v = vol(backend="quobyte")
    assert mount_options(s, None, None) == []
    assert mount_path(s, v, None, None) is None


# -- mount paths ------------------------------------------------------------------------


def test_automount_path_is_prefix_and_mount_name_or_name():
    v = vol()
    assert mount_path(sto(automount_map="home"), v, amap(prefix="/home/"), None) == "/home/alice"
    assert mount_path(sto(automount_map="home", mount_name="al"), v, amap(), None) == "/home/al"


def test_static_path_for_a_child_of_the_mount_root():
    v = vol(path="/export/home")
    s = sto(subpath="alice", static_mount="homes")
    assert mount_path(s, v, None, static(mount="/home"), v) == "/home/alice"


def test_static_path_for_a_child_volume_under_a_mount_subpath():
    parent = vol("data", path="/export/data")
    child = vol("data/lab", path="/export/data/group/lab", parent="data")
    s = sto("lab", "data/lab", category="group", subpath="scratch", static_mount="groups")
    m = static("groups", "/group", volume="data", subpath="group")
    assert static_mount_root(m, parent) == "/export/data/group"
    assert mount_path(s, child, None, m, parent) == "/group/lab/scratch"


def test_static_path_when_the_storage_is_the_mount_root():
    v = vol(path="/export/home")
    assert mount_path(sto(static_mount="homes"), v, None, static(mount="/home"), v) == "/home"
    m = static(mount="/mnt/a", subpath="alice")
    assert mount_path(sto(subpath="alice", static_mount="homes"), v, None, m, v) == "/mnt/a"


def test_static_mount_that_does_not_cover_the_storage_is_an_error():
    v = vol(path="/export/home")
    m = static(mount="/home", subpath="bob")
    with pytest.raises(ValueError, match="does not cover"):
        mount_path(sto(subpath="alice", static_mount="homes"), v, None, m, v)
    # a sibling path that merely shares a string prefix is not under the root
    m = static(mount="/home", subpath="al")
    with pytest.raises(ValueError, match="does not cover"):
        mount_path(sto(subpath="alice", static_mount="homes"), v, None, m, v)
    # a storage above the mount's root
    with pytest.raises(ValueError, match="does not cover"):
        mount_path(sto(static_mount="homes"), v, None, static(subpath="alice"), v)


def test_spec_only_static_mount_cannot_carry_a_storage():
    m = static("sw", "/cvmfs/sw", volume=None, spec="sw.example.org", fstype="cvmfs")
    assert static_mount_root(m, None) is None
    with pytest.raises(ValueError, match="not a volume path"):
        mount_path(sto(static_mount="sw"), vol(), None, m, None)


def test_static_mount_on_another_host_is_an_error():
    here = vol("home", path="/export/home", host="nas1")
    there = vol("other", path="/export/home", host="nas2")
    m = static(volume="other")
    with pytest.raises(ValueError, match="nas2"):
        mount_path(sto(static_mount="homes"), here, None, m, there)


def test_device_spec():
    v = vol(path="/export/home", host="nas1")
    assert device_spec(static(), v) == "nas1:/export/home"
    assert device_spec(static(subpath="/a/b/"), v) == "nas1:/export/home/a/b"
    cvmfs = static("sw", "/cvmfs/sw", volume=None, spec="sw.example.org", fstype="cvmfs")
    assert device_spec(cvmfs, None) == "sw.example.org"


# -- validators: volume backend settings --------------------------------------------------


def test_volume_backend_config_exclusivity():
    with pytest.raises(ValidationError, match="must not carry QuoByte"):
        vol(quobyte=QuobyteConfig())
    with pytest.raises(ValidationError, match="must not carry ZFS"):
        vol(backend="quobyte", zfs=ZFSConfig())


async def test_assign_then_save_is_refused(db):
    """A bad assignment raises at once. pydantic keeps the assigned value even so, so a
    caller that swallowed the error holds an invalid document: saving it is refused (every
    save validates again) and the stored volume is unchanged."""
    v = vol()
    await v.insert()
    with pytest.raises(ValidationError, match="must not carry QuoByte"):
        v.quobyte = QuobyteConfig(tenant="t")
    with pytest.raises(ValidationError, match="must not carry QuoByte"):
        await v.save()
    stored = await StorageVolume.get(v.id)
    assert stored.quobyte is None and stored.zfs == ZFSConfig()

    q = vol("q", backend="quobyte", path="/q")
    with pytest.raises(ValidationError, match="must not carry ZFS"):
        q.zfs = ZFSConfig()
    with pytest.raises(ValidationError, match="must not carry ZFS"):
        await q.insert()
    assert await StorageVolume.count() == 1


async def test_unvalidated_change_is_refused_at_save(db):
    """Changes that bypass assignment validation (model_copy(update=…), model_construct)
    cannot reach the store either."""
    v = vol()
    await v.insert()
    bad = v.model_copy(update={"quobyte": QuobyteConfig()})
    with pytest.raises(ValidationError, match="must not carry QuoByte"):
        await bad.save()
    stored = await StorageVolume.get(v.id)
    assert stored.quobyte is None and stored.zfs == ZFSConfig()
    fresh = StorageVolume.model_construct(**{**dict(v), "id": "f" * 32, "name": "other",
                                            "host_path": "/other",
                                            "quobyte": QuobyteConfig()})
    with pytest.raises(ValidationError, match="must not carry QuoByte"):
        await fresh.insert()
    assert await StorageVolume.count() == 1


# -- validators: static mounts ------------------------------------------------------------


def test_static_mount_needs_exactly_one_source():
    with pytest.raises(ValidationError, match="exactly one"):
        static(volume=None)
    with pytest.raises(ValidationError, match="exactly one"):
        static(volume="home", spec="sw.example.org")


def test_static_mount_subpath_needs_a_volume():
    with pytest.raises(ValidationError, match="subpath needs a volume"):
        static(volume=None, spec="s", subpath="a", fstype="cvmfs")


async def test_static_mount_source_rules_hold_on_assignment_and_save(db):
    m = static()
    with pytest.raises(ValidationError, match="exactly one"):
        m.spec = "sw.example.org"
    with pytest.raises(ValidationError, match="exactly one"):
        await m.insert()
    assert await StaticMount.count() == 0


# -- validators: storages -----------------------------------------------------------------


async def test_storage_not_both_mechanisms(db):
    with pytest.raises(ValidationError, match="not both"):
        sto(automount_map="home", static_mount="homes")
    s = sto(automount_map="home")
    with pytest.raises(ValidationError, match="not both"):
        s.static_mount = "homes"
    with pytest.raises(ValidationError, match="not both"):
        await s.insert()
    assert await Storage.count() == 0


async def test_mount_name_only_with_automount(db):
    with pytest.raises(ValidationError, match="only applies to automounts"):
        sto(mount_name="al")
    with pytest.raises(ValidationError, match="only applies to automounts"):
        sto(static_mount="homes", mount_name="al")
    s = sto(automount_map="home", mount_name="al")
    with pytest.raises(ValidationError, match="only applies to automounts"):
        s.automount_map = None
    with pytest.raises(ValidationError, match="only applies to automounts"):
        await s.insert()
    assert await Storage.count() == 0


# -- the reference's acid test --------------------------------------------------------------


def test_legacy_farm_one_volume_backs_root_group_and_home_storages():
    """v1 Farm: one 70T dataset holds the whole tree; the root storage carries the quota,
    the group and home storages are plain subdirectories of it."""
    farm = vol("farm", "70T", host="nas-8-0", path="/nas-8-0/farm")
    root = sto("farm", "farm", category="share", static_mount="farm-root")
    lab = sto("lab", "farm", category="group", subpath="group/lab", automount_map="group")
    home = sto("alice", "farm", category="home", subpath="home/alice", automount_map="home",
               mount_name="alice")
    root_mount = static("farm-root", "/mnt/farm", volume="farm")
    groups = amap("group", "/group", ["rw", "fstype=nfs"])
    homes = amap("home", "/home", ["rw", "nosuid"])

    assert [storage_host_path(s, farm) for s in (root, lab, home)] == [
        "/nas-8-0/farm", "/nas-8-0/farm/group/lab", "/nas-8-0/farm/home/alice"]
    assert [storage_quota(s, farm) for s in (root, lab, home)] == ["70T", None, None]
    assert mount_path(root, farm, None, root_mount, farm) == "/mnt/farm"
    assert mount_path(lab, farm, groups, None) == "/group/lab"
    assert mount_path(home, farm, homes, None) == "/home/alice"
    # the same subdirectories, seen through the root's static mount
    assert mount_path(lab.model_copy(update={"automount_map": None,
                                             "static_mount": "farm-root"}),
                      farm, None, root_mount, farm) == "/mnt/farm/group/lab"
    assert mount_options(lab, groups, None) == ["fstype=nfs", "rw"]
    assert device_spec(root_mount, farm) == "nas-8-0:/nas-8-0/farm"
