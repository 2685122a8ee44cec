"""Storage lookups, resolved with their volumes and mount mechanisms in batched queries.

``ResolvedStorage`` carries a storage together with the documents its derived values
need (volume, automount map or static mount and that mount's volume), so exports, LDAP
and the CLI compute host paths, quotas, mount paths and options without further queries.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pymongo.asynchronous.client_session import AsyncClientSession

from ..errors import NotFound
from ..models import AutomountMap, Group, StaticMount, Storage, StorageVolume, User
from ..models.base import columns, select, select_one
from ..models.storage import (
    StorageAllocation,
    mount_options,
    mount_path,
    storage_host_path,
    storage_quota,
)
from .site import find_at_site, get_at_site, list_at_site

Session = AsyncClientSession | None


@dataclass(frozen=True)
class ResolvedStorage:
    storage: Storage | StorageRow  # rows: the site-wide exports (``site_storages``)
    volume: StorageVolume | VolumeRow
    automount_map: AutomountMap | None = None
    static_mount: StaticMount | None = None
    static_volume: StorageVolume | None = None

    @property
    def host(self) -> str:
        return self.volume.host

    @property
    def host_path(self) -> str:
        return storage_host_path(self.storage, self.volume)

    @property
    def quota(self) -> str | None:
        return storage_quota(self.storage, self.volume)

    @property
    def mount_options(self) -> list[str]:
        return mount_options(self.storage, self.automount_map, self.static_mount)

    @property
    def mount_path(self) -> str | None:
        """None when unmounted; ``ValueError`` for a static mount that cannot carry it."""
        return mount_path(self.storage, self.volume, self.automount_map, self.static_mount,
                          self.static_volume)

    @property
    def mechanism(self) -> str:
        if self.automount_map is not None:
            return f"automount:{self.automount_map.name}"
        if self.static_mount is not None:
            return f"static:{self.static_mount.name}"
        return "none"

    @property
    def is_managed_zfs(self) -> bool:
        """A whole ZFS dataset we manage (quota and permissions are ours to set)."""
        return not self.storage.subpath and self.volume.zfs is not None

    def export_config(self) -> tuple[str, list[str]]:
        config = self.storage.nfs_export or self.volume.nfs_export
        return (config.export_options, list(config.export_ranges)) if config else ("", [])

    def as_dict(self) -> dict[str, Any]:
        try:
            path: str | None = self.mount_path
        except ValueError as exc:
            path = f"(unmountable: {exc})"
        options, ranges = self.export_config()
        return {
            "name": self.storage.name, "site": self.storage.site,
            "category": self.storage.category, "owner": self.storage.owner,
            "group": self.storage.group, "volume": self.volume.name, "host": self.host,
            "host_path": self.host_path, "subpath": self.storage.subpath,
            "quota": self.quota, "mount": self.mechanism, "mount_path": path,
            "mount_options": self.mount_options, "globus": self.storage.globus,
            "export_options": options, "export_ranges": ranges,
            "expires_at": self.storage.expires_at,
        }


async def resolve_storages(storages: Iterable[Storage],
                           session: Session = None) -> list[ResolvedStorage]:
    """Attach volumes, maps and mounts to storages: one query per related collection and
    site, however many storages there are."""
    storages = list(storages)
    sites = sorted({s.site for s in storages})
    volumes: dict[tuple[str, str], StorageVolume] = {}
    maps: dict[tuple[str, str], AutomountMap] = {}
    statics: dict[tuple[str, str], StaticMount] = {}
    for site in sites:
        for v in await StorageVolume.find({"site": site}, session=session).to_list():
            volumes[(site, v.name)] = v
        for m in await AutomountMap.find({"site": site}, session=session).to_list():
            maps[(site, m.name)] = m
        for st in await StaticMount.find({"site": site}, session=session).to_list():
            statics[(site, st.name)] = st
    resolved = []
    for s in storages:
        volume = volumes.get((s.site, s.volume))
        if volume is None:
            raise NotFound(f"storage {s.name!r} at {s.site}: volume {s.volume!r} is missing")
        static = statics.get((s.site, s.static_mount)) if s.static_mount else None
        resolved.append(ResolvedStorage(
            s, volume, maps.get((s.site, s.automount_map)) if s.automount_map else None,
            static, volumes.get((s.site, static.volume)) if static and static.volume else None))
    return resolved


STORAGE_FIELDS = ("name", "site", "category", "owner", "group", "volume", "subpath",
                  "nfs_export", "automount_map", "mount_name", "mount_overrides",
                  "static_mount", "globus")
VOLUME_FIELDS = ("name", "backend", "zfs", "host", "host_path", "allocations", "nfs_export")


@dataclass(frozen=True, slots=True)
class _Allocation:
    quota: str


@dataclass(frozen=True, slots=True)
class _Overrides:
    options: list[str]
    add_options: list[str]
    remove_options: list[str]


@dataclass(frozen=True, slots=True)
class _Export:
    export_options: str
    export_ranges: list[str]


@dataclass(frozen=True, slots=True)
class _Zfs:
    dataset_name: str


@dataclass(frozen=True, slots=True)
class StorageRow:
    """The fields of a ``Storage`` the exports and path math read, from a raw row."""

    name: str
    site: str
    category: str
    owner: str
    group: str
    volume: str
    subpath: str
    nfs_export: _Export | None
    automount_map: str | None
    mount_name: str
    mount_overrides: _Overrides
    static_mount: str | None
    globus: bool


@dataclass(frozen=True, slots=True)
class VolumeRow:
    """The fields of a ``StorageVolume`` the exports and path math read, from a raw row;
    its quota is the model's own property code."""

    name: str
    backend: str
    zfs: _Zfs | None
    host: str
    host_path: str
    allocations: list[_Allocation]
    nfs_export: _Export | None

    quota: str | None  # the model's ``quota``, worked out once per allocation list


