"""The Celery tasks: thin synchronous wrappers over the async syncs and exports.

Every run:
1. re-reads the config file the worker was started with (so a changed task block, such
   as ``max_deletions``, applies to the next run without a restart) and refuses a task
   whose block is absent or disabled (``TaskDisabled``: the run FAILS with that message);
2. runs ``asyncio.run()`` with a fresh ``store.connect`` client (AsyncMongoClient is
   bound to its event loop) and the configured ``daemon.author``;
3. takes the task lease ``task.<name>:<site>`` (``sync.lease``), so a second worker or a
   manual enqueue of the same (task, site) cannot overlap. When another run holds it
   this run ends at once, successfully, with ``status: skipped`` and ``reason``
   ("another task.<name> sync for <site> is running by <holder> until <time>"):
   nothing failed, the other run does the work (the summary names it in
   ``running_task``, which ``daemon enqueue --wait`` then follows). A copy of the same
   message the broker delivered again (same Celery id: a broker restart, a dropped
   connection, a consumer timeout) stores nothing and is acked (``Ignore``) while its
   run holds the lease or once its run has a stored result. Leases left behind by a
   process on this host that no longer runs (a worker child killed mid-task, whose message the
   broker then redelivers: late acks) are removed first, so the redelivered run does
   not wait for their expiry; a lease held on another host only ever expires.
   Every lease is short (``TASK_LEASE_TTL``) and renewed by a heartbeat while the run
   lives, so a worker that died on another host blocks the next run for two minutes at
   most. The reconcilers take their own inner leases (``slurm:<site>``, ``ldap:<site>``,
   ``puppet:<site>``); those guard against manual ``cheeto ng … sync`` runs, and a
   conflict there (``Busy``) is a failure, as the reconciler records it in its ``SyncRun``;
4. returns a JSON summary: ``task``, ``site``, ``status`` (``ok`` or ``skipped``),
   ``worker``, ``queue``, ``started_at``, ``duration_s`` and the sync's own figures.

A failure raises, so Celery stores FAILURE in ``celery_taskmeta`` (and Flower shows it):
a guard trip (``GuardTripped``), a run whose commands or writes failed (``SyncFailed``,
raised after the reconciler recorded its ``SyncRun``), a disabled task, an unknown
site, a store or broker that is down. Expected failures (``CheetoError``) are logged
as one line; anything else with its traceback.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from datetime import timedelta
from typing import Any

from celery import Celery, Task

from .. import metrics
from ..config import (
    ClusterMonitorTask,
    Config,
    LDAPSyncTask,
    PuppetSyncTask,
    SlurmSyncTask,
    SympaTask,
    TaskBlock,
    UsageCollectTask,
    load_config,
)
from ..errors import Busy, CheetoError, ConfigError
from ..models import SyncLease
from ..models.fields import utcnow
from ..store import Store, connect
from ..sync.lease import holder_is_gone, lease
from .config import NO_SITE, TASKS, TaskSpec, daemon_config, task_block

log = logging.getLogger("cheeto_like.daemon")

# a task lease is renewed every 40 s while the run lives; a little longer than the
# reconcilers' minute, because a task body may hold the event loop (an export) longer
TASK_LEASE_TTL = timedelta(seconds=120)

Body = Callable[[Store, Config, Any, str, str], Awaitable[dict[str, Any]]]


class SyncFailed(CheetoError):
    """A sync ran to the end but some of its commands or writes failed (see its SyncRun)."""


class WrongQueue(CheetoError):
    """A site-bound task arrived on a queue other than its site's."""


# -- the shared frame ------------------------------------------------------------------


def current_config(app: Celery) -> Config:
    """The worker's config, re-read from its file (``ConfigError`` if it broke since)."""
    started: Config = app.cheeto_config  # type: ignore[attr-defined]
    if started.path is None:
        return started
    return load_config(started.path, started.profile)


def lease_key(spec: TaskSpec) -> str:
    return f"task.{spec.name}"


