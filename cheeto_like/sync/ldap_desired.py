"""Desired LDAP state of one site, built from the store with a fixed number of queries.

What a site projects (the reference's rules, with its defects fixed):
- **Users** on the site (a ``UserSiteInfo``) get the global entry
  ``uid=<name>,<user_base>``: inetOrgPerson/posixAccount/ldapPublicKey/shadowAccount with
  ``{CRYPT}`` password, tagged SSH keys and ``shadowExpire`` from the global expiry.
  Nothing in it depends on the site that syncs it, so two sites never fight over it:
  a ``system`` user's extra root keys are the keys of the admins who hold ``root-ssh`` at
  *any* site the system user is on (the reference used the syncing site's admins, so the
  last site to sync won).
- **Groups** of the site: every access and status group (members: the site's users whose
  effective access includes it / whose effective status is it), the personal group of
  each user on the site, every group with a membership edge or a storage at the site, and
  the site's sticky groups. Members are the users on the site with a ``member`` edge (all
  of them for a sticky group), written both as ``memberUid`` and as ``member`` DNs.
- **Automount**: one map per ``AutomountMap`` of the site (its own name), a master-map key
  per map (its own prefix), and one key per storage mounted through that map
  (``mount_name`` or name -> ``[-options ]host<suffix>:path``).

Incremental bookkeeping travels with the state: which records are dirty for this site
(``ldap.modified_at`` past the site's watermark), users who left the site since they were
last synced here (their memberships must go), ignored records (never written or pruned),
and each record's id and snapshot of ``modified_at`` for the watermark.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..config import LDAPConfig
from ..constants import DEFAULT_SHELL
from ..models import (
    AutomountMap,
    Group,
    GroupMembership,
    SshKey,
    Storage,
    StorageVolume,
    User,
    UserSiteInfo,
)
from ..models.base import LDAPInfo
from ..models.fields import utcnow
from ..queries.site import get_site
from ..queries.storage import ResolvedStorage
from ..queries.user import effective_access, effective_status
from .ldap_state import (
    EPOCH,
    GROUP_CLASSES,
    KEY_CLASSES,
    USER_CLASSES,
    EntryState,
    Layout,
    RecordKey,
    automount_info,
    crypt_value,
    entry,
    map_entry,
    shadow_expire,
)

ROOT_ACCESS = "root-ssh"


@dataclass(frozen=True)
class Record:
    """A store document behind an entry: where to write its watermark, and the
    ``ldap.modified_at`` this run saw (a later change keeps it dirty)."""

    collection: str
    id: str
    modified_at: datetime


@dataclass(frozen=True)
class DesiredState:
    site: str
    layout: Layout
    users: Mapping[str, EntryState] = field(default_factory=dict)
    groups: Mapping[str, EntryState] = field(default_factory=dict)
    maps: Mapping[str, EntryState] = field(default_factory=dict)
    automounts: Mapping[tuple[str, str], EntryState] = field(default_factory=dict)
    special_groups: frozenset[str] = frozenset()
    dirty_users: frozenset[str] = frozenset()
    former_users: frozenset[str] = frozenset()
    dirty_groups: frozenset[str] = frozenset()
    dirty_automounts: frozenset[tuple[str, str]] = frozenset()
    ignored_users: frozenset[str] = frozenset()
    ignored_groups: frozenset[str] = frozenset()
    ignored_automounts: frozenset[tuple[str, str]] = frozenset()
    store_users: frozenset[str] = frozenset()
    records: Mapping[RecordKey, Record] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def dirty_records(self) -> frozenset[RecordKey]:
        return frozenset({("user", u) for u in self.dirty_users | self.former_users}
                         | {("group", g) for g in self.dirty_groups}
                         | {("storage", f"{m}/{k}") for m, k in self.dirty_automounts})

    def members(self, group: str) -> frozenset[str]:
        found = self.groups.get(group)
        return found.get("memberUid") if found else frozenset()


@dataclass(frozen=True, slots=True)
class _UserRow:
    """The user fields the projection reads, straight from the store's documents (parsing
    10k full ``User`` models costs seconds; these rows cost milliseconds)."""

    id: str
    name: str
    email: str
    uid: int
    gid: int
    fullname: str
    surname: str | None
    shell: str
    type: str
    status: str | None
    password: str | None
    access: list[str]
    home_directory: str
    expires_at: datetime | None
    ldap: _SyncInfo

    @classmethod
    def of(cls, raw: dict[str, Any]) -> _UserRow:
        return cls(raw["_id"], raw["name"], raw["email"], raw["uid"], raw["gid"],
                   raw["fullname"], raw.get("surname"), raw.get("shell") or DEFAULT_SHELL,
                   raw.get("type") or "user", raw.get("status"), raw.get("password"),
                   list(raw.get("access") or []), raw["home_directory"],
                   raw.get("expires_at"), _ldap_info(raw))


@dataclass(frozen=True, slots=True)
class _SiteInfoRow:
    user: str
    site: str
    status: str | None
    access: list[str]


@dataclass(frozen=True, slots=True)
class _GroupRow:
    id: str
    name: str
    gid: int
    type: str
    shorthand: str | None
    ldap: _SyncInfo


@dataclass(frozen=True, slots=True)
class _SyncInfo:
    """``LDAPInfo`` as stored (building 30k pydantic models, even unvalidated, costs
    seconds). ``needs_sync`` is ``LDAPInfo``'s own rule."""

    ignore: bool
    modified_at: datetime
    synced: dict[str, datetime]

    needs_sync = LDAPInfo.needs_sync


