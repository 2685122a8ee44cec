"""Issue 25: two beats on one store send each tick once (a standby takes over when the
active one dies), and a crontab tick missed while the broker is down is sent once when
it is back. Real ``cheeto daemon beat`` processes, real RabbitMQ (the session's node on
this module's vhost; a private node for the outage), this module's database. No worker
runs: every send is one message in the queue ``cheeto``, counted on the broker."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from cheeto_like.config import load_config
from cheeto_like.daemon.app import make_app
from cheeto_like.daemon.beat import STATE_COLLECTION
from cheeto_like.store import Store
from tests.conftest import module_database
from tests.services.rabbitmq import RabbitMQ

from .celery_harness import DaemonProcess, mongo_block, write_config

ENTRY = "sympa-export-farm"
SENT = f"beat: sent {ENTRY} "


def declare_hub_queue(app: Celery) -> None:
    """The queue ``cheeto`` as a worker would declare it (beat's producer declares
    nothing, and a message to an exchange without a queue is dropped), with interval
    ticks' expired messages dead-lettered to ``cheeto-expired`` so that they still count."""
    from kombu import Exchange, Queue

    with app.connection_for_write() as conn:
        channel = conn.default_channel
        Queue("cheeto-expired", Exchange("cheeto-expired", "fanout"),
              channel=channel).declare()
        Queue("cheeto", Exchange("cheeto", "direct"), routing_key="cheeto",
              channel=channel).declare()


def dead_letter_expired(broker: RabbitMQ, vhost: str) -> None:
    """A policy (beat redeclares ``cheeto`` without arguments; a policy does not clash)."""
    broker.rabbitmqctl("set_policy", "-p", vhost, "--apply-to", "queues", "expired",
                       "^cheeto$", '{"dead-letter-exchange": "cheeto-expired"}')


def queued(broker: RabbitMQ, vhost: str = "/") -> int:
    """Messages sent to ``cheeto`` (waiting, or expired and dead-lettered)."""
    out = broker.rabbitmqctl("list_queues", "-p", vhost, "-q", "--no-table-headers",
                             "name", "messages").stdout
    counts = dict(line.split() for line in out.splitlines() if line.strip())
    return int(counts.get("cheeto", 0)) + int(counts.get("cheeto-expired", 0))


async def until(check: Callable[[], Any], within: float, what: str,
                *procs: DaemonProcess) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if value := check():
            return value
        for proc in procs:
            assert proc.proc.poll() is None, proc.output()
        await asyncio.sleep(0.2)
    logs = "\n".join(f"--- {' '.join(p.args)}\n{p.output()[-3000:]}" for p in procs)
    raise AssertionError(f"{what} not within {within}s\n{logs}")


def make_config(path: Path, mongo: dict[str, Any], broker: str, schedule: Any) -> Path:
    return write_config(path, mongo, {
        "broker_url": broker, "sites": ["farm"], "timezone": "UTC",
        "beat_schedule_filename": str(path.parent / "beat-schedule"),
        "beat_lease_seconds": 6,
        "tasks": {"sympa": {"output_dir": str(path.parent / "sympa"), "schedule": schedule}}})


def beat(config: Path, tag: str) -> DaemonProcess:
    base = config.parent
    return DaemonProcess(["beat", "--schedule-file", str(base / f"schedule-{tag}"),
                          "--pidfile", str(base / f"beat-{tag}.pid")], config,
                         base / f"beat-{tag}.log")


@pytest.fixture
async def fresh(store: Store) -> Store:
    await store.database[STATE_COLLECTION].delete_many({})
    await store.database["sync_leases"].delete_many({})
    return store


async def test_two_beats_send_each_tick_once_and_the_standby_takes_over(
        fresh: Store, rabbitmq: RabbitMQ, mongo_config, request, tmp_path: Path) -> None:
    vhost = f"{module_database(request)}_two"
    config = make_config(tmp_path / "config.yaml",
                         mongo_block(mongo_config, module_database(request)),
                         rabbitmq.vhost_url(vhost), 2)
    app = make_app(load_config(config))
    declare_hub_queue(app)
    dead_letter_expired(rabbitmq, vhost)
    first = beat(config, "a")
    second = None
    try:
        await until(lambda: "this beat sends the schedule" in first.output(), 60,
                    "the first beat leading", first)
        second = beat(config, "b")
        await until(lambda: "standing by" in second.output(), 60, "the second standing by",
                    first, second)
        await until(lambda: first.output().count(SENT) >= 3, 60, "three ticks", first, second)
        first.kill()  # SIGKILL: its lease is left to expire
        sent_by_first = first.output().count(SENT)
        assert SENT not in second.output(), second.output()  # the standby sent nothing
        assert queued(rabbitmq, vhost) == sent_by_first  # one message per tick, no more
        await until(lambda: second.output().count(SENT) >= 2, 60, "the standby's ticks",
                    second)
        assert second.interrupt() == 0
        sent_by_second = second.output().count(SENT)
        assert queued(rabbitmq, vhost) == sent_by_first + sent_by_second
        assert "took over the expired lease beat:default" in second.output()
        state = await fresh.database[STATE_COLLECTION].find_one({"_id": f"default:{ENTRY}"})
        assert state is not None and f"(lease beat:default, {state['by']})" in second.output()
        assert "Traceback" not in first.output() + second.output()
    finally:
        first.kill()
        if second is not None:
            second.kill()
        app.close()


