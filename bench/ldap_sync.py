"""Benchmark the LDAP reconciler at 10,000 users and 2,000 groups against a real slapd.

Builds one site directly in an embedded store (bulk inserts: this measures the sync, not
the write path): users with a password hash, an SSH key, a personal group and a home
directory through ``auto.home``; lab groups (each user a member of two) with a group
directory through ``auto.group``. Starts a throwaway slapd (tests/services/ldap.py), then:
1. a full sync into the empty directory;
2. an incremental run with nothing changed, and a ``--full`` run with nothing changed;
3. an incremental run after changing 10 users through the real operations (shells,
   a new key, group memberships, a site-level access grant).
Reports wall time, entries per second, the LDAP write operations, the phases (reading the
store, reading the directory, planning, applying, the watermark), the watermark's store
writes and the store commands of each run. The in-run yardstick is the ``--full`` run
(lists and compares everything); the figures from before the site mark (issue 18) are in
``before_issue_18``. Prints one JSON object on stdout; progress on stderr.

    .venv/bin/python bench/ldap_sync.py [--users 10000] [--groups 2000] [--concurrency 8]

Needs slapd and ldap-utils (scripts/install-system-deps.sh).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import bulk_insert, free_port, progress, throwaway_server
from pymongo import monitoring

from cheeto_like.config import EmbeddedStoreConfig, LDAPConfig, MongoConfig
from cheeto_like.constants import ACCESS_GROUP_NAMES, SPECIAL_GID_START, STATUS_GROUP_NAMES
from cheeto_like.credentials import hash_password
from cheeto_like.models import (
    AutomountMap,
    Group,
    GroupMembership,
    Site,
    SshKey,
    Storage,
    StorageVolume,
    User,
    UserSiteInfo,
)
from cheeto_like.operations.group_membership import AddGroupMember, RemoveGroupMember
from cheeto_like.operations.user import AddUserAccess, AddUserSshKey, SetUserShell
from cheeto_like.store import Store, connect
from cheeto_like.sync import ldap as sync
from tests.services.ldap import Slapd

SITE = "benchfarm"
AUTHOR = "bench"
# measured with per-record watermarks and full reads (issue 18, 10k users, 34k entries)
BEFORE = {"incremental_nothing_changed_s": 21.0, "of_which_desired_state_s": 17.0,
          "full_sync_empty_directory_s": 121.0, "full_sync_apply_s": 80.0,
          "full_sync_watermarks_s": 26.0, "full_sync_watermark_writes": 34010}


class Commands(monitoring.CommandListener):
    """Store commands by name (registered before the client is made)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.names.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


COMMANDS = Commands()
monitoring.register(COMMANDS)


def ed25519_key(seed: int, comment: str) -> str:
    """A well-formed ssh-ed25519 public key line (32 bytes derived from ``seed``)."""
    kind = b"ssh-ed25519"
    material = seed.to_bytes(8, "big") * 4
    blob = struct.pack(">I", len(kind)) + kind + struct.pack(">I", 32) + material
    return f"ssh-ed25519 {base64.b64encode(blob).decode()} {comment}"


async def build_site(users: int, groups: int) -> None:
    await bulk_insert(Site, [Site(name=SITE, fqdn=f"{SITE}.example.org")])
    gid = SPECIAL_GID_START
    special = []
    for kind, names in (("access", ACCESS_GROUP_NAMES), ("status", STATUS_GROUP_NAMES)):
        for shorthand, name in names.items():
            special.append(Group(name=name, gid=gid, type=kind, shorthand=shorthand))
            gid += 1
    await bulk_insert(Group, special)
    password = hash_password("bench password")  # one hash: yescrypt is slow on purpose
    names = [f"b{i:05d}" for i in range(users)]
    await bulk_insert(User, [User(
        name=n, email=f"{n}@example.org", uid=1_000_000 + k, gid=1_000_000 + k,
        fullname=f"Bench User{k}", home_directory=f"/home/{n}", status="active",
        password=password, access=["login-ssh", "slurm"] if k % 2 else ["login-ssh"])
        for k, n in enumerate(names)])
    await bulk_insert(Group, [Group(name=n, gid=1_000_000 + k, type="user")
                          for k, n in enumerate(names)])
    await bulk_insert(SshKey, [SshKey(user=n, key=ed25519_key(k, n)) for k, n in enumerate(names)])
    await bulk_insert(UserSiteInfo, [UserSiteInfo(user=n, site=SITE) for n in names])
    labs = [f"lab{g:04d}" for g in range(groups)]
    await bulk_insert(Group, [Group(name=lab, gid=600_000 + g) for g, lab in enumerate(labs)])
    await bulk_insert(GroupMembership, [
        GroupMembership(user=n, group=labs[(k + j * 7) % groups], site=SITE, roles=["member"])
        for k, n in enumerate(names) for j in range(2)])
    await bulk_insert(AutomountMap, [
        AutomountMap(name="auto.home", site=SITE, prefix="/home", options=["rw", "nosuid"]),
        AutomountMap(name="auto.group", site=SITE, prefix="/group", options=["rw"])])
    await bulk_insert(StorageVolume, [
        StorageVolume(name="homes", site=SITE, backend="zfs", host="nfs-home",
                      host_path="/export/home"),
        StorageVolume(name="labs", site=SITE, backend="zfs", host="nfs-group",
                      host_path="/export/group")])
    await bulk_insert(Storage, [Storage(name=n, site=SITE, category="home", owner=n, group=n,
                                    volume="homes", subpath=n, automount_map="auto.home")
                            for n in names])
    await bulk_insert(Storage, [Storage(name=lab, site=SITE, category="group", owner=names[0],
                                    group=lab, volume="labs", subpath=lab,
                                    automount_map="auto.group") for lab in labs])


