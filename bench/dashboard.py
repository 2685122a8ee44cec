"""Benchmark the web dashboard: p50 and p90 of every page at a site of 10,000 users,
against a static file on the same server.

Seeds the demo site (``daemon/demo.py``: bob a user, alice operator and sponsor of
alicegrp, dana an admin) in an embedded store, then with bulk inserts ``--users`` users
on the site with ``--jobs`` ledger rows each (``--members`` of them in alicegrp, the
rest charging another account) and personal quotas for ``--quotas`` of them. Serves the
API app (with the dashboard) under uvicorn on loopback in this process, signs the three
demo logins in through the form, and takes every GET page of
``app.state.dashboard_routes`` (pages added later are measured without a list here;
path parameters get a sample) as the first of bob, alice, dana who may see it.

Each round fetches, per page, ``--requests`` times alternately the stylesheet (a static
file on the same server: the baseline of the same moment) and the page, so load on the
machine hits both sides alike. Per round: p50 and p90 of the page and of the static
file (client wall time, loopback HTTP included on both sides; the server's own time is
reported beside it, from an ASGI wrapper around the whole app), and the ratio of the
p50s. Over ``--rounds`` (>= 5) rounds: the min and the median of each. The load average
is recorded before and after each round. JSON on stdout.

    .venv/bin/python bench/dashboard.py [--users 10000] [--members 200] [--jobs 3]
                                        [--quotas 500] [--requests 20] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, os.environ.get("CHEETO_BENCH_TREE")
                or str(Path(__file__).resolve().parent.parent))

from _common import free_port, progress, throwaway_server

from cheeto_like.config import ApiConfig, Config, EmbeddedStoreConfig, MongoConfig
from cheeto_like.store import connect

STATIC = "/dashboard-static/dashboard.css"
SAMPLES = {"site": "farm", "number": "1", "name": "alicegrp", "group": "alicegrp",
           "account": "alicegrp", "user": "bob"}
SKIP = {"/", "/login"}  # a redirect, and the signed-out form


class ServerTimer:
    """ASGI wrapper: seconds from a request's start to its last body chunk, per path."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.times: dict[str, list[float]] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()

        async def timed_send(message: Any) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                self.times.setdefault(scope["path"], []).append(
                    time.perf_counter() - started)

        await self.app(scope, receive, timed_send)


async def seed(store: Any, users: int, members: int, jobs: int, quotas: int) -> None:
    from cheeto_like.daemon.demo import seed_demo
    from cheeto_like.models import GroupMembership, Quota, UsageRecord, User, UserSiteInfo

    await seed_demo(store, "bench")
    now = datetime.now(UTC)
    people, sites, edges, rows, own = [], [], [], [], []
    for i in range(users):
        name = f"m{i:05d}"
        account = "alicegrp" if i < members else "bulkgrp"
        people.append(User(name=name, email=f"{name}@example.org", fullname=f"Member {i}",
                           uid=300000 + i, gid=300000 + i, home_directory=f"/home/{name}"))
        sites.append(UserSiteInfo(user=name, site="farm"))
        if i < members:
            edges.append(GroupMembership(user=name, group="alicegrp", site="farm",
                                         roles=["member"]))
        if i < quotas:
            own.append(Quota(site="farm", user=name, cpu_minutes=600.0 * (1 + i % 50),
                             gpu_minutes=60.0, period="monthly"))
        for j in range(jobs):
            end = now - timedelta(hours=1 + 7 * j + i % 24)
            rows.append(UsageRecord(key=f"farm/farm/b{i}-{j}", site="farm", cluster="farm",
                                    job_id=f"b{i}-{j}", user=name, account=account,
                                    partition="main", end=end,
                                    end_epoch=int(end.timestamp()), day=f"{end:%Y-%m-%d}",
                                    elapsed_s=3600, cpus=4, cpu_minutes=240.0,
                                    gpu_minutes=0.0, fingerprint="b"))
    for model, docs in ((User, people), (UserSiteInfo, sites), (GroupMembership, edges),
                        (Quota, own), (UsageRecord, rows)):
        for at in range(0, len(docs), 5000):
            await model.insert_many(docs[at:at + 5000])


async def sign_in(http: httpx.AsyncClient, user: str, password: str) -> str:
    form = await http.get("/login")
    match = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert match, "no CSRF token on the login form"
    cookie = form.cookies["cheeto_login_csrf"]  # Secure: the jar keeps it for https only
    r = await http.post("/login", data={"csrf": match.group(1), "username": user,
                                        "password": password},
                        headers={"Cookie": f"cheeto_login_csrf={cookie}"})
    assert r.status_code == 303, r.text
    return r.cookies["cheeto_session"]


def page_paths(app: Any) -> list[str]:
    paths = []
    for method, path in sorted(app.state.dashboard_routes):
        names = re.findall(r"{(\w+)(?::\w+)?}", path)
        if method != "GET" or path in SKIP or any(n not in SAMPLES for n in names):
            continue
        paths.append(re.sub(r"{(\w+)(?::\w+)?}", lambda m: SAMPLES[m.group(1)], path))
    return paths


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def load() -> float:
    return round(os.getloadavg()[0], 2)


