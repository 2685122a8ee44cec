"""Role grants and API keys: every change an operation with its History row.

History never holds a key's secret or fingerprint, only its name, prefix and scopes.
The new secret of a create or rotate is returned to the caller once (``NewSecret``) and
exists nowhere else afterwards. Logout (``RevokeToken``) writes no History row: the
revocation row itself is the record, and sign-outs would otherwise grow History without
bound; expired revocations are deleted in the same transaction. Ending *all* of a
person's tokens and dashboard sessions (``RevokeUserTokens``) moves their token version
instead (``auth/tokens.py``) and does write a History row.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from pydantic import Field, model_validator
from pymongo.asynchronous.client_session import AsyncClientSession

from ..auth.apikeys import new_key
from ..errors import AlreadyExists, Conflict, NotFound
from ..models import ApiKey, RevokedToken, RoleGrant, User
from ..models.auth import GrantedRole, Scope
from ..models.base import select_one
from ..models.fields import NonEmptyStr, PosixName
from ..queries.group import get_group
from ..queries.user import get_user
from .base import OpArgs, Operation

KEY_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$"
MAX_KEY_DAYS = 3650


def _now() -> int:
    return int(time.time())


# -- roles -----------------------------------------------------------------------------


class GrantRole(Operation):
    """Give ``user`` a role; a manager grant names the accounts (added to any it had)."""

    op_name = "grant_role"

    class Args(OpArgs):
        user: PosixName
        role: GrantedRole
        accounts: list[PosixName] = Field(default_factory=list, max_length=1000)

        @model_validator(mode="after")
        def _accounts_for_managers(self) -> GrantRole.Args:
            if self.role == "manager" and not self.accounts:
                raise ValueError("a manager is granted one or more --account")
            if self.role != "manager" and self.accounts:
                raise ValueError("only a manager grant names accounts")
            return self

    async def execute(self, session: AsyncClientSession) -> RoleGrant:
        await get_user(self.args.user, session)
        for account in self.args.accounts:
            await get_group(account, session)
        grant = await select_one(RoleGrant, session, user=self.args.user, role=self.args.role)
        if grant is None:
            grant = RoleGrant(user=self.args.user, role=self.args.role,
                              accounts=sorted(set(self.args.accounts)),
                              granted_by=self.author)
            await grant.insert(session=session)
        elif self.args.role != "manager" or set(self.args.accounts) <= set(grant.accounts):
            raise AlreadyExists(f"{self.args.user} already has the role {self.args.role}"
                                + (" for these accounts" if self.args.accounts else ""))
        else:
            grant.accounts = sorted(set(grant.accounts) | set(self.args.accounts))
            await grant.save(session=session)
        self.grant = grant
        return grant

    def describe(self) -> dict[str, Any]:
        return {"user": self.grant.user, "role": self.grant.role,
                "accounts": list(self.grant.accounts), "added": list(self.args.accounts)}


class RevokeRole(Operation):
    """Take a role away; for a manager, ``accounts`` takes away only those accounts (the
    role goes with its last one)."""

    op_name = "revoke_role"

    class Args(OpArgs):
        user: PosixName
        role: GrantedRole
        accounts: list[PosixName] = Field(default_factory=list, max_length=1000)

    async def execute(self, session: AsyncClientSession) -> RoleGrant | None:
        grant = await select_one(RoleGrant, session, user=self.args.user, role=self.args.role)
        if grant is None:
            raise NotFound(f"{self.args.user} does not have the role {self.args.role}")
        missing = set(self.args.accounts) - set(grant.accounts)
        if missing:
            raise NotFound(f"{self.args.user} does not manage {', '.join(sorted(missing))}")
        left = sorted(set(grant.accounts) - set(self.args.accounts))
        self.removed = bool(not self.args.accounts or not left)
        if self.removed:
            await grant.delete(session=session)
            self.left: list[str] = []
            return None
        grant.accounts = left
        await grant.save(session=session)
        self.left = left
        return grant

    def describe(self) -> dict[str, Any]:
        return {"user": self.args.user, "role": self.args.role,
                "accounts_removed": list(self.args.accounts), "accounts_left": self.left,
                "role_removed": self.removed}


# -- API keys --------------------------------------------------------------------------


@dataclass(frozen=True)
class NewSecret:
    """A key document and its secret, which is shown once and never stored."""

    key: ApiKey
    secret: str


class CreateApiKey(Operation):
    op_name = "create_api_key"

    class Args(OpArgs):
        name: NonEmptyStr = Field(pattern=KEY_NAME_PATTERN)
        scopes: list[Scope] = Field(min_length=1, max_length=3)
        expires_in_days: float | None = Field(default=None, gt=0, le=MAX_KEY_DAYS)

    @classmethod
    async def prepare(cls, args: OpArgs) -> Any:
        return new_key()

    async def execute(self, session: AsyncClientSession) -> NewSecret:
        if await select_one(ApiKey, session, name=self.args.name) is not None:
            raise AlreadyExists(f"API key {self.args.name!r} already exists")
        now = _now()
        made = self.prepared
        expires = (now + int(self.args.expires_in_days * 86400)
                   if self.args.expires_in_days is not None else None)
        self.key = ApiKey(name=self.args.name, scopes=sorted(set(self.args.scopes)),
                          prefix=made.prefix, fingerprint=made.fingerprint,
                          expires_epoch=expires, rotated_epoch=now, created_by=self.author)
        await self.key.insert(session=session)
        return NewSecret(self.key, made.secret)

    def describe(self) -> dict[str, Any]:
        return {"name": self.key.name, "scopes": list(self.key.scopes),
                "prefix": self.key.prefix, "expires_epoch": self.key.expires_epoch}


async def _live_key(name: str, session: AsyncClientSession) -> ApiKey:
    key = await select_one(ApiKey, session, name=name)
    if key is None:
        raise NotFound(f"API key {name!r} does not exist")
    if key.revoked_epoch is not None:
        raise Conflict(f"API key {name!r} is revoked")
    return key


class RotateApiKey(Operation):
    """A new secret for a key; the old one keeps working for ``overlap_hours``."""

    op_name = "rotate_api_key"

    class Args(OpArgs):
        name: NonEmptyStr
        overlap_hours: float = Field(default=24.0, ge=0, le=24 * 30)
        expires_in_days: float | None = Field(default=None, gt=0, le=MAX_KEY_DAYS)

    @classmethod
    async def prepare(cls, args: OpArgs) -> Any:
        return new_key()

    async def execute(self, session: AsyncClientSession) -> NewSecret:
        key = await _live_key(self.args.name, session)
        now = _now()
        if key.expires_epoch is not None and key.expires_epoch <= now:
            raise Conflict(f"API key {key.name!r} has expired; create a new one")
        made = self.prepared
        self.old_prefix = key.prefix
        if self.args.overlap_hours > 0:
            key.previous_prefix, key.previous_fingerprint = key.prefix, key.fingerprint
            key.previous_valid_until = now + int(self.args.overlap_hours * 3600)
        else:
            key.previous_prefix = key.previous_fingerprint = key.previous_valid_until = None
        key.prefix, key.fingerprint, key.rotated_epoch = made.prefix, made.fingerprint, now
        if self.args.expires_in_days is not None:
            key.expires_epoch = now + int(self.args.expires_in_days * 86400)
        await key.save(session=session)
        self.key = key
        return NewSecret(key, made.secret)

    def describe(self) -> dict[str, Any]:
        return {"name": self.key.name, "prefix": self.key.prefix,
                "old_prefix": self.old_prefix,
                "old_valid_until": self.key.previous_valid_until,
                "expires_epoch": self.key.expires_epoch}


class RevokeApiKey(Operation):
    """The key (and a rotated-out predecessor still in its overlap) stops working now."""

    op_name = "revoke_api_key"

    class Args(OpArgs):
        name: NonEmptyStr

    async def execute(self, session: AsyncClientSession) -> ApiKey:
        key = await _live_key(self.args.name, session)
        key.revoked_epoch = _now()
        key.previous_valid_until = None
        key.previous_fingerprint = None
        await key.save(session=session)
        self.key = key
        return key

    def describe(self) -> dict[str, Any]:
        return {"name": self.key.name, "prefix": self.key.prefix}


# -- tokens ----------------------------------------------------------------------------


class RevokeToken(Operation):
    """Refuse a signed token from now on (logout, or an admin pulling a leaked one)."""

    op_name = "revoke_token"

    class Args(OpArgs):
        jti: str = Field(min_length=8, max_length=128, pattern=r"^[A-Za-z0-9_-]+$")
        exp_epoch: int = Field(ge=0)
        user: PosixName | None = None

    async def execute(self, session: AsyncClientSession) -> None:
        now = _now()
        collection = RevokedToken.get_pymongo_collection()
        await collection.delete_many({"exp_epoch": {"$lt": now}}, session=session)
        if await RevokedToken.find_one({"jti": self.args.jti}, session=session) is None:
            await RevokedToken(jti=self.args.jti, exp_epoch=self.args.exp_epoch,
                               user=self.args.user).insert(session=session)

    def describe(self) -> dict[str, Any]:
        return {"user": self.args.user}



class RevokeUserTokens(Operation):
    """End every token and dashboard session of ``user`` issued so far (a leaked laptop,
    a departing admin): their token version moves, so tokens carrying the old one are
    refused on their next request. Tokens issued afterwards work.

    The version is moved with ``$inc`` on the user's ``_id``, not by saving the model:
    it is auth bookkeeping, so ``updated_at`` and the LDAP fingerprint stay put (an
    incremental LDAP run has nothing to look at), and two racing revokes both count.
    No site's data changes, so no generation moves either.
    """

    op_name = "revoke_user_tokens"

    class Args(OpArgs):
        user: PosixName

    async def execute(self, session: AsyncClientSession) -> int:
        user = await get_user(self.args.user, session)
        await User.get_pymongo_collection().update_one(
            {"_id": user.id}, {"$inc": {"token_version": 1}}, session=session)
        self.version = user.token_version + 1
        return self.version

    def touched_sites(self) -> frozenset[str] | None:
        return frozenset()

    def describe(self) -> dict[str, Any]:
        return {"user": self.args.user, "token_version": self.version}
