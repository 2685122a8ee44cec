"""Helpers for the Celery tests: a daemon config file, and ``cheeto daemon …`` processes.

Workers and beat run as real subprocesses of the installed console script, against the
session's RabbitMQ and this module's database; the test process builds its own app from
the same config to enqueue, ping and read results.
"""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from celery import Celery
from ruamel.yaml import YAML

from cheeto_like.config import MongoConfig
from cheeto_like.files import write_atomically
from tests.services._proc import kill_procs, spawn, tail

CHEETO = str(Path(sys.executable).parent / "cheeto")
HOST = socket.gethostname()


def mongo_block(mongo: MongoConfig, database: str) -> dict[str, Any]:
    block: dict[str, Any] = {"database": database}
    if mongo.uri:
        block["uri"] = mongo.uri
    else:
        block["embedded"] = {"path": str(mongo.embedded.path), "port": mongo.embedded.port}
    return block


def write_config(path: Path, mongo: dict[str, Any], daemon: dict[str, Any],
                 **sections: Any) -> Path:
    """Write (atomically: running workers re-read it) a config with one default profile."""
    data = {"mongo": {"default": mongo}, "daemon": {"default": daemon}}
    data.update({name: {"default": block} for name, block in sections.items()})
    buffer = io.StringIO()
    YAML(typ="safe").dump(data, buffer)
    write_atomically(path, buffer.getvalue())
    return path


class DaemonProcess:
    """``cheeto daemon ARGS… --config PATH`` in its own session, output to ``log``."""

    def __init__(self, args: list[str], config: Path, log: Path,
                 env: Mapping[str, str] | None = None,
                 program: Sequence[str] = (CHEETO,)) -> None:
        """``program`` replaces the console script (``long_task.PROGRAM``: the CLI with
        a test-only task registered)."""
        self.args = args
        self.log = log
        self.proc = spawn([*program, "daemon", *args, "--config", str(config)], log=log,
                          env={**os.environ, **(env or {})})

    def output(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def interrupt(self, timeout: float = 30.0, *, send: bool = True) -> int:
        """Ctrl-C (SIGINT, once: a second one is a cold shutdown) and wait for the exit
        code; SIGKILL if it hangs."""
        if send and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_procs([self.proc])
            raise AssertionError(f"`cheeto daemon {' '.join(self.args)}` ignored Ctrl-C for "
                                 f"{timeout}s\n{tail(self.log)}") from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            kill_procs([self.proc])


def node(name: str) -> str:
    """A worker node name as Celery expands ``%h``."""
    return name.replace("%h", HOST)


def wait_until_consuming(app: Celery, workers: Mapping[str, DaemonProcess],
                         timeout: float = 90.0) -> None:
    """Until every worker (node name -> process) consumes its queues."""
    deadline = time.monotonic() + timeout
    pending = set(workers)
    while pending:
        for name in list(pending):
            proc = workers[name]
            if proc.proc.poll() is not None:
                raise AssertionError(f"worker {name} exited with {proc.proc.returncode}:\n"
                                     f"{tail(proc.log)}")
        replies = app.control.inspect(destination=sorted(pending), timeout=0.5).active_queues()
        pending -= set(replies or {})
        if pending and time.monotonic() > deadline:
            logs = "\n".join(f"--- {n}\n{tail(workers[n].log)}" for n in pending)
            raise AssertionError(f"workers not ready after {timeout}s: {sorted(pending)}\n{logs}")
