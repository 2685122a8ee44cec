"""Site operations: create/remove, aliases, and sticky groups."""

from __future__ import annotations

from typing import Any

from pymongo.asynchronous.client_session import AsyncClientSession

from ..errors import AlreadyExists, Conflict, InvalidInput
from ..models import Group, Site
from ..models.fields import Fqdn, PosixName, SiteAlias, SiteName
from ..queries.group import get_group
from ..queries.site import SITE_LINKED_MODELS, find_site, find_site_by_name, get_site
from .base import OpArgs, Operation
from .common import mark_ldap_dirty


class CreateSite(Operation):
    op_name = "create_site"

    class Args(OpArgs):
        name: SiteName
        fqdn: Fqdn

    async def execute(self, session: AsyncClientSession) -> Site:
        name, fqdn = self.args.name, self.args.fqdn
        if await find_site_by_name(name, session):
            raise AlreadyExists(f"site {name!r} already exists")
        clash = await find_site(name, session) or await find_site(fqdn, session)
        if clash is not None:
            raise AlreadyExists(f"{name!r}/{fqdn!r} already names site {clash.name!r} "
                                "(by fqdn or alias)")
        self.site = Site(name=name, fqdn=fqdn)
        await self.site.insert(session=session)
        return self.site

    def describe(self) -> dict[str, Any]:
        return {"site": self.args.name, "fqdn": self.args.fqdn}


class RemoveSite(Operation):
    """Delete a site and everything that exists only at it (memberships, Slurm and
    storage records, HiPPO events). Users and groups themselves are untouched."""

    op_name = "remove_site"

    class Args(OpArgs):
        name: SiteName

    async def execute(self, session: AsyncClientSession) -> dict[str, int]:
        site = await get_site(self.args.name, session)
        self.names = {"fqdn": site.fqdn, "aliases": list(site.aliases)}  # for History
        self.deleted: dict[str, int] = {}
        for label, model in SITE_LINKED_MODELS:
            result = await model.find({"site": site.name}, session=session).delete(
                session=session)
            self.deleted[label] = result.deleted_count if result else 0
        await site.delete(session=session)
        return self.deleted

    def describe(self) -> dict[str, Any]:
        return {"site": self.args.name, **self.names, "deleted": self.deleted}


class _SiteAliasOp(Operation):
    class Args(OpArgs):
        site: SiteName
        alias: SiteAlias


class AddSiteAlias(_SiteAliasOp):
    """Idempotent; refuses an alias that already names another site (name, fqdn, alias)."""

    op_name = "add_site_alias"

    async def execute(self, session: AsyncClientSession) -> Site:
        site = await get_site(self.args.site, session)
        alias = self.args.alias
        self.changed = alias not in site.aliases
        if not self.changed:
            return site
        other = await find_site(alias, session)
        if other is not None and other.name != site.name:
            raise Conflict(f"alias {alias!r} already names site {other.name!r}")
        if alias in (site.name, site.fqdn):
            raise InvalidInput(f"{alias!r} is already the site's name or fqdn")
        site.aliases.append(alias)
        await site.save(session=session)
        return site

    def describe(self) -> dict[str, Any]:
        return {"site": self.args.site, "alias": self.args.alias, "changed": self.changed}


class RemoveSiteAlias(_SiteAliasOp):
    op_name = "remove_site_alias"

    async def execute(self, session: AsyncClientSession) -> Site:
        site = await get_site(self.args.site, session)
        self.changed = self.args.alias in site.aliases
        if self.changed:
            site.aliases = [a for a in site.aliases if a != self.args.alias]
            await site.save(session=session)
        return site

    def describe(self) -> dict[str, Any]:
        return {"site": self.args.site, "alias": self.args.alias, "changed": self.changed}


class _StickyGroupOp(Operation):
    class Args(OpArgs):
        site: SiteName
        group: PosixName


class AddStickyGroup(_StickyGroupOp):
    """Every user on the site becomes a member of the group there. Idempotent."""

    op_name = "add_sticky_group"

    async def execute(self, session: AsyncClientSession) -> Site:
        site = await get_site(self.args.site, session)
        group = await get_group(self.args.group, session)
        if group.is_special:
            raise InvalidInput(f"{group.name!r} is an {group.type} group; grant access or set "
                               "status instead of making it sticky")
        if group.type == "user":
            raise InvalidInput(f"{group.name!r} is a personal group and cannot be sticky")
        self.changed = group.name not in site.group.sticky
        if self.changed:
            site.group.sticky = [*site.group.sticky, group.name]
            await site.save(session=session)
            await mark_ldap_dirty(Group, [group.name], session)
        return site

    def describe(self) -> dict[str, Any]:
        return {"site": self.args.site, "group": self.args.group, "changed": self.changed}


class RemoveStickyGroup(_StickyGroupOp):
    op_name = "remove_sticky_group"

    async def execute(self, session: AsyncClientSession) -> Site:
        site = await get_site(self.args.site, session)
        self.changed = self.args.group in site.group.sticky
        if self.changed:
            site.group.sticky = [g for g in site.group.sticky if g != self.args.group]
            await site.save(session=session)
            await mark_ldap_dirty(Group, [self.args.group], session)
        return site

    def describe(self) -> dict[str, Any]:
        return {"site": self.args.site, "group": self.args.group, "changed": self.changed}