async def clear_dead_leases(store: Store) -> list[str]:
    """Delete every lease (task or reconciler) whose holder was a process of this pid
    namespace and boot that no longer runs (``holder_is_gone``: never judged by hostname,
    never a lease this process holds now): a worker child killed mid-task, whose message
    the broker then redelivers, must not find its own corpse holding the site until the
    lease expires.
    Returns the lease ids removed. (``sync_leases`` holds one document per running sync.)"""
    collection = SyncLease.get_pymongo_collection()
    dead = [doc async for doc in collection.find({})
            if holder_is_gone(doc["holder"], own_pid_is_gone=True)]
    removed = []
    for doc in dead:
        async with store.exclusive():
            gone = await collection.delete_one({"_id": doc["_id"], "holder": doc["holder"]})
        if gone.deleted_count:
            removed.append(doc["_id"])
            log.warning("removed the lease %s of %s, which no longer runs", doc["_id"],
                        doc["holder"])
    return removed


_WARNED_AUTHORS: set[str] = set()


async def resolve_author(store: Store, author: str) -> str:
    """The configured author; a name the store does not know earns one warning per
    process (History and SyncRuns name it all the same)."""
    from ..queries.user import find_user_by_name

    if author not in _WARNED_AUTHORS and await find_user_by_name(author) is None:
        _WARNED_AUTHORS.add(author)
        log.warning("daemon.author %r is not a user in %s; History and SyncRuns name it "
                    "anyway", author, store.description)
    return author


LIVE_COLLECTION = "task_live"  # the Celery task id holding each task lease


async def running_task(key: str, site: str) -> str | None:
    """The Celery task id of the run holding the lease ``key:site`` (None when unknown:
    the record names another holder than the lease, or is gone)."""
    leases = SyncLease.get_pymongo_collection()
    lease_doc = await leases.find_one({"_id": f"{key}:{site}"})
    live = await leases.database[LIVE_COLLECTION].find_one({"_id": f"{key}:{site}"})
    if lease_doc is None or live is None or live.get("holder") != lease_doc.get("holder"):
        return None
    return str(live["task_id"])


async def _locked_run(config: Config, spec: TaskSpec, block: TaskBlock, site: str,
                      body: Body, task_id: str | None = None) -> dict[str, Any]:
    daemon = daemon_config(config)
    store = await connect(config.mongo, autostart=False, long_running=True)
    try:
        author = await resolve_author(store, daemon.author)
        ttl = TASK_LEASE_TTL
        key = lease_key(spec)
        await clear_dead_leases(store)
        async with AsyncExitStack() as stack:
            try:
                held = await stack.enter_async_context(lease(store, key, site, ttl=ttl))
            except Busy as exc:
                running = await running_task(key, site)
                if running is not None and running == task_id:
                    # the broker redelivered the message of the run that holds the lease
                    # (a broker restart, a consumer timeout): storing "skipped" under its
                    # id would end `enqueue --wait` while the run goes on; store nothing
                    from celery.exceptions import Ignore

                    log.warning("%s %s: a redelivered copy of run %s, which is still "
                                "running; dropped", spec.name, site, task_id)
                    raise Ignore() from None
                log.info("%s %s skipped: %s", spec.name, site, exc.message)
                return {"status": "skipped", "reason": exc.message, "running_task": running}
            if task_id:
                live = SyncLease.get_pymongo_collection().database[LIVE_COLLECTION]
                await live.replace_one(
                    {"_id": f"{key}:{site}"},
                    {"_id": f"{key}:{site}", "task_id": task_id, "holder": held.holder},
                    upsert=True)
            detail = await body(store, config, block, site, author)
        return {"status": "ok", **detail}
    finally:
        await store.close()


def drop_if_done(task: Task, name: str, site: str) -> None:
    """``Ignore`` (the message is acked, nothing stored) when the broker redelivers a
    message whose run already ended with a stored result.

    A late-acked message is taken back when its ack cannot arrive: the broker restarted,
    the connection dropped, or the delivery outlived RabbitMQ's ``consumer_timeout``
    (RabbitMQ 3.10 then closes the channel, which stops a Celery 5 worker once its run
    ends; the message waits for the next worker). The run itself went on and stored its
    result under the same Celery id, so running the copy would do the work twice (and,
    past the timeout again, forever). A worker killed mid-run stored nothing: its copy
    runs (``task_reject_on_worker_lost``)."""
    from celery import states
    from celery.exceptions import Ignore

    state = task.AsyncResult(task.request.id).state
    if state in states.READY_STATES:
        log.warning("%s %s: a redelivered copy of run %s, which already ended (%s); "
                    "dropped", name, site, task.request.id, state)
        raise Ignore()


