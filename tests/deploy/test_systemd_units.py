"""The shipped systemd units start under their own hardening (issue 25).

Each unit's ``ExecStart`` is parsed from its file and run (``/opt/cheeto/bin/cheeto``
mapped to this venv's ``cheeto``, ``/etc/cheeto/config.yaml`` to this module's config,
ports to free loopback ones) in a mount namespace (``unshare -m``, as root) that does
what the unit's hardening does, at least as strictly:

- ``ProtectSystem=strict``: every mount read-only (``/proc``, ``/sys``, ``/dev`` stay
  as they are, as systemd leaves them); ``full``: ``/usr``, ``/etc``, ``/boot`` read-only;
- ``ProtectHome=yes``: ``/home``, ``/root`` and ``/run/user`` replaced by empty read-only
  directories (the interpreter, which lives under ``/root`` here, is bound back read-only:
  on a server it is in ``/usr`` or ``/opt``), and the process's ``HOME`` a read-only
  temporary directory;
- ``StateDirectory=``/``RuntimeDirectory=``: writable temporary directories, passed as
  ``$STATE_DIRECTORY``/``$RUNTIME_DIRECTORY`` (and ``%S``/``%t`` expanded to their roots);
  ``PrivateTmp=yes``: a writable private ``$TMPDIR`` (``/tmp`` itself stays read-only,
  which is stricter than systemd).

The session's embedded store stays writable (its clients lock ``txn.lock`` there): it
stands in for the remote MongoDB a deployment reaches over the network.

Each process must get to serving: the API answers ``/healthz`` (its token key made in
``$STATE_DIRECTORY``); the workers consume their queues on the session's RabbitMQ (they
answer ``inspect``); beat logs that it started and writes its schedule into
``$STATE_DIRECTORY``; Flower answers ``/healthcheck``. A write anywhere else fails with
"Read-only file system", so getting there proves there was none. The processes are
stopped by PID. ``systemd-analyze verify`` checks the unit files when it is installed.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from cheeto_like.config import load_config
from cheeto_like.daemon.app import make_app
from cheeto_like.store import Store
from tests.conftest import module_database, seed_access_status, wipe
from tests.daemon.celery_harness import mongo_block, node, wait_until_consuming, write_config
from tests.factories import make_site
from tests.services._proc import free_port, kill_procs, log_tails, spawn, wait_for
from tests.services.rabbitmq import RabbitMQ

UNITS = Path(__file__).resolve().parents[2] / "deploy" / "systemd"
CHEETO = str(Path(sys.executable).parent / "cheeto")
UNIT_CHEETO = "/opt/cheeto/bin/cheeto"
UNIT_CONFIG = "/etc/cheeto/config.yaml"
SITE = "farm"
FLOWER_AUTH = "admin:units-test-password-1234567890"


@dataclass
class Unit:
    """The [Service] settings of one unit file (repeated keys kept in order)."""

    name: str
    settings: dict[str, list[str]] = field(default_factory=dict)

    def get(self, key: str, default: str | None = None) -> str | None:
        values = self.settings.get(key)
        return values[-1] if values else default

    def all(self, key: str) -> list[str]:
        return self.settings.get(key, [])


def parse_unit(path: Path) -> Unit:
    """The unit's [Service] section: comments dropped, ``\\`` continuations joined."""
    unit = Unit(path.name)
    section = None
    pending = ""
    for raw in path.read_text().splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line.startswith(("#", ";")):
            continue
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        if section == "Service":
            key, _, value = line.partition("=")
            unit.settings.setdefault(key.strip(), []).append(value.strip())
    return unit


@dataclass
class Sandbox:
    """The directories systemd would make for a unit, under one temporary root."""

    root: Path

    def __post_init__(self) -> None:
        for name in ("state", "run", "tmp", "home", "hold"):
            (self.root / name).mkdir(parents=True, exist_ok=True)

    @property
    def state_root(self) -> Path:  # %S
        return self.root / "state"

    @property
    def runtime_root(self) -> Path:  # %t
        return self.root / "run"

    def expand(self, text: str, instance: str) -> str:
        """systemd's specifiers in a unit setting (the ones the units use)."""
        table = {"i": instance, "I": instance, "t": str(self.runtime_root),
                 "S": str(self.state_root), "%": "%"}
        return re.sub(r"%(.)", lambda m: table[m.group(1)], text)


