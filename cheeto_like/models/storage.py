"""Storage: backing volumes, the two mount mechanisms, and the user-facing storage records.

- ``StorageVolume`` is what exists on a file server (a ZFS dataset, a QuoByte volume);
  child volumes carry a concrete host and path copied from their parent, so readers never
  walk the parent chain.
- A ``Storage`` (home, group or share) lives on a volume, optionally at a subpath, and is
  mounted either through an ``AutomountMap`` or a ``StaticMount`` (never both).
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import PurePosixPath
from typing import Annotated, ClassVar, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from .base import BaseDoc, Embedded, Expirable, LDAPSyncable, index, unique
from .fields import (
    AbsolutePath,
    Cidr,
    HostName,
    MountOption,
    OptionString,
    PosixName,
    Quota,
    SiteName,
    parse_quota_mb,
)

VOLUME_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+/-]{0,254}$")
STORAGE_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}$")
MAP_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


def _matching(pattern: re.Pattern[str], kind: str):
    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise ValueError(f"{value!r} is not a valid {kind}")
        return value
    return check


def _relative_path(value: str) -> str:
    value = value.strip().strip("/")
    if not value:
        return ""
    path = PurePosixPath(value)
    if ".." in path.parts:
        raise ValueError(f"subpath {value!r} must not contain '..'")
    return "" if str(path) == "." else str(path)  # "." is the volume itself


VolumeName = Annotated[str, AfterValidator(_matching(VOLUME_NAME_RE, "volume name"))]
StorageName = Annotated[str, AfterValidator(_matching(STORAGE_NAME_RE, "storage name"))]
MapName = Annotated[str, AfterValidator(_matching(MAP_NAME_RE, "map or mount name"))]
SubPath = Annotated[str, AfterValidator(_relative_path)]
Backend = Literal["zfs", "quobyte"]
Category = Literal["home", "group", "share"]
FsType = Literal["nfs", "nfs4", "cvmfs"]


def format_quota(total_mb: Decimal) -> str:
    """Exact, compact rendering of a size in MB using the largest unit that stays exact
    to three decimals (``45.8T`` stays ``45.8T``)."""
    for unit, factor in (("P", 1024**3), ("T", 1024**2), ("G", 1024), ("M", 1)):
        value = total_mb / factor
        if value >= 1 and value == value.quantize(Decimal("0.001")):
            text = format(value.normalize(), "f")
            return f"{text}{unit}"
    return f"{format(total_mb.normalize(), 'f')}M"


class StorageAllocation(Embedded):
    quota: Quota
    comment: str = ""  # checked in the operations' Args (FreeText)


class NFSExportConfig(Embedded):
    """Rendered into ``/etc/exports`` lines: options and ranges come from safe sets."""

    export_options: OptionString = ""
    export_ranges: list[Cidr] = Field(default_factory=list)


class MountOverrides(Embedded):
    """``options`` replaces the map's options outright; otherwise add/remove adjust them."""

    options: list[MountOption] = Field(default_factory=list)
    add_options: list[MountOption] = Field(default_factory=list)
    remove_options: list[MountOption] = Field(default_factory=list)


class ZFSConfig(Embedded):
    dataset_name: str = ""  # '' = derived from host_path


class QuobyteConfig(Embedded):
    volume_id: str = ""
    tenant: str = ""


class AutomountMap(BaseDoc):
    """An autofs map such as ``auto.home`` mounting keys under ``prefix``."""

    name: MapName
    site: SiteName
    prefix: AbsolutePath
    options: list[MountOption] = Field(default_factory=list)

    class Settings(BaseDoc.Settings):
        name = "automount_maps"
        indexes = [unique("name", "site")]


class StorageVolume(BaseDoc, Expirable):
    name: VolumeName
    site: SiteName
    backend: Backend
    zfs: ZFSConfig | None = None
    quobyte: QuobyteConfig | None = None
    host: HostName
    host_path: AbsolutePath
    parent: VolumeName | None = None
    allocations: list[StorageAllocation] = Field(default_factory=list)
    nfs_export: NFSExportConfig | None = None

    @model_validator(mode="after")
    def _backend_config_matches(self) -> StorageVolume:
        if self.backend == "zfs" and self.quobyte is not None:
            raise ValueError(f"ZFS volume {self.name!r} must not carry QuoByte settings")
        if self.backend == "quobyte" and self.zfs is not None:
            raise ValueError(f"QuoByte volume {self.name!r} must not carry ZFS settings")
        return self

    @property
    def quota_mb(self) -> Decimal | None:
        if not self.allocations:
            return None
        return sum((parse_quota_mb(a.quota) for a in self.allocations), Decimal(0))

    @property
    def quota(self) -> str | None:
        total = self.quota_mb
        return None if total is None else format_quota(total)

    class Settings(BaseDoc.Settings):
        name = "storage_volumes"
        indexes = [unique("name", "site"), unique("site", "host", "host_path"),
                   index("site", "parent"), index("site", "backend")]


class StaticMount(BaseDoc):
    """A fixed mount: a volume (optionally a subpath of it) or a raw device spec (cvmfs)."""

    name: MapName
    site: SiteName
    fstype: FsType
    volume: VolumeName | None = None
    subpath: SubPath = ""
    spec: OptionString = ""  # e.g. a cvmfs repository or host:/path
    mount_path: AbsolutePath
    options: list[MountOption] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_source(self) -> StaticMount:
        if bool(self.volume) == bool(self.spec):
            raise ValueError(f"static mount {self.name!r} needs exactly one of a volume or a spec")
        if self.subpath and not self.volume:
            raise ValueError(f"static mount {self.name!r}: a subpath needs a volume")
        return self

    class Settings(BaseDoc.Settings):
        name = "static_mounts"
        indexes = [unique("name", "site"), unique("site", "mount_path")]


