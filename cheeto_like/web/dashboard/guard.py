"""How dashboard pages fail: a missing session redirects to the sign-in form, a refusal
or a store error is an HTML page with the right status (never the API's JSON, never a
traceback)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI
from pymongo.errors import PyMongoError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ...auth import rules
from ...auth.wording import refusal
from ...errors import CheetoError
from .render import base_path, render
from .session import NeedSignIn, Refused, optional_session

log = logging.getLogger("cheeto_like.dashboard")
HEADINGS = {400: "Bad request", 401: "Sign in", 403: "Not allowed", 404: "Not found",
            405: "Not here", 409: "Conflict", 413: "Too large", 415: "Unsupported form",
            422: "Invalid input", 429: "Too many attempts", 503: "Unavailable"}


def refuse(action: str, target: rules.Target = rules.NOTHING,
           site: str | None = None) -> Refused:
    """The refusal page's exception for a rule ``rules.can`` said no to, in plain words
    (``auth.wording``): ``raise refuse(rules.USAGE_READ, target, site)``."""
    return Refused(refusal(action, target, site), 403)


def page[**P](fn: Callable[P, Awaitable[Response]]) -> Callable[P, Awaitable[Response]]:
    """Turn the store's typed errors into ``Refused`` pages (the app's own handlers answer
    JSON, which is right for the API only)."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> Response:
        try:
            return await fn(*args, **kwargs)
        except CheetoError as exc:
            raise Refused(exc.message, exc.http_status) from None
        except PyMongoError as exc:
            log.warning("store error on a dashboard page: %s", exc)
            raise Refused("the store is unavailable; try again shortly", 503) from None

    return wrapper


def install_handlers(app: FastAPI) -> None:
    async def need_sign_in(request: Request, exc: Exception) -> Response:
        return RedirectResponse(f"{base_path(request)}/login", status_code=303,
                                headers={"Cache-Control": "no-store"})

    async def refused(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, Refused)
        session = await _session_or_none(request)
        return render(request, "error.html", session, status=exc.status, page="", code=exc.status,
                      heading=HEADINGS.get(exc.status, "Error"), message=exc.message)

    previous_http = app.exception_handlers.get(StarletteHTTPException)

    async def http_error(request: Request, exc: Exception) -> Response:
        """A page for a dashboard path (an unknown URL, a page's own 404 or 403); the
        API's ``/api/v1`` and puppet routes keep their JSON answers."""
        assert isinstance(exc, StarletteHTTPException)
        if previous_http is not None and not _is_dashboard(request):
            return await previous_http(request, exc)
        session = await _session_or_none(request)
        message = (exc.detail if isinstance(exc.detail, str) and exc.status_code != 404
                   else MISSING)
        return render(request, "error.html", session, status=exc.status_code, page="",
                      code=exc.status_code, heading=HEADINGS.get(exc.status_code, "Error"),
                      message=message)

    app.add_exception_handler(NeedSignIn, need_sign_in)
    app.add_exception_handler(Refused, refused)
    app.add_exception_handler(StarletteHTTPException, http_error)


MISSING = ("There is no page at this address. Check the link, or start again from "
           "your page.")


def _is_dashboard(request: Request) -> bool:
    """A path no route serves (outside ``/api/v1``), or one of the dashboard's pages.
    A client that asks for JSON only (a script) keeps the JSON answer."""
    prefix = request.app.state.auth.api.prefix
    path = request.url.path
    if path.startswith(f"{prefix}/api/") or path == f"{prefix}/api":
        return False
    accept = request.headers.get("accept", "")
    if "json" in accept and "html" not in accept:
        return False
    route = request.scope.get("route")
    if route is None:
        return True
    routes = getattr(request.app.state, "dashboard_routes", set())
    return any(p == getattr(route, "path", None) for _, p in routes)


async def _session_or_none(request: Request) -> Any:
    try:
        return await optional_session(request)
    except (CheetoError, PyMongoError):
        return None
