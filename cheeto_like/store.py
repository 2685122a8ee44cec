"""Connect to the store (a MongoDB replica set or the embedded store) and bind beanie.

The code never branches on which store it talks to, with one exception kept here: on
the embedded store, whose server runs one transaction at a time (``embedded_server``),
transactions also take a cross-process file lock, so that waiting happens in the clients
rather than on the server (DESIGN §5). Correctness does not rest on that lock.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import random
import re
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path
from typing import Any

from beanie import init_beanie
from pymongo import AsyncMongoClient, InsertOne, UpdateOne, WriteConcern, monitoring
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import (
    ClientBulkWriteException,
    DuplicateKeyError,
    OperationFailure,
    PyMongoError,
)

from . import metrics, models, store_files
from .config import MongoConfig
from .embedded import EmbeddedServer
from .embedded_common import IDENTITY_COMMAND, TOKEN_ENV
from .errors import ConfigError, ExternalError
from .models.applied import ensure_indexes as ensure_applied_indexes
from .models.names import ensure_registry

LOCK_TIMEOUT_S = 120.0
# Transactions are committed with w: majority: a commit acknowledged by the primary alone
# can be rolled back by an election, after the caller was told it happened.
MAJORITY = WriteConcern("majority")
COMMIT_BACKOFF_MAX_S = 0.5
MAX_TIME_EXPIRED = 50  # a commit that ran out of maxCommitTimeMS is not retried
CLIENT_BULK_WIRE_VERSION = 25  # MongoDB 8.0: the client-level bulkWrite command
DUPLICATE_KEY = 11000
WRITE_CONFLICT = 112
NO_SUCH_TRANSACTION = 251
# The ``command`` label of cheeto_store_command_duration_seconds: a bounded set (any
# other command name is "other"), so a label never carries what a client chose.
TIMED_COMMANDS = frozenset({
    "find", "insert", "update", "delete", "aggregate", "findAndModify", "getMore", "count",
    "distinct", "bulkWrite", "commitTransaction", "abortTransaction", "hello", "ping",
    "listIndexes", "createIndexes", "listCollections", "killCursors", "endSessions",
    "dropIndexes", "drop", "renameCollection",
})
STARTED_MEMORY = 10_000  # started commands awaiting their reply kept at most (no leak)


class CommandTimer(monitoring.CommandListener):
    """Feeds ``cheeto_store_command_duration_seconds{command}``: each command's started
    event is paired with its succeeded or failed event by (connection, request id), and
    the driver's measured duration is observed under the started command's name.

    Registered only on clients made while metrics are on (``client_for``), so the CLI
    and the benches pay nothing; pymongo calls it on the thread that runs the command,
    and the dict operations it uses are atomic."""

    def __init__(self) -> None:
        self._started: dict[tuple[Any, int], str] = {}

    @staticmethod
    def label(command_name: str) -> str:
        return command_name if command_name in TIMED_COMMANDS else "other"

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if len(self._started) >= STARTED_MEMORY:
            self._started.clear()  # replies that never came (a dropped connection)
        self._started[(event.connection_id, event.request_id)] = self.label(
            event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        self._finish(event)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self._finish(event)

    def _finish(self, event: monitoring.CommandSucceededEvent
                | monitoring.CommandFailedEvent) -> None:
        command = self._started.pop((event.connection_id, event.request_id), None)
        if command is not None:
            metrics.observe("cheeto_store_command_duration_seconds",
                            event.duration_micros / 1e6, command=command)


@dataclass(frozen=True, slots=True)
class Write:
    """One write of ``Store.write_together``: an insert of ``document``, or an
    ``update_one`` of ``filter`` with ``update``, in ``collection``."""

    collection: str
    document: dict[str, Any] | None = None
    filter: dict[str, Any] | None = None
    update: dict[str, Any] | None = None


class TransactionLock:
    """Serialises transactions across coroutines (asyncio.Lock) and processes (flock).

    A fast path only: the embedded server serialises transactions itself and rolls back
    those of clients that go away. flock locks belong to an open file description, so
    every acquisition opens the file afresh; polling with LOCK_NB keeps the event loop
    free while another process holds it. A client that does not share the data directory
    (a container reaching the store over TCP) has no file to lock and skips it.

    After ``wait`` seconds (the server's lock timeout) without the file lock, the client
    goes on without it: the holder may be stopped (Ctrl-Z) or hung, and only the server
    can roll its silent transaction back, which it does once another client waits there.
    """

    def __init__(self, path: Path, wait: float = LOCK_TIMEOUT_S) -> None:
        self.path = path
        self.wait = wait
        self._local: asyncio.Lock | None = None

    @asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        if self._local is None:
            self._local = asyncio.Lock()
        async with self._local:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            except (FileNotFoundError, PermissionError):
                yield
                return
            try:
                deadline = time.monotonic() + self.wait
                delay = 0.001
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if time.monotonic() > deadline:
                            break  # the server arbitrates (see the class docstring)
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
    # Embedded store only: re-checks the database file before every session
    # (``store_files.FileGuard``), so a file deleted under the server refuses writes.
    file_guard: store_files.FileGuard | None = None
    # How long an operation keeps retrying transient transaction errors and unknown
    # commit results (``mongo.transaction_retry_seconds``; pymongo's with_transaction: 120).
    transaction_retry_seconds: float = 120.0
    # Whether every server known has the client-level bulkWrite (decided at first use).
    _client_bulk: bool | None = None

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
    async def session(self, *, transaction: bool,
                      deadline: float | None = None) -> AsyncIterator[AsyncClientSession]:
        """A session, optionally inside a transaction (``w: majority``) that commits on
        success.

        A commit whose outcome is unknown (``UnknownTransactionCommitResult``: the reply
        was lost, a failover, a write concern timeout) is retried, as pymongo's
        ``with_transaction`` does, until it is known or ``deadline`` (``time.monotonic``;
        default: ``transaction_retry_seconds`` from now) passes; retrying the commit of
        a committed transaction answers ok. Whole-transaction retries (the
        ``TransientTransactionError`` label) are the caller's (``Operation.run``).
        """
        if self.file_guard is not None:
            self.file_guard()
        if deadline is None:
            deadline = time.monotonic() + self.transaction_retry_seconds
        async with self.exclusive(), self.client.start_session() as session:
            if not transaction:
                yield session
                return
            await session.start_transaction(write_concern=MAJORITY)
            try:
                yield session
            except BaseException:
                if session.in_transaction:
                    await session.abort_transaction()
                raise
            await commit_with_retry(session, deadline)

    async def write_together(self, session: AsyncClientSession,
                             writes: list[Write]) -> None:
        """Apply ``writes`` (in order; the first failure stops the rest) in one round
        trip where the store has MongoDB 8.0's client-level ``bulkWrite`` (the embedded
        store has it), else one ``bulk_write`` per run of writes to one collection.

        Why: the end of every operation writes to two collections (its generation
        marks, its History row) just before the commit; one command instead of two is
        a round trip less per operation. Errors come out as a collection write's
        would: ``DuplicateKeyError`` for a unique index, the command's own error (with
        its labels, ``TransientTransactionError``) when the whole command failed.
        """
        if not writes:
            return
        if self._client_bulk is None:
            self._client_bulk = client_bulk_write_supported(self.client)
        if not self._client_bulk:
            await self._write_per_collection(session, writes)
            return
        db = self.database.name
        models: list[Any] = [
            InsertOne(w.document, namespace=f"{db}.{w.collection}") if w.document is not None
            else UpdateOne(w.filter or {}, w.update or {}, namespace=f"{db}.{w.collection}")
            for w in writes]
        try:
            await self.client.bulk_write(models, session=session, ordered=True)
        except ClientBulkWriteException as exc:
            raise _collection_write_error(exc) from None

    async def _write_per_collection(self, session: AsyncClientSession,
                                    writes: list[Write]) -> None:
        start = 0
        while start < len(writes):
            end = start
            while end < len(writes) and writes[end].collection == writes[start].collection:
                end += 1
            batch = [InsertOne(w.document) if w.document is not None
                     else UpdateOne(w.filter or {}, w.update or {})
                     for w in writes[start:end]]
            coll = self.database[writes[start].collection]
            if len(batch) == 1 and isinstance(batch[0], InsertOne):
                await coll.insert_one(writes[start].document or {}, session=session)
            else:
                await coll.bulk_write(batch, ordered=True, session=session)
            start = end

    async def bind(self, *, create_indexes: bool = True, only_loaded: bool = False) -> None:
        """Bind every document model to this store's database (beanie state is global).

        ``only_loaded`` binds just the documents whose modules are imported already
        (``models.loaded_models``): a read-only CLI command imports what it reads before
        it connects, and binding the other ~30 would cost their import and beanie's
        set-up of each (issue 31). Never with ``create_indexes``: a writer's connect
        makes every collection's indexes."""
        chosen = (models.loaded_models() if only_loaded and not create_indexes
                  else list(models.ALL_MODELS))
        await init_beanie(database=self.database, document_models=chosen,
                          skip_indexes=not create_indexes)

    async def drop_database(self) -> None:
        """Drop this store's database on purpose (tests, benchmarks). On the embedded
        store that deletes its file, so the file's record is dropped with it and the
        next file is adopted instead of refused as a replacement."""
        await self.client.drop_database(self.database.name)
        if self.file_guard is not None:
            self.file_guard.dropped()

    async def close(self) -> None:
        await self.client.close()


