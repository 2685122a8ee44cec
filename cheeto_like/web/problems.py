"""Every ``/api/v1`` error as an RFC 9457 problem details body
(``application/problem+json``: ``type``, ``title``, ``status``, ``detail``,
``instance``; validation errors add ``errors``).

Bad input is a 4xx, never a 500: request validation is a 422, typed errors keep their
status (``errors.py``), the store being away is a 503, and anything unexpected is a 500
whose body says nothing about the cause (the log has it). The puppet routes keep their
``{"detail": …}`` bodies (``is_v1`` tells the paths apart).
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import HTTPException, RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from pymongo.errors import PyMongoError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import CheetoError

log = logging.getLogger("cheeto_like.api")
MEDIA_TYPE = "application/problem+json"
SECURE_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
}

HSTS = "max-age=31536000"


class Problem(BaseModel):
    type: str = "about:blank"
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None
    errors: list[dict[str, Any]] | None = None


def problem(status: int, detail: str | None = None, *, instance: str | None = None,
            headers: dict[str, str] | None = None,
            errors: list[dict[str, Any]] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"type": "about:blank", "title": HTTPStatus(status).phrase,
                            "status": status}
    if detail is not None:
        body["detail"] = detail
    if instance is not None:
        body["instance"] = instance
    if errors is not None:
        body["errors"] = errors
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE,
                        headers={**SECURE_HEADERS, **(headers or {})})


def responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for these problem statuses."""
    schema = Problem.model_json_schema()
    return {code: {"description": HTTPStatus(code).phrase,
                   "content": {MEDIA_TYPE: {"schema": schema}}} for code in codes}


def install(app: FastAPI, prefix: str) -> None:
    """Problem details for ``prefix`` paths; the app's earlier handlers serve the rest."""
    previous_cheeto = app.exception_handlers.get(CheetoError)
    previous_store = app.exception_handlers.get(PyMongoError)

    def is_v1(request: Request) -> bool:
        return request.url.path.startswith(prefix)

    async def http_error(request: Request, exc: StarletteHTTPException) -> Any:
        if not is_v1(request):
            from fastapi.exception_handlers import http_exception_handler

            return await http_exception_handler(request, exc)
        detail = exc.detail if isinstance(exc.detail, str) else None
        return problem(exc.status_code, detail, instance=request.url.path,
                       headers=getattr(exc, "headers", None))

    async def validation_error(request: Request, exc: RequestValidationError) -> Any:
        if not is_v1(request):
            from fastapi.exception_handlers import request_validation_exception_handler

            return await request_validation_exception_handler(request, exc)
        errors = [{"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", ""))}
                  for e in exc.errors()]
        first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
        detail = f"{'.'.join(first['loc'][1:]) or 'request'}: {first['msg']}"
        return problem(422, detail, instance=request.url.path, errors=errors)

    async def cheeto_error(request: Request, exc: CheetoError) -> Any:
        if not is_v1(request) and previous_cheeto is not None:
            return await previous_cheeto(request, exc)
        return problem(exc.http_status, exc.message, instance=request.url.path)

    async def store_error(request: Request, exc: PyMongoError) -> Any:
        if not is_v1(request) and previous_store is not None:
            return await previous_store(request, exc)
        log.warning("store error on %s: %s", request.url.path, exc)
        return problem(503, "the store is unavailable", instance=request.url.path)

    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(CheetoError, cheeto_error)
    app.add_exception_handler(PyMongoError, store_error)

    @app.middleware("http")
    async def secure_headers(request: Request, call_next: Any) -> Any:
        try:
            response = await call_next(request)
        except Exception:
            if not is_v1(request):
                raise
            log.exception("unexpected error on %s %s", request.method, request.url.path)
            return problem(500, "internal error (logged)", instance=request.url.path)
        if is_v1(request):
            for name, value in SECURE_HEADERS.items():
                response.headers.setdefault(name, value)
            if request.url.scheme == "https":  # served over TLS: browsers keep to it
                response.headers.setdefault("Strict-Transport-Security", HSTS)
        return response
