"""Bookkeeping for outward syncs: one ``SyncRun`` per run, one ``SyncLease`` per target.

A run stores its plan counts and every item's outcome, which is what drift reports and
"why can't alice submit?" read. The lease makes sure that at most one run per
(target, site) is in flight, whichever worker or admin started it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from beanie import Document
from pydantic import BaseModel, Field

from .base import index
from .fields import new_id, utcnow


class SyncItem(BaseModel):
    """The outcome of one planned change: an sacctmgr command (which may cover several
    entities, listed in ``targets``), an LDAP entry, a file, …"""

    batch: str
    command: str = ""
    targets: list[str] = Field(default_factory=list)
    outcome: Literal["planned", "ok", "failed", "skipped"] = "planned"
    detail: str = ""


class SyncRun(Document):
    id: str = Field(default_factory=new_id)  # type: ignore[assignment]
    target: str  # slurm, ldap, puppet, sympa, ...
    site: str
    author: str | None = None
    apply: bool = False
    started_at: datetime = Field(default_factory=utcnow)
    finished_at: datetime | None = None
    duration_s: float | None = None
    status: Literal["running", "ok", "failed", "aborted"] = "running"
    counts: dict[str, int] = Field(default_factory=dict)
    items: list[SyncItem] = Field(default_factory=list)
    error: str | None = None
    extra: dict[str, Any] = Field(default_factory=dict)

    class Settings:
        name = "sync_runs"
        indexes = [index("target", "site", "-started_at")]


class SyncLease(Document):
    """``_id`` is ``<target>:<site>``; a lease past ``expires_at`` may be taken over."""

    id: str  # type: ignore[assignment]
    holder: str
    acquired_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime

    class Settings:
        name = "sync_leases"
