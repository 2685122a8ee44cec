"""Connect to the store (a MongoDB replica set or the embedded store) and bind beanie.

The code never branches on which store it talks to, with one exception kept here: the
embedded store's transactions are not isolated (an abort can undo another client's
commit), so on it every transaction holds a cross-process file lock (DESIGN §5).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path
from typing import Any

from beanie import init_beanie
from pymongo import AsyncMongoClient
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from .config import MongoConfig
from .embedded import EmbeddedServer
from .errors import ExternalError
from .models import ALL_MODELS

LOCK_TIMEOUT_S = 120.0


class TransactionLock:
    """Serialises transactions across coroutines (asyncio.Lock) and processes (flock).

    flock locks belong to an open file description, so every acquisition opens the file
    afresh; polling with LOCK_NB keeps the event loop free while another process holds it.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local: asyncio.Lock | None = None

    @asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        if self._local is None:
            self._local = asyncio.Lock()
        async with self._local:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                deadline = time.monotonic() + LOCK_TIMEOUT_S
                delay = 0.001
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if time.monotonic() > deadline:
                            raise ExternalError(f"timed out waiting for the store's transaction"
                                                f" lock {self.path}", transient=True) from None
                        await asyncio.sleep(delay)
                        delay = min(delay * 2, 0.05)
                yield
            finally:
                os.close(fd)


@dataclass
class Store:
    """A connected client, its database, and the transaction policy for that store."""

    client: AsyncMongoClient[dict[str, Any]]
    database: AsyncDatabase[dict[str, Any]]
    description: str
    lock: TransactionLock | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def is_embedded(self) -> bool:
        return self.lock is not None

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        """Hold the embedded store's lock (a no-op on MongoDB) for a multi-write step."""
        if self.lock is None:
            yield
        else:
            async with self.lock.hold():
                yield

    @asynccontextmanager
    async def session(self, *, transaction: bool) -> AsyncIterator[AsyncClientSession]:
        """A session, optionally inside a transaction that commits on success."""
        async with self.exclusive(), self.client.start_session() as session:
            if not transaction:
                yield session
                return
            await session.start_transaction()
            try:
                yield session
            except BaseException:
                if session.in_transaction:
                    await session.abort_transaction()
                raise
            await session.commit_transaction()

    async def bind(self, *, create_indexes: bool = True) -> None:
        """Bind every document model to this store's database (beanie state is global)."""
        await init_beanie(database=self.database, document_models=list(ALL_MODELS),
                          skip_indexes=not create_indexes)

    async def close(self) -> None:
        await self.client.close()


def client_for(config: MongoConfig, uri: str,
               listeners: list[Any] | None = None) -> AsyncMongoClient[dict[str, Any]]:
    kwargs: dict[str, Any] = {
        "tz_aware": True,
        "tzinfo": UTC,
        "serverSelectionTimeoutMS": int(config.timeout_seconds * 1000),
        "connectTimeoutMS": int(config.timeout_seconds * 1000),
    }
    if listeners:
        kwargs["event_listeners"] = listeners
    if not config.is_embedded:
        if config.user:
            kwargs["username"] = config.user
        if config.password is not None:
            kwargs["password"] = config.password.get_secret_value()
        if config.auth_source:
            kwargs["authSource"] = config.auth_source
        if config.tls:
            kwargs["tls"] = True
        if config.tls_ca_file:
            kwargs["tlsCAFile"] = str(config.tls_ca_file)
    return AsyncMongoClient(uri, **kwargs)


async def connect(config: MongoConfig, *, autostart: bool = True, database: str | None = None,
                  notify: Callable[[str], None] | None = None,
                  create_indexes: bool = True, listeners: list[Any] | None = None) -> Store:
    """Connect, verify the store answers, and bind every document model to it.

    With the embedded store, a server that is down is started in the background when
    ``autostart`` is set (``notify`` is told so); otherwise it is an ``ExternalError``.
    """
    from .config import mask_uri

    lock: TransactionLock | None = None
    notes: list[str] = []
    if config.is_embedded:
        server = EmbeddedServer(config.embedded)
        if not server.is_up():
            if not autostart:
                raise ExternalError(f"the embedded store is not running on {server.host}:"
                                    f"{server.port} (start it with `cheeto db serve`)")
            pid = await asyncio.to_thread(server.start_background)
            note = (f"started the embedded store in the background (pid {pid}, "
                    f"data {server.data_dir}, port {server.port})")
            notes.append(note)
            if notify is not None:
                notify(note)
        uri = server.uri
        lock = TransactionLock(server.lock_path)
        description = f"embedded store {server.host}:{server.port} ({server.data_dir})"
    else:
        assert config.uri is not None
        uri = config.uri
        description = f"MongoDB {mask_uri(uri)}"
    db_name = database or config.database
    client = client_for(config, uri, listeners)
    try:
        await client.admin.command("ping")
    except PyMongoError as exc:
        await client.close()
        raise ExternalError(f"cannot reach {description}: {_first_line(exc)}",
                            transient=True) from None
    store = Store(client=client, database=client[db_name],
                  description=f"{description} db={db_name}", lock=lock, notes=notes)
    await store.bind(create_indexes=create_indexes)
    return store


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