async def test_a_stopped_beat_hands_over_at_once(fresh: Store, rabbitmq: RabbitMQ,
                                                 mongo_config, request,
                                                 tmp_path: Path) -> None:
    """Ctrl-C releases the lease: the standby leads without waiting for the expiry."""
    vhost = f"{module_database(request)}_handover"
    config = make_config(tmp_path / "config.yaml",
                         mongo_block(mongo_config, module_database(request)),
                         rabbitmq.vhost_url(vhost), 3600)
    first, second = beat(config, "a"), None
    try:
        await until(lambda: "this beat sends the schedule" in first.output(), 60,
                    "the first beat leading", first)
        second = beat(config, "b")
        await until(lambda: "standing by" in second.output(), 60, "standby", first, second)
        assert first.interrupt() == 0
        await until(lambda: "this beat sends the schedule" in second.output(), 30,
                    "the standby leading", second)
        assert "took over the expired lease" not in second.output()
    finally:
        first.kill()
        if second is not None:
            second.kill()


async def test_many_missed_slots_are_sent_once(fresh: Store, rabbitmq: RabbitMQ,
                                               mongo_config, request, tmp_path: Path) -> None:
    """A one-minute entry last sent five minutes ago (the beats were down): one send."""
    vhost = f"{module_database(request)}_missed"
    config = make_config(tmp_path / "config.yaml",
                         mongo_block(mongo_config, module_database(request)),
                         rabbitmq.vhost_url(vhost), "* * * * *")
    app = make_app(load_config(config))
    declare_hub_queue(app)
    five_ago = int((datetime.now(UTC) - timedelta(minutes=5)).timestamp() * 1000)
    await fresh.database[STATE_COLLECTION].insert_one(
        {"_id": f"default:{ENTRY}", "schedule": "default", "entry": ENTRY,
         "last_sent_ms": five_ago, "by": "gone", "task_id": None})
    proc = beat(config, "a")
    try:
        await until(lambda: SENT in proc.output(), 60, "the missed run sent", proc)
        state = await fresh.database[STATE_COLLECTION].find_one({"_id": f"default:{ENTRY}"})
        read_at = datetime.now(UTC)
        assert state["last_sent_ms"] > five_ago
        assert proc.interrupt() == 0
        assert proc.output().count(SENT) <= 2  # the missed one, maybe the next minute's
        assert queued(rabbitmq, vhost) == proc.output().count(SENT)
        # and the record it left makes the next slot, not the missed ones, due: when the
        # record was read, its next slot lay ahead (judged at the read, not now: a minute
        # boundary may pass while the beat stops)
        from celery.schedules import crontab

        last = datetime.fromtimestamp(state["last_sent_ms"] / 1000, tz=UTC)
        next_due = datetime.now(UTC) + crontab().remaining_estimate(last)
        assert next_due > read_at or proc.output().count(SENT) == 2
    finally:
        proc.kill()
        app.close()


async def test_a_crontab_minute_missed_while_the_broker_is_down_is_sent_once(
        fresh: Store, mongo_config, request, tmp_path: Path) -> None:
    broker = RabbitMQ(tmp_path).start()  # a private node: the session's stays up
    try:
        # the minute of a boundary at least 20 s away (time for the beat to start)
        boundary = (datetime.now(UTC) + timedelta(seconds=80)).replace(second=0,
                                                                       microsecond=0)
        config = make_config(tmp_path / "config.yaml",
                             mongo_block(mongo_config, module_database(request)), broker.url,
                             f"{boundary.minute} * * * *")
        app = make_app(load_config(config))
        declare_hub_queue(app)
        app.close()
        proc = beat(config, "a")
        try:
            await until(lambda: "this beat sends the schedule" in proc.output(), 60,
                        "the beat leading", proc)
            broker.rabbitmqctl("stop_app")
            assert datetime.now(UTC) < boundary  # the outage spans the crontab minute
            await until(lambda: "could not send" in proc.output(), 120,
                        "a failed send at the crontab minute", proc)
            assert SENT not in proc.output()
            broker.rabbitmqctl("start_app")
            await until(lambda: SENT in proc.output(), 90, "the missed run sent", proc)
            assert "after the broker came back" in proc.output()
            await asyncio.sleep(5)  # more ticks: nothing else is due
            assert proc.interrupt() == 0
            assert proc.output().count(SENT) == 1
            assert queued(broker) == 1
        finally:
            proc.kill()
    finally:
        broker.stop()
