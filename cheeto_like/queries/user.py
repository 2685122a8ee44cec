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
from ..models.base import columns, count, select_one
from ..validation import require_limit
from .access_status import require_access, require_status

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
        raise NotFound(f"user {name!r} does not exist" + await _name_hint(User, name, session))
    return user


async def _name_hint(model: Any, name: str, session: Session = None) -> str:
    """`` (did you mean …?)`` from the names of ``model`` (users or groups) closest to
    ``name``; only outside a transaction (a miss inside one aborts it anyway)."""
    from ..suggest import did_you_mean

    if session is not None or not name:
        return ""
    cursor = model.get_pymongo_collection().find({}, {"name": 1, "_id": 0}, batch_size=5000)
    return did_you_mean(name, [row["name"] async for row in cursor if row.get("name")])


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
                       + await _name_hint(User, str(value), session) if key == "name"
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
        clauses.append({"name": {"$in": sorted(await group_members_anywhere(group, session))}})
    if len(clauses) == 1:
        return clauses[0]
    if clauses:
        return {"$and" if operator == "AND" else "$or": clauses}
    return {}


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
    the matching names come from projected rows and only the page's users are built.
    """
    require_limit(limit)
    await _check_filters(status, access, type, group, session)
    if site is None:
        query = await _global_query(status, access, type, group, "AND", session)
        total = await count(User, query, session)
        found = await User.find(query, session=session).sort(+User.name).skip(
            offset).limit(limit).to_list()
        return found, total
    chosen = await _site_names(site, status=status, access=access, type=type, group=group,
                               operator="AND", session=session)
    return await _users_named(chosen[offset:offset + limit], session), len(chosen)


async def _users_named(names: list[str], session: Session) -> list[User]:
    """The users of ``names``, in that order (one ``$in`` read)."""
    if not names:
        return []
    found = {u.name: u for u in await User.find(In(User.name, names),
                                                session=session).to_list()}
    return [found[n] for n in names if n in found]


async def find_redundant_site_statuses(session: Session = None) -> list[tuple[User, UserSiteInfo]]:
    """Site records whose status override equals the user's global status."""
    usis = await UserSiteInfo.find({"status": {"$ne": None}}, session=session).to_list()
    users = {u.name: u for u in await User.find(In(User.name, sorted({u.user for u in usis})),
                                                session=session).to_list()}
    return [(users[u.user], u) for u in usis
            if u.user in users and users[u.user].status == u.status]
