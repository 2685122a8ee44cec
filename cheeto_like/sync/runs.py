"""A sync run's life in the store: the write-ahead item log, crash detection, and the
rolling deletion budget read from past runs.

Why a write-ahead log: a run killed mid-apply (SIGKILL, a lost node) must leave behind
exactly which outside commands ran. The apply writes the whole plan as ``planned``
items first (``SyncRunItem`` documents, ``ITEM_BATCH`` a round trip: a list on the run
passed the 16 MiB document limit at 150k associations), then, before each command, one
store round trip that closes the previous command's outcome and marks the next one
``started``: after a crash every item is ``ok``/``failed``/… (ran), ``started`` (may
have run) or ``planned`` (did not).

Why a ``SyncStep`` document per started command rather than the run's ``items``: the
embedded store cannot update one element of a list (``items.N`` paths are refused,
``array_filters`` on sub-document fields do not work, ``$push`` of sub-documents is not
portable: tests/test_store_conformance*.py), so updating the run meant ``$set``-ing the
whole list before every command, n writes of n items: quadratic (issue 18; 1,500
commands rewrote 1,500 items 1,500 times). A step is a few dozen bytes written by ``_id``
(``RunJournal.steps``: one ``bulk_write`` of upserts), whatever the plan's size. The run
ends by writing the outcomes that changed (``RunJournal.finish``: only ``outcome`` and
``detail``, by ``_id``) and dropping its steps; a crashed run is closed by folding its
steps into its items (``close_stale_runs``). Until then, whoever reads a ``running``
run's items reads ``queries.sync_runs.live_items``.

Why fencing here: ``RunJournal.steps`` is the write before each outside command, so an
apply's journal carries its lease (``held``) and proves it there (``Held.fence``: one
conditional write on the lease document, then the steps): a holder whose lease was
taken over, or that could not renew it in time by the store's clock, writes no step and
runs no command (``LeaseLost``).

Why crash detection here: nothing runs when a process dies, so whoever looks next closes
the run. A ``running`` run is stale when the lease it ran under is no longer its holder's
(expired by the store's clock, taken or released): the lease's own renewals are its
liveness. A holder that is provably a process of the closer's own pid namespace and
kernel boot that has ended (``lease.holder_is_gone``) is stale at once, lease or not
(the only liveness judged for a dry run, which takes no lease); a holder of another
namespace or host never is. Runs that do not name their holder are left alone. Stale
runs become ``crashed``, with the removals their ``ok``/``started`` items made, so the
deletion budget still counts them.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from pymongo import InsertOne, UpdateOne

from ..errors import GuardTripped
from ..models import SyncLease, SyncRun, SyncRunItem, SyncStep
from ..models.fields import utcnow
from ..models.sync import SyncItem, epoch_ms
from ..queries.sync_runs import overlay, run_items, run_steps
from ..store import Store
from .lease import Held, holder_is_gone, store_time
from .run_metrics import record_crashed

BUDGET_WINDOW = timedelta(hours=24)
ITEM_BATCH = 1000  # SyncRunItem writes per bulk_write: a few hundred KB, whatever the plan
MAX_STORED_WOULD_DELETE = 1000  # a tripped guard's list, kept on the run (16 MiB a document)


def note_raised(run: SyncRun, exc: BaseException, *, keep_would_delete: bool = True) -> None:
    """What a run that raised stores, the same for every target: a tripped guard as
    ``aborted`` with the deletions it refused (the first ``MAX_STORED_WOULD_DELETE``;
    the whole list goes to the caller in the exception), anything else as ``failed``
    with the error's own message when it has one."""
    if isinstance(exc, GuardTripped):
        run.status, run.error = "aborted", exc.message
        if keep_would_delete:
            run.extra["would_delete"] = exc.would_delete[:MAX_STORED_WOULD_DELETE]
        return
    run.status = "failed"
    run.error = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"


