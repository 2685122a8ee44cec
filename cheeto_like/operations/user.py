"""User operations: creation (generic, system, shared), attributes, keys, rename.

Passwords arrive in plaintext and leave only as yescrypt hashes; ``describe()`` reports
``has_password`` instead. Access and status shorthands must name seeded groups.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field, model_validator
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.errors import DuplicateKeyError

from ..constants import (
    DEFAULT_SHELL,
    DEFAULT_SYSTEM_EMAIL,
    NOLOGIN_SHELL,
    SHARED_USER_BAND,
    SYSTEM_USER_BAND,
)
from ..credentials import hash_password, parse_ssh_key
from ..errors import AlreadyExists, Conflict, InvalidInput, NotFound
from ..models import Group, GroupMembership, NameClaim, Site, SshKey, User, UserSiteInfo
from ..models.base import insert_document
from ..models.fields import (
    AbsolutePath,
    Email,
    FreeText,
    NonEmptyStr,
    PosixName,
    Shell,
    Shorthand,
    SiteName,
    UnixId,
    UserType,
)
from ..queries.access_status import require_access, require_status
from ..queries.group import find_group_by_name
from ..queries.site import get_site
from ..queries.together import Part, read_together
from ..queries.user import find_redundant_site_statuses, get_site_info, get_user
from ..store import Store
from .base import Explained, OpArgs, Operation
from .common import (
    cascade_user_rename,
    mark_ldap_dirty,
    mark_root_key_holders_dirty,
    next_free_id,
)
from .names import claim_name, move_claim

ROOT_ACCESS = "root-ssh"


async def _require_status_and_access(store: Store, status: str, access: list[str],
                                     session: AsyncClientSession) -> list[str]:
    """``require_status`` and ``require_access`` in one read of the status and access
    groups' shorthands (``queries.together``); on a miss the queries themselves are
    asked, for their error."""
    statuses, accesses = await read_together(store.database, [
        Part(Group.get_settings().name, "type", "status", ("shorthand",)),
        Part(Group.get_settings().name, "type", "access", ("shorthand",))], session)
    wanted = list(dict.fromkeys(access))
    if status not in {g.get("shorthand") for g in statuses}:
        await require_status(status, session)
    known = {g.get("shorthand") for g in accesses}
    if any(name not in known for name in wanted):
        return await require_access(wanted, session)
    return wanted  # admins with it put their keys on every system user's entry


class CreateUser(Operation):
    """A user plus their personal group (same name, gid = the user's gid)."""

    op_name = "create_user"

    class Args(OpArgs):
        name: PosixName
        email: Email
        uid: UnixId
        fullname: NonEmptyStr
        surname: FreeText | None = None
        type: UserType = "user"
        shell: Shell = DEFAULT_SHELL
        status: Shorthand = "active"
        access: list[Shorthand] = Field(default_factory=list)
        gid: UnixId | None = None
        home_directory: AbsolutePath | None = None
        password: str | None = Field(default=None, repr=False)
        password_hash: str | None = Field(default=None, repr=False)
        ssh_key: str | None = None
        expires_at: datetime | None = None

        @model_validator(mode="after")
        def _one_password_form(self) -> CreateUser.Args:
            if self.password and self.password_hash:
                raise ValueError("give a password or a password hash, not both")
            if self.password_hash and not self.password_hash.startswith("$"):
                raise ValueError("a password hash must be a crypt(3) string")
            return self

    async def execute(self, session: AsyncClientSession) -> tuple[User, Group]:
        a = self.args
        gid = a.uid if a.gid is None else a.gid
        access = await _require_status_and_access(self.store, a.status, a.access, session)
        key = parse_ssh_key(a.ssh_key) if a.ssh_key and a.ssh_key.strip() else None
        self.user = User(
            name=a.name, email=a.email, uid=a.uid, gid=gid, fullname=a.fullname,
            surname=a.surname, type=a.type, shell=a.shell, status=a.status, access=access,
            home_directory=a.home_directory or f"/home/{a.name}",
            password=a.password_hash or (hash_password(a.password) if a.password else None),
            expires_at=a.expires_at)
        self.group = Group(name=a.name, gid=gid, type="user")
        self.key_fingerprint = key.fingerprint if key else None
        # The unique indexes (names registry, uid, gid) refuse a clash; which one it was
        # is read after the transaction (``_clash``), not checked before every insert.
        if not self.nested:
            # On its own, nothing in the transaction reads the new rows back: they go
            # in the command before the commit (``insert_later``), built and validated
            # once (the models above), a clash explained at the tail.
            self.explain_clash = self._clash
            docs = [NameClaim(name=a.name, kind="user"), self.user, self.group]
            if key is not None:
                docs.append(SshKey(user=a.name, key=key.text))
            for doc in docs:
                await self.insert_later(session, doc.get_settings().name,
                                        insert_document(doc))
            return self.user, self.group
        try:
            await claim_name(a.name, "user", session)
            await self.user.insert(session=session)
            await self.group.insert(session=session)
        except DuplicateKeyError as exc:
            raise Explained(exc, self._clash) from None
        if key is not None:
            await SshKey(user=a.name, key=key.text).insert(session=session)
        return self.user, self.group

    async def _clash(self) -> AlreadyExists | None:
        """Why the store refused the new user: what holds its name, uid or gid (read
        after the refused transaction, so without a session)."""
        a = self.args
        gid = a.uid if a.gid is None else a.gid
        if await User.find_one(User.name == a.name):
            return AlreadyExists(f"user {a.name!r} already exists")
        if clash := await User.find_one(User.uid == a.uid):
            return AlreadyExists(f"uid {a.uid} is already used by user {clash.name!r}")
        if clash_group := await find_group_by_name(a.name):
            return AlreadyExists(f"a group named {a.name!r} already exists "
                                 f"(gid {clash_group.gid}); user names must not clash with "
                                 "groups")
        if clash_group := await Group.find_one(Group.gid == gid):
            return AlreadyExists(f"gid {gid} is already used by group {clash_group.name!r}")
        return None

    def describe(self) -> dict[str, Any]:
        u = self.user
        return {"user": u.name, "uid": u.uid, "gid": u.gid, "type": u.type, "email": u.email,
                "status": u.status, "access": u.access, "has_password": u.password is not None,
                "ssh_key": self.key_fingerprint}


class CreateSystemUser(Operation):
    """A service account: uid from the system band, no login shell."""

    op_name = "create_system_user"
    band = SYSTEM_USER_BAND
    user_type = "system"

    class Args(OpArgs):
        name: PosixName
        email: Email = DEFAULT_SYSTEM_EMAIL
        fullname: NonEmptyStr | None = None
        password: str | None = Field(default=None, repr=False)

    async def execute(self, session: AsyncClientSession) -> tuple[User, Group]:
        a = self.args
        uid = await next_free_id(self.band, session)
        self.created = await CreateUser.within(
            self, session, name=a.name, email=a.email, uid=uid,
            fullname=a.fullname or f"HPC {a.name}", type=self.user_type,
            shell=self.shell(), password=a.password)
        return self.created

    def shell(self) -> str:
        return NOLOGIN_SHELL

    def describe(self) -> dict[str, Any]:
        user = self.created[0]
        return {"user": user.name, "uid": user.uid, "type": user.type,
                "has_password": user.password is not None}


class CreateSharedUser(CreateSystemUser):
    """An account several people share; uid from the shared band (below class/system)."""

    op_name = "create_shared_user"
    band = SHARED_USER_BAND
    user_type = "shared"

    class Args(OpArgs):
        name: PosixName
        email: Email
        fullname: NonEmptyStr
        password: str | None = Field(default=None, repr=False)

    def shell(self) -> str:
        return DEFAULT_SHELL


def _status_comment(status: str, scope: str, reason: str) -> str:
    return f"status={status}, scope={scope}, reason={reason}"


class SetUserStatus(Operation):
    """Set the global status, or a per-site override (``site``), or drop the override
    (``reset``). Leaving offboarding for active clears the pending expiry. Every change
    appends an audit comment to the user."""

    op_name = "set_user_status"

    class Args(OpArgs):
        name: PosixName
        status: Shorthand | None = None
        reason: NonEmptyStr
        site: SiteName | None = None
        reset: bool = False

        @model_validator(mode="after")
        def _status_or_reset(self) -> SetUserStatus.Args:
            if self.reset and self.site is None:
                raise ValueError("--reset needs a site")
            if self.reset and self.status is not None:
                raise ValueError("give a status or --reset, not both")
            if not self.reset and self.status is None:
                raise ValueError("a status is required (or --reset with a site)")
            return self

    async def execute(self, session: AsyncClientSession) -> User:
        a = self.args
        user = await get_user(a.name, session)
        if a.status is not None:
            await require_status(a.status, session)
        self.previous: str | None
        self.stored: str | None
        if a.site is None:
            self.previous, self.stored = user.status, a.status
            if user.status == "offboarding" and a.status == "active":
                user.expires_at = None
            user.status = a.status
            scope = "global"
        else:
            await get_site(a.site, session)
            usi = await get_site_info(user.name, a.site, session)
            self.previous = usi.status
            if a.reset:
                usi.status, usi.expires_at = None, None
            else:
                effective_before = usi.status or user.status
                if effective_before == "offboarding" and a.status == "active":
                    usi.expires_at = None
                # An override equal to the global status is redundant: store "inherit".
                usi.status = None if a.status == user.status else a.status
            self.stored = usi.status
            await usi.save(session=session)
            scope = a.site
        user.comments.append(_status_comment(a.status or "reset", scope, a.reason))
        await user.save(session=session)
        if a.site is not None:
            await mark_ldap_dirty(User, [user.name], session)
        return user

    def describe(self) -> dict[str, Any]:
        a = self.args
        return {"user": a.name, "site": a.site, "status": a.status, "reset": a.reset,
                "previous": self.previous, "stored": self.stored, "reason": a.reason}


class _UserFieldOp(Operation):
    """Set one plain field of a user."""

    field: str

    async def execute(self, session: AsyncClientSession) -> User:
        user = await get_user(self.args.name, session)  # type: ignore[attr-defined]
        self.previous = getattr(user, self.field)
        setattr(user, self.field, getattr(self.args, self.field))
        await user.save(session=session)
        return user

    def describe(self) -> dict[str, Any]:
        return {"user": self.args.name, self.field: getattr(self.args, self.field),  # type: ignore[attr-defined]
                "previous": self.previous}


class SetUserType(_UserFieldOp):
    op_name = "set_user_type"
    field = "type"

    class Args(OpArgs):
        name: PosixName
        type: UserType

    async def execute(self, session: AsyncClientSession) -> User:
        user = await super().execute(session)
        types = {self.previous, user.type}
        if self.previous != user.type and "system" in types:
            await mark_ldap_dirty(User, [user.name], session)  # gains or loses root keys
        if self.previous != user.type and "admin" in types:
            await mark_root_key_holders_dirty(session)
        return user


class SetUserShell(_UserFieldOp):
    op_name = "set_user_shell"
    field = "shell"

    class Args(OpArgs):
        name: PosixName
        shell: Shell


class SetUserEmail(_UserFieldOp):
    op_name = "set_user_email"
    field = "email"

    class Args(OpArgs):
        name: PosixName
        email: Email


class SetUserPassword(Operation):
    """Store a fresh yescrypt hash (random salt, so the hash differs every time).

    A change or reset also moves the user's token version: every API token and dashboard
    session issued before ends, so whoever knew the old password keeps no way in."""

    op_name = "set_user_password"

    class Args(OpArgs):
        name: PosixName
        password: str = Field(min_length=1, repr=False)

    async def execute(self, session: AsyncClientSession) -> User:
        user = await get_user(self.args.name, session)
        user.password = hash_password(self.args.password)
        user.token_version += 1
        await user.save(session=session)
        return user

    def describe(self) -> dict[str, Any]:
        return {"user": self.args.name}


class _UserAccessOp(Operation):
    class Args(OpArgs):
        name: PosixName
        access: list[Shorthand] = Field(min_length=1)
        site: SiteName | None = None


class AddUserAccess(_UserAccessOp):
    """Grant access globally, or at one site.

    A site override replaces the global list at that site, so the first per-site grant
    starts from the global list (copy-on-write) instead of silently dropping it.
    """

    op_name = "add_user_access"

    async def execute(self, session: AsyncClientSession) -> User:
        a = self.args
        user = await get_user(a.name, session)
        access = await require_access(a.access, session)
        if a.site is None:
            self.added = [x for x in access if x not in user.access]
            user.access = [*user.access, *self.added]
            await user.save(session=session)
        else:
            await get_site(a.site, session)
            usi = await get_site_info(user.name, a.site, session)
            current = list(usi.access) or list(user.access)
            self.added = [x for x in access if x not in current]
            if self.added:
                usi.access = [*current, *self.added]
                await usi.save(session=session)
                await mark_ldap_dirty(User, [user.name], session)
        if user.type == "admin" and ROOT_ACCESS in self.added:
            await mark_root_key_holders_dirty(session)
        return user

    def describe(self) -> dict[str, Any]:
        return {"user": self.args.name, "site": self.args.site, "access": self.args.access,
                "added": self.added}


class RemoveUserAccess(_UserAccessOp):
    """Revoke access globally, or at one site (copy-on-write, as for adding).

    An empty site override means "use the global list", so removing a site's last access
    is refused: it would silently restore the global access there.
    """

    op_name = "remove_user_access"

    async def execute(self, session: AsyncClientSession) -> User:
        a = self.args
        user = await get_user(a.name, session)
        if a.site is None:
            self.removed = [x for x in user.access if x in a.access]
            user.access = [x for x in user.access if x not in a.access]
            await user.save(session=session)
            await self._root_keys_changed(user, session)
            return user
        await get_site(a.site, session)
        usi = await get_site_info(user.name, a.site, session)
        current = list(usi.access) or list(user.access)
        self.removed = [x for x in current if x in a.access]
        if not self.removed:
            return user
        remaining = [x for x in current if x not in a.access]
        if not remaining:
            raise Conflict(f"removing {', '.join(self.removed)} would leave {a.name!r} with no "
                           f"access at {a.site}, which means 'use the global list' "
                           f"({', '.join(user.access) or 'none'}); set the user's status at "
                           "the site instead")
        usi.access = remaining
        await usi.save(session=session)
        await mark_ldap_dirty(User, [user.name], session)
        await self._root_keys_changed(user, session)
        return user

    async def _root_keys_changed(self, user: User, session: AsyncClientSession) -> None:
        if user.type == "admin" and ROOT_ACCESS in self.removed:
            await mark_root_key_holders_dirty(session)

    def describe(self) -> dict[str, Any]:
        return {"user": self.args.name, "site": self.args.site, "access": self.args.access,
                "removed": self.removed}


class AddUserSshKey(Operation):
    op_name = "add_user_ssh_key"

    class Args(OpArgs):
        name: PosixName
        key: NonEmptyStr
        replace: bool = False

    async def execute(self, session: AsyncClientSession) -> SshKey:
        a = self.args
        user = await get_user(a.name, session)
        key = parse_ssh_key(a.key)
        self.fingerprint = key.fingerprint
        self.replaced = 0
        existing = await SshKey.find(SshKey.user == user.name, session=session).to_list()
        if any(parse_ssh_key(k.key).blob == key.blob for k in existing) and not a.replace:
            raise AlreadyExists(f"user {a.name!r} already has key {key.fingerprint}")
        if a.replace:
            result = await SshKey.find(SshKey.user == user.name, session=session).delete(
                session=session)
            self.replaced = result.deleted_count if result else 0
        self.key = SshKey(user=user.name, key=key.text)
        await self.key.insert(session=session)
        await mark_ldap_dirty(User, [user.name], session)
        if user.type == "admin":
            await mark_root_key_holders_dirty(session)
        return self.key

    def describe(self) -> dict[str, Any]:
        return {"user": self.args.name, "key_fingerprint": self.fingerprint,
                "replaced_count": self.replaced}


class RemoveUserSshKey(Operation):
    op_name = "remove_user_ssh_key"

    class Args(OpArgs):
        name: PosixName
        key_id: NonEmptyStr

    async def execute(self, session: AsyncClientSession) -> SshKey:
        a = self.args
        user = await get_user(a.name, session)
        key = await SshKey.find_one({"_id": a.key_id, "user": a.name}, session=session)
        if key is None:
            raise NotFound(f"user {a.name!r} has no SSH key with id {a.key_id!r}")
        await key.delete(session=session)
        await mark_ldap_dirty(User, [a.name], session)
        if user.type == "admin":
            await mark_root_key_holders_dirty(session)
        self.fingerprint = parse_ssh_key(key.key).fingerprint
        return key

    def describe(self) -> dict[str, Any]:
        return {"user": self.args.name, "key_id": self.args.key_id,
                "key_fingerprint": self.fingerprint}


class AddUserComment(Operation):
    op_name = "add_user_comment"

    class Args(OpArgs):
        name: PosixName
        comment: NonEmptyStr

    async def execute(self, session: AsyncClientSession) -> User:
        user = await get_user(self.args.name, session)
        user.comments.append(self.args.comment)
        await user.save(session=session)
        return user

    def describe(self) -> dict[str, Any]:
        return {"user": self.args.name, "comment": self.args.comment}


class RenameUser(Operation):
    """Rename a user, their personal group, and every reference to either, atomically.

    The home directory path and storage records keep their names: renaming data on disk
    is a separate, deliberate step.
    """

    op_name = "rename_user"

    class Args(OpArgs):
        name: PosixName
        new_name: PosixName

    async def execute(self, session: AsyncClientSession) -> User:
        from .group import RenameGroup

        a = self.args
        if a.name == a.new_name:
            raise InvalidInput("the new name is the same as the old one")
        user = await get_user(a.name, session)
        if await User.find_one(User.name == a.new_name, session=session):
            raise AlreadyExists(f"user {a.new_name!r} already exists")
        if await find_group_by_name(a.new_name, session):
            raise AlreadyExists(f"a group named {a.new_name!r} already exists")
        await move_claim(a.name, a.new_name, "user", session)
        user.name = a.new_name
        await user.save(session=session)
        self.references = await cascade_user_rename(a.name, a.new_name, session)
        # Groups list their members by name in LDAP: every group the user is in changes.
        await mark_ldap_dirty(Group, await _groups_listing(a.new_name, session), session)
        if user.type == "admin":  # root keys are tagged with the admin's name
            await mark_root_key_holders_dirty(session)
        personal = await find_group_by_name(a.name, session)
        self.group_references: dict[str, int] = {}
        if personal is not None and personal.type == "user":
            self.group_references = await RenameGroup.within(
                self, session, name=a.name, new_name=a.new_name, allow_personal=True)
        return user

    def describe(self) -> dict[str, Any]:
        return {"user": self.args.name, "new_name": self.args.new_name,
                "references": self.references, "group_references": self.group_references}


async def _groups_listing(user: str, session: AsyncClientSession) -> set[str]:
    """Groups whose member list includes ``user``: edges, plus sticky groups of the
    user's sites."""
    edges = await GroupMembership.find({"user": user}, session=session).to_list()
    names = {e.group for e in edges}
    sites = {u.site for u in await UserSiteInfo.find({"user": user}, session=session).to_list()}
    for site in await Site.find({"name": {"$in": sorted(sites)}}, session=session).to_list():
        names.update(site.group.sticky)
    return names


class ClearOffboardingSiteStatuses(Operation):
    """Backfill: users who are offboarding globally lose every per-site status override,
    so the offboarding state applies everywhere."""

    op_name = "clear_offboarding_site_statuses"
    transactional = False

    async def execute(self, session: AsyncClientSession) -> int:
        users = await User.find(User.status == "offboarding", session=session).to_list()
        names = [u.name for u in users]
        overridden = await UserSiteInfo.find({"user": {"$in": names}, "status": {"$ne": None}},
                                             session=session).to_list()
        result = await UserSiteInfo.find({"user": {"$in": names}, "status": {"$ne": None}},
                                         session=session).update(
            {"$set": {"status": None}}, session=session)
        self.cleared = result.modified_count if result else 0
        # their status groups at those sites change (a query-level update skips hooks)
        await mark_ldap_dirty(User, {u.user for u in overridden}, session)
        return self.cleared

    def describe(self) -> dict[str, Any]:
        return {"cleared": self.cleared}


class ClearRedundantSiteStatuses(Operation):
    """Per-site overrides equal to the user's global status change nothing; drop them."""

    op_name = "clear_redundant_site_statuses"
    transactional = False

    async def execute(self, session: AsyncClientSession) -> list[tuple[str, str, str]]:
        rows = await find_redundant_site_statuses(session)
        for _, usi in rows:
            usi.status = None
            await usi.save(session=session)
        self.cleared = [(user.name, usi.site, user.status or "") for user, usi in rows]
        return self.cleared

    def describe(self) -> dict[str, Any]:
        return {"cleared": [f"{u}@{s}={st}" for u, s, st in self.cleared]}

