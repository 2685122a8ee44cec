"""IAM reads: who the nightly sync looks at, who the reaper would deactivate, and the
stored IAM state of one user with its projected grace end and expiry."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo.asynchronous.client_session import AsyncClientSession

from ..constants import IAM_SYNCABLE_USER_TYPES
from ..errors import InvalidInput
from ..models import User

Session = AsyncClientSession | None
NEVER_RESURRECTED = ("inactive", "disabled")


def as_utc(value: datetime | None) -> datetime | None:
    """Aware UTC (a naive datetime is taken as UTC)."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def syncable_types(types: Iterable[str] | None) -> list[str]:
    """The requested types narrowed to user/admin; asking for others is bad input."""
    if not types:
        return list(IAM_SYNCABLE_USER_TYPES)
    wanted = list(dict.fromkeys(types))
    other = [t for t in wanted if t not in IAM_SYNCABLE_USER_TYPES]
    if other:
        raise InvalidInput(f"IAM syncs only {', '.join(IAM_SYNCABLE_USER_TYPES)} users, not "
                           f"{', '.join(other)}")
    return wanted


async def iam_sync_candidates(types: Iterable[str] | None = None, *,
                              include_inactive: bool = False, max_users: int | None = None,
                              session: Session = None) -> tuple[list[User], int]:
    """(users to query, how many inactive/disabled users were left out), by name.

    Inactive and disabled users are never resurrected by IAM, so asking about them every
    night only costs requests; ``include_inactive`` refreshes their snapshot anyway.
    """
    chosen = syncable_types(types)
    query: dict[str, Any] = {"type": chosen[0]} if len(chosen) == 1 else \
        {"type": {"$in": chosen}}
    users = await User.find(query, session=session).sort(+User.name).to_list()
    skipped = 0
    if not include_inactive:
        kept = [u for u in users if u.status not in NEVER_RESURRECTED]
        skipped = len(users) - len(kept)
        users = kept
    if max_users is not None:
        users = users[:max_users]
    return users, skipped


def is_reapable(user: User, now: datetime) -> bool:
    expires = as_utc(user.expires_at)
    return user.status == "offboarding" and expires is not None and expires <= as_utc(now)


async def find_reapable_users(now: datetime, session: Session = None) -> list[User]:
    """Offboarding users whose expiry has passed, by name: exactly whom the reaper
    deactivates (its dry run and its real run share this query)."""
    offboarding = await User.find(User.status == "offboarding", session=session).to_list()
    return sorted((u for u in offboarding if is_reapable(u, now)), key=lambda u: u.name)


def iam_state(user: User, *, grace_days: int, expiry_offset_days: int,
              now: datetime) -> dict[str, Any]:
    """The stored IAM snapshot plus what the state machine will do next."""
    now = as_utc(now) or now
    info = user.iam
    data: dict[str, Any] = {"user": user.name, "type": user.type, "status": user.status,
                            "email": user.email, "fullname": user.fullname,
                            "expires_at": user.expires_at}
    if info is None:
        data["iam"] = None
        data["next"] = "never synced: the next sync resolves the user by name, then e-mail"
        return data
    data["iam"] = info.model_dump()
    first = as_utc(info.first_missing_at)
    expires = as_utc(user.expires_at)
    if info.iam_status == "present":
        data["next"] = "present in IAM"
    elif user.status == "offboarding" and expires is not None:
        data["next"] = f"offboarding: deactivated by the reaper from {expires:%Y-%m-%d %H:%M} UTC"
    elif first is not None:
        grace_end = first + timedelta(days=grace_days)
        data["grace_ends_at"] = grace_end
        if user.status != "active":
            data["next"] = f"missing, but {user.status}: no offboarding"
        elif grace_end > now:
            data["next"] = (f"missing since {first:%Y-%m-%d}; offboarding from "
                            f"{grace_end:%Y-%m-%d %H:%M} UTC, deactivation "
                            f"{expiry_offset_days} days after that")
        else:
            data["next"] = "missing past the grace period: the next sync starts offboarding"
    return data
