"""The weekly access audit as daemon task bodies: ``cheeto.audit`` on the hub, and its
Slurm read, ``cheeto.audit_slurm_state``, on each site's head node.

The hub task runs what ``cheeto ng audit run`` runs with the task block's choices
(which sites, whether to compare slurmdbd and LDAP), stores the ``AuditRun`` and
delivers the digest (``audit.to``, ``audit.webhook_url``). slurmdbd is not read from
the hub (its sacctmgr would talk to whatever slurm.conf the hub has, if any): the hub
sends ``audit_slurm_state`` to every site's queue (``slurm.<site>``) at once, where the
head-node worker computes that site's Slurm findings with its own sacctmgr (its
``slurm_sync`` block: binary, sudo, timeout) and returns them; the hub waits up to
``site_timeout_seconds`` in all. A site that does not answer (no worker consumes its
queue, the read failed) is an ``audit_incomplete`` finding naming the site; the
request expires with the wait, so a worker that comes back later does not run a stale
read. A digest that could not be delivered anywhere fails the task, so it shows in
Flower and the operator digest; findings do not fail it (``ng audit run --fail-on`` is
the way to turn findings into an exit code).
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any

from ..config import AuditTask, Config, SlurmSyncTask
from ..errors import CheetoError
from ..queries.audit import Finding
from ..store import Store

SLURM_STATE_TASK = "cheeto.audit_slurm_state"


class AuditUndelivered(CheetoError):
    """The audit ran and was stored, but its digest reached no one."""


class SiteDidNotAnswer(CheetoError):
    """A site's head-node worker gave no Slurm findings in time (or failed to read)."""


class SiteQueueSlurm:
    """The audit's Slurm source: one ``audit_slurm_state`` request per site, sent on the
    site's queue, answered by its head-node worker (``sync.audit.SlurmSource``)."""

    def __init__(self, config: Config, author: str, timeout: float) -> None:
        self.config = config
        self.author = author
        self.timeout = timeout
        self._sent: dict[str, Any] = {}
        self._deadline = 0.0
        self._app: Any = None

    async def begin(self, sites: list[str], now: datetime) -> None:
        from .config import site_queue
        from .settings import bare_app

        self._app = bare_app(self.config)
        self._deadline = time.monotonic() + self.timeout
        for site in sites:
            try:
                self._sent[site] = await asyncio.to_thread(
                    self._app.send_task, SLURM_STATE_TASK,
                    args=(site, self.author, now.isoformat()), queue=site_queue(site),
                    expires=self.timeout)
            except Exception as exc:  # the broker: the site's finding says so
                self._sent[site] = exc

    async def findings(self, site: str) -> list[Finding]:
        from celery.exceptions import TimeoutError as CeleryTimeout

        from .config import site_queue

        sent = self._sent.get(site)
        if isinstance(sent, Exception) or sent is None:
            raise SiteDidNotAnswer(f"site {site} was not asked: {sent}")
        remaining = max(self._deadline - time.monotonic(), 0.001)
        try:
            answer = await asyncio.to_thread(sent.get, timeout=remaining, interval=0.2,
                                             propagate=False, disable_sync_subtasks=False)
        except CeleryTimeout:
            sent.revoke()
            raise SiteDidNotAnswer(
                f"site {site} did not answer within {self.timeout:g}s (does a worker "
                f"consume {site_queue(site)} on its head node?)") from None
        if not isinstance(answer, dict) or "findings" not in answer:
            why = answer.get("error") if isinstance(answer, dict) else answer
            raise SiteDidNotAnswer(f"site {site}'s worker could not read slurmdbd: {why}")
        return [Finding.from_dict(item) for item in answer["findings"]]

    def close(self) -> None:
        if self._app is not None:
            self._app.close()


async def audit_body(store: Store, config: Config, block: AuditTask, site: str,
                     author: str) -> dict[str, Any]:
    from ..operations.audit_digest import deliver
    from ..sync.audit import run_audit
    from ..sync.slurm.actual import Policy

    slurm = SiteQueueSlurm(config, author, block.site_timeout_seconds) if block.slurm else None
    try:
        report = await run_audit(
            store, sites=block.sites, slurm_source=slurm,
            policy=Policy.of(config.slurm.root_users, config.slurm.unmanaged_accounts),
            offboarding=config.offboarding,
            ldap=config.ldap if block.ldap else None,
            rotation_days=config.api.key_rotation_days if config.api else 90,
            unused_days=config.audit.key_unused_days if config.audit else 90,
            key_grace_days=config.api.key_new_grace_days if config.api else 7, author=author)
    finally:
        if slurm is not None:
            slurm.close()
    delivered = await deliver(store, author, config, report)
    if delivered and not any(v == "sent" for v in delivered.values()):
        raise AuditUndelivered(f"audit {report.run_id}: digest not delivered ("
                               + "; ".join(f"{k}: {v}" for k, v in delivered.items()) + ")")
    return {"run_id": report.run_id, "counts": report.counts(), "sources": report.sources,
            "delivered": delivered}


async def slurm_state_body(store: Store, config: Config, block: SlurmSyncTask, site: str,
                           author: str, now: datetime) -> dict[str, Any]:
    """On the site's head node: its Slurm findings with its own sacctmgr (a dry run,
    recorded as any dry run is)."""
    from ..adapters.sacctmgr import SAcctMgr
    from ..sync.audit import site_slurm_findings
    from ..sync.slurm.actual import Policy, SAcctMgrReader

    runner = SAcctMgr(binary=block.sacctmgr, sudo=block.sudo, timeout=block.timeout_seconds)
    found = await site_slurm_findings(
        store, site, SAcctMgrReader(runner), author=author, now=now,
        policy=Policy.of(config.slurm.root_users, config.slurm.unmanaged_accounts))
    return {"site": site, "findings": [f.as_dict() for f in found]}
