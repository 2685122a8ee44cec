"""Signed tokens (JWT, HS256) for people: issue and verify, with a key file made on
first use.

The signing key is 64 random bytes in a file of mode 0600 (``api.jwt_key_file``,
default ``<XDG state>/cheeto/jwt.key``), created with ``O_EXCL`` so two processes
starting together agree on one key. Every token carries ``iss``, ``aud``, ``sub``,
``ver``, ``iat``, ``exp`` and a random ``jti`` (what a revocation names); verification
requires all of them and allows 30 s of clock skew. Roles are not in the token: they are
looked up per request, so a revoked grant does not outlive it.

``sub`` is the user's document id, never the login name: a rename keeps the id, and a
new user given the old name gets another one, so a token keeps naming the person it was
issued to. ``ver`` is the user's ``token_version`` when it was issued; a password change
or ``cheeto token revoke`` moves the version, which ends every token (and dashboard
session) issued before, with no list of them to keep. Tokens from before ``ver`` existed
(``sub`` a login name) carry no ``ver`` and are refused: everyone signs in again.
"""

from __future__ import annotations

import os
import secrets
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt

from ..config import ApiConfig, xdg_state_home
from ..errors import ConfigError, InvalidInput

ALGORITHM = "HS256"
KEY_BYTES = 64
LEEWAY_SECONDS = 30
MAX_TTL_SECONDS = 90 * 86400


class BadToken(Exception):
    """The token is missing, malformed, expired, or not ours (the message says which,
    without echoing the token)."""


def default_key_file() -> Path:
    return xdg_state_home() / "cheeto" / "jwt.key"


def load_or_create_key(path: Path) -> bytes:
    """The key in ``path``, created (0600, directory 0700) when missing. A key file that
    others can read is refused: anyone holding it can sign in as anyone."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    except OSError as exc:
        raise ConfigError(f"cannot create the token key {path}: {exc.strerror}") from None
    else:
        with os.fdopen(fd, "wb") as out:
            out.write(secrets.token_bytes(KEY_BYTES))
    try:
        info = path.stat()
        if stat.S_IMODE(info.st_mode) & 0o077:
            raise ConfigError(f"the token key {path} is readable by others (chmod 600 it)")
        key = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the token key {path}: {exc.strerror}") from None
    if len(key) < 32:
        raise ConfigError(f"the token key {path} is shorter than 32 bytes")
    return key


@dataclass(frozen=True)
class Subject:
    """Whom a token names: the user's immutable id and their current token version."""

    id: str
    version: int


@dataclass(frozen=True)
class Claims:
    sub: str
    ver: int
    jti: str
    iat: int
    exp: int


class TokenIssuer:
    """Signs and checks tokens for one API (its issuer, audience and key)."""

    def __init__(self, key: bytes, *, issuer: str, audience: str, ttl_seconds: float) -> None:
        self._key = key
        self.issuer = issuer
        self.audience = audience
        self.ttl_seconds = ttl_seconds

    @classmethod
    def from_config(cls, api: ApiConfig | None) -> TokenIssuer:
        api = api or ApiConfig()
        key = load_or_create_key(api.jwt_key_file or default_key_file())
        return cls(key, issuer=api.token_issuer, audience=api.token_audience,
                   ttl_seconds=api.token_ttl_hours * 3600)

    def issue(self, subject: Subject, ttl_seconds: float | None = None,
              now: float | None = None) -> tuple[str, Claims]:
        """A token for ``subject`` (see ``auth.principal.subject_of``)."""
        if not isinstance(subject, Subject):  # a login name would be reused by a rename
            raise TypeError("tokens name a Subject (user id and token version)")
        ttl = self.ttl_seconds if ttl_seconds is None else ttl_seconds
        if not 0 < ttl <= MAX_TTL_SECONDS:
            raise InvalidInput(f"token lifetime must be between 1 second and "
                               f"{MAX_TTL_SECONDS // 86400} days")
        issued = int(now if now is not None else time.time())
        claims = Claims(sub=subject.id, ver=subject.version, jti=secrets.token_urlsafe(16),
                        iat=issued, exp=issued + int(ttl))
        payload: dict[str, Any] = {"iss": self.issuer, "aud": self.audience, **claims.__dict__}
        return jwt.encode(payload, self._key, algorithm=ALGORITHM), claims

    def verify(self, token: str) -> Claims:
        try:
            data = jwt.decode(token, self._key, algorithms=[ALGORITHM], audience=self.audience,
                              issuer=self.issuer, leeway=LEEWAY_SECONDS,
                              options={"require": ["iss", "aud", "sub", "ver", "iat", "exp",
                                                 "jti"]})
        except jwt.ExpiredSignatureError:
            raise BadToken("the token has expired") from None
        except jwt.MissingRequiredClaimError as exc:
            if exc.claim == "ver":  # signed by us before tokens named user ids
                raise BadToken("the token is from an older release: sign in again") from None
            raise BadToken(f"invalid token ({type(exc).__name__})") from None
        except jwt.InvalidTokenError as exc:
            raise BadToken(f"invalid token ({type(exc).__name__})") from None
        ver = data.get("ver")
        if (not isinstance(data.get("sub"), str) or not isinstance(data.get("jti"), str)
                or not isinstance(ver, int) or isinstance(ver, bool) or ver < 0):
            raise BadToken("invalid token (claims)")
        return Claims(sub=data["sub"], ver=ver, jti=data["jti"], iat=int(data["iat"]),
                      exp=int(data["exp"]))
