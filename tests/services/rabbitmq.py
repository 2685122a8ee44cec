"""A throwaway RabbitMQ node (the Celery broker) isolated from the system one.

/usr/sbin/rabbitmq-server and rabbitmqctl are wrappers that su to `rabbitmq` and use
/var/lib/rabbitmq plus /etc/rabbitmq/rabbitmq-env.conf (which names the system node), so
we call /usr/lib/rabbitmq/bin/* directly with every RABBITMQ_* location pointed into BASE,
our own HOME (the .erlang.cookie lives there), our own epmd port and a node name that
contains the AMQP port, so parallel instances and the system node never meet.
"""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

from ._proc import (
    ServiceError,
    StepTimer,
    alive,
    ensure_running,
    free_ports,
    kill_procs,
    log_tails,
    port_open,
    retry_port_clash,
    run,
    spawn,
    wait_for,
)

__all__ = ["RABBITMQ_BIN", "RabbitMQ"]

RABBITMQ_BIN = Path("/usr/lib/rabbitmq/bin")
_LOOPBACK_DIST = "-kernel inet_dist_use_interface {127,0,0,1}"
_SUN_PATH_MAX = 107
_CTL_PORT_SPAN = 10  # rabbitmqctl picks its own dist port in [min, min + span]


def _ctl_port_base() -> int:
    """A free port with room for the CLI's port range above it (must stay <= 65535)."""
    for _ in range(20):
        port = free_ports(1)[0]
        if port + _CTL_PORT_SPAN <= 65535:
            return port
    raise ServiceError("could not find a free port range for rabbitmqctl")