@functools.lru_cache(maxsize=1024)
def _quota_of(quotas: tuple[str, ...]) -> str | None:
    """``StorageVolume.quota`` for these allocations (a site has few distinct lists, and
    parsing 20k identical ``20G`` strings into Decimals was a second of an export)."""
    return StorageVolume.model_construct(
        allocations=[StorageAllocation.model_construct(quota=q) for q in quotas]).quota


def _export(value: dict[str, Any] | None) -> _Export | None:
    if value is None:
        return None
    return _Export(value.get("export_options") or "", list(value.get("export_ranges") or ()))


def _storage(row: dict[str, Any]) -> StorageRow:
    overrides = row.get("mount_overrides") or {}
    return StorageRow(
        row["name"], row["site"], row["category"], row["owner"], row["group"], row["volume"],
        row.get("subpath") or "", _export(row.get("nfs_export")), row.get("automount_map"),
        row.get("mount_name") or "",
        _Overrides(list(overrides.get("options") or ()),
                   list(overrides.get("add_options") or ()),
                   list(overrides.get("remove_options") or ())),
        row.get("static_mount"), bool(row.get("globus")))


def _volume(row: dict[str, Any]) -> VolumeRow:
    zfs = row.get("zfs")
    allocations = [_Allocation(a["quota"]) for a in row.get("allocations") or ()]
    return VolumeRow(row["name"], row["backend"],
                     None if zfs is None else _Zfs(zfs.get("dataset_name") or ""),
                     row["host"], row["host_path"], allocations,
                     _export(row.get("nfs_export")),
                     _quota_of(tuple(a.quota for a in allocations)))


async def site_storages(site: str, session: Session = None) -> list[ResolvedStorage]:
    """Every storage of a site, resolved, for the site-wide exports (storage map, puppet).

    Built from raw columns (``models.base.columns``) into ``StorageRow``/``VolumeRow``:
    the rows were validated when they were written, and a 20k-user site (20k home
    storages, 40k volumes) took ~10 s to parse into beanie models (``model_construct``
    still ~5 s). Derived values come from the same pure functions (``models/storage.py``)
    as everywhere else; those only read the fields the rows carry.
    """
    reads: tuple[Callable[[], Awaitable[list[Any]]], ...] = (
        lambda: columns(Storage, {"site": site}, *STORAGE_FIELDS, session=session),
        lambda: columns(StorageVolume, {"site": site}, *VOLUME_FIELDS, session=session),
        lambda: AutomountMap.find({"site": site}, session=session).to_list(),
        lambda: StaticMount.find({"site": site}, session=session).to_list())
    if session is None:  # sent together (a session serves one command at a time)
        found = await asyncio.gather(*(read() for read in reads))
    else:
        found = [await read() for read in reads]
    storage_rows, volume_rows, map_docs, static_docs = found
    storages = [_storage(r) for r in storage_rows]
    volumes = {v.name: v for v in map(_volume, volume_rows)}
    maps = {m.name: m for m in map_docs}
    statics = {m.name: m for m in static_docs}
    resolved = []
    for s in storages:
        volume = volumes.get(s.volume)
        if volume is None:
            raise NotFound(f"storage {s.name!r} at {s.site}: volume {s.volume!r} is missing")
        static = statics.get(s.static_mount) if s.static_mount else None
        resolved.append(ResolvedStorage(
            s, volume, maps.get(s.automount_map) if s.automount_map else None,
            static, volumes.get(static.volume) if static and static.volume else None))
    return resolved


