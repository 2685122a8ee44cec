"""A small but complete cheeto v2 (reference) database, shaped as the reference's beanie
models store it: ObjectId ids, ``Link`` fields as DBRefs, ``DocRef`` settings as bare
ObjectIds, polymorphic groups with ``_class_id``, no BackLink fields. Written to .bson
files with pymongo's encoder, as ``mongodump`` would.

One site, three users (one inactive globally but active on the site by override), a lab
group holding all four roles, two partitions, a QOS whose three buckets each own an
allocation, an account with limits and a coordinator, two associations, volumes (a
child of a parent), two automount maps, a cvmfs static mount, home and group storages,
SSH keys, a HiPPO event and History rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import bson
from bson import DBRef, ObjectId

from tests.factories import ED25519_KEY, ED25519_KEY_2

T0 = datetime(2024, 3, 1, 12, 0, 0, 123000, tzinfo=UTC)
T1 = datetime(2024, 6, 1, 8, 30, tzinfo=UTC)
HASH = "$y$j9T$abcdefghijklmnopqrstu.$0123456789abcdefghijklmnopqrstuvwxyzABCDE"


def ref(collection: str, oid: ObjectId) -> DBRef:
    return DBRef(collection, oid)


@dataclass
class ReferenceDump:
    """The documents per collection, and the ObjectIds tests look things up by."""

    site: str
    ids: dict[str, ObjectId] = field(default_factory=dict)
    docs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def oid(self, label: str) -> ObjectId:
        return self.ids.setdefault(label, ObjectId())

    def add(self, collection: str, label: str, doc: dict[str, Any]) -> dict[str, Any]:
        full = {"_id": self.oid(label), **doc}
        self.docs.setdefault(collection, []).append(full)
        return full

    def write(self, directory: Path) -> Path:
        """``<dir>/<collection>.bson``, one BSON document after another."""
        directory.mkdir(parents=True, exist_ok=True)
        for collection, docs in self.docs.items():
            with (directory / f"{collection}.bson").open("wb") as handle:
                for doc in docs:
                    handle.write(bson.encode(doc))
        return directory


def stamps() -> dict[str, Any]:
    return {"created_at": T0, "updated_at": T1}


def ldap_info(site: str) -> dict[str, Any]:
    return {"ignore": False, "fingerprint": "reference-sha", "modified_at": T0,
            "synced": {site: T1}}


def build(site: str = "farm", *, lab: str = "smithlab", prefix: str = "") -> ReferenceDump:
    """The reference database; ``prefix`` names users and QOS apart (slurmdbd's users and
    QOS are global, so each live test uses its own)."""
    d = ReferenceDump(site)
    p = prefix
    d.add("sites", "site", {
        "name": site, "fqdn": f"{site}.hpc.example.edu", "aliases": [f"caes{site}"],
        "slurm": {"sticky": [], "default_account": None},
        "group": {"sticky": [d.oid("g:everyone")]},
        "storage": {"default_home_volume": d.oid("v:homes"), "default_home_quota": "20G",
                    "home_automount_map": d.oid("m:home"), "home_static_mount": None},
        **stamps()})
    gid = 3_333_333_000
    for shorthand in ("login-ssh", "slurm", "sudo", "root-ssh"):
        d.add("groups", f"a:{shorthand}", {
            "_class_id": "Group.AccessGroup", "name": f"{shorthand}-users", "gid": gid,
            "type": "access", "access_name": shorthand, "ldap": ldap_info(site), **stamps()})
        gid += 1
    for shorthand in ("active", "inactive", "disabled", "offboarding"):
        d.add("groups", f"s:{shorthand}", {
            "_class_id": "Group.StatusGroup", "name": f"{shorthand}-users", "gid": gid,
            "type": "status", "status_name": shorthand, "ldap": ldap_info(site), **stamps()})
        gid += 1
    people = [
        (f"{p}alice", 41001, "Alice Smith", None, "active", ["login-ssh", "slurm", "sudo"]),
        (f"{p}bob", 41002, "Bob de Vries", "de Vries", "active", ["login-ssh", "slurm"]),
        (f"{p}carol", 41003, "Carol Jones", None, "inactive", ["login-ssh"]),
    ]
    for name, uid, fullname, surname, status, access in people:
        user = {
            "name": name, "email": f"{name}@example.edu", "uid": uid, "gid": uid,
            "fullname": fullname, "surname": surname, "shell": "/usr/bin/bash",
            "type": "user", "status": ref("groups", d.oid(f"s:{status}")),
            "password": HASH if name.endswith("alice") else None,
            "access": [ref("groups", d.oid(f"a:{a}")) for a in access],
            "comments": ["imported from v1"] if name.endswith("carol") else [],
            "home_directory": f"/home/{name}", "iam": None, "ldap": ldap_info(site),
            "expires_at": None, "provisioned_at": T0, **stamps()}
        if name.endswith("alice"):
            user["iam"] = {"iam_status": "present", "iam_synced_at": T1, "last_seen_at": T1,
                           "first_missing_at": None,
                           "person": {"iam_id": "1000123456", "mothra_id": 41001,
                                      "user_types": ["faculty"],
                                      "associations": [{"org_id": "00012", "org_name": "CAES",
                                                        "org_code": "AG", "dept_name": "Plant",
                                                        "dept_code": "030", "title": "Prof",
                                                        "title_type": "faculty"}]}}
        d.add("users", f"u:{name}", user)
        d.add("groups", f"g:{name}", {"_class_id": "Group", "name": name, "gid": uid,
                                      "type": "user", "ldap": ldap_info(site), **stamps()})
    d.add("groups", "g:lab", {"_class_id": "Group", "name": lab, "gid": 3_900_000_001,
                              "type": "group", "ldap": ldap_info(site), **stamps()})
    d.add("groups", "g:everyone", {"_class_id": "Group", "name": f"{p}{site}-everyone",
                                   "gid": 3_900_000_002, "type": "group",
                                   "ldap": ldap_info(site), **stamps()})
    d.add("ssh_keys", "k:alice", {"key": ED25519_KEY, "user": ref("users", d.oid(f"u:{p}alice")),
                                  "expires_at": None, **stamps()})
    d.add("ssh_keys", "k:bob", {"key": ED25519_KEY_2, "user": ref("users", d.oid(f"u:{p}bob")),
                                **stamps()})
    for name, status, access in ((f"{p}alice", None, []), (f"{p}bob", None, []),
                                 (f"{p}carol", "active", ["login-ssh", "slurm"])):
        d.add("user_site_info", f"usi:{name}", {
            "user": ref("users", d.oid(f"u:{name}")), "site": ref("sites", d.oid("site")),
            "status": ref("groups", d.oid(f"s:{status}")) if status else None,
            "access": [ref("groups", d.oid(f"a:{a}")) for a in access], **stamps()})
    for name, roles in ((f"{p}alice", ["sponsor", "member"]), (f"{p}bob", ["slurmer", "member"]),
                        (f"{p}carol", ["member", "sudoer"])):
        d.add("group_membership", f"gm:{name}", {
            "user": ref("users", d.oid(f"u:{name}")), "group": ref("groups", d.oid("g:lab")),
            "site": ref("sites", d.oid("site")), "roles": roles,
            "expires_at": T1 if name.endswith("carol") else None, **stamps()})
    for part in ("high", "low"):
        d.add("slurm_partitions", f"p:{part}", {"name": part, "site": ref("sites", d.oid("site")),
                                                **stamps()})
    allocations = {"group_limits": {"cpus": 64, "gpus": 4, "mem": "512G"},
                   "user_limits": {"cpus": 16, "gpus": None, "mem": "128G"},
                   "job_limits": {"cpus": 8, "gpus": -1, "mem": None}}
    for bucket, tres in allocations.items():
        d.add("slurm_allocations", f"al:{bucket}", {"tres": tres, "comment": f"{bucket} grant",
                                                    "expires_at": None, **stamps()})
    qos = f"{p}{lab}-high-qos"
    d.add("slurm_qos", "q:high", {
        "name": qos, "site": ref("sites", d.oid("site")),
        **{b: [ref("slurm_allocations", d.oid(f"al:{b}"))] for b in allocations},
        "priority": 10, "flags": ["DenyOnLimit", "NoDecay"], **stamps()})
    d.add("slurm_accounts", "acct:lab", {
        "group": ref("groups", d.oid("g:lab")), "site": ref("sites", d.oid("site")),
        "limits": {"max_user_jobs": 10, "max_group_jobs": -1, "max_submit_jobs": 100,
                   "max_job_length": "7-00:00:00"},
        "coordinators": [ref("users", d.oid(f"u:{p}alice"))], **stamps()})
    for part in ("high", "low"):
        d.add("slurm_associations", f"as:{part}", {
            "site": ref("sites", d.oid("site")),
            "account": ref("slurm_accounts", d.oid("acct:lab")),
            "partition": ref("slurm_partitions", d.oid(f"p:{part}")),
            "qos": ref("slurm_qos", d.oid("q:high")), **stamps()})
    d.add("automount_maps", "m:home", {"name": "auto.home", "site": ref("sites", d.oid("site")),
                                       "prefix": "/home", "options": ["rw", "nfsvers=4.2"],
                                       **stamps()})
    d.add("automount_maps", "m:group", {"name": "auto.group", "site": ref("sites", d.oid("site")),
                                        "prefix": "/group", "options": ["rw"], **stamps()})
    d.add("storage_volumes", "v:alice", {  # listed before its parent: order must not matter
        "name": f"{p}alice-home", "site": ref("sites", d.oid("site")), "backend": "zfs",
        "zfs": {"dataset_name": ""}, "quobyte": None, "host": "nas1.example.edu",
        "host_path": f"/export/home/{p}alice", "parent": ref("storage_volumes", d.oid("v:homes")),
        "allocations": [{"quota": "20G", "comment": "default"}], "nfs_export": None, **stamps()})
    d.add("storage_volumes", "v:homes", {
        "name": "homes", "site": ref("sites", d.oid("site")), "backend": "zfs",
        "zfs": {"dataset_name": "tank/home"}, "quobyte": None, "host": "nas1.example.edu",
        "host_path": "/export/home/", "parent": None,
        "allocations": [{"quota": "1T", "comment": ""}, {"quota": "512G", "comment": "grant"}],
        "nfs_export": {"export_options": "rw,no_root_squash", "export_ranges": ["10.0.0.0/16"]},
        **stamps()})
    d.add("storage_volumes", "v:labs", {
        "name": "labs", "site": ref("sites", d.oid("site")), "backend": "quobyte",
        "zfs": None, "quobyte": {"volume_id": "vol-1", "tenant": "caes"},
        "host": "qb.example.edu", "host_path": "/labs", "parent": None, "allocations": [],
        "nfs_export": None, "expires_at": datetime(2030, 1, 1, tzinfo=UTC), **stamps()})
    d.add("static_mounts", "sm:cvmfs", {
        "name": "cvmfs-soft", "site": ref("sites", d.oid("site")), "fstype": "cvmfs",
        "volume": None, "subpath": "", "spec": "software.example.org",
        "mount_path": "/cvmfs/software.example.org", "options": ["ro"], **stamps()})
    d.add("storages", "st:alice", {
        "name": f"{p}alice", "site": ref("sites", d.oid("site")), "category": "home",
        "owner": ref("users", d.oid(f"u:{p}alice")), "group": ref("groups", d.oid(f"g:{p}alice")),
        "volume": ref("storage_volumes", d.oid("v:alice")), "subpath": "", "nfs_export": None,
        "automount_map": ref("automount_maps", d.oid("m:home")), "mount_name": "",
        "mount_overrides": {"options": [], "add_options": ["nosuid"], "remove_options": []},
        "static_mount": None, "globus": False, "ldap": ldap_info(site), **stamps()})
    d.add("storages", "st:lab", {
        "name": lab, "site": ref("sites", d.oid("site")), "category": "group",
        "owner": ref("users", d.oid(f"u:{p}alice")), "group": ref("groups", d.oid("g:lab")),
        "volume": ref("storage_volumes", d.oid("v:labs")), "subpath": lab, "nfs_export": None,
        "automount_map": ref("automount_maps", d.oid("m:group")), "mount_name": "",
        "mount_overrides": {"options": [], "add_options": [], "remove_options": []},
        "static_mount": None, "globus": True, "ldap": ldap_info(site), **stamps()})
    d.add("hippo_events", "h:1", {
        "hippo_id": 77, "hippo_endpoint": "https://hippo.example.edu", "action": "CreateAccount",
        "status": "Complete", "n_tries": 1, "last_error": None, "cluster": site,
        "site": ref("sites", d.oid("site")), "target_username": f"{p}bob",
        "target_user": ref("users", d.oid(f"u:{p}bob")), "target_groupnames": [lab],
        "target_groups": [ref("groups", d.oid("g:lab"))], "sponsor_username": f"{p}alice",
        "raw": {"account": {"kerberos": f"{p}bob"}, "id": 77}, "queued_at": T0,
        "first_seen_at": T0, "completed_at": T1, "posted_back_at": T1, **stamps()})
    d.add("history", "hist:1", {"op": "create_user", "author": ref("users", d.oid(f"u:{p}alice")),
                                "changes": {"user": f"{p}bob", "site": d.oid("site")},
                                "timestamp": T0})
    d.add("history", "hist:2", {"op": "seed_access_status", "author": None,
                                "changes": {"groups": 8}, "timestamp": T1})
    return d