def run_task(task: Task, name: str, site: str | None, body: Body) -> dict[str, Any]:
    """The frame of every task: ``site`` is None for a singleton (not per-site) task,
    whose lease and body get ``NO_SITE`` instead. Every run is counted by outcome and
    timed (``record_task``), and logs inside it carry the task, its site and the Celery
    task id (``logs.context``)."""
    from celery.exceptions import Ignore

    from .. import logs

    spec = TASKS[name]
    request = task.request
    site = site or NO_SITE
    label_site = site if spec.per_site else ""
    queue = (request.delivery_info or {}).get("routing_key")
    started_at, started = utcnow(), time.monotonic()
    record_queue_time(name, request)
    result: str | None = "failed"  # None: a redelivered copy, dropped (not a run)
    try:
        with logs.context(task=name, site=label_site or None, run_id=request.id):
            if spec.on_site_queue and queue and queue != spec.queue(site):
                raise WrongQueue(f"{name} for {site} arrived on queue {queue!r}; it only "
                                 f"runs from {spec.queue(site)!r} (on the site's head node)")
            if (request.delivery_info or {}).get("redelivered"):
                drop_if_done(task, name, site)
            config = current_config(task.app)
            block = task_block(config, spec)
            outcome = asyncio.run(_locked_run(config, spec, block, site, body, request.id))
        result = "skipped" if outcome.get("status") == "skipped" else "ok"
    except Ignore:
        result = None
        raise
    except CheetoError as exc:  # Celery logs these "expected" failures at INFO only
        log.error("%s %s failed: %s: %s", name, site, type(exc).__name__, exc.message)
        raise
    finally:
        if result is not None:
            record_task(name, label_site, result, time.monotonic() - started)
    return {"task": name, "site": site if spec.per_site else None, **outcome,
            "worker": request.hostname,
            "queue": queue, "started_at": started_at.isoformat(),
            "duration_s": round(time.monotonic() - started, 3)}


# -- metrics ---------------------------------------------------------------------------

SENT_AT_HEADER = "cheeto_sent_at"  # epoch seconds of the send, by the publisher's clock


def stamp_sent_at(headers: dict[str, Any] | None = None, **_: Any) -> None:
    """Celery's ``before_task_publish``: stamp the send time on the message's headers
    (protocol 2: they reach the worker as ``task.request.cheeto_sent_at``). Celery's own
    headers say nothing of when a message was sent (``eta`` is a wish, not a fact), and
    RabbitMQ keeps no enqueue time a consumer can read without a plugin."""
    if headers is not None and SENT_AT_HEADER not in headers:
        headers[SENT_AT_HEADER] = time.time()


def record_queue_time(name: str, request: Any) -> None:
    """``cheeto_task_queue_seconds``: now minus the send stamp. The stamp is the
    publisher's wall clock (beat or ``daemon enqueue`` on another host), so a clock
    behind ours can make it negative: clamped to 0 (a skew, not a wait). A message
    without the stamp (sent by a process from before it, or by another client) is not
    observed. A redelivered message waited since its first send: that is its time."""
    sent = getattr(request, SENT_AT_HEADER, None)
    if not metrics.active() or not isinstance(sent, int | float):
        return
    metrics.observe("cheeto_task_queue_seconds", max(time.time() - float(sent), 0.0),
                    task=name)


def record_task(name: str, site: str, outcome: str, seconds: float) -> None:
    """A run's count by outcome (``ok``, ``skipped``, ``failed``; site "" for a hub
    task) and its duration. Never raises: a metric does not fail a task."""
    if not metrics.active():
        return
    try:
        metrics.inc("cheeto_task_runs_total", task=name, site=site, outcome=outcome)
        metrics.observe("cheeto_task_duration_seconds", seconds, task=name)
    except Exception:
        log.exception("recording the metrics of task %s failed", name)


INGEST_OUTCOMES = {"inserted": "inserted", "replaced": "updated", "unchanged": "unchanged"}


