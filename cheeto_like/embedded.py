"""The embedded store: an nx-27017 server (MongoDB wire protocol on SQLite) we run ourselves.

One data directory holds one SQLite file per database, the server's pid and log files,
and the transaction lock file (see ``store.TransactionLock``). ``python -m
cheeto_like.embedded ARGS`` runs the server with its per-command logging turned down,
which is how both ``cheeto db serve`` and the background auto-start launch it.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from .config import EmbeddedStoreConfig
from .errors import ExternalError

START_TIMEOUT_S = 20.0


def port_answers(host: str, port: int, timeout: float = 0.3) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class EmbeddedServer:
    """Process management for one nx-27017 instance described by the config."""

    def __init__(self, config: EmbeddedStoreConfig) -> None:
        self.config = config
        self.data_dir = Path(config.path)

    @property
    def host(self) -> str:
        return self.config.host

    @property
    def port(self) -> int:
        return self.config.port

    @property
    def uri(self) -> str:
        return f"mongodb://{self.host}:{self.port}/?directConnection=true"

    @property
    def lock_path(self) -> Path:
        return self.data_dir / "txn.lock"

    @property
    def pid_path(self) -> Path:
        return self.data_dir / "server.pid"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "server.log"

    def is_up(self) -> bool:
        return port_answers(self.host, self.port)

    def pid(self) -> int | None:
        """The pid recorded by the server we started, if that process still runs."""
        try:
            pid = int(self.pid_path.read_text().strip())
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
        return [sys.executable, "-m", "cheeto_like.embedded",
                "--data-dir", str(self.data_dir), "--host", self.host, "-p", str(self.port),
                "--log-file", str(self.log_path), "--pid-file", str(self.data_dir / "nx.pid")]

    def start_background(self) -> int:
        """Start the server detached from this process; return its pid once it listens."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=log, start_new_session=True, close_fds=True)
        self.pid_path.write_text(f"{proc.pid}\n")
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.is_up():
                return proc.pid
            if proc.poll() is not None:
                raise ExternalError(f"embedded store exited with code {proc.returncode}; "
                                    f"last log lines: {self.log_tail()}")
            time.sleep(0.05)
        proc.kill()
        raise ExternalError(f"embedded store did not listen on {self.host}:{self.port} within "
                            f"{START_TIMEOUT_S:.0f}s; last log lines: {self.log_tail()}")

    def serve_foreground(self) -> None:
        """Replace this process with the server (``cheeto db serve``)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.pid_path.write_text(f"{os.getpid()}\n")
        cmd = self.command()
        os.execv(cmd[0], cmd)

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop the server we started; False when none of ours was running."""
        pid = self.pid()
        if pid is None:
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.pid() is not None:
            time.sleep(0.05)
        if self.pid() is not None:
            os.kill(pid, signal.SIGKILL)
        self.pid_path.unlink(missing_ok=True)
        return True

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(text[-lines:]) or "(empty log)"


EXIT_GRACE_S = 5.0


def _exit_on_signal(signum: int, frame: object) -> None:
    """Leave cleanly, but never hang: nx-27017's own handler raises SystemExit, which a
    busy shutdown (seen under load) can swallow or stall, leaving a server that ignores
    SIGTERM. After a grace period the process exits regardless; SQLite keeps every
    committed transaction (WAL), and nothing uncommitted was promised to a client."""
    timer = threading.Timer(EXIT_GRACE_S, os._exit, args=(0,))
    timer.daemon = True
    timer.start()
    sys.exit(0)


def _serve(argv: list[str]) -> None:
    """Run nx-27017 with its per-command INFO logging silenced (it costs throughput) and
    a SIGTERM/SIGINT handler that cannot hang."""
    import nx_27017.daemon as nx_daemon
    from nx_27017.nx_27017 import main as nx_main

    for name in ("nx_27017", "neosqlite"):
        logging.getLogger(name).setLevel(logging.WARNING)
    nx_daemon._signal_exit_handler = _exit_on_signal  # installed by its run_foreground
    sys.argv = ["nx-27017", *argv]
    nx_main()


if __name__ == "__main__":
    _serve(sys.argv[1:])
