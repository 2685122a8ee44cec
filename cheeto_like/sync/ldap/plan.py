"""The pure half of the LDAP sync: ``focus`` (what a run looks at) and
``plan(desired, actual, scope) -> Plan``.

No I/O. A run compares in full only the records in focus: in an incremental run the
records that are dirty for the site, with ``--full`` all of them. A run without a site
mark, and every ``--full`` run, lists the DNs under the site's bases, so a missing entry
is re-added and a stray one pruned even when nothing in the store changed. An incremental
run with a mark (``desired.known``: what the last whole-site run left in the directory)
reads by name only what changed: the dirty records, the records the mark does not know
(new at the site) and those it knows that are gone from the store (pruned); a hand-made
change to an entry whose record did not change waits for ``--full``. Users whose
memberships are in focus but whose groups are not have their own values patched in those
groups (one ``memberUid``/``member`` value each), never the whole member list.

Plan order: containers (parents first) -> user adds, updates, recreations -> group adds,
updates, recreations -> automount key adds and updates -> deletes (automount keys, maps,
groups, users). Everything a later step refers to exists first; deletes go last and are
skipped when anything before them failed. Each change is one LDAP write (a recreation is
two), so the plan's counts are the run's write counts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from ...adapters.ldap import Entry, Mod, normalize_dn
from .desired import DesiredState
from .state import (
    INCREMENTAL_ATTRS,
    STRUCTURAL,
    EntryState,
    Kind,
    Layout,
    RecordKey,
    attr_names,
    compare_key,
    ou_entry,
)

KINDS = ("users", "groups", "automounts")
PRUNE_KINDS = ("users", "groups", "automounts")
# Above this many users whose memberships are in focus, reading every group of the site
# once is cheaper than two searches per user.
MEMBER_SEARCH_LIMIT = 64

Op = Literal["add", "modify", "delete", "recreate"]
BatchKind = Literal["add", "modify", "recreate", "delete"]
BATCH_ORDER: tuple[tuple[str, BatchKind], ...] = (
    ("add containers", "add"),
    ("add users", "add"),
    ("update users", "modify"),
    ("recreate users", "recreate"),
    ("add groups", "add"),
    ("update groups", "modify"),
    ("recreate groups", "recreate"),
    ("add automount keys", "add"),
    ("update automount keys", "modify"),
    ("delete automount keys", "delete"),
    ("delete automount maps", "delete"),
    ("delete groups", "delete"),
    ("delete users", "delete"),
)
SEQUENTIAL_BATCHES = frozenset({"add containers"})  # parents before children
# attributes whose dropped values count as removals (the deletion cap and daily budget):
# losing one locks someone out of a group or a login, like deleting an entry would
REMOVAL_ATTRS = ("memberUid", "member", "sshPublicKey")


@dataclass(frozen=True)
class Scope:
    """What one run covers.

    ``kinds``: any of users, groups, automounts, prune. ``prune``: which kinds a prune
    deletes. ``only_users``/``only_groups``: a single-record run (sync-user, sync-group).
    ``full``: compare every record, not only dirty ones. ``force``: recreate the entries
    in focus. ``bootstrap``: only create what is missing among the containers and the
    access and status groups.
    """

    kinds: frozenset[str] = frozenset(KINDS)
    prune: frozenset[str] = frozenset(PRUNE_KINDS)
    full: bool = False
    force: bool = False
    only_users: frozenset[str] | None = None
    only_groups: frozenset[str] | None = None
    bootstrap: bool = False
    protected_users: frozenset[str] = frozenset({"admin"})


@dataclass(frozen=True)
class Focus:
    """The records a run compares in full, and what the actual side must read for it."""

    users: frozenset[str] = frozenset()         # user entries compared
    member_users: frozenset[str] = frozenset()  # users whose memberships are patched
    groups: frozenset[str] = frozenset()        # group entries compared (full member list)
    automounts: frozenset[tuple[str, str]] = frozenset()
    read_all_users: bool = False
    read_all_groups: bool = False
    # incremental runs with a mark: entries the mark knows that are no longer desired
    prune_users: frozenset[str] = frozenset()
    prune_groups: frozenset[str] = frozenset()
    prune_automounts: frozenset[tuple[str, str]] = frozenset()

    @property
    def records(self) -> frozenset[RecordKey]:
        """The store records this run brings up to date (watermarks, when all went well)."""
        return frozenset({("user", u) for u in self.users | self.member_users}
                         | {("group", g) for g in self.groups}
                         | {("storage", f"{m}/{k}") for m, k in self.automounts})


def _split_key(text: str) -> tuple[str, str]:
    map_name, _, key = text.partition("/")
    return map_name, key


def focus(desired: DesiredState, scope: Scope) -> Focus:
    if scope.bootstrap:
        return Focus()
    full_or_force = scope.full or scope.force
    known = desired.known
    new_users = frozenset(desired.users) - desired.known_names("users") if known else frozenset()
    users: set[str] = set()
    member_users: set[str] = set()
    if "users" in scope.kinds:
        candidates = scope.only_users
        for name in desired.users:
            if candidates is not None and name not in candidates:
                continue
            if full_or_force or name in desired.dirty_users or name in new_users:
                users.add(name)
        member_users = set(users)
        leavers = desired.former_users if candidates is None else (
            {u for u in candidates if u not in desired.users
             and u not in desired.ignored_users
             and (full_or_force or u in desired.former_users)})
        member_users |= set(leavers)
    groups: set[str] = set()
    if "groups" in scope.kinds:
        candidates = scope.only_groups
        new_groups = frozenset(desired.groups) - desired.known_names("groups") if known \
            else frozenset()
        for name in desired.groups:
            if candidates is not None and name not in candidates:
                continue
            if full_or_force or name in desired.dirty_groups or name in new_groups:
                groups.add(name)
    automounts: set[tuple[str, str]] = set()
    known_keys = {_split_key(k) for k in desired.known_names("automounts")}
    if "automounts" in scope.kinds:
        automounts = {k for k in desired.automounts
                      if scope.full or k in desired.dirty_automounts
                      or (known is not None and k not in known_keys)}
    whole_site = scope.only_users is None and scope.only_groups is None
    prune_users: frozenset[str] = frozenset()
    prune_groups: frozenset[str] = frozenset()
    prune_keys: frozenset[tuple[str, str]] = frozenset()
    if known is not None and whole_site and "prune" in scope.kinds:
        if "users" in scope.prune:
            prune_users = frozenset(u for u in desired.known_names("users")
                                    if u not in desired.store_users
                                    and u not in scope.protected_users)
        if "groups" in scope.prune:
            prune_groups = frozenset(g for g in desired.known_names("groups")
                                     if g not in desired.groups
                                     and g not in desired.ignored_groups)
        if "automounts" in scope.prune:
            prune_keys = frozenset(k for k in known_keys if k not in desired.automounts
                                   and k not in desired.ignored_automounts)
    return Focus(
        users=frozenset(users), member_users=frozenset(member_users),
        groups=frozenset(groups), automounts=frozenset(automounts),
        read_all_users=scope.full and whole_site and "users" in scope.kinds,
        read_all_groups=(scope.full and whole_site and "groups" in scope.kinds)
        or len(member_users) > MEMBER_SEARCH_LIMIT,
        prune_users=prune_users, prune_groups=prune_groups, prune_automounts=prune_keys)


@dataclass(frozen=True)
class ActualState:
    """What the directory holds, as far as this run read it.

    ``user_index``/``group_index`` list every entry under the user base and the site's
    groups OU (name -> entry with its classes); ``users``/``groups`` hold the entries read
    in full; ``memberships`` says, for each user whose memberships are in focus, which
    groups list them by ``memberUid`` and which by ``member`` DN.
    """

    containers: frozenset[str] = frozenset()  # normalised DNs that exist
    user_index: Mapping[str, Entry] = field(default_factory=dict)
    group_index: Mapping[str, Entry] = field(default_factory=dict)
    users: Mapping[str, EntryState] = field(default_factory=dict)
    groups: Mapping[str, EntryState] = field(default_factory=dict)
    memberships: Mapping[str, tuple[frozenset[str], frozenset[str]]] = field(
        default_factory=dict)
    maps: Mapping[str, str] = field(default_factory=dict)  # map name -> DN
    automounts: Mapping[tuple[str, str], EntryState] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Change:
    """One LDAP write (a recreation is a delete and an add of the same entry)."""

    op: Op
    dn: str
    label: str
    why: str = ""
    entry: EntryState | None = None
    mods: tuple[Mod, ...] = ()
    records: tuple[RecordKey, ...] = ()
    removed: tuple[str, ...] = ()  # "attr=value" for every REMOVAL_ATTRS value it drops

    @property
    def writes(self) -> int:
        return 2 if self.op == "recreate" else 1

    @property
    def removals(self) -> int:
        """What this change takes away: the entry (a delete or recreation) plus every
        member or key value it drops."""
        return (1 if self.op in ("delete", "recreate") else 0) + len(self.removed)

    def __str__(self) -> str:
        return f"{self.op} {self.dn}"

    def as_dict(self) -> dict[str, object]:
        data: dict[str, object] = {"op": self.op, "dn": self.dn, "label": self.label,
                                   "why": self.why}
        if self.mods:
            data["mods"] = [{"op": m.op, "attr": m.attr, "values": _shown(m.attr, m.values)}
                            for m in self.mods]
        if self.entry is not None and self.op in ("add", "recreate"):
            data["entry"] = self.entry.as_dict()
        return data


def _shown(attr: str, values: Iterable[str]) -> list[str]:
    return ["(secret)" for _ in values] if attr == "userPassword" else list(values)


@dataclass(frozen=True)
class Batch:
    label: str
    kind: BatchKind
    changes: tuple[Change, ...]


@dataclass(frozen=True)
class Plan:
    site: str
    batches: tuple[Batch, ...]
    focus: Focus = field(default_factory=Focus)
    notes: tuple[str, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not self.batches

    @property
    def changes(self) -> list[Change]:
        return [c for b in self.batches for c in b.changes]

    @property
    def writes(self) -> int:
        return sum(c.writes for c in self.changes)

    @property
    def deletions(self) -> list[str]:
        """Entries the plan removes (recreations included: the entry is gone for a moment
        and a failed add would leave it gone)."""
        return [c.dn for c in self.changes if c.op in ("delete", "recreate")]

    @property
    def removals(self) -> list[str]:
        """Everything the plan takes away, for the deletion cap and the daily budget:
        the entries it deletes (or recreates) and each member or key value it drops."""
        return self.deletions + [f"{c.label}: {value}" for c in self.changes
                                 for value in c.removed]

    @property
    def counts(self) -> dict[str, int]:
        return {b.label: len(b.changes) for b in self.batches}

    def as_dict(self) -> dict[str, object]:
        return {
            "site": self.site, "writes": self.writes, "deletions": len(self.deletions),
            "removals": len(self.removals),
            "counts": self.counts, "notes": list(self.notes),
            "checked": {"users": len(self.focus.users),
                        "memberships": len(self.focus.member_users),
                        "groups": len(self.focus.groups),
                        "automounts": len(self.focus.automounts)},
            "batches": [{"label": b.label, "kind": b.kind,
                         "changes": [c.as_dict() for c in b.changes]} for b in self.batches],
        }


# -- comparing one entry ---------------------------------------------------------------------


def entry_mods(desired: EntryState, actual: EntryState) -> tuple[list[Mod], bool]:
    """Modifications turning ``actual`` into ``desired``, and whether that needs a
    recreation instead (the structural object class differs, which LDAP cannot change in
    place). Missing auxiliary classes are added in the same request as the attributes
    they allow, so the schema check passes (the reference never upgraded them)."""
    structural = STRUCTURAL[desired.kind].lower()
    if structural not in actual.class_set:
        return [], True
    mods: list[Mod] = []
    missing = [c for c in desired.classes if c.lower() not in actual.class_set]
    if missing:
        mods.append(Mod("add", "objectClass", tuple(missing)))
    for attr in attr_names(desired.kind):
        mods.extend(attr_mods(attr, desired.get(attr), actual.get(attr)))
    return mods, False


def attr_mods(attr: str, want: frozenset[str], have: frozenset[str]) -> list[Mod]:
    wanted = {compare_key(attr, v): v for v in want}
    present = {compare_key(attr, v): v for v in have}
    if wanted.keys() == present.keys():
        return []
    if not wanted:
        return [Mod("delete", attr)]
    if attr in INCREMENTAL_ATTRS and present:
        mods = []
        gone = sorted(present[k] for k in present.keys() - wanted.keys())
        new = sorted(wanted[k] for k in wanted.keys() - present.keys())
        if gone:
            mods.append(Mod("delete", attr, tuple(gone)))
        if new:
            mods.append(Mod("add", attr, tuple(new)))
        return mods
    return [Mod("replace", attr, tuple(sorted(want)))]


def dropped_values(want: EntryState, have: EntryState) -> tuple[str, ...]:
    """``attr=value`` for each REMOVAL_ATTRS value ``have`` holds and ``want`` does not."""
    dropped = []
    for attr in REMOVAL_ATTRS:
        wanted = {compare_key(attr, v) for v in want.get(attr)}
        dropped += sorted(f"{attr}={v}" for v in have.get(attr)
                          if compare_key(attr, v) not in wanted)
    return tuple(dropped)


def _changed_attrs(mods: Iterable[Mod]) -> str:
    return ", ".join(dict.fromkeys(m.attr for m in mods))


# -- the plan --------------------------------------------------------------------------------


class _Builder:
    def __init__(self) -> None:
        self.batches: dict[str, list[Change]] = {label: [] for label, _ in BATCH_ORDER}

    def add(self, batch: str, change: Change) -> None:
        self.batches[batch].append(change)

    def build(self) -> tuple[Batch, ...]:
        kinds = dict(BATCH_ORDER)
        return tuple(Batch(label, kinds[label], tuple(changes))
                     for label, changes in self.batches.items() if changes)


def _compare(out: _Builder, kind: str, name: str, want: EntryState, have: EntryState,
             records: tuple[RecordKey, ...], force: bool) -> None:
    mods, recreate = entry_mods(want, have)
    label = f"{kind} {name}"
    if force or recreate:
        why = "--force" if force else (f"structural class {STRUCTURAL[want.kind]} missing "
                                       f"(has {', '.join(sorted(have.classes))})")
        out.add(f"recreate {kind}s", Change("recreate", have.dn, label, why, want,
                                            records=records))
    elif mods:
        out.add(f"update {kind}s", Change("modify", have.dn, label,
                                          f"changed: {_changed_attrs(mods)}", mods=tuple(mods),
                                          records=records, removed=dropped_values(want, have)))


def _state_of(kind: Kind, found: Entry) -> EntryState:
    classes = tuple(found.get("objectClass"))
    return EntryState(kind, found.dn, classes, {})


def plan(desired: DesiredState, actual: ActualState, scope: Scope,
         seen: Focus | None = None) -> Plan:
    """Everything needed to make the directory match ``desired`` for ``scope``."""
    seen = seen or focus(desired, scope)
    layout = desired.layout
    out = _Builder()
    notes = list(desired.notes) + list(actual.notes)

    _plan_containers(out, desired, actual, scope, layout)
    if scope.bootstrap:
        for name in sorted(desired.special_groups & desired.groups.keys()):
            if name not in actual.group_index:
                out.add("add groups", Change("add", desired.groups[name].dn, f"group {name}",
                                             "missing", desired.groups[name]))
        return Plan(desired.site, out.build(), seen, tuple(notes))

    for name in sorted(scope.only_users or ()):
        if name in desired.ignored_users:
            notes.append(f"user {name} is ignored (ldap.ignore): not written")
        elif name not in desired.users and ("user", name) not in seen.records:
            notes.append(f"user {name} is not on site {desired.site}")
    for name in sorted(scope.only_groups or ()):
        if name in desired.ignored_groups:
            notes.append(f"group {name} is ignored (ldap.ignore): not written")
        elif name not in desired.groups:
            notes.append(f"group {name} is not used at site {desired.site}; a prune "
                         "removes its entry")
    if "users" in scope.kinds:
        _plan_users(out, desired, actual, scope, seen)
    if "groups" in scope.kinds:
        _plan_groups(out, desired, actual, scope, seen)
    if "users" in scope.kinds:
        notes += _plan_memberships(out, desired, actual, scope, seen)
    if "automounts" in scope.kinds:
        _plan_automounts(out, desired, actual, seen)
    if "prune" in scope.kinds:
        _plan_prune(out, desired, actual, scope)
    return Plan(desired.site, out.build(), seen, tuple(notes))


def _plan_containers(out: _Builder, desired: DesiredState, actual: ActualState,
                     scope: Scope, layout: Layout) -> None:
    kinds = set(KINDS) if scope.bootstrap else set(scope.kinds)
    wanted: list[EntryState] = [ou_entry(dn) for dn in layout.containers(kinds)]
    if "automounts" in kinds:
        wanted += [desired.maps[m] for m in sorted(desired.maps)]
    for want in wanted:
        if normalize_dn(want.dn) not in actual.containers:
            name = want.first("ou") or want.first("automountMapName") or want.dn
            label = f"{'map' if want.kind == 'map' else 'ou'} {name}"
            out.add("add containers", Change("add", want.dn, label, "missing", want))


def _plan_users(out: _Builder, desired: DesiredState, actual: ActualState, scope: Scope,
                seen: Focus) -> None:
    for name in sorted(desired.users):
        if scope.only_users is not None and name not in scope.only_users:
            continue
        if desired.known is not None and name not in seen.users:
            continue  # unchanged and known to the mark: not read, taken as present
        want = desired.users[name]
        records = (("user", name),) if name in seen.users else ()
        if name not in actual.user_index:
            out.add("add users", Change("add", want.dn, f"user {name}", "missing", want,
                                        records=records))
            continue
        if name not in seen.users:
            continue
        have = actual.users.get(name) or _state_of("user", actual.user_index[name])
        _compare(out, "user", name, want, have, records, scope.force)


def _plan_groups(out: _Builder, desired: DesiredState, actual: ActualState, scope: Scope,
                 seen: Focus) -> None:
    for name in sorted(desired.groups):
        if scope.only_groups is not None and name not in scope.only_groups:
            continue
        if desired.known is not None and name not in seen.groups:
            continue  # unchanged and known to the mark: not read, taken as present
        want = desired.groups[name]
        records = (("group", name),) if name in seen.groups else ()
        if name not in actual.group_index:
            out.add("add groups", Change("add", want.dn, f"group {name}", "missing", want,
                                         records=records))
            continue
        if name not in seen.groups:
            continue
        have = actual.groups.get(name) or _state_of("group", actual.group_index[name])
        _compare(out, "group", name, want, have, records, scope.force)


def _plan_memberships(out: _Builder, desired: DesiredState, actual: ActualState,
                      scope: Scope, seen: Focus) -> list[str]:
    """Patch the focus users' own values in groups that are not compared in full."""
    notes: list[str] = []
    handled = seen.groups if "groups" in scope.kinds else frozenset()
    layout = desired.layout
    per_group: dict[str, list[tuple[str, list[Mod]]]] = {}
    groups_of = desired.groups_of()
    known_groups = desired.known_names("groups")
    dns: dict[str, str] = {}
    for user in sorted(seen.member_users):
        by_uid, by_dn = actual.memberships.get(user, (frozenset(), frozenset()))
        should = groups_of.get(user, frozenset())
        for group in sorted(should | by_uid | by_dn):
            if group in handled:
                continue
            if group in actual.group_index:
                dns[group] = actual.group_index[group].dn
            elif desired.known is not None and group in known_groups:
                dns[group] = layout.group_dn(group)  # unchanged, not read: it is there
            else:
                if group in desired.groups and "groups" not in scope.kinds:
                    notes.append(f"group {group} is missing from LDAP; {user} was not added "
                                 "(sync the groups)")
                continue  # a missing desired group is added whole; strays wait for prune
            if group not in desired.groups and group not in desired.ignored_groups \
                    and "prune" in scope.kinds and "groups" in scope.prune:
                continue  # the group itself is deleted
            if group in desired.ignored_groups:
                continue
            member = group in should
            mods: list[Mod] = []
            if member and group not in by_uid:
                mods.append(Mod("add", "memberUid", (user,)))
            if member and group not in by_dn:
                mods.append(Mod("add", "member", (layout.user_dn(user),)))
            if not member and group in by_uid:
                mods.append(Mod("delete", "memberUid", (user,)))
            if not member and group in by_dn:
                mods.append(Mod("delete", "member", (layout.user_dn(user),)))
            if mods:
                per_group.setdefault(group, []).append((user, mods))
    for group in sorted(per_group):
        entries = per_group[group]
        mods = _merge_mods([m for _, user_mods in entries for m in user_mods])
        users = [u for u, _ in entries]
        shown = ", ".join(users[:5]) + (f" and {len(users) - 5} more" if len(users) > 5 else "")
        removed = tuple(f"{m.attr}={v}" for m in mods if m.op == "delete" for v in m.values)
        out.add("update groups", Change(
            "modify", dns[group], f"group {group}",
            f"memberships of {shown}", mods=tuple(mods),
            records=tuple(("user", u) for u in users), removed=removed))
    return notes