def hardening_script(unit: Unit, box: Sandbox, writable: list[Path]) -> str:
    """The shell run inside ``unshare -m`` before ``exec``-ing the unit's command."""
    home = box.root / "home"
    lines = ["set -eu"]
    if unit.get("ProtectHome") == "yes":
        # the interpreter lives under /root here; on a server it is in /usr or /opt
        keep = Path(sys.base_prefix).resolve()
        hold = box.root / "hold"
        lines.append(f"mount --bind {shlex.quote(str(keep))} {shlex.quote(str(hold))}")
        for hidden in ("/home", "/root", "/run/user"):
            if Path(hidden).is_dir():
                lines.append(f"mount -t tmpfs -o mode=0755 tmpfs {hidden}")
        lines += [f"mkdir -p {shlex.quote(str(keep))}",
                  f"mount --move {shlex.quote(str(hold))} {shlex.quote(str(keep))}",
                  f"mount -o remount,bind,ro {shlex.quote(str(keep))}"]
        for hidden in ("/home", "/root", "/run/user"):
            if Path(hidden).is_dir():
                lines.append(f"mount -o remount,ro {hidden}")
    protect = unit.get("ProtectSystem")
    if protect == "strict":
        # every mount read-only but the API file systems (and the sandbox's own tooling)
        lines.append(
            "for m in $(awk '{print $5}' /proc/self/mountinfo); do\n"
            "  case $m in /proc|/proc/*|/sys|/sys/*|/dev|/dev/*|/mnt|/mnt/*) continue;; esac\n"
            "  mount -o remount,bind,ro \"$m\"\n"
            "done")
    elif protect in ("full", "yes"):
        for path in ("/usr", "/boot", "/efi", *(["/etc"] if protect == "full" else [])):
            if Path(path).is_dir():
                lines.append(f"mount --bind {path} {path} && mount -o remount,bind,ro {path}")
    for path in writable:
        q = shlex.quote(str(path))
        lines.append(f"mount --bind {q} {q} && mount -o remount,bind,rw {q}")
    q = shlex.quote(str(home))
    lines.append(f"mount --bind {q} {q} && mount -o remount,bind,ro {q}")
    lines.append('exec "$@"')
    return "\n".join(lines)


@dataclass
class Started:
    unit: Unit
    argv: list[str]
    env: dict[str, str]
    proc: subprocess.Popen[bytes]
    log: Path
    port: int | None
    state: Path | None
    runtime: Path | None

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def alive(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.unit.name} exited {self.proc.returncode}\n"
                                 f"{log_tails([self.log])}")


def start_unit(path: Path, box: Sandbox, config: Path, *, instance: str = "",
               extra_writable: list[Path] = (), env_files: dict[str, str] | None = None
               ) -> Started:
    unit = parse_unit(path)
    [exec_start] = unit.all("ExecStart")
    argv = shlex.split(box.expand(exec_start, instance))
    assert argv[0] == UNIT_CHEETO, argv
    argv[0] = CHEETO
    port = None
    for i, arg in enumerate(argv):
        if arg in ("--port",):
            port = free_port()
            argv[i + 1] = str(port)
        if arg in ("--host", "--address"):
            argv[i + 1] = "127.0.0.1"  # the test talks to loopback only
    env = {"PATH": f"{Path(CHEETO).parent}:/usr/bin:/bin", "LANG": "C.UTF-8",
           "HOME": str(box.root / "home"), "USER": "cheeto", "LOGNAME": "cheeto",
           "TMPDIR": str(box.root / "tmp")}
    for item in unit.all("Environment"):
        for pair in shlex.split(item):
            key, _, value = pair.partition("=")
            env[key] = str(config) if value == UNIT_CONFIG else value
    if unit.all("EnvironmentFile"):
        env.update(env_files or {})
    writable = [box.root / "tmp", *extra_writable]
    state = runtime = None
    if unit.get("StateDirectory"):
        state = box.state_root / box.expand(unit.get("StateDirectory") or "", instance)
        state.mkdir(mode=0o750, exist_ok=True)
        env["STATE_DIRECTORY"] = str(state)
        writable.append(state)
    if unit.get("RuntimeDirectory"):
        runtime = box.runtime_root / box.expand(unit.get("RuntimeDirectory") or "", instance)
        runtime.mkdir(mode=0o755, exist_ok=True)
        env["RUNTIME_DIRECTORY"] = str(runtime)
        writable.append(runtime)
    cwd = unit.get("WorkingDirectory")
    script = hardening_script(unit, box, writable)
    log = box.root / f"{path.stem}.log"
    command = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", *argv]
    proc = spawn(command, log=log, env=env,
                 cwd=Path(box.expand(cwd, instance)) if cwd else box.root / "tmp")
    return Started(unit, argv, env, proc, log, port, state, runtime)


