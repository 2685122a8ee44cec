"""The Slurm reconciler: desired (store) -> actual (sacctmgr) -> plan -> guarded apply.

``sync_site`` runs the four steps for one site and stores a ``SyncRun`` with the plan
counts and every command's outcome. The apply:
- refuses before any write when the plan deletes more than ``max_deletions``;
- runs batches in order, each command with a timeout, recording every outcome;
- skips the delete batches when anything before them failed, so a failed add never
  turns into a user who lost their old associations and did not get the new ones;
- never raises halfway: the run ends ``ok`` or ``failed`` with a full report.
A dry run (the default) stops after the plan. At most one apply per site runs at a time
(``sync.lease``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..adapters.sacctmgr import Result
from ..errors import GuardTripped
from ..models import SyncRun
from ..models.fields import utcnow
from ..models.sync import SyncItem
from ..queries.site import get_site
from ..store import Store
from .lease import lease
from .report import ItemOutcomes
from .slurm_actual import StateReader, actual_state, with_deletion_facts
from .slurm_desired import desired_state
from .slurm_plan import Plan, plan

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
    deletions = planned.deletions
    if max_deletions is not None and len(deletions) > max_deletions:
        raise GuardTripped(f"the plan deletes {len(deletions)} Slurm entities, more than "
                           f"--max-deletions {max_deletions}; nothing was changed",
                           would_delete=deletions)


async def apply_plan(planned: Plan, runner: CommandRunner, *,
                     max_deletions: int | None) -> list[SyncItem]:
    """Execute the plan in order; returns one item per command, never raises midway."""
    check_guard(planned, max_deletions)
    items: list[SyncItem] = []
    failed = False
    for batch in planned.batches:
        for command in batch.commands:
            base = {"batch": batch.label, "command": str(command),
                    "targets": list(command.targets)}
            if batch.kind == "delete" and failed:
                items.append(SyncItem(**base, outcome="skipped",
                                      detail="skipped: an earlier step failed"))
                continue
            try:
                result = await runner.run(command.args, write=True)
            except Exception as exc:  # a missing binary, sudo refusal, …: record, go on
                items.append(SyncItem(**base, outcome="failed",
                                      detail=f"{type(exc).__name__}: {exc}"))
                failed = True
                continue
            if result.ok:
                items.append(SyncItem(**base, outcome="ok", detail=f"{result.seconds:.2f}s"))
            else:
                items.append(SyncItem(**base, outcome="failed", detail=result.summary()))
                failed = True
    return items


def write_commands(planned: Plan, path: Path, binary: str = "sacctmgr") -> None:
    """Every planned command, one per line, in batch order (for review or replay)."""
    lines = [f"{binary} -i {command}" for batch in planned.batches for command in batch.commands]
    path.write_text("".join(f"{line}\n" for line in lines))


async def sync_site(store: Store, site_name: str, *, reader: StateReader,
                    runner: CommandRunner | None, apply: bool = False,
                    max_deletions: int | None = 50, author: str | None = None,
                    dump_commands: Path | None = None, offline: bool = False) -> Report:
    """One reconcile run for ``site_name``; ``runner`` is needed only to apply."""
    site = await get_site(site_name)
    started = time.monotonic()
    run = SyncRun(target=TARGET, site=site.name, author=author, apply=apply,
                  extra={"cluster": site.cluster_name, "offline": offline})
    async with store.exclusive():
        await run.insert()
    report: Report | None = None
    try:
        desired = await desired_state(site.name)
        actual = await actual_state(reader, site.cluster_name)
        planned = plan(desired, actual)
        if planned.deletions:  # only deletions need the two costly extra reads
            actual = await with_deletion_facts(reader, actual)
            planned = plan(desired, actual)
        report = Report(planned, applied=apply, run_id=run.id)
        if dump_commands is not None:
            write_commands(planned, dump_commands)
        if apply:
            if runner is None:
                raise ValueError("applying needs a command runner")
            check_guard(planned, max_deletions)
            async with lease(store, TARGET, site.name):
                report.items = await apply_plan(planned, runner, max_deletions=max_deletions)
        run.status = "ok" if report.ok else "failed"
        if report.failed:
            run.error = f"{len(report.failed)} command(s) failed"
        return report
    except GuardTripped as exc:
        run.status, run.error = "aborted", exc.message
        run.extra["would_delete"] = exc.would_delete
        raise
    except Exception as exc:
        run.status, run.error = "failed", f"{type(exc).__name__}: {exc}"
        raise
    finally:
        run.finished_at = utcnow()
        run.duration_s = round(time.monotonic() - started, 3)
        if report is not None:
            run.counts = {**report.plan.counts, "processes": report.plan.processes,
                          "deletions": len(report.plan.deletions)}
            run.items = report.items
            run.extra |= {"conflicts": list(report.plan.conflicts),
                          "notes": list(report.plan.notes)}
        async with store.exclusive():
            await run.save()