async def list_site_storages(site: str, *, category: str | None = None,
                             owner: str | None = None, group: str | None = None,
                             host: str | None = None,
                             session: Session = None) -> list[ResolvedStorage]:
    # A filter naming nobody is a typo: say so instead of listing nothing.
    if owner is not None and await select_one(User, session, name=owner) is None:
        raise NotFound(f"user {owner!r} does not exist")
    if group is not None and await select_one(Group, session, name=group) is None:
        raise NotFound(f"group {group!r} does not exist")
    where = {k: v for k, v in (("category", category), ("owner", owner), ("group", group))
             if v is not None}
    found = await select(Storage, session, site=site, **where)
    resolved = await resolve_storages(sorted(found, key=lambda s: (s.category, s.name)),
                                      session)
    return [r for r in resolved if host is None or r.host == host]


async def find_storage(site: str, name: str, category: str | None = None,
                       session: Session = None) -> Storage | None:
    found = await select(Storage, session, name=name, site=site,
                         **({"category": category} if category else {}))
    if len(found) > 1:
        from ..errors import InvalidInput

        raise InvalidInput(f"several storages are named {name!r} at {site}; give --category "
                           f"({', '.join(sorted(s.category for s in found))})")
    return found[0] if found else None


async def get_storage(site: str, name: str, category: str | None = None,
                      session: Session = None) -> ResolvedStorage:
    found = await find_storage(site, name, category, session)
    if found is None:
        raise NotFound(f"storage {name!r} does not exist at site {site!r}")
    return (await resolve_storages([found], session))[0]


async def find_home_storage(user: str, site: str, session: Session = None) -> Storage | None:
    return await select_one(Storage, session, owner=user, site=site, category="home")


async def find_volume(site: str, name: str, session: Session = None) -> StorageVolume | None:
    return await find_at_site(StorageVolume, site, name, session)


async def get_volume(site: str, name: str, session: Session = None) -> StorageVolume:
    return await get_at_site(StorageVolume, "volume", site, name, session)


async def list_site_volumes(site: str, session: Session = None) -> list[StorageVolume]:
    return await list_at_site(StorageVolume, site, session)


async def find_automount_map(site: str, name: str,
                             session: Session = None) -> AutomountMap | None:
    return await find_at_site(AutomountMap, site, name, session)


async def get_automount_map(site: str, name: str, session: Session = None) -> AutomountMap:
    return await get_at_site(AutomountMap, "automount map", site, name, session)


async def list_site_automount_maps(site: str, session: Session = None) -> list[AutomountMap]:
    return await list_at_site(AutomountMap, site, session)


async def get_static_mount(site: str, name: str, session: Session = None) -> StaticMount:
    return await get_at_site(StaticMount, "static mount", site, name, session)


async def list_site_static_mounts(site: str, session: Session = None) -> list[StaticMount]:
    return await list_at_site(StaticMount, site, session)


async def list_map_storages(site: str, map_name: str,
                            session: Session = None) -> list[ResolvedStorage]:
    found = await select(Storage, session, site=site, automount_map=map_name)
    return await resolve_storages(sorted(found, key=lambda s: s.name), session)


async def person_storages(site: str, user: str, groups: Iterable[str],
                          session: Session = None) -> list[ResolvedStorage]:
    """A person's storage at ``site``: their home and the group (or share) storages of
    their ``groups``, resolved with volumes and mounts. One find, then the batched
    resolve; homes first, then by name."""
    where = {"site": site, "$or": [{"category": "home", "owner": user},
                                   {"category": {"$in": ["group", "share"]},
                                    "group": {"$in": sorted(set(groups))}}]}
    found = await Storage.find(where, session=session).to_list()
    order = {"home": 0, "group": 1, "share": 2}
    found.sort(key=lambda s: (order.get(s.category, 3), s.name))
    return await resolve_storages(found, session)
