"""A private RabbitMQ node for ``cheeto daemon up`` (one machine, loopback only).

The system's ``/usr/sbin/rabbitmq-server`` is a wrapper that switches to the
``rabbitmq`` user and uses ``/var/lib/rabbitmq`` and ``/etc/rabbitmq``; we call
``/usr/lib/rabbitmq/bin/rabbitmq-server`` directly with every ``RABBITMQ_*`` location
pointed into our own data directory, our own HOME (the Erlang cookie lives there), our
own ``epmd`` on its own port (run in the foreground, so the supervisor owns it) and a
fixed node name, so a system broker and other stacks never meet this one. Everything
listens on 127.0.0.1: AMQP, the management API (for Flower's broker tab), Erlang
distribution and epmd. The default ``guest`` user only works over loopback, which is
all we use. Mnesia lives under the data directory, so queued messages survive a
restart of the stack.
"""

from __future__ import annotations

import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..config import DaemonConfig

RABBITMQ_BIN = Path(os.environ.get("CHEETO_RABBITMQ_BIN", "/usr/lib/rabbitmq/bin"))
NODE_NAME = "cheeto@localhost"
_LOOPBACK_DIST = "-kernel inet_dist_use_interface {127,0,0,1}"
CTL_PORT_SPAN = 10


def available() -> bool:
    """True when the RabbitMQ server scripts and Erlang's epmd are installed."""
    return (RABBITMQ_BIN / "rabbitmq-server").is_file() and shutil.which("epmd") is not None


