"""``cheeto daemon worker|beat|enqueue|status``: refusals before anything is sent, and a
broker that is down (clear lines and retries, never a traceback). No broker needed: the
broker URL points at a port where nothing listens."""

from __future__ import annotations

import asyncio
import os
import subprocess
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


async def test_enqueue_checks_the_config_before_connecting_to_the_store(cli, tmp_path):
    """A config without a daemon section (or a bad task) is refused at once, exit 2, even
    when the store it names is down (it is never contacted)."""
    dead = tmp_path / "dead.yaml"
    dead.write_text(f"mongo:\n  default:\n    uri: mongodb://127.0.0.1:{free_port()}/"
                    "?directConnection=true\n    timeout_seconds: 30\n")
    r = await cli("daemon", "enqueue", "sympa_export", config=dead)
    assert r.code == 2 and "no daemon section in the config" in one_error(r)
    with dead.open("a") as out:
        out.write(f"daemon:\n  default:\n    broker_url: {DEAD_BROKER}\n    tasks: {{}}\n")
    r = await cli("daemon", "enqueue", "sympa_export", config=dead)
    assert r.code == 2 and "task sympa_export is disabled" in one_error(r)


def filesystem_daemon(tmp: Path) -> tuple[dict[str, Any], Path]:
    """A daemon block on kombu's filesystem transport (a real broker made of files)."""
    queue = tmp / "queue"
    queue.mkdir(parents=True)
    return {"broker_url": "filesystem://", "sites": ["farm"],
            "broker_transport_options": {"data_folder_in": str(queue),
                                         "data_folder_out": str(queue),
                                         "control_folder": str(tmp / "control")},
            "beat_schedule_filename": str(tmp / "beat-schedule"),
            "tasks": {"sympa": {"output_dir": str(tmp)}}}, queue


async def test_enqueue_finds_the_running_stack_of_its_config(cli, mongo, farm, tmp_path):
    """`daemon enqueue --config <the file daemon up was given>` publishes to the stack's
    broker (the derived config's), not to that file's default broker."""
    from cheeto_like.config import load_config
    from cheeto_like.daemon import stack_pointer

    source = write_config(tmp_path / "demo.yaml", mongo,
                          {"sites": ["farm"], "tasks": {"sympa": {"output_dir": "/tmp"}}})
    block, queue = filesystem_daemon(tmp_path / "run")
    derived = write_config(tmp_path / "run" / "config.yaml", mongo, block)
    pointer = stack_pointer.register(source, "default", derived, os.getpid())
    try:
        assert stack_pointer.running_stack_config(load_config(source)) == derived
        r = await cli("daemon", "enqueue", "sympa_export", "--json", config=source)
        assert r.code == 0, r.stderr
        assert f"using its config {derived}" in r.stderr.replace("\n", "")
        [sent] = r.json()
        assert sent["queue"] == "cheeto"
        messages = [m.read_text() for m in queue.iterdir()]
        assert len(messages) == 1 and sent["id"] in messages[0]
    finally:
        stack_pointer.unregister(source, "default", os.getpid())
    assert not pointer.exists()
    # another profile, or no stack: the file's own config
    assert stack_pointer.running_stack_config(load_config(source)) is None


def test_a_stale_pointer_is_ignored_and_removed(mongo, tmp_path):
    from cheeto_like.config import load_config
    from cheeto_like.daemon import stack_pointer

    source = write_config(tmp_path / "demo.yaml", mongo, {"sites": ["farm"]})
    derived = write_config(tmp_path / "derived.yaml", mongo, {"sites": ["farm"]})
    gone = subprocess.Popen(["true"])
    gone.wait()
    pointer = stack_pointer.register(source, "default", derived, gone.pid)
    assert oct(pointer.stat().st_mode & 0o777) == "0o600"
    assert stack_pointer.running_stack_config(load_config(source)) is None
    assert not pointer.exists()


async def test_enqueue_wait_gives_up_with_a_message(cli, mongo, farm, tmp_path):
    """Nobody consumes the queue: --wait ends after --timeout (default 300 s, not an
    hour) with a line saying what to check, exit 1."""
    block, _ = filesystem_daemon(tmp_path)
    path = write_config(tmp_path / "config.yaml", mongo, block)
    r = await cli("daemon", "enqueue", "sympa_export", "--wait", "--timeout", "0.5",
                  config=path)
    assert r.code == 1
    text = r.stderr.replace("\n", "")
    assert ("sympa_export farm: TIMEOUT: no result within 0.5s: still queued (does a worker "
            "consume queue cheeto on filesystem://?) or still running; see `cheeto daemon "
            "status`, or wait longer with --timeout") in text, r.stderr
    assert "1 of 1 run(s) did not succeed" in text
    from cheeto_like.cli.daemon import WAIT_TIMEOUT_S
    assert WAIT_TIMEOUT_S == 300


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
