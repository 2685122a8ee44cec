"""Adopt a running cluster: store records that reproduce what slurmdbd and the directory
already hold, so that the first sync changes nothing.

Input is the reconcilers' own parsed actual state (``sync.slurm.state.SlurmState`` from
``slurm_actual.actual_state``; ``sync.ldap.plan.ActualState`` from
``ldap_actual.actual_state`` read in full), so adoption sees exactly what a sync sees.
Output is a ``from_cheeto.Mapping`` (documents with stable ids, refusals, notes), which
the same writer checks against the store and writes in one transaction; re-adopting an
unchanged cluster is a no-op.

What the model cannot express is reported, never guessed:
- *refused* (the run writes nothing): name or uid clashes (found by the writer), users in
  Slurm who are neither in the directory nor the store, accounts without a group;
- *notes* (written, but the first sync will change something): limits other than the
  ones the store manages (a sync clears them), QOS ``normal`` or partition-less
  associations, users of one account whose QOS differ, members who would gain
  associations, passwords in a scheme other than crypt, keys without the user tag.
"""

from __future__ import annotations

import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from pydantic import ValidationError

from ..constants import ACCESS_GROUP_NAMES, STATUS_GROUP_NAMES
from ..models.fields import utcnow
from ..models.group import Group, GroupMembership
from ..models.names import NameClaim
from ..models.slurm import (
    SlurmAccount,
    SlurmAllocation,
    SlurmAssociation,
    SlurmPartition,
    SlurmQOS,
)
from ..models.storage import AutomountMap, Storage, StorageVolume, format_quota
from ..models.user import SshKey, User, UserSiteInfo
from ..sync.ldap.state import EPOCH, EntryState
from ..sync.slurm.state import TRES, AssocKey, QOSState, SlurmState
from ..validation import describe_validation_error
from .from_cheeto import Mapped, Refusal
from .from_cheeto import Mapping as ImportMapping

NAMESPACE = uuid.UUID("0b8f0c4e-8d44-5e0a-9a3e-61646f707421")
ADOPTED = "adopted from slurmdbd"
CATEGORY = {"auto.home": "home", "auto.group": "group"}
ACCESS_BY_GROUP = {name: short for short, name in ACCESS_GROUP_NAMES.items()}
STATUS_BY_GROUP = {name: short for short, name in STATUS_GROUP_NAMES.items()}


def adopt_id(*parts: object) -> str:
    return uuid.uuid5(NAMESPACE, "/".join(str(p) for p in parts)).hex


@dataclass(frozen=True)
class DirectoryView:
    """The site's directory as the LDAP reconciler reads it (user base, the site's groups,
    its automount maps and keys), plus the settings that shape values."""

    users: Mapping[str, EntryState]
    groups: Mapping[str, EntryState]
    maps: Mapping[str, str]  # map name -> DN
    automounts: Mapping[tuple[str, str], EntryState]
    master_map: str = "auto.master"
    host_suffix: str = "${HOST_SUFFIX}"
    ssh_user_prefix: bool = True


@dataclass(frozen=True)
class Known:
    """What the store already holds that adoption may refer to."""

    users: Mapping[str, Any] = field(default_factory=dict)  # name -> User
    groups: Mapping[str, Any] = field(default_factory=dict)  # name -> Group


