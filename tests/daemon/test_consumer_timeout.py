"""Issue 25: RabbitMQ's consumer_timeout below the task time limit redelivers a long run
(it runs twice). A worker reads the broker's value at start and says what to set; the
session's broker carries the documented setting. Real ``cheeto daemon worker``
processes; private nodes for the short timeouts, with a one-second channel tick so that
RabbitMQ enforces them within seconds (it checks on each tick, about once a minute by
default).

What RabbitMQ 3.10 does with a delivery past the timeout (seen here): it logs "Consumer 1
on channel 1 has timed out waiting for delivery acknowledgement" and closes the channel
with 406 PRECONDITION_FAILED; the message goes back to the queue (ready, redelivered).
Celery 5 takes the channel error as unrecoverable: the worker lets the running task end
(its result is stored), cannot ack it, and exits. The next worker (a restart) receives
the copy; it would run it again, and past the timeout again, for ever, had the copy of
an ended run not been dropped (``tasks.drop_if_done``)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from cheeto_like.config import load_config
from cheeto_like.daemon.app import make_app
from cheeto_like.daemon.rabbitmq import judge_consumer_timeout, required_consumer_timeout_ms
from tests.conftest import module_database
from tests.services.rabbitmq import RabbitMQ

from . import long_task
from .celery_harness import DaemonProcess, mongo_block, node, wait_until_consuming, write_config
from .long_task import queued, starts, until


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


# -- a run longer than the timeout (the test-only task ``long_sleep``) -------------------

TIME_LIMIT = 30  # task_time_limit: the documented consumer_timeout is then 90000 ms
SLEEP = "20"  # the run's length: past a 10 s timeout, well within the documented one
CHANNEL_CLOSED = "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out"


def long_config(path: Path, mongo_config, request, broker: RabbitMQ) -> Path:
    return write_config(path, mongo_block(mongo_config, module_database(request)),
                        {"broker_url": broker.url, "task_time_limit": TIME_LIMIT,
                         "beat_schedule_filename": str(path.parent / "beat"),
                         "tasks": {"reap": {}}})


def long_worker(config: Path, broker: RabbitMQ, name: str) -> DaemonProcess:
    return DaemonProcess(["worker", "--name", f"{name}@%h"], config,
                         config.parent / f"{name}.log", program=long_task.PROGRAM,
                         env={**broker.env, "CHEETO_TEST_SLEEP_S": SLEEP})


async def test_a_run_past_the_timeout_is_taken_back_and_its_copy_dropped(
        store, mongo_config, request, tmp_path: Path) -> None:
    broker = RabbitMQ(tmp_path, consumer_timeout_ms=10_000, channel_tick_ms=1000).start()
    procs: list[DaemonProcess] = []
    try:
        config = long_config(tmp_path / "config.yaml", mongo_config, request, broker)
        app = make_app(load_config(config))
        first = long_worker(config, broker, "ct-first")
        procs.append(first)
        out = await started(first, "worker: ")
        assert ("worker: the broker's consumer_timeout is 10000 ms, below "
                "daemon.task_time_limit 30 s: a run longer than 10 s is redelivered and runs "
                "twice; set `consumer_timeout = 90000` in rabbitmq.conf") in out, out
        assert "WARNING" in out.split("worker: the broker's")[0].splitlines()[-1]
        wait_until_consuming(app, {node("ct-first@%h"): first})
        result = app.send_task(long_task.SPEC.celery_name)

        # the broker takes the delivery back mid-run: the channel is closed ...
        async def closed() -> bool:
            return CHANNEL_CLOSED in first.output()
        await until(closed, "the broker closing the channel", first)
        # ... the run goes on to its end and stores its result; the worker then stops,
        # and the message waits in the queue for the next worker
        assert await asyncio.to_thread(result.get, timeout=60, propagate=False)
        assert result.state == "SUCCESS" and result.result["status"] == "ok"
        assert await asyncio.to_thread(first.proc.wait, 60) is not None
        assert queued(broker) == 1
        assert len(await starts(store, result.id)) == 1

        # the next worker (systemd restarting it) gets the redelivered copy: dropped, acked
        second = long_worker(config, broker, "ct-second")
        procs.append(second)

        async def dropped() -> bool:
            return (f"a redelivered copy of run {result.id}, which already ended (SUCCESS); "
                    "dropped") in second.output()
        await until(dropped, "the copy dropped", second, within=90)

        async def empty() -> bool:
            return queued(broker) == 0
        await until(empty, "the queue empty", second)
        assert len(await starts(store, result.id)) == 1, "the run happened twice"
        meta = await store.database["celery_taskmeta"].find_one({"_id": result.id})
        assert meta["status"] == "SUCCESS" and '"slept_s"' in str(meta["result"])
    finally:
        for proc in procs:
            proc.kill()
        broker.stop()


async def test_with_the_documented_setting_a_long_run_runs_once(
        store, mongo_config, request, tmp_path: Path) -> None:
    documented = required_consumer_timeout_ms(TIME_LIMIT)  # (30 + 60) * 1000
    broker = RabbitMQ(tmp_path, consumer_timeout_ms=documented, channel_tick_ms=1000).start()
    proc = None
    try:
        config = long_config(tmp_path / "config.yaml", mongo_config, request, broker)
        app = make_app(load_config(config))
        proc = long_worker(config, broker, "ct-documented")
        out = await started(proc, "worker: ")
        assert ("worker: the broker's consumer_timeout is 90000 ms (>= 90000 ms needed): "
                "fine") in out, out
        wait_until_consuming(app, {node("ct-documented@%h"): proc})
        result = app.send_task(long_task.SPEC.celery_name)
        assert await asyncio.to_thread(result.get, timeout=90, propagate=False)
        assert result.state == "SUCCESS" and result.result["status"] == "ok"

        async def empty() -> bool:
            return queued(broker) == 0
        await until(empty, "the queue empty", proc)
        assert proc.proc.poll() is None, proc.output()  # the worker kept consuming
        assert CHANNEL_CLOSED not in proc.output()
        [start] = await starts(store, result.id)
        assert start["redelivered"] is False
    finally:
        if proc is not None:
            proc.kill()
        broker.stop()
