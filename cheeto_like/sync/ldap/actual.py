"""Actual LDAP state of one site: read with explicit attribute lists, scoped to what the
run looks at, and parsed into the same ``EntryState`` shapes as the desired side.

A run without a site mark (and every ``--full`` run) lists the DNs under the user base
and the site's groups OU and reads the site's automount keys, so missing and stray
entries are seen; entries in focus are read in full: all of them with ``--full``,
otherwise the dirty ones, fetched by name in OR-filters. An incremental run with a mark
(``desired.known``) lists nothing: it reads by name the entries in focus and those the
mark knows that left the store (``Focus.prune_*``), and the containers (a few entries).
Memberships of users in focus come from two searches per user
(``memberUid=<name>``, ``member=<dn>``), or, when many users are in focus, from one read
of every group of the site. Every filter value is RFC 4515-escaped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence

from ...adapters.ldap import (
    Directory,
    Entry,
    escape_filter_value,
    normalize_dn,
    parent_dn,
    parse_dn,
)
from .desired import DesiredState
from .plan import ActualState, Focus, Scope
from .state import AUTOMOUNT_ATTRS, GROUP_ATTRS, USER_ATTRS, EntryState, Kind, attr_names

CHUNK = 50  # names per OR-filter


def parse_entry(kind: Kind, found: Entry) -> EntryState:
    """The managed attributes of ``found`` (canonical names), unmanaged ones ignored."""
    attrs: dict[str, frozenset[str]] = {}
    for name in attr_names(kind):
        values = found.get(name)
        if values:
            attrs[name] = frozenset(values)
    return EntryState(kind, found.dn, tuple(found.get("objectClass")), attrs)


def entry_name(found: Entry, attr: str) -> str | None:
    """The entry's name: its RDN value when the RDN is ``attr``, else the attribute."""
    values = found.get(attr)
    if len(values) == 1 and found.dn.lower().startswith(f"{attr.lower()}="):
        return values[0]  # the usual case: a single value, which is the RDN's
    try:
        first = parse_dn(found.dn)[0][0]
    except (ValueError, IndexError):
        return found.first(attr)
    if first[0].lower() == attr.lower():
        return first[1]
    return found.first(attr)


def _or_filter(attr: str, names: Sequence[str]) -> str:
    terms = "".join(f"({attr}={escape_filter_value(n)})" for n in names)
    return terms if len(names) == 1 else f"(|{terms})"


def _chunks(names: Iterable[str]) -> list[list[str]]:
    ordered = sorted(names)
    return [ordered[i:i + CHUNK] for i in range(0, len(ordered), CHUNK)]


