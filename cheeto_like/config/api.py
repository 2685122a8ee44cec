"""The ``api`` section (the REST API and its sign-in) and the ``client`` section (where the
CLI's API commands send their requests)."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, SecretStr, field_validator, model_validator

from .base import Block, UserPath


def _url_path(value: str) -> str:
    """``cheeto/`` -> ``/cheeto``; empty stays empty (a URL path prefix)."""
    value = value.strip().strip("/")
    if not value:
        return ""
    if not re.fullmatch(r"[A-Za-z0-9._~!$&'()*+,;=:@%/-]+", value) or "//" in value:
        raise ValueError(f"{value!r} is not a URL path")
    return f"/{value}"


# the API's only credential: long enough not to be guessed
MIN_API_KEY_LENGTH = 32


class ApiConfig(Block):
    """The REST API (``cheeto daemon api``).

    The puppet routes take managed keys (``ng apikey``, scope ``puppet:read``) and
    operators' tokens; ``api_key`` (at least 32 characters) is the deprecated static key,
    still accepted when set and never needed to start. Root keys always need a
    credential; ``cheeto daemon api --insecure`` opens only the storage map (and not when
    ``api_key`` or ``managed_keys_only`` is set). ``prefix`` is where
    the routes (and ``/healthz``, ``/openapi.json``, ``/docs``) are mounted; ``root_path``
    is the path a reverse proxy strips before forwarding. ``tls_cert`` and ``tls_key``
    (both or neither) serve HTTPS. An export is rebuilt when its site's data changes
    or after ``cache_seconds`` (0: never cached), serving the previous body meanwhile.
    """

    host: str = "127.0.0.1"  # address the API listens on
    port: int = Field(default=8000, ge=1, le=65535)  # TCP port the API listens on
    # deprecated static key for the puppet routes (at least 32 characters); null: none
    api_key: SecretStr | None = None
    # path prefix a reverse proxy strips before forwarding
    root_path: Annotated[str, AfterValidator(_url_path)] = ""
    prefix: Annotated[str, AfterValidator(_url_path)] = ""  # URL path the routes are mounted under
    tls_cert: UserPath | None = None  # certificate (PEM) to serve HTTPS (with tls_key)
    tls_key: UserPath | None = None  # private key (PEM) of tls_cert
    # an export body is rebuilt when its site's data generation moves (an operation
    # touched the site) or after cache_seconds, in the background while the previous body
    # is served; concurrent first requests share one build. 0 disables (every request
    # queries the store). Generations are read in the background at most every
    # generation_poll_seconds while requests come (0: every request reads them).
    cache_seconds: float = Field(default=30.0, ge=0, le=3600)
    # seconds between background reads of data generations (0: every request)
    generation_poll_seconds: float = Field(default=1.0, ge=0, le=60)
    # sign-in and machine keys (auth/). The HS256 signing key is one for every API process
    # and `cheeto token issue` (auth/tokens.py): jwt_key "file" (default) reads
    # jwt_key_file (default $STATE_DIRECTORY/jwt.key under systemd or in the container,
    # else <XDG state>/cheeto/jwt.key), which the API creates 0600 when missing; on several
    # API hosts distribute one file to each. jwt_key "store" keeps it in the store
    # (collection token_keys, made once by the first process that needs it): readable by
    # whoever can read the store or its dumps. login_groups, when set, admits only
    # their members. Failed sign-ins are counted in the store (collection
    # signin_failures, shared by every API process; auth/ratelimit.py), within
    # login_window_seconds: a name is refused from one address after login_max_failures
    # there; after login_user_max_failures across addresses it is refused from every
    # address that has failures for it (never from one without: its owner still signs
    # in from their own machine); an address is refused for every name after
    # login_address_max_failures (a spray). The client address is the peer, or, when the
    # peer is one of trusted_proxies (addresses or CIDRs; empty: trust none), the
    # right-most X-Forwarded-For address that is not itself a trusted proxy. The name's
    # and the address's limits are never below login_max_failures.
    jwt_key: Literal["file", "store"] = "file"
    # token signing key file with jwt_key: file (created 0600 when missing)
    jwt_key_file: UserPath | None = None
    # Kept for compatibility: the puppet routes never need api_key now. Its one effect:
    # `daemon api --insecure` does not open the storage map to anonymous callers.
    managed_keys_only: bool = False
    # iss claim of the tokens the API issues and accepts
    token_issuer: str = Field(default="cheeto", min_length=1)
    # aud claim of the tokens the API issues and accepts
    token_audience: str = Field(default="cheeto-api", min_length=1)
    # hours a sign-in token stays valid
    token_ttl_hours: float = Field(default=8.0, gt=0, le=24 * 90)
    # only members of these groups may sign in (empty: anyone)
    login_groups: list[str] = Field(default_factory=list)
    # failed sign-ins for one name from one address before it is refused
    login_max_failures: int = Field(default=5, ge=1, le=1000)
    # failed sign-ins for one name across addresses before it is refused
    login_user_max_failures: int = Field(default=20, ge=1, le=10000)
    # failed sign-ins from one address before it is refused for every name
    login_address_max_failures: int = Field(default=100, ge=1, le=10000)
    # seconds failed sign-ins are counted over
    login_window_seconds: float = Field(default=300.0, gt=0, le=86400)
    # proxy addresses or CIDRs whose X-Forwarded-For is trusted
    trusted_proxies: list[str] = Field(default_factory=list)
    # request bodies on /api/v1 above this are a 413 before they are read (the
    # dashboard's forms keep their own 64 KB cap)
    max_body_bytes: int = Field(default=1_048_576, ge=1024, le=1 << 30)
    # API key secrets older than this many days are flagged for rotation
    key_rotation_days: int = Field(default=90, ge=1, le=3650)
    # a key created less than this long ago is not "never used" in the audits yet
    key_new_grace_days: int = Field(default=7, ge=0, le=3650)
    # hours a rotated key's old secret keeps working (when a rotation does not say)
    key_overlap_hours: float = Field(default=24.0, ge=0, le=24 * 30)
    # seconds between writes of API keys' last-use times to the store
    key_use_flush_seconds: float = Field(default=30.0, gt=0, le=3600)

    @field_validator("api_key")
    @classmethod
    def _usable_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value().strip()) < MIN_API_KEY_LENGTH:
            raise ValueError(f"api_key is shorter than {MIN_API_KEY_LENGTH} characters "
                             "(try: openssl rand -hex 24)")
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, values: list[str]) -> list[str]:
        """Each entry an address or a network, kept in its canonical form."""
        out = []
        for value in values:
            try:
                out.append(str(ipaddress.ip_network(value.strip(), strict=False)))
            except ValueError:
                raise ValueError(f"{value!r} is not an IP address or CIDR network") from None
        return out

    @model_validator(mode="after")
    def _one_key_place(self) -> ApiConfig:
        if self.jwt_key == "store" and self.jwt_key_file is not None:
            raise ValueError("jwt_key: store keeps the token key in the store; drop "
                             "jwt_key_file (or set jwt_key: file)")
        return self

    @model_validator(mode="after")
    def _tls_pair(self) -> ApiConfig:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together (set both or neither)")
        return self


class ClientConfig(Block):
    """Where ``cheeto login``/``me``/``usage``/``quota`` send their requests
    (``$CHEETO_API_URL`` wins); ``ca_file`` verifies a private CA's certificate."""

    url: str = Field(min_length=1)  # base URL of the API the CLI's API commands call
    ca_file: UserPath | None = None  # CA bundle (PEM) to verify the API's certificate
    timeout_seconds: float = Field(default=30.0, gt=0, le=600)  # seconds one API request may take
