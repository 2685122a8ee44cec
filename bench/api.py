"""Benchmark the REST API: root-keys and storage for a site of 10,000 users under uvicorn.

Builds the same site as ``bench/exports.py`` (10,000 users, 100 admins with keys, 10,000
home and 2,000 group storages) in an embedded store with bulk inserts, starts
``cheeto daemon api`` (uvicorn, one process) on loopback, and drives each endpoint for a
fixed time with an async httpx client at a given concurrency, then (when installed) with
``wrk``. Reports requests/s and p50/p90/p99 latency per endpoint as JSON on stdout.

    .venv/bin/python bench/api.py [--users 10000] [--groups 2000] [--duration 20]
                                  [--concurrency 1 4] [--cache 0 30] [--no-wrk]
                                  [--routes puppet|auth|lists|all]

``--routes auth`` drives the authenticated ``/api/v1`` reads instead (a signed token
checked against the revocation collection, roles loaded per request; or a managed API
key), next to the static baseline on the same uvicorn (``/healthz``: no credential, one
store ping), to show what authentication costs per request.

``--routes pages`` (issue 31) measures the list routes' pages against ``/api/v1/me``
(the same token, no store read past authentication: the floor), in ``--rounds`` rounds
that alternate the routes (and, with ``--baseline TREE``, a second API process running
another checkout on the same store, the two sides' order swapped every round);
``--requests`` sequential requests per route and round, p50/p95 per round, then the
min and median over rounds, each route's p50 over the floor's and over the baseline's
of the same round, and the load average at every round's start:

    .venv/bin/python bench/api.py --routes pages [--users 10000] [--rounds 5]
                                  [--requests 60] [--baseline /tmp/base]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

# CHEETO_BENCH_TREE: measure another checkout (a baseline); the API process gets it too
sys.path.insert(0, os.environ.get("CHEETO_BENCH_TREE")
                or str(Path(__file__).resolve().parent.parent))

from _common import free_port, throwaway_server

sys.path.insert(0, str(Path(__file__).resolve().parent))

from exports import SITE, build

from cheeto_like.config import EmbeddedStoreConfig, MongoConfig
from cheeto_like.store import connect

KEY = "bench-api-key-0123456789abcdef-0123456789"
TREE = os.environ.get("CHEETO_BENCH_TREE") or str(Path(__file__).resolve().parent.parent)
CHEETO = str(Path(sys.executable).parent / "cheeto")
# a tree from before sign-in (a baseline) has no auth/ and refuses its config keys
HAS_AUTH = (Path(TREE) / "cheeto_like" / "auth").is_dir()


def endpoints(base: str) -> dict[str, tuple[str, dict[str, str]]]:
    auth = {"X-API-Key": KEY}
    return {
        # a static file on the same uvicorn: the ceiling a cached body is compared with
        "static (baseline)": (f"{base}/static/swagger-ui/favicon-32x32.png", {}),
        "healthz": (f"{base}/healthz", {}),
        "root-keys (text)": (f"{base}/puppet/root-keys/{SITE}", auth),
        "root-keys (json)": (f"{base}/puppet/root-keys/{SITE}",
                             auth | {"Accept": "application/json"}),
        "storage": (f"{base}/puppet/storage/{SITE}", auth),
    }


def auth_endpoints(base: str, token: str, key: str,
                   user: str) -> dict[str, tuple[str, dict[str, str]]]:
    """The authenticated /api/v1 reads, with ``healthz`` as the static baseline."""
    bearer = {"Authorization": f"Bearer {token}"}
    v1 = f"{base}/api/v1"
    return {
        "healthz (static baseline)": (f"{base}/healthz", {}),
        "v1 me (token)": (f"{v1}/me", bearer),
        "v1 sites (token)": (f"{v1}/sites", bearer),
        "v1 user (token)": (f"{v1}/users/{user}", bearer),
        "v1 quota of a user (token)": (f"{v1}/quotas/{SITE}?user={user}", bearer),
        "v1 sites (api key)": (f"{v1}/sites", {"X-API-Key": key}),
    } | list_endpoints(base, token)


def list_endpoints(base: str, token: str) -> dict[str, tuple[str, dict[str, str]]]:
    """The /api/v1 list routes: one page, whatever the site's size (paging in the
    store), with ``healthz`` as the static baseline."""
    bearer = {"Authorization": f"Bearer {token}"}
    v1 = f"{base}/api/v1"
    return {
        "healthz (static baseline)": (f"{base}/healthz", {}),
        "v1 users page of 10 (token)": (f"{v1}/users?limit=10", bearer),
        "v1 users page of 100 (token)": (f"{v1}/users?limit=100", bearer),
        "v1 users of a site, page of 10 (token)": (f"{v1}/users?site={SITE}&limit=10", bearer),
        "v1 groups page of 100 (token)": (f"{v1}/groups?limit=100", bearer),
    }


def page_endpoints(base: str, token: str) -> dict[str, tuple[str, dict[str, str]]]:
    """``--routes pages``: the floor first, then the list routes the goal names (a page of
    100 users, the first page of groups) and their site-filtered forms."""
    bearer = {"Authorization": f"Bearer {token}"}
    v1 = f"{base}/api/v1"
    return {
        "me (floor)": (f"{v1}/me", bearer),
        "users?limit=100": (f"{v1}/users?limit=100", bearer),
        "users?limit=100&offset=9900": (f"{v1}/users?limit=100&offset=9900", bearer),
        "groups": (f"{v1}/groups", bearer),
        "users?site=S&limit=100": (f"{v1}/users?site={SITE}&limit=100", bearer),
        "groups?site=S": (f"{v1}/groups?site={SITE}", bearer),
    }


GOAL_MS = 50.0  # issue 31: /users?limit=100 and /groups p50 under 50 ms at 10k users


async def sample(client: httpx.AsyncClient, url: str, headers: dict[str, str],
                 count: int) -> list[float]:
    """``count`` sequential requests' latencies (s), after one uncounted warm-up."""
    (await client.get(url, headers=headers)).raise_for_status()
    latencies = []
    for _ in range(count):
        started = time.perf_counter()
        response = await client.get(url, headers=headers)
        latencies.append(time.perf_counter() - started)
        response.raise_for_status()
    return latencies


