"""Checking a person's password: against the directory when one is configured (a bind
as the user, so the directory's own policy applies), else against the yescrypt hash the
store keeps.

Only people with an active user record may sign in (roles and data hang off it), and with
``api.login_groups`` only members (any role, any site) of one of those groups. Every
refusal is the same ``LoginFailed`` ("invalid user name or password"): the caller must
not learn which part was wrong. An unknown user costs the same work as a known one, so
timing does not tell names apart either: the same store lookup, then one bind against
the directory (a DN under the user base, which does not exist) or one hash (a decoy).
"""

from __future__ import annotations

import asyncio
from functools import cache

from ..adapters.ldap import DirectoryError, check_bind, rdn
from ..config import Config
from ..errors import ExternalError
from ..models import GroupMembership, User
from ..models.base import select
from ..models.fields import PosixName
from .principal import may_sign_in

MAX_PASSWORD_BYTES = 1024


class LoginFailed(Exception):
    pass


@cache
def _decoy_hash() -> str:
    from ..credentials import hash_password

    return hash_password("not-a-password-anyone-has")


def valid_name(name: str) -> bool:
    from pydantic import TypeAdapter, ValidationError

    try:
        TypeAdapter(PosixName).validate_python(name)
    except ValidationError:
        return False
    return True


async def authenticate(config: Config, name: str, password: str) -> str:
    """The user's name when the password is right; ``LoginFailed`` otherwise, or
    ``ExternalError`` when the directory cannot be reached."""
    from ..credentials import verify_password

    if not password or len(password.encode()) > MAX_PASSWORD_BYTES or not valid_name(name):
        raise LoginFailed
    user = await User.find_one({"name": name})
    if config.ldap is not None:
        # an unknown name binds too (its DN under the same base, which the directory
        # refuses like a wrong password): the same work, so timing tells no names apart
        base = config.ldap.user_base or f"ou=users,{config.ldap.searchbase}"
        try:
            await check_bind(config.ldap, f"{rdn('uid', name)},{base}", password)
        except DirectoryError as exc:
            if exc.code in ("auth", "not_found"):
                raise LoginFailed from None
            raise ExternalError(f"the directory cannot check the password: {exc.message}",
                                transient=True) from None
        if user is None:  # in the directory, not in the store: no roles, no sign-in
            raise LoginFailed
    else:
        hashed = user.password if user is not None and user.password else _decoy_hash()
        ok = await asyncio.to_thread(verify_password, password, hashed)
        if not ok or user is None or not user.password:
            raise LoginFailed
    if not may_sign_in(user):  # checked after the password: the answer is the same
        raise LoginFailed
    await _check_groups(config, name)
    return name


async def _check_groups(config: Config, name: str) -> None:
    allowed = set(config.api.login_groups) if config.api is not None else set()
    if not allowed:
        return
    edges = await select(GroupMembership, None, user=name)
    if not allowed & {e.group for e in edges}:
        raise LoginFailed