def _ldap_info(raw: dict[str, Any]) -> _SyncInfo:
    info = raw.get("ldap") or {}
    return _SyncInfo(bool(info.get("ignore")), info.get("modified_at") or utcnow(),
                     dict(info.get("synced") or {}))


@dataclass(frozen=True, slots=True)
class _Key:
    user: str
    key: str

    authorized_keys_entry = SshKey.authorized_keys_entry


@dataclass(frozen=True, slots=True)
class _Overrides:
    options: list[str]
    add_options: list[str]
    remove_options: list[str]


@dataclass(frozen=True, slots=True)
class _StorageRow:
    """What ``ResolvedStorage`` reads from a storage, without parsing a ``Storage``."""

    id: str
    name: str
    site: str
    category: str
    group: str
    volume: str
    subpath: str
    automount_map: str | None
    mount_name: str
    mount_overrides: _Overrides
    ldap: _SyncInfo
    static_mount: None = None

    @classmethod
    def of(cls, raw: dict[str, Any]) -> _StorageRow:
        over = raw.get("mount_overrides") or {}
        return cls(raw["_id"], raw["name"], raw["site"], raw["category"], raw["group"],
                   raw["volume"], raw.get("subpath") or "", raw.get("automount_map"),
                   raw.get("mount_name") or "",
                   _Overrides(list(over.get("options") or []),
                              list(over.get("add_options") or []),
                              list(over.get("remove_options") or [])),
                   _ldap_info(raw))


async def _rows(model: Any, query: dict[str, Any], fields: Iterable[str]) -> list[dict[str, Any]]:
    """Raw documents with only ``fields`` (one query; no model parsing)."""
    projection = dict.fromkeys(fields, 1)
    return await model.get_pymongo_collection().find(query, projection).to_list()


def user_entry(layout: Layout, user: _UserRow, keys: list[str]) -> EntryState:
    return entry("user", layout.user_dn(user.name), USER_CLASSES, {
        "uid": [user.name],
        "cn": [user.fullname],
        "displayName": [user.fullname],
        "sn": [user.surname or user.fullname.split()[-1]],
        "mail": [user.email],
        "uidNumber": [user.uid],
        "gidNumber": [user.gid],
        "homeDirectory": [user.home_directory],
        "loginShell": [user.shell],
        "sshPublicKey": keys,
        "userPassword": [crypt_value(user.password) if user.password else None],
        "shadowExpire": [shadow_expire(user.expires_at)],
    })


def group_entry(layout: Layout, name: str, gid: int, members: set[str]) -> EntryState:
    return entry("group", layout.group_dn(name), GROUP_CLASSES, {
        "cn": [name], "gidNumber": [gid], "memberUid": members,
        "member": [layout.user_dn(m) for m in members],
    })


def automount_entry(layout: Layout, map_name: str, key: str, info: str) -> EntryState:
    return entry("automount", layout.key_dn(map_name, key), KEY_CLASSES,
                 {"automountKey": [key], "automountInformation": [info]})


def _dirty(info: _SyncInfo, site: str) -> bool:
    return info.needs_sync(site)


def _key_text(key: _Key, prefix: bool) -> str:
    return key.authorized_keys_entry() if prefix else key.key


async def _root_keys(site: str, users: dict[str, _UserRow], on_site: set[str],
                     keys: dict[str, list[_Key]], prefix: bool) -> dict[str, list[str]]:
    """system user on this site -> the keys of admins with root-ssh at any of its sites."""
    systems = sorted(n for n in on_site if users[n].type == "system")
    admins = sorted(n for n, u in users.items() if u.type == "admin" and keys.get(n))
    if not systems or not admins:
        return {}
    usis = [_SiteInfoRow(r["user"], r["site"], r.get("status"), r.get("access") or [])
            for r in await _rows(UserSiteInfo, {"user": {"$in": systems + admins}},
                                 ("user", "site", "status", "access"))]
    sites_of: dict[str, set[str]] = {}
    holders: dict[str, set[str]] = {}  # site -> admins with root-ssh there
    for usi in usis:
        user = users.get(usi.user)
        if user is None:
            continue
        if user.type == "system":
            sites_of.setdefault(usi.user, set()).add(usi.site)
        if user.type == "admin" and ROOT_ACCESS in effective_access(user, usi):
            holders.setdefault(usi.site, set()).add(usi.user)
    found: dict[str, list[str]] = {}
    for system in systems:
        granted = set().union(*(holders.get(s, set()) for s in sites_of.get(system, {site})))
        found[system] = [_key_text(k, prefix) for admin in sorted(granted)
                         for k in keys.get(admin, [])]
    return found


