"""Storage operations: volumes and their allocations, automount maps, static mounts, and
home, group and share storages (with re-homing, mount changes, edits and removal).

Nothing here touches a file server: these are the records that exports, puppet and LDAP
project outward. Derived values (host path, mount path, options) come from
``models.storage``; a mount that cannot carry a storage is refused before any write.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator
from pymongo.asynchronous.client_session import AsyncClientSession

from ..errors import AlreadyExists, Conflict, InvalidInput, NotFound
from ..models import AutomountMap, Site, StaticMount, Storage, StorageVolume
from ..models.base import select
from ..models.fields import (
    Cidr,
    FreeText,
    HostName,
    MountOption,
    OptionString,
    PosixName,
    Quota,
    SiteName,
)
from ..models.storage import (
    STORAGE_NAME_RE,
    AbsolutePath,
    Backend,
    Category,
    FsType,
    MapName,
    MountOverrides,
    NFSExportConfig,
    QuobyteConfig,
    StorageAllocation,
    StorageName,
    SubPath,
    VolumeName,
    ZFSConfig,
    join_path,
    mount_path,
)
from ..queries.group import get_group
from ..queries.site import get_site
from ..queries.storage import (
    find_automount_map,
    find_home_storage,
    find_storage,
    find_volume,
    get_automount_map,
    get_static_mount,
    get_volume,
)
from ..queries.user import get_user
from .base import OpArgs, Operation


class _SiteScoped(OpArgs):
    site: SiteName


# -- volumes --------------------------------------------------------------------------------


def _backend_config(backend: str) -> dict[str, Any]:
    return {"zfs": ZFSConfig()} if backend == "zfs" else {"quobyte": QuobyteConfig()}


async def _new_volume(site: str, name: str, *, backend: str, host: str, host_path: str,
                      parent: StorageVolume | None, quota: str | None,
                      export: NFSExportConfig | None,
                      session: AsyncClientSession) -> StorageVolume:
    """Insert a volume after checking its name and (host, path) are free at the site."""
    if await find_volume(site, name, session):
        raise AlreadyExists(f"volume {name!r} already exists at site {site!r}")
    clash = await select(StorageVolume, session, host_path=host_path, site=site, host=host)
    if clash:
        raise AlreadyExists(f"volume {clash[0].name!r} already lives at {host}:{host_path}")
    if export is None and parent is not None:  # children are exported like their parent
        export = parent.nfs_export
    volume = StorageVolume(
        name=name, site=site, backend=backend, host=host, host_path=host_path,
        parent=parent.name if parent else None,
        allocations=[StorageAllocation(quota=quota, comment="initial allocation")] if quota
        else [], nfs_export=export, **_backend_config(backend))
    await volume.insert(session=session)
    return volume


class CreateStorageVolume(Operation):
    """A volume on a file server; a child of ``parent`` inherits its backend and host and
    must live under its path (default: ``<parent path>/<last part of the name>``)."""

    op_name = "create_storage_volume"

    class Args(_SiteScoped):
        name: VolumeName
        backend: Backend | None = None
        host: HostName | None = None
        host_path: AbsolutePath | None = None
        parent: VolumeName | None = None
        quota: Quota | None = None
        export_options: OptionString = ""
        export_ranges: list[Cidr] = Field(default_factory=list)

        @model_validator(mode="after")
        def _root_needs_host(self) -> CreateStorageVolume.Args:
            if self.parent is None and not (self.host and self.host_path and self.backend):
                raise ValueError("a volume without a parent needs --backend, --host and "
                                 "--host-path")
            return self

    async def execute(self, session: AsyncClientSession) -> StorageVolume:
        a = self.args
        await get_site(a.site, session)
        parent = await get_volume(a.site, a.parent, session) if a.parent else None
        backend, host, path = a.backend, a.host, a.host_path
        if parent is not None:
            if backend and backend != parent.backend:
                raise InvalidInput(f"a child of {parent.name!r} must use {parent.backend}")
            if host and host != parent.host:
                raise InvalidInput(f"a child of {parent.name!r} lives on {parent.host}")
            backend, host = parent.backend, parent.host
            path = path or join_path(parent.host_path, PurePosixPath(a.name).name)
            if not PurePosixPath(path).is_relative_to(parent.host_path) \
                    or path == parent.host_path:
                raise InvalidInput(f"{path} is not inside parent {parent.name!r} "
                                   f"({parent.host_path})")
        export = NFSExportConfig(export_options=a.export_options,
                                 export_ranges=a.export_ranges) \
            if a.export_options or a.export_ranges else None
        assert backend and host and path
        self.volume = await _new_volume(a.site, a.name, backend=backend, host=host,
                                        host_path=path, parent=parent, quota=a.quota,
                                        export=export, session=session)
        return self.volume

    def describe(self) -> dict[str, Any]:
        v = self.volume
        return {"site": v.site, "volume": v.name, "backend": v.backend, "host": v.host,
                "host_path": v.host_path, "parent": v.parent, "quota": v.quota}


class AddVolumeAllocation(Operation):
    op_name = "add_volume_allocation"

    class Args(_SiteScoped):
        volume: VolumeName
        quota: Quota
        comment: FreeText = ""

    async def execute(self, session: AsyncClientSession) -> StorageVolume:
        volume = await get_volume(self.args.site, self.args.volume, session)
        volume.allocations = [*volume.allocations, StorageAllocation(
            quota=self.args.quota, comment=self.args.comment)]
        await volume.save(session=session)
        self.total = volume.quota
        return volume

    def describe(self) -> dict[str, Any]:
        return {"site": self.args.site, "volume": self.args.volume, "quota": self.args.quota,
                "total": self.total}


class _AllocationIndexArgs(_SiteScoped):
    volume: VolumeName
    index: int = Field(ge=0)


def _check_index(volume: StorageVolume, index: int) -> None:
    if index >= len(volume.allocations):
        raise InvalidInput(f"volume {volume.name!r} has {len(volume.allocations)} "
                           f"allocation(s); index {index} is out of range (0-based)")


class RemoveVolumeAllocation(Operation):
    op_name = "remove_volume_allocation"

    class Args(_AllocationIndexArgs):
        pass

    async def execute(self, session: AsyncClientSession) -> StorageVolume:
        volume = await get_volume(self.args.site, self.args.volume, session)
        _check_index(volume, self.args.index)
        self.removed = volume.allocations[self.args.index].quota
        volume.allocations = [a for i, a in enumerate(volume.allocations)
                              if i != self.args.index]
        await volume.save(session=session)
        self.total = volume.quota
        return volume

    def describe(self) -> dict[str, Any]:
        return {"site": self.args.site, "volume": self.args.volume, "index": self.args.index,
                "removed": self.removed, "total": self.total}


class EditVolumeAllocation(Operation):
    op_name = "edit_volume_allocation"

    class Args(_AllocationIndexArgs):
        quota: Quota
        comment: FreeText | None = None

    async def execute(self, session: AsyncClientSession) -> StorageVolume:
        a = self.args
        volume = await get_volume(a.site, a.volume, session)
        _check_index(volume, a.index)
        old = volume.allocations[a.index]
        allocations = list(volume.allocations)
        allocations[a.index] = StorageAllocation(
            quota=a.quota, comment=old.comment if a.comment is None else a.comment)
        volume.allocations = allocations
        await volume.save(session=session)
        self.total = volume.quota
        return volume

    def describe(self) -> dict[str, Any]:
        a = self.args
        return {"site": a.site, "volume": a.volume, "index": a.index, "quota": a.quota,
                "total": self.total}


# -- mount mechanisms -----------------------------------------------------------------------


class CreateAutomountMap(Operation):
    op_name = "create_automount_map"

    class Args(_SiteScoped):
        name: MapName
        prefix: AbsolutePath
        options: list[MountOption] = Field(default_factory=list)

    async def execute(self, session: AsyncClientSession) -> AutomountMap:
        a = self.args
        await get_site(a.site, session)
        if await find_automount_map(a.site, a.name, session):
            raise AlreadyExists(f"automount map {a.name!r} already exists at site {a.site!r}")
        amap = AutomountMap(name=a.name, site=a.site, prefix=a.prefix, options=a.options)
        await amap.insert(session=session)
        return amap

    def describe(self) -> dict[str, Any]:
        a = self.args
        return {"site": a.site, "map": a.name, "prefix": a.prefix, "options": a.options}


class CreateStaticMount(Operation):
    """A fixed mount of a volume (optionally a subpath of it) or of a raw spec (cvmfs)."""

    op_name = "create_static_mount"

    class Args(_SiteScoped):
        name: MapName
        fstype: FsType
        mount_path: AbsolutePath
        volume: VolumeName | None = None
        subpath: SubPath = ""
        spec: OptionString = ""
        options: list[MountOption] = Field(default_factory=list)

        @model_validator(mode="after")
        def _one_source(self) -> CreateStaticMount.Args:
            if bool(self.volume) == bool(self.spec):
                raise ValueError("a static mount needs exactly one of --volume or --spec")
            if self.subpath and not self.volume:
                raise ValueError("a subpath needs a volume")
            return self

    async def execute(self, session: AsyncClientSession) -> StaticMount:
        a = self.args
        await get_site(a.site, session)
        if await select(StaticMount, session, name=a.name, site=a.site):
            raise AlreadyExists(f"static mount {a.name!r} already exists at site {a.site!r}")
        if used := await select(StaticMount, session, mount_path=a.mount_path, site=a.site):
            raise AlreadyExists(f"{a.mount_path} is already static mount {used[0].name!r}")
        if a.volume:
            await get_volume(a.site, a.volume, session)
        mount = StaticMount(name=a.name, site=a.site, fstype=a.fstype, mount_path=a.mount_path,
                            volume=a.volume, subpath=a.subpath, spec=a.spec, options=a.options)
        await mount.insert(session=session)
        return mount

    def describe(self) -> dict[str, Any]:
        a = self.args
        return {"site": a.site, "mount": a.name, "fstype": a.fstype, "mount_path": a.mount_path,
                "volume": a.volume, "subpath": a.subpath, "spec": a.spec}


# -- storages -------------------------------------------------------------------------------


class _MountChoice(OpArgs):
    """At most one of an automount map, a static mount, or none (``no_mount``)."""

    automount_map: MapName | None = None
    static_mount: MapName | None = None
    no_mount: bool = False

    @model_validator(mode="after")
    def _one_mechanism(self) -> _MountChoice:
        chosen = [x for x in (self.automount_map, self.static_mount, self.no_mount or None)
                  if x]
        if len(chosen) > 1:
            raise ValueError("choose one of an automount map, a static mount or no mount")
        return self


async def _mount_for(a: _MountChoice, site: Site, *, fallback_map: str | None,
                     use_site_home: bool,
                     session: AsyncClientSession) -> tuple[str | None, str | None]:
    """(automount map, static mount): explicit choice, else the site's home settings (for
    homes), else a map named like the category, else none."""
    if a.no_mount:
        return None, None
    if a.automount_map:
        return (await get_automount_map(site.name, a.automount_map, session)).name, None
    if a.static_mount:
        return None, (await get_static_mount(site.name, a.static_mount, session)).name
    if use_site_home:
        if site.storage.home_automount_map:
            return site.storage.home_automount_map, None
        if site.storage.home_static_mount:
            return None, site.storage.home_static_mount
    if fallback_map and await find_automount_map(site.name, fallback_map, session):
        return fallback_map, None
    return None, None


async def _check_mountable(storage: Storage, volume: StorageVolume,
                           session: AsyncClientSession) -> None:
    """Refuse a static mount that does not cover the storage's path."""
    if storage.static_mount is None:
        return
    mount = await get_static_mount(storage.site, storage.static_mount, session)
    static_volume = await get_volume(storage.site, mount.volume, session) if mount.volume \
        else None
    try:
        mount_path(storage, volume, None, mount, static_volume)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None


