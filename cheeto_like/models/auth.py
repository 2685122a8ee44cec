"""Who may do what through the API: role grants, machine API keys and revoked tokens.

- ``RoleGrant``: one row per (user, role) for manager, operator and admin ("user" is
  everyone who can sign in, so it has no row). A manager's ``accounts`` are the Slurm
  accounts (group names, at every site) they may read. Sponsors manage their own groups
  without a row (``auth.principal`` adds them).
- ``ApiKey``: one row per named key. Only the SHA-256 fingerprint and a short prefix of
  the secret are kept. A rotation moves the current fingerprint to ``previous_*``, valid
  until ``previous_valid_until`` (the overlap window), so clients can switch without an
  outage. Times a request compares are epoch seconds (the embedded store compares
  integers reliably, datetimes written by another process not).
- ``RevokedToken``: a signed token's ``jti`` that must no longer be accepted, kept until
  the token would have expired anyway (``exp``), then removed.
"""

from __future__ import annotations

from typing import Literal

from beanie import Document
from pydantic import ConfigDict, Field

from .base import BaseDoc, index, unique
from .fields import NonEmptyStr, PosixName, new_id

GrantedRole = Literal["manager", "operator", "admin"]
ROLES: tuple[str, ...] = ("user", "manager", "operator", "admin")
GRANTED_ROLES: tuple[str, ...] = ("manager", "operator", "admin")
Scope = Literal["puppet:read", "api:read", "quota:write"]
SCOPES: tuple[str, ...] = ("puppet:read", "api:read", "quota:write")


class RoleGrant(BaseDoc):
    user: PosixName
    role: GrantedRole
    accounts: list[PosixName] = Field(default_factory=list)  # manager only
    granted_by: str | None = None

    class Settings(BaseDoc.Settings):
        name = "role_grants"
        indexes = [unique("user", "role"), index("user"), index("role")]


class ApiKey(BaseDoc):
    name: NonEmptyStr
    scopes: list[Scope] = Field(min_length=1)
    prefix: str
    fingerprint: str
    previous_prefix: str | None = None
    previous_fingerprint: str | None = None
    previous_valid_until: int | None = None  # epoch seconds
    expires_epoch: int | None = None
    rotated_epoch: int  # when the current secret was made (creation or last rotation)
    revoked_epoch: int | None = None
    last_used_epoch: int | None = None
    created_by: str | None = None

    class Settings(BaseDoc.Settings):
        name = "api_keys"
        indexes = [unique("name"), unique("fingerprint"), index("previous_fingerprint")]


class RevokedToken(Document):
    id: str = Field(default_factory=new_id)  # type: ignore[assignment]
    jti: str
    exp_epoch: int
    user: PosixName | None = None

    model_config = ConfigDict(defer_build=True)  # built on first use (models/base.py)

    class Settings:
        name = "revoked_tokens"
        indexes = [unique("jti"), index("exp_epoch")]
