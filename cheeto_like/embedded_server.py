"""The embedded store's server process: nx-27017's command handler behind our own wire loop.

Why our own loop rather than nx-27017's: nx-27017 runs every client's commands on one
SQLite connection per database. A transaction left open by a client that died (SIGKILL,
SIGTERM, a reset) stayed open forever, and every later write ran inside it and was lost;
two sessions' transactions nested as savepoints of each other ("no such savepoint").
Here the server owns transactions:

- ``TransactionGate``: one transaction at a time across all connections. Every other
  command that touches the data (reads too: they would see uncommitted rows on the shared
  connection) waits for it server-side, and fails after ``--lock-timeout`` seconds with
  ``LockTimeout`` instead of hanging.
- The connections that carried a command of the open transaction are remembered; when
  one of them closes, the transaction is rolled back and the gate released. (Only those:
  pymongo reuses lsids across its pooled connections, so a connection that saw the
  session before its transaction began says nothing about it.)
- Over TCP a connection must authenticate (SCRAM-SHA-256, the token as password; PLAIN
  is still accepted) before any command but the handshake. ``cheetoIdentity`` answers
  the data directory's real path and instance id, so clients can refuse a server that
  is not theirs.
- ``renameCollection`` is ours (mongod's form on ``admin``, ``dropTarget``, one SQLite
  transaction), and no transaction may drop or rename (mongod's 263): nx-27017's
  collection cache does not roll back with SQLite.

The process sets umask 077 and makes its data directory 0700 and the files in it 0600.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import fcntl
import hashlib
import hmac
import logging
import os
import re
import secrets
import signal
import struct
import sys
import threading
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import store_files
from .embedded_common import (
    IDENTITY_COMMAND,
    SOCKET_NAME,
    TOKEN_ENV,
    TOKEN_NAME,
    TOKEN_USER,
    ensure_instance_id,
    write_private,
)
from .processes import process_gone

logger = logging.getLogger("cheeto_like.embedded_server")

EXIT_GRACE_S = 5.0
EXIT_WITH_POLL_S = 1.0  # how often ``--exit-with`` looks at the process it follows
HEADER = struct.Struct("<iiii")
HANDSHAKE = frozenset({"hello", "Hello", "isMaster", "ismaster"})
PREAUTH = HANDSHAKE | {"saslStart", "saslContinue", IDENTITY_COMMAND}
# Commands that never touch SQLite (or only the cursor lists nx keeps in memory).
UNGATED = HANDSHAKE | {"ping", "buildInfo", "buildinfo", "whatsmyuri", "getMore",
                       "killCursors", "serverStatus", "getLastError", "getParameter"}
COMMITTED_MEMORY = 1024
# Every key nx-27017's handler dispatches on (it tests membership, in its own order, and
# runs ``handle_insert`` for any body holding ``insert``). A body must carry exactly one,
# so the command we check (authentication, the gate, the file watch) is the one it runs.
DISPATCH_KEYS = frozenset({
    "abortTransaction", "aggregate", "buildInfo", "buildinfo", "bulkWrite", "collStats",
    "collstats", "commitTransaction", "compact", "compactcollection", "count", "create",
    "createIndex", "createIndexes", "createSearchIndexes", "createsearchindexes", "dbStats",
    "dbstats", "delete", "distinct", "drop", "dropDatabase", "dropIndex", "dropIndexes",
    "dropSearchIndex", "dropdatabase", "dropsearchindex", "endSessions", "explain", "find",
    "findAndModify", "findandmodify", "getMore", "hello", "Hello", "insert", "isMaster",
    "ismaster", "killCursors", "listCollections", "listDatabases", "listIndexes",
    "listSearchIndexes", "listcollections", "listdatabases", "listindexes",
    "listsearchindexes", "openDownloadStream", "reIndex", "reindex", "renameCollection",
    "renamecollection", "serverStatus", "startSession", "update", "updateSearchIndex",
    "updatesearchindex", "upload", "vacuum", "validate",
})
# Second dispatch keys a real command carries (findAndModify's ``update`` document; an
# aggregate's ``explain: true``): the handler tests the first of each pair first.
COMPANION_KEYS = {"findAndModify": {"update"}, "findandmodify": {"update"},
                  "aggregate": {"explain"}}
# Commands that may come with document sequences (OP_MSG kind 1).
SEQUENCE_COMMANDS = frozenset({"insert", "update", "delete", "bulkWrite"})

# MongoDB's limits (docs "MongoDB Limits and Thresholds"): a stored document is at most
# 16 MiB; a document the server builds (an aggregation result) may reach 16 MiB + 16 KiB
# (BSONObjMaxInternalSize) before mongod refuses it with BSONObjectTooLarge.
MAX_DOCUMENT_SIZE = 16 * 1024 * 1024
MAX_INTERNAL_SIZE = MAX_DOCUMENT_SIZE + 16 * 1024
DEFAULT_TRANSACTION_LIFETIME_S = 60
# Parameters ``setParameter``/``getParameter`` serve (mongod's names). ``enableTestCommands``
# is start-up only (``--set-parameter enableTestCommands=1``), as on mongod.
RUNTIME_PARAMETERS = frozenset({"transactionLifetimeLimitSeconds"})
STARTUP_PARAMETERS = frozenset({"enableTestCommands"}) | RUNTIME_PARAMETERS
# Error codes mongod labels RetryableWriteError on a retryable write (the retryable-writes
# spec's list); drivers talking to a 4.4+ server retry a write only on that label.
RETRYABLE_CODES = frozenset({6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436})
# Commands of a retryable write (a ``txnNumber`` outside a transaction).
RETRYABLE_WRITES = frozenset({"insert", "update", "delete", "findAndModify", "findandmodify",
                              "bulkWrite"})
RETRIED_MEMORY = 1024
REPLICA_SET_NAME = "cheeto-embedded"


def _error(message: str, code: int, code_name: str, *labels: str) -> dict[str, Any]:
    doc: dict[str, Any] = {"ok": 0, "errmsg": message, "code": code, "codeName": code_name}
    if labels:
        doc["errorLabels"] = list(labels)
    return doc


def _malformed(msg: dict[str, Any]) -> str | None:
    """Why an OP_MSG is refused before anything reads it as a command (None: fine).

    nx-27017 runs the *last* body section, treats any body holding ``insert`` (or any
    document sequence) as an insert, and picks a command by testing keys in its own
    order; the server checks the first key of the body. Those must be one and the same
    command, or a handshake could carry a write past authentication and the gate."""
    bodies = [doc for kind, doc in msg["sections"] if kind == "body"]
    if len(bodies) != 1 or not isinstance(bodies[0], dict) or not bodies[0]:
        return "an OP_MSG must carry exactly one command document"
    cmd = bodies[0]
    name = next(iter(cmd))
    extra = {k for k in cmd if k in DISPATCH_KEYS} - {name} - COMPANION_KEYS.get(name, set())
    if extra:
        return f"command {name} carries another command ({sorted(extra)[0]})"
    if len(msg["sections"]) > 1 and name not in SEQUENCE_COMMANDS:
        return f"command {name} takes no document sequence"
    return None


def _numeric_path(update: Any) -> str | None:
    """The first update path with an array-index part (``items.3``), if any."""
    if not isinstance(update, dict):
        return None  # a pipeline update: nothing of ours sends one
    for operator, fields in update.items():
        if operator.startswith("$") and isinstance(fields, dict):
            for path in fields:
                if any(part.isdigit() for part in str(path).split(".")):
                    return str(path)
    return None


def _unsupported(msg: dict[str, Any]) -> str | None:
    """Why an update is refused although it is valid MongoDB (None: fine).

    nx-27017 answers ``{"$set": {"items.3": …}}`` (an array element by index) with
    success and changes nothing. A write that silently does not happen is worse than an
    error, so such updates fail loudly here; use a whole-field ``$set`` or
    ``array_filters`` (tests/test_store_conformance.py covers those)."""
    updates: list[Any] = []
    for kind, doc in msg["sections"]:
        if kind == "body" and isinstance(doc, dict):
            updates += [u.get("u") for u in doc.get("updates") or [] if isinstance(u, dict)]
            if "findAndModify" in doc or "findandmodify" in doc:
                updates.append(doc.get("update"))
        elif kind == "payload" and isinstance(doc, dict):
            updates += [u.get("u") for u in doc.get("updates") or [] if isinstance(u, dict)]
    for update in updates:
        if (path := _numeric_path(update)) is not None:
            return (f"the embedded store cannot update an array element by index "
                    f"({path!r}); set the whole field instead")
    return None


# -- MongoDB's document size limit ---------------------------------------------------------

_LIMITS = threading.local()  # per worker thread: ``big`` (the message exceeds 16 MiB)


class ResultTooLarge(Exception):
    """An update (or an upsert, a replacement) would store a document past 16 MiB."""

    def __init__(self, size: int) -> None:
        super().__init__(f"Resulting document after update is larger than {MAX_DOCUMENT_SIZE}")
        self.size = size


def bson_size(doc: Any) -> int:
    """A document's encoded size (a value bson cannot encode, such as neosqlite's own
    ObjectId, counts as its text: at most a few bytes more than the real encoding)."""
    import bson
    from bson.codec_options import CodecOptions, TypeRegistry

    try:
        return len(bson.encode(doc))
    except Exception:  # an odd value: measure it as text instead
        options = CodecOptions(type_registry=TypeRegistry(fallback_encoder=str))
        return len(bson.encode(doc, codec_options=options))


def install_size_limits() -> None:
    """Refuse what mongod refuses: an update whose resulting document exceeds 16 MiB
    (code 17419, nothing written: the document's update runs in a savepoint that is
    rolled back), and an oversized replacement or upserted document.

    nx-27017 stores whatever it gets. The checks sit where neosqlite writes one document
    (``_internal_update``, ``_internal_replace``, ``_internal_insert``), so every command
    shape (update, findAndModify, bulkWrite, upserts) passes them. Replacements and
    inserts are only measured when the message itself exceeds 16 MiB (``_LIMITS.big``):
    a smaller message cannot carry a larger document. Idempotent."""
    from neosqlite.collection.query_helper import QueryHelper
    from nx_27017 import handler as nx_handler

    if getattr(QueryHelper, "_cheeto_limits", False):
        return
    update = QueryHelper._internal_update
    replace = QueryHelper._internal_replace
    insert = QueryHelper._internal_insert
    bulk_write_error = nx_handler._bulk_write_error

    def refuse(size: int) -> None:
        _LIMITS.too_large = exc = ResultTooLarge(size)  # nx-27017 swallows some errors
        raise exc

    def _internal_update(self: Any, doc_id: Any, update_spec: Any, original_doc: Any,
                         *args: Any, **kwargs: Any) -> Any:
        db = self.collection.db
        db.execute("SAVEPOINT cheeto_size")
        try:
            updated, modified = update(self, doc_id, update_spec, original_doc,
                                       *args, **kwargs)
            if (size := bson_size(updated)) > MAX_DOCUMENT_SIZE:
                refuse(size)
        except BaseException:
            db.execute("ROLLBACK TO cheeto_size")
            db.execute("RELEASE cheeto_size")
            raise
        db.execute("RELEASE cheeto_size")
        return updated, modified

    def _internal_replace(self: Any, doc_id: Any, replacement: Any) -> Any:
        if getattr(_LIMITS, "big", False) and (size := bson_size(replacement)) > \
                MAX_DOCUMENT_SIZE:
            refuse(size)
        return replace(self, doc_id, replacement)

    def _internal_insert(self: Any, document: Any) -> Any:
        if getattr(_LIMITS, "big", False) and (size := bson_size(document)) > \
                MAX_DOCUMENT_SIZE:
            refuse(size)
        return insert(self, document)

    def _bulk_write_error(exc: Exception, index: int) -> dict[str, Any]:
        if isinstance(exc, ResultTooLarge):
            if getattr(_LIMITS, "command", None) == "insert":
                return {"index": index, "code": 2,
                        "errmsg": f"object to insert too large. size in bytes: {exc.size}, "
                                  f"max size: {MAX_DOCUMENT_SIZE}"}
            return {"index": index, "code": 17419, "errmsg": str(exc)}
        return bulk_write_error(exc, index)

    QueryHelper._internal_update = _internal_update
    QueryHelper._internal_replace = _internal_replace
    QueryHelper._internal_insert = _internal_insert
    nx_handler._bulk_write_error = _bulk_write_error
    QueryHelper._cheeto_limits = True


def _insert_documents(msg: dict[str, Any]) -> list[Any]:
    """The documents of an insert, as nx-27017 collects them (sequence, then body)."""
    docs: list[Any] = []
    body: dict[str, Any] = {}
    for kind, doc in msg["sections"]:
        if kind == "payload" and isinstance(doc, dict):
            for value in doc.values():
                docs.extend(value if isinstance(value, list) else [value])
        elif kind == "body" and isinstance(doc, dict):
            body = doc
    docs.extend(body.get("documents") or [])
    return docs


def _object_too_large(size: int, what: str = "") -> dict[str, Any]:
    return _error(f"{what}BSONObj size: {size} ({size:#X}) is invalid. Size must be between "
                  f"0 and {MAX_INTERNAL_SIZE}(16MB)", 10334, "BSONObjectTooLarge")


def _oversized_reply_document(doc: dict[str, Any]) -> int | None:
    """The size of a cursor reply's first document past mongod's internal limit."""
    cursor = doc.get("cursor")
    if not isinstance(cursor, dict):
        return None
    for key in ("firstBatch", "nextBatch"):
        for item in cursor.get(key) or []:
            if (size := bson_size(item)) > MAX_INTERNAL_SIZE:
                return size
    return None


def transaction_database(msg: dict[str, Any], cmd: dict[str, Any]) -> str:
    """The database a transaction's command works in: its ``$db``, except for a client
    ``bulkWrite`` (always sent to ``admin``), whose ``nsInfo`` names it (one database:
    nx-27017 refuses a transaction across databases); that one's ``$db`` becomes it."""
    if "bulkWrite" in cmd:
        infos = cmd.get("nsInfo") or next(
            (doc["nsInfo"] for kind, doc in msg["sections"]
             if kind == "payload" and isinstance(doc, dict) and "nsInfo" in doc), [])
        names = {str(info.get("ns", "")).partition(".")[0] for info in infos
                 if isinstance(info, dict)}
        if len(names) == 1:
            cmd["$db"] = name = names.pop()  # nx-27017 opens its session on ``$db``
            return name
    return str(cmd.get("$db", "test"))


