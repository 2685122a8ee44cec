"""User lookups and the effective-state rules.

- effective status at a site = the site record's status if set, else the global status;
- effective access at a site = the site record's access if non-empty, else the global list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from beanie.operators import In
from pymongo.asynchronous.client_session import AsyncClientSession

from ..constants import USER_TYPES
from ..errors import InvalidInput, NotFound
from ..models import Site, SshKey, User, UserSiteInfo
from ..models.base import ROWS_BATCH, columns, count, select_one
from ..validation import require_limit
from .access_status import require_access, require_status
from .group import name_in
from .hints import name_hint

Session = AsyncClientSession | None
Operator = Literal["AND", "OR"]


class StatusAccess(Protocol):
    """What the effective-state rules read: a ``User``, a ``UserSiteInfo``, or a
    projection of either."""

    status: str | None
    access: list[str]


def effective_status(user: StatusAccess, usi: StatusAccess | None) -> str | None:
    if usi is not None and usi.status is not None:
        return usi.status
    return user.status


def effective_access(user: StatusAccess, usi: StatusAccess | None) -> list[str]:
    if usi is not None and usi.access:
        return list(usi.access)
    return list(user.access)


async def find_user_by_name(name: str, session: Session = None) -> User | None:
    return await User.find_one(User.name == name, session=session)


async def get_user(name: str, session: Session = None) -> User:
    user = await find_user_by_name(name, session)
    if user is None:
        raise NotFound(f"user {name!r} does not exist" + await name_hint(User, name, session))
    return user


async def find_user(*, name: str | None = None, uid: int | None = None,
                    email: str | None = None, session: Session = None) -> User:
    """Exactly one of name, uid or email; ``NotFound`` when nobody matches."""
    given = [(k, v) for k, v in (("name", name), ("uid", uid), ("email", email)) if v is not None]
    if len(given) != 1:
        raise InvalidInput("look a user up by exactly one of name, uid or email")
    key, value = given[0]
    users = await User.find({key: value}, session=session).limit(2).to_list()
    if not users:
        raise NotFound(f"user {value!r} does not exist"
                       + await name_hint(User, str(value), session) if key == "name"
                       else f"no user with {key} {value!r}")
    if len(users) > 1:
        raise InvalidInput(f"several users have {key} {value!r}; look up by name instead")
    return users[0]


async def find_site_info(user: str, site: str, session: Session = None) -> UserSiteInfo | None:
    return await select_one(UserSiteInfo, session, user=user, site=site)


async def get_site_info(user: str, site: str, session: Session = None) -> UserSiteInfo:
    usi = await find_site_info(user, site, session)
    if usi is None:
        raise NotFound(f"user {user!r} is not on site {site!r}")
    return usi


async def site_infos_for(site: str, users: list[str],
                         session: Session = None) -> dict[str, UserSiteInfo]:
    """user name -> their record at ``site`` (one query for any number of users)."""
    wanted = set(users)
    found = await UserSiteInfo.find({"site": site}, session=session).to_list()
    return {usi.user: usi for usi in found if usi.user in wanted}


async def user_site_infos(user: str, session: Session = None) -> list[UserSiteInfo]:
    return await UserSiteInfo.find(UserSiteInfo.user == user, session=session).sort(
        +UserSiteInfo.site).to_list()


async def user_sites(user: str, session: Session = None) -> list[str]:
    return [usi.site for usi in await user_site_infos(user, session)]


async def user_active_sites(user: User, session: Session = None) -> list[str]:
    """Sites where the user's effective status is ``active``, sorted."""
    return [usi.site for usi in await user_site_infos(user.name, session)
            if effective_status(user, usi) == "active"]


@dataclass(frozen=True)
class SiteOverride:
    site: str
    status: str | None
    access: list[str]
    effective_status: str | None
    effective_access: list[str]

    def as_dict(self) -> dict[str, Any]:
        return {"site": self.site, "status_override": self.status,
                "access_override": self.access, "effective_status": self.effective_status,
                "effective_access": self.effective_access}


async def user_site_overrides(user: User, session: Session = None) -> list[SiteOverride]:
    return [SiteOverride(usi.site, usi.status, list(usi.access), effective_status(user, usi),
                         effective_access(user, usi))
            for usi in await user_site_infos(user.name, session)]


async def list_user_ssh_keys(user: str, session: Session = None) -> list[SshKey]:
    return await SshKey.find(SshKey.user == user, session=session).sort(
        +SshKey.created_at).to_list()


async def _check_filters(status: str | None, access: str | None, type: str | None,
                         group: str | None, session: Session) -> None:
    """Unknown values are typos, not "nobody": refuse them before any read of users."""
    from .group import get_group

    if type is not None and type not in USER_TYPES:
        raise InvalidInput(f"user type {type!r} is not one of {', '.join(USER_TYPES)}")
    if status is not None:
        await require_status(status, session)
    if access is not None:
        await require_access([access], session)
    if group is not None:
        await get_group(group, session)


