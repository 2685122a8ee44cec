"""At most one run per (target, site): the lease in the store."""

from __future__ import annotations

import ast
import asyncio
from datetime import timedelta
from pathlib import Path

import pytest

from cheeto_like.errors import Busy
from cheeto_like.models import SyncLease, SyncRun, SyncStep
from cheeto_like.models.fields import utcnow
from cheeto_like.models.sync import SyncItem
from cheeto_like.sync import lease as lease_module
from cheeto_like.sync.lease import LeaseLost, lease
from cheeto_like.sync.runs import RunJournal


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


# -- fencing (issue 25) -----------------------------------------------------------------


async def _journal(db, held) -> tuple[RunJournal, SyncRun]:
    run = SyncRun(target="slurm", site="farm", apply=True, holder=held.holder, lease=held.key)
    await run.insert()
    journal = RunJournal(db, run, held=held)
    await journal.write([SyncItem(batch="add", command=f"add account a{n}") for n in range(3)])
    return journal, run


async def test_a_step_fences_the_lease_in_the_store_and_refuses_once_it_is_not_ours(db):
    """A lease taken over behind the holder's back (its own idea of the expiry is still
    fine): the next journal step sees it in the store, writes nothing, ``LeaseLost``."""
    async with lease(db, "slurm", "farm") as held:
        journal, run = await _journal(db, held)
        journal.items[0].outcome = "started"
        await journal.steps([0])
        assert held.fences == 1
        assert (await SyncLease.get_pymongo_collection().find_one({"_id": "slurm:farm"}))[
            "fences"] == 1
        await SyncLease.get_pymongo_collection().replace_one(
            {"_id": "slurm:farm"}, {"_id": "slurm:farm", "holder": "other:1:x:",
                                    "acquired_at": utcnow(), "expires_at": utcnow(),
                                    "expires_ms": held.expires_ms})
        journal.items[0].outcome, journal.items[1].outcome = "ok", "started"
        with pytest.raises(LeaseLost, match="taken over by other:1:x"):
            await journal.steps([0, 1])
        assert held.lost and "taken over" in held.lost
        steps = [(s.index, s.outcome) for s in await SyncStep.find({"run": run.id}).to_list()]
        assert steps == [(0, "started")]  # the refused step wrote nothing
        await journal.steps([0], fence=False)  # what ran may still be recorded
        assert (await SyncStep.get(f"{run.id}:0")).outcome == "ok"


async def test_a_holder_that_cannot_renew_stops_before_its_next_command(db, mongo_config):
    """Renewals fail (the store refuses ``findAndModify``), the holder's loop is free:
    once, by the store's clock, too little of the lease is left, the next step refuses,
    before any other process could take the lease."""
    if mongo_config.uri:  # a fail point on a shared replica set would hit everyone
        pytest.fail("needs the embedded store's failCommand (enableTestCommands)")
    ttl = timedelta(seconds=1.5)
    async with lease(db, "slurm", "farm", ttl=ttl) as held:
        journal, _ = await _journal(db, held)
        await db.client.admin.command(
            "configureFailPoint", "failCommand", mode="alwaysOn",
            data={"failCommands": ["findAndModify"], "errorCode": 91})
        try:
            expiry = held.expires_ms
            journal.items[0].outcome = "started"
            refused = None
            for _ in range(100):  # stepping as an apply does, command after command
                try:
                    await journal.steps([0])
                except LeaseLost as exc:
                    refused = exc
                    break
                await asyncio.sleep(0.05)
            assert refused is not None and "not renewed in time" in refused.message
            assert held.renewals == 0 and held.expires_ms == expiry
            # refused while the lease was still its own, by the store's clock
            doc = await SyncLease.get_pymongo_collection().find_one({"_id": "slurm:farm"})
            assert doc["holder"] == held.holder and doc["expires_ms"] == expiry
        finally:
            await db.client.admin.command("configureFailPoint", "failCommand", mode="off")
        with pytest.raises(LeaseLost):
            held.check()


async def test_lease_times_come_from_the_store_never_this_hosts_wall_clock(db):
    """The lease module reads no wall clock (the taker's, holder's and closer's times are
    the store's ``hello`` and this host's boot-time clock for elapsed time); the
    multi-process tests in test_lease_hosts.py shift the wall clock 90 s both ways."""
    source = Path(lease_module.__file__).read_text()
    tree = ast.parse(source)
    names = {node.attr if isinstance(node, ast.Attribute) else node.id
             for node in ast.walk(tree) if isinstance(node, ast.Attribute | ast.Name)}
    assert not names & {"utcnow", "now", "time_ns", "monotonic", "today"}
    assert "time.time(" not in source and "datetime.now" not in source
    async with lease(db, "slurm", "farm") as held:
        doc = await SyncLease.get_pymongo_collection().find_one({"_id": "slurm:farm"})
        clock = await lease_module.store_time(db)
        ttl_ms = int(held.ttl.total_seconds() * 1000)
        assert doc["expires_ms"] == held.expires_ms
        assert 0 < held.expires_ms - clock.ms <= ttl_ms  # the store's now + the TTL
