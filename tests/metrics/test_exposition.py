"""The exposition server of a daemon process, scraped over real HTTP: values summed over
forked processes (prometheus_client's multiprocess mode), the bearer token, build info,
``promtool check metrics``; and a real ``cheeto daemon worker --concurrency 2`` whose
two pool children's counts add up on its ``--metrics-port``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from cheeto_like import version
from cheeto_like.config import load_config
from cheeto_like.daemon.app import make_app
from tests.conftest import module_database
from tests.daemon.celery_harness import (
    DaemonProcess,
    mongo_block,
    node,
    wait_until_consuming,
    write_config,
)
from tests.services._proc import free_port
from tests.services.rabbitmq import RabbitMQ

from . import metric_task

# a server process: recording on, two forked children count too (one also sets a
# gauge), then it serves and waits for its stdin to close
SERVER = r"""
import os, sys
from pathlib import Path
from cheeto_like import metrics
from cheeto_like.metrics import process

where = Path(sys.argv[1])
metrics.activate("hub_worker", where)
metrics.inc("cheeto_task_runs_total", task="t", site="farm", outcome="ok")
for n in (2, 3):
    pid = os.fork()
    if pid == 0:
        metrics.inc("cheeto_task_runs_total", n, task="t", site="farm", outcome="ok")
        metrics.observe("cheeto_task_duration_seconds", 0.2 * n, task="t")
        if n == 3:
            metrics.set_gauge("cheeto_sync_drift_items", 7, target="ldap", site="farm")
        os._exit(0)
    os.waitpid(pid, 0)
    process.mark_dead(pid)
