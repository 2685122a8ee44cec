"""Authentication for the API (and the dashboard): FastAPI dependencies over ``auth/``.

- ``Auth`` (``app.state.auth``) holds the token issuer, the login limiter and the key
  use recorder of one app.
- ``optional_principal``: the caller from ``Authorization: Bearer <JWT>`` or
  ``X-API-Key: ck_…`` (a managed key), or None; a credential that is present but
  invalid, expired or revoked is a 401, never "anonymous".
- ``principal``: the same, but nobody is a 401.
- ``authorize(who, action, target)``: ``rules.can`` or a 403.
- ``puppet_access``: the puppet routes' check (the static ``api.api_key`` still works,
  logged as deprecated; managed keys with ``puppet:read``; operators' tokens); root keys
  always need one, the storage map (``puppet_map_access``) is anonymous only on an API
  started ``--insecure``.

Tokens are checked against the revocation collection on every request (one point
lookup by ``jti``); a person's record (by the token's user id, with its token version),
status and roles are read per request (three queries): someone no longer active, or
whose tokens were revoked or password changed, is a 401 at once, whatever token they
hold. ``person_from_token`` is that check, shared with the dashboard's sessions.
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import Annotated

from fastapi import Depends, Request
from fastapi.exceptions import HTTPException
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from .. import metrics
from ..auth import rules
from ..auth.apikeys import UsageRecorder, find_key, looks_like_key
from ..auth.principal import Principal, load_person, machine
from ..auth.ratelimit import LoginLimiter, Policy
from ..auth.tokens import BadToken, TokenIssuer
from ..auth.wording import refusal_line
from ..config import ApiConfig, Config
from ..models import RevokedToken
from .client_address import networks

log = logging.getLogger("cheeto_like.api")
DEPRECATION_LOG_SECONDS = 3600.0

bearer = HTTPBearer(auto_error=False, description="a token from POST /api/v1/login or "
                    "`cheeto token issue`")
key_header = APIKeyHeader(name="X-API-Key", auto_error=False,
                          description="an API key from `cheeto ng apikey create`")


class Auth:
    """What the dependencies need, built once per app."""

    def __init__(self, config: Config, *, issuer: TokenIssuer | None = None) -> None:
        api = config.api or ApiConfig()
        self.config = config
        self.api = api
        self.issuer = issuer or TokenIssuer.from_config(api)
        self.limiter = LoginLimiter(Policy.from_config(api))  # counts in the store
        self.trusted_proxies = networks(api.trusted_proxies)
        self.recorder = UsageRecorder(None, api.key_use_flush_seconds)
        self.static_key = (api.api_key.get_secret_value().encode()
                           if api.api_key is not None else None)
        # Anonymous callers may read the storage map only on an API started explicitly
        # open (`cheeto daemon api --insecure`, no static key, not managed_keys_only):
        # ``web.app.create_api(..., insecure=True)`` sets it. Root keys always need a
        # credential (``puppet_access``), whatever the config.
        self.open_puppet = False
        self._warned_at = -DEPRECATION_LOG_SECONDS

    def warn_static_key(self) -> None:
        """The deprecation warning, at most once an hour (puppet agents poll often)."""
        now = time.monotonic()
        if now - self._warned_at >= DEPRECATION_LOG_SECONDS:
            self._warned_at = now
            log.warning("api.api_key is deprecated: create a managed key with `cheeto ng "
                        "apikey create --name puppet --scope puppet:read` and remove "
                        "api.api_key from the config")


def get_auth(request: Request) -> Auth:
    return request.app.state.auth


def _unauthorized(detail: str) -> HTTPException:
    return HTTPException(401, detail, headers={"WWW-Authenticate": "Bearer"})


async def person_from_token(auth: Auth, token: str) -> Principal:
    """The person a signed token names, or ``BadToken`` saying why not. The one check of
    a person's token: the bearer header and the dashboard's session cookie both use it,
    so a session ends exactly when a token would (signature and expiry, the revocation
    list, the user id still there, the user's token version, an active status)."""
    claims = auth.issuer.verify(token)
    if await RevokedToken.find_one({"jti": claims.jti}) is not None:
        raise BadToken("the token has been revoked")
    who = await load_person(claims.sub, claims.ver, token_id=claims.jti,
                            token_exp=claims.exp)
    if not who.roles:  # no longer active
        raise BadToken("this account may not sign in")
    return who


async def _from_token(auth: Auth, token: str) -> Principal:
    try:
        return await person_from_token(auth, token)
    except BadToken as exc:
        metrics.inc("cheeto_auth_signin_failures_total", method="token")
        raise _unauthorized(str(exc)) from None


async def _from_key(auth: Auth, secret: str) -> Principal:
    key = await find_key(secret)
    if key is None:
        metrics.inc("cheeto_auth_signin_failures_total", method="api_key")
        raise _unauthorized("invalid, expired or revoked API key")
    auth.recorder.touch(key.id)
    return machine(key.name, key.scopes)


async def optional_principal(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
        api_key: Annotated[str | None, Depends(key_header)]) -> Principal | None:
    auth = get_auth(request)
    if credentials is not None:
        value = credentials.credentials
        if looks_like_key(value):
            return await _from_key(auth, value)
        return await _from_token(auth, value)
    if api_key:
        if looks_like_key(api_key):
            return await _from_key(auth, api_key)
        metrics.inc("cheeto_auth_signin_failures_total", method="api_key")
        raise _unauthorized("invalid, expired or revoked API key")
    if request.headers.get("authorization"):
        metrics.inc("cheeto_auth_signin_failures_total", method="token")
        raise _unauthorized("send the token as 'Authorization: Bearer <token>'")
    return None


async def principal(
        who: Annotated[Principal | None, Depends(optional_principal)]) -> Principal:
    if who is None:
        raise _unauthorized("sign in (POST /api/v1/login) or send an API key")
    return who


CurrentPrincipal = Annotated[Principal, Depends(principal)]


def authorize(who: Principal, action: str, target: rules.Target = rules.NOTHING,
              site: str | None = None) -> None:
    """``rules.can`` or a 403 in plain words (``auth.wording``: who may, what to do),
    ending with the rule (``bob may not usage:read``); never the reason's data."""
    if not rules.can(who, action, target):
        raise HTTPException(403, refusal_line(who.name, action, target, site))


def _raw(value: str) -> bytes:
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogateescape")


async def puppet_access(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
        api_key: Annotated[str | None, Depends(key_header)]) -> None:
    """The puppet routes that serve credentials (root keys): the static key
    (deprecated), a ``puppet:read`` key or an operator's token, always. An anonymous
    request is a 401 whatever the config: even an API started ``--insecure`` never hands
    root's authorized_keys to whoever can reach it."""
    await _puppet_caller(request, credentials, api_key, anonymous=False)


async def puppet_map_access(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
        api_key: Annotated[str | None, Depends(key_header)]) -> None:
    """The puppet routes that serve no credential (the storage map): as
    ``puppet_access``, but an anonymous request is served on an API started explicitly
    open (``Auth.open_puppet``: ``--insecure``, no static key, not managed_keys_only)."""
    await _puppet_caller(request, credentials, api_key, anonymous=get_auth(request).open_puppet)


async def _puppet_caller(request: Request, credentials: HTTPAuthorizationCredentials | None,
                         api_key: str | None, *, anonymous: bool) -> None:
    auth = get_auth(request)
    if api_key and auth.static_key is not None and secrets.compare_digest(
            _raw(api_key), auth.static_key):
        auth.warn_static_key()
        return
    if credentials is None and not api_key:
        if anonymous:
            return
        raise HTTPException(401, "invalid or missing API key",
                            headers={"WWW-Authenticate": "X-API-Key"})
    try:
        who = await optional_principal(request, credentials, api_key)
    except HTTPException as exc:
        raise HTTPException(401, "invalid or missing API key",
                            headers={"WWW-Authenticate": "X-API-Key"}) from exc
    if who is None or not rules.can(who, rules.PUPPET_READ):
        raise HTTPException(403 if who is not None else 401,
                            "this credential may not read the puppet routes")


__all__ = ["Auth", "CurrentPrincipal", "authorize", "get_auth",
           "optional_principal", "person_from_token", "principal", "puppet_access",
           "puppet_map_access"]