def stamp_end(run: SyncRun, started: float) -> None:
    """The run's end time and wall time (``started``: ``time.monotonic()`` at its start)."""
    run.finished_at = utcnow()
    run.duration_s = round(time.monotonic() - started, 3)


def removed_by(items: list[SyncItem]) -> int:
    """Removals made (or possibly made, for a command in flight) by these items. A failed
    or pending sacctmgr call removed nothing; a started one is counted to be safe."""
    return sum(i.removals for i in items if i.outcome in ("ok", "started"))


def step_id(run_id: str, index: int) -> str:
    return f"{run_id}:{index}"


class RunJournal:
    """Writes a run's items ahead of the commands they describe: each item once
    (``write``), then one small write per step (``steps``), then the outcomes that
    changed (``finish``), never the list again. With ``held`` (an apply's lease) each
    step first fences the lease (``Held.fence``)."""

    def __init__(self, store: Store, run: SyncRun, *, held: Held | None = None) -> None:
        self.store, self.run, self.held = store, run, held
        self.items: list[SyncItem] = []  # the list last written whole; steps change it
        self.stored: list[tuple[str, str]] = []  # (outcome, detail) of each stored item
        self.writes = 0
        self.stepped = False

    async def write(self, items: list[SyncItem], *, removed: int | None = None,
                    fence: bool = False, **extra: Any) -> None:
        """Store ``items`` as the run's items (the plan, or LDAP's list so far, which only
        grows) and the run's removal count and ``extra``. Items already stored are
        rewritten only where their outcome or detail changed. ``removed`` overrides the
        count from ``items`` (a run that stores only some of its items, or counts a
        whole batch before it starts). ``fence`` (LDAP, before each batch of changes):
        prove the lease first, as ``steps`` does (``LeaseLost``, nothing written)."""
        if fence and self.held is not None:
            await self.held.fence(self.store)
        await self._store_items(items)
        fields: dict[str, Any] = {"counts.removed": removed_by(items) if removed is None
                                  else removed}
        fields |= {f"extra.{k}": v for k, v in extra.items()}
        async with self.store.exclusive():
            await SyncRun.get_pymongo_collection().update_one({"_id": self.run.id},
                                                              {"$set": fields})
        self.items = items
        self.writes += 1

    async def finish(self, items: list[SyncItem]) -> None:
        """Store the run's final items (before its final save): new ones inserted,
        changed outcomes set. A run without a journal (a dry run, puppet) stores its
        items here, once."""
        await self._store_items(items)
        self.items = items

    async def _store_items(self, items: list[SyncItem]) -> None:
        """New items are inserted whole (``started_at`` is a datetime, which a ``$set``
        would store as text on the embedded store), known ones get ``outcome``/``detail``
        by ``_id``; ``ITEM_BATCH`` writes a round trip."""
        ops: list[InsertOne[Any] | UpdateOne] = []
        for n, item in enumerate(items):
            now = (item.outcome, item.detail)
            if n < len(self.stored):
                if self.stored[n] != now:
                    ops.append(UpdateOne({"_id": step_id(self.run.id, n)},
                                         {"$set": {"outcome": item.outcome,
                                                   "detail": item.detail}}))
            else:
                ops.append(InsertOne({"_id": step_id(self.run.id, n), "run": self.run.id,
                                      "index": n, "started_at": self.run.started_at,
                                      **item.model_dump()}))
        collection = SyncRunItem.get_pymongo_collection()
        for start in range(0, len(ops), ITEM_BATCH):
            async with self.store.exclusive():
                await collection.bulk_write(ops[start:start + ITEM_BATCH], ordered=True)
        self.stored = [(i.outcome, i.detail) for i in items]

    async def steps(self, indexes: Iterable[int], *, fence: bool = True) -> None:
        """Record the current outcome and detail of the items at ``indexes`` (of the list
        given to ``write``) in one round trip: a ``bulk_write`` of upserts by ``_id``, one
        small document per item, so a step's cost does not grow with the plan.

        Before a command (``fence``, with a lease) the lease is proved first, in the
        store: ``LeaseLost`` and nothing written when it is no longer this run's; after
        the write the deadline is checked again, so the command starts only while the
        lease is still ours by the store's clock. The closing write after the last
        command passes ``fence=False`` (it records what ran; nothing follows it)."""
        fencing = fence and self.held is not None
        if fencing:
            assert self.held is not None
            await self.held.fence(self.store)
        ops = [UpdateOne({"_id": step_id(self.run.id, n)},
                         {"$set": {"run": self.run.id, "index": n,
                                   "outcome": self.items[n].outcome,
                                   "detail": self.items[n].detail}}, upsert=True)
               for n in indexes]
        if ops:
            async with self.store.exclusive():
                await SyncStep.get_pymongo_collection().bulk_write(ops, ordered=True)
            self.stepped = True
            self.writes += 1
        if fencing:
            assert self.held is not None
            self.held.check()

    async def discard_steps(self) -> None:
        """Drop the run's step documents, once the run itself holds every outcome."""
        if not self.stepped:
            return
        async with self.store.exclusive():
            await SyncStep.get_pymongo_collection().delete_many({"run": self.run.id})
        self.stepped = False


