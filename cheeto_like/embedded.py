"""The embedded store: an nx-27017 server (MongoDB wire protocol on SQLite) we run ourselves.

One data directory holds one SQLite file per database, the server's pid and log files,
its identity (``instance.id``) and, by default, the Unix socket it listens on
(``store.sock``). The directory is 0700 and its files 0600, so the data directory is
both the server's identity and its access control: only its owner can reach the socket.
TCP is opt-in (``embedded.listen: tcp``, for containers) and then needs a credential
(``token_value``). ``python -m cheeto_like.embedded ARGS`` runs the server
(``embedded_server.process.main``), which is how both ``cheeto db serve`` and the background
auto-start launch it. This module is the client side: paths, start/stop, and the check
that the server reached serves the data directory the config names; what client and
server share (file names, the token's variable, the identity command) is
``embedded_common.py``, which both import.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from .config import EmbeddedStoreConfig
from .embedded_common import (
    ALREADY_SERVED_EXIT,
    SOCKET_NAME,
    TOKEN_ENV,
    TOKEN_NAME,
    TOKEN_USER,
    read_instance_id,
    write_private,
)
from .errors import ExternalError

START_TIMEOUT_S = 20.0
# a data directory's file system with less free space than this counts as full (SQLite
# needs room for its journal, WAL index and pages to start at all)
FULL_BELOW_BYTES = 1 << 20
# sun_path is 108 bytes on Linux, including the terminating NUL
MAX_SOCKET_PATH = 107


def port_answers(host: str, port: int, timeout: float = 0.3) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def socket_answers(path: Path, timeout: float = 0.3) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(str(path))
            return True
        except OSError:
            return False


class EmbeddedServer:
    """Process management for one nx-27017 instance described by the config."""

    def __init__(self, config: EmbeddedStoreConfig, *, exit_with: int | None = None,
                 set_parameters: dict[str, str] | None = None) -> None:
        """``exit_with``: a pid whose end stops the server too. The server is detached on
        purpose (it outlives the CLI call that started it); a test session or a bench
        that gets killed must not leave its throwaway store running.
        ``set_parameters``: mongod's start-up parameters (``--set-parameter``), e.g.
        ``{"enableTestCommands": "1"}`` for the test suite's fail points."""
        self.config = config
        self.data_dir = Path(config.path)
        self.exit_with = exit_with
        self.set_parameters = dict(set_parameters or {})

    @property
    def transport(self) -> str:
        return self.config.listen

    @property
    def host(self) -> str:
        return self.config.host

    @property
    def port(self) -> int:
        return self.config.port

    @property
    def socket_path(self) -> Path:
        return self.data_dir / SOCKET_NAME

    @property
    def address(self) -> str:
        """Where the server listens, for messages and ``db status``."""
        if self.transport == "unix":
            return f"unix:{self.socket_path}"
        return f"tcp:{self.host}:{self.port}"

    @property
    def uri(self) -> str:
        if self.transport == "unix":
            return f"mongodb://{quote(str(self.socket_path), safe='')}/?directConnection=true"
        return f"mongodb://{self.host}:{self.port}/?directConnection=true"

    @property
    def token_path(self) -> Path:
        return Path(self.config.token_file) if self.config.token_file else (
            self.data_dir / TOKEN_NAME)

    def token_value(self) -> str | None:
        """The TCP credential: config ``token``, else ``$CHEETO_STORE_TOKEN``, else the
        token file (None when there is none yet)."""
        if self.config.token is not None:
            return self.config.token.get_secret_value()
        if env := os.environ.get(TOKEN_ENV):
            return env
        try:
            return self.token_path.read_text().strip() or None
        except OSError:
            return None

    def client_options(self) -> dict[str, Any]:
        """pymongo keyword arguments that authenticate to this server (TCP only):
        SCRAM-SHA-256 with the token as password, which pymongo repeats on every pooled
        connection. Not PLAIN: pymongo authenticates as it connects, before ``connect``
        can ask who answered, and PLAIN would hand the token in clear to whatever
        listens on the port (another user's process squatting it while the store is
        down). Passed as options, never in the URI."""
        if self.transport != "tcp":
            return {}
        token = self.token_value()
        if token is None:
            return {}
        return {"username": TOKEN_USER, "password": token,
                "authMechanism": "SCRAM-SHA-256", "authSource": "admin"}

    @property
    def lock_path(self) -> Path:
        return self.data_dir / "txn.lock"

    @property
    def pid_path(self) -> Path:
        return self.data_dir / "server.pid"

    @property
    def own_pid_path(self) -> Path:
        """Written by the server itself once it holds the data directory's lock (so a
        start that lost a race never names itself), removed as it exits."""
        return self.data_dir / "nx.pid"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "server.log"

    def check_socket_path(self) -> None:
        if self.transport == "unix" and len(os.fsencode(self.socket_path)) > MAX_SOCKET_PATH:
            raise ExternalError(f"the embedded store's socket path {self.socket_path} is longer "
                                f"than {MAX_SOCKET_PATH} bytes; use a shorter embedded.path "
                                "(or embedded.listen: tcp)")

    def is_up(self) -> bool:
        if self.transport == "unix":
            return socket_answers(self.socket_path)
        return port_answers(self.host, self.port)

    def pid(self) -> int | None:
        """The pid of the server serving this data directory, if that process still runs:
        the server's own record first, then the one its starter wrote."""
        for path in (self.own_pid_path, self.pid_path):
            if (pid := self._live_pid(path)) is not None:
                return pid
        return None

    @staticmethod
    def _live_pid(path: Path) -> int | None:
        try:
            pid = int(path.read_text().strip())
        except (OSError, ValueError):
            return None
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split()[2]
        except (OSError, IndexError):
            state = None
        if state is None:
            try:
                os.kill(pid, 0)
            except OSError:
                return None
        elif state == "Z":
            return None
        return pid

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "cheeto_like.embedded",
               "--data-dir", str(self.data_dir), "--listen", self.transport,
               "--host", self.host, "-p", str(self.port),
               "--lock-timeout", str(self.config.lock_timeout_seconds),
               "--log-file", str(self.log_path), "--pid-file", str(self.own_pid_path)]
        if self.config.token_file:
            cmd += ["--token-file", str(self.config.token_file)]
        if self.exit_with is not None:
            cmd += ["--exit-with", str(self.exit_with)]
        for name, value in self.set_parameters.items():
            cmd += ["--set-parameter", f"{name}={value}"]
        return cmd

    def token_env(self) -> dict[str, str]:
        """A token from the config reaches the server through its environment, never
        argv (other local users can read a process's argv)."""
        if self.config.token is None:
            return {}
        return {TOKEN_ENV: self.config.token.get_secret_value()}

    def server_env(self) -> dict[str, str]:
        return {**os.environ, **self.token_env()}

    def prepare_dir(self) -> None:
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.check_socket_path()

    def start_background(self) -> int:
        """Start the server detached from this process; return its pid once it listens."""
        self.prepare_dir()
        fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "ab") as log:
            proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=log, start_new_session=True, close_fds=True,
                                    env=self.server_env())
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.is_up():
                if proc.poll() is None:
                    write_private(self.pid_path, f"{proc.pid}\n")
                    return proc.pid
                return self.pid() or proc.pid  # another client's start won the race
            if proc.poll() is not None:
                if self.is_up():  # another client's start won the race
                    return self.pid() or proc.pid
                if proc.returncode == ALREADY_SERVED_EXIT:
                    # another client's server holds the lock but does not listen yet:
                    # wait for it to (within the same deadline), as for our own
                    time.sleep(0.05)
                    continue
                self.raise_if_unwritable()
                raise ExternalError(f"embedded store exited with code {proc.returncode}; "
                                    f"last log lines: {self.log_tail()}")
            time.sleep(0.05)
        proc.kill()
        raise ExternalError(f"embedded store did not listen on {self.address} within "
                            f"{START_TIMEOUT_S:.0f}s; last log lines: {self.log_tail()}")

    def raise_if_unwritable(self) -> None:
        """A server that died at start on a read-only or full file system: say that (an
        ``OSError`` naming the data directory, as a write here would have), not its
        SQLite traceback (``disk I/O error``)."""
        import errno

        try:
            fs = os.statvfs(self.data_dir)
        except OSError:
            return
        if fs.f_flag & os.ST_RDONLY:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self.data_dir))
        if fs.f_bavail * fs.f_frsize < FULL_BELOW_BYTES:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.data_dir))

    def serve_foreground(self) -> None:
        """Replace this process with the server (``cheeto db serve``)."""
        self.prepare_dir()
        write_private(self.pid_path, f"{os.getpid()}\n")
        cmd = self.command()
        os.execve(cmd[0], cmd, self.server_env())

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop the server we started; False when none of ours was running."""
        pid = self.pid()
        if pid is None:
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._alive(pid):
            time.sleep(0.05)
        if self._alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.pid_path.unlink(missing_ok=True)
        return True

    @staticmethod
    def _alive(pid: int) -> bool:
        """Whether ``pid`` still runs (a zombie child of ours counts as gone)."""
        try:
            return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
        except (OSError, IndexError):
            return False

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(text[-lines:]) or "(empty log)"

    def check_identity(self, reply: dict[str, Any]) -> None:
        """Refuse a server that does not serve our data directory (one line, both paths).

        Over TCP another home's server may answer on the configured port; over a Unix
        socket the check is cheap insurance. The instance id is compared when this
        machine can read the data directory (a client in another container cannot).
        """
        theirs = str(reply.get("dataDir", "?"))
        ours = os.path.realpath(self.data_dir)
        mine = read_instance_id(self.data_dir)
        if theirs != ours or (mine is not None and reply.get("instanceId") != mine):
            raise ExternalError(f"the embedded store at {self.address} serves {theirs}, not "
                                f"this config's data directory {ours}; refusing to use it "
                                "(give each data directory its own port, or use the default "
                                "listen: unix)")
        if not reply.get("authenticated", False):
            raise ExternalError(f"the embedded store at {self.address} needs a credential: "
                                f"set embedded.token, ${TOKEN_ENV} or the token file "
                                f"{self.token_path}")


if __name__ == "__main__":
    from .embedded_server.process import main

    main(sys.argv[1:])