def record_ingest(site: str, summary: dict[str, Any]) -> None:
    """``cheeto_usage_ingest_rows_total`` from a usage collect's summary (its counts:
    ``inserted``, ``replaced`` = updated, ``unchanged``)."""
    if not metrics.active():
        return
    for key, outcome in INGEST_OUTCOMES.items():
        rows = summary.get(key)
        if isinstance(rows, int) and rows > 0:
            metrics.inc("cheeto_usage_ingest_rows_total", rows, site=site, outcome=outcome)


# -- the bodies ------------------------------------------------------------------------


async def _slurm(store: Store, config: Config, block: SlurmSyncTask, site: str,
                 author: str) -> dict[str, Any]:
    from ..adapters.sacctmgr import SAcctMgr
    from ..sync.slurm.actual import Policy, SAcctMgrReader
    from ..sync.slurm.run import sync_site

    runner = SAcctMgr(binary=block.sacctmgr, sudo=block.sudo, timeout=block.timeout_seconds)
    report = await sync_site(store, site, reader=SAcctMgrReader(runner), runner=runner,
                             apply=block.apply, max_deletions=block.max_deletions,
                             author=author, per_day=config.slurm.max_deletions_per_day,
                             lease_ttl=timedelta(seconds=config.slurm.lease_seconds),
                             policy=Policy.of(config.slurm.root_users,
                                              config.slurm.unmanaged_accounts))
    if report.failed or report.skipped:
        first = (report.failed or report.skipped)[0]
        raise SyncFailed(f"slurm_sync {site}: {len(report.failed)} sacctmgr command(s) "
                         f"failed, {len(report.skipped)} skipped (SyncRun {report.run_id}; "
                         f"first: {first.command}: {first.detail})")
    planned = report.plan
    return {"run_id": report.run_id, "applied": report.applied, "cluster": planned.cluster,
            "processes": planned.processes, "deletions": len(planned.deletions),
            "removals": len(planned.removals), "pending": len(report.pending),
            "counts": planned.counts, "tally": report.tally()}


async def _usage(store: Store, config: Config, block: UsageCollectTask, site: str,
                 author: str) -> dict[str, Any]:
    from ..adapters.sacct import Sacct
    from ..operations.usage import collect
    from ..queries.usage import config_seed

    report = await collect(store, site, sacct=Sacct(binary=block.sacct,
                                                    timeout=block.timeout_seconds),
                           overlap=timedelta(minutes=config.usage.overlap_minutes),
                           seed=config_seed(config.usage, site))
    summary = {key: (value.isoformat() if hasattr(value, "isoformat") else value)
               for key, value in report.as_dict().items()}
    record_ingest(site, summary)
    if block.notify and config.mail is not None:
        from ..operations.quota_notify import send_quota_notices

        notices = await send_quota_notices(store, author, config, site,
                                           thresholds=config.usage.thresholds)
        summary["notices_sent"], summary["notices_failed"] = (len(notices.sent),
                                                              len(notices.failed))
    return summary


async def _ldap(store: Store, config: Config, block: LDAPSyncTask, site: str,
                author: str) -> dict[str, Any]:
    from ..sync.ldap import run as ldap_sync
    from ..sync.ldap.plan import KINDS

    if config.ldap is None:
        raise ConfigError(f"ldap_sync needs the ldap section (profile {config.profile!r})")
    kinds = frozenset({*KINDS, *(("prune",) if block.prune else ())})
    full = block.full or (block.full_every_hours is not None and await ldap_sync.full_check_due(
        site, timedelta(hours=block.full_every_hours)))
    scope = ldap_sync.scope_for(config.ldap, kinds=kinds, full=full, force=block.force)
    report = await ldap_sync.run(store, config.ldap, site, scope=scope, dry_run=False,
                                 max_deletions=block.max_deletions,
                                 concurrency=block.concurrency, author=author,
                                 command="daemon ldap_sync")
    if report.failed or report.skipped:
        first = (report.failed or report.skipped)[0]
        raise SyncFailed(f"ldap_sync {site}: {len(report.failed)} LDAP write(s) failed, "
                         f"{len(report.skipped)} skipped (SyncRun {report.run_id}; first: "
                         f"{first.command}: {first.detail})")
    return {"run_id": report.run_id, "full": full, "writes": report.plan.writes,
            "deletions": len(report.plan.deletions),
            "removals": len(report.plan.removals), "counts": report.plan.counts,
            "watermarked": report.watermarked, "redirtied": report.redirtied,
            "tally": report.tally()}


