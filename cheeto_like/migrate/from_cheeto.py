"""The pure mapping from a reference (cheeto v2) database to this project's documents.

The reference stores ObjectId ids, beanie ``Link`` fields as DBRefs, bare ObjectIds in
embedded settings (``DocRef``) and ``BackLink`` fields not at all (they are queries).
Here every id becomes a UUID derived from the source ObjectId (``uuid5``, so a re-import
names the same rows) and every reference becomes the name this project uses (users and
groups by name, Slurm accounts by their group's name, volumes, maps and mounts by name
at the site). BackLinks need nothing: the edges they read are imported as documents.

No I/O happens here: ``map_reference(raw)`` takes raw documents per collection and gives
back validated documents in dependency order plus every refusal with its reason, so the
writer can refuse the whole run before touching the store.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from bson import DBRef, ObjectId
from pydantic import ValidationError

from ..models.base import BaseDoc, LDAPInfo
from ..models.group import Group, GroupMembership
from ..models.hippo import HippoEvent
from ..models.history import History
from ..models.names import NameClaim
from ..models.site import Site
from ..models.slurm import (
    SlurmAccount,
    SlurmAllocation,
    SlurmAssociation,
    SlurmPartition,
    SlurmQOS,
)
from ..models.storage import AutomountMap, StaticMount, Storage, StorageVolume
from ..models.user import SshKey, User, UserSiteInfo
from ..validation import describe_validation_error

NAMESPACE = uuid.UUID("6f1d7f3e-2b8a-5c43-9d0e-6c6865657430")  # fixed: ids stay stable
BUCKETS = ("group_limits", "user_limits", "job_limits")

# Our collections in the order they are written (references point backwards).
TARGET_ORDER = (
    "sites", "groups", "users", "names", "ssh_keys", "user_site_info", "group_membership",
    "slurm_partitions", "slurm_qos", "slurm_allocations", "slurm_accounts",
    "slurm_associations", "automount_maps", "storage_volumes", "static_mounts", "storages",
    "hippo_events", "history",
)


def new_uuid(collection: str, oid: Any) -> str:
    """The UUID hex id of the row imported from ``collection``'s ``oid``."""
    return uuid.uuid5(NAMESPACE, f"{collection}:{oid}").hex


def ref_id(value: Any) -> ObjectId | None:
    """The target id of any shape the reference stored a reference in: a DBRef (Link),
    a bare ObjectId (DocRef), an inline snapshot ``{'_id': …}`` or a hex string."""
    if value is None:
        return None
    if isinstance(value, DBRef):
        return ref_id(value.id)
    if isinstance(value, ObjectId):
        return value
    if isinstance(value, dict):
        if "$id" in value:
            return ref_id(value["$id"])
        return ref_id(value.get("_id") or value.get("id"))
    if isinstance(value, str) and ObjectId.is_valid(value):
        return ObjectId(value)
    return None


def plain(value: Any) -> Any:
    """History ``changes`` and HiPPO payloads as JSON-able data: ids become strings."""
    if isinstance(value, DBRef):
        return str(value.id)
    if isinstance(value, ObjectId):
        return str(value)
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items() if k != "_class_id"}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


@dataclass(frozen=True)
class Refusal:
    """One source document (or reference) that cannot be imported, and why."""

    collection: str
    source: str  # the source ObjectId, or a name when there is none
    reason: str

    def line(self) -> str:
        return f"{self.collection} {self.source}: {self.reason}"


@dataclass
class Mapped:
    """One document to write: its natural key (for "already there?") and the document."""

    collection: str
    key: tuple[Any, ...]
    doc: BaseDoc | History
    source: str


@dataclass
class Mapping:
    docs: dict[str, list[Mapped]] = field(default_factory=lambda: defaultdict(list))
    refusals: list[Refusal] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # lossless reshapes worth telling
    source_counts: dict[str, int] = field(default_factory=dict)
    # the collections this mapping writes, in order (another source, such as
    # ``from_slurm_quota``, names its own)
    order: tuple[str, ...] = TARGET_ORDER

    def ordered(self) -> list[tuple[str, list[Mapped]]]:
        return [(name, self.docs.get(name, [])) for name in self.order]


