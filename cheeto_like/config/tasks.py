"""``daemon.tasks``: one block per scheduled task (when it runs, at which sites, with which
options), so a task's settings are checked when the config loads, not when it fires."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator

from .base import Block, UserPath

_CRON_FIELD = re.compile(r"^[A-Za-z0-9*/,-]+$")
CRON_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")


def check_schedule(value: Any) -> int | float | str | None:
    """A number of seconds (> 0) or a 5-field crontab string; None = not scheduled.

    Only the shape of a crontab is checked here (config loading must stay cheap); the
    daemon parses each field when it builds the beat schedule.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError("a schedule is a number of seconds or a 5-field crontab string")
    if isinstance(value, int | float):
        if value <= 0:
            raise ValueError(f"an interval must be more than 0 seconds (got {value})")
        return value
    if isinstance(value, str):
        fields = value.split()
        if len(fields) != len(CRON_FIELDS) or not all(_CRON_FIELD.match(f) for f in fields):
            raise ValueError(f"{value!r} is not a 5-field crontab ({' '.join(CRON_FIELDS)}); "
                             "give a number for an interval in seconds")
        return " ".join(fields)
    raise ValueError("a schedule is a number of seconds or a 5-field crontab string")


class TaskBlock(Block):
    """What every daemon task block has. A task whose block is absent, null or has
    ``enabled: false`` is disabled: enqueue refuses it, beat does not schedule it and a
    queued run fails. A block without ``schedule`` runs only when enqueued."""

    enabled: bool = True  # false: the task is disabled (not scheduled, enqueue refuses it)
    # interval in seconds, or a 5-field crontab string; null: only when enqueued
    schedule: int | float | str | None = None

    @field_validator("schedule", mode="before")
    @classmethod
    def _schedule(cls, value: Any) -> int | float | str | None:
        return check_schedule(value)


class SiteTaskBlock(TaskBlock):
    """A per-site task: one run (and one beat entry) per site; ``sites`` overrides
    ``daemon.sites`` for this task."""

    sites: list[str] | None = None  # sites to run for (null: daemon.sites)


class SlurmSyncTask(SiteTaskBlock):
    """``cheeto.slurm_sync``: runs on the site's head node (queue ``slurm.<site>``)."""

    apply: bool = True  # apply the plan to Slurm (false: plan and record only)
    sudo: bool = False  # run sacctmgr through sudo
    max_deletions: int | None = Field(default=50, ge=0)  # null: no cap
    timeout_seconds: float = Field(default=60.0, gt=0)  # each sacctmgr call
    sacctmgr: str = Field(default="sacctmgr", min_length=1)  # name on PATH, or a path


class UsageCollectTask(SiteTaskBlock):
    """``cheeto.usage_collect``: read finished jobs from sacct into the usage ledger; runs
    on the site's head node (queue ``slurm.<site>``)."""

    sacct: str = Field(default="sacct", min_length=1)  # name on PATH, or a path
    timeout_seconds: float = Field(default=300.0, gt=0)  # seconds each sacct call may take
    notify: bool = True  # then send the quota threshold notices (needs the mail section)


class LDAPSyncTask(SiteTaskBlock):
    """``cheeto.ldap_sync``: a whole-site LDAP sync (the ``ldap:`` section says where)."""

    full: bool = False  # check every record, not only those changed since the last run
    # with ``full: false``: run a full check when the last full one at the site is older
    # than this (incremental runs skip hand-made drift in LDAP; this bounds how long it
    # can last without a second schedule). null: never
    full_every_hours: float | None = Field(default=24.0, gt=0)
    prune: bool = True  # also delete entries the store no longer has
    force: bool = False  # rewrite entries even when they match
    max_deletions: int | None = Field(default=50, ge=0)  # null: no cap
    concurrency: int = Field(default=8, ge=1, le=64)  # LDAP writes in flight


class SympaTask(SiteTaskBlock):
    """``cheeto.sympa_export``: ``<output_dir>/<site>.txt``, written atomically."""

    output_dir: UserPath
    ignore: list[str] | None = None  # default: the export's built-in ignore list


class PuppetSyncTask(SiteTaskBlock):
    """``cheeto.puppet_sync``: commit the site's legacy YAML and keys to a puppet clone."""

    repo: UserPath
    # branch of the puppet clone to commit on
    base_branch: str = Field(default="main", min_length=1)
    push: bool = True  # push the commit to the clone's remote
    git_timeout_seconds: float = Field(default=60.0, gt=0)  # seconds each git command may take


