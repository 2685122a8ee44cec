"""Store conformance (see test_store_conformance.py: every MongoDB behaviour the project
relies on, on whichever store the suite runs against), continued: the usage ledger's
aggregations and the site-scale reads (projections, ``$group`` pushes, parts and id
ranges), generation counters, raw upserts, leases and sign-in logs.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from pymongo import UpdateOne

from cheeto_like.models import (
    GroupMembership,
    SyncStep,
    UsageRecord,
    User,
    UserSiteInfo,
)

from .conformance_helpers import Boom, user_doc

# -- aggregation (the usage ledger's reports) ----------------------------------------------
# Shapes the reports rely on. Not relied on, because the embedded store gets them wrong:
# a datetime range inside an aggregation ``$match`` (it matches nothing or everything:
# the ledger matches an integer ``end_epoch`` instead) and a compound (document) ``_id`` in
# ``$group`` (it comes back as the literal spec). A ``$concat`` key works but runs in
# Python, about 6x slower, so the reports group on one field per query.


async def _ledger(count: int = 6) -> Any:
    collection = UsageRecord.get_pymongo_collection()
    await collection.insert_many([
        {"_id": f"r{i}", "site": "farm", "user": f"u{i % 2}",
         "partition": "cpu" if i < 4 else "gpu", "end_epoch": 1000 + i, "cpu_minutes": float(i),
         "gpus": [{"type": "a100", "minutes": 1.5}] if i % 3 == 0 else []}
        for i in range(count)])
    return collection


async def _run(collection: Any, pipeline: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(await (await collection.aggregate(pipeline)).to_list(),
                  key=lambda d: str(d["_id"]))


async def test_aggregate_match_on_an_integer_range_and_group_on_a_field(empty_db):
    collection = await _ledger()
    rows = await _run(collection, [
        {"$match": {"site": "farm", "end_epoch": {"$gte": 1001, "$lt": 1005}}},
        {"$group": {"_id": "$user", "jobs": {"$sum": 1}, "cpu": {"$sum": "$cpu_minutes"}}}])
    assert rows == [{"_id": "u0", "jobs": 2, "cpu": 6.0}, {"_id": "u1", "jobs": 2, "cpu": 4.0}]


async def test_aggregate_match_on_two_strings_and_sum_a_constant(empty_db):
    collection = await _ledger()
    rows = await _run(collection, [
        {"$match": {"site": "farm", "partition": "gpu", "end_epoch": {"$gte": 1000}}},
        {"$group": {"_id": "$user", "cpu": {"$sum": "$cpu_minutes"}, "zero": {"$sum": 0}}}])
    assert rows == [{"_id": "u0", "cpu": 4.0, "zero": 0}, {"_id": "u1", "cpu": 5.0, "zero": 0}]


async def test_aggregate_unwind_a_list_of_subdocuments_and_group_by_a_dotted_key(empty_db):
    collection = await _ledger()
    rows = await _run(collection, [
        {"$match": {"site": "farm"}}, {"$unwind": "$gpus"},
        {"$group": {"_id": "$gpus.type", "n": {"$sum": 1},
                    "minutes": {"$sum": "$gpus.minutes"}}}])
    assert rows == [{"_id": "a100", "n": 2, "minutes": 3.0}]


async def test_in_on_a_unique_key_with_a_projection_then_replace_by_id(empty_db):
    collection = await _ledger()
    found = [d async for d in collection.find({"_id": {"$in": ["r1", "r4", "nope"]}},
                                              {"_id": 1, "user": 1})]
    assert sorted(found, key=lambda d: d["_id"]) == [{"_id": "r1", "user": "u1"},
                                                     {"_id": "r4", "user": "u0"}]
    async with empty_db.session(transaction=True) as session:
        await collection.replace_one({"_id": "r1"}, {"_id": "r1", "site": "farm", "user": "x",
                                                     "end_epoch": 1}, session=session)
    assert (await collection.find_one({"_id": "r1"}))["user"] == "x"


# -- site-scale reads and the generation counters (issue 18) ------------------------------


async def test_projection_without_id_returns_only_the_named_fields(empty_db):
    """``models.base.rows``: raw projected rows, absent fields simply missing."""
    collection = empty_db.database["projection_probe"]
    await collection.insert_many([{"_id": "a", "user": "u1", "roles": ["member"], "x": 1},
                                  {"_id": "b", "user": "u2", "x": 2}])
    found = await collection.find({}, {"user": 1, "roles": 1, "_id": 0}).to_list()
    assert sorted(found, key=lambda d: d["user"]) == [{"user": "u1", "roles": ["member"]},
                                                      {"user": "u2"}]
    one = await collection.find({"x": 2}, {"user": 1, "_id": 0}).to_list()
    assert one == [{"user": "u2"}]


async def test_inc_upsert_by_id_inside_a_transaction_counts_and_rolls_back(empty_db):
    """``operations.generations.bump``: ``$inc`` with ``upsert`` by ``_id`` creates the
    counter at 1, adds on later calls, and an aborted transaction leaves it alone."""
    collection = empty_db.database["generation_probe"]
    for _ in range(2):
        async with empty_db.session(transaction=True) as session:
            await collection.update_one({"_id": "site:farm"}, {"$inc": {"n": 1}},
                                        upsert=True, session=session)
            await collection.update_one({"_id": "all"}, {"$inc": {"n": 1}}, upsert=True,
                                        session=session)
    with pytest.raises(Boom):
        async with empty_db.session(transaction=True) as session:
            await collection.update_one({"_id": "all"}, {"$inc": {"n": 1}}, upsert=True,
                                        session=session)
            raise Boom
    found = {d["_id"]: d["n"] for d in await collection.find({}).to_list()}
    assert found == {"site:farm": 2, "all": 2}


async def test_group_on_a_string_and_a_list_field_with_push(empty_db):
    """``models.base.grouped``: a one-field ``$group`` pushing another field, keys
    normalised (the embedded store returns a list key as JSON text). Datetimes are read
    by a ``$ne: None`` filter on the site, never grouped on."""
    from cheeto_like.models.base import grouped, rows

    when = datetime(2030, 5, 6, 7, 8, 9, 123000, tzinfo=UTC)
    await UserSiteInfo.insert_many([
        UserSiteInfo(user="a", site="farm"),
        UserSiteInfo(user="b", site="farm", status="inactive", access=["slurm", "sudo"]),
        UserSiteInfo(user="c", site="farm", expires_at=when, access=["slurm", "sudo"]),
        UserSiteInfo(user="d", site="moon", status="inactive")])
    by_status = await grouped(UserSiteInfo, {"site": "farm"}, "status", "user")
    assert {k: sorted(v) for k, v in by_status.items()} == {None: ["a", "c"],
                                                            "inactive": ["b"]}
    by_access = await grouped(UserSiteInfo, {"site": "farm"}, "access", "user")
    assert {k: sorted(v) for k, v in by_access.items()} == {(): ["a"],
                                                            ("slurm", "sudo"): ["b", "c"]}
    expiring = await rows(UserSiteInfo, {"site": "farm", "expires_at": {"$ne": None}},
                          "user", "expires_at")
    assert expiring == [{"user": "c", "expires_at": when}]
    overriding = await rows(UserSiteInfo, {"site": "farm", "status": {"$ne": None}}, "user")
    assert overriding == [{"user": "b"}]
    edges = await grouped(UserSiteInfo, {"site": "farm"}, "site", "access")
    assert sorted(map(tuple, edges["farm"])) == [(), ("slurm", "sudo"), ("slurm", "sudo")]


async def test_group_pushing_two_fields_keeps_the_columns_aligned(empty_db):
    """``models.base.grouped_columns``: the desired Slurm state's rosters (user and roles
    of each membership, per group) in one ``$group``."""
    from cheeto_like.models.base import group_key, grouped_columns

    await GroupMembership.insert_many([
        GroupMembership(user=f"u{i}", group=f"g{i % 2}", site="farm",
                        roles=["member"] if i % 3 else ["sponsor"]) for i in range(6)])
    found = await grouped_columns(GroupMembership, {"site": "farm"}, "group", "user", "roles")
    rows = {g: sorted((u, group_key(r)) for u, r in zip(*cols, strict=True))
            for g, cols in found.items()}
    assert rows == {"g0": [("u0", ("sponsor",)), ("u2", ("member",)), ("u4", ("member",))],
                    "g1": [("u1", ("member",)), ("u3", ("sponsor",)), ("u5", ("member",))]}


async def test_max_update_by_id_keeps_the_larger_integer(empty_db):
    """API key last use (auth.apikeys.UsageRecorder): ``$max`` by ``_id`` writes only a
    newer stamp, and sets a field that was missing or null."""
    collection = empty_db.database["conformance_max"]
    await collection.insert_many([{"_id": "a", "last": None}, {"_id": "b"},
                                  {"_id": "c", "last": 100}])
    for key in ("a", "b", "c"):
        await collection.update_one({"_id": key}, {"$max": {"last": 50}})
    found = {d["_id"]: d.get("last") async for d in collection.find({})}
    assert found == {"a": 50, "b": 50, "c": 100}
    await collection.update_one({"_id": "c"}, {"$max": {"last": 150}})
    assert (await collection.find_one({"_id": "c"}))["last"] == 150


async def test_columns_push_every_field_with_null_for_none_in_one_group(empty_db):
    """``models.base.columns``: ``$group`` on a null key pushing several fields gives one
    aligned row per document (None where the document holds null), large ints intact."""
    from cheeto_like.models.base import columns

    await User.insert_many([user_doc("a", 3_333_333_006, access=["slurm"]),
                            user_doc("b", 7, status="active")])
    found = await columns(User, {}, "name", "uid", "status", "access", "expires_at")
    assert sorted(found, key=lambda r: r["name"]) == [
        {"name": "a", "uid": 3_333_333_006, "status": None, "access": ["slurm"],
         "expires_at": None},
        {"name": "b", "uid": 7, "status": "active", "access": [], "expires_at": None}]
    assert await columns(User, {"name": "nobody"}, "name") == []


async def test_grouped_reads_in_parts_limit_and_id_ranges(empty_db, monkeypatch):
    """``models.base.grouped_columns`` in parts (16 MiB replies, issue 24): ``$limit``
    before ``$group`` answers that many documents; ``_id`` ranges (``$gte``/``$lt`` on
    hex prefixes, beside a field equality) hold each uuid id exactly once; a read past
    the probe comes back whole."""
    from cheeto_like.models import base

    await UserSiteInfo.insert_many([UserSiteInfo(user=f"u{i}", site="farm") for i in range(40)])
    collection = UserSiteInfo.get_pymongo_collection()
    limited = await (await collection.aggregate([
        {"$match": {"site": "farm"}}, {"$limit": 7},
        {"$group": {"_id": None, "v0": {"$push": "$user"}}}])).to_list()
    assert len(limited[0]["v0"]) == 7
    seen: list[str] = []
    for i in range(5):
        lo, hi = base.ID_SPAN * i // 5, base.ID_SPAN * (i + 1) // 5
        part = await (await collection.aggregate([
            {"$match": base.in_id_range({"site": "farm"}, lo, hi)},
            {"$group": {"_id": None, "v0": {"$push": "$user"}}}])).to_list()
        seen.extend(part[0]["v0"] if part else [])
    assert sorted(seen) == sorted(f"u{i}" for i in range(40))
    monkeypatch.setattr(base, "PROBE_ROWS", 5)
    monkeypatch.setattr(base, "PART_BYTES", 100)
    found = await base.grouped(UserSiteInfo, {"site": "farm"}, "site", "user")
    assert sorted(found["farm"]) == sorted(f"u{i}" for i in range(40))


async def test_one_row_group_counts_and_takes_the_latest_datetime_of_a_dotted_path(empty_db):
    """``sync.ldap.mark.fingerprint``: ``$group`` on null with ``$sum: 1`` and ``$max`` of
    ``ldap.modified_at``/``updated_at`` answers one row; the max is opaque (the embedded
    store answers the stored text, MongoDB a datetime) but moves when a document is
    saved or stamped by ``$currentDate`` later, and stays put otherwise. A columns read of
    the dotted path (``ldap.synced.<site>`` with a '-' in the site) decodes datetimes."""
    from cheeto_like.models.base import columns

    async def one_row() -> tuple[Any, Any, Any]:
        pipeline = [{"$match": {}}, {"$group": {"_id": None, "n": {"$sum": 1},
                                                "m": {"$max": "$ldap.modified_at"},
                                                "u": {"$max": "$updated_at"}}}]
        rows = await (await User.get_pymongo_collection().aggregate(pipeline)).to_list()
        assert len(rows) == 1
        return rows[0]["n"], rows[0]["m"], rows[0]["u"]

    await User.insert_many([user_doc("a", 3), user_doc("b", 4)])
    first = await one_row()
    assert first[0] == 2 and first[1] is not None and first[2] is not None
    assert await one_row() == first
    await asyncio.sleep(0.01)
    await User.get_pymongo_collection().update_one(
        {"name": "a"}, {"$currentDate": {"ldap.modified_at": True,
                                         "ldap.synced.my-site": True}})
    second = await one_row()
    assert second[1] != first[1] and second[2] == first[2]
    await asyncio.sleep(0.01)
    user = await User.find_one({"name": "b"})
    assert user is not None
    user.shell = "/bin/zsh"
    await user.save()
    third = await one_row()
    assert third[1] != second[1] and third[2] != second[2]
    await User.get_pymongo_collection().delete_one({"name": "b"})
    assert (await one_row())[0] == 1
    found = await columns(User, {}, "name", "ldap.synced.my-site", "ldap.modified_at")
    assert isinstance(found[0]["ldap.synced.my-site"], datetime)
    assert isinstance(found[0]["ldap.modified_at"], datetime)


async def test_current_date_and_set_upserts_by_id_on_a_raw_collection(empty_db):
    """``sync.ldap.mark``: the site's mark document is created by a ``$currentDate``
    upsert (the store's clock, read back as a tz-aware datetime), then ``$set`` by ``_id``
    with ints, lists of strings and a dict of int lists (no datetimes: a ``$set``
    datetime comes back as a string on the embedded store)."""
    collection = empty_db.database["mark_probe"]
    await collection.update_one({"_id": "farm"}, {"$currentDate": {"clock": True}},
                                upsert=True)
    clock = (await collection.find_one({"_id": "farm"}))["clock"]
    assert isinstance(clock, datetime) and clock.tzinfo is not None
    fields = {"through_ms": 1_764_000_000_123, "pending": ["user:a"],
              "roster_users": ["a", "b"], "parts": 1,
              "fingerprint": {"users": [2, "x", None], "generations": ["all=3"]}}
    await collection.update_one({"_id": "farm"}, {"$set": fields}, upsert=True)
    await collection.update_one({"_id": "farm"}, {"$set": {"pending": []}}, upsert=True)
    found = await collection.find_one({"_id": "farm"})
    assert {k: found[k] for k in fields} == {**fields, "pending": []}
    assert found["clock"] == clock
    await collection.delete_many({})
    assert await collection.find_one({"_id": "farm"}) is None


async def test_bulk_write_of_set_upserts_by_id_creates_and_updates_in_one_command(empty_db):
    """``sync.runs.RunJournal.steps``: before each sacctmgr command one ``bulk_write``
    closes the previous step's document (an update) and starts the next (an insert), both
    ``$set`` upserts by ``_id``; the run's steps are then read and deleted by ``run``."""
    steps = SyncStep.get_pymongo_collection()

    def step(n: int, outcome: str, detail: str = "", run: str = "r1") -> UpdateOne:
        return UpdateOne({"_id": f"{run}:{n}"}, {"$set": {
            "run": run, "index": n, "outcome": outcome, "detail": detail}}, upsert=True)

    first = await steps.bulk_write([step(0, "started")], ordered=True)
    assert first.upserted_count == 1 and first.matched_count == 0
    both = await steps.bulk_write([step(0, "ok", "0.01s"), step(1, "started")], ordered=True)
    assert both.matched_count == 1 and both.modified_count == 1 and both.upserted_count == 1
    await steps.bulk_write([step(0, "started", run="r2")], ordered=True)
    found = {d["_id"]: d async for d in steps.find({"run": "r1"})}
    assert found == {"r1:0": {"_id": "r1:0", "run": "r1", "index": 0, "outcome": "ok",
                              "detail": "0.01s"},
                     "r1:1": {"_id": "r1:1", "run": "r1", "index": 1, "outcome": "started",
                              "detail": ""}}
    assert [s.index for s in await SyncStep.find({"run": "r1"}).to_list()] in ([0, 1], [1, 0])
    assert (await steps.delete_many({"run": "r1"})).deleted_count == 2
    assert [d["_id"] async for d in steps.find({})] == ["r2:0"]


async def test_lease_take_renew_and_fence_compare_integer_expiries_by_the_store_clock(empty_db):
    """``sync.lease``: the store's clock from ``hello`` (``localTime``); a takeover is a
    ``find_one_and_replace`` filtered on ``_id`` and an integer ``expires_ms`` ``$lt``
    that clock, a renewal one filtered on ``_id``, ``holder`` and ``expires_ms`` ``$gt``;
    the fence before each command an ``update_one`` with that filter and an ``$inc`` of
    one integer, whose ``matched_count`` says whether the lease is still the holder's.
    (``$expr``/``$$NOW`` and update pipelines are not in the embedded store's subset.)"""
    collection = empty_db.database["lease_probe"]
    hello = await empty_db.database.command("hello")
    now = int(hello["localTime"].replace(tzinfo=UTC).timestamp() * 1000)
    await collection.insert_one({"_id": "slurm:farm", "holder": "a", "expires_ms": now + 60_000})
    # live: no takeover; the holder's renewal and fence match
    assert await collection.find_one_and_replace(
        {"_id": "slurm:farm", "expires_ms": {"$lt": now}},
        {"_id": "slurm:farm", "holder": "b", "expires_ms": now + 60_000}) is None
    old = await collection.find_one_and_replace(
        {"_id": "slurm:farm", "holder": "a", "expires_ms": {"$gt": now}},
        {"_id": "slurm:farm", "holder": "a", "expires_ms": now + 90_000})
    assert old is not None and old["expires_ms"] == now + 60_000
    fenced = await collection.update_one(
        {"_id": "slurm:farm", "holder": "a", "expires_ms": {"$gt": now + 89_000}},
        {"$inc": {"fences": 1}})
    assert fenced.matched_count == 1
    for refused in ({"holder": "b", "expires_ms": {"$gt": now}},  # someone else's
                    {"holder": "a", "expires_ms": {"$gt": now + 90_000}}):  # too late
        assert (await collection.update_one({"_id": "slurm:farm", **refused},
                                            {"$inc": {"fences": 1}})).matched_count == 0
    assert (await collection.find_one({"_id": "slurm:farm"}))["fences"] == 1
    # expired by the store's clock: taken over by another holder, whole document
    taken = await collection.find_one_and_replace(
        {"_id": "slurm:farm", "expires_ms": {"$lt": now + 100_000}},
        {"_id": "slurm:farm", "holder": "b", "expires_ms": now + 160_000})
    assert taken is not None and taken["holder"] == "a"
    assert await collection.find_one({"_id": "slurm:farm"}) == {
        "_id": "slurm:farm", "holder": "b", "expires_ms": now + 160_000}


async def test_sign_in_failure_logs_push_with_slice_upsert_and_sweep(empty_db):
    """``auth.ratelimit``: the store's clock from ``hello`` (``localTime``), then one
    ``bulk_write`` of upserts by ``_id`` outside any transaction, each a ``$push`` of an
    integer with ``$each``/``$slice`` (a bounded log), ``$max`` of an integer expiry and
    ``$currentDate`` (the TTL field); ``$in`` on ``_id`` reads them, a range
    ``delete_many`` on the integer expiry sweeps, and a TTL index can be declared."""
    collection = empty_db.database["signin_probe"]
    hello = await empty_db.database.command("hello")
    assert isinstance(hello["localTime"], datetime)  # UTC (naive from a plain command)

    def failure(key: str, at: int, cap: int) -> UpdateOne:
        return UpdateOne({"_id": key}, {"$push": {"t": {"$each": [at], "$slice": -cap}},
                                        "$max": {"expires_ms": at + 1000},
                                        "$currentDate": {"last": True}}, upsert=True)

    for at in range(1, 6):
        await collection.bulk_write([failure("pair:a", at, 3), failure("user:a", at, 10)],
                                    ordered=False)
    await collection.bulk_write([failure("addr:x", 2, 3)], ordered=False)
    found = {d["_id"]: d async for d in collection.find({"_id": {"$in": ["pair:a",
                                                                          "user:a", "z"]}})}
    assert found["pair:a"]["t"] == [3, 4, 5] and found["user:a"]["t"] == [1, 2, 3, 4, 5]
    assert found["pair:a"]["expires_ms"] == 1005
    assert isinstance(found["pair:a"]["last"], datetime)
    await collection.create_index([("last", 1)], expireAfterSeconds=300, name="probe_ttl")
    await collection.create_index([("expires_ms", 1)], name="probe_expiry")
    # the embedded store names indexes itself: find them by their keys
    indexes = {tuple(i["key"]): i async for i in await collection.list_indexes()}
    assert indexes[("last",)]["expireAfterSeconds"] == 300
    assert ("expires_ms",) in indexes
    assert (await collection.delete_many({"expires_ms": {"$lt": 1004}})).deleted_count == 1
    assert sorted([d["_id"] async for d in collection.find({})]) == ["pair:a", "user:a"]
    assert (await collection.delete_one({"_id": "pair:a"})).deleted_count == 1
