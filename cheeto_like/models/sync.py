"""Bookkeeping for outward syncs: one ``SyncRun`` per run, one ``SyncRunItem`` per item of
its plan, one ``SyncLease`` per target, and a ``SyncStep`` per command a running apply
has started.

A run stores its plan counts; its items' outcomes, which is what drift reports and "why
can't alice submit?" read, are documents of their own (``sync_items``): a first apply of
150k associations made a 15-18 MB ``items`` list, past MongoDB's 16 MiB document limit
(issue 24). Read them through ``queries.sync_runs.run_items``/``live_items``. The lease
makes sure that at most one run per (target, site) is in flight, whichever worker or
admin started it. While an apply runs, each command's progress lives in its own small
``SyncStep`` (``sync.runs.RunJournal``): rewriting the run's whole item list before
every command made an apply quadratic in its plan (issue 18). The steps are folded into
the run's items when it ends or is closed as crashed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from beanie import Document
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .base import index
from .fields import new_id, utcnow


def epoch_ms(when: datetime) -> int:
    return int(when.timestamp() * 1000)


Outcome = Literal["planned", "started", "ok", "failed", "pending", "skipped"]


class SyncItem(BaseModel):
    """The outcome of one planned change: an sacctmgr command (which may cover several
    entities, listed in ``targets``), an LDAP entry, a file, …"""

    batch: str
    command: str = ""
    targets: list[str] = Field(default_factory=list)
    # planned -> started (written before the command runs) -> ok | failed | pending
    # (refused for a reason that clears by itself, e.g. running jobs; retried next run);
    # skipped: never attempted. A crashed run keeps ``started`` on the command in flight.
    outcome: Outcome = "planned"
    detail: str = ""
    removals: int = 0  # how many removals (deletions, dropped values) this change makes


class SyncRun(Document):
    id: str = Field(default_factory=new_id)  # type: ignore[assignment]
    target: str  # slurm, ldap, puppet, sympa, ...
    site: str
    author: str | None = None
    apply: bool = False
    started_at: datetime = Field(default_factory=utcnow)
    finished_at: datetime | None = None
    duration_s: float | None = None
    # crashed: found ``running`` after its holder died or lost the lease (sync.runs)
    status: Literal["running", "ok", "failed", "aborted", "crashed"] = "running"
    counts: dict[str, int] = Field(default_factory=dict)
    # no ``items``: they are ``SyncRunItem`` documents (a run document stays small
    # whatever the plan's size); runs from before keep theirs, read by ``run_items``
    error: str | None = None
    extra: dict[str, Any] = Field(default_factory=dict)
    holder: str | None = None  # host:pid:nonce:identity of its process (sync.lease)
    lease: str | None = None  # the lease (``<target>:<site>``) it ran under, if any

    model_config = ConfigDict(defer_build=True)  # built on first use (models/base.py)

    class Settings:
        name = "sync_runs"
        # (target, site, -started_at): the last run, the budget's window; (site,
        # -started_at): the runs pages; finished_at: the alert digest's window. The
        # single-field ``started_at`` index is retention's (a TTL index: sync.retention)
        indexes = [index("target", "site", "-started_at"), index("status"),
                   index("site", "-started_at"), index("finished_at")]


class SyncRunItem(Document):
    """One item of a run (``SyncItem``'s fields): ``_id`` is ``<run id>:<index>``, the
    index in the run's list. Written in bounded bulk batches (``sync.runs.RunJournal``):
    inserted once, then only ``outcome``/``detail`` ``$set`` by ``_id``. ``started_at`` is
    the run's, so retention expires a run's items with it (MongoDB's TTL monitor deletes
    no related documents)."""

    id: str  # type: ignore[assignment]
    run: str
    index: int
    started_at: datetime
    batch: str
    command: str = ""
    targets: list[str] = Field(default_factory=list)
    outcome: Outcome = "planned"
    detail: str = ""
    removals: int = 0

    model_config = ConfigDict(defer_build=True)  # built on first use (models/base.py)

    class Settings:
        name = "sync_items"
        indexes = [index("run")]


class SyncStep(Document):
    """The write-ahead record of one started item of a ``running`` run: ``_id`` is
    ``<run id>:<index in the run's items>``. Only ``outcome`` and ``detail`` change while a
    run applies, so each step writes a few dozen bytes whatever the plan's size; the
    run's ``SyncRunItem`` documents hold the rest (``queries.sync_runs.live_items``
    overlays the two)."""

    id: str  # type: ignore[assignment]
    run: str
    index: int
    outcome: Outcome
    detail: str = ""

    model_config = ConfigDict(defer_build=True)  # built on first use (models/base.py)

    class Settings:
        name = "sync_steps"
        indexes = [index("run")]


class SyncLease(Document):
    """``_id`` is ``<target>:<site>``; a lease past ``expires_ms`` by the store's clock
    may be taken over (``sync.lease``).

    ``expires_ms`` (epoch milliseconds of the store's clock at the last take or renewal,
    plus the TTL) is what a takeover's, a renewal's and a fence's filters compare: the
    embedded store does not compare a datetime written by a replace reliably
    (tests/test_store_conformance*.py), integers it does. ``expires_at`` is the same time
    for people; ``acquired_at`` when it was taken (kept by renewals, for the alert
    digest's "held for hours"); ``fences`` counts the commands it fenced since the last
    renewal (``Held.fence``, an ``$inc``)."""

    id: str  # type: ignore[assignment]
    holder: str  # host:pid:nonce:identity (sync.lease.holder_name)
    acquired_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime
    expires_ms: int = 0
    fences: int = 0

    @model_validator(mode="after")
    def _expiry_in_ms(self) -> SyncLease:
        if not self.expires_ms:
            self.expires_ms = epoch_ms(self.expires_at)
        return self

    model_config = ConfigDict(defer_build=True)  # built on first use (models/base.py)

    class Settings:
        name = "sync_leases"
