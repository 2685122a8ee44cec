"""The REST API: the exports the puppet servers call (DESIGN §6; reference §7.6, fixed),
``/api/v1`` (reads, and writes through operations) and the web dashboard.

``create_api(config, store=None)`` builds the FastAPI app. Routes (under ``api.prefix``):

- ``GET /puppet/root-keys/{site}``: ``{"root-ssh-public-keys": [...]}`` (the reference's
  shape, which puppet code is written against), or root's ``authorized_keys`` as text
  when the client prefers ``text/plain``;
- ``GET /puppet/storage/{site}``: the storage export as JSON;
- ``GET /healthz``: 200 when the store answers a ping, else 503 (no key needed; the body
  carries ``status`` and cheeto-like's ``version``,
  never names the store's address);
- ``/openapi.json`` and ``/docs`` (Swagger UI served from ``web/static/``, so it works
  offline).

A site is given by name, fqdn or alias (case-insensitively); an unknown one is a 404,
never the global key set. The puppet routes take a managed key (``ng apikey``, scope
``puppet:read``), an operator's token, or the deprecated static ``api.api_key``
(compared in constant time); none of them is needed to start. Root keys refuse an
anonymous caller whatever the config; only an API started ``--insecure`` (without a
static key and without ``managed_keys_only``) serves the storage map anonymously.
The puppet exports are queries: they write nothing (no History rows); ``/api/v1``'s
writes and the dashboard's forms run operations (``web/``).

Exports are cached per site as rendered bodies (``ExportCache``: a hit serialises
nothing) and rebuilt when the site's data generation moves (every operation bumps the
generations of the sites it touches, in its transaction) or after ``api.cache_seconds``
(default 30). A rebuild runs in the background while the previous body is served; only a
site's very first request waits, and concurrent requests share that one build. The
``X-Cache`` header says ``hit``, ``stale`` or ``miss``. The generations are read at most
every ``api.generation_poll_seconds`` (default 1), so a change shows within about that
plus one rebuild.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi import Path as PathParam
from fastapi.exceptions import HTTPException
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field
from pymongo.errors import PyMongoError

from .. import version as package_version
from ..auth.tokens import TokenIssuer
from ..config import ApiConfig, Config
from ..errors import CheetoError, ConfigError
from ..metrics.api import install_metrics
from ..operations.generations import poll_generations
from ..queries.exports import root_keys as root_key_export
from ..queries.exports import root_keys_list, root_keys_text, storage_export
from ..queries.generations import Generation, site_generation
from ..queries.site import find_site
from ..store import Store, connect
from .api_v1 import install_v1
from .client_address import is_loopback
from .dashboard import install_dashboard
from .deps import puppet_access, puppet_map_access

log = logging.getLogger("cheeto_like.api")

API_KEY_HEADER = "X-API-Key"
# Names, fqdns and aliases are lowercase letters, digits, dots and dashes (models/fields.py);
# anything else cannot name a site, so it is a 404 without a query.
_SITE_VALUE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
_NO_STORE = {"Cache-Control": "no-store"}
GENERATION_POLL_SECONDS = 1.0  # api.generation_poll_seconds: how stale a body may be
MAX_REMEMBERED_SITE_NAMES = 1024  # spellings of site names (fqdn, alias) the cache keeps


class RootKeys(BaseModel):
    """The JSON form of root's authorized_keys (one entry per key)."""

    model_config = ConfigDict(populate_by_name=True)
    root_ssh_public_keys: list[str] = Field(alias="root-ssh-public-keys")


class StorageEntry(BaseModel):
    name: str
    owner: str
    group: str
    path: str
    export_options: str
    export_ranges: list[str]
    quota: str | None = Field(default=None, description="zfs entries only")
    permissions: str | None = Field(default=None, description="zfs entries only")


class StorageCategories(BaseModel):
    user: dict[str, list[StorageEntry]] = Field(description="file server -> entries")
    group: dict[str, list[StorageEntry]]
    share: dict[str, list[StorageEntry]]


