"""Expiries set after creation: one user's (``ng user expire``) or every member of a
group's (``ng group expire``).

An offboarding user without an expiry is never reaped (``queries.offboarding.
offboarding_without_expiry`` names them in the reap's dry run and in the audit); these
operations are how an operator gives them one, or takes one away (``clear``).

Size: ``SetGroupExpiry`` is one transaction and one History row for the whole group.
Each changed member is one replace by ``_id`` (``save``; a ``$set`` of a datetime is
stored as text by the embedded store, so no ``update_many``): a user document is about
a kilobyte, so 2,000 members write about 2 MB, far under MongoDB's transaction limits
(16 MiB per oplog entry before 4.2, the cache, the 60 s lifetime;
``tests/operations/test_expiry.py`` runs 2,000 members with a 60 s lifetime). Members
whose expiry already has the value are not written.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import model_validator
from pymongo.asynchronous.client_session import AsyncClientSession

from ..errors import InvalidInput
from ..models import GroupMembership, User
from ..models.fields import PosixName, SiteName
from ..queries.access_policy import as_utc
from ..queries.group import get_group
from ..queries.site import get_site
from ..queries.user import get_user
from .base import OpArgs, Operation

MAX_YEAR = 9999


def _when(value: datetime | None) -> datetime | None:
    """UTC, to the millisecond (what the store keeps), so equal times compare equal."""
    value = as_utc(value)
    if value is None:
        return None
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


class _ExpiryArgs(OpArgs):
    expires_at: datetime | None = None
    clear: bool = False

    @model_validator(mode="after")
    def _one_of(self) -> _ExpiryArgs:
        if self.clear == (self.expires_at is not None):
            raise ValueError("give either an expiry or clear, not both or neither")
        return self


class SetUserExpiry(Operation):
    """Set or clear one user's global expiry (``User.expires_at``)."""

    op_name = "set_user_expiry"

    class Args(_ExpiryArgs):
        user: PosixName

    async def execute(self, session: AsyncClientSession) -> User:
        a = self.args
        user = await get_user(a.user, session)
        self.before = user.expires_at
        wanted = _when(a.expires_at)
        self.changed = _when(user.expires_at) != wanted
        if self.changed:
            user.expires_at = wanted
            await user.save(session=session)
        self.user = user
        return user

    def describe(self) -> dict[str, Any]:
        return {"user": self.user.name, "status": self.user.status, "before": self.before,
                "expires_at": self.user.expires_at, "changed": self.changed}


async def set_members_expiry(group: str, site: str | None, expires_at: datetime | None,
                             session: AsyncClientSession, *, only_if: Any = None
                             ) -> tuple[list[str], list[str]]:
    """Set the expiry of every member (role ``member``) of ``group`` (at ``site``, or at
    any site); ``only_if(user)`` narrows who is changed. Returns (members, changed)."""
    edges = await GroupMembership.find(GroupMembership.group == group,
                                       session=session).to_list()
    names = sorted({e.user for e in edges if "member" in e.roles
                    and (site is None or e.site == site)})
    changed: list[str] = []
    wanted = _when(expires_at)
    for start in range(0, len(names), 500):  # a short $in per read
        for user in await User.find({"name": {"$in": names[start:start + 500]}},
                                    session=session).to_list():
            if _when(user.expires_at) == wanted or (only_if and not only_if(user)):
                continue
            user.expires_at = wanted
            await user.save(session=session)
            changed.append(user.name)
    return names, sorted(changed)


class SetGroupExpiry(Operation):
    """Set or clear the expiry of every member of a group (optionally at one site), in
    one transaction (see the module doc for its size)."""

    op_name = "set_group_expiry"

    class Args(_ExpiryArgs):
        group: PosixName
        site: SiteName | None = None

    def touched_sites(self) -> frozenset[str] | None:
        return None  # a user's expiry shows at every site they are on

    async def execute(self, session: AsyncClientSession) -> list[str]:
        a = self.args
        group = await get_group(a.group, session)
        if group.is_special:
            raise InvalidInput(f"{group.name!r} is an {group.type} group: its members are "
                               "people with that access or status; set their expiries one "
                               "by one")
        site = (await get_site(a.site, session)).name if a.site else None
        self.members, self.changed = await set_members_expiry(group.name, site,
                                                              a.expires_at, session)
        self.site = site
        return self.changed

    def describe(self) -> dict[str, Any]:
        a = self.args
        return {"group": a.group, "site": self.site, "expires_at": _when(a.expires_at),
                "members": len(self.members), "changed": self.changed}
