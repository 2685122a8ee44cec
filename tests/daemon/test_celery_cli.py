"""``cheeto daemon worker|beat|enqueue|status``: refusals before anything is sent, and a
broker that is down (clear lines and retries, never a traceback). No broker needed: the
broker URL points at a port where nothing listens."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from cheeto_like.store import Store
from tests.conftest import module_database
from tests.factories import make_site
from tests.services._proc import free_port

from .celery_harness import DaemonProcess, mongo_block, write_config

DEAD_BROKER_PORT = free_port()
DEAD_BROKER = f"amqp://guest:guest@127.0.0.1:{DEAD_BROKER_PORT}//"


@pytest.fixture(scope="module")
def mongo(mongo_config, request) -> dict[str, Any]:
    return mongo_block(mongo_config, module_database(request))


@pytest.fixture
def config(tmp_path: Path, mongo: dict[str, Any]):  # type: ignore[no-untyped-def]
    def write(tasks: dict[str, Any] | None = None, **daemon: Any) -> Path:
        block = {"broker_url": DEAD_BROKER, "sites": ["farm"],
                 "beat_schedule_filename": str(tmp_path / "beat-schedule"),
                 "tasks": tasks if tasks is not None else
                 {"sympa": {"output_dir": str(tmp_path)}}, **daemon}
        return write_config(tmp_path / "config.yaml", mongo, block)
    return write


@pytest.fixture
async def farm(db: Store) -> Store:
    await make_site(db, "farm")
    return db


def one_error(r: Any) -> str:
    """The one error message (rich wraps lines longer than 200 columns off a terminal)."""
    assert r.stderr.count("error:") == 1, r.stderr
    return r.stderr.replace("\n", "").strip()


async def test_enqueue_refuses_unknown_tasks_and_disabled_blocks(cli, config, farm):
    path = config()
    r = await cli("daemon", "enqueue", "make_coffee", config=path)
    assert r.code == 2 and "unknown task 'make_coffee' (known: slurm_sync" in one_error(r)
    r = await cli("daemon", "enqueue", "hippo_process", config=path)
    assert r.code == 2 and "no daemon.tasks.hippo block" in one_error(r)
    r = await cli("daemon", "enqueue", "puppet_sync", "--site", "farm", config=path)
    assert r.code == 2
    assert one_error(r) == ("error: task puppet_sync is disabled: the config (profile "
                            "'default') has no daemon.tasks.puppet_sync block")
    path = config({"sympa": {"output_dir": "/tmp", "enabled": False}, "ldap_sync": {}})
    r = await cli("daemon", "enqueue", "sympa_export", config=path)
    assert r.code == 2 and "daemon.tasks.sympa has enabled: false" in one_error(r)
    r = await cli("daemon", "enqueue", "ldap_sync", config=path)
    assert r.code == 2 and "it needs the ldap section" in one_error(r)
    assert r.stdout == ""


async def test_enqueue_refuses_an_unknown_site_and_a_missing_daemon_section(cli, config,
                                                                             farm, tmp_path):
    r = await cli("daemon", "enqueue", "sympa_export", "--site", "farm", "--site", "nowhere",
                  config=config())
    assert r.code == 2 and one_error(r) == "error: site 'nowhere' does not exist"
    bare = tmp_path / "bare.yaml"
    data = YAML(typ="safe").load(config())
    del data["daemon"]
    YAML(typ="safe").dump(data, bare)
    r = await cli("daemon", "enqueue", "sympa_export", config=bare)
    assert r.code == 2 and "no daemon section in the config for profile 'default'" in \
        one_error(r)


async def test_enqueue_with_the_broker_down_is_one_line_exit_1(cli, config, farm):
    r = await cli("daemon", "enqueue", "sympa_export", config=config())
    assert r.code == 1
    line = one_error(r)
    assert line.startswith(f"error: cannot reach the broker amqp://guest:********@127.0.0.1:"
                           f"{DEAD_BROKER_PORT}//: ")
    assert "Traceback" not in r.stderr


async def test_beat_refuses_a_bad_crontab_and_a_missing_directory(cli, config, tmp_path):
    r = await cli("daemon", "beat", config=config(
        {"sympa": {"output_dir": "/tmp", "schedule": "*/5 25 * * *"}}))
    assert r.code == 2
    assert one_error(r) == ("error: daemon.tasks.sympa.schedule: '*/5 25 * * *': bad hour "
                            "field '25' (Invalid end range: 25 > 23.)")
    r = await cli("daemon", "beat", "--schedule-file", str(tmp_path / "no" / "such" / "file"),
                  config=config())
    assert r.code == 2 and "beat schedule file directory" in one_error(r)
    r = await cli("daemon", "beat", config=config({"sympa": {"schedule": "* * *",
                                                            "output_dir": "/tmp"}}))
    assert r.code == 2 and "'* * *' is not a 5-field crontab" in one_error(r)


async def test_a_site_worker_needs_the_slurm_sync_block(cli, config):
    r = await cli("daemon", "worker", "--site", "farm", config=config())
    assert r.code == 2 and "task slurm_sync is disabled" in one_error(r)


async def test_status_lists_configured_pairs_that_never_ran(cli, config, farm):
    r = await cli("daemon", "status", "--json", config=config())
    assert r.code == 0, r.stderr
    assert r.json() == [{"task": "sympa_export", "site": "farm", "state": "never", "when": None,
                         "duration_s": None, "error": None, "by": None, "source": None}]


async def test_a_worker_with_the_broker_down_retries_with_one_line_each_time(config,
                                                                             tmp_path):
    worker = DaemonProcess(["worker"], config(), tmp_path / "worker.log")
    try:
        for _ in range(600):
            if "Trying again in 2.00 seconds... (1/None)" in worker.output():
                break
            assert worker.proc.poll() is None, worker.output()
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"no retry line after 30 s:\n{worker.output()}")
    finally:
        code = await asyncio.to_thread(worker.interrupt)
    output = worker.output()
    assert f"Cannot connect to amqp://guest:**@127.0.0.1:{DEAD_BROKER_PORT}//: [Errno 111] " \
           "Connection refused." in output
    assert "Traceback" not in output and code == 0, output
