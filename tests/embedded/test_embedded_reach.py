"""Who can reach the embedded store: its owner through a Unix socket in the data
directory by default, TCP only with the credential, and a client only the server of the
data directory its config names.

Another local user is played by ``nobody`` (``setpriv``) running the system Python with a
raw wire-protocol client: the test builds the OP_MSG bytes, the unprivileged process only
sends them and hands back the replies.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import stat
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import bson
import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from cheeto_like.config import EmbeddedStoreConfig, MongoConfig
from cheeto_like.embedded import EmbeddedServer
from cheeto_like.errors import ExternalError
from cheeto_like.store import connect

SETPRIV = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
SYSTEM_PYTHON = "/usr/bin/python3"

# Sends each hex-encoded message and prints each reply as hex, or why it could not.
RAW_CLIENT = r"""
import os, socket, sys
kind, where, *messages = sys.argv[1:]
for probe in ("parent", "dir"):
    path = os.path.dirname(where) if kind == "unix" else where
    target = os.path.dirname(path) if probe == "parent" else path
    try:
        os.listdir(target)
        print(probe, "listable")
    except OSError as exc:
        print(probe, "error", exc.errno)
try:
    if kind == "unix":
        sock = socket.socket(socket.AF_UNIX)
        sock.connect(where)
    else:
        host, port = where.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=10)
except OSError as exc:
    print("connect error", exc.errno)
    sys.exit(0)
for message in messages:
    sock.sendall(bytes.fromhex(message))
    head = b""
    while len(head) < 16:
        head += sock.recv(16 - len(head))
    body = b""
    length = int.from_bytes(head[:4], "little")
    while len(body) < length - 16:
        body += sock.recv(length - 16 - len(body))
    print("reply", (head + body).hex())
