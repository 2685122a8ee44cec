"""Every MongoDB behaviour the project relies on (DESIGN §5), pinned on whichever store the
suite runs against (the embedded nx-27017 server, or a real MongoDB via
CHEETO_TEST_MONGO_URI).

When code needs a new query or update shape, add it here first. Covered: unique and
compound unique indexes, the partial unique index on (type, shorthand), transaction commit,
abort and rollback on a duplicate key, the filters (equality, ``$in``, ``$ne: None``,
``$or``, range + sort + limit, array-element equality, dotted paths), the updates
(``$set``, ``$max``, ``$currentDate``, ``update_many`` with ``array_filters`` on top-level
and nested lists, a ``bulk_write`` of ``$set`` upserts by ``_id``), deletes and counts,
tz-aware UTC datetimes, the transaction lock
across processes, racing creates of the same name, and the usage ledger's aggregations
(``$match`` on an
integer range, ``$group`` on a field or a dotted field after ``$unwind``, ``$sum``).
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from beanie.operators import In
from pymongo import UpdateOne
from pymongo.errors import DuplicateKeyError

from cheeto_like.config import MongoConfig
from cheeto_like.errors import AlreadyExists
from cheeto_like.models import (
    Group,
    GroupMembership,
    History,
    Site,
    SyncStep,
    UsageRecord,
    User,
    UserSiteInfo,
)
from cheeto_like.operations.site import CreateSite
from cheeto_like.operations.user import CreateUser

from .factories import AUTHOR


def user_doc(name: str, uid: int, **extra: object) -> User:
    return User(name=name, email=f"{name}@example.org", uid=uid, gid=uid,
                fullname=f"{name} Tester", home_directory=f"/home/{name}", **extra)


class Boom(Exception):
    """Raised on purpose inside a transaction."""


# -- unique indexes ------------------------------------------------------------------------


async def test_unique_index_refuses_second_user_with_same_name(empty_db):
    await user_doc("alice", 1001).insert()
    with pytest.raises(DuplicateKeyError):
        await user_doc("alice", 1002).insert()
    assert await User.find(User.name == "alice").count() == 1


async def test_unique_index_refuses_second_user_with_same_uid(empty_db):
    await user_doc("alice", 1001).insert()
    with pytest.raises(DuplicateKeyError):
        await user_doc("bob", 1001).insert()


async def test_unique_indexes_on_group_name_and_gid(empty_db):
    await Group(name="lab", gid=5000).insert()
    with pytest.raises(DuplicateKeyError):
        await Group(name="lab", gid=5001).insert()
    with pytest.raises(DuplicateKeyError):
        await Group(name="lab2", gid=5000).insert()


async def test_unique_index_on_site_name(empty_db):
    await Site(name="farm", fqdn="farm.example.org").insert()
    with pytest.raises(DuplicateKeyError):
        await Site(name="farm", fqdn="other.example.org").insert()


async def test_compound_unique_index_refuses_only_the_full_key(empty_db):
    await GroupMembership(user="alice", group="lab", site="farm", roles=["member"]).insert()
    # any two of the three may repeat
    await GroupMembership(user="alice", group="lab", site="hive", roles=["member"]).insert()
    await GroupMembership(user="bob", group="lab", site="farm", roles=["member"]).insert()
    await GroupMembership(user="alice", group="lab2", site="farm", roles=["member"]).insert()
    with pytest.raises(DuplicateKeyError):
        await GroupMembership(user="alice", group="lab", site="farm", roles=["sponsor"]).insert()
    await UserSiteInfo(user="alice", site="farm").insert()
    with pytest.raises(DuplicateKeyError):
        await UserSiteInfo(user="alice", site="farm").insert()


async def test_partial_unique_index_lets_plain_groups_share_a_null_shorthand(empty_db):
    for i in range(3):
        await Group(name=f"plain{i}", gid=7000 + i).insert()
    raw = await Group.get_pymongo_collection().find_one({"name": "plain0"})
    assert "shorthand" in raw and raw["shorthand"] is None
    assert await Group.find(Group.type == "group").count() == 3


async def test_partial_unique_index_refuses_two_access_groups_with_one_shorthand(empty_db):
    await Group(name="sudo-users", gid=1, type="access", shorthand="sudo").insert()
    # the same shorthand under the other type is a different key
    await Group(name="sudo-status", gid=2, type="status", shorthand="sudo").insert()
    with pytest.raises(DuplicateKeyError):
        await Group(name="sudoers", gid=3, type="access", shorthand="sudo").insert()


# -- transactions --------------------------------------------------------------------------


async def test_transaction_commit_makes_writes_visible(empty_db):
    async with empty_db.session(transaction=True) as session:
        await Site(name="farm", fqdn="farm.example.org").insert(session=session)
        await user_doc("alice", 1001).insert(session=session)
        assert await Site.find_one(Site.name == "farm", session=session) is not None
    assert await Site.find_one(Site.name == "farm") is not None
    assert await User.find_one(User.name == "alice") is not None


async def test_transaction_abort_discards_every_write(empty_db):
    await Site(name="keep", fqdn="keep.example.org").insert()
    with pytest.raises(Boom):
        async with empty_db.session(transaction=True) as session:
            await Site(name="farm", fqdn="farm.example.org").insert(session=session)
            await user_doc("alice", 1001).insert(session=session)
            await Site.find(Site.name == "keep", session=session).delete(session=session)
            raise Boom
    assert await Site.find_one(Site.name == "farm") is None
    assert await User.find_one(User.name == "alice") is None
    assert await Site.find_one(Site.name == "keep") is not None


async def test_duplicate_key_inside_a_transaction_rolls_back_its_earlier_inserts(empty_db):
    await user_doc("taken", 1).insert()
    with pytest.raises(DuplicateKeyError):
        async with empty_db.session(transaction=True) as session:
            await Site(name="farm", fqdn="farm.example.org").insert(session=session)
            await user_doc("alice", 1001).insert(session=session)
            await user_doc("taken", 1002).insert(session=session)
    assert await Site.find_one(Site.name == "farm") is None
    assert await User.find_one(User.name == "alice") is None
    assert await User.find(User.name == "taken").count() == 1


# -- filters ---------------------------------------------------------------------------------


async def test_filters_equality_in_and_ne_none(empty_db):
    await user_doc("alice", 1, status="active").insert()
    await user_doc("bob", 2, status=None).insert()
    await user_doc("carol", 3, status="inactive").insert()
    found = await User.find(In(User.name, ["alice", "carol", "nobody"])).sort(+User.name).to_list()
    assert [u.name for u in found] == ["alice", "carol"]
    assert await User.find(In(User.name, [])).count() == 0
    with_status = await User.find({"status": {"$ne": None}}).sort(+User.name).to_list()
    assert [u.name for u in with_status] == ["alice", "carol"]
    combined = await User.find({"name": {"$in": ["alice", "bob"]},
                                "status": {"$ne": None}}).to_list()
    assert [u.name for u in combined] == ["alice"]


async def test_filter_or_over_name_fqdn_and_alias_array(empty_db):
    await Site(name="farm", fqdn="farm.example.org", aliases=["caesfarm"]).insert()
    await Site(name="hive", fqdn="hive.example.org").insert()

    async def lookup(value: str) -> str | None:
        site = await Site.find_one({"$or": [{"name": value}, {"fqdn": value},
                                            {"aliases": value}]})
        return site.name if site else None

    assert await lookup("farm") == "farm"
    assert await lookup("hive.example.org") == "hive"
    assert await lookup("caesfarm") == "farm"
    assert await lookup("nope") is None


async def test_range_sort_descending_and_limit_pick_the_top_of_a_band(empty_db):
    for uid in (10, 2_000_000_005, 2_000_000_007, 3_000_000_001, 4_000_000_000):
        await user_doc(f"u{uid}", uid).insert()
    top = await User.find(User.uid >= 2_000_000_000, User.uid < 3_000_000_000).sort(
        -User.uid).limit(1).to_list()
    assert [u.uid for u in top] == [2_000_000_007]
    empty = await User.find(User.uid >= 5, User.uid < 10).sort(-User.uid).limit(1).to_list()
    assert empty == []


async def test_in_on_an_indexed_array_field_matches_any_element(empty_db):
    """Array fields are matched with ``$in: [value]`` (``In(field, [value])``), alone or
    next to other conditions. Plain equality is not portable: whenever the embedded
    store's planner uses the index on the array field, it matches nothing."""
    await GroupMembership(user="a", group="lab", site="farm", roles=["member", "sponsor"]).insert()
    await GroupMembership(user="b", group="lab", site="farm", roles=["sponsor"]).insert()
    await GroupMembership(user="c", group="lab", site="farm", roles=["member"]).insert()
    await GroupMembership(user="a", group="lab2", site="hive", roles=["member"]).insert()
    members = await GroupMembership.find(GroupMembership.group == "lab",
                                         GroupMembership.site == "farm",
                                         In(GroupMembership.roles, ["member"])).to_list()
    assert sorted(m.user for m in members) == ["a", "c"]
    mine = await GroupMembership.find(GroupMembership.user == "a",
                                      In(GroupMembership.roles, ["member"])).to_list()
    assert sorted(m.group for m in mine) == ["lab", "lab2"]
    anywhere = await GroupMembership.find(In(GroupMembership.roles, ["sponsor"])).to_list()
    assert sorted(m.user for m in anywhere) == ["a", "b"]

    await user_doc("x", 1, access=["login-ssh", "slurm"]).insert()
    await user_doc("y", 2, access=["slurm"]).insert()
    await user_doc("z", 3).insert()
    assert [u.name for u in await User.find({"access": {"$in": ["login-ssh"]}}).to_list()] == ["x"]
    both = await User.find({"access": {"$in": ["slurm"]}}).sort(+User.name).to_list()
    assert [u.name for u in both] == ["x", "y"]
    anded = await User.find({"$and": [{"type": "user"}, {"access": {"$in": ["slurm"]}}]}).to_list()
    assert sorted(u.name for u in anded) == ["x", "y"]
    ored = await User.find({"$or": [{"name": "z"}, {"access": {"$in": ["login-ssh"]}}]}).to_list()
    assert sorted(u.name for u in ored) == ["x", "z"]


