"""Site membership: a ``UserSiteInfo`` row means "this user is on this site"."""

from __future__ import annotations

from typing import Any

from pymongo.asynchronous.client_session import AsyncClientSession

from ..errors import AlreadyExists
from ..models import User, UserSiteInfo
from ..models.fields import PosixName, SiteName
from ..queries.site import get_site
from ..queries.user import find_site_info, find_user_by_name, get_site_info, get_user
from .base import OpArgs, Operation
from .common import mark_ldap_dirty, mark_root_key_holders_dirty


class _SiteUserOp(Operation):
    class Args(OpArgs):
        user: PosixName
        site: SiteName

    def describe(self) -> dict[str, Any]:
        return {"user": self.args.user, "site": self.args.site}


class AddSiteUser(_SiteUserOp):
    """Put a user on a site. The new record inherits the global status and access (no
    override), so adding a globally inactive user to a site does not revive them."""

    op_name = "add_site_user"

    async def execute(self, session: AsyncClientSession) -> UserSiteInfo:
        user = await get_user(self.args.user, session)
        site = await get_site(self.args.site, session)
        if await find_site_info(user.name, site.name, session):
            raise AlreadyExists(f"user {user.name!r} is already on site {site.name!r}")
        usi = UserSiteInfo(user=user.name, site=site.name)
        await usi.insert(session=session)
        await mark_ldap_dirty(User, [user.name], session)
        if user.type == "admin":  # an admin's root-ssh reach (system users' keys) moved
            await mark_root_key_holders_dirty(session)
        return usi


class RemoveSiteUser(_SiteUserOp):
    """Take a user off a site. Group memberships at the site are kept, so re-adding the
    user restores them; storages are untouched."""

    op_name = "remove_site_user"

    async def execute(self, session: AsyncClientSession) -> UserSiteInfo:
        await get_site(self.args.site, session)
        usi = await get_site_info(self.args.user, self.args.site, session)
        await usi.delete(session=session)
        await mark_ldap_dirty(User, [self.args.user], session)
        user = await find_user_by_name(self.args.user, session)
        if user is not None and user.type == "admin":
            await mark_root_key_holders_dirty(session)
        return usi
