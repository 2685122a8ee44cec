"""``cheeto daemon up``: the whole daemon on one machine, supervised.

The stack starts, in order, and stops in reverse:

1. the embedded store, when the config uses it and it is not already running;
2. a broker: the config's ``daemon.broker_url`` when the config names one; else a private
   RabbitMQ node (``daemon/rabbitmq.py``) when the RabbitMQ server is installed; else
   kombu's ``filesystem://`` transport, which needs no server (Flower's worker view and
   remote control work less well on it: they poll files);
3. the hub worker, one site worker per site of ``slurm_sync`` (when that task is
   configured), and beat;
4. the API and Flower, on loopback, with a generated API key and Flower password when
   the config has none.

Each service is a ``cheeto …`` (or broker) subprocess in its own process group, started
with a *derived* config (``<run dir>/config.yaml``: the chosen profile's blocks, with the
broker, beat file and API key the stack decided). Its output is prefixed with its name on
stderr and appended to ``<run dir>/logs/<name>.log``. A service that exits is restarted
with back-off (1 s doubling to 30 s; reset after 60 s of uptime). Ctrl-C or SIGTERM stops
everything in reverse order: SIGTERM, a grace period, then SIGKILL for the whole process
group, so nothing is left behind; a second Ctrl-C skips the grace periods. The URLs and
credentials are printed and written to ``<run dir>/stack.json`` (mode 0600), with the
Prometheus scrape URL of every process under ``metrics`` (the ports are free loopback
ports, also in the derived config's ``metrics`` section). While the
stack runs, a pointer from the config it was given to the derived one
(``daemon/stack_pointer.py``) lets ``cheeto daemon enqueue --config <that file>`` reach the
stack's broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import json
import os
import secrets
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ruamel.yaml import YAML

from ..config import PROFILED_SECTIONS, ApiConfig, Config, mask_uri
from ..embedded import EmbeddedServer, port_answers
from ..errors import CheetoError, ExternalError, InvalidInput
from . import rabbitmq, stack_pointer

BACKOFF_START_S = 1.0
BACKOFF_MAX_S = 30.0
STABLE_AFTER_S = 60.0
BROKER_CHOICES = ("auto", "rabbitmq", "filesystem", "config")
INFRASTRUCTURE = ("store", "epmd", "rabbitmq")  # the demo is seeded once these are up

_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """preexec_fn: SIGKILL the child if the supervisor itself is killed (kill -9)."""
    with contextlib.suppress(Exception):
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_or_free(preferred: int | None) -> int:
    """``preferred`` when nothing listens there and it can be bound, else a free port."""
    if preferred:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", preferred))
            except OSError:
                pass
            else:
                return preferred
    return free_port()


def cheeto_argv(*args: str) -> list[str]:
    """A ``cheeto`` command with this interpreter (the console script when present)."""
    script = Path(sys.executable).parent / "cheeto"
    if script.exists():
        return [str(script), *args]
    return [sys.executable, "-c", "from cheeto_like.cli import console_main; console_main()",
            *args]


# -- the plan ------------------------------------------------------------------------------


@dataclass
class ServiceSpec:
    """One supervised process."""

    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    ready: Callable[[], bool] | None = None  # polled after start (None: started is enough)
    ready_timeout: float = 60.0
    stop_timeout: float = 15.0


@dataclass
class StackOptions:
    run_dir: Path
    broker: str = "auto"
    api_port: int | None = None
    flower_port: int | None = None
    flower_auth: str | None = None  # from $FLOWER_BASIC_AUTH or the config, never argv
    seed_demo: bool = False
    demo_site: str = "farm"
    ready_timeout: float = 90.0


@dataclass
class StackPlan:
    """What ``daemon up`` will run, decided before anything starts."""

    options: StackOptions
    config_path: Path
    services: list[ServiceSpec]
    info: dict[str, Any]
    notes: list[str]
    store_config: Config
    seed_demo: bool = False
    source_config: Path | None = None  # the config `daemon up` was given, and its profile
    profile: str = "default"


def _raw_config(config: Config) -> dict[str, Any]:
    """The config file as data (the chosen profile's blocks become ``default``)."""
    if config.path is None or not Path(config.path).exists():
        return {}
    data = YAML(typ="safe").load(Path(config.path).read_text()) or {}
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key in PROFILED_SECTIONS and isinstance(value, dict):
            block = value.get(config.profile, value.get("default"))
            if block is not None:
                out[key] = {"default": block}
        else:
            out[key] = value
    return out


def _choose_broker(config: Config, wanted: str) -> str:
    if wanted not in BROKER_CHOICES:
        raise InvalidInput(f"--broker must be one of {', '.join(BROKER_CHOICES)}")
    configured = config.daemon is not None and "broker_url" in config.daemon.model_fields_set
    if wanted == "config":
        if not configured:
            raise InvalidInput("--broker config: the config has no daemon.broker_url")
        return "config"
    if wanted == "rabbitmq":
        if not rabbitmq.available():
            raise InvalidInput(f"--broker rabbitmq: the RabbitMQ server is not installed "
                               f"({rabbitmq.RABBITMQ_BIN}/rabbitmq-server and epmd)")
        return "rabbitmq"
    if wanted == "filesystem":
        return "filesystem"
    if configured:
        return "config"
    return "rabbitmq" if rabbitmq.available() else "filesystem"


def _http_ok(url: str, expect: str | None = None) -> Callable[[], bool]:
    def check() -> bool:
        import httpx

        try:
            response = httpx.get(url, timeout=2)
        except httpx.HTTPError:
            return False
        return response.status_code == 200 and (expect is None or response.text == expect)
    return check


def plan_stack(config: Config, options: StackOptions) -> StackPlan:
    """Decide ports, broker, credentials and services; write the derived config."""
    from .config import TASKS, TaskDisabled, task_block, task_sites

    run = options.run_dir.expanduser().resolve()
    for sub in ("logs", "beat"):
        (run / sub).mkdir(parents=True, exist_ok=True)
    run.chmod(0o700)
    raw = _raw_config(config)
    daemon_raw: dict[str, Any] = dict((raw.get("daemon") or {}).get("default") or {})
    api_raw: dict[str, Any] = dict((raw.get("api") or {}).get("default") or {})
    services: list[ServiceSpec] = []
    notes: list[str] = []
    info: dict[str, Any] = {"run_dir": str(run), "logs": str(run / "logs"),
                            "config": str(run / "config.yaml"), "pid": os.getpid()}

    # 1. the store
    mongo = config.mongo
    if mongo.is_embedded:
        server = EmbeddedServer(mongo.embedded)
        info["store"] = f"embedded {server.address} ({server.data_dir})"
        if server.is_up():
            notes.append(f"the embedded store on {server.address} is already "
                         "running; using it (not supervised)")
        else:
            server.prepare_dir()
            services.append(ServiceSpec(
                "store", server.command(), env=server.token_env(),
                ready=server.is_up, stop_timeout=10))
    else:
        info["store"] = f"MongoDB {mask_uri(mongo.uri or '')}"

    # 2. the broker
    broker = _choose_broker(config, options.broker)
    flower_args: list[str] = []
    if broker == "rabbitmq":
        node = rabbitmq.RabbitNode(run / "rabbitmq", amqp_port=free_port(),
                                   mgmt_port=free_port(), dist_port=free_port(),
                                   epmd_port=free_port(), ctl_port_min=_ctl_base(),
                                   consumer_timeout_ms=rabbitmq.required_consumer_timeout_ms(
                                       config.daemon.task_time_limit if config.daemon
                                       else 3600))
        node.prepare()
        daemon_raw["broker_consumer_timeout_ms"] = node.consumer_timeout_ms
        env = node.env()
        services.append(ServiceSpec("epmd", node.epmd_argv(), env=env, ready=node.epmd_answers,
                                    stop_timeout=5))
        services.append(ServiceSpec(
            "rabbitmq", node.server_argv(), env=env,
            ready=lambda: (port_answers("127.0.0.1", node.amqp_port)
                           and port_answers("127.0.0.1", node.mgmt_port)),
            ready_timeout=options.ready_timeout, stop_timeout=30))
        daemon_raw["broker_url"] = node.url
        daemon_raw.pop("broker_use_ssl", None)
        daemon_raw.pop("broker_transport_options", None)
        flower_args = ["--broker-api-port", str(node.mgmt_port)]
        info["broker"] = f"RabbitMQ {mask_uri(node.url)} (management {node.mgmt_url})"
        info["broker_url"] = node.url
    elif broker == "filesystem":
        queue_dir, control_dir = run / "broker" / "queue", run / "broker" / "control"
        for path in (queue_dir, control_dir):
            path.mkdir(parents=True, exist_ok=True)
        daemon_raw["broker_url"] = "filesystem://"
        daemon_raw["broker_transport_options"] = {
            "data_folder_in": str(queue_dir), "data_folder_out": str(queue_dir),
            "control_folder": str(control_dir)}
        daemon_raw.pop("broker_use_ssl", None)
        info["broker"] = f"kombu filesystem transport ({run / 'broker'})"
        info["broker_url"] = "filesystem://"
        notes.append("no RabbitMQ server here, so the broker is kombu's filesystem transport: "
                     "tasks flow, but Flower's worker view and remote control (inspect, "
                     "revoke) poll files and lag or time out, and Flower has no broker tab. "
                     "Install rabbitmq-server for the full picture.")
    else:
        assert config.daemon is not None
        info["broker"] = f"configured {mask_uri(config.daemon.broker_url)}"
        info["broker_url"] = config.daemon.broker_url
    daemon_raw["beat_schedule_filename"] = str(run / "beat" / "celerybeat-schedule")
    if options.seed_demo and not daemon_raw.get("sites"):
        daemon_raw["sites"] = [options.demo_site]

    # 3. the API key and Flower credentials
    api_key = api_raw.get("api_key")
    if not api_key:
        api_key = secrets.token_urlsafe(24)
        api_raw["api_key"] = api_key
        info["api_key_generated"] = True
    api_port = port_or_free(options.api_port or (config.api or ApiConfig()).port)
    api_raw |= {"host": "127.0.0.1", "port": api_port}
    raw["daemon"] = {"default": daemon_raw}
    raw["api"] = {"default": api_raw}
    derived = run / "config.yaml"
    _write_private(derived, _yaml(raw))
    derived_config = _load(derived)
    api = derived_config.api or ApiConfig()
    scheme = "https" if api.tls_cert else "http"
    api_url = f"{scheme}://127.0.0.1:{api_port}{api.prefix}"
    info |= {"api_url": f"{api_url}/", "api_key": api_key}

    flower_auth = options.flower_auth
    if not flower_auth:
        flower_auth = f"admin:{secrets.token_urlsafe(12)}"
        info["flower_auth_generated"] = True
    flower_port = port_or_free(options.flower_port or 5555)
    flower_user, _, flower_password = flower_auth.split(",")[0].partition(":")
    info |= {"flower_url": f"http://127.0.0.1:{flower_port}/", "flower_user": flower_user,
             "flower_password": flower_password}

    # 4. the Celery processes
    common = ["--config", str(derived), "--profile", "default"]
    services.append(ServiceSpec("hub", cheeto_argv("daemon", "worker", *common),
                                stop_timeout=30))
    try:
        block = task_block(derived_config, TASKS["slurm_sync"])
    except TaskDisabled:
        notes.append("no site workers: daemon.tasks.slurm_sync is not configured")
    else:
        try:
            sites = task_sites(derived_config, TASKS["slurm_sync"], block)
        except InvalidInput:
            sites = []
            notes.append("no site workers: slurm_sync has no sites (daemon.sites)")
        for site in sites:
            services.append(ServiceSpec(f"site-{site}", cheeto_argv(
                "daemon", "worker", "--site", site, *common), stop_timeout=30))
    services.append(ServiceSpec("beat", cheeto_argv(
        "daemon", "beat", "--pidfile", str(run / "beat" / "beat.pid"), *common),
        stop_timeout=10))
    derived_config = _metrics_ports(raw, run, derived, info, api_url,
                                    [spec.name[len("site-"):] for spec in services
                                     if spec.name.startswith("site-")])

    # 5. the API and Flower
    health = f"{api_url}/healthz"
    services.append(ServiceSpec(
        "api", cheeto_argv("daemon", "api", "--port", str(api_port), *common),
        ready=_http_ok(health) if scheme == "http" else None, stop_timeout=10))
    services.append(ServiceSpec(
        "flower", cheeto_argv("daemon", "flower", "--port", str(flower_port), *flower_args,
                              *common),
        env={"FLOWER_BASIC_AUTH": flower_auth},
        ready=_http_ok(f"http://127.0.0.1:{flower_port}/healthcheck", "OK"), stop_timeout=10))
    for spec in services:
        spec.ready_timeout = max(spec.ready_timeout, options.ready_timeout)
    return StackPlan(options=options, config_path=derived, services=services, info=info,
                     notes=notes, store_config=derived_config, seed_demo=options.seed_demo,
                     source_config=Path(config.path) if config.path is not None else None,
                     profile=config.profile)


def _metrics_ports(raw: dict[str, Any], run: Path, derived: Path, info: dict[str, Any],
                   api_url: str, sites: list[str]) -> Config:
    """Every process of the stack serves metrics on a free loopback port: the ports go
    in the derived config's ``metrics`` section (which the workers and beat read) and in
    ``stack.json``'s ``metrics`` (name -> scrape URL), for Prometheus to be pointed at.
    A port the given config sets is kept when free."""
    given: dict[str, Any] = dict(raw.get("metrics") or {})
    sites_given = dict(given.get("site_worker_ports") or {})
    section = {**given, "listen_address": "127.0.0.1", "api": True,
               "hub_worker_port": port_or_free(given.get("hub_worker_port")),
               "beat_port": port_or_free(given.get("beat_port")),
               "site_worker_ports": {site: port_or_free(sites_given.get(site))
                                     for site in sites}}
    section.setdefault("directory", str(run / "metrics"))
    raw["metrics"] = section
    _write_private(derived, _yaml(raw))
    urls = {"api": f"{api_url}/metrics",
            "hub": f"http://127.0.0.1:{section['hub_worker_port']}/metrics",
            "beat": f"http://127.0.0.1:{section['beat_port']}/metrics"}
    urls |= {f"site-{site}": f"http://127.0.0.1:{port}/metrics"
             for site, port in section["site_worker_ports"].items()}
    info["metrics"] = urls
    return _load(derived)


def _ctl_base() -> int:
    for _ in range(20):
        port = free_port()
        if port + rabbitmq.CTL_PORT_SPAN <= 65535:
            return port
    raise ExternalError("could not find a free port range for rabbitmqctl")


def _yaml(data: dict[str, Any]) -> str:
    import io

    out = io.StringIO()
    YAML(typ="safe").dump(data, out)
    return "# written by `cheeto daemon up`; edit your own config instead\n" + out.getvalue()


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    path.chmod(0o600)


def _load(path: Path) -> Config:
    from ..config import load_config

    return load_config(path, "default")


# -- the supervisor ------------------------------------------------------------------------


class Service:
    """A running (or restarting) supervised process."""

    def __init__(self, spec: ServiceSpec, stack: Supervisor) -> None:
        self.spec = spec
        self.stack = stack
        self.proc: asyncio.subprocess.Process | None = None
        self.started_at = 0.0
        self.restarts = 0
        self.pgids: set[int] = set()
        self.log_path = stack.run_dir / "logs" / f"{spec.name}.log"
        self._pump: asyncio.Task[None] | None = None

    async def start(self) -> None:
        env = {**self.stack.base_env, **self.spec.env}
        self.proc = await asyncio.create_subprocess_exec(
            *self.spec.argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, env=env, start_new_session=True,
            preexec_fn=_die_with_parent)
        self.pgids.add(self.proc.pid)
        self.started_at = time.monotonic()
        self._pump = asyncio.create_task(self._copy_output(self.proc))
        self.stack.say(f"started {self.spec.name} (pid {self.proc.pid})")

    async def _copy_output(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        with self.log_path.open("ab") as log:
            log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} started pid {proc.pid}\n"
                      .encode())
            while line := await proc.stdout.readline():
                log.write(line)
                log.flush()
                self.stack.echo(self.spec.name, line.decode(errors="replace").rstrip("\n"))

    async def wait_ready(self) -> None:
        check = self.spec.ready
        if check is None:
            return
        deadline = time.monotonic() + self.spec.ready_timeout
        while True:
            if await asyncio.to_thread(check):
                return
            if self.proc is None or self.proc.returncode is not None:
                raise ExternalError(f"{self.spec.name} exited during start-up (code "
                                    f"{self.proc.returncode if self.proc else '?'}); see "
                                    f"{self.log_path}")
            if time.monotonic() > deadline:
                raise ExternalError(f"{self.spec.name} was not ready within "
                                    f"{self.spec.ready_timeout:.0f}s; see {self.log_path}")
            await asyncio.sleep(0.2)

    async def supervise(self) -> None:
        """Restart the process whenever it exits, until the stack stops."""
        delay = BACKOFF_START_S
        while not self.stack.stopping.is_set():
            if self.proc is not None:
                code = await self.proc.wait()
                if self._pump is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(self._pump, 2)
                _kill_group(self.proc.pid, signal.SIGKILL)  # helpers it left behind
                if self.stack.stopping.is_set():
                    return
                uptime = time.monotonic() - self.started_at
                if uptime >= STABLE_AFTER_S:
                    delay = BACKOFF_START_S
                self.stack.say(f"{self.spec.name} exited with code {code} after "
                               f"{uptime:.0f}s; restarting in {delay:.0f}s", error=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stack.stopping.wait(), delay)
            if self.stack.stopping.is_set():
                return
            delay = min(delay * 2, BACKOFF_MAX_S)
            self.restarts += 1
            try:
                await self.start()
            except OSError as exc:  # cannot even exec it: keep trying, with back-off
                self.stack.say(f"cannot restart {self.spec.name}: {exc}; next try in "
                               f"{delay:.0f}s", error=True)
                self.proc = None

    async def stop(self) -> None:
        """SIGTERM, up to ``stop_timeout`` (cut short by a second Ctrl-C), then SIGKILL for
        every process group this service ever had."""
        proc = self.proc
        if proc is None:
            for pgid in self.pgids:
                _kill_group(pgid, signal.SIGKILL)
            return
        waiter = asyncio.ensure_future(proc.wait())
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + self.spec.stop_timeout
            while not waiter.done() and not self.stack.forced and time.monotonic() < deadline:
                await asyncio.wait({waiter}, timeout=0.2)
            if not waiter.done() and not self.stack.forced:
                self.stack.say(f"{self.spec.name} did not stop within "
                               f"{self.spec.stop_timeout:.0f}s; killing it", error=True)
        for pgid in self.pgids:
            _kill_group(pgid, signal.SIGKILL)
        await asyncio.wait({waiter}, timeout=5)
        if self._pump is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._pump, 2)


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class Supervisor:
    def __init__(self, plan: StackPlan, *, stream: IO[str] | None = None,
                 banner: Callable[[StackPlan], None] | None = None) -> None:
        self.plan = plan
        self.run_dir = Path(plan.info["run_dir"])
        self.stream = stream or sys.stderr
        self.banner = banner
        self.stopping = asyncio.Event()
        self.forced = False
        self.services: list[Service] = []
        self._color = self.stream.isatty() and not os.environ.get("NO_COLOR")
        self._log = (self.run_dir / "logs" / "stack.log").open("a")
        env = {k: v for k, v in os.environ.items()
               if k not in ("CHEETO_CONFIG", "CHEETO_PROFILE") and not k.startswith("FLOWER_")}
        self.base_env = env | {"PYTHONUNBUFFERED": "1"}
        self.width = max((len(s.name) for s in plan.services), default=5)

    # output
    def echo(self, name: str, line: str) -> None:
        prefix = f"{name:<{self.width}} |"
        if self._color:
            color = _COLORS[sum(map(ord, name)) % len(_COLORS)]
            prefix = f"\033[{color}m{prefix}\033[0m"
        self.stream.write(f"{prefix} {line}\n")
        self.stream.flush()

    def say(self, message: str, *, error: bool = False) -> None:
        stamp = time.strftime("%H:%M:%S")
        self._log.write(f"{stamp} {message}\n")
        self._log.flush()
        self.echo("stack", f"{'!! ' if error else ''}{message}")

    def request_stop(self) -> None:
        if self.stopping.is_set():
            self.forced = True
            self.say("second interrupt: killing everything now")
            return
        self.say("stopping (Ctrl-C again to kill at once)")
        self.stopping.set()

    async def run(self, seed: Callable[[], Awaitable[list[str]]] | None = None) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, self.request_stop)
        watchers: list[asyncio.Task[None]] = []
        code = 0
        try:
            for note in self.plan.notes:
                self.say(f"note: {note}")
            for spec in self.plan.services:
                if self.stopping.is_set():
                    break
                if seed is not None and spec.name not in INFRASTRUCTURE:
                    await self._seed(seed)
                    seed = None
                service = Service(spec, self)
                self.services.append(service)
                await service.start()
                await self._until_stopped(service.wait_ready())
                watchers.append(asyncio.create_task(service.supervise()))
            if not self.stopping.is_set():
                if self.banner is not None:
                    self.banner(self.plan)
                self._write_state()  # last: its presence means "everything is up"
                stack_pointer.register(self.plan.source_config, self.plan.profile,
                                       self.plan.config_path, os.getpid())
                await self.stopping.wait()
        except CheetoError as exc:
            self.say(f"error: {exc.message}", error=True)
            code = exc.exit_code
        finally:
            self.stopping.set()
            for task in watchers:
                task.cancel()
            for service in reversed(self.services):
                if service.proc is not None and service.proc.returncode is None:
                    self.say(f"stopping {service.spec.name}")
                await service.stop()
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                loop.remove_signal_handler(sig)
            self.say("stopped")
            self._log.close()
            (self.run_dir / "stack.json").unlink(missing_ok=True)
            stack_pointer.unregister(self.plan.source_config, self.plan.profile, os.getpid())
        return code

    async def _seed(self, seed: Callable[[], Awaitable[list[str]]]) -> None:
        ran = await seed()
        self.say(f"demo: seeded {', '.join(ran)}" if ran
                 else "demo: the demo site was already seeded")

    async def _until_stopped(self, awaitable: Awaitable[None]) -> None:
        task = asyncio.ensure_future(awaitable)
        stop = asyncio.ensure_future(self.stopping.wait())
        done, _ = await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            stop.cancel()
            task.result()
        else:
            task.cancel()

    def _write_state(self) -> None:
        state = dict(self.plan.info)
        state["services"] = {s.spec.name: s.proc.pid for s in self.services if s.proc}
        _write_private(self.run_dir / "stack.json", json.dumps(state, indent=2) + "\n")


_COLORS = ("36", "32", "33", "35", "34", "96", "92", "93", "95", "94")


class RunDirLock:
    """One ``daemon up`` per run directory."""

    def __init__(self, run_dir: Path) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / "stack.lock"
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)

    def __enter__(self) -> RunDirLock:
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise InvalidInput(f"another `cheeto daemon up` is using {self.path.parent}") from None
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)
