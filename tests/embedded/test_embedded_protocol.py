"""The embedded server's wire loop against messages no driver sends but an attacker can:
the command the server checks (authentication, the transaction gate, the file watch) must
be the command nx-27017 runs, and a transaction's command that arrives as its
transaction is rolled back must never run on its own.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bson
import pytest
from pymongo import MongoClient

from cheeto_like.config import EmbeddedStoreConfig, MongoConfig
from cheeto_like.embedded import EmbeddedServer
from cheeto_like.store import connect

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def op_msg(*bodies: dict[str, Any], sequence: tuple[str, list[dict[str, Any]]] | None = None,
           request_id: int = 1) -> bytes:
    """An OP_MSG with one or more kind-0 sections and an optional kind-1 sequence."""
    sections = b"".join(b"\x00" + bson.encode(body) for body in bodies)
    if sequence is not None:
        name, docs = sequence
        payload = name.encode() + b"\x00" + b"".join(bson.encode(d) for d in docs)
        sections += b"\x01" + struct.pack("<i", 4 + len(payload)) + payload
    body = struct.pack("<I", 0) + sections
    return struct.pack("<iiii", 16 + len(body), request_id, 0, 2013) + body


def op_query(namespace: str, query: dict[str, Any], request_id: int = 1) -> bytes:
    body = (struct.pack("<I", 0) + namespace.encode() + b"\x00" + struct.pack("<ii", 0, 0)
            + bson.encode(query))
    return struct.pack("<iiii", 16 + len(body), request_id, 0, 2004) + body


def exchange(sock: socket.socket, message: bytes) -> list[dict[str, Any]]:
    """Send one message; the reply's documents (OP_MSG body or OP_REPLY documents)."""
    sock.sendall(message)
    head = b""
    while len(head) < 16:
        chunk = sock.recv(16 - len(head))
        assert chunk, "the server closed the connection"
        head += chunk
    length, _, _, opcode = struct.unpack("<iiii", head)
    body = b""
    while len(body) < length - 16:
        chunk = sock.recv(length - 16 - len(body))
        assert chunk
        body += chunk
    if opcode == 2013:
        return [bson.decode(body[5:])]
    return bson.decode_all(body[20:])  # flags, cursor id, starting from, number returned


@pytest.fixture
def tcp_server(tmp_path: Path) -> Iterator[EmbeddedServer]:
    server = EmbeddedServer(EmbeddedStoreConfig(path=tmp_path / "s", listen="tcp",
                                                port=free_port()))
    server.start_background()
    try:
        yield server
    finally:
        server.stop()


def in_process_server(tmp_path: Path) -> tuple[Any, Any]:
    """nx-27017's handler and our ``StoreServer`` around it, driven without a socket (the
    tests call ``handle_op_msg`` and ``connection_closed`` themselves)."""
    from nx_27017.handler import NeoSQLiteHandler

    from cheeto_like.embedded_server.server import StoreServer

    data = tmp_path / "s"
    data.mkdir()
    handler = NeoSQLiteHandler(str(data), data_dir=str(data), journal_mode="WAL")
    return handler, StoreServer(handler, data_dir=data, instance_id="x", transport="unix",
                                token=None, lock_timeout=5)


def command(body: dict[str, Any]) -> dict[str, Any]:
    """An OP_MSG as ``StoreServer.handle_op_msg`` takes it."""
    return {"request_id": 1, "sections": [("body", body)], "_conn_id": "c"}


def owner_client(server: EmbeddedServer) -> MongoClient[dict[str, Any]]:
    return MongoClient(server.uri, **server.client_options())


def test_no_command_rides_past_authentication(tcp_server: EmbeddedServer) -> None:
    """A handshake name first, a write or read after it: refused, nothing written or read.
    (nx-27017 dispatches on any key it knows, on the last body, and on a document
    sequence, while the server checked only the first key of the first body.)"""
    with owner_client(tcp_server) as client:
        client.reach.users.insert_one({"_id": "bob", "password": "$y$j9T$secret"})
    evil = [{"_id": "mallory", "sudo": True}]
    attempts = [
        op_msg({"hello": 1, "insert": "users", "documents": evil, "$db": "reach"}),
        op_msg({"hello": 1, "$db": "admin"}, {"insert": "users", "documents": evil,
                                             "$db": "reach"}),
        op_msg({"hello": 1, "$db": "reach"}, sequence=("documents", evil)),
        op_msg({"isMaster": 1, "delete": "users", "deletes": [{"q": {}, "limit": 0}],
                "$db": "reach"}),
    ]
    with socket.create_connection(("127.0.0.1", tcp_server.port), timeout=10) as sock:
        for message in attempts:
            exchange(sock, message)
        # the legacy handshake path: a query on a collection instead of $cmd
        found = exchange(sock, op_query("reach.users",
                                        {"$query": {"hello": {"$exists": False}}}))
        found += exchange(sock, op_query("reach.users", {"hello": {"$exists": False}}))
    assert all("password" not in str(doc) for doc in found), found
    with owner_client(tcp_server) as client:
        assert sorted(client.reach.list_collection_names()) == ["users"]
        assert [d["_id"] for d in client.reach.users.find()] == ["bob"]


