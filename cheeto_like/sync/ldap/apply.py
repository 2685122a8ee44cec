"""The LDAP reconciler's apply: a plan's batches in order, each change one request.

``apply_plan`` never raises midway: every change ends as one item (ok, failed or
skipped), the lease is fenced before each batch through the journal and checked with
``held.gone()`` before each change, deletes are skipped once anything before them
failed, and an unreachable directory or a refused bind skips everything after it.
Split from ``sync/ldap/run.py`` (the run, the watermarks, clearing a tree) to keep both
small.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from ... import progress
from ...adapters.ldap import Directory, DirectoryError
from ...errors import GuardTripped
from ...models.sync import SyncItem
from ..lease import Held, LeaseLost
from ..runs import RunJournal
from .plan import SEQUENTIAL_BATCHES, Change, Plan

MAX_STORED_OK_ITEMS = 1000  # a full sync of a large site would not fit one document
_FATAL = ("unreachable", "auth")


def check_guard(planned: Plan, max_deletions: int | None) -> None:
    removals = planned.removals
    if max_deletions is not None and len(removals) > max_deletions:
        raise GuardTripped(f"the plan removes {len(removals)} LDAP entries or member/key "
                           f"values, more than --max-deletions {max_deletions}; nothing "
                           "was changed", would_delete=removals)


async def _execute(change: Change, directory: Directory) -> None:
    if change.op == "add":
        assert change.entry is not None
        await directory.add(change.dn, change.entry.as_ldap())
    elif change.op == "modify":
        await directory.modify(change.dn, change.mods)
    elif change.op == "delete":
        await directory.delete(change.dn, missing_ok=True)
    else:  # recreate
        assert change.entry is not None
        await directory.delete(change.dn, missing_ok=True)
        await directory.add(change.entry.dn, change.entry.as_ldap())


def _item(change: Change, label: str, outcome: str, detail: str) -> SyncItem:
    """One change's outcome. Built without validation (every field is ours and typed):
    a full sync makes one per entry, 34,000 at 10k users."""
    return SyncItem.model_construct(batch=label, command=str(change), targets=[change.label],
                                    outcome=outcome, detail=detail, removals=change.removals)


async def apply_plan(planned: Plan, directory: Directory, *, concurrency: int = 1,
                     max_deletions: int | None, held: Held | None = None,
                     journal: RunJournal | None = None) -> list[SyncItem]:
    """Execute the plan in order; one item per change, never raises midway. With a
    ``journal``, the progress is written before each batch (write-ahead), which also
    fences the lease. Within a batch up to ``concurrency`` changes are in flight: that
    many workers take the next change in plan order, so the cost per change is one
    request and a check of the lease (``held.gone()``), not a task each."""
    check_guard(planned, max_deletions)
    items: list[SyncItem] = []
    failed = False
    fatal: list[str] = []
    removed = 0
    progress.begin(sum(len(b.changes) for b in planned.batches), "LDAP changes")

    for batch in planned.batches:
        if journal is not None:  # fences the lease (store clock, holder) before a batch
            ahead = removed + sum(c.removals for c in batch.changes)
            try:
                await journal.write(stored_items(items), removed=ahead, fence=not fatal,
                                    progress={"batch": batch.label,
                                              "changes": len(batch.changes),
                                              "done": len(items)})
            except LeaseLost:
                pass  # ``held.lost`` says why: every change from here is skipped
        if held is not None and (why := held.gone()) is not None and not fatal:
            fatal.append(why)
        label = batch.label
        skip = "skipped: an earlier step failed" if batch.kind == "delete" and failed else None
        results: list[SyncItem | None] = [None] * len(batch.changes)
        pending = iter(enumerate(batch.changes))

        async def worker(label: str = label, skip: str | None = skip,
                         results: list[SyncItem | None] = results,
                         pending: Iterable[tuple[int, Change]] = pending) -> None:
            for index, change in pending:
                if skip is not None:
                    results[index] = _item(change, label, "skipped", skip)
                    continue
                if held is not None and not fatal and (why := held.gone()) is not None:
                    fatal.append(why)
                if fatal:
                    results[index] = _item(change, label, "skipped", f"skipped: {fatal[0]}")
                    continue
                try:
                    await _execute(change, directory)
                except DirectoryError as exc:
                    if exc.code in _FATAL:
                        fatal.append(exc.message)
                    results[index] = _item(change, label, "failed", exc.message)
                except Exception as exc:  # a bug or an unexpected library error: record it
                    results[index] = _item(change, label, "failed",
                                           f"{type(exc).__name__}: {exc}")
                else:
                    results[index] = _item(change, label, "ok", change.why)

        width = 1 if batch.label in SEQUENTIAL_BATCHES else max(concurrency, 1)
        await asyncio.gather(*(worker() for _ in range(min(width, len(batch.changes)))))
        done = [r for r in results if r is not None]
        assert len(done) == len(results), "a change was left without an outcome"
        items.extend(done)
        progress.advance(len(done))
        removed += sum(r.removals for r in done if r.outcome == "ok")
        failed = failed or any(r.outcome != "ok" for r in done)
    return items


def stored_items(items: list[SyncItem]) -> list[SyncItem]:
    """Every failed or skipped item, and the first ok ones up to a bound."""
    kept: list[SyncItem] = []
    ok = 0
    for item in items:
        if item.outcome == "ok":
            ok += 1
            if ok > MAX_STORED_OK_ITEMS:
                continue
        kept.append(item)
    return kept
