"""Benchmark the web dashboard: each page's server time and transferred bytes.

Seeds the demo site (``daemon/demo.py``: a user with a quota and usage, an operator who
sponsors an account) in an embedded store, adds ``--members`` members to the demo
account with ``--jobs`` ledger rows each (bulk inserts), serves the API app (with the
dashboard) under uvicorn on loopback in this process, signs in through the login form,
and fetches every page ``--requests`` times. Server time is measured inside the app (an
ASGI wrapper around the whole app: routing, auth, queries, rendering); bytes are the
body plus the response headers as sent. The static baseline in the same run is the
dashboard's stylesheet (a file) and ``/healthz`` (one store ping). JSON on stdout.

    .venv/bin/python bench/dashboard.py [--members 200] [--jobs 5] [--requests 20]
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

PAGES = {
    "stylesheet (static baseline)": "/dashboard-static/dashboard.css",
    "healthz (baseline)": "/healthz",
    "login form": "/login",
    "me (user)": "/me",
    "accounts (sponsor)": "/accounts",
    "operator": "/operator",
    "sync runs": "/operator/runs",
}
SIGNED_OUT = {"stylesheet (static baseline)", "healthz (baseline)", "login form"}


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


async def seed(store: Any, members: int, jobs: int) -> None:
    from cheeto_like.daemon.demo import seed_demo
    from cheeto_like.models import GroupMembership, UsageRecord, User, UserSiteInfo

    await seed_demo(store, "bench")
    now = datetime.now(UTC)
    users, sites, edges, rows = [], [], [], []
    for i in range(members):
        name = f"m{i:05d}"
        users.append(User(name=name, email=f"{name}@example.org", fullname=f"Member {i}",
                          uid=300000 + i, gid=300000 + i, home_directory=f"/home/{name}"))
        sites.append(UserSiteInfo(user=name, site="farm"))
        edges.append(GroupMembership(user=name, group="alicegrp", site="farm",
                                     roles=["member"]))
        for j in range(jobs):
            end = now - timedelta(hours=1 + 7 * j)
            rows.append(UsageRecord(key=f"farm/farm/b{i}-{j}", site="farm", cluster="farm",
                                    job_id=f"b{i}-{j}", user=name, account="alicegrp",
                                    end=end, end_epoch=int(end.timestamp()),
                                    day=f"{end:%Y-%m-%d}", elapsed_s=3600, cpus=4,
                                    cpu_minutes=240.0, gpu_minutes=0.0, fingerprint="b"))
    for model, docs in ((User, users), (UserSiteInfo, sites), (GroupMembership, edges),
                        (UsageRecord, rows)):
        if docs:
            await model.insert_many(docs)


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


async def measure(base: str, timer: ServerTimer, requests: int) -> dict[str, Any]:
    from cheeto_like.daemon.demo_dashboard import DEMO_LOGINS

    # https in the client's eyes would be needed to keep a Secure cookie in its jar; send
    # the cookie by hand instead
    async with httpx.AsyncClient(base_url=base) as http:
        tokens = {"user": await sign_in(http, "bob", DEMO_LOGINS["bob"]),
                  "operator": await sign_in(http, "alice", DEMO_LOGINS["alice"])}
    results: dict[str, Any] = {}
    async with httpx.AsyncClient(base_url=base) as http:
        for name, path in PAGES.items():
            who = "user" if name == "me (user)" else "operator"
            headers = {} if name in SIGNED_OUT else {
                "Cookie": f"cheeto_session={tokens[who]}"}
            timer.times.pop(path, None)
            size, status, wall = 0, 0, []
            for _ in range(requests):
                t0 = time.perf_counter()
                r = await http.get(path, headers=headers)
                wall.append(time.perf_counter() - t0)
                status = r.status_code
                head = sum(len(k) + len(v) + 4 for k, v in r.headers.raw)
                size = len(r.content) + head
            server = timer.times.get(path, [])
            results[name] = {
                "path": path, "status": status, "requests": requests,
                "server_ms_p50": round(1000 * statistics.median(server), 2),
                "server_ms_max": round(1000 * max(server), 2),
                "client_ms_p50": round(1000 * statistics.median(wall), 2),
                "bytes": size}
            progress(f"{name}: {results[name]['server_ms_p50']} ms, {size} bytes")
    return results


async def run(opts: argparse.Namespace) -> dict[str, Any]:
    import uvicorn

    from cheeto_like.daemon.api import create_api

    with tempfile.TemporaryDirectory(prefix="cheeto-bench-dash-") as name:
        tmp = Path(name)
        embedded = EmbeddedStoreConfig(path=tmp / "store", port=free_port())
        server = throwaway_server(embedded)
        server.start_background()
        try:
            mongo = MongoConfig(embedded=embedded, database="bench_dashboard")
            store = await connect(mongo, autostart=False)
            progress(f"seeding the demo and {opts.members} members x {opts.jobs} jobs")
            await seed(store, opts.members, opts.jobs)
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
                pages = await measure(f"http://127.0.0.1:{port}", timer, opts.requests)
            finally:
                uv.should_exit = True
                await task
                await store.close()
        finally:
            server.stop()
    return {"members": opts.members, "jobs_per_member": opts.jobs,
            "requests_per_page": opts.requests, "pages": pages}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=200,
                        help="members added to the demo account (each with ledger rows)")
    parser.add_argument("--jobs", type=int, default=5, help="ledger rows per member")
    parser.add_argument("--requests", type=int, default=20, help="fetches per page")
    opts = parser.parse_args()
    print(json.dumps(asyncio.run(run(opts)), indent=2))


if __name__ == "__main__":
    main()
