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
    .venv/bin/python bench/slurm_plan.py --reference live [--rounds 5]  # 1,500 QOS

Needs the Slurm packages (scripts/install-system-deps.sh), except with ``--store-only``
and ``--reference live``. With ``--store-only``, slurmdbd's side is the converged state
the plan itself implies (what a sacctmgr read returns after a successful apply), and only
the store read, the pure plan and the peak memory of the sync's process are measured,
``--rounds`` times each, every one in a fresh process. ``--baseline TREE`` measures
another checkout the same way against the same store, alternating with this one.

``--reference live`` (issue 31) installs the reference, cheeto 2.6.1 from PyPI, into a
directory under the system's temporary directory (kept for the next run; never into
.venv: bench/slurm_reference.py) and times its own ``reconcile()`` against our ``plan()``
on the same shape, in this process, alternating the two sides, ``--rounds`` rounds (at
least 5), min and median of each, the load average before and after. What is timed is
the same stage on both sides: from the desired and the actual state, parsed and in
memory, to the plan (our ``plan(desired, actual)``: the ordered batches of rendered
``sacctmgr`` commands; the reference's ``reconcile(desired, current)``: its ordered
``CommandBatch`` lists of ``CommandSpec``). Not timed: the store reads that build the
desired state, reading the cluster, applying. Both sides get the desired state our
builder makes from the seeded store (converted for the reference, with every user's
default account), and two actual states: an empty cluster (the plan from empty) and the
converged one as a reader hands it over (nothing to do; new string objects, as parsed
text is). Then the same with quota blocks in force: a ledger ingested through
``operations.usage.ingest`` (so running totals kept at charge time are kept) that puts
every seventh user and every fiftieth account out of CPU minutes, our desired state built
again with its blocks (``GrpTRESMins``) against the same reference figures (the
reference has no quota blocks: its input is the same shape without them). The time of
``slurm_quota.quota_blocks`` on that ledger is printed beside, outside the ratios.
``vs_reference_*`` is our median wall time over the reference's; ``ratios`` has the
min-over-min and CPU-time ratios too. No figure from elsewhere enters any of them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, os.environ.get("CHEETO_BENCH_TREE")
                or str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common, slurm_reference

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
from cheeto_like.sync.slurm.actual import SAcctMgrReader, actual_state
from cheeto_like.sync.slurm.desired import desired_state
from cheeto_like.sync.slurm.plan import Plan, plan
from cheeto_like.sync.slurm.run import apply_plan
from cheeto_like.sync.slurm.state import SlurmState
from tests.services.slurm import SlurmAccounting

SITE = "benchfarm"
PARTITIONS = ("cpu", "gpu", "bigmem")


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

    from cheeto_like.sync.slurm.plan import wanted_default_accounts

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
    if baseline:
        now, base = result["current"]["median"], result["baseline"]["median"]
        result["speedup_vs_baseline"] = {
            key: round(base[key] / now[key], 1) if now[key] else None for key in TIMES}
    return result


QUOTA_EVERY = 7  # every seventh user runs out of CPU minutes (--reference live) ...
ACCOUNT_EVERY = 50  # ... and every fiftieth account
USER_CPU_MINUTES, ACCOUNT_CPU_MINUTES = 1_000, 30_000  # the site's default quotas there


def _ledger_lines(users: int, groups: int) -> str:
    """``sacct -X -P -n`` lines (the format adapters/sacct.py reads): one 32-CPU hour
    (1,920 CPU minutes) for every ``QUOTA_EVERY``-th user in their account, and 20 such
    hours for the first user of every ``ACCOUNT_EVERY``-th account. Users of an account
    are blocked and not blocked alike, so blocks split the account's ``add user``."""
    start = datetime(2026, 11, 2, tzinfo=UTC)

    def line(job: int, user: int, hours: int) -> str:
        end = start + timedelta(hours=hours)
        return (f"{job}|{SITE}|b{user:05d}|lab{user % groups:04d}|cpu|normal|COMPLETED|"
                f"{start:%Y-%m-%dT%H:%M:%S}|{end:%Y-%m-%dT%H:%M:%S}|{hours * 3600}|"
                f"billing=32,cpu=32,mem=32000M,node=1\n")

    return "".join([*(line(9_000_000 + k, k, 1) for k in range(0, users, QUOTA_EVERY)),
                    *(line(9_500_000 + g, g, 20) for g in range(0, groups, ACCOUNT_EVERY))])


