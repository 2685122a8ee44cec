"""Site membership: a ``UserSiteInfo`` row means "this user is on this site"."""

from __future__ import annotations

from typing import Any

from pymongo.asynchronous.client_session import AsyncClientSession

from ..errors import AlreadyExists
from ..models import Site, User, UserSiteInfo
from ..models.base import insert_document
from ..models.fields import PosixName, SiteName
from ..queries.site import get_site
from ..queries.together import Part, read_together
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
        if self.nested:
            return await self._execute_nested(session)
        # On its own: the user and the site in one read; the membership row goes in the
        # command before the commit, its unique index (user, site) refusing a second
        # one, explained after the transaction (no pre-check read on every run).
        users, sites = await read_together(self.store.database, [
            Part(User.get_settings().name, "name", self.args.user, ("name", "type")),
            Part(Site.get_settings().name, "name", self.args.site, ("name",))], session)
        user_name = users[0]["name"] if users else (await get_user(self.args.user,
                                                                   session)).name
        site_name = sites[0]["name"] if sites else (await get_site(self.args.site,
                                                                   session)).name
        usi = UserSiteInfo(user=user_name, site=site_name)

        async def clash() -> Exception | None:
            if await find_site_info(user_name, site_name):
                return AlreadyExists(f"user {user_name!r} is already on site {site_name!r}")
            return None

        self.explain_clash = clash
        await self.insert_later(session, UserSiteInfo.get_settings().name,
                                insert_document(usi))
        await mark_ldap_dirty(User, [user_name], session)
        if users and users[0].get("type") == "admin":  # an admin's root-ssh reach moved
            await mark_root_key_holders_dirty(session)
        return usi

    async def _execute_nested(self, session: AsyncClientSession) -> UserSiteInfo:
        """Within another operation, which may read the row back: inserted now, after
        the checks."""
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