def _lsid(cmd: dict[str, Any]) -> str | None:
    from nx_27017.wire_protocol import _extract_session_id

    lsid = cmd.get("lsid")
    if not isinstance(lsid, dict):
        return None
    return _extract_session_id(lsid)


class TransactionGate:
    """One transaction (or one ungrouped command) on the store at a time.

    ``owner`` is the lsid whose transaction holds the gate and ``txn_number`` its
    transaction number; commands of other lsids wait (FIFO) for the gate. A transaction
    whose client is connected but silent (stopped, hung) for longer than ``timeout``
    while others wait is rolled back, like MongoDB's transaction lifetime limit; one
    that keeps sending commands is never cut short, and its waiters get ``LockTimeout``.
    """

    def __init__(self, handler: Any, timeout: float) -> None:
        self.handler = handler
        self.timeout = timeout
        self._lock = asyncio.Lock()
        self.owner: str | None = None
        self.txn_number: Any = None
        self.busy = 0  # owner commands running now
        self.last_active = 0.0
        self.owner_conns: set[str] = set()  # connections that carried the transaction
        self.committed: OrderedDict[str, Any] = OrderedDict()
        self.lifetime: float = DEFAULT_TRANSACTION_LIFETIME_S  # transactionLifetimeLimitSeconds
        self.started = 0.0  # when the owner's transaction began (loop time)

    async def acquire(self) -> bool:
        if not self._lock.locked() and not getattr(self._lock, "_waiters", None):
            await self._lock.acquire()  # the common case: free, so no timer is needed
            return True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        while True:
            remaining = deadline - loop.time()
            try:
                await asyncio.wait_for(self._lock.acquire(), max(0.001, min(remaining, 0.5)))
                return True
            except TimeoutError:
                pass
            now = loop.time()
            if (self.owner is not None and not self.busy
                    and now - self.last_active >= self.timeout):
                await self.abort_owner(f"silent for {self.timeout:g}s while another client "
                                       "waited")
            elif now >= deadline:
                return False

    @contextlib.asynccontextmanager
    async def owner_command(self) -> AsyncIterator[None]:
        """Mark an owner's command as running (a running transaction is never idle)."""
        self.busy += 1
        try:
            yield
        finally:
            self.busy -= 1
            self.last_active = asyncio.get_running_loop().time()

    def take(self, lsid: str, txn_number: Any, conn_id: str) -> None:
        self.owner = lsid
        self.txn_number = txn_number
        self.owner_conns = {conn_id}
        self.last_active = self.started = asyncio.get_running_loop().time()

    def expired(self) -> bool:
        """The owner's transaction is older than transactionLifetimeLimitSeconds."""
        return (self.owner is not None
                and asyncio.get_running_loop().time() - self.started >= self.lifetime)

    async def reap(self) -> None:
        """mongod's transaction reaper: abort a transaction older than its lifetime, so
        it never keeps the gate from others (one running a command is aborted once that
        command ends: its next command, or this loop's next turn)."""
        while True:
            await asyncio.sleep(max(0.05, min(1.0, self.lifetime / 10)))
            if self.expired() and not self.busy:
                await self.abort_owner(f"older than transactionLifetimeLimitSeconds "
                                       f"({self.lifetime:g}s)")

    def release(self) -> None:
        self.owner = None
        self.txn_number = None
        self.owner_conns = set()
        self._lock.release()

    def remember_commit(self, lsid: str, txn_number: Any) -> None:
        """A retried commit of a transaction that did commit must answer ok."""
        self.committed[lsid] = txn_number
        self.committed.move_to_end(lsid)
        while len(self.committed) > COMMITTED_MEMORY:
            self.committed.popitem(last=False)

    def abort_open(self, lsid: str) -> int:
        """Roll back every open transaction of ``lsid`` (runs in a worker thread)."""
        handler = self.handler
        with handler._sessions_lock:
            open_ = [(db, sess) for (sid, db), sess in handler._sessions.items()
                     if sid == lsid and sess.in_transaction]
        for db_name, sess in open_:
            with handler._lock_for(db_name):
                try:
                    sess.abort_transaction()
                except Exception:  # the connection may be gone; never keep the gate
                    logger.exception("rolling back a transaction of %s failed", lsid)
                    sess._in_transaction = False
                with contextlib.suppress(Exception):  # a closed database has no cache
                    if (db := handler.databases.get(db_name)) is not None:
                        forget_stale_collections(db)
        return len(open_)

    def in_transaction(self, lsid: str) -> bool:
        handler = self.handler
        with handler._sessions_lock:
            return any(sid == lsid and sess.in_transaction
                       for (sid, _db), sess in handler._sessions.items())

    async def abort_owner(self, why: str) -> None:
        """Roll back the owner's transaction and open the gate (the gate is held). The
        owner is forgotten first, so a command of it arriving meanwhile is refused
        (NoSuchTransaction) rather than run outside its transaction."""
        lsid = self.owner
        if lsid is None:
            return
        self.owner = None
        self.txn_number = None
        self.owner_conns = set()
        count = await asyncio.to_thread(self.abort_open, lsid)
        logger.warning("rolled back the open transaction of session %s (%s; %d database(s))",
                       lsid, why, count)
        self._lock.release()


