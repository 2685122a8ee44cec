"""Issue 25: a second copy of a running task never ends ``daemon enqueue --wait`` with a
"skipped" SUCCESS while the real run goes on.

Real processes: a hub worker (two slots, so a copy is taken while the run goes on) runs
the test-only ``long_sleep`` (``long_task.py``: it records each start and sleeps);
``cheeto daemon enqueue long_sleep --wait`` processes wait for it. Two kinds of copy:

- a second enqueue of the same task: its run finds the lease held and ends "skipped",
  naming the run that holds it; ``--wait`` says "already running: run <id>" and reports
  that run's outcome;
- the same message delivered again (the broker took it back: its connection to the
  worker closed, as in a broker restart): the copy carries the running run's Celery id,
  so it stores nothing (``Ignore``: no "skipped" under that id) and is acked (the queue
  ends empty: no endless redelivery).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from cheeto_like.config import load_config
from cheeto_like.daemon.app import make_app
from tests.conftest import module_database
from tests.services.rabbitmq import RabbitMQ

from . import long_task
from .celery_harness import DaemonProcess, mongo_block, node, wait_until_consuming, write_config
from .long_task import queued, starts, until

WORKER = "rd-hub@%h"


async def test_a_copy_of_a_running_task_waits_for_the_real_run(
        store, rabbitmq: RabbitMQ, mongo_config, request, tmp_path: Path) -> None:
    vhost = module_database(request)
    config = write_config(tmp_path / "config.yaml",
                          mongo_block(mongo_config, module_database(request)),
                          {"broker_url": rabbitmq.vhost_url(vhost), "task_time_limit": 120,
                           "beat_schedule_filename": str(tmp_path / "beat"),
                           "tasks": {"reap": {}}})
    app = make_app(load_config(config))
    env = {**rabbitmq.env, "CHEETO_TEST_SLEEP_S": "20"}
    worker = DaemonProcess(["worker", "--name", WORKER, "--concurrency", "2"], config,
                           tmp_path / "worker.log", env=env, program=long_task.PROGRAM)
    procs = [worker]
    try:
        wait_until_consuming(app, {node(WORKER): worker})

        def enqueue(log: str) -> DaemonProcess:
            proc = DaemonProcess(["enqueue", "long_sleep", "--wait", "--timeout", "150"],
                                 config, tmp_path / log, env=env, program=long_task.PROGRAM)
            procs.append(proc)
            return proc

        first = enqueue("first.log")

        async def started() -> list[dict]:
            return await starts(store)
        [run] = await until(started, "the real run's start", worker, first)
        real = run["task_id"]
        assert f"(id {real})" in first.output()

        # a second enqueue while it runs: its own run skips, --wait follows the real one
        second = enqueue("second.log")

        async def following() -> bool:
            return f"long_sleep: already running: run {real}; waiting for it" in second.output()
        await until(following, "the second enqueue following the real run", worker, second)

        # the broker takes the real run's message back (its connection closes, as when the
        # broker restarts) and delivers it again while the run goes on
        rabbitmq.rabbitmqctl("close_all_connections", "-p", vhost, "issue 25 redelivery")

        async def dropped() -> bool:
            return (f"a redelivered copy of run {real}, which is still running; dropped"
                    in worker.output())
        await until(dropped, "the redelivered copy dropped", worker, within=90)
        assert f"cheeto.long_sleep[{real}] ignored" in worker.output()  # Ignore: acked

        codes = [await asyncio.to_thread(proc.proc.wait, 150) for proc in (first, second)]
        outputs = [first.output(), second.output()]
        assert codes == [0, 0], outputs
        for out in outputs:
            assert "long_sleep: ok in" in out, out
            assert "skipped" not in out, out
        # the copy never ran the body, and stored nothing over the real run's result
        assert [doc["task_id"] for doc in await starts(store)] == [real]
        meta = await store.database["celery_taskmeta"].find_one({"_id": real})
        assert meta["status"] == "SUCCESS" and '"status": "ok"' in meta["result"], meta

        async def acked() -> bool:
            return queued(rabbitmq, vhost) == 0
        await until(acked, "every message acked (the queue empty)", worker)
        assert worker.proc.poll() is None, worker.output()
    finally:
        for proc in procs:
            proc.kill()
