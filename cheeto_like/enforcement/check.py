"""Does the live cluster enforce a site's quotas? (``ng slurm sync``, ``ng cluster
status``).

Only a site with a quota limit in force is checked (a site without quotas needs none of
it), and only when slurmctld answers ``scontrol ping`` here: the sync also runs where
only slurmdbd is reachable, and any other request to an absent controller retries for
about 9 s first.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..adapters.scontrol import SControl
from ..config.slurm import QuotaEnforcement
from ..queries.quota import site_quotas
from ..sync.slurm.quota import limits_in_force
from .render import parse_show_config, warnings_for


async def quotas_in_force(site: str) -> bool:
    return limits_in_force(*await site_quotas(site))


async def live_warnings(site: str, config: QuotaEnforcement,
                        env: Mapping[str, str] | None = None) -> list[str]:
    """One line per thing the running slurmctld lacks; [] when it lacks nothing, when
    the site has no quota, or when no slurmctld answers here."""
    if not await quotas_in_force(site):
        return []
    control = SControl(timeout=10, env=dict(env or {}))
    if not await control.reachable():
        return []
    result = await control._run("show", "config")
    if not result.ok:
        return [f"enforcement at {site}: `scontrol show config` failed ({result.summary()})"]
    return warnings_for(parse_show_config(result.stdout), config, site)
