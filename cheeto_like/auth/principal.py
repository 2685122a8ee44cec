"""Who is asking: a person (signed token) or a machine (API key), with what they hold.

Roles are looked up on every request rather than written into the token, so a revoked
grant takes effect at once instead of when the token expires. So is the person's
status: someone who is no longer ``active`` (inactive, disabled, offboarding) or whose
record is gone holds no role at all, whatever token they still carry.

A token names the person by their user id (``sub``), not by login, so a rename keeps
their sessions and a new user given the old name inherits none of them; ``name`` is
the login the id has *now* (History authors, rules and pages use it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from ..errors import NotFound
from ..models import GroupMembership, RoleGrant, User
from ..models.base import select
from .tokens import BadToken, Subject

Kind = Literal["user", "key", "static"]


@dataclass(frozen=True)
class Principal:
    """``name`` is the person's login (or ``key:<name>`` for a machine); ``roles`` always
    holds ``user`` for a person; ``managed`` are the Slurm accounts (group names) a
    manager or sponsor may read; ``member_of`` the groups the person is a member of;
    ``scopes`` a key's scopes; ``token_id`` the jti of the token that signed them in."""

    name: str
    kind: Kind = "user"
    roles: frozenset[str] = frozenset()
    managed: frozenset[str] = frozenset()
    member_of: frozenset[str] = frozenset()
    scopes: frozenset[str] = frozenset()
    token_id: str | None = None
    token_exp: int | None = None
    extra: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def author(self) -> str:
        """The History author of what this principal writes."""
        return self.name

    @property
    def role(self) -> str:
        """The highest role (what ``/me`` shows)."""
        for role in ("admin", "operator", "manager", "user"):
            if role in self.roles:
                return role
        return "none"


def subject(user: User) -> Subject:
    """What a token for ``user`` names: their id and current token version."""
    return Subject(id=user.id, version=user.token_version)


async def subject_of(name: str) -> Subject:
    """The token subject of the user called ``name`` now (for the issuers, which know the
    login that was just checked). Gone since: ``NotFound``."""
    found = await select(User, None, name=name)
    if not found:
        raise NotFound(f"user {name!r} does not exist")
    return subject(found[0])


async def load_person(user_id: str, version: int, *, token_id: str | None = None,
                      token_exp: int | None = None) -> Principal:
    """The person a token names, with their roles, managed accounts (grants and
    sponsorships) and memberships: three queries, whatever they hold (the user's record
    is read once, by id, and also answers the version check). Not an active user: no
    roles. No user with this id, or a token version that is no longer theirs (password
    changed, tokens revoked): ``BadToken``."""
    found = await select(User, None, _id=user_id)
    if not found:
        raise BadToken("the token names no current user")
    user = found[0]
    if user.token_version != version:
        raise BadToken("the token has been revoked")
    name = user.name
    if not may_sign_in(user):
        return Principal(name=name, kind="user", token_id=token_id, token_exp=token_exp)
    grants = await select(RoleGrant, None, user=name)
    edges = await select(GroupMembership, None, user=name)
    roles = {"user"} | {g.role for g in grants}
    managed = {a for g in grants if g.role == "manager" for a in g.accounts}
    managed |= {e.group for e in edges if "sponsor" in e.roles}
    if managed:
        roles.add("manager")
    member_of = {e.group for e in edges if {"member", "slurmer", "sponsor"} & set(e.roles)}
    return Principal(name=name, kind="user", roles=frozenset(roles), managed=frozenset(managed),
                     member_of=frozenset(member_of), token_id=token_id, token_exp=token_exp)


def may_sign_in(users: list[User] | User | None) -> bool:
    """Whether this user record may act through the API: it exists, its global status is
    ``active`` (no status counts as active, as in the exports) and its ``expires_at`` has
    not passed (an expiry takes access away with no write, so it is read per request)."""
    from ..queries.access_policy import expired

    user = users[0] if isinstance(users, list) and users else users
    return (isinstance(user, User) and (user.status or "active") == "active"
            and not expired([user.expires_at], datetime.now(UTC)))


def machine(key_name: str, scopes: list[str] | tuple[str, ...]) -> Principal:
    return Principal(name=f"key:{key_name}", kind="key", scopes=frozenset(scopes))


STATIC_KEY = Principal(name="key:api.api_key", kind="static", scopes=frozenset({"puppet:read"}))