def _merge_mods(mods: list[Mod]) -> list[Mod]:
    """One add and one delete per attribute, values sorted."""
    merged: dict[tuple[str, str], set[str]] = {}
    for mod in mods:
        merged.setdefault((mod.op, mod.attr), set()).update(mod.values)
    order = {("delete", "memberUid"): 0, ("delete", "member"): 1, ("add", "memberUid"): 2,
             ("add", "member"): 3}
    return [Mod(op, attr, tuple(sorted(values)))  # type: ignore[arg-type]
            for (op, attr), values in sorted(merged.items(), key=lambda kv: order[kv[0]])]


def _plan_automounts(out: _Builder, desired: DesiredState, actual: ActualState,
                     seen: Focus) -> None:
    for key in sorted(desired.automounts):
        want = desired.automounts[key]
        label = f"automount {key[0]}/{key[1]}"
        if desired.known is not None and key not in seen.automounts:
            continue  # unchanged and known to the mark: not read, taken as present
        record = ("storage", f"{key[0]}/{key[1]}")
        records = (record,) if record in desired.records and key in seen.automounts else ()
        have = actual.automounts.get(key)
        if have is None:
            out.add("add automount keys", Change("add", want.dn, label, "missing", want,
                                                 records=records))
            continue
        if key not in seen.automounts:
            continue
        mods, recreate = entry_mods(want, have)
        if recreate:
            out.add("update automount keys", Change(
                "recreate", have.dn, label, "structural class automount missing", want,
                records=records))
        elif mods:
            # automountInformation is replaced in place: the key never disappears (the
            # reference deleted and re-added it)
            out.add("update automount keys", Change(
                "modify", have.dn, label, f"changed: {_changed_attrs(mods)}",
                mods=tuple(mods), records=records))


def _plan_prune(out: _Builder, desired: DesiredState, actual: ActualState,
                scope: Scope) -> None:
    if "automounts" in scope.prune:
        for key in sorted(actual.automounts):
            if key in desired.automounts or key in desired.ignored_automounts:
                continue
            out.add("delete automount keys", Change(
                "delete", actual.automounts[key].dn, f"automount {key[0]}/{key[1]}",
                "not in the store"))
        for name in sorted(actual.maps):
            if name not in desired.maps:
                out.add("delete automount maps", Change(
                    "delete", actual.maps[name], f"map {name}", "no such map at the site"))
    if "groups" in scope.prune:
        for name in sorted(actual.group_index):
            found = actual.group_index[name]
            if name in desired.groups or name in desired.ignored_groups \
                    or "posixgroup" not in found.object_classes:
                continue
            out.add("delete groups", Change("delete", found.dn, f"group {name}",
                                            "not a group of this site"))
    if "users" in scope.prune:
        for name in sorted(actual.user_index):
            found = actual.user_index[name]
            if name in desired.store_users or name in scope.protected_users \
                    or "posixaccount" not in found.object_classes:
                continue
            out.add("delete users", Change("delete", found.dn, f"user {name}",
                                           "not in the store"))
