"""Turning metrics on in a daemon process, and serving them on an HTTP port.

``activate(role, directory)`` is called once by a long-running process (a worker, beat,
the API) before it records anything. With a directory it uses prometheus_client's
multiprocess mode: every process (the Celery worker's main process and each prefork
child it forks later) writes its values to mmap files named by its pid in that
directory, and the exposition adds them up (counters and histograms summed; gauges as
their spec's ``multiprocess_mode`` says). The directory is private to this server
process: made if missing and emptied at start, so a restart never adds yesterday's
counts (Prometheus handles a counter reset; it cannot handle a double count).

``serve(host, port, role)`` starts a small threaded HTTP server answering
``GET /metrics`` with what this process group recorded, plus the scrape-time collectors
other modules registered for the role (``add_collector``), plus ``cheeto_build_info``.
When a token is given every request without ``Authorization: Bearer <token>`` is a 401.

Dead prefork children: their counter files stay (a count never goes backwards), their
``live*`` gauge files are removed (``mark_process_dead``): on Celery's
``worker_process_shutdown`` signal in the child, and, for a child killed without it
(a time limit, the OOM killer), at each scrape for every pid that no longer exists.
"""

from __future__ import annotations

import glob
import hmac
import logging
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger("cheeto_like.metrics")

ALL = "all"  # add_collector's role for collectors every server exposes
ROLES = ("api", "beat", "hub_worker", "site_worker", "cli")

_collectors: dict[str, list[Any]] = {}
_state: dict[str, Any] = {"role": None, "directory": None}


class Collector(Protocol):
    def collect(self) -> Iterable[Any]: ...


def add_collector(role: str, collector: Collector | Callable[[], Iterable[Any]]) -> None:
    """Expose ``collector``'s families on the servers of ``role`` (or ``ALL``).

    A collector is any object with ``collect()`` yielding prometheus_client metric
    families (build them with ``families.collected(name, rows)``), or a plain function
    doing the same. Registration may happen before or after ``serve``: the server looks
    the list up at each scrape. Errors of one collector are logged and skip its families
    only."""
    if role != ALL and role not in ROLES:
        raise ValueError(f"unknown metrics role {role!r} (one of {', '.join(ROLES)}, all)")
    _collectors.setdefault(role, []).append(collector)


def collectors_for(role: str) -> list[Any]:
    return [*_collectors.get(ALL, ()), *_collectors.get(role, ())]


def role() -> str | None:
    """The role this process activated with (None before ``activate``)."""
    return _state["role"]


def directory() -> Path | None:
    """This server's multiprocess directory (None: a plain in-process registry)."""
    return _state["directory"]


def default_directory(parent: Path | None, name: str) -> Path:
    """``<parent>/cheeto-metrics/<name>``; parent: the config's ``metrics.directory``, else
    the state directory of a service, else the temp directory."""
    from ..config import paths

    top = "cheeto-metrics"
    base = parent or paths.state_directory()
    if base is None:  # the shared temp directory: a name of this user's own
        base, top = Path(tempfile.gettempdir()), f"cheeto-metrics-{os.getuid()}"
    return Path(base) / top / re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _fresh_directory(where: Path) -> None:
    """Make ``where`` empty, refusing a symlink or a directory another user owns (its
    parent may be a shared temp directory)."""
    where.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
    for path in (where.parent, where):
        if not os.path.lexists(path):
            continue
        info = os.lstat(path)
        if os.path.islink(path) or info.st_uid != os.getuid():
            raise PermissionError(f"{path} is a symlink or another user's: not using it "
                                  "for metrics")
    if where.exists():
        shutil.rmtree(where)
    where.mkdir(mode=0o700)


