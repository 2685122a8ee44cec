"""What the operator-alert digest reports (reads only).

- sync runs (``SyncRun``) that ended ``failed`` since the last digest, and those
  ``aborted`` by a safety cap (guard trips);
- daemon tasks that ended FAILURE (``celery_taskmeta``) since the last digest, and
  finished tasks whose run took longer than the stuck threshold;
- runs still marked ``running``, and leases (``SyncLease``: sync and task leases) held,
  for longer than the threshold: stuck work. Each is reported once (``stuck_keys``);
- escalations: any run finished since the last digest may carry
  ``extra.escalations`` (``[{key, kind, site, summary, fix}]``, e.g. the cluster
  monitor's stalled jobs and nodes down too long); each key is reported once while it
  stays present (``escalation_keys``), again only after it went away and came back;
- quota thresholds: users and accounts sent a threshold notice since the last digest,
  with the highest threshold passed (100 % or more: their new jobs are held in Slurm).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ..models import SyncLease, SyncRun
from ..store import Store
from .quota import ThresholdPassed, thresholds_passed

TASKMETA_COLLECTION = "celery_taskmeta"
ALERT_TARGETS_IGNORED = ("alerts",)


def _aware(value: Any) -> datetime | None:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return None
    if not isinstance(value, datetime):
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _stamp(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M") if value else "?"


@dataclass(frozen=True)
class RunProblem:
    id: str
    target: str
    site: str
    started_at: str
    error: str | None


@dataclass(frozen=True)
class TaskProblem:
    id: str
    name: str | None
    status: str
    at: str
    error: str | None = None


@dataclass
class AlertDigest:
    since: datetime
    now: datetime
    sync_failures: list[RunProblem] = field(default_factory=list)
    guard_trips: list[RunProblem] = field(default_factory=list)
    failed_tasks: list[TaskProblem] = field(default_factory=list)
    stuck_tasks: list[TaskProblem] = field(default_factory=list)  # newly stuck only
    stuck_keys: set[str] = field(default_factory=set)  # everything stuck now
    escalations: list[dict[str, str]] = field(default_factory=list)  # new ones only
    escalation_keys: set[str] = field(default_factory=set)  # everything escalated now
    # quota thresholds passed since the last digest (from the notices sent; issue 13)
    quota_thresholds: list[ThresholdPassed] = field(default_factory=list)

    @property
    def total(self) -> int:
        return (len(self.sync_failures) + len(self.guard_trips) + len(self.failed_tasks)
                + len(self.stuck_tasks) + len(self.escalations)
                + len(self.quota_thresholds))

    def counts(self) -> dict[str, int]:
        return {"sync_failures": len(self.sync_failures), "guard_trips": len(self.guard_trips),
                "failed_tasks": len(self.failed_tasks), "stuck_tasks": len(self.stuck_tasks),
                "escalations": len(self.escalations),
                "quota_thresholds": len(self.quota_thresholds)}

    def template_vars(self) -> dict[str, Any]:
        return {"total": self.total, "since": _stamp(self.since), "now": _stamp(self.now),
                "sync_failures": [vars(r) for r in self.sync_failures],
                "guard_trips": [vars(r) for r in self.guard_trips],
                "failed_tasks": [vars(t) for t in self.failed_tasks],
                "stuck_tasks": [vars(t) for t in self.stuck_tasks],
                "escalations": list(self.escalations),
                "quota_thresholds": [{**vars(t), "blocked": t.blocked}
                                     for t in self.quota_thresholds]}

    def as_dict(self) -> dict[str, Any]:
        return {"since": self.since, "now": self.now, "counts": self.counts(),
                **{k: v for k, v in self.template_vars().items()
                   if k not in ("since", "now", "total")}}


def _collect_escalations(digest: AlertDigest, doc: dict[str, Any],
                         already: set[str]) -> None:
    extra = doc.get("extra") or {}
    for item in extra.get("escalations") or []:
        if not isinstance(item, dict) or not item.get("key"):
            continue
        key = str(item["key"])
        if key in digest.escalation_keys:
            continue  # several runs since the last digest saw the same thing
        digest.escalation_keys.add(key)
        if key not in already:
            digest.escalations.append({k: str(item.get(k) or "") for k in
                                       ("key", "kind", "site", "summary", "fix")})


async def last_digest_run(target: str) -> SyncRun | None:
    """The last digest that was sent (its ``extra.until`` is where the next starts)."""
    runs = await SyncRun.find({"target": target}).sort(-SyncRun.started_at).limit(5).to_list()
    return next((r for r in runs if r.status == "ok"), None)


def _task_error(result: Any) -> str:
    if isinstance(result, str | bytes):
        try:
            result = json.loads(result)
        except ValueError:
            return str(result)[:300]
    if isinstance(result, dict) and "exc_type" in result:
        message = result.get("exc_message")
        if isinstance(message, list | tuple):
            message = " ".join(str(part) for part in message)
        return f"{result['exc_type']}: {message}" if message else str(result["exc_type"])
    return str(result)[:300]


def _duration(result: Any) -> float | None:
    if isinstance(result, str | bytes):
        try:
            result = json.loads(result)
        except ValueError:
            return None
    value = result.get("duration_s") if isinstance(result, dict) else None
    return float(value) if isinstance(value, int | float) else None


async def build_digest(store: Store, *, since: datetime, now: datetime,
                       stuck_after: timedelta, already_stuck: set[str] | None = None,
                       already_escalated: set[str] | None = None) -> AlertDigest:
    already_stuck = already_stuck or set()
    already_escalated = already_escalated or set()
    digest = AlertDigest(since=since, now=now)
    stale = now - stuck_after

    runs = SyncRun.get_pymongo_collection()
    # by when they ended: a run that started before the last digest may fail after it
    async for doc in runs.find({"finished_at": {"$gte": since}}, {"items": 0}):
        if doc.get("target") in ALERT_TARGETS_IGNORED:
            continue
        _collect_escalations(digest, doc, already_escalated)
        problem = RunProblem(str(doc["_id"]), str(doc.get("target")), str(doc.get("site")),
                             _stamp(_aware(doc.get("started_at"))), doc.get("error"))
        if doc.get("status") in ("failed", "crashed"):
            digest.sync_failures.append(problem)
        elif doc.get("status") == "aborted":
            digest.guard_trips.append(problem)
    async for doc in runs.find({"status": "running"}, {"items": 0}):
        started = _aware(doc.get("started_at"))
        if started is not None and started < stale:
            key = f"run:{doc['_id']}"
            digest.stuck_keys.add(key)
            if key not in already_stuck:
                digest.stuck_tasks.append(TaskProblem(
                    str(doc["_id"]), f"{doc.get('target')} sync {doc.get('site')}",
                    "running", _stamp(started)))

    for lease in await SyncLease.find_all().to_list():
        acquired = _aware(lease.acquired_at)
        if acquired is not None and acquired < stale:
            key = f"lease:{lease.id}@{acquired.isoformat()}"
            digest.stuck_keys.add(key)
            if key not in already_stuck:
                digest.stuck_tasks.append(TaskProblem(lease.id, f"lease {lease.id}",
                                                      f"held by {lease.holder}",
                                                      _stamp(acquired)))

    taskmeta = store.database[TASKMETA_COLLECTION]
    async for doc in taskmeta.find({"date_done": {"$gte": since}}):
        status = str(doc.get("status", "")).upper()
        done = _stamp(_aware(doc.get("date_done")))
        args = doc.get("args")
        name = doc.get("name")
        if name and isinstance(args, list | tuple) and args:
            name = f"{name}({', '.join(str(a) for a in args)})"
        if status == "FAILURE":
            digest.failed_tasks.append(TaskProblem(str(doc["_id"]), name, "FAILURE", done,
                                                   _task_error(doc.get("result"))))
        elif status == "SUCCESS":
            took = _duration(doc.get("result"))
            if took is not None and took > stuck_after.total_seconds():
                digest.stuck_tasks.append(TaskProblem(
                    str(doc["_id"]), name, f"took {took / 60:.0f} min", done))
    for items in (digest.sync_failures, digest.guard_trips):
        items.sort(key=lambda r: (r.started_at, r.target, r.site))
    digest.failed_tasks.sort(key=lambda t: t.at)
    digest.quota_thresholds = await thresholds_passed(since, now)
    return digest