@dataclass
class ScramConversation:
    client_first_bare: bytes
    server_first: bytes
    nonce: bytes


class Scram:
    """The server side of SCRAM-SHA-256 (RFC 5802/7677) for the one user ``cheeto`` whose
    password is the token. The salted password is derived once per server process."""

    ITERATIONS = 4096  # pymongo refuses fewer

    def __init__(self, token: str) -> None:
        from pymongo.saslprep import saslprep

        self.salt = secrets.token_bytes(16)
        salted = hashlib.pbkdf2_hmac("sha256", saslprep(token).encode(), self.salt,
                                     self.ITERATIONS)
        client_key = hmac.digest(salted, b"Client Key", "sha256")
        self.stored_key = hashlib.sha256(client_key).digest()
        self.server_key = hmac.digest(salted, b"Server Key", "sha256")

    def start(self, payload: bytes) -> ScramConversation | None:
        """``n,,n=cheeto,r=<client nonce>``: answer with our nonce, salt and iterations."""
        if not payload.startswith(b"n,,"):
            return None  # channel binding or an authzid: not offered
        bare = payload[3:]
        fields = dict(item.split(b"=", 1) for item in bare.split(b",") if b"=" in item)
        if fields.get(b"n") != TOKEN_USER.encode() or not fields.get(b"r"):
            return None
        nonce = fields[b"r"] + base64.b64encode(secrets.token_bytes(18))
        server_first = (b"r=" + nonce + b",s=" + base64.b64encode(self.salt)
                        + b",i=" + str(self.ITERATIONS).encode())
        return ScramConversation(bare, server_first, nonce)

    def finish(self, conversation: ScramConversation, payload: bytes) -> bytes | None:
        """``c=biws,r=<nonce>,p=<proof>``: the server signature, or None if the proof is
        wrong."""
        without_proof, sep, proof_field = payload.rpartition(b",p=")
        if not sep or without_proof != b"c=biws,r=" + conversation.nonce:
            return None
        try:
            proof = base64.b64decode(proof_field, validate=True)
        except ValueError:
            return None
        auth_message = b",".join((conversation.client_first_bare, conversation.server_first,
                                  without_proof))
        client_signature = hmac.digest(self.stored_key, auth_message, "sha256")
        if len(proof) != len(client_signature):
            return None
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(hashlib.sha256(client_key).digest(), self.stored_key):
            return None
        return base64.b64encode(hmac.digest(self.server_key, auth_message, "sha256"))


class CloseConnection(Exception):
    """failCommand's ``closeConnection``: drop the client's connection unanswered."""


CODE_NAMES = {
    1: "InternalError", 2: "BadValue", 6: "HostUnreachable", 7: "HostNotFound",
    8: "UnknownError", 11: "UserNotFound", 13: "Unauthorized", 20: "IllegalOperation",
    24: "LockTimeout", 43: "CursorNotFound", 50: "MaxTimeMSExpired", 59: "CommandNotFound",
    64: "WriteConcernFailed", 72: "InvalidOptions", 89: "NetworkTimeout",
    91: "ShutdownInProgress", 100: "UnsatisfiableWriteConcern", 112: "WriteConflict",
    117: "ConflictingOperationInProgress", 189: "PrimarySteppedDown",
    251: "NoSuchTransaction", 262: "ExceededTimeLimit", 9001: "SocketException",
    10107: "NotWritablePrimary", 10334: "BSONObjectTooLarge", 11000: "DuplicateKey",
    11600: "InterruptedAtShutdown", 11602: "InterruptedDueToReplStateChange",
    13435: "NotPrimaryNoSecondaryOk", 13436: "NotPrimaryOrSecondary",
}


def code_name(code: int) -> str:
    """mongod's codeName for a code (``Location<code>`` for an assertion without one)."""
    return CODE_NAMES.get(code, f"Location{code}")


