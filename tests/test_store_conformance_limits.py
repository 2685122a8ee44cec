"""Store conformance (see test_store_conformance.py: every MongoDB behaviour the project
relies on, on whichever store the suite runs against), continued: retention (compound
and TTL indexes, chunked deletes), MongoDB's limits and failure modes (16 MiB,
transaction lifetime, fail points) and renameCollection/drop.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pymongo import UpdateOne
from pymongo.errors import DuplicateKeyError

from cheeto_like.config import MongoConfig

from .conformance_helpers import Boom

# -- retention and bounded run documents (issue 24) -----------------------------------------


async def test_compound_indexes_are_listed_with_their_fields_in_order(empty_db):
    """``sync_runs``' (site, -started_at) and the ledger's (site, user, end_epoch): the
    store keeps the fields in order (the embedded store reports every direction as 1)."""
    collection = empty_db.database["conformance_compound"]
    await collection.create_index([("site", 1), ("started_at", -1)])
    await collection.create_index([("site", 1), ("user", 1), ("end_epoch", 1)])
    found = {tuple(dict(i["key"])) async for i in await collection.list_indexes()}
    assert {("site", "started_at"), ("site", "user", "end_epoch")} <= found
    await collection.insert_many([{"_id": f"r{n}", "site": "farm", "user": "a",
                                   "end_epoch": n} for n in range(5)])
    where = {"site": "farm", "user": "a", "end_epoch": {"$gte": 1, "$lt": 4}}
    assert await collection.count_documents(where) == 3


async def test_a_ttl_index_takes_a_new_expiry_and_a_range_delete_by_chunks_of_ids(empty_db):
    """What ``operations.retention`` does: a TTL index on a datetime (listed with its
    ``expireAfterSeconds``), a new expiry (MongoDB: ``collMod`` when create conflicts; the
    embedded store: create replaces it), dropping it back to a plain index, and the pass's
    ``$lt`` datetime range read as ``_id``s, then deleted with ``$in``."""
    from pymongo.errors import OperationFailure

    collection = empty_db.database["conformance_ttl"]
    now = datetime.now(UTC)
    await collection.insert_many([{"_id": f"d{n}", "at": now - timedelta(days=n * 10)}
                                  for n in range(6)])
    cutoff = now - timedelta(days=25)
    ids = [d["_id"] async for d in collection.find({"at": {"$lt": cutoff}}, {"_id": 1})
           .limit(2)]
    assert len(ids) == 2 and set(ids) <= {"d3", "d4", "d5"}
    assert (await collection.delete_many({"_id": {"$in": ids}})).deleted_count == 2

    async def ttl() -> dict:
        [found] = [dict(i) async for i in await collection.list_indexes()
                   if tuple(dict(i["key"])) == ("at",)]
        return found

    await collection.create_index([("at", 1)], name="retention_at", expireAfterSeconds=86400)
    assert (await ttl())["expireAfterSeconds"] == 86400
    try:
        await collection.create_index([("at", 1)], name="retention_at",
                                      expireAfterSeconds=2 * 86400)
    except OperationFailure as exc:
        assert exc.code in (85, 86)
        await empty_db.database.command({"collMod": "conformance_ttl", "index": {
            "keyPattern": {"at": 1}, "expireAfterSeconds": 2 * 86400}})
    assert (await ttl())["expireAfterSeconds"] == 2 * 86400
    name = (await ttl())["name"]
    await collection.drop_index(name)
    await collection.create_index([("at", 1)], name=name)
    assert "expireAfterSeconds" not in await ttl()
    # one day's expiry would have taken all but d0; without a TTL every other stays
    assert await collection.count_documents({}) == 4


async def test_a_bulk_write_of_inserts_then_sets_by_id_keeps_inserted_datetimes(empty_db):
    """``RunJournal`` stores a plan's items: new ones ``InsertOne`` (a datetime inserted
    stays a datetime; a ``$set`` one would come back as text on the embedded store),
    known ones ``UpdateOne`` ``$set`` of strings by ``_id``, in one ordered bulk_write."""
    from pymongo import InsertOne

    collection = empty_db.database["conformance_items"]
    when = datetime(2031, 2, 3, 4, 5, 6, tzinfo=UTC)
    await collection.bulk_write([InsertOne({"_id": f"r:{n}", "run": "r", "index": n,
                                            "started_at": when, "outcome": "planned"})
                                 for n in range(3)], ordered=True)
    await collection.bulk_write([UpdateOne({"_id": "r:1"}, {"$set": {"outcome": "ok",
                                                                     "detail": "0.1s"}}),
                                 InsertOne({"_id": "r:3", "run": "r", "index": 3,
                                            "started_at": when, "outcome": "skipped"})],
                                ordered=True)
    docs = sorted([d async for d in collection.find({"run": "r"})], key=lambda d: d["index"])
    assert [d["outcome"] for d in docs] == ["planned", "ok", "planned", "skipped"]
    assert all(d["started_at"] == when for d in docs) and docs[1]["detail"] == "0.1s"


# -- MongoDB's limits and failure modes (16 MiB, transaction lifetime, fail points) ----------
#
# Each holds on a real replica set started with ``--setParameter enableTestCommands=1``
# (as the embedded store the suite starts is). A fail point is always scoped to this
# test's own client (``appName``) and turned off in a ``finally``.

MIB = 1024 * 1024


def _sync_client(config: MongoConfig, appname: str) -> Any:
    """A plain pymongo client of the suite's store, naming its application."""
    from pymongo import MongoClient

    from cheeto_like.embedded import EmbeddedServer

    if config.uri:
        return MongoClient(config.uri, appname=appname)
    server = EmbeddedServer(config.embedded)
    return MongoClient(server.uri, appname=appname, **server.client_options())


