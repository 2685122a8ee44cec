"""The Slurm reconciler: desired (store) -> actual (sacctmgr) -> plan -> guarded apply.

``sync_site`` runs the four steps for one site and stores a ``SyncRun`` with the plan
counts and every command's outcome. An apply:
- takes the ``slurm:<site>`` lease first (``Busy``, exit 1, when another apply holds it)
  and reads slurmdbd and plans *under* it, so the plan is never older than the state it
  changes; taking it closes runs a crashed holder left ``running`` as ``crashed``;
- refuses before any write when the plan removes more than ``max_deletions`` or more
  than the site's rolling 24-hour budget has left (``sync.runs.check_budget``); a
  removal is a deleted account or association, a removed coordinator, or a QOS dropped
  from an association;
- writes the whole plan to the run first, then marks each command ``started`` before it
  runs (one small store write per command: the previous outcome and the next start, as
  ``SyncStep`` documents, never the whole item list again; ``sync.runs.RunJournal``), so
  a crash shows what ran; the run's final save holds every outcome and drops the steps;
- runs batches in order, each command with a timeout, recording every outcome; a
  removal slurmdbd refuses because of running jobs is ``pending`` (retried next run);
- skips the delete batches when anything before them failed, so a failed add never
  turns into a user who lost their old associations and did not get the new ones;
- stops before the next command when the lease was lost (``Held.check``);
- never raises halfway: the run ends ``ok`` or ``failed`` with a full report.
A dry run (the default) reads and plans without the lease and writes nothing outside.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

from ... import progress
from ...adapters.sacctmgr import Result
from ...errors import Busy, GuardTripped
from ...files import write_atomically
from ...models import SyncRun
from ...models.fields import utcnow
from ...models.sync import SyncItem
from ...queries.site import get_site
from ...store import Store
from ..lease import DEFAULT_TTL, Held, LeaseLost, holder_name, maybe_lease
from ..report import ItemOutcomes
from ..run_metrics import logged_run, record_end, record_quota_blocks
from ..runs import (
    RunJournal,
    check_budget,
    close_stale_runs,
    note_raised,
    removed_by,
    stamp_end,
)
from .actual import Policy, StateReader, actual_state, with_deletion_facts
from .desired import desired_state
from .plan import Plan, plan
from .quota import apply_quota_only

TARGET = "slurm"


class CommandRunner(Protocol):
    async def run(self, args: Any, *, write: bool) -> Result: ...


@dataclass
class Report(ItemOutcomes):
    plan: Plan
    applied: bool
    items: list[SyncItem] = field(default_factory=list)
    run_id: str | None = None


def check_guard(planned: Plan, max_deletions: int | None) -> None:
    removals = planned.removals
    if max_deletions is not None and len(removals) > max_deletions:
        raise GuardTripped(f"the plan removes {len(removals)} Slurm entities (deletions, "
                           f"coordinators, QOS from associations), more than "
                           f"--max-deletions {max_deletions}; nothing was changed",
                           would_delete=removals)


def _outcome(result: Result) -> tuple[str, str]:
    if result.ok:
        return "ok", f"{result.seconds:.2f}s"
    if result.jobs_active:
        return "pending", f"pending: running jobs use it; retried next run ({result.summary()})"
    return "failed", result.summary()


async def apply_plan(planned: Plan, runner: CommandRunner, *, max_deletions: int | None,
                     journal: RunJournal | None = None,
                     held: Held | None = None) -> list[SyncItem]:
    """Execute the plan in order; returns one item per command, never raises midway.

    With a ``journal`` every item is written before anything runs and each command is
    marked ``started`` in the store before its process starts (write-ahead): one
    ``journal.steps`` round trip carrying that start and the outcomes settled since the
    last one (the previous command's, and any skipped in between), so the writes per
    command stay a handful of small documents however long the plan is. A journal with
    the lease fences it in that write (``RunJournal.steps``): once the lease is no
    longer this run's, the command and every one after it are ``skipped``, unrun."""
    check_guard(planned, max_deletions)
    steps = [(batch, command) for batch in planned.batches for command in batch.commands]
    items = plan_items(planned)
    if journal is not None:
        await journal.write(items)
    settled: list[int] = []  # indexes whose outcome changed since the last journal write
    failed = False
    progress.begin(len(steps), "sacctmgr commands")
    for index, ((batch, command), item) in enumerate(zip(steps, items, strict=True)):
        progress.advance()
        if held is not None and held.gone() is not None:
            for rest in items[index:]:
                rest.outcome, rest.detail = "skipped", f"skipped: {held.lost}"
            break
        if batch.kind == "delete" and failed:
            item.outcome, item.detail = "skipped", "skipped: an earlier step failed"
            settled.append(index)
            continue
        item.outcome = "started"
        if journal is not None:
            try:
                await journal.steps([*settled, index])
            except LeaseLost as exc:  # fenced out: nothing written, the command not run
                for rest in items[index:]:
                    rest.outcome, rest.detail = "skipped", f"skipped: {exc.message}"
                break
        settled = [index]
        try:
            result = await runner.run(command.args, write=True)
        except Exception as exc:  # a missing binary, sudo refusal, …: record, go on
            item.outcome, item.detail = "failed", f"{type(exc).__name__}: {exc}"
            failed = True
            continue
        item.outcome, item.detail = _outcome(result)  # type: ignore[assignment]
        failed = failed or item.outcome == "failed"
    if journal is not None:
        # the last outcome, should the final save not come (records; runs nothing)
        await journal.steps(settled, fence=False)
    return items


def plan_items(planned: Plan) -> list[SyncItem]:
    """One ``planned`` item per command, in batch order: what an apply runs, and what a
    dry run stores as its run's items (the drift the runs page shows)."""
    return [SyncItem(batch=batch.label, command=str(command), targets=list(command.targets),
                     removals=planned.command_removals(batch, command))
            for batch in planned.batches for command in batch.commands]


def write_commands(planned: Plan, path: Path, binary: str = "sacctmgr") -> None:
    """Every planned command, one per line, in batch order (for review or replay)."""
    lines = [f"{binary} -i {command}" for batch in planned.batches for command in batch.commands]
    write_atomically(path, "".join(f"{line}\n" for line in lines))  # bad path: one line


async def sync_site(store: Store, site_name: str, *, reader: StateReader,
                    runner: CommandRunner | None, apply: bool = False,
                    max_deletions: int | None = 50, author: str | None = None,
                    dump_commands: Path | None = None, offline: bool = False,
                    per_day: int | None = None, allow_deletions: int | None = None,
                    lease_ttl: timedelta = DEFAULT_TTL, policy: Policy | None = None) -> Report:
    """One reconcile run for ``site_name``; ``runner`` is needed only to apply.
    ``per_day``: the site's rolling 24-hour removal budget (None: none);
    ``allow_deletions``: this run may remove up to that many beyond it;
    ``policy``: what on the cluster is not cheeto's (``slurm.root_users``,
    ``slurm.unmanaged_accounts``)."""
    site = await get_site(site_name)
    if apply and runner is None:
        raise ValueError("applying needs a command runner")
    try:
        async with maybe_lease(store, TARGET, site.name, apply, ttl=lease_ttl) as held:
            if held is not None:
                await close_stale_runs(store, target=TARGET, site=site.name)
            with logged_run(site.name) as run_id:
                return await _run(store, site.name, site.cluster_name, reader=reader,
                                  runner=runner, held=held, max_deletions=max_deletions,
                                  author=author, dump_commands=dump_commands,
                                  offline=offline, per_day=per_day,
                                  allow_deletions=allow_deletions, policy=policy,
                                  quota_only=site.slurm.mode == "quota_only", run_id=run_id)
    except Busy as exc:
        await _record_busy(store, site.name, author, exc)
        raise


async def _record_busy(store: Store, site: str, author: str | None, exc: Busy) -> None:
    now = utcnow()
    run = SyncRun(target=TARGET, site=site, author=author, apply=True, status="failed",
                  error=exc.message, finished_at=now, duration_s=0.0, holder=holder_name(),
                  extra={"busy": True})
    record_end(run)
    async with store.exclusive():
        await run.insert()


async def _run(store: Store, site: str, cluster: str, *, reader: StateReader,
               runner: CommandRunner | None, held: Held | None, max_deletions: int | None,
               author: str | None, dump_commands: Path | None, offline: bool,
               per_day: int | None, allow_deletions: int | None,
               policy: Policy | None = None, quota_only: bool = False,
               run_id: str) -> Report:
    apply = held is not None
    started = time.monotonic()
    run = SyncRun(id=run_id, target=TARGET, site=site, author=author, apply=apply,
                  holder=held.holder if held else holder_name(),
                  lease=held.key if held else None,
                  extra={"cluster": cluster, "offline": offline})
    async with store.exclusive():
        await run.insert()
    journal = RunJournal(store, run, held=held)
    report: Report | None = None
    try:
        if quota_only:  # the cluster as found, with only quota blocks changed
            actual = await actual_state(reader, cluster, policy)
            desired = await apply_quota_only(actual, site, utcnow())
        else:
            desired = await desired_state(site)
            actual = await actual_state(reader, cluster, policy)
        record_quota_blocks(site, desired)
        planned = plan(desired, actual)
        if planned.deletions:  # only deletions need the two costly extra reads
            actual = await with_deletion_facts(reader, actual)
            planned = plan(desired, actual)
        report = Report(planned, applied=apply, run_id=run.id)
        if dump_commands is not None:
            write_commands(planned, dump_commands)
        if held is not None and runner is not None:
            check_guard(planned, max_deletions)
            run.extra["budget"] = await check_budget(
                TARGET, site, planned.removals, per_day=per_day, allow=allow_deletions,
                what="Slurm entities", exclude=run.id)
            run.counts = {"processes": planned.processes, "removals": len(planned.removals)}
            held.check()
            report.items = await apply_plan(planned, runner, max_deletions=max_deletions,
                                            journal=journal, held=held)
        run.status = "ok" if report.ok else "failed"
        if held is not None and held.lost is not None:
            run.error = held.lost
        elif report.failed or report.skipped:
            run.error = (f"{len(report.failed)} command(s) failed, "
                         f"{len(report.skipped)} skipped")
        return report
    except Exception as exc:
        note_raised(run, exc)
        raise
    finally:
        stamp_end(run, started)
        if report is not None:
            # cancelled mid-apply, ``report.items`` is unset: the journal's list has the
            # outcomes so far (its steps are dropped below)
            # a dry run stores its plan: the commands an apply would run, ``planned``
            items = report.items or journal.items or ([] if apply else plan_items(report.plan))
            run.counts = {**report.plan.counts, "processes": report.plan.processes,
                          "deletions": len(report.plan.deletions),
                          "removals": len(report.plan.removals),
                          "removed": removed_by(items),
                          "pending": len(report.pending)}
            run.extra |= {"conflicts": list(report.plan.conflicts),
                          "notes": list(report.plan.notes)}
            await journal.finish(items)  # the outcomes, before the run says it ended
        record_end(run, journal.items, plan=report.plan if report is not None else None)
        async with store.exclusive():
            await run.save()
        await journal.discard_steps()  # the run's items hold every outcome now
