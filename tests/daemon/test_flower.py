"""``cheeto daemon flower``: the derived broker management API URL, the bind rules, and
Flower as a subprocess behind basic auth, watching a real worker on the real RabbitMQ
(the session ``rabbitmq`` fixture), plus the broker tab reading a management-enabled
node through the derived URL."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from flower.utils.broker import validate_broker_api
from kombu import Connection
from ruamel.yaml import YAML

from cheeto_like.config import Config, DaemonConfig, MongoConfig
from cheeto_like.daemon.flower import (
    broker_api_url,
    check_basic_auth,
    check_flower_bind,
    check_no_secret_args,
    flower_broker_url,
    flower_command,
    flower_credentials,
    flower_overrides,
)
from cheeto_like.errors import InvalidInput
from tests.conftest import module_database
from tests.services._proc import free_port, kill_procs, log_tails, spawn, wait_for
from tests.services.rabbitmq import RabbitMQ

CHEETO = str(Path(sys.executable).parent / "cheeto")
AUTH = ("admin", "s3cret:with-colon")


# -- the management API URL ---------------------------------------------------------------


@pytest.mark.parametrize(("broker", "kwargs", "api"), [
    ("amqp://guest:guest@127.0.0.1:5672//", {}, "http://guest:guest@127.0.0.1:15672/api/"),
    ("amqps://cheeto:s%40cr%3At@broker.example.org//", {},
     "https://cheeto:s%40cr%3At@broker.example.org:15671/api/"),
    ("amqps://u:p@mq.example.org:5671/cheeto", {"port": 443},
     "https://u:p@mq.example.org:443/api/"),
    ("amqp://mq.example.org//", {}, "http://mq.example.org:15672/api/"),
    ("amqp://u:p@[::1]:5672//", {}, "http://u:p@[::1]:15672/api/"),
    ("amqp://u:p@mq:5672//", {"tls": True}, "https://u:p@mq:15671/api/"),
    ("amqp://u:p@mq:5672//?ssl=true", {}, "https://u:p@mq:15671/api/"),
    ("amqp://u:p@MQ.Example.org:5672//", {"port": 8080}, "http://u:p@mq.example.org:8080/api/"),
    ("amqp://a:1@one//;amqp://a:1@two//", {}, "http://a:1@one:15672/api/"),
    ("amqp://u:pa:ss@mq:5672//", {}, "http://u:pa:ss@mq:15672/api/"),
    ("pyamqp://u:p@mq//", {}, "http://u:p@mq:15672/api/"),
    ("amqp://", {}, "http://localhost:15672/api/"),
])
def test_broker_api_url(broker, kwargs, api):
    assert broker_api_url(broker, **kwargs) == api
    validate_broker_api(api)  # what Flower itself requires


@pytest.mark.parametrize("broker", ["filesystem://", "redis://localhost:6379/0", "memory://"])
def test_no_management_api_for_other_transports(broker):
    assert broker_api_url(broker) is None


@pytest.mark.parametrize(("broker", "flower", "tls"), [
    ("amqps://u:p@mq.example.org//", "amqp://u:p@mq.example.org:5671//", True),
    ("amqps://u:p@mq.example.org:5999/v", "amqp://u:p@mq.example.org:5999/v", True),
    ("amqp://u:p@mq:5672//", "amqp://u:p@mq:5672//", False),
    ("filesystem://", "filesystem://", False),
])
def test_flower_broker_url(broker, flower, tls):
    assert flower_broker_url(broker) == (flower, tls)


def test_flower_overrides_keep_tls():
    plain = Config(daemon=DaemonConfig(broker_url="amqp://u:p@mq:5672//"))
    assert flower_overrides(plain) == {}
    bare = Config(daemon=DaemonConfig(broker_url="amqps://u:p@mq//"))
    assert flower_overrides(bare) == {"broker_url": "amqp://u:p@mq:5671//",
                                      "broker_use_ssl": True}
    verified = Config(daemon=DaemonConfig(broker_url="amqps://u:p@mq//",
                                          broker_use_ssl={"ca_file": "/etc/ca.pem"}))
    assert flower_overrides(verified)["broker_use_ssl"] == {"cert_reqs": 2,
                                                            "ca_certs": "/etc/ca.pem"}


def test_flower_command_keeps_secrets_out_of_argv():
    config = Config(daemon=DaemonConfig(broker_url="amqps://cheeto:pw@mq.example.org//",
                                        broker_use_ssl={}))
    argv, env = flower_command(config, address="127.0.0.1", port=5555,
                               basic_auth="admin:x,ops:y", url_prefix="/flower/",
                               extra=["--max_tasks=10"])
    assert argv == ["flower", "--address=127.0.0.1", "--port=5555", "--url-prefix=flower",
                    "--max_tasks=10"]
    assert env == {"FLOWER_BROKER_API": "https://cheeto:pw@mq.example.org:15671/api/",
                   "FLOWER_BASIC_AUTH": "admin:x,ops:y"}
    _, env = flower_command(config, address="::1", port=1, broker_api="http://h:1/api/")
    assert env == {"FLOWER_BROKER_API": "http://h:1/api/"}


@pytest.mark.parametrize("bad", ["admin", "admin:", ":pw", "a:b,", "a:b,c"])
def test_bad_basic_auth(bad):
    with pytest.raises(InvalidInput, match="user:password pairs"):
        check_basic_auth(bad)


def test_flower_bind_rules():
    check_flower_bind("127.0.0.1", None, insecure=False)
    check_flower_bind("0.0.0.0", "a:b", insecure=False)
    check_flower_bind("0.0.0.0", None, insecure=True)
    with pytest.raises(InvalidInput, match="without basic auth"):
        check_flower_bind("0.0.0.0", None, insecure=False)


def test_credentials_come_from_the_environment_or_the_config():
    configured = Config(daemon=DaemonConfig(flower_basic_auth="cfg:pw"))  # type: ignore[arg-type]
    assert flower_credentials(configured, {}) == "cfg:pw"
    assert flower_credentials(configured, {"FLOWER_BASIC_AUTH": "env:pw"}) == "env:pw"
    assert flower_credentials(Config(daemon=DaemonConfig()), {}) is None
    with pytest.raises(InvalidInput, match=r"^\$FLOWER_BASIC_AUTH takes user:password"):
        flower_credentials(configured, {"FLOWER_BASIC_AUTH": "nopassword"})
    bad = Config(daemon=DaemonConfig(flower_basic_auth="x"))  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match=r"^daemon\.flower_basic_auth takes user:password"):
        flower_credentials(bad, {})
    assert "cfg:pw" not in str(configured.daemon)  # a SecretStr: never in a repr or log


@pytest.mark.parametrize(("extra", "broker_api"), [
    (["--basic_auth=a:b"], None), (["--basic-auth", "a:b"], None), (["--auth=.*"], None),
    (["--broker_api=http://u:p@h/api/"], None), ([], "http://guest:guest@h:15672/api/")])
def test_no_secret_on_the_command_line(extra, broker_api):
    with pytest.raises(InvalidInput, match="process list"):
        check_no_secret_args(extra, broker_api)
    check_no_secret_args(["--max_tasks=10"], "http://h:15672/api/")


# -- the command ---------------------------------------------------------------------------


def write_config(path: Path, mongo: MongoConfig, database: str, broker_url: str) -> Path:
    block: dict[str, Any] = {"database": database}
    if mongo.uri:
        block["uri"] = mongo.uri
    else:
        block["embedded"] = {"path": str(mongo.embedded.path), "port": mongo.embedded.port}
    data = {"mongo": {"default": block},
            "daemon": {"default": {"broker_url": broker_url,
                                   "beat_schedule_filename": str(path.parent / "beat")}}}
    with path.open("w") as out:
        YAML(typ="safe").dump(data, out)
    return path


def run_cheeto(*args: str, env: dict[str, str] | None = None
               ) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "FLOWER_BASIC_AUTH"}
    return subprocess.run([CHEETO, *args], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, check=False, env=environ | (env or {}))


def test_flower_refuses_bad_input(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("daemon:\n  default:\n    broker_url: amqp://u:p@127.0.0.1:9//\n")
    r = run_cheeto("daemon", "flower", "--config", str(config), env={"FLOWER_BASIC_AUTH": "admin"})
    assert (r.returncode, r.stderr.splitlines()[0]) == (2, "error: $FLOWER_BASIC_AUTH takes "
                                                           "user:password pairs separated by "
                                                           "commas (a password cannot contain "
                                                           "a comma)")
    # the reference documents --basic-auth: taken (checked, with a warning about argv)
    r = run_cheeto("daemon", "flower", "--config", str(config), "--basic-auth", "admin")
    assert r.returncode == 2 and "--basic-auth takes user:password pairs" in r.stderr
    # accepted on a public address (no "without basic auth"); the broker URL with a
    # password is what stops this run, after the warning
    r = run_cheeto("daemon", "flower", "--config", str(config), "--basic-auth", "admin:pw",
                   "--address", "0.0.0.0", "--broker-api", "http://u:secret@127.0.0.1:9/api/")
    assert r.returncode == 2, r.stderr
    assert "unrecognized arguments" not in r.stderr and "without basic auth" not in r.stderr
    assert "--basic-auth puts the password in the process list" in r.stderr
    r = run_cheeto("daemon", "flower", "--config", str(config), "--", "--basic_auth=a:pw")
    assert r.returncode == 2 and "process list" in r.stderr
    r = run_cheeto("daemon", "flower", "--config", str(config), "--address", "0.0.0.0")
    assert r.returncode == 2 and "without basic auth" in r.stderr
    bare = tmp_path / "bare.yaml"
    bare.write_text("mongo: {}\n")
    r = run_cheeto("daemon", "flower", "--config", str(bare))
    assert r.returncode == 2 and "no daemon section" in r.stderr
    assert "Traceback" not in r.stderr


class Proc:
    def __init__(self, argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        self.proc = spawn(argv, log=log, env=os.environ | env if env else None)

    def check(self, what: str) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(f"{what} exited {self.proc.returncode}\n"
                                 f"{log_tails([self.log])}")


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    yield started
    kill_procs([p.proc for p in started])


def start_flower(procs: list[Proc], config: Path, tmp: Path, *args: str) -> str:
    port = free_port()
    flower = Proc([CHEETO, "daemon", "flower", "--config", str(config), "--port", str(port),
                   *args], tmp / "flower.log", env={"FLOWER_BASIC_AUTH": ":".join(AUTH)})
    procs.append(flower)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        flower.check("flower")
        try:
            return httpx.get(f"{url}/healthcheck", timeout=1).text == "OK"
        except httpx.HTTPError:
            return False

    wait_for(up, 60, "Flower's /healthcheck", logs=[flower.log], interval=0.2)
    cmdline = Path(f"/proc/{flower.proc.pid}/cmdline").read_bytes()
    assert AUTH[1].encode() not in cmdline  # the password is not in `ps`
    return url


def test_flower_shows_the_worker_behind_basic_auth(rabbitmq, mongo_config, request,
                                                   tmp_path, procs):
    config = write_config(tmp_path / "config.yaml", mongo_config, module_database(request),
                          rabbitmq.vhost_url(module_database(request)))
    worker = Proc([CHEETO, "daemon", "worker", "--config", str(config), "--name",
                   "flower-test-hub@%h"], tmp_path / "worker.log")
    procs.append(worker)
    url = start_flower(procs, config, tmp_path)

    assert httpx.get(f"{url}/api/workers").status_code == 401
    assert httpx.get(f"{url}/api/workers", auth=("admin", "wrong")).status_code == 401
    assert httpx.get(f"{url}/", auth=("nobody", AUTH[1])).status_code == 401

    workers: dict[str, Any] = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        worker.check("worker")
        r = httpx.get(f"{url}/api/workers", params={"refresh": "1"}, auth=AUTH, timeout=15)
        assert r.status_code == 200
        workers = r.json()
        # Flower lists a worker as soon as one inspect reply is in; its queues and conf
        # come with the others (a slow reply under load once left them out)
        if any(name.startswith("flower-test-hub@") and {"active_queues", "conf"} <= set(w)
               for name, w in workers.items()):
            break
        time.sleep(0.5)
    name = next((n for n in workers if n.startswith("flower-test-hub@")), None)
    assert name, f"worker never showed up in Flower: {list(workers)}\n" \
                 f"{log_tails([worker.log, procs[-1].log])}"
    queues = [q["name"] for q in workers[name]["active_queues"]]
    assert queues == ["cheeto"]
    # Flower inherits the result backend: the worker's conf it reports names our database
    assert workers[name]["conf"]["result_backend"].startswith("mongodb://")


@pytest.fixture(scope="module")
def managed_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitMQ]:
    """A RabbitMQ node with the management plugin (the session fixture has none)."""
    broker = RabbitMQ(tmp_path_factory.mktemp("rabbitmq-mgmt"), management=True).start()
    try:
        yield broker
    finally:
        broker.stop()


def test_broker_tab_reads_the_derived_management_url(managed_broker, mongo_config, request,
                                                     tmp_path, procs):
    config = write_config(tmp_path / "config.yaml", mongo_config, module_database(request),
                          managed_broker.url)
    with Connection(managed_broker.url) as conn:  # one waiting message on the hub queue
        queue = conn.SimpleQueue("cheeto")
        queue.put({"hello": "flower"})
        queue.close()
    url = start_flower(procs, config, tmp_path, "--broker-api-port",
                       str(managed_broker.mgmt_port))
    lengths: dict[str, Any] = {}
    deadline = time.monotonic() + 30  # the management API refreshes its figures every 5 s
    while time.monotonic() < deadline and lengths != {"cheeto": 1}:
        r = httpx.get(f"{url}/api/queues/length", auth=AUTH, timeout=15)
        assert r.status_code == 200
        lengths = {q["name"]: q.get("messages") for q in r.json()["active_queues"]}
        time.sleep(0.5)
    assert lengths == {"cheeto": 1}, log_tails([procs[-1].log])