# -- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def site(store: Store) -> Store:
    await wipe()
    await seed_access_status()
    await make_site(store, SITE, "farm.hpc.example.org")
    return store


@pytest.fixture(scope="module")
def config(site: Store, rabbitmq: RabbitMQ, mongo_config, request,
           tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("units")
    daemon = {"broker_url": rabbitmq.vhost_url(module_database(request)), "sites": [SITE],
              "task_time_limit": 120,
              # a tick every few seconds: beat's sends show it reached the broker
              "tasks": {"slurm_sync": {}, "reap": {"schedule": 3}}}
    path = write_config(base / "config.yaml", mongo_block(mongo_config, module_database(request)),
                        daemon, api={})
    path.chmod(0o644)
    return path


@pytest.fixture(scope="module")
def store_dir(mongo_config) -> list[Path]:  # type: ignore[no-untyped-def]
    """The session's embedded store: writable, as a remote MongoDB would be to a unit."""
    return [] if mongo_config.uri else [Path(mongo_config.embedded.path)]


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Sandbox]:
    yield Sandbox(tmp_path)


def stop(started: Started) -> None:
    kill_procs([started.proc])


def written_outside(box: Sandbox, started: Started) -> list[Path]:
    """Files under the sandbox's HOME (it is read-only: any would be a surprise)."""
    return sorted((box.root / "home").rglob("*"))


# -- the units -------------------------------------------------------------------------------


def test_every_unit_is_tested_here():
    assert sorted(p.name for p in UNITS.glob("*.service")) == sorted(
        [*STARTED, "cheeto-container@.service"])


def test_api_unit_serves_under_its_hardening(box, config, store_dir):
    started = start_unit(UNITS / "cheeto-api.service", box, config, extra_writable=store_dir)
    try:
        def up() -> bool:
            started.alive()
            try:
                return httpx.get(f"http://127.0.0.1:{started.port}/healthz",
                                 timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, 60, "the API unit's /healthz", logs=[started.log], interval=0.2)
        assert started.state is not None
        key = started.state / "jwt.key"
        assert key.is_file() and key.stat().st_mode & 0o777 == 0o600
        assert "Read-only file system" not in started.output()
    finally:
        stop(started)
    assert written_outside(box, started) == []


def test_api_unit_without_a_state_directory_is_one_line(box, config, store_dir):
    """The unit as shipped before: ``ProtectSystem=strict``, ``ProtectHome=yes`` and no
    ``StateDirectory=``: nowhere to write the key, so one line and exit 2 (not a loop of
    tracebacks)."""
    original = (UNITS / "cheeto-api.service").read_text()
    stripped = box.root / "cheeto-api.service"
    stripped.write_text("\n".join(line for line in original.splitlines()
                                  if not line.startswith("StateDirectory")) + "\n")
    started = start_unit(stripped, box, config, extra_writable=store_dir)
    try:
        code = started.proc.wait(timeout=120)
    finally:
        stop(started)
    out = started.output()
    assert code == 2, out
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1 and "cannot create the token key" in lines[0], out
    assert "Read-only file system" in lines[0]


