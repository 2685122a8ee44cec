"""Benchmark the write path and the user listing at 10k users.

Creates N users through the operations (each: CreateUser with its personal group,
AddSiteUser, three AddGroupMember), then times ``cheeto ng user list --site S`` (the real
console script, as a subprocess) and ``find_users(site=…, access=…)``. Prints one JSON
object on stdout; progress goes to stderr.

    .venv/bin/python bench/ops.py [--users 10000] [--mongo-uri URI]

Without ``--mongo-uri`` it starts its own embedded store in a temporary directory.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import free_port, progress, throwaway_server

from cheeto_like.config import EmbeddedStoreConfig, MongoConfig
from cheeto_like.operations.group import CreateGroup, SeedAccessStatusGroups
from cheeto_like.operations.group_membership import AddGroupMember
from cheeto_like.operations.site import CreateSite
from cheeto_like.operations.user import CreateUser
from cheeto_like.operations.user_site import AddSiteUser
from cheeto_like.queries.user import find_users
from cheeto_like.store import Store, connect

SITE = "bench"
GROUPS = 50
DATABASE = "bench_ops"


async def populate(store: Store, users: int) -> dict[str, float]:
    await SeedAccessStatusGroups.run(store, "bench")
    await CreateSite.run(store, "bench", name=SITE, fqdn="bench.example.org")
    for g in range(GROUPS):
        await CreateGroup.run(store, "bench", name=f"lab{g:03d}", gid=500_000 + g)
    ops = 0
    started = time.perf_counter()
    for i in range(users):
        name = f"user{i:05d}"
        access = ["login-ssh", "slurm"] if i % 2 == 0 else ["login-ssh"]
        await CreateUser.run(store, "bench", name=name, email=f"{name}@example.org",
                             uid=1_000_000 + i, fullname=f"User {i}", access=access)
        await AddSiteUser.run(store, "bench", user=name, site=SITE)
        for k in range(3):
            await AddGroupMember.run(store, "bench", group=f"lab{(i + k) % GROUPS:03d}",
                                     user=name, site=SITE)
        ops += 5
        if (i + 1) % 1000 == 0:
            rate = ops / (time.perf_counter() - started)
            progress(f"  {i + 1} users, {rate:.0f} ops/s")
    elapsed = time.perf_counter() - started
    return {"operations": ops, "seconds": round(elapsed, 2),
            "ops_per_second": round(ops / elapsed, 1)}


async def time_find_users(repeats: int = 5) -> dict[str, float]:
    timings = []
    count = 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        found = await find_users(site=SITE, access="slurm")
        timings.append(time.perf_counter() - t0)
        count = len(found)
    return {"matches": count, "median_s": round(statistics.median(timings), 3),
            "min_s": round(min(timings), 3)}


def time_cli_list(config: Path, repeats: int = 3) -> dict[str, float]:
    cheeto = Path(sys.executable).with_name("cheeto")
    timings = []
    rows = 0
    env = {**os.environ, "CHEETO_CONFIG": str(config)}
    for _ in range(repeats):
        t0 = time.perf_counter()
        proc = subprocess.run([str(cheeto), "ng", "user", "list", "--site", SITE, "--json"],
                              capture_output=True, text=True, env=env, check=True)
        timings.append(time.perf_counter() - t0)
        rows = len(json.loads(proc.stdout))
    return {"rows": rows, "median_s": round(statistics.median(timings), 3),
            "min_s": round(min(timings), 3)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--mongo-uri", help="a MongoDB replica set to use instead")
    opts = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="cheeto-bench-") as tmp:
        server = None
        if opts.mongo_uri:
            mongo = MongoConfig(uri=opts.mongo_uri, database=DATABASE)
            config_text = (f"mongo:\n  default:\n    uri: {opts.mongo_uri}\n"
                           f"    database: {DATABASE}\n")
        else:
            embedded = EmbeddedStoreConfig(path=Path(tmp) / "store", port=free_port())
            server = throwaway_server(embedded)
            server.start_background()
            mongo = MongoConfig(embedded=embedded, database=DATABASE)
            config_text = (f"mongo:\n  default:\n    database: {DATABASE}\n    embedded:\n"
                           f"      path: {embedded.path}\n      port: {embedded.port}\n")
        config = Path(tmp) / "config.yaml"
        config.write_text(config_text)
        try:
            store = await connect(mongo, autostart=False)
            await store.drop_database()
            await store.bind()
            progress(f"creating {opts.users} users on {store.description}")
            writes = await populate(store, opts.users)
            finds = await time_find_users()
            await store.close()
            cli = time_cli_list(config)
        finally:
            if server is not None:
                server.stop()
    print(json.dumps({
        "store": "mongodb" if opts.mongo_uri else "embedded nx-27017",
        "users": opts.users,
        "write_path": writes,
        "find_users_site_access": finds,
        "cli_user_list_site": cli,
    }, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
