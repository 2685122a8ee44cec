"""Slurm records at a site: partitions, QOS with their allocations, accounts, associations,
and who can reach what.

A user's Slurm reach at a site is the accounts of the groups where they are a member or
slurmer (sticky groups count for users on the site), plus the site's sticky accounts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pymongo.asynchronous.client_session import AsyncClientSession

from ..errors import NotFound
from ..models import (
    GroupMembership,
    Site,
    SlurmAccount,
    SlurmAllocation,
    SlurmAssociation,
    SlurmPartition,
    SlurmQOS,
    UserSiteInfo,
)
from ..models.base import select, select_one
from ..models.fields import utcnow
from ..models.slurm import TRESTotal
from .site import find_at_site, get_at_site, list_at_site

Session = AsyncClientSession | None
BUCKETS = ("group_limits", "user_limits", "job_limits")


async def find_partition(site: str, name: str, session: Session = None) -> SlurmPartition | None:
    return await find_at_site(SlurmPartition, site, name, session)


async def get_partition(site: str, name: str, session: Session = None) -> SlurmPartition:
    return await get_at_site(SlurmPartition, "partition", site, name, session)


async def list_partitions(site: str, session: Session = None) -> list[SlurmPartition]:
    return await list_at_site(SlurmPartition, site, session)


async def find_qos(site: str, name: str, session: Session = None) -> SlurmQOS | None:
    return await find_at_site(SlurmQOS, site, name, session)


async def get_qos(site: str, name: str, session: Session = None) -> SlurmQOS:
    return await get_at_site(SlurmQOS, "QOS", site, name, session)


async def list_qos(site: str, session: Session = None) -> list[SlurmQOS]:
    return await list_at_site(SlurmQOS, site, session)


async def qos_allocations(site: str, qos: str | None = None,
                          session: Session = None) -> list[SlurmAllocation]:
    query: dict[str, Any] = {"site": site}
    if qos is not None:
        query["qos"] = qos
    return await SlurmAllocation.find(query, session=session).sort(
        +SlurmAllocation.created_at).to_list()


@dataclass(frozen=True)
class QOSLimits:
    """A QOS with the summed (unexpired) TRES of each bucket."""

    qos: SlurmQOS
    group: TRESTotal
    user: TRESTotal
    job: TRESTotal


def qos_limits(qos: SlurmQOS, allocations: list[SlurmAllocation],
               now: datetime | None = None) -> QOSLimits:
    now = now or utcnow()
    mine = [a for a in allocations if a.qos == qos.name and a.site == qos.site]

    def total(bucket: str) -> TRESTotal:
        return TRESTotal.of((a for a in mine if a.bucket == bucket), now)

    return QOSLimits(qos, total("group_limits"), total("user_limits"), total("job_limits"))


async def find_account(site: str, group: str, session: Session = None) -> SlurmAccount | None:
    return await select_one(SlurmAccount, session, group=group, site=site)


async def get_account(site: str, group: str, session: Session = None) -> SlurmAccount:
    found = await find_account(site, group, session)
    if found is None:
        raise NotFound(f"group {group!r} has no Slurm account at site {site!r}")
    return found


async def list_accounts(site: str, session: Session = None) -> list[SlurmAccount]:
    return await SlurmAccount.find({"site": site}, session=session).sort(
        +SlurmAccount.group).to_list()


async def list_associations(site: str, *, account: str | None = None,
                            partition: str | None = None, qos: str | None = None,
                            session: Session = None) -> list[SlurmAssociation]:
    """A site's associations, optionally for one account, partition or QOS (the QOS list
    is matched here: equality on an indexed array field is unreliable on the embedded
    store)."""
    where = {k: v for k, v in (("account", account), ("partition", partition), ("qos", qos))
             if v is not None}
    found = await select(SlurmAssociation, session, site=site, **where)
    return sorted(found, key=lambda a: (a.account, a.partition))


async def require_filter_names(site: str, *, account: str | None = None,
                               partition: str | None = None, qos: str | None = None,
                               session: Session = None) -> None:
    """``NotFound`` for a list filter naming an account, partition or QOS the site does
    not have: a typo should say so, not print an empty table."""
    if account is not None and await select_one(SlurmAccount, session, group=account,
                                                site=site) is None:
        raise NotFound(f"Slurm account {account!r} does not exist at site {site!r}")
    if partition is not None:
        await get_at_site(SlurmPartition, "partition", site, partition, session)
    if qos is not None:
        await get_at_site(SlurmQOS, "QOS", site, qos, session)


async def find_association(site: str, account: str, partition: str,
                           session: Session = None) -> SlurmAssociation | None:
    return await select_one(SlurmAssociation, session, account=account, site=site,
                            partition=partition)


async def find_allocation(allocation_id: str, session: Session = None) -> SlurmAllocation:
    found = await SlurmAllocation.find_one({"_id": allocation_id}, session=session)
    if found is None:
        raise NotFound(f"allocation {allocation_id!r} does not exist")
    return found


@dataclass
class GroupSlurm:
    """A group's account at a site and the associations hanging off it."""

    account: SlurmAccount
    associations: list[SlurmAssociation] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "account": self.account.group,
            "limits": self.account.limits.model_dump(),
            "coordinators": self.account.coordinators,
            "associations": [{"partition": a.partition, "qos": a.qos,
                              "default_qos": a.default_qos} for a in self.associations],
        }


async def group_slurm_at_site(group: str, site: str,
                              session: Session = None) -> GroupSlurm | None:
    account = await find_account(site, group, session)
    if account is None:
        return None
    return GroupSlurm(account, await list_associations(site, account=group, session=session))


@dataclass(frozen=True)
class UserSlurmReach:
    """One account a user can charge at a site, and why (member, slurmer, sticky…)."""

    account: str
    roles: tuple[str, ...]
    associations: tuple[SlurmAssociation, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"account": self.account, "via": list(self.roles),
                "associations": [{"partition": a.partition, "qos": a.qos,
                                  "default_qos": a.default_qos} for a in self.associations]}


async def user_slurm_at_site(user: str, site: str,
                             session: Session = None) -> list[UserSlurmReach]:
    """Accounts the user reaches at ``site``: via member/slurmer edges, sticky groups (if
    on the site), and the site's sticky accounts (if on the site). Constant query count."""
    found_site = await Site.find_one({"name": site}, session=session)
    if found_site is None:
        raise NotFound(f"site {site!r} does not exist")
    on_site = await select_one(UserSiteInfo, session, user=user, site=site) is not None
    roles: dict[str, list[str]] = {}
    edges = await GroupMembership.find({"user": user, "site": site}, session=session).to_list()
    for edge in edges:
        for role in ("member", "slurmer"):
            if role in edge.roles:
                roles.setdefault(edge.group, []).append(role)
    if on_site:
        for group in found_site.group.sticky:
            roles.setdefault(group, []).append("sticky-member")
        for account in found_site.slurm.sticky:
            roles.setdefault(account, []).append("sticky-account")
    if not roles:
        return []
    accounts = {a.group for a in await SlurmAccount.find({"site": site},
                                                         session=session).to_list()
                if a.group in roles}
    associations = [a for a in await SlurmAssociation.find({"site": site},
                                                           session=session).to_list()
                    if a.account in accounts]
    return [UserSlurmReach(name, tuple(roles[name]),
                           tuple(sorted((a for a in associations if a.account == name),
                                        key=lambda a: a.partition)))
            for name in sorted(accounts)]