class FailCommand:
    """mongod's ``failCommand`` fail point (``configureFailPoint``, test commands only).

    ``mode``: ``"alwaysOn"``, ``"off"``, ``{times: n}`` (fire n times, then off) or
    ``{skip: n}`` (let n matching commands through, then always on). ``data``:
    ``failCommands`` (command names), optional ``appName`` (only clients whose handshake
    named that application), ``errorCode``, ``errorLabels``, ``writeConcernError``,
    ``closeConnection``, ``blockConnection`` + ``blockTimeMS``. Only matching commands
    count toward ``times``/``skip``, as on mongod."""

    def __init__(self) -> None:
        self.mode = "off"
        self.remaining = 0
        self.data: dict[str, Any] = {}
        self.commands: frozenset[str] = frozenset()
        self.entered = 0

    def configure(self, mode: Any, data: Any) -> str | None:
        """Apply a configureFailPoint; the reason it is refused, or None."""
        if data is not None and not isinstance(data, dict):
            return "'data' must be an object"
        data = dict(data or {})
        if mode in ("off", "alwaysOn"):
            new_mode, remaining = mode, 0
        elif isinstance(mode, dict) and len(mode) == 1 and next(iter(mode)) in ("times",
                                                                                   "skip"):
            key, value = next(iter(mode.items()))
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                return f"'{key}' must be a non-negative integer"
            new_mode, remaining = key, value
            if key == "times" and value == 0:
                new_mode = "off"
        else:
            return f"unknown fail point mode {mode!r}"
        commands = data.get("failCommands", [])
        if new_mode != "off" and (not isinstance(commands, list) or not commands
                                  or not all(isinstance(c, str) for c in commands)):
            return "failCommand needs data.failCommands, a list of command names"
        if "errorCode" in data and (not isinstance(data["errorCode"], int)
                                    or isinstance(data["errorCode"], bool)):
            return "'errorCode' must be an integer"
        if "writeConcernError" in data and not isinstance(data["writeConcernError"], dict):
            return "'writeConcernError' must be an object"
        if "errorLabels" in data and not isinstance(data["errorLabels"], list):
            return "'errorLabels' must be an array"
        self.mode, self.remaining, self.data = new_mode, remaining, data
        self.commands = frozenset(c.lower() for c in commands)
        self.entered = 0  # as mongod's setMode: the reply had the count before this one
        return None

    def fires(self, name: str, app_name: str | None) -> dict[str, Any] | None:
        """The fail point's data when it fires for this command, else None."""
        if self.mode == "off" or name.lower() not in self.commands:
            return None
        wanted = self.data.get("appName")
        if wanted is not None and wanted != app_name:
            return None
        if self.mode == "skip":
            if self.remaining > 0:
                self.remaining -= 1
                return None
        elif self.mode == "times":
            self.remaining -= 1
            if self.remaining <= 0:
                self.mode = "off"
        self.entered += 1
        return self.data


def error_labels(code: int, name: str, cmd: dict[str, Any], *,
                 write_concern: bool = False) -> list[str]:
    """The labels mongod adds to an error it computes labels for itself: a retryable
    code on a retryable write (or a commit/abort) is RetryableWriteError; a command of
    a transaction (but its commit) failing with a transient code is
    TransientTransactionError."""
    labels: list[str] = []
    in_txn = cmd.get("autocommit") is False
    finishing = name in ("commitTransaction", "abortTransaction")
    retryable_write = ((name in RETRYABLE_WRITES and "txnNumber" in cmd and not in_txn)
                       or finishing)
    if retryable_write and code in RETRYABLE_CODES:
        labels.append("RetryableWriteError")
    if (in_txn and not finishing and not write_concern
            and (code in RETRYABLE_CODES or code in (24, 112, 251))):
        labels.append("TransientTransactionError")
    return labels


# -- collections: rename and drop --------------------------------------------------------

# What mongod refuses inside a multi-document transaction (OperationNotSupportedInTransaction)
# and nx-27017 would run there. SQLite rolls DDL back with the transaction, but neosqlite's
# cache of Collection objects does not: a rename rolled back left the staging name serving
# the live data, and a committed one left the new name empty and without its indexes.
NOT_IN_TRANSACTION = frozenset({"drop", "dropDatabase", "dropdatabase", "dropIndexes",
                                "dropIndex", "renameCollection", "renamecollection"})
RENAME_COMMANDS = frozenset({"renameCollection", "renamecollection"})
# neosqlite's table names (``quote_identifier``): a name it cannot store is refused here
# with mongod's InvalidNamespace rather than failing half-way through a rename.
COLLECTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def not_in_transaction(name: str) -> dict[str, Any]:
    """mongod's answer to a command no transaction may run (the transaction stays open)."""
    return _error(f"Cannot run '{name}' in a multi-document transaction.", 263,
                  "OperationNotSupportedInTransaction")


class RenameRefused(Exception):
    """A renameCollection mongod would refuse: the reply to send."""

    def __init__(self, message: str, code: int, code_name: str) -> None:
        super().__init__(message)
        self.reply = _error(message, code, code_name)


def parse_namespace(value: Any, what: str) -> tuple[str, str]:
    """``db.collection`` into its two parts (mongod's TypeMismatch/InvalidNamespace)."""
    if not isinstance(value, str):
        raise RenameRefused(f"BSON field '{what}' is the wrong type "
                            f"'{type(value).__name__}', expected type 'string'", 14,
                            "TypeMismatch")
    database, dot, collection = value.partition(".")
    if not dot or not database or not collection:
        raise RenameRefused(f"Invalid {what} namespace: {value}", 73, "InvalidNamespace")
    return database, collection


def _tables(conn: Any) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _collection_exists(conn: Any, name: str) -> bool:
    from neosqlite.connection import _is_internal_collection_name

    return not _is_internal_collection_name(name) and name in _tables(conn)


def _index_names(conn: Any, table: str) -> list[str]:
    return [row[0] for row in conn.execute(
        "SELECT name FROM sqlite_master WHERE type='index' AND tbl_name=? AND sql IS NOT NULL",
        (table,))]


@contextlib.contextmanager
def sqlite_transaction(db: Any) -> Iterator[None]:
    """One SQLite transaction around DDL (the connection is in autocommit mode, and no
    transaction of a client is open: the caller holds the gate and the database's lock).
    Whatever happens, neosqlite's cache is checked against the file afterwards."""
    conn = db.db
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    finally:
        forget_stale_collections(db)


def forget_stale_collections(db: Any) -> None:
    """Drop neosqlite's cached Collection objects that no longer match the file (a name
    whose table is gone, or an entry whose object was renamed to another name): the next
    access builds a fresh one. Run under the database's lock after any DDL or rollback."""
    cache = getattr(db, "_collections", None)
    if not cache:
        return
    tables = _tables(db.db)
    for key, collection in list(cache.items()):
        if key != getattr(collection, "name", None) or key not in tables:
            cache.pop(key, None)


def drop_collection(db: Any, name: str) -> None:
    """Drop a collection with everything neosqlite keeps beside its table: the stored key
    specs of its indexes and its TTL rows (a later collection of the same name must not
    inherit another's expiry), its FTS tables, and its cached object. Inside the
    caller's ``sqlite_transaction``."""
    conn = db.db
    for index in _index_names(conn, name):
        with contextlib.suppress(Exception):  # the key table exists once an index did
            conn.execute("DELETE FROM neosqlite_index_keys WHERE index_name = ?", (index,))
    db.drop_collection(name)  # table, TTL rows by collection, FTS tables, the cache entry


def rename_collection(db: Any, source: str, target: str, drop_target: bool) -> None:
    """Rename ``source`` to ``target`` in one SQLite transaction (dropping ``target``
    first when ``drop_target``): readers, waiting on the gate and the database's lock,
    see the old state or the new one, never a dropped target without its replacement.

    neosqlite renames the table, its indexes and their stored keys, but leaves the TTL
    rows under the old index names (the expiry would vanish from listIndexes), so those
    follow here. On any failure everything is rolled back and the cache cleaned."""
    conn = db.db
    prefix = f"idx_{source}_"
    renamed = {index: f"idx_{target}_{index[len(prefix):]}"
               for index in _index_names(conn, source) if index.startswith(prefix)}
    try:
        with sqlite_transaction(db):
            if drop_target:
                drop_collection(db, target)
            for new in renamed.values():  # rows an older drop left under the new names
                for table in ("neosqlite_index_keys", "_neosqlite_ttl_indexes"):
                    with contextlib.suppress(Exception):  # the table exists once used
                        conn.execute(f"DELETE FROM {table} WHERE index_name = ?", (new,))
            db.rename_collection(source, target)
            for old, new in renamed.items():
                with contextlib.suppress(Exception):  # no TTL table: nothing to move
                    conn.execute("UPDATE _neosqlite_ttl_indexes SET index_name = ? "
                                 "WHERE index_name = ?", (new, old))
    finally:  # fresh objects for both names (no query or TTL cache of the old ones)
        db._collections.pop(source, None)
        db._collections.pop(target, None)


class Connection:
    """One client connection and its authentication state."""

    def __init__(self, authenticated: bool) -> None:
        self.id = str(uuid.uuid4())
        self.authenticated = authenticated
        self.scram: ScramConversation | None = None
        self.app_name: str | None = None  # the handshake's client.application.name
        self.dropped = False  # closed by the failCommand fail point (closeConnection)