def activate(role_name: str, where: Path | None = None) -> None:
    """Turn recording on in this process (and the children it will fork). Called through
    the facade (``metrics.activate``, ``metrics.start_for``), which then turns its own
    switch on: this module does not import the facade back (issue 32).

    ``where``: the multiprocess directory (emptied now). None: one process only, a plain
    registry (the API with one uvicorn worker, tests)."""
    from prometheus_client import values

    if where is not None:
        where = Path(where)
        _fresh_directory(where)
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(where)
        # prometheus_client picks its value class when it is first imported (Flower's
        # import may have come first): the families made from now on use the mmap files.
        values.ValueClass = values.MultiProcessValue()
    _state.update(role=role_name, directory=where)
    if where is not None:  # prefork children to account for (the API imports no Celery)
        _connect_celery_child_exit()


JOIN_ENV = "CHEETO_METRICS_JOIN"


def child_env() -> dict[str, str]:
    """What a child process this server starts needs to record into its directory
    (``join``): empty when this process serves no multiprocess directory."""
    where = directory()
    return {JOIN_ENV: str(where)} if where is not None else {}


def join(role_name: str) -> bool:
    """Record into the multiprocess directory of the server that started this process
    (``$CHEETO_METRICS_JOIN``, which ``child_env`` gives), neither emptying it nor
    serving: that server's ``/metrics`` adds this process's files as it adds its prefork
    children's. Why: the site worker's quota agent is a child process of its own (not a
    Celery child), and the Slurm syncs it starts must count on the site worker's port
    like the ones the worker runs. False (and nothing turned on) without the variable,
    or when the directory is missing, a symlink or another user's."""
    raw = os.environ.get(JOIN_ENV)
    if not raw:
        return False
    where = Path(raw)
    try:
        info = os.lstat(where)
    except OSError:
        log.warning("metrics: %s is gone; this process records nothing", where)
        return False
    if not where.is_dir() or os.path.islink(where) or info.st_uid != os.getuid():
        log.warning("metrics: %s is a symlink, not a directory or another user's; this "
                    "process records nothing", where)
        return False
    from prometheus_client import values

    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(where)
    values.ValueClass = values.MultiProcessValue()
    _state.update(role=role_name, directory=where)
    return True


def _connect_celery_child_exit() -> None:
    """Mark a prefork child dead as it exits (its live gauges vanish, counts stay)."""
    try:
        from celery.signals import worker_process_shutdown
    except ImportError:  # pragma: no cover - celery is a dependency
        return

    def _child_exit(sender: Any = None, pid: int | None = None, **_: Any) -> None:
        mark_dead(pid or os.getpid())

    worker_process_shutdown.connect(_child_exit, weak=False,
                                    dispatch_uid="cheeto-metrics-child-exit")


def mark_dead(pid: int) -> None:
    where = directory()
    if where is not None:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid, str(where))


def _prune_dead() -> None:
    """Remove the live gauge files of pids that are gone (children killed outright)."""
    where = directory()
    if where is None:
        return
    for path in glob.glob(os.path.join(where, "gauge_live*_*.db")):
        match = re.search(r"_(\d+)\.db$", path)
        if match is None:
            continue
        pid = int(match.group(1))
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            mark_dead(pid)
        except PermissionError:
            pass


class _BuildInfo:
    def __init__(self, role_name: str) -> None:
        self.role = role_name

    def collect(self) -> Iterator[Any]:
        from .. import version
        from .families import collected

        yield collected("cheeto_build_info", [({"version": version(), "role": self.role}, 1)])


class _RoleCollectors:
    """The collectors registered for a role, looked up at each scrape."""

    def __init__(self, role_name: str, extra: Iterable[Any]) -> None:
        self.role = role_name
        self.extra = list(extra)

    def collect(self) -> Iterator[Any]:
        for collector in [*self.extra, *collectors_for(self.role)]:
            try:
                produced = collector.collect() if hasattr(collector, "collect") else collector()
                yield from produced
            except Exception:  # one broken collector must not blank the whole scrape
                log.exception("metrics collector %r failed", collector)


