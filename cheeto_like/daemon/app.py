"""The Celery application: ``make_app(config)`` builds a fresh app (no import-time
configuration, no module-level singleton: the CLI, the tests and ``daemon up`` each build
their own) from ``settings.celery_settings`` and registers the cheeto tasks on it; then
the long-running processes (worker, beat) around it.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from celery import Celery
from celery.result import AsyncResult

from ..config import Config, mask_uri
from ..errors import Conflict, ExternalError
from .config import (
    TaskSpec,
)
from .settings import bare_app

HUB_WORKER_NAME = "cheeto-hub@%h"

log = logging.getLogger("cheeto_like.daemon")

def site_worker_name(site: str) -> str:
    return f"slurm-{site}@%h"


def make_app(config: Config, **overrides: Any) -> Celery:
    """A configured Celery app with the cheeto tasks registered.

    ``overrides`` are Celery settings applied last: ``beat_schedule`` for beat (see
    ``schedule.build_beat_schedule``), or another broker for a one-machine stack.
    """
    from .tasks import register_tasks

    app = bare_app(config, **overrides)
    register_tasks(app)
    return app


def describe(app: Celery) -> str:
    """Where this app talks to, for the start-up line (passwords masked)."""
    settings = app.conf.mongodb_backend_settings
    return (f"broker {mask_uri(app.conf.broker_url)}, results "
            f"{mask_uri(app.conf.result_backend)} db={settings['database']}."
            f"{settings['taskmeta_collection']}")


# -- long-running processes ------------------------------------------------------------


def setup_process_logging(level: str, target: str | None, fmt: str | None = None) -> None:
    """Route every logger (Celery's and ours) to one handler on the root logger.

    Celery leaves the root logger alone (``worker_hijack_root_logger=False``) and adds
    no handler of its own when the root already has one. ``fmt``: ``text`` or ``json``
    (``cheeto_like.logs``; None: ``$CHEETO_LOG_FORMAT``, else text); either way the
    handler carries the run id, site and task of ``logs.context``.
    """
    from .. import logs

    if target and target != "-":
        handler: logging.Handler = logging.FileHandler(target)
    else:
        handler = logging.StreamHandler(sys.stderr)
    logs.prepare(handler, logs.resolve_format(fmt))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    ours = logging.getLogger("cheeto_like")
    ours.handlers.clear()
    ours.propagate = True
    ours.setLevel(logging.NOTSET)


def worker_argv(*, queue: str, name: str, loglevel: str, concurrency: int = 1) -> list[str]:
    """``celery worker`` arguments (``-q``: no banner; we log one line instead).
    ``concurrency`` > 1 runs that many tasks at once: safe because every run holds its
    task lease and every applying sync its target's lease, never because of the pool."""
    return ["-q", "worker", "-Q", queue, "-n", name, "--concurrency", str(concurrency),
            "--loglevel", loglevel, "--without-mingle", "--without-gossip"]


def beat_argv(*, schedule_file: Path, pidfile: Path | None, loglevel: str) -> list[str]:
    argv = ["-q", "beat", "--schedule", str(schedule_file), "--loglevel", loglevel]
    if pidfile is not None:
        argv += ["--pidfile", str(pidfile)]
    return argv


def check_pidfile(path: Path) -> None:
    """``Conflict`` when ``path`` names a running process (a stale file is left to
    Celery, which replaces it); Celery's own lock still decides a start-up race."""
    try:
        pid = int(path.read_text().strip() or 0)
    except (OSError, ValueError):
        return
    if pid <= 0:
        return
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return
    except PermissionError:
        pass
    raise Conflict(f"beat is already running (pid {pid}, pidfile {path}); one per pidfile "
                   "(a standby beat on this host needs its own --pidfile and --schedule-file)")


def run_celery(app: Celery, argv: list[str]) -> int:
    """Run a Celery command in this process until it stops (Ctrl-C: a warm shutdown)."""
    code = app.start(argv)
    return int(code or 0)


# -- sending and waiting (``cheeto daemon enqueue``) ---------------------------------------


def send(app: Celery, spec: TaskSpec, site: str | None) -> AsyncResult:
    """Publish one run; the router picks the queue. ``ExternalError`` if the broker is
    unreachable (after the publish retries)."""
    from kombu.exceptions import OperationalError

    args = (site,) if spec.per_site else ()
    try:
        return app.tasks[spec.celery_name].apply_async(args)
    except OperationalError as exc:
        raise ExternalError(f"cannot reach the broker {mask_uri(app.conf.broker_url)}: {exc}",
                            transient=True) from None


@dataclass
class Outcome:
    state: str  # ok, skipped, failed, timeout
    result: Any = None
    error: str | None = None


def wait_for(result: AsyncResult, timeout: float) -> Outcome:
    """The run's outcome, polling the result backend until ``timeout`` seconds pass."""
    from celery.exceptions import TimeoutError as CeleryTimeout

    try:
        value = result.get(timeout=max(timeout, 0.001), interval=0.1, propagate=False)
    except CeleryTimeout:
        return Outcome("timeout", error=f"no result within {timeout:g}s (still queued or "
                                        "running; see `cheeto daemon status`)")
    if result.state == "SUCCESS":
        if isinstance(value, dict) and value.get("status") == "skipped":
            return Outcome("skipped", value, value.get("reason"))
        return Outcome("ok", value)
    if isinstance(value, BaseException):
        return Outcome("failed", error=f"{type(value).__name__}: {value}")
    return Outcome(result.state.lower(), error=str(value) if value is not None else None)
