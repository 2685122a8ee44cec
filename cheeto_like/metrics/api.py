"""The API's side of metrics: a request middleware, ``GET /metrics``, and the families
the API derives from the store when Prometheus scrapes.

Requests are counted by the matched route's path *template* (``/api/v1/users/{name}``,
never ``/api/v1/users/alice``: a label value per user would be unbounded and would name
people), ``unmatched`` when no route matched, and a method outside the usual seven is
``other``. The dashboard's pages are routes too, so they are counted the same way.

The API runs as one uvicorn process (``daemon api`` serves one app object, no worker
processes), so it records into a plain in-process registry: no multiprocess files to
write or sum. Should it ever run several workers, ``activate`` with a directory is the
switch (the exposition already reads the directory when there is one).

``/metrics`` adds what only the store knows, computed on the event loop before the
rendering and kept ``STORE_TTL_SECONDS`` (several Prometheus servers scraping every 15 s
cost one set of reads per 10 s):

- ``cheeto_sync_last_success_timestamp_seconds``: the end of the newest ``ok`` run per
  (target, site), one ``$group`` over the runs;
- ``cheeto_sync_period_seconds``: how often the config's task blocks run each sync
  (the interval, or for a crontab the gap between its next two fire times), per site
  the block runs for; with the previous family it makes the "stale for two periods"
  alert a single expression;
- ``cheeto_usage_lag_seconds``: now minus the newest job end in the usage ledger, per
  site with a usage cursor (one indexed ``(site, end_epoch)`` read per site).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import Request
from fastapi.responses import PlainTextResponse, Response

from .. import metrics

log = logging.getLogger("cheeto_like.metrics")

STORE_TTL_SECONDS = 10.0
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
UNMATCHED = "unmatched"
# the daemon tasks whose runs are syncs (SyncRun.target), for cheeto_sync_period_seconds
SYNC_TASKS = {"slurm_sync": "slurm", "ldap_sync": "ldap", "puppet_sync": "puppet"}


def route_template(scope: dict[str, Any]) -> str:
    """The path template of the route the router matched, or ``unmatched``."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if not isinstance(path, str):
        return UNMATCHED
    from starlette.routing import Mount

    if isinstance(route, Mount):  # static files: the mount, not the file asked for
        return f"{path.rstrip('/')}/{{path}}"
    return path or "/"


