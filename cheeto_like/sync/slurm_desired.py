"""Desired Slurm state of a site, built from the store with a fixed number of queries.

Rules (the reference's, with its defects fixed):
- A user is eligible when they are on the site, their effective access there includes
  ``slurm``, their effective status is ``active`` or ``offboarding``, and neither their
  site record nor their account has expired. Inactive and disabled users get nothing.
- Each group association expands to one association per user in its roster: every
  eligible user for a sticky account, else the eligible members and slurmers of the
  group at the site (sticky groups count every user on the site as a member).
- An association carries its QOS list and default QOS, so several QOS on one
  (account, partition) never collide.
- QOS limits are the sums of unexpired allocations.
- Every account at the site exists in Slurm, with its limits and coordinators
  (coordinators must be Slurm users on this cluster, i.e. have an association).
- The site's default account becomes the default of every user associated with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from beanie.operators import In
from pydantic import BaseModel, Field

from ..models import (
    GroupMembership,
    History,
    SlurmAccount,
    SlurmAllocation,
    SlurmAssociation,
    SlurmQOS,
    User,
    UserSiteInfo,
)
from ..models.fields import utcnow
from ..models.slurm import TRESTotal
from ..queries.site import get_site
from ..queries.slurm import qos_limits
from ..queries.user import effective_access, effective_status
from .slurm_state import (
    TRES,
    AccountState,
    AssocKey,
    AssocState,
    QOSState,
    SlurmState,
    comparable_mem,
    tres,
)

ELIGIBLE_STATUSES = ("active", "offboarding")


@dataclass(frozen=True)
class Eligibility:
    """Why a user can or cannot have Slurm associations at a site."""

    user: str
    on_site: bool
    status: str | None
    access: tuple[str, ...]
    expired: bool

    @property
    def eligible(self) -> bool:
        return (self.on_site and "slurm" in self.access
                and self.status in ELIGIBLE_STATUSES and not self.expired)

    def reasons(self) -> list[str]:
        """What stands in the way (empty when eligible)."""
        found = []
        if not self.on_site:
            found.append("not on the site")
        if self.status not in ELIGIBLE_STATUSES:
            found.append(f"status is {self.status or 'unset'}")
        if "slurm" not in self.access:
            found.append("no slurm access")
        if self.expired:
            found.append("account expired")
        return found


class _UserView(BaseModel):
    """The user fields eligibility reads (a projection: 20k full users parse slowly)."""

    name: str
    status: str | None = None
    access: list[str] = Field(default_factory=list)
    expires_at: datetime | None = None


class _SiteInfoView(BaseModel):
    user: str
    status: str | None = None
    access: list[str] = Field(default_factory=list)
    expires_at: datetime | None = None


class _EdgeView(BaseModel):
    user: str
    group: str
    roles: list[str]


def eligibility(user: User | _UserView, usi: UserSiteInfo | _SiteInfoView | None,
                now: datetime) -> Eligibility:
    expiries = [t for t in (user.expires_at, usi.expires_at if usi else None) if t is not None]
    return Eligibility(
        user=user.name, on_site=usi is not None,
        status=effective_status(user, usi) if usi else user.status,
        access=tuple(effective_access(user, usi)),
        expired=any(t <= now for t in expiries))


def _tres(total: TRESTotal) -> TRES:
    """Summed TRES in sacctmgr's terms, memory as sacctmgr will display it back."""
    values = total.as_slurm()
    if "mem" in values:
        values["mem"] = comparable_mem(values["mem"])
    return tres(values)


def _account_state(account: SlurmAccount) -> AccountState:
    limits = account.limits

    def limit(value: int) -> int | None:
        return None if value < 0 else value

    return AccountState(account.group, limit(limits.max_user_jobs),
                        limit(limits.max_group_jobs), limit(limits.max_submit_jobs),
                        limits.max_job_minutes)