class StorageExport(BaseModel):
    zfs: StorageCategories = Field(description="whole ZFS datasets we manage")
    nfs: StorageCategories = Field(description="subdirectories and unmanaged export roots")


class Health(BaseModel):
    status: str
    version: str
    detail: str | None = None


class ErrorDetail(BaseModel):
    detail: str


_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorDetail, "description": "missing or wrong X-API-Key"},
    404: {"model": ErrorDetail, "description": "no site has this name, fqdn or alias"},
    503: {"model": ErrorDetail, "description": "the store does not answer"},
}


def open_storage_map(api: ApiConfig, *, insecure: bool) -> bool:
    """Whether anonymous callers may read the storage map: only on an API started
    explicitly open (``--insecure``) that has no static key and is not
    ``managed_keys_only`` (a deployment that configured a credential meant it)."""
    return insecure and api.api_key is None and not api.managed_keys_only


def check_bind(api: ApiConfig, host: str, *, insecure: bool) -> str:
    """What a caller needs, for the start-up line. Nothing is refused any more: without
    the deprecated ``api.api_key`` the puppet routes take managed keys (``ng apikey``)
    and operators' tokens, so an API without it is not open. Root keys always need a
    credential; ``--insecure`` opens only the storage map (``open_storage_map``), which
    is worth a warning off loopback."""
    if open_storage_map(api, insecure=insecure):
        where = "" if is_loopback(host) else f" to anyone who can reach {host}"
        return (f"open: the storage map is readable without a credential{where}; "
                "root keys still need one")
    if api.api_key is not None:
        return "managed keys, tokens or the deprecated api.api_key required"
    return "a managed key (ng apikey) or a token required"


def check_tls(api: ApiConfig) -> None:
    """The certificate and key exist and are readable (else one line, not a traceback)."""
    import os

    for name, path in (("tls_cert", api.tls_cert), ("tls_key", api.tls_key)):
        if path is not None and not (path.is_file() and os.access(path, os.R_OK)):
            raise ConfigError(f"api.{name} {path} is not a readable file")


def prefers_text(accept: str | None) -> bool:
    """Whether an ``Accept`` header prefers text/plain over application/json.

    JSON is the default (no header, ``*/*``, ties), as in the reference; quality values
    are honoured.
    """
    if not accept:
        return False
    best: dict[str, float] = {}
    for item in accept.split(","):
        media, *params = (part.strip() for part in item.split(";"))
        quality = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = max(0.0, min(1.0, float(value)))
                except ValueError:
                    quality = 0.0
        if quality <= 0.0:  # q=0 means "not acceptable"
            continue
        media = media.lower()
        for target in ("application/json", "text/plain"):
            if media in (target, f"{target.split('/')[0]}/*", "*/*"):
                specific = media == target
                # a specific range beats a wildcard of the same quality
                score = quality + (1e-6 if specific else 0.0)
                best[target] = max(best.get(target, -1.0), score)
    return best.get("text/plain", -1.0) > best.get("application/json", -1.0)


@dataclass(frozen=True)
class Expiring:
    """A body that must not be served from ``at`` (wall-clock epoch seconds) on, whatever
    the generations say: an export that includes a person or key until their
    ``expires_at`` goes stale when that passes, and nothing writes (so no generation
    moves). ``ExportCache`` drops such an entry at its deadline and builds it again
    before answering."""

    value: Any
    at: float | None