class RequestMetrics:
    """Pure ASGI middleware: counts and times every HTTP request by route template.

    Installed outermost but inside Starlette's error middleware, so a handler's
    exception is seen here as one (status 500) before that middleware answers."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not metrics.active():
            await self.app(scope, receive, send)
            return
        status = [500]
        started = time.perf_counter()

        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            method = scope.get("method", "GET")
            method = method if method in METHODS else "other"
            route = route_template(scope)
            metrics.inc("cheeto_api_requests_total", method=method, route=route,
                        status=str(status[0]))
            metrics.observe("cheeto_api_request_duration_seconds",
                            time.perf_counter() - started, method=method, route=route)


# -- store-derived families -------------------------------------------------------------


def _epoch(value: Any) -> float | None:
    """A datetime (or the embedded store's ``{"$date": …}`` text) as Unix seconds."""
    if isinstance(value, str):
        try:
            value = json.loads(value).get("$date")
        except (ValueError, AttributeError):
            pass
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.timestamp()
    return None


async def last_successes(database: Any) -> list[tuple[dict[str, str], float]]:
    """(labels, end time) of the newest ``ok`` run per (target, site): one aggregation.
    The key is one string (the embedded store groups on one field only)."""
    pipeline = [{"$match": {"status": "ok"}},
                {"$group": {"_id": {"$concat": ["$target", "\u001f", "$site"]},
                            "last": {"$max": "$finished_at"}}}]
    rows: list[tuple[dict[str, str], float]] = []
    async for doc in await database["sync_runs"].aggregate(pipeline):
        key, when = doc.get("_id"), _epoch(doc.get("last"))
        if not isinstance(key, str) or "\u001f" not in key or when is None:
            continue
        target, site = key.split("\u001f", 1)
        rows.append(({"target": target, "site": site}, when))
    return rows


def schedule_seconds(schedule: int | float | str, timezone: str) -> float | None:
    """An interval's seconds; a crontab's gap between its next two fire times."""
    if isinstance(schedule, int | float):
        return float(schedule)
    from zoneinfo import ZoneInfo

    from ..daemon.schedule import parse_schedule

    parsed = parse_schedule(schedule)
    if isinstance(parsed, timedelta):
        return parsed.total_seconds()
    now = datetime.now(ZoneInfo(timezone))
    parsed.nowfun = lambda: now
    first = now + parsed.remaining_estimate(now)
    second = now + parsed.remaining_estimate(first)
    return (second - first).total_seconds()


def sync_periods(config: Any) -> list[tuple[dict[str, str], float]]:
    """(labels, seconds) per (target, site) the config's sync task blocks schedule."""
    if config.daemon is None:
        return []
    from ..daemon.config import TASKS, TaskDisabled, task_block, task_sites
    from ..errors import CheetoError

    rows: list[tuple[dict[str, str], float]] = []
    for task, target in SYNC_TASKS.items():
        spec = TASKS[task]
        try:
            block = task_block(config, spec)
            if block.schedule is None:
                continue
            seconds = schedule_seconds(block.schedule, config.daemon.timezone)
            sites = task_sites(config, spec, block, None)
        except (TaskDisabled, CheetoError, ValueError):
            continue
        if seconds is not None and seconds > 0:
            rows += [({"target": target, "site": site}, seconds) for site in sites]
    return rows


async def usage_lags(database: Any, now: float) -> list[tuple[dict[str, str], float]]:
    """(labels, now - newest job end) per site with a usage cursor."""
    sites = [doc["site"] async for doc in database["usage_cursors"].find(
        {}, {"site": 1, "_id": 0}) if isinstance(doc.get("site"), str)]

    async def newest(site: str) -> tuple[dict[str, str], float] | None:
        found = await database["usage_records"].find(
            {"site": site}, {"end_epoch": 1, "_id": 0}).sort("end_epoch", -1).limit(
            1).to_list(1)
        if not found or not isinstance(found[0].get("end_epoch"), int | float):
            return None
        return {"site": site}, max(0.0, now - float(found[0]["end_epoch"]))

    found = await asyncio.gather(*(newest(site) for site in sorted(set(sites))))
    return [row for row in found if row is not None]


class StoreFamilies:
    """The store-derived families, cached ``ttl`` seconds; one refresh at a time."""

    def __init__(self, config: Any, ttl: float = STORE_TTL_SECONDS) -> None:
        self.config = config
        self.ttl = ttl
        self._rows: dict[str, list[tuple[dict[str, str], float]]] = {}
        self._at = -math.inf
        self._lock = asyncio.Lock()

    async def rows(self, database: Any) -> dict[str, list[tuple[dict[str, str], float]]]:
        if time.monotonic() - self._at < self.ttl:
            return self._rows
        async with self._lock:
            if time.monotonic() - self._at < self.ttl:
                return self._rows
            fresh: dict[str, list[tuple[dict[str, str], float]]] = {
                "cheeto_sync_period_seconds": sync_periods(self.config)}
            if database is not None:
                try:
                    fresh["cheeto_sync_last_success_timestamp_seconds"] = (
                        await last_successes(database))
                    fresh["cheeto_usage_lag_seconds"] = await usage_lags(database, time.time())
                except Exception as exc:  # a scrape still answers: the API's own families
                    log.warning("metrics: reading the store failed: %s", exc)
                    fresh = {**self._rows, **fresh}
            self._rows, self._at = fresh, time.monotonic()
        return self._rows


class _Rows:
    """A collector over rows computed before the scrape (on the event loop)."""

    def __init__(self, rows: dict[str, list[tuple[dict[str, str], float]]]) -> None:
        self.rows = rows

    def collect(self) -> Iterable[Any]:
        from .families import collected

        for name, rows in self.rows.items():
            yield collected(name, rows)


def install_metrics(app: Any, config: Any) -> None:
    """The middleware and ``GET <prefix>/metrics`` (not in the OpenAPI document), when
    ``metrics.api`` is on. The middleware records only in a process that activated
    metrics (``daemon api``); the route always answers."""
    from .process import authorized, build_registry, render

    settings = config.metrics
    if not settings.api:
        return
    prefix = config.api.prefix if config.api is not None else ""
    derived = StoreFamilies(config)
    app.add_middleware(RequestMetrics)

    @app.get(f"{prefix}/metrics", include_in_schema=False)
    async def metrics_route(request: Request) -> Response:
        if not authorized(request.headers.get("authorization"), settings.bearer()):
            return PlainTextResponse("a metrics token is needed: Authorization: Bearer "
                                     "<token>\n", status_code=401,
                                     headers={"WWW-Authenticate": 'Bearer realm="metrics"'})
        store = getattr(request.app.state, "store", None)
        rows = await derived.rows(store.database if store is not None else None)
        body = render(build_registry("api", [_Rows(rows)]))
        from prometheus_client import CONTENT_TYPE_LATEST

        return Response(body, media_type=CONTENT_TYPE_LATEST,
                        headers={"Cache-Control": "no-store"})
