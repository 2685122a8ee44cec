"""The dashboard's sign-in state: the JWT in a cookie, CSRF tokens, and form bodies.

- The token ``/api/v1/login`` would hand out is kept in ``cheeto_session``: HttpOnly (no
  script reads it), Secure (browsers send it only over HTTPS, or to a loopback address)
  and SameSite=Strict (no other site's page can make the browser send it). It is checked
  exactly as a bearer token is (``deps.person_from_token``, the same function): signature,
  expiry, the revocation list, the user id and token version (a rename keeps the
  session, a password change or ``cheeto token revoke`` ends it), and the person's
  status and roles read afresh on every request.
- Every form carries a CSRF token. Signed in, it is an HMAC of the session token keyed by
  nothing a page can read, so only someone holding the cookie can compute it; before
  sign-in (the login form) it is a random value also kept in a SameSite=Strict cookie
  (double submit). SameSite alone would do in current browsers; the token also covers
  older ones and same-site subdomains.
- Forms are ``application/x-www-form-urlencoded`` and parsed here (bounded size and field
  count), so the dashboard needs no multipart library.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import Response

from ... import metrics
from ...auth.principal import Principal
from ...auth.tokens import BadToken, ExpiredToken
from ..deps import Auth, get_auth, person_from_token

SESSION_COOKIE = "cheeto_session"
LOGIN_CSRF_COOKIE = "cheeto_login_csrf"
CSRF_FIELD = "csrf"
MAX_FORM_BYTES = 64 * 1024
MAX_FORM_FIELDS = 200


class NeedSignIn(Exception):
    """No valid session: the page answers with a redirect to the sign-in form."""


class Refused(Exception):
    """The signed-in person may not see this page or do this (a 403 page), or the
    request itself is wrong (``status``)."""

    def __init__(self, message: str, status: int = 403) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


@dataclass(frozen=True)
class Session:
    """Who is signed in, and the CSRF token their forms carry."""

    who: Principal
    token: str

    @property
    def csrf(self) -> str:
        return csrf_for(self.token)


def csrf_for(token: str) -> str:
    return hmac.new(token.encode(), b"cheeto-dashboard-csrf", hashlib.sha256).hexdigest()


def cookie_path(request: Request) -> str:
    prefix = get_auth(request).api.prefix
    return prefix or "/"


async def optional_session(request: Request) -> Session | None:
    """The session of the cookie, or None when there is none or it no longer works
    (expired, revoked, not ours, the person no longer active): the page then asks to
    sign in again."""
    token = request.cookies.get(SESSION_COOKIE)
    if not token or len(token) > 4096:
        return None
    auth: Auth = get_auth(request)
    try:
        who = await person_from_token(auth, token)
    except ExpiredToken:  # a session that ran out: the sign-in page, nothing suspicious
        return None
    except BadToken:  # forged, revoked, another key's, no longer active: as a bearer's
        metrics.inc("cheeto_auth_signin_failures_total", method="session")
        return None
    return Session(who=who, token=token)


async def require_session(request: Request) -> Session:
    found = await optional_session(request)
    if found is None:
        raise NeedSignIn
    return found


def set_session_cookie(request: Request, response: Response, token: str,
                       max_age: int) -> None:
    response.set_cookie(SESSION_COOKIE, token, max_age=max_age, path=cookie_path(request),
                        httponly=True, secure=True, samesite="strict")


def clear_session_cookie(request: Request, response: Response) -> None:
    response.delete_cookie(SESSION_COOKIE, path=cookie_path(request), httponly=True,
                           secure=True, samesite="strict")


def login_csrf(request: Request) -> tuple[str, bool]:
    """The login form's token (the cookie's, or a new one) and whether it is new."""
    current = request.cookies.get(LOGIN_CSRF_COOKIE, "")
    if len(current) == 43 and current.replace("-", "").replace("_", "").isalnum():
        return current, False
    return secrets.token_urlsafe(32), True


def set_login_csrf(request: Request, response: Response, value: str) -> None:
    response.set_cookie(LOGIN_CSRF_COOKIE, value, max_age=3600, path=cookie_path(request),
                        httponly=True, secure=True, samesite="strict")


async def read_form(request: Request) -> dict[str, list[str]]:
    """The form's fields (each a list of values). Anything but a small URL-encoded body
    is refused with a 400 or 415 page."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise Refused("send the form as application/x-www-form-urlencoded", 415)
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise Refused("the form is too large", 413)
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False,
                          max_num_fields=MAX_FORM_FIELDS)
    except (UnicodeDecodeError, ValueError):
        raise Refused("the form could not be read", 400) from None
    fields: dict[str, list[str]] = {}
    for key, value in pairs:
        fields.setdefault(key, []).append(value)
    return fields


def first(fields: dict[str, list[str]], name: str) -> str:
    values = fields.get(name)
    return values[0].strip() if values else ""


def check_csrf(fields: dict[str, list[str]], expected: str) -> None:
    given = first(fields, CSRF_FIELD)
    if not given or not hmac.compare_digest(given.encode(), expected.encode()):
        raise Refused("the form has expired or did not come from this site: reload the page "
                      "and try again", 403)
