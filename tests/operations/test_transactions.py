"""Operation.run under what MongoDB does at scale, injected with the store's ``failCommand``
fail point (as mongod's test setup): write conflicts retried with backoff for a bounded
time, a lost commit reply applied once, operation ids that make a retry a replay, and
generation marks that concurrent operations do not conflict on."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import monitoring

from cheeto_like.errors import Conflict, ExternalError
from cheeto_like.models import History, QuotaAdjustment
from cheeto_like.models.applied import collection as applied
from cheeto_like.models.generation import collection as marks
from cheeto_like.operations.base import Once
from cheeto_like.operations.generations import compact
from cheeto_like.operations.quota import AdjustUsage
from cheeto_like.queries.generations import all_generations, site_generation
from cheeto_like.store import Store

from ..factories import AUTHOR, make_site, make_user

WRITER = Path(__file__).with_name("contention_writer.py")
ROOT = Path(__file__).resolve().parents[2]


async def fail_point(store: Store, mode: Any, **data: Any) -> int:
    """Configure the store's failCommand; returns how often it had fired so far."""
    reply = await store.client.admin.command({"configureFailPoint": "failCommand",
                                              "mode": mode, "data": data})
    return int(reply["count"])


@pytest.fixture
async def farm(db: Store) -> AsyncIterator[Store]:
    await make_site(db, "farm")
    await make_user(db, "alice", site="farm")
    await marks().delete_many({})
    await applied().delete_many({})
    retry = db.transaction_retry_seconds
    try:
        yield db
    finally:
        await fail_point(db, "off")
        db.transaction_retry_seconds = retry


async def adjustments() -> list[QuotaAdjustment]:
    return await QuotaAdjustment.find({"site": "farm", "user": "alice"}).to_list()


async def adjust_histories() -> int:
    return await History.find({"op": "adjust_usage"}).count()


def writer(data_dir: Path, store: Store, count: int) -> subprocess.Popen[str]:
    """Another process running ``count`` adjustments (``contention_writer.py``)."""
    return subprocess.Popen(
        [sys.executable, str(WRITER), str(data_dir), store.database.name, "farm", "alice",
         str(count), "60"], cwd=ROOT, stdout=subprocess.PIPE, text=True)


async def test_sixteen_writers_with_injected_write_conflicts_all_succeed(farm, mongo_config):
    """16 concurrent quota adjustments (12 in this process, 4 from two other processes)
    while 24 of their inserts fail with WriteConflict: every one is retried with backoff,
    all succeed, and each is applied exactly once (16 rows, 16 History rows, 16 marks)."""
    before_generation = site_generation(await all_generations(), "farm")
    fired = await fail_point(farm, {"times": 24}, failCommands=["insert"], errorCode=112,
                             errorLabels=["TransientTransactionError"])
    if mongo_config.uri is not None:
        pytest.fail("the writer processes reach the embedded store only")
    others = [writer(mongo_config.embedded.path, farm, 2) for _ in range(2)]
    results = await asyncio.gather(*[
        AdjustUsage.run(farm, AUTHOR, site="farm", user="alice", cpu_minutes=n + 1,
                        reason=f"writer {n}") for n in range(12)])
    outputs = [json.loads((await asyncio.to_thread(p.communicate))[0]) for p in others]
    assert [o["ok"] for o in outputs] == [2, 2] and all(not o["errors"] for o in outputs)
    assert await fail_point(farm, "off") - fired == 24  # every injected conflict fired
    rows = await adjustments()
    assert len(rows) == 16 and len(results) == 12
    assert sum(r.cpu_minutes for r in rows) == sum(range(1, 13)) + 4
    assert sorted(r.reason for r in rows if r.reason.startswith("writer")) == sorted(
        f"writer {n}" for n in range(12))
    assert await adjust_histories() == 16
    after = site_generation(await all_generations(), "farm")
    assert after == (before_generation[0], before_generation[1] + 16)  # one mark each
    await compact(farm)  # (operations compact now and then too: how many is chance)
    assert site_generation(await all_generations(), "farm") == after  # folds keep sums
    assert {d["_id"] for d in await marks().find({}).to_list()} == {"base:site:farm"}