async def measure_pages(sides: dict[str, str], token: str, rounds: int,
                        requests: int) -> dict[str, Any]:
    """Each round: every route on every side (``{side: base URL}``), alternating; the
    sides' order flips every round so neither always runs second."""
    names = list(page_endpoints("", token))
    per_round: list[dict[str, Any]] = []
    async with httpx.AsyncClient(timeout=300) as client:
        for number in range(rounds):
            order = list(sides) if number % 2 == 0 else list(sides)[::-1]
            row: dict[str, Any] = {"load_average": [round(x, 2) for x in os.getloadavg()]}
            for name in names:
                for side in order:
                    url, headers = page_endpoints(sides[side], token)[name]
                    latencies = await sample(client, url, headers, requests)
                    row.setdefault(side, {})[name] = {
                        "p50_ms": round(percentile(latencies, 50) * 1000, 2),
                        "p95_ms": round(percentile(latencies, 95) * 1000, 2)}
            print(f"round {number + 1}: " + ", ".join(
                f"{side} {name} {row[side][name]['p50_ms']} ms" for side in sides
                for name in names), file=sys.stderr)
            per_round.append(row)
    return {"rounds": per_round, "summary": summarize(per_round, list(sides), names)}


def summarize(per_round: list[dict[str, Any]], sides: list[str],
              names: list[str]) -> dict[str, Any]:
    """Min and median over rounds of each figure, and the same-round ratios."""
    def spread(values: list[float]) -> dict[str, float]:
        return {"min": round(min(values), 3), "median": round(statistics.median(values), 3)}

    out: dict[str, Any] = {}
    for side in sides:
        out[side] = {}
        for name in names:
            figures = [r[side][name] for r in per_round]
            entry = {"p50_ms": spread([f["p50_ms"] for f in figures]),
                     "p95_ms": spread([f["p95_ms"] for f in figures])}
            if name != "me (floor)":
                entry["p50_over_floor"] = spread(
                    [r[side][name]["p50_ms"] / r[side]["me (floor)"]["p50_ms"]
                     for r in per_round])
            if side != sides[0]:
                entry["ours_p50_over_this"] = spread(
                    [r[sides[0]][name]["p50_ms"] / r[side][name]["p50_ms"]
                     for r in per_round])
            out[side][name] = entry
    ours = out[sides[0]]
    out["goal"] = {"p50_under_ms": GOAL_MS, "met": all(
        ours[name]["p50_ms"]["median"] < GOAL_MS for name in ("users?limit=100", "groups"))}
    return out