def test_one_command_per_message_for_an_authenticated_client(tmp_path: Path) -> None:
    """An ungated command (ping) carrying a write would skip the transaction gate and the
    file watch: refused; the store keeps serving normal commands."""
    server = EmbeddedServer(EmbeddedStoreConfig(path=tmp_path / "s"))
    server.start_background()
    try:
        with MongoClient(server.uri) as client:
            client.reach.users.insert_one({"_id": "bob"})
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(10)
            sock.connect(str(server.socket_path))
            (reply,) = exchange(sock, op_msg({"ping": 1, "drop": "users", "$db": "reach"}))
            assert reply["ok"] == 0
            (reply,) = exchange(sock, op_msg({"ping": 1, "$db": "admin"}))
            assert reply["ok"] == 1
        with MongoClient(server.uri) as client:
            assert [d["_id"] for d in client.reach.users.find()] == ["bob"]
            client.reach.users.find_one_and_update({"_id": "bob"}, {"$set": {"n": 1}})
            assert client.reach.users.find_one({"_id": "bob"})["n"] == 1
    finally:
        server.stop()


async def test_a_command_that_loses_the_race_with_a_rollback_does_not_run(
        tmp_path: Path) -> None:
    """Two connections carried one lsid (pymongo pools connections and reuses lsids); the
    first closes and its transaction is rolled back while a command of that transaction,
    already past the owner check on the second, waits for the database. That command
    must fail, not run in autocommit mode (half a transaction, durable)."""
    from cheeto_like.embedded_server.server import Connection

    handler, server = in_process_server(tmp_path)
    a, b = Connection(True), Connection(True)
    lsid = {"id": bson.Binary(os.urandom(16), 4)}

    txn = {"lsid": lsid, "txnNumber": 1, "autocommit": False, "$db": "t"}
    await server.handle_op_msg(a, command({"find": "c", "filter": {}, "lsid": lsid,
                                           "$db": "t"}))
    reply = await server.handle_op_msg(b, command(
        {"insert": "c", "documents": [{"_id": "first"}], "startTransaction": True, **txn}))
    assert reply["ok"] == 1
    db_lock = handler._lock_for("t")
    db_lock.acquire()  # the in-flight command below waits here for the database
    try:
        second = asyncio.create_task(server.handle_op_msg(b, command(
            {"insert": "c", "documents": [{"_id": "second"}], **txn})))
        await asyncio.sleep(0.3)
        assert not second.done()
        # the rollback wins the database: what connection_closed(a) does, in this order
        server.gate.owner = None
        server.gate.txn_number = None
        server.gate.abort_open(_sid(lsid))
        server.gate._lock.release()
    finally:
        db_lock.release()
    reply = await asyncio.wait_for(second, 10)
    assert reply["ok"] == 0, reply
    assert reply.get("codeName") == "NoSuchTransaction"
    found = await server.handle_op_msg(a, command({"find": "c", "filter": {}, "$db": "t"}))
    assert found["cursor"]["firstBatch"] == []
    handler.close_all()


def _sid(lsid: dict[str, Any]) -> str:
    from nx_27017.wire_protocol import _extract_session_id

    sid = _extract_session_id(lsid)
    assert sid is not None
    return sid


HOLDER = r"""
import asyncio, sys
from cheeto_like.config import EmbeddedStoreConfig, MongoConfig
from cheeto_like.store import connect

async def main():
    config = MongoConfig(database="held", embedded=EmbeddedStoreConfig(
        path=sys.argv[1], lock_timeout_seconds=1))
    store = await connect(config, create_indexes=False)
    async with store.session(transaction=True) as session:
        await store.database.c.insert_one({"_id": "stuck"}, session=session)
        print("holding", flush=True)
        await asyncio.sleep(3600)

asyncio.run(main())
"""


