"""The ``retention`` section: how long bookkeeping collections keep their documents.

Scheduled syncs write a ``SyncRun`` each (1M a year at 10 sites), audits an ``AuditRun``,
quota notices one per threshold and period, Celery a result per task: nothing deleted
them. Each setting is a number of days (``null``: keep forever) applied as a TTL index
(``expireAfterSeconds`` on a datetime field) by ``sync.retention`` and enforced again in
bounded chunks by its pass (``cheeto db prune-retention``, the daemon's ``retention``
task). History is the record of who changed what: kept unless ``history_days`` is set.
"""

from __future__ import annotations

from pydantic import Field

from .base import Block

MAX_DAYS = 36_500  # a century: anything longer is "keep", and a TTL in seconds stays small


class RetentionConfig(Block):
    """Days each kind of bookkeeping is kept (``null``: forever)."""

    # sync runs, their items and steps: by the run's ``started_at``
    sync_runs_days: int | None = Field(default=90, ge=1, le=MAX_DAYS)
    # audit runs and their findings: by the run's ``started_at``; the next audit compares
    # with the previous one, so keep at least two audit intervals
    audit_runs_days: int | None = Field(default=365, ge=1, le=MAX_DAYS)
    # quota notices: counted from the *end* of the period they were sent in (a notice
    # deleted inside its period would be sent again); a period that never ends (quota
    # period ``none``) keeps its notices
    quota_notices_days: int | None = Field(default=400, ge=1, le=MAX_DAYS)
    # Celery's results (``celery_taskmeta``): by ``date_done``
    task_results_days: int | None = Field(default=7, ge=1, le=MAX_DAYS)
    # History: kept forever unless set
    history_days: int | None = Field(default=None, ge=1, le=MAX_DAYS)
