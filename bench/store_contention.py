"""Benchmark concurrent writers on the embedded store, with and without injected write
conflicts: ops/s and failures of real ``AdjustUsage`` operations.

N writers (N = 1, 4, 16) run ``--ops`` adjustments between them, spread over up to four
processes (each gathers its writers with asyncio); with ``conflicts`` the store's
``failCommand`` fail point fails one insert in ``--conflict-every`` with WriteConflict
(code 112, TransientTransactionError), as a replica set does to overlapping writers.
Sides alternate within each round (``--rounds``, at least 5); min and median per case,
and the load average, are printed as one JSON object on stdout.

    .venv/bin/python bench/store_contention.py [--rounds 5] [--baseline /tmp/tree]

``--tree`` measures another checkout as "this" (a clean worktree of a commit, away
from uncommitted edits); ``--baseline TREE`` runs the writers of another checkout (the
tree before a change) against the same server (this tree's, which has the fail point),
each side in its own database, seeded by its own tree. Progress goes to stderr.
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
from typing import Any

from _common import progress

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORKER = r'''
import asyncio, json, sys, time
from cheeto_like.config import EmbeddedStoreConfig, MongoConfig
from cheeto_like.errors import CheetoError
from cheeto_like.operations.quota import AdjustUsage
from cheeto_like.store import connect

async def main(path, database, writers, ops):
    store = await connect(MongoConfig(embedded=EmbeddedStoreConfig(path=path)),
                          database=database, autostart=False, create_indexes=False)
    store.transaction_retry_seconds = 120.0
    failures = []
    async def one(w):
        for n in range(ops):
            try:
                await AdjustUsage.run(store, "bench", site="farm", user="alice",
                                      cpu_minutes=1, reason=f"w{w} {n}")
            except CheetoError as exc:
                failures.append(str(exc)[:200])
    print("ready", flush=True)
    if not sys.stdin.readline():  # the bench went away: run nothing
        await store.close()
        return
    started = time.perf_counter()
    await asyncio.gather(*[one(w) for w in range(writers)])
    elapsed = time.perf_counter() - started
    await store.close()
    print(json.dumps({"elapsed": elapsed, "failures": failures}), flush=True)

a = sys.argv[1:]
asyncio.run(main(a[0], a[1], int(a[2]), int(a[3])))
'''


def start_server(data_dir: Path) -> Any:
    from cheeto_like.config import EmbeddedStoreConfig
    from cheeto_like.embedded import EmbeddedServer

    config = EmbeddedStoreConfig(path=data_dir)
    server = EmbeddedServer(config, exit_with=os.getpid(),
                            set_parameters={"enableTestCommands": "1"})
    server.start_background()
    return config, server


SEED = r'''
import asyncio, sys
from cheeto_like.config import EmbeddedStoreConfig, MongoConfig
from cheeto_like.operations.group import SeedAccessStatusGroups
from cheeto_like.operations.site import CreateSite
from cheeto_like.operations.user import CreateUser
from cheeto_like.operations.user_site import AddSiteUser
from cheeto_like.store import connect

async def main(path, database):
    store = await connect(MongoConfig(embedded=EmbeddedStoreConfig(path=path)),
                          database=database, autostart=False)
    try:
        await store.drop_database()
        await store.bind()
        await SeedAccessStatusGroups.run(store, "bench")
        await CreateSite.run(store, "bench", name="farm", fqdn="farm.example.org")
        await CreateUser.run(store, "bench", name="alice", email="alice@example.org",
                             uid=1_000_000, fullname="Alice")
        await AddSiteUser.run(store, "bench", user="alice", site="farm")
    finally:
        await store.close()

asyncio.run(main(sys.argv[1], sys.argv[2]))
'''


def seed(tree: Path, data_dir: Path, database: str) -> None:
    """Seed with the side's own tree: its models write the documents its writers read."""
    subprocess.run([sys.executable, "-c", SEED, str(data_dir), database], cwd=tree,
                   env={**os.environ, "PYTHONPATH": str(tree)}, check=True)


