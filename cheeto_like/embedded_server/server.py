"""The connection loop and ``StoreServer``: gate, authentication, fail points and limits
around nx-27017's command handler.

Part of the embedded store's server (the package docstring says why it exists).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import uuid
from collections import OrderedDict
from pathlib import Path
from typing import Any

from .. import store_files
from ..embedded_common import (
    IDENTITY_COMMAND,
    TOKEN_USER,
)
from .auth import Scram, ScramConversation
from .ddl import (
    COLLECTION_NAME,
    NOT_IN_TRANSACTION,
    RENAME_COMMANDS,
    RenameRefused,
    _collection_exists,
    drop_collection,
    forget_stale_collections,
    not_in_transaction,
    parse_namespace,
    rename_collection,
    sqlite_transaction,
)
from .failpoints import CloseConnection, FailCommand, code_name, error_labels
from .gate import TransactionGate, _lsid, transaction_database
from .limits import (
    _LIMITS,
    _insert_documents,
    _object_too_large,
    _oversized_reply_document,
    bson_size,
    install_size_limits,
)
from .protocol import (
    HANDSHAKE,
    HEADER,
    MAX_DOCUMENT_SIZE,
    MAX_INTERNAL_SIZE,
    PREAUTH,
    REPLICA_SET_NAME,
    RETRIED_MEMORY,
    RETRYABLE_WRITES,
    RUNTIME_PARAMETERS,
    STARTUP_PARAMETERS,
    UNGATED,
    _error,
    _malformed,
    _unsupported,
)

logger = logging.getLogger("cheeto_like.embedded_server")


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