class StoreServer:
    """The wire loop around nx-27017's handler (see the module docstring)."""

    def __init__(self, handler: Any, *, data_dir: Path, instance_id: str, transport: str,
                 token: str | None, lock_timeout: float,
                 parameters: dict[str, str] | None = None) -> None:
        """``parameters``: mongod's start-up ``--setParameter`` values
        (``enableTestCommands``, ``transactionLifetimeLimitSeconds``); refused with
        ValueError when unknown or malformed."""
        install_size_limits()
        self.handler = handler
        self.gate = TransactionGate(handler, lock_timeout)
        self.test_commands = False
        self.fail_point = FailCommand()
        self.retried: OrderedDict[tuple[str, Any], dict[str, Any]] = OrderedDict()
        for key, value in (parameters or {}).items():
            if key not in STARTUP_PARAMETERS:
                raise ValueError(f"unknown parameter {key!r} (known: "
                                 f"{', '.join(sorted(STARTUP_PARAMETERS))})")
            if key == "enableTestCommands":
                if value not in ("0", "1", "true", "false"):
                    raise ValueError("enableTestCommands must be 0 or 1")
                self.test_commands = value in ("1", "true")
            else:
                problem = self._set_lifetime(value)
                if problem is not None:
                    raise ValueError(problem)
        self.data_dir = data_dir
        self.file_watch = store_files.ServerFileWatch(data_dir)
        self.instance_id = instance_id
        self.transport = transport
        self.token = token
        self.scram = Scram(token) if token is not None else None

    # -- one connection ----------------------------------------------------------------

    async def serve_connection(self, reader: asyncio.StreamReader,
                               writer: asyncio.StreamWriter) -> None:
        from nx_27017.wire_protocol import MAX_MESSAGE_SIZE_BYTES, MESSAGE_HEADER_SIZE

        conn = Connection(authenticated=self.transport == "unix")
        self.handler.increment_connections()
        try:
            while True:
                try:
                    header = await reader.readexactly(16)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                length, request_id, _, opcode = HEADER.unpack(header)
                if length < MESSAGE_HEADER_SIZE or length > MAX_MESSAGE_SIZE_BYTES:
                    logger.warning("invalid message length %d; closing", length)
                    return
                try:
                    body = await reader.readexactly(length - 16)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                try:
                    reply = await self.handle_message(conn, header + body, request_id,
                                                      opcode)
                except CloseConnection:
                    conn.dropped = True
                    return
                try:
                    writer.write(reply)
                    await writer.drain()
                except ConnectionError:
                    return
        finally:
            await self.connection_closed(conn)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def connection_closed(self, conn: Connection) -> None:
        """The client went away: roll back the open transaction it carried."""
        self.handler.decrement_connections()
        # A connection the fail point dropped keeps its transaction, as on mongod (the
        # driver retries a commit on another connection); the lifetime limit ends it.
        if (self.gate.owner is not None and conn.id in self.gate.owner_conns
                and not conn.dropped):
            await self.gate.abort_owner("its client connection closed")
        with contextlib.suppress(Exception):
            self.handler.close_streams_for_connection(conn.id)

    async def handle_message(self, conn: Connection, message: bytes, request_id: int,
                             opcode: int) -> bytes:
        from nx_27017.wire_protocol import (
            OP_MSG,
            OP_QUERY,
            ResponseBuilder,
            WireProtocol,
            _get_next_request_id,
        )

        if opcode == WireProtocol.OP_MSG:
            try:
                msg = OP_MSG.parse(message)
                msg["_conn_id"] = conn.id
                msg["_size"] = len(message)
                if (problem := _malformed(msg)) is not None:
                    doc = _error(problem, 2, "BadValue")
                elif (problem := _unsupported(msg)) is not None:
                    doc = _error(problem, 2, "BadValue")
                else:
                    doc = await self.handle_op_msg(conn, msg)
            except CloseConnection:
                raise
            except Exception as exc:
                logger.exception("error handling a command")
                doc = {"ok": 0, "errmsg": str(exc)}
            reply = ResponseBuilder.build_op_msg_reply(
                request_id=_get_next_request_id(), response_to=request_id, document=doc)
            # nx-27017 fits batches into 16 MiB but sends one larger document as it is; a
            # reply can only hold one past mongod's limit when it is itself that large
            if len(reply) > MAX_INTERNAL_SIZE and (
                    size := _oversized_reply_document(doc)) is not None:
                reply = ResponseBuilder.build_op_msg_reply(
                    request_id=_get_next_request_id(), response_to=request_id,
                    document=_object_too_large(size, "PlanExecutor error during "
                                                     "aggregation :: caused by :: "))
            return reply
        if opcode == WireProtocol.OP_QUERY:
            # legacy OP_QUERY: only the drivers' first handshake uses it, on ``admin.$cmd``.
            # nx-27017 would run a query on any other namespace as a find, so only the
            # handshake's name reaches it, in a body of its own.
            try:
                msg = OP_QUERY.parse(message)
            except ValueError as exc:
                return ResponseBuilder.build_reply(_get_next_request_id(), request_id,
                                                   [_error(str(exc), 2, "BadValue")])
            query = msg.get("query") or {}
            query = query.get("$query", query) if isinstance(query, dict) else {}
            name = next(iter(query), "") if isinstance(query, dict) else ""
            if name in HANDSHAKE and msg.get("collection") == "$cmd":
                self.note_client(conn, query)
                docs = [await self.handshake(conn, name, query[name])]
            else:
                docs = [_error("OP_QUERY is only served for the handshake", 352,
                               "UnsupportedOpQueryCommand")]
            return ResponseBuilder.build_reply(_get_next_request_id(), request_id, docs)
        return ResponseBuilder.build_op_msg_reply(
            request_id=0, response_to=request_id,
            document={"ok": 0, "errmsg": f"Unsupported opcode: {opcode}"})

    async def handle_op_msg(self, conn: Connection, msg: dict[str, Any]) -> dict[str, Any]:
        cmd: dict[str, Any] = {}
        for kind, section in msg["sections"]:
            if kind == "body" and isinstance(section, dict):
                cmd = section
                break
        name = next(iter(cmd), "")
        if not conn.authenticated and name not in PREAUTH:
            return _error(f"command {name} requires authentication", 13, "Unauthorized")
        if name == "saslStart":
            return self.sasl_start(conn, cmd)
        if name == "saslContinue":
            return self.sasl_continue(conn, cmd)
        if name == IDENTITY_COMMAND:
            return {"ok": 1, "dataDir": str(self.data_dir), "instanceId": self.instance_id,
                    "transport": self.transport, "authenticated": conn.authenticated}
        if name in HANDSHAKE:
            self.note_client(conn, cmd)
            return await self.handshake(conn, name, cmd[name])
        if name in ("configureFailPoint", "setParameter", "getParameter"):
            return self.admin_command(name, cmd)
        if self.test_commands and (data := self.fail_point.fires(name, conn.app_name)):
            return await self.fail_command(conn, msg, cmd, name, data)
        return await self.dispatch(conn, msg, cmd, name)

    async def dispatch(self, conn: Connection, msg: dict[str, Any], cmd: dict[str, Any],
                       name: str) -> dict[str, Any]:
        """Run a command (authenticated, past the fail point): retried writes answered
        from memory, then the file watch and the transaction gate."""
        retry_key = self.retry_key(cmd, name)
        if retry_key is not None and (done := self.retried.get(retry_key)) is not None:
            return dict(done)  # a retryable write the driver retried: applied once
        reply = await self.gated(conn, msg, cmd, name)
        if retry_key is not None and reply.get("ok"):
            self.retried[retry_key] = {k: v for k, v in reply.items() if k != "insertedIds"}
            while len(self.retried) > RETRIED_MEMORY:
                self.retried.popitem(last=False)
        return reply

    @staticmethod
    def retry_key(cmd: dict[str, Any], name: str) -> tuple[str, Any] | None:
        """(lsid, txnNumber) of a retryable write (a txnNumber outside a transaction)."""
        if name not in RETRYABLE_WRITES or "txnNumber" not in cmd or "autocommit" in cmd:
            return None
        lsid = _lsid(cmd)
        return None if lsid is None else (lsid, cmd["txnNumber"])

    async def gated(self, conn: Connection, msg: dict[str, Any], cmd: dict[str, Any],
                    name: str) -> dict[str, Any]:
        if (damaged := self.file_watch.problem(cmd)) is not None:
            return _error(damaged, 8000, "StoreFileDamaged")  # see store_files
        lsid = _lsid(cmd)
        if lsid is not None and lsid == self.gate.owner:
            self.gate.owner_conns.add(conn.id)
        if name in UNGATED:
            if lsid is not None and lsid == self.gate.owner:
                async with self.gate.owner_command():  # paging: the owner is at work
                    return await self.run(msg)
            return await self.run(msg)
        if name == "endSessions":
            return await self.end_sessions(msg, cmd)
        if name in NOT_IN_TRANSACTION and (cmd.get("startTransaction")
                                           or cmd.get("autocommit") is False):
            return not_in_transaction(name)  # as mongod: an open transaction stays open
        if cmd.get("startTransaction"):
            return await self.start_transaction(msg, cmd, lsid, conn.id)
        if cmd.get("autocommit") is False:
            return await self.continue_transaction(msg, cmd, lsid, name)
        if lsid is not None and lsid == self.gate.owner:
            async with self.gate.owner_command():
                return await self.run(msg)
        if not await self.gate.acquire():
            return self.timeout_error(name)
        try:
            return await self.run(msg)
        finally:
            self.gate.release()

    # -- commands ------------------------------------------------------------------------

    @staticmethod
    def note_client(conn: Connection, cmd: dict[str, Any]) -> None:
        """Remember the handshake's application name (failCommand's ``appName``)."""
        client = cmd.get("client")
        app = client.get("application") if isinstance(client, dict) else None
        name = app.get("name") if isinstance(app, dict) else None
        if isinstance(name, str):
            conn.app_name = name

    def _set_lifetime(self, value: Any) -> str | None:
        try:
            seconds = int(value)
        except (TypeError, ValueError):
            seconds = 0
        if isinstance(value, bool) or seconds < 1 or (isinstance(value, float)
                                                      and value != seconds):
            return ("transactionLifetimeLimitSeconds must be an integer of at least 1, "
                    f"not {value!r}")
        self.gate.lifetime = seconds
        return None

    def admin_command(self, name: str, cmd: dict[str, Any]) -> dict[str, Any]:
        """configureFailPoint (test commands only), setParameter and getParameter for
        the parameters the store honours, answered as mongod answers them."""
        if cmd.get("$db") != "admin":
            return _error(f"{name} may only be run against the admin database.", 13,
                          "Unauthorized")
        if name == "configureFailPoint":
            if not self.test_commands:  # mongod without enableTestCommands: no such command
                return _error(f"no such command: '{name}'", 59, "CommandNotFound")
            if cmd[name] != "failCommand":
                return _error(f"FailPoint {cmd[name]!r} not found", 2, "BadValue")
            before = self.fail_point.entered
            if (problem := self.fail_point.configure(cmd.get("mode"), cmd.get("data"))):
                return _error(problem, 2, "BadValue")
            return {"ok": 1, "count": before}
        wanted = {k: v for k, v in cmd.items() if k not in (name, "$db", "lsid", "$readPreference",
                                                            "$clusterTime", "comment")}
        values = {"transactionLifetimeLimitSeconds": int(self.gate.lifetime),
                  "enableTestCommands": self.test_commands}
        if name == "getParameter":
            if cmd[name] == "*":
                return {**values, "ok": 1}
            unknown = sorted(set(wanted) - set(values))
            if unknown or not wanted:
                return _error("no option found to get", 72, "InvalidOptions")
            return {**{k: values[k] for k in wanted}, "ok": 1}
        if len(wanted) != 1:
            return _error("setParameter takes exactly one parameter", 72, "InvalidOptions")
        (key, value), = wanted.items()
        if key in STARTUP_PARAMETERS - RUNTIME_PARAMETERS:
            return _error(f"not allowed to change [{key}] at runtime", 72, "InvalidOptions")
        if key not in RUNTIME_PARAMETERS:
            return _error(f"attempted to set unrecognized parameter [{key}], use help:true "
                          "to see options", 72, "InvalidOptions")
        was = values[key]
        if (problem := self._set_lifetime(value)) is not None:
            return _error(problem, 2, "BadValue")
        return {"was": was, "ok": 1}

    async def fail_command(self, conn: Connection, msg: dict[str, Any], cmd: dict[str, Any],
                           name: str, data: dict[str, Any]) -> dict[str, Any]:
        """What mongod does when failCommand fires: block, then close the connection, or
        fail with ``errorCode`` (the command does not run; a command of a transaction
        aborts it, but its commit or abort), or run the command and add
        ``writeConcernError`` to its reply."""
        if data.get("blockConnection"):
            await asyncio.sleep(max(0, float(data.get("blockTimeMS", 0))) / 1000)
        if data.get("closeConnection"):
            raise CloseConnection
        lsid = _lsid(cmd)
        if "errorCode" in data:
            code = int(data["errorCode"])
            reply = _error(f"Failing command {name} via 'failCommand' failpoint", code,
                           code_name(code))
            labels = data.get("errorLabels", error_labels(code, name, cmd))
            if labels:
                reply["errorLabels"] = list(labels)
            if (cmd.get("autocommit") is False and lsid is not None
                    and lsid == self.gate.owner
                    and name not in ("commitTransaction", "abortTransaction")):
                await self.gate.abort_owner(f"{name} failed (failCommand)")
            return reply
        reply = await self.dispatch(conn, msg, cmd, name)
        if "writeConcernError" in data:
            wce = dict(data["writeConcernError"])
            reply["writeConcernError"] = wce
            labels = data.get("errorLabels")
            if labels is None and isinstance(wce.get("code"), int):
                labels = error_labels(wce["code"], name, cmd, write_concern=True)
            if labels:
                reply["errorLabels"] = list(labels)
        return reply

    def sasl_start(self, conn: Connection, cmd: dict[str, Any]) -> dict[str, Any]:
        """SCRAM-SHA-256 (what clients send: the token never crosses the wire, and the
        server proves it holds the token too) or SASL PLAIN (RFC 4616, ``authzid NUL
        user NUL token``, for older clients), checked in constant time."""
        failed = _error("Authentication failed.", 18, "AuthenticationFailed")
        conn.scram = None
        if self.token is None:
            return failed
        payload = bytes(cmd.get("payload", b""))
        if cmd.get("mechanism") == "SCRAM-SHA-256":
            conn.scram = self.scram.start(payload)
            if conn.scram is None:
                return failed
            return {"ok": 1, "conversationId": 1, "done": False,
                    "payload": conn.scram.server_first}
        if cmd.get("mechanism") != "PLAIN":
            return failed
        parts = payload.split(b"\0")
        if len(parts) != 3 or parts[1].decode(errors="replace") != TOKEN_USER:
            return failed
        if not hmac.compare_digest(parts[2], self.token.encode()):
            logger.warning("a TCP client failed to authenticate")
            return failed
        conn.authenticated = True
        return {"ok": 1, "conversationId": 1, "done": True, "payload": b""}

    def sasl_continue(self, conn: Connection, cmd: dict[str, Any]) -> dict[str, Any]:
        conversation, conn.scram = conn.scram, None
        if conversation is None:
            return _error("no SASL conversation in progress", 17, "ProtocolError")
        signature = self.scram.finish(conversation, bytes(cmd.get("payload", b"")))
        if signature is None:
            logger.warning("a TCP client failed to authenticate")
            return _error("Authentication failed.", 18, "AuthenticationFailed")
        conn.authenticated = True
        return {"ok": 1, "conversationId": 1, "done": True, "payload": b"v=" + signature}

    async def handshake(self, conn: Connection, name: str, value: Any) -> dict[str, Any]:
        """hello/isMaster: only the name reaches nx-27017 (on ``admin``), never the rest of
        a client's document, so nothing else can ride along before authentication."""
        msg = {"request_id": 0, "sections": [("body", {name: value, "$db": "admin"})],
               "_conn_id": conn.id}
        reply = await self.run(msg)
        if reply.get("ok"):
            # A one-member replica set's primary, as the store behaves like one
            # (transactions, retryable writes and reads): drivers retry a write after a
            # network error only on a replica set or mongos, never on a standalone.
            reply.update(setName=REPLICA_SET_NAME, secondary=False, setVersion=1)
        return reply

    def timeout_error(self, name: str) -> dict[str, Any]:
        return _error(f"{name}: waited {self.gate.timeout:g}s for another client's "
                      "transaction on the embedded store", 24, "LockTimeout",
                      "TransientTransactionError")

    async def run(self, msg: dict[str, Any]) -> dict[str, Any]:
        return await asyncio.to_thread(self._call, msg)

    def _call(self, msg: dict[str, Any]) -> dict[str, Any]:
        """nx-27017's own dispatch: inserts (and document sequences) vs other commands,
        with MongoDB's document size limit around it (``install_size_limits``)."""
        is_insert = any(kind == "body" and isinstance(doc, dict) and "insert" in doc
                        for kind, doc in msg["sections"])
        name = next(iter(self._body(msg)), "")
        _LIMITS.big = big = msg.get("_size", 0) > MAX_DOCUMENT_SIZE
        _LIMITS.command = name
        _LIMITS.too_large = None
        if big and is_insert:
            sizes = [bson_size(doc) for doc in _insert_documents(msg)]
            if sizes and max(sizes) > MAX_INTERNAL_SIZE:
                return _object_too_large(max(sizes))  # mongod refuses the whole message
        try:
            if is_insert:
                return self.handler.handle_insert(msg)[1]
            if name in RENAME_COMMANDS:
                return self._rename(self._body(msg))
            if name == "drop" and (reply := self._drop(self._body(msg))) is not None:
                return reply
            reply = self.handler.handle_command(msg)[1]
        except Exception as exc:
            logger.exception("error handling a command")
            return {"ok": 0, "errmsg": str(exc)}
        finally:
            _LIMITS.big = False
        if (too_large := _LIMITS.too_large) is not None and name in (
                "findAndModify", "findandmodify"):
            return _error(str(too_large), 17419, "Location17419")
        return reply

    def _rename(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """renameCollection as mongod takes it: sent to ``admin``, two full namespaces,
        ``dropTarget``; run under the gate (the caller holds it) and the database's lock.

        nx-27017 renamed in the database the command was sent to (so mongod's form, on
        ``admin``, renamed nothing and answered ok), had no ``dropTarget`` and renamed
        only neosqlite's object, not its cache entry. A rename across databases would
        be a copy between two SQLite files, never atomic: refused."""
        from nx_27017.handler import _sanitize_db_name

        name = next(iter(cmd))
        handler = self.handler
        try:
            if cmd.get("$db") != "admin":
                raise RenameRefused(f"{name} may only be run against the admin database.",
                                    13, "Unauthorized")
            source_db, source = parse_namespace(cmd[name], "source")
            target_db, target = parse_namespace(cmd.get("to"), "target")
            if source_db != target_db:
                raise RenameRefused(f"the embedded store cannot rename a collection across "
                                    f"databases ({cmd[name]} to {cmd['to']})", 20,
                                    "IllegalOperation")
            for collection, what in ((source, "source"), (target, "target")):
                if not COLLECTION_NAME.fullmatch(collection):
                    raise RenameRefused(f"Invalid {what} namespace: {source_db}.{collection}",
                                        73, "InvalidNamespace")
            try:
                _sanitize_db_name(source_db)
            except ValueError:
                raise RenameRefused(f"Invalid source namespace: {cmd[name]}", 73,
                                    "InvalidNamespace") from None
            if source == target:
                raise RenameRefused("Can't rename a collection to itself", 20,
                                    "IllegalOperation")
            damaged = self.file_watch.problem({"renameCollection": cmd[name], "$db": source_db})
            if damaged is not None:
                return _error(damaged, 8000, "StoreFileDamaged")
            missing = RenameRefused(f"Source collection {cmd[name]} does not exist", 26,
                                    "NamespaceNotFound")
            if (getattr(handler, "_mode", "") == "files"
                    and not os.path.exists(handler._db_file(source_db))):
                raise missing  # and no empty database file is made for it
            with handler._lock_for(source_db):
                db = handler.get_database(source_db)
                if db.db.in_transaction:  # a transaction's own command without its session
                    return not_in_transaction(name)
                if not _collection_exists(db.db, source):
                    raise missing
                exists = _collection_exists(db.db, target)
                if exists and not cmd.get("dropTarget"):
                    raise RenameRefused("target namespace exists", 48, "NamespaceExists")
                rename_collection(db, source, target, drop_target=exists)
        except RenameRefused as refused:
            return refused.reply
        return {"ok": 1}

    def _drop(self, cmd: dict[str, Any]) -> dict[str, Any] | None:
        """drop of a plain collection name, with its index keys and TTL rows (neosqlite's
        own drop leaves the TTL rows, so a new collection of that name would inherit the
        expiry). None: not a plain name (GridFS, internal): nx-27017 answers."""
        collection = cmd.get("drop")
        if (not isinstance(collection, str) or not COLLECTION_NAME.fullmatch(collection)
                or collection.startswith("sqlite_")):
            return None
        handler = self.handler
        db_name = str(cmd.get("$db", "test"))
        with handler._lock_for(db_name):
            db = handler.get_database(db_name)
            if db.db.in_transaction:
                return not_in_transaction("drop")
            with sqlite_transaction(db):
                drop_collection(db, collection)
        return {"ok": 1}

    def _heal_caches(self, databases: list[str]) -> None:
        """After a transaction ends: forget cached collections its rollback undid (one
        created by its first insert, say). Holds each database's lock."""
        for db_name in databases:
            with self.handler._lock_for(db_name):
                if (db := self.handler.databases.get(db_name)) is not None:
                    forget_stale_collections(db)

    async def start_transaction(self, msg: dict[str, Any], cmd: dict[str, Any],
                                lsid: str | None, conn_id: str) -> dict[str, Any]:
        if lsid is None:
            return _error("startTransaction needs a session", 2, "BadValue")
        gate = self.gate
        if gate.owner == lsid:  # a new transaction on a session that left one open
            await gate.abort_owner("its session started another transaction")
        if not await gate.acquire():
            return self.timeout_error(next(iter(cmd), "command"))
        gate.take(lsid, cmd.get("txnNumber"), conn_id)
        db_name = transaction_database(msg, cmd)
        async with gate.owner_command():
            reply, began = await asyncio.to_thread(self._begin_and_call, msg, cmd["lsid"],
                                                   lsid, db_name)
        if not began and gate.owner == lsid:
            gate.release()  # the transaction never began (bad database name, ...)
        return reply

    def _begin_and_call(self, msg: dict[str, Any], lsid_doc: Any, lsid: str,
                        db_name: str) -> tuple[dict[str, Any], bool]:
        """BEGIN before the first command, whatever it is: nx-27017 starts a transaction
        only in the commands that look at sessions, and a transaction must never run
        its writes in autocommit mode. Also says whether a transaction is open after."""
        handler = self.handler
        try:
            with handler._lock_for(db_name):
                handler._get_or_create_session({"lsid": lsid_doc, "startTransaction": True},
                                               handler.get_database(db_name), db_name)
        except Exception as exc:
            return {"ok": 0, "errmsg": str(exc)}, self.gate.in_transaction(lsid)
        return self._call(msg), self.gate.in_transaction(lsid)

    async def continue_transaction(self, msg: dict[str, Any], cmd: dict[str, Any],
                                   lsid: str | None, name: str) -> dict[str, Any]:
        gate = self.gate
        txn_number = cmd.get("txnNumber")
        if (lsid is not None and gate.owner == lsid and gate.txn_number == txn_number
                and gate.expired() and not gate.busy):
            await gate.abort_owner(f"older than transactionLifetimeLimitSeconds "
                                   f"({gate.lifetime:g}s)")
        if lsid is not None and gate.owner == lsid and gate.txn_number == txn_number:
            if name not in ("commitTransaction", "abortTransaction"):
                async with gate.owner_command():
                    return await asyncio.to_thread(self._call_in_transaction, msg, lsid,
                                                   transaction_database(msg, cmd))
            async with gate.owner_command():
                reply = await asyncio.to_thread(self._finish, msg, lsid)
            if name == "commitTransaction" and reply.get("ok"):
                gate.remember_commit(lsid, txn_number)
            if gate.owner == lsid:
                gate.release()
            return reply
        if (name == "commitTransaction" and lsid is not None
                and gate.committed.get(lsid) == txn_number):
            return {"ok": 1}
        return self.no_such_transaction(name)

    @staticmethod
    def no_such_transaction(name: str) -> dict[str, Any]:
        return _error(f"{name}: this session's transaction is not open (it was rolled "
                      "back or never began)", 251, "NoSuchTransaction",
                      "TransientTransactionError")

    def _call_in_transaction(self, msg: dict[str, Any], lsid: str,
                             db_name: str) -> dict[str, Any]:
        """Run a command of an open transaction, checked under the database's lock.

        The gate's owner check runs before the command waits for the database; a
        rollback can win that wait (the connection of another of the session's pooled
        connections closed, the server stopping). nx-27017 would then run the command in
        autocommit mode: half a transaction, durable. So the transaction must still be
        open once the lock is ours."""
        with self.handler._lock_for(db_name):
            if not self._open_in(lsid, db_name):
                return self.no_such_transaction(next(iter(self._body(msg)), "command"))
            return self._call(msg)

    def _open_in(self, lsid: str, db_name: str) -> bool:
        handler = self.handler
        with handler._sessions_lock:
            sess = handler._sessions.get((lsid, handler._session_scope(db_name)))
            return sess is not None and bool(sess.in_transaction)

    @staticmethod
    def _body(msg: dict[str, Any]) -> dict[str, Any]:
        return next((doc for kind, doc in msg["sections"] if kind == "body"), {})

    def _finish(self, msg: dict[str, Any], lsid: str) -> dict[str, Any]:
        """Commit or abort under the lock of the transaction's database (drivers send
        both to ``admin``, whose lock would not keep a rollback of the data's
        connection out), then roll back anything a failed commit left open."""
        handler = self.handler
        with handler._sessions_lock:
            databases = sorted({db for (sid, db), sess in handler._sessions.items()
                                if sid == lsid and sess.in_transaction})
        with contextlib.ExitStack() as stack:
            for db_name in databases:
                stack.enter_context(handler._lock_for(db_name))
            if not any(self._open_in(lsid, db_name) for db_name in databases):
                return self.no_such_transaction(next(iter(self._body(msg)), "command"))
            reply = self._call(msg)
            self.gate.abort_open(lsid)
            self._heal_caches(databases)
        return reply

    async def end_sessions(self, msg: dict[str, Any], cmd: dict[str, Any]) -> dict[str, Any]:
        from nx_27017.wire_protocol import _extract_session_id

        ended = cmd.get("endSessions") or []
        ids = {_extract_session_id(x) for x in ended if isinstance(x, dict)}
        if self.gate.owner in ids:
            await self.gate.abort_owner("its session ended")
        return await self.run(msg)


# -- the process --------------------------------------------------------------------------


def secure_data_dir(data_dir: Path) -> None:
    """0700 for the directory and 0600 for the files in it (older stores were 0755/0644)."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(data_dir, 0o700)
    for entry in data_dir.iterdir():
        if entry.is_file() and not entry.is_symlink():
            os.chmod(entry, 0o600)


def resolve_token(data_dir: Path, token_file: str | None) -> str:
    """The TCP credential: ``$CHEETO_STORE_TOKEN``, else the token file, generated (0600)
    when missing. Never from argv."""
    if env := os.environ.get(TOKEN_ENV):
        return env
    path = Path(token_file) if token_file else data_dir / TOKEN_NAME
    try:
        token = path.read_text().strip()
    except FileNotFoundError:
        token = ""
    if not token:
        token = secrets.token_urlsafe(32)
        write_private(path, token + "\n")
    return token


def hold_server_lock(data_dir: Path) -> int:
    """One server per data directory, whatever the transport or port."""
    fd = os.open(data_dir / "server.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        print(f"error: another embedded store already serves {data_dir}", file=sys.stderr)
        sys.exit(3)
    return fd


def parse_parameters(items: list[str]) -> dict[str, str]:
    """``NAME=VALUE`` pairs (``--set-parameter``); ValueError for one without ``=``."""
    parameters: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"expected NAME=VALUE, got {item!r}")
        parameters[key] = value
    return parameters


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="cheeto_like.embedded")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--listen", choices=("unix", "tcp"), default="unix")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=27117)
    parser.add_argument("--lock-timeout", type=float, default=60.0)
    parser.add_argument("--token-file")
    parser.add_argument("--log-file")
    parser.add_argument("--pid-file")
    parser.add_argument("--set-parameter", "--setParameter", action="append", default=[],
                        metavar="NAME=VALUE", dest="set_parameter",
                        help="a mongod parameter at start-up (enableTestCommands=1, "
                             "transactionLifetimeLimitSeconds=N)")
    parser.add_argument("--exit-with", type=int, metavar="PID",
                        help="stop when this process ends (a test session's throwaway store)")
    return parser.parse_args(argv)


async def _watch(pid: int, stop: asyncio.Event, every: float = EXIT_WITH_POLL_S) -> None:
    """Set ``stop`` once ``pid`` has ended (``--exit-with``)."""
    while not stop.is_set():
        if process_gone(pid):
            logger.warning("process %d has ended: stopping (--exit-with)", pid)
            stop.set()
            return
        await asyncio.sleep(every)


async def _serve(server: StoreServer, args: argparse.Namespace, data_dir: Path) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    watcher = asyncio.create_task(_watch(args.exit_with, stop)) \
        if args.exit_with is not None else None
    reaper = asyncio.create_task(server.gate.reap())
    if args.listen == "unix":
        path = data_dir / SOCKET_NAME
        path.unlink(missing_ok=True)  # a stale socket; the server lock says none is live
        listener = await asyncio.start_unix_server(server.serve_connection, path=str(path))
        os.chmod(path, 0o600)
    else:
        listener = await asyncio.start_server(server.serve_connection, args.host, args.port)
    logger.warning("serving %s on %s", data_dir,
                   f"unix:{data_dir / SOCKET_NAME}" if args.listen == "unix"
                   else f"tcp:{args.host}:{args.port}")
    async with listener:
        await stop.wait()
        # Leave cleanly but never hang (a busy shutdown once ignored SIGTERM): after a
        # grace period the process exits regardless. SQLite keeps every committed
        # transaction, and nothing uncommitted was promised to a client.
        timer = threading.Timer(EXIT_GRACE_S, os._exit, args=(0,))
        timer.daemon = True
        timer.start()
        listener.close()
        reaper.cancel()
        if watcher is not None:
            watcher.cancel()
        if server.gate.owner is not None:
            await server.gate.abort_owner("the server is stopping")


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    os.umask(0o077)
    data_dir = Path(os.path.realpath(args.data_dir))
    secure_data_dir(data_dir)
    lock_fd = hold_server_lock(data_dir)
    store_files.refuse_damaged(data_dir)  # a recorded file missing or damaged: exit 1
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s [%(process)d] %(message)s")
    for name in ("nx_27017", "neosqlite"):
        logging.getLogger(name).setLevel(logging.WARNING)
    from nx_27017.handler import NeoSQLiteHandler

    token = resolve_token(data_dir, args.token_file) if args.listen == "tcp" else None
    instance_id = ensure_instance_id(data_dir)
    handler = NeoSQLiteHandler(str(data_dir), data_dir=str(data_dir), journal_mode="WAL")
    try:
        server = StoreServer(handler, data_dir=data_dir, instance_id=instance_id,
                             transport=args.listen, token=token,
                             lock_timeout=args.lock_timeout,
                             parameters=parse_parameters(args.set_parameter))
    except ValueError as exc:
        handler.close_all()
        print(f"error: --set-parameter: {exc}", file=sys.stderr)
        sys.exit(2)
    pid_file = Path(args.pid_file) if args.pid_file else None
    if pid_file is not None:
        write_private(pid_file, f"{os.getpid()}\n")
    try:
        asyncio.run(_serve(server, args, data_dir))
    finally:
        with contextlib.suppress(Exception):
            handler.close_all()
        if args.listen == "unix":
            (data_dir / SOCKET_NAME).unlink(missing_ok=True)
        if pid_file is not None:
            pid_file.unlink(missing_ok=True)
        os.close(lock_fd)