async def _automounted(site: str, rows: list[dict[str, Any]],
                       notes: list[str]) -> list[ResolvedStorage]:
    """The site's storages mounted through a map, with their volume and map."""
    volumes = {v.name: v for v in await StorageVolume.find({"site": site}).to_list()}
    maps = {m.name: m for m in await AutomountMap.find({"site": site}).to_list()}
    resolved = []
    for raw in sorted(rows, key=lambda r: (r["category"], r["name"])):
        if not raw.get("automount_map"):
            continue
        storage = _StorageRow.of(raw)
        volume = volumes.get(storage.volume)
        if volume is None:
            notes.append(f"storage {storage.name} skipped: volume {storage.volume} is missing")
            continue
        resolved.append(ResolvedStorage(
            storage=storage, volume=volume,  # type: ignore[arg-type]
            automount_map=maps.get(storage.automount_map or "")))
    return resolved


async def desired_state(site_name: str, config: LDAPConfig) -> DesiredState:
    site = await get_site(site_name)
    name = site.name
    layout = Layout.for_site(config, name)
    notes: list[str] = []
    prefix = config.ssh_user_prefix
    records: dict[RecordKey, Record] = {}

    # independent reads, in flight together (the store's work overlaps with decoding)
    usi_rows, user_rows, group_rows, edges, key_rows, storage_rows = await asyncio.gather(
        _rows(UserSiteInfo, {"site": name}, ("user", "site", "status", "access")),
        _rows(User, {}, ("name", "email", "uid", "gid", "fullname", "surname", "shell",
                         "type", "status", "password", "access", "home_directory",
                         "expires_at", "ldap")),
        _rows(Group, {}, ("name", "gid", "type", "shorthand", "ldap")),
        _rows(GroupMembership, {"site": name}, ("user", "group", "roles")),
        _rows(SshKey, {}, ("user", "key", "created_at")),
        _rows(Storage, {"site": name}, ("name", "site", "category", "group", "volume",
                                        "subpath", "automount_map", "mount_name",
                                        "mount_overrides", "ldap")))
    usis = {r["user"]: _SiteInfoRow(r["user"], r["site"], r.get("status"), r.get("access") or [])
            for r in usi_rows}
    users = {r["name"]: _UserRow.of(r) for r in user_rows}
    groups = {r["name"]: _GroupRow(r["_id"], r["name"], r["gid"], r.get("type") or "group",
                                   r.get("shorthand"), _ldap_info(r)) for r in group_rows}
    keys: dict[str, list[_Key]] = {}
    for raw in sorted(key_rows, key=lambda r: (r.get("created_at") or EPOCH, r["_id"])):
        keys.setdefault(raw["user"], []).append(_Key(raw["user"], raw["key"]))

    # -- users ------------------------------------------------------------------------------
    on_site = set()
    for user_name in sorted(usis):
        if user_name in users:
            on_site.add(user_name)
        else:
            notes.append(f"site record of unknown user {user_name} skipped")
    root_keys = await _root_keys(name, users, on_site, keys, prefix)
    desired_users: dict[str, EntryState] = {}
    ignored_users, dirty_users, former = set(), set(), set()
    for user_name in sorted(on_site):
        user = users[user_name]
        if user.ldap.ignore:
            ignored_users.add(user_name)
            continue
        own = [_key_text(k, prefix) for k in keys.get(user_name, [])]
        desired_users[user_name] = user_entry(layout, user, own + root_keys.get(user_name, []))
        records[("user", user_name)] = Record("users", user.id, user.ldap.modified_at)
        if _dirty(user.ldap, name):
            dirty_users.add(user_name)
    for user_name, user in users.items():
        if user_name not in on_site and not user.ldap.ignore and name in user.ldap.synced \
                and _dirty(user.ldap, name):
            former.add(user_name)
            records[("user", user_name)] = Record("users", user.id, user.ldap.modified_at)

    # -- groups -----------------------------------------------------------------------------
    members: dict[str, set[str]] = {}
    wanted: set[str] = set()
    for edge in edges:
        if edge["user"] not in on_site:
            continue
        wanted.add(edge["group"])
        if "member" in edge["roles"]:
            members.setdefault(edge["group"], set()).add(edge["user"])
    for sticky in site.group.sticky:
        wanted.add(sticky)
        members.setdefault(sticky, set()).update(on_site)
    special = {g.name for g in groups.values() if g.type in ("access", "status")}
    by_shorthand = {(g.type, g.shorthand): g.name for g in groups.values() if g.shorthand}
    wanted |= special
    for user_name in on_site:
        user, usi = users[user_name], usis[user_name]
        for access in effective_access(user, usi):
            group_name = by_shorthand.get(("access", access))
            if group_name:
                members.setdefault(group_name, set()).add(user_name)
        status = effective_status(user, usi)
        if status and (group_name := by_shorthand.get(("status", status))):
            members.setdefault(group_name, set()).add(user_name)
        personal = groups.get(user_name)
        if personal is not None and personal.type == "user":
            wanted.add(user_name)

    wanted.update(r["group"] for r in storage_rows)

    desired_groups: dict[str, EntryState] = {}
    ignored_groups, dirty_groups = set(), set()
    for group_name in sorted(wanted):
        group = groups.get(group_name)
        if group is None:
            notes.append(f"group {group_name} is referenced at {name} but does not exist")
            continue
        if group.ldap.ignore:
            ignored_groups.add(group_name)
            continue
        desired_groups[group_name] = group_entry(layout, group_name, group.gid,
                                                 members.get(group_name, set()))
        records[("group", group_name)] = Record("groups", group.id, group.ldap.modified_at)
        if _dirty(group.ldap, name):
            dirty_groups.add(group_name)

    # -- automount --------------------------------------------------------------------------
    mounted = await _automounted(name, storage_rows, notes)
    maps = {m.name: m for m in await AutomountMap.find({"site": name}).to_list()}
    desired_maps = {config.master_map: map_entry(layout, config.master_map)}
    automounts: dict[tuple[str, str], EntryState] = {}
    dirty_mounts: set[tuple[str, str]] = set()
    ignored_mounts: set[tuple[str, str]] = set()
    prefixes: dict[str, str] = {}
    for map_name in sorted(maps):
        amap = maps[map_name]
        if map_name == config.master_map:
            notes.append(f"automount map {map_name} has the master map's name; skipped")
            continue
        if amap.prefix in prefixes:
            notes.append(f"automount maps {prefixes[amap.prefix]} and {map_name} both mount "
                         f"{amap.prefix}; {map_name} left out of {config.master_map}")
            desired_maps[map_name] = map_entry(layout, map_name)
            continue
        prefixes[amap.prefix] = map_name
        desired_maps[map_name] = map_entry(layout, map_name)
        info = config.master_entry_format.format(dn=layout.map_dn(map_name), name=map_name)
        if extra := config.master_options.get(map_name):
            info = f"{info} {extra}"
        master_key = (config.master_map, amap.prefix)
        automounts[master_key] = automount_entry(layout, *master_key, info)
        dirty_mounts.add(master_key)  # master keys are few and always compared

    for resolved in mounted:
        storage = resolved.storage
        amap = resolved.automount_map
        if amap is None or amap.name not in desired_maps or amap.name == config.master_map:
            notes.append(f"storage {storage.name} ({storage.category}) uses automount map "
                         f"{storage.automount_map}, which is not defined at {name}")
            continue
        key = (amap.name, storage.mount_name or storage.name)
        if key in automounts or key in ignored_mounts:
            notes.append(f"storage {storage.name} ({storage.category}) skipped: key {key[1]} "
                         f"is already taken in {key[0]}")
            continue
        if storage.ldap.ignore:
            ignored_mounts.add(key)
            continue
        info = automount_info(resolved.host, resolved.host_path, resolved.mount_options,
                              config.host_suffix)
        automounts[key] = automount_entry(layout, key[0], key[1], info)
        records[("storage", f"{key[0]}/{key[1]}")] = Record("storages", storage.id,
                                                            storage.ldap.modified_at)
        synced = storage.ldap.synced.get(name)
        # The key also reads the map's options and the volume's host and path, whose
        # changes do not touch the storage: they count as changes since its watermark.
        inputs_changed = synced is not None and any(
            doc.updated_at > synced for doc in (amap, resolved.volume))
        if _dirty(storage.ldap, name) or inputs_changed:
            dirty_mounts.add(key)

    return DesiredState(
        site=name, layout=layout, users=desired_users, groups=desired_groups,
        maps=desired_maps, automounts=automounts, special_groups=frozenset(special),
        dirty_users=frozenset(dirty_users), former_users=frozenset(former),
        dirty_groups=frozenset(dirty_groups), dirty_automounts=frozenset(dirty_mounts),
        ignored_users=frozenset(ignored_users), ignored_groups=frozenset(ignored_groups),
        ignored_automounts=frozenset(ignored_mounts), store_users=frozenset(users),
        records=records, notes=tuple(notes))
