"""Every metric cheeto exports, as data: the one list the code, the alert rules and the
Grafana dashboard agree on (``tests/metrics`` checks the last two against it).

Why a table rather than ``Counter(...)`` calls spread over the modules: importing
``prometheus_client`` costs about 75 ms, and the CLI must start fast; the table is plain
data, the facade (``cheeto_like.metrics``) creates a family on its first use, and only
in a process that turned metrics on (``activate``). Labels carry bounded values only
(targets, sites, tasks, queues, outcomes, route templates): never a user or group name.

``collected`` families are not recorded by calls: a collector computes them when
Prometheus scrapes (from the store, the broker or the quota agent's files).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["counter", "gauge", "histogram"]

# seconds: a sacctmgr call to a full LDAP sync
SYNC_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
TASK_BUCKETS = SYNC_BUCKETS
QUEUE_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)
API_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
STORE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5)


@dataclass(frozen=True)
class Spec:
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()
    # a gauge set in several processes of one server (prefork children): how they add up
    multiprocess_mode: str = "mostrecent"
    collected: bool = False  # computed at scrape time, never recorded by a call


SPECS: dict[str, Spec] = {
    # -- syncs (recorded where a run ends: sync/runs.py) --------------------------------
    "cheeto_sync_runs_total": Spec(
        "counter", "Sync runs that ended, by outcome (ok, failed, refused, crashed)",
        ("target", "site", "mode", "outcome")),
    "cheeto_sync_duration_seconds": Spec(
        "histogram", "Wall time of a sync run", ("target", "site", "mode"), SYNC_BUCKETS),
    "cheeto_sync_plan_changes": Spec(
        "gauge", "Changes the last run planned, by kind (add, modify, remove)",
        ("target", "site", "kind")),
    "cheeto_sync_commands_total": Spec(
        "counter", "Planned changes by what became of them (applied, failed, skipped)",
        ("target", "site", "outcome")),
    "cheeto_sync_drift_items": Spec(
        "gauge", "Differences the last run found between the store and the target",
        ("target", "site")),
    "cheeto_sync_deletions_total": Spec(
        "counter", "Removals applied to a target", ("target", "site")),
    "cheeto_sync_guard_trips_total": Spec(
        "counter", "Runs a guard stopped (max_deletions, daily_budget, ...)",
        ("target", "site", "guard")),
    "cheeto_sync_last_success_timestamp_seconds": Spec(
        "gauge", "Unix time the last successful run of a target ended (from the store)",
        ("target", "site"), collected=True),
    "cheeto_sync_period_seconds": Spec(
        "gauge", "How often the daemon's schedule runs a target's sync (from the config), "
        "for the staleness alert", ("target", "site"), collected=True),
    # -- tasks (daemon/tasks.py run_task) ------------------------------------------------
    "cheeto_task_runs_total": Spec(
        "counter", "Task runs by outcome (ok, skipped, failed)", ("task", "site", "outcome")),
    "cheeto_task_duration_seconds": Spec(
        "histogram", "Wall time of a task run", ("task",), TASK_BUCKETS),
    "cheeto_task_queue_seconds": Spec(
        "histogram", "Time a task message waited between its send and its start",
        ("task",), QUEUE_BUCKETS),
    "cheeto_queue_messages": Spec(
        "gauge", "Messages ready in a broker queue", ("queue",), collected=True),
    # -- API and sign-in -----------------------------------------------------------------
    "cheeto_api_requests_total": Spec(
        "counter", "API and dashboard requests by route template and status",
        ("method", "route", "status")),
    "cheeto_api_request_duration_seconds": Spec(
        "histogram", "API and dashboard request latency by route template",
        ("method", "route"), API_BUCKETS),
    "cheeto_auth_signin_failures_total": Spec(
        "counter", "Failed sign-ins and rejected credentials (password, api_key, token, "
        "session: a dashboard cookie refused for anything but its expiry)",
        ("method",)),
    "cheeto_auth_limiter_refusals_total": Spec(
        "counter", "Sign-ins the rate limiter refused, by which limit held (pair, user, address)",
        ("scope",)),
    # -- quotas --------------------------------------------------------------------------
    "cheeto_quota_subjects_blocked": Spec(
        "gauge", "Users and accounts a site blocks for quota (set by the Slurm sync)",
        ("site", "kind")),
    "cheeto_quota_subjects_over_threshold": Spec(
        "gauge", "Quota subjects past each notice threshold (percent)",
        ("site", "threshold")),
    "cheeto_quota_submit_refusals_total": Spec(
        "counter", "Jobs the submit-time quota check refused, by quota kind",
        ("site", "quota"), collected=True),
    "cheeto_quota_table_age_seconds": Spec(
        "gauge", "Age of the quota table the submit check reads", ("site",), collected=True),
    # -- store ---------------------------------------------------------------------------
    "cheeto_store_command_duration_seconds": Spec(
        "histogram", "Store command latency by command name", ("command",), STORE_BUCKETS),
    "cheeto_store_transaction_retries_total": Spec(
        "counter", "Transactions retried (transient error, unknown commit result)",
        ("reason",)),
    "cheeto_store_write_conflicts_total": Spec(
        "counter", "Write conflicts the store reported (code 112)"),
    # -- usage ---------------------------------------------------------------------------
    "cheeto_usage_ingest_rows_total": Spec(
        "counter", "Job rows usage collection read, by what they did (inserted, updated, "
        "unchanged)", ("site", "outcome")),
    "cheeto_usage_lag_seconds": Spec(
        "gauge", "Now minus the newest job end collected into the ledger", ("site",),
        collected=True),
    # -- process -------------------------------------------------------------------------
    "cheeto_build_info": Spec(
        "gauge", "Always 1: the version and role of the process serving the metrics",
        ("version", "role"), collected=True),
}


def exposed_names(name: str) -> tuple[str, ...]:
    """The sample names a family shows in Prometheus (what a query can name)."""
    spec = SPECS[name]
    if spec.kind == "histogram":
        return (f"{name}_bucket", f"{name}_sum", f"{name}_count")
    return (name,)


def all_exposed_names() -> set[str]:
    return {sample for name in SPECS for sample in exposed_names(name)}