class ExportCache:
    """Rendered export bodies per (route, site), rebuilt when the site's data changes.

    Every entry remembers the site's data generation (``queries.generations``) it was
    built from. The write path bumps a site's generation in the same transaction as the
    change, so a body is current exactly while its generation is. The generations are
    read by one small query, in the background, at most every ``poll`` seconds while
    requests come; the read starts the rebuilds a moved generation calls for, so a
    write shows in the bodies about ``poll`` plus one rebuild after it.

    - current (same generation, younger than ``ttl``): served;
    - outdated (a newer generation, or older than ``ttl``: exports also change with the
      clock, as keys and storages expire): the previous body is served while ONE
      background task rebuilds it, so no request waits for a rebuild;
    - missing (the first request for a site): built now; concurrent requests for it
      share that one build (a puppet fleet polling on the same minute costs one).

    - past its deadline (the builder returned ``Expiring``: the soonest expiry among what
      the body includes): never served; the request waits for the one rebuild, so a
      root key is gone from the answers the moment its holder expires.

    A rebuild records the generation read *before* it started, so a write that lands
    during the rebuild triggers another. Failures are not cached (a failed rebuild is
    logged, and the previous body keeps being served). Keys are (route, site name), so
    the cache is bounded by the number of sites. ``ttl <= 0`` disables it; without
    ``read_generations`` it is time-based only.
    """

    def __init__(self, ttl: float, *, poll: float = GENERATION_POLL_SECONDS,
                 read_generations: Callable[[], Awaitable[dict[str, int]]] | None = None,
                 ) -> None:
        self.ttl = ttl
        self.poll = poll
        self._read_generations = read_generations
        self._generations: dict[str, int] | None = None
        self._generations_at = 0.0
        self._generations_read: asyncio.Future[dict[str, int]] | None = None
        self._polling: asyncio.Task[None] | None = None
        self._builders: dict[tuple[str, str], Callable[[], Awaitable[Any]]] = {}
        # key -> (generation, soft expiry, value, hard deadline), times on time.monotonic()
        self._entries: dict[tuple[str, str], tuple[Generation, float, Any, float | None]] = {}
        self._inflight: dict[tuple[str, str], asyncio.Future[Any]] = {}
        self._refreshing: set[asyncio.Task[Any]] = set()
        self._sites: dict[str, tuple[float, str | None]] = {}

    async def generations(self) -> dict[str, int]:
        """The data generations as last read. A request that finds that read older than
        ``poll`` seconds starts ONE background read, which also starts the rebuilds it
        calls for, and goes on with the last answer: a read of the store can wait behind
        a write's transaction (the embedded store runs one at a time), and no request
        should. No task outlives the traffic (an app dropped without its lifespan, as in
        tests, leaves nothing polling). Only the very first read is awaited. With
        ``poll <= 0`` every request reads them (tests)."""
        if self._read_generations is None:  # time-based only (no store behind it)
            return {}
        if self.poll <= 0 or self._generations is None:
            return await self.refresh_generations()
        if (time.monotonic() - self._generations_at >= self.poll
                and (self._polling is None or self._polling.done())):
            self._polling = asyncio.create_task(self._poll_generations())
            self._refreshing.add(self._polling)
            self._polling.add_done_callback(self._refreshing.discard)
        return self._generations

    async def refresh_generations(self) -> dict[str, int]:
        """Read the generations now (single-flight: concurrent callers share one read)."""
        if self._read_generations is None:
            return {}
        if self._generations_read is not None:
            return await asyncio.shield(self._generations_read)
        future: asyncio.Future[dict[str, int]] = asyncio.get_running_loop().create_future()
        self._generations_read = future
        try:
            found = await self._read_generations()
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: nobody else may be waiting
            raise
        finally:
            self._generations_read = None
        if found != self._generations:
            self._sites.clear()  # a write may have added or renamed a site
        self._generations, self._generations_at = found, time.monotonic()
        future.set_result(found)
        return found

    async def _poll_generations(self) -> None:
        """One background read of the generations; rebuild what they outdated."""
        try:
            found = await self.refresh_generations()
        except Exception as exc:  # keep serving by the last answer; retry after ``poll``
            self._generations_at = time.monotonic()
            log.warning("reading the data generations failed: %s", exc)
            return
        for key, (built_from, _, _, _) in list(self._entries.items()):
            generation = site_generation(found, key[1])
            if built_from != generation and key in self._builders:
                self._rebuild(key, self._builders[key], generation)

    async def site(self, value: str,
                   resolve: Callable[[str], Awaitable[str | None]]) -> str | None:
        """``resolve(value)`` (a site's name from a name, fqdn or alias; None when there
        is none), remembered until any generation moves or ``ttl`` passes."""
        if self.ttl <= 0:
            return await resolve(value)
        await self.generations()
        now = time.monotonic()
        known = self._sites.get(value.lower())
        if known is not None and now < known[0]:
            return known[1]
        name = await resolve(value)
        if len(self._sites) > MAX_REMEMBERED_SITE_NAMES:
            self._sites.clear()
        self._sites[value.lower()] = (now + self.ttl, name)
        return name

    async def get(self, key: tuple[str, str],
                  compute: Callable[[], Awaitable[Any]]) -> tuple[Any, str]:
        """(value, ``hit``/``stale``/``miss``)."""
        if self.ttl <= 0:
            return _unwrap(await compute())[0], "miss"
        generation = site_generation(await self.generations(), key[1])
        entry = self._entries.get(key)
        if entry is not None:
            built_from, expires, value, deadline = entry
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                del self._entries[key]  # never served again: wait for the rebuild below
            else:
                if built_from == generation and now < expires:
                    return value, "hit"
                self._rebuild(key, compute, generation)
                return value, "stale"
        pending = self._inflight.get(key)
        if pending is not None:
            return await asyncio.shield(pending), "hit"
        self._builders[key] = compute
        return await self._compute(key, self._begin(key), compute, generation), "miss"

    def _rebuild(self, key: tuple[str, str], compute: Callable[[], Awaitable[Any]],
                 generation: Generation) -> None:
        """Start one background rebuild of ``key`` unless one runs already."""
        if key in self._inflight:
            return
        future = self._begin(key)  # registered now, so only one rebuild starts
        task = asyncio.create_task(self._refresh(key, future, compute, generation))
        self._refreshing.add(task)
        task.add_done_callback(self._refreshing.discard)

    def _begin(self, key: tuple[str, str]) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        return future

    async def _compute(self, key: tuple[str, str], future: asyncio.Future[Any],
                       compute: Callable[[], Awaitable[Any]], generation: Generation) -> Any:
        try:
            value, at = _unwrap(await compute())
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: nobody else may be waiting
            raise
        finally:
            del self._inflight[key]
        now = time.monotonic()
        # the wall-clock deadline on the monotonic clock the entries use
        deadline = None if at is None else now + (at - time.time())
        self._entries[key] = (generation, now + self.ttl, value, deadline)
        future.set_result(value)
        return value

    async def _refresh(self, key: tuple[str, str], future: asyncio.Future[Any],
                       compute: Callable[[], Awaitable[Any]], generation: Generation) -> None:
        try:
            await self._compute(key, future, compute, generation)
        except Exception as exc:  # the previous body keeps being served
            log.warning("refreshing %s for %s failed: %s", key[0], key[1], exc)

    async def close(self) -> None:
        """Cancel background refreshes (at shutdown)."""
        for task in list(self._refreshing):
            task.cancel()
        if self._refreshing:
            await asyncio.gather(*self._refreshing, return_exceptions=True)
        for future in self._inflight.values():
            future.cancel()
        self._inflight.clear()

    def clear(self) -> None:
        self._entries.clear()
        self._builders.clear()
        self._sites.clear()
        self._generations = None


