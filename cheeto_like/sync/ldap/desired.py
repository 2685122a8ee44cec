"""Desired LDAP state of one site, built from the store with a fixed number of queries.

What a site projects (the reference's rules, with its defects fixed):
- **Users** on the site (a ``UserSiteInfo``) get the global entry
  ``uid=<name>,<user_base>``: inetOrgPerson/posixAccount/ldapPublicKey/shadowAccount with
  ``{CRYPT}`` password, tagged SSH keys and ``shadowExpire`` from the global expiry.
  Nothing in it depends on the site that syncs it, so two sites never fight over it:
  a ``system`` user's extra root keys are the keys of the admins who may hold root
  (``access_policy``: ``root-ssh``, active, unexpired) at *any* site the system user is
  on (the reference used the syncing site's admins, so the last site to sync won). An
  expired SSH key is in no entry.
- **Groups** of the site: every access and status group (members: the site's users whose
  effective access includes it *and whose status there grants it* (``queries.
  access_policy``: active keeps every access, offboarding the ordinary ones, inactive,
  disabled or past ``expires_at`` none) / whose effective status is it), the personal group of
  each user on the site, every group with a membership edge or a storage at the site, and
  the site's sticky groups. Members are the users on the site with a ``member`` edge (all
  of them for a sticky group), written both as ``memberUid`` and as ``member`` DNs.
- **Automount**: one map per ``AutomountMap`` of the site (its own name), a master-map key
  per map (its own prefix), and one key per storage mounted through that map
  (``mount_name`` or name -> ``[-options ]host<suffix>:path``).

Incremental bookkeeping travels with the state: which records are dirty for this site
(``ldap.version`` equal to neither the record's own synced token nor the site's mark's,
``sync/ldap/mark.py``: no clock decides; or an expiry it depends on, its own, its site
record's or a key's, passed since then: expiry needs no write, so nothing else would
notice; a system user is dirty when any root-ssh admin is, for the same reasons),
``stale_at`` (the soonest expiry ahead: the mark keeps it, and an unchanged fingerprint
does not skip a run past it), users who left the site since they were last synced here (their
memberships must go), ignored records (never written or pruned), and each record's name
and the token this run read, which the watermark records (a later write moves it).

Reads: one ``$group`` per collection pushing the few fields the projection needs
(``models.base.columns``: SQL on the embedded store, no model, no ``_id``), and the heavy
user fields (password hash, names, home) only for the users whose entries are built. An
incremental run (``incremental=True``, with a mark) builds user entries only for the
dirty users and those the mark's roster does not know; group and automount entries are
built on first use (``Entries``), so a run that compares 10 groups builds 10.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ...config import LDAPConfig
from ...constants import DEFAULT_SHELL
from ...models import (
    AutomountMap,
    Group,
    GroupMembership,
    SshKey,
    Storage,
    StorageVolume,
    User,
    UserSiteInfo,
)
from ...models.base import columns, rows
from ...models.fields import utcnow
from ...queries import access_policy
from ...queries.site import get_site
from ...queries.storage import ResolvedStorage
from ...queries.user import effective_access, effective_status
from .mark import SiteMark, is_clean, ms
from .state import (
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
# read for every user (light) / only for the users whose entries are built (heavy)
USER_LIGHT = ("name", "type", "status", "access", "expires_at", "ldap.ignore",
              "ldap.version")
USER_HEAVY = ("name", "email", "uid", "gid", "fullname", "surname", "shell", "password",
              "home_directory", "expires_at")


@dataclass(frozen=True)
class Record:
    """A store document behind an entry: where to write its watermark, and the token
    (``ldap.version``; a storage's also names its map and volume) this run read: the
    watermark records that one, so a write committed later keeps it dirty. ``id`` is the
    record's natural key in its collection: a user's or group's name, a storage's
    ``<category>/<name>`` (at the site)."""

    collection: str
    id: str
    version: int | str


class Entries[K: Hashable](Mapping[K, EntryState]):
    """Every name the site projects, each entry built the first time it is asked for.

    Why: a site has 34k entries and an incremental run compares a handful; building all
    of them (DN escaping, frozensets of member DNs) was seconds of the run. Iterating,
    ``len`` and ``in`` never build anything."""

    def __init__(self, names: Iterable[K], build: Callable[[K], EntryState]) -> None:
        self._names = dict.fromkeys(names)
        self._build = build
        self._built: dict[K, EntryState] = {}

    def __getitem__(self, key: K) -> EntryState:
        if key not in self._names:
            raise KeyError(key)
        found = self._built.get(key)
        if found is None:
            found = self._built[key] = self._build(key)
        return found

    def __iter__(self) -> Iterator[K]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, key: object) -> bool:
        return key in self._names


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
    # user -> the site's groups listing them (None: derived from ``groups``)
    member_groups: Mapping[str, frozenset[str]] | None = None
    # the site mark's rosters ("users", "groups", "automounts" as "<map>/<key>") when the
    # run is incremental: the actual side then reads entries by name instead of listing
    known: Mapping[str, frozenset[str]] | None = None
    # the soonest expiry ahead among what the projection read (users, site records, keys):
    # the state goes stale then with no write (``SiteMark.stale_ms``)
    stale_at: datetime | None = None

    @property
    def dirty_records(self) -> frozenset[RecordKey]:
        return frozenset({("user", u) for u in self.dirty_users | self.former_users}
                         | {("group", g) for g in self.dirty_groups}
                         | {("storage", f"{m}/{k}") for m, k in self.dirty_automounts})

    def members(self, group: str) -> frozenset[str]:
        found = self.groups.get(group)
        return found.get("memberUid") if found else frozenset()

    def groups_of(self) -> Mapping[str, frozenset[str]]:
        """user -> the desired groups whose members include them."""
        if self.member_groups is not None:
            return self.member_groups
        found: dict[str, set[str]] = {}
        for name, want in self.groups.items():
            for member in want.get("memberUid"):
                found.setdefault(member, set()).add(name)
        return {u: frozenset(g) for u, g in found.items()}

    def known_names(self, kind: str) -> frozenset[str]:
        return (self.known or {}).get(kind, frozenset())


@dataclass(frozen=True, slots=True)
class _UserRow:
    """The user fields an entry is built from (the heavy read), straight from the store."""

    name: str
    email: str
    uid: int
    gid: int
    fullname: str
    surname: str | None
    shell: str
    password: str | None
    home_directory: str
    expires_at: datetime | None

    @classmethod
    def of(cls, raw: dict[str, Any]) -> _UserRow:
        return cls(raw["name"], raw["email"], int(raw["uid"]), int(raw["gid"]),
                   raw["fullname"], raw.get("surname"), raw.get("shell") or DEFAULT_SHELL,
                   raw.get("password"), raw["home_directory"], raw.get("expires_at"))


@dataclass(frozen=True, slots=True)
class _Light:
    """What every user, group or storage contributes to a run: flags, the values
    memberships derive from, and the times that say whether it changed."""

    name: str
    type: str
    status: str | None
    access: list[str]
    ignore: bool
    version: int
    own: int | str | None   # the record's own ldap.synced_version.<site> (a partial run's)
    stamp: datetime | None  # and when it was written (ldap.synced.<site>)
    expires_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class _SiteInfoRow:
    user: str
    site: str
    status: str | None
    access: list[str]
    expires_at: datetime | None = None

    @classmethod
    def of(cls, raw: dict[str, Any], site: str | None = None) -> _SiteInfoRow:
        return cls(raw["user"], site or raw["site"], raw.get("status"),
                   raw.get("access") or [], access_policy.as_utc(raw.get("expires_at")))


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

    name: str
    site: str
    category: str
    group: str
    volume: str
    subpath: str
    automount_map: str | None
    mount_name: str
    mount_overrides: _Overrides
    ignore: bool
    version: int
    own: int | str | None
    stamp: datetime | None
    static_mount: None = None

    @classmethod
    def of(cls, raw: dict[str, Any], site: str, synced: str, own: str) -> _StorageRow:
        over = raw.get("mount_overrides") or {}
        return cls(raw["name"], site, raw["category"], raw["group"],
                   raw["volume"], raw.get("subpath") or "", raw.get("automount_map"),
                   raw.get("mount_name") or "",
                   _Overrides(list(over.get("options") or []),
                              list(over.get("add_options") or []),
                              list(over.get("remove_options") or [])),
                   bool(raw.get("ldap.ignore")), _version(raw.get("ldap.version")),
                   _token(raw.get(own)), _stamp(raw.get(synced)))

    def token(self, amap: AutomountMap, volume: StorageVolume) -> str:
        """The storage's version and its map's and volume's last change (their options,
        host and path are in its key; they carry no version): compared for equality
        only, so no clock order decides."""
        return f"{self.version}|{ms(amap.updated_at)}|{ms(volume.updated_at)}"


def _version(value: Any) -> int:
    """A record's ``ldap.version`` (0 for records written before versions)."""
    return int(value) if isinstance(value, int) else 0