async def credentials(store: Any, tmp: Path) -> tuple[str, str, str]:
    """An admin's token (signed with the API's key file) and an ``api:read`` key."""
    from cheeto_like.auth.tokens import TokenIssuer
    from cheeto_like.config import ApiConfig
    from cheeto_like.operations.auth import CreateApiKey, GrantRole

    user = "e00000"
    await GrantRole.run(store, "bench", user=user, role="admin")
    made = await CreateApiKey.run(store, "bench", name="bench", scopes=["api:read"])
    try:  # tokens name the user's id since issue 23; a baseline tree may sign the name
        from cheeto_like.auth.principal import subject_of
    except ImportError:
        subject = user
    else:
        subject = await subject_of(user)
    token, _ = TokenIssuer.from_config(ApiConfig(jwt_key_file=tmp / "jwt.key")).issue(
        subject, 24 * 3600)
    return token, made.secret, user



def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))
    return ordered[index]


async def drive(url: str, headers: dict[str, str], concurrency: int, duration: float,
                min_requests: int) -> dict[str, Any]:
    """``concurrency`` clients each sending requests back to back for ``duration`` s (and
    until ``min_requests`` answers came back, so slow endpoints still get percentiles)."""
    latencies: list[float] = []
    errors = 0
    size = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=300) as client:
        warm = await client.get(url, headers=headers)  # warm-up, not counted
        warm.raise_for_status()
        size = len(warm.content)
        deadline = time.perf_counter() + duration

        async def worker() -> None:
            nonlocal errors
            while time.perf_counter() < deadline or len(latencies) < min_requests:
                started = time.perf_counter()
                response = await client.get(url, headers=headers)
                elapsed = time.perf_counter() - started
                if response.status_code != 200:
                    errors += 1
                latencies.append(elapsed)

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - began
    return {"concurrency": concurrency, "requests": len(latencies), "errors": errors,
            "seconds": round(wall, 2), "bytes": size,
            "requests_per_s": round(len(latencies) / wall, 2),
            "p50_ms": round(percentile(latencies, 50) * 1000, 1),
            "p90_ms": round(percentile(latencies, 90) * 1000, 1),
            "p99_ms": round(percentile(latencies, 99) * 1000, 1),
            "max_ms": round(max(latencies) * 1000, 1),
            "mean_ms": round(statistics.fmean(latencies) * 1000, 1)}


