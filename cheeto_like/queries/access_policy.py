"""What a person's status and expiry let their access lists grant at a site: the one rule
every export and projection that grants access follows.

Why one place: an admin set inactive by the reaper, or past their ``expires_at``, stayed
in root's authorized_keys (the export and ``/puppet/root-keys``), in the LDAP access
groups (``login-ssh-users``, ``sudo-users``, …) and in system users' root keys, because
each of those read the access list alone. The rule (effective status = the site record's
status, else the global one, ``queries.user.effective_status``):

- ``active``: every access in the effective list;
- ``offboarding``: ordinary access (``login-ssh``, ``compute-ssh``, ``ondemand``,
  ``slurm``) stays, a grace window to move data (the Slurm sync already counts
  offboarding people as eligible, ``sync.slurm.desired.ELIGIBLE_STATUSES``), but
  privileged access (``sudo``, ``root-ssh``) is gone;
- no status at all (system and shared users are created without one): as ``active``,
  as the exports and sign-in always read it;
- ``inactive``, ``disabled`` or any other status: nothing;
- past ``expires_at`` (the user's or the site record's): nothing, whatever the status.

The stored access lists are never changed by this (a reactivated person gets theirs
back); only what is exported or projected follows it. Status groups (``active-users``,
…) still list people by status: they grant nothing. Users: root-key exports
(``queries.exports.root_key_blocks``), the LDAP projection (``sync.ldap.desired``: access
groups and system users' root keys), the legacy puppet tags
(``queries.puppet_legacy``). Expiry passes without any write, so callers that cache or
watermark what they built also ask ``soonest`` for when their answer goes stale.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

PRIVILEGED = frozenset({"sudo", "root-ssh"})
FULL = frozenset({"active"})
GRACE = frozenset({"offboarding"})  # ordinary access only


def as_utc(value: datetime | str | None) -> datetime | None:
    """Aware UTC: naive means UTC (MongoDB hands back naive datetimes); a value ``$set``
    by hand may come back from the embedded store as ISO text."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def expired(expiries: Iterable[datetime | str | None], now: datetime) -> bool:
    """Whether any of the given expiries is at or before ``now``."""
    return any((u := as_utc(t)) is not None and u <= now for t in expiries)


def soonest(expiries: Iterable[datetime | str | None], now: datetime) -> datetime | None:
    """The earliest expiry still ahead of ``now`` (None: nothing will expire)."""
    ahead = [u for t in expiries if t is not None and (u := as_utc(t)) is not None and u > now]
    return min(ahead) if ahead else None


def granted(status: str | None, access: Iterable[str],
            expiries: Iterable[datetime | str | None],
            now: datetime) -> list[str]:
    """The part of ``access`` (the effective list at the site) that ``status`` (the
    effective status there) grants now, in the list's order (see the module doc)."""
    if status is None or status in FULL:
        allowed = list(access)
    elif status in GRACE:
        allowed = [a for a in access if a not in PRIVILEGED]
    else:
        return []
    if allowed and expired(expiries, now):
        return []
    return allowed


def grants(status: str | None, access: Iterable[str],
           expiries: Iterable[datetime | str | None],
           now: datetime, what: str) -> bool:
    """Whether ``what`` (one access shorthand) is granted (``granted``)."""
    return what in granted(status, [a for a in access if a == what], expiries, now)


def no_effect_reason(status: str | None, access: Iterable[str],
                     expiries: Iterable[datetime | str | None], now: datetime) -> str | None:
    """Why granting ``access`` to a person with effective ``status`` (and these expiries)
    changes nothing that is exported, for a one-line warning; None when it takes effect.
    The grant is still recorded: it applies again once the person is active."""
    wanted = list(access)
    held_back = [a for a in wanted if a not in granted(status, [a], expiries, now)]
    if not held_back:
        return None
    what = ", ".join(held_back)
    if (status is None or status in FULL | GRACE) and expired(expiries, now):
        return f"{what} has no effect: the account has expired"
    return f"{what} has no effect while the user is {status}"


async def grant_warning(user: str, access: Iterable[str], site: str | None) -> str | None:
    """``no_effect_reason`` for a grant just made (``ng user add access``): globally, by
    the global status and expiry; at a site, by the effective ones there."""
    from .user import effective_status, find_site_info, get_user

    record = await get_user(user)
    usi = await find_site_info(user, site) if site is not None else None
    status = effective_status(record, usi) if usi is not None else record.status
    expiries = [record.expires_at, usi.expires_at if usi is not None else None]
    return no_effect_reason(status, access, expiries, datetime.now(UTC))
