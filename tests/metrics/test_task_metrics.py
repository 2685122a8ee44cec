"""Task metrics through the real daemon (issue 30): a site worker with two prefork
children on the live cluster runs usage collects and a Slurm dry run sent through
RabbitMQ, and its ``--metrics-port`` answers with the runs by outcome, their durations,
their time in the queue (stamped at the send), the usage rows and the sync's run, added
up over the children. The queue depth collector asks the real broker.
"""

from __future__ import annotations

import asyncio
import io
import socket
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from ruamel.yaml import YAML

from cheeto_like.config import load_config
from cheeto_like.daemon.app import make_app
from cheeto_like.files import write_atomically
from cheeto_like.metrics.collectors_broker import QueueDepth, for_app, queues_of
from tests.conftest import module_database
from tests.daemon.celery_harness import DaemonProcess, mongo_block, node, wait_until_consuming
from tests.factories import make_site
from tests.services.rabbitmq import RabbitMQ
from tests.services.slurm_cluster import SlurmCluster, ensure_unix_user

USER = "taskmetric"
TIMEOUT = 90


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_config(path: Path, mongo: dict[str, Any], daemon: dict[str, Any],
                 metrics_dir: Path) -> Path:
    data = {"mongo": {"default": mongo}, "daemon": {"default": daemon},
            "metrics": {"directory": str(metrics_dir)}}
    buffer = io.StringIO()
    YAML(typ="safe").dump(data, buffer)
    write_atomically(path, buffer.getvalue())
    return path


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a metrics server, keyed by (name, labels)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture
async def farm(db, slurm_cluster: SlurmCluster):
    """Site farm on the live cluster with one finished job to collect."""
    slurm_cluster.reset()
    ensure_unix_user(USER)
    slurm_cluster.sacctmgr("-i", "add", "account", "tmlab", "cluster=farm")
    slurm_cluster.sacctmgr("-i", "add", "user", USER, "account=tmlab", "cluster=farm")
    await make_site(db, "farm")
    sub = slurm_cluster.submit(USER, "-A", "tmlab", wrap="sleep 1")
    assert sub.accepted, sub
    slurm_cluster.wait_finished(sub.job_id, timeout=60)
    yield db
    slurm_cluster.cancel_all()


async def test_a_site_worker_serves_runs_durations_queue_times_and_usage_rows(
        farm, slurm_cluster: SlurmCluster, rabbitmq: RabbitMQ, mongo_config, request,
        tmp_path: Path):
    path = write_config(
        tmp_path / "config.yaml", mongo_block(mongo_config, module_database(request)),
        {"broker_url": rabbitmq.vhost_url(module_database(request)), "sites": ["farm"],
         "task_time_limit": 60,
         "tasks": {"slurm_sync": {"apply": False}, "usage_collect": {"notify": False}}},
        tmp_path / "metrics")
    app = make_app(load_config(path))  # its sends carry the stamp (register_tasks)
    port = free_port()
    name = node("slurm-farm-tm@%h")
    worker = DaemonProcess(["worker", "--site", "farm", "--name", "slurm-farm-tm@%h",
                            "--concurrency", "2", "--metrics-port", str(port)], path,
                           tmp_path / "worker.log", env=slurm_cluster.env)
    try:
        wait_until_consuming(app, {name: worker})

        async def run(task: str, site: str) -> Any:
            result = app.send_task(f"cheeto.{task}", args=[site], queue="slurm.farm")
            await asyncio.to_thread(result.get, timeout=TIMEOUT, interval=0.1,
                                    propagate=False)
            return result

        first = await run("usage_collect", "farm")
        assert first.state == "SUCCESS" and first.result["inserted"] >= 1, first.result
        second = await run("usage_collect", "farm")
        assert second.result["inserted"] == 0 and second.result["unchanged"] >= 1
        wrong = await run("usage_collect", "elsewhere")  # not this queue's site: fails
        assert wrong.state == "FAILURE"
        dry = await run("slurm_sync", "farm")
        assert dry.state == "SUCCESS" and dry.result["applied"] is False
        samples = scrape(port)
    finally:
        worker.kill()
        app.close()
    assert value(samples, "cheeto_task_runs_total", task="usage_collect", site="farm",
                 outcome="ok") == 2
    assert value(samples, "cheeto_task_runs_total", task="usage_collect", site="elsewhere",
                 outcome="failed") == 1
    assert value(samples, "cheeto_task_runs_total", task="slurm_sync", site="farm",
                 outcome="ok") == 1
    assert value(samples, "cheeto_task_duration_seconds_count", task="usage_collect") == 3
    # every send was stamped by this process: each run waited a measured time
    assert value(samples, "cheeto_task_queue_seconds_count", task="usage_collect") == 3
    assert value(samples, "cheeto_task_queue_seconds_bucket", task="usage_collect",
                 le="+Inf") == 3
    assert value(samples, "cheeto_usage_ingest_rows_total", site="farm",
                 outcome="inserted") == first.result["inserted"]
    assert value(samples, "cheeto_usage_ingest_rows_total", site="farm",
                 outcome="unchanged") == first.result["unchanged"] + \
        second.result["unchanged"]
    # the sync the task ran, recorded in the pool child, served by the worker's port
    assert value(samples, "cheeto_sync_runs_total", target="slurm", site="farm",
                 mode="dry_run", outcome="ok") == 1
    assert ("cheeto_build_info", frozenset({("role", "site_worker"),
                                            ("version", _version())})) in samples


def _version() -> str:
    from cheeto_like import version

    return version()


async def test_queue_depth_is_asked_of_the_broker(rabbitmq: RabbitMQ, mongo_config, request,
                                                  tmp_path: Path):
    vhost = f"{module_database(request)}_depth"
    path = write_config(
        tmp_path / "config.yaml", mongo_block(mongo_config, module_database(request)),
        {"broker_url": rabbitmq.vhost_url(vhost), "sites": ["deptha", "depthb"],
         "tasks": {"slurm_sync": {"sites": ["deptha", "depthc"]}}}, tmp_path / "metrics")
    config = load_config(path)
    assert queues_of(config) == ["cheeto", "slurm.deptha", "slurm.depthb", "slurm.depthc"]
    app = make_app(config)
    try:
        for _ in range(3):  # nobody consumes slurm.deptha: they wait there
            app.send_task("cheeto.slurm_sync", args=["deptha"], queue="slurm.deptha")
        registry = CollectorRegistry()
        registry.register(for_app(app, config))

        def depth(queue: str) -> float | None:
            return registry.get_sample_value("cheeto_queue_messages", {"queue": queue})

        deadline = time.monotonic() + 30
        for _ in range(150):  # publisher confirms aside, a message is counted at once
            if depth("slurm.deptha") == 3 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        assert depth("slurm.deptha") == 3
        assert depth("slurm.depthb") == 0  # never declared: nothing waits there
        assert depth("cheeto") == 0
    finally:
        app.close()
    # a broker that cannot be reached: no sample, and no error out of the scrape
    down = CollectorRegistry()
    down.register(QueueDepth(lambda: _closed_port_connection(), ["cheeto"], timeout=1))
    assert down.get_sample_value("cheeto_queue_messages", {"queue": "cheeto"}) is None


def _closed_port_connection() -> Any:
    from kombu import Connection

    conn = Connection(f"amqp://guest:guest@127.0.0.1:{free_port()}//")
    conn.connect_timeout = 1
    return conn