class _Adopter:
    def __init__(self, site: str, known: Known) -> None:
        self.site = site
        self.known = known
        self.out = ImportMapping()
        self.users: dict[str, User] = {}
        self.groups: dict[str, Group] = {}
        self.members: dict[str, set[str]] = defaultdict(set)  # group -> LDAP members
        self.roles: dict[tuple[str, str], set[str]] = defaultdict(set)  # (user, group)
        self.on_site: set[str] = set()

    # -- helpers -----------------------------------------------------------------------

    def refuse(self, kind: str, name: str, reason: str) -> None:
        self.out.refusals.append(Refusal(kind, name, reason))

    def note(self, text: str) -> None:
        self.out.notes.append(text)

    def add(self, collection: str, doc: Any, source: str) -> None:
        self.out.docs[collection].append(Mapped(collection, (), doc, source))

    def build(self, collection: str, model: type[Any], data: dict[str, Any], source: str,
              *id_parts: object) -> Any:
        try:
            doc = model.model_validate({"id": adopt_id(collection, *id_parts), **data})
        except ValidationError as exc:
            self.refuse(collection, source, describe_validation_error(exc))
            return None
        if hasattr(doc, "ldap_fingerprint"):
            doc.ldap.fingerprint = doc.ldap_fingerprint()
        self.add(collection, doc, source)
        return doc

    def user_exists(self, name: str) -> bool:
        return name in self.users or name in self.known.users

    def group_exists(self, name: str) -> bool:
        return name in self.groups or name in self.known.groups

    # -- the directory -----------------------------------------------------------------

    def from_directory(self, view: DirectoryView) -> None:
        entries = view.users
        at_site: set[str] = set()
        for name, group in view.groups.items():
            uids = set(group.get("memberUid"))
            at_site |= uids & set(entries)
            self.members[name] = uids
            missing = sorted(uids - set(entries) - set(self.known.users))
            if missing:
                self.note(f"group {name}: members {', '.join(missing)} have no entry under the "
                          "user base (left out; the first LDAP sync drops them)")
        for name in entries:
            if name in view.groups:  # a personal group at the site puts its user here
                at_site.add(name)
        left = len(set(entries) - at_site)
        if left:
            self.note(f"{left} user entr{'y' if left == 1 else 'ies'} under the user base "
                      "belong to no group of this site (left out)")
        for name in sorted(at_site):
            self._user(name, entries[name], view)
        for name, group in sorted(view.groups.items()):
            self._group(name, group)
        for name in sorted(self.on_site):
            self.build("user_site_info", UserSiteInfo, {"user": name, "site": self.site},
                       name, self.site, name)
        self._automounts(view)

    def _user(self, name: str, entry: EntryState, view: DirectoryView) -> None:
        first = entry.first
        fullname = first("cn") or ""
        if (display := first("displayName")) not in (None, fullname):
            self.note(f"user {name}: displayName {display!r} differs from cn {fullname!r} "
                      "(the first LDAP sync sets it to cn)")
        sn = first("sn")
        surname = sn if sn and fullname.split() and sn != fullname.split()[-1] else None
        password = first("userPassword")
        if password is not None:
            if password.upper().startswith("{CRYPT}"):
                password = password[len("{CRYPT}"):]
            else:
                self.note(f"user {name}: userPassword is not a crypt hash (left out; the "
                          "first LDAP sync removes it)")
                password = None
        expire = first("shadowExpire")
        status = [STATUS_BY_GROUP[g] for g, m in self.members.items()
                  if g in STATUS_BY_GROUP and name in m]
        if len(status) > 1:
            self.refuse("users", name, f"in several status groups ({', '.join(sorted(status))})")
            return
        access = sorted(ACCESS_BY_GROUP[g] for g, m in self.members.items()
                        if g in ACCESS_BY_GROUP and name in m)
        data: dict[str, Any] = {
            "name": name, "email": first("mail"), "uid": first("uidNumber"),
            "gid": first("gidNumber"), "fullname": fullname, "surname": surname,
            "shell": first("loginShell") or "/usr/bin/bash",
            "home_directory": first("homeDirectory"), "password": password,
            "status": status[0] if status else None, "access": access,
            "expires_at": EPOCH + timedelta(days=int(expire)) if expire else None}
        user = self.build("users", User, {k: v for k, v in data.items() if v is not None},
                          name, name)
        if user is None:
            return
        self.users[name] = user
        self.on_site.add(name)
        tag = f'environment="REMOTE_SSH_USER={name}" '
        for key in sorted(entry.get("sshPublicKey")):
            if key.startswith(tag):
                key = key[len(tag):]
            elif view.ssh_user_prefix:
                self.note(f"user {name}: an SSH key lacks the REMOTE_SSH_USER tag (the first "
                          "LDAP sync rewrites it)")
            self.build("ssh_keys", SshKey, {"user": name, "key": key}, name, name, key)

    def _group(self, name: str, entry: EntryState) -> None:
        gid = entry.first("gidNumber")
        if name in ACCESS_BY_GROUP:
            data = {"type": "access", "shorthand": ACCESS_BY_GROUP[name]}
        elif name in STATUS_BY_GROUP:
            data = {"type": "status", "shorthand": STATUS_BY_GROUP[name]}
        elif name in self.users and str(self.users[name].gid) == gid:
            data = {"type": "user"}
        else:
            data = {"type": "group"}
            if name in self.users or name in self.known.users:
                self.refuse("groups", name, "a user has this name and another gid")
                return
        group = self.build("groups", Group, {"name": name, "gid": gid, **data}, name, name)
        if group is None:
            return
        self.groups[name] = group
        if group.type in ("access", "status"):
            return
        for user in sorted(self.members.get(name, ())):
            if user in self.on_site:
                self.roles[(user, name)].add("member")
        dns = {dn.split(",", 1)[0].removeprefix("uid=") for dn in entry.get("member")}
        if dns != self.members.get(name, set()):
            self.note(f"group {name}: member DNs and memberUid disagree (the first LDAP sync "
                      "writes both from memberUid)")

    def _automounts(self, view: DirectoryView) -> None:
        prefixes: dict[str, str] = {}
        for (map_name, key), entry in view.automounts.items():
            if map_name == view.master_map:
                info = (entry.first("automountInformation") or "").split()
                target = info[0].removeprefix("ldap:") if info else ""
                for name, dn in view.maps.items():
                    if target == name or _same_dn(target, dn):
                        prefixes[name] = key
        for map_name in sorted(view.maps):
            if map_name == view.master_map:
                continue
            prefix = prefixes.get(map_name)
            if prefix is None:
                self.refuse("automount_maps", map_name, f"no key in {view.master_map} mounts it")
                continue
            self.build("automount_maps", AutomountMap,
                       {"name": map_name, "site": self.site, "prefix": prefix},
                       map_name, self.site, map_name)
        for (map_name, key), entry in sorted(view.automounts.items()):
            if map_name == view.master_map or map_name not in prefixes:
                continue
            self._storage(map_name, key, entry.first("automountInformation") or "", view)

    def _storage(self, map_name: str, key: str, info: str, view: DirectoryView) -> None:
        options: list[str] = []
        text = info.strip()
        if text.startswith("-"):
            opts, _, text = text.partition(" ")
            options = [o for o in opts[1:].split(",") if o]
        host, sep, path = text.strip().partition(":")
        if not sep:
            self.refuse("storages", f"{map_name}/{key}", f"cannot read {info!r}")
            return
        if view.host_suffix and host.endswith(view.host_suffix):
            host = host[: -len(view.host_suffix)]
        category = CATEGORY.get(map_name, "share")
        if category == "home":
            owner, group = key, key
        else:
            group = key
            members = sorted(self.members.get(key, ()))
            owner = members[0] if members else ""
        if not self.user_exists(owner) or not self.group_exists(group):
            self.refuse("storages", f"{map_name}/{key}",
                        f"no user {owner!r} or group {group!r} to own it")
            return
        volume = f"{map_name}-{key}"
        self.build("storage_volumes", StorageVolume, {
            "name": volume, "site": self.site, "backend": "zfs", "host": host,
            "host_path": path}, f"{map_name}/{key}", self.site, volume)
        self.build("storages", Storage, {
            "name": key, "site": self.site, "category": category, "owner": owner,
            "group": group, "volume": volume, "automount_map": map_name,
            "mount_overrides": {"options": options}}, f"{map_name}/{key}", self.site,
            category, key)

    # -- slurmdbd ----------------------------------------------------------------------

    def from_slurm(self, state: SlurmState) -> None:
        cluster = state.cluster
        by_pair: dict[tuple[str, str], dict[str, tuple[frozenset[str], str | None]]] = \
            defaultdict(dict)
        for key, assoc in state.associations.items():
            if key.account not in state.accounts:
                continue
            if not key.partition:
                self.note(f"association {key}: no partition (the model names one; the first "
                          "sync removes it)")
                continue
            if "normal" in assoc.qos or not assoc.qos:
                self.note(f"association {key}: QOS {','.join(sorted(assoc.qos)) or '(none)'}"
                          " (the model names its own QOS; the first sync changes it)")
                continue
            if assoc.extra or assoc.grp_tres_mins:
                self.note(f"association {key}: limits set on the user's row "
                          f"({_limits_text(assoc.extra)}) are not in the model (the first "
                          "sync clears them)")
            by_pair[(key.account, key.partition)][key.user] = (assoc.qos, assoc.default_qos)
        used_qos = {q for rows in by_pair.values() for qos, _ in rows.values() for q in qos}
        for name, qos in sorted(state.qos.items()):
            if qos.owner not in (None, cluster):
                if name in used_qos:
                    self.refuse("slurm_qos", name, f"managed by cluster {qos.owner!r}")
                continue
            if qos.owner is None and name not in used_qos:
                continue  # not this cluster's
            self._qos(qos)
        for name in sorted(used_qos - set(state.qos)):
            self.refuse("slurm_qos", name, "used by associations but not in slurmdbd")
        partitions = sorted({p for _, p in by_pair})
        for part in partitions:
            self.build("slurm_partitions", SlurmPartition, {"name": part, "site": self.site},
                       part, self.site, part)
        for name, account in sorted(state.accounts.items()):
            if not self.group_exists(name):
                self.refuse("slurm_accounts", name, "no group of that name in the directory "
                                                    "or the store (it needs a gid)")
                continue
            if account.extra or account.grp_tres_mins:
                self.note(f"account {name}: limits {_limits_text(account.extra)} are not in "
                          "the model (the first sync clears them)")
            coordinators = sorted(state.coordinators.get(name, frozenset()))
            unknown = [c for c in coordinators if not self.user_exists(c)]
            if unknown:
                self.refuse("slurm_accounts", name, f"coordinators {', '.join(unknown)} are "
                                                    "not users here")
                continue
            self.build("slurm_accounts", SlurmAccount, {
                "group": name, "site": self.site, "coordinators": coordinators,
                "limits": {
                    "max_user_jobs": _or_unlimited(account.max_user_jobs),
                    "max_group_jobs": _or_unlimited(account.max_group_jobs),
                    "max_submit_jobs": _or_unlimited(account.max_submit_jobs),
                    "max_job_length": str(_or_unlimited(account.max_wall_minutes))}},
                name, self.site, name)
        roster: dict[str, set[str]] = defaultdict(set)
        partitions_of: dict[str, set[str]] = defaultdict(set)
        for (account, partition), rows in sorted(by_pair.items()):
            shapes = Counter(rows.values())
            (qos, default), count = shapes.most_common(1)[0]
            if len(shapes) > 1:
                self.note(f"association {account}/{partition}: users have different QOS; "
                          f"adopted {','.join(sorted(qos))} (held by {count} of {len(rows)}; "
                          "the first sync changes the others)")
            self.build("slurm_associations", SlurmAssociation, {
                "site": self.site, "account": account, "partition": partition,
                "qos": sorted(qos), "default_qos": default or min(qos)},
                f"{account}/{partition}", self.site, account, partition)
            roster[account] |= set(rows)
            partitions_of[account].add(partition)
        for account, users in sorted(roster.items()):
            for part in sorted(partitions_of[account]):
                lacking = sorted(u for u in users if AssocKey(u, account, part)
                                 not in state.associations)
                if lacking:
                    self.note(f"account {account}: {', '.join(lacking)} have no association "
                              f"in partition {part} (the first sync adds it)")
            for user in sorted(users):
                if not self.user_exists(user):
                    self.refuse("users", user, f"in Slurm (account {account}) but neither in "
                                               "the directory nor in the store")
                    continue
                if "member" not in self.roles[(user, account)]:
                    self.roles[(user, account)].add("slurmer")
                self._check_slurm_standing(user)
            for member in sorted(self.members.get(account, set()) - users):
                if member in self.users and self._slurm_eligible(member):
                    self.note(f"account {account}: member {member} has no association (the "
                              "first sync adds theirs)")

    def _slurm_eligible(self, name: str) -> bool:
        user = self.users.get(name) or self.known.users.get(name)
        expired = (user is not None and user.expires_at is not None
                   and _aware(user.expires_at) <= utcnow())
        return bool(user and not expired and "slurm" in user.access
                    and user.status in ("active", "offboarding"))

    def _check_slurm_standing(self, name: str) -> None:
        if not self._slurm_eligible(name):
            self.note(f"user {name} has Slurm associations but lacks the slurm access, an "
                      "active status or an unexpired account (the first sync removes them)")

    def _qos(self, qos: QOSState) -> None:
        if qos.extra:
            self.note(f"QOS {qos.name}: limits {_limits_text(qos.extra)} are not in the model "
                      "(the first sync clears them)")
        self.build("slurm_qos", SlurmQOS, {
            "name": qos.name, "site": self.site, "priority": qos.priority,
            "flags": sorted(qos.flags)}, qos.name, self.site, qos.name)
        for bucket, values in (("group_limits", qos.group), ("user_limits", qos.user),
                               ("job_limits", qos.job)):
            if not values:
                continue
            tres, other = _tres(values)
            if other:
                self.note(f"QOS {qos.name} {bucket}: {', '.join(other)} cannot be expressed "
                          "(cpu, mem and gres/gpu only; the first sync clears the rest)")
            self.build("slurm_allocations", SlurmAllocation, {
                "site": self.site, "qos": qos.name, "bucket": bucket, "tres": tres,
                "comment": ADOPTED}, f"{qos.name}/{bucket}", self.site, qos.name, bucket)

    # -- the edges ----------------------------------------------------------------------

    def finish(self) -> ImportMapping:
        for (user, group), roles in sorted(self.roles.items()):
            if roles and self.group_exists(group) and self.user_exists(user):
                self.build("group_membership", GroupMembership, {
                    "user": user, "group": group, "site": self.site, "roles": sorted(roles)},
                    f"{user}@{group}", user, group, self.site)
        for name in sorted(self.users):
            self.add("names", NameClaim(id=adopt_id("names", name), name=name, kind="user"),
                     name)
        for name in sorted(set(self.groups) - set(self.users)):
            self.add("names", NameClaim(id=adopt_id("names", name), name=name, kind="group"),
                     name)
        return self.out


