"""The weekly access audit as a daemon task body (``cheeto.audit``, on the hub).

It runs what ``cheeto ng audit run`` runs with the task block's choices (which sites,
whether to read slurmdbd and LDAP from the hub), stores the ``AuditRun`` and delivers the
digest (``audit.to``, ``audit.webhook_url``). A digest that could not be delivered
anywhere fails the task, so it shows in Flower and the operator digest; findings do not
fail it (``ng audit run --fail-on`` is the way to turn findings into an exit code).
"""

from __future__ import annotations

from typing import Any

from ..config import AuditTask, Config
from ..errors import CheetoError
from ..store import Store


class AuditUndelivered(CheetoError):
    """The audit ran and was stored, but its digest reached no one."""


async def audit_body(store: Store, config: Config, block: AuditTask, site: str,
                     author: str) -> dict[str, Any]:
    from ..adapters.sacctmgr import SAcctMgr
    from ..operations.audit_digest import deliver
    from ..sync.audit import run_audit
    from ..sync.slurm_actual import Policy, SAcctMgrReader

    slurm = SAcctMgrReader(SAcctMgr(binary=block.sacctmgr)) if block.slurm else None
    report = await run_audit(
        store, sites=block.sites, slurm=slurm,
        policy=Policy.of(config.slurm.root_users, config.slurm.unmanaged_accounts),
        ldap=config.ldap if block.ldap else None,
        rotation_days=config.api.key_rotation_days if config.api else 90,
        unused_days=config.audit.key_unused_days if config.audit else 90, author=author)
    delivered = await deliver(store, author, config, report)
    if delivered and not any(v == "sent" for v in delivered.values()):
        raise AuditUndelivered(f"audit {report.run_id}: digest not delivered ("
                               + "; ".join(f"{k}: {v}" for k, v in delivered.items()) + ")")
    return {"run_id": report.run_id, "counts": report.counts(), "sources": report.sources,
            "delivered": delivered}