# Writes an operation's transaction holds back to send with its History row (``defer``).
_DEFERRED: weakref.WeakKeyDictionary[AsyncClientSession, list[Write]] = (
    weakref.WeakKeyDictionary())


@contextmanager
def deferring(session: AsyncClientSession) -> Iterator[list[Write]]:
    """While open, ``defer(session, …)`` collects writes for ``session`` into the list
    it yields instead of sending them (``Operation._run`` sends them at the end with
    the generation marks and the History row, in one command)."""
    pending: list[Write] = []
    _DEFERRED[session] = pending
    try:
        yield pending
    finally:
        _DEFERRED.pop(session, None)


def defer(session: AsyncClientSession | None, write: Write) -> bool:
    """Hold ``write`` back until the end of the operation whose transaction ``session``
    is in; False (nothing held) outside one: the caller writes now. Only for writes
    nothing in the transaction reads back (``mark_ldap_dirty``'s version bumps)."""
    pending = _DEFERRED.get(session) if session is not None else None
    if pending is None:
        return False
    pending.append(write)
    return True


def client_bulk_write_supported(client: AsyncMongoClient[dict[str, Any]]) -> bool:
    """Whether every server the client knows speaks MongoDB 8.0's wire version (the
    client-level ``bulkWrite``); read from the topology pymongo already holds, so it
    costs no round trip. A store of mixed versions (mid-upgrade) answers no."""
    servers = [sd for sd in client.topology_description.server_descriptions().values()
               if sd.is_server_type_known]
    return bool(servers) and all(
        (sd.max_wire_version or 0) >= CLIENT_BULK_WIRE_VERSION for sd in servers)


