"""Signed tokens (JWT, HS256) for people: issue and verify, with one signing key shared
by every API process and ``cheeto token issue``.

Where the key lives (``api.jwt_key``):

- ``file`` (the default): 64 random bytes in a file of mode 0600, ``api.jwt_key_file``,
  default ``$STATE_DIRECTORY/jwt.key`` when the process runs under systemd with
  ``StateDirectory=`` (or in the container, whose image sets ``STATE_DIRECTORY`` to its
  state volume), else ``<XDG state>/cheeto/jwt.key`` (a single-host or dev setup). A
  missing file is created with ``O_EXCL``, so two processes starting together on one
  host agree; on several API hosts the operator distributes one file to each (it then
  must exist: a host that made its own would sign tokens the others refuse). A key that
  cannot be created or read is one ``ConfigError`` line at start, never a traceback.
  ``cheeto token issue`` never creates a file key: a key made where the API is not would
  sign tokens the API refuses.
- ``store``: the key is a document in the store (collection ``token_keys``, ``_id``
  ``hs256``), inserted once by whichever process needs it first; the insert is decided by
  the unique ``_id``, so API processes starting together on several hosts, and
  ``cheeto token issue`` anywhere with the same config, all read the one key. Whoever can
  read the store (its credentials, a ``cheeto db dump``) can sign tokens for anyone:
  protect the store's credentials and dumps as the key itself.

Every token carries ``iss``, ``aud``, ``sub``, ``ver``, ``iat``, ``exp`` and a random
``jti`` (what a revocation names); verification requires all of them and allows 30 s of
clock skew. Roles are not in the token: they are looked up per request, so a revoked
grant does not outlive it.

``sub`` is the user's document id, never the login name: a rename keeps the id, and a
new user given the old name gets another one, so a token keeps naming the person it was
issued to. ``ver`` is the user's ``token_version`` when it was issued; a password change
or ``cheeto token revoke`` moves the version, which ends every token (and dashboard
session) issued before, with no list of them to keep. Tokens from before ``ver`` existed
(``sub`` a login name) carry no ``ver`` and are refused: everyone signs in again.
"""

from __future__ import annotations

import logging
import os
import secrets
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jwt

from ..config import ApiConfig, state_directory, xdg_state_home
from ..errors import ConfigError, InvalidInput

if TYPE_CHECKING:
    from ..store import Store

log = logging.getLogger("cheeto_like.api")

ALGORITHM = "HS256"
KEY_BYTES = 64
LEEWAY_SECONDS = 30
MAX_TTL_SECONDS = 90 * 86400
KEY_COLLECTION = "token_keys"  # api.jwt_key: store
KEY_ID = "hs256"
_HOW = ("set api.jwt_key_file to a key file this process can read (the same file on "
        "every API host), or api.jwt_key: store")


class BadToken(Exception):
    """The token is missing, malformed, expired, or not ours (the message says which,
    without echoing the token)."""


class ExpiredToken(BadToken):
    """A token of ours past its ``exp``: the normal end of a session, told apart so a
    browser coming back to a stale cookie is not counted as a rejected credential."""


def default_key_file() -> Path:
    """``$STATE_DIRECTORY/jwt.key`` under a service manager that gives the process a state
    directory (systemd's ``StateDirectory=``, the container image), else the XDG state
    file (one host, or a developer's machine)."""
    state = state_directory()
    if state is not None:
        return state / "jwt.key"
    return xdg_state_home() / "cheeto" / "jwt.key"


def key_file(api: ApiConfig | None) -> Path:
    """The key file a ``file`` key is read from (configured, else the default)."""
    api = api or ApiConfig()
    return api.jwt_key_file or default_key_file()


def describe_key(api: ApiConfig | None) -> str:
    """Where the key is kept, as the container entrypoint asks it: ``store`` or the path."""
    api = api or ApiConfig()
    return "store" if api.jwt_key == "store" else str(key_file(api))


def _check_key(key: bytes, where: str) -> bytes:
    if len(key) < 32:
        raise ConfigError(f"the token key {where} is shorter than 32 bytes")
    return key


