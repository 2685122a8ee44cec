"""``cheeto daemon worker --concurrency N``: the real worker's pool runs N processes (as
Celery's own stats report it), and a bad N is one line, exit 2."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cheeto_like.daemon.app import make_app, worker_argv
from tests.conftest import module_database
from tests.services.rabbitmq import RabbitMQ

from .celery_harness import DaemonProcess, mongo_block, node, wait_until_consuming, write_config

NAME = "conc-hub@%h"


@pytest.fixture(scope="module")
def config(rabbitmq: RabbitMQ, mongo_config, request,
           tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("concurrency")
    return write_config(base / "config.yaml", mongo_block(mongo_config, module_database(request)),
                        {"broker_url": rabbitmq.vhost_url(module_database(request)), "sites": [],
                         "beat_schedule_filename": str(base / "beat-schedule")})


@pytest.fixture
def worker(config: Path, store) -> Iterator[DaemonProcess]:
    proc = DaemonProcess(["worker", "--concurrency", "3", "--name", NAME], config,
                         config.parent / "worker.log")
    try:
        yield proc
    finally:
        proc.kill()


def test_worker_argv_passes_the_concurrency():
    argv = worker_argv(queue="cheeto", name="x@h", loglevel="INFO", concurrency=4)
    assert argv[argv.index("--concurrency") + 1] == "4"
    assert "1" == worker_argv(queue="cheeto", name="x", loglevel="INFO")[
        worker_argv(queue="cheeto", name="x", loglevel="INFO").index("--concurrency") + 1]


def test_the_running_worker_has_that_many_pool_processes(config: Path, worker: DaemonProcess):
    from cheeto_like.config import load_config

    app = make_app(load_config(config))
    name = node(NAME)
    wait_until_consuming(app, {name: worker})
    stats = app.control.inspect(destination=[name], timeout=5).stats()
    assert stats[name]["pool"]["max-concurrency"] == 3
    assert len(stats[name]["pool"]["processes"]) == 3
    assert worker.interrupt() == 0


@pytest.mark.parametrize("value", ["0", "65", "many"])
async def test_a_bad_concurrency_is_one_line(cli, value):
    result = await cli("daemon", "worker", "--concurrency", value)
    assert result.code == 2
    assert "concurrency" in result.stderr and "Traceback" not in result.stderr