async def measure(base: str, timer: ServerTimer, paths: list[str], requests: int,
                  rounds: int) -> dict[str, Any]:
    from cheeto_like.daemon.demo_dashboard import DEMO_ADMIN, DEMO_LOGINS, DEMO_OPERATOR, DEMO_USER

    # https in the client's eyes would be needed to keep a Secure cookie in its jar; send
    # the cookie by hand instead
    async with httpx.AsyncClient(base_url=base, timeout=120) as http:
        tokens = {who: await sign_in(http, who, DEMO_LOGINS[who])
                  for who in (DEMO_USER, DEMO_OPERATOR, DEMO_ADMIN)}
        viewer: dict[str, tuple[str, int]] = {}
        for path in paths:  # the first of bob, alice, dana who may see the page
            for who, token in tokens.items():
                r = await http.get(path, headers={"Cookie": f"cheeto_session={token}"})
                if r.status_code == 200:
                    head = sum(len(k) + len(v) + 4 for k, v in r.headers.raw)
                    viewer[path] = (who, len(r.content) + head)
                    break
            else:
                progress(f"{path}: nobody of the demo may see it ({r.status_code}); skipped")
        per_round: dict[str, list[dict[str, float]]] = {p: [] for p in viewer}
        loads = []
        for n in range(rounds):
            before = load()
            for path, (who, _) in viewer.items():
                headers = {"Cookie": f"cheeto_session={tokens[who]}"}
                timer.times.pop(path, None)
                timer.times.pop(STATIC, None)
                page_wall, static_wall = [], []
                for _ in range(requests):  # alternate sides
                    t0 = time.perf_counter()
                    await http.get(STATIC)
                    static_wall.append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    r = await http.get(path, headers=headers)
                    page_wall.append(time.perf_counter() - t0)
                    assert r.status_code == 200, (path, r.status_code)
                server = timer.times.get(path, [0.0])
                per_round[path].append({
                    "p50": 1000 * statistics.median(page_wall),
                    "p90": 1000 * pct(page_wall, 0.9),
                    "static_p50": 1000 * statistics.median(static_wall),
                    "static_p90": 1000 * pct(static_wall, 0.9),
                    "server_p50": 1000 * statistics.median(server),
                    "ratio": statistics.median(page_wall) / statistics.median(static_wall)})
            loads.append({"round": n + 1, "load_before": before, "load_after": load()})
            progress(f"round {n + 1}/{rounds} done (load {loads[-1]['load_after']})")
    results: dict[str, Any] = {}
    for path, rows in per_round.items():
        who, size = viewer[path]
        summary: dict[str, Any] = {"as": who, "bytes": size}
        for key in rows[0]:
            values = [r[key] for r in rows]
            digits = 1 if key == "ratio" else 2
            summary[key] = {"min": round(min(values), digits),
                            "median": round(statistics.median(values), digits)}
        results[path] = summary
        progress(f"{path} ({who}): p50 {summary['p50']} ms, ratio {summary['ratio']}")
    return {"pages": results, "loads": loads}


async def run(opts: argparse.Namespace) -> dict[str, Any]:
    import uvicorn

    from cheeto_like.web.app import create_api

    with tempfile.TemporaryDirectory(prefix="cheeto-bench-dash-") as name:
        tmp = Path(name)
        embedded = EmbeddedStoreConfig(path=tmp / "store", port=free_port())
        server = throwaway_server(embedded)
        server.start_background()
        try:
            mongo = MongoConfig(embedded=embedded, database="bench_dashboard")
            store = await connect(mongo, autostart=False)
            progress(f"seeding the demo and {opts.users} users x {opts.jobs} jobs")
            t0 = time.perf_counter()
            await seed(store, opts.users, opts.members, opts.jobs, opts.quotas)
            built = round(time.perf_counter() - t0, 1)
            config = Config(mongo=mongo, api=ApiConfig(jwt_key_file=tmp / "jwt.key"))
            app = create_api(config, store=store)
            timer = ServerTimer(app)
            port = free_port()
            uv = uvicorn.Server(uvicorn.Config(timer, host="127.0.0.1", port=port,
                                               log_level="warning", lifespan="on"))
            uv.install_signal_handlers = lambda: None  # type: ignore[method-assign]
            task = asyncio.create_task(uv.serve())
            for _ in range(400):
                if uv.started:
                    break
                await asyncio.sleep(0.05)
            try:
                measured = await measure(f"http://127.0.0.1:{port}", timer,
                                         page_paths(app), opts.requests, opts.rounds)
            finally:
                uv.should_exit = True
                await task
                await store.close()
        finally:
            server.stop()
    return {"users": opts.users, "members": opts.members, "jobs_per_user": opts.jobs,
            "own_quotas": opts.quotas, "requests_per_page_per_round": opts.requests,
            "rounds": opts.rounds, "seed_seconds": built, "cpus": os.cpu_count(),
            "static": STATIC, **measured}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=10000, help="users on the site")
    parser.add_argument("--members", type=int, default=200,
                        help="of them, members of the demo account alicegrp")
    parser.add_argument("--jobs", type=int, default=3, help="ledger rows per user")
    parser.add_argument("--quotas", type=int, default=500,
                        help="of them, users with a quota of their own")
    parser.add_argument("--requests", type=int, default=20,
                        help="fetches per page per round (and as many of the static file)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (at least 5)")
    opts = parser.parse_args()
    if opts.rounds < 5:
        parser.error("--rounds must be at least 5")
    print(json.dumps(asyncio.run(run(opts)), indent=2))


if __name__ == "__main__":
    main()
