"""Benchmark the CLI's start-up: every command's fixed cost, next to bare Python.

Runs each command as a subprocess (the real console script) N times, round-robin with
``python -c pass`` in the same run so machine load hits all of them alike, and prints one
JSON object: per command the median and minimum wall time and CPU time (user + system of
the child process) and the medians' deltas over bare Python, and whether the goals hold
(``cheeto --help`` within 0.15 s of bare Python, ``cheeto ng user show`` within 0.4 s,
issue 31), judged on both clocks. On a shared machine the CPU time is the steadier
figure: wall time also counts waiting for a core. ``ng user show`` runs against an
embedded store this script starts, with one seeded user (the store's own CPU is not
counted; its round trips are in the wall time).

The children run with bytecode caching on (``PYTHONDONTWRITEBYTECODE`` removed from
their environment), and the first round, not counted, writes what is missing: an
installed package has its ``.pyc`` files, and a checkout whose caches are stale would
otherwise be measured compiling its sources on every run.

    .venv/bin/python bench/cli_startup.py [--repeats 15] [--baseline TREE]

``--baseline TREE`` (a checkout of another revision, e.g. ``git worktree add /tmp/base
<rev>``) also runs the goals' commands from that tree (``PYTHONPATH=TREE``), alternating
with ours in the same rounds, and prints each clock's delta over bare Python for both
and their ratio (``vs_baseline``: ours / baseline).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import free_port, progress, throwaway_server

from cheeto_like.config import EmbeddedStoreConfig, MongoConfig
from cheeto_like.operations.group import SeedAccessStatusGroups
from cheeto_like.operations.user import CreateUser
from cheeto_like.store import connect

DATABASE = "bench_cli"
GOALS = {"cheeto --help": 0.15, "cheeto ng user show": 0.4}


def commands(cheeto: str) -> dict[str, list[str]]:
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "cheeto --help": [cheeto, "--help"],
        "cheeto --version": [cheeto, "--version"],
        "cheeto ng --help": [cheeto, "ng", "--help"],
        "cheeto help": [cheeto, "help"],
        "completion of a command word": [cheeto, "__complete", "3", "cheeto", "ng", "user",
                                         "sh"],
        "cheeto ng user show --help": [cheeto, "ng", "user", "show", "--help"],
        "cheeto ng user show": [cheeto, "ng", "user", "show", "-u", "alice"],
    }


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(runs: dict[str, tuple[list[str], dict[str, str]]], repeats: int
            ) -> dict[str, dict[str, list[float]]]:
    """Each run (label -> argv, environment) once per round, in turn, so a change in the
    machine's load hits all of them alike."""
    timings: dict[str, dict[str, list[float]]] = {
        label: {"wall": [], "cpu": []} for label in runs}
    for round_ in range(repeats + 1):  # round 0 warms the page and bytecode caches
        for label, (argv, env) in runs.items():
            t0, cpu0 = time.perf_counter(), _children_cpu()
            done = subprocess.run(argv, capture_output=True, text=True, env=env)
            elapsed, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
            if done.returncode != 0:
                raise SystemExit(f"{label} failed ({done.returncode}): {done.stderr.strip()}")
            if round_:  # the first round only warms the page cache
                timings[label]["wall"].append(elapsed)
                timings[label]["cpu"].append(cpu)
        progress(f"  round {round_}/{repeats}")
    return timings


async def seed(mongo: MongoConfig) -> None:
    store = await connect(mongo, autostart=False)
    try:
        await store.drop_database()
        await store.bind()
        await SeedAccessStatusGroups.run(store, "bench")
        await CreateUser.run(store, "bench", name="alice", email="alice@example.org",
                             uid=2001, fullname="Alice Example", access=["login-ssh"])
    finally:
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="runs of each command")
    parser.add_argument("--baseline", type=Path, metavar="TREE",
                        help="a checkout of another revision to run the goals' commands "
                             "from too, alternating with this tree's")
    opts = parser.parse_args()
    load_start = os.getloadavg()[0]
    if opts.baseline is not None and not (opts.baseline / "cheeto_like").is_dir():
        parser.error(f"--baseline {opts.baseline}: no cheeto_like package there")
    cheeto = str(Path(sys.executable).with_name("cheeto"))
    with tempfile.TemporaryDirectory(prefix="cheeto-bench-") as tmp:
        embedded = EmbeddedStoreConfig(path=Path(tmp) / "store", port=free_port())
        server = throwaway_server(embedded)
        server.start_background()
        try:
            mongo = MongoConfig(embedded=embedded, database=DATABASE)
            asyncio.run(seed(mongo))
            config = Path(tmp) / "config.yaml"
            config.write_text(f"mongo:\n  default:\n    database: {DATABASE}\n    embedded:\n"
                              f"      path: {embedded.path}\n      port: {embedded.port}\n")
            env = {**os.environ, "CHEETO_CONFIG": str(config),
                   "XDG_CACHE_HOME": str(Path(tmp) / "cache")}
            env.pop("PYTHONDONTWRITEBYTECODE", None)  # the warm-up round writes .pyc files
            runs = {label: (argv, env) for label, argv in commands(cheeto).items()}
            if opts.baseline is not None:
                base_env = {**env, "PYTHONPATH": str(opts.baseline.resolve())}
                for label in GOALS:
                    runs[f"baseline: {label}"] = (runs[label][0], base_env)
            progress(f"{opts.repeats} rounds of {len(runs)} commands")
            timings = measure(runs, opts.repeats)
        finally:
            server.stop()
    results: dict[str, dict[str, dict[str, float]]] = {}
    for label, clocks in timings.items():
        results[label] = {}
        for clock, values in clocks.items():
            base = statistics.median(timings["python -c pass"][clock])
            median = statistics.median(values)
            results[label][clock] = {"median_s": round(median, 3), "min_s": round(min(values), 3),
                                     "delta_over_python_s": round(median - base, 3)}
    goals = {label: {"goal_delta_s": goal,
                     **{f"{clock}_delta_s": results[label][clock]["delta_over_python_s"]
                        for clock in ("wall", "cpu")},
                     **{f"met_{clock}": results[label][clock]["delta_over_python_s"] <= goal
                        for clock in ("wall", "cpu")}}
             for label, goal in GOALS.items()}
    if opts.baseline is not None:
        for label, goal in goals.items():
            for clock in ("wall", "cpu"):
                base_delta = results[f"baseline: {label}"][clock]["delta_over_python_s"]
                goal[f"baseline_{clock}_delta_s"] = base_delta
                goal[f"vs_baseline_{clock}"] = (
                    round(goal[f"{clock}_delta_s"] / base_delta, 2) if base_delta > 0 else None)
    print(json.dumps({
        "python": sys.version.split()[0],
        "bytecode_cache": "on (the uncounted first round writes missing .pyc files)",
        "repeats": opts.repeats,
        "baseline": str(opts.baseline) if opts.baseline is not None else None,
        "load_average_1min": {"start": round(load_start, 2),
                              "end": round(os.getloadavg()[0], 2)},
        "commands": results,
        "goals": goals,
    }, indent=2))


if __name__ == "__main__":
    main()