async def test_conflicts_past_the_time_bound_fail_with_nothing_written(farm):
    farm.transaction_retry_seconds = 0.3
    await fail_point(farm, "alwaysOn", failCommands=["insert"], errorCode=112,
                     errorLabels=["TransientTransactionError"])
    with pytest.raises(ExternalError) as failed:
        await AdjustUsage.run(farm, AUTHOR, site="farm", user="alice", cpu_minutes=5,
                              reason="starved")
    await fail_point(farm, "off")
    assert failed.value.transient  # the API's 503, the CLI's exit 1
    assert await adjustments() == [] and await adjust_histories() == 0
    assert await applied().count_documents({}) == 0


async def test_a_commit_whose_reply_is_lost_applies_once_and_reports_success(farm):
    """The commit applies but its reply carries a write concern error (what a failover
    during the commit looks like): pymongo labels it UnknownTransactionCommitResult, the
    commit is retried, and the adjustment is there once, with one History row."""
    fired = await fail_point(farm, {"times": 1}, failCommands=["commitTransaction"],
                             writeConcernError={"code": 64, "codeName": "WriteConcernFailed",
                                                "errmsg": "waiting for replication timed out"})
    made = await AdjustUsage.run(farm, AUTHOR, site="farm", user="alice", cpu_minutes=7,
                                 reason="lost reply")
    assert await fail_point(farm, "off") - fired == 1
    rows = await adjustments()
    assert [(r.id, r.cpu_minutes) for r in rows] == [(made.id, 7)]
    assert await adjust_histories() == 1


async def test_an_unknown_commit_result_label_is_retried_until_it_commits(farm):
    """An error labelled UnknownTransactionCommitResult (the commit did not run): the
    commit is retried and applies once."""
    fired = await fail_point(farm, {"times": 2}, failCommands=["commitTransaction"],
                             errorCode=91, errorLabels=["UnknownTransactionCommitResult"])
    await AdjustUsage.run(farm, AUTHOR, site="farm", user="alice", cpu_minutes=3,
                          reason="unknown")
    assert await fail_point(farm, "off") - fired == 2
    assert [r.cpu_minutes for r in await adjustments()] == [3]
    assert await adjust_histories() == 1


async def test_a_connection_dropped_at_commit_reruns_the_transaction_once(farm):
    """The connection closes before the commit runs: the server rolls the transaction
    back, the retried commit finds none (NoSuchTransaction, transient), and the whole
    operation runs again: applied once."""
    fired = await fail_point(farm, {"times": 1}, failCommands=["commitTransaction"],
                             closeConnection=True)
    await AdjustUsage.run(farm, AUTHOR, site="farm", user="alice", cpu_minutes=2,
                          reason="dropped")
    assert await fail_point(farm, "off") - fired == 1
    assert [r.cpu_minutes for r in await adjustments()] == [2]
    assert await adjust_histories() == 1


def _once(key: str, fingerprint: str = "f1") -> Once:
    return Once(f"test:{key}", fingerprint,
                lambda a: {"id": a.id, "cpu_minutes": a.cpu_minutes})


async def test_run_once_applies_once_per_operation_id_and_replays_the_answer(farm):
    first = await AdjustUsage.run_once(farm, AUTHOR, _once("k1"), site="farm", user="alice",
                                       cpu_minutes=4, reason="once")
    again = await AdjustUsage.run_once(farm, AUTHOR, _once("k1"), site="farm", user="alice",
                                       cpu_minutes=4, reason="once")
    assert (first.replayed, again.replayed) == (False, True)
    assert again.summary == first.summary and first.result is not None
    assert [r.cpu_minutes for r in await adjustments()] == [4]
    other = await AdjustUsage.run_once(farm, AUTHOR, _once("k2"), site="farm", user="alice",
                                       cpu_minutes=4, reason="once")
    assert not other.replayed and len(await adjustments()) == 2
    with pytest.raises(Conflict):  # the same id for another request
        await AdjustUsage.run_once(farm, AUTHOR, _once("k1", "f2"), site="farm",
                                   user="alice", cpu_minutes=9, reason="other")
    assert len(await adjustments()) == 2 and await adjust_histories() == 2


