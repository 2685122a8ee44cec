"""What a sync run's end tells Prometheus (issue 30): one call where each target's run
ends (``record_end``), and the Slurm sync's quota blocks (``record_quota_blocks``); and
the log context of a run (``logged_run``: its id and site on every line it logs).

Why at the run's end and from the ``SyncRun`` itself: every target (Slurm, LDAP, puppet)
already fills the same document (status, duration, counts) in its ``finally``, so one
function reads it the same way for all of them, and a run that raised is recorded too.
Why not from the store afterwards: the worker that ran the sync is the process whose
``/metrics`` port serves sync figures (its pool children's values, aggregated), and the
items of an LDAP run are stored only in part (``MAX_STORED_OK_ITEMS``): the outcomes
are counted from the run's full list in memory.

Every call is a no-op in a process that did not turn metrics on (the CLI), and checks
that first, so a ``cheeto ng slurm sync`` pays nothing for it. A failure to record is
logged and swallowed: a metric must never fail a sync whose work is done.

Label values are bounded: ``mode`` is ``apply``/``dry_run``; ``outcome`` of a run is
``ok``, ``failed``, ``refused`` (a guard stopped it, or another apply held the lease)
or ``crashed`` (closed by ``runs.close_stale_runs``); a plan's kinds fold onto ``add``,
``modify`` and ``remove``; an item's outcome onto ``applied``, ``failed`` and
``skipped``; a guard is ``max_deletions`` or ``daily_budget``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from .. import metrics
from ..errors import GuardTripped
from ..models import SyncRun
from ..models.fields import new_id
from ..models.sync import SyncItem

log = logging.getLogger(__name__)

CHANGE_KINDS = ("add", "modify", "remove")
COMMAND_OUTCOMES = ("applied", "failed", "skipped")
# a plan batch's kind (Slurm: add/modify/default/coordinator/delete; LDAP: add/modify/
# recreate/delete) -> one of CHANGE_KINDS; coordinators go by the batch's label
_BATCH_KIND = {"add": "add", "modify": "modify", "default": "modify",
               "recreate": "modify", "delete": "remove"}
# an item's outcome -> what became of the command; "planned" (a dry run's, or never
# reached) is not a command outcome; "started" at the end = cancelled mid-command,
# whose effect is unknown: counted failed; "pending" (retried next run): skipped
_ITEM_OUTCOME = {"ok": "applied", "failed": "failed", "started": "failed",
                 "skipped": "skipped", "pending": "skipped"}
DEFAULT_GUARD = "max_deletions"


@contextmanager
def logged_run(site: str) -> Iterator[str]:
    """A new ``SyncRun`` id, and every log line inside carrying it and the site
    (``logs.context``; a task's context around it keeps its ``task``)."""
    from .. import logs

    run_id = new_id()
    with logs.context(run_id=run_id, site=site):
        yield run_id


def mode_of(apply: bool) -> str:
    return "apply" if apply else "dry_run"


def run_outcome(status: str, extra: Mapping[str, Any] | None = None) -> str:
    """The run's ``outcome`` label from its stored status."""
    if status == "aborted" or (extra or {}).get("busy"):
        return "refused"
    if status in ("ok", "crashed"):
        return status
    return "failed"


def plan_changes(plan: Any) -> dict[str, int]:
    """Entities a plan changes per ``CHANGE_KINDS`` (a Slurm or LDAP ``Plan``: batches
    with a ``kind`` and either ``commands`` with ``targets`` or ``changes``)."""
    found = dict.fromkeys(CHANGE_KINDS, 0)
    for batch in getattr(plan, "batches", ()):
        if batch.kind == "coordinator":
            kind = "remove" if batch.label.startswith("remove") else "add"
        else:
            kind = _BATCH_KIND.get(batch.kind, "modify")
        changes = getattr(batch, "changes", None)
        found[kind] += len(changes) if changes is not None else \
            sum(len(command.targets) for command in batch.commands)
    return found


def command_outcomes(items: Iterable[SyncItem]) -> dict[str, int]:
    found = dict.fromkeys(COMMAND_OUTCOMES, 0)
    for item in items:
        outcome = _ITEM_OUTCOME.get(item.outcome)
        if outcome is not None:
            found[outcome] += 1
    return found


def guard_of(exc: BaseException | None) -> str:
    """Which guard refused the run: ``GuardTripped.guard`` when the raiser named it
    (``runs.check_budget``: ``daily_budget``), else the per-run cap."""
    return str(getattr(exc, "guard", None) or DEFAULT_GUARD)


def record_end(run: SyncRun, items: Sequence[SyncItem] = (), *, plan: Any = None,
               changes: Mapping[str, int] | None = None, removed: int | None = None) -> None:
    """Record an ended run: call it in the run's ``finally`` (before its save, so a store
    that went away does not lose the figures), with the run's full item list and its
    plan (``plan``) or, for a target without one, its ``changes`` per kind.

    The exception in flight, if any, is read with ``sys.exc_info()`` (a ``finally``
    sees it): a ``GuardTripped`` says which guard refused the run."""
    if not metrics.active():
        return
    try:
        _record(run, items, plan, changes, removed, sys.exc_info()[1])
    except Exception:  # a metric never fails a sync
        log.exception("recording the metrics of sync run %s failed", run.id)


def _record(run: SyncRun, items: Sequence[SyncItem], plan: Any,
            changes: Mapping[str, int] | None, removed: int | None,
            exc: BaseException | None) -> None:
    target, site, mode = run.target, run.site, mode_of(run.apply)
    metrics.inc("cheeto_sync_runs_total", target=target, site=site, mode=mode,
                outcome=run_outcome(run.status, run.extra))
    if run.duration_s is not None:
        metrics.observe("cheeto_sync_duration_seconds", run.duration_s, target=target,
                        site=site, mode=mode)
    if run.status == "aborted":
        metrics.inc("cheeto_sync_guard_trips_total", target=target, site=site,
                    guard=guard_of(exc if isinstance(exc, GuardTripped) else None))
    if plan is not None:
        changes = plan_changes(plan)
    if changes is not None:
        for kind in CHANGE_KINDS:
            metrics.set_gauge("cheeto_sync_plan_changes", changes.get(kind, 0),
                              target=target, site=site, kind=kind)
        metrics.set_gauge("cheeto_sync_drift_items", sum(changes.values()), target=target,
                          site=site)
    for outcome, n in command_outcomes(items).items():
        if n:
            metrics.inc("cheeto_sync_commands_total", n, target=target, site=site,
                        outcome=outcome)
    if run.apply:
        gone = removed if removed is not None else \
            sum(i.removals for i in items if i.outcome == "ok")
        if gone:
            metrics.inc("cheeto_sync_deletions_total", gone, target=target, site=site)


def record_crashed(doc: Mapping[str, Any]) -> None:
    """A run ``close_stale_runs`` closed as ``crashed`` (its process died): counted by
    whoever closed it, since the dead process never could."""
    if not metrics.active():
        return
    try:
        metrics.inc("cheeto_sync_runs_total", target=str(doc.get("target")),
                    site=str(doc.get("site")), mode=mode_of(bool(doc.get("apply"))),
                    outcome="crashed")
    except Exception:
        log.exception("recording the crashed sync run %s failed", doc.get("_id"))


def record_quota_blocks(site: str, state: Any) -> None:
    """``cheeto_quota_subjects_blocked{site,kind}`` from a desired Slurm state: users
    with an association, and accounts, whose GrpTRESMins holds a block (``cpu`` or
    ``gres/gpu`` at 0: ``sync.slurm.quota``). One pass over the associations, and only
    in a process with metrics on."""
    if not metrics.active():
        return
    from .slurm.quota import BLOCK_KEYS

    try:
        users = {key.user for key, assoc in state.associations.items()
                 if assoc.grp_tres_mins and _blocked(assoc.grp_tres_mins, BLOCK_KEYS)}
        accounts = [name for name, account in state.accounts.items()
                    if account.grp_tres_mins and _blocked(account.grp_tres_mins, BLOCK_KEYS)]
        metrics.set_gauge("cheeto_quota_subjects_blocked", len(users), site=site, kind="user")
        metrics.set_gauge("cheeto_quota_subjects_blocked", len(accounts), site=site,
                          kind="account")
    except Exception:
        log.exception("recording the quota blocks of %s failed", site)


def _blocked(values: Iterable[tuple[str, int]], keys: frozenset[str]) -> bool:
    return any(key in keys and value == 0 for key, value in values)