def _collection_write_error(exc: ClientBulkWriteException) -> PyMongoError:
    """The error a collection's write would have raised for what failed in a client
    bulkWrite: the command's own error, else its first write error (11000 as
    ``DuplicateKeyError``, which ``Operation.run`` knows)."""
    if isinstance(exc.error, PyMongoError):
        return exc.error
    first = dict((exc.write_errors or [{}])[0])
    code = first.get("code")
    message = str(first.get("errmsg") or exc)
    if code == DUPLICATE_KEY:
        return DuplicateKeyError(message, code, first)
    if code in (WRITE_CONFLICT, NO_SUCH_TRANSACTION):  # as a collection write's would be
        first["errorLabels"] = [*first.get("errorLabels", ()), "TransientTransactionError"]
    return OperationFailure(message, code, first)


async def commit_with_retry(session: AsyncClientSession, deadline: float) -> None:
    """Commit; while the result is unknown and time is left, commit again (jittered
    backoff up to ``COMMIT_BACKOFF_MAX_S``: an election takes seconds)."""
    retry = 0
    while True:
        try:
            await session.commit_transaction()
            return
        except PyMongoError as exc:
            unknown = exc.has_error_label("UnknownTransactionCommitResult") and not (
                isinstance(exc, OperationFailure) and exc.code == MAX_TIME_EXPIRED)
            if not unknown:
                raise
            metrics.inc("cheeto_store_transaction_retries_total", reason="unknown_commit")
            retry += 1
            pause = random.random() * min(0.005 * 1.5 ** retry,
                                          COMMIT_BACKOFF_MAX_S)
            if time.monotonic() + pause >= deadline:
                raise
            await asyncio.sleep(pause)


