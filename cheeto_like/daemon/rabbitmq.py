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