def _stale(doc: dict[str, Any], leases: dict[str, dict[str, Any]], now_ms: int) -> bool:
    """``now_ms``: the store's clock (never ahead of it), so a run is judged by its
    lease's renewals alone, whatever this host's clock says."""
    holder, key = doc.get("holder"), doc.get("lease")
    if holder is None:  # a run that does not name its process (HiPPO, IAM): never judged
        return False
    if holder_is_gone(holder):  # provably ended, in this very pid namespace
        return True
    if key is not None:
        current = leases.get(key)
        return current is None or current["holder"] != holder or \
            current.get("expires_ms", epoch_ms(current["expires_at"])) < now_ms
    return False


async def close_stale_runs(store: Store, *, target: str | None = None,
                           site: str | None = None) -> list[str]:
    """Mark every stale ``running`` run ``crashed`` (optionally only one target/site),
    its step documents folded into its items (then dropped); returns their ids. Cheap
    when nothing is running: one indexed query."""
    runs = SyncRun.get_pymongo_collection()
    running = [doc async for doc in runs.find({"status": "running"})
               if (target is None or doc.get("target") == target)
               and (site is None or doc.get("site") == site)]
    if not running:
        await drop_finished_steps(store)
        return []
    # the clock first: a lease renewed after the reading is then still seen as live
    now_ms = (await store_time(store)).ms
    leases = {doc["_id"]: doc async for doc in SyncLease.get_pymongo_collection().find({})}
    closed = []
    for doc in running:
        if not _stale(doc, leases, now_ms):
            continue
        steps = await run_steps(str(doc["_id"]))
        items = overlay(await run_items(str(doc["_id"])), steps)
        in_flight = [i.command for i in items if i.outcome == "started"]
        error = "crashed: its process died or lost the lease mid-run" + (
            f"; in flight: {in_flight[0]}" if in_flight else "")
        removed = max(removed_by(items), int((doc.get("counts") or {}).get("removed") or 0))
        fields: dict[str, Any] = {"status": "crashed", "error": error,
                                  "counts.removed": removed}
        if steps:  # the run's items keep what its steps said, so they can go
            await _fold_steps(store, str(doc["_id"]), items, steps)
        async with store.exclusive():
            done = await runs.update_one({"_id": doc["_id"], "status": "running"},
                                         {"$set": fields, "$currentDate": {"finished_at": True}})
        if not done.modified_count:  # it ended meanwhile, or another closer won
            continue
        record_crashed(doc)
        if steps:
            async with store.exclusive():
                await SyncStep.get_pymongo_collection().delete_many({"run": doc["_id"]})
        closed.append(str(doc["_id"]))
    await drop_finished_steps(store)
    return closed