async def test_equality_on_a_nested_array_by_dotted_path(empty_db):
    site = Site(name="farm", fqdn="farm.example.org")
    site.group.sticky = ["lab", "all"]
    await site.insert()
    await Site(name="hive", fqdn="hive.example.org").insert()
    assert [s.name for s in await Site.find({"group.sticky": "all"}).to_list()] == ["farm"]
    assert await Site.find({"group.sticky": "none"}).count() == 0


async def test_find_with_several_beanie_conditions_is_an_and(empty_db):
    await UserSiteInfo(user="alice", site="farm").insert()
    await UserSiteInfo(user="alice", site="hive").insert()
    await UserSiteInfo(user="bob", site="farm").insert()
    found = await UserSiteInfo.find(UserSiteInfo.user == "alice",
                                    UserSiteInfo.site == "farm").to_list()
    assert [(u.user, u.site) for u in found] == [("alice", "farm")]


# -- updates ---------------------------------------------------------------------------------


async def test_set_update_on_a_query_and_modified_count(empty_db):
    await UserSiteInfo(user="alice", site="farm", status="inactive").insert()
    await UserSiteInfo(user="alice", site="hive", status=None).insert()
    await UserSiteInfo(user="bob", site="farm", status="active").insert()
    result = await UserSiteInfo.find({"user": {"$in": ["alice"]},
                                      "status": {"$ne": None}}).update({"$set": {"status": None}})
    assert result.modified_count == 1
    rows = {(u.user, u.site): u.status for u in await UserSiteInfo.find_all().to_list()}
    assert rows == {("alice", "farm"): None, ("alice", "hive"): None, ("bob", "farm"): "active"}