def _unwrap(built: Any) -> tuple[Any, float | None]:
    """A builder's answer as (value, wall-clock deadline or None)."""
    if isinstance(built, Expiring):
        return built.value, built.at
    return built, None


def create_api(config: Config, store: Store | None = None, *,
               insecure: bool = False, issuer: TokenIssuer | None = None) -> FastAPI:
    """The FastAPI app; it connects (and closes) its own store unless one is injected.
    ``insecure`` (``cheeto daemon api --insecure``): anonymous callers may read the
    storage map (``open_storage_map``); root keys always need a credential. ``issuer``:
    the token issuer loaded before the app (``TokenIssuer.load``: a store-kept key);
    default: from the config's key file."""
    api = config.api or ApiConfig()
    prefix = api.prefix

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if store is not None:
            try:
                yield
            finally:
                await app.state.cache.close()
            return
        connected = await connect(config.mongo, autostart=False, create_indexes=False,
                                  long_running=True)
        app.state.store = connected
        log.info("API connected to %s", connected.description)
        try:
            yield
        finally:
            await app.state.cache.close()
            await connected.close()

    app = FastAPI(
        title="cheeto", version=package_version(), lifespan=lifespan,
        openapi_url=f"{prefix}/openapi.json", docs_url=None, redoc_url=None,
        swagger_ui_oauth2_redirect_url=None,
        description="cheeto's API: exports for puppet (root SSH keys and the storage map of "
                    "a site), and /api/v1, which reads and writes (users, groups, sites, "
                    "requests, quotas, keys; every write is an operation with its History "
                    "row). Send an API key in the X-API-Key header, or a token as Bearer.")
    _mount_docs(app, prefix)
    app.state.store = store
    cache = ExportCache(api.cache_seconds, poll=api.generation_poll_seconds,
                        read_generations=poll_generations)
    app.state.cache = cache

    async def resolve_site(value: str) -> str | None:
        found = await find_site(value)
        return found.name if found is not None else None

    async def site_named(value: str) -> str:
        """The site's name (remembered by the cache until the data changes)."""
        found = (await cache.site(value, resolve_site)
                 if _SITE_VALUE.fullmatch(value) else None)
        if found is None:
            raise HTTPException(404, f"unknown site {value!r}")
        return found

    site_param = PathParam(description="site name, fqdn or alias (case-insensitive)",
                           examples=["farm", "farm.hpc.example.org"])
    router = APIRouter(prefix=prefix, tags=["puppet"])

    @router.get(
        "/puppet/root-keys/{site}", response_model=None,
        dependencies=[Depends(puppet_access)],  # a credential always (they are root's keys)
        summary="root's authorized_keys for a site",
        responses={200: {"description": "JSON (the reference's shape), or the "
                                        "authorized_keys text when the client prefers "
                                        "text/plain",
                         "content": {"application/json": {"schema": RootKeys.model_json_schema(
                                         by_alias=True)},
                                     "text/plain": {"schema": {"type": "string"}}}},
                   **_ERRORS})
    async def root_keys(request: Request, site: str = site_param) -> Response:
        name = await site_named(site)

        async def render() -> Expiring:
            found = await root_key_export(name)
            blocks = found.blocks
            # gone from the answers when the soonest included expiry passes (no write
            # moves a generation then)
            return Expiring({"text": root_keys_text(blocks).encode(),
                             "json": _json({"root-ssh-public-keys": root_keys_list(blocks)})},
                            None if found.stale_at is None else found.stale_at.timestamp())

        bodies, state = await cache.get(("root-keys", name), render)
        headers = {"Vary": "Accept", "X-Cache": state, **_NO_STORE}
        if prefers_text(request.headers.get("accept")):
            return Response(bodies["text"], media_type="text/plain; charset=utf-8",
                            headers=headers)
        return Response(bodies["json"], media_type="application/json", headers=headers)

    @router.get("/puppet/storage/{site}", response_model=StorageExport,
                dependencies=[Depends(puppet_map_access)],
                summary="the storage export of a site", responses=_ERRORS)
    async def storage(site: str = site_param) -> Response:
        name = await site_named(site)

        async def render() -> bytes:
            return _json(await storage_export(name))

        body, state = await cache.get(("storage", name), render)
        return Response(body, media_type="application/json",
                        headers={"X-Cache": state, **_NO_STORE})

    health = APIRouter(prefix=prefix, tags=["health"])

    @health.get("/healthz", response_model=Health, summary="does the store answer?",
                responses={503: {"model": Health}})
    async def healthz(request: Request) -> JSONResponse:
        connected: Store | None = request.app.state.store
        try:
            if connected is None:
                raise RuntimeError("not connected")
            await connected.client.admin.command("ping")
        except (PyMongoError, RuntimeError) as exc:
            # the cause (with the store's hosts and ports) goes to the log only: /healthz
            # answers without a key, so its body must not map the network behind it
            log.warning("healthz: the store does not answer: %s",
                        str(exc).strip().splitlines()[0] if str(exc).strip()
                        else type(exc).__name__)
            return JSONResponse({"status": "unavailable", "version": package_version(),
                                 "detail": "the store does not answer"}, status_code=503,
                                headers=_NO_STORE)
        return JSONResponse({"status": "ok", "version": package_version()},
                            headers=_NO_STORE)

    app.include_router(router)
    app.include_router(health)

    @app.exception_handler(CheetoError)
    async def cheeto_error(request: Request, exc: CheetoError) -> JSONResponse:
        return JSONResponse({"detail": exc.message}, status_code=exc.http_status)

    @app.exception_handler(PyMongoError)
    async def store_error(request: Request, exc: PyMongoError) -> JSONResponse:
        log.warning("store error on %s: %s", request.url.path, exc)
        return JSONResponse({"detail": "the store is unavailable"}, status_code=503)

    # /api/v1, sign-in and keys (web/); after the handlers above
    install_v1(app, config, issuer=issuer)
    app.state.auth.open_puppet = open_storage_map(api, insecure=insecure)
    # GET /metrics and the request counts by route template (metrics.api; metrics/api.py)
    install_metrics(app, config)
    install_dashboard(app, config)  # the web pages at the prefix (web/dashboard/)
    return app


