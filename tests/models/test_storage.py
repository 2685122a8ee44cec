"""Storage model rules: backend config exclusivity, static mount sources, the one mount
mechanism of a storage, path normalisation, and exact quota sums."""

from __future__ import annotations

from decimal import Decimal

import pytest
from pydantic import ValidationError

from cheeto_like.models import AutomountMap, StaticMount, Storage, StorageVolume
from cheeto_like.models.storage import (
    QuobyteConfig,
    StorageAllocation,
    ZFSConfig,
    format_quota,
)


@pytest.fixture(autouse=True)
def _bound(store):
    """Documents can only be built once beanie is bound to a database."""


def volume(*quotas: str, **overrides: object) -> StorageVolume:
    fields: dict[str, object] = dict(name="home", site="farm", backend="zfs", host="nas1",
                                     host_path="/export/home/",
                                     allocations=[StorageAllocation(quota=q) for q in quotas])
    fields.update(overrides)
    return StorageVolume(**fields)


def storage(**overrides: object) -> Storage:
    fields: dict[str, object] = dict(name="alice", site="farm", category="home", owner="alice",
                                     group="alice", volume="home/alice")
    fields.update(overrides)
    return Storage(**fields)


# -- StorageVolume ---------------------------------------------------------------------------


def test_volume_host_path_is_normalised():
    assert volume().host_path == "/export/home"


@pytest.mark.parametrize("path", ["export/home", "/export/../etc"])
def test_volume_host_path_must_be_absolute_without_dotdot(path):
    with pytest.raises(ValidationError):
        volume(host_path=path)


def test_zfs_volume_refuses_quobyte_settings():
    assert volume(zfs=ZFSConfig()).zfs == ZFSConfig()
    with pytest.raises(ValidationError, match="must not carry QuoByte"):
        volume(quobyte=QuobyteConfig())


def test_quobyte_volume_refuses_zfs_settings():
    assert volume(backend="quobyte", quobyte=QuobyteConfig(tenant="t")).quobyte.tenant == "t"
    with pytest.raises(ValidationError, match="must not carry ZFS"):
        volume(backend="quobyte", zfs=ZFSConfig())


def test_backend_switch_by_assignment_is_checked():
    vol = volume(zfs=ZFSConfig())
    with pytest.raises(ValidationError):
        vol.backend = "quobyte"


def test_unknown_backend_refused():
    with pytest.raises(ValidationError):
        volume(backend="lustre")


def test_quota_is_none_without_allocations():
    assert volume().quota is None and volume().quota_mb is None


@pytest.mark.parametrize(("quotas", "total"), [
    (("40T", "5.8T"), "45.8T"),
    (("45.8T",), "45.8T"),
    (("0.1T", "0.2T"), "307.2G"),  # the largest unit with a value of at least 1
    (("512M", "512M"), "1G"),
    (("1T", "1024G"), "2T"),
    (("1.5T",), "1.5T"),
    (("100M",), "100M"),
    (("1P", "512T"), "1.5P"),
])
def test_quota_is_the_exact_sum_of_allocations(quotas, total):
    assert volume(*quotas).quota == total


def test_quota_mb_is_decimal_and_exact():
    assert volume("0.1T", "0.2T").quota_mb == Decimal("314572.8")


def test_format_quota_falls_back_to_megabytes():
    assert format_quota(Decimal("1.5")) == "1.5M"
    assert format_quota(Decimal("1025")) == "1025M"


def test_allocation_quota_is_validated():
    with pytest.raises(ValidationError):
        StorageAllocation(quota="10X")
    assert StorageAllocation(quota="2t").quota == "2T"


# -- StaticMount / AutomountMap -------------------------------------------------------------


def test_static_mount_needs_exactly_one_of_volume_or_spec():
    assert StaticMount(name="home", site="farm", fstype="nfs", volume="home",
                       mount_path="/home").volume == "home"
    assert StaticMount(name="sw", site="farm", fstype="cvmfs", spec="sw.example.org",
                       mount_path="/cvmfs/sw").spec == "sw.example.org"
    with pytest.raises(ValidationError, match="exactly one"):
        StaticMount(name="x", site="farm", fstype="nfs", mount_path="/x")
    with pytest.raises(ValidationError, match="exactly one"):
        StaticMount(name="x", site="farm", fstype="nfs", volume="home", spec="s",
                    mount_path="/x")


def test_static_mount_subpath_needs_a_volume():
    with pytest.raises(ValidationError, match="subpath needs a volume"):
        StaticMount(name="x", site="farm", fstype="cvmfs", spec="s", subpath="a",
                    mount_path="/x")


def test_static_mount_subpath_is_relative_and_trimmed():
    mount = StaticMount(name="x", site="farm", fstype="nfs", volume="home", subpath="/a/b/",
                        mount_path="/x")
    assert mount.subpath == "a/b"
    with pytest.raises(ValidationError):
        StaticMount(name="x", site="farm", fstype="nfs", volume="home", subpath="a/../b",
                    mount_path="/x")


def test_static_mount_fstype_is_a_closed_set():
    with pytest.raises(ValidationError):
        StaticMount(name="x", site="farm", fstype="cifs", volume="v", mount_path="/x")


def test_automount_prefix_must_be_absolute():
    assert AutomountMap(name="home", site="farm", prefix="/home/").prefix == "/home"
    with pytest.raises(ValidationError):
        AutomountMap(name="home", site="farm", prefix="home")


# -- Storage ---------------------------------------------------------------------------------


def test_storage_uses_one_mount_mechanism():
    assert storage(automount_map="home", mount_name="alice").mount_name == "alice"
    assert storage(static_mount="homes").static_mount == "homes"
    assert storage().automount_map is None  # unmounted is allowed
    with pytest.raises(ValidationError, match="not both"):
        storage(automount_map="home", static_mount="homes")


def test_storage_mount_name_only_with_automount():
    with pytest.raises(ValidationError, match="only applies to automounts"):
        storage(mount_name="alice")
    with pytest.raises(ValidationError, match="only applies to automounts"):
        storage(static_mount="homes", mount_name="alice")


def test_storage_category_and_names_are_checked():
    with pytest.raises(ValidationError):
        storage(category="scratch")
    with pytest.raises(ValidationError):
        storage(owner="Not A Name")
    with pytest.raises(ValidationError):
        storage(mount_name="bad name")