async def test_a_hung_client_does_not_lock_everyone_out(tmp_path: Path) -> None:
    """A client stopped mid-transaction (Ctrl-Z, a debugger, a hung mount) holds the
    client-side lock file. That lock is a fast path only: others go to the server after
    the lock timeout, and the server rolls the silent transaction back."""
    data = tmp_path / "s"
    config = MongoConfig(database="held", embedded=EmbeddedStoreConfig(
        path=data, lock_timeout_seconds=1))
    store = await connect(config, create_indexes=False)
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", HOLDER, str(data), cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE)
    try:
        assert holder.stdout is not None
        line = await asyncio.wait_for(holder.stdout.readline(), 30)
        assert line.strip() == b"holding"
        t0 = time.monotonic()
        async with asyncio.timeout(20):
            async with store.session(transaction=True) as session:
                await store.database.c.insert_one({"_id": "next"}, session=session)
        assert time.monotonic() - t0 < 20
        assert {d["_id"] async for d in store.database.c.find()} == {"next"}
    finally:
        holder.kill()
        await asyncio.wait_for(holder.communicate(), 10)
        await store.close()
        EmbeddedServer(config.embedded).stop()


async def test_a_file_restored_while_the_server_was_down_is_adopted_at_start(
        tmp_path: Path) -> None:
    """Copying the database file back from a backup with the server stopped gives it a
    new inode; a server started directly (`cheeto db serve`, `daemon up`) must adopt it
    like a client's connect does, not refuse every write as "replaced while it ran"."""
    data = tmp_path / "s"
    config = MongoConfig(database="kept", embedded=EmbeddedStoreConfig(path=data))
    store = await connect(config, create_indexes=False)
    await store.database.c.insert_one({"_id": "before"})
    await store.close()
    server = EmbeddedServer(config.embedded)
    assert server.stop()
    db_file = data / "kept.db"
    # the WAL goes along (a stop under load may leave the last commit only there), each
    # file copied to a new inode as a restore from backup does
    for name in (db_file, Path(f"{db_file}-wal"), Path(f"{db_file}-shm")):
        if name.exists():
            copy = name.with_name(name.name + ".copy")
            copy.write_bytes(name.read_bytes())
            os.replace(copy, name)
    server.start_background()
    try:
        store = await connect(config, autostart=False, create_indexes=False)
        await store.database.c.insert_one({"_id": "after"})
        assert {d["_id"] async for d in store.database.c.find()} == {"before", "after"}
        await store.close()
    finally:
        server.stop()


async def test_closing_a_connection_that_only_saw_the_session_earlier_keeps_the_transaction(
        tmp_path: Path) -> None:
    """pymongo reuses lsids across its pooled connections: a connection that carried the
    session before its transaction began, and closes while the transaction runs on
    another connection (a cancelled task, a pruned idle connection), must not roll back
    a healthy transaction."""
    from cheeto_like.embedded_server.server import Connection

    handler, server = in_process_server(tmp_path)
    a, b = Connection(True), Connection(True)
    lsid = {"id": bson.Binary(os.urandom(16), 4)}

    txn = {"lsid": lsid, "txnNumber": 1, "autocommit": False, "$db": "t"}
    await server.handle_op_msg(a, command({"find": "c", "filter": {}, "lsid": lsid,
                                           "$db": "t"}))
    reply = await server.handle_op_msg(b, command(
        {"insert": "c", "documents": [{"_id": "kept"}], "startTransaction": True, **txn}))
    assert reply["ok"] == 1
    await server.connection_closed(a)
    reply = await server.handle_op_msg(b, command(
        {"commitTransaction": 1, **{**txn, "$db": "admin"}}))
    assert reply["ok"] == 1, reply
    found = await server.handle_op_msg(b, command({"find": "c", "filter": {}, "$db": "t"}))
    assert [d["_id"] for d in found["cursor"]["firstBatch"]] == ["kept"]
    # a connection that did carry the transaction still rolls it back when it closes
    txn2 = {**txn, "txnNumber": 2}
    await server.handle_op_msg(b, command(
        {"insert": "c", "documents": [{"_id": "lost"}], "startTransaction": True, **txn2}))
    await server.connection_closed(b)
    found = await server.handle_op_msg(a, command({"find": "c", "filter": {}, "$db": "t"}))
    assert [d["_id"] for d in found["cursor"]["firstBatch"]] == ["kept"]
    handler.close_all()


