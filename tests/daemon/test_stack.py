"""``cheeto daemon up``: the plan it makes (fast), the demo seed, and one end-to-end run
(slow: it boots a RabbitMQ node) that answers on the API and Flower URLs, restarts a
crashed service, and leaves no process behind after Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from ruamel.yaml import YAML

from cheeto_like.config import load_config
from cheeto_like.daemon import rabbitmq as rabbit
from cheeto_like.daemon.demo import DEMO_KEY, seed_demo
from cheeto_like.daemon.stack import RunDirLock, StackOptions, plan_stack, port_or_free
from cheeto_like.errors import InvalidInput
from cheeto_like.models import History, Site, Storage, User
from cheeto_like.queries.exports import root_key_blocks, root_keys_text
from tests.services._proc import alive, free_port, log_tails

CHEETO = str(Path(sys.executable).parent / "cheeto")


def write_yaml(path: Path, data: dict[str, Any]) -> Path:
    with path.open("w") as out:
        YAML(typ="safe").dump(data, out)
    return path


def stack_config(tmp: Path, store_port: int, **daemon: Any) -> Path:
    return write_yaml(tmp / "config.yaml", {
        "mongo": {"default": {"database": "stack", "embedded": {
            "path": str(tmp / "store"), "port": store_port}}},
        "daemon": {"default": {"sites": ["farm"], **daemon}},
    })


# -- the plan --------------------------------------------------------------------------------


def test_plan_with_a_private_rabbitmq(tmp_path):
    config = load_config(stack_config(tmp_path, free_port(), tasks={"slurm_sync": {}}))
    plan = plan_stack(config, StackOptions(run_dir=tmp_path / "run", broker="rabbitmq"))
    names = [s.name for s in plan.services]
    assert names == ["store", "epmd", "rabbitmq", "hub", "site-farm", "beat", "api", "flower"]
    derived = load_config(plan.config_path, "default")
    assert derived.daemon.broker_url == plan.info["broker_url"]
    assert derived.daemon.broker_url.startswith("amqp://guest:guest@127.0.0.1:")
    assert derived.daemon.beat_schedule_filename == tmp_path / "run" / "beat" / \
        "celerybeat-schedule"
    assert derived.api.api_key.get_secret_value() == plan.info["api_key"]
    assert (derived.api.host, derived.api.port) == ("127.0.0.1", int(
        plan.info["api_url"].rsplit(":", 1)[1].strip("/")))
    assert derived.mongo == config.mongo
    assert oct(plan.config_path.stat().st_mode & 0o777) == "0o600"
    flower = next(s for s in plan.services if s.name == "flower")
    assert flower.env["FLOWER_BASIC_AUTH"].startswith("admin:")
    assert "--broker-api-port" in flower.argv
    assert not any("admin:" in arg for s in plan.services for arg in s.argv)  # not in ps
    rabbitmq_conf = (tmp_path / "run" / "rabbitmq" / "rabbitmq.conf").read_text()
    assert "127.0.0.1:" in rabbitmq_conf and "management.tcp.ip = 127.0.0.1" in rabbitmq_conf


def test_plan_falls_back_to_the_filesystem_broker(tmp_path):
    config = load_config(stack_config(tmp_path, free_port()))
    plan = plan_stack(config, StackOptions(run_dir=tmp_path / "run", broker="filesystem",
                                           flower_auth="ops:pw"))
    assert [s.name for s in plan.services] == ["store", "hub", "beat", "api", "flower"]
    daemon = load_config(plan.config_path, "default").daemon
    queue = str(tmp_path / "run" / "broker" / "queue")
    assert daemon.broker_url == "filesystem://"
    assert daemon.broker_transport_options == {
        "data_folder_in": queue, "data_folder_out": queue,
        "control_folder": str(tmp_path / "run" / "broker" / "control")}
    assert any("Flower's worker view" in note for note in plan.notes)
    assert any("no site workers" in note for note in plan.notes)
    assert plan.info["flower_user"] == "ops" and "flower_auth_generated" not in plan.info


def test_plan_uses_a_configured_broker_and_a_running_store(tmp_path, mongo_config):
    mongo: dict[str, Any] = {"uri": mongo_config.uri} if mongo_config.uri else {
        "embedded": {"path": str(mongo_config.embedded.path),
                     "port": mongo_config.embedded.port}}
    config = load_config(write_yaml(tmp_path / "c.yaml", {
        "mongo": {"default": mongo},
        "daemon": {"other": {"broker_url": "amqps://u:p@mq.example.org//",
                             "broker_use_ssl": {}}},
        "api": {"default": {"api_key": "configured-key-0123456789abcdefghijk"}},
    }), "other")
    plan = plan_stack(config, StackOptions(run_dir=tmp_path / "run"))
    assert [s.name for s in plan.services] == ["hub", "beat", "api", "flower"]
    if not mongo_config.uri:
        assert any("already running" in note for note in plan.notes)
    derived = load_config(plan.config_path, "default")
    assert derived.daemon.broker_url == "amqps://u:p@mq.example.org//"
    assert derived.daemon.broker_use_ssl is not None
    assert plan.info["api_key"] == "configured-key-0123456789abcdefghijk"
    assert "api_key_generated" not in plan.info


def test_plan_refuses_unavailable_choices(tmp_path, monkeypatch):
    config = load_config(stack_config(tmp_path, free_port()))
    with pytest.raises(InvalidInput, match=r"no daemon\.broker_url"):
        plan_stack(config, StackOptions(run_dir=tmp_path / "run", broker="config"))
    monkeypatch.setattr(rabbit, "RABBITMQ_BIN", tmp_path / "nowhere")
    with pytest.raises(InvalidInput, match="not installed"):
        plan_stack(config, StackOptions(run_dir=tmp_path / "run", broker="rabbitmq"))
    plan = plan_stack(config, StackOptions(run_dir=tmp_path / "run"))  # auto falls back
    assert plan.info["broker_url"] == "filesystem://"


def test_port_or_free(tmp_path):
    port = free_port()
    assert port_or_free(port) == port
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        assert port_or_free(busy) != busy


def test_one_stack_per_run_dir(tmp_path):
    with RunDirLock(tmp_path), pytest.raises(InvalidInput, match="another"):
        RunDirLock(tmp_path).__enter__()


# -- the demo --------------------------------------------------------------------------------


async def test_demo_seed_is_idempotent(empty_db):
    ran = await seed_demo(empty_db, "tester")
    assert "site farm" in ran and "bob's home" in ran
    site = await Site.find_one({"name": "farm"})
    assert site.aliases == ["caesfarm"] and site.fqdn == "farm.hpc.example.org"
    assert {u.name for u in await User.find_all().to_list()} >= {"alice", "bob", "carol",
                                                                 "dana", "hpc-svc"}
    assert "partition main" in ran and "dana admin" in ran
    assert await Storage.find({"site": "farm"}).count() == 2
    assert DEMO_KEY.split()[1] in root_keys_text(await root_key_blocks("farm"))
    history = await History.find_all().count()
    assert await seed_demo(empty_db, "tester") == []
    assert await History.find_all().count() == history  # a second run writes nothing


async def test_demo_seed_cli_refuses_a_real_mongodb(cli, tmp_path):
    config = write_yaml(tmp_path / "real.yaml", {"mongo": {"default": {
        "uri": "mongodb://127.0.0.1:9/?directConnection=true", "timeout_seconds": 0.3}}})
    r = await cli("daemon", "demo-seed", config=config)
    assert (r.code, r.error_lines) == (2, ["error: refusing to seed demo data into a real "
                                           "MongoDB (mongo.uri is set); pass --force if you "
                                           "mean it"])


async def test_demo_seed_cli(cli, empty_db):
    r = await cli("daemon", "demo-seed")
    assert r.code == 0 and "seeded the demo site farm" in r.stderr
    r = await cli("daemon", "demo-seed")
    assert r.code == 0 and "already seeded" in r.stderr


# -- the whole stack --------------------------------------------------------------------------


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _wait(predicate: Any, timeout: float, what: str, logs: list[Path]) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}\n{log_tails(logs, 30)}")


def _get(url: str, **kwargs: Any) -> httpx.Response | None:
    try:
        return httpx.get(url, timeout=10, **kwargs)
    except httpx.HTTPError:
        return None


def test_daemon_up_serves_restarts_and_stops_cleanly(tmp_path):
    assert rabbit.available(), "this machine needs rabbitmq-server (scripts/install-system-deps)"
    run = tmp_path / "run"
    (tmp_path / "sympa").mkdir()
    config = stack_config(tmp_path, free_port(), tasks={
        "slurm_sync": {"apply": False},
        "sympa": {"schedule": 3600, "output_dir": str(tmp_path / "sympa")}})
    out = tmp_path / "up.out"
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [CHEETO, "daemon", "up", "--config", str(config), "--run-dir", str(run),
             "--seed-demo", "--api-port", str(free_port()), "--flower-port", str(free_port())],
            stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
            start_new_session=True)
    logs = [out]
    seen: set[int] = set()
    try:
        state = _wait(lambda: (run / "stack.json").exists()
                      and json.loads((run / "stack.json").read_text()), 150, "stack.json", logs)
        assert proc.poll() is None
        assert set(state["services"]) == {"store", "epmd", "rabbitmq", "hub", "site-farm",
                                          "beat", "api", "flower"}
        assert oct((run / "stack.json").stat().st_mode & 0o777) == "0o600"
        text = out.read_text()
        assert "the stack is up" in text and state["api_url"] in text
        assert state["flower_url"] in text and state["flower_password"] in text

        # the API, with the generated key, on the seeded demo site
        api, key = state["api_url"], {"X-API-Key": state["api_key"]}
        assert _get(f"{api}puppet/root-keys/caesfarm").status_code == 401
        r = _get(f"{api}puppet/root-keys/caesfarm", headers=key)
        assert r.status_code == 200 and DEMO_KEY.split()[1] in r.text
        assert _get(f"{api}puppet/storage/farm", headers=key).json()["zfs"]["user"]["nas-1"]

        # Flower sees the hub and the site worker, behind basic auth
        flower = state["flower_url"]
        auth = (state["flower_user"], state["flower_password"])
        assert _get(f"{flower}api/workers").status_code == 401

        def both_workers() -> bool:
            r = _get(f"{flower}api/workers", params={"refresh": "1"}, auth=auth)
            names = list(r.json()) if r is not None and r.status_code == 200 else []
            return (any(n.startswith("cheeto-hub@") for n in names)
                    and any(n.startswith("slurm-farm@") for n in names))

        _wait(both_workers, 60, "both workers in Flower", logs)
        r = _get(f"{flower}api/queues/length", auth=auth)
        assert {q["name"] for q in r.json()["active_queues"]} >= {"cheeto", "slurm.farm"}

        # a crashed service comes back
        seen |= _descendants(proc.pid)
        os.kill(state["services"]["api"], signal.SIGKILL)
        _wait(lambda: "api exited with code -9" in out.read_text(), 20, "the restart note",
              logs)
        _wait(lambda: (r := _get(f"{api}healthz")) is not None and r.status_code == 200, 60,
              "the restarted API", logs)
        seen |= _descendants(proc.pid)
        assert len(seen) >= 10  # services plus their helpers (pool children, beam, ...)
    finally:
        seen |= _descendants(proc.pid)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
        try:
            code = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:  # pragma: no cover - leave nothing behind
            for pid in seen | {proc.pid}:
                with __import__("contextlib").suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
            raise
        _wait(lambda: not [p for p in seen if alive(p)], 15, "every process to exit", logs)
    assert code == 0, log_tails(logs, 40)
    tail = out.read_text()
    assert "stopping (Ctrl-C again to kill at once)" in tail and "stack     | stopped" in tail
    assert "Traceback" not in tail
    assert not (run / "stack.json").exists()
    for name in ("hub", "api", "flower", "rabbitmq", "store", "stack"):
        assert (run / "logs" / f"{name}.log").stat().st_size > 0
