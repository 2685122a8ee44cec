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

import asyncio
import json
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

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
from ..models.base import columns, group_key, grouped, grouped_columns, rows
from ..models.fields import parse_quota_mb, utcnow
from ..models.slurm import TRESTotal, walltime_minutes
from ..queries.site import get_site
from ..queries.slurm import BUCKETS
from ..queries.user import effective_access, effective_status
from .slurm_quota import apply_quota_blocks
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
ROSTER = frozenset({"member", "slurmer"})  # membership roles that put a user in a group's roster


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


@dataclass(frozen=True, slots=True)
class _Standing:
    """The fields eligibility reads, of a user or of their site record."""

    name: str
    status: str | None = None
    access: tuple[str, ...] = ()
    expires_at: datetime | None = None


def eligibility(user: User | _Standing, usi: UserSiteInfo | _Standing | None,
                now: datetime) -> Eligibility:
    expiries = [t for t in (user.expires_at, usi.expires_at if usi else None) if t is not None]
    return Eligibility(
        user=user.name, on_site=usi is not None,
        status=effective_status(user, usi) if usi else user.status,
        access=tuple(effective_access(user, usi)),
        expired=any(t <= now for t in expiries))


def _eligible(user: _Standing, usi: _Standing, now: datetime) -> bool:
    """``eligibility(user, usi, now).eligible`` for a user on the site, without building
    the verdict (called once per user of the site)."""
    status = usi.status if usi.status is not None else user.status
    if status not in ELIGIBLE_STATUSES or "slurm" not in (usi.access or user.access):
        return False
    return not any(t is not None and t <= now for t in (user.expires_at, usi.expires_at))


def _tres(total: TRESTotal) -> TRES:
    """Summed TRES in sacctmgr's terms, memory as sacctmgr will display it back."""
    values = total.as_slurm()
    if "mem" in values:
        values["mem"] = comparable_mem(values["mem"])
    return tres(values)


def _listed(value: Any) -> tuple[Any, ...]:
    """A pushed list field as a tuple (the embedded store may push it as JSON text)."""
    return group_key(value) or () if value is not None else ()


def _doc(value: Any) -> dict[str, Any]:
    """A pushed sub-document as a dict (JSON text on some store paths)."""
    if isinstance(value, str):
        value = json.loads(value)
    return value if isinstance(value, dict) else {}


def _total(grants: list[dict[str, Any]]) -> TRESTotal:
    """``TRESTotal.of`` for projected allocation rows (validated when written: unlimited
    is already None); the caller left the expired ones out."""
    cpus = gpus = None
    mem: Decimal | None = None
    for grant in grants:
        if (value := grant.get("cpus")) is not None:
            cpus = (cpus or 0) + value
        if (value := grant.get("gpus")) is not None:
            gpus = (gpus or 0) + value
        if (value := grant.get("mem")) is not None:
            mem = (mem or Decimal(0)) + parse_quota_mb(value)
    return TRESTotal(cpus, gpus, None if mem is None else int(mem))


def _unlimited(value: Any) -> int | None:
    return None if value is None or int(value) < 0 else int(value)


def _account_state(group: str, limits: dict[str, Any]) -> AccountState:
    """``SlurmAccount.limits`` (a projected sub-document; absent keys are the defaults,
    unlimited) in the state's terms."""
    return AccountState(group, _unlimited(limits.get("max_user_jobs")),
                        _unlimited(limits.get("max_group_jobs")),
                        _unlimited(limits.get("max_submit_jobs")),
                        walltime_minutes(limits.get("max_job_length", "-1")))


async def _qos_states(site: str, cluster: str, now: datetime) -> dict[str, QOSState]:
    """Every QOS of the site with its buckets summed: two grouped reads (QOS, their
    allocations) and one for the few allocations that expire, each QOS summing only its
    own grants (one pass over the allocations, not one per QOS)."""
    qos_rows, grant_rows, expiring = await asyncio.gather(
        columns(SlurmQOS, {"site": site}, "name", "priority", "flags"),
        columns(SlurmAllocation, {"site": site}, "_id", "qos", "bucket", "tres"),
        rows(SlurmAllocation, {"site": site, "expires_at": {"$ne": None}}, "_id",
             "expires_at"))
    # ``.get``: the embedded store's ``$ne: None`` also matches a missing field
    expired = {row["_id"] for row in expiring
               if row.get("expires_at") is not None and row["expires_at"] <= now}
    buckets: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for grant in grant_rows:
        if grant["_id"] not in expired:
            buckets.setdefault((grant["qos"], grant["bucket"]), []).append(_doc(grant["tres"]))
    qos: dict[str, QOSState] = {}
    for row in sorted(qos_rows, key=lambda r: r["name"]):
        name = row["name"]
        group, user, job = (_tres(_total(buckets.get((name, bucket), [])))
                            for bucket in BUCKETS)
        qos[name] = QOSState(name, group, user, job, int(row.get("priority") or 0),
                             frozenset(_listed(row.get("flags"))), owner=cluster)
    return qos


