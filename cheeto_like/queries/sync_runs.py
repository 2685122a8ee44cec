"""The last run of a reconciler at a site: one answer for every place that shows it.

``cheeto daemon status`` and ``cheeto ng slurm why`` both call ``last_sync_run``; before,
one took the newest run of any kind and the other the newest *applied* run, so a dry run
after an apply made them name different runs. "The last sync" is the newest ``SyncRun``
of the (target, site), dry run or not, by ``started_at``; its ``apply`` flag says which.
"""

from __future__ import annotations

from ..models import SyncRun
from .site import Session


async def last_sync_run(target: str, site: str, session: Session = None) -> SyncRun | None:
    """The newest SyncRun of ``target`` (slurm, ldap, puppet, …) at ``site``, or None."""
    runs = await SyncRun.find({"target": target, "site": site}, session=session).sort(
        -SyncRun.started_at).limit(1).to_list()
    return runs[0] if runs else None
