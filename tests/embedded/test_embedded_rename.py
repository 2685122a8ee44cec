"""The embedded server's own renameCollection and drop (nx-27017 renamed in the database
the command was sent to, had no ``dropTarget``, and its collection cache did not roll
back with SQLite). The behaviour both stores share is pinned in
tests/test_store_conformance*.py; these are the server's edges: what only the embedded
store refuses, TTL options across a rename, a drop that forgets its TTL rows, the cache
after a rolled-back transaction, and a rename waiting for another client's transaction.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from cheeto_like.config import EmbeddedStoreConfig
from cheeto_like.embedded import EmbeddedServer


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    embedded = EmbeddedServer(EmbeddedStoreConfig(path=tmp_path_factory.mktemp("rename"),
                                                  lock_timeout_seconds=30))
    embedded.start_background()
    try:
        yield embedded
    finally:
        embedded.stop()


@pytest.fixture
def client(server: EmbeddedServer) -> Iterator[MongoClient[dict[str, Any]]]:
    with MongoClient(server.uri) as c:
        for name in c.rn.list_collection_names():
            c.rn.drop_collection(name)
        yield c


def refused(client: MongoClient[dict[str, Any]], source: Any, to: Any, *,
            db: str = "admin", **options: Any) -> tuple[int, str]:
    with pytest.raises(OperationFailure) as failed:
        client[db].command("renameCollection", source, to=to, **options)
    return failed.value.code, failed.value.details["codeName"]


def test_what_the_embedded_store_refuses_and_mongod_refuses_too(
        client: MongoClient[dict[str, Any]], server: EmbeddedServer) -> None:
    client.rn.src.insert_one({"_id": 1})
    # across databases mongod copies; two SQLite files cannot do that atomically
    assert refused(client, "rn.src", "other.src") == (20, "IllegalOperation")
    assert refused(client, "rn.src", "rn.src", dropTarget=True) == (20, "IllegalOperation")
    assert refused(client, "rn.src", "rn.dst", db="rn") == (13, "Unauthorized")
    assert refused(client, "rn", "rn.dst") == (73, "InvalidNamespace")
    assert refused(client, "rn.src", "rn.bad-name") == (73, "InvalidNamespace")
    assert refused(client, "rn.src", 5) == (14, "TypeMismatch")
    # a database that does not exist: NamespaceNotFound, and no file is made for it
    assert refused(client, "nowhere.src", "nowhere.dst") == (26, "NamespaceNotFound")
    assert not (Path(server.config.path) / "nowhere.db").exists()
    assert "nowhere" not in client.list_database_names()
    assert client.rn.src.find_one() == {"_id": 1}  # nothing moved
    assert client.rn.list_collection_names() == ["src"]


def test_a_ttl_index_keeps_its_expiry_across_a_rename_with_drop_target(
        client: MongoClient[dict[str, Any]]) -> None:
    client.rn.live.insert_one({"_id": "old"})
    client.rn.live.create_index("seen", expireAfterSeconds=60)
    client.rn.staging.insert_many([{"_id": "fresh", "seen": datetime.now(UTC)},
                                   {"_id": "stale",
                                    "seen": datetime.now(UTC) - timedelta(days=1)}])
    client.rn.staging.create_index("at", expireAfterSeconds=3600)
    client.admin.command("renameCollection", "rn.staging", to="rn.live", dropTarget=True)
    indexes = client.rn.live.index_information()
    ttl = {tuple(f for f, _ in spec["key"]): spec.get("expireAfterSeconds")
           for spec in indexes.values()}
    assert ttl == {("_id",): None, ("at",): 3600}  # the target's "seen" index went with it
    # the dropped target's expiry is not the new collection's: "stale" stays
    assert sorted(d["_id"] for d in client.rn.live.find()) == ["fresh", "stale"]


def test_a_dropped_collection_leaves_no_expiry_to_the_next_of_its_name(
        client: MongoClient[dict[str, Any]]) -> None:
    client.rn.events.create_index("at", expireAfterSeconds=1)
    client.rn.events.drop()
    old = datetime.now(UTC) - timedelta(days=1)
    client.rn.events.insert_one({"_id": "kept", "at": old})
    assert client.rn.events.find_one() == {"_id": "kept", "at": old.replace(
        microsecond=old.microsecond // 1000 * 1000, tzinfo=None)}
    assert set(client.rn.events.index_information()) == {"_id_"}


def test_a_collection_made_by_a_rolled_back_transaction_is_made_again_afterwards(
        client: MongoClient[dict[str, Any]]) -> None:
    with client.start_session() as session:
        session.start_transaction()
        client.rn.born.insert_one({"_id": "rolled-back"}, session=session)
        session.abort_transaction()
    assert "born" not in client.rn.list_collection_names()
    client.rn.born.insert_one({"_id": "after"})
    assert list(client.rn.born.find()) == [{"_id": "after"}]


def test_a_rename_waits_for_an_open_transaction_which_never_sees_half_of_it(
        client: MongoClient[dict[str, Any]], server: EmbeddedServer) -> None:
    """Under the gate: a transaction reading both names sees the old state until it
    ends; the rename (with dropTarget) then runs whole."""
    client.rn.live.insert_many([{"_id": "old1"}, {"_id": "old2"}])
    client.rn.staging.insert_many([{"_id": "new1"}, {"_id": "new2"}, {"_id": "new3"}])
    outcome: list[Any] = []
    with MongoClient(server.uri) as other, client.start_session() as session:
        session.start_transaction()
        seen = [sorted(d["_id"] for d in client.rn.live.find(session=session))]

        def rename() -> None:
            try:
                outcome.append(other.admin.command("renameCollection", "rn.staging",
                                                   to="rn.live", dropTarget=True))
            except Exception as exc:  # reported by the assertion below
                outcome.append(exc)

        thread = threading.Thread(target=rename)
        thread.start()
        seen.append(sorted(d["_id"] for d in client.rn.live.find(session=session)))
        seen.append(sorted(d["_id"] for d in client.rn.staging.find(session=session)))
        session.commit_transaction()
        thread.join()
    assert seen == [["old1", "old2"], ["old1", "old2"], ["new1", "new2", "new3"]]
    assert outcome == [{"ok": 1}]
    assert sorted(d["_id"] for d in client.rn.live.find()) == ["new1", "new2", "new3"]
    assert client.rn.list_collection_names() == ["live"]
