"""``cheeto daemon status``: the last run of each (task, site).

Two sources, merged per (task, site):
- ``celery_taskmeta`` (the result backend, in the application database): every finished
  task run, whoever enqueued it, with its state, result or error and worker;
- ``SyncRun``s of the reconcilers (slurm, ldap, puppet): every run, including manual
  ``cheeto ng … sync`` runs, with the duration and the error even when the task failed.
  The run shown is ``queries.sync_runs.last_sync_run``'s, the one ``ng slurm why`` shows.

The newer of the two wins. A task row takes its duration from its result, or (a failed
run, which has no result) from the SyncRun that ended within a minute before it. States:
``ok``, ``skipped`` (another run held the lease), ``failed``, ``aborted`` (a SyncRun
refused by its deletion cap or budget), ``running`` (a SyncRun in flight), ``crashed``
(a SyncRun whose process died or lost its lease mid-run: reading the status closes such
runs first, ``sync.runs.close_stale_runs``), or Celery's own state in lower case.
Pairs come from the configured tasks and sites plus whatever the two
sources hold, so a run on an unconfigured site still shows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ..config import Config
from ..errors import InvalidInput
from ..models import SyncRun
from ..queries.sync_runs import last_sync_run
from ..store import Store
from ..sync.runs import close_stale_runs
from .config import (
    BY_CELERY_NAME,
    NO_SITE,
    TASKMETA_COLLECTION,
    TASKS,
    enabled_tasks,
    task_sites,
)

SYNC_TARGETS = {"slurm": "slurm_sync", "ldap": "ldap_sync", "puppet": "puppet_sync"}
TASK_TARGETS = {task: target for target, task in SYNC_TARGETS.items()}
SAME_RUN = timedelta(minutes=1)
COLUMNS = ("task", "site", "state", "when", "duration_s", "error", "by", "source")


@dataclass
class Seen:
    state: str
    when: datetime | None
    duration_s: float | None
    error: str | None
    by: str | None
    source: str | None

    def row(self, task: str, site: str) -> dict[str, Any]:
        return {"task": task, "site": site, "state": self.state, "when": self.when,
                "duration_s": self.duration_s, "error": self.error, "by": self.by,
                "source": self.source}


def _aware(value: Any) -> datetime | None:
    if not isinstance(value, datetime):
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _error(result: Any) -> str | None:
    if not isinstance(result, dict) or "exc_type" not in result:
        return None if result is None else str(result)
    message = result.get("exc_message")
    if isinstance(message, list | tuple):
        message = " ".join(str(part) for part in message)
    return f"{result['exc_type']}: {message}" if message else str(result["exc_type"])


def from_taskmeta(doc: dict[str, Any]) -> tuple[str, str, Seen] | None:
    spec = BY_CELERY_NAME.get(doc.get("name") or "")
    args = doc.get("args")
    if spec is None or not isinstance(args, list | tuple):
        return None
    if spec.per_site and not args:
        return None
    site = str(args[0]) if spec.per_site else NO_SITE
    raw = doc.get("result")
    try:
        result = json.loads(raw) if isinstance(raw, str | bytes) else raw
    except ValueError:
        result = raw
    status = str(doc.get("status", "")).upper()
    duration = None
    error = None
    if status == "SUCCESS" and isinstance(result, dict):
        state = "skipped" if result.get("status") == "skipped" else "ok"
        duration = result.get("duration_s")
        error = result.get("reason") if state == "skipped" else None
    elif status == "FAILURE":
        state, error = "failed", _error(result)
    else:
        state = status.lower() or "unknown"
    return spec.name, site, Seen(state, _aware(doc.get("date_done")), duration, error,
                                 doc.get("worker"), "celery")


def from_sync_run(run: SyncRun) -> Seen:
    when = _aware(run.finished_at) or _aware(run.started_at)
    return Seen(run.status, when, run.duration_s, run.error, run.author, "sync_run")


async def last_runs(store: Store, config: Config) -> list[dict[str, Any]]:
    """One row per (task, site), sorted by task then site. Closes stale runs first."""
    await close_stale_runs(store)
    pairs: set[tuple[str, str]] = set()
    if config.daemon is not None:
        for name, block in enabled_tasks(config).items():
            spec = TASKS[name]
            try:
                sites = task_sites(config, spec, block) if spec.per_site else [NO_SITE]
            except InvalidInput:  # no site configured: only what the sources hold
                continue
            pairs.update((name, site) for site in sites)

    celery: dict[tuple[str, str], Seen] = {}
    taskmeta = store.database[TASKMETA_COLLECTION]
    cursor = taskmeta.find({}, {"name": 1, "args": 1, "status": 1, "date_done": 1,
                                "result": 1, "worker": 1})
    async for doc in cursor:
        found = from_taskmeta(doc)
        if found is None:
            continue
        task, site, seen = found
        pairs.add((task, site))
        best = celery.get((task, site))
        if best is None or (seen.when or datetime.min.replace(tzinfo=UTC)) > \
                (best.when or datetime.min.replace(tzinfo=UTC)):
            celery[(task, site)] = seen

    runs = SyncRun.get_pymongo_collection()
    for target, task in SYNC_TARGETS.items():
        for site in await runs.distinct("site", {"target": target}):
            pairs.add((task, site))

    rows = []
    for task, site in sorted(pairs):
        seen = celery.get((task, site))
        target = TASK_TARGETS.get(task)
        latest_run = await last_sync_run(target, site) if target is not None else None
        run = from_sync_run(latest_run) if latest_run else None
        if seen is None or (run is not None and run.when and seen.when
                            and run.when > seen.when):
            seen = run
        elif run is not None and seen.duration_s is None and seen.when and run.when \
                and timedelta(0) <= seen.when - run.when <= SAME_RUN:
            seen.duration_s = run.duration_s
        rows.append(seen.row(task, site) if seen else
                    Seen("never", None, None, None, None, None).row(task, site))
    return rows
