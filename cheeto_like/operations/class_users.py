"""Class accounts: a batch of short-lived users for a course, created all-or-nothing.

One transaction creates every user (with personal group, site membership, optional
course-group membership and a home from the site's defaults); any failure rolls back the
whole batch, of at most ``MAX_CLASS_BATCH`` users (its comment says why). Uids come from
one contiguous block in the class band, which must end below the lab-group band.
Passwords are generated here, returned once, and never recorded.
"""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime
from typing import Any

from pydantic import Field, field_validator, model_validator
from pymongo.asynchronous.client_session import AsyncClientSession

from .. import progress
from ..constants import CLASS_USER_BAND, LAB_GROUP_BAND, NAME_MAX_LEN
from ..credentials import generate_password, hash_password
from ..errors import AlreadyExists, Conflict, InvalidInput
from ..models import Group, GroupMembership, User, UserSiteInfo
from ..models.fields import Email, PosixName, Shorthand, SiteName, utcnow
from ..queries.access_status import require_access, require_status
from ..queries.group import get_group
from ..queries.site import get_site
from .base import OpArgs, Operation
from .common import mark_ldap_dirty
from .storage import CreateHomeStorage
from .user import CreateUser

PREFIX_RE = re.compile(r"^[a-z][a-z0-9-]*$")
# One batch is one transaction, ~19 commands per account (CreateUser's checks and
# inserts, site info, membership, home): bench/class_batch.py measured 60 accounts at
# 20 s on the embedded store under load, and a batch of 300 outlived the 60 s
# transactionLifetimeLimitSeconds and was aborted (bench/RESULTS.md). 2000 would need
# ~38,000 commands in one transaction on a replica set too. Until a batch is split into
# chunks sharing a batch id, a batch stays small enough to commit well inside 60 s.
MAX_CLASS_BATCH = 100


async def free_block(count: int, session: AsyncClientSession) -> int:
    """The first uid of ``count`` consecutive ids free as uids and gids, above every id in
    use in the class band (access/status groups seeded inside it are stepped over)."""
    band = CLASS_USER_BAND
    span = {"$gte": band.start, "$lt": band.stop}
    taken = sorted({u["uid"] async for u in User.get_pymongo_collection().find(
        {"uid": span}, {"uid": 1}, session=session)}
        | {g["gid"] async for g in Group.get_pymongo_collection().find(
            {"gid": span}, {"gid": 1, "type": 1}, session=session)
           if g.get("type") not in ("access", "status")})
    special = sorted([g["gid"] async for g in Group.get_pymongo_collection().find(
        {"gid": span, "type": {"$in": ["access", "status"]}}, {"gid": 1}, session=session)])
    start = (taken[-1] + 1) if taken else band.start
    for gid in special:  # skip over a special group inside the block
        if start <= gid < start + count:
            start = gid + 1
    if start + count > LAB_GROUP_BAND.start:
        raise Conflict(f"a block of {count} class uids from {start} would cross into the "
                       f"lab-group band ({LAB_GROUP_BAND.start}…)")
    return start


class CreateClassUsers(Operation):
    op_name = "create_class_users"

    class Args(OpArgs):
        site: SiteName
        prefix: str
        count: int = Field(ge=1, le=MAX_CLASS_BATCH)
        email: Email
        expires_at: datetime
        access: list[Shorthand] = Field(default_factory=lambda: ["login-ssh", "slurm"])
        group: PosixName | None = None

        @field_validator("prefix")
        @classmethod
        def _prefix_shape(cls, value: str) -> str:
            if not PREFIX_RE.fullmatch(value):
                raise ValueError(f"prefix {value!r} must be lowercase letters, digits and '-', "
                                 "starting with a letter")
            return value

        @field_validator("expires_at")
        @classmethod
        def _aware(cls, value: datetime) -> datetime:
            # naive times are UTC (as everywhere else); comparing one with now would raise
            return value.replace(tzinfo=UTC) if value.tzinfo is None else value

        @model_validator(mode="after")
        def _names_fit(self) -> CreateClassUsers.Args:
            width = len(str(self.count))
            longest = len(self.prefix) + 1 + width
            if longest > NAME_MAX_LEN:
                raise ValueError(f"names like {self.prefix}-{'0' * width} would be longer than "
                                 f"{NAME_MAX_LEN} characters")
            if self.expires_at <= utcnow():
                raise ValueError("the expiry must be in the future")
            return self

        def names(self) -> list[str]:
            width = len(str(self.count))
            return [f"{self.prefix}-{i:0{width}d}" for i in range(1, self.count + 1)]

    @classmethod
    async def prepare(cls, args: OpArgs) -> list[tuple[str, str]]:
        """(password, hash) per account, made before the transaction: hashing takes about
        0.1 s each, which a batch of hundreds would otherwise spend inside it."""
        def make() -> list[tuple[str, str]]:
            pairs = []
            progress.begin(args.count, "hashing passwords")  # type: ignore[attr-defined]
            for _ in range(args.count):  # type: ignore[attr-defined]
                password = generate_password()
                pairs.append((password, hash_password(password)))
                progress.advance()
            return pairs
        return await asyncio.to_thread(make)

    async def execute(self, session: AsyncClientSession) -> list[tuple[User, str]]:
        a = self.args
        names = a.names()
        site = await get_site(a.site, session)
        await require_status("active", session)
        access = await require_access(a.access, session)
        if a.group and (await get_group(a.group, session)).is_special:
            raise InvalidInput(f"{a.group!r} is an access or status group; pass --access "
                               "instead")
        if not site.storage.default_home_volume:
            raise Conflict(f"site {site.name!r} has no default home volume; set one with "
                           "`ng site storage set-defaults` first")
        taken_users = await User.find({"name": {"$in": names}}, session=session).to_list()
        taken_groups = await Group.find({"name": {"$in": names}}, session=session).to_list()
        if taken := sorted({u.name for u in taken_users} | {g.name for g in taken_groups}):
            raise AlreadyExists(f"{len(taken)} name(s) already taken: {', '.join(taken[:5])}"
                                + (" …" if len(taken) > 5 else ""))
        first_uid = await free_block(a.count, session)
        created: list[tuple[User, str]] = []
        for offset, name in enumerate(names):
            password, hashed = self.prepared[offset]
            user, _ = await CreateUser.within(
                self, session, name=name, email=a.email, uid=first_uid + offset,
                fullname=name, type="class", access=access, password_hash=hashed,
                expires_at=a.expires_at)
            await UserSiteInfo(user=name, site=site.name).insert(session=session)
            if a.group:
                await GroupMembership(user=name, group=a.group, site=site.name,
                                      roles=["member"]).insert(session=session)
            home = await CreateHomeStorage.within(self, session, site=site.name, user=name)
            self.mechanism = (f"automount:{home.automount_map}" if home.automount_map
                              else f"static:{home.static_mount}" if home.static_mount
                              else "none")
            created.append((user, password))
        if a.group:  # new members change the group's LDAP entry
            await mark_ldap_dirty(Group, [a.group], session)
        self.names, self.first_uid = names, first_uid
        return created

    def describe(self) -> dict[str, Any]:
        a = self.args
        return {"site": a.site, "users": self.names, "base_uid": self.first_uid,
                "count": a.count, "group": a.group, "access": a.access,
                "expires_at": a.expires_at, "home_mechanism": self.mechanism,
                "has_passwords": True}
