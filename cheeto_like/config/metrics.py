"""The ``metrics`` section: which daemon processes serve Prometheus metrics, and where.

Global (not profiled): a host runs one set of daemon processes. The API serves
``/metrics`` on its own port (``api: true``); a worker and beat have no HTTP server of
their own, so each gets one when its port is set here (or by ``--metrics-port``). No
port = no server and no recording in that process. ``token`` (or
``$CHEETO_METRICS_TOKEN``, which wins) makes every ``/metrics`` answer 401 without
``Authorization: Bearer <token>`` (Prometheus: ``authorization: {credentials_file: …}``).
"""

from __future__ import annotations

import os

from pydantic import Field, SecretStr, field_validator

from .base import Block, UserPath

ENV_TOKEN = "CHEETO_METRICS_TOKEN"


class MetricsConfig(Block):
    """Prometheus endpoints of the daemon processes (docs/production.md)."""

    # address the worker and beat metrics servers listen on (the API's /metrics is on
    # the API's own address)
    listen_address: str = "127.0.0.1"
    # port of beat's metrics server (null: none)
    beat_port: int | None = Field(default=None, ge=1, le=65535)
    # port of the hub worker's metrics server (null: none)
    hub_worker_port: int | None = Field(default=None, ge=1, le=65535)
    # port of each site worker's metrics server, by site (a site not named: none)
    site_worker_ports: dict[str, int] = Field(default_factory=dict)
    api: bool = True  # whether the API serves GET /metrics (at its prefix)
    # bearer token every /metrics asks for ($CHEETO_METRICS_TOKEN wins); null: none
    token: SecretStr | None = None
    # parent of each server's multiprocess directory (emptied at its start); default
    # $STATE_DIRECTORY/cheeto-metrics under systemd, else the temp directory
    directory: UserPath | None = None

    @field_validator("site_worker_ports")
    @classmethod
    def _ports(cls, value: dict[str, int]) -> dict[str, int]:
        for site, port in value.items():
            if not 1 <= port <= 65535:
                raise ValueError(f"site_worker_ports: {site}: {port} is not a port (1-65535)")
        return value

    def bearer(self) -> str | None:
        """The token /metrics asks for: ``$CHEETO_METRICS_TOKEN``, else ``token``."""
        from_env = os.environ.get(ENV_TOKEN, "").strip()
        if from_env:
            return from_env
        return self.token.get_secret_value() if self.token is not None else None

    def worker_port(self, site: str | None) -> int | None:
        """The configured port of the hub worker (``site`` None) or a site's worker."""
        return self.hub_worker_port if site is None else self.site_worker_ports.get(site)