async def _global_query(status: str | None, access: str | None, type: str | None,
                        group: str | None, operator: Operator,
                        session: Session) -> dict[str, Any]:
    """The store filter for global (not site-effective) values."""
    from .group import group_members_anywhere

    clauses: list[dict[str, Any]] = []
    if type is not None:
        clauses.append({"type": type})
    if status is not None:
        clauses.append({"status": status})
    if access is not None:
        # $in, not equality: the embedded store's index on an array field makes a
        # sole equality condition on it match nothing.
        clauses.append({"access": {"$in": [access]}})
    if group is not None:
        clauses.append({"name": name_in(await group_members_anywhere(group, session))})
    if len(clauses) == 1:
        return clauses[0]
    if operator == "AND" and clauses:
        return all_of(clauses)
    if clauses:
        return {"$or": clauses}
    return {}


def all_of(clauses: list[dict[str, Any]]) -> dict[str, Any]:
    """The conjunction of one-field ``clauses``: one document when their fields differ.

    Why: the embedded store answers an explicit ``$and`` in Python (a page of 100 active
    users of one type: 250 ms at 10k users) but a multi-field document in SQL (34 ms);
    MongoDB reads both the same way.
    """
    merged: dict[str, Any] = {}
    for clause in clauses:
        if merged.keys() & clause.keys():
            return {"$and": clauses}
        merged.update(clause)
    return merged


async def _site_names(site: str, *, status: str | None, access: str | None,
                      type: str | None, group: str | None, operator: Operator,
                      session: Session) -> list[str]:
    """Sorted names of the site's users matching the site-effective filters, from
    projected columns (no model per user): the site's records, and the users' own status,
    access and type only when a filter needs them."""
    from .group import effective_group_members

    if await Site.find_one(Site.name == site, session=session) is None:
        raise NotFound(f"site {site!r} does not exist")
    here = {r["user"]: _Effective(r.get("status"), r.get("access") or [])
            for r in await columns(UserSiteInfo, {"site": site}, "user", "status", "access",
                                   session=session)}
    people: dict[str, tuple[str | None, _Effective]] = {}
    if status is not None or access is not None or type is not None:
        people = {r["name"]: (r.get("type"), _Effective(r.get("status"), r.get("access") or []))
                  for r in await columns(User, {}, "name", "type", "status", "access",
                                         session=session) if r["name"] in here}
    sets: list[set[str]] = []
    if type is not None:
        sets.append({n for n, (t, _) in people.items() if t == type})
    if status is not None:
        sets.append({n for n, (_, u) in people.items()
                     if effective_status(u, here[n]) == status})
    if access is not None:
        sets.append({n for n, (_, u) in people.items()
                     if access in effective_access(u, here[n])})
    if group is not None:
        sets.append(set(await effective_group_members(group, site, session)))
    if not sets:
        names = set(here)
    elif operator == "AND":
        names = set.intersection(*sets)
    else:
        names = set.union(*sets)
    return sorted(n for n in names if n in here)


@dataclass(frozen=True)
class _Effective:
    """The status and access of a projected row (what ``StatusAccess`` reads)."""

    status: str | None
    access: list[str]


async def find_users(*, status: str | None = None, access: str | None = None,
                     type: str | None = None, site: str | None = None,
                     group: str | None = None, operator: Operator = "AND",
                     limit: int | None = None, session: Session = None) -> list[User]:
    """Users matching the filters, sorted by name.

    Each filter gives a set of users, combined with ``operator``. With ``site``, only
    users on that site are considered, and status, access and group use that site's
    effective values (overrides, sticky groups). The number of queries does not depend on
    the number of users.
    """
    if operator not in ("AND", "OR"):
        raise InvalidInput(f"operator must be AND or OR, not {operator!r}")
    require_limit(limit)
    await _check_filters(status, access, type, group, session)
    if site is None:
        query = await _global_query(status, access, type, group, operator, session)
        cursor = User.find(query, session=session).sort(+User.name)
        if limit:
            cursor = cursor.limit(limit)
        return await cursor.to_list()
    chosen = await _site_names(site, status=status, access=access, type=type, group=group,
                               operator=operator, session=session)
    return await _users_named(chosen[:limit] if limit else chosen, session)


async def page_users(*, limit: int, offset: int = 0, status: str | None = None,
                     access: str | None = None, type: str | None = None,
                     site: str | None = None, group: str | None = None,
                     session: Session = None) -> tuple[list[User], int]:
    """One page of ``find_users`` (filters ANDed) and the number of matches.

    Why: a list route asked for ten users built a model for every user at the site (50k:
    seconds on the event loop). Globally the store skips, limits and counts; at a site
    the page's names come from the site's records (``_site_page``) and only the page's
    users are built.
    """
    require_limit(limit)
    await _check_filters(status, access, type, group, session)
    if site is None:
        query = await _global_query(status, access, type, group, "AND", session)
        total = await count(User, query, session)
        if offset >= total:
            return [], total
        found = await User.find(query, session=session).sort(+User.name).skip(
            offset).limit(limit).to_list()
        return found, total
    names, total = await _site_page(site, offset, limit, status=status, access=access,
                                    type=type, group=group, session=session)
    return await _users_named(names, session), total