def build_registry(role_name: str, extra: Iterable[Any] = ()) -> Any:
    """What a scrape of this process group shows: the recorded families (summed over
    the multiprocess files, or this process's own registry), the role's collectors and
    ``cheeto_build_info``."""
    from prometheus_client import CollectorRegistry, multiprocess

    from .families import REGISTRY

    registry = CollectorRegistry(auto_describe=False)
    where = directory()
    if where is not None:
        _prune_dead()
        multiprocess.MultiProcessCollector(registry, path=str(where))
    else:
        registry.register(_Forward(REGISTRY))
    registry.register(_RoleCollectors(role_name, extra))
    registry.register(_BuildInfo(role_name))
    return registry


class _Forward:
    """Another registry's families, as one collector of this one."""

    def __init__(self, source: Any) -> None:
        self.source = source

    def collect(self) -> Iterator[Any]:
        yield from self.source.collect()


def render(registry: Any) -> bytes:
    from prometheus_client import generate_latest

    return generate_latest(registry)


def authorized(header: str | None, token: str | None) -> bool:
    """Whether an ``Authorization`` header carries ``token`` (always, with no token)."""
    if not token:
        return True
    if not header or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header[len("Bearer "):].strip().encode(), token.encode())


@dataclass
class Server:
    """A running exposition server (``port`` is the bound one: ``serve(port=0)``)."""

    host: str
    port: int
    httpd: ThreadingHTTPServer
    thread: threading.Thread

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def serve(host: str, port: int, role_name: str, collectors: Iterable[Any] = (),
          token: str | None = None) -> Server:
    """Serve ``GET /metrics`` for ``role_name`` on ``host:port`` from a daemon thread."""
    from prometheus_client import CONTENT_TYPE_LATEST

    extra = list(collectors)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path not in ("/metrics", "/metrics/"):
                self._answer(404, b"not found: try /metrics\n", "text/plain")
                return
            if not authorized(self.headers.get("Authorization"), token):
                self._answer(401, b"unauthorized\n", "text/plain",
                             {"WWW-Authenticate": 'Bearer realm="metrics"'})
                return
            try:
                body = render(build_registry(role_name, extra))
            except Exception:
                log.exception("metrics exposition failed")
                self._answer(500, b"metrics exposition failed\n", "text/plain")
                return
            self._answer(200, body, CONTENT_TYPE_LATEST)

        def _answer(self, status: int, body: bytes, content_type: str,
                    headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("metrics %s", format % args)

    httpd = ThreadingHTTPServer((host, port), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, name=f"metrics-{role_name}",
                              daemon=True)
    thread.start()
    bound = httpd.server_address[1]
    log.info("metrics: serving %s on http://%s:%d/metrics", role_name, host, bound)
    return Server(host, int(bound), httpd, thread)


def start_for(config: Any, role_name: str, port: int | None, *, name: str = "",
              multiprocess: bool = True) -> Server | None:
    """Activate and serve for a daemon process from the ``metrics`` config section.

    ``port`` None or 0: nothing (no recording either). ``multiprocess``: a Celery worker
    (prefork children add up in ``<metrics.directory>/cheeto-metrics/<role>-<name>-<port>``,
    private to this server: the port is its own while it runs); beat is one process.
    A port already taken is one ``Conflict`` line, before Celery starts."""
    from ..errors import Conflict

    if not port:
        return None
    settings = config.metrics
    where = None
    if multiprocess:
        where = default_directory(settings.directory, "-".join(
            part for part in (role_name, name, str(port)) if part))
    try:  # the port first: a taken one turns nothing on
        server = serve(settings.listen_address, port, role_name, token=settings.bearer())
    except OSError as exc:
        raise Conflict(f"cannot serve metrics on {settings.listen_address}:{port}: "
                       f"{exc.strerror or exc}") from None
    try:
        activate(role_name, where)
    except PermissionError as exc:
        server.stop()
        raise Conflict(f"metrics directory: {exc}") from None
    return server
