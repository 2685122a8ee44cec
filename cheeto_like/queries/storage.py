"""Storage lookups, resolved with their volumes and mount mechanisms in batched queries.

``ResolvedStorage`` carries a storage together with the documents its derived values
need (volume, automount map or static mount and that mount's volume), so exports, LDAP
and the CLI compute host paths, quotas, mount paths and options without further queries.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pymongo.asynchronous.client_session import AsyncClientSession

from ..errors import NotFound
from ..models import AutomountMap, Group, StaticMount, Storage, StorageVolume, User
from ..models.base import select, select_one
from ..models.storage import (
    mount_options,
    mount_path,
    storage_host_path,
    storage_quota,
)
from .site import find_at_site, get_at_site, list_at_site

Session = AsyncClientSession | None


@dataclass(frozen=True)
class ResolvedStorage:
    storage: Storage
    volume: StorageVolume
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