STATIC_DIR = Path(__file__).parent / "static"


def _mount_docs(app: FastAPI, prefix: str) -> None:
    """``/docs`` with Swagger UI's assets served from ``web/static/swagger-ui`` (a
    vendored copy of the swagger-ui-dist npm package, Apache-2.0): FastAPI's default page
    loads them from a CDN, which leaves it blank on a network without one. The validator
    badge (another outside host) is off."""
    app.mount(f"{prefix}/static", StaticFiles(directory=STATIC_DIR), name="static")

    @app.get(f"{prefix}/docs", include_in_schema=False)
    async def docs(request: Request) -> HTMLResponse:
        root = str(request.scope.get("root_path", "")).rstrip("/") + prefix
        return get_swagger_ui_html(
            openapi_url=f"{root}/openapi.json", title="cheeto - API docs",
            swagger_js_url=f"{root}/static/swagger-ui/swagger-ui-bundle.js",
            swagger_css_url=f"{root}/static/swagger-ui/swagger-ui.css",
            swagger_favicon_url=f"{root}/static/swagger-ui/favicon-32x32.png",
            swagger_ui_parameters={"validatorUrl": None})


def _json(data: Any) -> bytes:
    """Compact UTF-8 JSON, as Starlette's JSONResponse renders it."""
    return json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def uvicorn_options(api: ApiConfig, host: str, port: int) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.run``/``uvicorn.Config`` (TLS when configured).
    ``X-Forwarded-For``/``-Proto`` are believed only from ``api.trusted_proxies`` (uvicorn
    would trust loopback by default, so anyone on the host could pick their address);
    with none configured uvicorn reads no proxy headers at all."""
    options: dict[str, Any] = {"host": host, "port": port,
                               "proxy_headers": bool(api.trusted_proxies),
                               "forwarded_allow_ips": list(api.trusted_proxies),
                               "server_header": False, "log_level": "info",
                               "root_path": api.root_path}
    if api.tls_cert is not None and api.tls_key is not None:
        options |= {"ssl_certfile": str(api.tls_cert), "ssl_keyfile": str(api.tls_key)}
    return options
