"""Benchmark the write path against its floor, and the user listing it builds.

The write path: each user takes 5 operations (CreateUser with its personal group,
AddSiteUser, three AddGroupMember), each its own transaction with its History row and
generation mark. Its floor: raw pymongo one-document transactions (``insert_one`` +
``commitTransaction``, ``w: majority``) on the same store and client. The two sides
alternate in rounds (each round: the same number of operations on both, which side
goes first alternating), so load on a shared machine hits both alike; the ratio
(ours / floor ops per second) is printed per round with its min and median.

Store commands per operation are counted by a pymongo ``CommandListener`` on the
bench's client (ours per operation kind and overall; the floor's is 2), so a change
that adds a round trip shows even when the machine's load hides it in the timings.

After the rounds it times ``cheeto ng user list --site S`` (the real console script, as
a subprocess) and ``find_users(site=…, access=…)`` over what the rounds created. Prints
one JSON object on stdout; progress goes to stderr.

    .venv/bin/python bench/ops.py [--users 1000] [--rounds 5] [--mongo-uri URI]

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
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from _common import free_port, progress, throwaway_server
from pymongo import WriteConcern, monitoring

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
FLOOR_COLLECTION = "bench_floor"
OPS_PER_USER = 5


class CommandCounter(monitoring.CommandListener):
    """Counts the commands started while ``label`` is set, per label and command name
    (the listener runs on the event loop's thread: no lock needed)."""

    def __init__(self) -> None:
        self.label: str | None = None
        self.counts: Counter[str] = Counter()
        self.names: Counter[tuple[str, str]] = Counter()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if self.label is not None:
            self.counts[self.label] += 1
            self.names[(self.label, event.command_name)] += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


async def seed(store: Store) -> None:
    await SeedAccessStatusGroups.run(store, "bench")
    await CreateSite.run(store, "bench", name=SITE, fqdn="bench.example.org")
    for g in range(GROUPS):
        await CreateGroup.run(store, "bench", name=f"lab{g:03d}", gid=500_000 + g)


async def ours(store: Store, counter: CommandCounter, first: int, users: int,
               ops_done: Counter[str]) -> float:
    """Create ``users`` users from number ``first``; returns the seconds it took."""
    started = time.perf_counter()
    for i in range(first, first + users):
        name = f"user{i:05d}"
        access = ["login-ssh", "slurm"] if i % 2 == 0 else ["login-ssh"]
        counter.label = "CreateUser"
        await CreateUser.run(store, "bench", name=name, email=f"{name}@example.org",
                             uid=1_000_000 + i, fullname=f"User {i}", access=access)
        counter.label = "AddSiteUser"
        await AddSiteUser.run(store, "bench", user=name, site=SITE)
        counter.label = "AddGroupMember"
        for k in range(3):
            await AddGroupMember.run(store, "bench", group=f"lab{(i + k) % GROUPS:03d}",
                                     user=name, site=SITE)
        counter.label = None
        ops_done.update({"CreateUser": 1, "AddSiteUser": 1, "AddGroupMember": 3})
    return time.perf_counter() - started


async def floor(store: Store, counter: CommandCounter, transactions: int) -> float:
    """``transactions`` raw one-document transactions; returns the seconds they took."""
    coll = store.database[FLOOR_COLLECTION]
    majority = WriteConcern("majority")
    counter.label = "floor"
    started = time.perf_counter()
    for _ in range(transactions):
        async with store.client.start_session() as session:
            await session.start_transaction(write_concern=majority)
            await coll.insert_one({"_id": uuid.uuid4().hex, "n": 1}, session=session)
            await session.commit_transaction()
    elapsed = time.perf_counter() - started
    counter.label = None
    return elapsed


def summary(values: list[float]) -> dict[str, float]:
    return {"min": round(min(values), 3), "median": round(statistics.median(values), 3),
            "max": round(max(values), 3)}


async def rounds(store: Store, counter: CommandCounter, users: int,
                 count: int) -> dict[str, Any]:
    per_round = max(1, users // count)
    ops_done: Counter[str] = Counter()
    rows = []
    for r in range(count):
        operations = per_round * OPS_PER_USER
        sides: dict[str, float] = {}
        cpu: dict[str, float] = {}
        order = ("ours", "floor") if r % 2 == 0 else ("floor", "ours")
        for side in order:
            started_cpu = time.process_time()
            if side == "ours":
                sides["ours"] = await ours(store, counter, r * per_round, per_round,
                                           ops_done)
            else:
                sides["floor"] = await floor(store, counter, operations)
            cpu[side] = time.process_time() - started_cpu
        row = {"round": r + 1, "first": order[0], "operations": operations,
               "ours_ops_s": round(operations / sides["ours"], 1),
               "floor_ops_s": round(operations / sides["floor"], 1),
               # this process's CPU per operation: less at the mercy of the machine's
               # load than the wall rates (the store server's CPU is not in it)
               "ours_client_cpu_ms": round(cpu["ours"] / operations * 1000, 3),
               "floor_client_cpu_ms": round(cpu["floor"] / operations * 1000, 3)}
        row["ratio"] = round(row["ours_ops_s"] / row["floor_ops_s"], 3)
        rows.append(row)
        progress(f"  round {r + 1}: ours {row['ours_ops_s']} ops/s, floor "
                 f"{row['floor_ops_s']} ops/s, ratio {row['ratio']}")
    total_ops = sum(ops_done.values())
    per_kind = {kind: round(counter.counts[kind] / n, 2) for kind, n in ops_done.items()}
    by_name: dict[str, dict[str, float]] = {}
    for (kind, name), n in sorted(counter.names.items()):
        by_name.setdefault(kind, {})[name] = round(
            n / (ops_done[kind] if kind in ops_done else count * per_round * OPS_PER_USER),
            2)
    ours_commands = sum(counter.counts[k] for k in ops_done)
    return {
        "users": per_round * count,
        "rounds": rows,
        "ours_ops_s": summary([r["ours_ops_s"] for r in rows]),
        "floor_ops_s": summary([r["floor_ops_s"] for r in rows]),
        "ratio": summary([r["ratio"] for r in rows]),
        "client_cpu_ms_per_operation": {
            "ours": summary([r["ours_client_cpu_ms"] for r in rows]),
            "floor": summary([r["floor_client_cpu_ms"] for r in rows])},
        "commands_per_operation": {
            "ours": round(ours_commands / total_ops, 2),
            "floor": round(counter.counts["floor"] / (count * per_round * OPS_PER_USER), 2),
            "ours_by_operation": per_kind,
            "by_command": by_name,
        },
    }


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
    parser.add_argument("--users", type=int, default=1000,
                        help="users created in all (5 operations each), split over rounds")
    parser.add_argument("--rounds", type=int, default=5,
                        help="alternating rounds of ours and the floor (at least 5)")
    parser.add_argument("--mongo-uri", help="a MongoDB replica set to use instead")
    parser.add_argument("--no-listing", action="store_true",
                        help="skip timing find_users and `ng user list` afterwards")
    opts = parser.parse_args()
    if opts.rounds < 1 or opts.users < opts.rounds:
        parser.error("--rounds must be >= 1 and --users >= --rounds")

    counter = CommandCounter()
    load_before = os.getloadavg()
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
            store = await connect(mongo, autostart=False, listeners=[counter])
            await store.drop_database()
            await store.bind()
            await seed(store)
            progress(f"{opts.rounds} rounds, {opts.users} users in all, on "
                     f"{store.description}")
            writes = await rounds(store, counter, opts.users, opts.rounds)
            listing: dict[str, Any] = {}
            if not opts.no_listing:
                listing["find_users_site_access"] = await time_find_users()
            await store.close()
            if not opts.no_listing:
                listing["cli_user_list_site"] = time_cli_list(config)
        finally:
            if server is not None:
                server.stop()
    print(json.dumps({
        "store": "mongodb" if opts.mongo_uri else "embedded nx-27017",
        "load_average": {"before": [round(x, 2) for x in load_before],
                         "after": [round(x, 2) for x in os.getloadavg()]},
        "cpus": os.cpu_count(),
        "write_path": writes,
        **listing,
    }, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