class _StorageTarget(_MountChoice, _SiteScoped):
    quota: Quota | None = None
    parent_volume: VolumeName | None = None
    host: HostName | None = None
    host_path: AbsolutePath | None = None

    @model_validator(mode="after")
    def _parent_or_host(self) -> _StorageTarget:
        if self.parent_volume and self.host:
            raise ValueError("give a parent volume or a host, not both")
        if self.host_path and not self.host:
            raise ValueError("--path goes with --host (a child volume's path is derived)")
        return self


async def _provision(a: _StorageTarget, *, site: Site, category: str, name: str,
                     owner: str, group: str, quota: str | None,
                     parent_name: str | None, default_root: str, fallback_map: str,
                     globus: bool = False,
                     session: AsyncClientSession) -> tuple[Storage, StorageVolume]:
    """The volume (standalone on ``host`` or a child of the parent) plus the storage."""
    prefix = "home" if category == "home" else category
    if a.host:
        volume = await _new_volume(
            site.name, f"{prefix}/{name}", backend="zfs", host=a.host,
            host_path=a.host_path or join_path(default_root, name), parent=None, quota=quota,
            export=None, session=session)
    else:
        if not parent_name:
            raise InvalidInput("no parent volume: give --parent-volume or --host"
                               + (" or set the site's home defaults" if category == "home"
                                  else ""))
        parent = await get_volume(site.name, parent_name, session)
        volume = await _new_volume(
            site.name, f"{parent.name}/{name}", backend=parent.backend, host=parent.host,
            host_path=join_path(parent.host_path, name), parent=parent, quota=quota,
            export=None, session=session)
    amap, static = await _mount_for(a, site, fallback_map=fallback_map,
                                    use_site_home=category == "home", session=session)
    storage = Storage(name=name, site=site.name, category=category, owner=owner, group=group,
                      volume=volume.name, automount_map=amap, static_mount=static,
                      mount_name=name if amap else "", globus=globus)
    await _check_mountable(storage, volume, session)
    await storage.insert(session=session)
    return storage, volume


