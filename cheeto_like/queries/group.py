"""Group lookups, membership at a site, and the sticky-group rules.

A group that is sticky at a site counts every user on that site as a member there
(role ``sticky-member``), without any membership edge.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Literal

from beanie.operators import In
from pymongo.asynchronous.client_session import AsyncClientSession

from ..constants import GROUP_TYPES
from ..errors import InvalidInput, NotFound
from ..models import Group, GroupMembership, Site, User, UserSiteInfo
from ..models.base import columns, count, select, select_one
from .hints import name_hint

Session = AsyncClientSession | None
# Multi-field lookups go through ``models.base.select`` (one indexed field in the store,
# the rest here). Array fields are never matched with ``field == value`` in the store: on
# the embedded store an index on the array field can make plain equality match nothing.
GroupRole = Literal["member", "sponsor", "sudoer", "slurmer", "sticky-member"]


async def find_group_by_name(name: str, session: Session = None) -> Group | None:
    return await Group.find_one(Group.name == name, session=session)


async def get_group(name: str, session: Session = None) -> Group:
    group = await find_group_by_name(name, session)
    if group is None:
        raise NotFound(f"group {name!r} does not exist" + await name_hint(Group, name, session))
    return group


async def sticky_groups(site: str, session: Session = None) -> list[str]:
    found = await Site.find_one(Site.name == site, session=session)
    return list(found.group.sticky) if found else []


async def site_user_names(site: str, session: Session = None) -> list[str]:
    usis = await UserSiteInfo.find(UserSiteInfo.site == site, session=session).to_list()
    return sorted(u.user for u in usis)


async def effective_group_members(group: str, site: str, session: Session = None) -> list[str]:
    """Names of users who are members of ``group`` at ``site`` (edges ∪ sticky)."""
    edges = await select(GroupMembership, session, group=group, site=site, roles="member")
    names = {e.user for e in edges}
    if group in await sticky_groups(site, session):
        names.update(await site_user_names(site, session))
    return sorted(names)


async def group_members_anywhere(group: str, session: Session = None) -> set[str]:
    """Members at any site: member edges plus the users of sites where it is sticky."""
    edges = await select(GroupMembership, session, group=group, roles="member")
    names = {e.user for e in edges}
    sticky_sites = await Site.find({"group.sticky": group}, session=session).to_list()
    for site in sticky_sites:
        # a sticky group's members are its sites' users: their names as columns, not a
        # model per site record (10k: 0.3 s)
        names.update(row["user"] for row in await columns(
            UserSiteInfo, {"site": site.name}, "user", session=session))
    return names


@dataclass
class GroupRoster:
    """Who holds which role in a group at one site (sorted names)."""

    members: list[str] = field(default_factory=list)
    sponsors: list[str] = field(default_factory=list)
    sudoers: list[str] = field(default_factory=list)
    slurmers: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, list[str]]:
        return {"members": self.members, "sponsors": self.sponsors, "sudoers": self.sudoers,
                "slurmers": self.slurmers}


async def group_members_at_site(group: str, site: str, session: Session = None) -> GroupRoster:
    edges = await select(GroupMembership, session, group=group, site=site)
    roster = GroupRoster()
    for role, names in (("sponsor", roster.sponsors), ("sudoer", roster.sudoers),
                        ("slurmer", roster.slurmers)):
        names.extend(sorted(e.user for e in edges if role in e.roles))
    roster.members = await effective_group_members(group, site, session)
    return roster


@dataclass(frozen=True)
class UserGroupRoles:
    group: Group
    roles: tuple[GroupRole, ...]


async def user_groups_at_site(user: str, site: str,
                              session: Session = None) -> list[UserGroupRoles]:
    """Every group the user has a role in at ``site`` (sticky membership included only
    when the user is on the site), sorted by group name."""
    edges = await select(GroupMembership, session, user=user, site=site)
    roles: dict[str, list[GroupRole]] = {e.group: list(e.roles) for e in edges}
    on_site = await select_one(UserSiteInfo, session, user=user, site=site) is not None
    if on_site:
        for name in await sticky_groups(site, session):
            roles.setdefault(name, []).append("sticky-member")
    groups = {g.name: g for g in await Group.find(In(Group.name, list(roles)),
                                                  session=session).to_list()}
    return [UserGroupRoles(groups[name], tuple(roles[name]))
            for name in sorted(roles) if name in groups]


async def effective_user_groups(user: str, site: str, session: Session = None) -> list[Group]:
    """Groups the user is a member of at ``site`` (member edges and sticky groups)."""
    return [row.group for row in await user_groups_at_site(user, site, session)
            if "member" in row.roles or "sticky-member" in row.roles]


async def _groups_query(type: str | None, site: str | None, member: str | None,
                        session: Session) -> dict[str, object]:
    """The store filter of ``list_groups``."""
    query: dict[str, object] = {}
    if type is not None:
        if type not in GROUP_TYPES:
            raise InvalidInput(f"group type {type!r} is not one of {', '.join(GROUP_TYPES)}")
        query["type"] = type
    names: set[str] | None = None
    if site is not None:
        found = await Site.find_one(Site.name == site, session=session)
        if found is None:
            raise NotFound(f"site {site!r} does not exist")
        # the groups with an edge here, not the edges (10k at a site: 0.3 s as models,
        # 16 ms as one distinct read on the embedded store)
        here = await GroupMembership.get_pymongo_collection().distinct(
            "group", {"site": site}, session=session)
        names = set(here) | set(found.group.sticky)
    if member is not None:
        # An unknown name is a typo, not "no groups": say so rather than print nothing.
        if await select_one(User, session, name=member) is None:
            raise NotFound(f"user {member!r} does not exist")
        if site is not None:
            mine = {g.name for g in await effective_user_groups(member, site, session)}
        else:
            edges = await select(GroupMembership, session, user=member, roles="member")
            mine = {e.group for e in edges}
            usis = await UserSiteInfo.find(UserSiteInfo.user == member,
                                           session=session).to_list()
            if usis:
                sites = await Site.find(In(Site.name, [u.site for u in usis]),
                                        session=session).to_list()
                for s in sites:
                    mine.update(s.group.sticky)
        names = mine if names is None else names & mine
    if names is not None:
        query["name"] = name_in(names)
    return query


def name_in(names: Collection[str]) -> dict[str, Any]:
    """A filter on ``name`` for ``names``: an ``$in`` inside their range.

    Why: the embedded store answers ``$in`` by scanning the collection, a range on the
    indexed name from its index; together they read only the range (a manager's few
    groups among thousands). Same answer on MongoDB.
    """
    ordered = sorted(names)
    if not ordered:
        return {"$in": []}
    return {"$gte": ordered[0], "$lte": ordered[-1], "$in": ordered}


async def list_groups(*, type: str | None = None, site: str | None = None,
                      member: str | None = None, session: Session = None) -> list[Group]:
    """Groups filtered by type, by having any role edge (or being sticky) at ``site``, and
    by ``member`` being a member (at ``site`` when given, else anywhere)."""
    query = await _groups_query(type, site, member, session)
    return await Group.find(query, session=session).sort(+Group.name).to_list()


async def page_groups(*, limit: int, offset: int = 0, type: str | None = None,
                      site: str | None = None, member: str | None = None,
                      among: Collection[str] | None = None,
                      session: Session = None) -> tuple[list[dict[str, Any]], int]:
    """One page of ``list_groups`` as ``{name, gid, type}`` rows, and the number of
    matches; ``among`` limits it to those names (what a manager may see).

    Why: the list route built every group of the site to answer a page of 100. The store
    skips, limits and counts; only the page's rows are read, projected.
    """
    query = await _groups_query(type, site, member, session)
    if among is not None:
        named = query.get("name")
        allowed = set(among) if named is None else set(among) & set(named["$in"])  # type: ignore[index]
        query["name"] = name_in(allowed)
    collection = Group.get_pymongo_collection()
    total = await count(Group, query, session)
    if offset >= total:
        return [], total
    cursor = collection.find(query, {"_id": 0, "name": 1, "gid": 1, "type": 1},
                             session=session, batch_size=limit).sort("name", 1).skip(
                                 offset).limit(limit)
    found = [{"name": r["name"], "gid": r.get("gid"), "type": r.get("type")}
             async for r in cursor]
    return found, total
