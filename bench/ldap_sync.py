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
                                        [--key-type ed25519|rsa4096]
                                        [--desired-only [--rounds 5] [--baseline TREE]]
                                        [--vs-ldapadd [--rounds 5] [--connections N]]

``--vs-ldapadd`` (issue 31): the full sync into an empty directory against ``ldapadd`` of
the same LDIF (a dry run's adds, in plan order) on the same slapd: per round each side
gets a freshly started slapd (same configuration, only the suffix entry), the sides
alternate which goes first, and the JSON holds both sides' wall, entries/s, client and
slapd CPU (min, median), the ratio per round, and the load average.

``--key-type rsa4096`` gives every user a well-formed RSA-4096 public key (~730
characters, what makes the site-wide key read large: issue 24). ``--desired-only`` needs
no slapd: it seeds the store once and measures the full run's desired-state build (every
site-wide read of the LDAP projection) in a fresh process per round, alternating with
``--baseline``'s checkout on the same store, and reports the BSON size the one-document
``$group`` reads of before would have had to answer (MongoDB refuses past 16 MiB).

Needs slapd and ldap-utils (scripts/install-system-deps.sh), except with --desired-only.
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

sys.path.insert(0, os.environ.get("CHEETO_BENCH_TREE")
                or str(Path(__file__).resolve().parent.parent))

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
from cheeto_like.sync.ldap import run as sync
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


def rsa4096_key(seed: int, comment: str) -> str:
    """A well-formed ssh-rsa public key line with a 4096-bit modulus from ``seed``."""
    kind = b"ssh-rsa"
    modulus = b"\xc1" + seed.to_bytes(8, "big") * 63 + b"\x01" * 7  # 512 bytes, top bit set
    blob = (struct.pack(">I", len(kind)) + kind + struct.pack(">I", 3) + b"\x01\x00\x01"
            + struct.pack(">I", len(modulus) + 1) + b"\x00" + modulus)
    return f"ssh-rsa {base64.b64encode(blob).decode()} {comment}"


KEY_TYPES = {"ed25519": ed25519_key, "rsa4096": rsa4096_key}


async def build_site(users: int, groups: int, key_type: str = "ed25519") -> None:
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
    make_key = KEY_TYPES[key_type]
    await bulk_insert(SshKey, [SshKey(user=n, key=make_key(k, n)) for k, n in enumerate(names)])
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
              concurrency: int, key_type: str = "ed25519") -> dict[str, Any]:
    config = LDAPConfig(
        servers=[server.uri], searchbase=server.suffix, user_base=f"ou=people,{server.suffix}",
        login_dn=server.root_dn, password=server.root_password, use_tls=True,
        ca_file=server.ca_file, pool_max_connections=max(concurrency, 2),
        request_timeout_seconds=300)  # a loaded 2-core machine: full reads of 10k entries
    progress(f"building {users} users and {groups} groups in the store")
    started = time.perf_counter()
    await build_site(users, groups, key_type)
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


# -- the full sync against ldapadd of the same LDIF (issue 31) -----------------------------

_LDIF_SAFE_INIT = frozenset(" :<")


def ldif_value(attr: str, value: str) -> str:
    """One ``attr: value`` LDIF line (RFC 2849): base64 (``::``) when the value is not a
    SAFE-STRING (non-ASCII, a control character, a leading space, colon or ``<``, a
    trailing space)."""
    raw = value.encode()
    safe = value.isascii() and not any(c in "\0\n\r" for c in value) \
        and not (value and (value[0] in _LDIF_SAFE_INIT or value[-1] == " "))
    if safe:
        return f"{attr}: {value}"
    return f"{attr}:: {base64.b64encode(raw).decode()}"


