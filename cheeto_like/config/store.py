"""The ``mongo`` section: a real MongoDB, or the embedded store every install starts with."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator

from . import paths
from .base import Block, UserPath


class EmbeddedStoreConfig(Block):
    """The embedded store: an nx-27017 server on SQLite files in ``path`` (a directory).

    ``listen: unix`` (the default) serves a Unix socket inside ``path`` (0700), so only
    its owner can connect and the data directory is the server's identity. ``listen:
    tcp`` (containers) serves ``host:port`` and requires a credential: ``token``, else
    ``$CHEETO_STORE_TOKEN``, else ``token_file`` (default ``<path>/store.token``, made
    0600 by the server on first start). ``lock_timeout_seconds`` bounds how long a
    command waits for another client's transaction before it fails.
    """

    # the store's data directory (SQLite files, store.sock, store.json)
    path: UserPath = Field(default_factory=lambda: paths.xdg_data_home() / "cheeto" / "store")
    # unix: a socket inside path, owner only; tcp: host:port, token required
    listen: Literal["unix", "tcp"] = "unix"
    host: str = "127.0.0.1"  # address the server listens on with listen: tcp
    # TCP port the server listens on with listen: tcp
    port: int = Field(default=27117, ge=1, le=65535)
    # the TCP credential ($CHEETO_STORE_TOKEN, then token_file, if unset)
    token: SecretStr | None = None
    # file holding the TCP credential (default <path>/store.token, mode 0600)
    token_file: UserPath | None = None
    # seconds a command waits for another client's transaction, then fails
    lock_timeout_seconds: float = Field(default=60.0, gt=0)

    @field_validator("path")
    @classmethod
    def _directory(cls, value: Path) -> Path:
        """A file here would only fail later, inside the server, as an internal error."""
        for candidate in (value, *value.parents):  # the nearest existing one must be a dir
            if candidate.exists():
                if not candidate.is_dir():
                    raise ValueError(f"{candidate} exists and is not a directory")
                break
        return value


class MongoConfig(Block):
    """``uri`` names a real MongoDB (replica set); without it the embedded store is used.

    The URI must read from the primary (``store.connect`` refuses another
    readPreference); writes are ``w: majority``."""

    # mongodb:// or mongodb+srv:// URI of a replica set; null: the embedded store
    uri: str | None = None
    # database name (letters, digits, _ and -; at most 63)
    database: str = Field(default="cheeto", pattern=r"^[A-Za-z0-9_-]{1,63}$")
    user: str | None = None  # user to authenticate as (null: the URI's, if any)
    password: SecretStr | None = None  # that user's password
    auth_source: str | None = None  # database holding the user's credentials (authSource)
    tls: bool = False  # connect to MongoDB with TLS
    tls_ca_file: UserPath | None = None  # CA bundle (PEM) to verify the server's certificate
    # connecting, and how long the CLI waits for a primary
    timeout_seconds: float = Field(default=5.0, gt=0)
    # how long daemons, workers and the API wait for a primary: an election takes 10-12 s
    election_wait_seconds: float = Field(default=30.0, gt=0, le=3600)
    # how long an operation retries transient transaction errors (write conflicts) and
    # unknown commit results, with jittered backoff (pymongo's with_transaction: 120 s)
    transaction_retry_seconds: float = Field(default=120.0, gt=0, le=3600)
    # the embedded store, used when uri is null
    embedded: EmbeddedStoreConfig = Field(default_factory=EmbeddedStoreConfig)

    @field_validator("uri")
    @classmethod
    def _uri_shape(cls, value: str | None) -> str | None:
        """The cheap shape check; ``store.connect`` reports what pymongo still refuses."""
        if value is not None and not value.startswith(("mongodb://", "mongodb+srv://")):
            raise ValueError("must start with mongodb:// or mongodb+srv://")
        return value

    @property
    def is_embedded(self) -> bool:
        return self.uri is None