def _fail_point(client: Any, mode: Any, **data: Any) -> None:
    client.admin.command("configureFailPoint", "failCommand", mode=mode, data=data)


def _off(client: Any) -> None:
    client.admin.command("configureFailPoint", "failCommand", mode="off")


async def test_an_update_growing_a_document_past_16_mib_is_refused_and_writes_nothing(
        empty_db, mongo_config):
    from pymongo.errors import OperationFailure, WriteError

    with _sync_client(mongo_config, "limits") as client:
        coll = client[empty_db.database.name].big_docs
        coll.insert_one({"_id": "big", "parts": ["x" * MIB] * 15})
        with pytest.raises(WriteError) as refused:
            coll.update_one({"_id": "big"}, {"$push": {"parts": "y" * (2 * MIB)}})
        assert refused.value.code == 17419
        with pytest.raises(WriteError):
            coll.update_one({"_id": "big"}, {"$set": {"more": "z" * (2 * MIB)}})
        with pytest.raises(OperationFailure) as refused:
            coll.find_one_and_update({"_id": "big"}, {"$push": {"parts": "y" * (2 * MIB)}})
        assert refused.value.code == 17419
        stored = coll.find_one({"_id": "big"})
        assert len(stored["parts"]) == 15 and "more" not in stored
        # a growth that stays under the limit is fine
        coll.update_one({"_id": "big"}, {"$push": {"parts": "ok"}})
        assert len(coll.find_one({"_id": "big"})["parts"]) == 16
        coll.drop()


async def test_an_aggregation_result_past_16_mib_is_refused(empty_db, mongo_config):
    from pymongo.errors import OperationFailure

    with _sync_client(mongo_config, "limits") as client:
        coll = client[empty_db.database.name].big_group
        coll.insert_many([{"_id": i, "k": "one", "blob": "b" * (6 * MIB)} for i in range(3)])
        with pytest.raises(OperationFailure) as refused:
            list(coll.aggregate([{"$group": {"_id": "$k", "all": {"$push": "$blob"}}}]))
        assert (refused.value.code, refused.value.details["codeName"]) == (
            10334, "BSONObjectTooLarge")
        # each document alone is fine
        assert len(list(coll.find({}, {"_id": 1}))) == 3
        coll.drop()


