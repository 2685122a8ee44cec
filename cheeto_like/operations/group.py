"""Group operations: creation in each id band, sponsor groups, rename, and seeding the
access/status groups."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field
from pymongo.asynchronous.client_session import AsyncClientSession

from ..constants import (
    ACCESS_GROUP_NAMES,
    CLASS_GROUP_BAND,
    ID_MAX,
    LAB_GROUP_BAND,
    SPECIAL_GID_START,
    SPONSOR_GID_BASE,
    STATUS_GROUP_NAMES,
    SYSTEM_GROUP_BAND,
    IdBand,
)
from ..errors import AlreadyExists, Conflict, InvalidInput
from ..models import Group, GroupMembership, User
from ..models.fields import PosixName, Shorthand, SiteName, UnixId
from ..queries.group import find_group_by_name, get_group
from ..queries.site import get_site
from ..queries.user import get_user
from .base import OpArgs, Operation
from .common import cascade_group_rename, next_free_id
from .names import claim_name, move_claim
from .slurm import rename_group_qos

CreatableType = Literal["group", "system", "admin", "class"]


async def _check_new_group(name: str, gid: int, session: AsyncClientSession) -> None:
    if existing := await find_group_by_name(name, session):
        raise AlreadyExists(f"group {name!r} already exists (gid {existing.gid})")
    if await User.find_one(User.name == name, session=session):
        raise AlreadyExists(f"a user named {name!r} exists; group names must not clash "
                            "with user names")
    if existing := await Group.find_one(Group.gid == gid, session=session):
        raise AlreadyExists(f"gid {gid} is already used by group {existing.name!r}")


class CreateGroup(Operation):
    """A group with an explicit gid. Personal, access and status groups come from their
    own operations (user creation, seeding), never from here."""

    op_name = "create_group"

    class Args(OpArgs):
        name: PosixName
        gid: UnixId
        type: CreatableType = "group"

    async def execute(self, session: AsyncClientSession) -> Group:
        a = self.args
        await _check_new_group(a.name, a.gid, session)
        self.group = Group(name=a.name, gid=a.gid, type=a.type)
        await claim_name(a.name, "group", session)
        await self.group.insert(session=session)
        return self.group

    def describe(self) -> dict[str, Any]:
        return {"group": self.group.name, "gid": self.group.gid, "type": self.group.type}


class _BandGroupOp(Operation):
    """A group whose gid is the next free one in ``band``."""

    band: IdBand
    group_type: str
    label: str

    class Args(OpArgs):
        name: PosixName

    async def execute(self, session: AsyncClientSession) -> Group:
        gid = await next_free_id(self.band, session)
        await _check_new_group(self.args.name, gid, session)
        self.group = Group(name=self.args.name, gid=gid, type=self.group_type)
        await claim_name(self.args.name, "group", session)
        await self.group.insert(session=session)
        return self.group

    def describe(self) -> dict[str, Any]:
        return {"group": self.group.name, "gid": self.group.gid, "type": self.label}


class CreateSystemGroup(_BandGroupOp):
    op_name = "create_system_group"
    band, group_type, label = SYSTEM_GROUP_BAND, "system", "system"


class CreateClassGroup(_BandGroupOp):
    op_name = "create_class_group"
    band, group_type, label = CLASS_GROUP_BAND, "class", "class"


class CreateLabGroup(_BandGroupOp):
    op_name = "create_lab_group"
    band, group_type, label = LAB_GROUP_BAND, "group", "lab"


class CreateGroupFromSponsor(Operation):
    """``<sponsor>grp`` with gid 100,000,000 + the sponsor's uid; the sponsor becomes its
    member and sponsor at the site."""

    op_name = "create_group_from_sponsor"

    class Args(OpArgs):
        sponsor: PosixName
        site: SiteName

    async def execute(self, session: AsyncClientSession) -> Group:
        sponsor = await get_user(self.args.sponsor, session)
        site = await get_site(self.args.site, session)
        name = f"{sponsor.name}grp"
        if len(name) > 32:
            raise InvalidInput(f"sponsor group name {name!r} would exceed 32 characters")
        gid = SPONSOR_GID_BASE + sponsor.uid
        if gid > ID_MAX:
            raise InvalidInput(f"sponsor uid {sponsor.uid} is too large for a sponsor gid")
        await _check_new_group(name, gid, session)
        self.group = Group(name=name, gid=gid, type="group")
        await claim_name(name, "group", session)
        await self.group.insert(session=session)
        await GroupMembership(user=sponsor.name, group=name, site=site.name,
                              roles=["member", "sponsor"]).insert(session=session)
        return self.group

    def describe(self) -> dict[str, Any]:
        return {"group": self.group.name, "gid": self.group.gid, "sponsor": self.args.sponsor,
                "site": self.args.site}


class RenameGroup(Operation):
    """Rename a group and every reference to it (memberships, Slurm accounts and
    associations, QOS named after it, sticky lists, storages) in one transaction. A
    personal group is renamed with its user (``ng user rename``), never on its own."""

    op_name = "rename_group"

    class Args(OpArgs):
        name: PosixName
        new_name: PosixName
        allow_personal: bool = False

    async def execute(self, session: AsyncClientSession) -> dict[str, int]:
        a = self.args
        if a.name == a.new_name:
            raise InvalidInput("the new name is the same as the old one")
        group = await get_group(a.name, session)
        if group.type == "user" and not a.allow_personal:
            raise Conflict(f"{a.name!r} is a personal group; rename its user instead")
        if await find_group_by_name(a.new_name, session):
            raise AlreadyExists(f"group {a.new_name!r} already exists")
        if not a.allow_personal and await User.find_one(User.name == a.new_name,
                                                        session=session):
            raise AlreadyExists(f"a user named {a.new_name!r} exists; group names must not "
                                "clash with user names")
        if group.type != "user":  # a personal group's name is its user's claim
            await move_claim(a.name, a.new_name, "group", session)
        group.name = a.new_name
        await group.save(session=session)
        self.references = await cascade_group_rename(a.name, a.new_name, session)
        self.references |= await rename_group_qos(a.name, a.new_name, session)
        return self.references

    def describe(self) -> dict[str, Any]:
        return {"group": self.args.name, "new_name": self.args.new_name,
                "references": self.references}


class SeedAccessStatusGroups(Operation):
    """Create the access groups (``sudo`` -> ``sudo-users`` …) and status groups
    (``active`` -> ``active-users`` …) that do not exist yet. Idempotent: existing
    shorthands are left alone; new gids count up from ``gid_start``, skipping used ones."""

    op_name = "seed_access_status_groups"

    class Args(OpArgs):
        gid_start: UnixId = SPECIAL_GID_START
        access_groups: dict[Shorthand, PosixName] = Field(
            default_factory=lambda: dict(ACCESS_GROUP_NAMES))
        status_groups: dict[Shorthand, PosixName] = Field(
            default_factory=lambda: dict(STATUS_GROUP_NAMES))

    async def execute(self, session: AsyncClientSession) -> dict[str, str]:
        a = self.args
        self.outcome: dict[str, str] = {}
        existing = await Group.find({"type": {"$in": ["access", "status"]}},
                                    session=session).to_list()
        have = {(g.type, g.shorthand) for g in existing}
        gid = a.gid_start
        wanted = [("access", s, n) for s, n in a.access_groups.items()] + [
            ("status", s, n) for s, n in a.status_groups.items()]
        for kind, shorthand, name in wanted:
            if (kind, shorthand) in have:
                self.outcome[name] = "already_exists"
                continue
            if clash := await find_group_by_name(name, session):
                raise Conflict(f"group {name!r} already exists as a {clash.type} group; "
                               f"cannot seed {kind} {shorthand!r}")
            while await Group.find_one(Group.gid == gid, session=session) or await User.find_one(
                    User.uid == gid, session=session):
                gid += 1
            if gid > ID_MAX:
                raise Conflict("no free gid left for the access/status groups")
            await claim_name(name, "group", session)
            await Group(name=name, gid=gid, type=kind, shorthand=shorthand).insert(
                session=session)
            self.outcome[name] = "created"
            gid += 1
        return self.outcome

    def describe(self) -> dict[str, Any]:
        return {"gid_start": self.args.gid_start, "outcome": self.outcome}
