"""Benchmark the Slurm reconciler at 20,000 users x 3 associations and 500 QOS.

Builds the site directly in an embedded store (bulk inserts: this measures the sync, not
the write path), starts a real slurmdbd (tests/services/slurm.py), converges 19,000
users, then adds 1,000 more and measures:
- the desired-state build time and the pure plan time;
- the sacctmgr processes of the apply for the 1,000 new users, against the reference's
  one process per association (plus one per default-account change);
- the wall time of that apply against the real slurmdbd.
Prints one JSON object on stdout; progress on stderr.

    .venv/bin/python bench/slurm_plan.py [--users 20000] [--groups 1000] [--qos 500]
                                         [--new-groups N] [--new-users 1000]
                                         [--store-only] [--rounds 3]

Needs the Slurm packages (scripts/install-system-deps.sh), except with ``--store-only``:
then slurmdbd's side is the converged state the plan itself implies (what a sacctmgr read
returns after a successful apply), and only the store read, the pure plan and the peak
memory of the sync's process are measured, ``--rounds`` times each. The pure-plan figures
are printed beside the reference's (cheeto's ``reconcile()`` on the same shape, issue 18).
To measure another tree side by side (a baseline), point ``CHEETO_BENCH_TREE`` at it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.environ.get("CHEETO_BENCH_TREE")
                or str(Path(__file__).resolve().parent.parent))

from _common import bulk_insert, free_port, progress

from cheeto_like.adapters.sacctmgr import SAcctMgr
from cheeto_like.config import EmbeddedStoreConfig, MongoConfig
from cheeto_like.embedded import EmbeddedServer
from cheeto_like.models import (
    Group,
    GroupMembership,
    Site,
    SlurmAccount,
    SlurmAllocation,
    SlurmAssociation,
    SlurmPartition,
    SlurmQOS,
    User,
    UserSiteInfo,
)
from cheeto_like.models.slurm import SlurmTRES
from cheeto_like.store import Store, connect
from cheeto_like.sync.slurm import apply_plan
from cheeto_like.sync.slurm_actual import SAcctMgrReader, actual_state
from cheeto_like.sync.slurm_desired import desired_state
from cheeto_like.sync.slurm_plan import Plan, plan
from cheeto_like.sync.slurm_state import SlurmState
from tests.services.slurm import SlurmAccounting

SITE = "benchfarm"
PARTITIONS = ("cpu", "gpu", "bigmem")
# cheeto's own reconcile() on the same shape, measured side by side in issue 18
REFERENCE_PLAN_S = {"first": 0.29, "nothing_to_do": 0.04}


async def build_site(groups: int, qos: int) -> None:
    await bulk_insert(Site, [Site(name=SITE, fqdn=f"{SITE}.example.org")])
    await bulk_insert(Group, [Group(name=f"{s}-users", gid=3_333_333_000 + i, type="access",
                                shorthand=s) for i, s in enumerate(("login-ssh", "slurm"))])
    await bulk_insert(SlurmPartition, [SlurmPartition(name=p, site=SITE) for p in PARTITIONS])
    await bulk_insert(SlurmQOS, [SlurmQOS(name=f"q{i:03d}", site=SITE, priority=i % 10)
                             for i in range(qos)])
    await bulk_insert(SlurmAllocation, [SlurmAllocation(
        site=SITE, qos=f"q{i:03d}", bucket="group_limits",
        tres=SlurmTRES(cpus=64 + i, gpus=i % 8, mem=f"{256 + i}G")) for i in range(qos)])
    await bulk_insert(Group, [Group(name=f"lab{g:04d}", gid=600_000 + g) for g in range(groups)])
    await bulk_insert(SlurmAccount, [SlurmAccount(group=f"lab{g:04d}", site=SITE)
                                 for g in range(groups)])
    await bulk_insert(SlurmAssociation, [
        SlurmAssociation(site=SITE, account=f"lab{g:04d}", partition=p,
                         qos=[f"q{g % qos:03d}"])
        for g in range(groups) for p in PARTITIONS])


async def add_users(first: int, count: int, groups: int) -> None:
    """Users b<first>… each a member of one lab group, spread round-robin over ``groups``."""
    names = [f"b{i:05d}" for i in range(first, first + count)]
    await bulk_insert(User, [User(name=n, email=f"{n}@example.org", uid=1_000_000 + first + k,
                              gid=1_000_000 + first + k, fullname=f"Bench {n}",
                              home_directory=f"/home/{n}", status="active",
                              access=["login-ssh", "slurm"]) for k, n in enumerate(names)])
    await bulk_insert(Group, [Group(name=n, gid=1_000_000 + first + k, type="user")
                          for k, n in enumerate(names)])
    await bulk_insert(UserSiteInfo, [UserSiteInfo(user=n, site=SITE) for n in names])
    await bulk_insert(GroupMembership, [
        GroupMembership(user=n, group=f"lab{k % groups:04d}", site=SITE,
                        roles=["member"]) for k, n in enumerate(names)])


def baseline_processes(planned: Plan) -> int:
    """The reference's process count for the same change: one per association add,
    modify and delete, one per default-account change, one per QOS/account change."""
    return sum(len(c.targets) for b in planned.batches for c in b.commands)


async def timed(label: str, coro: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    result = await coro
    elapsed = time.perf_counter() - started
    progress(f"  {label}: {elapsed:.2f}s")
    return result, elapsed


async def run(store: Store, slurm: SlurmAccounting, users: int, groups: int, qos: int,
              new_groups: int, new_users: int) -> dict[str, Any]:
    runner = SAcctMgr(env=slurm.env, timeout=300)
    reader = SAcctMgrReader(runner)
    slurm.add_cluster(SITE)
    await build_site(groups, qos)
    base_users = users - new_users
    await add_users(0, base_users, groups)
    progress(f"converging {base_users} users first")
    desired, _ = await timed("desired", desired_state(SITE))
    actual, _ = await timed("actual", actual_state(reader, SITE))
    first_plan, _ = await timed("plan", asyncio.to_thread(plan, desired, actual))
    _, first_apply_s = await timed("apply", apply_plan(first_plan, runner, max_deletions=0))

    progress(f"adding {new_users} users ({users} in all) in {new_groups} groups")
    await add_users(base_users, new_users, new_groups)
    desired, desired_s = await timed("desired", desired_state(SITE))
    actual, actual_s = await timed("actual", actual_state(reader, SITE))
    started = time.perf_counter()
    new_plan = plan(desired, actual)
    plan_s = time.perf_counter() - started
    items, apply_s = await timed("apply", apply_plan(new_plan, runner, max_deletions=0))
    failed = [i for i in items if i.outcome != "ok"]
    after, _ = await timed("re-read", actual_state(reader, SITE))
    second = plan(desired, after)
    identical_started = time.perf_counter()
    plan(desired, after)
    identical_plan_s = time.perf_counter() - identical_started
    return {
        "users": users, "associations": len(desired.associations), "qos": len(desired.qos),
        "accounts": len(desired.accounts),
        "desired_state_build_s": round(desired_s, 3),
        "actual_state_read_s": round(actual_s, 3),
        "plan_s": round(plan_s, 3),
        "plan_when_converged_s": round(identical_plan_s, 3),
        "first_apply": {"users": base_users, "sacctmgr_processes": first_plan.processes,
                        "one_per_item_baseline": baseline_processes(first_plan),
                        "wall_s": round(first_apply_s, 2)},
        "apply_new_users": {
            "new_users": new_users, "joining_groups": new_groups,
            "sacctmgr_processes": new_plan.processes,
            "one_per_item_baseline": baseline_processes(new_plan),
            "changes": new_plan.counts, "wall_s": round(apply_s, 2),
            "failed_commands": len(failed)},
        "second_run_plans_nothing": second.is_empty,
    }


def converged(desired: SlurmState) -> SlurmState:
    """What sacctmgr reads back once ``desired`` has been applied: QOS tagged with the
    cluster, each association's default QOS shown, every user's default account set and
    their rows on it flagged default."""
    from dataclasses import replace

    from cheeto_like.sync.slurm_plan import wanted_default_accounts

    empty = SlurmState(cluster=desired.cluster)
    defaults = wanted_default_accounts(desired, empty)
    return SlurmState(
        cluster=desired.cluster,
        qos={n: replace(q, owner=desired.cluster) for n, q in desired.qos.items()},
        accounts=dict(desired.accounts),
        associations={k: _changed(v, default_qos=v.default_qos or min(v.qos))
                      for k, v in desired.associations.items()},
        default_accounts=defaults, coordinators=dict(desired.coordinators),
        default_rows=frozenset(k for k in desired.associations
                               if defaults.get(k.user) == k.account))


def _changed(state: Any, **changes: Any) -> Any:
    """``state`` with ``changes``: a named tuple now, a dataclass in older trees."""
    from dataclasses import replace

    return state._replace(**changes) if hasattr(state, "_replace") else replace(state, **changes)


def without_users(state: SlurmState, users: set[str]) -> SlurmState:
    from dataclasses import replace

    return replace(state, associations={k: v for k, v in state.associations.items()
                                        if k.user not in users},
                   default_accounts={u: a for u, a in state.default_accounts.items()
                                     if u not in users},
                   default_rows=frozenset(k for k in state.default_rows if k.user not in users))


def _child_sync(uri_file: str) -> None:
    """In a fresh process: one store-side sync (desired state, plan against the converged
    cluster); prints the peak RSS in MB. Run as ``python bench/slurm_plan.py --child F``."""
    import resource

    async def go() -> None:
        config = MongoConfig.model_validate_json(Path(uri_file).read_text())
        store = await connect(config, autostart=False)
        desired = await desired_state(SITE)
        plan(desired, converged(desired))
        await store.close()

    asyncio.run(go())
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


async def run_store_only(store_config: MongoConfig, users: int, groups: int, qos: int,
                         new_groups: int, new_users: int, rounds: int) -> dict[str, Any]:
    import statistics
    import subprocess
    from dataclasses import replace

    await build_site(groups, qos)
    base_users = users - new_users
    await add_users(0, base_users, groups)
    await add_users(base_users, new_users, new_groups)
    desired_s, first_s, same_s, peaks = [], [], [], []
    desired = None
    for _ in range(rounds):
        started = time.perf_counter()
        desired = await desired_state(SITE)
        desired_s.append(time.perf_counter() - started)
        after = converged(desired)
        new = {f"b{i:05d}" for i in range(base_users, users)}
        before = without_users(after, new)
        fresh = replace(desired)  # nothing computed by the first plan carries over
        started = time.perf_counter()
        first = plan(desired, before)
        first_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        second = plan(fresh, after)
        same_s.append(time.perf_counter() - started)
        assert second.is_empty, second.counts
        assert first.counts.get("add associations") == new_users * len(PARTITIONS), first.counts
    with tempfile.NamedTemporaryFile("w", suffix=".json") as config_file:
        config_file.write(store_config.model_dump_json())
        config_file.flush()
        for _ in range(rounds):
            out = await asyncio.to_thread(
                subprocess.run, [sys.executable, __file__, "--child", config_file.name],
                check=True, capture_output=True, text=True,
                env={**os.environ, "PYTHONPATH": sys.path[0]})
            peaks.append(float(out.stdout.strip().splitlines()[-1]))
    assert desired is not None
    first_med, same_med = statistics.median(first_s), statistics.median(same_s)
    return {
        "users": users, "associations": len(desired.associations), "qos": len(desired.qos),
        "accounts": len(desired.accounts), "rounds": rounds,
        "desired_state_build_s": [round(x, 3) for x in desired_s],
        "plan_first_s": [round(x, 3) for x in first_s],
        "plan_nothing_to_do_s": [round(x, 3) for x in same_s],
        "plan_first_vs_reference": round(first_med / REFERENCE_PLAN_S["first"], 2),
        "plan_nothing_to_do_vs_reference": round(
            same_med / REFERENCE_PLAN_S["nothing_to_do"], 2),
        "sync_process_peak_rss_mb": [round(x, 1) for x in peaks],
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=20_000)
    parser.add_argument("--groups", type=int, default=1_000)
    parser.add_argument("--qos", type=int, default=500)
    parser.add_argument("--new-groups", type=int, default=None,
                        help="how many groups the new users join (default: all)")
    parser.add_argument("--new-users", type=int, default=1_000,
                        help="users added after the first convergence (default 1,000)")
    parser.add_argument("--store-only", action="store_true",
                        help="no slurmdbd: desired state, pure plan and peak memory only")
    parser.add_argument("--rounds", type=int, default=3, help="repeats (--store-only)")
    opts = parser.parse_args()
    if not 0 < opts.new_users < opts.users:
        parser.error("--new-users must be between 1 and --users - 1")
    if opts.store_only:
        with tempfile.TemporaryDirectory(prefix="cheeto-slurm-bench-") as tmp:
            embedded = EmbeddedStoreConfig(path=Path(tmp) / "store", port=free_port())
            server = EmbeddedServer(embedded)
            server.start_background()
            config = MongoConfig(embedded=embedded, database="bench_slurm")
            try:
                store = await connect(config, autostart=False)
                result = await run_store_only(config, opts.users, opts.groups, opts.qos,
                                              opts.new_groups or opts.groups, opts.new_users,
                                              opts.rounds)
                await store.close()
            finally:
                server.stop()
        print(json.dumps({"store": "embedded nx-27017", "tree": sys.path[0],
                          "reference_plan_s": REFERENCE_PLAN_S, **result}, indent=2))
        return
    with tempfile.TemporaryDirectory(prefix="cheeto-slurm-bench-") as tmp:
        embedded = EmbeddedStoreConfig(path=Path(tmp) / "store", port=free_port())
        server = EmbeddedServer(embedded)
        server.start_background()
        slurm = SlurmAccounting(Path(tmp)).start()
        try:
            store = await connect(MongoConfig(embedded=embedded, database="bench_slurm"),
                                  autostart=False)
            result = await run(store, slurm, opts.users, opts.groups, opts.qos,
                               opts.new_groups or opts.groups, opts.new_users)
            await store.close()
        finally:
            slurm.stop()
            server.stop()
    print(json.dumps({"store": "embedded nx-27017", "slurmdbd": "22.05 (real)", **result},
                     indent=2))


if __name__ == "__main__":
    if "--child" in sys.argv:
        _child_sync(sys.argv[sys.argv.index("--child") + 1])
    else:
        asyncio.run(main())
