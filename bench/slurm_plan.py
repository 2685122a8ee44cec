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
memory of the sync's process are measured, ``--rounds`` times each, every one in a fresh
process. ``--baseline TREE`` measures another checkout the same way against the same
store, alternating with this one. The pure-plan figures are printed beside the
reference's (cheeto's ``reconcile()`` on the same shape, issue 18).
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

from _common import bulk_insert, free_port, progress, throwaway_server

from cheeto_like.adapters.sacctmgr import SAcctMgr
from cheeto_like.config import EmbeddedStoreConfig, MongoConfig
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
# this project's plan before issue 18 (2ece8a4), same shape, same run as the reference's
ISSUE_BASELINE_S = {"first": 1.4, "nothing_to_do": 0.41}


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


def _store_cpu_s(pid: int) -> float:
    """CPU seconds the embedded store's server process has used so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _child_sync(uri_file: str, server_pid: int, converged_users: int, traced: bool) -> None:
    """In a fresh process of the tree on ``sys.path``: one store-side sync (the desired
    state, then the pure plan against the cluster as it was before the newest users and
    against the converged one). Prints one JSON line: wall and CPU seconds of each step
    (the store's CPU too: on a loaded machine the wall time is mostly waiting for a
    core) and the process's peak RSS; with ``traced``, tracemalloc's peak instead
    (tracing slows everything, so a traced run's times are not reported).

    Run as ``python bench/slurm_plan.py --child CONFIG PID CONVERGED_USERS [--traced]``."""
    import resource
    import tracemalloc
    from dataclasses import replace

    async def go() -> dict[str, Any]:
        config = MongoConfig.model_validate_json(Path(uri_file).read_text())
        store = await connect(config, autostart=False)
        if traced:
            tracemalloc.start()
        run: dict[str, float] = {}
        wall, cpu, server = time.perf_counter(), time.process_time(), _store_cpu_s(server_pid)
        desired = await desired_state(SITE)
        run["desired_wall_s"] = time.perf_counter() - wall
        run["desired_client_cpu_s"] = time.process_time() - cpu
        run["desired_store_cpu_s"] = _store_cpu_s(server_pid) - server
        after = converged(desired)
        new = {k.user for k in desired.associations if int(k.user[1:]) >= converged_users}
        before = without_users(after, new)
        for label, actual in (("plan_first", before), ("plan_nothing_to_do", after)):
            fresh = replace(desired)  # nothing an earlier plan computed carries over
            wall, cpu = time.perf_counter(), time.process_time()
            planned = plan(fresh, actual)
            run[f"{label}_wall_s"] = time.perf_counter() - wall
            run[f"{label}_cpu_s"] = time.process_time() - cpu
            if label == "plan_nothing_to_do":
                assert planned.is_empty, planned.counts
            else:
                assert planned.counts.get("add associations") == len(new) * len(
                    PARTITIONS), planned.counts
        out: dict[str, Any] = {"associations": len(desired.associations),
                               "qos": len(desired.qos), "accounts": len(desired.accounts)}
        if traced:
            out["tracemalloc_peak_mb"] = tracemalloc.get_traced_memory()[1] / 2**20
        else:
            out["run"] = run
        await store.close()
        return out

    result = asyncio.run(go())
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


def _median(runs: list[dict[str, float]], key: str) -> float:
    import statistics

    return round(statistics.median(r[key] for r in runs), 3)


TIMES = ("desired_wall_s", "desired_client_cpu_s", "desired_store_cpu_s", "plan_first_wall_s",
         "plan_first_cpu_s", "plan_nothing_to_do_wall_s", "plan_nothing_to_do_cpu_s")


async def run_store_only(store_config: MongoConfig, server_pid: int, users: int,
                         groups: int, qos: int, new_groups: int, new_users: int,
                         rounds: int, baseline: str | None) -> dict[str, Any]:
    """Seed once, then measure each tree in fresh processes against the same store,
    alternating (baseline, current, baseline, …) so a change of load hits both."""
    import subprocess

    await build_site(groups, qos)
    base_users = users - new_users
    await add_users(0, base_users, groups)
    await add_users(base_users, new_users, new_groups)
    trees = {"current": str(Path(__file__).resolve().parent.parent)}
    if baseline:
        trees = {"baseline": str(Path(baseline).resolve()), **trees}
    found: dict[str, dict[str, Any]] = {name: {"runs": [], "peak_rss_mb": []}
                                        for name in trees}
    with tempfile.NamedTemporaryFile("w", suffix=".json") as config_file:
        config_file.write(store_config.model_dump_json())
        config_file.flush()

        def child(tree: str, *extra: str) -> dict[str, Any]:
            out = subprocess.run(
                [sys.executable, __file__, "--child", config_file.name, str(server_pid),
                 str(base_users), *extra], check=True, capture_output=True, text=True,
                env={**os.environ, "CHEETO_BENCH_TREE": tree, "PYTHONPATH": tree})
            return json.loads(out.stdout.strip().splitlines()[-1])

        for round_ in range(rounds):
            for name, tree in trees.items():
                progress(f"  round {round_ + 1}: {name}")
                got = await asyncio.to_thread(child, tree)
                found[name]["runs"].append(got.pop("run"))
                found[name]["peak_rss_mb"].append(round(got.pop("peak_rss_mb"), 1))
                found[name].update(got)
        for name, tree in trees.items():
            progress(f"  traced: {name}")
            got = await asyncio.to_thread(child, tree, "--traced")
            found[name]["tracemalloc_peak_mb"] = round(got["tracemalloc_peak_mb"], 1)
    result: dict[str, Any] = {"users": users, "rounds": rounds}
    for name, got in found.items():
        runs = got.pop("runs")
        got["median"] = median = {key: _median(runs, key) for key in TIMES}
        got["desired_cpu_s"] = round(median["desired_client_cpu_s"]
                                     + median["desired_store_cpu_s"], 3)
        got["all_runs"] = [{k: round(v, 3) for k, v in run.items()} for run in runs]
        result[name] = got
    now = result["current"]["median"]
    # The reference's figures are wall times on a quiet machine. On a loaded one our
    # wall time is mostly waiting for a core, so CPU seconds are compared as well.
    result["vs_reference"] = {
        f"{label}_{kind}": round(now[f"{label}_{kind}_s"] / REFERENCE_PLAN_S[ref], 2)
        for label, ref in (("plan_first", "first"), ("plan_nothing_to_do", "nothing_to_do"))
        for kind in ("wall", "cpu")}
    if baseline:
        base = result["baseline"]["median"]
        result["speedup_vs_baseline"] = {
            key: round(base[key] / now[key], 1) if now[key] else None for key in TIMES}
        # the same ratio on the issue's quiet machine: the baseline's figures there
        # (ISSUE_BASELINE_S) scaled by this run's speed-up, against the reference
        result["vs_reference_scaled_by_baseline"] = {
            label: round(ISSUE_BASELINE_S[ref] * now[f"{label}_cpu_s"] / base[f"{label}_cpu_s"]
                         / REFERENCE_PLAN_S[ref], 2)
            for label, ref in (("plan_first", "first"),
                               ("plan_nothing_to_do", "nothing_to_do"))}
    return result


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
    parser.add_argument("--baseline", metavar="TREE", default=None,
                        help="with --store-only: another checkout measured side by side "
                             "(e.g. `git archive 2ece8a4 cheeto_like tests | tar -x -C T`)")
    opts = parser.parse_args()
    if not 0 < opts.new_users < opts.users:
        parser.error("--new-users must be between 1 and --users - 1")
    if opts.store_only:
        with tempfile.TemporaryDirectory(prefix="cheeto-slurm-bench-") as tmp:
            embedded = EmbeddedStoreConfig(path=Path(tmp) / "store", port=free_port())
            server = throwaway_server(embedded)
            server_pid = server.start_background()
            config = MongoConfig(embedded=embedded, database="bench_slurm")
            try:
                store = await connect(config, autostart=False)
                result = await run_store_only(config, server_pid, opts.users, opts.groups,
                                              opts.qos, opts.new_groups or opts.groups,
                                              opts.new_users, opts.rounds, opts.baseline)
                await store.close()
            finally:
                server.stop()
        print(json.dumps({"store": "embedded nx-27017", "reference_plan_s": REFERENCE_PLAN_S,
                          "issue_baseline_s": ISSUE_BASELINE_S, **result}, indent=2))
        return
    with tempfile.TemporaryDirectory(prefix="cheeto-slurm-bench-") as tmp:
        embedded = EmbeddedStoreConfig(path=Path(tmp) / "store", port=free_port())
        server = throwaway_server(embedded)
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
        at = sys.argv.index("--child")
        _child_sync(sys.argv[at + 1], int(sys.argv[at + 2]), int(sys.argv[at + 3]),
                    "--traced" in sys.argv)
    else:
        asyncio.run(main())
