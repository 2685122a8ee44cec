"""Which ``running`` SyncRuns are stale, what closing them keeps (their ``SyncStep``
documents folded into their items), who reads a running run's steps, and how the daily
budget reads past runs (sync.runs), on the real store."""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta

import pytest

from cheeto_like.errors import GuardTripped
from cheeto_like.models import SyncRun, SyncStep
from cheeto_like.models.fields import utcnow
from cheeto_like.models.sync import SyncItem
from cheeto_like.processes import process_identity
from cheeto_like.queries.alerts import build_digest
from cheeto_like.queries.sync_runs import live_items, run_items
from cheeto_like.sync.lease import holder_name, lease
from cheeto_like.sync.runs import (
    RunJournal,
    check_budget,
    close_stale_runs,
    drop_finished_steps,
    removed_recently,
)
from cheeto_like.sync.slurm.why import _last_sync
from cheeto_like.web.dashboard.pages_operator import runs_context


async def dead_holder() -> str:
    """The holder name of a process of this pid namespace that has ended."""
    proc = await asyncio.create_subprocess_exec("sleep", "30")
    identity = process_identity(proc.pid)
    assert identity is not None
    proc.kill()
    await proc.wait()
    return f"{os.uname().nodename}:{proc.pid}:gone:{identity}"


async def test_only_runs_whose_holder_died_or_lost_the_lease_are_closed(db):
    gone = await dead_holder()
    dry_dead = SyncRun(target="ldap", site="farm", holder=gone)
    dry_alive = SyncRun(target="ldap", site="farm", holder=holder_name())
    unnamed = SyncRun(target="hippo", site="*")  # names no holder: never judged
    remote = SyncRun(target="slurm", site="farm", holder="elsewhere:1:x", lease="slurm:farm")
    done = SyncRun(target="slurm", site="farm", holder=gone, status="ok")
    for run in (dry_dead, dry_alive, unnamed, remote, done):
        await run.insert()
    async with lease(db, "slurm", "farm") as held:
        mine = SyncRun(target="slurm", site="farm", holder=held.holder, lease=held.key)
        await mine.insert()
        closed = set(await close_stale_runs(db))
    # the remote run's lease is held by someone else now: it is stale too
    assert closed == {dry_dead.id, remote.id}
    states = {r.id: r.status for r in await SyncRun.find_all().to_list()}
    assert states == {dry_dead.id: "crashed", dry_alive.id: "running", unnamed.id: "running",
                      remote.id: "crashed", done.id: "ok", mine.id: "running"}
    assert await close_stale_runs(db) == [mine.id]  # released: nobody holds it any more


async def test_a_crashed_run_keeps_its_items_and_counts_what_may_have_run(db):
    items = [SyncItem(batch="delete associations", command="remove a", outcome="ok",
                      removals=3),
             SyncItem(batch="delete associations", command="remove b", outcome="started",
                      removals=2),
             SyncItem(batch="delete accounts", command="remove c", removals=1)]
    run = SyncRun(target="slurm", site="farm", apply=True, holder=await dead_holder(),
                  lease="slurm:farm")
    await run.insert()
    await RunJournal(db, run).write(items)
    assert await close_stale_runs(db, target="slurm", site="farm") == [run.id]
    back = await SyncRun.get(run.id)
    assert back.status == "crashed" and "in flight: remove b" in back.error
    assert [i.outcome for i in await live_items(back)] == ["ok", "started", "planned"]
    assert back.counts["removed"] == 5 and back.finished_at is not None
    assert await removed_recently("slurm", "farm") == 5
    digest = await build_digest(db, since=utcnow() - timedelta(hours=1), now=utcnow(),
                                stuck_after=timedelta(hours=2))
    assert [p.id for p in digest.sync_failures] == [run.id]


async def test_a_crashed_run_folds_its_step_documents_into_its_items(db):
    """The apply writes its plan once, then each command's progress as a ``SyncStep``;
    the closure of a dead holder's run merges the steps into the items (what ran, what
    was in flight), counts their removals against the budget and drops the steps."""
    planned = [SyncItem(batch="delete associations", command=f"remove {c}", removals=r)
               for c, r in (("a", 3), ("b", 2), ("c", 1), ("d", 4))]
    run = SyncRun(target="slurm", site="farm", apply=True, holder=await dead_holder(),
                  lease="slurm:farm")
    await run.insert()
    other = SyncRun(target="slurm", site="hive", apply=True, holder=holder_name())
    await other.insert()
    journal, theirs = RunJournal(db, run), RunJournal(db, other)
    await journal.write(planned)
    await theirs.write([SyncItem(batch="add accounts", command="add x")])
    planned[0].outcome, planned[0].detail = "ok", "0.10s"
    planned[1].outcome = "failed"
    planned[2].outcome = "started"
    await journal.steps([0, 1])
    await journal.steps([2])
    theirs.items[0].outcome = "started"
    await theirs.steps([0])
    back = await SyncRun.get(run.id)
    assert [i.outcome for i in await run_items(back.id)] == ["planned"] * 4  # written once
    assert [i.outcome for i in await live_items(back)] == ["ok", "failed", "started",
                                                           "planned"]
    assert await removed_recently("slurm", "farm") == 0  # counted once closed

    assert await close_stale_runs(db) == [run.id]
    closed = await SyncRun.get(run.id)
    assert closed.status == "crashed" and "in flight: remove c" in closed.error
    assert [(i.outcome, i.detail) for i in await run_items(closed.id)] == [
        ("ok", "0.10s"), ("failed", ""), ("started", ""), ("planned", "")]
    assert closed.counts["removed"] == 4  # ok (3) + started (1); failed removed nothing
    assert await removed_recently("slurm", "farm") == 4
    assert await live_items(closed) == await run_items(closed.id)
    assert await SyncStep.find({"run": run.id}).count() == 0
    # a live run's steps are left alone
    assert [i.outcome for i in await live_items(await SyncRun.get(other.id))] == ["started"]
    assert await SyncStep.find({"run": other.id}).count() == 1