@pytest.mark.parametrize("unit_name", ["cheeto-worker.service", "cheeto-site-worker@.service"])
def test_worker_units_consume_under_their_hardening(box, config, store_dir, unit_name):
    site_unit = "@" in unit_name
    started = start_unit(UNITS / unit_name, box, config, instance=SITE if site_unit else "",
                         extra_writable=store_dir)
    app = make_app(load_config(config))
    try:
        name = node(f"slurm-{SITE}@%h" if site_unit else "cheeto-hub@%h")
        wait_until_consuming(app, {name: started}, timeout=90)  # type: ignore[dict-item]
        replies = app.control.inspect(destination=[name], timeout=2).active_queues() or {}
        queues = {q["name"] for q in replies.get(name, [])}
        assert queues == ({f"slurm.{SITE}"} if site_unit else {"cheeto"}), replies
        assert "Read-only file system" not in started.output()
    finally:
        app.close()
        stop(started)
    assert written_outside(box, started) == []


def test_beat_unit_runs_under_its_hardening(box, config, store_dir):
    started = start_unit(UNITS / "cheeto-beat.service", box, config, extra_writable=store_dir)
    try:
        assert started.state is not None and started.runtime is not None
        state, runtime = started.state, started.runtime

        def ready() -> bool:
            started.alive()
            return (any(state.glob("celerybeat-schedule*"))
                    and (runtime / "beat.pid").is_file())

        wait_for(ready, 60, "beat's schedule file and pidfile", logs=[started.log],
                 interval=0.2)
        assert (runtime / "beat.pid").read_text().strip() == str(started.proc.pid)
        # it reaches the session's RabbitMQ: its ticks land in the hub's queue
        app = make_app(load_config(config))
        try:
            def queued() -> bool:
                started.alive()
                with app.connection_for_write() as conn:
                    try:
                        declared = conn.default_channel.queue_declare("cheeto", passive=True)
                    except Exception:  # not declared yet: no tick sent so far
                        return False
                    return declared.message_count > 0

            wait_for(queued, 60, "a beat tick in queue cheeto", logs=[started.log],
                     interval=0.5)
        finally:
            app.close()
        started.alive()
        out = started.output()
        assert f"beat schedule file {state}/celerybeat-schedule" in out, out
        assert "Read-only file system" not in out
    finally:
        stop(started)
    assert written_outside(box, started) == []


def test_flower_unit_serves_under_its_hardening(box, config, store_dir):
    started = start_unit(UNITS / "cheeto-flower.service", box, config,
                         extra_writable=store_dir,
                         env_files={"FLOWER_BASIC_AUTH": FLOWER_AUTH})
    try:
        def up() -> bool:
            started.alive()
            try:
                return httpx.get(f"http://127.0.0.1:{started.port}/healthcheck",
                                 timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, 60, "Flower's /healthcheck", logs=[started.log], interval=0.2)
        assert "Read-only file system" not in started.output()
    finally:
        stop(started)
    assert written_outside(box, started) == []


STARTED = ["cheeto-api.service", "cheeto-worker.service", "cheeto-site-worker@.service",
           "cheeto-beat.service", "cheeto-flower.service"]


def test_the_container_unit_keeps_state_on_a_named_volume():
    """Docker is not here to run it; what it runs is pinned instead."""
    unit = parse_unit(UNITS / "cheeto-container@.service")
    [exec_start] = unit.all("ExecStart")
    argv = shlex.split(exec_start)
    assert "--init" in argv
    assert "cheeto-%i-state:/var/lib/cheeto/state" in argv


def test_systemd_analyze_verifies_the_units(tmp_path):
    """``systemd-analyze verify`` on the units (their binary mapped to this venv's)."""
    analyze = shutil.which("systemd-analyze")
    checked: dict[str, Any] = {}
    for path in UNITS.glob("*.service"):
        text = path.read_text().replace(UNIT_CHEETO, CHEETO)
        name = path.name.replace("@.service", f"@{SITE}.service")
        (tmp_path / name).write_text(text)
        checked[name] = text
    if "cheeto-container@farm.service" in checked and not Path("/usr/bin/docker").exists():
        del checked["cheeto-container@farm.service"]  # its binary is docker's
    assert "cheeto-api.service" in checked
    if analyze is None:  # not installed: nothing to run (the units are still parsed above)
        return
    result = subprocess.run([analyze, "verify", "--man=no",
                             *(str(tmp_path / n) for n in sorted(checked))],
                            capture_output=True, text=True, timeout=120, check=False,
                            env={**os.environ, "SYSTEMD_LOG_LEVEL": "warning"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "cheeto" not in result.stderr, result.stderr