async def change_ten_users(store: Store, users: int, groups: int) -> list[str]:
    """Ten users changed through the operations: what an admin's day looks like."""
    changed = [f"b{i * users // 10 + 3:05d}" for i in range(10)]
    for name in changed[:4]:
        await SetUserShell.run(store, AUTHOR, name=name, shell="/bin/zsh")
    for k, name in enumerate(changed[4:6]):
        await AddUserSshKey.run(store, AUTHOR, name=name, key=ed25519_key(10**6 + k, "new"))
    for name in changed[6:8]:
        await AddGroupMember.run(store, AUTHOR, group=f"lab{(int(name[1:]) + 1) % groups:04d}",
                                 user=name, site=SITE)
    await RemoveGroupMember.run(store, AUTHOR, group=f"lab{int(changed[8][1:]) % groups:04d}",
                                user=changed[8], site=SITE)
    await AddUserAccess.run(store, AUTHOR, name=changed[9], access=["sudo"], site=SITE)
    return changed


async def timed_run(store: Store, config: LDAPConfig, label: str, *, concurrency: int,
                    full: bool = False) -> dict[str, Any]:
    scope = sync.scope_for(config, kinds=frozenset({"users", "groups", "automounts", "prune"}),
                           full=full)
    COMMANDS.names.clear()
    started = time.perf_counter()
    report = await sync.run(store, config, SITE, scope=scope, concurrency=concurrency,
                            max_deletions=50, author=AUTHOR)
    wall = time.perf_counter() - started
    commands: dict[str, int] = {}
    for name in COMMANDS.names:
        commands[name] = commands.get(name, 0) + 1
    writes = sum(report.writes.values())
    checked = report.plan.focus
    progress(f"  {label}: {wall:.2f}s, {writes} writes {report.writes} {report.timings} "
             f"unchanged={report.unchanged} by_name={report.by_name} store={commands}")
    assert report.ok, report.failed[:3]
    return {
        "wall_s": round(wall, 2),
        "ldap_writes": writes, "by_operation": report.writes,
        "changes": report.plan.counts,
        "entries_per_s": round(writes / wall, 1) if writes else 0,
        "compared": {"users": len(checked.users), "groups": len(checked.groups),
                     "memberships": len(checked.member_users),
                     "automount_keys": len(checked.automounts)},
        "records_watermarked": report.watermarked,
        "watermark_store_writes": report.watermark_writes,
        "nothing_read": report.unchanged,
        "read_by_name": report.by_name,
        "phases_s": report.timings,
        "store_commands": commands,
    }


async def run(store: Store, server: Slapd, users: int, groups: int,
              concurrency: int) -> dict[str, Any]:
    config = LDAPConfig(
        servers=[server.uri], searchbase=server.suffix, user_base=f"ou=people,{server.suffix}",
        login_dn=server.root_dn, password=server.root_password, use_tls=True,
        ca_file=server.ca_file, pool_max_connections=max(concurrency, 2),
        request_timeout_seconds=300)  # a loaded 2-core machine: full reads of 10k entries
    progress(f"building {users} users and {groups} groups in the store")
    started = time.perf_counter()
    await build_site(users, groups)
    progress(f"  built in {time.perf_counter() - started:.1f}s")
    results: dict[str, Any] = {}
    results["full_sync_empty_directory"] = await timed_run(
        store, config, "full sync", concurrency=concurrency, full=True)
    entries = server.ldapsearch(server.suffix, "(objectClass=*)", "1.1").count("dn: ")
    results["entries_in_directory"] = entries
    results["incremental_nothing_changed"] = await timed_run(
        store, config, "incremental, no change", concurrency=concurrency)
    results["full_nothing_changed"] = await timed_run(
        store, config, "--full, no change", concurrency=concurrency, full=True)
    changed = await change_ten_users(store, users, groups)
    results["incremental_after_10_users_changed"] = await timed_run(
        store, config, "incremental, 10 users changed", concurrency=concurrency)
    results["incremental_after_10_users_changed"]["users_changed"] = changed
    results["next_run_writes"] = (await timed_run(
        store, config, "incremental, converged", concurrency=concurrency))["ldap_writes"]
    return results


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--groups", type=int, default=2_000)
    parser.add_argument("--concurrency", type=int, default=8)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cheeto-ldap-bench-") as tmp:
        embedded = EmbeddedStoreConfig(path=Path(tmp) / "store", port=free_port())
        server = throwaway_server(embedded)
        server.start_background()
        slapd = Slapd(Path(tmp), organizational_units=()).start()
        try:
            store = await connect(MongoConfig(embedded=embedded, database="bench_ldap"),
                                  autostart=False)
            result = await run(store, slapd, opts.users, opts.groups, opts.concurrency)
            await store.close()
        finally:
            slapd.stop()
            server.stop()
    print(json.dumps({"store": "embedded nx-27017", "slapd": "OpenLDAP 2.5 (real, mdb)",
                      "users": opts.users, "lab_groups": opts.groups,
                      "concurrency": opts.concurrency,
                      "load_average": [round(x, 2) for x in os.getloadavg()],
                      **result, "before_issue_18": BEFORE}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
