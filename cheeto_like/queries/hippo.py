"""HiPPO reads: local event records, cluster -> site resolution, and the account summary
the account e-mails show (groups, Slurm accounts with partitions and QOS, home, group
storages)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from beanie.operators import In
from pymongo.asynchronous.client_session import AsyncClientSession

from ..errors import NotFound
from ..models import GroupMembership, HippoEvent, Site, Storage, User
from ..models.base import select, select_one
from ..validation import require_limit
from .group import effective_user_groups
from .site import find_site
from .slurm import user_slurm_at_site
from .storage import resolve_storages

Session = AsyncClientSession | None


async def find_event(hippo_id: int, endpoint: str | None = None,
                     session: Session = None) -> HippoEvent | None:
    """The local record of HiPPO event ``hippo_id`` (from ``endpoint`` when given)."""
    if endpoint is None:
        found = await HippoEvent.find({"hippo_id": hippo_id}, session=session).to_list()
        if len(found) > 1:
            endpoints = ", ".join(sorted(e.hippo_endpoint for e in found))
            raise NotFound(f"HiPPO event {hippo_id} exists for several endpoints "
                           f"({endpoints}); pass --endpoint")
        return found[0] if found else None
    return await select_one(HippoEvent, session, hippo_id=hippo_id, hippo_endpoint=endpoint)


async def get_event(hippo_id: int, endpoint: str | None = None,
                    session: Session = None) -> HippoEvent:
    event = await find_event(hippo_id, endpoint, session)
    if event is None:
        raise NotFound(f"no local record of HiPPO event {hippo_id}")
    return event


async def list_events(*, status: str | None = None, action: str | None = None,
                      site: str | None = None, user: str | None = None, limit: int = 50,
                      session: Session = None) -> list[HippoEvent]:
    """Newest first (by first sighting)."""
    require_limit(limit)
    query: dict[str, Any] = {}
    for key, value in (("status", status), ("action", action), ("site", site),
                       ("target_user", user)):
        if value is not None:
            query[key] = value
    if len(query) > 1:
        query = {"$and": [{k: v} for k, v in query.items()]}
    cursor = HippoEvent.find(query, session=session).sort(-HippoEvent.first_seen_at)
    if limit:
        cursor = cursor.limit(limit)
    return await cursor.to_list()


async def resolve_cluster(cluster: str, aliases: Mapping[str, str],
                          session: Session = None) -> Site | None:
    """The site a HiPPO cluster string means: the config's ``site_aliases`` (keys
    lower-cased by the config), then a site's name, fqdn or ``aliases`` — all
    case-insensitively."""
    lowered = cluster.strip().lower()
    if not lowered:
        return None
    target = aliases.get(lowered)
    if target is not None:
        site = await find_site(target, session)
        if site is None:
            raise NotFound(f"hippo.site_aliases maps {cluster!r} to {target!r}, which is not "
                           "a site")
        return site
    return await find_site(lowered, session)


# -- what the account e-mails show -------------------------------------------------------


@dataclass(frozen=True)
class PartitionInfo:
    name: str
    qos: list[str]
    default_qos: str | None


@dataclass(frozen=True)
class SlurmAccountInfo:
    name: str
    partitions: list[PartitionInfo]


@dataclass(frozen=True)
class StorageInfo:
    name: str
    group: str
    path: str | None
    quota: str | None


@dataclass(frozen=True)
class AccountSummary:
    username: str
    sitename: str
    sitefqdn: str
    groups: list[str] = field(default_factory=list)
    slurm_accounts: list[SlurmAccountInfo] = field(default_factory=list)
    home: StorageInfo | None = None
    group_storages: list[StorageInfo] = field(default_factory=list)

    def template_vars(self) -> dict[str, Any]:
        return {
            "username": self.username, "sitename": self.sitename, "sitefqdn": self.sitefqdn,
            "groups": self.groups,
            "slurm_accounts": [{"name": a.name, "partitions": [
                {"name": p.name, "qos": p.qos, "default_qos": p.default_qos}
                for p in a.partitions]} for a in self.slurm_accounts],
            "home": None if self.home is None else {"path": self.home.path,
                                                    "quota": self.home.quota},
            "group_storages": [{"name": s.name, "group": s.group, "path": s.path,
                                "quota": s.quota} for s in self.group_storages],
        }


def _path(resolved: Any) -> str | None:
    try:
        return resolved.mount_path
    except ValueError:
        return None


async def account_summary(user: User, site: Site, session: Session = None) -> AccountSummary:
    """What ``user`` has at ``site`` now (a fixed number of queries)."""
    groups = [g.name for g in await effective_user_groups(user.name, site.name, session)
              if g.type != "user"]
    reach = await user_slurm_at_site(user.name, site.name, session)
    accounts = [SlurmAccountInfo(r.account, [PartitionInfo(a.partition, list(a.qos),
                                                           a.default_qos)
                                             for a in r.associations]) for r in reach]
    storages = await Storage.find({"site": site.name}, session=session).to_list()
    home_rows = [s for s in storages if s.category == "home" and s.owner == user.name]
    shared = [s for s in storages if s.category in ("group", "share") and s.group in groups]
    resolved = await resolve_storages([*home_rows[:1], *shared], session)
    home = None
    if home_rows:
        r = resolved[0]
        home = StorageInfo(r.storage.name, r.storage.group, _path(r) or user.home_directory,
                           r.quota)
    group_storages = [StorageInfo(r.storage.name, r.storage.group, _path(r), r.quota)
                      for r in resolved[len(home_rows[:1]):]]
    return AccountSummary(user.name, site.name, site.fqdn, groups, accounts, home,
                          sorted(group_storages, key=lambda s: s.name))


@dataclass(frozen=True)
class Contact:
    name: str
    email: str


async def group_sponsors(group: str, site: str, session: Session = None) -> list[Contact]:
    """The group's sponsors at ``site`` with their e-mail addresses, by name."""
    edges = await select(GroupMembership, session, group=group, site=site, roles="sponsor")
    names = sorted({e.user for e in edges})
    if not names:
        return []
    users = await User.find(In(User.name, names), session=session).to_list()
    return [Contact(u.fullname, u.email) for u in sorted(users, key=lambda u: u.name)]