def plan_ldif(planned: Any) -> tuple[str, int]:
    """The LDIF of every add a plan from an empty directory makes, in the plan's order
    (containers first): what ``ldapadd`` is given. Returns (text, entries)."""
    blocks = []
    for change in planned.changes:
        if change.op != "add" or change.entry is None:
            raise SystemExit(f"the plan from an empty directory holds a {change.op}: {change}")
        lines = [ldif_value("dn", change.dn)]
        lines += [ldif_value(name, value) for name, values in change.entry.as_ldap().items()
                  for value in values]
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks), len(blocks)


def _ldap_config(server: Slapd, connections: int) -> LDAPConfig:
    return LDAPConfig(
        servers=[server.uri], searchbase=server.suffix, user_base=f"ou=people,{server.suffix}",
        login_dn=server.root_dn, password=server.root_password, use_tls=True,
        ca_file=server.ca_file, pool_max_connections=max(connections, 1),
        request_timeout_seconds=300)


def _count(server: Slapd) -> int:
    return server.ldapsearch(server.suffix, "(objectClass=*)", "1.1").count("dn: ")


async def _sync_side(store: Store, server: Slapd, concurrency: int,
                     connections: int) -> dict[str, Any]:
    """One full sync (the whole ``sync.run``: lease, store reads, directory listing, plan,
    apply, journal, site mark) into the fresh directory; no mark from an earlier round."""
    from cheeto_like.sync.ldap.mark import forget_marks

    await forget_marks()
    config = _ldap_config(server, connections)
    scope = sync.scope_for(config, kinds=frozenset({"users", "groups", "automounts", "prune"}),
                           full=True)
    cpu = time.process_time()
    started = time.perf_counter()
    report = await sync.run(store, config, SITE, scope=scope, concurrency=concurrency,
                            max_deletions=50, author=AUTHOR)
    wall = time.perf_counter() - started
    if not report.ok:
        raise SystemExit(f"the full sync failed: {report.failed[:3]}")
    return {"wall_s": wall, "client_cpu_s": time.process_time() - cpu,
            "writes": sum(report.writes.values()), "phases_s": report.timings}


async def _ldapadd_side(server: Slapd, ldif: Path, secret: Path) -> dict[str, Any]:
    """``ldapadd`` of the LDIF over the same transport as the sync (StartTLS, ``-ZZ``),
    bound as the same DN; the password from a file (never in argv)."""
    argv = ["ldapadd", "-x", "-ZZ", "-H", server.uri, "-D", server.root_dn, "-y", str(secret),
            "-f", str(ldif)]
    started = time.perf_counter()
    before = os.times()
    proc = await asyncio.create_subprocess_exec(
        *argv, env=server.client_env(), stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE)
    _, err = await proc.communicate()
    wall = time.perf_counter() - started
    after = os.times()
    if proc.returncode:
        raise SystemExit(f"ldapadd failed ({proc.returncode}): {err.decode()[-300:]}")
    return {"wall_s": wall, "client_cpu_s": (after.children_user - before.children_user)
            + (after.children_system - before.children_system)}


def _summary(values: list[float]) -> dict[str, float]:
    import statistics

    return {"min": round(min(values), 3), "median": round(statistics.median(values), 3)}


