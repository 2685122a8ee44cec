"""``cheeto daemon healthcheck``: one HEALTHCHECK command for every container role.

The image runs every role (``daemon api``, ``daemon flower``, ``daemon worker``, ``daemon
beat``, …), so the check first finds out which one this container runs, from PID 1's
command line (the entrypoint ``exec``s cheeto, so PID 1 *is* the role):

- ``api``: GET ``/healthz`` on the port and prefix the API listens on (it answers 200
  only when the store does);
- ``flower``: GET Flower's ``/healthcheck``;
- anything else (workers, beat, a one-off command): the store answers a ping and, for a
  worker or beat, the broker accepts a connection.

Exit status 0 is healthy, 1 unhealthy, with one line saying why.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from ..config import ApiConfig, Config

ROLES = ("api", "flower", "worker", "beat", "up")
CMDLINE = Path(os.environ.get("CHEETO_HEALTH_CMDLINE", "/proc/1/cmdline"))
_ANY_ADDRESS = ("0.0.0.0", "::", "")


@dataclass(frozen=True)
class Role:
    name: str  # api, flower, worker, beat, up, or "other"
    args: list[str]


def detect_role(cmdline: Path = CMDLINE) -> Role:
    """The ``cheeto daemon <role> …`` that PID 1 runs, or ``other``."""
    try:
        argv = [a.decode(errors="replace") for a in cmdline.read_bytes().split(b"\0") if a]
    except OSError:
        return Role("other", [])
    for i, arg in enumerate(argv[:-1]):
        if arg == "daemon" and argv[i + 1] in ROLES:
            return Role(argv[i + 1], argv[i + 2:])
    return Role("other", [])


def _flags(args: list[str], *names: str) -> dict[str, str | None]:
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for name in names:
        parser.add_argument(name)
    known, _ = parser.parse_known_args(args)
    return {k: v for k, v in vars(known).items()}


def role_config(role: Role, config: Config) -> Config:
    """The config the role was started with (its own ``--config``/``--profile``, if any)."""
    flags = _flags(role.args, "--config", "--profile", "-p")
    path, profile = flags["config"], flags["profile"] or flags["p"]
    if not path and not profile:
        return config
    from ..config import load_config

    return load_config(path or config.path, profile or config.profile)


def _loopback(host: str | None, default: str) -> str:
    host = host or default
    if host in _ANY_ADDRESS:
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def probe_url(role: Role, config: Config) -> str | None:
    """The URL to GET for an HTTP role (None for the others)."""
    if role.name == "api":
        api = config.api or ApiConfig()
        flags = _flags(role.args, "--host", "--port")
        scheme = "https" if api.tls_cert else "http"
        host = _loopback(flags["host"], api.host)
        return f"{scheme}://{host}:{flags['port'] or api.port}{api.prefix}/healthz"
    if role.name == "flower":
        flags = _flags(role.args, "--address", "--port", "--url-prefix")
        prefix = (flags["url_prefix"] or "").strip("/")
        host = _loopback(flags["address"], "127.0.0.1")
        return (f"http://{host}:{flags['port'] or 5555}"
                f"{'/' + prefix if prefix else ''}/healthcheck")
    return None


def check_http(url: str, timeout: float = 5.0) -> str | None:
    """None when ``url`` answers 200, else why not. A loopback TLS probe does not verify
    the certificate (it names the public host, not 127.0.0.1)."""
    import httpx

    try:
        response = httpx.get(url, timeout=timeout, verify=False)
    except httpx.HTTPError as exc:
        return f"{url}: {type(exc).__name__}: {exc}"
    if response.status_code != 200:
        return f"{url}: HTTP {response.status_code} {response.text[:200].strip()}"
    return None


async def check_store(config: Config) -> str | None:
    from ..errors import CheetoError
    from ..store import connect

    try:
        store = await connect(config.mongo, autostart=False, create_indexes=False)
    except CheetoError as exc:
        return exc.message
    await store.close()
    return None


def check_broker(config: Config, timeout: float = 5.0) -> str | None:
    """None when the broker accepts a connection (with the configured TLS)."""
    from .app import make_app

    app = make_app(config)
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=timeout)
    except Exception as exc:  # kombu raises several kinds; any of them is "unhealthy"
        return f"broker: {type(exc).__name__}: {exc}"
    return None