def _mechanism(storage: Storage) -> str:
    if storage.automount_map:
        return f"automount:{storage.automount_map}"
    if storage.static_mount:
        return f"static:{storage.static_mount}"
    return "none"


class CreateHomeStorage(Operation):
    """The user's home: a child of the site's default home volume (or of the given parent,
    or a standalone volume on ``host``), quota from the argument or the site default,
    mounted by the site's home mechanism unless told otherwise."""

    op_name = "create_home_storage"

    class Args(_StorageTarget):
        user: PosixName

    async def execute(self, session: AsyncClientSession) -> Storage:
        a = self.args
        site = await get_site(a.site, session)
        user = await get_user(a.user, session)
        group = await get_group(user.name, session)
        if await find_home_storage(user.name, site.name, session):
            raise AlreadyExists(f"user {user.name!r} already has a home at site {site.name!r}")
        self.storage, self.volume = await _provision(
            a, site=site, category="home", name=user.name, owner=user.name, group=group.name,
            quota=a.quota or site.storage.default_home_quota,
            parent_name=a.parent_volume or site.storage.default_home_volume,
            default_root="/home", fallback_map="home", session=session)
        return self.storage

    def describe(self) -> dict[str, Any]:
        return {"site": self.args.site, "user": self.args.user, "volume": self.volume.name,
                "host_path": self.volume.host_path, "quota": self.volume.quota,
                "mechanism": _mechanism(self.storage)}