def credential_options(config: MongoConfig) -> dict[str, Any]:
    """A real MongoDB's credentials and TLS as pymongo options: one function, so the
    Celery result backend (``daemon.settings.result_backend``) reaches the store exactly
    as the store's own client does."""
    options: dict[str, Any] = {}
    if config.user:
        options["username"] = config.user
    if config.password is not None:
        options["password"] = config.password.get_secret_value()
    if config.auth_source:
        options["authSource"] = config.auth_source
    if config.tls:
        options["tls"] = True
    if config.tls_ca_file:
        options["tlsCAFile"] = str(config.tls_ca_file)
    return options


def client_for(config: MongoConfig, uri: str, listeners: list[Any] | None = None,
               extra: dict[str, Any] | None = None, *,
               long_running: bool = False) -> AsyncMongoClient[dict[str, Any]]:
    """The client for ``config``: ``w: majority`` for every write (leases, syncs, usage
    as well as the operations' transactions), and a server selection timeout that waits
    out an election (``election_wait_seconds``) in daemons, workers and the API
    (``long_running``), or ``timeout_seconds`` for a person at the CLI."""
    kwargs: dict[str, Any] = {
        "tz_aware": True,
        "tzinfo": UTC,
        "serverSelectionTimeoutMS": int(server_selection_seconds(config, long_running)
                                        * 1000),
        "connectTimeoutMS": int(config.timeout_seconds * 1000),
        "w": "majority",
    }
    if metrics.active():  # a daemon process: time every command (CommandTimer)
        listeners = [*(listeners or []), CommandTimer()]
    if listeners:
        kwargs["event_listeners"] = listeners
    if not config.is_embedded:
        kwargs.update(credential_options(config))
    kwargs.update(extra or {})
    return AsyncMongoClient(uri, **kwargs)


def server_selection_seconds(config: MongoConfig, long_running: bool) -> float:
    """How long a process waits for a primary: daemons out-wait an election (10-12 s on
    a replica set) rather than fail every task and request during one; the CLI answers
    its person sooner (``timeout_seconds``), and never waits longer than a daemon."""
    if long_running:
        return max(config.election_wait_seconds, config.timeout_seconds)
    return config.timeout_seconds


def refuse_secondary_reads(client: AsyncMongoClient[dict[str, Any]]) -> None:
    """Transactions must read from the primary, and an operation's pre-checks must see
    the latest writes: a URI whose readPreference is anything but ``primary`` would fail
    every transaction, so it is refused at connect with one line."""
    mode = client.read_preference
    if mode.mode != 0:
        raise ConfigError(f"mongo.uri: readPreference={mode.mongos_mode} is not supported "
                          "(transactions and operations read from the primary); remove "
                          "it from the URI")