async def desired_state(site_name: str, *, now: datetime | None = None) -> SlurmState:
    now = now or utcnow()
    site = await get_site(site_name)
    cluster = site.cluster_name
    notes: list[str] = []

    usis = {u.user: u for u in await UserSiteInfo.find(
        {"site": site.name}, projection_model=_SiteInfoView).to_list()}
    users = {u.name: u for u in await User.find(
        In(User.name, list(usis)), projection_model=_UserView).to_list()}
    eligible = {name for name, user in users.items()
                if eligibility(user, usis[name], now).eligible}

    rosters: dict[str, set[str]] = {}
    for edge in await GroupMembership.find({"site": site.name},
                                           projection_model=_EdgeView).to_list():
        if "member" in edge.roles or "slurmer" in edge.roles:
            rosters.setdefault(edge.group, set()).add(edge.user)
    for group in site.group.sticky:
        rosters.setdefault(group, set()).update(usis)

    accounts = {a.group: a for a in await SlurmAccount.find({"site": site.name}).to_list()}
    allocations = await SlurmAllocation.find({"site": site.name}).to_list()
    qos_docs = {q.name: q for q in await SlurmQOS.find({"site": site.name}).to_list()}
    qos: dict[str, QOSState] = {}
    for name, doc in sorted(qos_docs.items()):
        limits = qos_limits(doc, allocations, now)
        qos[name] = QOSState(name, _tres(limits.group), _tres(limits.user), _tres(limits.job),
                             doc.priority, frozenset(doc.flags), owner=cluster)

    associations: dict[AssocKey, AssocState] = {}
    for assoc in await SlurmAssociation.find({"site": site.name}).to_list():
        if assoc.account not in accounts:
            notes.append(f"association {assoc.account}/{assoc.partition} skipped: no Slurm "
                         "account for the group")
            continue
        missing = [q for q in assoc.qos if q not in qos_docs]
        if missing:
            notes.append(f"association {assoc.account}/{assoc.partition} skipped: unknown QOS "
                         f"{', '.join(missing)}")
            continue
        if assoc.account in site.slurm.sticky:
            roster = eligible
        else:
            roster = rosters.get(assoc.account, set()) & eligible
        state = AssocState(frozenset(assoc.qos), assoc.default_qos)
        for user in roster:
            associations[AssocKey(user, assoc.account, assoc.partition)] = state

    associated = {key.user for key in associations}
    default_accounts: dict[str, str] = {}
    if site.slurm.default_account:
        default_accounts = {key.user: key.account for key in associations
                            if key.account == site.slurm.default_account}

    coordinators: dict[str, frozenset[str]] = {}
    for name, account in accounts.items():
        present = [c for c in account.coordinators if c in associated]
        for skipped in sorted(set(account.coordinators) - set(present)):
            notes.append(f"coordinator {skipped} of {name} skipped: not a Slurm user on "
                         f"{cluster} (no association)")
        coordinators[name] = frozenset(present)

    return SlurmState(
        cluster=cluster, qos=qos,
        accounts={name: _account_state(a) for name, a in accounts.items()},
        associations=associations, default_accounts=default_accounts,
        coordinators=coordinators, notes=tuple(notes), renames=await user_renames())


async def user_renames() -> dict[str, str]:
    """Every old user name -> the name that user has now, from ``rename_user`` History
    rows (one indexed query). Chains resolve to the last name; a name renamed away and
    back maps to nothing. The plan only acts on names slurmdbd still holds, so the map
    never needs pruning for correctness."""
    rows = await History.find({"op": "rename_user"}).sort(+History.timestamp).to_list()
    step = {}
    for row in rows:
        old, new = row.changes.get("user"), row.changes.get("new_name")
        if isinstance(old, str) and isinstance(new, str):
            step[old] = new
            step.pop(new, None)  # the new name is current again
    final = {}
    for old in step:
        name, seen = old, {old}
        while name in step and step[name] not in seen:
            name = step[name]
            seen.add(name)
        if name != old:
            final[old] = name
    return final
