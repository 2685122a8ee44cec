"""Every MongoDB behaviour the project relies on (DESIGN §5), pinned on whichever store the
suite runs against (the embedded nx-27017 server, or a real MongoDB via
CHEETO_TEST_MONGO_URI).

When code needs a new query or update shape, add it here first (or to the module of its
area: ``_concurrency``, ``_aggregation`` for grouped/site-scale reads and raw upserts,
``_limits`` for retention, MongoDB's limits, fail points and renames). Covered: unique and
compound unique indexes, the partial unique index on (type, shorthand), transaction commit,
abort and rollback on a duplicate key, the filters (equality, ``$in``, ``$ne: None``,
``$or``, range + sort + limit, array-element equality, dotted paths), the updates
(``$set``, ``$max``, ``$currentDate``, ``update_many`` with ``array_filters`` on top-level
and nested lists, a ``bulk_write`` of ``$set`` upserts by ``_id``), deletes and counts,
tz-aware UTC datetimes. In the sibling modules: the transaction lock across processes and
racing creates of the same name (``_concurrency``), the usage ledger's aggregations
(``$match`` on an integer range, ``$group`` on a field or a dotted field after
``$unwind``, ``$sum``) and the site-scale reads (``_aggregation``), retention, MongoDB's
limits and renames (``_limits``).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from beanie.operators import In
from pymongo.errors import DuplicateKeyError

from cheeto_like.models import (
    Group,
    GroupMembership,
    History,
    Site,
    User,
    UserSiteInfo,
)

from .conformance_helpers import Boom, user_doc

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