async def connect(config: MongoConfig, *, autostart: bool = True, database: str | None = None,
                  notify: Callable[[str], None] | None = None,
                  create_indexes: bool = True, listeners: list[Any] | None = None,
                  long_running: bool = False, only_loaded: bool = False) -> Store:
    """Connect, verify the store answers, and bind every document model to it.

    With the embedded store, a server that is down is started in the background when
    ``autostart`` is set (``notify`` is told so); otherwise it is an ``ExternalError``.
    ``long_running`` (daemons, workers, the API) waits out an election when selecting a
    server (``client_for``). ``only_loaded`` (with ``create_indexes=False``: a read-only
    command) binds only the documents already imported (``Store.bind``). A URI reading
    from secondaries is a ``ConfigError``.
    """
    from .config import mask_uri

    lock: TransactionLock | None = None
    notes: list[str] = []
    checked: store_files.Checked | None = None
    if config.is_embedded:
        server = EmbeddedServer(config.embedded)
        up = server.is_up()
        checked = store_files.check_before_connect(server.data_dir, database or config.database,
                                                   server_up=up)
        if not up:
            if not autostart:
                raise ExternalError(f"the embedded store is not running on {server.address}"
                                    " (start it with `cheeto db serve`)")
            pid = await asyncio.to_thread(server.start_background)
            note = (f"started the embedded store in the background (pid {pid}, "
                    f"data {server.data_dir}, {server.address})")
            notes.append(note)
            if notify is not None:
                notify(note)
        uri = server.uri
        lock = TransactionLock(server.lock_path, config.embedded.lock_timeout_seconds)
        description = f"embedded store {server.address} ({server.data_dir})"
    else:
        assert config.uri is not None
        uri = config.uri
        description = f"MongoDB {mask_uri(uri)}"
    db_name = database or config.database
    try:
        client = client_for(config, uri, listeners,
                            server.client_options() if config.is_embedded else None,
                            long_running=long_running)
    except (PyMongoError, ValueError, TypeError) as exc:  # InvalidURI, bad URI options
        raise ConfigError(f"mongo.uri: {_first_line(exc)}") from None
    try:
        refuse_secondary_reads(client)
    except ConfigError:
        await client.close()
        raise
    try:
        if config.is_embedded:
            await verify_embedded(client, server, config)
        else:
            await client.admin.command("ping")
    except PyMongoError as exc:
        await client.close()
        raise ExternalError(f"cannot reach {description}: {_reach_problem(exc)}",
                            transient=True) from None
    except ExternalError:
        await client.close()
        raise
    store = Store(client=client, database=client[db_name],
                  description=f"{description} db={db_name}", lock=lock, notes=notes,
                  transaction_retry_seconds=config.transaction_retry_seconds)
    try:
        await store.bind(create_indexes=create_indexes, only_loaded=only_loaded)
        if create_indexes:  # a writer's connect: migrate a store from before the registry
            await ensure_registry(store.database)
            await ensure_applied_indexes(store.database)
    except PyMongoError as exc:
        await client.close()
        raise _bind_error(store, checked, exc) from None
    if checked is not None:
        store.file_guard, created = store_files.after_connect(checked)
        if created is not None:
            notes.append(created)
            if notify is not None:
                notify(created)
    return store


async def verify_embedded(client: AsyncMongoClient[dict[str, Any]], server: EmbeddedServer,
                          config: MongoConfig) -> None:
    """Ask the server which data directory it serves and refuse one that is not ours
    (this replaces the ping). A TCP credential that does not fit is told apart from a
    server of another data directory by asking again without one (the identity
    command needs no authentication)."""
    from pymongo.errors import OperationFailure

    try:
        reply = await client.admin.command(IDENTITY_COMMAND)
    except OperationFailure as exc:
        if exc.code != 18:  # AuthenticationFailed
            raise
        probe = client_for(config, server.uri)
        try:
            server.check_identity(await probe.admin.command(IDENTITY_COMMAND))
        finally:
            await probe.close()
        raise ExternalError(f"the embedded store at {server.address} refused this config's "
                            f"credential (embedded.token, ${TOKEN_ENV} or "
                            f"{server.token_path})") from None
    server.check_identity(reply)


def _bind_error(store: Store, checked: store_files.Checked | None,
                exc: PyMongoError) -> ExternalError:
    """One line for a store that answers but cannot serve the database (a file damaged
    after the connect-time check shows up here as "file is not a database")."""
    if checked is not None:
        path = store_files.database_file(checked.data_dir, checked.database)
        if (problem := store_files.header_problem(path)) is not None:
            return store_files.damage_error(path, problem)
        return ExternalError(f"{store.description}: {path}: {_first_line(exc)}")
    return ExternalError(f"{store.description}: {_first_line(exc)}")


_REACH_NOISE = re.compile(r" \(configured timeouts: [^)]*\)")
REACH_PROBLEM_MAX = 200


def _reach_problem(exc: BaseException) -> str:
    """The host and cause of a failed ping, without pymongo's topology dump (hundreds of
    characters of server descriptions after ``, Timeout:``)."""
    text = _first_line(exc).split(", Timeout: ")[0]
    text = _REACH_NOISE.sub("", text)
    if len(text) > REACH_PROBLEM_MAX:
        text = text[:REACH_PROBLEM_MAX - 1] + "…"
    return text


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