class CreateGroupStorage(Operation):
    """A group's shared space; the owner defaults to the group's single sponsor at the
    site."""

    op_name = "create_group_storage"

    class Args(_StorageTarget):
        group: PosixName
        owner: PosixName | None = None
        quota: Quota
        globus: bool = False

    async def execute(self, session: AsyncClientSession) -> Storage:
        from ..queries.group import group_members_at_site

        a = self.args
        site = await get_site(a.site, session)
        group = await get_group(a.group, session)
        if a.owner:
            owner = (await get_user(a.owner, session)).name
        else:
            sponsors = (await group_members_at_site(group.name, site.name, session)).sponsors
            if len(sponsors) != 1:
                raise InvalidInput(f"group {group.name!r} has {len(sponsors)} sponsors at "
                                   f"{site.name}; give --owner")
            owner = sponsors[0]
        if await find_storage(site.name, group.name, "group", session):
            raise AlreadyExists(f"group {group.name!r} already has a group storage at "
                                f"{site.name!r}")
        if not a.parent_volume and not a.host:
            raise InvalidInput("give --parent-volume or --host")
        self.storage, self.volume = await _provision(
            a, site=site, category="group", name=group.name, owner=owner, group=group.name,
            quota=a.quota, parent_name=a.parent_volume, default_root="/group",
            fallback_map="group", globus=a.globus, session=session)
        return self.storage

    def describe(self) -> dict[str, Any]:
        return {"site": self.args.site, "group": self.args.group, "owner": self.storage.owner,
                "volume": self.volume.name, "quota": self.volume.quota,
                "mechanism": _mechanism(self.storage)}


