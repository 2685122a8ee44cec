"""Where the submit-time check's files live on a head node, and who may read them.

slurmctld loads ``job_submit.lua`` from the directory of ``slurm.conf`` (so the plugin
and the hook sit there, root-owned, readable); everything the plugin reads or writes
about people sits in ``<state_dir>/<site>/``, owned by slurmctld's user and closed to
everyone else (usage figures are personal data).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..config.slurm import QuotaEnforcement

TAG = "cheeto-quota:"  # prefix of the reservation id in a job's admin_comment
LUA_NAME = "job_submit.lua"
HOOK_NAME = "cheeto-jobcomp"


@dataclass(frozen=True)
class Layout:
    site: str
    state: Path
    table: Path
    reservations: Path
    spool: Path
    lua: Path
    hook: Path

    def files(self) -> list[dict[str, str]]:
        """Every path with its mode, owner and purpose (``ng site enforcement show``)."""
        return [
            {"path": str(self.lua), "mode": "0644", "owner": "root",
             "purpose": "slurmctld's job_submit/lua plugin (JobSubmitPlugins=lua)"},
            {"path": str(self.hook), "mode": "0755", "owner": "root",
             "purpose": "the completion hook (JobCompType=jobcomp/script, JobCompLoc)"},
            {"path": str(self.state), "mode": "0700", "owner": "SlurmUser",
             "purpose": "the site's state directory"},
            {"path": str(self.table), "mode": "0600", "owner": "SlurmUser",
             "purpose": "quotas, used minutes and GPU factors (the site worker writes it)"},
            {"path": str(self.reservations), "mode": "0600", "owner": "SlurmUser",
             "purpose": "the plugin's accepted, unfinished jobs (the plugin writes it)"},
            {"path": str(self.spool), "mode": "0700", "owner": "SlurmUser",
             "purpose": "one file per finished job, from the hook to the site worker"},
        ]


def layout(config: QuotaEnforcement, site: str, slurm_conf: Path) -> Layout:
    state = config.state_dir / site
    etc = slurm_conf.parent
    return Layout(site=site, state=state, table=state / "quota.db",
                  reservations=state / "reservations.db", spool=state / "spool",
                  lua=etc / LUA_NAME, hook=etc / HOOK_NAME)


def conf_lines(where: Layout) -> list[str]:
    """What slurm.conf must say (``safe``: without it slurmctld kills running jobs of an
    association at its GrpTRESMins, the backstop's zero)."""
    return ["JobSubmitPlugins=lua",
            "JobCompType=jobcomp/script",
            f"JobCompLoc={where.hook}",
            "AccountingStorageEnforce=associations,limits,qos,safe"]
