"""``cheeto daemon healthcheck``, the image's HEALTHCHECK: it finds the role PID 1 runs
(here a fake ``/proc/1/cmdline`` via ``CHEETO_HEALTH_CMDLINE``) and probes it: the API's
/healthz, Flower's /healthcheck, or the store (and broker) for workers and beat."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cheeto_like.config import ApiConfig, Config
from cheeto_like.daemon.health import Role, detect_role, probe_url, role_config
from tests.daemon.test_api_live import KEY, Server, write_config
from tests.services._proc import free_port

CHEETO = str(Path(sys.executable).parent / "cheeto")


def cmdline(tmp: Path, *argv: str) -> Path:
    path = tmp / "cmdline"
    path.write_bytes(b"".join(arg.encode() + b"\0" for arg in argv))
    return path


@pytest.mark.parametrize(("argv", "role"), [
    (["/app/.venv/bin/python", "/app/.venv/bin/cheeto", "daemon", "api", "--port", "9000"],
     Role("api", ["--port", "9000"])),
    (["/sbin/docker-init", "--", "docker-entrypoint.sh", "daemon", "flower", "--port", "1"],
     Role("flower", ["--port", "1"])),
    (["setpriv", "--reuid=1", "--", "cheeto", "daemon", "worker", "--site", "farm"],
     Role("worker", ["--site", "farm"])),
    (["cheeto", "daemon", "beat"], Role("beat", [])),
    (["cheeto", "ng", "user", "list"], Role("other", [])),
    (["cheeto", "daemon"], Role("other", [])),
])
def test_detect_role(tmp_path, argv, role):
    assert detect_role(cmdline(tmp_path, *argv)) == role


def test_detect_role_without_proc(tmp_path):
    assert detect_role(tmp_path / "missing") == Role("other", [])


def test_probe_urls():
    api = Config(api=ApiConfig(port=8123, prefix="cheeto", tls_cert="/c", tls_key="/k"))
    assert probe_url(Role("api", []), api) == "https://127.0.0.1:8123/cheeto/healthz"
    assert probe_url(Role("api", ["--host", "0.0.0.0", "--port", "9"]), Config()) == \
        "http://127.0.0.1:9/healthz"
    assert probe_url(Role("api", ["--host", "::1"]), Config()) == "http://[::1]:8000/healthz"
    assert probe_url(Role("flower", ["--port", "5600", "--url-prefix", "/flower/"]),
                     Config()) == "http://127.0.0.1:5600/flower/healthcheck"
    assert probe_url(Role("flower", []), Config()) == "http://127.0.0.1:5555/healthcheck"
    assert probe_url(Role("worker", []), Config()) is None


def test_role_config_follows_the_roles_own_flags(tmp_path):
    other = tmp_path / "other.yaml"
    other.write_text("api:\n  prod:\n    port: 9443\n")
    role = Role("api", ["--config", str(other), "-p", "prod"])
    assert role_config(role, Config()).api.port == 9443
    assert role_config(Role("api", []), Config()) == Config()


def healthcheck(config: Path, fake_cmdline: Path | None, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("CHEETO_CONFIG", None)
    if fake_cmdline is not None:
        env["CHEETO_HEALTH_CMDLINE"] = str(fake_cmdline)
    return subprocess.run([CHEETO, "daemon", "healthcheck", "--config", str(config), *args],
                          capture_output=True, text=True, timeout=60, env=env, check=False)


def store_block(mongo_config) -> dict:
    if mongo_config.uri:
        return {"uri": mongo_config.uri}
    return {"embedded": {"path": str(mongo_config.embedded.path),
                         "port": mongo_config.embedded.port}}


def test_api_role(mongo_config, tmp_path):
    config = write_config(tmp_path / "config.yaml", mongo_config, "t_health", api_key=KEY)
    server = Server(config, tmp_path / "api.log").wait()
    fake = cmdline(tmp_path, "cheeto", "daemon", "api", "--port", str(server.port))
    try:
        r = healthcheck(config, fake)
        assert (r.returncode, r.stderr.strip()) == (0, "healthy (api)")
    finally:
        server.stop()
    r = healthcheck(config, fake)
    assert r.returncode == 1
    assert r.stderr.startswith(f"error: unhealthy (api): http://127.0.0.1:{server.port}/healthz")


def write_yaml(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_worker_role_checks_store_and_broker(mongo_config, rabbitmq, tmp_path):
    import json

    mongo = json.dumps({"default": store_block(mongo_config)})
    good = write_yaml(tmp_path / "good.yaml", f"mongo: {mongo}\ndaemon:\n  default:\n"
                                               f"    broker_url: {rabbitmq.url}\n")
    fake = cmdline(tmp_path, "cheeto", "daemon", "worker", "--site", "farm")
    r = healthcheck(good, fake)
    assert (r.returncode, r.stderr.strip()) == (0, "healthy (worker)"), r.stderr
    dead = write_yaml(tmp_path / "dead.yaml", f"mongo: {mongo}\ndaemon:\n  default:\n"
                                               f"    broker_url: amqp://guest:guest@127.0.0.1:"
                                               f"{free_port()}//\n")
    r = healthcheck(dead, fake)
    assert r.returncode == 1 and r.stderr.startswith("error: unhealthy (worker): broker: ")
    assert "Traceback" not in r.stderr


def test_other_roles_ping_the_store(mongo_config, tmp_path):
    import json

    good = write_yaml(tmp_path / "good.yaml",
                      f"mongo: {json.dumps({'default': store_block(mongo_config)})}\n")
    r = healthcheck(good, tmp_path / "no-such-cmdline")
    assert (r.returncode, r.stderr.strip()) == (0, "healthy (other)")
    port = free_port()
    down = write_yaml(tmp_path / "down.yaml",
                      f"mongo:\n  default:\n    timeout_seconds: 0.5\n"
                      f"    embedded: {{path: {tmp_path}/s, port: {port}}}\n")
    r = healthcheck(down, None, "--role", "beat")
    assert r.returncode == 1
    assert r.stderr.strip() == (f"error: unhealthy (beat): the embedded store is not running on "
                                f"unix:{tmp_path}/s/store.sock (start it with `cheeto db "
                                "serve`)")


def test_explicit_url(tmp_path):
    r = healthcheck(write_yaml(tmp_path / "c.yaml", "{}\n"), None, "--url",
                    f"http://127.0.0.1:{free_port()}/healthz")
    assert r.returncode == 1 and "ConnectError" in r.stderr