async def test_a_transaction_older_than_its_lifetime_limit_is_aborted(empty_db, mongo_config):
    from pymongo.errors import OperationFailure

    with _sync_client(mongo_config, "lifetime") as client:
        coll = client[empty_db.database.name].lifetime
        coll.insert_one({"_id": "seed"})
        assert client.admin.command("getParameter", 1, transactionLifetimeLimitSeconds=1)[
            "transactionLifetimeLimitSeconds"] == 60
        before = client.admin.command("setParameter", 1, transactionLifetimeLimitSeconds=2)
        try:
            assert before["was"] == 60
            with client.start_session() as session:
                session.start_transaction()
                coll.insert_one({"_id": "late"}, session=session)
                await asyncio.sleep(6)  # past the lifetime and the reaper's next round
                with pytest.raises(OperationFailure) as aborted:
                    coll.insert_one({"_id": "later"}, session=session)
                assert aborted.value.code == 251
                assert aborted.value.has_error_label("TransientTransactionError")
                with pytest.raises(OperationFailure) as aborted:
                    session.commit_transaction()
                assert aborted.value.code == 251
            coll.insert_one({"_id": "after"})  # nothing holds the store
            assert sorted(d["_id"] for d in coll.find()) == ["after", "seed"]
        finally:
            client.admin.command("setParameter", 1, transactionLifetimeLimitSeconds=60)
            coll.drop()


async def test_fail_command_fails_the_named_commands_with_the_code_and_labels(
        empty_db, mongo_config):
    from pymongo.errors import OperationFailure

    with _sync_client(mongo_config, "failpoint") as client:
        coll = client[empty_db.database.name].failing
        coll.insert_one({"_id": 1})
        _fail_point(client, {"times": 2}, failCommands=["find", "aggregate"], errorCode=2,
                    errorLabels=["SomeLabel"], appName="failpoint")
        try:
            codes = []
            for _ in range(2):
                with pytest.raises(OperationFailure) as failed:
                    coll.find_one({"_id": 1})
                codes.append((failed.value.code, failed.value.has_error_label("SomeLabel")))
            assert codes == [(2, True), (2, True)]
            assert coll.find_one({"_id": 1}) == {"_id": 1}  # times: 2 is spent
        finally:
            _off(client)
        coll.drop()


async def test_fail_command_write_concern_error_applies_the_write_first(empty_db, mongo_config):
    from pymongo.errors import WriteConcernError

    with _sync_client(mongo_config, "failpoint") as client:
        coll = client[empty_db.database.name].wce
        _fail_point(client, {"times": 1}, failCommands=["insert"], appName="failpoint",
                    writeConcernError={"code": 100, "errmsg": "Not enough data-bearing nodes"})
        try:
            with pytest.raises(WriteConcernError) as failed:
                coll.insert_one({"_id": "applied"})
            assert failed.value.code == 100
        finally:
            _off(client)
        assert coll.find_one({"_id": "applied"}) == {"_id": "applied"}
        coll.drop()


async def test_fail_command_close_connection_is_retried_by_retryable_writes_and_reads(
        empty_db, mongo_config):
    with _sync_client(mongo_config, "failpoint") as client:
        coll = client[empty_db.database.name].retried
        _fail_point(client, {"times": 1}, failCommands=["insert"], closeConnection=True,
                    appName="failpoint")
        try:
            coll.insert_one({"_id": "once"})  # the driver retries after the network error
            _fail_point(client, {"times": 1}, failCommands=["find"], closeConnection=True,
                        appName="failpoint")
            assert coll.find_one({"_id": "once"}) == {"_id": "once"}
        finally:
            _off(client)
        assert coll.count_documents({}) == 1
        coll.drop()