def _token(value: Any) -> int | str | None:
    return value if isinstance(value, str) else int(value) if isinstance(value, int) else None


def _stamp(value: Any) -> datetime | None:
    if not isinstance(value, datetime):
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _light(raw: dict[str, Any], synced: str, own: str) -> _Light:
    return _Light(raw["name"], raw.get("type") or "user", raw.get("status"),
                  list(raw.get("access") or []), bool(raw.get("ldap.ignore")),
                  _version(raw.get("ldap.version")), _token(raw.get(own)),
                  _stamp(raw.get(synced)),
                  access_policy.as_utc(raw.get("expires_at")))


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


def _key_text(key: _Key, prefix: bool) -> str:
    return key.authorized_keys_entry() if prefix else key.key


async def _keys_of(names: Iterable[str] | None, now: datetime) -> dict[str, list[_Key]]:
    """Unexpired SSH keys by user, oldest first: every user's (``None``) or those of
    ``names``."""
    if names is None:
        found = await columns(SshKey, {}, "user", "key", "created_at", "expires_at")
    else:
        wanted = sorted(set(names))
        found = await rows(SshKey, {"user": {"$in": wanted}}, "user", "key",
                           "created_at", "expires_at") if wanted else []
    keys: dict[str, list[_Key]] = {}
    for raw in sorted(found, key=lambda r: (r.get("created_at") or EPOCH, r["key"])):
        if access_policy.expired([raw.get("expires_at")], now):
            continue
        keys.setdefault(raw["user"], []).append(_Key(raw["user"], raw["key"]))
    return keys


