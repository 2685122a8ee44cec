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

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from beanie.operators import In
from pydantic import BaseModel, Field

from ..config import LDAPConfig
from ..errors import NotFound
from ..models import AutomountMap, Group, GroupMembership, SshKey, Storage, User, UserSiteInfo
from ..models.base import LDAPInfo
from ..queries.site import get_site
from ..queries.storage import ResolvedStorage, resolve_storages
from ..queries.user import effective_access, effective_status
from .ldap_state import (
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

    def members(self, group: str) -> frozenset[str]:
        found = self.groups.get(group)
        return found.get("memberUid") if found else frozenset()


class _UserView(BaseModel):
    """The user fields the projection reads (a projection: 10k full users parse slowly)."""

    id: str = Field(alias="_id")
    name: str
    email: str
    uid: int
    gid: int
    fullname: str
    surname: str | None = None
    shell: str
    type: str = "user"
    status: str | None = None
    password: str | None = None
    access: list[str] = Field(default_factory=list)
    home_directory: str
    expires_at: datetime | None = None
    ldap: LDAPInfo = Field(default_factory=LDAPInfo)


class _SiteInfoView(BaseModel):
    user: str
    site: str
    status: str | None = None
    access: list[str] = Field(default_factory=list)


class _GroupView(BaseModel):
    id: str = Field(alias="_id")
    name: str
    gid: int
    type: str = "group"
    shorthand: str | None = None
    ldap: LDAPInfo = Field(default_factory=LDAPInfo)


class _EdgeView(BaseModel):
    user: str
    group: str
    roles: list[str]


def user_entry(layout: Layout, user: _UserView, keys: list[str]) -> EntryState:
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


def _dirty(info: LDAPInfo, site: str) -> bool:
    return info.needs_sync(site)


def _key_text(key: SshKey, prefix: bool) -> str:
    return key.authorized_keys_entry() if prefix else key.key


async def _root_keys(site: str, users: dict[str, _UserView], on_site: set[str],
                     keys: dict[str, list[SshKey]], prefix: bool) -> dict[str, list[str]]:
    """system user on this site -> the keys of admins with root-ssh at any of its sites."""
    systems = sorted(n for n in on_site if users[n].type == "system")
    admins = sorted(n for n, u in users.items() if u.type == "admin" and keys.get(n))
    if not systems or not admins:
        return {}
    usis = await UserSiteInfo.find(In(UserSiteInfo.user, systems + admins),
                                   projection_model=_SiteInfoView).to_list()
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


async def _resolve(storages: list[Storage], notes: list[str]) -> list[ResolvedStorage]:
    """Resolve in one batch; a broken record (its volume is gone) is noted and skipped
    rather than stopping the site's sync."""
    try:
        return await resolve_storages(storages)
    except NotFound:
        resolved = []
        for storage in storages:
            try:
                resolved.extend(await resolve_storages([storage]))
            except NotFound as exc:
                notes.append(f"storage {storage.name} skipped: {exc.message}")
        return resolved


async def desired_state(site_name: str, config: LDAPConfig) -> DesiredState:
    site = await get_site(site_name)
    name = site.name
    layout = Layout.for_site(config, name)
    notes: list[str] = []
    prefix = config.ssh_user_prefix
    records: dict[RecordKey, Record] = {}

    usis = {u.user: u for u in await UserSiteInfo.find(
        {"site": name}, projection_model=_SiteInfoView).to_list()}
    users = {u.name: u for u in await User.find({}, projection_model=_UserView).to_list()}
    groups = {g.name: g for g in await Group.find({}, projection_model=_GroupView).to_list()}
    edges = await GroupMembership.find({"site": name}, projection_model=_EdgeView).to_list()
    keys: dict[str, list[SshKey]] = {}
    for key in await SshKey.find({}).sort(+SshKey.created_at).to_list():
        keys.setdefault(key.user, []).append(key)

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
        if edge.user not in on_site:
            continue
        wanted.add(edge.group)
        if "member" in edge.roles:
            members.setdefault(edge.group, set()).add(edge.user)
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

    storages = await Storage.find({"site": name}).sort(+Storage.name).to_list()
    wanted.update(s.group for s in storages)

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

    mounted = [s for s in storages if s.automount_map]
    for resolved in await _resolve(mounted, notes):
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