"""


def op_msg(command: dict, request_id: int = 1) -> str:
    body = struct.pack("<I", 0) + b"\x00" + bson.encode(command)
    return (struct.pack("<iiii", 16 + len(body), request_id, 0, 2013) + body).hex()


def as_nobody(kind: str, where: str, *commands: dict) -> tuple[dict[str, str], list[dict]]:
    """Run the raw client as ``nobody``: (directory probes, decoded replies)."""
    proc = subprocess.run([*SETPRIV, SYSTEM_PYTHON, "-c", RAW_CLIENT, kind, where,
                           *(op_msg(c, i + 1) for i, c in enumerate(commands))],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    probes: dict[str, str] = {}
    replies: list[dict] = []
    for line in proc.stdout.splitlines():
        word, rest = line.split(" ", 1)
        if word == "reply":
            raw = bytes.fromhex(rest)
            replies.append(bson.decode(raw[21:]))  # header, flags, section kind
        else:
            probes[word] = rest
    return probes, replies


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def world_base() -> Iterator[Path]:
    """A directory other users may traverse (pytest's own tmp tree is 0700), so that
    only the data directory's own mode keeps them out."""
    base = Path(tempfile.mkdtemp(prefix="cheeto-reach-", dir="/tmp"))
    os.chmod(base, 0o755)
    servers: list[EmbeddedServer] = []
    try:
        yield base
    finally:
        for child in base.iterdir():
            if (child / "server.pid").exists():
                servers.append(EmbeddedServer(EmbeddedStoreConfig(path=child)))
        for server in servers:
            server.stop()
        shutil.rmtree(base, ignore_errors=True)


def started(config: EmbeddedStoreConfig) -> EmbeddedServer:
    server = EmbeddedServer(config)
    server.start_background()
    return server


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


async def test_unix_socket_is_private_to_its_owner(world_base: Path) -> None:
    data = world_base / "store"
    data.mkdir(mode=0o755)
    (data / "old.db").write_text("")
    os.chmod(data / "old.db", 0o644)  # an older store's modes are tightened at start
    server = started(EmbeddedStoreConfig(path=data))
    store = await connect(MongoConfig(embedded=server.config, database="reach"),
                          autostart=False, create_indexes=False)
    await store.database.secrets.insert_one({"_id": "hash", "value": "$y$j9T$…"})
    await store.close()

    assert mode(data) == 0o700
    files = [p for p in data.iterdir() if not p.is_socket()]
    assert {p.name for p in files} >= {"reach.db", "instance.id", "server.log", "old.db"}
    assert {p.name: mode(p) for p in files} == {p.name: 0o600 for p in files}
    assert mode(server.socket_path) & 0o077 == 0

    probes, replies = as_nobody("unix", str(server.socket_path),
                                {"find": "secrets", "$db": "reach"})
    # the parent is open to everyone; the data directory itself refuses
    assert probes == {"parent": "listable", "dir": f"error {errno.EACCES}",
                      "connect": f"error {errno.EACCES}"}
    assert replies == []


async def test_tcp_needs_the_credential(world_base: Path) -> None:
    port = free_port()
    server = started(EmbeddedStoreConfig(path=world_base / "store", listen="tcp", port=port))
    token_file = server.data_dir / "store.token"
    assert mode(token_file) == 0o600 and len(token_file.read_text().strip()) >= 32

    # the owner's client authenticates with the token file and works
    store = await connect(MongoConfig(embedded=server.config, database="reach"),
                          autostart=False, create_indexes=False)
    await store.database.secrets.insert_one({"_id": "hash", "value": "$y$j9T$…"})
    await store.close()

    _, replies = as_nobody(
        "tcp", f"127.0.0.1:{port}",
        {"hello": 1, "$db": "admin"},
        {"find": "secrets", "$db": "reach"},
        {"insert": "secrets", "documents": [{"_id": "evil"}], "$db": "reach"},
        {"update": "users", "updates": [{"q": {}, "u": {"$set": {"sudo": True}}}],
         "$db": "reach"},
        {"saslStart": 1, "mechanism": "PLAIN", "payload": b"\0cheeto\0guess", "$db": "$external"},
        {"find": "secrets", "$db": "reach"},
    )
    hello, find, insert, update, sasl, find_again = replies
    assert hello["ok"] == 1  # the handshake is all an unauthenticated client gets
    for refused in (find, insert, update, find_again):
        assert (refused["ok"], refused["code"], refused["codeName"]) == (0, 13, "Unauthorized")
    assert (sasl["ok"], sasl["code"]) == (0, 18)
    with MongoClient(server.uri, username="cheeto", password=token_file.read_text().strip(),
                     authMechanism="PLAIN", authSource="$external") as client:
        assert [d["_id"] for d in client.reach.secrets.find()] == ["hash"]
    # a client without the credential is told so in one line
    with pytest.raises(ExternalError, match="needs a credential"):
        other = EmbeddedStoreConfig(path=server.data_dir, listen="tcp", port=port,
                                    token_file=world_base / "missing-token")
        await connect(MongoConfig(embedded=other, database="reach"), autostart=False)


async def test_a_second_home_cannot_use_the_first_homes_store(world_base: Path, cli) -> None:
    port = free_port()
    home_a = EmbeddedStoreConfig(path=world_base / "a", listen="tcp", port=port)
    server = started(home_a)
    token = (home_a.path / "store.token").read_text().strip()
    cfg_b = world_base / "b.yaml"
    for extra in ("", f"      token: {token}\n"):  # even holding A's credential
        cfg_b.write_text("mongo:\n  default:\n    database: reach\n    embedded:\n"
                         f"      path: {world_base / 'b'}\n      listen: tcp\n"
                         f"      port: {port}\n{extra}")
        for argv in (("ng", "site", "list", "--json"),
                     ("ng", "site", "new", "-s", "intruder", "--fqdn", "i.example.org")):
            r = await cli(*argv, config=cfg_b)
            assert r.code == 1 and r.stdout == ""
            assert len(r.error_lines) == 1, r.stderr
            line = r.error_lines[0]
            assert str(home_a.path) in line and str(world_base / "b") in line, line
            assert "refus" in line
    with MongoClient(server.uri, username="cheeto", password=token,
                     authMechanism="PLAIN", authSource="$external") as client:
        assert "reach" not in client.list_database_names() or \
            client.reach.sites.count_documents({}) == 0
    assert not (world_base / "b").exists()  # B never got a store of its own on A's port


async def test_homes_on_default_settings_each_get_their_own_server(world_base: Path,
                                                                   cli) -> None:
    configs = {}
    for home in ("a", "b"):
        configs[home] = world_base / f"{home}.yaml"
        configs[home].write_text(f"mongo:\n  default:\n    database: homes\n    embedded:\n"
                                 f"      path: {world_base / home}\n")
    r = await cli("ng", "site", "new", "-s", "only-a", "--fqdn", "a.example.org",
                  config=configs["a"])
    assert r.code == 0, r.stderr
    assert "started the embedded store" in r.stderr
    r = await cli("ng", "site", "list", "--json", config=configs["b"])
    assert r.code == 0, r.stderr
    assert r.json() == []
    r = await cli("db", "status", "--json", config=configs["a"])
    status = r.json()
    assert status["transport"] == "unix"
    assert status["address"] == f"unix:{world_base / 'a' / 'store.sock'}"
    assert status["answers"] is True


def test_transactions_are_serialised_by_the_server(tmp_path: Path) -> None:
    """Two clients' transactions never interleave (they used to nest as savepoints of one
    SQLite connection: lost updates and "no such savepoint"); a waiter behind a busy
    transaction gets LockTimeout instead of hanging; a silent transaction is rolled back
    when others wait, and so is one whose connection drops."""
    server = started(EmbeddedStoreConfig(path=tmp_path / "s", lock_timeout_seconds=1.5))
    try:
        with MongoClient(server.uri) as a, MongoClient(server.uri) as b:
            a.t.c.insert_one({"_id": "seed", "n": 0})
            # a busy transaction (3 s of writes): b's write waits, then fails, no hang
            first_write = threading.Event()

            def busy_transaction() -> None:
                with a.start_session() as sa, sa.start_transaction():
                    t_end = time.monotonic() + 3
                    i = 0
                    while time.monotonic() < t_end:
                        a.t.busy.insert_one({"_id": i}, session=sa)
                        first_write.set()
                        i += 1

            busy = threading.Thread(target=busy_transaction)
            busy.start()
            assert first_write.wait(10)
            t0 = time.monotonic()
            with pytest.raises(OperationFailure) as failed:
                b.t.c.insert_one({"_id": "other"})
            assert failed.value.code == 24 and time.monotonic() - t0 >= 1.4
            busy.join(timeout=20)
            assert a.t.busy.count_documents({}) > 10  # the busy one committed whole

            # b's transaction waits for a's to finish, then runs after it
            done = threading.Event()

            def b_transaction() -> None:
                with b.start_session() as sb, sb.start_transaction():
                    doc = b.t.c.find_one({"_id": "seed"}, session=sb)
                    b.t.c.update_one({"_id": "seed"}, {"$set": {"n": doc["n"] + 10}},
                                     session=sb)
                done.set()

            with a.start_session() as sa:
                sa.start_transaction()
                a.t.c.update_one({"_id": "seed"}, {"$inc": {"n": 1}}, session=sa)
                waiter = threading.Thread(target=b_transaction)
                waiter.start()
                time.sleep(0.5)
                assert not done.is_set()
                sa.commit_transaction()
                waiter.join(timeout=10)
                assert done.is_set()
            assert a.t.c.find_one({"_id": "seed"})["n"] == 11  # no lost update
            assert a.t.c.find_one({"_id": "other"}) is None

            # a silent transaction is rolled back once another client has waited long
            with a.start_session() as sa:
                sa.start_transaction()
                a.t.c.insert_one({"_id": "idle"}, session=sa)
                t0 = time.monotonic()
                b.t.c.insert_one({"_id": "patient"})
                assert time.monotonic() - t0 >= 1.4
                with pytest.raises(OperationFailure) as failed:
                    sa.commit_transaction()
                assert failed.value.code == 251  # NoSuchTransaction
            assert a.t.c.find_one({"_id": "idle"}) is None

        # a client that goes away mid-transaction: the server rolls it back
        raw = socket.socket(socket.AF_UNIX)
        raw.connect(str(server.socket_path))
        lsid = {"id": bson.Binary(os.urandom(16), 4)}
        start = {"insert": "c", "documents": [{"_id": "ghost"}], "$db": "t", "lsid": lsid,
                 "txnNumber": 1, "startTransaction": True, "autocommit": False}
        raw.sendall(bytes.fromhex(op_msg(start)))
        raw.recv(65536)
        raw.close()
        with MongoClient(server.uri) as c:
            assert c.t.c.find_one({"_id": "ghost"}) is None
            c.t.c.insert_one({"_id": "after"})  # the gate is free again
    finally:
        server.stop()
    server.start_background()
    try:
        with MongoClient(server.uri) as c:
            assert {d["_id"] for d in c.t.c.find()} == {"seed", "patient", "after"}
    finally:
        server.stop()
