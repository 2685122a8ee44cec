"""What the offboarding policy (config ``offboarding``, ``config/offboarding.py``) does
to reaped users, what is left undone, and offboarding users who will never be reaped.

``policy_plan`` is shared by the reap's dry run (``ng iam reap --dry-run``) and the reap
itself (``ReapOffboardedUsers``), so the dry run shows exactly what the run changes. A
fixed number of queries: users' keys, site records, memberships and storages are read
with ``$in`` in chunks of 500 names.

Storage means the user's *own* storage records (owner and group both the user: home,
personal scratch); a group's storage they own is left alone. ``remove``/``archive``
set those records' expiry (reap + ``storage_after_days``); nothing on disk is touched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pymongo.asynchronous.client_session import AsyncClientSession

from ..config.offboarding import OffboardingConfig
from ..models import GroupMembership, SshKey, Storage, User, UserSiteInfo
from ..models.base import rows
from .access_policy import as_utc

Session = AsyncClientSession | None
IN_CHUNK = 500


async def _by_names(model: Any, key: str, names: list[str], session: Session) -> list[Any]:
    found: list[Any] = []
    for start in range(0, len(names), IN_CHUNK):
        found += await model.find({key: {"$in": names[start:start + IN_CHUNK]}},
                                  session=session).to_list()
    return found


async def offboarding_without_expiry(session: Session = None) -> list[User]:
    """Offboarding users without an expiry, by name: the reaper never deactivates them
    (give them one with ``ng user expire``)."""
    users = await User.find(User.status == "offboarding", session=session).to_list()
    return sorted((u for u in users if u.expires_at is None), key=lambda u: u.name)


@dataclass
class SitePlan:
    site: str
    ssh_keys: str
    memberships: str
    storage: str
    slurm: str
    edges: list[GroupMembership] = field(default_factory=list)
    storages: list[Storage] = field(default_factory=list)
    storage_expires_at: datetime | None = None

    def row(self, user: str) -> dict[str, Any]:
        return {"user": user, "site": self.site, "ssh_keys": self.ssh_keys,
                "memberships": self.memberships, "storage": self.storage,
                "slurm": self.slurm}


@dataclass
class UserPlan:
    user: str
    keys: list[SshKey] = field(default_factory=list)  # to delete
    sites: list[SitePlan] = field(default_factory=list)

    def rows(self) -> list[dict[str, Any]]:
        return [s.row(self.user) for s in self.sites]


async def policy_plan(names: list[str], policy: OffboardingConfig, now: datetime,
                      session: Session = None) -> list[UserPlan]:
    """What reaping ``names`` at ``now`` does under ``policy``, per user and site."""
    names = sorted(set(names))
    usis = await _by_names(UserSiteInfo, "user", names, session)
    keys = await _by_names(SshKey, "user", names, session)
    edges = await _by_names(GroupMembership, "user", names, session)
    storages = await _by_names(Storage, "owner", names, session)
    plans = []
    for name in names:
        sites = sorted(u.site for u in usis if u.user == name)
        own_keys = [k for k in keys if k.user == name]
        remove_keys = any(policy.for_site(s).ssh_keys == "remove" for s in sites)
        plan = UserPlan(name, own_keys if remove_keys else [])
        for site in sites:
            rules = policy.for_site(site)
            at_site = [e for e in edges if e.user == name and e.site == site]
            own = [s for s in storages if s.owner == name and s.group == name
                   and s.site == site]
            sp = SitePlan(
                site,
                ssh_keys=(f"remove {len(own_keys)} key(s)" if rules.ssh_keys == "remove"
                          else f"keep {len(own_keys)} key(s)"
                          + (" (another site removes them)" if remove_keys and own_keys
                             else "")),
                memberships=(f"remove {len(at_site)}: "
                             + (", ".join(sorted(e.group for e in at_site)) or "none")
                             if rules.memberships == "remove"
                             else f"keep {len(at_site)}"),
                storage=f"keep {len(own)}",
                slurm="associations deleted by the next applied Slurm sync (inactive)")
            if rules.memberships == "remove":
                sp.edges = at_site
            if rules.storage != "keep":
                expires = now + timedelta(days=rules.storage_after_days)
                sp.storages = [s for s in own if as_utc(s.expires_at) is None
                               or as_utc(s.expires_at) > expires]  # type: ignore[operator]
                sp.storage_expires_at = expires
                what = ("archive by hand, then the records expire" if rules.storage ==
                        "archive" else "records expire")
                sp.storage = (f"{rules.storage}: {len(own)} record(s) ("
                              + (", ".join(sorted(s.name for s in own)) or "none")
                              + f"); {what} {expires:%Y-%m-%d}; no data deleted")
            plan.sites.append(sp)
        plans.append(plan)
    return plans


async def offboarding_findings(sites: list[str], now: datetime,
                               policy: OffboardingConfig | None) -> list[Any]:
    """The audit's offboarding findings: offboarding users who are never reaped, and
    reaped users (inactive, with an expiry) at ``sites`` who still hold what their
    site's policy removes. Slurm associations of inactive users are the Slurm drift
    check's (``sync.audit``)."""
    from .audit import Finding

    found = [Finding("medium", "offboarding_without_expiry", None, u.name,
                     "offboarding without an expiry: the reap never deactivates them",
                     f"cheeto ng user expire -u {u.name} --at +30d")
             for u in await offboarding_without_expiry()]
    if policy is None or not policy.removes_anything():
        return found
    reaped = [r["name"] for r in await rows(User, {"status": "inactive"}, "name", "expires_at")
              if r.get("expires_at") is not None]
    for plan in await policy_plan(reaped, policy, now):
        for sp in plan.sites:
            if sp.site not in sites:
                continue
            rules = policy.for_site(sp.site)
            left = []
            if rules.ssh_keys == "remove" and plan.keys:
                left.append(f"{len(plan.keys)} SSH key(s)")
            if sp.edges:
                left.append(f"roles in {', '.join(sorted({e.group for e in sp.edges}))}")
            if sp.storages:
                left.append(f"storage {', '.join(sorted(s.name for s in sp.storages))} "
                            "without its expiry")
            if left:
                found.append(Finding(
                    "medium", "offboarding_policy_unmet", sp.site, plan.user,
                    f"reaped, but still has {'; '.join(left)} (the site's offboarding "
                    f"policy removes them)",
                    f"cheeto ng user show -u {plan.user}; remove them by hand (the reap "
                    "applies the policy only when it deactivates)"))
    return found