@dataclass
class RabbitNode:
    """Ports and files of one private node; ``prepare()`` writes its config."""

    base: Path
    amqp_port: int
    mgmt_port: int
    dist_port: int
    epmd_port: int
    ctl_port_min: int
    consumer_timeout_ms: int = 3_660_000  # required_consumer_timeout_ms(task_time_limit)

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.amqp_port}//"

    @property
    def mgmt_url(self) -> str:
        return f"http://127.0.0.1:{self.mgmt_port}/"

    @property
    def log_dir(self) -> Path:
        return self.base / "log"

    def env(self) -> dict[str, str]:
        """What rabbitmq-server and rabbitmqctl need to find this node (and only it)."""
        base = self.base
        return {
            "HOME": str(base),
            "RABBITMQ_NODENAME": NODE_NAME,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.amqp_port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "ERL_EPMD_PORT": str(self.epmd_port),
            "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.log_dir),
            "RABBITMQ_PID_FILE": str(base / "rabbit.pid"),
            "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(base / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
            "RABBITMQ_CONF_ENV_FILE": str(base / "rabbitmq-env.conf"),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": _LOOPBACK_DIST,
            "RABBITMQ_CTL_ERL_ARGS": _LOOPBACK_DIST,
            "RABBITMQ_CTL_DIST_PORT_MIN": str(self.ctl_port_min),
            "RABBITMQ_CTL_DIST_PORT_MAX": str(self.ctl_port_min + CTL_PORT_SPAN),
            "PATH": f"{RABBITMQ_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        }

    def prepare(self) -> None:
        """Create the directories, cookie and config files (the cookie is kept)."""
        for sub in ("mnesia", "log"):
            (self.base / sub).mkdir(parents=True, exist_ok=True)
        self.base.chmod(0o700)
        cookie = self.base / ".erlang.cookie"
        if not cookie.exists():
            cookie.write_text(secrets.token_hex(16).upper())
        cookie.chmod(0o400)  # erl refuses a cookie others can read
        (self.base / "rabbitmq-env.conf").write_text("")  # not the system's
        (self.base / "advanced.config").write_text("[].\n")
        (self.base / "enabled_plugins").write_text("[rabbitmq_management].\n")
        (self.base / "rabbitmq.conf").write_text("\n".join([
            f"listeners.tcp.default = 127.0.0.1:{self.amqp_port}",
            "loopback_users.guest = true",
            "management.tcp.ip = 127.0.0.1",
            f"management.tcp.port = {self.mgmt_port}",
            "log.console = false",
            "log.file.level = info",
            f"consumer_timeout = {self.consumer_timeout_ms}",
        ]) + "\n")

    def epmd_argv(self) -> list[str]:
        return ["epmd", "-port", str(self.epmd_port), "-address", "127.0.0.1"]

    def epmd_answers(self) -> bool:
        """epmd is up (asked with ``epmd -names``: a bare TCP probe makes it complain)."""
        import subprocess

        try:
            return subprocess.run([*self.epmd_argv()[:3], "-names"], capture_output=True,
                                  timeout=5, check=False).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    def server_argv(self) -> list[str]:
        return [str(RABBITMQ_BIN / "rabbitmq-server")]


# -- the broker's consumer_timeout (issue 25) --------------------------------------------

CONSUMER_TIMEOUT_MARGIN_S = 60  # RabbitMQ checks the timeout about once a minute


def required_consumer_timeout_ms(task_time_limit: int) -> int:
    """What the broker's ``consumer_timeout`` must be at least: a late-acked task holds
    its delivery unacknowledged for its whole run (up to the hard limit), and a delivery
    past the timeout is taken back and redelivered, so the run would happen twice."""
    return (task_time_limit + CONSUMER_TIMEOUT_MARGIN_S) * 1000


def how_to_set(required_ms: int) -> str:
    return (f"set `consumer_timeout = {required_ms}` in rabbitmq.conf and restart the broker "
            f"(RabbitMQ 3.12+ also takes a policy: rabbitmqctl set_policy cheeto-timeout "
            f"'^(cheeto|slurm\\..+)$' '{{\"consumer-timeout\": {required_ms}}}' --apply-to "
            f"queues); see docs/rabbitmq.md")


def judge_consumer_timeout(task_time_limit: int, read_ms: int | None, *, read: bool,
                           declared_ms: int | None, why_unread: str | None = None
                           ) -> tuple[int, str]:
    """(log level, one line) about the broker's consumer_timeout for a worker's start.

    ``read`` says whether ``read_ms`` came from the broker (``None`` then means "no
    timeout"); otherwise ``declared_ms`` (``daemon.broker_consumer_timeout_ms``) stands
    in, and without it the line warns that the value could not be checked."""
    import logging

    required = required_consumer_timeout_ms(task_time_limit)
    if read:
        value, source = read_ms, "the broker's consumer_timeout"
    elif declared_ms is not None:
        value = declared_ms or None
        source = (f"daemon.broker_consumer_timeout_ms (the broker's own could not be read: "
                  f"{why_unread})")
    else:
        return logging.WARNING, (
            f"cannot read the broker's consumer_timeout ({why_unread}); it must be at least "
            f"{required} ms (daemon.task_time_limit {task_time_limit} s + "
            f"{CONSUMER_TIMEOUT_MARGIN_S} s) or a run longer than it is redelivered and runs "
            f"twice: {how_to_set(required)}, then say so in daemon.broker_consumer_timeout_ms")
    if value is None:
        return logging.INFO, f"{source}: none (deliveries never time out)"
    if value < required:
        return logging.WARNING, (
            f"{source} is {value} ms, below daemon.task_time_limit {task_time_limit} s: a run "
            f"longer than {value / 1000:g} s is redelivered and runs twice; "
            f"{how_to_set(required)}")
    return logging.INFO, f"{source} is {value} ms (>= {required} ms needed): fine"


def check_consumer_timeout(daemon: DaemonConfig) -> tuple[int, str] | None:
    """The worker's start-up line about the broker's consumer_timeout (None for a broker
    that is not RabbitMQ): read with ``daemon.rabbitmqctl`` where the node is reachable,
    else judged from ``daemon.broker_consumer_timeout_ms``, else a warning saying what
    to set."""
    import asyncio

    from ..adapters.rabbitmqctl import consumer_timeout_ms
    from ..errors import ExternalError

    if not daemon.broker_url.startswith(("amqp://", "amqps://", "pyamqp://")):
        return None
    try:
        value, read, why = asyncio.run(consumer_timeout_ms(daemon.rabbitmqctl)), True, None
    except ExternalError as exc:
        value, read, why = None, False, exc.message
    return judge_consumer_timeout(daemon.task_time_limit, value, read=read,
                                  declared_ms=daemon.broker_consumer_timeout_ms,
                                  why_unread=why)