class Storage(BaseDoc, LDAPSyncable, Expirable):
    ldap_fields: ClassVar[tuple[str, ...]] = (
        "name", "site", "category", "owner", "group", "volume", "subpath", "automount_map",
        "mount_name", "mount_overrides", "static_mount")

    name: StorageName
    site: SiteName
    category: Category
    owner: PosixName
    group: PosixName
    volume: VolumeName
    subpath: SubPath = ""
    nfs_export: NFSExportConfig | None = None
    automount_map: MapName | None = None
    mount_name: str = ""
    mount_overrides: MountOverrides = Field(default_factory=MountOverrides)
    static_mount: MapName | None = None
    globus: bool = False

    @field_validator("mount_name")
    @classmethod
    def _mount_name_shape(cls, value: str) -> str:
        if value and not STORAGE_NAME_RE.fullmatch(value):
            raise ValueError(f"{value!r} is not a valid mount name")
        return value

    @model_validator(mode="after")
    def _one_mechanism(self) -> Storage:
        if self.automount_map and self.static_mount:
            raise ValueError(f"storage {self.name!r} uses an automount map or a static mount,"
                             " not both")
        if self.mount_name and not self.automount_map:
            raise ValueError(f"storage {self.name!r}: mount_name only applies to automounts")
        return self

    class Settings(BaseDoc.Settings):
        name = "storages"
        indexes = [unique("name", "site", "category"), index("owner"), index("group"),
                   index("site", "category"), index("site", "volume")]


# -- path math (pure: callers pass the related documents) ---------------------------------


def join_path(base: str, sub: str) -> str:
    """``PurePosixPath(base) / sub`` as text. Stored paths are already normal (absolute,
    no ``.`` segment, no ``//``, no trailing ``/``), so the common case is a plain join;
    anything else goes through ``PurePosixPath`` (a 20k-user export joins 40k paths, and
    pathlib cost a second of it). tests/queries/test_export_reads.py compares both."""
    joined = f"{base}/{sub}" if sub else base
    if (base[:1] == "/" and sub[:1] != "/" and "//" not in joined and "/./" not in joined
            and joined[-1] != "/" and joined[-2:] != "/."):
        return joined
    return str(PurePosixPath(base) / sub) if sub else str(PurePosixPath(base))


def storage_host_path(storage: Storage, volume: StorageVolume) -> str:
    """Where the storage lives on its file server: the volume's path plus the subpath."""
    return join_path(volume.host_path, storage.subpath)


def storage_quota(storage: Storage, volume: StorageVolume) -> str | None:
    """The volume's quota for a whole-volume storage; a subdirectory has none of its own."""
    return None if storage.subpath else volume.quota


def mount_options(storage: Storage, automount_map: AutomountMap | None,
                  static_mount: StaticMount | None) -> list[str]:
    """Static: the mount's options. Explicit overrides: those. Automount: the map's
    options minus ``remove_options`` plus ``add_options``, sorted."""
    if static_mount is not None:
        return list(static_mount.options)
    overrides = storage.mount_overrides
    if overrides.options:
        return list(overrides.options)
    if automount_map is None:
        return []
    options = set(automount_map.options) - set(overrides.remove_options)
    return sorted(options | set(overrides.add_options))


def static_mount_root(static_mount: StaticMount, volume: StorageVolume | None) -> str | None:
    """The host path a volume-backed static mount exposes (None for a raw-spec mount)."""
    if static_mount.volume is None or volume is None:
        return None
    return join_path(volume.host_path, static_mount.subpath)


def mount_path(storage: Storage, volume: StorageVolume, automount_map: AutomountMap | None,
               static_mount: StaticMount | None,
               static_volume: StorageVolume | None = None) -> str | None:
    """Where clients see the storage: ``<map prefix>/<mount_name or name>`` for an
    automount; the static mount point plus the storage's place under the mount's root for
    a static mount (``ValueError`` when the mount does not cover it); None when unmounted.
    """
    if automount_map is not None:
        return join_path(automount_map.prefix, storage.mount_name or storage.name)
    if static_mount is None:
        return None
    root = static_mount_root(static_mount, static_volume)
    if root is None:
        raise ValueError(f"static mount {static_mount.name!r} mounts {static_mount.spec!r}, "
                         "not a volume path, so it cannot carry storages")
    here = PurePosixPath(storage_host_path(storage, volume))
    if static_volume is not None and static_volume.host != volume.host:
        raise ValueError(f"static mount {static_mount.name!r} is on {static_volume.host}, "
                         f"storage {storage.name!r} is on {volume.host}")
    if not here.is_relative_to(root):
        raise ValueError(f"static mount {static_mount.name!r} ({root}) does not cover "
                         f"storage {storage.name!r} at {here}")
    relative = here.relative_to(root)
    return join_path(static_mount.mount_path, "" if str(relative) == "." else str(relative))


def device_spec(static_mount: StaticMount, volume: StorageVolume | None) -> str:
    """``host:/path`` for a volume mount, the raw spec otherwise."""
    root = static_mount_root(static_mount, volume)
    if root is None or volume is None:
        return static_mount.spec
    return f"{volume.host}:{root}"