async def _sympa(store: Store, config: Config, block: SympaTask, site: str,
                 author: str) -> dict[str, Any]:
    from ..files import write_atomically
    from ..queries.exports import DEFAULT_SYMPA_IGNORE, sympa_emails, sympa_text

    ignore = DEFAULT_SYMPA_IGNORE if block.ignore is None else block.ignore
    emails = await sympa_emails(site, ignore)
    path = write_atomically(block.output_dir / f"{site}.txt", sympa_text(emails))
    return {"path": str(path), "emails": len(emails)}


async def _puppet(store: Store, config: Config, block: PuppetSyncTask, site: str,
                  author: str) -> dict[str, Any]:
    from ..sync.puppet import sync_puppet

    report = await sync_puppet(store, site, block.repo, push=block.push,
                               base=block.base_branch, author=author,
                               git_timeout=block.git_timeout_seconds)
    return {"run_id": report.run_id, "changed": report.changed,
            "committed": report.committed, "commit": report.commit, "pushed": report.pushed}


async def _cluster_monitor(store: Store, config: Config, block: ClusterMonitorTask, site: str,
                           author: str) -> dict[str, Any]:
    from ..adapters.sinfo import Sinfo
    from ..adapters.squeue import Squeue
    from ..sync.cluster_monitor import (
        attach_quota,
        judge,
        publish_jobs,
        read_snapshot,
        record_run,
    )

    started = utcnow()
    snap = await read_snapshot(site, sinfo=Sinfo(binary=block.sinfo,
                                                 timeout=block.timeout_seconds),
                               squeue=Squeue(binary=block.squeue, timeout=block.timeout_seconds))
    stalled = judge(snap, pending_over=timedelta(hours=block.pending_over_hours),
                    down_over=timedelta(hours=block.down_over_hours))
    await attach_quota(stalled, snap.read_at)
    run_id = await record_run(store, stalled, author=author, started_at=started)
    snapshot = await publish_jobs(store, snap)  # the "Me" page's jobs
    return {"run_id": run_id, "cluster": snap.cluster, "jobs": len(snap.jobs),
            "snapshot": snapshot,
            "stalled_jobs": [j.job_id for j in stalled.jobs],
            "down_nodes": [n.node for n in stalled.nodes]}


# -- registration ----------------------------------------------------------------------


def slurm_sync(self: Task, site: str) -> dict[str, Any]:
    """Reconcile a site's Slurm accounting (runs on ``slurm.<site>``)."""
    return run_task(self, "slurm_sync", site, _slurm)


def usage_collect(self: Task, site: str) -> dict[str, Any]:
    """Read a site's finished jobs from sacct into the usage ledger (on ``slurm.<site>``)."""
    return run_task(self, "usage_collect", site, _usage)


def ldap_sync(self: Task, site: str) -> dict[str, Any]:
    """Reconcile a site's LDAP users, groups and automount maps."""
    return run_task(self, "ldap_sync", site, _ldap)


def sympa_export(self: Task, site: str) -> dict[str, Any]:
    """Write the site's mailing-list addresses to ``<output_dir>/<site>.txt``."""
    return run_task(self, "sympa_export", site, _sympa)


def puppet_sync(self: Task, site: str) -> dict[str, Any]:
    """Commit the site's legacy puppet YAML and SSH keys (and push)."""
    return run_task(self, "puppet_sync", site, _puppet)


def hippo_process(self: Task) -> dict[str, Any]:
    """Handle HiPPO's pending account requests (and post their status back)."""
    from .jobs_people import hippo_process_body

    return run_task(self, "hippo_process", None, hippo_process_body)


def iam_sync(self: Task) -> dict[str, Any]:
    """Refresh every syncable user from UC Davis IAM (the offboarding state machine)."""
    from .jobs_people import iam_sync_body

    return run_task(self, "iam_sync", None, iam_sync_body)


def reap(self: Task) -> dict[str, Any]:
    """Deactivate offboarding users whose expiry has passed."""
    from .jobs_people import reap_body

    return run_task(self, "reap", None, reap_body)