async def test_current_date_sets_a_tz_aware_datetime_at_a_dotted_path(empty_db):
    """``mark_ldap_dirty`` relies on this; ``$set`` of a datetime at a path is not portable
    (the embedded store stores it as a string)."""
    user = user_doc("alice", 1)
    await user.insert()
    before = (await User.find_one(User.name == "alice")).ldap.modified_at
    await asyncio.sleep(0.01)
    await User.find(In(User.name, ["alice"])).update({"$currentDate": {"ldap.modified_at": True}})
    raw = await User.get_pymongo_collection().find_one({"name": "alice"})
    assert isinstance(raw["ldap"]["modified_at"], datetime)
    assert raw["ldap"]["modified_at"].tzinfo is not None
    assert raw["ldap"]["fingerprint"] == user.ldap.fingerprint  # siblings untouched
    assert (await User.find_one(User.name == "alice")).ldap.modified_at > before


async def test_array_filters_rewrite_the_matching_element_of_an_indexed_list(empty_db):
    """The rename cascade's list update (coordinators and target_groups are indexed)."""
    from cheeto_like.models import SlurmAccount

    coll = SlurmAccount.get_pymongo_collection()
    await SlurmAccount(group="lab", site="farm", coordinators=["a", "b"]).insert()
    await SlurmAccount(group="lab", site="hive", coordinators=["b"]).insert()
    result = await coll.update_many({"coordinators": {"$in": ["a"]}},
                                    {"$set": {"coordinators.$[ref]": "z"}},
                                    array_filters=[{"ref": "a"}])
    assert result.modified_count == 1
    assert (await coll.find_one({"site": "farm"}))["coordinators"] == ["z", "b"]
    assert (await coll.find_one({"site": "hive"}))["coordinators"] == ["b"]