def test_two_racing_starts_leave_a_server_that_stop_stops(tmp_path: Path) -> None:
    """Two clients auto-start the same store at once: one server wins the data
    directory's lock, the other exits. `db stop` must still find and stop the winner
    (the loser used to write its own, dead, pid over the winner's)."""
    from concurrent.futures import ThreadPoolExecutor

    config = EmbeddedStoreConfig(path=tmp_path / "s")
    servers = [EmbeddedServer(config) for _ in range(2)]
    servers[0].prepare_dir()
    probe = EmbeddedServer(config)
    try:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda s: s.start_background(), servers))
        assert probe.is_up()
        pid = probe.pid()
        assert pid is not None
        assert str(config.path) in Path(f"/proc/{pid}/cmdline").read_text()
        assert probe.stop()
        # the losing start may still be booting; once the winner is gone it may serve
        # in its turn, and must be stoppable just the same
        deadline = time.monotonic() + 20
        while probe.is_up() and time.monotonic() < deadline:
            if probe.pid() is not None:
                probe.stop()
            time.sleep(0.05)
        assert not probe.is_up()
    finally:
        if probe.is_up():  # a failed run must not leave the server behind
            pid = int((config.path / "nx.pid").read_text())
            os.kill(pid, 15)


def test_a_start_that_loses_the_lock_waits_for_the_winner_to_listen(tmp_path: Path) -> None:
    """The race above, made certain: another start holds the data directory's lock and is
    not listening yet. The losing start's server exits (ALREADY_SERVED_EXIT); the start
    waits for the winner to listen and returns, instead of failing."""
    import fcntl
    import threading

    config = EmbeddedStoreConfig(path=tmp_path / "s")
    loser, winner = EmbeddedServer(config), EmbeddedServer(config)
    loser.prepare_dir()
    fd = os.open(loser.data_dir / "server.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # the winner, booting
    outcome: list[object] = []
    thread = threading.Thread(target=lambda: outcome.append(_start(loser)))
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while "already serves" not in loser.log_tail() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "already serves" in loser.log_tail()  # the losing server has exited
        assert thread.is_alive()  # and its start still waits
        os.close(fd)  # the "winner" lets go; the real one starts and listens
        pid = winner.start_background()
        thread.join(20)
        assert outcome and not isinstance(outcome[0], Exception), outcome
        assert winner.is_up() and winner.pid() == pid
    finally:
        thread.join(20)
        winner.stop()


def _start(server: EmbeddedServer) -> object:
    try:
        return server.start_background()
    except Exception as exc:  # returned for the assertion, not raised in the thread
        return exc


def test_a_transaction_reading_a_long_cursor_is_not_taken_for_silent(tmp_path: Path) -> None:
    """getMore is served without the gate, but it is the owner at work: a transaction
    paging through a large result for longer than the lock timeout, while another client
    waits, keeps its transaction (the waiter gets LockTimeout), as any transaction that
    keeps sending commands does."""
    import threading

    from pymongo.errors import OperationFailure

    server = EmbeddedServer(EmbeddedStoreConfig(path=tmp_path / "s", lock_timeout_seconds=1))
    server.start_background()
    try:
        with MongoClient(server.uri) as a, MongoClient(server.uri) as b:
            a.t.big.insert_many([{"_id": i} for i in range(400)])
            waiting = threading.Event()
            outcome: list[str] = []

            def waiter() -> None:
                waiting.wait(10)
                try:
                    b.t.other.insert_one({"_id": "w"})
                    outcome.append("wrote")
                except OperationFailure as exc:
                    outcome.append(str(exc.code))

            thread = threading.Thread(target=waiter)
            thread.start()
            with a.start_session() as sa, sa.start_transaction():
                a.t.mark.insert_one({"_id": "m"}, session=sa)
                seen = 0
                for _ in a.t.big.find({}, session=sa, batch_size=5):
                    seen += 1
                    waiting.set()
                    time.sleep(0.006)  # ~80 getMores over ~2.5 s
            thread.join(20)
            assert seen == 400
            assert a.t.mark.find_one({"_id": "m"}) is not None
            assert outcome == ["24"]  # LockTimeout for the waiter
    finally:
        server.stop()


def squatter(port: int, received: list[bytes], stop: Any) -> None:
    """Another user's process on the store's port while the store is down: it answers the
    handshake like a server, fails every other command, and keeps what clients send."""
    hello = {"ok": 1, "helloOk": True, "isWritablePrimary": True, "ismaster": True,
             "maxWireVersion": 21, "minWireVersion": 0, "maxBsonObjectSize": 16777216,
             "maxMessageSizeBytes": 48000000, "maxWriteBatchSize": 100000}
    failed = {"ok": 0, "code": 18, "codeName": "AuthenticationFailed",
              "errmsg": "Authentication failed."}
    with socket.create_server(("127.0.0.1", port)) as listener:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    while True:
                        head = conn.recv(16, socket.MSG_WAITALL)
                        if len(head) < 16:
                            break
                        length, request_id, _, opcode = struct.unpack("<iiii", head)
                        body = conn.recv(length - 16, socket.MSG_WAITALL)
                        received.append(body)
                        is_hello = any(word in body for word in (b"hello", b"isMaster",
                                                                 b"ismaster"))
                        doc = hello if is_hello else failed
                        if opcode == 2004:
                            out = struct.pack("<iqii", 0, 0, 0, 1) + bson.encode(doc)
                            conn.sendall(struct.pack("<iiii", 16 + len(out), 1, request_id,
                                                     1) + out)
                        else:
                            out = struct.pack("<I", 0) + b"\x00" + bson.encode(doc)
                            conn.sendall(struct.pack("<iiii", 16 + len(out), 1, request_id,
                                                     2013) + out)
                except OSError:
                    continue


async def test_the_token_never_reaches_whoever_answers_on_the_port(tmp_path: Path) -> None:
    """pymongo authenticates as it connects, before `connect` can ask who answered: the
    credential must not cross the wire in a form the listener can use (PLAIN sends it
    in clear)."""
    import threading

    from pydantic import SecretStr

    from cheeto_like.errors import ExternalError

    token = "squat-me-" + os.urandom(16).hex()
    port = free_port()
    received: list[bytes] = []
    stop = threading.Event()
    thread = threading.Thread(target=squatter, args=(port, received, stop))
    thread.start()
    try:
        await asyncio.sleep(0.2)
        config = MongoConfig(database="reach", timeout_seconds=3, embedded=EmbeddedStoreConfig(
            path=tmp_path / "s", listen="tcp", port=port, token=SecretStr(token)))
        with pytest.raises(ExternalError):
            await connect(config, autostart=False, create_indexes=False)
    finally:
        stop.set()
        thread.join(10)
    assert any(b"saslStart" in body for body in received)  # the client did try to log in
    assert not any(token.encode() in body for body in received)


def test_scram_logs_in_and_a_wrong_token_does_not(tcp_server: EmbeddedServer) -> None:
    from pymongo.errors import OperationFailure

    options = tcp_server.client_options()
    assert options["authMechanism"] == "SCRAM-SHA-256"
    with MongoClient(tcp_server.uri, **options) as client:
        client.reach.c.insert_one({"_id": 1})
        assert client.reach.c.count_documents({}) == 1
    wrong = {**options, "password": "not-the-token"}
    with MongoClient(tcp_server.uri, serverSelectionTimeoutMS=3000, **wrong) as client, \
            pytest.raises(OperationFailure) as failed:
        client.reach.c.find_one()
    assert failed.value.code == 18


def test_an_update_of_an_array_element_by_index_fails_instead_of_doing_nothing(
        tcp_server: EmbeddedServer) -> None:
    """nx-27017 acknowledges ``$set: {"items.1": …}`` and changes nothing; the server
    refuses it (update, bulk update and findAndModify alike) so no write vanishes."""
    from pymongo import UpdateOne
    from pymongo.errors import BulkWriteError, OperationFailure

    with owner_client(tcp_server) as client:
        coll = client["t"]["docs"]
        coll.insert_one({"_id": "a", "items": [{"x": 1}, {"x": 2}]})
        with pytest.raises(OperationFailure, match="array element by index"):
            coll.update_one({"_id": "a"}, {"$set": {"items.1": {"x": 20}}})
        with pytest.raises(OperationFailure, match="array element by index"):
            coll.find_one_and_update({"_id": "a"}, {"$inc": {"items.0.x": 1}})
        with pytest.raises((BulkWriteError, OperationFailure)):
            coll.bulk_write([UpdateOne({"_id": "a"}, {"$set": {"items.0": {}}})])
        coll.update_one({"_id": "a"}, {"$set": {"items": [{"x": 1}, {"x": 20}]}})
        assert coll.find_one({"_id": "a"}) == {"_id": "a", "items": [{"x": 1}, {"x": 20}]}