server = process.serve("127.0.0.1", 0, "hub_worker", token=sys.argv[2] or None)
print(server.port, flush=True)
sys.stdin.read()
"""
TOKEN = "scrape-token-0123456789"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    where = tmp_path / "mp"
    where.mkdir()
    (where / "counter_999999.db").write_bytes(b"stale from a previous run")
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(where), TOKEN],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}", where
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_forked_processes_add_up_and_the_token_is_asked(served):
    url, where = served
    assert not (where / "counter_999999.db").exists()  # emptied at start
    assert httpx.get(f"{url}/metrics", timeout=10).status_code == 401
    wrong = httpx.get(f"{url}/metrics", headers={"Authorization": "Bearer nope"}, timeout=10)
    assert wrong.status_code == 401
    assert httpx.get(f"{url}/other", timeout=10).status_code == 404
    answer = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"},
                       timeout=10)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain; version=")
    found = samples(answer.text)
    labels = (("outcome", "ok"), ("site", "farm"), ("task", "t"))
    assert found[("cheeto_task_runs_total", labels)] == 6.0  # 1 + 2 + 3, children dead
    assert found[("cheeto_task_duration_seconds_count", (("task", "t"),))] == 2.0
    # a mostrecent gauge outlives its process (the last run's value stays shown)
    assert found[("cheeto_sync_drift_items", (("site", "farm"), ("target", "ldap")))] == 7.0
    assert found[("cheeto_build_info", (("role", "hub_worker"), ("version", version())))] == 1
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool missing: scripts/install-system-deps.sh installs it"
    checked = subprocess.run([promtool, "check", "metrics"], input=answer.text,
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr


# -- a real worker ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def config(rabbitmq: RabbitMQ, mongo_config, request,
           tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("metrics-worker")
    database = module_database(request)
    return write_config(base / "config.yaml", mongo_block(mongo_config, database),
                        {"broker_url": rabbitmq.vhost_url(database), "sites": [],
                         "beat_schedule_filename": str(base / "beat-schedule")},
                        )


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    answer = httpx.get(url, timeout=10)
    assert answer.status_code == 200, answer.text
    return samples(answer.text)


def test_a_worker_with_two_pool_children_shows_their_sum(config: Path, store):
    port = free_port()
    name = "metrics-hub@%h"
    worker = DaemonProcess(["worker", "--concurrency", "2", "--name", name,
                            "--metrics-port", str(port), "--log-format", "json"],
                           config, config.parent / "worker.log", program=metric_task.PROGRAM)
    app = make_app(load_config(config))
    try:
        wait_until_consuming(app, {node(name): worker})
        runs = 6
        results = [app.send_task(metric_task.CELERY_NAME, args=(1.5,), queue="cheeto")
                   for _ in range(runs)]
        pids = {result.get(timeout=120)["pid"] for result in results}
        assert len(pids) == 2, pids  # both children ran some
        url = f"http://127.0.0.1:{port}/metrics"
        key = ("cheeto_usage_ingest_rows_total", (("outcome", "inserted"), ("site", "tick")))
        deadline = time.monotonic() + 60
        while (found := scrape(url)).get(key) != runs and time.monotonic() < deadline:
            time.sleep(0.5)
        assert found[key] == runs, found.get(key)
        assert found[("cheeto_build_info", (("role", "hub_worker"), ("version", version())))]
        # its log lines are JSON objects (--log-format json reaches the worker's logging)
        started = [json.loads(line) for line in worker.output().splitlines()
                   if line.startswith("{") and "consuming" in line]
        assert started and started[0]["logger"] == "cheeto_like.daemon"
        assert started[0]["level"] == "INFO"
        assert worker.interrupt() == 0
    finally:
        worker.kill()
        app.close()


def test_a_taken_port_is_one_line(config: Path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([metric_task.PROGRAM[0], *metric_task.PROGRAM[1:], "daemon",
                               "worker", "--config", str(config), "--metrics-port", str(port)],
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert f"cannot serve metrics on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr


def test_daemon_up_gives_every_process_a_metrics_port(tmp_path):
    """The plan writes free loopback ports into the derived config's ``metrics`` section
    (the workers and beat read it) and every scrape URL into ``stack.json``'s info."""
    from cheeto_like.daemon.stack import StackOptions, plan_stack
    from tests.daemon.test_stack import stack_config

    source = stack_config(tmp_path, free_port(), tasks={"slurm_sync": {"schedule": 600}})
    plan = plan_stack(load_config(source), StackOptions(
        run_dir=tmp_path / "run", broker="filesystem", flower_auth="ops:pw"))
    derived = load_config(plan.config_path, "default").metrics
    ports = [derived.hub_worker_port, derived.beat_port, derived.site_worker_ports["farm"]]
    assert all(ports) and len(set(ports)) == 3
    assert derived.listen_address == "127.0.0.1" and derived.api
    assert derived.directory == (tmp_path / "run" / "metrics").resolve()
    assert plan.info["metrics"] == {
        "api": f"{plan.info['api_url']}metrics",
        "hub": f"http://127.0.0.1:{derived.hub_worker_port}/metrics",
        "beat": f"http://127.0.0.1:{derived.beat_port}/metrics",
        "site-farm": f"http://127.0.0.1:{derived.site_worker_ports['farm']}/metrics"}
    assert plan.store_config.metrics == derived


def test_the_token_comes_from_the_environment_first(monkeypatch):
    from cheeto_like.config import MetricsConfig

    monkeypatch.delenv("CHEETO_METRICS_TOKEN", raising=False)
    assert MetricsConfig().bearer() is None
    assert MetricsConfig(token="from-config").bearer() == "from-config"
    monkeypatch.setenv("CHEETO_METRICS_TOKEN", "from-env")
    assert MetricsConfig(token="from-config").bearer() == "from-env"


def test_a_multiprocess_directory_behind_a_symlink_is_refused(tmp_path):
    """The parent may be the shared temp directory: another user's link is not followed
    (and never emptied)."""
    from cheeto_like.metrics.process import _fresh_directory

    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("x")
    (tmp_path / "parent").mkdir()
    (tmp_path / "parent" / "mp").symlink_to(victim)
    with pytest.raises(PermissionError, match="symlink"):
        _fresh_directory(tmp_path / "parent" / "mp")
    assert (victim / "keep").exists()
    _fresh_directory(tmp_path / "parent" / "fresh")
    assert list((tmp_path / "parent" / "fresh").iterdir()) == []