class _Reader:
    def __init__(self, directory: Directory, desired: DesiredState) -> None:
        self.d = directory
        self.desired = desired
        self.layout = desired.layout
        self.notes: list[str] = []

    def index(self, entries: list[Entry], attr: str, what: str) -> dict[str, Entry]:
        found: dict[str, Entry] = {}
        for item in entries:
            name = entry_name(item, attr)
            if name is None:
                continue
            if name in found:
                self.notes.append(f"two {what} entries named {name}: {found[name].dn} and "
                                  f"{item.dn} (only the first is managed)")
                continue
            found[name] = item
        return found

    async def containers(self) -> tuple[frozenset[str], dict[str, str]]:
        present: set[str] = set()
        maps: dict[str, str] = {}
        users = await self.d.get(self.layout.users, ["objectClass"])
        if users is not None:
            present.add(normalize_dn(users.dn))
        automount = normalize_dn(self.layout.automount)
        for item in await self.d.search(
                self.layout.site_dn, "sub",
                "(|(objectClass=organizationalUnit)(objectClass=automountMap))",
                ["objectClass", "automountMapName"]):
            present.add(normalize_dn(item.dn))
            if "automountmap" in item.object_classes and _parent(item.dn) == automount:
                name = entry_name(item, "automountMapName")
                if name is not None:
                    maps[name] = item.dn
        return frozenset(present), maps

    async def by_name(self, base: str, attr: str, names: Iterable[str],
                      attrs: Sequence[str]) -> list[Entry]:
        batches = await asyncio.gather(*(
            self.d.search(base, "one", _or_filter(attr, chunk), attrs)
            for chunk in _chunks(names)))
        return [item for batch in batches for item in batch]

    async def users(self, seen: Focus) -> tuple[dict[str, Entry], dict[str, EntryState]]:
        full_attrs = ["objectClass", *USER_ATTRS]
        if seen.read_all_users:
            listing = self.index(await self.d.search(self.layout.users, "one",
                                                     "(objectClass=*)", full_attrs),
                                 "uid", "user")
            return listing, {n: parse_entry("user", e) for n, e in listing.items()}
        listing = self.index(await self.d.search(self.layout.users, "one", "(objectClass=*)",
                                                 ["uid", "objectClass"]), "uid", "user")
        wanted = [n for n in seen.users if n in listing]
        read = self.index(await self.by_name(self.layout.users, "uid", wanted, full_attrs),
                          "uid", "user")
        return listing, {n: parse_entry("user", e) for n, e in read.items() if n in wanted}

    async def groups(self, seen: Focus, read_all: bool
                     ) -> tuple[dict[str, Entry], dict[str, EntryState]]:
        full_attrs = ["objectClass", *GROUP_ATTRS]
        if read_all:
            listing = self.index(await self.d.search(self.layout.groups, "one",
                                                     "(objectClass=*)", full_attrs),
                                 "cn", "group")
            return listing, {n: parse_entry("group", e) for n, e in listing.items()}
        listing = self.index(await self.d.search(self.layout.groups, "one", "(objectClass=*)",
                                                 ["cn", "objectClass"]), "cn", "group")
        wanted = [n for n in seen.groups if n in listing]
        read = self.index(await self.by_name(self.layout.groups, "cn", wanted, full_attrs),
                          "cn", "group")
        return listing, {n: parse_entry("group", e) for n, e in read.items() if n in wanted}

    def memberships_from(self, groups: dict[str, EntryState], users: Iterable[str]
                         ) -> dict[str, tuple[frozenset[str], frozenset[str]]]:
        wanted = set(users)
        by_uid: dict[str, set[str]] = {u: set() for u in wanted}
        by_dn: dict[str, set[str]] = {u: set() for u in wanted}
        dn_of = {normalize_dn(self.layout.user_dn(u)): u for u in wanted}
        for name, group in groups.items():
            for uid in group.get("memberUid"):
                if uid in wanted:
                    by_uid[uid].add(name)
            for dn in group.get("member"):
                try:
                    user = dn_of.get(normalize_dn(dn))
                except ValueError:
                    continue
                if user is not None:
                    by_dn[user].add(name)
        return {u: (frozenset(by_uid[u]), frozenset(by_dn[u])) for u in wanted}

    async def memberships_of(self, users: Iterable[str]
                             ) -> dict[str, tuple[frozenset[str], frozenset[str]]]:
        names = sorted(users)

        async def groups_matching(assertion: str) -> frozenset[str]:
            found = await self.d.search(self.layout.groups, "one", assertion, ["1.1"])
            return frozenset(n for n in (entry_name(e, "cn") for e in found) if n)

        results = await asyncio.gather(*(
            groups_matching(f"(memberUid={escape_filter_value(u)})") for u in names),
            *(groups_matching(f"(member={escape_filter_value(self.layout.user_dn(u))})")
              for u in names))
        half = len(names)
        return {u: (results[i], results[half + i]) for i, u in enumerate(names)}

    async def named(self, seen: Focus, maps: dict[str, str]
                    ) -> tuple[dict[str, Entry], dict[str, EntryState], dict[str, Entry],
                               dict[str, EntryState], dict[tuple[str, str], EntryState]]:
        """An incremental run's reads: users, groups and automount keys by name."""
        user_names = sorted(seen.users | seen.prune_users)
        group_names = sorted(seen.groups | seen.prune_groups)
        by_map: dict[str, list[str]] = {}
        for map_name, key in sorted(seen.automounts | seen.prune_automounts):
            if map_name in maps:
                by_map.setdefault(map_name, []).append(key)
        found_users, found_groups, *found_keys = await asyncio.gather(
            self.by_name(self.layout.users, "uid", user_names, ["objectClass", *USER_ATTRS]),
            self.by_name(self.layout.groups, "cn", group_names,
                         ["objectClass", *GROUP_ATTRS]),
            *(self.by_name(maps[m], "automountKey", keys, ["objectClass", *AUTOMOUNT_ATTRS])
              for m, keys in by_map.items()))
        user_index = self.index(found_users, "uid", "user")
        group_index = self.index(found_groups, "cn", "group")
        automounts: dict[tuple[str, str], EntryState] = {}
        for map_name, batch in zip(by_map, found_keys, strict=True):
            for item in batch:
                key = entry_name(item, "automountKey")
                if key is not None:
                    automounts.setdefault((map_name, key), parse_entry("automount", item))
        return (user_index, {n: parse_entry("user", e) for n, e in user_index.items()},
                group_index, {n: parse_entry("group", e) for n, e in group_index.items()},
                automounts)

    async def automounts(self, maps: dict[str, str]) -> dict[tuple[str, str], EntryState]:
        """The keys of every map of the site (one search per map)."""
        found: dict[tuple[str, str], EntryState] = {}
        names = sorted(maps)
        batches = await asyncio.gather(*(
            self.d.search(maps[name], "one", "(objectClass=automount)",
                          ["objectClass", *AUTOMOUNT_ATTRS]) for name in names))
        for name, batch in zip(names, batches, strict=True):
            for item in batch:
                key = entry_name(item, "automountKey")
                if key is not None:
                    found.setdefault((name, key), parse_entry("automount", item))
        return found


