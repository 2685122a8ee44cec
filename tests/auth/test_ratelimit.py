"""The sign-in limiter on the store: per (user, address), per name at addresses that
guessed, per address as a ceiling; a success clears only its pair; windows end on the
store's clock; a spray of junk names unlocks nobody; rows are swept after their
window; two connections (as two API processes) add up their counts."""

from __future__ import annotations

from typing import Any

import pytest

from cheeto_like.auth.ratelimit import COLLECTION, LoginLimiter, Policy
from cheeto_like.store import Store, connect

POLICY = Policy(max_failures=3, user_max_failures=6, address_max_failures=10, window=60)


@pytest.fixture
async def limiter(empty_db: Store) -> LoginLimiter:
    await empty_db.database[COLLECTION].delete_many({})
    return LoginLimiter(POLICY)


async def fail(limiter: LoginLimiter, db: Any, user: str, address: str, times: int = 1) -> None:
    for _ in range(times):
        await limiter.failed(db, user, address)


async def test_a_pair_is_limited_after_max_failures_and_nobody_else(limiter, empty_db):  # type: ignore[no-untyped-def]
    db = empty_db.database
    await fail(limiter, db, "alice", "10.0.0.1", 2)
    assert await limiter.retry_after(db, "alice", "10.0.0.1") == 0
    await fail(limiter, db, "Alice", "10.0.0.1")  # names are counted lower-cased
    wait = await limiter.retry_after(db, "alice", "10.0.0.1")
    assert 0 < wait <= 60
    assert await limiter.retry_after(db, "alice", "10.0.0.2") == 0  # another address
    assert await limiter.retry_after(db, "bob", "10.0.0.1") == 0  # a colleague there


async def test_the_name_is_limited_only_where_it_was_guessed(limiter, empty_db):  # type: ignore[no-untyped-def]
    """Six failures for admin from six addresses: each of them is refused for admin,
    and admin at an address with no failures is not (nobody can lock them out)."""
    db = empty_db.database
    for n in range(6):
        await fail(limiter, db, "admin", f"10.0.1.{n}")
    for n in range(6):
        assert await limiter.retry_after(db, "admin", f"10.0.1.{n}") > 0
    assert await limiter.retry_after(db, "admin", "192.168.7.7") == 0
    assert await limiter.retry_after(db, "carol", "10.0.1.0") == 0


async def test_the_address_ceiling_stops_a_spray_of_names(limiter, empty_db):  # type: ignore[no-untyped-def]
    db = empty_db.database
    for n in range(9):
        await fail(limiter, db, f"junk{n}", "10.0.2.1")
    assert await limiter.retry_after(db, "carol", "10.0.2.1") == 0
    await fail(limiter, db, "junk9", "10.0.2.1")
    assert await limiter.retry_after(db, "carol", "10.0.2.1") > 0
    assert await limiter.retry_after(db, "carol", "10.0.2.2") == 0


async def test_success_clears_the_pair_not_the_name_or_address(limiter, empty_db):  # type: ignore[no-untyped-def]
    db = empty_db.database
    await fail(limiter, db, "alice", "a", 3)
    assert await limiter.retry_after(db, "alice", "a") > 0
    await limiter.succeeded(db, "alice", "a")
    assert await limiter.retry_after(db, "alice", "a") == 0
    ids = {d["_id"]: len(d["t"]) async for d in db[COLLECTION].find({})}
    assert ids == {"u:alice": 3, "a:a": 3}


