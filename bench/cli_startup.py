"""Benchmark the CLI's start-up: every command's fixed cost, next to bare Python.

Runs each command as a subprocess (the real console script) N times, round-robin with
``python -c pass`` in the same run so machine load hits all of them alike, and prints one
JSON object: per command the median and minimum wall time and CPU time (user + system of
the child process) and the medians' deltas over bare Python, and whether the goals hold
(``cheeto --help`` within 0.15 s of bare Python, ``cheeto ng user show`` within 0.6 s),
judged on both clocks. On a shared machine the CPU time is the steadier figure: wall
time also counts waiting for a core. ``ng user show`` runs against an embedded store this
script starts, with one seeded user (the store's own CPU is not counted).

    .venv/bin/python bench/cli_startup.py [--repeats 15]
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
GOALS = {"cheeto --help": 0.15, "cheeto ng user show": 0.6}


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


def measure(argvs: dict[str, list[str]], env: dict[str, str], repeats: int
            ) -> dict[str, dict[str, list[float]]]:
    timings: dict[str, dict[str, list[float]]] = {
        label: {"wall": [], "cpu": []} for label in argvs}
    for round_ in range(repeats + 1):
        for label, argv in argvs.items():
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
    opts = parser.parse_args()
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
            progress(f"{opts.repeats} rounds of {len(commands(cheeto))} commands")
            timings = measure(commands(cheeto), env, opts.repeats)
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
    print(json.dumps({
        "python": sys.version.split()[0],
        "PYTHONDONTWRITEBYTECODE": bool(os.environ.get("PYTHONDONTWRITEBYTECODE")),
        "repeats": opts.repeats,
        "load_average_1min": round(os.getloadavg()[0], 2),
        "commands": results,
        "goals": goals,
    }, indent=2))


if __name__ == "__main__":
    main()