async def run_vs_ldapadd(store: Store, tmp: Path, opts: Any) -> dict[str, Any]:
    """Seed once; per round, each side into a freshly started slapd (same binary, same
    configuration, only the suffix entry), the sides alternating which goes first."""
    progress(f"building {opts.users} users and {opts.groups} groups in the store")
    await build_site(opts.users, opts.groups, opts.key_type)
    load = [os.getloadavg()]
    with Slapd(tmp, organizational_units=()) as server:  # the LDIF: a dry run's plan
        config = _ldap_config(server, opts.connections)
        dry = await sync.run(store, config, SITE, dry_run=True, scope=sync.scope_for(
            config, kinds=frozenset({"users", "groups", "automounts", "prune"}), full=True))
        text, entries = plan_ldif(dry.plan)
    ldif = tmp / "site.ldif"
    ldif.write_text(text)
    secret = tmp / "bind-secret"
    secret.touch(mode=0o600)
    secret.write_text(server.root_password)  # -y reads the whole file: no newline
    progress(f"LDIF: {entries} entries, {len(text) / 2**20:.1f} MiB")
    sides: dict[str, list[dict[str, Any]]] = {"sync": [], "ldapadd": []}
    ratios = []
    for round_ in range(opts.rounds):
        order = ("sync", "ldapadd") if round_ % 2 == 0 else ("ldapadd", "sync")
        got: dict[str, dict[str, Any]] = {}
        for side in order:
            with Slapd(tmp, organizational_units=()) as server:
                slapd_pid = server._proc.pid if server._proc else 0
                slapd_cpu = _cpu_s(slapd_pid)
                if side == "sync":
                    got[side] = await _sync_side(store, server, opts.concurrency,
                                                 opts.connections)
                else:
                    got[side] = await _ldapadd_side(server, ldif, secret)
                got[side]["slapd_cpu_s"] = _cpu_s(slapd_pid) - slapd_cpu
                got[side]["entries"] = _count(server) - 1  # the suffix entry was there
            if got[side]["entries"] != entries:
                raise SystemExit(f"{side} left {got[side]['entries']} entries, not {entries}")
            sides[side].append(got[side])
        ratio = got["ldapadd"]["wall_s"] / got["sync"]["wall_s"]
        ratios.append(ratio)
        load.append(os.getloadavg())
        progress(f"  round {round_ + 1}: sync {got['sync']['wall_s']:.2f}s "
                 f"({entries / got['sync']['wall_s']:.0f}/s, phases {got['sync']['phases_s']}, "
                 f"cpu {got['sync']['client_cpu_s']:.1f}+{got['sync']['slapd_cpu_s']:.1f}s), "
                 f"ldapadd {got['ldapadd']['wall_s']:.2f}s "
                 f"(cpu {got['ldapadd']['client_cpu_s']:.1f}+{got['ldapadd']['slapd_cpu_s']:.1f}s) "
                 f"({entries / got['ldapadd']['wall_s']:.0f}/s); ratio {ratio:.3f}")
    result: dict[str, Any] = {"entries": entries, "rounds": opts.rounds,
                              "ldif_mib": round(len(text) / 2**20, 2)}
    for side, runs in sides.items():
        walls = [r["wall_s"] for r in runs]
        result[side] = {"wall_s": _summary(walls),
                        "entries_per_s": _summary([entries / w for w in walls]),
                        "client_cpu_s": _summary([r["client_cpu_s"] for r in runs]),
                        "slapd_cpu_s": _summary([r["slapd_cpu_s"] for r in runs])}
    apply = [r["phases_s"].get("apply", 0.0) for r in sides["sync"]]
    result["sync"]["apply_phase_s"] = _summary(apply)
    result["sync"]["phases_s_median_round"] = sorted(
        sides["sync"], key=lambda r: r["wall_s"])[len(apply) // 2]["phases_s"]
    result["ratio_sync_over_ldapadd"] = {
        **_summary(ratios), "per_round": [round(r, 3) for r in ratios],
        "of_medians": round(result["sync"]["entries_per_s"]["median"]
                            / result["ldapadd"]["entries_per_s"]["median"], 3)}
    result["load_average"] = {"start": [round(x, 2) for x in load[0]],
                              "end": [round(x, 2) for x in load[-1]],
                              "max_1min": round(max(x[0] for x in load), 2)}
    return result


DESIRED_CONFIG = {"servers": ["ldap://ldap.example.org"], "searchbase": "dc=example,dc=org",
                  "user_base": "ou=people,dc=example,dc=org"}
NAIVE_READS = {  # what desired_state read as one $group document each before issue 24
    "users (LDAP fields)": (User, {}, ("name", "type", "status", "access", "expires_at",
                                       "ldap.ignore", "ldap.version", "email", "uid", "gid",
                                       "fullname", "surname", "shell", "password",
                                       "home_directory")),
    "ssh keys": (SshKey, {}, ("user", "key", "created_at", "expires_at")),
}


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _child_desired(config_file: str, server_pid: int) -> None:
    """In a fresh process of the tree on ``sys.path``: one full desired-state build.
    Prints one JSON line (wall, client and store CPU seconds, entries, peak RSS)."""
    import resource

    from cheeto_like.sync.ldap.desired import desired_state

    async def go() -> dict[str, Any]:
        config = MongoConfig.model_validate_json(Path(config_file).read_text())
        store = await connect(config, autostart=False)
        wall, cpu, server = time.perf_counter(), time.process_time(), _cpu_s(server_pid)
        desired = await desired_state(SITE, LDAPConfig(**DESIRED_CONFIG))
        found = {"wall_s": time.perf_counter() - wall, "client_cpu_s": time.process_time() - cpu,
                 "store_cpu_s": _cpu_s(server_pid) - server, "users": len(desired.users),
                 "groups": len(desired.groups)}
        await store.close()
        return found

    found = asyncio.run(go())
    found["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(found))


async def naive_sizes() -> dict[str, float]:
    """The BSON size (MiB) of each one-document ``$group`` answer of before, computed from
    the rows (the store refuses to send one past 16 MiB)."""
    import bson

    from cheeto_like.models.base import columns

    sizes = {}
    for label, (model, match, fields) in NAIVE_READS.items():
        found = await columns(model, match, *fields)
        doc = {"_id": None, **{f"v{i}": [r.get(f) for r in found]
                               for i, f in enumerate(fields)}}
        sizes[label] = round(len(bson.encode(doc)) / 2**20, 2)
    return sizes


async def run_desired_only(store_config: MongoConfig, server_pid: int, opts: Any
                           ) -> dict[str, Any]:
    """Seed once, then time the desired state in fresh processes, alternating trees."""
    import statistics
    import subprocess

    progress(f"building {opts.users} users ({opts.key_type} keys), {opts.groups} groups")
    await build_site(opts.users, opts.groups, opts.key_type)
    trees = {"current": str(Path(__file__).resolve().parent.parent)}
    if opts.baseline:
        trees = {"baseline": str(Path(opts.baseline).resolve()), **trees}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    with tempfile.NamedTemporaryFile("w", suffix=".json") as config_file:
        config_file.write(store_config.model_dump_json())
        config_file.flush()
        for round_ in range(opts.rounds):
            for name, tree in trees.items():
                out = await asyncio.to_thread(
                    subprocess.run, [sys.executable, __file__, "--child", config_file.name,
                                     str(server_pid)], capture_output=True, text=True,
                    env={**os.environ, "CHEETO_BENCH_TREE": tree, "PYTHONPATH": tree})
                if out.returncode:
                    last = (out.stderr.strip().splitlines() or ["?"])[-1]
                    progress(f"  round {round_ + 1}: {name} failed: {last}")
                    runs[name].append({"failed": last[:300]})
                    continue
                got = json.loads(out.stdout.strip().splitlines()[-1])
                progress(f"  round {round_ + 1}: {name} {got['wall_s']:.2f}s wall "
                         f"({got['client_cpu_s']:.2f} + {got['store_cpu_s']:.2f} CPU)")
                runs[name].append(got)
    result: dict[str, Any] = {"naive_group_document_mib": await naive_sizes()}
    for name, found in runs.items():
        ok = [r for r in found if "failed" not in r]
        summary: dict[str, Any] = {"rounds": len(found), "failed": len(found) - len(ok)}
        if ok:
            for key in ("wall_s", "client_cpu_s", "store_cpu_s", "peak_rss_mb"):
                values = [r[key] for r in ok]
                summary[key] = {"min": round(min(values), 3),
                                "median": round(statistics.median(values), 3)}
            summary["users"] = ok[0]["users"]
        else:
            summary["error"] = found[0]["failed"]
        result[name] = summary
    return result


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--groups", type=int, default=2_000)
    parser.add_argument("--concurrency", type=int, default=8,
                        help="LDAP writes in flight (the sync's --concurrency)")
    parser.add_argument("--connections", type=int, default=None,
                        help="with --vs-ldapadd: pool_max_connections (default: as many "
                             "as --concurrency)")
    parser.add_argument("--key-type", choices=sorted(KEY_TYPES), default="ed25519",
                        help="every user's SSH key: ed25519 (68 bytes) or rsa4096 (~730)")
    parser.add_argument("--desired-only", action="store_true",
                        help="time only the full desired-state build (no slapd needed)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="with --desired-only or --vs-ldapadd: rounds per side")
    parser.add_argument("--vs-ldapadd", action="store_true",
                        help="the full sync into an empty directory against ldapadd of the "
                             "same LDIF on the same slapd, alternating, --rounds rounds")
    parser.add_argument("--baseline", metavar="TREE", default=None,
                        help="with --desired-only: another checkout, measured alternately")
    opts = parser.parse_args()
    if opts.desired_only:
        with tempfile.TemporaryDirectory(prefix="cheeto-ldap-bench-") as tmp:
            embedded = EmbeddedStoreConfig(path=Path(tmp) / "store", port=free_port())
            server = throwaway_server(embedded)
            server.start_background()
            try:
                config = MongoConfig(embedded=embedded, database="bench_ldap")
                store = await connect(config, autostart=False)
                result = await run_desired_only(config, server.pid(), opts)
                await store.close()
            finally:
                server.stop()
        print(json.dumps({"store": "embedded nx-27017", "users": opts.users,
                          "lab_groups": opts.groups, "key_type": opts.key_type,
                          "load_average": [round(x, 2) for x in os.getloadavg()],
                          **result}, indent=2))
        return
    if opts.vs_ldapadd:
        opts.connections = opts.connections or opts.concurrency
        with tempfile.TemporaryDirectory(prefix="cheeto-ldap-bench-") as tmp:
            embedded = EmbeddedStoreConfig(path=Path(tmp) / "store", port=free_port())
            server = throwaway_server(embedded)
            server.start_background()
            try:
                store = await connect(MongoConfig(embedded=embedded, database="bench_ldap"),
                                      autostart=False)
                result = await run_vs_ldapadd(store, Path(tmp), opts)
                await store.close()
            finally:
                server.stop()
        print(json.dumps({"store": "embedded nx-27017", "slapd": "OpenLDAP 2.5 (real, mdb)",
                          "transport": "StartTLS on 127.0.0.1, both sides",
                          "users": opts.users, "lab_groups": opts.groups,
                          "concurrency": opts.concurrency, "connections": opts.connections,
                          "key_type": opts.key_type, **result}, indent=2))
        return
    with tempfile.TemporaryDirectory(prefix="cheeto-ldap-bench-") as tmp:
        embedded = EmbeddedStoreConfig(path=Path(tmp) / "store", port=free_port())
        server = throwaway_server(embedded)
        server.start_background()
        slapd = Slapd(Path(tmp), organizational_units=()).start()
        try:
            store = await connect(MongoConfig(embedded=embedded, database="bench_ldap"),
                                  autostart=False)
            result = await run(store, slapd, opts.users, opts.groups, opts.concurrency,
                               opts.key_type)
            await store.close()
        finally:
            slapd.stop()
            server.stop()
    print(json.dumps({"store": "embedded nx-27017", "slapd": "OpenLDAP 2.5 (real, mdb)",
                      "users": opts.users, "lab_groups": opts.groups,
                      "concurrency": opts.concurrency, "key_type": opts.key_type,
                      "load_average": [round(x, 2) for x in os.getloadavg()],
                      **result, "before_issue_18": BEFORE}, indent=2))


if __name__ == "__main__":
    if "--child" in sys.argv:
        at = sys.argv.index("--child")
        _child_desired(sys.argv[at + 1], int(sys.argv[at + 2]))
    else:
        asyncio.run(main())