_WRK_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def run_wrk(url: str, headers: dict[str, str], concurrency: int,
            duration: float) -> dict[str, Any]:
    """One ``wrk --latency`` run (one thread; its timeout raised above the slowest reply)."""
    argv = ["wrk", "-t1", f"-c{concurrency}", f"-d{int(duration)}s", "--latency",
            "--timeout", "120s"]
    for name, value in headers.items():
        argv += ["-H", f"{name}: {value}"]
    out = subprocess.run([*argv, url], capture_output=True, text=True, check=True,
                         timeout=duration + 180).stdout
    result: dict[str, Any] = {"concurrency": concurrency}
    if match := re.search(r"Requests/sec:\s+([\d.]+)", out):
        result["requests_per_s"] = float(match.group(1))
    if match := re.search(r"(\d+) requests in ([\d.]+)(\w+)", out):
        result["requests"] = int(match.group(1))
    for pct in ("50", "90", "99"):
        if match := re.search(rf"^\s+{pct}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M):
            result[f"p{pct}_ms"] = round(float(match.group(1)) * _WRK_UNITS[match.group(2)], 1)
    if match := re.search(r"Non-2xx or 3xx responses: (\d+)", out):
        result["errors"] = int(match.group(1))
    if match := re.search(r"Socket errors: (.*)", out):
        result["socket_errors"] = match.group(1).strip()
    return result


def start_api(tmp: Path, embedded: EmbeddedStoreConfig, port: int,
              cache_seconds: float, tree: str = TREE) -> subprocess.Popen[bytes]:
    config = tmp / "config.yaml"
    config.write_text(
        f"mongo:\n  default:\n    database: bench_api\n    embedded:\n"
        f"      path: {embedded.path}\n      port: {embedded.port}\n"
        f"api:\n  default:\n    api_key: {KEY}\n    cache_seconds: {cache_seconds}\n"
        + (f"    jwt_key_file: {tmp / 'jwt.key'}\n" if HAS_AUTH else ""))
    log = (tmp / f"api-{port}.log").open("wb")
    proc = subprocess.Popen([CHEETO, "daemon", "api", "--config", str(config), "--port",
                             str(port)], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": tree})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"the API from {tree} did not start:\n"
                     f"{(tmp / f'api-{port}.log').read_text()[-2000:]}")


def stop(api: subprocess.Popen[bytes]) -> None:
    api.send_signal(signal.SIGTERM)
    try:
        api.wait(timeout=15)
    except subprocess.TimeoutExpired:
        api.kill()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--groups", type=int, default=2_000)
    parser.add_argument("--duration", type=float, default=20.0,
                        help="seconds per endpoint and concurrency level")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--min-requests", type=int, default=10,
                        help="httpx keeps going past --duration until this many answers")
    parser.add_argument("--cache", type=float, nargs="+", default=[0, 30],
                        help="api.cache_seconds settings to measure (0: every request "
                             "queries the store)")
    parser.add_argument("--no-wrk", action="store_true", help="skip wrk even if installed")
    parser.add_argument("--routes", choices=("puppet", "auth", "lists", "pages", "all"),
                        default="puppet",
                        help="the puppet exports, the authenticated /api/v1 reads, only "
                             "the /api/v1 list routes, the list routes' pages against "
                             "/api/v1/me in alternating rounds (issue 31), or all")
    parser.add_argument("--rounds", type=int, default=5,
                        help="--routes pages: rounds (at least 5)")
    parser.add_argument("--requests", type=int, default=60,
                        help="--routes pages: sequential requests per route and round")
    parser.add_argument("--baseline", metavar="TREE",
                        help="--routes pages: a checkout to run beside this one, as a "
                             "second API process on the same store")
    opts = parser.parse_args()
    if opts.users < 1 or opts.groups < 1:
        parser.error("--users and --groups must be at least 1")
    if opts.routes == "pages":
        if opts.rounds < 5 or opts.requests < 10:
            parser.error("--routes pages needs --rounds >= 5 and --requests >= 10")
        if opts.baseline and not (Path(opts.baseline) / "cheeto_like").is_dir():
            parser.error(f"--baseline {opts.baseline}: no cheeto_like/ there")
        await pages_main(opts)
        return
    use_wrk = not opts.no_wrk and shutil.which("wrk") is not None
    with tempfile.TemporaryDirectory(prefix="cheeto-bench-api-") as name:
        tmp = Path(name)
        embedded = EmbeddedStoreConfig(path=tmp / "store", port=free_port())
        server = throwaway_server(embedded)
        server.start_background()
        api = None
        try:
            store = await connect(MongoConfig(embedded=embedded, database="bench_api"),
                                  autostart=False)
            print(f"building {opts.users} users, {opts.groups} group storages",
                  file=sys.stderr)
            started = time.perf_counter()
            await build(opts.users, opts.groups)
            built = round(time.perf_counter() - started, 1)
            token, secret, user = (await credentials(store, tmp) if opts.routes != "puppet"
                                   else ("", "", ""))
            await store.close()
            results: dict[str, Any] = {}
            for cache_seconds in opts.cache:
                label = f"cache_seconds={cache_seconds:g}"
                port = free_port()
                api = start_api(tmp, embedded, port, cache_seconds)
                base = f"http://127.0.0.1:{port}"
                results[label] = {}
                routes: dict[str, tuple[str, dict[str, str]]] = {}
                if opts.routes in ("puppet", "all"):
                    routes |= endpoints(base)
                if opts.routes in ("auth", "all"):
                    routes |= auth_endpoints(base, token, secret, user)
                elif opts.routes == "lists":
                    routes |= list_endpoints(base, token)
                for name, (url, headers) in routes.items():
                    runs: dict[str, Any] = {"httpx": []}
                    for concurrency in opts.concurrency:
                        print(f"{label} {name}: httpx, {concurrency} client(s)",
                              file=sys.stderr)
                        runs["httpx"].append(await drive(url, headers, concurrency,
                                                         opts.duration, opts.min_requests))
                    if use_wrk:
                        runs["wrk"] = []
                        for concurrency in opts.concurrency:
                            print(f"{label} {name}: wrk, {concurrency} connection(s)",
                                  file=sys.stderr)
                            runs["wrk"].append(await asyncio.to_thread(
                                run_wrk, url, headers, concurrency, opts.duration))
                    results[label][name] = runs
                stop(api)
                api = None
        finally:
            if api is not None:
                stop(api)
            server.stop()
    print(json.dumps({
        "store": "embedded nx-27017", "server": "uvicorn, 1 process (cheeto daemon api)",
        "users": opts.users, "group_storages": opts.groups, "admins_with_keys": opts.users // 100,
        "build_seconds": built, "duration_s": opts.duration, "wrk": use_wrk,
        "runs": results}, indent=2))


