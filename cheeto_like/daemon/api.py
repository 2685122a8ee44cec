"""The read-only REST API the puppet servers call (DESIGN §6; reference §7.6, fixed).

``create_api(config, store=None)`` builds the FastAPI app. Routes (under ``api.prefix``):

- ``GET /puppet/root-keys/{site}``: root's ``authorized_keys`` as text, or
  ``{"root-ssh-public-keys": [...]}`` when the client prefers ``application/json``;
- ``GET /puppet/storage/{site}``: the storage export as JSON;
- ``GET /healthz``: 200 when the store answers a ping, else 503 (no key needed);
- ``/openapi.json`` and ``/docs``.

A site is given by name, fqdn or alias (case-insensitively); an unknown one is a 404,
never the global key set. ``X-API-Key`` is compared in constant time; with no key
configured the API is open, which ``check_bind`` only allows on loopback. Everything is
a query: no request writes anything (no History rows).
"""

from __future__ import annotations

import ipaddress
import logging
import re
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request, Security
from fastapi import Path as PathParam
from fastapi.exceptions import HTTPException
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.security import APIKeyHeader
from pydantic import BaseModel, ConfigDict, Field
from pymongo.errors import PyMongoError

from .. import __version__
from ..config import ApiConfig, Config
from ..errors import CheetoError, InvalidInput
from ..models import Site
from ..queries.exports import root_key_blocks, root_keys_list, root_keys_text, storage_export
from ..queries.site import find_site
from ..store import Store, connect

log = logging.getLogger("cheeto_like.api")

API_KEY_HEADER = "X-API-Key"
# Names, fqdns and aliases are lowercase letters, digits, dots and dashes (models/fields.py);
# anything else cannot name a site, so it is a 404 without a query.
_SITE_VALUE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
_NO_STORE = {"Cache-Control": "no-store"}


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
    detail: str | None = None


class ErrorDetail(BaseModel):
    detail: str


_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorDetail, "description": "missing or wrong X-API-Key"},
    404: {"model": ErrorDetail, "description": "no site has this name, fqdn or alias"},
    503: {"model": ErrorDetail, "description": "the store does not answer"},
}


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback address literals (127.0.0.0/8, ::1)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(api: ApiConfig, host: str, *, insecure: bool) -> None:
    """Refuse to serve an open API (no ``api_key``) beyond loopback unless ``insecure``."""
    if api.api_key is None and not is_loopback(host) and not insecure:
        raise InvalidInput(f"no api.api_key is configured, so the API is open; refusing to "
                           f"listen on {host} (only loopback). Set api.api_key, or pass "
                           f"--insecure if the network in front of it is trusted")


def prefers_json(accept: str | None) -> bool:
    """Whether an ``Accept`` header prefers application/json over text/plain.

    Plain text is the default (no header, ``*/*``, ties); quality values are honoured.
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
        media = media.lower()
        for target in ("application/json", "text/plain"):
            if media in (target, f"{target.split('/')[0]}/*", "*/*"):
                specific = media == target
                # a specific range beats a wildcard of the same quality
                score = quality + (1e-6 if specific else 0.0)
                best[target] = max(best.get(target, -1.0), score)
    return best.get("application/json", -1.0) > best.get("text/plain", -1.0)


def create_api(config: Config, store: Store | None = None) -> FastAPI:
    """The FastAPI app; it connects (and closes) its own store unless one is injected."""
    api = config.api or ApiConfig()
    prefix = api.prefix

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if store is not None:
            yield
            return
        connected = await connect(config.mongo, autostart=False, create_indexes=False)
        app.state.store = connected
        log.info("API connected to %s", connected.description)
        try:
            yield
        finally:
            await connected.close()

    app = FastAPI(
        title="cheeto", version=__version__, lifespan=lifespan, root_path=api.root_path,
        openapi_url=f"{prefix}/openapi.json", docs_url=f"{prefix}/docs", redoc_url=None,
        description="Read-only exports for puppet: root SSH keys and the storage map of a "
                    "site. Send the key in the X-API-Key header.")
    app.state.store = store

    key_header = APIKeyHeader(name=API_KEY_HEADER, auto_error=False,
                              description="the api.api_key of the server's config")
    expected = api.api_key.get_secret_value().encode() if api.api_key is not None else None

    async def require_key(key: str | None = Security(key_header)) -> None:
        if expected is None:
            return
        given = (key or "").encode("utf-8", "surrogateescape")
        if not key or not secrets.compare_digest(given, expected):
            raise HTTPException(401, "invalid or missing API key",
                                headers={"WWW-Authenticate": API_KEY_HEADER})

    async def site_named(value: str) -> Site:
        found = await find_site(value) if _SITE_VALUE.fullmatch(value) else None
        if found is None:
            raise HTTPException(404, f"unknown site {value!r}")
        return found

    site_param = PathParam(description="site name, fqdn or alias (case-insensitive)")
    router = APIRouter(prefix=prefix, dependencies=[Depends(require_key)], tags=["puppet"])

    @router.get(
        "/puppet/root-keys/{site}", response_model=None,
        summary="root's authorized_keys for a site",
        responses={200: {"description": "text/plain authorized_keys, or JSON when the "
                                        "client prefers application/json",
                         "content": {"text/plain": {"schema": {"type": "string"}},
                                     "application/json": {"schema": RootKeys.model_json_schema(
                                         by_alias=True)}}},
                   **_ERRORS})
    async def root_keys(request: Request, site: str = site_param) -> Response:
        found = await site_named(site)
        blocks = await root_key_blocks(found.name)
        headers = {"Vary": "Accept", **_NO_STORE}
        if prefers_json(request.headers.get("accept")):
            return JSONResponse({"root-ssh-public-keys": root_keys_list(blocks)},
                                headers=headers)
        return PlainTextResponse(root_keys_text(blocks), headers=headers)

    @router.get("/puppet/storage/{site}", response_model=StorageExport,
                summary="the storage export of a site", responses=_ERRORS)
    async def storage(site: str = site_param) -> JSONResponse:
        found = await site_named(site)
        return JSONResponse(await storage_export(found.name), headers=_NO_STORE)

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
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return JSONResponse({"status": "unavailable", "detail": detail}, status_code=503,
                                headers=_NO_STORE)
        return JSONResponse({"status": "ok"}, headers=_NO_STORE)

    app.include_router(router)
    app.include_router(health)

    @app.exception_handler(CheetoError)
    async def cheeto_error(request: Request, exc: CheetoError) -> JSONResponse:
        return JSONResponse({"detail": exc.message}, status_code=exc.http_status)

    @app.exception_handler(PyMongoError)
    async def store_error(request: Request, exc: PyMongoError) -> JSONResponse:
        log.warning("store error on %s: %s", request.url.path, exc)
        return JSONResponse({"detail": "the store is unavailable"}, status_code=503)

    return app


def uvicorn_options(api: ApiConfig, host: str, port: int) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.run``/``uvicorn.Config`` (TLS when configured)."""
    options: dict[str, Any] = {"host": host, "port": port, "proxy_headers": True,
                               "server_header": False, "log_level": "info"}
    if api.tls_cert is not None and api.tls_key is not None:
        options |= {"ssl_certfile": str(api.tls_cert), "ssl_keyfile": str(api.tls_key)}
    return options