async def test_steps_left_by_a_finished_run_are_dropped_and_a_running_runs_kept(db):
    """A process that dies between its final save and dropping its steps leaves them:
    the next closure pass (an apply, the status view) drops the steps of ended runs only,
    so a run that is starting meanwhile keeps its journal."""
    ended = SyncRun(target="slurm", site="farm", apply=True, status="ok",
                    holder=holder_name())
    live = SyncRun(target="slurm", site="hive", apply=True, holder=holder_name())
    for run in (ended, live):
        await run.insert()
        journal = RunJournal(db, run)
        await journal.write([SyncItem(batch="add accounts", command="add a"),
                             SyncItem(batch="add accounts", command="add b")])
        journal.items[0].outcome = "ok"
        journal.items[1].outcome = "started"
        await journal.steps([0, 1])
    assert await SyncStep.find({"run": ended.id}).count() == 2
    assert await close_stale_runs(db) == []  # nothing stale: the live run's holder runs
    assert await SyncStep.find({"run": ended.id}).count() == 0
    assert [i.outcome for i in await live_items(await SyncRun.get(live.id))] == [
        "ok", "started"]
    assert await drop_finished_steps(db) == 0  # nothing more to drop


async def test_the_dashboard_and_slurm_why_see_a_running_runs_steps(db):
    """The runs page (and its drift list) and ``slurm why``'s last sync read a running
    apply's outcomes from its steps, not the plan its items still hold."""
    planned = [SyncItem(batch="add associations", command=f"add user {u}",
                        targets=[f"{u}@lab"]) for u in ("ann", "bo", "cy")]
    run = SyncRun(target="slurm", site="farm", apply=True, holder=holder_name())
    await run.insert()
    journal = RunJournal(db, run)
    await journal.write(planned)
    planned[0].outcome, planned[1].outcome = "ok", "started"
    await journal.steps([0, 1])

    from cheeto_like.web.dashboard.pages_operator import RUNS_TABLES
    from cheeto_like.web.dashboard.tables import read_params

    context = await runs_context("farm", read_params({}, RUNS_TABLES))
    [shown] = context["runs"].rows
    assert [i.outcome for i in shown["cmds"]] == ["ok", "started", "planned"]
    assert [d["command"] for d in context["drift"].rows] == ["add user cy"]
    why = await _last_sync("farm", "bo")
    assert why is not None and why["status"] == "running"
    assert [c["outcome"] for c in why["commands_for_user"]] == ["started"]


async def test_run_summaries_read_a_bounded_part_of_a_big_plan(db):
    """The runs page counts every item of a run by outcome but reads only the first
    ``shown``; drift rows come raw from the store, a running run's with its steps."""
    from types import SimpleNamespace

    from cheeto_like.queries.sync_runs import drift_rows, run_summaries

    big = SyncRun(target="ldap", site="farm", apply=False, status="ok")
    await big.insert()
    items = [SyncItem(batch="users", command=f"add uid=u{n}",
                      outcome="ok" if n % 3 == 0 else "planned") for n in range(250)]
    await RunJournal(db, big).finish(items)
    legacy = await SyncRun(target="slurm", site="farm", status="failed").insert()
    await SyncRun.get_pymongo_collection().update_one(
        {"_id": legacy.id}, {"$set": {"items": [
            {"batch": "users", "command": "add user old", "outcome": "failed"}]}})
    empty = await SyncRun(target="puppet", site="farm", status="failed",
                          error="no repo").insert()
    runs = [SimpleNamespace(id=r.id, status=r.status) for r in (big, legacy, empty)]
    summary = await run_summaries(runs, shown=20)
    assert summary[big.id].total == 250 and len(summary[big.id].first) == 20
    assert summary[big.id].outcomes == {"ok": 84, "planned": 166}
    assert [i.command for i in summary[big.id].first][:2] == ["add uid=u0", "add uid=u1"]
    assert summary[legacy.id].outcomes == {"failed": 1}
    assert summary[empty.id].total == 0 and summary[empty.id].first == []
    drift = await drift_rows(runs)
    assert len([d for d in drift if d["run"] == big.id]) == 166
    assert [d["command"] for d in drift if d["run"] == legacy.id] == ["add user old"]


async def test_the_budget_counts_applied_runs_of_the_last_24_hours_at_that_site(db):
    def run(removed: int, **kw) -> SyncRun:
        kw.setdefault("site", "farm")
        kw.setdefault("apply", True)
        return SyncRun(target="slurm", status="ok", counts={"removed": removed}, **kw)

    for doc in (run(10), run(5), run(7, site="hive"), run(9, apply=False),
                run(11, started_at=utcnow() - timedelta(hours=25))):
        await doc.insert()
    assert await removed_recently("slurm", "farm") == 15
    assert await check_budget("slurm", "farm", ["x"] * 5, per_day=20, allow=None,
                              what="Slurm entities") == {"per_day": 20, "used": 15, "left": 5}
    with pytest.raises(GuardTripped, match="removes 6 Slurm entities but only 5 of farm's"):
        await check_budget("slurm", "farm", ["x"] * 6, per_day=20, allow=None,
                           what="Slurm entities")
    assert await check_budget("slurm", "farm", ["x"] * 6, per_day=20, allow=6,
                              what="Slurm entities")
    assert await check_budget("slurm", "farm", ["x"] * 99, per_day=None, allow=None,
                              what="Slurm entities") is None