def _ts(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return None


class _Mapper:
    """Walks the collections in dependency order, keeping id -> name tables."""

    def __init__(self, raw: dict[str, list[dict[str, Any]]]) -> None:
        self.raw = raw
        self.out = Mapping(source_counts={k: len(v) for k, v in raw.items()})
        self.sites: dict[ObjectId, str] = {}
        self.users: dict[ObjectId, str] = {}
        self.groups: dict[ObjectId, str] = {}
        self.shorthand: dict[ObjectId, tuple[str, str]] = {}  # access/status gid -> (type, sh)
        self.accounts: dict[ObjectId, tuple[str, str]] = {}  # -> (site, group name)
        self.partitions: dict[ObjectId, tuple[str, str]] = {}
        self.qos: dict[ObjectId, tuple[str, str]] = {}
        self.volumes: dict[ObjectId, tuple[str, str]] = {}
        self.maps: dict[ObjectId, tuple[str, str]] = {}
        self.mounts: dict[ObjectId, tuple[str, str]] = {}

    # -- helpers ------------------------------------------------------------------------

    def refuse(self, collection: str, doc: dict[str, Any], reason: str) -> None:
        label = str(doc.get("_id", doc.get("name", "?")))
        if doc.get("name"):
            label = f"{doc['name']} ({label})"
        self.out.refusals.append(Refusal(collection, label, reason))

    def add(self, collection: str, key: tuple[Any, ...], model: type[Any],
            data: dict[str, Any], source: dict[str, Any], source_coll: str) -> Any:
        data = {k: v for k, v in data.items() if v is not None}
        if "_id" in source:
            data["id"] = new_uuid(source_coll, source["_id"])
        for stamp in ("created_at", "updated_at"):
            if model is not History and _ts(source.get(stamp)) is not None:
                data[stamp] = _ts(source[stamp])
        for stamp in ("expires_at", "provisioned_at"):
            if stamp in model.model_fields:
                data[stamp] = _ts(source.get(stamp))
        try:
            doc = model.model_validate(data)
        except ValidationError as exc:
            self.refuse(source_coll, source, describe_validation_error(exc))
            return None
        if hasattr(doc, "ldap_fingerprint"):
            self._carry_ldap(doc, source)
        self.out.docs[collection].append(Mapped(collection, key, doc, str(source.get("_id"))))
        return doc

    @staticmethod
    def _carry_ldap(doc: Any, source: dict[str, Any]) -> None:
        """Keep the reference's per-site watermarks (so an LDAP sync does not rewrite a
        directory that is already right) but fingerprint with our own projection."""
        info = source.get("ldap") or {}
        modified = _ts(info.get("modified_at"))
        synced = {str(k): _ts(v) for k, v in (info.get("synced") or {}).items()
                  if _ts(v) is not None}
        # the mapping stays pure: a first version from the record's uuid5 id, not random
        version = int(str(doc.id).replace("-", "")[:7], 16) + 1
        modified_at = modified or doc.ldap.modified_at
        # a site the reference synced after the record's last change holds this version
        # (the versions decide dirtiness; the times stay for display)
        synced_version: dict[str, int | str] = {
            site: version for site, when in synced.items()
            if when is not None and modified is not None and when >= modified}
        doc.ldap = LDAPInfo(ignore=bool(info.get("ignore", False)),
                            fingerprint=doc.ldap_fingerprint(), modified_at=modified_at,
                            version=version, synced=synced, synced_version=synced_version)

    def name_of(self, table: dict[ObjectId, Any], value: Any) -> Any:
        oid = ref_id(value)
        return None if oid is None else table.get(oid)

    def resolve(self, coll: str, doc: dict[str, Any], field_name: str,
                table: dict[ObjectId, Any], what: str, *, required: bool = True) -> Any:
        """The name a reference field points at; None (and a refusal when required and
        dangling, or when set but dangling)."""
        value = doc.get(field_name)
        if value is None:
            if required:
                self.refuse(coll, doc, f"{field_name} is empty (needs a {what})")
                raise _Skip
            return None
        found = self.name_of(table, value)
        if found is None:
            self.refuse(coll, doc, f"{field_name} points at a {what} that is not in the "
                                   f"source ({ref_id(value) or value!r})")
            raise _Skip
        return found

    def resolve_list(self, coll: str, doc: dict[str, Any], field_name: str,
                     table: dict[ObjectId, Any], what: str) -> list[Any]:
        names = []
        for value in doc.get(field_name) or []:
            found = self.name_of(table, value)
            if found is None:
                self.refuse(coll, doc, f"{field_name} lists a {what} that is not in the "
                                       f"source ({ref_id(value) or value!r})")
                raise _Skip
            names.append(found)
        return names

    def at_site(self, coll: str, doc: dict[str, Any], site: str, value: tuple[str, str],
                what: str) -> str:
        other_site, name = value
        if other_site != site:
            self.refuse(coll, doc, f"{what} {name!r} is at site {other_site!r}, not {site!r}"
                                   " (references are names at the same site here)")
            raise _Skip
        return name

    def each(self, coll: str) -> list[dict[str, Any]]:
        return self.raw.get(coll, [])

    # -- collections --------------------------------------------------------------------

    def run(self) -> Mapping:
        for step in (self.map_sites, self.map_groups, self.map_users, self.map_names,
                     self.map_ssh_keys, self.map_user_sites, self.map_memberships,
                     self.map_partitions, self.map_qos, self.map_allocations,
                     self.map_accounts, self.map_associations, self.map_maps,
                     self.map_volumes, self.map_static_mounts, self.map_storages,
                     self.map_site_settings, self.map_hippo, self.map_history):
            step()
        return self.out

    def map_sites(self) -> None:
        # settings refer to accounts, groups and volumes: filled in by map_site_settings
        for doc in self.each("sites"):
            self.sites[doc["_id"]] = doc.get("name")

    def map_site_settings(self) -> None:
        for doc in self.each("sites"):
            name = doc.get("name")
            slurm, group, storage = (doc.get(k) or {} for k in ("slurm", "group", "storage"))
            try:
                sticky = self.resolve_list("sites", doc_view(slurm, doc), "sticky",
                                           self.accounts, "Slurm account")
                sticky_accounts = [self.at_site("sites", doc, name, a, "sticky Slurm account")
                                   for a in sticky]
                default = None
                if slurm.get("default_account") is not None:
                    default = self.at_site("sites", doc, name, self.resolve(
                        "sites", doc_view(slurm, doc), "default_account", self.accounts,
                        "Slurm account"), "default Slurm account")
                sticky_groups = self.resolve_list("sites", doc_view(group, doc), "sticky",
                                                  self.groups, "group")
                settings = {}
                for key, table, what in (("default_home_volume", self.volumes, "volume"),
                                         ("home_automount_map", self.maps, "automount map"),
                                         ("home_static_mount", self.mounts, "static mount")):
                    if storage.get(key) is not None:
                        settings[key] = self.at_site("sites", doc, name, self.resolve(
                            "sites", doc_view(storage, doc), key, table, what), what)
            except _Skip:
                continue
            self.add("sites", (name,), Site, {
                "name": name, "fqdn": doc.get("fqdn"), "aliases": doc.get("aliases") or [],
                "slurm": {"sticky": sticky_accounts, "default_account": default},
                "group": {"sticky": sticky_groups},
                "storage": {**settings, "default_home_quota": storage.get("default_home_quota")},
            }, doc, "sites")

    def map_groups(self) -> None:
        for doc in self.each("groups"):
            cls = str(doc.get("_class_id") or "")
            data: dict[str, Any] = {"name": doc.get("name"), "gid": doc.get("gid"),
                                    "type": doc.get("type", "group")}
            if cls.endswith("AccessGroup") or "access_name" in doc:
                data.update(type="access", shorthand=doc.get("access_name"))
                self.shorthand[doc["_id"]] = ("access", str(doc.get("access_name")))
            elif cls.endswith("StatusGroup") or "status_name" in doc:
                data.update(type="status", shorthand=doc.get("status_name"))
                self.shorthand[doc["_id"]] = ("status", str(doc.get("status_name")))
            if self.add("groups", (doc.get("name"),), Group, data, doc, "groups") is not None:
                self.groups[doc["_id"]] = doc["name"]

    def _shorthands(self, coll: str, doc: dict[str, Any], kind: str) -> tuple[Any, list[str]]:
        status = None
        if doc.get("status") is not None:
            found = self.name_of(self.shorthand, doc["status"])
            if found is None or found[0] != "status":
                self.refuse(coll, doc, f"status points at a group that is not a status group "
                                       f"in the source ({ref_id(doc['status'])})")
                raise _Skip
            status = found[1]
        access = []
        for value in doc.get("access") or []:
            found = self.name_of(self.shorthand, value)
            if found is None or found[0] != "access":
                self.refuse(coll, doc, f"access lists a group that is not an access group in"
                                       f" the source ({ref_id(value)})")
                raise _Skip
            access.append(found[1])
        return status, access

    def map_users(self) -> None:
        group_names = {n: d for d in self.each("groups") if (n := d.get("name"))}
        for doc in self.each("users"):
            try:
                status, access = self._shorthands("users", doc, "user")
            except _Skip:
                continue
            name = doc.get("name")
            twin = group_names.get(name)
            if twin is not None and twin.get("type") != "user":
                self.refuse("users", doc, f"a {twin.get('type')} group is also named {name!r}"
                                          " (users and groups share one namespace here)")
                continue
            data = {k: doc.get(k) for k in ("name", "email", "uid", "gid", "fullname",
                                            "surname", "shell", "type", "password",
                                            "home_directory", "iam")}
            data.update(status=status, access=access, comments=doc.get("comments") or [])
            if self.add("users", (name,), User, data, doc, "users") is not None:
                self.users[doc["_id"]] = name

    def map_names(self) -> None:
        users = set(self.users.values())
        for name in sorted(users):
            self.out.docs["names"].append(Mapped("names", (name,), NameClaim(
                id=new_uuid("names", name), name=name, kind="user"), name))
        for name in sorted(set(self.groups.values()) - users):
            self.out.docs["names"].append(Mapped("names", (name,), NameClaim(
                id=new_uuid("names", name), name=name, kind="group"), name))

    def map_ssh_keys(self) -> None:
        for doc in self.each("ssh_keys"):
            try:
                user = self.resolve("ssh_keys", doc, "user", self.users, "user")
            except _Skip:
                continue
            self.add("ssh_keys", (user, doc.get("key")), SshKey,
                     {"user": user, "key": doc.get("key")}, doc, "ssh_keys")

    def map_user_sites(self) -> None:
        for doc in self.each("user_site_info"):
            try:
                user = self.resolve("user_site_info", doc, "user", self.users, "user")
                site = self.resolve("user_site_info", doc, "site", self.sites, "site")
                status, access = self._shorthands("user_site_info", doc, "site membership")
            except _Skip:
                continue
            self.add("user_site_info", (user, site), UserSiteInfo,
                     {"user": user, "site": site, "status": status, "access": access},
                     doc, "user_site_info")

    def map_memberships(self) -> None:
        for doc in self.each("group_membership"):
            try:
                user = self.resolve("group_membership", doc, "user", self.users, "user")
                group = self.resolve("group_membership", doc, "group", self.groups, "group")
                site = self.resolve("group_membership", doc, "site", self.sites, "site")
            except _Skip:
                continue
            self.add("group_membership", (user, group, site), GroupMembership,
                     {"user": user, "group": group, "site": site,
                      "roles": doc.get("roles") or []}, doc, "group_membership")

    def _named_at_site(self, coll: str, model: type[Any], table: dict[ObjectId, Any],
                       extra: Any) -> None:
        for doc in self.each(coll):
            try:
                site = self.resolve(coll, doc, "site", self.sites, "site")
                data = {"name": doc.get("name"), "site": site, **extra(doc, site)}
            except _Skip:
                continue
            if self.add(coll, (doc.get("name"), site), model, data, doc, coll) is not None:
                table[doc["_id"]] = (site, doc["name"])

    def map_partitions(self) -> None:
        self._named_at_site("slurm_partitions", SlurmPartition, self.partitions,
                            lambda doc, site: {})

    def map_qos(self) -> None:
        self._named_at_site("slurm_qos", SlurmQOS, self.qos, lambda doc, site: {
            "priority": doc.get("priority", 0),
            "flags": doc.get("flags") if doc.get("flags") is not None else ["DenyOnLimit"]})

    def map_allocations(self) -> None:
        """Allocations are owned by exactly one QOS bucket there; here they name it."""
        owners: dict[ObjectId, list[tuple[str, str, str]]] = defaultdict(list)
        for qos in self.each("slurm_qos"):
            if qos["_id"] not in self.qos:
                continue
            site, name = self.qos[qos["_id"]]
            for bucket in BUCKETS:
                for value in qos.get(bucket) or []:
                    if (oid := ref_id(value)) is not None:
                        owners[oid].append((site, name, bucket))
        for doc in self.each("slurm_allocations"):
            found = owners.get(doc["_id"], [])
            if len(found) != 1:
                reason = ("no QOS lists it (an orphan: nothing would enforce it)" if not found
                          else "several QOS buckets list it: " + ", ".join(
                              f"{q}.{b}" for _, q, b in found))
                self.refuse("slurm_allocations", doc, reason)
                continue
            site, qos_name, bucket = found[0]
            self.add("slurm_allocations", (doc["_id"],), SlurmAllocation, {
                "site": site, "qos": qos_name, "bucket": bucket, "tres": doc.get("tres") or {},
                "comment": doc.get("comment") or ""}, doc, "slurm_allocations")

    def map_accounts(self) -> None:
        for doc in self.each("slurm_accounts"):
            try:
                group = self.resolve("slurm_accounts", doc, "group", self.groups, "group")
                site = self.resolve("slurm_accounts", doc, "site", self.sites, "site")
                coordinators = self.resolve_list("slurm_accounts", doc, "coordinators",
                                                 self.users, "user")
            except _Skip:
                continue
            data = {"group": group, "site": site, "coordinators": coordinators,
                    "limits": doc.get("limits") or {}}
            if self.add("slurm_accounts", (group, site), SlurmAccount, data, doc,
                        "slurm_accounts") is not None:
                self.accounts[doc["_id"]] = (site, group)

    def map_associations(self) -> None:
        """The reference has one row per (account, partition, QOS); here one row per
        (account, partition) carries the QOS list, so rows are merged."""
        merged: dict[tuple[str, str, str], list[tuple[str, dict[str, Any]]]] = defaultdict(list)
        for doc in self.each("slurm_associations"):
            coll = "slurm_associations"
            try:
                site = self.resolve(coll, doc, "site", self.sites, "site")
                account = self.at_site(coll, doc, site, self.resolve(
                    coll, doc, "account", self.accounts, "Slurm account"), "Slurm account")
                partition = self.at_site(coll, doc, site, self.resolve(
                    coll, doc, "partition", self.partitions, "partition"), "partition")
                qos = self.at_site(coll, doc, site, self.resolve(
                    coll, doc, "qos", self.qos, "QOS"), "QOS")
            except _Skip:
                continue
            merged[(site, account, partition)].append((qos, doc))
        for (site, account, partition), rows in merged.items():
            first = rows[0][1]
            qos_names = sorted({q for q, _ in rows})
            if len(qos_names) > 1:
                self.out.notes.append(
                    f"association {account}/{partition} at {site}: {len(rows)} reference rows "
                    f"merged into one with QOS {', '.join(qos_names)} (default "
                    f"{qos_names[0]})")
            self.add("slurm_associations", (site, account, partition), SlurmAssociation, {
                "site": site, "account": account, "partition": partition, "qos": qos_names,
            }, first, "slurm_associations")

    def map_maps(self) -> None:
        self._named_at_site("automount_maps", AutomountMap, self.maps, lambda doc, site: {
            "prefix": doc.get("prefix"), "options": doc.get("options") or []})

    def map_volumes(self) -> None:
        # parents first: a volume names its parent, which must be at the same site
        docs = self.raw.get("storage_volumes", [])
        by_id = {d["_id"]: d for d in docs}

        def depth(doc: dict[str, Any], seen: int = 0) -> int:
            parent = by_id.get(ref_id(doc.get("parent")))
            return seen if parent is None or seen > len(docs) else depth(parent, seen + 1)

        def extra(doc: dict[str, Any], site: str) -> dict[str, Any]:
            parent = None
            if doc.get("parent") is not None:
                parent = self.at_site("storage_volumes", doc, site, self.resolve(
                    "storage_volumes", doc, "parent", self.volumes, "parent volume"),
                    "parent volume")
            return {key: doc.get(key) for key in ("backend", "zfs", "quobyte", "host",
                                                  "host_path", "nfs_export")} | {
                "parent": parent, "allocations": doc.get("allocations") or []}

        self.raw["storage_volumes"] = sorted(docs, key=depth)
        self._named_at_site("storage_volumes", StorageVolume, self.volumes, extra)

    def map_static_mounts(self) -> None:
        def extra(doc: dict[str, Any], site: str) -> dict[str, Any]:
            volume = None
            if doc.get("volume") is not None:
                volume = self.at_site("static_mounts", doc, site, self.resolve(
                    "static_mounts", doc, "volume", self.volumes, "volume"), "volume")
            return {"fstype": doc.get("fstype"), "volume": volume,
                    "subpath": doc.get("subpath") or "", "spec": doc.get("spec") or "",
                    "mount_path": doc.get("mount_path"), "options": doc.get("options") or []}

        self._named_at_site("static_mounts", StaticMount, self.mounts, extra)

    def map_storages(self) -> None:
        coll = "storages"
        for doc in self.each(coll):
            try:
                site = self.resolve(coll, doc, "site", self.sites, "site")
                owner = self.resolve(coll, doc, "owner", self.users, "user")
                group = self.resolve(coll, doc, "group", self.groups, "group")
                volume = self.at_site(coll, doc, site, self.resolve(
                    coll, doc, "volume", self.volumes, "volume"), "volume")
                amap = smount = None
                if doc.get("automount_map") is not None:
                    amap = self.at_site(coll, doc, site, self.resolve(
                        coll, doc, "automount_map", self.maps, "automount map"),
                        "automount map")
                if doc.get("static_mount") is not None:
                    smount = self.at_site(coll, doc, site, self.resolve(
                        coll, doc, "static_mount", self.mounts, "static mount"),
                        "static mount")
            except _Skip:
                continue
            data = {"name": doc.get("name"), "site": site, "category": doc.get("category"),
                    "owner": owner, "group": group, "volume": volume,
                    "subpath": doc.get("subpath") or "", "nfs_export": doc.get("nfs_export"),
                    "automount_map": amap, "mount_name": doc.get("mount_name") or "",
                    "mount_overrides": doc.get("mount_overrides") or {},
                    "static_mount": smount, "globus": bool(doc.get("globus", False))}
            self.add(coll, (doc.get("name"), site, doc.get("category")), Storage, data,
                     doc, coll)

    def map_hippo(self) -> None:
        coll = "hippo_events"
        for doc in self.each(coll):
            try:
                site = self.resolve(coll, doc, "site", self.sites, "site", required=False)
                user = self.resolve(coll, doc, "target_user", self.users, "user",
                                    required=False)
                groups = self.resolve_list(coll, doc, "target_groups", self.groups, "group")
            except _Skip:
                continue
            data = {k: doc.get(k) for k in (
                "hippo_id", "hippo_endpoint", "action", "status", "n_tries", "last_error",
                "cluster", "target_username", "sponsor_username", "queued_at",
                "first_seen_at", "completed_at", "posted_back_at")}
            data.update(site=site, target_user=user, target_groups=groups,
                        target_groupnames=doc.get("target_groupnames") or [],
                        raw=plain(doc.get("raw") or {}))
            self.add(coll, (doc.get("hippo_id"), doc.get("hippo_endpoint")), HippoEvent,
                     data, doc, coll)

    def map_history(self) -> None:
        """History keeps its rows; the author becomes a name (a deleted author's id is
        kept as text rather than dropped)."""
        for doc in self.each("history"):
            author = doc.get("author")
            name = self.name_of(self.users, author) if author is not None else None
            if author is not None and name is None:
                name = f"(deleted user {ref_id(author) or author})"
            data = {"op": doc.get("op"), "author": name,
                    "changes": plain(doc.get("changes") or {}),
                    "timestamp": _ts(doc.get("timestamp"))}
            self.add("history", (doc["_id"],), History, data, doc, "history")


class _Skip(Exception):
    """The current document was refused; move on to the next."""


def doc_view(embedded: dict[str, Any], owner: dict[str, Any] | None = None) -> dict[str, Any]:
    """An embedded settings block labelled with its owner's id and name for refusals."""
    view = dict(embedded)
    if owner is not None:
        view.setdefault("_id", owner.get("_id"))
        view.setdefault("name", owner.get("name"))
    return view


def map_reference(raw: dict[str, list[dict[str, Any]]]) -> Mapping:
    """Map a whole reference database; pure (no store, no clock beyond defaults)."""
    return _Mapper({k: list(v) for k, v in raw.items()}).run()