async def quota_ledger(store: Store, users: int, groups: int) -> dict[str, Any]:
    """Default quotas at the site and a ledger that puts some users and accounts out of
    CPU minutes, written the way ``ng usage collect`` writes it."""
    from cheeto_like.adapters.sacct import parse_output
    from cheeto_like.models import QuotaDefaults
    from cheeto_like.models.usage import FactorTable
    from cheeto_like.operations.usage import ingest
    from cheeto_like.sync.slurm.quota import quota_blocks

    await QuotaDefaults(site=SITE, period="none", user_cpu_minutes=USER_CPU_MINUTES,
                        account_cpu_minutes=ACCOUNT_CPU_MINUTES).insert()
    jobs = parse_output(_ledger_lines(users, groups)).jobs
    counts = await ingest(store, SITE, jobs, FactorTable.build(
        [("default", datetime(2020, 1, 1, tzinfo=UTC), 1.0)]))
    names = {f"b{k:05d}" for k in range(users)}
    started = time.perf_counter()
    blocks = await quota_blocks(SITE, datetime.now(UTC), users=names,
                                accounts=[f"lab{g:04d}" for g in range(groups)])
    return {"ledger_rows": counts.inserted, "users_blocked": len(blocks.users),
            "accounts_blocked": len(blocks.accounts),
            "quota_blocks_s": round(time.perf_counter() - started, 3)}


def _timed(call: Any, *args: Any) -> tuple[float, float, Any]:
    """Wall and CPU seconds of ``call(*args)``, after a collection (so neither side pays
    for the other's garbage)."""
    import gc

    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    out = call(*args)
    return time.perf_counter() - wall, time.process_time() - cpu, out


def _stats(runs: list[tuple[float, float]]) -> dict[str, float]:
    import statistics

    walls, cpus = [r[0] for r in runs], [r[1] for r in runs]
    return {"min_s": round(min(walls), 4), "median_s": round(statistics.median(walls), 4),
            "cpu_min_s": round(min(cpus), 4),
            "cpu_median_s": round(statistics.median(cpus), 4)}


def _ratio(ours: dict[str, float], ref: dict[str, float], key: str) -> float:
    return round(ours[key] / ref[key], 2)


def compare_live(ref: Any, desired: SlurmState, blocked: SlurmState,
                 rounds: int) -> dict[str, Any]:
    """Time the reference's ``reconcile()`` and our ``plan()`` on the same states,
    alternating sides (who goes first changes every round)."""
    from dataclasses import replace

    from slurm_reference import as_read, reference_commands, to_reference

    empty = SlurmState(cluster=desired.cluster)
    read = {"plain": as_read(converged(desired)), "quota": as_read(converged(blocked))}
    ref_desired = to_reference(ref, desired, read=False)
    ref_actual = {"empty": ref.SlurmSyncState(),
                  "noop": to_reference(ref, read["plain"], read=True)}
    ours_in = {"plain": desired, "quota": blocked}
    cases = [(f"{side}_{case}", side, case) for case in ("empty", "noop")
             for side in ("reference", "plain", "quota")]
    found: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in cases}
    planned: dict[str, int] = {}
    for round_ in range(rounds):
        progress(f"  round {round_ + 1} of {rounds}")
        for name, side, case in (cases if round_ % 2 == 0 else cases[::-1]):
            if side == "reference":
                wall, cpu, out = _timed(ref.reconcile, ref_desired, ref_actual[case])
                planned[name] = reference_commands(ref, out)
            else:
                mine, actual = replace(ours_in[side]), replace(
                    empty if case == "empty" else read[side])  # nothing cached carries over
                wall, cpu, out = _timed(plan, mine, actual)
                planned[name] = out.processes
            found[name].append((wall, cpu))
    if planned["reference_noop"] or planned["plain_noop"] or planned["quota_noop"]:
        raise SystemExit(f"a converged cluster must plan nothing: {planned}")
    stats = {name: _stats(runs) for name, runs in found.items()}
    ratios = {f"{side}_{case}": {key: _ratio(stats[f"{side}_{case}"],
                                             stats[f"reference_{case}"], key)
                                 for key in ("median_s", "min_s", "cpu_median_s")}
              for side in ("plain", "quota") for case in ("empty", "noop")}
    return {"stats": stats, "sacctmgr_processes": planned, "ratios": ratios,
            "vs_reference_empty": ratios["plain_empty"]["median_s"],
            "vs_reference_noop": ratios["plain_noop"]["median_s"],
            "vs_reference_empty_quota_blocks": ratios["quota_empty"]["median_s"],
            "vs_reference_noop_quota_blocks": ratios["quota_noop"]["median_s"]}


