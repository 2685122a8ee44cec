"""Posix groups (including the access and status groups) and membership edges.

Access and status groups are ordinary ``Group`` rows with ``type`` ``access``/``status``
and a ``shorthand`` (``sudo`` for ``sudo-users``); one collection, no subclasses, so every
group query sees every group. Membership is never stored on the group: each
``GroupMembership`` edge is one (user, group, site) with the roles it carries.
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from .base import BaseDoc, Expirable, LDAPSyncable, index, unique
from .fields import GroupType, PosixName, Shorthand, SiteName, UnixId

Role = Literal["member", "sponsor", "sudoer", "slurmer"]
SPECIAL_GROUP_TYPES = ("access", "status")
PROGRAM = "program"


class Group(BaseDoc, LDAPSyncable):
    ldap_fields: ClassVar[tuple[str, ...]] = ("name", "gid")

    name: PosixName
    gid: UnixId
    type: GroupType = "group"
    shorthand: Shorthand | None = None
    # A programme (cohort, ``type`` "program", ``operations/program.py``): its dates.
    # Members get ``ends_at`` as their default expiry; at the end they go offboarding.
    starts_at: datetime | None = None
    ends_at: datetime | None = None

    @model_validator(mode="after")
    def _shorthand_only_for_special(self) -> Group:
        special = self.type in SPECIAL_GROUP_TYPES
        if special and self.shorthand is None:
            raise ValueError(f"{self.type} group {self.name!r} needs a shorthand")
        if not special and self.shorthand is not None:
            raise ValueError(f"only access and status groups carry a shorthand ({self.name!r})")
        if self.type != PROGRAM and (self.starts_at is not None or self.ends_at is not None):
            raise ValueError(f"only programmes carry start and end dates ({self.name!r})")
        return self

    @property
    def is_special(self) -> bool:
        return self.type in SPECIAL_GROUP_TYPES

    class Settings(BaseDoc.Settings):
        name = "groups"
        indexes = [
            unique("name"), unique("gid"), index("type"),
            unique("type", "shorthand", partialFilterExpression={"shorthand": {"$type": "string"}}),
        ]


class GroupMembership(BaseDoc, Expirable):
    """One edge per (user, group, site); roles accumulate on it and it dies with its last."""

    user: PosixName
    group: PosixName
    site: SiteName
    roles: list[Role] = Field(min_length=1)

    @field_validator("roles")
    @classmethod
    def _sorted_unique(cls, value: list[str]) -> list[str]:
        return sorted(set(value))

    class Settings(BaseDoc.Settings):
        name = "group_membership"
        indexes = [unique("user", "group", "site"), index("user"), index("group", "site"),
                   index("site"), index("roles")]