async def test_concurrent_calls_with_one_operation_id_apply_once(farm):
    outcomes = await asyncio.gather(*[
        AdjustUsage.run_once(farm, AUTHOR, _once("same"), site="farm", user="alice",
                             cpu_minutes=1, reason="race") for _ in range(6)])
    assert sorted(o.replayed for o in outcomes) == [False] + [True] * 5
    assert len({json.dumps(o.summary) for o in outcomes}) == 1
    assert len(await adjustments()) == 1


class Commands(monitoring.CommandListener):
    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:  # type: ignore[override]
        self.seen.append({"name": event.command_name, **dict(event.command)})

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


async def test_commits_carry_write_concern_majority(mongo_config, farm):
    from cheeto_like.store import connect

    listener = Commands()
    store = await connect(mongo_config, database=farm.database.name, autostart=False,
                          create_indexes=False, listeners=[listener])
    try:
        await AdjustUsage.run(store, AUTHOR, site="farm", user="alice", cpu_minutes=1,
                              reason="concern")
    finally:
        await store.close()
        await farm.bind(create_indexes=False)  # the models back on the fixture's client
    commits = [c for c in listener.seen if c["name"] == "commitTransaction"]
    assert commits and all(c["writeConcern"]["w"] == "majority" for c in commits)


async def test_an_attempt_after_an_uncertain_commit_finds_the_applied_one(farm):
    """What ``Operation.run`` does when a commit's outcome was unknown and the retried
    commit then reported the transaction gone (a failover): the next attempt looks up
    the History row carrying the operation id and, finding it, applies nothing."""
    import time
    import uuid

    from cheeto_like.operations.base import _Applied

    operation_id = uuid.uuid4().hex
    kwargs = {"site": "farm", "user": "alice", "cpu_minutes": 6, "reason": "uncertain"}
    first = AdjustUsage.from_args(farm, AUTHOR, **kwargs)
    await first._run(skip_history=False, operation_id=operation_id, once=None,
                     deadline=time.monotonic() + 30)
    assert (await History.get(operation_id)).op == "adjust_usage"
    again = AdjustUsage.from_args(farm, AUTHOR, **kwargs)
    with pytest.raises(_Applied):
        await again._run(skip_history=False, operation_id=operation_id, once=None,
                         deadline=time.monotonic() + 30, uncertain=True)
    assert [r.cpu_minutes for r in await adjustments()] == [6]
    assert await adjust_histories() == 1


async def test_a_transaction_aborted_at_its_lifetime_limit_is_run_again(farm, caplog):
    """The server aborts a transaction past ``transactionLifetimeLimitSeconds`` (here a
    command of it stalls past 1 s): its next command answers NoSuchTransaction
    (TransientTransactionError), and the operation runs again, applied once."""
    admin = farm.client.admin
    was = (await admin.command({"getParameter": 1,
                                "transactionLifetimeLimitSeconds": 1}))[
        "transactionLifetimeLimitSeconds"]
    await admin.command({"setParameter": 1, "transactionLifetimeLimitSeconds": 1})
    try:
        fired = await fail_point(farm, {"times": 1}, failCommands=["insert"],
                                 blockConnection=True, blockTimeMS=2500)
        with caplog.at_level(logging.INFO, logger="cheeto_like.operations.base"):
            await AdjustUsage.run(farm, AUTHOR, site="farm", user="alice", cpu_minutes=8,
                                  reason="lifetime")
        assert await fail_point(farm, "off") - fired == 1
        assert "adjust_usage: transient transaction error, retry 1" in caplog.text
        assert "NoSuchTransaction" in caplog.text
    finally:
        await admin.command({"setParameter": 1, "transactionLifetimeLimitSeconds": was})
    assert [r.cpu_minutes for r in await adjustments()] == [8]
    assert await adjust_histories() == 1