class CreateShareStorage(Operation):
    """A named shared space (datasets, software) owned by a user and a group."""

    op_name = "create_share_storage"

    class Args(_StorageTarget):
        name: StorageName
        owner: PosixName
        group: PosixName
        quota: Quota | None = None
        globus: bool = False

    async def execute(self, session: AsyncClientSession) -> Storage:
        a = self.args
        site = await get_site(a.site, session)
        owner = (await get_user(a.owner, session)).name
        group = (await get_group(a.group, session)).name
        if await find_storage(site.name, a.name, "share", session):
            raise AlreadyExists(f"share {a.name!r} already exists at {site.name!r}")
        if not a.parent_volume and not a.host:
            raise InvalidInput("give --parent-volume or --host")
        self.storage, self.volume = await _provision(
            a, site=site, category="share", name=a.name, owner=owner, group=group,
            quota=a.quota, parent_name=a.parent_volume, default_root="/share",
            fallback_map="share", globus=a.globus, session=session)
        return self.storage

    def describe(self) -> dict[str, Any]:
        return {"site": self.args.site, "share": self.args.name, "owner": self.args.owner,
                "group": self.args.group, "volume": self.volume.name,
                "quota": self.volume.quota, "mechanism": _mechanism(self.storage)}


class RehomeUser(Operation):
    """Move a user's home record onto the site's current defaults. The old volume record
    stays (files are not moved: that is a deliberate, separate step)."""

    op_name = "rehome_user"

    class Args(_SiteScoped):
        user: PosixName

    async def execute(self, session: AsyncClientSession) -> Storage:
        a = self.args
        site = await get_site(a.site, session)
        home = await find_home_storage(a.user, site.name, session)
        if home is None:
            raise NotFound(f"user {a.user!r} has no home at site {site.name!r}")
        default = site.storage.default_home_volume
        if not default:
            raise Conflict(f"site {site.name!r} has no default home volume")
        current = await get_volume(site.name, home.volume, session)
        if current.parent == default:
            raise Conflict(f"{a.user!r}'s home is already under {default!r}")
        self.old_volume = current.name
        await home.delete(session=session)
        self.storage = await CreateHomeStorage.within(self, session, site=site.name,
                                                      user=a.user)
        return self.storage

    def describe(self) -> dict[str, Any]:
        return {"site": self.args.site, "user": self.args.user, "old_volume": self.old_volume,
                "new_volume": self.storage.volume, "mechanism": _mechanism(self.storage)}


class _StorageRef(_SiteScoped):
    name: StorageName
    category: Category | None = None


async def _get_storage(a: _StorageRef, session: AsyncClientSession) -> Storage:
    found = await find_storage(a.site, a.name, a.category, session)
    if found is None:
        raise NotFound(f"storage {a.name!r} does not exist at site {a.site!r}")
    return found


