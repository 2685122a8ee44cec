"""Issue 25: RabbitMQ's consumer_timeout below the task time limit redelivers a long run
(it runs twice). A worker reads the broker's value at start and says what to set; the
session's broker carries the documented setting. Real ``cheeto daemon worker``
processes; a private node for the short timeout."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from cheeto_like.daemon.rabbitmq import judge_consumer_timeout, required_consumer_timeout_ms
from tests.conftest import module_database
from tests.services.rabbitmq import RabbitMQ

from .celery_harness import DaemonProcess, mongo_block, write_config


async def started(proc: DaemonProcess, marker: str, within: float = 90.0) -> str:
    deadline = time.monotonic() + within
    while marker not in proc.output():
        assert proc.proc.poll() is None, proc.output()
        assert time.monotonic() < deadline, proc.output()
        await asyncio.sleep(0.2)
    return proc.output()


def worker(config: Path, env: dict[str, str]) -> DaemonProcess:
    return DaemonProcess(["worker", "--name", "ct-hub@%h"], config, config.parent / "w.log",
                         env=env)


async def test_a_short_consumer_timeout_is_warned_at_start(store, mongo_config, request,
                                                           tmp_path: Path) -> None:
    broker = RabbitMQ(tmp_path, consumer_timeout_ms=60000).start()
    try:
        config = write_config(tmp_path / "config.yaml",
                              mongo_block(mongo_config, module_database(request)),
                              {"broker_url": broker.url, "task_time_limit": 120,
                               "beat_schedule_filename": str(tmp_path / "beat")})
        proc = worker(config, broker.env)
        try:
            out = await started(proc, "worker: ")
        finally:
            proc.kill()
        assert ("worker: the broker's consumer_timeout is 60000 ms, below "
                "daemon.task_time_limit 120 s: a run longer than 60 s is redelivered and runs "
                "twice; set `consumer_timeout = 180000` in rabbitmq.conf") in out, out
        assert "WARNING" in out.split("worker: the broker's")[0].splitlines()[-1]
    finally:
        broker.stop()


async def test_the_documented_setting_passes_the_check(store, rabbitmq: RabbitMQ,
                                                       mongo_config, request,
                                                       tmp_path: Path) -> None:
    config = write_config(tmp_path / "config.yaml",
                          mongo_block(mongo_config, module_database(request)),
                          {"broker_url": rabbitmq.vhost_url(module_database(request)),
                           "beat_schedule_filename": str(tmp_path / "beat")})
    proc = worker(config, rabbitmq.env)
    try:
        out = await started(proc, "worker: ")
    finally:
        proc.kill()
    assert ("worker: the broker's consumer_timeout is 3660000 ms (>= 3660000 ms needed): "
            "fine") in out, out


async def test_an_unreachable_node_is_a_warning_naming_the_setting(
        store, rabbitmq: RabbitMQ, mongo_config, request, tmp_path: Path) -> None:
    config = write_config(tmp_path / "config.yaml",
                          mongo_block(mongo_config, module_database(request)),
                          {"broker_url": rabbitmq.vhost_url(module_database(request)),
                           "rabbitmqctl": str(tmp_path / "no-rabbitmqctl"),
                           "beat_schedule_filename": str(tmp_path / "beat")})
    proc = worker(config, {})
    try:
        out = await started(proc, "worker: ")
    finally:
        proc.kill()
    assert "worker: cannot read the broker's consumer_timeout (" in out
    assert "set `consumer_timeout = 3660000` in rabbitmq.conf" in out
    assert "daemon.broker_consumer_timeout_ms" in out


@pytest.mark.parametrize(("read_ms", "read", "declared", "warns"), [
    (1_800_000, True, None, True), (None, True, None, False), (3_660_000, True, 10, False),
    (None, False, 3_660_000, False), (None, False, 60_000, True), (None, False, None, True)])
def test_the_verdict(read_ms, read, declared, warns):
    import logging

    level, line = judge_consumer_timeout(3600, read_ms, read=read, declared_ms=declared,
                                         why_unread="no cookie")
    assert (level == logging.WARNING) is warns, line
    assert required_consumer_timeout_ms(3600) == 3_660_000