async def test_failures_age_out_on_the_store_clock(limiter, empty_db):  # type: ignore[no-untyped-def]
    """A lock lasts until the max-failures-th latest failure is a window old, by the
    store's clock; the log keeps only as many times as the limit needs."""
    db = empty_db.database
    await fail(limiter, db, "dave", "10.0.3.1", 5)
    doc = await db[COLLECTION].find_one({"_id": "p:10.0.3.1|dave"})
    assert len(doc["t"]) == 3  # sliced to the pair's limit
    now = await limiter.now_ms(db)
    assert abs(now - doc["t"][-1]) < 60_000
    # the oldest of the three counted failures a moment short of a window ago: locked
    # for that moment more; once it is past the window: free
    aged = [now - 59_000, now - 1000, now - 500]
    await db[COLLECTION].update_one({"_id": "p:10.0.3.1|dave"}, {"$set": {"t": aged}})
    assert 0 < await limiter.retry_after(db, "dave", "10.0.3.1") <= 1.5
    aged = [now - 61_000, now - 1000, now - 500]
    await db[COLLECTION].update_one({"_id": "p:10.0.3.1|dave"}, {"$set": {"t": aged}})
    assert await limiter.retry_after(db, "dave", "10.0.3.1") == 0


async def test_a_spray_of_junk_names_leaves_a_locked_user_locked(limiter, empty_db):  # type: ignore[no-untyped-def]
    """The old in-memory table forgot everything when it filled; the limiter now keeps
    no table (its rows are in the store), so 300 junk names from 30 addresses (twice as
    many keys as a table of 300 would hold) unlock nobody, and the sweep that runs
    meanwhile leaves every live row alone."""
    db = empty_db.database
    await fail(limiter, db, "dave", "10.0.4.1", 3)
    limiter._swept = -1e9  # the sweep runs during the spray
    for n in range(300):
        await limiter.failed(db, f"junk-{n}", f"172.16.{n % 30}.1")
    assert await limiter.retry_after(db, "dave", "10.0.4.1") > 0
    assert await db[COLLECTION].count_documents({}) == 3 + 300 * 2 + 30


async def test_rows_are_swept_after_their_window(limiter, empty_db):  # type: ignore[no-untyped-def]
    db = empty_db.database
    await fail(limiter, db, "old", "10.0.5.1")
    await fail(limiter, db, "new", "10.0.5.2")
    now = await limiter.now_ms(db)
    await db[COLLECTION].update_many({"_id": {"$in": ["p:10.0.5.1|old", "u:old", "a:10.0.5.1"]}},
                                     {"$set": {"expires_ms": now - 1}})
    limiter._swept = -1e9
    await fail(limiter, db, "new", "10.0.5.2")
    left = sorted([d["_id"] async for d in db[COLLECTION].find({})])
    assert left == ["a:10.0.5.2", "p:10.0.5.2|new", "u:new"]
    indexes = {tuple(i["key"]): i async for i in await db[COLLECTION].list_indexes()}
    assert ("expires_ms",) in indexes and indexes[("last",)]["expireAfterSeconds"] > 0


async def test_two_connections_add_up_like_two_api_processes(limiter, empty_db, mongo_config,  # type: ignore[no-untyped-def]
                                                             request):
    from tests.conftest import module_database

    other = await connect(mongo_config, database=module_database(request), autostart=False,
                          create_indexes=False)
    try:
        second = LoginLimiter(POLICY)
        await limiter.failed(empty_db.database, "erin", "10.0.6.1")
        await second.failed(other.database, "erin", "10.0.6.1")
        assert await limiter.retry_after(empty_db.database, "erin", "10.0.6.1") == 0
        await second.failed(other.database, "erin", "10.0.6.1")
        assert await limiter.retry_after(empty_db.database, "erin", "10.0.6.1") > 0
        assert await second.retry_after(other.database, "erin", "10.0.6.1") > 0
    finally:
        await empty_db.bind(create_indexes=False)  # connect bound the models to `other`
        await other.close()


def test_policy_keeps_the_name_and_address_limits_at_least_the_pairs() -> None:
    from cheeto_like.config import ApiConfig

    policy = Policy.from_config(ApiConfig(login_max_failures=50))
    assert (policy.max_failures, policy.user_max_failures,
            policy.address_max_failures) == (50, 50, 100)
    assert Policy.from_config(ApiConfig()) == Policy(5, 20, 100, 300.0)
