"""One ``AuditRun`` per access audit: its findings, so the next audit can say what is new
and what was resolved.

Like ``SyncRun`` it is bookkeeping written by the audit itself, not an operation with a
History row: a weekly audit would otherwise grow History with copies of its findings.
``scope`` is the sites the audit looked at (``*`` for all), and only a run of the same
scope is "the previous audit" of another.

The findings and the resolved ones are ``AuditFinding`` documents (``audit_findings``, one
per finding), not lists on the run: a large site's audit can list more than fits in one
16 MiB document (issue 24). Runs from before keep theirs in ``findings``/``resolved``;
``sync.audit.run_findings`` reads either.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from beanie import Document
from pydantic import ConfigDict, Field

from .base import index
from .fields import new_id, utcnow


class AuditRun(Document):
    id: str = Field(default_factory=new_id)  # type: ignore[assignment]
    scope: str  # "*" or the site names, comma-separated
    author: str | None = None
    started_at: datetime = Field(default_factory=utcnow)
    started_ms: int = 0  # epoch milliseconds: what "the previous audit" is sorted by
    finished_at: datetime | None = None
    counts: dict[str, int] = Field(default_factory=dict)
    sources: dict[str, str] = Field(default_factory=dict)  # source -> "ok" or the error
    delivered: dict[str, str] = Field(default_factory=dict)  # email/webhook -> outcome

    model_config = ConfigDict(defer_build=True)  # built on first use (models/base.py)

    class Settings:
        name = "audit_runs"
        indexes = [index("scope", "-started_ms"), index("-started_ms")]


class AuditFinding(Document):
    """One finding of an audit run (``Finding.as_dict()`` in ``data``): ``_id`` is
    ``<run id>:<f|r>:<index>``; ``list`` says whether it is one of the run's findings
    (``findings``) or one the run found resolved (``resolved``). ``started_at`` is the
    run's, so retention expires them with the run."""

    id: str  # type: ignore[assignment]
    run: str
    list: Literal["findings", "resolved"]
    index: int
    started_at: datetime
    data: dict[str, Any] = Field(default_factory=dict)

    model_config = ConfigDict(defer_build=True)  # built on first use (models/base.py)

    class Settings:
        name = "audit_findings"
        indexes = [index("run")]
