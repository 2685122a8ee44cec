"""Membership roles (member, sponsor, sudoer, slurmer) on (user, group, site) edges.

Adding a role creates the edge or extends it; removing a role shrinks it and deletes it
with its last role. Both are idempotent. Access and status groups are not joined this
way: they follow a user's access and status.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pymongo.asynchronous.client_session import AsyncClientSession

from ..errors import InvalidInput
from ..models import Group, GroupMembership, Site, User
from ..models.base import insert_document
from ..models.fields import PosixName, SiteName, utcnow
from ..models.group import PROGRAM, SPECIAL_GROUP_TYPES
from ..queries.access_policy import as_utc
from ..queries.group import get_group
from ..queries.site import get_site
from ..queries.together import Part, read_together
from ..queries.user import get_user
from .base import OpArgs, Operation
from .common import mark_ldap_dirty


class _MembershipOp(Operation):
    role: ClassVar[str]
    adding: ClassVar[bool]

    class Args(OpArgs):
        group: PosixName
        user: PosixName
        site: SiteName

    async def execute(self, session: AsyncClientSession) -> GroupMembership | None:
        a = self.args
        group, user_name, site_name, found = await self._read(session)
        if group["type"] in SPECIAL_GROUP_TYPES:
            raise InvalidInput(f"{group['name']!r} is an {group['type']} group; use `ng user "
                               f"{'add' if group['type'] == 'access' else 'status'}` instead")
        group_name = group["name"]
        edge = next((GroupMembership.model_validate(e) for e in found
                     if e.get("group") == group_name and e.get("site") == site_name), None)
        self.changed = False
        if self.adding:
            if edge is None:
                edge = GroupMembership(user=user_name, group=group_name, site=site_name,
                                       roles=[self.role])
                # on its own: in the command before the commit (the unique index on
                # (user, group, site) refuses a racing twin there)
                await self.insert_later(session, GroupMembership.get_settings().name,
                                        insert_document(edge))
                self.changed = True
            elif self.role not in edge.roles:
                edge.roles = [*edge.roles, self.role]
                await edge.save(session=session)
                self.changed = True
        elif edge is not None and self.role in edge.roles:
            remaining = [r for r in edge.roles if r != self.role]
            if remaining:
                edge.roles = remaining
                await edge.save(session=session)
            else:
                await edge.delete(session=session)
                edge = None
            self.changed = True
        self.expiry_from_program = None
        if self.adding and self.role == "member" and group["type"] == PROGRAM:
            await self._program_expiry(await get_group(a.group, session),
                                       await get_user(user_name, session), session)
        if self.changed:
            await mark_ldap_dirty(User, [user_name], session)
            await mark_ldap_dirty(Group, [group_name], session)
        return edge

    async def _read(self, session: AsyncClientSession) -> tuple[
            dict[str, Any], str, str, list[dict[str, Any]]]:
        """The group (name, type), the user's and the site's names and the user's edges,
        in one command (``queries.together``); a miss asks the query that says why (in
        the order the checks always ran: group, user, site)."""
        a = self.args
        groups, users, sites, edges = await read_together(self.store.database, [
            Part(Group.get_settings().name, "name", a.group, ("name", "type")),
            Part(User.get_settings().name, "name", a.user, ("name",)),
            Part(Site.get_settings().name, "name", a.site, ("name",)),
            Part(GroupMembership.get_settings().name, "user", a.user)], session)
        if not groups:
            await get_group(a.group, session)
        if not users:
            await get_user(a.user, session)
        site_name = sites[0]["name"] if sites else (await get_site(a.site, session)).name
        group = groups[0] if groups else {}
        return ({"name": group.get("name", a.group), "type": group.get("type")},
                users[0]["name"] if users else a.user, site_name, edges)

    async def _program_expiry(self, group: Group, user: User,
                              session: AsyncClientSession) -> None:
        """A programme's new member without an expiry gets its end (an explicit expiry
        wins); one that has ended takes no members (``operations/program.py``)."""
        ends = as_utc(group.ends_at)
        if ends is not None and ends <= utcnow():
            raise InvalidInput(f"programme {group.name!r} ended {ends:%Y-%m-%d}; extend it "
                               f"first (ng program edit -g {group.name} --end WHEN)")
        if user.expires_at is None and ends is not None:
            user.expires_at = ends
            await user.save(session=session)
            self.expiry_from_program = ends

    def describe(self) -> dict[str, Any]:
        a = self.args
        out = {"group": a.group, "user": a.user, "site": a.site, "role": self.role,
               "changed": self.changed}
        if self.expiry_from_program is not None:
            out["expires_at_from_program"] = self.expiry_from_program
        return out


class AddGroupMember(_MembershipOp):
    op_name, role, adding = "add_group_member", "member", True


class RemoveGroupMember(_MembershipOp):
    op_name, role, adding = "remove_group_member", "member", False


class AddGroupSponsor(_MembershipOp):
    op_name, role, adding = "add_group_sponsor", "sponsor", True


class RemoveGroupSponsor(_MembershipOp):
    op_name, role, adding = "remove_group_sponsor", "sponsor", False


class AddGroupSudoer(_MembershipOp):
    op_name, role, adding = "add_group_sudoer", "sudoer", True


class RemoveGroupSudoer(_MembershipOp):
    op_name, role, adding = "remove_group_sudoer", "sudoer", False


class AddGroupSlurmer(_MembershipOp):
    op_name, role, adding = "add_group_slurmer", "slurmer", True


class RemoveGroupSlurmer(_MembershipOp):
    op_name, role, adding = "remove_group_slurmer", "slurmer", False
