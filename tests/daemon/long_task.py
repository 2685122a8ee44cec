"""A test-only long task, and the ``cheeto`` CLI with it registered.

``DaemonProcess(["worker", …], config, log, program=PROGRAM)`` (or ``["enqueue",
"long_sleep", …]``) runs the real CLI after adding one task to the daemon's table:
``long_sleep``, a singleton on the hub queue that uses the ``reap`` block (so
``reap: {}`` enables it). It runs through ``run_task`` (config re-read, task lease,
redelivery handling, summary) like every task, counts each start in the store
(collection ``long_task_starts``: one document per start, naming its Celery id and
whether the broker marked the message redelivered) and then sleeps
``$CHEETO_TEST_SLEEP_S`` seconds (default 20) with its lease renewed. The
consumer-timeout and redelivery tests need a task that outlives a broker timeout, which
no real task does on demand.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from celery import Task

from cheeto_like.config import Config
from cheeto_like.daemon import config as daemon_table
from cheeto_like.daemon import tasks
from cheeto_like.models.fields import utcnow
from cheeto_like.store import Store
from tests.services.rabbitmq import RabbitMQ

from .celery_harness import DaemonProcess

NAME = "long_sleep"
STARTS = "long_task_starts"
SPEC = daemon_table.TaskSpec(NAME, "reap", "long-sleep", per_site=False)


def _body(request: Any) -> tasks.Body:
    async def body(store: Store, config: Config, block: Any, site: str,
                   author: str) -> dict[str, Any]:
        await store.database[STARTS].insert_one({
            "task_id": request.id, "pid": os.getpid(), "at": utcnow(),
            "redelivered": bool((request.delivery_info or {}).get("redelivered"))})
        seconds = float(os.environ.get("CHEETO_TEST_SLEEP_S", "20"))
        await asyncio.sleep(seconds)
        return {"slept_s": seconds}
    return body


def long_sleep(self: Task) -> dict[str, Any]:
    """Count a start in the store, then sleep (a stand-in for a long sync)."""
    return tasks.run_task(self, NAME, None, _body(self.request))


def register() -> None:
    """Add the task to the daemon's tables (in place: every importer sees it)."""
    daemon_table.TASKS[NAME] = SPEC
    daemon_table.BY_CELERY_NAME[SPEC.celery_name] = SPEC
    tasks.FUNCTIONS[NAME] = long_sleep


REPO = Path(__file__).resolve().parents[2]
# ``program`` for ``DaemonProcess``: ``cheeto`` with the task registered (``-c`` rather
# than ``-m``, so it runs from any working directory)
PROGRAM = (sys.executable, "-c",
           f"import sys; sys.path.insert(0, {str(REPO)!r}); "
           "from tests.daemon.long_task import cli; sys.exit(cli(sys.argv[1:]))")


def cli(args: list[str]) -> int:
    """``cheeto ARGS…`` with the task registered."""
    register()
    from cheeto_like.cli import main

    return main(args)


# -- what the tests look at ---------------------------------------------------------------


async def starts(store: Store, task_id: str | None = None) -> list[dict[str, Any]]:
    """The recorded starts (of one Celery id, or all)."""
    query = {} if task_id is None else {"task_id": task_id}
    return [doc async for doc in store.database[STARTS].find(query)]


def queued(broker: RabbitMQ, vhost: str = "/") -> int:
    """Messages in the hub queue ``cheeto``, ready or delivered and not yet acked."""
    out = broker.rabbitmqctl("list_queues", "-p", vhost, "-q", "--no-table-headers", "name",
                             "messages").stdout
    counts = dict(line.split() for line in out.splitlines() if line.strip())
    return int(counts.get("cheeto", 0))


async def until(check: Callable[[], Awaitable[Any]], what: str, *procs: DaemonProcess,
                within: float = 60.0) -> Any:
    """``check()``'s first true answer; fails when a process in ``procs`` exits first
    or ``within`` seconds pass (a hang shows the processes' logs, never a timing claim)."""
    deadline = time.monotonic() + within
    while not (value := await check()):
        for proc in procs:
            assert proc.proc.poll() is None, f"{' '.join(proc.args)} exited\n{proc.output()}"
        assert time.monotonic() < deadline, (
            f"{what} not within {within}s\n" + "\n".join(p.output()[-4000:] for p in procs))
        await asyncio.sleep(0.3)
    return value