async def test_array_filters_rewrite_repeated_elements(empty_db):
    coll = empty_db.database["conformance_probe"]
    await coll.delete_many({})
    await coll.insert_one({"_id": "x", "refs": ["a", "b", "a"]})
    await coll.update_many({"refs": {"$in": ["a"]}}, {"$set": {"refs.$[ref]": "z"}},
                           array_filters=[{"ref": "a"}])
    assert (await coll.find_one({"_id": "x"}))["refs"] == ["z", "b", "z"]
    await coll.drop()


async def test_array_filters_on_a_nested_dotted_list(empty_db):
    coll = Site.get_pymongo_collection()
    farm = Site(name="farm", fqdn="farm.example.org")
    farm.group.sticky = ["old", "keep"]
    await farm.insert()
    hive = Site(name="hive", fqdn="hive.example.org")
    hive.group.sticky = ["keep"]
    await hive.insert()
    result = await coll.update_many({"group.sticky": {"$in": ["old"]}},
                                    {"$set": {"group.sticky.$[ref]": "new"}},
                                    array_filters=[{"ref": "old"}])
    assert result.modified_count == 1
    assert (await coll.find_one({"name": "farm"}))["group"]["sticky"] == ["new", "keep"]
    assert (await coll.find_one({"name": "hive"}))["group"]["sticky"] == ["keep"]
    # the surrounding sub-document keeps its other fields
    assert (await Site.find_one(Site.name == "farm")).slurm.sticky == []


async def test_set_on_a_nested_scalar_field(empty_db):
    coll = Site.get_pymongo_collection()
    site = Site(name="farm", fqdn="farm.example.org")
    site.slurm.sticky = ["old"]
    site.slurm.default_account = "old"
    await site.insert()
    await coll.update_many({"slurm.sticky": {"$in": ["old"]}},
                           {"$set": {"slurm.sticky.$[ref]": "new"}},
                           array_filters=[{"ref": "old"}])
    result = await coll.update_many({"slurm.default_account": "old"},
                                    {"$set": {"slurm.default_account": "new"}})
    assert result.modified_count == 1
    slurm = (await Site.find_one(Site.name == "farm")).slurm
    assert (slurm.sticky, slurm.default_account) == (["new"], "new")


async def test_set_of_a_whole_list_of_subdocuments_with_a_dotted_scalar(empty_db):
    """What a sync's write-ahead log does: one ``$set`` per step of the whole ``items``
    list (and a dotted counter). Not portable, so not used: ``$push`` of a sub-document
    (the embedded store stores it as a JSON string) and ``items.N.field`` paths (it
    ignores them)."""
    from cheeto_like.models import SyncRun

    coll = SyncRun.get_pymongo_collection()
    await coll.insert_one({"_id": "r1", "target": "slurm", "site": "farm", "items": [],
                           "counts": {"processes": 3}})
    items = [{"command": c, "outcome": "planned"} for c in "abc"]
    items[0]["outcome"] = "started"
    await coll.update_one({"_id": "r1"}, {"$set": {"items": items, "counts.removed": 0}})
    items[0] |= {"outcome": "ok", "detail": "0.1s"}
    items[1]["outcome"] = "started"
    await coll.update_one({"_id": "r1"}, {"$set": {"items": items, "counts.removed": 2}})
    doc = await coll.find_one({"_id": "r1"})
    assert [(i["command"], i["outcome"]) for i in doc["items"]] == [
        ("a", "ok"), ("b", "started"), ("c", "planned")]
    assert doc["items"][0]["detail"] == "0.1s"
    assert doc["counts"] == {"processes": 3, "removed": 2}