async def fail_point(server: Any, mode: Any, **data: Any) -> None:
    """Configure the server's failCommand over a plain client (no database bound)."""
    from pymongo import AsyncMongoClient

    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(server.uri,
                                                                **server.client_options())
    try:
        await client.admin.command({"configureFailPoint": "failCommand", "mode": mode,
                                    "data": data})
    finally:
        await client.close()


def run_case(tree: Path, data_dir: Path, database: str, writers: int,
             ops: int) -> dict[str, Any]:
    """``ops`` adjustments by ``writers`` writers over up to 4 processes; wall time from
    the go signal until every process reported."""
    procs = min(writers, 4)
    per = [writers // procs + (1 if i < writers % procs else 0) for i in range(procs)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    children = [subprocess.Popen([sys.executable, "-c", WORKER, str(data_dir), database,
                                  str(w), str(max(1, ops // writers))], cwd=tree, env=env,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                for w in per]
    for child in children:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    started = time.perf_counter()
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    reports = [json.loads(child.communicate()[0].strip().splitlines()[-1])
               for child in children]
    wall = time.perf_counter() - started
    done = sum(per) * max(1, ops // writers)
    failures = sum(len(r["failures"]) for r in reports)
    return {"ops_per_s": round((done - failures) / wall, 2), "failures": failures,
            "wall_s": round(wall, 3),
            "first_failure": next((f for r in reports for f in r["failures"]), None)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds (at least 5)")
    parser.add_argument("--ops", type=int, default=48, help="adjustments per case")
    parser.add_argument("--writers", default="1,4,16", help="writer counts")
    parser.add_argument("--conflict-every", type=int, default=4,
                        help="with conflicts: one insert in this many fails")
    parser.add_argument("--baseline", type=Path, help="another checkout to compare")
    parser.add_argument("--tree", type=Path, default=ROOT,
                        help="the checkout measured as 'this' (default: this one)")
    args = parser.parse_args()
    rounds = max(5, args.rounds)
    sides = {"this": args.tree.resolve()}
    if args.baseline is not None:
        sides["baseline"] = args.baseline.resolve()
    data_dir = Path(tempfile.mkdtemp(prefix="cheeto-contention-"))
    _config, server = start_server(data_dir)
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    try:
        for side, tree in sides.items():
            seed(tree, data_dir, f"bench_contention_{side}")
        for r in range(rounds):
            order = list(sides) if r % 2 == 0 else list(reversed(sides))
            for writers in [int(w) for w in args.writers.split(",")]:
                for conflicts in (False, True):
                    for side in order:
                        inserts = args.ops * 4  # claim, row, mark, History per operation
                        if conflicts:
                            asyncio.run(fail_point(
                                server, {"times": inserts // args.conflict_every},
                                failCommands=["insert"], errorCode=112,
                                errorLabels=["TransientTransactionError"]))
                        case = run_case(sides[side], data_dir, f"bench_contention_{side}",
                                        writers, args.ops)
                        asyncio.run(fail_point(server, "off"))
                        key = f"{side} n={writers} {'conflicts' if conflicts else 'clean'}"
                        results.setdefault(key, {}).setdefault("runs", []).append(case)
                        progress(f"round {r + 1}/{rounds} {key}: {case}")
    finally:
        server.stop()
    summary: dict[str, Any] = {}
    for key, found in results.items():
        runs = found["runs"]
        rates = [c["ops_per_s"] for c in runs]
        summary[key] = {"ops_per_s_min": min(rates),
                        "ops_per_s_median": statistics.median(rates),
                        "failures_total": sum(c["failures"] for c in runs),
                        "runs": len(runs),
                        "first_failure": next((c["first_failure"] for c in runs
                                               if c["first_failure"]), None)}
    print(json.dumps({"ops_per_case": args.ops, "rounds": rounds,
                      "conflict_every": args.conflict_every,
                      "loadavg": os.getloadavg(), "cases": summary}, indent=2))


if __name__ == "__main__":
    main()
