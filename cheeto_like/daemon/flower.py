"""Flower, the Celery monitor, run on the daemon's own Celery app (reference §7.5, fixed).

Flower runs on ``make_app(config)``, so it inherits the broker URL, the broker's TLS
settings and the result backend; nothing is configured twice. Two things are derived:

- the broker **management API URL** (Flower's broker tab reads queue lengths from it):
  ``http`` for ``amqp://`` and ``https`` for ``amqps://`` (or when ``broker_use_ssl`` is
  set), the broker's host, the broker's credentials (kept percent-encoded as given), and
  port 15672 (http) / 15671 (https) unless ``--broker-api-port`` says otherwise; an
  explicit ``--broker-api URL`` wins. The reference hard-coded ``https://…:15671`` and
  split the URL on its last ``:``, which broke for a URL without a port;
- the broker URL *Flower* connects with: an ``amqps://`` URL becomes ``amqp://`` with the
  port made explicit (5671 when the URL had none) and TLS kept through
  ``broker_use_ssl``, because Flower's broker tab only knows the ``amqp`` scheme in
  older releases. Workers and beat keep the URL as configured.

Basic auth comes from ``$FLOWER_BASIC_AUTH`` or the config's ``daemon.flower_basic_auth``
(``flower_credentials``), never from the command line, and reaches Flower through its
environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from ..config import Config
from ..errors import InvalidInput
from ..web.client_address import is_loopback

MANAGEMENT_PORTS = {"http": 15672, "https": 15671}
AMQP_SCHEMES = ("amqp", "pyamqp", "librabbitmq")
AMQPS_PORT = 5671


def _first_url(broker_url: str) -> str:
    """Celery accepts ``url1;url2`` for fail-over; the first one names the broker."""
    return broker_url.split(";")[0].strip()


def _wants_tls(parts: Any) -> bool:
    query = dict(parse_qsl(parts.query))
    return parts.scheme == "amqps" or query.get("ssl", "").lower() in ("1", "true", "yes")


def is_amqp(broker_url: str) -> bool:
    scheme = urlsplit(_first_url(broker_url)).scheme.lower()
    return scheme in (*AMQP_SCHEMES, "amqps")


def broker_api_url(broker_url: str, *, tls: bool = False, port: int | None = None) -> str | None:
    """The RabbitMQ management API base URL (``…/api/``) for an AMQP broker URL, or None
    for other transports (Flower then has no broker tab)."""
    parts = urlsplit(_first_url(broker_url))
    if parts.scheme.lower() not in (*AMQP_SCHEMES, "amqps"):
        return None
    scheme = "https" if tls or _wants_tls(parts) else "http"
    host = parts.hostname or "localhost"
    if ":" in host:
        host = f"[{host}]"
    userinfo = parts.netloc.rpartition("@")[0] if "@" in parts.netloc else ""
    netloc = f"{host}:{port or MANAGEMENT_PORTS[scheme]}"
    if userinfo:
        netloc = f"{userinfo}@{netloc}"
    return urlunsplit((scheme, netloc, "/api/", "", ""))


def flower_broker_url(broker_url: str) -> tuple[str, bool]:
    """(URL for Flower's connection, whether TLS must be forced through broker_use_ssl)."""
    first = _first_url(broker_url)
    parts = urlsplit(first)
    if parts.scheme.lower() != "amqps":
        return broker_url, False
    netloc = parts.netloc if parts.port else f"{parts.netloc}:{AMQPS_PORT}"
    return urlunsplit(("amqp", netloc, parts.path, parts.query, parts.fragment)), True


BASIC_AUTH_ENV = "FLOWER_BASIC_AUTH"


def check_basic_auth(value: str, source: str = f"${BASIC_AUTH_ENV}") -> str:
    """``user:password[,user:password…]``: every pair has a user and a password."""
    pairs = value.split(",")
    for pair in pairs:
        user, sep, password = pair.partition(":")
        if not sep or not user.strip() or not password:
            raise InvalidInput(f"{source} takes user:password pairs separated by commas "
                               "(a password cannot contain a comma)")
    return value


def flower_credentials(config: Config, environ: Mapping[str, str] | None = None) -> str | None:
    """Flower's basic auth: ``$FLOWER_BASIC_AUTH``, else ``daemon.flower_basic_auth``.

    Never a command-line option: every local user can read another process's argv
    (``ps``), but not its environment or a 0600 config file.
    """
    env = os.environ if environ is None else environ
    if value := env.get(BASIC_AUTH_ENV):
        return check_basic_auth(value)
    configured = config.daemon.flower_basic_auth if config.daemon is not None else None
    if configured is not None:
        return check_basic_auth(configured.get_secret_value(), "daemon.flower_basic_auth")
    return None


_SECRET_FLOWER_OPTIONS = ("--basic_auth", "--basic-auth", "--broker_api", "--broker-api",
                         "--auth", "--oauth2_secret", "--oauth2-secret")


def check_no_secret_args(extra: list[str], broker_api: str | None) -> None:
    """Refuse credentials on the command line (``ps`` shows them to every local user):
    Flower options after ``--`` that carry secrets, or a ``--broker-api`` URL with a
    password."""
    for arg in extra:
        if arg.split("=", 1)[0] in _SECRET_FLOWER_OPTIONS:
            raise InvalidInput(f"{arg.split('=', 1)[0]} would put a secret in the process "
                               f"list; use ${BASIC_AUTH_ENV} or daemon.flower_basic_auth "
                               "(basic auth) or $FLOWER_BROKER_API (the management API)")
    try:
        password = urlsplit(broker_api).password if broker_api else None
    except ValueError:
        raise InvalidInput("--broker-api is not a URL") from None
    if password is not None:
        raise InvalidInput("--broker-api must not hold a password (it would show in the "
                           "process list); set $FLOWER_BROKER_API instead")


def check_flower_bind(address: str, basic_auth: str | None, *, insecure: bool) -> None:
    """Flower can revoke and kill tasks: without credentials it stays on loopback."""
    if not basic_auth and not is_loopback(address) and not insecure:
        raise InvalidInput(f"refusing to serve Flower on {address} without basic auth "
                           f"(${BASIC_AUTH_ENV} or daemon.flower_basic_auth; it can revoke "
                           "and terminate tasks); pass --insecure if the network in front "
                           "of it is trusted")


def flower_overrides(config: Config) -> dict[str, Any]:
    """Celery settings for the Flower process (the broker URL as Flower needs it)."""
    from .settings import broker_ssl

    assert config.daemon is not None
    url, force_tls = flower_broker_url(config.daemon.broker_url)
    if not force_tls:
        return {}
    return {"broker_url": url, "broker_use_ssl": broker_ssl(config.daemon.broker_use_ssl) or True}


def flower_command(config: Config, *, address: str, port: int, basic_auth: str | None = None,
                   url_prefix: str = "", broker_api: str | None = None,
                   broker_api_port: int | None = None,
                   extra: list[str] | None = None) -> tuple[list[str], dict[str, str]]:
    """(``celery flower`` arguments, environment). Flower takes tornado-style
    ``--name=value`` arguments and ``FLOWER_<NAME>`` variables; the two secrets (the
    management API URL carries the broker's credentials) go in the environment, so they
    do not show in ``ps``."""
    assert config.daemon is not None
    argv = ["flower", f"--address={address}", f"--port={port}"]
    env: dict[str, str] = {}
    api = broker_api or broker_api_url(config.daemon.broker_url,
                                       tls=config.daemon.broker_use_ssl is not None,
                                       port=broker_api_port)
    if api is not None:
        env["FLOWER_BROKER_API"] = api
    if basic_auth:
        env["FLOWER_BASIC_AUTH"] = check_basic_auth(basic_auth)
    prefix = url_prefix.strip("/")
    if prefix:
        argv.append(f"--url-prefix={prefix}")
    return [*argv, *(extra or [])], env
