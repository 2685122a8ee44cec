"""Helpers shared by operations: id allocation, LDAP dirty marks and rename cascades."""

from __future__ import annotations

from collections.abc import Iterable

from beanie import Document
from pymongo.asynchronous.client_session import AsyncClientSession

from ..constants import IdBand
from ..errors import Conflict
from ..models import Group, User, UserSiteInfo
from ..models.base import BaseDoc
from ..models.references import GROUP_REFERENCES, USER_REFERENCES, Reference
from ..store import Write, defer


async def next_free_id(band: IdBand, session: AsyncClientSession) -> int:
    """One above the highest uid or gid in ``band`` (or its start).

    Users and groups are both scanned because a user's personal group takes the user's
    id as its gid; an allocator that saw only one collection could hand out an id whose
    twin is taken. Racing allocators on MongoDB conflict inside their transactions and
    are retried by ``Operation.run``.
    """
    top = band.start - 1
    span = {"$gte": band.start, "$lt": band.stop}
    user = await User.find({"uid": span}, session=session).sort(-User.uid).limit(1).to_list()
    group = await Group.find({"gid": span}, session=session).sort(-Group.gid).limit(1).to_list()
    if user:
        top = max(top, user[0].uid)
    if group:
        top = max(top, group[0].gid)
    candidate = top + 1
    if candidate >= band.stop:
        raise Conflict(f"no free id left in {band.start}..{band.stop - 1}")
    return candidate


async def mark_ldap_dirty(model: type[Document], names: Iterable[str],
                          session: AsyncClientSession) -> None:
    """Make records whose LDAP projection depends on another document look modified.

    Query-level updates bypass document hooks, so this neither recomputes fingerprints
    nor bumps ``updated_at``; it moves ``ldap.version`` (``$inc``, in the caller's
    transaction: what decides dirtiness, ``models.base.LDAPInfo``) and ``ldap.modified_at``
    (display). ``$currentDate`` rather than ``$set`` of a datetime: the embedded store
    stores a ``$set`` datetime as a string.
    """
    # One update per name, by the name's unique index (not a find and an update by _id:
    # the embedded store serves a single-field equality on an indexed field through the
    # index in updates too; ``$in`` would scan). In an operation's transaction they are
    # sent with its History row, in one command (``store.defer``): nothing reads them
    # back before the commit, and a ``save()`` of the same record later in the
    # transaction then cannot overwrite the bump.
    collection = model.get_pymongo_collection()
    update = {"$currentDate": {"ldap.modified_at": True}, "$inc": {"ldap.version": 1}}
    for name in sorted(set(names)):
        if not defer(session, Write(collection.name, filter={"name": name}, update=update)):
            await collection.update_one({"name": name}, update, session=session)


async def mark_root_key_holders_dirty(session: AsyncClientSession) -> None:
    """System users carry the root-ssh admins' keys in LDAP; an admin's keys, type, site
    presence or root-ssh access changing changes every system user's entry."""
    found = await User.get_pymongo_collection().find(
        {"type": "system"}, {"name": 1}, session=session).to_list()
    await mark_ldap_dirty(User, [doc["name"] for doc in found], session)


async def cascade_rename(references: tuple[Reference, ...], old: str, new: str,
                         session: AsyncClientSession) -> dict[str, int]:
    """Rewrite every reference from ``old`` to ``new``; returns changed counts per field."""
    counts: dict[str, int] = {}
    for ref in references:
        collection = ref.model.get_pymongo_collection()
        # Query-level updates skip document hooks, so bump updated_at here.
        stamp = {"$currentDate": {"updated_at": True}} if issubclass(ref.model, BaseDoc) else {}
        if ref.is_list:
            # $in, not equality: see queries.group on indexed array fields.
            result = await collection.update_many(
                {ref.field: {"$in": [old]}}, {"$set": {f"{ref.field}.$[ref]": new}, **stamp},
                array_filters=[{"ref": old}], session=session)
        else:
            result = await collection.update_many(
                {ref.field: old}, {"$set": {ref.field: new}, **stamp}, session=session)
        if result.modified_count:
            counts[ref.label] = result.modified_count
    return counts


async def cascade_user_rename(old: str, new: str, session: AsyncClientSession) -> dict[str, int]:
    return await cascade_rename(USER_REFERENCES, old, new, session)


async def cascade_group_rename(old: str, new: str, session: AsyncClientSession) -> dict[str, int]:
    return await cascade_rename(GROUP_REFERENCES, old, new, session)


def global_status_comment(status: str, reason: str) -> str:
    """The comment a status change by IAM or a programme's end leaves on the user."""
    return f"status={status}, scope=global, reason={reason}"


async def clear_site_statuses(user: str, session: AsyncClientSession) -> list[str]:
    """Drop the user's per-site status overrides, so the global status applies
    everywhere; returns the sites that had one (IAM's reactivation and reaping, a
    programme's end)."""
    cleared = []
    for usi in await UserSiteInfo.find(UserSiteInfo.user == user, session=session).to_list():
        if usi.status is not None:
            usi.status, usi.expires_at = None, None
            await usi.save(session=session)
            cleared.append(usi.site)
    if cleared:
        await mark_ldap_dirty(User, [user], session)
    return sorted(cleared)