async def pages_main(opts: argparse.Namespace) -> None:
    """``--routes pages``: one store, this tree's API (and the baseline's), rounds."""
    with tempfile.TemporaryDirectory(prefix="cheeto-bench-api-") as name:
        tmp = Path(name)
        embedded = EmbeddedStoreConfig(path=tmp / "store", port=free_port())
        server = throwaway_server(embedded)
        server.start_background()
        apis: list[subprocess.Popen[bytes]] = []
        try:
            store = await connect(MongoConfig(embedded=embedded, database="bench_api"),
                                  autostart=False)
            print(f"building {opts.users} users, {opts.groups} groups", file=sys.stderr)
            started = time.perf_counter()
            await build(opts.users, opts.groups)
            built = round(time.perf_counter() - started, 1)
            token, _, _ = await credentials(store, tmp)
            await store.close()
            trees = {"ours": TREE} | ({"baseline": opts.baseline} if opts.baseline else {})
            sides: dict[str, str] = {}
            for side, tree in trees.items():
                port = free_port()
                apis.append(start_api(tmp, embedded, port, 0, tree))
                sides[side] = f"http://127.0.0.1:{port}"
            result = await measure_pages(sides, token, opts.rounds, opts.requests)
        finally:
            for api in apis:
                stop(api)
            server.stop()
    print(json.dumps({
        "store": "embedded nx-27017", "server": "uvicorn, 1 process per side",
        "users": opts.users, "groups": opts.groups + 2, "build_seconds": built,
        "trees": trees, "rounds": opts.rounds, "requests_per_route_and_round": opts.requests,
        **result}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