async def desired_state(site_name: str, *, now: datetime | None = None) -> SlurmState:
    """Every read is projected or grouped in the store (no model per document) and the
    independent ones run together: at 20k users, 60k associations and 1,500 QOS this is
    a few tenths of a second of reading where full models took 12 s (bench/RESULTS.md)."""
    now = now or utcnow()
    site = await get_site(site_name)
    cluster = site.cluster_name
    notes: list[str] = []

    (usis, users, edges, account_rows, qos, assoc_rows, renames) = await asyncio.gather(
        standings(UserSiteInfo, {"site": site.name}, "user"),
        standings(User, {}, "name"),
        grouped_columns(GroupMembership, {"site": site.name}, "group", "user", "roles"),
        columns(SlurmAccount, {"site": site.name}, "group", "limits", "coordinators"),
        _qos_states(site.name, cluster, now),
        columns(SlurmAssociation, {"site": site.name}, "account", "partition", "qos",
                "default_qos"),
        user_renames())
    eligible = {name for name, usi in usis.items()
                if name in users and _eligible(users[name], usi, now)}

    rosters: dict[str, set[str]] = {}
    for group, (members, roles) in edges.items():
        rosters[group] = {user for user, held in zip(members, roles, strict=True)
                          if held and not ROSTER.isdisjoint(_listed(held))}
    for group in site.group.sticky:
        rosters.setdefault(group, set()).update(usis)

    accounts = {row["group"]: row for row in account_rows}
    associations: dict[AssocKey, AssocState] = {}
    for assoc in assoc_rows:
        account, partition = assoc["account"], assoc["partition"]
        assoc_qos = _listed(assoc["qos"])
        if account not in accounts:
            notes.append(f"association {account}/{partition} skipped: no Slurm "
                         "account for the group")
            continue
        missing = [q for q in assoc_qos if q not in qos]
        if missing:
            notes.append(f"association {account}/{partition} skipped: unknown QOS "
                         f"{', '.join(missing)}")
            continue
        if account in site.slurm.sticky:
            roster = eligible
        else:
            roster = rosters.get(account, set()) & eligible
        state = AssocState(frozenset(assoc_qos), assoc.get("default_qos"))
        for user in roster:
            associations[AssocKey(user, account, partition)] = state

    default_accounts: dict[str, str] = {}
    if site.slurm.default_account:
        default_accounts = {key.user: key.account for key in associations
                            if key.account == site.slurm.default_account}

    associated = {key.user for key in associations}
    coordinators: dict[str, frozenset[str]] = {}
    for name, account in accounts.items():
        named = _listed(account.get("coordinators"))
        present = [c for c in named if c in associated]
        for skipped in sorted(set(named) - set(present)):
            notes.append(f"coordinator {skipped} of {name} skipped: not a Slurm user on "
                         f"{cluster} (no association)")
        coordinators[name] = frozenset(present)

    state = SlurmState(
        cluster=cluster, qos=qos,
        accounts={name: _account_state(name, _doc(row.get("limits")))
                  for name, row in accounts.items()},
        associations=associations, default_accounts=default_accounts,
        coordinators=coordinators, notes=tuple(notes), renames=renames)
    return await apply_quota_blocks(state, site.name, now)  # out of quota: GrpTRESMins=0


async def standings(model: type[User] | type[UserSiteInfo], match: dict[str, Any],
                    name: str) -> dict[str, _Standing]:
    """name -> status, access and expiry of every matching user or site record, from two
    ``$group`` queries and one for the few records that expire.

    Why: a site of 20k users took 0.6-0.8 s per collection to read even projected (the
    embedded store decodes every document); grouped in the store it is 0.05 s each.
    """
    statuses = await grouped(model, match, "status", name)
    accesses = await grouped(model, match, "access", name)
    expiring = await rows(model, {**match, "expires_at": {"$ne": None}}, name, "expires_at")
    status_of = {n: status for status, names in statuses.items() for n in names}
    access_of = {n: access or () for access, names in accesses.items() if access
                 for n in names}
    # ``.get``: the embedded store's ``$ne: None`` also matches a missing field
    expiry_of = {row[name]: row["expires_at"] for row in expiring if row.get("expires_at")}
    return {n: _Standing(n, status, access_of.get(n, ()), expiry_of.get(n))
            for n, status in status_of.items()}


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