class HippoTask(TaskBlock):
    """``cheeto.hippo_process`` (block ``hippo``; the ``hippo`` section says where)."""

    post_back: bool = True  # tell HiPPO each event's final status
    notify: bool = True  # send the account e-mails (needs the mail section)


class IAMSyncTask(TaskBlock):
    """``cheeto.iam_sync`` (block ``iam_sync``; the ``ucdiam`` section says where)."""

    # users synced at once (IAM conversations in flight)
    concurrency: int = Field(default=1, ge=1, le=64)
    types: list[Literal["user", "admin"]] | None = None  # default: both
    # sync at most this many users per run (null: all)
    max_users: int | None = Field(default=None, ge=1)
    include_inactive: bool = False  # also query inactive/disabled users
    notify: bool = True  # warn offboarding users, tell restored ones


class ReapTask(TaskBlock):
    """``cheeto.reap`` (block ``reap``): deactivate offboarded users past their expiry."""

    notify: bool = True  # tell deactivated users


class RetentionTask(TaskBlock):
    """``cheeto.retention`` (block ``retention``): the retention pass (TTL indexes, then
    what is past the ``retention`` section's days deleted in chunks), e.g. daily."""


class AlertDigestTask(TaskBlock):
    """``cheeto.alert_digest`` (block ``alerts``; the ``alerts`` section says to whom)."""


class ClusterMonitorTask(SiteTaskBlock):
    """``cheeto.cluster_monitor``: stalled jobs and nodes down too long, on the site's head
    node (queue ``slurm.<site>``); each new finding reaches the operator digest once."""

    # report jobs pending longer than this many hours
    pending_over_hours: float = Field(default=24.0, ge=0)
    # report nodes down or drained longer than this many hours
    down_over_hours: float = Field(default=1.0, ge=0)
    sinfo: str = Field(default="sinfo", min_length=1)  # name on PATH, or a path
    squeue: str = Field(default="squeue", min_length=1)  # squeue to run: a name on PATH, or a path
    timeout_seconds: float = Field(default=30.0, gt=0)  # seconds each sinfo or squeue call may take


class AuditTask(TaskBlock):
    """``cheeto.audit`` (block ``audit``): the weekly access audit, its digest mailed to
    ``audit.to`` and posted to ``audit.webhook_url`` (the ``audit`` section)."""

    sites: list[str] | None = None  # default: every site
    # compare slurmdbd: each site's head-node worker (queue slurm.<site>) reads it with
    # its own sacctmgr (its slurm_sync block) and answers within site_timeout_seconds;
    # a site that does not is an audit_incomplete finding
    slurm: bool = True
    # seconds to wait for each site worker's slurmdbd reading
    site_timeout_seconds: float = Field(default=900.0, gt=0, le=6 * 3600)
    # unused by the daemon since the site workers read slurmdbd (kept so configs load)
    sacctmgr: str = Field(default="sacctmgr", min_length=1)
    ldap: bool = True  # compare LDAP (when the ldap section exists)


class RequestEscalateTask(TaskBlock):
    """``cheeto.request_escalate`` (block ``requests``): mark requests past their SLA as
    escalated, once each, so the next operator-alert digest lists them."""


class DaemonTasks(Block):
    """One block per task; absent means disabled."""

    slurm_sync: SlurmSyncTask | None = None  # the slurm_sync task
    usage_collect: UsageCollectTask | None = None  # the usage_collect task
    ldap_sync: LDAPSyncTask | None = None  # the ldap_sync task
    sympa: SympaTask | None = None  # the sympa_export task
    puppet_sync: PuppetSyncTask | None = None  # the puppet_sync task
    hippo: HippoTask | None = None  # the hippo_process task
    iam_sync: IAMSyncTask | None = None  # the iam_sync task
    reap: ReapTask | None = None  # the reap task
    alerts: AlertDigestTask | None = None  # the alert_digest task
    requests: RequestEscalateTask | None = None  # the request_escalate task
    cluster_monitor: ClusterMonitorTask | None = None  # the cluster_monitor task
    audit: AuditTask | None = None  # the audit task
    retention: RetentionTask | None = None  # the retention task