def load_or_create_key(path: Path, *, create: bool = True) -> bytes:
    """The key in ``path``, created (0600, directory 0700) when missing and ``create``.
    A key file that others can read is refused: anyone holding it can sign in as anyone.
    Every failure is one ``ConfigError`` line naming the file and the settings to fix."""
    if create:
        try:
            # exist_ok: FileExistsError here means a file where the directory should be
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise ConfigError(f"cannot create the token key {path} ({exc.strerror or exc}): "
                              f"{_HOW}") from None
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # made before, or by a process starting beside us: read it below
        except OSError as exc:
            raise ConfigError(f"cannot create the token key {path} ({exc.strerror}): "
                              f"{_HOW}") from None
        else:
            with os.fdopen(fd, "wb") as out:
                out.write(secrets.token_bytes(KEY_BYTES))
            log.warning("created a new token key %s: every API process and `cheeto token "
                        "issue` must use this same key (%s)", path, _HOW)
    try:
        info = path.stat()
        if stat.S_IMODE(info.st_mode) & 0o077:
            raise ConfigError(f"the token key {path} is readable by others (chmod 600 it)")
        key = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"no token key {path}: the API creates it at its first start; "
                          f"{_HOW}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read the token key {path} ({exc.strerror}): "
                          f"{_HOW}") from None
    return _check_key(key, str(path))


async def load_store_key(store: Store) -> bytes:
    """The key kept in the store, inserted first if there is none. The insert races
    safely: the unique ``_id`` lets exactly one process's key in, and everyone (the
    losers too) then reads that one. No transaction: one document, one write."""
    from bson import Binary
    from pymongo.errors import DuplicateKeyError, PyMongoError

    from ..models.fields import utcnow

    collection = store.database[KEY_COLLECTION]
    try:
        found = await collection.find_one({"_id": KEY_ID})
        if found is None:
            try:
                async with store.exclusive():
                    await collection.insert_one({"_id": KEY_ID, "algorithm": ALGORITHM,
                                                 "key": Binary(secrets.token_bytes(KEY_BYTES)),
                                                 "created_at": utcnow()})
                log.warning("created the token key in the store (%s.%s): every API process "
                            "and `cheeto token issue` with api.jwt_key: store share it",
                            store.database.name, KEY_COLLECTION)
            except DuplicateKeyError:
                pass  # another process inserted first: theirs is the key
            found = await collection.find_one({"_id": KEY_ID})
    except PyMongoError as exc:
        raise ConfigError(f"cannot read the token key from the store: "
                          f"{str(exc).splitlines()[0][:200]}") from None
    if found is None or not isinstance(found.get("key"), bytes):
        raise ConfigError(f"the store's token key ({KEY_COLLECTION}/{KEY_ID}) is missing "
                          "or not binary")
    return _check_key(bytes(found["key"]), f"in the store ({KEY_COLLECTION}/{KEY_ID})")


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
    def with_key(cls, api: ApiConfig | None, key: bytes) -> TokenIssuer:
        api = api or ApiConfig()
        return cls(key, issuer=api.token_issuer, audience=api.token_audience,
                   ttl_seconds=api.token_ttl_hours * 3600)

    @classmethod
    def from_config(cls, api: ApiConfig | None, *, create: bool = True) -> TokenIssuer:
        """The issuer of a ``file`` key (a store-kept key needs ``load``, which reads
        the store)."""
        api = api or ApiConfig()
        if api.jwt_key == "store":
            raise ConfigError("api.jwt_key is store: the key is read from the store at start "
                              "(TokenIssuer.load)")
        return cls.with_key(api, load_or_create_key(key_file(api), create=create))

    @classmethod
    async def load(cls, api: ApiConfig | None, store: Store, *,
                   create: bool = True) -> TokenIssuer:
        """The issuer for ``api`` wherever its key is kept (``create`` applies to a key
        file; a store-kept key is always made once by whoever needs it first)."""
        api = api or ApiConfig()
        if api.jwt_key == "store":
            return cls.with_key(api, await load_store_key(store))
        return cls.from_config(api, create=create)

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
            raise ExpiredToken("the token has expired") from None
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