async def test_integer_range_filter_after_replace_and_find_one_and_replace(empty_db):
    """A lease takeover: ``find_one_and_replace`` guarded by ``expires_ms < now`` on a
    document another client replaced. (An expiry compared as a datetime did not match
    after a replace on the embedded store, so leases compare epoch milliseconds.)"""
    from cheeto_like.models import SyncLease

    coll = SyncLease.get_pymongo_collection()
    await coll.insert_one({"_id": "k", "holder": "a", "expires_ms": 1000})
    await coll.replace_one({"_id": "k"}, {"_id": "k", "holder": "b", "expires_ms": 2000})
    assert await coll.find_one({"_id": "k", "expires_ms": {"$lt": 1500}}) is None
    taken = await coll.find_one_and_replace({"_id": "k", "expires_ms": {"$lt": 2500}},
                                            {"_id": "k", "holder": "c", "expires_ms": 3000})
    assert taken["holder"] == "b"
    assert await coll.find_one_and_replace({"_id": "k", "expires_ms": {"$lt": 2500}},
                                           {"_id": "k", "holder": "d", "expires_ms": 4000}) is None
    assert (await coll.find_one({"_id": "k", "holder": "c"}))["expires_ms"] == 3000


async def test_beanie_save_replaces_the_document_keeping_datetimes(empty_db):
    when = datetime(2031, 5, 6, 7, 8, 9, 123000, tzinfo=UTC)
    await user_doc("alice", 1, expires_at=when).insert()
    user = await User.find_one(User.name == "alice")
    user.comments.append("hello")
    await user.save()
    raw = await User.get_pymongo_collection().find_one({"name": "alice"})
    assert raw["comments"] == ["hello"]
    assert raw["expires_at"] == when
    assert isinstance(raw["updated_at"], datetime)


async def test_delete_many_and_count(empty_db):
    for site in ("farm", "farm", "hive"):
        await GroupMembership(user=f"u{await GroupMembership.count()}", group="lab", site=site,
                              roles=["member"]).insert()
    assert await GroupMembership.find({"site": "farm"}).count() == 2
    result = await GroupMembership.find({"site": "farm"}).delete()
    assert result.deleted_count == 2
    assert await GroupMembership.count() == 1
    assert await GroupMembership.find({"site": "nowhere"}).count() == 0


# -- datetimes -------------------------------------------------------------------------------


async def test_datetimes_round_trip_as_tz_aware_utc_with_millisecond_precision(empty_db):
    when = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    await user_doc("alice", 1, expires_at=when).insert()
    back = (await User.find_one(User.name == "alice")).expires_at
    assert back.tzinfo is not None and back.utcoffset() == timedelta(0)
    assert back == when.replace(microsecond=678000)


async def test_datetime_from_another_zone_is_stored_as_the_same_instant(empty_db):
    from datetime import timezone
    pacific = timezone(timedelta(hours=-8))
    when = datetime(2030, 1, 2, 3, 0, tzinfo=pacific)
    await History(op="probe", timestamp=when).insert()
    back = (await History.find_one(History.op == "probe")).timestamp
    assert back == when and back.utcoffset() == timedelta(0)
    assert back.hour == 11


async def test_datetime_range_filter_is_inclusive_with_gte_and_lte(empty_db):
    base = datetime(2030, 1, 1, tzinfo=UTC)
    for i in range(5):
        await History(op=f"op{i}", timestamp=base + timedelta(minutes=i)).insert()
    rows = await History.find({"timestamp": {"$gte": base + timedelta(minutes=1),
                                             "$lte": base + timedelta(minutes=3)}}).sort(
        -History.timestamp).to_list()
    assert [r.op for r in rows] == ["op3", "op2", "op1"]