async def test_generation_marks_sum_per_key_and_fold_in_one_transaction(empty_db):
    """``models/generation.py``: marks are inserted; one ``$group`` on ``key`` with a
    ``$sum`` of ``n`` reads every generation (documents without ``key`` group under
    None); the compaction ``$inc``s a base (upsert by ``_id`` with a ``$set`` of its
    key) and deletes the folded marks by ``$in`` of their ids, in one transaction."""
    collection = empty_db.database["generation_marks_probe"]
    await collection.insert_many([{"_id": f"m{i}", "key": "site:farm", "n": 1}
                                  for i in range(3)] + [{"_id": "m9", "key": "all", "n": 1},
                                                        {"_id": "all", "n": 42}])

    async def sums() -> dict[Any, int]:
        cursor = await collection.aggregate([{"$group": {"_id": "$key",
                                                         "n": {"$sum": "$n"}}}])
        return {d["_id"]: d["n"] for d in await cursor.to_list()}

    assert await sums() == {"site:farm": 3, "all": 1, None: 42}
    async with empty_db.session(transaction=True) as session:
        await collection.update_one({"_id": "base:site:farm"},
                                    {"$inc": {"n": 2}, "$set": {"key": "site:farm"}},
                                    upsert=True, session=session)
        await collection.delete_many({"_id": {"$in": ["m0", "m1", "all"]}}, session=session)
    assert await sums() == {"site:farm": 3, "all": 1}
    assert await collection.find_one({"_id": "base:site:farm"}) == {
        "_id": "base:site:farm", "n": 2, "key": "site:farm"}
    await collection.drop()


# -- renameCollection and drop (the restore's switch) ----------------------------------------


async def _index_keys(collection: Any) -> set[tuple[str, ...]]:
    """Each index by its fields and uniqueness (names differ between stores)."""
    info = await collection.index_information()
    return {tuple(field for field, _ in spec["key"]) + (("unique",) if spec.get("unique")
                                                        else ())
            for spec in info.values()}


async def _rename_error(store: Any, source: str, target: str, **options: Any) -> int:
    from pymongo.errors import OperationFailure

    db = store.database.name
    with pytest.raises(OperationFailure) as refused:
        await store.client.admin.command("renameCollection", f"{db}.{source}",
                                         to=f"{db}.{target}", **options)
    return refused.value.code


async def test_rename_collection_moves_documents_and_indexes_and_frees_the_old_name(empty_db):
    """mongod's form (on ``admin``, full namespaces): the documents and indexes are the
    new name's, unique still enforced; the old name is gone and starts afresh."""
    database = empty_db.database
    for name in ("rename_from", "rename_to"):
        await database.drop_collection(name)
    source = database["rename_from"]
    await source.insert_many([{"_id": i, "k": f"k{i}", "g": i % 2} for i in range(3)])
    await source.create_index("k", unique=True)
    await source.create_index([("g", 1), ("k", 1)])
    await empty_db.client.admin.command("renameCollection", f"{database.name}.rename_from",
                                        to=f"{database.name}.rename_to")
    names = await database.list_collection_names()
    assert "rename_to" in names and "rename_from" not in names
    target = database["rename_to"]
    assert [d["_id"] async for d in target.find().sort("_id", 1)] == [0, 1, 2]
    assert await _index_keys(target) == {("_id",), ("k", "unique"), ("g", "k")}
    with pytest.raises(DuplicateKeyError):
        await target.insert_one({"_id": 9, "k": "k1"})
    assert await source.find_one({}) is None
    await source.insert_one({"_id": "fresh"})  # the old name is a new, separate collection
    assert await target.count_documents({}) == 3
    assert await source.count_documents({}) == 1
    for name in ("rename_from", "rename_to"):
        await database.drop_collection(name)


