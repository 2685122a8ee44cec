"""Sign-in and sign-out: the same check as ``POST /api/v1/login`` (``auth.login``: an
LDAP bind as the user, else the store's yescrypt hash; the same rate limiter), and the
token it issues kept in the session cookie. Signing out revokes the token (the same
``RevokeToken`` operation as ``/api/v1/logout``), so a copied cookie stops working too.
"""

from __future__ import annotations

import ipaddress
import logging

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ...auth.login import LoginFailed, authenticate
from ...auth.principal import subject_of
from ...errors import CheetoError
from ..client_address import client_address
from .guard import page
from .render import PAGE_HEADERS, base_path, render
from .session import (
    check_csrf,
    clear_session_cookie,
    first,
    login_csrf,
    optional_session,
    read_form,
    require_session,
    set_login_csrf,
    set_session_cookie,
)

log = logging.getLogger("cheeto_like.dashboard")


def plain_http(request: Request) -> bool:
    """Served without TLS to a host that is not loopback: browsers drop the Secure
    session cookie there, so signing in cannot work (the page says so)."""
    if request.url.scheme == "https":
        return False
    host = (request.url.hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost") or host == "::1":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True


def _login_page(request: Request, *, username: str = "", error: str = "",
                status: int = 200) -> Response:
    token, new = login_csrf(request)
    response = render(request, "login.html", None, status=status, page="login",
                      login_csrf=token, username=username, login_error=error,
                      plain_http=plain_http(request))
    if new:
        set_login_csrf(request, response, token)
    return response


def add_routes(router: APIRouter) -> None:
    @router.get("/")
    @page
    async def start(request: Request) -> Response:
        session = await optional_session(request)
        target = "me" if session is not None else "login"
        return RedirectResponse(f"{base_path(request)}/{target}", status_code=303,
                                headers={"Cache-Control": "no-store"})

    @router.get("/login")
    @page
    async def login_form(request: Request) -> Response:
        if await optional_session(request) is not None:
            return RedirectResponse(f"{base_path(request)}/me", status_code=303)
        return _login_page(request)

    @router.post("/login")
    @page
    async def login(request: Request) -> Response:
        fields = await read_form(request)
        username, password = first(fields, "username"), (fields.get("password") or [""])[0]
        expected = request.cookies.get("cheeto_login_csrf", "")
        if not expected or len(expected) != 43:
            return _login_page(request, username=username, status=403,
                               error="the form has expired: try again")
        check_csrf(fields, expected)
        auth = request.app.state.auth
        address = client_address(request, auth.trusted_proxies)
        database = request.app.state.store.database
        wait = await auth.limiter.retry_after(database, username[:64], address)
        if wait > 0:
            log.info("dashboard sign-in limited for %r from %s", username[:64], address)
            response = _login_page(request, username=username, status=429,
                                   error="too many failed sign-ins; try again later")
            response.headers["Retry-After"] = str(int(wait) + 1)
            return response
        try:
            name = await authenticate(auth.config, username[:64], password)
        except LoginFailed:
            await auth.limiter.failed(database, username[:64], address)
            log.info("dashboard sign-in refused for %r from %s", username[:64], address)
            return _login_page(request, username=username, status=401,
                               error="invalid user name or password")
        except CheetoError as exc:
            return _login_page(request, username=username, status=exc.http_status,
                               error=exc.message)
        await auth.limiter.succeeded(database, username[:64], address)
        token, claims = auth.issuer.issue(await subject_of(name))
        log.info("dashboard sign-in: %s from %s (jti %s)", name, address, claims.jti)
        response = RedirectResponse(f"{base_path(request)}/me", status_code=303,
                                    headers=dict(PAGE_HEADERS))
        set_session_cookie(request, response, token, max(1, claims.exp - claims.iat))
        return response

    @router.post("/logout")
    @page
    async def logout(request: Request) -> Response:
        from ...operations.auth import RevokeToken

        session = await require_session(request)
        check_csrf(await read_form(request), session.csrf)
        who = session.who
        if who.token_id is not None and who.token_exp is not None:
            await RevokeToken.run(request.app.state.store, who.author, skip_history=True,
                                  jti=who.token_id, exp_epoch=who.token_exp, user=who.name)
        response = RedirectResponse(f"{base_path(request)}/login", status_code=303,
                                    headers=dict(PAGE_HEADERS))
        clear_session_cookie(request, response)
        return response
