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
from datetime import UTC, datetime
from decimal import Decimal
from functools import lru_cache
from itertools import repeat
from operator import itemgetter
from typing import Any, NamedTuple

from beanie import Document

from ...models import (
    GroupMembership,
    History,
    SlurmAccount,
    SlurmAllocation,
    SlurmAssociation,
    SlurmQOS,
    User,
    UserSiteInfo,
)
from ...models.base import columns, group_key, grouped_columns, rows
from ...models.fields import parse_quota_mb, utcnow
from ...models.slurm import TRESTotal, walltime_minutes
from ...queries.site import get_site
from ...queries.slurm import BUCKETS
from ...queries.user import effective_access, effective_status
from .quota import apply_quota_blocks
from .state import (
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
_new_tuple = tuple.__new__  # AssocKey(…) without its Python-level __new__
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


class Standings(NamedTuple):
    """The fields eligibility reads, of every user or every site record, by name (one
    dict per field, built from the store's columns in C)."""

    status: dict[str, str | None]
    access: dict[str, Any]  # list, or its JSON text: read it through ``_listed``
    expires_at: dict[str, datetime]  # only the records that expire


def eligibility(user: User, usi: UserSiteInfo | None, now: datetime) -> Eligibility:
    expiries = [t for t in (user.expires_at, usi.expires_at if usi else None) if t is not None]
    return Eligibility(
        user=user.name, on_site=usi is not None,
        status=effective_status(user, usi) if usi else user.status,
        access=tuple(effective_access(user, usi)),
        expired=any(t <= now for t in expiries))


def eligible_names(users: Standings, usis: Standings, now: datetime) -> set[str]:
    """The users of the site that ``eligibility`` finds eligible (one step per site
    record, no verdict objects)."""
    found = set()
    user_status, user_access, user_expiry = users
    site_access, site_expiry = usis.access, usis.expires_at
    expiring = bool(user_expiry or site_expiry)
    for name, status in usis.status.items():
        if name not in user_status:
            continue
        if status is None:
            status = user_status[name]
        if status not in ELIGIBLE_STATUSES:
            continue
        access = site_access[name]
        if type(access) is not list:
            access = _listed(access)
        if not access:
            access = user_access[name]
            if type(access) is not list:
                access = _listed(access)
        if "slurm" not in access:
            continue
        if expiring and any(t is not None and t <= now for t in (user_expiry.get(name),
                                                                   site_expiry.get(name))):
            continue
        found.add(name)
    return found


def _tres(total: TRESTotal) -> TRES:
    """Summed TRES in sacctmgr's terms, memory as sacctmgr will display it back."""
    values = total.as_slurm()
    if "mem" in values:
        values["mem"] = comparable_mem(values["mem"])
    return tres(values)


def _listed(value: Any) -> tuple[Any, ...]:
    """A pushed list field as a tuple (the embedded store may push it as JSON text)."""
    if type(value) is list:
        return tuple(value)
    return () if value is None else _decoded(value)


@lru_cache(maxsize=256)
def _decoded(text: str) -> tuple[Any, ...]:
    """JSON text of a list, parsed once per distinct value (a site's 20k ``access``
    lists are a handful of distinct texts)."""
    return group_key(text) or ()


async def _columns(model: type[Document], match: dict[str, Any],
                   *fields: str) -> tuple[list[Any], ...]:
    """The values of ``fields`` of every matching document, one aligned list per field
    (``grouped_columns`` with no key), without a dict per document."""
    found = await grouped_columns(model, match, "", *fields)
    return found.get(None) or tuple([] for _ in fields)


def _instant(value: datetime | str) -> datetime:
    """A projected datetime as an aware one: a value ``$set`` by hand may be stored (and
    read back) as ISO text on the embedded store; naive means UTC."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


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
               if row.get("expires_at") is not None and _instant(row["expires_at"]) <= now}
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
    """Every read is projected or grouped in the store (no model per document), issued
    together: at 20k users, 60k associations and 1,500 QOS this costs under a second of
    CPU, the store's included, where full models took 12-13 s (bench/RESULTS.md, issue
    18). The embedded store answers one command at a time, so issuing them together only
    overlaps our decoding with its work."""
    now = now or utcnow()
    site = await get_site(site_name)
    cluster = site.cluster_name
    notes: list[str] = []

    (usis, users, edges, account_rows, qos, assoc_rows, renames) = await asyncio.gather(
        standings(UserSiteInfo, {"site": site.name}, "user"),
        standings(User, {}, "name"),
        _columns(GroupMembership, {"site": site.name}, "group", "user", "roles"),
        columns(SlurmAccount, {"site": site.name}, "group", "limits", "coordinators"),
        _qos_states(site.name, cluster, now),
        columns(SlurmAssociation, {"site": site.name}, "account", "partition", "qos",
                "default_qos"),
        user_renames())
    eligible = eligible_names(users, usis, now)

    rosters: dict[str, set[str]] = {}
    for group, user, roles in zip(*edges, strict=True):
        if not ROSTER.isdisjoint(_listed(roles)):
            rosters.setdefault(group, set()).add(user)
    for group in site.group.sticky:
        rosters.setdefault(group, set()).update(usis.status)

    accounts = {row["group"]: row for row in account_rows}
    associations: dict[AssocKey, AssocState] = {}
    # each account's roster once (it is the same for all its partitions), and the
    # (user, account) pairs the plan needs, made per account (``built_pairs``)
    account_rosters: dict[str, set[str]] = {}
    pairs: set[tuple[str, str]] = set()
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
        roster = account_rosters.get(account)
        if roster is None:
            roster = eligible if account in site.slurm.sticky \
                else rosters.get(account, set()) & eligible
            account_rosters[account] = roster
            pairs.update(zip(roster, repeat(account)))
        state = AssocState(frozenset(assoc_qos), assoc.get("default_qos"))
        # 60k keys at a site: built by C calls, not one Python-level __new__ each
        associations.update(dict.fromkeys(
            [_new_tuple(AssocKey, (user, account, partition)) for user in roster], state))

    default_accounts: dict[str, str] = {}
    if site.slurm.default_account:
        default_accounts = {key.user: key.account for key in associations
                            if key.account == site.slurm.default_account}

    associated = frozenset(map(itemgetter(0), pairs))  # users, in C
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
        coordinators=coordinators, notes=tuple(notes), renames=renames,
        built_pairs=(associations, frozenset(pairs)))
    return await apply_quota_blocks(state, site.name, now)  # out of quota: GrpTRESMins=0


async def standings(model: type[User] | type[UserSiteInfo], match: dict[str, Any],
                    name: str) -> Standings:
    """Status, access and expiry of every matching user or site record: one ``$group``
    pushing the four fields, and a projected read of the records that expire when there
    are any.

    Why: the embedded store decodes each document once per field it extracts; a site of
    20k users took 0.6-0.8 s per collection to read even projected, three grouped reads
    (status, access, expiring) about 0.9 s, and this one ~0.6 s under load. Its pushed
    datetimes come back in their stored form, so ``expires_at`` is only used to learn
    whether any record expires; those few are read again with real datetimes.
    """
    names, statuses, accesses, expiries = await _columns(model, match, name, "status",
                                                         "access", "expires_at")
    expiry_of: dict[str, datetime] = {}
    if any(expiry is not None for expiry in expiries):
        expiring = await rows(model, {**match, "expires_at": {"$ne": None}}, name,
                              "expires_at")
        # ``.get``: the embedded store's ``$ne: None`` also matches a missing field
        expiry_of = {row[name]: _instant(row["expires_at"]) for row in expiring
                     if row.get("expires_at")}
    return Standings(dict(zip(names, statuses, strict=True)),
                     dict(zip(names, accesses, strict=True)), expiry_of)


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