def _aware(when: datetime) -> datetime:
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when


def _same_dn(text: str, normalised: str) -> bool:
    from ..adapters.ldap import normalize_dn

    try:
        return normalize_dn(text) == normalised
    except ValueError:
        return False


def _or_unlimited(value: int | None) -> int:
    return -1 if value is None else value


def _limits_text(limits: Iterable[tuple[str, str]]) -> str:
    return ", ".join(f"{k}={v}" for k, v in limits) or "GrpTRESMins"


def _tres(values: TRES) -> tuple[dict[str, Any], list[str]]:
    tres: dict[str, Any] = {}
    other = []
    for key, value in values:
        if key == "cpu":
            tres["cpus"] = value
        elif key == "gres/gpu":
            tres["gpus"] = value
        elif key == "mem":
            tres["mem"] = format_quota(Decimal(value))
        else:
            other.append(f"{key}={value}")
    return tres, other


def adopt(site: str, *, slurm: SlurmState | None, directory: DirectoryView | None,
          known: Known) -> ImportMapping:
    """The store records that reproduce ``slurm`` and ``directory`` for ``site``."""
    adopter = _Adopter(site, known)
    if directory is not None:
        adopter.from_directory(directory)
    if slurm is not None:
        adopter.from_slurm(slurm)
    return adopter.finish()