async def _apply_mount(storage: Storage, *, amap: str | None, static: str | None,
                       mount_name: str, session: AsyncClientSession) -> None:
    """Switch the mechanism (assignments ordered so every step is a valid storage).
    Static or none clears the mount name and option overrides; automount keeps them."""
    if amap is not None:
        storage.static_mount = None
        storage.automount_map = amap
        storage.mount_name = mount_name or storage.mount_name or storage.name
    else:
        storage.mount_name = ""
        storage.automount_map = None
        storage.mount_overrides = MountOverrides()
        storage.static_mount = static
    volume = await get_volume(storage.site, storage.volume, session)
    await _check_mountable(storage, volume, session)
    await storage.save(session=session)


class SetStorageMount(Operation):
    """Mount a storage through a map, a static mount, or not at all. Switching to static
    or none clears the mount name and option overrides."""

    op_name = "set_storage_mount"

    class Args(_StorageRef, _MountChoice):
        mount_name: str = ""

        @field_validator("mount_name")
        @classmethod
        def _mount_name_shape(cls, value: str) -> str:
            if value and not STORAGE_NAME_RE.fullmatch(value):
                raise ValueError(f"{value!r} is not a valid mount name")
            return value

        @model_validator(mode="after")
        def _exactly_one(self) -> SetStorageMount.Args:
            if not (self.automount_map or self.static_mount or self.no_mount):
                raise ValueError("give --automount-map, --static-mount or --no-mount")
            return self

    async def execute(self, session: AsyncClientSession) -> Storage:
        a = self.args
        storage = await _get_storage(a, session)
        amap = (await get_automount_map(a.site, a.automount_map, session)).name \
            if a.automount_map else None
        static = (await get_static_mount(a.site, a.static_mount, session)).name \
            if a.static_mount else None
        await _apply_mount(storage, amap=amap, static=static, mount_name=a.mount_name,
                           session=session)
        self.storage = storage
        return storage

    def describe(self) -> dict[str, Any]:
        return {"site": self.args.site, "storage": self.args.name,
                "category": self.storage.category, "mechanism": _mechanism(self.storage)}


class SetVolumeStorageMounts(Operation):
    """Apply one mount mechanism to every storage on a volume and its descendants at the
    site. Storages a static mount cannot cover are reported and left unchanged."""

    op_name = "set_volume_storage_mounts"
    transactional = False

    class Args(_SiteScoped, _MountChoice):
        volume: VolumeName

        @model_validator(mode="after")
        def _exactly_one(self) -> SetVolumeStorageMounts.Args:
            if not (self.automount_map or self.static_mount or self.no_mount):
                raise ValueError("give --automount-map, --static-mount or --no-mount")
            return self

    async def execute(self, session: AsyncClientSession) -> dict[str, Any]:
        a = self.args
        root = await get_volume(a.site, a.volume, session)
        volumes = await StorageVolume.find({"site": a.site}, session=session).to_list()
        children: dict[str | None, list[str]] = {}
        for v in volumes:
            children.setdefault(v.parent, []).append(v.name)
        subtree, queue = set(), [root.name]
        while queue:
            name = queue.pop()
            subtree.add(name)
            queue.extend(children.get(name, []))
        amap = (await get_automount_map(a.site, a.automount_map, session)).name \
            if a.automount_map else None
        static = (await get_static_mount(a.site, a.static_mount, session)).name \
            if a.static_mount else None
        storages = [s for s in await Storage.find({"site": a.site}, session=session).to_list()
                    if s.volume in subtree]
        self.updated, self.warnings = [], []
        for storage in sorted(storages, key=lambda s: s.name):
            try:
                await _apply_mount(storage, amap=amap, static=static, mount_name="",
                                   session=session)
                self.updated.append(storage.name)
            except InvalidInput as exc:
                self.warnings.append(str(exc))
        mechanism = f"automount:{amap}" if amap else f"static:{static}" if static else "none"
        return {"mechanism": mechanism, "updated": self.updated, "warnings": self.warnings}

    def describe(self) -> dict[str, Any]:
        return {"site": self.args.site, "volume": self.args.volume, "updated": self.updated,
                "warnings": self.warnings}