async def run_live(users: int, groups: int, qos: int, rounds: int) -> dict[str, Any]:
    """``--reference live``: seed, build both desired states, then ``compare_live``."""
    from slurm_reference import REFERENCE, load_reference, reference_dir

    ref = load_reference(progress)
    with tempfile.TemporaryDirectory(prefix="cheeto-slurm-bench-") as tmp:
        embedded = EmbeddedStoreConfig(path=Path(tmp) / "store", port=free_port())
        server = throwaway_server(embedded)
        server.start_background()
        try:
            store = await connect(MongoConfig(embedded=embedded, database="bench_slurm"),
                                  autostart=False)
            progress(f"seeding {users} users in {groups} groups, {qos} QOS")
            await build_site(groups, qos)
            await add_users(0, users, groups)
            desired = await desired_state(SITE)
            progress("ledger and quota blocks")
            quota = await quota_ledger(store, users, groups)
            blocked = await desired_state(SITE)
            await store.close()
        finally:
            server.stop()
    load_before = os.getloadavg()
    result = compare_live(ref, desired, blocked, rounds)
    return {"reference": REFERENCE, "reference_dir": str(reference_dir()),
            "users": users, "associations": len(desired.associations),
            "qos": len(desired.qos), "accounts": len(desired.accounts), "rounds": rounds,
            "quota": quota, "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()], **result}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=20_000)
    parser.add_argument("--groups", type=int, default=1_000)
    parser.add_argument("--qos", type=int, default=None,
                        help="QOS at the site (default 500; 1,500 with --reference live)")
    parser.add_argument("--new-groups", type=int, default=None,
                        help="how many groups the new users join (default: all)")
    parser.add_argument("--new-users", type=int, default=1_000,
                        help="users added after the first convergence (default 1,000)")
    parser.add_argument("--store-only", action="store_true",
                        help="no slurmdbd: desired state, pure plan and peak memory only")
    parser.add_argument("--rounds", type=int, default=None,
                        help="repeats (--store-only: 3; --reference live: 5, at least 5)")
    parser.add_argument("--reference", choices=["live"], default=None,
                        help="time the reference's reconcile() (cheeto 2.6.1 from PyPI, "
                             "installed into a temporary directory) against our plan")
    parser.add_argument("--baseline", metavar="TREE", default=None,
                        help="with --store-only: another checkout measured side by side "
                             "(e.g. `git archive 2ece8a4 cheeto_like tests | tar -x -C T`)")
    opts = parser.parse_args()
    if not 0 < opts.new_users < opts.users:
        parser.error("--new-users must be between 1 and --users - 1")
    if opts.reference == "live":
        if opts.store_only or opts.baseline:
            parser.error("--reference live takes neither --store-only nor --baseline")
        if opts.rounds is not None and opts.rounds < 5:
            parser.error("--reference live needs --rounds 5 or more")
        result = await run_live(opts.users, opts.groups, opts.qos or 1_500, opts.rounds or 5)
        print(json.dumps({"store": "embedded nx-27017", **result}, indent=2))
        return
    opts.rounds, opts.qos = opts.rounds or 3, opts.qos or 500
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
        print(json.dumps({"store": "embedded nx-27017", **result}, indent=2))
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