async def test_rename_collection_drop_target_replaces_the_target_and_its_indexes(empty_db):
    """Without ``dropTarget`` an existing target is NamespaceExists (48) and nothing
    moves; with it the target is the source's (documents and indexes), in one step."""
    database = empty_db.database
    for name in ("switch_live", "switch_staging"):
        await database.drop_collection(name)
    live, staging = database["switch_live"], database["switch_staging"]
    await live.insert_many([{"_id": "old1", "old": 1}, {"_id": "old2", "old": 2}])
    await live.create_index("old")
    await staging.insert_many([{"_id": f"new{i}", "n": i} for i in range(4)])
    await staging.create_index("n", unique=True)
    assert await _rename_error(empty_db, "switch_staging", "switch_live") == 48
    assert await live.count_documents({}) == 2 and await staging.count_documents({}) == 4
    await empty_db.client.admin.command("renameCollection",
                                        f"{database.name}.switch_staging",
                                        to=f"{database.name}.switch_live", dropTarget=True)
    assert "switch_staging" not in await database.list_collection_names()
    assert sorted([d["_id"] async for d in live.find()]) == [f"new{i}" for i in range(4)]
    assert await _index_keys(live) == {("_id",), ("n", "unique")}
    with pytest.raises(DuplicateKeyError):
        await live.insert_one({"_id": "dup", "n": 2})
    # dropTarget onto a name that does not exist is a plain rename
    await empty_db.client.admin.command("renameCollection", f"{database.name}.switch_live",
                                        to=f"{database.name}.switch_staging", dropTarget=True)
    assert await staging.count_documents({}) == 4
    await database.drop_collection("switch_staging")


async def test_rename_collection_of_a_missing_source_is_namespace_not_found(empty_db):
    database = empty_db.database
    for name in ("rename_missing", "rename_present"):
        await database.drop_collection(name)
    await database["rename_present"].insert_one({"_id": 1})
    assert await _rename_error(empty_db, "rename_missing", "rename_present") == 26
    assert await _rename_error(empty_db, "rename_missing", "rename_present",
                               dropTarget=True) == 26
    assert await database["rename_present"].count_documents({}) == 1  # untouched
    await database.drop_collection("rename_present")


async def test_drop_and_rename_inside_a_transaction_are_refused_and_change_nothing(empty_db):
    """OperationNotSupportedInTransaction (263), as mongod: the transaction stays open
    (its commit keeps its writes), and a rollback after a refused rename leaves both
    names as they were, each with its own documents."""
    from pymongo.errors import OperationFailure

    database = empty_db.database
    for name in ("txn_ddl_live", "txn_ddl_staging"):
        await database.drop_collection(name)
    live, staging = database["txn_ddl_live"], database["txn_ddl_staging"]
    await live.insert_one({"_id": "live"})
    await staging.insert_one({"_id": "staged"})
    async with empty_db.session(transaction=True) as session:
        await live.insert_one({"_id": "in-txn"}, session=session)
        with pytest.raises(OperationFailure) as refused:
            await database.command("drop", "txn_ddl_staging", session=session)
        assert refused.value.code == 263
    assert sorted([d["_id"] async for d in live.find()]) == ["in-txn", "live"]
    with pytest.raises(Boom):
        async with empty_db.session(transaction=True) as session:
            await live.insert_one({"_id": "rolled-back"}, session=session)
            with pytest.raises(OperationFailure) as refused:
                await empty_db.client.admin.command(
                    "renameCollection", f"{database.name}.txn_ddl_staging",
                    to=f"{database.name}.txn_ddl_live", dropTarget=True, session=session)
            assert refused.value.code == 263
            raise Boom
    assert sorted([d["_id"] async for d in live.find()]) == ["in-txn", "live"]
    assert [d["_id"] async for d in staging.find()] == ["staged"]
    for name in ("txn_ddl_live", "txn_ddl_staging"):
        await database.drop_collection(name)