class RabbitMQ:
    """Throwaway broker; after start() use `url` (guest/guest over 127.0.0.1).

    `env` is what rabbitmqctl needs to reach this node (same HOME/cookie, epmd port,
    node name); rabbitmqctl() applies it for you.
    """

    def __init__(
        self,
        base_dir: Path | None = None,
        *,
        management: bool = False,
        startup_timeout: float = 60.0,
        consumer_timeout_ms: int = 3_660_000,
        channel_tick_ms: int | None = None,
    ) -> None:
        """`base_dir` is a parent directory; a fresh subdirectory of it becomes BASE.

        `management` enables the HTTP API/UI plugin on its own free port (~+0.8 s boot).
        """
        self._parent = base_dir
        # the documented broker setting (docs/rabbitmq.md): at least the daemon's
        # task_time_limit (3600 s) + 60 s, or a long run is redelivered and runs twice
        self.consumer_timeout_ms = consumer_timeout_ms
        # RabbitMQ checks consumer timeouts on each channel tick (about a minute); a test
        # that wants one enforced sooner shortens it
        self.channel_tick_ms = channel_tick_ms
        self.management = management
        self.startup_timeout = startup_timeout
        self.base = Path()
        self.port = 0
        self.dist_port = 0
        self.epmd_port = 0
        self.mgmt_port = 0
        self.ctl_port_min = 0
        self.env: dict[str, str] = {}
        self.timings: dict[str, float] = {}
        self.startup_seconds = 0.0
        self._server: subprocess.Popen[bytes] | None = None
        self._epmd: subprocess.Popen[bytes] | None = None
        self._notify: socket.socket | None = None
        self._vhosts: set[str] = set()

    # ------------------------------------------------------------ addresses

    @property
    def node_name(self) -> str:
        return f"harness-{self.port}@localhost"

    @property
    def url(self) -> str:
        """AMQP broker URL for kombu/Celery (default vhost "/")."""
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"

    @property
    def mgmt_url(self) -> str | None:
        """Management HTTP API base URL, or None when the plugin is off."""
        return f"http://127.0.0.1:{self.mgmt_port}" if self.management else None

    @property
    def pid_file(self) -> Path:
        return self.base / "rabbit.pid"

    @property
    def logs(self) -> list[Path]:
        """Files worth showing when the node misbehaves."""
        return [self.base / "log" / "server.out", self.base / "log" / f"{self.node_name}.log"]

    # ------------------------------------------------------------ lifecycle

    def start(self, attempts: int = 3) -> RabbitMQ:
        """Boot the node (~5 s) and wait until the app runs; ServiceError on failure.

        A start that lost a port race to another process is retried on fresh ports.
        """
        return retry_port_clash(self._start_once, attempts)

    def _start_once(self) -> RabbitMQ:
        timer = StepTimer()
        self.base = Path(tempfile.mkdtemp(prefix="rabbitmq-", dir=self._parent))
        atexit.register(self.stop)
        try:
            self._allocate_ports()
            self._write_files()
            self._start_epmd()
            timer.mark("epmd up")
            self._start_server()
            timer.mark("rabbitmqctl wait: app running")
            if self.management:
                self._wait_management()
                timer.mark("management API listening")
        except BaseException:
            self.stop()
            raise
        self.timings = timer.steps
        self.startup_seconds = timer.elapsed
        return self

    def stop(self) -> None:
        """SIGKILL the node and its epmd, then delete BASE (graceful stop costs ~1.4 s)."""
        procs = [self._server] if self._server else []
        self._server = None
        try:
            kill_procs(procs)
            self._stop_epmd()
        finally:
            if self._notify is not None:
                self._notify.close()
                self._notify = None
            if self.base.is_absolute():  # Path() until start() made BASE
                shutil.rmtree(self.base, ignore_errors=True)
            atexit.unregister(self.stop)

    def __enter__(self) -> RabbitMQ:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------ bring-up steps

    def _allocate_ports(self) -> None:
        self.port, self.dist_port, self.epmd_port, self.mgmt_port = free_ports(4)
        self.ctl_port_min = _ctl_port_base()

    def _node_env(self) -> dict[str, str]:
        base = self.base
        return {
            "HOME": str(base),  # .erlang.cookie: server and CLI must share it
            "RABBITMQ_NODENAME": self.node_name,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "ERL_EPMD_PORT": str(self.epmd_port),
            "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(base / "log"),
            "RABBITMQ_PID_FILE": str(self.pid_file),
            "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(base / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
            # an empty file of ours, or the system's (NODENAME=rabbit@localhost) is sourced
            "RABBITMQ_CONF_ENV_FILE": str(base / "rabbitmq-env.conf"),
            # without these the node's and the CLI's dist ports listen on 0.0.0.0
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": _LOOPBACK_DIST,
            "RABBITMQ_CTL_ERL_ARGS": _LOOPBACK_DIST,
            # the CLI's default range 35672-35682 is shared by every node on the machine
            "RABBITMQ_CTL_DIST_PORT_MIN": str(self.ctl_port_min),
            "RABBITMQ_CTL_DIST_PORT_MAX": str(self.ctl_port_min + _CTL_PORT_SPAN),
            "PATH": f"{RABBITMQ_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        }

    def _rabbitmq_conf(self) -> str:
        lines = [
            f"listeners.tcp.default = 127.0.0.1:{self.port}",
            "loopback_users.guest = true",
            "log.console = false",
            "log.file.level = info",
            f"consumer_timeout = {self.consumer_timeout_ms}",
        ]
        if self.management:
            lines += ["management.tcp.ip = 127.0.0.1", f"management.tcp.port = {self.mgmt_port}"]
        return "\n".join(lines) + "\n"

    def _write_files(self) -> None:
        base = self.base
        for sub in ("mnesia", "log"):
            (base / sub).mkdir()
        cookie = base / ".erlang.cookie"
        cookie.write_text(secrets.token_hex(16).upper())
        cookie.chmod(0o400)  # erl refuses a cookie that others can read
        (base / "rabbitmq-env.conf").write_text("")
        tick = (f"{{rabbit, [{{channel_tick_interval, {self.channel_tick_ms}}}]}}"
                if self.channel_tick_ms else "")
        (base / "advanced.config").write_text(f"[{tick}].\n")
        (base / "rabbitmq.conf").write_text(self._rabbitmq_conf())
        plugins = "[rabbitmq_management]." if self.management else "[]."
        (base / "enabled_plugins").write_text(plugins + "\n")
        self.env = self._node_env()

    def _start_epmd(self) -> None:
        """Our own foreground epmd, so stop() can kill it like any child.

        Left to itself erl starts `epmd -daemon`, which outlives the node and must be
        hunted down with `epmd -kill` retries.
        """
        argv = ["epmd", "-port", str(self.epmd_port), "-address", "127.0.0.1"]
        log = self.base / "log" / "epmd.out"
        self._epmd = proc = spawn(argv, log=log, env=self.client_env(), cwd=self.base)

        def listening() -> bool:
            ensure_running(proc, "epmd", [log])
            return port_open(self.epmd_port)

        wait_for(listening, 10, f"epmd on port {self.epmd_port}", logs=[log])

    def _notify_socket(self) -> str:
        """Bind a datagram socket and return its path, for NOTIFY_SOCKET.

        With NOTIFY_SOCKET set, rabbitmq-server execs erl instead of running it in the
        background behind a trap-ing shell: beam.smp is then our own child, so it dies
        with us (PDEATHSIG) and is reaped at once instead of lingering as a zombie.
        The sd_notify messages (READY=1 ...) are simply left unread.
        """
        path = self.base / "notify.sock"
        if len(str(path)) > _SUN_PATH_MAX:
            raise ServiceError(f"socket path too long for AF_UNIX: {path}")
        self._notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._notify.bind(str(path))
        return str(path)

    def _start_server(self) -> None:
        argv = [str(RABBITMQ_BIN / "rabbitmq-server")]
        env = {**self.client_env(), "NOTIFY_SOCKET": self._notify_socket()}
        # cwd=BASE so an erl_crash.dump lands in the throwaway directory
        self._server = server = spawn(argv, log=self.logs[0], env=env, cwd=self.base)
        with subprocess.Popen(
            [str(RABBITMQ_BIN / "rabbitmqctl"), "wait", "--timeout", str(int(self.startup_timeout)),
             str(self.pid_file)],
            env=self.client_env(), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        ) as waiter:  # fmt: skip
            try:
                wait_for(
                    lambda: self._waiter_done(waiter, server),
                    self.startup_timeout + 5,
                    "`rabbitmqctl wait` (node boot)",
                    logs=self.logs,
                    interval=0.1,
                )
            finally:
                if waiter.poll() is None:
                    waiter.kill()

    def _waiter_done(self, waiter: subprocess.Popen[str], server: subprocess.Popen[bytes]) -> bool:
        """Predicate: `rabbitmqctl wait` succeeded; raise if it or the server failed."""
        ensure_running(server, "rabbitmq-server", self.logs)
        code = waiter.poll()
        if code is None:
            return False
        if code != 0:
            output = waiter.stdout.read() if waiter.stdout else ""
            message = f"`rabbitmqctl wait` failed ({code}): {output.strip()}"
            raise ServiceError(f"{message}\n{log_tails(self.logs)}")
        return True

    def _wait_management(self) -> None:
        wait_for(
            lambda: port_open(self.mgmt_port),
            self.startup_timeout,
            f"management API on port {self.mgmt_port}",
            logs=self.logs,
        )

    def _stop_epmd(self) -> None:
        """Kill our epmd; if it died early, erl started a daemon one: `epmd -kill` it."""
        if self._epmd is None:
            return
        ours_alive = alive(self._epmd.pid)
        procs, self._epmd = [self._epmd], None
        kill_procs(procs)
        if not ours_alive and self.env:
            self._epmd_kill_daemon()

    def _epmd_kill_daemon(self) -> None:
        """down.sh's loop: epmd refuses -kill while the dead node is still registered."""
        argv = ["epmd", "-port", str(self.epmd_port)]
        for _ in range(40):
            killed = run([*argv, "-kill"], check=False, timeout=5).stdout
            if "Killed" in killed or run([*argv, "-names"], check=False).returncode != 0:
                return
            time.sleep(0.05)

    # ------------------------------------------------------------ client helpers

    def client_env(self) -> dict[str, str]:
        """The current environment plus `env`, for rabbitmqctl and friends."""
        return {**os.environ, **self.env}

    def vhost_url(self, name: str) -> str:
        """A broker URL on a vhost of its own (made, with guest's permissions, on first
        use): test modules share one node per session, and a vhost keeps each module's
        queues, pidbox broadcasts and leftover messages away from the others' workers."""
        if name not in self._vhosts:
            self.rabbitmqctl("add_vhost", name)
            self.rabbitmqctl("set_permissions", "-p", name, "guest", ".*", ".*", ".*")
            self._vhosts.add(name)
        return f"amqp://guest:guest@127.0.0.1:{self.port}/{quote(name, safe='')}"

    def rabbitmqctl(
        self, *args: str, check: bool = True, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """Run `rabbitmqctl *args` against this node (~0.4 s each: CLI VM start-up)."""
        argv = [str(RABBITMQ_BIN / "rabbitmqctl"), *args]
        return run(argv, env=self.client_env(), timeout=timeout, check=check, logs=self.logs)
