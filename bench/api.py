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
              cache_seconds: float) -> subprocess.Popen[bytes]:
    config = tmp / "config.yaml"
    config.write_text(
        f"mongo:\n  default:\n    database: bench_api\n    embedded:\n"
        f"      path: {embedded.path}\n      port: {embedded.port}\n"
        f"api:\n  default:\n    api_key: {KEY}\n    cache_seconds: {cache_seconds}\n"
        + (f"    jwt_key_file: {tmp / 'jwt.key'}\n" if HAS_AUTH else ""))
    log = (tmp / "api.log").open("wb")
    proc = subprocess.Popen([CHEETO, "daemon", "api", "--config", str(config), "--port",
                             str(port)], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": TREE})
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
    raise SystemExit(f"the API did not start; see {tmp / 'api.log'}:\n"
                     f"{(tmp / 'api.log').read_text()[-2000:]}")


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
    parser.add_argument("--routes", choices=("puppet", "auth", "lists", "all"),
                        default="puppet",
                        help="the puppet exports, the authenticated /api/v1 reads, only "
                             "the /api/v1 list routes, or all")
    opts = parser.parse_args()
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


if __name__ == "__main__":
    asyncio.run(main())
