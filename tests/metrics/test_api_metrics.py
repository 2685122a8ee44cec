"""``GET /metrics`` of a real ``cheeto daemon api`` process: requests counted by route
template and status (never a user's name in a label), the store-derived families, the
sign-in counters, the bearer token, and ``promtool check metrics`` on the answer."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from ruamel.yaml import YAML

from cheeto_like.config import MongoConfig
from cheeto_like.models import SyncRun, UsageCursor
from cheeto_like.store import Store
from tests.conftest import module_database, seed_access_status, wipe
from tests.daemon.celery_harness import mongo_block
from tests.daemon.test_api_live import Server
from tests.factories import make_site, make_user

NAME = "quinella"  # a user name nothing else in the answer could contain
TOKEN = "metrics-scrape-token-abcdef0123456789"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.fixture(scope="module")
async def seeded(store: Store) -> Store:
    await wipe()
    await seed_access_status()
    await make_site(store, "farm")
    await make_user(store, NAME, site="farm")
    ended = datetime.now(UTC) - timedelta(minutes=5)
    await SyncRun(target="slurm", site="farm", status="ok", started_at=ended,
                  finished_at=ended, duration_s=1.0).insert()
    await SyncRun(target="slurm", site="farm", status="failed", started_at=ended,
                  finished_at=ended + timedelta(minutes=1)).insert()
    await UsageCursor(site="farm", cluster="farm", until=ended, last_run_at=ended).insert()
    await store.database["usage_records"].insert_one(
        {"site": "farm", "key": "farm:farm:1", "end_epoch": int(time.time()) - 3600})
    return store


def write(path: Path, mongo: MongoConfig, database: str, **metrics: Any) -> Path:
    data: dict[str, Any] = {
        "mongo": {"default": mongo_block(mongo, database)},
        "api": {"default": {"login_max_failures": 2}},
        "daemon": {"default": {"sites": ["farm"], "tasks": {
            "slurm_sync": {"schedule": 600},
            "puppet_sync": {"schedule": "0 3 * * *", "repo": str(path.parent / "repo")}}}},
    }
    if metrics:
        data["metrics"] = metrics
    with path.open("w") as out:
        YAML(typ="safe").dump(data, out)
    return path


@pytest.fixture(scope="module")
def server(seeded: Store, mongo_config: MongoConfig, request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("api-metrics")
    config = write(tmp / "config.yaml", mongo_config, module_database(request), token=TOKEN)
    srv = Server(config, tmp / "api.log", "--log-format", "json").wait()
    try:
        yield srv
    finally:
        srv.stop()


def scrape(server: Server) -> str:
    answer = httpx.get(f"{server.url}/metrics", timeout=10,
                       headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain; version=")
    return answer.text


def until_sample(server: Server, key: tuple[str, tuple[tuple[str, str], ...]],
                 at_least: float) -> Samples:
    """Scrape until ``key`` reaches ``at_least`` (a request is counted as it ends)."""
    deadline = time.monotonic() + 30
    while True:
        found = samples(scrape(server))
        if found.get(key, 0) >= at_least or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def test_metrics_needs_the_token(server):
    assert httpx.get(f"{server.url}/metrics", timeout=10).status_code == 401
    wrong = httpx.get(f"{server.url}/metrics", headers={"Authorization": "Bearer x"},
                      timeout=10)
    assert wrong.status_code == 401 and "cheeto_" not in wrong.text
    assert "/metrics" not in httpx.get(f"{server.url}/openapi.json", timeout=10).text


def test_requests_are_counted_by_route_template_without_names(server):
    for _ in range(3):
        assert httpx.get(f"{server.url}/api/v1/users/{NAME}", timeout=10).status_code == 401
    assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200
    assert httpx.get(f"{server.url}/no/such/{NAME}", timeout=10).status_code == 404
    assert httpx.request("BREW", f"{server.url}/healthz", timeout=10).status_code == 405
    key = ("cheeto_api_requests_total",
           (("method", "GET"), ("route", "/api/v1/users/{name}"), ("status", "401")))
    found = until_sample(server, key, 3)
    assert found[key] >= 3
    assert found[("cheeto_api_requests_total",
                  (("method", "GET"), ("route", "/healthz"), ("status", "200")))] >= 1
    assert found[("cheeto_api_requests_total",
                  (("method", "GET"), ("route", "unmatched"), ("status", "404")))] >= 1
    assert found[("cheeto_api_requests_total",
                  (("method", "other"), ("route", "/healthz"), ("status", "405")))] >= 1
    assert found[("cheeto_api_request_duration_seconds_count",
                  (("method", "GET"), ("route", "/api/v1/users/{name}")))] >= 3
    text = scrape(server)
    assert NAME not in text


def test_store_derived_families(server):
    found = samples(scrape(server))
    ok = found[("cheeto_sync_last_success_timestamp_seconds",
                (("site", "farm"), ("target", "slurm")))]
    assert abs(ok - (time.time() - 300)) < 120  # the ok run, not the later failed one
    assert found[("cheeto_sync_period_seconds", (("site", "farm"), ("target", "slurm")))] == 600
    assert found[("cheeto_sync_period_seconds",
                  (("site", "farm"), ("target", "puppet")))] == 86400
    lag = found[("cheeto_usage_lag_seconds", (("site", "farm"),))]
    assert 3600 <= lag < 3600 + 300
    assert any(name == "cheeto_build_info" and dict(labels)["role"] == "api"
               for name, labels in found)


def test_sign_in_failures_and_limiter_refusals_are_counted(server):
    login = f"{server.url}/api/v1/login"
    codes = [httpx.post(login, json={"username": NAME, "password": "wrong"},
                        timeout=30).status_code for _ in range(3)]
    assert codes == [401, 401, 429]
    assert httpx.get(f"{server.url}/api/v1/me", headers={"X-API-Key": "ck_nope"},
                     timeout=10).status_code == 401
    assert httpx.get(f"{server.url}/api/v1/me", headers={"Authorization": "Bearer a.b.c"},
                     timeout=10).status_code == 401
    found = until_sample(server, ("cheeto_auth_limiter_refusals_total",
                                  (("scope", "pair"),)), 1)
    assert found[("cheeto_auth_limiter_refusals_total", (("scope", "pair"),))] >= 1
    failures = {method: found.get(("cheeto_auth_signin_failures_total",
                                   (("method", method),)), 0)
                for method in ("password", "api_key", "token")}
    assert failures["password"] >= 2 and failures["api_key"] >= 1 and failures["token"] >= 1


def test_promtool_accepts_the_answer(server):
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool missing: scripts/install-system-deps.sh installs it"
    httpx.get(f"{server.url}/healthz", timeout=10)
    checked = subprocess.run([promtool, "check", "metrics"], input=scrape(server),
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_api_logs_json_lines(server):
    """``daemon api --log-format json``: its own and uvicorn's records are objects."""
    entries = [json.loads(line) for line in server.log.read_text().splitlines()
               if line.startswith("{")]
    loggers = {entry["logger"] for entry in entries}
    assert "cheeto_like.api" in loggers  # "API connected to ..."
    assert any(name.startswith("uvicorn") for name in loggers)
    assert all(entry["level"] in ("DEBUG", "INFO", "WARNING", "ERROR") for entry in entries)
