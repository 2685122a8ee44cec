"""At most one run per (target, site): the lease in the store."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from cheeto_like.errors import Busy
from cheeto_like.models import SyncLease
from cheeto_like.models.fields import utcnow
from cheeto_like.sync.lease import LeaseLost, lease


async def test_second_holder_is_refused_until_release(db):
    async with lease(db, "slurm", "farm"):
        with pytest.raises(Busy, match="another slurm sync for farm is running"):
            async with lease(db, "slurm", "farm"):
                pass
        async with lease(db, "slurm", "hive"):  # other sites are independent
            pass
    async with lease(db, "slurm", "farm"):  # released: free again
        pass
    assert await SyncLease.count() == 0


async def test_an_expired_lease_is_taken_over(db):
    stale = SyncLease(id="ldap:farm", holder="crashed-worker", expires_at=utcnow() - timedelta(1))
    await stale.insert()
    async with lease(db, "ldap", "farm") as mine:
        assert mine.holder != "crashed-worker"
        current = await SyncLease.get("ldap:farm")
        assert current.holder == mine.holder and current.expires_at > utcnow()
    assert await SyncLease.get("ldap:farm") is None


async def test_release_only_removes_our_own_lease(db):
    async with lease(db, "slurm", "farm", ttl=timedelta(seconds=-1)):
        # someone took over our (already expired) lease meanwhile
        async with lease(db, "slurm", "farm"):
            pass
    assert await SyncLease.count() == 0


async def test_a_held_lease_is_busy_exit_1_and_names_the_holder(db):
    async with lease(db, "slurm", "farm") as held:
        with pytest.raises(Busy) as busy:
            async with lease(db, "slurm", "farm"):
                pass
    assert busy.value.exit_code == 1
    assert held.holder in busy.value.message and "expires within 60 s" in busy.value.message


async def test_the_heartbeat_renews_a_short_lease_while_the_holder_lives(db):
    ttl = timedelta(seconds=1.5)
    async with lease(db, "slurm", "farm", ttl=ttl) as held:
        first = (await SyncLease.get("slurm:farm")).expires_at
        await asyncio.sleep(2.5)  # longer than the TTL: only renewals keep it ours
        current = await SyncLease.get("slurm:farm")
        assert held.renewals >= 2 and held.lost is None
        assert current.holder == held.holder and current.expires_at > first
        with pytest.raises(Busy):
            async with lease(db, "slurm", "farm", ttl=ttl):
                pass
    assert await SyncLease.count() == 0


async def test_a_holder_whose_lease_was_taken_stops_before_its_next_write(db):
    ttl = timedelta(seconds=1.5)
    async with lease(db, "slurm", "farm", ttl=ttl) as held:
        held.check()
        # someone took over (as after a stall past the expiry)
        await SyncLease.get_pymongo_collection().replace_one(
            {"_id": "slurm:farm"}, {"_id": "slurm:farm", "holder": "other:1:x",
                                    "acquired_at": utcnow(), "expires_at": utcnow() + ttl})
        for _ in range(30):
            if held.lost:
                break
            await asyncio.sleep(0.1)
        assert held.lost and "taken over by other:1:x" in held.lost
        with pytest.raises(LeaseLost, match="taken over"):
            held.check()
    # leaving did not remove the other holder's lease
    assert (await SyncLease.get("slurm:farm")).holder == "other:1:x"