async def _fold_steps(store: Store, run_id: str, items: list[SyncItem],
                      steps: list[dict[str, Any]]) -> None:
    """Put each step's outcome on the run's item at its index (by ``_id``, bounded
    batches); a run from before ``sync_items`` gets its items inserted whole."""
    if not await SyncRunItem.get_pymongo_collection().find_one({"run": run_id}, {"_id": 1}):
        run = await SyncRun.get(run_id)
        if run is not None:
            await RunJournal(store, run).finish(items)
        return
    ops = [UpdateOne({"_id": step_id(run_id, int(s["index"]))},
                     {"$set": {"outcome": s["outcome"], "detail": s.get("detail", "")}})
           for s in steps if isinstance(s.get("index"), int) and 0 <= s["index"] < len(items)]
    collection = SyncRunItem.get_pymongo_collection()
    for start in range(0, len(ops), ITEM_BATCH):
        async with store.exclusive():
            await collection.bulk_write(ops[start:start + ITEM_BATCH], ordered=True)


async def drop_finished_steps(store: Store) -> int:
    """Delete the step documents of runs that are no longer ``running`` (a process that
    died between its final save and dropping its steps leaves them); returns how many.
    Only runs that have ended are touched, so a run starting meanwhile keeps its steps.
    Cheap: the collection is empty unless an apply is in flight."""
    steps = SyncStep.get_pymongo_collection()
    owners = {doc["run"] async for doc in steps.find({}, {"run": 1})}
    if not owners:
        return 0
    ended = [doc["_id"] async for doc in SyncRun.get_pymongo_collection().find(
        {"_id": {"$in": sorted(owners)}, "status": {"$ne": "running"}}, {"_id": 1})]
    if not ended:
        return 0
    async with store.exclusive():
        done = await steps.delete_many({"run": {"$in": ended}})
    return done.deleted_count


async def removed_recently(target: str, site: str, *, window: timedelta = BUDGET_WINDOW,
                           exclude: str | None = None) -> int:
    """Removals applied at (target, site) by runs that started within ``window``."""
    since = utcnow() - window
    total = 0
    # (target, site, started_at range): the (target, site, -started_at) index's shape
    async for doc in SyncRun.get_pymongo_collection().find(
            {"target": target, "site": site, "started_at": {"$gte": since}},
            {"target": 1, "site": 1, "counts": 1, "apply": 1}):
        if doc.get("target") == target and doc.get("site") == site and doc.get("apply") \
                and doc["_id"] != exclude:
            total += int((doc.get("counts") or {}).get("removed") or 0)
    return total


async def check_budget(target: str, site: str, removals: list[str], *,
                       per_day: int | None, allow: int | None, what: str,
                       exclude: str | None = None) -> dict[str, int] | None:
    """Refuse (``GuardTripped``, before any write) a plan whose removals exceed what is
    left of the site's rolling 24-hour budget, so a cap per run cannot be drained by
    running several times. ``allow`` (``--allow-deletions N``) lets one reviewed run
    remove up to N regardless; its removals still count against the budget. Returns the
    figures for the run's record (None: no budget)."""
    if per_day is None:
        return None
    used = await removed_recently(target, site, exclude=exclude)
    left = max(per_day - used, 0)
    figures = {"per_day": per_day, "used": used, "left": left}
    planned = len(removals)
    if planned <= left or (allow is not None and planned <= allow):
        return figures
    tripped = GuardTripped(
        f"the plan removes {planned} {what} but only {left} of {site}'s daily budget of "
        f"{per_day} remain ({used} removed in the last 24 h); nothing was changed. "
        f"Review the plan, then pass --allow-deletions {planned} to go ahead",
        would_delete=removals)
    tripped.guard = "daily_budget"  # type: ignore[attr-defined]  # the metric's label
    raise tripped
