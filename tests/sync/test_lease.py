"""At most one run per (target, site): the lease in the store."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cheeto_like.errors import Conflict
from cheeto_like.models import SyncLease
from cheeto_like.models.fields import utcnow
from cheeto_like.sync.lease import lease


async def test_second_holder_is_refused_until_release(db):
    async with lease(db, "slurm", "farm"):
        with pytest.raises(Conflict, match="another slurm sync for farm is running"):
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
