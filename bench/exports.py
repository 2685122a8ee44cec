"""Benchmark the site exports at 10,000 users and 2,000 group storages.

Builds a site in an embedded store with bulk inserts (this measures the exports, not the
write path), then runs puppet-legacy, sympa, storage and root-keys, reporting each one's
wall time and number of database commands. It runs at two sizes to show that the command
count does not grow with the number of users. Prints JSON on stdout.

    .venv/bin/python bench/exports.py [--users 10000] [--groups 2000]
    .venv/bin/python bench/exports.py --sizes 1000 10000 20000

``--baseline <checkout>`` measures another tree (e.g. the last commit, unpacked with
``git archive HEAD | tar -x -C DIR``) on the same seeded store, alternating with this one
in subprocesses, so both see the same data and the same machine load; each export also
reports the CPU it cost this process and the store's server process, which swing much
less than wall time on a shared machine, and a hash of its output (equal hashes: the
same bytes). ``CHEETO_BENCH_TREE=<checkout>`` runs everything from another tree.

    .venv/bin/python bench/exports.py --sizes 1000 10000 20000 --baseline /tmp/base
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pymongo import monitoring

# CHEETO_BENCH_TREE: measure another checkout (a baseline) with this script, side by side
sys.path.insert(0, os.environ.get("CHEETO_BENCH_TREE")
                or str(Path(__file__).resolve().parent.parent))

from _common import bulk_insert, free_port, throwaway_server

from cheeto_like.config import EmbeddedStoreConfig, MongoConfig
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
from cheeto_like.models.storage import StorageAllocation, ZFSConfig
from cheeto_like.puppet.yamlio import dumps
from cheeto_like.queries.exports import (
    root_key_blocks,
    root_keys_text,
    storage_export,
    sympa_emails,
    sympa_text,
)
from cheeto_like.queries.puppet_legacy import site_to_puppet_legacy
from cheeto_like.store import connect

SITE = "benchexp"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAcUIS47SFVib3yJlqOwvcrX5PH+CxglMj9MWWZzgI2a k"


class Counter(monitoring.CommandListener):
    """Counts queries (find, aggregate, count, distinct) and, separately, the cursor
    batches (getMore) that larger results naturally take."""

    QUERIES = ("find", "aggregate", "count", "distinct")

    def __init__(self) -> None:
        self.count = 0
        self.batches = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name in self.QUERIES:
            self.count += 1
        elif event.command_name == "getMore":
            self.batches += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


async def build(users: int, groups: int) -> None:
    for model in (Site, User, Group, GroupMembership, UserSiteInfo, SshKey, Storage,
                  StorageVolume, AutomountMap):
        await model.get_pymongo_collection().delete_many({})
    await bulk_insert(Site, [Site(name=SITE, fqdn=f"{SITE}.example.org")])
    await bulk_insert(Group, [Group(name=f"{s}-users", gid=3_333_333_000 + i, type="access",
                                shorthand=s) for i, s in enumerate(("login-ssh", "root-ssh"))])
    await bulk_insert(AutomountMap, [AutomountMap(name=m, site=SITE, prefix=f"/{m}",
                                              options=["rw", "fstype=nfs"])
                                 for m in ("home", "group")])
    names = [f"e{i:05d}" for i in range(users)]
    await bulk_insert(User, [User(name=n, email=f"{n}@example.org", uid=1_000_000 + i,
                              gid=1_000_000 + i, fullname=f"Export {n}",
                              home_directory=f"/home/{n}", status="active",
                              type="admin" if i % 100 == 0 else "user",
                              access=["login-ssh", "root-ssh"] if i % 100 == 0
                              else ["login-ssh"]) for i, n in enumerate(names)])
    await bulk_insert(UserSiteInfo, [UserSiteInfo(user=n, site=SITE) for n in names])
    await bulk_insert(SshKey, [SshKey(user=n, key=KEY) for n in names[::100]])
    await bulk_insert(Group, [Group(name=f"g{g:04d}", gid=700_000 + g) for g in range(groups)])
    await bulk_insert(GroupMembership, [GroupMembership(user=n, group=f"g{i % groups:04d}",
                                                    site=SITE, roles=["member"])
                                    for i, n in enumerate(names)])
    home_root = StorageVolume(name="homes", site=SITE, backend="zfs", host="nas-1",
                              host_path="/export/home", zfs=ZFSConfig())
    group_root = StorageVolume(name="groups", site=SITE, backend="zfs", host="nas-2",
                               host_path="/export/group", zfs=ZFSConfig())
    await bulk_insert(StorageVolume, [home_root, group_root])
    await bulk_insert(StorageVolume, [StorageVolume(
        name=f"homes/{n}", site=SITE, backend="zfs", host="nas-1",
        host_path=f"/export/home/{n}", parent="homes", zfs=ZFSConfig(),
        allocations=[StorageAllocation(quota="20G")]) for n in names])
    await bulk_insert(Storage, [Storage(name=n, site=SITE, category="home", owner=n, group=n,
                                    volume=f"homes/{n}", automount_map="home", mount_name=n)
                            for n in names])
    await bulk_insert(StorageVolume, [StorageVolume(
        name=f"groups/g{g:04d}", site=SITE, backend="zfs", host="nas-2",
        host_path=f"/export/group/g{g:04d}", parent="groups", zfs=ZFSConfig(),
        allocations=[StorageAllocation(quota="10T")]) for g in range(groups)])
    await bulk_insert(Storage, [Storage(name=f"g{g:04d}", site=SITE, category="group",
                                    owner=names[g % users], group=f"g{g:04d}",
                                    volume=f"groups/g{g:04d}", automount_map="group",
                                    mount_name=f"g{g:04d}") for g in range(groups)])


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (Linux ``/proc``): on a shared machine the
    wall time swings with the load; the CPU a run costs much less."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(counter: Counter, server_pid: int | None = None) -> dict[str, Any]:
    exports = {
        "puppet-legacy": lambda: site_to_puppet_legacy(SITE),
        "sympa": lambda: sympa_emails(SITE),
        "storage": lambda: storage_export(SITE),
        "root-keys": lambda: root_key_blocks(SITE),
    }
    render = {"puppet-legacy": dumps, "sympa": sympa_text, "storage": json.dumps,
              "root-keys": root_keys_text}
    out = {}
    for name, run in exports.items():
        counter.count = counter.batches = 0
        server_cpu = cpu_seconds(server_pid) if server_pid else 0.0
        cpu = time.process_time()
        started = time.perf_counter()
        data = await run()
        text = render[name](data)
        out[name] = {"seconds": round(time.perf_counter() - started, 3),
                     "client_cpu": round(time.process_time() - cpu, 3),
                     "queries": counter.count, "getmore_batches": counter.batches,
                     "bytes": len(text),
                     "sha256": hashlib.sha256(text.encode()).hexdigest()[:16]}
        if server_pid:
            out[name]["store_cpu"] = round(cpu_seconds(server_pid) - server_cpu, 3)
    return out


async def measure_existing(opts: argparse.Namespace) -> None:
    """``--measure``: run the exports once against a store another run seeded (so the
    baseline tree and this one read the same data, interleaved, in one session)."""
    counter = Counter()
    embedded = EmbeddedStoreConfig(path=Path(opts.store_path), port=opts.port)
    store = await connect(MongoConfig(embedded=embedded, database="bench_exports"),
                          autostart=False, listeners=[counter])
    try:
        print(json.dumps(await measure(counter, opts.server_pid)))
    finally:
        await store.close()


def measure_tree(tree: str, embedded: EmbeddedStoreConfig, server_pid: int) -> dict[str, Any]:
    env = {**os.environ, "CHEETO_BENCH_TREE": tree}
    out = subprocess.run(
        [sys.executable, __file__, "--measure", "--store-path", str(embedded.path),
         "--port", str(embedded.port), "--server-pid", str(server_pid)],
        env=env, capture_output=True, text=True, check=True, timeout=1800).stdout
    return json.loads(out)


def best_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per export, the run with the lowest wall time (plus every run's wall time)."""
    out = {}
    for name in runs[0]:
        best = min((r[name] for r in runs), key=lambda r: r["seconds"])
        out[name] = {**best, "all_seconds": [r[name]["seconds"] for r in runs]}
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--groups", type=int, default=2_000)
    parser.add_argument("--sizes", type=int, nargs="+", metavar="USERS",
                        help="user counts to measure, each with users/5 group storages "
                             "(default: --users/10 and --users)")
    parser.add_argument("--baseline", metavar="TREE",
                        help="another checkout (e.g. `git archive HEAD | tar -x -C DIR`) "
                             "measured on the same store, alternating with this tree")
    parser.add_argument("--rounds", type=int, default=1,
                        help="measurements per tree and size (best wall time reported)")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--store-path", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--server-pid", type=int, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.measure:
        await measure_existing(opts)
        return
    sizes = ([(n, n // 5) for n in opts.sizes] if opts.sizes
             else [(opts.users // 10, opts.groups // 10), (opts.users, opts.groups)])
    trees = {"this tree": str(Path(__file__).resolve().parent.parent)}
    if opts.baseline:
        trees["baseline"] = str(Path(opts.baseline).resolve())
    with tempfile.TemporaryDirectory(prefix="cheeto-exports-") as tmp:
        embedded = EmbeddedStoreConfig(path=Path(tmp) / "store", port=free_port())
        server = throwaway_server(embedded)
        server_pid = server.start_background()
        try:
            store = await connect(MongoConfig(embedded=embedded, database="bench_exports"),
                                  autostart=False)
            results: dict[str, Any] = {}
            for users, groups in sizes:
                print(f"building {users} users, {groups} group storages", file=sys.stderr)
                await build(users, groups)
                runs: dict[str, list[dict[str, Any]]] = {label: [] for label in trees}
                for round_ in range(opts.rounds):
                    for label, tree in trees.items():
                        print(f"  {label}, round {round_ + 1}", file=sys.stderr)
                        runs[label].append(measure_tree(tree, embedded, server_pid))
                results[f"{users}_users"] = {"users": users, "group_storages": groups,
                                             **{label: best_of(r) for label, r in runs.items()}}
            await store.close()
        finally:
            server.stop()
    print(json.dumps({"store": "embedded nx-27017", "trees": trees, "runs": results},
                     indent=2))


if __name__ == "__main__":
    asyncio.run(main())