# -- concurrency -----------------------------------------------------------------------------

WORKER = textwrap.dedent("""
    import asyncio, json, sys

    from cheeto_like.config import MongoConfig
    from cheeto_like.models import Site
    from cheeto_like.operations.site import CreateSite
    from cheeto_like.store import connect


    class Boom(Exception):
        pass


    async def main(config_json, database, tag, rounds):
        store = await connect(MongoConfig.model_validate_json(config_json), database=database,
                              autostart=False, create_indexes=False)
        print("ready", flush=True)
        aborted = 0
        try:
            for i in range(rounds):
                await CreateSite.run(store, tag, name=f"{tag}-ok-{i}",
                                     fqdn=f"{tag}-ok-{i}.example.org")
                try:
                    async with store.session(transaction=True) as session:
                        await Site(name=f"{tag}-bad-{i}",
                                   fqdn=f"{tag}-bad-{i}.example.org").insert(session=session)
                        await asyncio.sleep(0.002)
                        raise Boom
                except Boom:
                    aborted += 1
        finally:
            await store.close()
        print(json.dumps({"tag": tag, "aborted": aborted}))


    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
""")


async def _run_rounds(store, tag: str, rounds: int) -> None:
    for i in range(rounds):
        await CreateSite.run(store, tag, name=f"{tag}-ok-{i}", fqdn=f"{tag}-ok-{i}.example.org")
        with pytest.raises(Boom):
            async with store.session(transaction=True) as session:
                await Site(name=f"{tag}-bad-{i}",
                           fqdn=f"{tag}-bad-{i}.example.org").insert(session=session)
                await asyncio.sleep(0.002)
                raise Boom


async def test_concurrent_processes_commits_survive_and_aborts_vanish(
        empty_db, mongo_config: MongoConfig, tmp_path: Path):
    """Two OS processes and this one run committing and aborting transactions at once.

    On the embedded store this exercises the cross-process transaction lock (without it,
    an abort can undo another client's commit); on MongoDB, transaction isolation.
    """
    rounds = 15
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    database = empty_db.database.name
    procs = [await asyncio.create_subprocess_exec(
        sys.executable, str(script), mongo_config.model_dump_json(), database, tag, str(rounds),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        for tag in ("pa", "pb")]
    for proc in procs:  # both are connected and about to start: run alongside them
        assert await asyncio.wait_for(proc.stdout.readline(), 30) == b"ready\n"
    await _run_rounds(empty_db, "main", rounds)
    outputs = [await proc.communicate() for proc in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err.decode()
        assert json.loads(out)["aborted"] == rounds

    names = {s.name for s in await Site.find_all().to_list()}
    expected = {f"{tag}-ok-{i}" for tag in ("pa", "pb", "main") for i in range(rounds)}
    assert names == expected
    rows = await History.find(History.op == "create_site").to_list()
    assert sorted(r.changes["site"] for r in rows) == sorted(expected)
    assert {r.author for r in rows} == {"pa", "pb", "main"}


async def test_embedded_store_transactions_hold_the_cross_process_file_lock(empty_db):
    """The lock is what serialises transactions on the embedded store; MongoDB needs none."""
    if not empty_db.is_embedded:
        assert empty_db.lock is None
        return

    def try_flock() -> bool:
        fd = os.open(empty_db.lock.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        finally:
            os.close(fd)

    async with empty_db.session(transaction=True):
        assert not try_flock()  # what another process would see
    assert try_flock()


async def test_racing_creates_of_one_user_name_yield_one_winner_and_one_history_row(db):
    results = await asyncio.gather(
        CreateUser.run(db, AUTHOR, name="alice", uid=5001, email="a@example.org",
                       fullname="Alice One"),
        CreateUser.run(db, AUTHOR, name="alice", uid=5002, email="b@example.org",
                       fullname="Alice Two"),
        return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert len(errors) == 1 and isinstance(errors[0], AlreadyExists), results
    assert await User.find(User.name == "alice").count() == 1
    assert await Group.find(Group.name == "alice").count() == 1
    assert await History.find(History.op == "create_user").count() == 1


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
