"""One ``AuditRun`` per access audit: its findings, so the next audit can say what is new
and what was resolved.

Like ``SyncRun`` it is bookkeeping written by the audit itself, not an operation with a
History row: a weekly audit would otherwise grow History with copies of its findings.
``scope`` is the sites the audit looked at (``*`` for all), and only a run of the same
scope is "the previous audit" of another.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from beanie import Document
from pydantic import Field

from .base import index
from .fields import new_id, utcnow


class AuditRun(Document):
    id: str = Field(default_factory=new_id)  # type: ignore[assignment]
    scope: str  # "*" or the site names, comma-separated
    author: str | None = None
    started_at: datetime = Field(default_factory=utcnow)
    started_ms: int = 0  # epoch milliseconds: what "the previous audit" is sorted by
    finished_at: datetime | None = None
    findings: list[dict[str, Any]] = Field(default_factory=list)
    resolved: list[dict[str, Any]] = Field(default_factory=list)
    counts: dict[str, int] = Field(default_factory=dict)
    sources: dict[str, str] = Field(default_factory=dict)  # source -> "ok" or the error
    delivered: dict[str, str] = Field(default_factory=dict)  # email/webhook -> outcome

    class Settings:
        name = "audit_runs"
        indexes = [index("scope", "-started_ms")]
