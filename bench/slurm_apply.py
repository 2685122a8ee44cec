"""Benchmark one Slurm apply of a whole 1,000-user site against a real slurmdbd.

The site (built with bench/slurm_plan.py's helpers: bulk inserts into an embedded store)
has 1,000 users in 50 lab groups, each lab's account running in three partitions under
its own QOS: 3,000 user associations, 50 accounts, 50 QOS. From an empty cluster it
reads, plans and applies once, then reads and plans again, and reports:
- sacctmgr processes started (reads and writes, counted at the runner) against the
  floor: the reads plus one write per distinct command shape (sacctmgr applies one
  settings set per call, so fewer processes are impossible);
- the wall time of each step;
- the reference's process count for the same shape, estimated from its per-user call
  pattern (bench/RESULTS.md explains the estimate).
Prints one JSON object on stdout; progress on stderr.

    .venv/bin/python bench/slurm_apply.py [--users 1000] [--groups 50]

Needs the Slurm packages (scripts/install-system-deps.sh).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import free_port, progress, throwaway_server
from slurm_plan import PARTITIONS, SITE, add_users, build_site

from cheeto_like.adapters.sacctmgr import Result, SAcctMgr
from cheeto_like.config import EmbeddedStoreConfig, MongoConfig
from cheeto_like.store import connect
from cheeto_like.sync.slurm.actual import SAcctMgrReader, actual_state
from cheeto_like.sync.slurm.desired import desired_state
from cheeto_like.sync.slurm.plan import Plan, plan
from cheeto_like.sync.slurm.run import apply_plan
from tests.services.slurm import SlurmAccounting


class CountingSAcctMgr(SAcctMgr):
    """Counts every sacctmgr process it starts (reads go through ``run`` too)."""

    reads = 0
    writes = 0

    async def run(self, args: Sequence[str], *, write: bool) -> Result:
        if write:
            self.writes += 1
        else:
            self.reads += 1
        return await super().run(args, write=write)


def floor_writes(planned: Plan) -> int:
    """One write per distinct command shape: the command with its name lists blanked
    (``add user <names> account=lab0001 …``). Commands that differ only in which names
    they list could have been one process; all others could not."""
    shapes = set()
    for batch in planned.batches:
        for command in batch.commands:
            args = list(command.args)
            if args[:1] == ["add"]:
                args[2] = "<names>"
            args = ["name=<names>" if a.startswith("name=") else a for a in args]
            shapes.add((batch.label, tuple(args)))
    return len(shapes)


def reference_processes(users: int, assoc_per_user: int, accounts: int, qos: int) -> int:
    """The reference's calls for the same site from empty: one ``add user`` per
    association, one default-account change per user, one add per account and per QOS
    (82,000 for 20,000 users x 3 associations, 1,000 accounts and 500 QOS, as the issue
    measured: 20,000 x 4 + 1,000 + 500 = 81,500)."""
    return users * (assoc_per_user + 1) + accounts + qos


async def timed(label: str, coro: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    result = await coro
    elapsed = time.perf_counter() - started
    progress(f"  {label}: {elapsed:.2f}s")
    return result, elapsed


async def run(slurm: SlurmAccounting, users: int, groups: int) -> dict[str, Any]:
    runner = CountingSAcctMgr(env=slurm.env, timeout=300)
    reader = SAcctMgrReader(runner)
    slurm.add_cluster(SITE)
    await build_site(groups, groups)  # one QOS per lab
    await add_users(0, users, groups)
    progress(f"applying a {users}-user site in {groups} groups from empty")
    desired, desired_s = await timed("desired", desired_state(SITE))
    actual, read_s = await timed("actual", actual_state(reader, SITE))
    reads = runner.reads
    started = time.perf_counter()
    planned = plan(desired, actual)
    plan_s = time.perf_counter() - started
    items, apply_s = await timed("apply", apply_plan(planned, runner, max_deletions=0))
    failed = [i for i in items if i.outcome != "ok"]
    writes = runner.writes
    before = runner.reads + runner.writes
    again, again_s = await timed("second read+plan", _read_and_plan(reader, desired))
    return {
        "users": users, "groups": groups, "partitions": len(PARTITIONS),
        "associations": len(desired.associations), "accounts": len(desired.accounts),
        "qos": len(desired.qos),
        "sacctmgr_processes": {
            "reads": reads, "writes": writes, "total": reads + writes,
            "floor": reads + floor_writes(planned),
            "reference_estimate": reference_processes(
                users, len(desired.associations) // users, len(desired.accounts),
                len(desired.qos)),
        },
        "wall_s": {"desired": round(desired_s, 3), "read": round(read_s, 3),
                   "plan": round(plan_s, 3), "apply": round(apply_s, 2),
                   "second_read_and_plan": round(again_s, 3)},
        "changes": planned.counts, "failed_commands": len(failed),
        "second_run_plans_nothing": again.is_empty,
        "second_run_processes": runner.reads + runner.writes - before,
    }


async def _read_and_plan(reader: SAcctMgrReader, desired: Any) -> Plan:
    return plan(desired, await actual_state(reader, SITE))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=1_000)
    parser.add_argument("--groups", type=int, default=50)
    opts = parser.parse_args()
    if opts.users < 1 or not 0 < opts.groups <= 1000:
        parser.error("--users must be positive and --groups between 1 and 1000")
    with tempfile.TemporaryDirectory(prefix="cheeto-slurm-apply-") as tmp:
        embedded = EmbeddedStoreConfig(path=Path(tmp) / "store", port=free_port())
        server = throwaway_server(embedded)
        server.start_background()
        slurm = SlurmAccounting(Path(tmp)).start()
        try:
            store = await connect(MongoConfig(embedded=embedded, database="bench_slurm_apply"),
                                  autostart=False)
            result = await run(slurm, opts.users, opts.groups)
            await store.close()
        finally:
            slurm.stop()
            server.stop()
    print(json.dumps({"store": "embedded nx-27017", "slurmdbd": "22.05 (real)", **result},
                     indent=2))


if __name__ == "__main__":
    asyncio.run(main())