class EditStorage(Operation):
    """Change a storage's quota (a whole-volume storage only: the volume's allocations
    become one allocation of that size), owner, group or Globus flag."""

    op_name = "edit_storage"

    class Args(_StorageRef):
        quota: Quota | None = None
        owner: PosixName | None = None
        group: PosixName | None = None
        globus: bool | None = None

    async def execute(self, session: AsyncClientSession) -> Storage:
        a = self.args
        storage = await _get_storage(a, session)
        if a.quota is not None:
            if storage.subpath:
                raise InvalidInput(f"storage {storage.name!r} is a subdirectory of "
                                   f"{storage.volume!r} and has no quota of its own")
            volume = await get_volume(a.site, storage.volume, session)
            volume.allocations = [StorageAllocation(quota=a.quota, comment="set by edit")]
            await volume.save(session=session)
        if a.owner is not None:
            storage.owner = (await get_user(a.owner, session)).name
        if a.group is not None:
            storage.group = (await get_group(a.group, session)).name
        if a.globus is not None:
            storage.globus = a.globus
        await storage.save(session=session)
        self.storage = storage
        return storage

    def describe(self) -> dict[str, Any]:
        a = self.args
        return {"site": a.site, "storage": a.name, "category": self.storage.category,
                "quota": a.quota, "owner": a.owner, "group": a.group, "globus": a.globus}


class RemoveStorage(Operation):
    """Delete a storage record. Refused while it is mounted (an automount map or a static
    mount serves it) unless ``force``. Its volume record stays; nothing on disk changes."""

    op_name = "remove_storage"

    class Args(_StorageRef):
        force: bool = False

    async def execute(self, session: AsyncClientSession) -> Storage:
        a = self.args
        storage = await _get_storage(a, session)
        if (storage.automount_map or storage.static_mount) and not a.force:
            raise Conflict(f"storage {storage.name!r} is mounted ({_mechanism(storage)}); "
                           "unmount it with `ng storage set-mount --no-mount` or pass --force")
        await storage.delete(session=session)
        self.storage = storage
        return storage

    def describe(self) -> dict[str, Any]:
        return {"site": self.args.site, "storage": self.args.name,
                "category": self.storage.category, "volume": self.storage.volume,
                "mechanism": _mechanism(self.storage), "force": self.args.force}


class SetSiteStorageDefaults(Operation):
    """The defaults new homes use. Only given settings change; setting one mount mechanism
    clears the other; ``clear_*`` removes a setting."""

    op_name = "set_site_storage_defaults"

    class Args(_SiteScoped):
        home_volume: VolumeName | None = None
        home_quota: Quota | None = None
        home_automount_map: MapName | None = None
        home_static_mount: MapName | None = None
        clear: list[Literal["home_volume", "home_quota", "home_mount"]] = Field(
            default_factory=list)

        @model_validator(mode="after")
        def _something(self) -> SetSiteStorageDefaults.Args:
            if self.home_automount_map and self.home_static_mount:
                raise ValueError("homes use an automount map or a static mount, not both")
            if not (self.home_volume or self.home_quota or self.home_automount_map
                    or self.home_static_mount or self.clear):
                raise ValueError("give at least one setting")
            return self

    async def execute(self, session: AsyncClientSession) -> Site:
        a = self.args
        site = await get_site(a.site, session)
        settings = site.storage.model_copy()
        if "home_volume" in a.clear:
            settings.default_home_volume = None
        if "home_quota" in a.clear:
            settings.default_home_quota = None
        if "home_mount" in a.clear:
            settings.home_automount_map = settings.home_static_mount = None
        if a.home_volume:
            settings.default_home_volume = (await get_volume(site.name, a.home_volume,
                                                             session)).name
        if a.home_quota:
            settings.default_home_quota = a.home_quota
        if a.home_automount_map:
            await get_automount_map(site.name, a.home_automount_map, session)
            settings.home_static_mount = None
            settings.home_automount_map = a.home_automount_map
        if a.home_static_mount:
            await get_static_mount(site.name, a.home_static_mount, session)
            settings.home_automount_map = None
            settings.home_static_mount = a.home_static_mount
        site.storage = settings
        await site.save(session=session)
        self.settings = settings
        return site

    def describe(self) -> dict[str, Any]:
        return {"site": self.args.site, **self.settings.model_dump()}
