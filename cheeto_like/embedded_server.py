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
import secrets
import signal
import struct
import sys
import threading
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import store_files
from .embedded import (
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
        self.last_active = asyncio.get_running_loop().time()

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


class Connection:
    """One client connection and its authentication state."""

    def __init__(self, authenticated: bool) -> None:
        self.id = str(uuid.uuid4())
        self.authenticated = authenticated
        self.scram: ScramConversation | None = None


class StoreServer:
    """The wire loop around nx-27017's handler (see the module docstring)."""

    def __init__(self, handler: Any, *, data_dir: Path, instance_id: str, transport: str,
                 token: str | None, lock_timeout: float) -> None:
        self.handler = handler
        self.gate = TransactionGate(handler, lock_timeout)
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
                reply = await self.handle_message(conn, header + body, request_id, opcode)
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
        if self.gate.owner is not None and conn.id in self.gate.owner_conns:
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
                if (problem := _malformed(msg)) is not None:
                    doc = _error(problem, 2, "BadValue")
                elif (problem := _unsupported(msg)) is not None:
                    doc = _error(problem, 2, "BadValue")
                else:
                    doc = await self.handle_op_msg(conn, msg)
            except Exception as exc:
                logger.exception("error handling a command")
                doc = {"ok": 0, "errmsg": str(exc)}
            return ResponseBuilder.build_op_msg_reply(
                request_id=_get_next_request_id(), response_to=request_id, document=doc)
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
            return await self.handshake(conn, name, cmd[name])
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
        return await self.run(msg)

    def timeout_error(self, name: str) -> dict[str, Any]:
        return _error(f"{name}: waited {self.gate.timeout:g}s for another client's "
                      "transaction on the embedded store", 24, "LockTimeout",
                      "TransientTransactionError")

    async def run(self, msg: dict[str, Any]) -> dict[str, Any]:
        return await asyncio.to_thread(self._call, msg)

    def _call(self, msg: dict[str, Any]) -> dict[str, Any]:
        """nx-27017's own dispatch: inserts (and document sequences) vs other commands."""
        is_insert = any(kind == "body" and isinstance(doc, dict) and "insert" in doc
                        for kind, doc in msg["sections"])
        try:
            if is_insert:
                return self.handler.handle_insert(msg)[1]
            return self.handler.handle_command(msg)[1]
        except Exception as exc:
            logger.exception("error handling a command")
            return {"ok": 0, "errmsg": str(exc)}

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
        db_name = cmd.get("$db", "test")
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
        if lsid is not None and gate.owner == lsid and gate.txn_number == txn_number:
            if name not in ("commitTransaction", "abortTransaction"):
                async with gate.owner_command():
                    return await asyncio.to_thread(self._call_in_transaction, msg, lsid,
                                                   str(cmd.get("$db", "test")))
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
    server = StoreServer(handler, data_dir=data_dir, instance_id=instance_id,
                         transport=args.listen, token=token, lock_timeout=args.lock_timeout)
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
