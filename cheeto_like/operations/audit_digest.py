"""The access audit's digest: what changed since the previous audit, e-mailed (through the
``Notifier``, so every send is a History row) and posted to the chat webhook.

The digest leads with the new findings and the resolved ones (what changed this week),
then counts what is still open per kind; the complete list is the run's JSON lines.
Neither channel failing fails the audit: the outcome of each is returned and stored on
the ``AuditRun`` (``delivered``), and ``ng audit run`` reports it.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from ..adapters.chat import post_message
from ..config import Config
from ..errors import ExternalError
from ..models import AuditRun
from ..queries.audit import SEVERITIES, AuditReport, Finding
from ..store import Store
from .notify import Notifier, notifier_from_config

WEBHOOK_ENV = "CHEETO_AUDIT_WEBHOOK_URL"
LISTED = 40  # findings listed per section; the rest are counted


def _stamp(report: AuditReport) -> str:
    return report.started_at.strftime("%Y-%m-%d %H:%M")


def digest_vars(report: AuditReport, subject_prefix: str = "[cheeto audit]") -> dict[str, Any]:
    counts = report.counts()
    new = [f for f in report.findings if f.status == "new"]
    ongoing = Counter((f.kind, f.severity) for f in report.findings if f.status == "ongoing")
    return {
        "subject_prefix": subject_prefix, "scope": "all sites" if report.scope == "*"
        else report.scope, "when": _stamp(report), "run": report.run_id,
        "total": counts["total"], "new": counts["new"], "resolved": counts["resolved"],
        "by_severity": ", ".join(f"{counts[s]} {s}" for s in reversed(SEVERITIES)
                                 if counts[s]) or "none",
        "previous": report.previous_at.strftime("%Y-%m-%d %H:%M")
        if report.previous_at else "the first audit",
        "new_findings": [f.as_dict() for f in new[:LISTED]],
        "new_more": max(0, len(new) - LISTED),
        "resolved_findings": [f.as_dict() for f in report.resolved[:LISTED]],
        "resolved_more": max(0, len(report.resolved) - LISTED),
        "ongoing": [{"kind": k, "severity": s, "count": n}
                    for (k, s), n in sorted(ongoing.items())],
        "sources": ", ".join(f"{k} {v}" for k, v in sorted(report.sources.items())),
    }


def _line(f: dict[str, Any], with_fix: bool = True) -> str:
    where = f["site"] or "all sites"
    text = f"- *{f['severity']}* {f['kind']} at {where}: {f['object']}"
    if with_fix:
        text += f": {f['detail']}. Fix: `{f['fix']}`"
    return text


def digest_markdown(report: AuditReport) -> str:
    """The digest as Markdown (``--markdown FILE`` and the chat message)."""
    v = digest_vars(report)
    lines = [f"*Access audit of {v['scope']}* ({v['when']} UTC): {v['total']} finding(s) "
             f"({v['by_severity']}), {v['new']} new, {v['resolved']} resolved since "
             f"{v['previous']}."]
    if v["new_findings"]:
        lines += ["", "*New*"] + [_line(f) for f in v["new_findings"]]
        if v["new_more"]:
            lines.append(f"- … and {v['new_more']} more")
    if v["resolved_findings"]:
        lines += ["", "*Resolved*"] + [_line(f, False) for f in v["resolved_findings"]]
        if v["resolved_more"]:
            lines.append(f"- … and {v['resolved_more']} more")
    if v["ongoing"]:
        lines += ["", "*Still open*"] + [f"- {r['kind']} ({r['severity']}): {r['count']}"
                                         for r in v["ongoing"]]
    lines += ["", f"Sources: {v['sources']}. Run {v['run']}."]
    return "\n".join(lines) + "\n"


def webhook_url(config: Config) -> str | None:
    """From the config's ``audit.webhook_url``, else ``$CHEETO_AUDIT_WEBHOOK_URL``."""
    if config.audit is not None and config.audit.webhook_url is not None:
        return config.audit.webhook_url.get_secret_value()
    return os.environ.get(WEBHOOK_ENV) or None


async def deliver(store: Store, author: str | None, config: Config, report: AuditReport, *,
                  notifier: Notifier | None = None) -> dict[str, str]:
    """E-mail ``audit.to`` and post to the webhook, where configured; returns (and stores
    on the run) each channel's outcome: ``sent``, ``failed: …`` or absent."""
    audit = config.audit
    outcome: dict[str, str] = {}
    if audit is not None and audit.to:
        notifier = notifier or notifier_from_config(store, author, config)
        sent = await notifier.send("audit_digest", audit.to, context={"audit": report.run_id},
                                   **digest_vars(report, audit.subject_prefix))
        outcome["email"] = "sent" if sent else "failed (see History)"
    url = webhook_url(config)
    if url:
        timeout = audit.webhook_timeout_seconds if audit is not None else 10.0
        try:
            await post_message(url, digest_markdown(report), request_timeout=timeout)
            outcome["webhook"] = "sent"
        except ExternalError as exc:
            outcome["webhook"] = f"failed: {exc.message}"
    report.delivered = outcome
    run = await AuditRun.get(report.run_id)
    if run is not None:  # bookkeeping on the run, like the alert digest's SyncRun
        run.delivered = dict(outcome)
        async with store.exclusive():
            await run.save()
    return outcome


def jsonl_lines(report: AuditReport) -> list[dict[str, Any]]:
    """One JSON object per finding, the resolved ones last, each with the run and time."""
    stamp = report.started_at.isoformat()
    return [{"run": report.run_id, "at": stamp, **f.as_dict()}
            for f in [*report.findings, *report.resolved]]


__all__ = ["Finding", "deliver", "digest_markdown", "digest_vars", "jsonl_lines",
           "webhook_url"]
