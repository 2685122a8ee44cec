"""Users, their SSH keys and their per-site records.

``status`` and ``access`` hold shorthands (``active``, ``login-ssh``) of the access and
status groups; a ``UserSiteInfo`` row means "this user is on this site" and can override
both for that site.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, field_validator

from ..constants import DEFAULT_SHELL
from .base import BaseDoc, Expirable, LDAPSyncable, index, unique
from .fields import (
    Email,
    NonBlankStr,
    PosixName,
    Shell,
    Shorthand,
    SiteName,
    UnixId,
    UserType,
)
from .iam import UCDIAMInfo


def _dedupe(values: list[str]) -> list[str]:
    """Keep first occurrences in order: access lists are sets with a stable display order."""
    return list(dict.fromkeys(values))


class User(BaseDoc, LDAPSyncable, Expirable):
    ldap_fields: ClassVar[tuple[str, ...]] = (
        "name", "email", "uid", "gid", "fullname", "surname", "home_directory", "shell",
        "password", "expires_at", "status", "access")

    name: PosixName
    email: Email
    uid: UnixId
    gid: UnixId
    fullname: NonBlankStr  # free text: one line is checked in the Args (NonEmptyStr)
    surname: str | None = None
    shell: Shell = DEFAULT_SHELL
    type: UserType = "user"
    status: Shorthand | None = None
    password: str | None = None  # yescrypt MCF hash, never plaintext
    access: list[Shorthand] = Field(default_factory=list)
    # Free text is checked where it is written (operation Args); stored text is shown
    # escaped, so older rows with odd characters still load.
    comments: list[str] = Field(default_factory=list)
    # Checked as an AbsolutePath where it is written (CreateUser); rows written before
    # that check still load.
    home_directory: NonBlankStr
    iam: UCDIAMInfo | None = None
    # Signed tokens carry the version they were issued under (``auth/tokens.py``); moving
    # it (a password change, ``cheeto token revoke``) ends them all. Auth bookkeeping:
    # not projected to LDAP, not exported, not shown.
    token_version: int = Field(default=0, ge=0)

    @field_validator("access")
    @classmethod
    def _dedupe_access(cls, value: list[str]) -> list[str]:
        return _dedupe(value)

    @field_validator("password")
    @classmethod
    def _hashed_only(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("$"):
            raise ValueError("password must be stored as a crypt(3) hash")
        return value

    @property
    def ldap_surname(self) -> str:
        """LDAP ``sn``: the explicit surname, else the last word of the full name."""
        return self.surname or self.fullname.split()[-1]

    class Settings(BaseDoc.Settings):
        name = "users"
        indexes = [unique("name"), unique("uid"), index("gid"), index("email"),
                   index("type"), index("status"), index("access")]


def authorized_keys_entry(user: str, key: str) -> str:
    """``SshKey.authorized_keys_entry`` for projected rows (exports build no models)."""
    return f'environment="REMOTE_SSH_USER={user}" {key}'


class SshKey(BaseDoc, Expirable):
    user: PosixName
    key: NonBlankStr  # checked by parse_ssh_key where it is written

    def authorized_keys_entry(self, username: str | None = None) -> str:
        """The line for root's authorized_keys / LDAP sshPublicKey, tagged with the user."""
        return authorized_keys_entry(username or self.user, self.key)

    class Settings(BaseDoc.Settings):
        name = "ssh_keys"
        indexes = [unique("user", "key"), index("user")]


class UserSiteInfo(BaseDoc, Expirable):
    """Presence on a site, plus optional per-site status and access overrides.

    ``status`` None falls back to the user's global status; an empty ``access`` falls
    back to the global access list, a non-empty one replaces it at this site.
    """

    user: PosixName
    site: SiteName
    status: Shorthand | None = None
    access: list[Shorthand] = Field(default_factory=list)

    @field_validator("access")
    @classmethod
    def _dedupe_access(cls, value: list[str]) -> list[str]:
        return _dedupe(value)

    class Settings(BaseDoc.Settings):
        name = "user_site_info"
        indexes = [unique("user", "site"), index("user"), index("site")]