def _parent(dn: str) -> str:
    try:
        return normalize_dn(parent_dn(dn))
    except ValueError:
        return ""


async def actual_state(directory: Directory, desired: DesiredState, scope: Scope,
                       seen: Focus) -> ActualState:
    reader = _Reader(directory, desired)
    kinds = set(scope.kinds)
    prune = scope.prune if "prune" in kinds else frozenset()
    containers, maps = await reader.containers()
    if desired.known is not None and not scope.bootstrap:
        return await _incremental(reader, desired, scope, seen, containers, maps)
    user_index: dict[str, Entry] = {}
    users: dict[str, EntryState] = {}
    if "users" in kinds or "users" in prune:
        user_index, users = await reader.users(seen)
    group_index: dict[str, Entry] = {}
    groups: dict[str, EntryState] = {}
    memberships: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
    if kinds & {"users", "groups"} or "groups" in prune or scope.bootstrap:
        group_index, groups = await reader.groups(seen, seen.read_all_groups)
        if seen.member_users:
            if seen.read_all_groups:
                memberships = reader.memberships_from(groups, seen.member_users)
            else:
                memberships = await reader.memberships_of(seen.member_users)
    automounts: dict[tuple[str, str], EntryState] = {}
    if "automounts" in kinds or "automounts" in prune:
        automounts = await reader.automounts(maps)
    return ActualState(containers=containers, user_index=user_index, group_index=group_index,
                       users=users, groups=groups, memberships=memberships, maps=maps,
                       automounts=automounts, notes=tuple(reader.notes))


async def _incremental(reader: _Reader, desired: DesiredState, scope: Scope, seen: Focus,
                       containers: frozenset[str], maps: dict[str, str]) -> ActualState:
    kinds = set(scope.kinds)
    if seen.read_all_groups:  # many users' memberships: one read of every group is cheaper
        group_index, groups = await reader.groups(seen, True)
        user_index, users, _, _, automounts = await reader.named(
            Focus(users=seen.users, prune_users=seen.prune_users,
                  automounts=seen.automounts, prune_automounts=seen.prune_automounts), maps)
        memberships = reader.memberships_from(groups, seen.member_users)
    else:
        user_index, users, group_index, groups, automounts = await reader.named(seen, maps)
        memberships = await reader.memberships_of(seen.member_users) \
            if seen.member_users and kinds & {"users", "groups"} else {}
    return ActualState(containers=containers, user_index=user_index, group_index=group_index,
                       users=users, groups=groups, memberships=memberships, maps=maps,
                       automounts=automounts, notes=tuple(reader.notes))


async def read_memberships(directory: Directory, desired: DesiredState, users: Iterable[str]
                           ) -> dict[str, tuple[frozenset[str], frozenset[str]]]:
    """For each user: the site's groups listing them by memberUid, and by member DN."""
    return await _Reader(directory, desired).memberships_of(users)
