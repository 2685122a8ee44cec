"""Quota threshold notices: one e-mail per threshold per period per subject.

When a user's or an account's usage passes a threshold (75/90/100 % by default) of its
CPU or GPU quota or of its budget (money, issue 28), the user (or the account's sponsors
at the site) get one notice. A
``QuotaNotice`` per (subject, resource, threshold, period start) remembers it was sent,
so the next run is quiet; a new period starts over. A jump past several thresholds at
once sends one e-mail (for the highest) and records them all. A notice that could not be
sent is not recorded, so the next run tries again; the e-mail itself is in History like
every other (``operations.notify``). Percent here is of *used* minutes (running jobs are
charged when they end).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .. import metrics
from ..config import Config
from ..errors import ConfigError
from ..models import GroupMembership, User
from ..models.fields import utcnow
from ..models.quota import QuotaNotice, notice_key
from ..queries.quota import QuotaStatus, ResourceStatus, quota_status
from ..store import Store
from .notify import Notifier, notifier_from_config

DEFAULT_THRESHOLDS: tuple[int, ...] = (75, 90, 100)


@dataclass
class Due:
    status: QuotaStatus
    resource: str
    usage: ResourceStatus
    thresholds: list[int]  # passed and not yet noticed, ascending

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.status.kind, "name": self.status.name,
                "resource": self.resource, "threshold": self.thresholds[-1],
                "percent": self.usage.percent}


@dataclass
class NoticeReport:
    due: list[Due]
    sent: list[dict[str, Any]] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)
    dry_run: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"due": [d.as_dict() for d in self.due], "sent": self.sent,
                "failed": self.failed, "dry_run": self.dry_run}


async def due_notices(site: str, now: datetime,
                      thresholds: Sequence[int] = DEFAULT_THRESHOLDS) -> list[Due]:
    """Every (subject, resource) past a threshold it has not been told about this period."""
    noticed = {n.key for n in await QuotaNotice.find({"site": site}).to_list()}
    due = []
    past: dict[int, set[tuple[str, str]]] = {t: set() for t in thresholds}  # the gauge's
    for status in await quota_status(site, now):
        for resource, usage in status.resources():
            if usage.quota is None or usage.percent is None:
                continue
            for t in thresholds:
                if usage.percent >= t:
                    past[t].add((status.kind, status.name))
            new = [t for t in sorted(thresholds) if usage.percent >= t and notice_key(
                site, status.kind, status.name, resource, t, status.start) not in noticed]
            if new:
                due.append(Due(status, resource, usage, new))
    for t, subjects in past.items():  # subjects (users, accounts) past each threshold
        metrics.set_gauge("cheeto_quota_subjects_over_threshold", len(subjects), site=site,
                          threshold=str(t))
    return due


async def _recipients(site: str, due: list[Due]) -> dict[tuple[str, str], list[str]]:
    """E-mail addresses: the user's own, or the account's sponsors at the site (two
    queries whatever the number of subjects)."""
    accounts = {d.status.name for d in due if d.status.kind == "account"}
    sponsors: dict[str, list[str]] = {}
    if accounts:
        for m in await GroupMembership.find({"site": site}).to_list():
            if m.group in accounts and "sponsor" in m.roles:
                sponsors.setdefault(m.group, []).append(m.user)
    names = {d.status.name for d in due if d.status.kind == "user"}
    names |= {u for users in sponsors.values() for u in users}
    emails = {u.name: u.email for u in await User.find({"name": {"$in": sorted(names)}})
              .to_list()} if names else {}
    out: dict[tuple[str, str], list[str]] = {}
    for d in due:
        key = (d.status.kind, d.status.name)
        people = [d.status.name] if d.status.kind == "user" else sponsors.get(d.status.name, [])
        out[key] = [emails[p] for p in people if emails.get(p)]
    return out


def _money_line(usage: ResourceStatus, currency: str) -> str:
    return f"{usage.used:.2f} of {usage.quota or 0:.2f} {currency}"


async def send_quota_notices(store: Store, author: str | None, config: Config, site: str, *,
                             now: datetime | None = None, dry_run: bool = False,
                             thresholds: Sequence[int] = DEFAULT_THRESHOLDS,
                             notifier: Notifier | None = None) -> NoticeReport:
    now = now or utcnow()
    due = await due_notices(site, now, thresholds)
    report = NoticeReport(due, dry_run=dry_run)
    if dry_run or not due:
        return report
    if notifier is None:
        if config.mail is None:
            raise ConfigError("quota notices need the mail section (mail.transport)")
        notifier = notifier_from_config(store, author, config)
    recipients = await _recipients(site, due)
    for d in due:
        s, top = d.status, d.thresholds[-1]
        to = recipients[(s.kind, s.name)]
        sent = bool(to) and await notifier.send(
            "quota_threshold", to, context={"quota": f"{site}/{s.kind}/{s.name}"},
            scope=s.kind, subject=s.name, sitename=site, resource=d.resource.upper(),
            threshold=top, percent=d.usage.percent,
            used_hours=f"{d.usage.used / 60:.1f}",
            quota_hours=f"{(d.usage.quota or 0) / 60:.1f}",
            period_start=f"{s.start:%Y-%m-%d}", period_end=f"{s.end:%Y-%m-%d}",
            money=(_money_line(d.usage, config.usage.currency) if d.resource == "budget"
                   else ""))
        entry = {**d.as_dict(), "to": to}
        if not sent:
            report.failed.append({**entry, "why": "no address" if not to else "send failed"})
            continue
        report.sent.append(entry)
        async with store.session(transaction=True) as session:
            for threshold in d.thresholds:
                await QuotaNotice(
                    key=notice_key(site, s.kind, s.name, d.resource, threshold, s.start),
                    site=site, kind=s.kind, subject=s.name, resource=d.resource,
                    threshold=threshold, period_start=s.start, period_end=s.end,
                    percent=d.usage.percent or 0.0, to=to,
                    noticed_epoch=int(now.timestamp())).insert(session=session)
    return report