def _root_admins(users: Mapping[str, _Light], admin_usis: list[_SiteInfoRow]) -> list[str]:
    """Admins whose access lists name ``root-ssh`` anywhere (globally or at a site): the
    ones whose changes or expiries can move a system user's keys."""
    listed = {n for n, u in users.items() if u.type == "admin" and ROOT_ACCESS in u.access}
    listed.update(usi.user for usi in admin_usis if ROOT_ACCESS in usi.access)
    return sorted(listed)


async def _root_keys(site: str, users: Mapping[str, _Light], systems: list[str],
                     admin_usis: list[_SiteInfoRow], prefix: bool,
                     now: datetime) -> dict[str, list[str]]:
    """system user on this site -> the unexpired keys of the admins who may hold root
    (``access_policy``) at any of its sites."""
    if not systems:
        return {}
    admins = _root_admins(users, admin_usis)
    keys = await _keys_of(admins, now) if admins else {}
    admins = [a for a in admins if keys.get(a)]
    if not admins:
        return {}
    usis = [_SiteInfoRow.of(r) for r in await rows(
        UserSiteInfo, {"user": {"$in": systems}}, "user", "site", "status", "access")]
    usis += [u for u in admin_usis if u.user in keys]
    sites_of: dict[str, set[str]] = {}
    holders: dict[str, set[str]] = {}  # site -> admins who may hold root there
    for usi in usis:
        user = users.get(usi.user)
        if user is None:
            continue
        if user.type == "system":
            sites_of.setdefault(usi.user, set()).add(usi.site)
        if user.type == "admin" and access_policy.grants(
                effective_status(user, usi), effective_access(user, usi),
                (user.expires_at, usi.expires_at), now, ROOT_ACCESS):
            holders.setdefault(usi.site, set()).add(usi.user)
    found: dict[str, list[str]] = {}
    for system in systems:
        granted = set().union(*(holders.get(s, set()) for s in sites_of.get(system, {site})))
        found[system] = [_key_text(k, prefix) for admin in sorted(granted)
                         for k in keys.get(admin, [])]
    return found