async def page_user_rows(*, limit: int, offset: int = 0, fields: tuple[str, ...],
                         status: str | None = None, access: str | None = None,
                         type: str | None = None, site: str | None = None,
                         group: str | None = None,
                         session: Session = None) -> tuple[list[dict[str, Any]], int]:
    """``page_users`` as raw rows of ``fields`` (a missing optional field is absent:
    callers fill the model's default), for a list route that shows a few fields.

    Why: building the page's 100 models cost as much as reading them (7 ms of 14); the
    rows were validated on the way in. The number of store commands is the same for any
    page of any site: a count and one read, plus one read of the site's page of names
    (no filter but the site or a sticky group) or of a group's edges (a group at a site),
    and the page's users by one indexed name range. Only a site-effective filter (status,
    access or type with ``site``) still reads the site's records as columns: the
    effective values live on two documents, which the store cannot join.
    """
    require_limit(limit)
    await _check_filters(status, access, type, group, session)
    projection = _projection(fields)
    if site is None:
        query = await _global_query(status, access, type, group, "AND", session)
        total = await count(User, query, session)
        if offset >= total:
            return [], total
        cursor = User.get_pymongo_collection().find(
            query, projection, session=session, batch_size=limit).sort(
            "name", 1).skip(offset).limit(limit)
        return [row async for row in cursor], total
    names, total = await _site_page(site, offset, limit, status=status, access=access,
                                    type=type, group=group, session=session)
    found = {row["name"]: row for row in await _named_rows(names, projection, session)}
    return [found[n] for n in names if n in found], total


def _projection(fields: tuple[str, ...]) -> dict[str, int]:
    """Only ``fields`` (the name always: pages are joined and ordered by it)."""
    return {"_id": 0, "name": 1} | {field: 1 for field in fields}


async def _site_page(site: str, offset: int, limit: int, *, status: str | None,
                     access: str | None, type: str | None, group: str | None,
                     session: Session) -> tuple[list[str], int]:
    """The sorted names of one page of the site's users matching the filters, and how
    many match: ``_site_names(...)[offset:offset + limit]`` and its length, cut by the
    store when only the site (or a group there) filters.

    Why: every name at a site is one site record; a page of them is the site's records
    sorted by user, skipped and limited in the store (the ``site`` index), counted with a
    one-row ``$group``. A sticky group's members at its site are all the site's users; a
    plain group's are its member edges there, checked against the site's records (one
    ``$in`` read of the group's size, not the site's).
    """
    if status is not None or access is not None or type is not None:
        chosen = await _site_names(site, status=status, access=access, type=type,
                                   group=group, operator="AND", session=session)
        return chosen[offset:offset + limit], len(chosen)
    found = await Site.find_one(Site.name == site, session=session)
    if found is None:
        raise NotFound(f"site {site!r} does not exist")
    records = UserSiteInfo.get_pymongo_collection()
    if group is None or group in found.group.sticky:
        match = {"site": site}
        total = await count(UserSiteInfo, match, session)
        if offset >= total:
            return [], total
        cursor = records.find(match, {"_id": 0, "user": 1}, session=session,
                              batch_size=limit).sort("user", 1).skip(offset).limit(limit)
        return [row["user"] async for row in cursor], total
    from .group import effective_group_members

    members = await effective_group_members(group, site, session)
    here: set[str] = set()
    if members:
        cursor = records.find({"site": site, "user": name_in(members)},
                              {"_id": 0, "user": 1}, session=session, batch_size=ROWS_BATCH)
        here = {row["user"] async for row in cursor}
    chosen = [name for name in members if name in here]  # members are sorted
    return chosen[offset:offset + limit], len(chosen)


async def _named_rows(names: list[str], projection: dict[str, int],
                      session: Session) -> list[dict[str, Any]]:
    """The projected users of ``names`` (one read of their name range)."""
    if not names:
        return []
    cursor = User.get_pymongo_collection().find({"name": name_in(names)}, projection,
                                                session=session, batch_size=ROWS_BATCH)
    return [row async for row in cursor]


async def _users_named(names: list[str], session: Session) -> list[User]:
    """The users of ``names``, in that order (one read of their name range)."""
    if not names:
        return []
    found = {u.name: u for u in await User.find({"name": name_in(names)},
                                                session=session).to_list()}
    return [found[n] for n in names if n in found]


async def find_redundant_site_statuses(session: Session = None) -> list[tuple[User, UserSiteInfo]]:
    """Site records whose status override equals the user's global status."""
    usis = await UserSiteInfo.find({"status": {"$ne": None}}, session=session).to_list()
    users = {u.name: u for u in await User.find(In(User.name, sorted({u.user for u in usis})),
                                                session=session).to_list()}
    return [(users[u.user], u) for u in usis
            if u.user in users and users[u.user].status == u.status]
