"""The embedded server enforces what a MongoDB replica set enforces: the 16 MiB document
limit on the wire (past the driver's own check), transactionLifetimeLimitSeconds, and
the failCommand fail point only with ``enableTestCommands=1``. The store-wide behaviour
is pinned in tests/test_store_conformance*.py; these are the server's edges.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from cheeto_like.config import EmbeddedStoreConfig
from cheeto_like.embedded import EmbeddedServer

from .test_embedded_protocol import exchange, op_msg

ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024


def started(path: Path, **parameters: str) -> EmbeddedServer:
    server = EmbeddedServer(EmbeddedStoreConfig(path=path, lock_timeout_seconds=30),
                            set_parameters=parameters)
    server.start_background()
    return server


@pytest.fixture
def test_server(tmp_path: Path) -> Iterator[EmbeddedServer]:
    server = started(tmp_path / "s", enableTestCommands="1")
    try:
        yield server
    finally:
        server.stop()


def client(server: EmbeddedServer, app: str = "limits") -> MongoClient[dict[str, Any]]:
    return MongoClient(server.uri, appname=app)


def test_without_test_commands_fail_points_are_unknown_and_test_parameters_refused(
        tmp_path: Path) -> None:
    server = started(tmp_path / "s")
    try:
        with client(server) as c:
            with pytest.raises(OperationFailure) as refused:
                c.admin.command("configureFailPoint", "failCommand", mode="alwaysOn",
                                data={"failCommands": ["find"], "errorCode": 2})
            assert (refused.value.code, refused.value.details["codeName"]) == (
                59, "CommandNotFound")
            with pytest.raises(OperationFailure) as refused:
                c.admin.command("setParameter", 1, enableTestCommands=1)
            assert refused.value.code == 72
            with pytest.raises(OperationFailure) as refused:
                c.admin.command("setParameter", 1, noSuchParameter=1)
            assert refused.value.code == 72
            with pytest.raises(OperationFailure):
                c.admin.command("setParameter", 1, transactionLifetimeLimitSeconds=0)
            # the lifetime is an ordinary runtime parameter, as on mongod
            assert c.admin.command("setParameter", 1,
                                   transactionLifetimeLimitSeconds=30)["was"] == 60
            assert c.admin.command("getParameter", 1, transactionLifetimeLimitSeconds=1)[
                "transactionLifetimeLimitSeconds"] == 30
            assert c.t.c.find_one({}) is None  # and the store serves
    finally:
        server.stop()


def test_a_bad_start_up_parameter_stops_the_server_with_one_line(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "cheeto_like.embedded", "--data-dir",
                           str(tmp_path / "s"), "--set-parameter", "bogus=1"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: --set-parameter")


def test_times_two_fails_exactly_two_matching_commands_and_skip_lets_some_through(
        test_server: EmbeddedServer) -> None:
    with client(test_server) as c, client(test_server, "other") as other:
        c.t.c.insert_one({"_id": 1})
        c.admin.command("configureFailPoint", "failCommand", mode={"times": 2},
                        data={"failCommands": ["find"], "errorCode": 2,
                              "appName": "limits"})
        assert other.t.c.find_one({"_id": 1}) == {"_id": 1}  # another application: spared
        outcomes = []
        for _ in range(4):
            try:
                c.t.c.find_one({"_id": 1})
                outcomes.append("ok")
            except OperationFailure as exc:
                outcomes.append(str(exc.code))
        assert outcomes == ["2", "2", "ok", "ok"]  # BadValue: not retried
        reply = c.admin.command("configureFailPoint", "failCommand", mode={"skip": 1},
                                data={"failCommands": ["count"], "errorCode": 2,
                                      "appName": "limits"})
        assert reply["count"] == 2  # the times the fail point fired so far
        assert c.t.command("count", "c")["n"] == 1
        with pytest.raises(OperationFailure):
            c.t.command("count", "c")
        c.admin.command("configureFailPoint", "failCommand", mode="off")
        assert c.t.command("count", "c")["n"] == 1


def test_block_connection_delays_the_command_then_runs_it(test_server: EmbeddedServer) -> None:
    with client(test_server) as c:
        c.admin.command("configureFailPoint", "failCommand", mode={"times": 1},
                        data={"failCommands": ["insert"], "blockConnection": True,
                              "blockTimeMS": 700, "appName": "limits"})
        t0 = time.monotonic()
        c.t.c.insert_one({"_id": "late"})
        assert time.monotonic() - t0 >= 0.7  # the server slept at least blockTimeMS
        assert c.t.c.find_one({"_id": "late"}) == {"_id": "late"}


def test_close_connection_on_commit_keeps_the_transaction_for_the_retried_commit(
        test_server: EmbeddedServer) -> None:
    """mongod's sessions outlive connections: the driver retries a commit whose
    connection dropped, and the retry commits. (A connection that closes on its own
    still rolls its transaction back: tests/embedded/test_embedded_kill.py.)"""
    with client(test_server) as c:
        c.admin.command("configureFailPoint", "failCommand", mode={"times": 1},
                        data={"failCommands": ["commitTransaction"],
                              "closeConnection": True, "appName": "limits"})
        with c.start_session() as session:
            with session.start_transaction():
                c.t.c.insert_one({"_id": "kept"}, session=session)
        assert c.t.c.find_one({"_id": "kept"}) == {"_id": "kept"}


def test_an_error_code_inside_a_transaction_aborts_it_and_frees_the_store(
        test_server: EmbeddedServer) -> None:
    with client(test_server) as c:
        c.admin.command("configureFailPoint", "failCommand", mode={"times": 1},
                        data={"failCommands": ["update"], "errorCode": 112,
                              "appName": "limits"})
        with c.start_session() as session:
            session.start_transaction()
            c.t.c.insert_one({"_id": "first"}, session=session)
            with pytest.raises(OperationFailure) as failed:
                c.t.c.update_one({"_id": "first"}, {"$set": {"n": 1}}, session=session)
            assert failed.value.has_error_label("TransientTransactionError")
            with pytest.raises(OperationFailure) as gone:
                session.commit_transaction()
            assert gone.value.code == 251
        c.t.c.insert_one({"_id": "free"})
        assert [d["_id"] for d in c.t.c.find()] == ["free"]


def test_a_transaction_past_a_two_second_lifetime_is_aborted_and_the_lock_freed(
        test_server: EmbeddedServer) -> None:
    with client(test_server) as a, client(test_server, "b") as b:
        a.admin.command("setParameter", 1, transactionLifetimeLimitSeconds=2)
        with a.start_session() as session:
            session.start_transaction()
            a.t.c.insert_one({"_id": "held"}, session=session)
            # another client's transaction waits for the gate, and gets it once the
            # holder's lifetime is over (the lock timeout is 30 s: not what frees it)
            with b.start_session() as other, other.start_transaction():
                b.t.c.insert_one({"_id": "waited"}, session=other)
            with pytest.raises(OperationFailure) as aborted:
                session.commit_transaction()
            assert aborted.value.code == 251
            assert aborted.value.has_error_label("TransientTransactionError")
        assert [d["_id"] for d in a.t.c.find()] == ["waited"]


def test_a_raw_insert_past_16_mib_is_refused_with_mongods_codes(
        test_server: EmbeddedServer) -> None:
    """pymongo refuses such documents itself; a client that does not must meet the
    server's own refusal: code 2 for a document just past 16 MiB (the others of an
    ordered insert before it are written), BSONObjectTooLarge for the whole message
    past 16 MiB + 16 KiB."""
    just_over = {"_id": "over", "pad": "p" * (16 * MIB)}
    far_over = {"_id": "far", "pad": "p" * (17 * MIB)}
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(60)
        sock.connect(str(test_server.socket_path))
        (reply,) = exchange(sock, op_msg({"insert": "c", "$db": "t"}, sequence=(
            "documents", [{"_id": "before"}, just_over, {"_id": "after"}])))
        assert reply["ok"] == 1 and reply["n"] == 1
        assert [(e["index"], e["code"]) for e in reply["writeErrors"]] == [(1, 2)]
        (reply,) = exchange(sock, op_msg({"insert": "c", "$db": "t"},
                                         sequence=("documents", [{"_id": "x"}, far_over])))
        assert (reply["ok"], reply["code"], reply["codeName"]) == (
            0, 10334, "BSONObjectTooLarge")
    with client(test_server) as c:
        assert [d["_id"] for d in c.t.c.find({}, {"_id": 1})] == ["before"]


def test_a_push_past_16_mib_inside_a_transaction_leaves_the_document_unchanged(
        test_server: EmbeddedServer) -> None:
    from pymongo.errors import WriteError

    with client(test_server) as c:
        c.t.c.insert_one({"_id": "big", "parts": ["x" * MIB] * 15, "n": 0})
        with c.start_session() as session:
            session.start_transaction()
            c.t.c.update_one({"_id": "big"}, {"$inc": {"n": 1}}, session=session)
            with pytest.raises(WriteError) as refused:
                c.t.c.update_one({"_id": "big"}, {"$push": {"parts": "y" * (2 * MIB)}},
                                 session=session)
            assert refused.value.code == 17419
            session.abort_transaction()
        stored = c.t.c.find_one({"_id": "big"})
        assert (len(stored["parts"]), stored["n"]) == (15, 0)


def test_retried_writes_apply_once(test_server: EmbeddedServer) -> None:
    """A writeConcernError with a retryable code makes the driver retry the write; the
    retry is answered from the first attempt, as mongod's retryable writes are."""
    with client(test_server) as c:
        c.admin.command("configureFailPoint", "failCommand", mode={"times": 1},
                        data={"failCommands": ["update"], "appName": "limits",
                              "writeConcernError": {"code": 91, "errmsg": "shutdown"}})
        c.t.c.insert_one({"_id": "n", "n": 0})
        c.t.c.update_one({"_id": "n"}, {"$inc": {"n": 1}})
        assert c.t.c.find_one({"_id": "n"})["n"] == 1