def alert_digest(self: Task) -> dict[str, Any]:
    """Mail the operators about failed syncs, guard trips and stuck tasks."""
    from .jobs_people import alert_digest_body

    return run_task(self, "alert_digest", None, alert_digest_body)


def cluster_monitor(self: Task, site: str) -> dict[str, Any]:
    """Find stalled jobs and nodes down too long (on ``slurm.<site>``) for the digest."""
    return run_task(self, "cluster_monitor", site, _cluster_monitor)


def audit(self: Task) -> dict[str, Any]:
    """The weekly access audit: findings kept, the digest mailed and posted to chat."""
    from .jobs_audit import audit_body

    return run_task(self, "audit", None, audit_body)


def audit_slurm_state(self: Task, site: str, author: str, now: str) -> dict[str, Any]:
    """The weekly audit's Slurm read (on ``slurm.<site>``): this head node's slurmdbd,
    read with its own sacctmgr (the ``slurm_sync`` block), compared with the store; the
    findings go back to the hub's ``audit`` task, which waits for them. Not in ``TASKS``:
    the hub's audit sends it (no block, schedule or lease of its own; a dry run)."""
    from datetime import datetime

    from .config import site_queue
    from .jobs_audit import slurm_state_body

    queue = (self.request.delivery_info or {}).get("routing_key")
    try:
        if queue and queue != site_queue(site):
            raise WrongQueue(f"audit_slurm_state for {site} arrived on queue {queue!r}; it "
                             f"only runs from {site_queue(site)!r} (on the site's head node)")
        config = current_config(self.app)
        block = task_block(config, TASKS["slurm_sync"])  # this node's sacctmgr settings

        async def read() -> dict[str, Any]:
            store = await connect(config.mongo, autostart=False, long_running=True)
            try:
                return await slurm_state_body(store, config, block, site, author,  # type: ignore[arg-type]
                                              datetime.fromisoformat(now))
            finally:
                await store.close()

        outcome = asyncio.run(read())
    except CheetoError as exc:
        log.error("audit_slurm_state %s failed: %s: %s", site, type(exc).__name__,
                  exc.message)
        raise
    return {**outcome, "worker": self.request.hostname, "queue": queue}


def request_escalate(self: Task) -> dict[str, Any]:
    """Escalate requests past their SLA to the operator-alert digest (once each)."""
    from .jobs_requests import request_escalate_body

    return run_task(self, "request_escalate", None, request_escalate_body)


def retention(self: Task) -> dict[str, Any]:
    """The retention pass: TTL indexes set, bookkeeping past its days deleted in chunks."""
    return run_task(self, "retention", None, _retention)


async def _retention(store: Store, config: Config, block: Any, site: str,
                     author: str) -> dict[str, Any]:
    from ..operations.retention import prune

    return (await prune(store, config.retention)).as_dict()


FUNCTIONS = {"slurm_sync": slurm_sync, "usage_collect": usage_collect, "ldap_sync": ldap_sync,
             "sympa_export": sympa_export, "puppet_sync": puppet_sync,
             "hippo_process": hippo_process, "iam_sync": iam_sync, "reap": reap,
             "alert_digest": alert_digest, "request_escalate": request_escalate,
             "cluster_monitor": cluster_monitor, "audit": audit, "retention": retention}


def register_tasks(app: Celery) -> dict[str, Task]:
    """Register every task on ``app`` under its stable name; returns them by short name."""
    from celery.signals import before_task_publish

    from .jobs_audit import SLURM_STATE_TASK

    # every process that builds the app may publish (beat, ``daemon enqueue``, the hub's
    # audit): each stamps its sends; one receiver per process (dispatch_uid)
    before_task_publish.connect(stamp_sent_at, weak=False, dispatch_uid="cheeto-sent-at")
    registered = {name: app.task(name=TASKS[name].celery_name, bind=True,
                                 throws=(CheetoError,))(function)
                  for name, function in FUNCTIONS.items()}
    # the audit's per-site read: sent by the hub's audit to slurm.<site>, not enqueued
    registered["audit_slurm_state"] = app.task(name=SLURM_STATE_TASK, bind=True,
                                               throws=(CheetoError,))(audit_slurm_state)
    return registered