async def desired_state(site_name: str, config: LDAPConfig, *, mark: SiteMark | None = None,
                        incremental: bool = False) -> DesiredState:
    """The site's desired entries. ``mark``: the site's watermark (dirty = covered by
    neither the record's own token nor the mark). ``incremental`` (needs ``mark``): build
    user entries only for dirty users and users the mark's roster does not know, and let
    the actual side read by name (``known``)."""
    site = await get_site(site_name)
    name = site.name
    layout = Layout.for_site(config, name)
    notes: list[str] = []
    prefix = config.ssh_user_prefix
    records: dict[RecordKey, Record] = {}
    synced = f"ldap.synced.{name}"
    own_path = f"ldap.synced_version.{name}"
    incremental = incremental and mark is not None
    heavy = () if incremental else tuple(f for f in USER_HEAVY[1:] if f not in USER_LIGHT)
    now = utcnow()
    through = None if mark is None else datetime.fromtimestamp(mark.through_ms / 1000, UTC)

    def dirty(key: RecordKey, token: int | str, mine: int | str | None) -> bool:
        return not is_clean(key, token, mine, mark)

    def covered_at(key: RecordKey, token: int | str, mine: int | str | None,
                   stamp: datetime | None) -> datetime | None:
        """When the directory was last brought in line with this record as it is now
        (its own stamp, or the mark's time when the mark covers it): for expiries only."""
        found = stamp if stamp is not None and mine == token else None
        if through is not None and mark is not None and mark.covers(key, token):
            found = through if found is None else max(found, through)
        return found

    def crossed(times: Iterable[datetime | None], since: datetime | None) -> bool:
        """An expiry passed after ``since`` (and by now): the projection changed with
        no write, so the record is dirty although its stamps cover it."""
        return since is not None and any(t is not None and since < t <= now for t in times)

    # independent reads, in flight together (the store's work overlaps with decoding)
    usi_rows, user_rows, group_rows, edges, storage_rows, key_rows = await asyncio.gather(
        columns(UserSiteInfo, {"site": name}, "user", "status", "access", "expires_at"),
        columns(User, {}, *USER_LIGHT, own_path, synced, *heavy),
        columns(Group, {}, "name", "gid", "type", "shorthand", "ldap.ignore",
                "ldap.version", own_path, synced),
        columns(GroupMembership, {"site": name}, "user", "group", "roles"),
        columns(Storage, {"site": name}, "name", "category", "group", "volume", "subpath",
                "automount_map", "mount_name", "mount_overrides", "ldap.ignore",
                "ldap.version", own_path, synced),
        columns(SshKey, {}, "user", "expires_at"))  # keys' expiries (few keys have one)
    usis = {r["user"]: _SiteInfoRow.of(r, name) for r in usi_rows}
    users = {r["name"]: _light(r, synced, own_path) for r in user_rows}
    key_expiries: dict[str, list[datetime]] = {}
    for raw in key_rows:
        if (when := access_policy.as_utc(raw.get("expires_at"))) is not None:
            key_expiries.setdefault(raw["user"], []).append(when)
    admins = sorted(n for n, u in users.items() if u.type == "admin")
    admin_usis = [_SiteInfoRow.of(r) for r in await rows(
        UserSiteInfo, {"user": {"$in": admins}}, "user", "site", "status", "access",
        "expires_at")] if admins else []

    def expiries_of(user_name: str, usi: _SiteInfoRow | None) -> list[datetime | None]:
        user = users[user_name]
        return [user.expires_at, usi.expires_at if usi else None,
                *key_expiries.get(user_name, ())]
    groups = {r["name"]: (_light(r, synced, own_path), int(r["gid"]), r.get("shorthand"))
              for r in group_rows}

    # -- users ------------------------------------------------------------------------------
    on_site: set[str] = set()
    for user_name in sorted(usis):
        if user_name in users:
            on_site.add(user_name)
        else:
            notes.append(f"site record of unknown user {user_name} skipped")
    wanted_users: list[str] = []
    ignored_users, dirty_users, former = set(), set(), set()
    ahead: list[datetime | None] = []  # expiries the projection depends on (stale_at)
    for user_name in sorted(on_site):
        user = users[user_name]
        if user.ignore:
            ignored_users.add(user_name)
            continue
        wanted_users.append(user_name)
        records[("user", user_name)] = Record("users", user_name, user.version)
        times = expiries_of(user_name, usis[user_name])
        ahead.extend(times)
        if dirty(("user", user_name), user.version, user.own) or crossed(
                times, covered_at(("user", user_name), user.version, user.own, user.stamp)):
            dirty_users.add(user_name)
    # system users carry the root admins' keys: an admin's change or passing expiry
    # (their own, a site record's, a key's) moves every system user's entry
    root_admins = _root_admins(users, admin_usis)
    if root_admins and any(users[n].type == "system" for n in wanted_users):
        admin_times = [t for a in root_admins
                       for t in (*expiries_of(a, None),
                                 *(u.expires_at for u in admin_usis if u.user == a))]
        ahead.extend(admin_times)
        admin_moved = any(dirty(("user", a), users[a].version, users[a].own)
                          for a in root_admins)
        for user_name in wanted_users:
            user = users[user_name]
            if user.type == "system" and (admin_moved or crossed(
                    admin_times, covered_at(("user", user_name), user.version, user.own,
                                            user.stamp))):
                dirty_users.add(user_name)
    for user_name, user in users.items():
        if user_name not in on_site and not user.ignore and user.own is not None \
                and dirty(("user", user_name), user.version, user.own):
            former.add(user_name)
            records[("user", user_name)] = Record("users", user_name, user.version)
    if incremental and mark is not None:
        # on the site at the last run and no longer (taken off, or gone from the store)
        for user_name in mark.roster("users") - on_site:
            user = users.get(user_name)
            if user is not None and user.ignore:
                continue
            former.add(user_name)
            if user is not None:
                records[("user", user_name)] = Record("users", user_name, user.version)
        built = sorted(dirty_users | (set(wanted_users) - mark.roster("users")))
    else:
        built = wanted_users

    if incremental:
        details = {r["name"]: _UserRow.of(r) for r in await rows(
            User, {"name": {"$in": built}}, *USER_HEAVY)} if built else {}
        keys = await _keys_of(built, now)
    else:
        details = {r["name"]: _UserRow.of(r) for r in user_rows if r["name"] in on_site}
        keys = await _keys_of(None, now)
    systems = sorted(n for n in built if users[n].type == "system")
    root_keys = await _root_keys(name, users, systems, admin_usis, prefix, now)
    user_entries: dict[str, EntryState] = {}
    for user_name in built:
        row = details.get(user_name)
        if row is None:  # gone between the two reads: the next run sees it
            continue
        own = [_key_text(k, prefix) for k in keys.get(user_name, [])]
        user_entries[user_name] = user_entry(layout, row, own + root_keys.get(user_name, []))

    def build_user(user_name: str) -> EntryState:
        return user_entries[user_name]

    # -- groups -----------------------------------------------------------------------------
    members: dict[str, set[str]] = {}
    wanted: set[str] = set()
    for edge in edges:
        if edge["user"] not in on_site:
            continue
        wanted.add(edge["group"])
        if "member" in (edge.get("roles") or ()):
            members.setdefault(edge["group"], set()).add(edge["user"])
    for sticky in site.group.sticky:
        wanted.add(sticky)
        members.setdefault(sticky, set()).update(on_site)
    special = {g for g, (row, _, _) in groups.items() if row.type in ("access", "status")}
    by_shorthand = {(row.type, shorthand): g for g, (row, _, shorthand) in groups.items()
                    if shorthand}
    wanted |= special
    for user_name in on_site:
        user, usi = users[user_name], usis[user_name]
        # access groups grant access: only what the status there allows (access_policy);
        # the stored lists are untouched, so a reactivated person gets theirs back
        for access in access_policy.granted(effective_status(user, usi),
                                            effective_access(user, usi),
                                            (user.expires_at, usi.expires_at), now):
            group_name = by_shorthand.get(("access", access))
            if group_name:
                members.setdefault(group_name, set()).add(user_name)
        status = effective_status(user, usi)
        if status and (group_name := by_shorthand.get(("status", status))):
            members.setdefault(group_name, set()).add(user_name)
        personal = groups.get(user_name)
        if personal is not None and personal[0].type == "user":
            wanted.add(user_name)

    wanted.update(r["group"] for r in storage_rows)

    wanted_groups: list[str] = []
    ignored_groups, dirty_groups = set(), set()
    for group_name in sorted(wanted):
        found = groups.get(group_name)
        if found is None:
            notes.append(f"group {group_name} is referenced at {name} but does not exist")
            continue
        row = found[0]
        if row.ignore:
            ignored_groups.add(group_name)
            continue
        wanted_groups.append(group_name)
        records[("group", group_name)] = Record("groups", group_name, row.version)
        if dirty(("group", group_name), row.version, row.own):
            dirty_groups.add(group_name)

    def build_group(group_name: str) -> EntryState:
        return group_entry(layout, group_name, groups[group_name][1],
                           members.get(group_name, set()))

    member_groups: dict[str, set[str]] = {}
    for group_name in wanted_groups:
        for member in members.get(group_name, ()):
            member_groups.setdefault(member, set()).add(group_name)

    # -- automount --------------------------------------------------------------------------
    volume_docs, map_docs = await asyncio.gather(
        StorageVolume.find({"site": name}).to_list(), AutomountMap.find({"site": name}).to_list())
    volumes = {v.name: v for v in volume_docs}
    maps = {m.name: m for m in map_docs}
    desired_maps = {config.master_map: map_entry(layout, config.master_map)}
    infos: dict[tuple[str, str], str] = {}
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
        infos[master_key] = info
        dirty_mounts.add(master_key)  # master keys are few and always compared

    for raw in sorted(storage_rows, key=lambda r: (r["category"], r["name"])):
        if not raw.get("automount_map"):
            continue
        storage = _StorageRow.of(raw, name, synced, own_path)
        volume = volumes.get(storage.volume)
        if volume is None:
            notes.append(f"storage {storage.name} skipped: volume {storage.volume} is missing")
            continue
        amap = maps.get(storage.automount_map or "")
        if amap is None or amap.name not in desired_maps or amap.name == config.master_map:
            notes.append(f"storage {storage.name} ({storage.category}) uses automount map "
                         f"{storage.automount_map}, which is not defined at {name}")
            continue
        key = (amap.name, storage.mount_name or storage.name)
        if key in infos or key in ignored_mounts:
            notes.append(f"storage {storage.name} ({storage.category}) skipped: key {key[1]} "
                         f"is already taken in {key[0]}")
            continue
        if storage.ignore:
            ignored_mounts.add(key)
            continue
        resolved = ResolvedStorage(storage=storage, volume=volume,  # type: ignore[arg-type]
                                   automount_map=amap)
        infos[key] = automount_info(resolved.host, resolved.host_path,
                                    resolved.mount_options, config.host_suffix)
        record_key = ("storage", f"{key[0]}/{key[1]}")
        # the key also reads the map's options and the volume's host and path, whose
        # changes do not touch the storage: its token names them (``_StorageRow.token``)
        token = storage.token(amap, volume)
        records[record_key] = Record("storages", f"{storage.category}/{storage.name}", token)
        if dirty(record_key, token, storage.own):
            dirty_mounts.add(key)

    def build_key(key: tuple[str, str]) -> EntryState:
        return automount_entry(layout, key[0], key[1], infos[key])

    return DesiredState(
        site=name, layout=layout,
        users=Entries(wanted_users, build_user) if incremental else
        {u: user_entries[u] for u in wanted_users if u in user_entries},
        groups=Entries(wanted_groups, build_group),
        maps=desired_maps, automounts=Entries(sorted(infos), build_key),
        special_groups=frozenset(special),
        dirty_users=frozenset(dirty_users), former_users=frozenset(former),
        dirty_groups=frozenset(dirty_groups), dirty_automounts=frozenset(dirty_mounts),
        ignored_users=frozenset(ignored_users), ignored_groups=frozenset(ignored_groups),
        ignored_automounts=frozenset(ignored_mounts), store_users=frozenset(users),
        records=records, notes=tuple(notes),
        member_groups={u: frozenset(g) for u, g in member_groups.items()},
        known=dict(mark.rosters) if incremental and mark is not None else None,
        stale_at=access_policy.soonest(ahead, now))
